import { DispatchOnceError } from "./dispatch-once-error.js";

/** The store could not be reached or refused the operation; nothing is assumed to have happened (LEDGER-12). */
export class LedgerUnavailableError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "ledger_unavailable" as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super("ledger_unavailable", message, options);
  }
}
