import { describeValue, InvalidStoreInputError } from "@dispatch-once/core";

export const DEFAULT_TABLE_PREFIX = "dispatch_once_";

/** Table names are interpolated into SQL, so the prefix must be a plain identifier start. */
export const TABLE_PREFIX_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

export interface ConversationTables {
  conversations: string;
  messages: string;
  turns: string;
  records: string;
  /** The conversations' earlier lease grant ids (TURN-10). */
  leaseGrants: string;
}

export function tablesFor(prefix: string = DEFAULT_TABLE_PREFIX): ConversationTables {
  if (typeof prefix !== "string" || !TABLE_PREFIX_PATTERN.test(prefix)) {
    throw new InvalidStoreInputError("tablePrefix", `${describeValue(prefix)} is not a plain identifier prefix (${TABLE_PREFIX_PATTERN.source})`);
  }
  return {
    conversations: `${prefix}conversations`,
    messages: `${prefix}messages`,
    turns: `${prefix}turns`,
    records: `${prefix}records`,
    leaseGrants: `${prefix}lease_grants`,
  };
}

/**
 * The schema, as plain SQL (what `migrate()` runs).
 *
 * - conversations: one row per conversation, the lease and what TURN-12 needs. `fence` is the
 *   highest fence ever issued and is never lowered (a release clears only owner and expiry),
 *   so fences rise across release, expiry and restart. The lease is held iff `lease_owner`
 *   is not NULL, and then its fence is `fence`. `begun_turn` is the turn index begun last and
 *   `begun_fence` the fence that first began it (TURN-15: a later grant beginning that index
 *   resumes it); both NULL until a turn is begun. Tables made by an earlier version get them
 *   from `migrate()` (see `upgradeSql`). `lease_grant` is the grant id of the latest grant that
 *   carried one and `lease_grant_fence` that grant's fence (TURN-10): kept when the lease is
 *   released or expires, so a late copy of that acquire is refused. A grant is recognised only
 *   while `lease_grant_fence = fence`: a process of an earlier version grants without writing
 *   them, and its higher fence then makes the old grant id unrecognised (see `leaseGrantUpgradeSql`).
 * - messages: one row per user message; `seq` is the arrival order. `content` and `failure`
 *   are JSON text. The (conversation_id, state, seq) index finds the message in progress and
 *   the oldest queued one without scanning the conversation's history.
 * - turns: one row per committed turn; the primary key (conversation_id, turn_index) makes a
 *   second turn at one index impossible even if the compare-and-append were wrong.
 *   `tool_results` is NULL when the turn has none (JSON null is the text 'null'). `call_keys` is
 *   the JSON text of the keys the turn's calls were dispatched under (TURN-24,
 *   `supports.callKeys`), NULL for a turn committed without them; tables of an earlier version
 *   get it from `migrate()` (`callKeysUpgradeSql`).
 * - records: failed-turn and superseded-attempt records, beside the log, never in it (RECORD-4).
 * - lease_grants: the grant ids of a conversation's earlier grants (TURN-10), each with its fence
 *   and `superseded_at`, when a later grant replaced it as the conversation's latest (store
 *   clock). An acquire carrying one of them, less than LEASE_GRANT_RETENTION_MS after that, is a
 *   late copy and is refused. A grant moves the grant it supersedes here and deletes the
 *   conversation's rows past retention in the same write, so a conversation keeps only the
 *   grants superseded in the last retention. Files made by an earlier version get the table from
 *   `migrate()` (CREATE TABLE IF NOT EXISTS); their latest grant id is still in the row and moves
 *   here at the next grant.
 * - The CHECK on `state` keeps a message in one of its four states: beginTurn's indexed
 *   lookups could not see a row in any other.
 */
