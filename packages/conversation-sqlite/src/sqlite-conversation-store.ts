import Database from "better-sqlite3";
import {
  CONVERSATION_ID_PATTERN,
  ConversationLeaseLostError,
  describeValue,
  LEASE_GRANT_RETENTION_MS,
  InvalidStoreInputError,
  StoreCorruptError,
  StoreUnavailableError,
  checkMessageId,
  isDispatchOnceError,
  checkFailedTurnsQuery,
  checkStalledMessagesQuery,
  encodeFailedTurnsCursor,
  type AppendOptions,
  type AppendResult,
  type ConversationStore,
  type FailedTurn,
  type FailedTurnsPage,
  type FailedTurnsQuery,
  type ConversationStoreCapabilities,
  type JsonValue,
  type LeaseResult,
  type StalledMessage,
  type StalledMessagesPage,
  type StalledMessagesQuery,
  type StoredMessage,
  type StoredTurn,
  type TurnCommit,
  type TurnSnapshot,
} from "@dispatch-once/core";
import {
  checkLeaseOwner,
  checkTurnLeaseMs,
  checkLeaseGrantId,
  checkReopenWithinMs,
  checkUserMessage,
  openWithin,
  decodeStoreJson,
  decodeStoredMessage,
  decodeStoredTurn,
  beginTurnIndex,
  encodeCallKeys,
  encodeStoreJson,
  type StoredMessageRow,
  type StoredTurnRow,
  unknownOptionName,
  unknownOptionMessage,
  type OptionNames,
} from "@dispatch-once/core/internal";
import { DEFAULT_TABLE_PREFIX, STORE_NOW_SQL, boundAtUpgradeSql, callKeysUpgradeSql, failedAtTriggerSql, failedAtUpgradeSql, firstFailedAtUpgradeSql, failedIndexSql, schemaSql, tablesFor, upgradeSql, leaseGrantUpgradeSql, type ConversationTables } from "./schema.js";

/** better-sqlite3's connection type, re-exported so callers can bring their own. */
export type SqliteDatabase = Database.Database;

export interface SqliteConversationStoreOptions {
  /**
   * Database file to open (created if absent). Exactly one of `path` and `database`.
   * @default none: then `database` must be given (the constructor throws InvalidStoreInputError without either)
   * @example createSqliteConversationStore({ path: "./var/dispatch-once.db" })
   */
  path?: string;
  /**
   * Bring your own connection. The store does not change its journal mode or synchronous
   * setting (durability is read from them) and does not close it. Do not call the store
   * while the connection is inside your own transaction: it refuses (store_unavailable).
   * @default none: the store opens `path` itself (and closes it on close())
   * @example createSqliteConversationStore({ database: new Database("./var/app.db"), tablePrefix: "chat_" })
   */
  database?: SqliteDatabase;
  /**
   * Prefix of the four table names (default "dispatch_once_"): a plain identifier.
   * @default "dispatch_once_"
   * @example createSqliteConversationStore({ path: "./var/dispatch-once.db", tablePrefix: "chat_" })
   */
  tablePrefix?: string;
  /**
   * How long a write waits for another process's write lock before store_unavailable. Default 5000 ms.
   * @default 5000 (with `database`: the connection's own busy timeout, else 5000 when it has none)
   * @example createSqliteConversationStore({ path: "./var/dispatch-once.db", busyTimeoutMs: 10_000 })
   */
  busyTimeoutMs?: number;
  /**
   * With `path`: "FULL" (default) fsyncs the WAL at every commit, so the store declares
   * durability "durable". "NORMAL" can lose the last commits on power loss or an OS crash, so
   * the store declares "volatile" (and a runner beside a durable ledger refuses it, TURN-14).
   * @default "FULL" (with `path`; with `database` the option is refused and the connection's own setting is used)
   * @example createSqliteConversationStore({ path: "./var/dispatch-once.db", synchronous: "FULL" })
   */
  synchronous?: "FULL" | "NORMAL";
  /**
   * Create the tables if missing (default true). Set false when you run schemaSql() yourself.
   * @default true
   * @example createSqliteConversationStore({ database: db, migrate: false })
   */
  migrate?: boolean;
  /**
   * Test hook: a clock (milliseconds) that replaces the store's. By default every lease time
   * is read inside the statement from SQLite's own clock, one clock for every process on the
   * file (they share one host). With `now` the store declares `clock: "process"`.
   * @default none: SQLite's own clock, read inside each statement (`clock: "store"`)
   * @example createSqliteConversationStore({ path: ":memory:", now: () => Date.now() })
   */
  now?: () => number;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5000;

interface ConversationRow {
  fence: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  last_bound: string | null;
  begun_turn: unknown;
  begun_fence: unknown;
  lease_grant: string | null;
  lease_grant_fence: number | null;
  now: number;
}

interface Statements {
  ensure: Database.Statement<[string]>;
  conversation: Database.Statement<[string], ConversationRow>;
  message: Database.Statement<[string, string], StoredMessageRow>;
  nextSeq: Database.Statement<[string], { next: number }>;
  insertMessage: Database.Statement<[string, string, number, string]>;
  reopen: Database.Statement<[string, string]>;
  /** How long ago, on the store's clock, a message first failed (TURN-12's re-send window). */
  failedAge: Database.Statement<[string, string], { age: number }>;
  inProgress: Database.Statement<[string], StoredMessageRow>;
  oldestQueued: Database.Statement<[string], StoredMessageRow>;
  bind: Database.Statement<[number, string, string]>;
  setLastBound: Database.Statement<[string, string]>;
  setBegun: Database.Statement<[number, number, string]>;
  turnCount: Database.Statement<[string], { n: number }>;
  hasTurn: Database.Statement<[string, string], { one: number }>;
  turnsOf: Database.Statement<[string, string], StoredTurnRow>;
  /** The committed turns in order, each with its message's content on the message's first turn. */
  log: Database.Statement<[string], StoredTurnRow & { content: unknown; known: number }>;
  grant: Database.Statement<[number, string, number, string | null, number, string]>;
  /** The same grant sent again (TURN-10): the lease restarted, under its fence. */
  regrant: Database.Statement<[number, string, number]>;
  renew: Database.Statement<[number, string, number], { lease_expires_at: number }>;
  release: Database.Statement<[string, number]>;
  releaseGrant: Database.Statement<[string, string]>;
  earlierGrant: Database.Statement<[string, string, number], { fence: number }>;
  pruneGrants: Database.Statement<[string, number]>;
  keepGrant: Database.Statement<[string, string, number, number]>;
  insertTurn: Database.Statement<[string, number, string, string | null, string, string | null, string | null]>;
  answer: Database.Statement<[string, string]>;
  fail: Database.Statement<[string, string, string]>;
  insertRecord: Database.Statement<[string, string, string]>;
  records: Database.Statement<[string], { record: unknown }>;
  listFailed: Database.Statement<
    { conversation: string | null; cutoff: number | null; within: number | null; after: number | null; afterConversation: string; afterMessage: string; limit: number },
    { conversation_id: string; message_id: string; turn_index: unknown; failure: unknown; failed_at: number | null; first_failed_at: number; reopenable: number; past_window: number }
  >;  listStalled: Database.Statement<
    { conversation: string | null; cutoff: number; after: number | null; afterConversation: string; afterMessage: string; limit: number },
    { conversation_id: string; message_id: string; turn_index: unknown; stalled_since: number; lease_owner: string | null; bound_at: number | null }
  >;
}

/**
 * The conversation store on SQLite (better-sqlite3, WAL). Every write method is one
 * BEGIN IMMEDIATE transaction, so SQLite's single write lock serialises it against every
 * other writer on the file, in this process or another; every read is one statement.
 */
/** Every option the constructor takes (a misspelt one is refused, never ignored: ERR-1). */
const OPTION_NAMES: OptionNames<SqliteConversationStoreOptions> = { path: true, database: true, tablePrefix: true, busyTimeoutMs: true, synchronous: true, migrate: true, now: true };

export class SqliteConversationStore implements ConversationStore {
  readonly capabilities: ConversationStoreCapabilities;
  /** The four table names this store uses. */
  readonly tables: ConversationTables;
  /** The underlying connection (for diagnostics and tests). */
  readonly database: SqliteDatabase;
  private readonly ownsDatabase: boolean;
  private readonly prefix: string;
  private readonly stmts: Statements;
  private readonly write: <T>(fn: () => T) => T;
  private closed = false;

