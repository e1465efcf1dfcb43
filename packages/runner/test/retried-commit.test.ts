import type { JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { unansweredOwnCall, type CallRecord, type ResumedTurnRecord, type RunnerEvent } from "../src/index.js";
import { mergeUnanswered } from "../src/record.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/**
 * RECORD-7's known gap, the same-runner half (proposed RECORD-8 amended): attempt 1 of a turn
 * that was not resumed pays and its stream is cut; attempt 2's model answers differently and the
 * turn commits. The payment is in no committed turn, so the runner, which saw it, must keep a
 * record of it beside the conversation.
 */
const CONV = "conv-retried";

const paidAfterCall = (input: JsonValue[]): boolean => (input.at(-1) as { role?: string }).role !== "user";

function kept(records: JsonValue[]): ResumedTurnRecord[] {
  return (records as unknown as { kind: string }[]).filter((r) => r.kind === "resumed_turn") as unknown as ResumedTurnRecord[];
}

describe("a turn that commits after more than one attempt of the same runner (proposed RECORD-8 amended)", () => {
  it("RECORD-8 attempt 1 paid and was cut after the call, attempt 2 answers with text: the record lists the payment as happened", async () => {
    const { runner, performed, events, store } = world(
      (n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }]),
      true,
    );
    const result = await runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position: "after_dispatch_before_stop" });
    expect(performed).toHaveLength(1);
    expect(result.turns.map((t) => [t.attempts, t.text, t.calls.length])).toEqual([[2, "Nothing to pay.", 0]]);
    const paidKey = (events.find((e) => e.type === "call_resolved") as Extract<RunnerEvent, { type: "call_resolved" }>).key;
    expect(paidKey).toBeDefined();
    const stored = kept(await store.records(CONV));
    expect(stored).toEqual([
      expect.objectContaining({
        kind: "resumed_turn",
        conversationId: CONV,
        messageId: "m1",
        turnIndex: 0,
        resumed: false,
        calls: [expect.objectContaining({ key: paidKey, name: "pay", attempt: 1, status: "completed", effect: "happened", result: { n: 1 }, input: { to: "acme", memo: "first" } })],
      }),
    ]);
    expect(result.records).toEqual(stored);
    expect(result.turns[0]!.record).toEqual(stored[0]);
    expect(events.filter((e) => e.type === "resumed_turn_recorded").map((e) => (e as Extract<RunnerEvent, { type: "resumed_turn_recorded" }>).record)).toEqual(stored);
    // The record is written before the turn is reported: a re-send reads it back (TURN-7).
    const again = await runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.fromStore).toBe(true);
    expect(again.records).toEqual(stored);
  });

  it("RECORD-8 attempt 2 makes a different call: it is answered in the turn, attempt 1's payment is listed beside it", async () => {
    const script = (n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
      if (paidAfterCall(input)) return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
      if (n === 1) return [...payCall("c1", "first"), "cut"];
      return [{ t: "call", index: 0, id: "c2", name: "pay" }, { t: "args", index: 0, json: `{"to":"bob","memo":"m"}` }, { t: "done", index: 0 }, { t: "end" }];
    };
    const { runner, performed, store } = world(script, true);
    const result = await runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    const bobKey = result.turns[0]!.calls[0]!.key;
    const stored = kept(await store.records(CONV));
    expect(stored).toHaveLength(1);
    expect(stored[0]!.calls.map((c) => [c.name, c.effect, c.attempt, c.key === bobKey])).toEqual([["pay", "happened", 1, false]]);
    expect(result.records).toEqual(stored);
  });

  it("RECORD-8 control: attempt 2 makes the same call, answered from the ledger in the committed turn: no record", async () => {
    const { runner, performed, store, events } = world((n, input) => {
      if (paidAfterCall(input)) return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
      return n === 1 ? [...payCall("c1", "first"), "cut"] : [...payCall(`c${n}`, "reworded"), { t: "end" }];
    }, true);
    const result = await runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(performed).toHaveLength(1);
    expect(result.turns[0]!.calls[0]).toMatchObject({ replayed: true });
    expect(result.records).toBeUndefined();
    expect(kept(await store.records(CONV))).toEqual([]);
    expect(events.some((e) => e.type === "resumed_turn_recorded")).toBe(false);
  });

  it("RECORD-8 attempt 1's call was abandoned while its arguments streamed (STREAM-3): nothing to list, no record", async () => {
    const { runner, performed, store, events } = world((n) =>
      n === 1 ? [...payCall("c1", "first").slice(0, 2), "cut"] : [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }],
    );
    const result = await runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(events.filter((e) => e.type === "call_abandoned")).toHaveLength(1);
    expect(performed).toEqual([]);
    expect(result.turns[0]!.attempts).toBe(2);
    expect(result.records).toBeUndefined();
    expect(kept(await store.records(CONV))).toEqual([]);
  });
});

describe("unansweredOwnCall: what an earlier attempt's call says in the committed turn's record (RECORD-8)", () => {
  const call = (status: CallRecord["status"], effect: CallRecord["effect"], key: string | undefined = "k"): CallRecord => ({
    attempt: 1,
    index: 0,
    callId: "c1",
    name: "pay",
    status,
    effect,
    summary: status,
    ...(key !== undefined ? { key } : {}),
  });

  it("RECORD-8 resolved ok is happened, a definite failure not_happened, unknown / released-may-have / in flight elsewhere may_have_happened", () => {
    const said = (c: CallRecord) => unansweredOwnCall(c)?.effect;
    expect(said(call("completed", "happened"))).toBe("happened");
    expect(said(call("failed", "not_happened"))).toBe("not_happened");
    expect(said(call("outcome_unknown", "may_have_happened"))).toBe("may_have_happened");
    expect(said(call("released", "may_have_happened"))).toBe("may_have_happened");
    expect(said(call("in_flight_elsewhere", "may_have_happened"))).toBe("may_have_happened");
    expect(unansweredOwnCall(call("completed", "happened"))).toMatchObject({ key: "k", attempt: 1, status: "completed" });
  });

  it("RECORD-8 a call never dispatched (STREAM-3) or without effect (a read) is not listed", () => {
    expect(unansweredOwnCall(call("not_run", "not_happened", undefined))).toBeUndefined();
    expect(unansweredOwnCall(call("completed", "none"))).toBeUndefined();
  });

  it("RECORD-8 one entry per key: a listed row keeps its state and gains the attempt; a stronger own statement wins", () => {
    const row = { key: "k", name: "pay", state: "released" as const, effect: "may_have_happened" as const, summary: "row" };
    const own = unansweredOwnCall(call("completed", "happened"))!;
    expect(mergeUnanswered([row], [own, own])).toEqual([expect.objectContaining({ key: "k", state: "released", attempt: 1, effect: "happened" })]);
    const weaker = unansweredOwnCall(call("failed", "not_happened"))!;
    expect(mergeUnanswered([row], [weaker])).toEqual([expect.objectContaining({ key: "k", state: "released", attempt: 1, status: "failed", effect: "may_have_happened", summary: "row" })]);
  });
});
