import { DispatchOnceError } from "./dispatch-once-error.js";

/** The store could not be reached or refused the operation; nothing is assumed to have happened (LEDGER-12). */
export class LedgerUnavailableError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "ledger_unavailable" as const;
  /**
   * The key of the call whose dispatch raised it (absent when a ledger operation raised it
   * outside a dispatch): a failed turn's record lists the call under it (RECORD-2), so that an
   * effect whose record could not be written (DISPATCH-10) is told under the key its row has.
   */
  readonly key?: string;
  constructor(message: string, options?: { cause?: unknown; key?: string }) {
    super("ledger_unavailable", message, options !== undefined && "cause" in options ? { cause: options.cause } : undefined);
    if (options?.key !== undefined) this.key = options.key;
  }
}
