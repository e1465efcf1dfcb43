import { createHash } from "node:crypto";
import { describeValue, InvalidStoreInputError } from "@dispatch-once/core";

export const DEFAULT_SCHEMA = "public";
export const DEFAULT_TABLE_PREFIX = "dispatch_once_";

const SCHEMA_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
/** Leaves room for the longest table name ("conversations") and index suffix within 63 bytes. */
export const TABLE_PREFIX_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

export interface ConversationTables {
  schema: string;
  conversations: string;
  messages: string;
  turns: string;
  records: string;
  /** The conversations' earlier lease grant ids (TURN-10). */
  leaseGrants: string;
}

export function tablesFor(schema: string = DEFAULT_SCHEMA, prefix: string = DEFAULT_TABLE_PREFIX): ConversationTables {
  if (typeof schema !== "string" || !SCHEMA_PATTERN.test(schema)) {
    throw new InvalidStoreInputError("schema", `${describeValue(schema)} is not a plain identifier (${SCHEMA_PATTERN.source})`);
  }
  if (typeof prefix !== "string" || !TABLE_PREFIX_PATTERN.test(prefix)) {
    throw new InvalidStoreInputError("tablePrefix", `${describeValue(prefix)} is not a plain identifier prefix (${TABLE_PREFIX_PATTERN.source})`);
  }
  return { schema, conversations: `${prefix}conversations`, messages: `${prefix}messages`, turns: `${prefix}turns`, records: `${prefix}records`, leaseGrants: `${prefix}lease_grants` };
}

/** Quoted, schema-qualified names (identifiers are validated, so quoting never needs escaping). */
export function qualified(t: ConversationTables): { conv: string; msgs: string; turns: string; recs: string; grants: string } {
  const q = (name: string) => `"${t.schema}"."${name}"`;
  return { conv: q(t.conversations), msgs: q(t.messages), turns: q(t.turns), recs: q(t.records), grants: q(t.leaseGrants) };
}

/**
 * Server-clock "now" in epoch milliseconds. clock_timestamp(), not statement_timestamp():
 * lease decisions run in the statement AFTER the conversation row was locked, and must see
 * the time after any wait for that lock, not when the transaction's first statement began.
 */
export const NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/** Transaction-scoped advisory lock id serialising concurrent migrate() calls. */
const MIGRATE_LOCK_ID = 7_326_119_502_418_914n;

/**
 * The schema (what `migrate()` runs), one implicit transaction under an advisory lock.
 *
 * - conversations: one row per conversation, locked FOR UPDATE by every write so that all
 *   writers of one conversation run one at a time. `fence` is the highest fence ever issued and
 *   is never lowered; the lease is held iff `lease_owner` is not NULL (its fence is `fence`).
 *   `begun_turn` is the turn index begun last and `begun_fence` the fence that first began it
 *   (TURN-15: a later grant beginning that index resumes it); both NULL until a turn is begun.
 *   Tables made by an earlier version get them here, only when missing (an ALTER TABLE locks
 *   the table even when it changes nothing, and migrate() runs at every start); a
 *   conversation with a turn under way then (a message in progress, or a failed one a re-send
 *   may reopen) gets its current index marked as begun under fence 0, an unknown earlier grant.
 *   `lease_grant` is the grant id of the latest grant that carried one, `lease_grant_fence` that
 *   grant's fence (TURN-10); kept after a release or expiry so a late copy of that acquire is
 *   refused, and recognised only while `lease_grant_fence = fence`.
 * - messages: one row per user message, `seq` the arrival order; `content`/`failure` JSON text
 *   (text, not jsonb: jsonb would reorder members and cannot hold \u0000).
 * - turns: the primary key (conversation_id, turn_index) forbids a second turn at one index.
 *   `call_keys` is the JSON text of the keys the turn's calls were dispatched under (TURN-24,
 *   `supports.callKeys`), NULL for a turn committed without them; schemas made by an earlier
 *   version get the column here.
 * - records: beside the log, never in it (RECORD-4).
 * - lease_grants: the grant ids of a conversation's earlier grants (TURN-10), each with its fence
 *   and `superseded_at`, when a later grant replaced it as the latest (server clock). An acquire
 *   carrying one, less than LEASE_GRANT_RETENTION_MS after that, is a late copy and is refused.
 *   The grant statement moves the grant it supersedes here and deletes the conversation's rows
 *   past retention, in the same statement, under the conversation's row lock. Schemas made by an
 *   earlier version get the table here; their latest grant id is still in the conversation row
 *   and moves here at the next grant.
 */
