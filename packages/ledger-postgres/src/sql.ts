import { createHash } from "node:crypto";
import { InvalidLedgerInputError } from "./errors.js";

export const DEFAULT_SCHEMA = "public";
export const DEFAULT_TABLE = "dispatch_once_ledger";

/**
 * Unquoted-identifier alphabet. Names are also always double-quoted in SQL, so this is
 * belt and braces: it keeps names typeable in psql and rules out quoting tricks entirely.
 * PostgreSQL truncates identifiers at 63 bytes; the table name leaves room for the
 * "_claimed_at" suffix of its longest index name.
 */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_SCHEMA_LENGTH = 63;
const MAX_TABLE_LENGTH = 63 - "_claimed_at".length;

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
 * statement (every use inside one statement agrees).
 */
export const NOW_MS = "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint";

/** The audit table (RESOLVE-7): `<table>_audit`, beside the ledger table. */
export function auditTableName(name: TableName): string {
  return `${quoteIdentifier(name.schema)}.${quoteIdentifier(`${name.table}_audit`)}`;
}

export function claimFunctionName(name: TableName): string {
  return `${quoteIdentifier(name.schema)}.${quoteIdentifier(`${name.table}_claim`)}`;
}

/** The retired claim ids (LEDGER-28): `<table>_retired`, beside the ledger table. */
export function retiredTableName(name: TableName): string {
  return `${quoteIdentifier(name.schema)}.${quoteIdentifier(`${name.table}_retired`)}`;
}

export function retireFunctionName(name: TableName): string {
  return `${quoteIdentifier(name.schema)}.${quoteIdentifier(`${name.table}_retire`)}`;
}

export function isRetiredFunctionName(name: TableName): string {
  return `${quoteIdentifier(name.schema)}.${quoteIdentifier(`${name.table}_is_retired`)}`;
}

/**
 * Whether the key's claim id is retired (LEDGER-28). A VOLATILE function, not a subquery, for
 * one reason: the claim's UPDATEs call it in their WHERE, and when such an UPDATE waited for a
 * retire that held the row, PostgreSQL re-evaluates the WHERE on the newest row version
 * (EvalPlanQual) and the function's query takes a fresh snapshot there (READ COMMITTED), which
 * sees the retire's commit. A subquery would keep the UPDATE's old snapshot and miss it.
 */
export function isRetiredFunctionSql(name: TableName): string {
  return `CREATE OR REPLACE FUNCTION ${isRetiredFunctionName(name)}(p_key text, p_claim_id text, p_now_ms bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $is_retired$
BEGIN
  RETURN EXISTS (SELECT 1 FROM ${retiredTableName(name)} AS d
                  WHERE d.key = p_key AND d.claim_id = p_claim_id AND d.retired_until > p_now_ms);
END
$is_retired$;`;
}

/**
 * retire (LEDGER-28), one round trip: the claim id is recorded as retired for the retention and,
 * with p_release, the key's row in flight under it is released as release(fence) would (fence,
 * request and claim id kept). Returns '1' (released), '0' (not), or 't' (refused: the caller's
 * transaction has written, LEDGER-22).
 *
 * Race-free against a claim carrying the same claim id, which reads the retired ids without any
 * lock (the claim must stay a read for every claim that finds a row it cannot take). Both write
 * the key's slot in the ledger table, and one waits for the other:
 *  - the retire upserts the key: INSERT ... ON CONFLICT (key) DO UPDATE waits for a claim still
 *    inserting the key, and then writes a new version of the row (a no-op SET) that a claim's
 *    UPDATE waits for. A claim that got there first has committed by then: the retire sees its
 *    row and releases it.
 *  - a claim that got there second re-checks after waiting: its UPDATE's WHERE calls the
 *    is_retired function again on the new row version (fresh snapshot), and its INSERT of a new
 *    key is followed by the same lookup, which undoes the INSERT when the id is retired.
 * When the key has no row, the upsert inserts a placeholder (v = 0, state 'retiring') that only
 * holds the key until the commit: it is deleted in the same transaction, so nobody ever sees it.
 */
