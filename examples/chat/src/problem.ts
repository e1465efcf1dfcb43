import { TurnFailedError } from "@dispatch-once/anthropic";
import { ConversationBusyError, catalogueEntry, effectOf, type EffectKnowledge, type Retryable } from "@dispatch-once/core";

/** An RFC 9457 problem document, with what the client can do about it. */
export interface ChatProblem {
  type: string;
  title: string;
  status: number;
  detail: string;
  /** The Dispatch-Once error code, or this example's own (`message_id_missing`, …). */
  code: string;
  /** "same_message": re-send the SAME message id (Idempotency-Key); "no": asking again cannot help. */
  retryable: Retryable;
  /** Whether an effect behind the error may have happened (core's `effectOf`). */
  effect: EffectKnowledge;
  conversationId?: string;
  messageId?: string;
  /**
   * For a failed turn: per key, what happened to each effect the turn asked for. For a busy
   * conversation running this message (TURN-25): the calls the ledger holds for it so far.
   */
  effects?: { key: string; name: string; effect: string; input?: unknown }[];
}

export const PROBLEM_BASE = "https://dispatch-once.dev/problems/";

export function problem(status: number, code: string, title: string, detail: string, extra: Partial<ChatProblem> = {}): ChatProblem {
  return { type: PROBLEM_BASE + code.replace(/_/g, "-"), title, status, detail, code, retryable: "no", effect: "no", ...extra };
}

/**
 * What a failed send() means for the client, read from core's error catalogue: a code whose
 * re-send can help is 503 with Retry-After (re-send the SAME id: the ledger and the store make
 * that safe); a bad input is 422; anything whose effect may have happened and that asking again
 * cannot settle is 500 (a person must check; the body says which effects).
 */
export function problemForSendError(error: unknown, ids: { conversationId: string; messageId: string }): ChatProblem {
  const entry = catalogueEntry(error);
  const message = error instanceof Error ? error.message : String(error);
  let retryable: Retryable = entry?.retryable ?? "same_message"; // unclassified: a re-send of the same id is still safe
  let effect = effectOf(error);
  let effects: ChatProblem["effects"];
  if (TurnFailedError.isInstance(error)) {
    const { record } = error;
    // The record knows better than the code: an effect left for a person means no re-send.
    if (!record.retryable) retryable = "no";
    effects = record.effects;
    effect = record.effects.some((e) => e.effect === "happened")
      ? "yes"
      : record.effects.some((e) => e.effect === "may_have_happened")
        ? "possibly"
        : "no";
  }
  if (ConversationBusyError.isInstance(error) && error.effects !== undefined) {
    // Another worker is on this message: what it did so far, never "no" (it may claim more).
    effects = [...error.effects];
    if (error.effects.some((e) => e.effect === "happened")) effect = "yes";
  }
  const code = entry?.code ?? "internal_error";
  const base = { ...ids, effect, retryable, ...(effects !== undefined ? { effects } : {}) };
  if (retryable === "same_message") {
    return problem(503, code, "Not answered yet: re-send the same message id", message, base);
  }
  if (effect === "no" && entry !== undefined) {
    return problem(422, code, "The message cannot be answered as sent", message, base);
  }
  return problem(500, code, "The turn failed and asking again cannot settle it: a person must check", message, base);
}
