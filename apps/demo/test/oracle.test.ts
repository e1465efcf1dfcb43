import type { StoredTurn } from "@dispatch-once/core";
import type { CallRecord, FailedTurnRecord, ResumedTurnRecord, SupersededAttemptRecord } from "@dispatch-once/anthropic";
import { describe, expect, it } from "vitest";
import { addAudit, auditMessage, emptyTally, recordsOf, type LoggedPayment } from "../src/oracle.js";

/*
 * The misreport oracle on hand-built evidence shaped exactly as the runner stores it, one case per
 * reason: each of these must be caught, and none of the truthful cases may be.
 */

const KEY = "c0f728ebe165b183aa00000000000001";
const PAYMENT: LoggedPayment = { resourceId: "pay_1", idempotencyKey: KEY };

function paymentTurn(result: { paymentId: string } | { error: { name: string; message: string } }, isError = false): StoredTurn {
  return {
    turnIndex: 0,
    messageId: "m-1",
    stopReason: "tool_use",
    assistant: { role: "assistant", content: [{ type: "tool_use", id: "toolu_A", name: "send_payment", input: { reference: "T-1" } }] },
    toolResults: {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "toolu_A", content: JSON.stringify(result), ...(isError ? { is_error: true } : {}) }],
    },
  };
}

const confirmation: StoredTurn = {
  turnIndex: 1,
  messageId: "m-1",
  stopReason: "end_turn",
  assistant: { role: "assistant", content: [{ type: "text", text: "Done." }] },
};

function call(overrides: Partial<CallRecord>): CallRecord {
  return { attempt: 1, index: 0, callId: "toolu_A", name: "send_payment", status: "completed", effect: "happened", summary: "", ...overrides };
}

function failed(calls: CallRecord[], effects: FailedTurnRecord["effects"] = []): FailedTurnRecord {
  return {
    kind: "failed_turn",
    conversationId: "c",
    messageId: "m-1",
    turnIndex: 0,
    attempts: 1,
    position: "call_unresolved",
    error: { name: "Error", message: "x" },
    calls,
    effects,
    retryable: true,
    at: "2026-11-30T00:00:00.000Z",
  };
}

