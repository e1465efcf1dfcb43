import { turnRowEffect, turnRowInput, turnRowsOf, UNLISTED_REASON, type TurnRowEffect } from "@dispatch-once/core/internal";
import { MAX_CANONICAL_DEPTH, effectOf, isDispatchOnceError, type JsonValue, type LedgerRow, type RowState, type StoredError } from "@dispatch-once/core";
import type { FailurePosition } from "./phases.js";

/** What happened to one call of one attempt (spec RECORD-2). */
export type CallStatus =
  /** Never dispatched: the stream died while its arguments streamed, or before it was handed over (STREAM-3). */
  | "not_run"
  /** The tool ran, or its stored result was replayed. */
  | "completed"
  /** A definite failure (recorded or replayed): the effect did not happen. */
  | "failed"
  /** The call was refused before anything was claimed (invalid arguments, unknown tool). */
  | "rejected"
  /** The tool's error did not settle the call; its claim was released for a re-run with the same key. */
  | "released"
  /** The effect happened but its result could not be stored: the turn is never committed with it. */
  | "result_not_storable"
  | "in_flight_elsewhere"
  | "outcome_unknown"
  /** Any other error (a ledger that could not be reached, a lost claim). */
  | "error";

/**
 * What is known about the call's effect in the world, in the words a user needs:
 * - "happened": it was performed (completed now or earlier, or performed and not storable);
 * - "not_happened": it certainly was not;
 * - "may_have_happened": nobody can tell from here; it will not be repeated blindly;
 * - "none": the tool has no effect (a read).
 */
export type EffectStatus = "happened" | "not_happened" | "may_have_happened" | "none";

export interface CallRecord {
  /** The attempt of the turn this call belonged to, from 1. */
  attempt: number;
  /** The call's position in that attempt's response (content block index, output index). */
  index: number;
  /** Provider call id (toolu_…, call_…), minted per response: for the log only. */
  callId: string;
  name: string;
  status: CallStatus;
  effect: EffectStatus;
  /** Human-readable, e.g. "not run (connection lost)". */
  summary: string;
  /**
   * The argument text received before the stream died; for the log, never for the conversation.
   * A lone half of a UTF-16 surrogate pair (the cut fell between the deltas that split a
   * character) is given as U+FFFD, so that a store can keep the record.
   */
  partialArguments?: string;
  /**
   * The call's arguments, parsed, once the stream delivered them whole (absent for a call cut
   * while they streamed, which has `partialArguments`, or whose text was not JSON): a record that
   * says "pay: happened" must say which payment. A lone UTF-16 half in a string (a JSON escape
   * the model wrote) is given as U+FFFD, so that a store can keep the record (TURN-18).
   */
  input?: JsonValue;
  key?: string;
  ordinal?: number;
  replayed?: boolean;
  result?: JsonValue;
  /**
   * The request that ran under the key, when it is not this call's arguments (IDENT-3): the one
   * `result` belongs to (as CallReport's), or whose failure, unknown outcome, unstorable result or
   * release this call met (RECORD-10: the effect is that request's, not the re-wording's).
   */
  storedRequest?: JsonValue;
  error?: StoredError;
}

/** One effect a failed turn's record tells of: per key, the strongest word of every attempt. */
export interface TurnEffect {
  key: string;
  name: string;
  effect: EffectStatus;
  /** The call's arguments: the request stored under the key when a replay re-worded it (IDENT-3). */
  input?: JsonValue;
}

/** @deprecated Use CallRecord. */
export type FailedCallRecord = CallRecord;
/** @deprecated Use CallStatus. */
export type FailedCallStatus = CallStatus;

/**
 * The failed-turn record (spec §9): kept beside the conversation, shown to the user, never
 * written into the conversation itself (RECORD-1, RECORD-4). It lists every call of EVERY
 * attempt (RECORD-5), so an effect made by an early attempt is never forgotten because a later
 * attempt died before reaching it.
 */
