import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * Another worker holds the conversation's turn lease and did not finish the message within
 * the wait bound (TURN-10). Retryable: re-send the SAME message id later; it is queued, not lost.
 */
export class ConversationBusyError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "conversation_busy" as const;
  readonly conversationId: string;
  readonly messageId: string;
  readonly waitedMs: number;
  constructor(conversationId: string, messageId: string, waitedMs: number) {
    super(
      "conversation_busy",
      `conversation ${conversationId} is busy with another turn; message ${messageId} is queued ` +
        `(waited ${waitedMs} ms); re-send the same message id to get its answer`,
    );
    this.conversationId = conversationId;
    this.messageId = messageId;
    this.waitedMs = waitedMs;
  }
}