  constructor(options: SqliteConversationStoreOptions) {
    if (typeof options !== "object" || options === null) {
      throw new InvalidStoreInputError("options", "expected an options object");
    }
    const unknownOption = unknownOptionName(options, OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidStoreInputError(unknownOption, unknownOptionMessage("SqliteConversationStore", OPTION_NAMES));
    const prefix = options.tablePrefix ?? DEFAULT_TABLE_PREFIX;
    this.tables = tablesFor(prefix);
    this.prefix = prefix;
    if (options.busyTimeoutMs !== undefined && (!Number.isSafeInteger(options.busyTimeoutMs) || options.busyTimeoutMs < 0)) {
      throw new InvalidStoreInputError("busyTimeoutMs", `expected a non-negative integer, got ${String(options.busyTimeoutMs)}`);
    }
    if (options.synchronous !== undefined && options.synchronous !== "FULL" && options.synchronous !== "NORMAL") {
      throw new InvalidStoreInputError("synchronous", `expected "FULL" or "NORMAL", got ${JSON.stringify(options.synchronous)}`);
    }
    if (options.now !== undefined && typeof options.now !== "function") {
      throw new InvalidStoreInputError("now", "expected a function returning milliseconds");
    }
    // Read as truthy before: "yes" migrated, 0 skipped the tables and failed as store_unavailable.
    if (options.migrate !== undefined && typeof options.migrate !== "boolean") {
      throw new InvalidStoreInputError("migrate", `expected a boolean, got ${describeValue(options.migrate)}`);
    }
    if ((options.path === undefined) === (options.database === undefined)) {
      throw new InvalidStoreInputError("path", "give exactly one of `path` and `database`");
    }
    if (options.path !== undefined && (typeof options.path !== "string" || options.path.trim() === "")) {
      throw new InvalidStoreInputError("path", 'expected a file path (or ":memory:")');
    }
    if (options.database !== undefined && options.synchronous !== undefined) {
      throw new InvalidStoreInputError("synchronous", "set PRAGMA synchronous on your own connection instead");
    }

    let db: SqliteDatabase;
    try {
      db = options.path !== undefined ? new Database(options.path, { timeout: options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS }) : options.database!;
    } catch (cause) {
      throw new StoreUnavailableError(`cannot open SQLite database ${options.path}: ${message(cause)}`, { cause });
    }
    this.ownsDatabase = options.path !== undefined;
    this.database = db;
    try {
      // A fleet starting together on a new file can meet SQLITE_BUSY that SQLite's busy handler
      // never waits for (turning a new file to WAL upgrades a read lock to a write lock, refused
      // at once while another process holds the write lock). Every setup step is idempotent, so
      // the whole setup is retried until busyTimeoutMs has passed in total (as the SQLite ledger does).
      let bound: number;
      if (this.ownsDatabase) bound = options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS;
      else {
        if (options.busyTimeoutMs !== undefined) db.pragma(`busy_timeout = ${options.busyTimeoutMs}`);
        else if (Number(db.pragma("busy_timeout", { simple: true })) === 0) db.pragma(`busy_timeout = ${DEFAULT_BUSY_TIMEOUT_MS}`);
        bound = Number(db.pragma("busy_timeout", { simple: true }));
      }
      const set = openWithin(db, bound, () => {
        let journalMode: string;
        if (this.ownsDatabase) {
          // WAL: readers (message, log) proceed while another process writes.
          journalMode = String(db.pragma("journal_mode = WAL", { simple: true })).toLowerCase();
          db.pragma(`synchronous = ${options.synchronous ?? "FULL"}`);
        } else {
          journalMode = String(db.pragma("journal_mode", { simple: true })).toLowerCase();
          // Read the file once before reading synchronous: until a connection first reads a WAL file,
          // SQLite reports FULL for a setting the application never made, then runs with
          // SQLITE_DEFAULT_WAL_SYNCHRONOUS (NORMAL in better-sqlite3's build). Read before, a brought
          // connection on a new file was declared durable and ran with NORMAL (LEDGER-14, TURN-14).
          db.prepare("SELECT count(*) FROM sqlite_master").pluck().get();
        }
        const synchronous = Number(db.pragma("synchronous", { simple: true }));
        if (options.migrate ?? true) migrateTables(db, prefix, this.tables);
        let nowSql = STORE_NOW_SQL;
        if (options.now !== undefined) {
          const clock = options.now;
          nowSql = `dispatch_once_conversation_now_${prefix}()`;
          db.function(`dispatch_once_conversation_now_${prefix}`, { deterministic: false }, () => clock());
        }
        return { journalMode, synchronous, stmts: prepare(db, this.tables, nowSql) };
      });
      this.stmts = set.stmts;
      const transaction = db.transaction((fn: () => unknown) => fn());
      this.write = <T>(fn: () => T): T => transaction.immediate(fn) as T;
      this.capabilities = {
        durability: durabilityOf(db, set.journalMode, set.synchronous),
        clock: options.now === undefined ? "store" : "process",
        // An anonymous (":memory:" or temporary) database lives inside one connection.
        sharedAcrossProcesses: !db.memory,
        recordsWithCommit: true,
        supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true },
      };
    } catch (cause) {
      if (this.ownsDatabase) db.close();
      if (isDispatchOnceError(cause)) throw cause;
      throw new StoreUnavailableError(`cannot prepare the SQLite conversation tables: ${message(cause)}`, { cause });
    }
  }