export function schemaSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `CREATE TABLE IF NOT EXISTS "${t.conversations}" (
  conversation_id  TEXT    NOT NULL PRIMARY KEY,
  fence            INTEGER NOT NULL DEFAULT 0,
  lease_owner      TEXT,
  lease_expires_at INTEGER,
  last_bound       TEXT,
  begun_turn       INTEGER,
  begun_fence      INTEGER,
  lease_grant      TEXT,
  lease_grant_fence INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS "${t.messages}" (
  conversation_id TEXT    NOT NULL,
  message_id      TEXT    NOT NULL,
  seq             INTEGER NOT NULL,
  state           TEXT    NOT NULL CHECK (state IN ('queued', 'in_progress', 'answered', 'failed')),
  turn_index      INTEGER,
  failure         TEXT,
  failed_at       INTEGER,
  first_failed_at INTEGER,
  bound_at        INTEGER,
  content         TEXT    NOT NULL,
  PRIMARY KEY (conversation_id, message_id),
  UNIQUE (conversation_id, seq)
);
CREATE INDEX IF NOT EXISTS "${t.messages}_state" ON "${t.messages}" (conversation_id, state, seq);
CREATE TABLE IF NOT EXISTS "${t.turns}" (
  conversation_id TEXT    NOT NULL,
  turn_index      INTEGER NOT NULL,
  message_id      TEXT    NOT NULL,
  stop_reason     TEXT,
  assistant       TEXT    NOT NULL,
  tool_results    TEXT,
  call_keys       TEXT,
  PRIMARY KEY (conversation_id, turn_index)
);
CREATE INDEX IF NOT EXISTS "${t.turns}_message" ON "${t.turns}" (conversation_id, message_id, turn_index);
CREATE TABLE IF NOT EXISTS "${t.records}" (
  conversation_id TEXT    NOT NULL,
  seq             INTEGER NOT NULL,
  record          TEXT    NOT NULL,
  PRIMARY KEY (conversation_id, seq)
);
CREATE TABLE IF NOT EXISTS "${t.leaseGrants}" (
  conversation_id TEXT    NOT NULL,
  grant_id        TEXT    NOT NULL,
  fence           INTEGER NOT NULL,
  superseded_at   INTEGER NOT NULL,
  PRIMARY KEY (conversation_id, grant_id)
) WITHOUT ROWID;
`;
}

/**
 * The failed messages, oldest failure first: what listFailedTurns reads (TURN-17). A
 * partial index, so it holds only the failed messages and costs the other writes nothing.
 * Created after `failedAtUpgradeSql` on tables of an earlier version (it names `failed_at`).
 */
export function failedIndexSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  // The messages in progress (at most one a conversation), what listStalledMessages reads (TURN-22).
  return `CREATE INDEX IF NOT EXISTS "${t.messages}_failed" ON "${t.messages}" (failed_at, conversation_id, message_id) WHERE state = 'failed';
CREATE INDEX IF NOT EXISTS "${t.messages}_in_progress" ON "${t.messages}" (conversation_id, message_id) WHERE state = 'in_progress';\n`;
}

/**
 * The store's clock in integer milliseconds since the Unix epoch, evaluated by SQLite inside
 * the statement (as the SQLite ledger does; julianday rather than unixepoch('subsec') so that
 * older SQLite builds work too).
 */
export const STORE_NOW_SQL = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/**
 * A process of a version that does not know `failed_at` (still running during a rolling
 * upgrade) fails a message without writing it, and its reopen leaves the earlier failure's time
 * on the row. These triggers give such a failure SQLite's own time (STORE_NOW_SQL: a test clock
 * lives in one connection, a trigger fires in any). They fire only when the statement wrote no
 * failure time of its own (none, or the row's old one), so this version's statements never run
 * their body. AFTER, as SQLite cannot assign NEW; the UPDATE they run names no `state`, so it
 * does not fire them again.
 *
 * Rows such a process failed before the triggers existed have NULL: their time was not kept, so
 * 0 (TURN-17). That UPDATE runs at every `migrate()`: it reads only the NULL end of the partial
 * index (`failedIndexSql`, created first). Run after `failedAtUpgradeSql` on older tables.
 */
export function failedAtTriggerSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  const stamp = `UPDATE "${t.messages}" SET failed_at = ${STORE_NOW_SQL} WHERE conversation_id = NEW.conversation_id AND message_id = NEW.message_id;`;
  return `CREATE TRIGGER IF NOT EXISTS "${t.messages}_failed_at_insert" AFTER INSERT ON "${t.messages}"
  FOR EACH ROW WHEN NEW.state = 'failed' AND NEW.failed_at IS NULL
BEGIN
  ${stamp}
END;
CREATE TRIGGER IF NOT EXISTS "${t.messages}_failed_at_update" AFTER UPDATE OF state ON "${t.messages}"
  FOR EACH ROW WHEN NEW.state = 'failed' AND OLD.state <> 'failed' AND NEW.failed_at IS OLD.failed_at
BEGIN
  ${stamp}
END;
UPDATE "${t.messages}" SET failed_at = 0 WHERE state = 'failed' AND failed_at IS NULL;
`;
}

