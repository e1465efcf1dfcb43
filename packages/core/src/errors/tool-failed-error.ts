import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/** The JSON form in which a failure is stored in the ledger and replayed. */
export interface StoredError {
  name: string;
  message: string;
  code?: string;
  details?: unknown;
}

/** A recorded, definite failure: the first attempt's error, replayed identically (LEDGER-8). */
export class ToolFailedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "tool_failed" as const;
  readonly key: string;
  readonly error: StoredError;
  readonly replayed: boolean;
  /**
   * Present only when the request that failed is not this call's (IDENT-3): a re-worded call was
   * answered with the stored request's failure, or re-ran the stored request. As on an outcome, it
   * says which request failed; show it, not the call's arguments.
   */
  declare storedRequest?: JsonValue;
  constructor(key: string, error: StoredError, replayed: boolean) {
    super("tool_failed", `tool failed: ${error.message}`);
    this.key = key;
    this.error = error;
    this.replayed = replayed;
  }
}