  /** Create the tables if missing (idempotent; also run on open unless `migrate: false`). */
  migrate(): void {
    this.guard("", "migrate", () => migrateTables(this.database, this.prefix, this.tables));
  }

  async appendUserMessage(conversationId: string, message: { id: string; content: JsonValue }, options?: AppendOptions): Promise<AppendResult> {
    checkUserMessage(message);
    checkMessageId(message.id);
    checkConversationId(conversationId);
    const content = encodeStoreJson("content", message.content);
    const within = checkReopenWithinMs(options);
    return this.guard(conversationId, "appendUserMessage", () =>
      this.write(() => {
        const s = this.stmts;
        const known = s.message.get(conversationId, message.id);
        if (known !== undefined) {
          const stored = decodeStoredMessage(conversationId, known);
          // TURN-12: a failed message reopens only while no other message was bound since it.
          if (stored.state === "failed" && this.conversationRow(conversationId)?.last_bound === stored.id) {
            // TURN-12's re-send window, on the store's clock, in the reopen's own write transaction.
            if (within !== undefined && Number(s.failedAge.get(conversationId, stored.id)!.age) >= within) {
              return { appended: false, message: stored, reopened: false, pastReopenWindow: true };
            }
            s.reopen.run(conversationId, stored.id);
            // Read back: the reopened row shows the first failure its window counts from (TURN-12).
            return { appended: false, message: decodeStoredMessage(conversationId, s.message.get(conversationId, stored.id)!), reopened: true };
          }
          return { appended: false, message: stored, reopened: false };
        }
        s.ensure.run(conversationId);
        const seq = s.nextSeq.get(conversationId)!.next;
        s.insertMessage.run(conversationId, message.id, seq, content);
        // What the caller reads back is what a reader of the row gets (JSON's value, not the caller's object).
        return { appended: true, message: { id: message.id, content: JSON.parse(content) as JsonValue, seq, state: "queued" }, reopened: false };
      }),
    );
  }

  async message(conversationId: string, messageId: string): Promise<StoredMessage | undefined> {
    checkConversationId(conversationId);
    checkMessageIdType(messageId);
    return this.guard(conversationId, "message", () => {
      const row = this.stmts.message.get(conversationId, messageId);
      return row === undefined ? undefined : decodeStoredMessage(conversationId, row);
    });
  }

  async turnsOf(conversationId: string, messageId: string): Promise<StoredTurn[]> {
    checkConversationId(conversationId);
    checkMessageIdType(messageId);
    return this.guard(conversationId, "turnsOf", () => this.stmts.turnsOf.all(conversationId, messageId).map((r) => decodeStoredTurn(conversationId, r)));
  }

  async log(conversationId: string): Promise<JsonValue[]> {
    checkConversationId(conversationId);
    return this.guard(conversationId, "log", () => this.readLog(conversationId));
  }