export function retireFunctionSql(name: TableName): string {
  const t = `${quoteIdentifier(name.schema)}.${quoteIdentifier(name.table)}`;
  return `CREATE OR REPLACE FUNCTION ${retireFunctionName(name)}(p_key text, p_claim_id text, p_release boolean, p_retention_ms bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $retire$
#variable_conflict use_column
DECLARE
  now_ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  held text;
BEGIN
  -- As the claim: inside a transaction that has written, a rollback would undo the retire.
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RETURN 't';
  END IF;
  -- Retired for the retention from now; retiring again never shortens it.
  INSERT INTO ${retiredTableName(name)} AS d (retired_until, key, claim_id)
    VALUES (now_ms + p_retention_ms, p_key, p_claim_id)
    ON CONFLICT (key, claim_id) DO UPDATE SET retired_until = greatest(d.retired_until, excluded.retired_until);
  -- Hold the key (see above). A row of another format version is locked, never written.
  INSERT INTO ${t} AS r (key, v, state, tool_name, effect, fence, claimed_at)
    VALUES (p_key, 0, 'retiring', '', '', 0, now_ms)
    ON CONFLICT (key) DO UPDATE SET fence = r.fence WHERE r.v = 1
    RETURNING r.state INTO held;
  IF held = 'retiring' THEN
    DELETE FROM ${t} AS r WHERE r.key = p_key;  -- the placeholder: the key had no row
    RETURN '0';
  END IF;
  IF p_release THEN
    -- In flight under this claim id, lease live or expired: released as release(fence) would.
    UPDATE ${t} AS r SET state = 'released', lease_expires_at = NULL, finished_at = now_ms, expires_at = now_ms + p_retention_ms
      WHERE r.key = p_key AND r.v = 1 AND r.state = 'in_flight' AND r.claim_id = p_claim_id;
    IF FOUND THEN
      RETURN '1';
    END IF;
  END IF;
  RETURN '0';
END
$retire$;`;
}

/**
 * The claim, as a PL/pgSQL function: one round trip on every path, including the losers
 * of a race, and the cheapest possible first statement for the common case (a new key).
 *
 * Why a function and not one CTE statement (INSERT ... DO NOTHING, then a conditional
 * UPDATE, then a SELECT, all in one WITH): every part of a single statement shares ONE
 * snapshot. A row a racer inserted after that snapshot conflicts with our INSERT but is
 * invisible to our UPDATE and SELECT, so the statement returns nothing and has to be sent
 * again; a row a racer took over after the snapshot comes back in its stale, claimable
 * version. ON CONFLICT DO UPDATE (which does see the latest version) instead locks the row
 * even when its WHERE is false, so every claim that merely finds an existing row would
 * write a lock, WAL and a commit flush. And the CTE's extra UPDATE node costs about as much
 * executor time as the INSERT itself. Inside a VOLATILE function each statement takes a
 * fresh snapshot (READ COMMITTED), so the steps below always see the latest committed row:
 *
 *  1. INSERT ... ON CONFLICT DO NOTHING: the key was absent -> claimed, fence 1.
 *  2. Otherwise read the row (fresh snapshot, no lock, no write). If it is not claimable
 *     (a live in-flight row, a terminal row within retention, or a corrupt row) it is the
 *     answer: a claim that finds such a row writes nothing. If it was swept meanwhile, loop.
 *  3. If it is claimable (released, past retention, expired lease): a conditional UPDATE on
 *     the claim rule. The UPDATE locks the row and re-checks the WHERE on its latest version
 *     (EvalPlanQual), so of concurrent claimers that all saw it claimable exactly one acts:
 *     a new fence (keyed_write takeover, or a re-claim), or, for an expired unkeyed_write
 *     claim, the row becomes unknown. The others find the WHERE false and loop to step 1.
 * Rows of another format version (v <> 1), and rows without a request (written before the
 * column existed), are never written, only returned (as corrupt).
 *
 * The request (LEDGER-21): the INSERT stores the claimant's; a re-claim of a released row,
 * a takeover and the expiry to unknown keep the stored one; a row past retention is
 * forgotten, so its claim stores the claimant's. A claim by the UPDATE returns the stored
 * request in the answer, so the owner re-runs the first request without a second round trip.
 *
 * Before anything else the function refuses to run inside a transaction that has already
 * written (it has a transaction id): a rollback there would undo the claim after the tool ran
 * (LEDGER-22). A transaction that has only read has no id yet; the adapter catches that case
 * from the driver's transaction status before it sends the claim.
 */