export interface FailedTurnRecord {
  kind: "failed_turn";
  conversationId: string;
  /** The user message whose turn failed. */
  messageId: string;
  turnIndex: number;
  attempts: number;
  /**
   * Where the last attempt's stream died; "call_unresolved" when it finished but a call did not;
   * "commit_refused" when the store could not keep the turn; "turn_limit" after maxTurns.
   */
  position: FailurePosition | "call_unresolved" | "commit_refused" | "turn_limit" | "past_resend_window";
  error: StoredError;
  /** Every call of every attempt, in order. */
  calls: CallRecord[];
  /**
   * Per key, what is known about each effect the turn asked for (the strongest word across
   * attempts), with the request that ran or would run under the key (`input`: the stored request
   * when a replay re-worded it, IDENT-3; absent in records written before the field).
   */
  effects: TurnEffect[];
  /** True when re-sending the same message id may complete the turn (nothing is left unknown). */
  retryable: boolean;
  /**
   * True when the turn index was begun before under an earlier turn lease (TURN-15): that
   * holder's attempts, which this record does not list, may have had effects and may still be
   * running; no call here that is not shown settled is called `not_happened`. Absent in records
   * written before the field existed.
   */
  resumed?: boolean;
  /**
   * Set when the runner ran nothing of this turn (TURN-12): a reopened message's retry, resumed
   * after its holder died, was past the re-send window (measured from the message's first
   * failure) when the next holder took it over. `effects` are then the previous failed-turn
   * record's, when the store still held it; the earlier attempts' effects are in that record.
   */
  notRetried?: "past_resend_window";
  at: string;
}

/**
 * The effects of an attempt whose commit lost to another attempt (TURN-13): nothing of it
 * reached the conversation, but what it did in the world is kept beside it.
 */
export interface SupersededAttemptRecord {
  kind: "superseded_attempt";
  conversationId: string;
  messageId: string;
  turnIndex: number;
  /** The attempt whose commit was refused. */
  attempt: number;
  /**
   * The calls of every attempt of the turn this runner made, the refused one and those before it
   * (each entry names its attempt; of the earlier ones, those dispatched under a key): an earlier
   * attempt's call the refused one did not make again is in no committed turn (RECORD-7).
   */
  calls: CallRecord[];
  /** As in FailedTurnRecord: the turn index was begun before under an earlier turn lease (TURN-15). */
  resumed?: boolean;
  at: string;
}

/**
 * One call of a committed turn's index that the committed turn does not answer (RECORD-8): a
 * ledger row the runner listed, or a call an earlier attempt of this runner dispatched.
 */
export interface UnansweredCallRecord {
  key: string;
  name: string;
  /**
   * The row's state when the runner listed it; absent for a call known only from this runner's
   * own earlier attempts (the rows were not listed).
   */
  state?: RowState;
  /** The attempt of this runner that dispatched the call, when one did (from 1). */
  attempt?: number;
  /** What that attempt saw of the call (RECORD-2), when one did. */
  status?: CallStatus;
  /**
   * `happened` for a completed row and for a `failed` row whose code is `result_not_storable`
   * (the effect happened; its result could not be kept), `not_happened` only for a definite
   * failure (any other `failed` row), `may_have_happened` for everything else (in flight, unknown, released: in a
   * resumed turn a release says nothing about the earlier holder's run, RECORD-6).
   */
  effect: EffectStatus;
  /** Human-readable, e.g. "performed by an earlier run of this turn; not in the conversation". */
  summary: string;
  /** The stored result of a completed row. */
  result?: JsonValue;
  /** The stored error of a failed row. */
  error?: StoredError;
  /**
   * The call's arguments: the request the row's claim stored, or, for a call known only from this
   * runner's attempts, the request that ran under its key. Absent in records written before the field.
   */
  input?: JsonValue;
  /**
   * The id of the message the call was made for, when it is another message's: one that failed at
   * the turn index this turn took (TURN-12), whose failed-turn record lists the call's key (its user
   * was told of it there). Absent for the message's own calls, and in records written before the field.
   */
  messageId?: string;
}

/**
 * Kept beside the conversation when a turn commits after more than one attempt, or resumed
 * (TURN-15) (RECORD-8): the calls that earlier runs of the same turn index (this runner's earlier
 * attempts, an earlier holder's) dispatched and the committed turn does not answer. A model may
 * answer a re-run differently (another call, other arguments, plain text), so a payment an
 * earlier run made would otherwise be in no committed turn and no record (RECORD-7). The kind
 * keeps its first name, `resumed_turn`, for the records already stored.
 */
