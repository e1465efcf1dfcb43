import { DispatchOnceError } from "./dispatch-once-error.js";
import type { JsonValue } from "../canonical.js";
import type { RowState } from "../ledger.js";
import type { UnstoredEffect } from "./store-unavailable-error.js";
import type { StoredError } from "./tool-failed-error.js";

/**
 * One call the ledger lists for a busy message's turns (TURN-25), as of the listing: which call
 * (key, tool, turn index, ordinal, its arguments) and what is known of its effect, in a
 * failed-turn record's words. The holder may still be running it, or claim more after the listing.
 */
export interface InProgressEffect extends UnstoredEffect {
  /** The turn index the call was claimed at: the message's first, or a later turn of it. */
  turnIndex: number;
  /**
   * The call's ordinal among its turn's identical calls (TURN-4), when the runner's dispatcher
   * derives the row's key again (a ledger row does not store it); absent otherwise.
   */
  ordinal?: number;
  /** The ledger row's state: `in_flight` while its run is under way (or its holder died). */
  state: RowState;
  /** The stored result of a completed row. */
  result?: JsonValue;
  /** The stored error of a failed row. */
  error?: StoredError;
  /**
   * The id of the message the call was made for, when it is another message's: one that failed at
   * the turn index this message took (TURN-12), whose failed-turn record lists the call's key. Its
   * effect is that message's (its user was told of it there), not a call this message made; absent
   * for this message's own calls.
   */
  messageId?: string;
}

/**
 * Another worker holds the conversation's turn lease and did not finish the message within
 * the wait bound (TURN-10). Retryable: re-send the SAME message id later; it is queued, not lost.
 * `inProgress`: the message itself is bound to a turn another holder is running (or a dead holder
 * left), so its effects may be under way or done: `effectOf` answers "possibly", not "no"; the
 * runner then says which calls the ledger lists for it (`effects`), or why it cannot
 * (`effectsUnknown`) (TURN-25).
 */
export class ConversationBusyError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "conversation_busy" as const;
  readonly conversationId: string;
  readonly messageId: string;
  readonly waitedMs: number;
  /** True when the message's own turn is under way under another holder: its effects may have happened. */
  readonly inProgress: boolean;
  /**
   * Set only when `inProgress`: the calls the ledger listed for the message's turns (its turn
   * index and later), in the order they were claimed, as of the listing, so that a user is told
   * "your payment to bob went through" (`happened`) or "is under way" (`may_have_happened`), not
   * only "busy". An empty list says the ledger held no call of the message when it was listed;
   * the holder may claim one after. Absent when the runner could not list them: `effectsUnknown`
   * says why (the ledger does not list rows, or the listing failed or did not answer in time).
   */
  // `declare`: no own property on a queued message's error (a class field would define it as undefined).
  declare readonly effects?: readonly InProgressEffect[];
  /** Why `effects` is absent for a message in progress: its calls and their effects are unknown here, not none. */
  declare readonly effectsUnknown?: string;
  constructor(
    conversationId: string,
    messageId: string,
    waitedMs: number,
    options: { inProgress?: boolean; effects?: readonly InProgressEffect[]; effectsUnknown?: string } = {},
  ) {
    const inProgress = options.inProgress === true;
    super(
      "conversation_busy",
      inProgress
        ? `conversation ${conversationId} is busy: message ${messageId} is in progress under another holder, whose calls may have had effects ` +
            `(waited ${waitedMs} ms; ${told(options)}); re-send the same message id to get its answer`
        : `conversation ${conversationId} is busy with another turn; message ${messageId} is queued ` +
            `(waited ${waitedMs} ms); re-send the same message id to get its answer`,
    );
    this.conversationId = conversationId;
    this.messageId = messageId;
    this.waitedMs = waitedMs;
    this.inProgress = inProgress;
    // A queued message has run nothing: it carries neither field.
    if (inProgress && options.effects !== undefined) this.effects = options.effects;
    else if (inProgress && options.effectsUnknown !== undefined) this.effectsUnknown = options.effectsUnknown;
  }
}

/** The effects a message in progress is known to have, in a log line's words. */
function told(options: { effects?: readonly InProgressEffect[]; effectsUnknown?: string }): string {
  if (options.effects !== undefined) {
    if (options.effects.length === 0) return "the ledger listed no call of it yet";
    return `the ledger lists ${options.effects.map((e) => `${e.name} ${e.effect.replaceAll("_", " ")}${e.messageId !== undefined ? ` (for message ${e.messageId})` : ""}`).join(", ")}`;
  }
  return `which calls it made is unknown: ${options.effectsUnknown ?? "not listed"}`;
}
