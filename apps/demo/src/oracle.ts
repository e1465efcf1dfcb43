import type { StoredTurn } from "@dispatch-once/core";
import type { CallRecord, ConversationRecord, EffectStatus } from "@dispatch-once/anthropic";

/*
 * The second oracle. Duplicates count what happened in the world; misreports count turns whose
 * conversation (what was committed) or records (what the user is told beside it) disagree with
 * the payments API's effect log, the only ground truth. Both are judged per user message: each
 * demo message asks for exactly one payment, under its own reference.
 */

/** Why a message counts as misreported. One message may have several reasons; it counts once. */
export type MisreportReason =
  /** The effect log has more than one payment for the message: whatever was said names at most one. */
  | "two_payments"
  /** A committed error result (the model and the user are told it failed) while the payment exists. */
  | "committed_error_for_payment"
  /** A committed success naming a payment id the effect log does not have for this message. */
  | "committed_unknown_payment"
  /** A record says not_happened for a call whose key (or, naive, whose toolu_ id) has an effect in the log. */
  | "record_denies_effect"
  /** A payment exists and nothing committed or recorded says it happened or may have (RECORD-2). */
  | "effect_unreported";

export const MISREPORT_REASONS: readonly MisreportReason[] = [
  "two_payments",
  "committed_error_for_payment",
  "committed_unknown_payment",
  "record_denies_effect",
  "effect_unreported",
];

/** One payment from the effect log, as far as the oracle needs it. */
export interface LoggedPayment {
  resourceId: string;
  /** The Idempotency-Key it was made under: the derived key (guarded) or the toolu_ id (naive). */
  idempotencyKey: string | null;
}

export interface MessageEvidence {
  /** The committed turns that answered the message (store.turnsOf), oldest first. */
  committed: StoredTurn[];
  /** Every record kept beside the conversation for this message (failed turns, superseded attempts). */
  records: ConversationRecord[];
  /** The payments the effect log shows for this message's reference. */
  payments: LoggedPayment[];
  /** The tool whose results are judged. */
  toolName?: string;
}

export interface MessageAudit {
  reasons: MisreportReason[];
  /** Failed-turn records of this message that told the user a payment "may have happened". */
  mayHaveHappened: number;
  /** ...of which the effect log shows the payment did happen (the "may" was the honest answer). */
  mayHaveHappenedAndDid: number;
  /**
   * Why each of those records said "may have happened": per call that said it, its status and
   * its error's code (e.g. "outcome_unknown ledger_unavailable"), so a count can be explained.
   */
  mayHaveHappenedCauses: string[];
}

interface CommittedResult {
  isError: boolean;
  paymentId: string | undefined;
}

/** The paymentId a result's text names, if it is JSON that names one. */
function paymentIdIn(content: unknown): string | undefined {
  if (typeof content !== "string") return undefined;
  try {
    const parsed = JSON.parse(content) as { paymentId?: unknown };
    return typeof parsed?.paymentId === "string" ? parsed.paymentId : undefined;
  } catch {
    return undefined; // Not JSON: it names no payment.
  }
}

/**
 * A Responses API turn (@dispatch-once/openai): output items, then one function_call_output per
 * call. The API has no error flag; the runner writes an error as `{ "error": {...} }` alone.
 */
function responsesResults(turn: StoredTurn, toolName: string): CommittedResult[] {
  const items = turn.assistant as { type?: string; name?: string; call_id?: string }[];
  const callIds = new Set(items.filter((i) => i.type === "function_call" && i.name === toolName && typeof i.call_id === "string").map((i) => i.call_id!));
  const outputs = Array.isArray(turn.toolResults) ? (turn.toolResults as { call_id?: string; output?: unknown }[]) : [];
  return outputs
    .filter((o) => o.call_id !== undefined && callIds.has(o.call_id))
    .map((o) => ({ isError: isErrorShape(o.output), paymentId: paymentIdIn(o.output) }));
}