  async acquireLease(conversationId: string, owner: string, leaseMs: number, grantId?: string): Promise<LeaseResult> {
    checkConversationId(conversationId);
    checkLeaseOwner(owner);
    const ms = checkTurnLeaseMs(leaseMs);
    const id = checkLeaseGrantId(grantId);
    return this.guard(conversationId, "acquireLease", () =>
      this.write(() => {
        this.stmts.ensure.run(conversationId);
        const row = this.conversationRow(conversationId)!;
        // Measured on the store's clock, read in this transaction.
        const live = row.lease_owner !== null && row.lease_expires_at !== null && row.lease_expires_at > row.now;
        // TURN-10: the latest grant's own id, only while no grant (of any version) came after it.
        if (id !== undefined && row.lease_grant === id && row.lease_grant_fence === row.fence) {
          if (live) {
            const leaseExpiresAt = row.now + ms;
            this.stmts.regrant.run(leaseExpiresAt, conversationId, row.fence);
            return { acquired: true, fence: row.fence, leaseExpiresAt };
          }
          // Released or expired: that grant is over, and a late copy of it takes nothing.
          throw new ConversationLeaseLostError(conversationId, row.fence);
        }
        // An earlier grant's id: a late copy, which must not take a free lease and hold the
        // conversation for a whole lease with nobody working under it. In the row still when a
        // process of an earlier version made the grants after it, else in lease_grants.
        if (id !== undefined) {
          const earlier = row.lease_grant === id && row.lease_grant_fence !== null
            ? row.lease_grant_fence
            : this.stmts.earlierGrant.get(conversationId, id, row.now - LEASE_GRANT_RETENTION_MS)?.fence;
          if (earlier !== undefined) throw new ConversationLeaseLostError(conversationId, earlier);
        }
        if (live) return { acquired: false, owner: row.lease_owner!, leaseExpiresAt: row.lease_expires_at! };
        const fence = row.fence + 1;
        const leaseExpiresAt = row.now + ms;
        // The grant this one supersedes is kept as an earlier grant; what is past retention goes.
        this.stmts.pruneGrants.run(conversationId, row.now - LEASE_GRANT_RETENTION_MS);
        if (row.lease_grant !== null && row.lease_grant_fence !== null) this.stmts.keepGrant.run(conversationId, row.lease_grant, row.lease_grant_fence, row.now);
        this.stmts.grant.run(fence, owner, leaseExpiresAt, id ?? null, fence, conversationId);
        return { acquired: true, fence, leaseExpiresAt };
      }),
    );
  }

  async renewLease(conversationId: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    checkConversationId(conversationId);
    const ms = checkTurnLeaseMs(leaseMs);
    return this.guard(conversationId, "renewLease", () => {
      // One statement: the fence, not the clock, decides (an expired lease nobody took is still held).
      const renewed = isFence(fence) ? this.stmts.renew.get(ms, conversationId, fence) : undefined;
      if (renewed === undefined) throw new ConversationLeaseLostError(conversationId, fence);
      return { leaseExpiresAt: renewed.lease_expires_at };
    });
  }

  async releaseLease(conversationId: string, fence: number): Promise<void> {
    checkConversationId(conversationId);
    this.guard(conversationId, "releaseLease", () => {
      if (isFence(fence)) this.stmts.release.run(conversationId, fence);
    });
  }

  async releaseLeaseGrant(conversationId: string, grantId: string): Promise<void> {
    checkConversationId(conversationId);
    const id = checkLeaseGrantId(grantId, { required: true })!;
    this.guard(conversationId, "releaseLeaseGrant", () =>
      this.write(() => {
        const s = this.stmts;
        if (s.releaseGrant.run(conversationId, id).changes > 0) return;
        s.ensure.run(conversationId);
        const row = this.conversationRow(conversationId)!;
        if (row.lease_grant === id || s.earlierGrant.get(conversationId, id, row.now - LEASE_GRANT_RETENTION_MS) !== undefined) return;
        // TURN-10: a grant id no grant carries: its acquire has not applied (yet), and its runner
        // gave it up. Kept as given back, like an earlier grant (fence 0: none was made under it),
        // so that a copy of that acquire landing later is refused rather than taking a free lease
        // for nobody; forgotten as earlier grants are.
        s.pruneGrants.run(conversationId, row.now - LEASE_GRANT_RETENTION_MS);
        s.keepGrant.run(conversationId, id, 0, row.now);
      }),
    );
  }

  async beginTurn(conversationId: string, fence: number): Promise<TurnSnapshot | undefined> {
    checkConversationId(conversationId);
    return this.guard(conversationId, "beginTurn", () =>
      this.write(() => {
        this.assertHeld(conversationId, fence);
        const s = this.stmts;
        const row = s.inProgress.get(conversationId) ?? s.oldestQueued.get(conversationId);
        if (row === undefined) return undefined;
        let current = decodeStoredMessage(conversationId, row);
        const turnIndex = s.turnCount.get(conversationId)!.n;
        // TURN-15: the fence that first began this index, kept in the same commit as the binding.
        const conversation = this.conversationRow(conversationId)!;
        const begun = beginTurnIndex(conversationId, { begunTurn: conversation.begun_turn, begunFence: conversation.begun_fence }, turnIndex, fence);
        if (begun.write) s.setBegun.run(turnIndex, fence, conversationId);
        const bound = current.state === "queued";
        if (bound) {
          // TURN-11: bound durably before the first attempt: state and turn index in this commit.
          s.bind.run(turnIndex, conversationId, current.id);
          s.setLastBound.run(current.id, conversationId);
          // Read back: the binding's index and, on a first binding, its time (bound_at).
          current = decodeStoredMessage(conversationId, s.message.get(conversationId, current.id)!);
        }
        const input = this.readLog(conversationId);
        if (s.hasTurn.get(conversationId, current.id) === undefined) input.push(structuredClone(current.content));
        return { conversationId, turnIndex, message: current, input, resumed: begun.resumed, bound };
      }),
    );
  }

  async commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }> {
    checkConversationId(conversationId);
    const c = checkCommit(commit);
    return this.guard(conversationId, "commitTurn", () =>
      this.write(() => {
        const s = this.stmts;
        // TURN-5: the lease's fence, the log's version and the bound message, all under the write lock.
        const row = this.conversationRow(conversationId);
        if (row === undefined || row.lease_owner === null || !isFence(c.fence) || row.fence !== c.fence) return { committed: false };
        if (s.turnCount.get(conversationId)!.n !== c.turnIndex) return { committed: false };
        const stored = s.message.get(conversationId, c.messageId);
        if (stored === undefined || decodeStoredMessage(conversationId, stored).state !== "in_progress") return { committed: false };
        s.insertTurn.run(conversationId, c.turnIndex, c.messageId, c.stopReason, c.assistant, c.toolResults, c.callKeys);
        if (c.answers) s.answer.run(conversationId, c.messageId);
        // RECORD-4: beside the conversation, never in the log; in the commit's own transaction (RECORD-8).
        if (c.record !== null) s.insertRecord.run(conversationId, conversationId, c.record);
        return { committed: true };
      }),
    );
  }

