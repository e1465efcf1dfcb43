import { ToolError, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/** Every request of a new message asks for the payment; the follow-up after a tool result answers. */
const script = (n: number, input: JsonValue[]): ToyEvent[] =>
  (input.at(-1) as { role?: string }).role !== "user" ? [{ t: "text", index: 0, text: "Paid." }, { t: "end" }] : [...payCall(`c${n}`, "rent"), { t: "end" }];

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

async function eventually(check: () => Promise<boolean> | boolean, what: string, boundMs = 20_000): Promise<void> {
  const until = Date.now() + boundMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`not within ${boundMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("DISPATCH-18 through the runner: a tool run that never returns does not hold the turn for ever (toy provider)", () => {
  it("DISPATCH-18 send() returns after the bound with the turn failed, the call may_have_happened; the run finishes later and a re-send replays it, paid once", async () => {
    const downstream = gate();
    let held = 0;
    const w = world(script, false, {
      dispatcher: { runTimeoutMs: 200, waitMs: 50, pollMs: 10 },
      runner: { retry: { attempts: 2, backoffMs: () => 1 } },
      beforePay: async () => {
        held += 1;
        await downstream.promise; // a downstream that answers only when the test says so
      },
    });
    const error = await w.runner.send("conv-run-timeout", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const record = (error as TurnFailedError).record;
    expect(record.calls.map((c) => [c.attempt, c.status, c.effect])).toEqual([
      [1, "in_flight_elsewhere", "may_have_happened"],
      [2, "in_flight_elsewhere", "may_have_happened"],
    ]);
    // Attempt 1's own run outlived the bound; attempt 2 waited on that run's row, still in flight.
    expect(record.calls[0]!.error).toMatchObject({ code: "in_flight_elsewhere", message: expect.stringContaining("did not settle within 200 ms (runTimeoutMs)") as string });
    expect(record.calls[0]!.summary).toBe("its run did not settle within 200 ms (runTimeoutMs) and was signalled to stop; it may still complete, and a retry with the same key settles it");
    expect(record.calls[1]!.summary).toBe("still running in another attempt");
    expect(record.effects).toEqual([{ key: record.calls[0]!.key, name: "pay", effect: "may_have_happened", input: { to: "acme", memo: "rent" } }]);
    expect(record.retryable).toBe(true);
    expect(held).toBe(1);
    expect(w.performed).toEqual([]);
    // The downstream answers after the turn failed: the run's completion is recorded under its fence.
    downstream.open();
    await eventually(async () => (await w.dispatcher.ledger.lookup(record.calls[0]!.key!))?.state === "completed", "the late completion recorded");
    const result = await w.runner.send("conv-run-timeout", { id: "m1", content: "pay acme" });
    // The re-send is answered from the row the late run completed: the payment is not made again.
    expect(result.turns.map((t) => [t.committed, t.calls.map((c) => [c.replayed, c.result])])).toEqual([
      [true, [[true, { n: 1 }]]],
      [true, []],
    ]);
    expect(w.performed).toHaveLength(1);
    expect(held).toBe(1);
  }, 60_000);

  it("DISPATCH-18 RECORD-2 a run told 'may have happened' at the bound that then fails definitely: the re-send is answered with the replayed failure (not_happened), never re-run, nothing paid", async () => {
    const downstream = gate();
    let held = 0;
    const w = world(script, false, {
      dispatcher: { runTimeoutMs: 200, waitMs: 50, pollMs: 10 },
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
      beforePay: async () => {
        held += 1;
        await downstream.promise;
        throw new ToolError("402: card declined", { disposition: "definite", code: "card_declined" });
      },
    });
    const error = await w.runner.send("conv-run-timeout-fail", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const record = (error as TurnFailedError).record;
    expect(record.effects).toEqual([{ key: record.calls[0]!.key, name: "pay", effect: "may_have_happened", input: { to: "acme", memo: "rent" } }]);
    downstream.open();
    await eventually(async () => (await w.dispatcher.ledger.lookup(record.calls[0]!.key!))?.state === "failed", "the late failure recorded");
    const result = await w.runner.send("conv-run-timeout-fail", { id: "m1", content: "pay acme" });
    // The re-sent turn carries the stored failure for the same key (its effect did not happen), and
    // its record lists nothing beside it: the key is answered by the committed turn (RECORD-8).
    expect(result.turns[0]!.calls.map((c) => [c.key, (c as { error?: { code?: string } }).error?.code])).toEqual([[record.calls[0]!.key, "card_declined"]]);
    expect(result.turns[0]!.record?.calls ?? []).toEqual([]);
    expect(w.performed).toEqual([]);
    expect(held).toBe(1);
  }, 60_000);
});
