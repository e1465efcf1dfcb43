import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/** The tool's result is not JSON or is over the size limit; the claim is not released (LEDGER-10). */
export class ResultNotStorableError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "result_not_storable" as const;
  readonly key: string;
  /**
   * Present only when the request that ran under the key is not this call's (IDENT-3): a re-worded
   * call met the stored request's row (its effect happened, its result could not be kept). It says which request happened (RECORD-10); show it, not the
   * call's arguments.
   */
  declare storedRequest?: JsonValue;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super("result_not_storable", `result of call ${key} cannot be stored: ${message}`, options);
    this.key = key;
  }
}