  async failMessage(conversationId: string, fence: number, messageId: string, record: JsonValue): Promise<void> {
    checkConversationId(conversationId);
    const text = encodeStoreJson("record", record);
    this.guard(conversationId, "failMessage", () =>
      this.write(() => {
        this.assertHeld(conversationId, fence);
        const row = typeof messageId === "string" ? this.stmts.message.get(conversationId, messageId) : undefined;
        if (row === undefined || decodeStoredMessage(conversationId, row).state !== "in_progress") {
          throw new InvalidStoreInputError("messageId", `message ${String(messageId)} is not in progress`);
        }
        this.stmts.fail.run(text, conversationId, messageId);
        // RECORD-4: the record goes beside the conversation, never into the log.
        this.stmts.insertRecord.run(conversationId, conversationId, text);
      }),
    );
  }

  async addRecord(conversationId: string, record: JsonValue): Promise<void> {
    checkConversationId(conversationId);
    const text = encodeStoreJson("record", record);
    this.guard(conversationId, "addRecord", () => this.write(() => this.stmts.insertRecord.run(conversationId, conversationId, text)));
  }

  async records(conversationId: string): Promise<JsonValue[]> {
    checkConversationId(conversationId);
    return this.guard(conversationId, "records", () =>
      this.stmts.records.all(conversationId).map((r, i) => decodeStoreJson(conversationId, `record ${i + 1}`, r.record)),
    );
  }

  /** Failed turns across conversations, oldest failure first, a page at a time (TURN-17). */
  async listFailedTurns(query: FailedTurnsQuery = {}): Promise<FailedTurnsPage> {
    const { limit, after } = checkFailedTurnsQuery(query);
    return this.guard(query.conversationId ?? "", "listFailedTurns", () => {
      // One more than asked: whether a next page exists, without a second query.
      const rows = this.stmts.listFailed.all({
        conversation: query.conversationId ?? null,
        cutoff: query.olderThanMs ?? null,
        within: query.reopenWithinMs ?? null,
        after: after?.failedAt ?? null,
        afterConversation: after?.conversationId ?? "",
        afterMessage: after?.messageId ?? "",
        limit: limit + 1,
      });
      const turns: FailedTurn[] = rows.slice(0, limit).map((row) => {
        const turn: FailedTurn = {
          conversationId: row.conversation_id,
          messageId: row.message_id,
          failedAt: failedAtOf(row.conversation_id, row.message_id, row.failed_at),
          failure: decodeStoreJson(row.conversation_id, `failure of message ${row.message_id}`, row.failure),
          firstFailedAt: row.first_failed_at,
          reopenable: row.reopenable === 1,
        };
        // TURN-12's window, judged in the listing's own statement as appendUserMessage judges it.
        if (query.reopenWithinMs !== undefined) {
          turn.pastReopenWindow = turn.reopenable === true && row.past_window === 1;
          turn.reopenable = turn.reopenable === true && !turn.pastReopenWindow;
        }
        if (typeof row.turn_index === "number") turn.turnIndex = row.turn_index;
        return turn;
      });
      const last = turns.at(-1);
      return rows.length > limit && last !== undefined ? { turns, cursor: encodeFailedTurnsCursor(last) } : { turns };
    });
  }

  async listStalledMessages(query: StalledMessagesQuery = {}): Promise<StalledMessagesPage> {
    const { limit, after } = checkStalledMessagesQuery(query);
    return this.guard(query.conversationId ?? "", "listStalledMessages", () => {
      const rows = this.stmts.listStalled.all({
        conversation: query.conversationId ?? null,
        cutoff: query.olderThanMs ?? 0,
        after: after?.failedAt ?? null,
        afterConversation: after?.conversationId ?? "",
        afterMessage: after?.messageId ?? "",
        limit: limit + 1,
      });
      const messages: StalledMessage[] = [];
      for (const row of rows.slice(0, limit)) {
        if (typeof row.turn_index !== "number" || !Number.isSafeInteger(row.turn_index)) {
          throw new StoreCorruptError(row.conversation_id, `message ${row.message_id} is in progress with turn index ${String(row.turn_index)}`);
        }
        const stalled: StalledMessage = { conversationId: row.conversation_id, messageId: row.message_id, turnIndex: row.turn_index, stalledSince: row.stalled_since };
        if (row.lease_owner !== null) stalled.leaseOwner = row.lease_owner;
        if (row.bound_at !== null) stalled.boundAt = row.bound_at;
        messages.push(stalled);
      }
      const last = messages.at(-1);
      return rows.length > limit && last !== undefined
        ? { messages, cursor: encodeFailedTurnsCursor({ failedAt: last.stalledSince, conversationId: last.conversationId, messageId: last.messageId }) }
        : { messages };
    });
  }

  /** Close the connection if the store opened it (a brought-your-own connection is left open). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsDatabase && this.database.open) this.database.close();
  }

  private conversationRow(conversationId: string): ConversationRow | undefined {
    const row = this.stmts.conversation.get(conversationId);
    if (row === undefined) return undefined;
    if (!Number.isSafeInteger(row.fence) || row.fence < 0 || typeof row.now !== "number") {
      throw new StoreCorruptError(conversationId, `the conversation row has fence ${String(row.fence)}`);
    }
    return row;
  }

  /** The fence, not the clock, decides: an expired lease nobody took is still its holder's. */
  private assertHeld(conversationId: string, fence: number): void {
    const row = this.conversationRow(conversationId);
    if (row === undefined || row.lease_owner === null || !isFence(fence) || row.fence !== fence) {
      throw new ConversationLeaseLostError(conversationId, fence);
    }
  }

