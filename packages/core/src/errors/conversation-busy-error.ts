import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * Another worker holds the conversation's turn lease and did not finish the message within
 * the wait bound (TURN-10). Retryable: re-send the SAME message id later; it is queued, not lost.
 * `inProgress`: the message itself is bound to a turn another holder is running (or a dead holder
 * left), so its effects may be under way or done: `effectOf` answers "possibly", not "no".
 */
export class ConversationBusyError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "conversation_busy" as const;
  readonly conversationId: string;
  readonly messageId: string;
  readonly waitedMs: number;
  /** True when the message's own turn is under way under another holder: its effects may have happened. */
  readonly inProgress: boolean;
  constructor(conversationId: string, messageId: string, waitedMs: number, options: { inProgress?: boolean } = {}) {
    const inProgress = options.inProgress === true;
    super(
      "conversation_busy",
      inProgress
        ? `conversation ${conversationId} is busy: message ${messageId} is in progress under another holder, whose calls may have had effects ` +
            `(waited ${waitedMs} ms); re-send the same message id to get its answer`
        : `conversation ${conversationId} is busy with another turn; message ${messageId} is queued ` +
            `(waited ${waitedMs} ms); re-send the same message id to get its answer`,
    );
    this.conversationId = conversationId;
    this.messageId = messageId;
    this.waitedMs = waitedMs;
    this.inProgress = inProgress;
  }
}
