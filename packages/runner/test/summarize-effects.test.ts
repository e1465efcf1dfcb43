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