export function claimFunctionSql(name: TableName): string {
  const t = `${quoteIdentifier(name.schema)}.${quoteIdentifier(name.table)}`;
  const a = auditTableName(name);
  const unk = "r.state = 'in_flight' AND r.effect = 'unkeyed_write'";
  // A claim meeting its own claim id on the in-flight row is that claim sent again (LEDGER-26).
  const own = "(p_claim_id IS NOT NULL AND r.v = 1 AND r.request IS NOT NULL AND r.state = 'in_flight' AND r.claim_id IS NOT DISTINCT FROM p_claim_id)";
  // A claim meeting the released row its own claim id was released under is a late copy of a
  // claim that is over (its reply was lost and it was released by its claim id): refused (LEDGER-27).
  const released = "(p_claim_id IS NOT NULL AND r.v = 1 AND r.state = 'released' AND r.expires_at > now_ms AND r.claim_id IS NOT DISTINCT FROM p_claim_id)";
  // A retired claim id takes nothing (LEDGER-28): one primary-key lookup, only for a claim with an id.
  const rt = retiredTableName(name);
  const retired = `(p_claim_id IS NOT NULL AND EXISTS (SELECT 1 FROM ${rt} AS d WHERE d.key = p_key AND d.claim_id = p_claim_id AND d.retired_until > now_ms))`;
  // The same, inside an UPDATE's WHERE: re-evaluated with a fresh snapshot after waiting for a retire.
  const notRetired = `(p_claim_id IS NULL OR NOT ${isRetiredFunctionName(name)}(p_key, p_claim_id, now_ms))`;
  const claimable = `(r.v = 1 AND r.request IS NOT NULL AND (
             r.state = 'released'
          OR (r.state IN ('completed', 'failed', 'unknown') AND r.expires_at <= now_ms)
          OR (r.state = 'in_flight' AND r.effect IN ('keyed_write', 'unkeyed_write')
              AND r.lease_expires_at <= now_ms)))`;
  // It returns ONE text value, not a row: a function scan with several output columns
  // costs ~10-15 us more per call than a scalar (measured), on the hottest statement.
  //   'c<fence> <lease_expires_at> <0|1 takeover>'            claimed, storing the claimant's own request
  //   'c<fence> <lease_expires_at> <0|1 takeover> <request>'  claimed by the UPDATE: everything after
  //                                                           the third space is the stored request
  //   'e<row as JSON>'     existing (live, terminal, just turned unknown, or corrupt)
  //   't'                  refused: the caller's transaction has written (LEDGER-22)
  //   's<fence>'           refused: the row was released under this claim id (LEDGER-27)
  //   'r<fence>'           refused: this claim id is retired (LEDGER-28); fence 0 without a row
  // to_json escapes strings losslessly, so the stored result's and request's bytes survive;
  // bigints are JSON numbers, exact below 2^53.
  return `CREATE OR REPLACE FUNCTION ${claimFunctionName(name)}(
  p_key text, p_tool_name text, p_effect text, p_owner text, p_lease_ms bigint, p_retention_ms bigint,
  p_request text, p_claim_id text, p_conversation_id text, p_turn_index bigint)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $claim$
#variable_conflict use_column
DECLARE
  now_ms bigint;
  claimed_fence bigint;
  claimed_lease bigint;
  claimed_takeover boolean;
  claimed_request text;
  is_claimable boolean;
  is_own boolean;
  is_released boolean;
  is_forgotten boolean;
  is_retired boolean;
  held text;
BEGIN
  -- Inside a transaction that has written, a rollback would undo the claim after the tool
  -- ran: refuse before writing, and leave the caller's transaction as it was.
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RETURN 't';
  END IF;
  FOR attempt IN 1..100 LOOP
    now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;

    INSERT INTO ${t} AS r (key, v, state, tool_name, effect, fence, takeover, owner, claim_id, claimed_at, lease_expires_at, request, conversation_id, turn_index)
      VALUES (p_key, 1, 'in_flight', p_tool_name, p_effect, 1, false, p_owner, p_claim_id, now_ms, now_ms + p_lease_ms, p_request, p_conversation_id, p_turn_index)
      ON CONFLICT (key) DO NOTHING
      RETURNING r.lease_expires_at INTO claimed_lease;
    IF FOUND THEN
      -- A retired claim id creates nothing either (LEDGER-28). Looked up after the INSERT: a
      -- retire running meanwhile held the key, so the INSERT waited for its commit and this sees it.
      -- (A claim without a claim id tests one variable, a simple expression: no query.)
      IF p_claim_id IS NOT NULL THEN
        IF ${retired} THEN
          DELETE FROM ${t} AS r WHERE r.key = p_key;  -- our own INSERT: undone, nothing changed
          RETURN 'r0';
        END IF;
      END IF;
      RETURN 'c1 ' || claimed_lease || ' 0';  -- the stored request is the caller's own: not sent back
    END IF;

    -- The key exists (and, if a racer was inserting it, that racer has committed: the INSERT
    -- waited for it). Read it with a fresh snapshot, without locking or writing.
    SELECT ${claimable}, CASE WHEN ${claimable} IS TRUE THEN NULL ELSE to_json(r)::text END, ${own}, ${released}, r.fence,
           r.state <> 'in_flight' AND r.expires_at <= now_ms, ${retired}
      INTO is_claimable, held, is_own, is_released, claimed_fence, is_forgotten, is_retired
      FROM ${t} AS r WHERE r.key = p_key;
    IF NOT FOUND THEN
      CONTINUE;  -- swept since the INSERT: try the INSERT again
    END IF;
    IF is_retired THEN
      -- A late copy of a claim its dispatch gave up on: whatever the row, before LEDGER-26 (LEDGER-28).
      RETURN 'r' || CASE WHEN is_forgotten IS TRUE THEN 0 ELSE claimed_fence END;
    END IF;
    IF is_released THEN
      RETURN 's' || claimed_fence;  -- a late copy of a released claim: it must not take the row again
    END IF;
    IF is_own THEN
      -- The same claim sent again (its reply was lost): it holds the row, live or expired, with
      -- its fence; the lease restarts from now (LEDGER-26). Re-checked under the row lock.
      UPDATE ${t} AS r SET lease_expires_at = now_ms + p_lease_ms
        WHERE r.key = p_key AND ${own} AND ${notRetired}
        RETURNING r.fence, r.lease_expires_at, r.request INTO claimed_fence, claimed_lease, claimed_request;
      IF FOUND THEN
        RETURN 'c' || claimed_fence || ' ' || claimed_lease || ' 0 ' || claimed_request;
      END IF;
      CONTINUE;  -- acted on meanwhile (finished, taken over): look again
    END IF;
    IF is_claimable IS NOT TRUE THEN
      RETURN 'e' || held;  -- live in-flight, terminal within retention, or corrupt
    END IF;

    UPDATE ${t} AS r SET
        state            = CASE WHEN ${unk} THEN 'unknown' ELSE 'in_flight' END,
        tool_name        = CASE WHEN ${unk} THEN r.tool_name ELSE p_tool_name END,
        effect           = CASE WHEN ${unk} THEN r.effect ELSE p_effect END,
        fence            = CASE WHEN ${unk} THEN r.fence ELSE r.fence + 1 END,
        takeover         = CASE WHEN ${unk} THEN r.takeover ELSE r.state = 'in_flight' END,
        owner            = CASE WHEN ${unk} THEN r.owner ELSE p_owner END,
        claim_id         = CASE WHEN ${unk} THEN r.claim_id ELSE p_claim_id END,
        claimed_at       = CASE WHEN ${unk} THEN r.claimed_at ELSE now_ms END,
        lease_expires_at = CASE WHEN ${unk} THEN NULL ELSE now_ms + p_lease_ms END,
        finished_at      = CASE WHEN ${unk} THEN now_ms END,
        expires_at       = CASE WHEN ${unk} THEN now_ms + p_retention_ms END,
        reason           = CASE WHEN ${unk} THEN 'lease_expired' END,
        -- kept by a re-claim, a takeover and the expiry to unknown; a row past retention
        -- (released ones too) is forgotten, so its claim stores the claimant's request (LEDGER-21)
        request          = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_request ELSE r.request END,
        -- the conversation and turn go with the request (LIST-3)
        conversation_id  = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_conversation_id ELSE r.conversation_id END,
        turn_index       = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_turn_index ELSE r.turn_index END,
        result           = NULL,
        error            = NULL
      WHERE r.key = p_key AND ${claimable} AND ${notRetired}
      RETURNING r.fence, r.lease_expires_at, r.takeover, r.request,
                CASE WHEN r.state = 'in_flight' THEN NULL ELSE to_json(r)::text END
        INTO claimed_fence, claimed_lease, claimed_takeover, claimed_request, held;
    IF FOUND THEN
      IF held IS NOT NULL THEN
        -- An expired unkeyed_write claim, now unknown: audited with the transition (RESOLVE-7).
        INSERT INTO ${a} (key, at, actor, action, from_state, to_state, fence, reason)
          VALUES (p_key, now_ms, p_owner, 'lease_expired', 'in_flight', 'unknown', claimed_fence, 'lease_expired');
        RETURN 'e' || held;
      END IF;
      IF is_forgotten THEN
        DELETE FROM ${a} WHERE key = p_key;  -- a forgotten row's trail goes with it (LEDGER-19)
      END IF;
      RETURN 'c' || claimed_fence || ' ' || claimed_lease || CASE WHEN claimed_takeover THEN ' 1 ' ELSE ' 0 ' END
        || claimed_request;
    END IF;
    -- A racer acted on the claimable row first (the UPDATE re-checked and found it live): look again.
  END LOOP;
  RAISE EXCEPTION 'claim of % lost 100 races in a row', p_key USING ERRCODE = '40001';
END
$claim$;`;
}