/**
 * What `migrate()` runs on a messages table made before `first_failed_at` existed: the column
 * only. It keeps the store-clock time a message FIRST failed, across reopens, which the re-send
 * window is measured from (TURN-12, `supports.reopenWindow`). NULL on rows failed before it
 * existed, or by a process of an earlier version: the window is then measured from `failed_at`
 * (0, an unknown time, is past every window).
 */
export function firstFailedAtUpgradeSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `ALTER TABLE "${t.messages}" ADD COLUMN first_failed_at INTEGER;
`;
}

/**
 * What `migrate()` runs on a messages table made before `bound_at` existed: the column only. It
 * keeps the store-clock time of a message's FIRST binding (TURN-11, `supports.boundAt`), written
 * in the binding's own statement, which TURN-12's re-send window counts from. NULL on rows bound
 * before it existed, or by a process of an earlier version: such a row is never dated later (a
 * later binding of it is not its first), and its window counts from its first failure as before.
 */
export function boundAtUpgradeSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `ALTER TABLE "${t.messages}" ADD COLUMN bound_at INTEGER;
`;
}

/**
 * What `migrate()` runs on a messages table made before `failed_at` existed: the column, and 0
 * (the oldest time, "failed at an unknown time") for messages that already failed.
 */
export function failedAtUpgradeSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `ALTER TABLE "${t.messages}" ADD COLUMN failed_at INTEGER;
UPDATE "${t.messages}" SET failed_at = 0 WHERE state = 'failed';
`;
}

/**
 * What `migrate()` runs on tables made before `begun_turn`/`begun_fence` existed (SQLite has
 * no ADD COLUMN IF NOT EXISTS: run it once, when `PRAGMA table_info` lacks the columns). A
 * conversation with a turn under way (a message in progress, or a failed one that a re-send
 * may reopen) gets its current turn index marked as begun under fence 0, an unknown earlier
 * grant: its holder may still be running, so the next beginTurn there says `resumed` (TURN-15).
 */
export function upgradeSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `ALTER TABLE "${t.conversations}" ADD COLUMN begun_turn INTEGER;
ALTER TABLE "${t.conversations}" ADD COLUMN begun_fence INTEGER;
UPDATE "${t.conversations}" AS c
   SET begun_turn = (SELECT coalesce(max(turn_index) + 1, 0) FROM "${t.turns}" WHERE conversation_id = c.conversation_id),
       begun_fence = 0
 WHERE EXISTS (SELECT 1 FROM "${t.messages}" m
                WHERE m.conversation_id = c.conversation_id
                  AND (m.state = 'in_progress' OR (m.state = 'failed' AND m.message_id = c.last_bound)));
`;
}

/**
 * What `migrate()` runs on a conversations table made before lease grant ids (TURN-10) existed:
 * two nullable columns, nothing else. A process of the earlier version keeps working against
 * the migrated table: its grant raises `fence` without writing them, so no grant id matches its
 * grant, and its release clears `lease_owner` as before.
 */
export function leaseGrantUpgradeSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `ALTER TABLE "${t.conversations}" ADD COLUMN lease_grant TEXT;
ALTER TABLE "${t.conversations}" ADD COLUMN lease_grant_fence INTEGER;
`;
}

/**
 * What `migrate()` runs on a turns table made before `call_keys` existed: one nullable column,
 * nothing else (TURN-24). A process of an earlier version keeps working against the migrated
 * table: its insert names the columns it knows and leaves `call_keys` NULL, and such a turn is
 * read back without keys (its reader derives them, as before).
 */
export function callKeysUpgradeSql(prefix: string = DEFAULT_TABLE_PREFIX): string {
  const t = tablesFor(prefix);
  return `ALTER TABLE "${t.turns}" ADD COLUMN call_keys TEXT;
`;
}
