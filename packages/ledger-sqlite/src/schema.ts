import { InvalidLedgerInputError } from "./errors.js";

export const DEFAULT_TABLE = "dispatch_once_ledger";

/** Table names are interpolated into SQL, so only a plain identifier is accepted. */
export const TABLE_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

export function assertTableName(table: string): void {
  if (typeof table !== "string" || !TABLE_NAME_PATTERN.test(table)) {
    throw new InvalidLedgerInputError(
      "table",
      `${JSON.stringify(table)} is not a plain identifier (${TABLE_NAME_PATTERN.source})`,
    );
  }
}

/**
 * The schema, as plain SQL (what `migrate()` runs). One row per key.
 *
 * - WITHOUT ROWID: the key is the only index the hot path touches, so a claim and a
 *   completion write one B-tree instead of a table plus a key index.
 * - `expires_at` is NULL while a row is in flight and `finished_at + retention` after it
 *   ends; the partial index holds only finished rows, so sweeping never scans live claims
 *   and a claim (expires_at NULL) never touches the index.
 * - No CHECK constraints: decoding every row on read is the guard (LEDGER-11), and a row
 *   written by another format version must reach the reader to be refused with ledger_corrupt.
 */
export function schemaSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `CREATE TABLE IF NOT EXISTS "${table}" (
  key              TEXT    NOT NULL PRIMARY KEY,
  v                INTEGER NOT NULL,
  state            TEXT    NOT NULL,
  tool_name        TEXT    NOT NULL,
  effect           TEXT    NOT NULL,
  fence            INTEGER NOT NULL,
  claimed_at       INTEGER NOT NULL,
  owner            TEXT,
  lease_expires_at INTEGER,
  result           TEXT,
  error            TEXT,
  reason           TEXT,
  finished_at      INTEGER,
  expires_at       INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "${table}_expires_at" ON "${table}" (expires_at) WHERE expires_at IS NOT NULL;
`;
}