/** The DDL, in the exact form `migrate()` runs and schema.sql ships. */
export interface SchemaOptions extends Partial<TableName> {
  /**
   * Create the table hash-partitioned by key into this many partitions (2..64). Uniqueness
   * of the key stays global, because key is the partition key; each partition is vacuumed
   * and indexed on its own. Only used when the table does not exist yet.
   * @default no partitioning: a plain table
   * @example schemaSql({ schema: "app", table: "tool_calls", hashPartitions: 8 })
   * @example await ledger.migrate({ hashPartitions: 8 })
   */
  hashPartitions?: number;
  /**
   * Create the partial index on in-flight rows that listExpiredInFlight() reads (default true).
   * Its price: finishing a call is no longer a HOT update (measured 0.95-0.96x claim+complete,
   * CPU-bound). With false it is not created (an existing one is left) and the listing scans.
   * @default true
   * @example schemaSql({ table: "tool_calls", inFlightIndex: false })
   * @example await ledger.migrate({ inFlightIndex: false })
   */
  inFlightIndex?: boolean;
}

export function schemaSql(options: SchemaOptions = {}): string {
  const schema = validateIdentifier("schema", options.schema ?? DEFAULT_SCHEMA);
  const table = validateIdentifier("table", options.table ?? DEFAULT_TABLE);
  if (options.inFlightIndex !== undefined && typeof options.inFlightIndex !== "boolean") {
    throw new InvalidLedgerInputError("inFlightIndex", `${String(options.inFlightIndex)} is not a boolean`);
  }
  const partitions = options.hashPartitions;
  if (partitions !== undefined && (!Number.isSafeInteger(partitions) || partitions < 2 || partitions > 64)) {
    throw new InvalidLedgerInputError("hashPartitions", `${String(partitions)} is not an integer in 2..64`);
  }
  const qualified = `${quoteIdentifier(schema)}.${quoteIdentifier(table)}`;
  const partitionDdl =
    partitions === undefined
      ? ""
      : `\n-- Hash partitions by key: uniqueness stays global (key is the partition key).\n` +
        Array.from(
          { length: partitions },
          (_, i) =>
            `CREATE TABLE IF NOT EXISTS ${quoteIdentifier(schema)}.${quoteIdentifier(`${table}_p${i}`)}\n` +
            `  PARTITION OF ${qualified} FOR VALUES WITH (MODULUS ${partitions}, REMAINDER ${i});\n`,
        ).join("");
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
  reason           text,               -- unknown: why, e.g. lease_expired
  request          text,               -- the first claim's request, byte for byte (LEDGER-21)
  claim_id         text                -- the claim id of the row's claim, if it gave one (LEDGER-26); a released row refuses it (LEDGER-27); last, as when added
)${partitions === undefined ? "" : " PARTITION BY HASH (key)"};
${partitionDdl}
-- A table created before the request column gets it here (last, as in a new table). It is
-- nullable only so that it can be added to a table with rows: every row the ledger writes
-- has one, and a row without one (an older version's) reads as ledger_corrupt. Checked
-- first because ALTER TABLE takes an ACCESS EXCLUSIVE lock even when the column exists,
-- and claims would queue behind it on every migrate().
DO $add_request$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '${qualified}'::regclass AND attname = 'request' AND NOT attisdropped) THEN
    ALTER TABLE ${qualified} ADD COLUMN request text;
  END IF;
