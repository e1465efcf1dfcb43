import { DispatchOnceError } from "./dispatch-once-error.js";

/** The conversation store could not be reached or refused the operation. */
export class StoreUnavailableError extends DispatchOnceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("store_unavailable", message, options);
  }
}
