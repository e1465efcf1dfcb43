import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * Whether the effect happened cannot be known, and the tool has no downstream key to
 * make a re-run safe (an expired claim on an unkeyed_write, or an unclassified error
 * from one). It is never re-run automatically (LEDGER-6); a human or a reconciler decides.
 */
export class OutcomeUnknownError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "outcome_unknown" as const;
  readonly key: string;
  readonly reason: string;
  /**
   * Present only when the request whose outcome is unknown is not this call's (IDENT-3): a
   * re-worded call met the stored request's unknown outcome. It says which request may have
   * happened; show it, not the call's arguments.
   */
  declare storedRequest?: JsonValue;
  constructor(key: string, reason: string, options?: { cause?: unknown }) {
    super("outcome_unknown", `outcome of call ${key} is unknown (${reason}); it will not be re-run`, options);
    this.key = key;
    this.reason = reason;
  }
}