describe("the misreport oracle", () => {
  it("a committed success naming the one payment that exists is not a misreport", () => {
    const audit = auditMessage({ committed: [paymentTurn({ paymentId: "pay_1" }), confirmation], records: [], payments: [PAYMENT] });
    expect(audit).toEqual({ reasons: [], mayHaveHappened: 0, mayHaveHappenedAndDid: 0, mayHaveHappenedCauses: [] });
  });

  it("two payments for one message are a misreport, whatever was said (two_payments)", () => {
    const audit = auditMessage({
      committed: [paymentTurn({ paymentId: "pay_2" })],
      records: [],
      payments: [PAYMENT, { resourceId: "pay_2", idempotencyKey: "toolu_B" }],
    });
    expect(audit.reasons).toEqual(["two_payments"]);
  });

  it("RECORD-3: a committed error result for a payment that exists (committed_error_for_payment)", () => {
    const audit = auditMessage({
      committed: [paymentTurn({ error: { name: "ToolError", message: "connection lost" } }, true)],
      records: [],
      payments: [PAYMENT],
    });
    expect(audit.reasons).toEqual(["committed_error_for_payment", "effect_unreported"]);
  });

  it("a committed error result when no payment exists is the truth", () => {
    const audit = auditMessage({ committed: [paymentTurn({ error: { name: "ToolError", message: "card declined" } }, true)], records: [], payments: [] });
    expect(audit.reasons).toEqual([]);
  });

  it("a committed success naming a payment the effect log does not have (committed_unknown_payment)", () => {
    expect(auditMessage({ committed: [paymentTurn({ paymentId: "pay_9" })], records: [], payments: [PAYMENT] }).reasons).toEqual([
      "committed_unknown_payment",
      "effect_unreported",
    ]);
    expect(auditMessage({ committed: [paymentTurn({ paymentId: "pay_9" })], records: [], payments: [] }).reasons).toEqual([
      "committed_unknown_payment",
    ]);
  });

  it("RECORD-2: a record saying not_happened for a key whose payment exists (record_denies_effect)", () => {
    const record = failed([call({ status: "released", effect: "not_happened", key: KEY })], [{ key: KEY, name: "send_payment", effect: "not_happened" }]);
    const audit = auditMessage({ committed: [], records: [record], payments: [PAYMENT] });
    expect(audit.reasons).toEqual(["record_denies_effect", "effect_unreported"]);
  });

  it("RECORD-2: the naive handler's key is its toolu_ id, so a denial is matched on the call id too", () => {
    const record = failed([call({ status: "failed", effect: "not_happened" })]);
    const audit = auditMessage({ committed: [], records: [record], payments: [{ resourceId: "pay_1", idempotencyKey: "toolu_A" }] });
    expect(audit.reasons).toContain("record_denies_effect");
  });

  it("RECORD-5: a failed turn whose record does not mention a payment that exists (effect_unreported)", () => {
    const record = failed([call({ status: "not_run", effect: "not_happened", callId: "toolu_Z" })]);
    const audit = auditMessage({ committed: [], records: [record], payments: [PAYMENT] });
    expect(audit.reasons).toEqual(["effect_unreported"]);
  });

  it("a not_run call of an earlier attempt is the truth about that call, even when a later one paid", () => {
    const early = failed([call({ callId: "toolu_Z", status: "not_run", effect: "not_happened" })]);
    const audit = auditMessage({ committed: [paymentTurn({ paymentId: "pay_1" })], records: [early], payments: [PAYMENT] });
    expect(audit.reasons).toEqual([]);
  });

  it("'may have happened' is never a misreport: it is counted apart, with whether the payment did exist and why it was said", () => {
    const error = { name: "ClaimReleasedError", code: "claim_released", message: "released after a lost response" };
    const record = failed([call({ status: "released", effect: "may_have_happened", key: KEY, error })], [{ key: KEY, name: "send_payment", effect: "may_have_happened" }]);
    const causes = ["released claim_released: released after a lost response"];
    const happened = auditMessage({ committed: [], records: [record], payments: [PAYMENT] });
    expect(happened).toEqual({ reasons: [], mayHaveHappened: 1, mayHaveHappenedAndDid: 1, mayHaveHappenedCauses: causes });
    const didNot = auditMessage({ committed: [], records: [record], payments: [] });
    expect(didNot).toEqual({ reasons: [], mayHaveHappened: 1, mayHaveHappenedAndDid: 0, mayHaveHappenedCauses: causes });
  });

  it("TURN-13: a superseded attempt's record stating the payment is a statement of it", () => {
    const superseded: SupersededAttemptRecord = {
      kind: "superseded_attempt",
      conversationId: "c",
      messageId: "m-1",
      turnIndex: 0,
      attempt: 1,
      calls: [call({ key: KEY })],
      at: "2026-11-30T00:00:00.000Z",
    };
    expect(auditMessage({ committed: [], records: [superseded], payments: [PAYMENT] }).reasons).toEqual([]);
  });

  it("RECORD-8: a resumed turn's record listing the earlier holder's payment is a statement of it; one saying not_happened denies it", () => {
    const resumed = (effect: "happened" | "not_happened"): ResumedTurnRecord => ({
      kind: "resumed_turn",
      conversationId: "c",
      messageId: "m-1",
      turnIndex: 0,
      resumed: true,
      listed: true,
      calls: [{ key: KEY, name: "send_payment", state: effect === "happened" ? "completed" : "failed", effect, summary: "s" }],
      at: "2026-11-30T00:00:00.000Z",
    });
    const textOnly: StoredTurn[] = [];
    expect(auditMessage({ committed: textOnly, records: [], payments: [PAYMENT] }).reasons).toEqual(["effect_unreported"]);
    expect(auditMessage({ committed: textOnly, records: [resumed("happened")], payments: [PAYMENT] }).reasons).toEqual([]);
    expect(auditMessage({ committed: textOnly, records: [resumed("not_happened")], payments: [PAYMENT] }).reasons).toContain("record_denies_effect");
  });

  it("a Responses API turn (output items, function_call_output) is read the same way: success, error, unknown payment", () => {
    const responsesTurn = (output: unknown): StoredTurn => ({
      turnIndex: 0,
      messageId: "m-1",
      stopReason: "function_call",
      assistant: [{ type: "function_call", id: "fc_A", call_id: "call_A", name: "send_payment", arguments: "{}", status: "completed" }],
      toolResults: [{ type: "function_call_output", call_id: "call_A", output: JSON.stringify(output) }],
    });
    expect(auditMessage({ committed: [responsesTurn({ paymentId: "pay_1" })], records: [], payments: [PAYMENT] }).reasons).toEqual([]);
    // The runner's error shape (an object whose only member is the error) is an error result.
    expect(auditMessage({ committed: [responsesTurn({ error: { name: "ToolError", message: "lost" } })], records: [], payments: [PAYMENT] }).reasons).toEqual([
      "committed_error_for_payment",
      "effect_unreported",
    ]);
    expect(auditMessage({ committed: [responsesTurn({ paymentId: "pay_9" })], records: [], payments: [PAYMENT] }).reasons).toEqual([
      "committed_unknown_payment",
      "effect_unreported",
    ]);
    // Silence is caught on this shape too: a payment exists and the turn names none.
    expect(auditMessage({ committed: [responsesTurn({ status: "ok" })], records: [], payments: [PAYMENT] }).reasons).toEqual([
      "committed_unknown_payment",
      "effect_unreported",
    ]);
  });

  it("a Chat Completions turn (assistant tool_calls, tool messages) is read the same way; check_balance's result beside it is not the payment's", () => {
    const chatTurn = (output: unknown): StoredTurn => ({
      turnIndex: 0,
      messageId: "m-1",
      stopReason: "tool_calls",
      assistant: {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_A", type: "function", function: { name: "send_payment", arguments: "{}" } },
          { id: "call_B", type: "function", function: { name: "check_balance", arguments: "{}" } },
        ],
      },
      toolResults: [
        { role: "tool", tool_call_id: "call_A", content: JSON.stringify(output) },
        { role: "tool", tool_call_id: "call_B", content: JSON.stringify({ currency: "EUR", available: 1 }) },
      ],
    });
    expect(auditMessage({ committed: [chatTurn({ paymentId: "pay_1" })], records: [], payments: [PAYMENT] }).reasons).toEqual([]);
    expect(auditMessage({ committed: [chatTurn({ error: { name: "ToolError", message: "lost" } })], records: [], payments: [PAYMENT] }).reasons).toEqual([
      "committed_error_for_payment",
      "effect_unreported",
    ]);
    expect(auditMessage({ committed: [chatTurn({ paymentId: "pay_9" })], records: [], payments: [PAYMENT] }).reasons).toEqual([
      "committed_unknown_payment",
      "effect_unreported",
    ]);
  });

  it("tallies count a message once, its reasons each, and keep a few examples", () => {
    const tally = emptyTally();
    addAudit(tally, "T-1", { reasons: ["two_payments", "effect_unreported"], mayHaveHappened: 0, mayHaveHappenedAndDid: 0, mayHaveHappenedCauses: [] });
    addAudit(tally, "T-2", { reasons: [], mayHaveHappened: 2, mayHaveHappenedAndDid: 1, mayHaveHappenedCauses: ["released claim_released: x", "outcome_unknown outcome_unknown: y"] });
    expect(tally).toMatchObject({
      messages: 2,
      misreports: 1,
      mayHaveHappened: 2,
      mayHaveHappenedAndDid: 1,
      examples: ["T-1: two_payments, effect_unreported"],
      mayHaveHappenedExamples: ["T-2: released claim_released: x", "T-2: outcome_unknown outcome_unknown: y"],
    });
    expect(tally.byReason).toMatchObject({ two_payments: 1, effect_unreported: 1, record_denies_effect: 0 });
    expect(recordsOf([failed([]), { ...failed([]), messageId: "m-2" }], "m-2")).toHaveLength(1);
  });
});
