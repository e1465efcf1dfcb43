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
  return `${tableSql(table)}${options.inFlightIndex === false ? "" : inFlightIndexSql(table)}${listIndexesSql(table)}${auditTableSql(table)}${retiredTableSql(table)}`;
}

/** The table alone: what an older table is brought up to with the ADD COLUMN statements before its indexes. */
export function tableSql(table: string = DEFAULT_TABLE): string {
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
  result           TEXT,
  conversation_id  TEXT,
  turn_index       INTEGER
);
`;
}

/**
 * The listing indexes (LIST-6): by state, by tool and by conversation, each ordered by the
 * time of the row's last transition (\`coalesce(finished_at, claimed_at)\`: finish sets
 * finished_at, a claim clears it) and the key, which is listRows()'s order and keyset cursor.
 * A listing filtered by any of the three reads only its slice of one index, never the table.
 * Their price is three index writes per claim and per finish.
 */
export function listIndexesSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  const since = "coalesce(finished_at, claimed_at)";
  return `CREATE INDEX IF NOT EXISTS "${table}_by_state" ON "${table}" (state, ${since}, key);
CREATE INDEX IF NOT EXISTS "${table}_by_tool" ON "${table}" (tool_name, ${since}, key);
CREATE INDEX IF NOT EXISTS "${table}_by_conversation" ON "${table}" (conversation_id, ${since}, key) WHERE conversation_id IS NOT NULL;
`;
}

/**
 * The audit trail (RESOLVE-7): one row per audited transition (resolution, reconciliation, a
 * row turned unknown), read by key in insertion order. Entries of a key go when sweep deletes
 * its row, so they are kept at least as long as the row.
 */
export function auditTableSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `CREATE TABLE IF NOT EXISTS "${table}_audit" (
  id         INTEGER PRIMARY KEY,
  key        TEXT    NOT NULL,
  at         INTEGER NOT NULL,
  actor      TEXT    NOT NULL,
  action     TEXT    NOT NULL,
  from_state TEXT    NOT NULL,
  to_state   TEXT    NOT NULL,
  fence      INTEGER NOT NULL,
  reason     TEXT    NOT NULL,
  outcome    TEXT
);
CREATE INDEX IF NOT EXISTS "${table}_audit_by_key" ON "${table}_audit" (key, id);
`;
}

/**
 * Retired claim ids (LEDGER-28): a claim id its dispatcher gave up on, refused to every claim of
 * the key until \`retired_until\` (store clock) has passed, row or no row. Apart from the rows,
 * so listings, lookups and sweep's count never see them. WITHOUT ROWID: a claim that carries a
 * claim id checks it with one search of this one B-tree. The index on \`retired_until\` lets
 * sweep() forget the expired ones in bounded batches; it costs one small write per retire, which
 * happens only for a claim that met ledger_unavailable.
 */
export function retiredTableSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `CREATE TABLE IF NOT EXISTS "${table}_retired" (
  key           TEXT    NOT NULL,
  claim_id      TEXT    NOT NULL,
  retired_until INTEGER NOT NULL,
  PRIMARY KEY (key, claim_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "${table}_retired_by_until" ON "${table}_retired" (retired_until);
`;
}

/**
 * The conversation columns (LIST-3), added after the claim id. \`migrate()\` adds them to a
 * table created before; existing rows have none (NULL) and list without a conversation.
 */
export function addConversationColumnsSql(table: string = DEFAULT_TABLE): string {
  assertTableName(table);
  return `ALTER TABLE "${table}" ADD COLUMN conversation_id TEXT;\nALTER TABLE "${table}" ADD COLUMN turn_index INTEGER;\n`;
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
