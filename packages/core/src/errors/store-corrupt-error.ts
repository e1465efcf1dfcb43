import { DispatchOnceError } from "./dispatch-once-error.js";

/** Stored conversation data cannot be read back; it is never treated as absent. */
export class StoreCorruptError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "store_corrupt" as const;
  readonly conversationId: string;
  constructor(conversationId: string, message: string, options?: { cause?: unknown }) {
    super("store_corrupt", `conversation ${conversationId} cannot be read: ${message}`, options);
    this.conversationId = conversationId;
  }
}