export function schemaSql(schema: string = DEFAULT_SCHEMA, prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(schema, prefix);
  const q = qualified(t);
  return `SELECT pg_advisory_xact_lock(${MIGRATE_LOCK_ID});
CREATE SCHEMA IF NOT EXISTS "${t.schema}";
CREATE TABLE IF NOT EXISTS ${q.conv} (
  conversation_id  text   NOT NULL PRIMARY KEY,
  fence            bigint NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at bigint,
  last_bound       text,
  begun_turn       integer,
  begun_fence      bigint,
  lease_grant      text,
  lease_grant_fence bigint
);
CREATE TABLE IF NOT EXISTS ${q.msgs} (
  conversation_id text    NOT NULL,
  message_id      text    NOT NULL,
  seq             integer NOT NULL,
  state           text    NOT NULL CHECK (state IN ('queued', 'in_progress', 'answered', 'failed')),
  turn_index      integer,
  failure         text,
  failed_at       bigint,
  first_failed_at bigint,
  bound_at        bigint,
  content         text    NOT NULL,
  PRIMARY KEY (conversation_id, message_id),
  UNIQUE (conversation_id, seq)
);
CREATE INDEX IF NOT EXISTS "${t.messages}_state" ON ${q.msgs} (conversation_id, state, seq);
CREATE TABLE IF NOT EXISTS ${q.turns} (
  conversation_id text    NOT NULL,
  turn_index      integer NOT NULL,
  message_id      text    NOT NULL,
  stop_reason     text,
  assistant       text    NOT NULL,
  tool_results    text,
  call_keys       text,
  PRIMARY KEY (conversation_id, turn_index)
);
CREATE INDEX IF NOT EXISTS "${t.turns}_message" ON ${q.turns} (conversation_id, message_id, turn_index);
CREATE TABLE IF NOT EXISTS ${q.recs} (
  conversation_id text    NOT NULL,
  seq             integer NOT NULL,
  record          text    NOT NULL,
  PRIMARY KEY (conversation_id, seq)
);
CREATE TABLE IF NOT EXISTS ${q.grants} (
  conversation_id text   NOT NULL,
  grant_id        text   NOT NULL,
  fence           bigint NOT NULL,
  superseded_at   bigint NOT NULL,
  PRIMARY KEY (conversation_id, grant_id)
);
DO $upgrade$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = '${t.schema}' AND table_name = '${t.conversations}' AND column_name = 'begun_turn') THEN
    ALTER TABLE ${q.conv} ADD COLUMN begun_turn integer, ADD COLUMN begun_fence bigint;
    UPDATE ${q.conv} c
       SET begun_turn = (SELECT coalesce(max(turn_index) + 1, 0) FROM ${q.turns} WHERE conversation_id = c.conversation_id),
           begun_fence = 0
     WHERE EXISTS (SELECT 1 FROM ${q.msgs} m
                    WHERE m.conversation_id = c.conversation_id
                      AND (m.state = 'in_progress' OR (m.state = 'failed' AND m.message_id = c.last_bound)));
  END IF;
  -- Lease grant ids (TURN-10): two nullable columns. A process of the earlier version keeps
  -- working against them: its grant raises fence without writing them, so no grant id is ever
  -- taken for its grant (a grant is recognised only while lease_grant_fence = fence).
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = '${t.schema}' AND table_name = '${t.conversations}' AND column_name = 'lease_grant') THEN
    ALTER TABLE ${q.conv} ADD COLUMN lease_grant text, ADD COLUMN lease_grant_fence bigint;
  END IF;
  -- listFailedTurns (TURN-17): when each message failed; 0 (oldest) for those that already had.
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = '${t.schema}' AND table_name = '${t.messages}' AND column_name = 'failed_at') THEN
    ALTER TABLE ${q.msgs} ADD COLUMN failed_at bigint;
    UPDATE ${q.msgs} SET failed_at = 0 WHERE state = 'failed';
  END IF;
  -- The re-send window (TURN-12): when each message FIRST failed, kept across reopens. NULL on
  -- rows failed before it existed or by an earlier version: measured from failed_at then.
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = '${t.schema}' AND table_name = '${t.messages}' AND column_name = 'first_failed_at') THEN
    ALTER TABLE ${q.msgs} ADD COLUMN first_failed_at bigint;
  END IF;
  -- The binding's time (TURN-11, TURN-12): when each message was FIRST bound, written by the
  -- binding's statement. NULL on rows bound before it existed or by an earlier version: such a
  -- row stays undated (a later binding is not its first), its window counts from its failure.
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = '${t.schema}' AND table_name = '${t.messages}' AND column_name = 'bound_at') THEN
    ALTER TABLE ${q.msgs} ADD COLUMN bound_at bigint;
  END IF;
  -- Committed calls' keys (TURN-24): one nullable column. A process of an earlier version keeps
  -- working against it: its insert names the columns it knows, and its turns are read back
  -- without keys (derived by their reader, as before).
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = '${t.schema}' AND table_name = '${t.turns}' AND column_name = 'call_keys') THEN
    ALTER TABLE ${q.turns} ADD COLUMN call_keys text;
  END IF;
END
$upgrade$;
-- Only the failed messages, in listing order: listFailedTurns never scans the rest.
CREATE INDEX IF NOT EXISTS "${t.messages}_failed" ON ${q.msgs} (failed_at, conversation_id COLLATE "C", message_id COLLATE "C") WHERE state = 'failed';
-- Only the messages in progress (at most one a conversation): what listStalledMessages reads (TURN-22).
CREATE INDEX IF NOT EXISTS "${t.messages}_in_progress" ON ${q.msgs} (conversation_id) WHERE state = 'in_progress';
${failedAtTriggersSql(t)}`;
}

