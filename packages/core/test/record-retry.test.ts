import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  InvalidLedgerInputError,
  MemoryLedger,
  ToolError,
  defineTool,
  type DispatchEvent,
  type Ledger,
} from "../src/index.js";
import { faulty, manualClock, unavailable } from "./helpers.js";

// The outcome of a run is written after its effect happened: a write that cannot reach the
// ledger is sent again with the same fence (DISPATCH-10), and a re-send refused because the
// first copy landed with its reply lost is settled by reading the row (DISPATCH-17).

const turn0 = { conversationId: "conv_record_retry", turnIndex: 0 };
const pay = { payee: "acme", amount: 125_000, currency: "EUR" };

/** A payments downstream that performs every request it is sent, and counts them. */
function payments(fails?: ToolError) {
  const effects: string[] = [];
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string() }),
    async run(_args, ctx) {
      effects.push(ctx.idempotencyKey);
      if (fails !== undefined) throw fails;
      return { paymentId: `pay_${effects.length}`, status: "accepted" };
    },
  });
  return { tool, effects };
}

describe("a record that cannot reach the ledger is sent again (DISPATCH-10)", () => {
  it("DISPATCH-10 a completion that meets ledger_unavailable is sent again with the same fence, and the dispatch returns the result", async () => {
    const down = payments();
    const { ledger, base, calls } = faulty("complete", ["down", "down"]);
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, pollMs: 1, onEvent: (e) => events.push(e) });
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    expect(outcome).toMatchObject({ replayed: false, result: { paymentId: "pay_1", status: "accepted" } });
    expect(calls).toEqual(["down", "down", "ok"]);
    expect(down.effects).toHaveLength(1);
    expect(await base.lookup(outcome.key)).toMatchObject({ state: "completed", fence: 1, result: outcome.resultJson });
    const retries = events.filter((e) => e.type === "record_retry");
    expect(retries).toEqual([
      expect.objectContaining({ key: outcome.key, write: "complete", attempt: 1 }),
      expect.objectContaining({ key: outcome.key, write: "complete", attempt: 2 }),
    ]);
    expect(events.filter((e) => e.type === "recorded")).toEqual([expect.objectContaining({ state: "completed" })]);
    // A replay reads the same stored bytes and does not run the tool again.
    const replay = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    expect(replay).toMatchObject({ replayed: true, resultJson: outcome.resultJson });
    expect(down.effects).toHaveLength(1);
  });

  it("DISPATCH-10 a definite failure's record is sent again too; the tool's failure is raised and stored", async () => {
    const down = payments(new ToolError("card declined", { disposition: "definite", code: "card_declined" }));
    const { ledger, base, calls } = faulty("fail", ["down"]);
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, pollMs: 1 });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "tool_failed" });
    expect(calls).toEqual(["down", "ok"]);
    const [row] = (await base.listRows!({})).rows;
    expect(row).toMatchObject({ state: "failed", fence: 1 });
    expect(down.effects).toHaveLength(1);
  });

  it("DISPATCH-10 the re-sends stop after recordRetryMs: the dispatch raises ledger_unavailable, the tool ran once, the row stays in flight", async () => {
    const down = payments();
    const { ledger, base, calls } = faulty("complete", Array.from({ length: 10_000 }, () => "down" as const));
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, pollMs: 5, recordRetryMs: 60 });
    const started = Date.now();
    const failure = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay }).catch((e: unknown) => e);
    expect(failure).toMatchObject({ code: "ledger_unavailable" });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(calls.length).toBeGreaterThan(1);
    expect(down.effects).toHaveLength(1);
    const [row] = (await base.listRows!({})).rows;
    expect(row).toMatchObject({ state: "in_flight", fence: 1 });
  });

  it("DISPATCH-10 recordRetryMs 0 sends a record once, as before the rule had re-sends; the run's last event says its record failed (OTEL-4)", async () => {
    const down = payments();
    const { ledger, calls } = faulty("complete", ["down"]);
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, recordRetryMs: 0, onEvent: (e) => events.push(e) });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(calls).toEqual(["down"]);
    expect(events.at(-1)).toMatchObject({ type: "record_failed", write: "complete", state: "completed", effect: "happened", error: expect.stringContaining("connection terminated due to connection timeout") });
    expect(events.some((e) => e.type === "recorded")).toBe(false);
  });

  it("DISPATCH-10 a refusal that is not ledger_unavailable is not sent again (and still reads as 'may have happened', ERR-4)", async () => {
    const down = payments();
    const base = new MemoryLedger();
    let sent = 0;
    const refusing: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      complete: () => {
        sent++;
        return Promise.reject(new InvalidLedgerInputError("pool", "the connection is inside a transaction"));
      },
    });
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: refusing, pollMs: 1 });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(sent).toBe(1);
    expect(down.effects).toHaveLength(1);
  });

  it.each([-1, 1.5, Number.NaN, "2000", Number.POSITIVE_INFINITY])("DISPATCH-10 recordRetryMs %p is refused when the dispatcher is made", (value) => {
    const down = payments();
    expect(() => new Dispatcher({ tools: [down.tool], ledger: new MemoryLedger(), recordRetryMs: value as number })).toThrow(
      expect.objectContaining({ code: "invalid_argument", field: "options.recordRetryMs" }),
    );
  });
});