END
$add_request$;

-- The claim id column (LEDGER-26), added to a table created before it, the same way.
DO $add_claim_id$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '${qualified}'::regclass AND attname = 'claim_id' AND NOT attisdropped) THEN
    ALTER TABLE ${qualified} ADD COLUMN claim_id text;
  END IF;
END
$add_claim_id$;

-- The conversation columns (LIST-3), added to a table created before them, the same way.
DO $add_conversation$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '${qualified}'::regclass AND attname = 'conversation_id' AND NOT attisdropped) THEN
    ALTER TABLE ${qualified} ADD COLUMN conversation_id text COLLATE "C", ADD COLUMN turn_index bigint;
  END IF;
END
$add_conversation$;

-- listRows() reads these (LIST-6): by state, by tool and by conversation, each in the listing's
-- order (the last transition: finish sets finished_at, a claim clears it; then the key), so a
-- filtered page is one index range, never a scan. Their price: three index writes per claim and
-- per finish (finishing is not a HOT update anyway, see the in-flight index).
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_lst_state`)}
  ON ${qualified} (state, (coalesce(finished_at, claimed_at)), key);
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_lst_tool`)}
  ON ${qualified} (tool_name, (coalesce(finished_at, claimed_at)), key);
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_lst_conv`)}
  ON ${qualified} (conversation_id, (coalesce(finished_at, claimed_at)), key) WHERE conversation_id IS NOT NULL;

-- The audit trail (RESOLVE-7): one row per audited transition, read by key in order; sweep()
-- deletes a key's entries with its row.
CREATE TABLE IF NOT EXISTS ${auditTableName({ schema, table })} (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at         bigint NOT NULL,
  fence      bigint NOT NULL,
  key        text COLLATE "C" NOT NULL,
  actor      text NOT NULL,
  action     text NOT NULL,
  from_state text NOT NULL,
  to_state   text NOT NULL,
  reason     text NOT NULL,
  outcome    text
);
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_audit_key`)}
  ON ${auditTableName({ schema, table })} (key, id);