/**
 * A process of a version that does not know `failed_at` (still running during a rolling
 * upgrade) fails a message without writing it, and its reopen leaves the earlier failure's time
 * on the row. These triggers give such a failure the server's time, on the clock the store uses
 * (TURN-17). They fire only when the statement wrote no failure time of its own (none, or the
 * row's old one), so this version's statements never run their body. Created once (a CREATE
 * TRIGGER locks out writers while it runs), checked by name at every migrate().
 *
 * Rows such a process failed before the triggers existed have NULL: their time was not kept, so
 * 0 (TURN-17). That UPDATE runs at every migrate(): it reads only the NULL end of the partial
 * index, and it also mends a row written with the triggers bypassed (session_replication_role).
 */
function failedAtTriggersSql(t: ConversationTables): string {
  const q = qualified(t);
  // Trigger names are per table, so fixed ones fit in 63 bytes whatever the prefix; the function is per schema.
  const fn = `"${t.schema}"."${t.messages}_failed_at"`;
  const exists = (name: string) => `EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = '${q.msgs}'::regclass AND tgname = '${name}')`;
  return `DO $failed_at$
BEGIN
  IF NOT ${exists("dispatch_once_failed_at_insert")} OR NOT ${exists("dispatch_once_failed_at_update")} THEN
    CREATE OR REPLACE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      NEW.failed_at := ${NOW_MS};
      RETURN NEW;
    END
    $fn$;
  END IF;
  IF NOT ${exists("dispatch_once_failed_at_insert")} THEN
    CREATE TRIGGER dispatch_once_failed_at_insert BEFORE INSERT ON ${q.msgs} FOR EACH ROW
      WHEN (NEW.state = 'failed' AND NEW.failed_at IS NULL) EXECUTE FUNCTION ${fn}();
  END IF;
  IF NOT ${exists("dispatch_once_failed_at_update")} THEN
    CREATE TRIGGER dispatch_once_failed_at_update BEFORE UPDATE OF state ON ${q.msgs} FOR EACH ROW
      WHEN (NEW.state = 'failed' AND OLD.state <> 'failed' AND NEW.failed_at IS NOT DISTINCT FROM OLD.failed_at) EXECUTE FUNCTION ${fn}();
  END IF;
END
$failed_at$;
UPDATE ${q.msgs} SET failed_at = 0 WHERE state = 'failed' AND failed_at IS NULL;
`;
}

