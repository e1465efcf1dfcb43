import { describe, expect, it } from "vitest";
import { summarizeEffects, type CallRecord } from "../src/index.js";

const call = (attempt: number, status: CallRecord["status"], effect: CallRecord["effect"]): CallRecord => ({
  attempt,
  index: 1,
  callId: `toolu_${attempt}`,
  name: "send_payment",
  status,
  effect,
  summary: status,
  key: "k1",
});

describe("summarizeEffects: a failed-turn record's word per key", () => {
  it("RECORD-5 a key released as not performed in one attempt and completed in the next is summed up as happened, whichever came first", () => {
    // Mutation round of 2026-12-04: a summary where the first attempt's word won told the user a
    // payment the second attempt made had not happened; no test of the runner or of the end-to-end
    // level noticed (the level needs a release, then a success, in a turn that still fails).
    const released = call(1, "released", "not_happened");
    const completed = call(2, "completed", "happened");
    expect(summarizeEffects([released, completed])).toEqual([{ key: "k1", name: "send_payment", effect: "happened" }]);
    expect(summarizeEffects([completed, released])).toEqual([{ key: "k1", name: "send_payment", effect: "happened" }]);
    expect(summarizeEffects([released, call(2, "outcome_unknown", "may_have_happened")])[0]!.effect).toBe("may_have_happened");
  });
});

describe("summarizeEffects: the request an entry names (RECORD-10)", () => {
  const paid = { payee: "initech", amount: 53033, memo: "Monthly fee" };
  const reworded = { ...paid, memo: "Regarding monthly fee" };
  it("RECORD-10 an attempt whose call met another holder's claim names its own re-worded arguments, not what ran: a later attempt's stored request is the entry's request", () => {
    // A fresh-clone CI of 2026-12-06 (the kit's loop-faults planted search, seed 5): a redelivered
    // worker's re-worded call waited on the stalled holder's claim (may have happened, its own
    // arguments), then took the claim over and ran the stored request; the turn failed, and its
    // record said the payment happened with the re-wording, a payment that never ran.
    const waited: CallRecord = { ...call(1, "in_flight_elsewhere", "may_have_happened"), input: reworded };
    const ran: CallRecord = { ...call(2, "completed", "happened"), input: reworded, storedRequest: paid };
    expect(summarizeEffects([waited, ran])).toEqual([{ key: "k1", name: "send_payment", effect: "happened", input: paid }]);
    expect(summarizeEffects([ran, waited])).toEqual([{ key: "k1", name: "send_payment", effect: "happened", input: paid }]);
    // A completed call without a stored request ran its own arguments: they are what ran.
    const ranOwn: CallRecord = { ...call(2, "completed", "happened"), input: paid };
    expect(summarizeEffects([waited, ranOwn])).toEqual([{ key: "k1", name: "send_payment", effect: "happened", input: paid }]);
    // Nothing says what ran: the call's own arguments stay (the best the record has).
    expect(summarizeEffects([waited])).toEqual([{ key: "k1", name: "send_payment", effect: "may_have_happened", input: reworded }]);
  });
});
