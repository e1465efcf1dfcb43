/**
 * Errors this adapter adds to core's catalogue. Like the other adapters' they subclass
 * Error (core's DispatchOnceError has a closed code union) and carry a stable `code`.
 */

/** An option or argument the ledger cannot accept (bad table name, negative lease, NUL in a key, ...). */
export class InvalidLedgerInputError extends Error {
  readonly code = "invalid_ledger_input" as const;
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "InvalidLedgerInputError";
    this.field = field;
  }
}