-- Retired claim ids (LEDGER-28): a claim carrying one is refused until retired_until (server
-- clock), whether the key has a row or not. Written only by retire() (rare: a dispatch whose
-- claim met ledger_unavailable); a claim with a claim id reads it by primary key, one without
-- never reads it. Not rows: sweep() forgets entries past retired_until without counting them.
CREATE TABLE IF NOT EXISTS ${retiredTableName({ schema, table })} (
  retired_until bigint NOT NULL,  -- retire time + retention: refused until then, then forgotten
  key           text COLLATE "C" NOT NULL,
  claim_id      text COLLATE "C" NOT NULL,
  PRIMARY KEY (key, claim_id)
);
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_rt_until`)}
  ON ${retiredTableName({ schema, table })} (retired_until);

-- sweep() walks this index oldest first. It is on claimed_at, which finishing a call does
-- not change; an index on expires_at would cost every finish one more index insert.
CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_claimed_at`)}
  ON ${qualified} (claimed_at);

-- listExpiredInFlight() reads this index: only in-flight rows are in it (the calls running now,
-- plus any expired claim nobody came back for), so it stays small and the listing never scans
-- finished rows. Its price: finishing a call changes the state, which this index's predicate reads,
-- so complete/fail/release/markUnknown (and renew) are no longer HOT updates (see the README).
${options.inFlightIndex === false ? "-- (no in-flight index: inFlightIndex: false)" : `CREATE INDEX IF NOT EXISTS ${quoteIdentifier(`${table}_in_flight`)}
  ON ${qualified} (lease_expires_at) WHERE state = 'in_flight';`}