export interface Statement {
  name: string;
  text: string;
}

export interface Statements {
  lock: Statement;
  ensure: Statement;
  message: Statement;
  insertMessage: Statement;
  reopen: Statement;
  /** How long ago, on the server's clock, a message first failed (TURN-12's re-send window). */
  failedAge: Statement;
  /** The message in progress, else the oldest queued one, with the turn count and whether it has a turn. */
  current: Statement;
  bind: Statement;
  /** TURN-15: the turn index begun last and the fence that first began it. */
  setBegun: Statement;
  turnsOf: Statement;
  log: Statement;
  grant: Statement;
  renew: Statement;
  release: Statement;
  /** TURN-10: the live grant sent again by its grant id: the lease restarted, under its fence. */
  regrant: Statement;
  /** TURN-10: give back the grant a grant id made, while it still holds the lease. */
  releaseGrant: Statement;
  keepGivenBack: Statement;
  /** TURN-10: the fence of an earlier grant with this grant id, superseded less than $3 ms ago. */
  earlierGrant: Statement;
  /** The log's version and the named message, read after the lock. */
  commitState: Statement;
  insertTurn: Statement;
  fail: Statement;
  insertRecord: Statement;
  records: Statement;
  /** $1 conversation or null, $2 olderThanMs or null, $3..$5 the position after the previous page or nulls, $6 limit. */
  listFailed: Statement;
  /** $1 conversation or null, $2 olderThanMs, $3..$5 the position after the previous page or nulls, $6 limit. */
  listStalled: Statement;
}

/**
 * Every statement, named per table set (prepared once per connection; the name carries a
 * hash of the tables so two stores over different schemas on one pool never collide).
 */
/**
 * Where TURN-12's re-send window counts from (server clock): the earlier of the first binding and
 * the first failure (else the last failure, else 0: unknown, past every window). least() skips a
 * NULL, so a row bound before bound_at existed counts from its failure alone.
 */
function windowStart(alias: string): string {
  return `least(${alias}bound_at, coalesce(${alias}first_failed_at, ${alias}failed_at, 0))`;
}