  /** The log: per committed turn in order, the message's content before its first turn, then assistant and tool results. */
  private readLog(conversationId: string): JsonValue[] {
    const out: JsonValue[] = [];
    const started = new Set<string>();
    let previous: string | undefined;
    for (const row of this.stmts.log.all(conversationId)) {
      if (row.message_id !== previous) {
        // A message's turns are contiguous (TURN-9: one message in progress at a time).
        if (started.has(row.message_id) || row.known !== 1) {
          throw new StoreCorruptError(conversationId, `turn ${String(row.turn_index)} belongs to message ${row.message_id}, which ${row.known !== 1 ? "is not stored" : "answered an earlier turn before another message"}`);
        }
        started.add(row.message_id);
        out.push(decodeStoreJson(conversationId, `content of message ${row.message_id}`, row.content));
        previous = row.message_id;
      }
      const turn = decodeStoredTurn(conversationId, row);
      out.push(turn.assistant);
      if (turn.toolResults !== undefined) out.push(turn.toolResults);
    }
    return out;
  }

  /** Run a store operation; every driver failure becomes a typed store error. */
  private guard<T>(conversationId: string, operation: string, fn: () => T): T {
    if (this.closed) throw new StoreUnavailableError(`SQLite conversation store ${operation}: the store is closed`);
    if (this.database.open && this.database.inTransaction) {
      // Inside the caller's transaction our writes could still roll back after we report them.
      throw new StoreUnavailableError(`SQLite conversation store ${operation}: the connection is inside another transaction`);
    }
    try {
      return fn();
    } catch (cause) {
      if (isDispatchOnceError(cause)) throw cause;
      const code = (cause as { code?: unknown }).code;
      if (typeof code === "string" && (code.startsWith("SQLITE_CORRUPT") || code === "SQLITE_NOTADB")) {
        throw new StoreCorruptError(conversationId, `the database file is damaged (${code})`, { cause });
      }
      // SQLITE_BUSY past the busy timeout, I/O errors, a closed or read-only connection: the
      // transaction did not commit, so nothing is reported as done.
      throw new StoreUnavailableError(`SQLite conversation store ${operation} failed: ${message(cause)}`, { cause });
    }
  }
}

/** Open (or adopt) a SQLite conversation store. A string is a file path. */
export function createSqliteConversationStore(options: SqliteConversationStoreOptions | string): SqliteConversationStore {
  return new SqliteConversationStore(typeof options === "string" ? { path: options } : options);
}