export interface ResumedTurnRecord {
  kind: "resumed_turn";
  conversationId: string;
  messageId: string;
  turnIndex: number;
  /**
   * True when the turn was resumed (TURN-15): an earlier holder's attempts may have had effects.
   * False when only this runner's earlier attempts are listed (then `listed` is false too: the
   * runner saw every call it lists).
   */
  resumed: boolean;
  /** This runner's attempts of the turn, the committing one included; absent in records written before the field. */
  attempts?: number;
  /**
   * True when the runner listed the turn's ledger rows (a resumed turn whose dispatcher's ledger
   * offers `listRows`): `calls` is then every claimed call of the index the committed turn does
   * not answer, as of the listing, with this runner's own. False when it did not list them (a
   * turn that was not resumed needs no listing; no `listRows`, or the listing failed): in a
   * resumed turn earlier holders' effects may then exist that no record names (RECORD-6).
   */
  listed: boolean;
  /** Why the rows of a resumed turn were not listed, when `listed` is false. */
  unlistedReason?: string;
  calls: UnansweredCallRecord[];
  at: string;
}

export type ConversationRecord = FailedTurnRecord | SupersededAttemptRecord | ResumedTurnRecord;

/** What a row of a resumed turn says of its effect (RECORD-8): core's reading, shared with every listing of a turn's rows. */
export function unansweredCall(row: LedgerRow): UnansweredCallRecord & Pick<TurnRowEffect, "state" | "effect"> {
  const { input } = turnRowInput(row);
  const recorded = recordableInput(input);
  return { ...turnRowEffect(row), ...(recorded !== undefined ? { input: recorded } : {}) };
}

/** The request that ran (or would run) under a call's key: the stored one when a replay re-worded it (IDENT-3). */
function requestOf(call: CallRecord): { input?: JsonValue } {
  const input = call.storedRequest ?? call.input;
  return input !== undefined ? { input } : {};
}

/**
 * Arguments as a record can keep them (TURN-18), or undefined when it cannot: strings (member
 * names too) with each lone UTF-16 half as U+FFFD (a parsed argument can hold one: the model
 * wrote `\ud83e` alone), and nothing nested deeper than MAX_RECORDED_INPUT_DEPTH (a record sits
 * a few levels above its calls' arguments, and a store refuses JSON nested deeper than
 * MAX_CANONICAL_DEPTH). A record the store refused would tell the turn's effects nowhere
 * (RECORD-7), so arguments it cannot keep are left out, never the record.
 */
export function recordableInput(value: unknown, depth = 0): JsonValue | undefined {
  if (typeof value === "string") return value.toWellFormed();
  if (value === null || typeof value !== "object") return value as JsonValue;
  if (depth >= MAX_RECORDED_INPUT_DEPTH) return undefined;
  const entries = Array.isArray(value) ? value.map((member, i) => [String(i), member] as const) : Object.entries(value);
  const kept: [string, JsonValue][] = [];
  for (const [name, member] of entries) {
    const recorded = recordableInput(member, depth + 1);
    if (recorded === undefined) return undefined;
    kept.push([name.toWellFormed(), recorded]);
  }
  return Array.isArray(value) ? kept.map(([, member]) => member) : Object.fromEntries(kept);
}

/** How deep a call's arguments may nest and still be kept in a record (below the store's MAX_CANONICAL_DEPTH). */
export const MAX_RECORDED_INPUT_DEPTH = MAX_CANONICAL_DEPTH - 16;

const RANK: Record<EffectStatus, number> = { none: 0, not_happened: 1, may_have_happened: 2, happened: 3 };

/**
 * A call an earlier attempt of this runner dispatched and the committed turn does not answer
 * (RECORD-8): what that attempt established of its effect, as its failed-turn record would say
 * (RECORD-2). Undefined for a call that has nothing to account for: never dispatched (no key,
 * STREAM-3) or without effect (a read).
 */
