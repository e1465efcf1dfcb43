import { InvalidLedgerInputError } from "@dispatch-once/core";

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
 * - `seq` (the rowid) is the claim order: a first claim appends (max + 1) and a re-claim
 *   moves the row to the end, so rows sit in order of `claimed_at` and `sweep()` walks from
 *   the front until it meets a row claimed within the retention period. That replaces a
 *   secondary index on `expires_at`, which would cost a second B-tree write per completion.
 * - `key` is UNIQUE: the claim's `INSERT ... ON CONFLICT (key) DO NOTHING` is the atomic step.
 * - Small columns first and the two large ones, `request` and `result`, last, so walking
 *   the table never reads their overflow pages.
 * - `request` (LEDGER-21) is nullable only because `ALTER TABLE ... ADD COLUMN` cannot add a
 *   NOT NULL column without a default to a table that has rows; the adapter writes it with
 *   every row, and a NULL one (a row of an older version) reads as ledger_corrupt.
 * - \`claim_id\` (LEDGER-26) is the claim id of the in-flight row's claim, when the claimant gave
 *   one (NULL once the row finishes): a claim that meets its own claim id is the same claim sent
 *   again, and takes the row with its fence. Never returned in rows.
 * - No CHECK constraints: decoding every row on read is the guard (LEDGER-11), and a row
 *   written by another format version must reach the reader to be refused with ledger_corrupt.
 * - One partial index, on the lease of in-flight rows only, for listExpiredInFlight(): it holds
 *   the calls running now (plus expired claims nobody came back for), never the finished rows,
 *   so it stays a few pages whatever the table size. Its price is one small index write when a
 *   claim starts and one when it finishes (and on renew).
 */
export function schemaSql(table: string = DEFAULT_TABLE, options: { inFlightIndex?: boolean } = {}): string {
  assertTableName(table);
  return `CREATE TABLE IF NOT EXISTS "${table}" (
  seq              INTEGER PRIMARY KEY,
  key              TEXT    NOT NULL UNIQUE,
  v                INTEGER NOT NULL,
  state            TEXT    NOT NULL,
  tool_name        TEXT    NOT NULL,
  effect           TEXT    NOT NULL,
  fence            INTEGER NOT NULL,
  claimed_at       INTEGER NOT NULL,
  owner            TEXT,
  claim_id         TEXT,
  lease_expires_at INTEGER,
  finished_at      INTEGER,
  expires_at       INTEGER,
  reason           TEXT,
  error            TEXT,
  request          TEXT,
  result           TEXT
);
${options.inFlightIndex === false ? "" : inFlightIndexSql(table)}`;
}

/**
 * The partial index listExpiredInFlight() reads (part of schemaSql() unless
 * `inFlightIndex: false`). Building it reads the whole table once, under the write lock.
 */
export function inFlightIndexSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `CREATE INDEX IF NOT EXISTS "${table}_in_flight" ON "${table}" (lease_expires_at) WHERE state = 'in_flight';\n`;
}

/**
 * The column added after the first release. `migrate()` adds it to a table created before
 * (SQLite has no `ADD COLUMN IF NOT EXISTS`: it reads `PRAGMA table_info` first).
 */
export function addRequestColumnSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `ALTER TABLE "${table}" ADD COLUMN request TEXT;\n`;
}

/**
 * The claim id column (LEDGER-26), added after the request column. \`migrate()\` adds it to a
 * table created before (at the end of the table: small, and NULL in every existing row).
 */
export function addClaimIdColumnSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `ALTER TABLE "${table}" ADD COLUMN claim_id TEXT;\n`;
}