function prepare(db: SqliteDatabase, t: ConversationTables, now: string): Statements {
  const conv = `"${t.conversations}"`;
  const msgs = `"${t.messages}"`;
  const turns = `"${t.turns}"`;
  const recs = `"${t.records}"`;
  const grants = `"${t.leaseGrants}"`;
  const messageColumns = "message_id, seq, state, content, turn_index, failure, first_failed_at, bound_at";
  const held = "conversation_id = ? AND lease_owner IS NOT NULL AND fence = ?";
  return {
    ensure: db.prepare(`INSERT INTO ${conv} (conversation_id) VALUES (?) ON CONFLICT (conversation_id) DO NOTHING`),
    conversation: db.prepare(
      `SELECT fence, lease_owner, lease_expires_at, last_bound, begun_turn, begun_fence, lease_grant, lease_grant_fence, ${now} AS now FROM ${conv} WHERE conversation_id = ?`,
    ),
    message: db.prepare(`SELECT ${messageColumns} FROM ${msgs} WHERE conversation_id = ? AND message_id = ?`),
    nextSeq: db.prepare(`SELECT coalesce(max(seq), 0) + 1 AS next FROM ${msgs} WHERE conversation_id = ?`),
    insertMessage: db.prepare(`INSERT INTO ${msgs} (conversation_id, message_id, seq, state, content) VALUES (?, ?, ?, 'queued', ?)`),
    // A failure whose first time was not kept (a row from before first_failed_at, or failed by an
    // earlier version's process) keeps its last time as the first: the retry that follows must not
    // restart TURN-12's window while the first attempts' ledger rows keep aging.
    reopen: db.prepare(`UPDATE ${msgs} SET state = 'queued', failure = NULL, failed_at = NULL, first_failed_at = coalesce(first_failed_at, failed_at, 0) WHERE conversation_id = ? AND message_id = ?`),
    // From the first failure (kept across reopens; a retry that fails again does not restart the
    // window), else the last one (rows failed before first_failed_at existed), else 0: unknown, past;
    // and from the first binding when it is earlier, as it always is where kept (bound_at): the rows
    // of the message's calls age from its first attempt, maybe hours before its first failure.
    failedAge: db.prepare(`SELECT ${now} - ${windowStart("")} AS age FROM ${msgs} WHERE conversation_id = ? AND message_id = ?`),
    inProgress: db.prepare(`SELECT ${messageColumns} FROM ${msgs} WHERE conversation_id = ? AND state = 'in_progress' ORDER BY seq LIMIT 1`),
    oldestQueued: db.prepare(`SELECT ${messageColumns} FROM ${msgs} WHERE conversation_id = ? AND state = 'queued' ORDER BY seq LIMIT 1`),
    // A reopened message keeps the index of its first turn (TURN-11, TURN-12), and the time of its
    // first binding: bound_at is written only where turn_index is still NULL (SET reads the old
    // row), so a row bound before bound_at existed stays undated rather than dated by a rebinding.
    // Bound where a failed message stopped (the last bound one failed; nothing was committed
    // since), it meets that message's rows (keys come from the index) and takes its window start
    // when earlier (TURN-11). Run before last_bound moves to this message.
    bind: db.prepare(
      `UPDATE ${msgs} SET state = 'in_progress', turn_index = coalesce(turn_index, ?),
         bound_at = CASE WHEN turn_index IS NULL THEN min(${now}, coalesce(
           (SELECT ${windowStart("l.")} FROM ${msgs} l JOIN ${conv} c ON c.conversation_id = l.conversation_id AND c.last_bound = l.message_id
             WHERE l.conversation_id = ${msgs}.conversation_id AND l.state = 'failed' AND l.message_id <> ${msgs}.message_id), ${now})) ELSE bound_at END
       WHERE conversation_id = ? AND message_id = ?`,
    ),
    setLastBound: db.prepare(`UPDATE ${conv} SET last_bound = ? WHERE conversation_id = ?`),
    setBegun: db.prepare(`UPDATE ${conv} SET begun_turn = ?, begun_fence = ? WHERE conversation_id = ?`),
    turnCount: db.prepare(`SELECT coalesce(max(turn_index) + 1, 0) AS n FROM ${turns} WHERE conversation_id = ?`),
    hasTurn: db.prepare(`SELECT 1 AS one FROM ${turns} WHERE conversation_id = ? AND message_id = ? LIMIT 1`),
    turnsOf: db.prepare(
      `SELECT turn_index, message_id, assistant, tool_results, stop_reason, call_keys FROM ${turns} WHERE conversation_id = ? AND message_id = ? ORDER BY turn_index`,
    ),
    // The content is fetched only where a message's turns begin (lag), not once per turn.
    log: db.prepare(
      `SELECT t.turn_index, t.message_id, t.assistant, t.tool_results, t.stop_reason, (m.message_id IS NOT NULL) AS known,
         CASE WHEN lag(t.message_id) OVER (ORDER BY t.turn_index) IS t.message_id THEN NULL ELSE m.content END AS content
       FROM ${turns} t LEFT JOIN ${msgs} m ON m.conversation_id = t.conversation_id AND m.message_id = t.message_id
       WHERE t.conversation_id = ? ORDER BY t.turn_index`,
    ),
    // The grant id and its fence are written with every grant (NULL when it carries none), so an
    // earlier grant's id is never taken for this one.
    grant: db.prepare(`UPDATE ${conv} SET fence = ?, lease_owner = ?, lease_expires_at = ?, lease_grant = ?, lease_grant_fence = ? WHERE conversation_id = ?`),
    regrant: db.prepare(`UPDATE ${conv} SET lease_expires_at = ? WHERE ${held}`),
    renew: db.prepare(`UPDATE ${conv} SET lease_expires_at = ${now} + ? WHERE ${held} RETURNING lease_expires_at`),
    // The fence stays: the next grant is one higher even after a release.
    release: db.prepare(`UPDATE ${conv} SET lease_owner = NULL, lease_expires_at = NULL WHERE ${held}`),
    // TURN-10: only while the named grant still holds the lease (live or expired); the grant id stays, so the grant is over.
    releaseGrant: db.prepare(
      `UPDATE ${conv} SET lease_owner = NULL, lease_expires_at = NULL
       WHERE conversation_id = ? AND lease_owner IS NOT NULL AND lease_grant = ? AND lease_grant_fence = fence`,
    ),
    // TURN-10's earlier grants (see schemaSql): kept from when a later grant superseded them.
    earlierGrant: db.prepare(`SELECT fence FROM ${grants} WHERE conversation_id = ? AND grant_id = ? AND superseded_at > ?`),
    pruneGrants: db.prepare(`DELETE FROM ${grants} WHERE conversation_id = ? AND superseded_at <= ?`),
    keepGrant: db.prepare(
      `INSERT INTO ${grants} (conversation_id, grant_id, fence, superseded_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (conversation_id, grant_id) DO UPDATE SET fence = excluded.fence, superseded_at = excluded.superseded_at`,
    ),
    insertTurn: db.prepare(
      `INSERT INTO ${turns} (conversation_id, turn_index, message_id, stop_reason, assistant, tool_results, call_keys) VALUES (?, ?, ?, ?, ?, ?, ?)`,
    ),
    answer: db.prepare(`UPDATE ${msgs} SET state = 'answered' WHERE conversation_id = ? AND message_id = ?`),
    fail: db.prepare(`UPDATE ${msgs} SET state = 'failed', failure = ?, failed_at = ${now}, first_failed_at = coalesce(first_failed_at, ${now}) WHERE conversation_id = ? AND message_id = ?`),
    insertRecord: db.prepare(
      `INSERT INTO ${recs} (conversation_id, seq, record) VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM ${recs} WHERE conversation_id = ?), ?)`,
    ),
    records: db.prepare(`SELECT record FROM ${recs} WHERE conversation_id = ? ORDER BY seq`),
    // Keyset paging over the partial index on failed messages (failedIndexSql): no scan of the rest.
    // The ids compare under BINARY, their UTF-8 bytes: code point order, the order TURN-17 names.
    // Each listed message's conversation row is looked up by its key in the same statement, for
    // reopenable: a re-send reopens a failed message only while it is last_bound (TURN-12). The
    // LEFT JOIN keeps the messages' index the outer loop (a missing row: not reopenable). The
    // window counts from the first failure or the binding as failedAge does (TURN-12), on the same clock.
    listFailed: db.prepare(
      `SELECT m.conversation_id, m.message_id, m.turn_index, m.failure, m.failed_at, (c.last_bound IS m.message_id) AS reopenable,
              coalesce(m.first_failed_at, m.failed_at, 0) AS first_failed_at,
              (:within IS NOT NULL AND ${now} - ${windowStart("m.")} >= :within) AS past_window
       FROM ${msgs} m LEFT JOIN ${conv} c ON c.conversation_id = m.conversation_id
       WHERE m.state = 'failed'
         AND (:conversation IS NULL OR m.conversation_id = :conversation)
         AND (:cutoff IS NULL OR m.failed_at <= ${now} - :cutoff)
         AND (:after IS NULL OR (m.failed_at, m.conversation_id, m.message_id) > (:after, :afterConversation, :afterMessage))
       ORDER BY m.failed_at, m.conversation_id, m.message_id LIMIT :limit`,
    ),
    // TURN-22: the messages in progress (the partial index of failedIndexSql holds only them, at
    // most one a conversation) whose lease is released or expired, read with the lease in one
    // statement so that a live holder's message is never listed. Since when: the lapsed lease's
    // expiry, else (released: no release time is kept) the binding, else 0.
    listStalled: db.prepare(
      `SELECT * FROM (
         SELECT m.conversation_id, m.message_id, m.turn_index, c.lease_owner, m.bound_at,
                CASE WHEN c.lease_owner IS NOT NULL THEN c.lease_expires_at ELSE coalesce(m.bound_at, 0) END AS stalled_since
         FROM ${msgs} m JOIN ${conv} c ON c.conversation_id = m.conversation_id
         WHERE m.state = 'in_progress'
           AND (:conversation IS NULL OR m.conversation_id = :conversation)
           AND (c.lease_owner IS NULL OR c.lease_expires_at <= ${now}))
       WHERE stalled_since <= ${now} - :cutoff
         AND (:after IS NULL OR (stalled_since, conversation_id, message_id) > (:after, :afterConversation, :afterMessage))
       ORDER BY stalled_since, conversation_id, message_id LIMIT :limit`,
    ),
  };
}