export function unansweredOwnCall(call: CallRecord): UnansweredCallRecord | undefined {
  if (call.key === undefined || call.status === "not_run" || call.effect === "none") return undefined;
  const said =
    call.effect === "happened"
      ? "performed by an earlier attempt of this turn; its result is not in the conversation"
      : call.effect === "not_happened"
        ? `not performed by an earlier attempt of this turn (${call.summary})`
        : `may have been performed by an earlier attempt of this turn (${call.summary})`;
  return {
    key: call.key,
    name: call.name,
    attempt: call.attempt,
    status: call.status,
    effect: call.effect,
    summary: said,
    ...(call.result !== undefined ? { result: call.result } : {}),
    ...(call.error !== undefined ? { error: call.error } : {}),
    ...requestOf(call),
  };
}

/**
 * Both sources of a committed turn's record in one list, one entry per key (RECORD-8): a listed
 * row is the later snapshot, so it is kept, with the attempt that dispatched it, unless this
 * runner established a stronger statement (a completed replay beats a row it cannot read).
 */
export function mergeUnanswered(rows: readonly UnansweredCallRecord[], own: readonly UnansweredCallRecord[]): UnansweredCallRecord[] {
  const byKey = new Map<string, UnansweredCallRecord>();
  for (const row of rows) byKey.set(row.key, row);
  for (const call of own) {
    const row = byKey.get(call.key);
    if (row === undefined) byKey.set(call.key, call);
    // The row's stored request is what ran under the key: it stays the entry's arguments.
    else if (RANK[call.effect] > RANK[row.effect]) byKey.set(call.key, { ...call, ...(row.state !== undefined ? { state: row.state } : {}), ...(row.input !== undefined ? { input: row.input } : {}), ...(row.messageId !== undefined ? { messageId: row.messageId } : {}) });
    else if (row.attempt === undefined) byKey.set(call.key, { ...row, ...(call.attempt !== undefined ? { attempt: call.attempt } : {}), ...(call.status !== undefined ? { status: call.status } : {}) });
  }
  return [...byKey.values()];
}

/**
 * Whether a call's record says which request ran under its key (RECORD-10): one that names the
 * stored request, or one that completed without it (core names the stored request whenever it is
 * not the call's arguments, so a completed call's own arguments are what ran or was replayed; an
 * error raised after a re-worded call met the stored row names it too, a wait on another holder's
 * claim included). A call that failed before it learned the stored request (its claim never
 * answered) gives only its own arguments, which a re-worded re-run may have changed.
 */
function namesWhatRan(call: CallRecord): boolean {
  return call.storedRequest !== undefined || (call.status === "completed" && call.input !== undefined);
}

/** Per key, the strongest statement any attempt established (a completed replay beats "may have"). */
export function summarizeEffects(calls: readonly CallRecord[]): FailedTurnRecord["effects"] {
  const byKey = new Map<string, TurnEffect>();
  // Keys whose entry's request is one that ran (namesWhatRan): only another such request replaces it.
  const ran = new Set<string>();
  for (const call of calls) {
    if (call.key === undefined || call.effect === "none") continue;
    const known = byKey.get(call.key);
    // One request ran under a key, whichever attempt says so; an attempt that only knows its own
    // arguments gives them until one that knows what ran does.
    const names = namesWhatRan(call);
    const request = known?.input !== undefined && (ran.has(call.key) || !names) ? { input: known.input } : requestOf(call);
    if (names && request.input !== undefined && !ran.has(call.key)) ran.add(call.key);
    if (known === undefined || RANK[call.effect] > RANK[known.effect]) {
      byKey.set(call.key, { key: call.key, name: call.name, effect: call.effect, ...request });
    } else if (request.input !== undefined && request.input !== known.input) {
      byKey.set(call.key, { ...known, ...request });
    }
  }
  return [...byKey.values()];
}

/**
 * Whether a re-send (the runner's own retry included) cannot settle this call: its outcome is
 * unknown, or it raised an error that says its effect happened (`result_not_storable`, a
 * `stale_claim` after its run performed it, DISPATCH-8). Such a row is a person's to settle, or
 * an operator's already: a retry would replay their `failed` row to the model as a failure, or
 * claim their released row and perform the effect again (ERR-4, RECORD-5).
 */
export function notSettledByResend(call: Pick<CallRecord, "status" | "effect">): boolean {
  return call.status === "outcome_unknown" || (call.effect === "happened" && call.status !== "completed");
}

