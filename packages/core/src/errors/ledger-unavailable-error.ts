import { DispatchOnceError } from "./dispatch-once-error.js";

/** The store could not be reached or refused the operation; nothing is assumed to have happened (LEDGER-12). */
export class LedgerUnavailableError extends DispatchOnceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("ledger_unavailable", message, options);
  }
}
