import { DispatchOnceError } from "./dispatch-once-error.js";

/** The conversation's turn lease presented no longer holds it: another worker took it over (TURN-10). */
export class ConversationLeaseLostError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "conversation_lease_lost" as const;
  readonly conversationId: string;
  readonly fence: number;
  constructor(conversationId: string, fence: number) {
    super("conversation_lease_lost", `turn lease ${fence} of conversation ${conversationId} is no longer held`);
    this.conversationId = conversationId;
    this.fence = fence;
  }
}