/**
 * A failed-turn record as stored (by this version or an older one), read for what it offers the
 * user: its `retryable` is false when one of its calls is not settled by a re-send (an effect left
 * unknown, or one that happened and was never completed), whatever the record says. Records an
 * older version wrote before RECORD-5 said so may say `retryable: true` there, and a re-send of
 * such a call may meet a row an operator has settled since and pay again (ERR-4). Nothing else is
 * changed, and a record that says false keeps it.
 */
export function readFailedTurnRecord(stored: JsonValue): FailedTurnRecord {
  const record = stored as unknown as FailedTurnRecord;
  if (record === null || typeof record !== "object" || record.retryable !== true) return record;
  const calls: unknown[] = Array.isArray(record.calls) ? record.calls : [];
  const unsettled = calls.some((call) => call !== null && typeof call === "object" && notSettledByResend(call as CallRecord));
  return unsettled ? { ...record, retryable: false } : record;
}

/** Status and effect of a call that was dispatched and raised `error`. */
export function classifyCallError(error: unknown, isRead: boolean): { status: CallStatus; effect: EffectStatus; summary: string } {
  const message = error instanceof Error ? error.message : String(error);
  const effectWord = (): EffectStatus => {
    if (isRead) return "none";
    const known = effectOf(error);
    return known === "yes" ? "happened" : known === "no" ? "not_happened" : "may_have_happened";
  };
  const code = isDispatchOnceError(error) ? error.code : undefined;
  switch (code) {
    case "tool_failed":
      return { status: "failed", effect: isRead ? "none" : "not_happened", summary: `failed: ${message}` };
    case "tool_input_invalid":
    case "unknown_tool":
    case "invalid_arguments_json":
    case "invalid_tool_definition":
    case "not_canonicalizable":
    // IDENT-10: refused before any claim, the same way for every holder; the row it may be is the
    // committed-turn record's to list (RECORD-8), under the row's own key.
    case "tool_definition_changed":
      return { status: "rejected", effect: isRead ? "none" : "not_happened", summary: `not run: ${message}` };
    case "result_not_storable":
      return { status: "result_not_storable", effect: "happened", summary: "performed, but its result could not be stored" };
    case "claim_released": {
      const effect = effectWord();
      return {
        status: "released",
        effect,
        summary: effect === "not_happened" ? "not performed; will be retried" : "may have been performed; a retry with the same key settles it",
      };
    }
    case "in_flight_elsewhere": {
      // This dispatch's own run outlived its bound (DISPATCH-18): left in flight, it may still complete.
      const runTimeoutMs = (error as { runTimeoutMs?: unknown }).runTimeoutMs;
      const summary =
        typeof runTimeoutMs === "number"
          ? `its run did not settle within ${runTimeoutMs} ms (runTimeoutMs) and was signalled to stop; it may still complete, and a retry with the same key settles it`
          : "still running in another attempt";
      return { status: "in_flight_elsewhere", effect: effectWord(), summary };
    }
    case "outcome_unknown":
      return { status: "outcome_unknown", effect: effectWord(), summary: "may have been performed; nobody can confirm it, and it will not be repeated automatically" };
    default:
      return { status: "error", effect: effectWord(), summary: `error: ${message}` };
  }
}

/**
 * A call record of a resumed turn (TURN-15): the earlier holder's run of the same call may
 * still be alive and may claim its key after this run released it, so "not happened" is said
 * only of what is settled whoever runs it: a definite failure (a terminal `failed` row, replayed
 * to every later claim) and a call refused before any claim (its arguments or its tool are
 * refused the same way for every holder). Everything else that would say `not_happened` (not
 * run here, released as not performed, refused by an unreachable ledger) says
 * `may_have_happened`. Reads have no effect to speak of.
 */
export function forResumedTurn(call: CallRecord, isRead: boolean): CallRecord {
  if (call.effect !== "not_happened" || isRead || call.status === "failed" || call.status === "rejected") return call;
  return { ...call, effect: "may_have_happened", summary: `${call.summary}; an earlier holder of this turn may have run it` };
}

// Shared with the AI SDK, tool-runner and MCP listings of a turn's rows (AISDK-14, ATR-12, MCP-15).
export { turnRowsOf, UNLISTED_REASON };
