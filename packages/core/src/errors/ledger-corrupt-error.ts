import { DispatchOnceError } from "./dispatch-once-error.js";

/** A row exists but cannot be read back; it is never treated as absent (LEDGER-11). */
export class LedgerCorruptError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "ledger_corrupt" as const;
  readonly key: string;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super("ledger_corrupt", `ledger row ${key} cannot be read: ${message}`, options);
    this.key = key;
  }
}
