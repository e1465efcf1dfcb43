import { DispatchOnceError } from "@dispatch-once/core";

/**
 * A send whose message id the conversation already holds with other content (TURN-20). A message
 * id names one message (TURN-8): the store keeps a known id's first content (TURN-2), so answering
 * this send would hand it the stored message's answer, or reopen and retry the stored message,
 * for something the user did not ask this time. Nothing was appended, reopened or run for it:
 * a new message needs a new id.
 */
export class MessageIdReusedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "message_id_reused" as const;
  readonly conversationId: string;
  readonly messageId: string;
  constructor(conversationId: string, messageId: string) {
    super(
      "message_id_reused",
      `message ${messageId} of ${conversationId} is stored with other content; this send was not appended or answered: a new message needs a new id`,
    );
    this.conversationId = conversationId;
    this.messageId = messageId;
  }
}