/**
 * Where TURN-12's re-send window counts from (store clock): the earlier of the first binding and
 * the first failure (else the last failure, else 0: unknown, past every window). SQLite's min()
 * of a NULL is NULL, so a row bound before bound_at existed counts from its failure alone.
 */
function windowStart(alias: string): string {
  const failure = `coalesce(${alias}first_failed_at, ${alias}failed_at, 0)`;
  return `min(coalesce(${alias}bound_at, ${failure}), ${failure})`;
}

/**
 * Create the tables if missing, and give tables made by an earlier version the columns added
 * since (TURN-15's begun_turn/begun_fence), in one write transaction: two processes opening an
 * old file together add them once.
 */
function migrateTables(db: SqliteDatabase, prefix: string, tables: ConversationTables): void {
  db.exec(schemaSql(prefix));
  db.transaction(() => {
    const columns = db.prepare(`SELECT name FROM pragma_table_info(?)`).all(tables.conversations) as { name: string }[];
    if (!columns.some((c) => c.name === "begun_turn")) db.exec(upgradeSql(prefix));
    if (!columns.some((c) => c.name === "lease_grant")) db.exec(leaseGrantUpgradeSql(prefix));
    const messageColumns = db.prepare(`SELECT name FROM pragma_table_info(?)`).all(tables.messages) as { name: string }[];
    if (!messageColumns.some((c) => c.name === "failed_at")) db.exec(failedAtUpgradeSql(prefix));
    if (!messageColumns.some((c) => c.name === "first_failed_at")) db.exec(firstFailedAtUpgradeSql(prefix));
    if (!messageColumns.some((c) => c.name === "bound_at")) db.exec(boundAtUpgradeSql(prefix));
    const turnColumns = db.prepare(`SELECT name FROM pragma_table_info(?)`).all(tables.turns) as { name: string }[];
    if (!turnColumns.some((c) => c.name === "call_keys")) db.exec(callKeysUpgradeSql(prefix));
    db.exec(failedIndexSql(prefix));
    db.exec(failedAtTriggerSql(prefix));
  }).immediate();
}

/**
 * A failed message's failure time. NULL cannot be written while migrate()'s triggers are in place; read as 0 it
 * would be listed where the index puts NULL (first, before the real 0s), and olderThanMs and the
 * cursor after it would drop rows, so it is store_corrupt, naming the row and the remedy.
 */
function failedAtOf(conversationId: string, messageId: string, value: number | null): number {
  if (value === null) {
    throw new StoreCorruptError(conversationId, `failed message ${messageId} has no failure time (failed_at is NULL: written where the triggers migrate() creates were missing or bypassed); migrate() sets it to 0, an unknown time`);
  }
  return Number(value);
}

function isFence(fence: unknown): fence is number {
  return typeof fence === "number" && Number.isSafeInteger(fence) && fence >= 1;
}

function checkConversationId(conversationId: unknown): asserts conversationId is string {
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
    throw new InvalidStoreInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
  }
}

function checkMessageIdType(messageId: unknown): asserts messageId is string {
  if (typeof messageId !== "string") throw new InvalidStoreInputError("messageId", "must be a string");
}

/** A commit's fields, with its JSON already encoded (refused before the store is touched). */
function checkCommit(commit: TurnCommit): {
  fence: unknown;
  messageId: string;
  turnIndex: number;
  assistant: string;
  toolResults: string | null;
  stopReason: string | null;
  answers: boolean;
  record: string | null;
  callKeys: string | null;
} {
  if (typeof commit !== "object" || commit === null) throw new InvalidStoreInputError("commit", "expected a turn commit object");
  checkMessageIdType(commit.messageId);
  if (typeof commit.turnIndex !== "number") throw new InvalidStoreInputError("turnIndex", "must be a number");
  if (commit.stopReason !== null && (typeof commit.stopReason !== "string" || !commit.stopReason.isWellFormed())) {
    throw new InvalidStoreInputError("stopReason", "must be a well-formed string or null");
  }
  if (typeof commit.answers !== "boolean") throw new InvalidStoreInputError("answers", "must be a boolean");
  return {
    fence: commit.fence,
    messageId: commit.messageId,
    // A turn index that is not a whole number can never equal the committed count: not committed.
    turnIndex: commit.turnIndex,
    assistant: encodeStoreJson("assistant", commit.assistant),
    toolResults: commit.toolResults === undefined ? null : encodeStoreJson("toolResults", commit.toolResults),
    stopReason: commit.stopReason,
    answers: commit.answers,
    record: commit.record === undefined ? null : encodeStoreJson("record", commit.record),
    // TURN-24: kept as JSON text beside the turn, never in the log.
    callKeys: encodeCallKeys(commit.callKeys),
  };
}

/**
 * SQLite's durability follows its journal and sync settings: WAL or a rollback journal with
 * synchronous=FULL (or EXTRA) fsyncs every commit; WAL with NORMAL can lose the last commits
 * on power loss; memory/off journals and anonymous databases lose everything.
 */
function durabilityOf(db: SqliteDatabase, journalMode: string, synchronous: number): "durable" | "volatile" {
  if (db.memory) return "volatile";
  if (journalMode === "memory" || journalMode === "off") return "volatile";
  return synchronous >= 2 ? "durable" : "volatile";
}

function message(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
