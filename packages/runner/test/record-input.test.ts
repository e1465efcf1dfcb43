import { ToolError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { MAX_RECORDED_INPUT_DEPTH, recordableInput } from "../src/record.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * A record that says "pay: happened" does not say which payment: a turn that paid two payees, or
 * a user who asked for several, cannot be told which one to check (RECORD-2, RECORD-8). Each
 * dispatched call's record, and each effect a failed-turn record lists, carries the arguments:
 * for the effect, the request that ran (IDENT-3's stored request when a replay re-worded it).
 */
const twoPayments = (n: number): (ToyEvent | "cut")[] => [
  ...payCall(`c0-${n}`, `memo ${n}`),
  { t: "call", index: 1, id: `c1-${n}`, name: "pay" },
  { t: "args", index: 1, json: '{"to":"bob","memo":"rent"}' },
  { t: "done", index: 1 },
  "cut",
];

describe("the arguments of each call a record tells of (RECORD-2, RECORD-8)", () => {
  it("RECORD-2 a failed turn's record gives each dispatched call's arguments, and each effect the request that ran (the first attempt's memo, not a re-worded one)", async () => {
    const { runner, performed, store } = world(twoPayments, true);
    const error = (await runner.send("conv-input", { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toEqual([
      { to: "acme", memo: "memo 1" },
      { to: "bob", memo: "rent" },
    ]);
    const attempt2 = error.record.calls.filter((c) => c.attempt === 2);
    expect(attempt2.map((c) => [c.index, c.input, c.storedRequest])).toEqual([
      [0, { to: "acme", memo: "memo 2" }, { to: "acme", memo: "memo 1" }],
      [1, { to: "bob", memo: "rent" }, undefined],
    ]);
    expect(error.record.effects.map((e) => [e.name, e.effect, e.input])).toEqual([
      ["pay", "happened", { to: "acme", memo: "memo 1" }],
      ["pay", "happened", { to: "bob", memo: "rent" }],
    ]);
    expect(await store.records("conv-input")).toEqual([expect.objectContaining({ kind: "failed_turn", effects: error.record.effects })]);
  });

  it("RECORD-10 a re-send's record gives each effect the request the first send ran, not the re-send's re-worded replay of it", async () => {
    // Blind round N's N28: with the call's own arguments before its stored request, the re-send's
    // record said acme was paid with "memo 4", a payment that was never made.
    const { runner, performed } = world(twoPayments, true);
    const first = (await runner.send("conv-resend-input", { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(first), String(first)).toBe(true);
    const again = (await runner.send("conv-resend-input", { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(again), String(again)).toBe(true);
    expect(performed).toEqual([
      { to: "acme", memo: "memo 1" },
      { to: "bob", memo: "rent" },
    ]);
    // Every call of the re-send was a replay, re-worded: its own arguments, and the request that ran.
    expect(again.record.calls.filter((c) => c.index === 0).every((c) => c.storedRequest !== undefined && (c.input as { memo: string }).memo !== "memo 1")).toBe(true);
    expect(again.record.effects.map((e) => [e.name, e.effect, e.input])).toEqual([
      ["pay", "happened", { to: "acme", memo: "memo 1" }],
      ["pay", "happened", { to: "bob", memo: "rent" }],
    ]);
  });

  it("RECORD-10 a re-worded re-run of a released row that is released again: the effect is the stored request's (the first memo), not the re-wording", async () => {
    // Every payments response is lost (an unknown outcome of a keyed write: released, LEDGER-8);
    // each attempt's model re-words the memo, and each re-run sends the stored request (LEDGER-21).
    const { runner, performed } = world((n) => [...payCall(`c-${n}`, `memo ${n}`), "cut"], true, {
      beforePay: () => {
        throw new Error("connection lost");
      },
    });
    const error = (await runner.send("conv-released-input", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toEqual([]);
    expect(error.record.calls.map((c) => [c.attempt, c.status, c.input, c.storedRequest])).toEqual([
      [1, "released", { to: "acme", memo: "memo 1" }, undefined],
      [2, "released", { to: "acme", memo: "memo 2" }, { to: "acme", memo: "memo 1" }],
      [3, "released", { to: "acme", memo: "memo 3" }, { to: "acme", memo: "memo 1" }],
    ]);
    expect(error.record.effects.map((e) => [e.effect, e.input])).toEqual([["may_have_happened", { to: "acme", memo: "memo 1" }]]);
    // The user asks again (TURN-12: the failed turn's index): every attempt of it is re-worded.
    const again = (await runner.send("conv-released-input", { id: "m2", content: "pay acme again" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(again), String(again)).toBe(true);
    expect(again.record.calls.map((c) => [c.status, c.storedRequest])).toEqual(Array(3).fill(["released", { to: "acme", memo: "memo 1" }]));
    expect(again.record.effects.map((e) => [e.effect, e.input])).toEqual([["may_have_happened", { to: "acme", memo: "memo 1" }]]);
  });

  it("RECORD-10 a re-worded replay of a row whose result could not be stored: the effect is the stored request's, not the re-wording", async () => {
    // The payment happened and its result is no JSON (LEDGER-10): the row fails closed, and every
    // later attempt, re-worded, is answered from it (result_not_storable, replayed).
    const { runner, performed } = world((n) => [...payCall(`c-${n}`, `memo ${n}`), "cut"], true, { payResult: () => ({ n: 10n ** 30n }) });
    const error = (await runner.send("conv-unstorable-input", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toEqual([{ to: "acme", memo: "memo 1" }]);
    expect(error.record.calls.map((c) => [c.attempt, c.status, c.storedRequest])).toEqual([
      [1, "result_not_storable", undefined],
      [2, "result_not_storable", { to: "acme", memo: "memo 1" }],
      [3, "result_not_storable", { to: "acme", memo: "memo 1" }],
    ]);
    expect(error.record.effects.map((e) => [e.effect, e.input])).toEqual([["happened", { to: "acme", memo: "memo 1" }]]);
    // The user asks again (TURN-12: the failed turn's index): every attempt of it is re-worded.
    const again = (await runner.send("conv-unstorable-input", { id: "m2", content: "pay acme again" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(again), String(again)).toBe(true);
    expect(performed).toHaveLength(1);
    expect(again.record.effects.map((e) => [e.effect, e.input])).toEqual([["happened", { to: "acme", memo: "memo 1" }]]);
  });

  it("RECORD-10 LEDGER-15 a re-send whose re-worded call waits on the first send's payment still in flight: the effect is the payment in flight (Monthly fee), not the re-wording", async () => {
    // The first send's run of "Monthly fee" outlives runTimeoutMs (DISPATCH-18) and goes on; the
    // user sends again, the model re-words the memo, and the call waits on that live claim past the
    // wait bound (in_flight_elsewhere). Before, the re-send's record said the payment may have
    // happened with "Regarding monthly fee", a request that never ran.
    let open!: () => void;
    const downstream = new Promise<void>((resolve) => (open = resolve));
    const memos = ["Monthly fee", "Regarding monthly fee"];
    const w = world((n) => [...payCall(`c-${n}`, memos[n - 1]!), { t: "end" }], false, {
      dispatcher: { runTimeoutMs: 100, waitMs: 30, pollMs: 5, logger: { warn: () => {} } },
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
      beforePay: () => downstream,
    });
    const first = (await w.runner.send("conv-inflight-input", { id: "m1", content: "pay acme the monthly fee" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(first), String(first)).toBe(true);
    expect(first.record.effects.map((e) => [e.effect, e.input])).toEqual([["may_have_happened", { to: "acme", memo: "Monthly fee" }]]);
    const again = (await w.runner.send("conv-inflight-input", { id: "m1", content: "pay acme the monthly fee" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(again), String(again)).toBe(true);
    expect(again.record.calls.map((c) => [c.status, c.effect, c.input, c.storedRequest])).toEqual([
      ["in_flight_elsewhere", "may_have_happened", { to: "acme", memo: "Regarding monthly fee" }, { to: "acme", memo: "Monthly fee" }],
    ]);
    expect(again.record.effects.map((e) => [e.effect, e.input])).toEqual([["may_have_happened", { to: "acme", memo: "Monthly fee" }]]);
    // Nothing was paid yet; the payment in flight completes: one payment, the memo the record told.
    expect(w.performed).toEqual([]);
    open();
    const key = again.record.calls[0]!.key!;
    for (let i = 0; i < 2_000 && (await w.dispatcher.ledger.lookup(key))?.state !== "completed"; i++) await new Promise((r) => setTimeout(r, 5));
    expect(await w.dispatcher.ledger.lookup(key)).toMatchObject({ state: "completed" });
    expect(w.performed).toEqual([{ to: "acme", memo: "Monthly fee" }]);
  });

  it("RECORD-10 DISPATCH-18 a re-send's re-worded call re-runs the released row's stored request, which outlives runTimeoutMs: the effect is the request in flight (Monthly fee)", async () => {
    let open!: () => void;
    const downstream = new Promise<void>((resolve) => (open = resolve));
    const memos = ["Monthly fee", "Regarding monthly fee"];
    let payments = 0;
    const w = world((n) => [...payCall(`c-${n}`, memos[n - 1]!), { t: "end" }], false, {
      dispatcher: { runTimeoutMs: 100, logger: { warn: () => {} } },
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
      beforePay: async () => {
        // The first run is refused before acceptance (released, LEDGER-21 keeps its request); the re-run hangs.
        if (++payments === 1) throw new ToolError("503 before acceptance", { disposition: "not_performed" });
        await downstream;
      },
    });
    const first = (await w.runner.send("conv-timeout-input", { id: "m1", content: "pay acme the monthly fee" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(first), String(first)).toBe(true);
    expect(first.record.calls.map((c) => c.status)).toEqual(["released"]);
    const again = (await w.runner.send("conv-timeout-input", { id: "m1", content: "pay acme the monthly fee" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(again), String(again)).toBe(true);
    expect(again.record.calls.map((c) => [c.status, c.effect, c.input, c.storedRequest])).toEqual([
      ["in_flight_elsewhere", "may_have_happened", { to: "acme", memo: "Regarding monthly fee" }, { to: "acme", memo: "Monthly fee" }],
    ]);
    expect(again.record.effects.map((e) => [e.effect, e.input])).toEqual([["may_have_happened", { to: "acme", memo: "Monthly fee" }]]);
    expect(w.performed).toEqual([]);
    open();
    const key = again.record.calls[0]!.key!;
    for (let i = 0; i < 2_000 && (await w.dispatcher.ledger.lookup(key))?.state !== "completed"; i++) await new Promise((r) => setTimeout(r, 5));
    expect(await w.dispatcher.ledger.lookup(key)).toMatchObject({ state: "completed" });
    expect(w.performed).toEqual([{ to: "acme", memo: "Monthly fee" }]);
  });

  it("RECORD-2 a call cut while its arguments streamed has no arguments, only the partial text", async () => {
    const { runner } = world(() => [{ t: "call", index: 0, id: "c", name: "pay" }, { t: "args", index: 0, json: '{"to":"ac' }, "cut"]);
    const error = (await runner.send("conv-partial", { id: "m1", content: "pay" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record.calls.map((c) => [c.status, "input" in c, c.partialArguments])).toEqual(Array(3).fill(["not_run", false, '{"to":"ac']));
  });

  it("TURN-18 arguments holding a lone UTF-16 half (a JSON escape the model wrote) are recorded with U+FFFD: the store keeps the record of the refused call", async () => {
    const { runner, performed, store } = world((n) => [{ t: "call", index: 0, id: `c-${n}`, name: "pay" }, { t: "args", index: 0, json: '{"to":"acme","memo":"x\\ud83e"}' }, { t: "done", index: 0 }, "cut"]);
    const error = (await runner.send("conv-lone-input", { id: "m1", content: "pay" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toEqual([]);
    expect(error.record.calls.map((c) => [c.status, c.input])).toEqual(Array(3).fill(["rejected", { to: "acme", memo: "x\ufffd" }]));
    expect(await store.records("conv-lone-input")).toEqual([expect.objectContaining({ kind: "failed_turn", calls: error.record.calls })]);
  });

  it("TURN-18 arguments nested deeper than a store keeps (a 1,000-deep argument, refused by KEY-6) are left out of the record, which is kept", async () => {
    const deep = `${'{"a":'.repeat(1000)}1${"}".repeat(1000)}`;
    const { runner, performed, store } = world((n) => [{ t: "call", index: 0, id: `c-${n}`, name: "pay" }, { t: "args", index: 0, json: deep }, { t: "done", index: 0 }, "cut"]);
    const error = (await runner.send("conv-deep-input", { id: "m1", content: "pay" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toEqual([]);
    expect(error.record.calls.map((c) => [c.status, "input" in c])).toEqual(Array(3).fill(["rejected", false]));
    expect(await store.records("conv-deep-input")).toEqual([expect.objectContaining({ kind: "failed_turn", calls: error.record.calls })]);
  });

  it("TURN-18 arguments nested as deep as a record can keep are kept whole", async () => {
    const depth = MAX_RECORDED_INPUT_DEPTH;
    const value = JSON.parse(`${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`) as unknown;
    expect(recordableInput(value)).toEqual(value);
    expect(recordableInput({ to: "acme", deeper: value })).toBeUndefined();
    expect(recordableInput(["x\udc00", { "k\ud800": [1, null, true] }])).toEqual(["x\ufffd", { "k\ufffd": [1, null, true] }]);
  });
});