export function statements(t: ConversationTables): Statements {
  const q = qualified(t);
  const tag = createHash("sha256").update(`${t.schema}.${t.conversations}`).digest("hex").slice(0, 10);
  const s = (name: string, text: string): Statement => ({ name: `do_conv_${tag}_${name}`, text });
  const messageColumns = "message_id, seq, state, content, turn_index, failure, first_failed_at, bound_at";
  return {
    lock: s(
      "lock",
      `SELECT fence, lease_owner, lease_expires_at, last_bound, begun_turn, begun_fence, lease_grant, lease_grant_fence FROM ${q.conv} WHERE conversation_id = $1 FOR UPDATE`,
    ),
    ensure: s("ensure", `INSERT INTO ${q.conv} (conversation_id) VALUES ($1) ON CONFLICT (conversation_id) DO NOTHING`),
    message: s("message", `SELECT ${messageColumns} FROM ${q.msgs} WHERE conversation_id = $1 AND message_id = $2`),
    insertMessage: s(
      "insert_message",
      `INSERT INTO ${q.msgs} (conversation_id, message_id, seq, state, content)
       VALUES ($1, $2, (SELECT coalesce(max(seq), 0) + 1 FROM ${q.msgs} WHERE conversation_id = $1), 'queued', $3) RETURNING seq`,
    ),
    // A failure whose first time was not kept (a row from before first_failed_at, or failed by an
    // earlier version's process) keeps its last time as the first: the retry that follows must not
    // restart TURN-12's window while the first attempts' ledger rows keep aging.
    reopen: s("reopen", `UPDATE ${q.msgs} SET state = 'queued', failure = NULL, failed_at = NULL, first_failed_at = coalesce(first_failed_at, failed_at, 0) WHERE conversation_id = $1 AND message_id = $2`),
    // From the first failure (kept across reopens; a retry that fails again does not restart the
    // window), else the last one (rows failed before first_failed_at existed), else 0: unknown, past;
    // and from the first binding when it is earlier, as it always is where kept (bound_at): the rows
    // of the message's calls age from its first attempt, maybe hours before its first failure.
    failedAge: s("failed_age", `SELECT ${NOW_MS} - ${windowStart("")} AS age FROM ${q.msgs} WHERE conversation_id = $1 AND message_id = $2`),
    current: s(
      "current",
      `SELECT m.*, (SELECT coalesce(max(turn_index) + 1, 0) FROM ${q.turns} WHERE conversation_id = $1) AS turn_count,
         EXISTS (SELECT 1 FROM ${q.turns} t WHERE t.conversation_id = $1 AND t.message_id = m.message_id) AS started
       FROM ((SELECT ${messageColumns}, 0 AS rank FROM ${q.msgs} WHERE conversation_id = $1 AND state = 'in_progress' ORDER BY seq LIMIT 1)
             UNION ALL
             (SELECT ${messageColumns}, 1 AS rank FROM ${q.msgs} WHERE conversation_id = $1 AND state = 'queued' ORDER BY seq LIMIT 1)) m
       ORDER BY m.rank LIMIT 1`,
    ),
    bind: s(
      "bind",
      // bound_at only where turn_index is still NULL (SET reads the old row): the FIRST binding's
      // time; a row bound before the column existed stays undated rather than dated by a rebinding.
      // Bound where a failed message stopped (the last bound one failed; nothing was committed
      // since), it meets that message's rows (keys come from the index) and takes its window
      // start when earlier (TURN-11); the subquery reads last_bound before this statement moves it.
      `WITH bound AS (UPDATE ${q.msgs} SET state = 'in_progress', turn_index = coalesce(turn_index, $3),
                        bound_at = CASE WHEN turn_index IS NULL THEN least(${NOW_MS},
                          (SELECT ${windowStart("l.")} FROM ${q.msgs} l JOIN ${q.conv} c ON c.conversation_id = l.conversation_id AND c.last_bound = l.message_id
                            WHERE l.conversation_id = $1 AND l.state = 'failed' AND l.message_id <> $2)) ELSE bound_at END
                      WHERE conversation_id = $1 AND message_id = $2 RETURNING bound_at)
       UPDATE ${q.conv} SET last_bound = $2 WHERE conversation_id = $1 AND EXISTS (SELECT 1 FROM bound) RETURNING (SELECT bound_at FROM bound) AS bound_at`,
    ),
    setBegun: s("set_begun", `UPDATE ${q.conv} SET begun_turn = $2, begun_fence = $3 WHERE conversation_id = $1`),
    turnsOf: s(
      "turns_of",
      `SELECT turn_index, message_id, assistant, tool_results, stop_reason, call_keys FROM ${q.turns} WHERE conversation_id = $1 AND message_id = $2 ORDER BY turn_index`,
    ),
    // The content is fetched only where a message's turns begin (lag), not once per turn.
    log: s(
      "log",
      `SELECT t.turn_index, t.message_id, t.assistant, t.tool_results, t.stop_reason, (m.message_id IS NOT NULL) AS known,
         CASE WHEN lag(t.message_id) OVER (ORDER BY t.turn_index) IS NOT DISTINCT FROM t.message_id THEN NULL ELSE m.content END AS content
       FROM ${q.turns} t LEFT JOIN ${q.msgs} m ON m.conversation_id = t.conversation_id AND m.message_id = t.message_id
       WHERE t.conversation_id = $1 ORDER BY t.turn_index`,
    ),
    // Runs after the row is locked: the clock is read after any wait, and the row cannot change under it.
    // One statement: the grant, and only when it is made, the superseded grant ($5 id, $6 fence,
    // read from the locked row) kept as an earlier grant and the conversation's earlier grants
    // past retention ($7 ms) deleted (TURN-10).
    grant: s(
      "grant",
      `WITH n AS (SELECT ${NOW_MS} AS now),
       granted AS (
         UPDATE ${q.conv} c SET fence = c.fence + 1, lease_owner = $2, lease_expires_at = n.now + $3::bigint,
           lease_grant = $4::text, lease_grant_fence = c.fence + 1
         FROM n
         WHERE c.conversation_id = $1 AND (c.lease_owner IS NULL OR c.lease_expires_at <= n.now)
         RETURNING c.fence, c.lease_expires_at),
       pruned AS (
         DELETE FROM ${q.grants} g USING n
         WHERE g.conversation_id = $1 AND g.superseded_at <= n.now - $7::bigint AND g.grant_id IS DISTINCT FROM $5::text
           AND EXISTS (SELECT 1 FROM granted)),
       kept AS (
         INSERT INTO ${q.grants} (conversation_id, grant_id, fence, superseded_at)
         SELECT $1, $5::text, $6::bigint, n.now FROM n WHERE $5::text IS NOT NULL AND EXISTS (SELECT 1 FROM granted)
         ON CONFLICT (conversation_id, grant_id) DO UPDATE SET fence = excluded.fence, superseded_at = excluded.superseded_at)
       SELECT fence, lease_expires_at FROM granted`,
    ),
    renew: s(
      "renew",
      `UPDATE ${q.conv} SET lease_expires_at = ${NOW_MS} + $3::bigint
       WHERE conversation_id = $1 AND lease_owner IS NOT NULL AND fence = $2 RETURNING lease_expires_at`,
    ),
    // The fence stays: the next grant is one higher even after a release.
    release: s(
      "release",
      `UPDATE ${q.conv} SET lease_owner = NULL, lease_expires_at = NULL WHERE conversation_id = $1 AND lease_owner IS NOT NULL AND fence = $2`,
    ),
    regrant: s(
      "regrant",
      `UPDATE ${q.conv} c SET lease_expires_at = n.now + $3::bigint
       FROM (SELECT ${NOW_MS} AS now) n
       WHERE c.conversation_id = $1 AND c.lease_owner IS NOT NULL AND c.lease_grant = $2 AND c.lease_grant_fence = c.fence AND c.lease_expires_at > n.now
       RETURNING c.fence, c.lease_expires_at`,
    ),
    // The grant id stays: the grant is over, and a late copy of its acquire is refused.
    releaseGrant: s(
      "release_grant",
      `UPDATE ${q.conv} SET lease_owner = NULL, lease_expires_at = NULL
       WHERE conversation_id = $1 AND lease_owner IS NOT NULL AND lease_grant = $2 AND lease_grant_fence = fence`,
    ),
    // TURN-10: a grant id no grant carries, given back ($2): kept as an earlier grant with fence 0
    // (none was made under it), so a late copy of its acquire is refused; the conversation's
    // earlier grants past retention ($3 ms) go, as at a grant.
    keepGivenBack: s(
      "keep_given_back",
      `WITH n AS (SELECT ${NOW_MS} AS now),
       pruned AS (
         DELETE FROM ${q.grants} g USING n
         WHERE g.conversation_id = $1 AND g.superseded_at <= n.now - $3::bigint AND g.grant_id <> $2::text)
       INSERT INTO ${q.grants} (conversation_id, grant_id, fence, superseded_at)
       SELECT $1, $2::text, 0, n.now FROM n
       ON CONFLICT (conversation_id, grant_id) DO UPDATE SET fence = excluded.fence, superseded_at = excluded.superseded_at`,
    ),
    earlierGrant: s(
      "earlier_grant",
      `SELECT fence FROM ${q.grants} WHERE conversation_id = $1 AND grant_id = $2 AND superseded_at > ${NOW_MS} - $3::bigint`,
    ),
    commitState: s(
      "commit_state",
      `SELECT (SELECT coalesce(max(turn_index) + 1, 0) FROM ${q.turns} WHERE conversation_id = $1) AS turn_count, m.*
       FROM (SELECT 1) one LEFT JOIN (SELECT ${messageColumns} FROM ${q.msgs} WHERE conversation_id = $1 AND message_id = $2) m ON true`,
    ),
    insertTurn: s(
      "insert_turn",
      `WITH turn AS (
         INSERT INTO ${q.turns} (conversation_id, turn_index, message_id, stop_reason, assistant, tool_results, call_keys)
         VALUES ($1, $2, $3, $4, $5, $6, $8) RETURNING 1)
       UPDATE ${q.msgs} SET state = 'answered' WHERE $7::boolean AND conversation_id = $1 AND message_id = $3 AND EXISTS (SELECT 1 FROM turn)`,
    ),
    fail: s(
      "fail",
      `WITH failed AS (UPDATE ${q.msgs} SET state = 'failed', failure = $3, failed_at = ${NOW_MS}, first_failed_at = coalesce(first_failed_at, ${NOW_MS}) WHERE conversation_id = $1 AND message_id = $2 RETURNING 1)
       INSERT INTO ${q.recs} (conversation_id, seq, record)
       SELECT $1, (SELECT coalesce(max(seq), 0) + 1 FROM ${q.recs} WHERE conversation_id = $1), $3 WHERE EXISTS (SELECT 1 FROM failed)`,
    ),
    insertRecord: s(
      "insert_record",
      `INSERT INTO ${q.recs} (conversation_id, seq, record) VALUES ($1, (SELECT coalesce(max(seq), 0) + 1 FROM ${q.recs} WHERE conversation_id = $1), $2)`,
    ),
    records: s("records", `SELECT record FROM ${q.recs} WHERE conversation_id = $1 ORDER BY seq`),
    // Keyset paging in the failed-messages index's order: COLLATE "C" compares the ids' UTF-8 bytes,
    // which is code point order (TURN-17), the order every store lists and resumes in.
    // Each listed message's conversation row is looked up by its primary key in the same statement,
    // for reopenable: a re-send reopens a failed message only while it is last_bound (TURN-12). The
    // LEFT JOIN keeps the messages' index the outer side (a missing row: not reopenable). The
    // window counts from the first failure or the binding as failed_age does (TURN-12), on the same clock.
    listFailed: s(
      "list_failed",
      `SELECT m.conversation_id, m.message_id, m.turn_index, m.failure, m.failed_at,
              (c.last_bound IS NOT NULL AND c.last_bound = m.message_id) AS reopenable,
              coalesce(m.first_failed_at, m.failed_at, 0) AS first_failed_at,
              ($7::float8 IS NOT NULL AND ${NOW_MS} - ${windowStart("m.")} >= $7::float8) AS past_window
         FROM ${q.msgs} m LEFT JOIN ${q.conv} c ON c.conversation_id = m.conversation_id
        WHERE m.state = 'failed'
          AND ($1::text IS NULL OR m.conversation_id = $1::text)
          AND ($2::bigint IS NULL OR m.failed_at <= ${NOW_MS} - $2::bigint)
          AND ($3::bigint IS NULL OR (m.failed_at, m.conversation_id COLLATE "C", m.message_id COLLATE "C") > ($3::bigint, $4::text COLLATE "C", $5::text COLLATE "C"))
        ORDER BY m.failed_at, m.conversation_id COLLATE "C", m.message_id COLLATE "C" LIMIT $6`,
    ),
    // TURN-22: the messages in progress (the partial index below holds only them, at most one a
    // conversation) whose lease is released or expired, read with the lease in one statement so
    // that a live holder's message is never listed. Since when: the lapsed lease's expiry, else
    // (released: no release time is kept) the binding, else 0. One reading of the clock.
    listStalled: s(
      "list_stalled",
      `WITH n AS (SELECT ${NOW_MS} AS now)
       SELECT * FROM (
         SELECT m.conversation_id, m.message_id, m.turn_index, c.lease_owner, m.bound_at,
                CASE WHEN c.lease_owner IS NOT NULL THEN c.lease_expires_at ELSE coalesce(m.bound_at, 0) END AS stalled_since
           FROM ${q.msgs} m JOIN ${q.conv} c ON c.conversation_id = m.conversation_id, n
          WHERE m.state = 'in_progress'
            AND ($1::text IS NULL OR m.conversation_id = $1::text)
            AND (c.lease_owner IS NULL OR c.lease_expires_at <= n.now)) s, n
        WHERE s.stalled_since <= n.now - $2::bigint
          AND ($3::bigint IS NULL OR (s.stalled_since, s.conversation_id COLLATE "C", s.message_id COLLATE "C") > ($3::bigint, $4::text COLLATE "C", $5::text COLLATE "C"))
        ORDER BY s.stalled_since, s.conversation_id COLLATE "C", s.message_id COLLATE "C" LIMIT $6`,
    ),
  };
}
