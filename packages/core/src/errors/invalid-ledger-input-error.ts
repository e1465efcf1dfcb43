import { DispatchOnceError } from "./dispatch-once-error.js";

/** An option or argument a ledger adapter cannot accept (a bad table name, a negative lease, ...). */
export class InvalidLedgerInputError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "invalid_ledger_input" as const;
  /** The option or argument that was refused, e.g. "table" or "leaseMs". */
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_ledger_input", `${field}: ${message}`);
    this.field = field;
  }
}
