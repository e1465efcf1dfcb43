import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * The tool raised an error that does not settle the call, and the claim was released so that
 * a later attempt re-runs it with the same key and the stored request (LEDGER-8, LEDGER-21):
 * a not-performed failure (the effect did not happen) or an unclassified error of a
 * keyed_write (it may have happened; the downstream collapses the re-run on the same key).
 * The tool's own error is the `cause`.
 */
export class ClaimReleasedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "claim_released" as const;
  readonly key: string;
  /** True when the tool could not say the effect did not happen. */
  readonly effectMayHaveHappened: boolean;
  /**
   * Present only when the request that ran under the key is not this call's (IDENT-3): a re-worded
   * call met the stored request's re-run (released again). It says which request may have happened (RECORD-10); show it, not the
   * call's arguments.
   */
  declare storedRequest?: JsonValue;
  constructor(key: string, effectMayHaveHappened: boolean, cause: unknown) {
    const what = cause instanceof Error ? cause.message : String(cause);
    super(
      "claim_released",
      effectMayHaveHappened
        ? `call ${key} may have been performed (${what}); released so a re-run with the same key and request settles it`
        : `call ${key} was not performed (${what}); released so a re-run may perform it`,
      { cause },
    );
    this.key = key;
    this.effectMayHaveHappened = effectMayHaveHappened;
  }
}