/** Whether a function output's text is the runner's error shape, `{ "error": {...} }` alone (both OpenAI APIs). */
function isErrorShape(output: unknown): boolean {
  try {
    const parsed = JSON.parse(String(output)) as Record<string, unknown> | null;
    return parsed !== null && typeof parsed === "object" && Object.keys(parsed).length === 1 && "error" in parsed;
  } catch {
    return false; // Not JSON: a result, not the runner's error shape.
  }
}

/**
 * A Chat Completions turn (@dispatch-once/openai's ChatCompletionsRunner, STREAM-21): the
 * assistant message with its `tool_calls`, then one `tool` message per call.
 */
function chatResults(turn: StoredTurn, toolName: string): CommittedResult[] {
  const calls = (turn.assistant as { tool_calls?: { id?: string; function?: { name?: string } }[] }).tool_calls ?? [];
  const callIds = new Set(calls.filter((c) => c.function?.name === toolName && typeof c.id === "string").map((c) => c.id!));
  const messages = Array.isArray(turn.toolResults) ? (turn.toolResults as { tool_call_id?: string; content?: unknown }[]) : [];
  return messages
    .filter((m) => m.tool_call_id !== undefined && callIds.has(m.tool_call_id))
    .map((m) => ({ isError: isErrorShape(m.content), paymentId: paymentIdIn(m.content) }));
}

/** The send_payment results the conversation committed: what the model and the user were told. */
function committedResults(turns: readonly StoredTurn[], toolName: string): CommittedResult[] {
  const out: CommittedResult[] = [];
  for (const turn of turns) {
    if (Array.isArray(turn.assistant)) {
      out.push(...responsesResults(turn, toolName));
      continue;
    }
    if ((turn.assistant as { role?: unknown } | null)?.role === "assistant" && !Array.isArray((turn.assistant as { content?: unknown }).content)) {
      out.push(...chatResults(turn, toolName));
      continue;
    }
    const blocks = (turn.assistant as { content?: unknown }).content;
    if (!Array.isArray(blocks)) continue;
    const callIds = new Set(
      (blocks as { type?: string; name?: string; id?: string }[])
        .filter((b) => b.type === "tool_use" && b.name === toolName && typeof b.id === "string")
        .map((b) => b.id!),
    );
    const results = (turn.toolResults as { content?: unknown } | undefined)?.content;
    if (!Array.isArray(results)) continue;
    for (const block of results as { tool_use_id?: string; content?: unknown; is_error?: boolean }[]) {
      if (block.tool_use_id === undefined || !callIds.has(block.tool_use_id)) continue;
      out.push({ isError: block.is_error === true, paymentId: paymentIdIn(block.content) });
    }
  }
  return out;
}

/** Calls of a record, with the per-key summary of a failed turn folded in (it may speak for a key too). */
function statements(record: ConversationRecord): { key?: string; callId?: string; effect: EffectStatus }[] {
  // A resumed turn's record speaks per ledger row (RECORD-8): a key and its effect, no call id.
  if (record.kind === "resumed_turn") return record.calls.map((c) => ({ key: c.key, effect: c.effect }));
  const calls: { key?: string; callId?: string; effect: EffectStatus }[] = record.calls.map((c: CallRecord) => ({
    ...(c.key !== undefined ? { key: c.key } : {}),
    callId: c.callId,
    effect: c.effect,
  }));
  if (record.kind === "failed_turn") for (const e of record.effects) calls.push({ key: e.key, effect: e.effect });
  return calls;
}

/**
 * Judge one message against the effect log. A "may have happened" is never a misreport: it is
 * the truthful answer when nobody can tell, and is counted separately.
 */