describe("a re-sent record whose first copy landed (DISPATCH-17)", () => {
  it("DISPATCH-17 a completion applied with its reply lost: the re-send's stale_claim is settled by reading the row, and the result is returned", async () => {
    const down = payments();
    const { ledger, base, calls } = faulty("complete", ["lost"]);
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, pollMs: 1, onEvent: (e) => events.push(e) });
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    expect(outcome).toMatchObject({ replayed: false, result: { paymentId: "pay_1" } });
    // The first copy wrote the row; the second was refused (the row no longer in flight).
    expect(calls).toEqual(["lost", "ok"]);
    expect(await base.lookup(outcome.key)).toMatchObject({ state: "completed", fence: 1, result: outcome.resultJson });
    expect(events.filter((e) => e.type === "recorded")).toEqual([expect.objectContaining({ state: "completed" })]);
    expect(down.effects).toHaveLength(1);
  });

  it("DISPATCH-17 a release applied with its reply lost is settled the same way: the call reads as not performed, not as a ledger failure", async () => {
    const down = payments(new ToolError("503 before acceptance", { disposition: "not_performed" }));
    const base0 = new MemoryLedger();
    const durable = Object.assign(Object.create(base0) as Ledger, { capabilities: { ...base0.capabilities, durability: "durable" as const } });
    let faults = ["lost"];
    const ledger: Ledger = Object.assign(Object.create(durable) as Ledger, {
      release: async (key: string, fence: number) => {
        const fault = faults.shift();
        await base0.release(key, fence);
        if (fault === "lost") throw unavailable();
      },
    });
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, pollMs: 1 });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({
      code: "claim_released",
      effectMayHaveHappened: false,
    });
    faults = [];
    const [row] = (await base0.listRows!({})).rows;
    expect(row).toMatchObject({ state: "released", fence: 1 });
  });

  it("DISPATCH-17 a re-send refused because another claimant took the row over raises stale_claim and writes nothing", async () => {
    const clock = manualClock();
    const down = payments();
    const base = new MemoryLedger({ now: clock.now });
    let key = "";
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      complete: async (k: string) => {
        if (key === "") {
          // The first copy never arrives; while the ledger is out of reach the lease runs out and
          // another worker takes the row over (keyed_write, LEDGER-7) with fence 2.
          key = k;
          clock.advance(60_000);
          const taken = await base.claim({ key: k, toolName: "send_payment", effect: "keyed_write", owner: "other", leaseMs: 30_000, request: "{}" });
          expect(taken).toMatchObject({ outcome: "claimed", fence: 2, takeover: true });
          throw unavailable();
        }
        return base.complete(k, 1, '{"never":"written"}');
      },
    });
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, pollMs: 1 });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "stale_claim" });
    expect(await base.lookup(key)).toMatchObject({ state: "in_flight", fence: 2, owner: "other" });
  });

  it("DISPATCH-17 when the row cannot be read after such a refusal, the dispatch raises ledger_unavailable (the effect may have happened)", async () => {
    const down = payments();
    const { ledger, calls } = faulty("complete", ["lost"]);
    const unreadable: Ledger = Object.assign(Object.create(ledger) as Ledger, {
      capabilities: ledger.capabilities,
      lookup: () => Promise.reject(unavailable()),
    });
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: unreadable, pollMs: 1 });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(calls).toEqual(["lost", "ok"]);
    expect(down.effects).toHaveLength(1);
  });
});
