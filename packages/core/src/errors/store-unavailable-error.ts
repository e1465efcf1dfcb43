import { DispatchOnceError } from "./dispatch-once-error.js";

/** The conversation store could not be reached or refused the operation. */
export class StoreUnavailableError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "store_unavailable" as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super("store_unavailable", message, options);
  }
}