-- claim(): the whole claim rule in one round trip (see the package README). The previous
-- version's function (six arguments) wrote rows without a request: it goes.
DROP FUNCTION IF EXISTS ${claimFunctionName({ schema, table })}(text, text, text, text, bigint, bigint);
${isRetiredFunctionSql({ schema, table })}
${claimFunctionSql({ schema, table })}

-- retire(): LEDGER-28 in one round trip (see the package README).
${retireFunctionSql({ schema, table })}

-- The previous versions' claims stay callable while processes of those versions still run, as
-- this claim without what they did not send: eight arguments (no conversation, before issue 15)
-- and seven (no claim id either). The rule is the new one (a re-claim clears the row's claim id,
-- so an old process's claim is never taken for a new process's).
DROP FUNCTION IF EXISTS ${claimFunctionName({ schema, table })}(text, text, text, text, bigint, bigint, text, text);
CREATE FUNCTION ${claimFunctionName({ schema, table })}(
  p_key text, p_tool_name text, p_effect text, p_owner text, p_lease_ms bigint, p_retention_ms bigint, p_request text, p_claim_id text)
RETURNS text LANGUAGE sql VOLATILE AS $claim8$
  SELECT ${claimFunctionName({ schema, table })}(p_key, p_tool_name, p_effect, p_owner, p_lease_ms, p_retention_ms, p_request, p_claim_id, NULL::text, NULL::bigint)
$claim8$;
CREATE OR REPLACE FUNCTION ${claimFunctionName({ schema, table })}(
  p_key text, p_tool_name text, p_effect text, p_owner text, p_lease_ms bigint, p_retention_ms bigint, p_request text)
RETURNS text LANGUAGE sql VOLATILE AS $claim7$
  SELECT ${claimFunctionName({ schema, table })}(p_key, p_tool_name, p_effect, p_owner, p_lease_ms, p_retention_ms, p_request, NULL::text, NULL::text, NULL::bigint)
$claim7$;
`;
}

/** The columns every read returns, in one place so decoders and statements agree. */
export const ROW_COLUMNS =
  "key, v, state, tool_name, effect, fence, takeover, owner, claimed_at, lease_expires_at, finished_at, expires_at, result, error, reason, request, conversation_id, turn_index";

/** The time of a row's last transition: listRows()'s order and olderThanMs basis (LIST-2). */
export const SINCE = "coalesce(finished_at, claimed_at)";

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
  expiredInFlight: Statement;
  resolve: Statement;
  auditTrail: Statement;
  retire: Statement;
}

/** Every statement the ledger runs, each one round trip. */
export function statements(name: TableName): Statements {
  const t = `${quoteIdentifier(name.schema)}.${quoteIdentifier(name.table)}`;

  // One round trip: the whole claim rule runs server-side in the claim function (see
  // claimFunctionSql for why it is a function and not a single CTE).
  const claim = statement("claim", `SELECT ${claimFunctionName(name)}($1, $2, $3, $4, $5::bigint, $6::bigint, $7, $8::text, $9::text, $10::bigint)`);
  const a = auditTableName(name);
  const rt = retiredTableName(name);

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
    // The transition and its audit entry in one statement (RESOLVE-7): the INSERT's row count is the UPDATE's.
    markUnknown: statement(
      "unknown",
      `WITH u AS (${finish("unknown", "reason")} RETURNING key, fence, owner, finished_at)
