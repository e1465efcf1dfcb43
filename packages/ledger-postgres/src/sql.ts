import { createHash } from "node:crypto";
import { InvalidLedgerInputError } from "./errors.js";

export const DEFAULT_SCHEMA = "public";
export const DEFAULT_TABLE = "dispatch_once_ledger";

/**
 * Unquoted-identifier alphabet. Names are also always double-quoted in SQL, so this is
 * belt and braces: it keeps names typeable in psql and rules out quoting tricks entirely.
 * PostgreSQL truncates identifiers at 63 bytes; the table name leaves room for the
 * "_expires_at" suffix of its index name.
 */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_SCHEMA_LENGTH = 63;
const MAX_TABLE_LENGTH = 63 - "_expires_at".length;

export function validateIdentifier(field: "schema" | "table", name: unknown): string {
  const max = field === "schema" ? MAX_SCHEMA_LENGTH : MAX_TABLE_LENGTH;
  if (typeof name !== "string" || !IDENTIFIER.test(name) || name.length > max) {
    throw new InvalidLedgerInputError(
      field,
      `${JSON.stringify(name)} is not a valid name: use 1..${max} characters from [A-Za-z0-9_], not starting with a digit`,
    );
  }
  return name;
}

/** Double-quote an identifier (doubling embedded quotes, which validation already excludes). */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

export interface TableName {
  schema: string;
  table: string;
}

/**
 * Server-clock "now" in epoch milliseconds. statement_timestamp() is fixed for the whole
 * statement (every use inside one statement agrees) and, unlike now(), still advances when
 * the application runs the ledger on a client that is inside its own transaction.
 */
export const NOW_MS = "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint";

/** The DDL, in the exact form `migrate()` runs and schema.sql ships. */
export function schemaSql(name: Partial<TableName> = {}): string {
  const schema = validateIdentifier("schema", name.schema ?? DEFAULT_SCHEMA);
  const table = validateIdentifier("table", name.table ?? DEFAULT_TABLE);
  const qualified = `${quoteIdentifier(schema)}.${quoteIdentifier(table)}`;
  return `-- Dispatch-Once ledger, row format v1 (@dispatch-once/ledger-postgres).
-- Times are epoch milliseconds on the SERVER clock; results are JSON text (never jsonb:
-- replays must return the stored bytes, and jsonb re-serialises).
CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)};

CREATE TABLE IF NOT EXISTS ${qualified} (
  -- fixed-width columns first, so no alignment padding is spent between them
  fence            bigint   NOT NULL,  -- fencing token of the latest claim; +1 on every claim
  claimed_at       bigint   NOT NULL,  -- when the current fence was claimed
  lease_expires_at bigint,             -- in_flight only: after this, the claim may be acted on
  finished_at      bigint,             -- completed, failed, unknown, released
  expires_at       bigint,             -- finished_at + retention: sweep() deletes after this
  v                smallint NOT NULL,  -- row format version; any other value reads as corrupt
  takeover         boolean  NOT NULL DEFAULT false,  -- current fence took over an expired claim
  key              text COLLATE "C" NOT NULL PRIMARY KEY,
  state            text     NOT NULL,  -- in_flight | completed | failed | unknown | released
  tool_name        text     NOT NULL,
  effect           text     NOT NULL,  -- keyed_write | unkeyed_write
  owner            text,               -- who holds / held the claim (diagnostics only)
  result           text,               -- completed: the result's JSON text, byte for byte
  error            text,               -- failed: the StoredError as JSON text
  reason           text                -- unknown: why, e.g. lease_expired
);

-- sweep() walks this index; in-flight rows (expires_at NULL) are not in it.
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_expires_at`)}
  ON ${qualified} (expires_at) WHERE expires_at IS NOT NULL;
