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
  constructor(key: string, error: StoredError, replayed: boolean) {
    super("tool_failed", `tool failed: ${error.message}`);
    this.key = key;
    this.error = error;
    this.replayed = replayed;
  }
}