export function auditMessage(evidence: MessageEvidence): MessageAudit {
  const toolName = evidence.toolName ?? "send_payment";
  const reasons = new Set<MisreportReason>();
  const { payments } = evidence;
  const paymentIds = new Set(payments.map((p) => p.resourceId));
  const keysWithEffect = new Set(payments.flatMap((p) => (p.idempotencyKey === null ? [] : [p.idempotencyKey])));
  const hasEffect = (s: { key?: string; callId?: string }) =>
    (s.key !== undefined && keysWithEffect.has(s.key)) || (s.callId !== undefined && keysWithEffect.has(s.callId));

  if (payments.length > 1) reasons.add("two_payments");

  let stated = false;
  for (const result of committedResults(evidence.committed, toolName)) {
    if (result.isError) {
      if (payments.length > 0) reasons.add("committed_error_for_payment");
    } else if (result.paymentId === undefined || !paymentIds.has(result.paymentId)) {
      reasons.add("committed_unknown_payment");
    } else {
      stated = true;
    }
  }

  let mayHaveHappened = 0;
  const mayHaveHappenedCauses: string[] = [];
  for (const record of evidence.records) {
    const said = statements(record);
    if (said.some((s) => s.effect === "not_happened" && hasEffect(s))) reasons.add("record_denies_effect");
    if (said.some((s) => (s.effect === "happened" || s.effect === "may_have_happened") && hasEffect(s))) stated = true;
    if (record.kind === "failed_turn" && said.some((s) => s.effect === "may_have_happened")) {
      mayHaveHappened++;
      for (const call of record.calls) {
        if (call.effect === "may_have_happened") mayHaveHappenedCauses.push(`${call.status} ${call.error?.code ?? "-"}: ${call.error?.message ?? call.summary}`);
      }
    }
  }
  if (payments.length > 0 && !stated) reasons.add("effect_unreported");

  return {
    reasons: MISREPORT_REASONS.filter((r) => reasons.has(r)),
    mayHaveHappened,
    mayHaveHappenedAndDid: payments.length > 0 ? mayHaveHappened : 0,
    mayHaveHappenedCauses,
  };
}

/** Misreport and may-have-happened counts over many messages. */
export interface AuditTally {
  /** Messages judged. */
  messages: number;
  /** Messages with at least one misreport reason. */
  misreports: number;
  byReason: Record<MisreportReason, number>;
  /** Failed-turn records that said "may have happened" (told truthfully; not misreports). */
  mayHaveHappened: number;
  /** ...of which the payment did in fact exist. */
  mayHaveHappenedAndDid: number;
  /** The first few misreported messages, "<reference>: reason, reason", for a person to look at. */
  examples: string[];
  /** The first few "may have happened" statements, "<reference>: <status> <code>: <message>". */
  mayHaveHappenedExamples: string[];
}

export function emptyTally(): AuditTally {
  return {
    messages: 0,
    misreports: 0,
    byReason: Object.fromEntries(MISREPORT_REASONS.map((r) => [r, 0])) as Record<MisreportReason, number>,
    mayHaveHappened: 0,
    mayHaveHappenedAndDid: 0,
    examples: [],
    mayHaveHappenedExamples: [],
  };
}

export function addAudit(tally: AuditTally, reference: string, audit: MessageAudit): void {
  tally.messages++;
  tally.mayHaveHappened += audit.mayHaveHappened;
  tally.mayHaveHappenedAndDid += audit.mayHaveHappenedAndDid;
  for (const cause of audit.mayHaveHappenedCauses) {
    if (tally.mayHaveHappenedExamples.length < 10) tally.mayHaveHappenedExamples.push(`${reference}: ${cause}`);
  }
  if (audit.reasons.length === 0) return;
  tally.misreports++;
  for (const reason of audit.reasons) tally.byReason[reason]++;
  if (tally.examples.length < 10) tally.examples.push(`${reference}: ${audit.reasons.join(", ")}`);
}

/** Records of one message; the runner stores them per conversation. */
export function recordsOf(all: readonly unknown[], messageId: string): ConversationRecord[] {
  return (all as ConversationRecord[]).filter((r) => r?.messageId === messageId);
}

