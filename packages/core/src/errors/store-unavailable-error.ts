import { DispatchOnceError } from "./dispatch-once-error.js";
import type { JsonValue } from "../canonical.js";

/**
 * What a runner knew of one effect of a turn whose end the conversation store could not keep
 * (RECORD-9): the call's key, its tool, and whether the effect happened, in a failed-turn
 * record's words.
 */
export interface UnstoredEffect {
  key: string;
  name: string;
  effect: "happened" | "not_happened" | "may_have_happened";
  /** The call's arguments (the request stored under its key when a replay re-worded it, IDENT-3), when known. */
  input?: JsonValue;
}

/** The conversation store could not be reached or refused the operation. */
export class StoreUnavailableError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "store_unavailable" as const;
  /**
   * Present when a runner's calls had run before the store failed to keep the turn's end (its
   * commit or its failure, RECORD-9): what it knew of each effect, so that a payment that happened
   * is told as one. The turn's end was not stored: the message is still in progress, and a re-send
   * of its id completes it (TURN-7, TURN-15).
   */
  readonly effects?: readonly UnstoredEffect[];
  constructor(message: string, options?: { cause?: unknown; effects?: readonly UnstoredEffect[] }) {
    super("store_unavailable", message, options !== undefined && "cause" in options ? { cause: options.cause } : undefined);
    if (options?.effects !== undefined) this.effects = options.effects;
  }
}
