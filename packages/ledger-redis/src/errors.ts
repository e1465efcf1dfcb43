/**
 * Errors this adapter adds to core's catalogue. They subclass Error (not core's
 * DispatchOnceError, whose code union is closed) but follow the same contract:
 * a stable `code` to match on.
 */

/** An option or argument the ledger cannot accept (bad prefix, negative lease, ...). */
export class InvalidLedgerInputError extends Error {
  readonly code = "invalid_ledger_input" as const;
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "InvalidLedgerInputError";
    this.field = field;
  }
}

/**
 * The Redis server is configured in a way that breaks the ledger's guarantee, e.g. an
 * evicting maxmemory-policy: an evicted in-flight row is a forgotten claim, an evicted
 * completed row lets a replay run the tool again.
 */
export class UnsafeServerConfigError extends Error {
  readonly code = "unsafe_server_config" as const;
  readonly setting: string;
  readonly value: string;
  readonly node: string;
  constructor(node: string, setting: string, value: string, message: string) {
    super(`${node}: ${setting}=${value}: ${message}`);
    this.name = "UnsafeServerConfigError";
    this.node = node;
    this.setting = setting;
    this.value = value;
  }
}
