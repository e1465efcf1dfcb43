import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  DurabilityMismatchError,
  Dispatcher,
  InFlightElsewhereError,
  MemoryLedger,
  OutcomeUnknownError,
  ResultNotStorableError,
  ToolError,
  ToolFailedError,
  ToolInputError,
  UnknownToolError,
  defineTool,
  deriveKey,
  type Ledger,
} from "../src/index.js";
import { canonicalize as canonicalizeForTest } from "../src/canonical.js";
import { fakePayments, manualClock, recordingLogger } from "./helpers.js";

const turn0 = { conversationId: "conv-1", turnIndex: 0 };
const pay = { payee: "acme", amount: 12_500, currency: "EUR", memo: "invoice 7" };

/** The in-memory ledger declares itself volatile; tests that use unkeyed tools opt in. */
function durable(ledger: MemoryLedger): Ledger {
  return Object.assign(Object.create(ledger), {
    capabilities: { ...ledger.capabilities, durability: "durable" as const },
  }) as Ledger;
}

describe("Dispatcher", () => {
  it("DISPATCH-5 runs once for N concurrent dispatches of one logical call; all get the same result", async () => {
    const { tool, effects } = fakePayments({ latencyMs: 30 });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), waitMs: 5_000 });
    const outcomes = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        // Each attempt sees its own toolu_ id and its own key order: neither may matter.
        dispatcher.turn(turn0).dispatch({
          name: "send_payment",
          callId: `toolu_${i}`,
          input: i % 2 ? pay : { memo: pay.memo, currency: "EUR", amount: 12_500, payee: "acme" },
        }),
      ),
    );
    expect(effects).toHaveLength(1);
    const results = new Set(outcomes.map((o) => o.resultJson));
    expect(results.size).toBe(1);
    expect(outcomes.filter((o) => !o.replayed)).toHaveLength(1);
    expect(outcomes[0]!.result).toEqual({ paymentId: "pay_1", status: "accepted" });
  });

  it("DISPATCH-4 passes the derived key to run, and it is the key of the identity projection", async () => {
    const { tool, effects } = fakePayments();
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger() });
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    const expected = deriveKey({ ...turn0, name: "send_payment", ordinal: 0, args: { payee: "acme", amount: 12_500, currency: "EUR" } });
    expect(outcome.key).toBe(expected);
    expect(effects[0]!.key).toBe(expected);
  });

  it("IDENT-1 a re-worded memo on a retry does not mint a new key", async () => {
    const { tool, effects } = fakePayments();
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger });
    const first = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    const retry = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { ...pay, memo: "Invoice #7" } });
    expect(effects).toHaveLength(1);
    expect(retry.replayed).toBe(true);
    expect(retry.resultJson).toBe(first.resultJson);
  });

  it("TURN-1 a legitimate repeat in a later turn runs again", async () => {
    const { tool, effects } = fakePayments();
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger() });
    const a = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    const b = await dispatcher.turn({ ...turn0, turnIndex: 2 }).dispatch({ name: "send_payment", input: pay });
    expect(effects).toHaveLength(2);
    expect(a.key).not.toBe(b.key);
    expect(b.replayed).toBe(false);
  });

  it("DISPATCH-6 two identical calls in one turn both run, with ordinals 0 and 1 and a warning", async () => {
    const { tool, effects } = fakePayments();
    const { logger, warnings } = recordingLogger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), logger });
    const t = dispatcher.turn(turn0);
    const [a, b] = await Promise.all([
      t.dispatch({ name: "send_payment", input: pay }),
      t.dispatch({ name: "send_payment", input: pay }),
    ]);
    expect(effects).toHaveLength(2);
    expect([a.ordinal, b.ordinal]).toEqual([0, 1]);
    expect(warnings.map((w) => w.fields?.ordinal)).toEqual([1]);

    // TURN-6: a replay of the whole turn assigns the same ordinals and runs nothing.
    const replay = dispatcher.turn(turn0);
    const again = await Promise.all([
      replay.dispatch({ name: "send_payment", input: pay }),
      replay.dispatch({ name: "send_payment", input: pay }),
    ]);
    expect(effects).toHaveLength(2);
    expect(again.map((o) => o.key)).toEqual([a.key, b.key]);
    expect(again.every((o) => o.replayed)).toBe(true);
  });

  it("DISPATCH-1 / DISPATCH-2 unknown tools and invalid arguments claim nothing", async () => {
    const { tool, effects } = fakePayments();
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger });
    await expect(dispatcher.turn(turn0).dispatch({ name: "void_payment", input: {} })).rejects.toBeInstanceOf(UnknownToolError);
    const bad = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { ...pay, amount: -1 } });
    await expect(bad).rejects.toBeInstanceOf(ToolInputError);
    await expect(bad).rejects.toMatchObject({ code: "tool_input_invalid", issues: [{ path: ["amount"] }] });
    expect(ledger.size).toBe(0);
    expect(effects).toHaveLength(0);
  });

  it("EFFECT-2 read tools are never claimed and run every time", async () => {
    let runs = 0;
    const search = defineTool({
      name: "search_orders",
      effect: "read",
      input: z.object({ q: z.string() }),
      run: () => ({ rows: ++runs }),
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [search], ledger });
    await dispatcher.turn(turn0).dispatch({ name: "search_orders", input: { q: "x" } });
    const second = await dispatcher.turn(turn0).dispatch({ name: "search_orders", input: { q: "x" } });
    expect(runs).toBe(2);
    expect(second.replayed).toBe(false);
    expect(ledger.size).toBe(0);
  });

  it("LEDGER-8 a definite failure is recorded and replayed identically without re-running", async () => {
    let runs = 0;
    const declined = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        runs++;
        throw new ToolError("card declined", { disposition: "definite", code: "card_declined", details: { decline: "insufficient_funds" } });
      },
    });
    const dispatcher = new Dispatcher({ tools: [declined], ledger: new MemoryLedger() });
    const first = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    await expect(first).rejects.toMatchObject({ code: "tool_failed", replayed: false, error: { code: "card_declined" } });
    const again = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    await expect(again).rejects.toBeInstanceOf(ToolFailedError);
    await expect(again).rejects.toMatchObject({
      replayed: true,
      error: { name: "ToolError", message: "card declined", code: "card_declined", details: { decline: "insufficient_funds" } },
    });
    expect(runs).toBe(1);
  });

  it("LEDGER-8 a not-performed failure releases the claim so a retry runs", async () => {
    let runs = 0;
    const flaky = defineTool({
      name: "create_invoice",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        if (++runs === 1) throw new ToolError("503 before accepting", { disposition: "not_performed" });
        return { invoiceId: "inv_1" };
      },
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [flaky], ledger });
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 1 } })).rejects.toMatchObject({
      code: "claim_released",
      // The memory ledger is volatile: an earlier run's row could have been forgotten (RECORD-2).
      effectMayHaveHappened: true,
      cause: { disposition: "not_performed" },
    });
    const retry = await dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 1 } });
    expect(runs).toBe(2);
    expect(retry.result).toEqual({ invoiceId: "inv_1" });
    expect((await ledger.lookup(retry.key))?.fence).toBe(2);
  });

  it("LEDGER-8 an unclassified error on a keyed_write releases (the downstream key collapses a re-run)", async () => {
    let runs = 0;
    const timeout = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        if (++runs === 1) throw new Error("socket hang up");
        return { ok: true };
      },
    });
    const dispatcher = new Dispatcher({ tools: [timeout], ledger: new MemoryLedger() });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } })).rejects.toThrow("socket hang up");
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    expect(runs).toBe(2);
  });

  it("EFFECT-4 an unclassified error on an unkeyed_write becomes unknown and is never re-run", async () => {
    let runs = 0;
    const invoice = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        runs++;
        throw new Error("connection reset after send");
      },
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [invoice], ledger: durable(ledger) });
    const first = dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 1 } });
    await expect(first).rejects.toBeInstanceOf(OutcomeUnknownError);
    const again = dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 1 } });
    await expect(again).rejects.toMatchObject({ code: "outcome_unknown" });
    expect(runs).toBe(1);
  });

  it("LEDGER-7 an expired unkeyed_write claim is an unknown outcome, never re-run", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    let runs = 0;
    const invoice = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: () => ({ invoiceId: `inv_${++runs}` }),
    });
    const dispatcher = new Dispatcher({ tools: [invoice], ledger: durable(ledger), leaseMs: 1_000 });
    const key = dispatcher.keyFor({ name: "create_invoice", input: { amount: 1 } }, turn0);
    // A worker claimed and died mid-call.
    await ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "dead", leaseMs: 1_000, request: canonicalizeForTest({ amount: 1 }) });
    clock.advance(1_001);
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 1 } })).rejects.toMatchObject({
      code: "outcome_unknown",
      reason: "lease_expired",
    });
    expect(runs).toBe(0);
  });

  it("LEDGER-7 an expired keyed_write claim is taken over and re-run with the same key", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const { tool, effects } = fakePayments();
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 1_000 });
    const key = dispatcher.keyFor({ name: "send_payment", input: pay }, turn0);
    await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "dead", leaseMs: 1_000, request: canonicalizeForTest(pay) });
    clock.advance(1_001);
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    expect(effects.map((e) => e.key)).toEqual([key]);
    expect(outcome.replayed).toBe(false);
    expect((await ledger.lookup(key))?.fence).toBe(2);
  });

  it("LEDGER-15 waits on a live in-flight claim, then raises in_flight_elsewhere", async () => {
    const ledger = new MemoryLedger();
    const { tool, effects } = fakePayments();
    const dispatcher = new Dispatcher({ tools: [tool], ledger, waitMs: 60, pollMs: 5 });
    const key = dispatcher.keyFor({ name: "send_payment", input: pay }, turn0);
    await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "other", leaseMs: 60_000, request: canonicalizeForTest(pay) });
    const attempt = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    await expect(attempt).rejects.toBeInstanceOf(InFlightElsewhereError);
    expect(effects).toHaveLength(0);
  });

  it("LEDGER-15 a waiter receives the result when the other attempt completes", async () => {
    const ledger = new MemoryLedger();
    const { tool, effects } = fakePayments();
    const dispatcher = new Dispatcher({ tools: [tool], ledger, waitMs: 2_000, pollMs: 5 });
    const key = dispatcher.keyFor({ name: "send_payment", input: pay }, turn0);
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "other", leaseMs: 60_000, request: canonicalizeForTest(pay) });
    if (claim.outcome !== "claimed") throw new Error("expected to claim");
    setTimeout(() => void ledger.complete(key, claim.fence, '{"paymentId":"pay_other"}'), 30);
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    expect(outcome).toMatchObject({ replayed: true, result: { paymentId: "pay_other" } });
    expect(effects).toHaveLength(0);
  });

  it("LEDGER-9 renews the lease while a slow tool runs, so no one else takes over", async () => {
    const ledger = new MemoryLedger();
    const { tool, effects } = fakePayments({ latencyMs: 250 });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 60, waitMs: 2_000, pollMs: 10 });
    const attempts = await Promise.all([
      dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay }),
      new Promise((r) => setTimeout(r, 100)).then(() => dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })),
    ]);
    expect(effects).toHaveLength(1);
    expect(attempts[1].replayed).toBe(true);
    expect((await ledger.lookup(attempts[0].key))?.fence).toBe(1);
  });

  it("LEDGER-9 keeps the lease of every call running at once (one shared renewal timer), and stops renewing a finished one", async () => {
    const memory = new MemoryLedger();
    const renewed = new Map<string, number>();
    const ledger: Ledger = Object.assign(Object.create(memory) as MemoryLedger, {
      renew: (key: string, fence: number, leaseMs: number) => {
        renewed.set(key, (renewed.get(key) ?? 0) + 1);
        return memory.renew(key, fence, leaseMs);
      },
    });
    const slow = fakePayments({ latencyMs: 200 });
    const dispatcher = new Dispatcher({ tools: [slow.tool], ledger, leaseMs: 60, waitMs: 2_000, pollMs: 10 });
    const payments = [0, 1, 2].map((i) => ({ ...pay, amount: pay.amount + i }));
    const outcomes = await Promise.all(payments.map((input) => dispatcher.turn(turn0).dispatch({ name: "send_payment", input })));
    // Each call ran 200 ms on a 60 ms lease: only renewals kept it (about one every 20 ms).
    for (const outcome of outcomes) {
      expect(renewed.get(outcome.key) ?? 0).toBeGreaterThanOrEqual(3);
      expect((await memory.lookup(outcome.key))?.state).toBe("completed");
    }
    const after = new Map(renewed);
    await new Promise((r) => setTimeout(r, 80));
    expect(renewed).toEqual(after);
  });

  it("LEDGER-10 a result that is not JSON fails closed: recorded as failed, never re-run", async () => {
    let runs = 0;
    const weird = defineTool({
      name: "create_invoice",
      effect: "keyed_write",
      input: z.object({}),
      run: () => {
        runs++;
        // JSON.stringify would write {} and lose the data: refused, not guessed (DISPATCH-7).
        return { lines: new Map([["a", 1]]) };
      },
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [weird], ledger });
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: {} })).rejects.toBeInstanceOf(ResultNotStorableError);
    // The replay says the same: the effect happened and its result was not kept.
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: {} })).rejects.toMatchObject({
      code: "result_not_storable",
    });
    expect(runs).toBe(1);
  });

  it("LEDGER-10 a result over the ledger's size limit fails closed", async () => {
    const big = defineTool({
      name: "create_invoice",
      effect: "keyed_write",
      input: z.object({}),
      run: () => ({ blob: "x".repeat(2_000) }),
    });
    const ledger = new MemoryLedger({ maxResultBytes: 1_000 });
    const dispatcher = new Dispatcher({ tools: [big], ledger });
    const outcome = dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: {} });
    await expect(outcome).rejects.toBeInstanceOf(ResultNotStorableError);
    const key = dispatcher.keyFor({ name: "create_invoice", input: {} }, turn0);
    expect(await ledger.lookup(key)).toMatchObject({ state: "failed", error: { code: "result_not_storable" } });
  });

  it("LEDGER-14 refuses unkeyed_write tools on a volatile ledger unless explicitly allowed", () => {
    const invoice = defineTool({ name: "create_invoice", effect: "unkeyed_write", input: z.object({}), run: () => null });
    expect(() => new Dispatcher({ tools: [invoice], ledger: new MemoryLedger() })).toThrow(DurabilityMismatchError);
    const { logger, warnings } = recordingLogger();
    new Dispatcher({ tools: [invoice], ledger: new MemoryLedger(), allowVolatileLedgerForUnkeyedWrites: true, logger });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.message).toContain("durable ledger");
  });

  it("LEDGER-12 a ledger that cannot be reached runs nothing", async () => {
    const { tool, effects } = fakePayments();
    const ledger = new MemoryLedger();
    ledger.claim = async () => {
      throw new Error("ECONNREFUSED");
    };
    const dispatcher = new Dispatcher({ tools: [tool], ledger });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toThrow("ECONNREFUSED");
    expect(effects).toHaveLength(0);
  });
});