INSERT INTO ${a} (key, at, actor, action, from_state, to_state, fence, reason)
SELECT key, finished_at, owner, 'marked_unknown', 'in_flight', 'unknown', fence, $3 FROM u`,
    ),
    // resolve($1 key, $2 state, $3 result, $4 error, $5 retention_ms, $6 expected fence or NULL,
    // $7 actor, $8 action, $9 reason, $10 outcome): the row locked, checked and written, and the
    // audit entry appended, in one statement (RESOLVE-2..RESOLVE-8). Returns the row as it was
    // (for the refusal's reason) and, when written, the new row as JSON. Releasing an in-flight row
    // keeps its claim id, as the owner's release does (LEDGER-27): a late copy of that claim is then
    // refused by the claim function; every other resolution clears it (an unknown row's is over, LEDGER-26).
    resolve: statement(
      "resolve",
      `WITH cur AS (
  SELECT key, v, state, fence, lease_expires_at, expires_at, ${NOW_MS} AS now_ms FROM ${t} WHERE key = $1 FOR UPDATE
), upd AS (
  UPDATE ${t} AS r SET state = $2, fence = r.fence + 1, result = $3, error = $4, reason = NULL, lease_expires_at = NULL,
         claim_id = CASE WHEN $2::text = 'released' AND cur.state = 'in_flight' THEN r.claim_id END,
         finished_at = cur.now_ms, expires_at = cur.now_ms + $5::bigint
    FROM cur
   WHERE r.key = cur.key AND cur.v = 1 AND ($6::bigint IS NULL OR cur.fence = $6::bigint)
     AND (cur.state = 'unknown' AND cur.expires_at > cur.now_ms OR cur.state = 'in_flight' AND cur.lease_expires_at <= cur.now_ms)
  RETURNING r.*
), aud AS (
  INSERT INTO ${a} (key, at, actor, action, from_state, to_state, fence, reason, outcome)
  SELECT upd.key, upd.finished_at, $7, $8, cur.state, upd.state, upd.fence, $9, $10 FROM upd, cur
)
SELECT cur.state, cur.fence, cur.v, cur.expires_at, cur.now_ms, (SELECT to_json(upd)::text FROM upd) AS written FROM cur`,
    ),
    auditTrail: statement("audit", `SELECT at, actor, action, from_state, to_state, fence, reason, outcome FROM ${a} WHERE key = $1 ORDER BY id`),
    release: statement("release", finish("released", null)),
    // retire($1 key, $2 claim id, $3 release, $4 retention_ms): one round trip (retireFunctionSql).
    retire: statement("retire", `SELECT ${retireFunctionName(name)}($1, $2, $3::boolean, $4::bigint)`),
    owns: statement("owns", `SELECT 1 FROM ${t} WHERE ${owned}`),
    lookup: statement("lookup", `SELECT ${ROW_COLUMNS}, ${NOW_MS} AS now_ms FROM ${t} WHERE key = $1`),
    // expiredInFlight($1 older_than_ms, $2 limit): in-flight rows whose lease ran out at least
    // $1 ms ago on the server clock, oldest expiry first. The predicate state = 'in_flight'
    // matches the partial index's, so the planner walks that index (never the finished rows).
    expiredInFlight: statement(
      "expired",
      `SELECT ${ROW_COLUMNS} FROM ${t}
 WHERE state = 'in_flight' AND lease_expires_at <= ${NOW_MS} - $1::bigint
 ORDER BY lease_expires_at LIMIT $2::int`,
    ),
    // sweep($1 batch, $2 retention_ms). It also forgets up to $1 retired claim ids past their
    // retired_until (LEDGER-28), oldest first, in the same statement; they are not counted as rows.
    // A row's expires_at is finished_at + retention and
    // finished_at >= claimed_at, so every row this ledger's retention has expired has
    // claimed_at <= now - retention: that bound lets the claimed_at index find them oldest
    // first. Batched, so a large backlog never holds many row locks at once; SKIP LOCKED
    // keeps the sweeper out of the way of claims; the DELETE re-checks each row's latest
    // version, so a row re-claimed meanwhile is never deleted.
    sweep: statement(
      "sweep",
      `WITH doomed AS (
  SELECT key FROM ${t}
   WHERE claimed_at <= ${NOW_MS} - $2::bigint AND state <> 'in_flight' AND expires_at <= ${NOW_MS}
   ORDER BY claimed_at LIMIT $1::int FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM ${t} AS r USING doomed
   WHERE r.key = doomed.key AND r.state <> 'in_flight' AND r.expires_at <= ${NOW_MS}
  RETURNING r.key
), trail AS (
  -- the rows' audit entries go with them (RESOLVE-7)
  DELETE FROM ${a} AS e USING gone WHERE e.key = gone.key
), stale AS (
  SELECT key, claim_id FROM ${rt} WHERE retired_until <= ${NOW_MS}
   ORDER BY retired_until LIMIT $1::int FOR UPDATE SKIP LOCKED
), forgot AS (
  -- re-checked on the newest version: a retire that extended the id meanwhile keeps it
  DELETE FROM ${rt} AS d USING stale
   WHERE d.key = stale.key AND d.claim_id = stale.claim_id AND d.retired_until <= ${NOW_MS}
  RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::int AS removed, (SELECT count(*) FROM forgot)::int AS forgotten`,
    ),
  };
}
