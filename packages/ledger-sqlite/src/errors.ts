/**
 * A bad option or argument given to the SQLite ledger (a table name outside the safe
 * alphabet, a negative lease, an unknown effect). Core's error codes (ERR-1) have no
 * entry for configuration mistakes, so this error carries its own stable code.
 */
export class InvalidLedgerInputError extends Error {
  readonly code = "invalid_ledger_input" as const;
  /** The option or argument that was refused, e.g. "table" or "leaseMs". */
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "InvalidLedgerInputError";
    this.field = field;
  }
}