`;
}

/** The columns every read returns, in one place so decoders and statements agree. */
export const ROW_COLUMNS =
  "key, v, state, tool_name, effect, fence, takeover, owner, claimed_at, lease_expires_at, finished_at, expires_at, result, error, reason";

export interface Statement {
  /** Prepared-statement name: derived from the text, so two ledgers on one pool never clash. */
  name: string;
  text: string;
}

function statement(op: string, text: string): Statement {
  const digest = createHash("sha256").update(text).digest("hex").slice(0, 16);
  return { name: `dispatch_once_${op}_${digest}`, text };
}

export interface Statements {
  claim: Statement;
  renew: Statement;
  complete: Statement;
  fail: Statement;
  markUnknown: Statement;
  release: Statement;
  owns: Statement;
  lookup: Statement;
  sweep: Statement;
}

/** Every statement the ledger runs, each one round trip. */
export function statements(name: TableName): Statements {
  const t = `${quoteIdentifier(name.schema)}.${quoteIdentifier(name.table)}`;
  const r = (c: string) => c.replace(/(^|, )/g, "$1r.");

  // claim($1 key, $2 tool_name, $3 effect, $4 owner, $5 lease_ms, $6 retention_ms)
  //
  // The insert either creates the row, or, on conflict, LOCKS the current committed row
  // version (ON CONFLICT DO UPDATE locks the conflicting row even when its WHERE is false)
  // and acts on it only if the claim rule allows: released, past retention, or an expired
  // lease. That decision is made on the latest row version under a row lock, never on the
  // statement's snapshot, so of any number of concurrent claimers exactly one acts.
  //
  // When it did not act, the second branch returns the row it saw. A plain SELECT would read
  // the statement's snapshot, which can be OLDER than the locked version; FOR SHARE follows
  // the update chain to the latest version (the one we hold locked, so it is exactly the one
  // the WHERE rejected). If the row was inserted after our snapshot was taken, it is not
  // reachable from the snapshot at all and the statement returns no row: the caller re-runs
  // it (only same-key racers on a brand-new key ever take that second round trip).
  const expiredUnkeyed = "r.state = 'in_flight' AND r.effect = 'unkeyed_write'";
  const claim = statement(
    "claim",
    `WITH acted AS (
  INSERT INTO ${t} AS r (key, v, state, tool_name, effect, fence, takeover, owner, claimed_at, lease_expires_at)
  VALUES ($1, 1, 'in_flight', $2, $3, 1, false, $4, ${NOW_MS}, ${NOW_MS} + $5::bigint)
  ON CONFLICT (key) DO UPDATE SET
    state            = CASE WHEN ${expiredUnkeyed} THEN 'unknown' ELSE 'in_flight' END,
    tool_name        = CASE WHEN ${expiredUnkeyed} THEN r.tool_name ELSE excluded.tool_name END,
    effect           = CASE WHEN ${expiredUnkeyed} THEN r.effect ELSE excluded.effect END,
    fence            = CASE WHEN ${expiredUnkeyed} THEN r.fence ELSE r.fence + 1 END,
    takeover         = CASE WHEN ${expiredUnkeyed} THEN r.takeover ELSE r.state = 'in_flight' END,
    owner            = CASE WHEN ${expiredUnkeyed} THEN r.owner ELSE excluded.owner END,
    claimed_at       = CASE WHEN ${expiredUnkeyed} THEN r.claimed_at ELSE excluded.claimed_at END,
    lease_expires_at = CASE WHEN ${expiredUnkeyed} THEN NULL ELSE excluded.lease_expires_at END,
    finished_at      = CASE WHEN ${expiredUnkeyed} THEN excluded.claimed_at END,
    expires_at       = CASE WHEN ${expiredUnkeyed} THEN excluded.claimed_at + $6::bigint END,
    reason           = CASE WHEN ${expiredUnkeyed} THEN 'lease_expired' END,
    result           = NULL,
    error            = NULL
  WHERE r.v = 1 AND (
       r.state = 'released'
    OR (r.state IN ('completed', 'failed', 'unknown') AND r.expires_at <= excluded.claimed_at)
    OR (r.state = 'in_flight' AND r.effect IN ('keyed_write', 'unkeyed_write')
        AND r.lease_expires_at <= excluded.claimed_at)
  )
  RETURNING ${r(ROW_COLUMNS)}
)
SELECT true AS acted, ${ROW_COLUMNS} FROM acted
UNION ALL
SELECT false AS acted, ${ROW_COLUMNS}
  FROM (SELECT ${ROW_COLUMNS} FROM ${t} WHERE key = $1 FOR SHARE) AS held
 WHERE NOT EXISTS (SELECT 1 FROM acted)`,
  );

  // Every owner transition is one conditional UPDATE on the fencing token: a stale owner
  // matches no row and changes nothing (LEDGER-5). A row of another format version is
  // never written.
  const owned = "key = $1 AND fence = $2 AND state = 'in_flight' AND v = 1";
  const finish = (state: string, column: string | null) =>
    `UPDATE ${t} SET state = '${state}', ${column === null ? "" : `${column} = $3, `}lease_expires_at = NULL, ` +
    `finished_at = ${NOW_MS}, expires_at = ${NOW_MS} + $${column === null ? 3 : 4}::bigint WHERE ${owned}`;

  return {
    claim,
    renew: statement(
      "renew",
      `UPDATE ${t} SET lease_expires_at = ${NOW_MS} + $3::bigint WHERE ${owned} RETURNING lease_expires_at`,
    ),
    complete: statement("complete", finish("completed", "result")),
    fail: statement("fail", finish("failed", "error")),
    markUnknown: statement("unknown", finish("unknown", "reason")),
    release: statement("release", finish("released", null)),
    owns: statement("owns", `SELECT 1 FROM ${t} WHERE ${owned}`),
    lookup: statement("lookup", `SELECT ${ROW_COLUMNS}, ${NOW_MS} AS now_ms FROM ${t} WHERE key = $1`),
    // Batched so a large backlog never holds many row locks at once; SKIP LOCKED keeps the
    // sweeper out of the way of claims, and the outer WHERE re-checks each row's latest
    // version, so a row re-claimed meanwhile is never deleted.
    sweep: statement(
      "sweep",
      `WITH doomed AS (
  SELECT key FROM ${t}
   WHERE expires_at <= ${NOW_MS} AND state <> 'in_flight'
   ORDER BY expires_at LIMIT $1::int FOR UPDATE SKIP LOCKED
)
DELETE FROM ${t} AS r USING doomed
 WHERE r.key = doomed.key AND r.state <> 'in_flight' AND r.expires_at <= ${NOW_MS}`,
    ),
  };
}
