import Database from "better-sqlite3";
import {
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  DispatchOnceError,
  InvalidLedgerInputError,
  LedgerCorruptError,
  LedgerUnavailableError,
  ROW_FORMAT_VERSION,
  StaleClaimError,
  releasedClaimError,
  retiredClaimError,
  checkListQuery,
  checkResolveRequest,
  checkRetireRequest,
  decodeListCursor,
  encodeListCursor,
  rowSince,
  ResolutionRefusedError,
  type AuditEntry,
  type ListRowsPage,
  type ListRowsQuery,
  type ResolveRequest,
  type ResolvedRow,
  type ClaimRequest,
  type ClaimResult,
  type InFlightRow,
  type Ledger,
  type LedgerCapabilities,
  type LedgerRow,
  type RetireOptions,
  type RetireResult,
  type StoredError,
  type TerminalRow,
  type UnknownRow,
} from "@dispatch-once/core";
import {
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerKey,
  checkLedgerLeaseMs,
  checkStoredError,
  checkUnknownReason,
  openWithin,
  resultRefusal,
  type LedgerStoreLimits,
  unknownOptionName,
  unknownOptionMessage,
  type OptionNames,
} from "@dispatch-once/core/internal";
import { decodeRow, type DecodedRow, type RawRow } from "./row.js";
import {
  DEFAULT_TABLE,
  addClaimIdColumnSql,
  addConversationColumnsSql,
  addRequestColumnSql,
  assertTableName,
  auditTableSql,
  inFlightIndexSql,
  listIndexesSql,
  retiredTableSql,
  tableSql,
} from "./schema.js";

/** better-sqlite3's connection type, re-exported so callers can bring their own. */
export type SqliteDatabase = Database.Database;

export type SqliteSynchronous = "FULL" | "NORMAL";

export interface SqliteLedgerOptions {
  /**
   * Database file to open (created if absent). Exactly one of `path` and `database`.
   * @default none: then `database` must be given (the constructor throws InvalidLedgerInputError without either)
   * @example createSqliteLedger({ path: "./var/ledger.db" })
   */
  path?: string;
  /**
   * Bring your own connection. The ledger does not change its journal mode or
   * synchronous setting (durability is read from them) and does not close it.
   * Every call made while the connection is inside your own transaction is refused with
   * InvalidLedgerInputError (field "database"): your rollback would undo a claim the ledger
   * had already reported (LEDGER-22).
   * @default none: the ledger opens `path` itself (and closes it on close())
   * @example createSqliteLedger({ database: new Database("./var/app.db"), table: "tool_calls" })
   */
  database?: SqliteDatabase;
  /**
   * Table name (a plain identifier). Default "dispatch_once_ledger".
   * @default "dispatch_once_ledger"
   * @example createSqliteLedger({ path: "./var/ledger.db", table: "tool_calls" })
   */
  table?: string;
  /**
   * How long finished and released rows are kept (LEDGER-13). Default 24 h.
   * @default DEFAULT_RETENTION_MS (86_400_000, 24 h)
   * @example createSqliteLedger({ path: "./var/ledger.db", retentionMs: 7 * 24 * 3600_000 })
   */
  retentionMs?: number;
  /**
   * Largest result complete() accepts, in UTF-8 bytes (LEDGER-10). Default 1 MiB.
   * @default DEFAULT_MAX_RESULT_BYTES (1_048_576, 1 MiB)
   * @example createSqliteLedger({ path: "./var/ledger.db", maxResultBytes: 4 * 1024 * 1024 })
   */
  maxResultBytes?: number;
  /**
   * How long a statement waits for another process's write lock before the call fails
   * with LedgerUnavailableError. Default 5000 ms. With `database`, only set when given
   * (or when the connection has no busy timeout at all). It also bounds the whole first-open
   * setup (journal mode, schema, statements), which is retried on SQLITE_BUSY/SQLITE_LOCKED
   * until this much time has passed in total: a fleet starting together on a new file opens.
   * @default 5000 (with `database`: the connection's own busy timeout, else 5000 when it has none)
   * @example createSqliteLedger({ path: "./var/ledger.db", busyTimeoutMs: 10_000 })
   */
  busyTimeoutMs?: number;
  /**
   * With `path`: "FULL" (default) fsyncs the WAL at every commit, so an acknowledged
   * claim survives power loss and the ledger declares durability "durable". "NORMAL" is
   * about 4x faster but the last commits can be lost on power loss or an OS crash (not
   * on a process crash), so the ledger declares "volatile" (unkeyed_write tools are then
   * refused by the dispatcher unless explicitly allowed, LEDGER-14).
   * @default "FULL" (with `path`; with `database` the option is refused and the connection's own setting is used)
   * @example createSqliteLedger({ path: "./var/ledger.db", synchronous: "NORMAL" })
   */
  synchronous?: SqliteSynchronous;
  /**
   * Create the table if missing, and add the `request` column to a table of an older version
   * (default true). Set false when you run schemaSql() (and, on an older table,
   * addRequestColumnSql()) yourself.
   * @default true
   * @example createSqliteLedger({ database: db, migrate: false })
   */
  migrate?: boolean;
  /**
   * Create the partial index on in-flight rows that listExpiredInFlight() reads (default true;
   * only with `migrate`). It costs every claim and every finish one small index write: measured
   * 0.94-0.96x claim+complete throughput with synchronous=FULL and 0.79-0.83x with NORMAL. With
   * false it is not created (an existing one is left), and listExpiredInFlight() scans the table.
   * @default true
   * @example createSqliteLedger({ path: "./var/ledger.db", inFlightIndex: false })
   */
  inFlightIndex?: boolean;
  /**
   * Group commit: the writes (claim, renew, complete, fail, markUnknown, release, retire) that arrive in
   * the same turn of the event loop run in ONE transaction, each in its own savepoint (a write
   * that fails rolls back alone), and each call resolves only after that transaction has
   * committed, so an acknowledged write is exactly as durable as without it. With
   * synchronous=FULL a commit waits for an fsync (milliseconds on many disks) and blocks the
   * event loop meanwhile; with group commit, writes that queued up during one fsync share the
   * next. Measured: about a third of the demo's main-thread time went to those commits.
   * @default false
   * @example createSqliteLedger({ path: "ledger.db", groupCommit: true })
   */
  groupCommit?: boolean;
  /**
   * Rows one sweep step examines (and at most deletes) before yielding the write lock. Default 1000.
   * @default 1000
   * @example createSqliteLedger({ path: "./var/ledger.db", sweepBatchSize: 200 })
   */
  sweepBatchSize?: number;
  /**
   * Test hook: a clock (milliseconds) that replaces the store's. By default every time is
   * taken inside the SQL statement from SQLite's own clock (`julianday('now')`), so all
   * processes sharing the file measure leases on one clock (LEDGER-20). When `now` is given
   * it is registered as a SQL function on the connection and the ledger declares
   * `clock: "process"`.
   * @default none: SQLite's own clock, read inside each statement (`clock: "store"`)
   * @example createSqliteLedger({ path: ":memory:", now: () => Date.now() })
   */
  now?: () => number;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5000;
const DEFAULT_LIST_LIMIT = 100;
const MAX_LIST_LIMIT = 10_000;
/** A year: a longer olderThanMs is a mistake, not a query. */
const MAX_OLDER_THAN_MS = 366 * 24 * 60 * 60 * 1000;

/** Options of listExpiredInFlight(); the same shape in every Dispatch-Once SQL ledger. */
export interface ListExpiredInFlightOptions {
  /**
   * Only rows whose lease ran out at least this many ms ago (store clock). Default 0.
   * @default 0
   * @example await ledger.listExpiredInFlight({ olderThanMs: 60_000 })
   */
  olderThanMs?: number;
  /**
   * At most this many rows (1..10 000). Default 100.
   * @default 100
   * @example await ledger.listExpiredInFlight({ olderThanMs: 60_000, limit: 500 })
   */
  limit?: number;
}
const DEFAULT_SWEEP_BATCH = 1000;
/** SQLite's default SQLITE_MAX_LENGTH: no TEXT value can be longer. */
const SQLITE_MAX_LENGTH = 1_000_000_000;
/** What a SQLite text value holds: any well-formed text, NUL included, up to SQLITE_MAX_LENGTH bytes. */
const STORE_LIMITS: LedgerStoreLimits = { maxValueBytes: SQLITE_MAX_LENGTH };

/**
 * The store's clock in integer milliseconds since the Unix epoch, evaluated by SQLite inside
 * each statement ('now' is fixed for the duration of one sqlite3_step, so every use within a
 * statement agrees). julianday() is used rather than unixepoch('subsec') so that connections
 * brought from older SQLite builds work too; ROUND absorbs the double's ~50 µs error.
 */
export const STORE_NOW_SQL = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

const COLUMNS =
  "key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, result, error, reason, finished_at, expires_at, request, conversation_id, turn_index";

/** The time of a row's last transition (finish sets finished_at, a claim clears it): listRows()'s order (LIST-2). */
const SINCE = "coalesce(finished_at, claimed_at)";

/** Every statement the ledger runs, prepared once per instance. */
interface Statements {
  /** (key, v, toolName, effect, owner, claimId, leaseMs, request) -> the stored times, or nothing when the key exists. */
  insertClaim: Database.Statement<[string, number, string, string, string, string | null, number, string, string | null, number | null], { lease_expires_at: number }>;
  /** (the same, then key and claimId) -> nothing when the claim id is retired for the key (LEDGER-28), else as insertClaim. */
  insertClaimUnlessRetired: Database.Statement<
    [string, number, string, string, string, string | null, number, string, string | null, number | null, string, string],
    { lease_expires_at: number }
  >;
  /** The row, its claim id and the store's time, read in one statement. */
  select: Database.Statement<[string], RawRow & { claim_id: unknown; now: unknown }>;
  /** (key, claimId, key) -> the same, and whether the claim id is retired for the key, in one snapshot (LEDGER-28). */
  selectForClaimId: Database.Statement<[string, string, string], RawRow & { claim_id: unknown; now: unknown; retired: unknown }>;
  /** (key, claimId) -> a row when the claim id is retired for the key now (LEDGER-28). */
  retired: Database.Statement<[string, string], { one: number }>;
  /** (key, claimId, retentionMs) -> retire the claim id until now + retention (never shortened). */
  retire: Database.Statement<[string, string, number]>;
  /** (retentionMs, key, claimId) -> release the key's row if it is in flight under that claim id. */
  releaseClaimId: Database.Statement<[number, string, string]>;
  /** (batch size) -> forget up to that many claim ids retired past their retention. */
  sweepRetired: Database.Statement<[number]>;
  /** (v, toolName, effect, newFence, owner, claimId, leaseMs, new request or NULL to keep the stored one, key, oldFence) */
  reclaim: Database.Statement<
    [number, string, string, number, string, string | null, number, string | null, string | null, number | null, string, number],
    { lease_expires_at: number }
  >;
  /** (retentionMs, key, fence) */
  expireToUnknown: Database.Statement<[number, string, number], { finished_at: number }>;
  /** (leaseMs, key, fence) */
  renew: Database.Statement<[number, string, number], { lease_expires_at: number }>;
  /** (result, retentionMs, key, fence) */
  complete: Database.Statement<[string, number, string, number]>;
  fail: Database.Statement<[string, number, string, number]>;
  markUnknown: Database.Statement<[string, number, string, number]>;
  /** (retentionMs, key, fence) */
  release: Database.Statement<[number, string, number]>;
  owns: Database.Statement<[string, number], { one: number }>;
  /** (after seq, batch size) -> the next rows in claim order, with the store's time */
  sweepScan: Database.Statement<[number, number], { seq: number; claimed_at: unknown; now: number }>;
  /** (after seq, up to seq) -> delete the finished rows past retention in that range */
  sweepRange: Database.Statement<[number, number]>;
  /** (olderThanMs, limit) -> in-flight rows whose lease ran out, oldest expiry first (the partial index) */
  expiredInFlight: Database.Statement<[number, number], RawRow>;
  /** (reason, key, fence) -> audit the owner's markUnknown, read before the update clears the owner */
  auditMarkUnknown: Database.Statement<[string, string, number]>;
  /** (key, actor, fence) -> audit a claim turning an expired unkeyed_write claim unknown */
  auditLeaseExpired: Database.Statement<[string, string, number]>;
  /** (key, actor, action, from, to, fence, reason, outcome) */
  auditInsert: Database.Statement<[string, string, string, string, string, number, string, string | null]>;
  auditSelect: Database.Statement<[string], { at: unknown; actor: unknown; action: unknown; from_state: unknown; to_state: unknown; fence: unknown; reason: unknown; outcome: unknown }>;
  auditForget: Database.Statement<[string]>;
  /** (after seq, up to seq) -> the audit entries of the rows sweepRange is about to delete */
  auditSweep: Database.Statement<[number, number]>;
  /** (state, state, result, error, retentionMs, key, fence) -> the resolved row's times */
  resolve: Database.Statement<[string, string, string | null, string | null, number, string, number], { finished_at: number }>;
}

/**
 * The Dispatch-Once ledger on one SQLite table (better-sqlite3, WAL). Several processes
 * may share the file: every transition is one atomic statement conditional on the
 * fencing token, or one BEGIN IMMEDIATE transaction (claims that must read the row
 * before deciding), so SQLite's single write lock serialises them across processes.
 */
/** Every option the constructor takes (a misspelt one is refused, never ignored: ERR-1). */
const OPTION_NAMES: OptionNames<SqliteLedgerOptions> = { path: true, database: true, table: true, retentionMs: true, maxResultBytes: true, busyTimeoutMs: true, synchronous: true, migrate: true, inFlightIndex: true, groupCommit: true, sweepBatchSize: true, now: true };

export class SqliteLedger implements Ledger {
  readonly capabilities: LedgerCapabilities;
  /** The table this ledger uses. */
  readonly table: string;
  /** The underlying connection (for diagnostics and tests). */
  readonly database: SqliteDatabase;
  private readonly ownsDatabase: boolean;
  /** How long finished and released rows are kept, in ms (LEDGER-13). */
  readonly retentionMs: number;
  private readonly sweepBatchSize: number;
  private readonly inFlightIndex: boolean;
  private readonly stmts: Statements;
  private readonly claimTransaction: (request: ClaimRequest) => ClaimResult;
  /** The SQL of the store's clock (or the test clock's function). */
  private readonly nowSql: string;
  /** listRows() statements, prepared once per filter combination. */
  private readonly listStatements = new Map<string, Database.Statement>();
  private closed = false;
  private readonly groupCommit: boolean;
  /** Group commit: writes waiting for the next flush, and whether a flush is running now. */
  private pending: PendingWrite[] = [];
  private flushing = false;

  constructor(options: SqliteLedgerOptions) {
    if (typeof options !== "object" || options === null) {
      throw new InvalidLedgerInputError("options", "expected an options object");
    }
    const unknownOption = unknownOptionName(options, OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidLedgerInputError(unknownOption, unknownOptionMessage("SqliteLedger", OPTION_NAMES));
    const table = options.table ?? DEFAULT_TABLE;
    assertTableName(table);
    this.table = table;
    this.retentionMs = positiveInteger("retentionMs", options.retentionMs, DEFAULT_RETENTION_MS);
    const maxResultBytes = positiveInteger("maxResultBytes", options.maxResultBytes, DEFAULT_MAX_RESULT_BYTES);
    if (maxResultBytes > SQLITE_MAX_LENGTH) {
      throw new InvalidLedgerInputError("maxResultBytes", `SQLite stores at most ${SQLITE_MAX_LENGTH} bytes in one value`);
    }
    this.sweepBatchSize = positiveInteger("sweepBatchSize", options.sweepBatchSize, DEFAULT_SWEEP_BATCH);
    if (options.migrate !== undefined && typeof options.migrate !== "boolean") {
      throw new InvalidLedgerInputError("migrate", `expected a boolean, got ${String(options.migrate)}`);
    }
    if (options.inFlightIndex !== undefined && typeof options.inFlightIndex !== "boolean") {
      throw new InvalidLedgerInputError("inFlightIndex", `expected a boolean, got ${String(options.inFlightIndex)}`);
    }
    this.inFlightIndex = options.inFlightIndex ?? true;
    if (options.groupCommit !== undefined && typeof options.groupCommit !== "boolean") {
      throw new InvalidLedgerInputError("groupCommit", `expected a boolean, got ${String(options.groupCommit)}`);
    }
    this.groupCommit = options.groupCommit ?? false;
    if (options.busyTimeoutMs !== undefined) positiveInteger("busyTimeoutMs", options.busyTimeoutMs, 0, true);
    if (options.synchronous !== undefined && options.synchronous !== "FULL" && options.synchronous !== "NORMAL") {
      throw new InvalidLedgerInputError("synchronous", `expected "FULL" or "NORMAL", got ${JSON.stringify(options.synchronous)}`);
    }
    if (options.now !== undefined && typeof options.now !== "function") {
      throw new InvalidLedgerInputError("now", "expected a function returning milliseconds");
    }
    if ((options.path === undefined) === (options.database === undefined)) {
      throw new InvalidLedgerInputError("path", "give exactly one of `path` and `database`");
    }
    if (options.path !== undefined && (typeof options.path !== "string" || options.path.trim() === "")) {
      throw new InvalidLedgerInputError("path", "expected a file path (or \":memory:\")");
    }
    if (options.database !== undefined && options.synchronous !== undefined) {
      throw new InvalidLedgerInputError("synchronous", "set PRAGMA synchronous on your own connection instead");
    }

    let db: SqliteDatabase;
    try {
      if (options.path !== undefined) {
        db = new Database(options.path, { timeout: options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS });
        this.ownsDatabase = true;
      } else {
        db = options.database as SqliteDatabase;
        this.ownsDatabase = false;
      }
    } catch (cause) {
      throw new LedgerUnavailableError(`cannot open SQLite database ${options.path}: ${message(cause)}`, { cause });
    }
    this.database = db;

    try {
      // Setting up a connection to a file other processes are setting up too (a fleet starting
      // together on a new file) can meet SQLITE_BUSY that SQLite's busy handler never waits for:
      // turning a new file to WAL reads page 1 and then upgrades to a write lock, and SQLite
      // refuses that upgrade at once (deadlock avoidance) while another process holds the write
      // lock. Every setup step is idempotent, so the whole setup is retried until the busy
      // timeout has passed in total (openWithin): the same bound a claim waits for the lock.
      const bound = options.path !== undefined
        ? (options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS)
        : this.adoptBusyTimeout(db, options.busyTimeoutMs);
      const set = openWithin(db, bound, () => this.setUp(db, table, options));
      this.stmts = set.stmts;
      this.nowSql = set.nowSql;
      this.claimTransaction = db.transaction((request: ClaimRequest) => this.claimLocked(request)).immediate;
      this.capabilities = {
        durability: durabilityOf(db, set.journalMode, set.synchronous),
        // Without a test clock every time comes from SQLite inside the statement: one clock
        // for every process sharing the file (they share one host: WAL needs shared memory).
        clock: options.now === undefined ? "store" : "process",
        // An anonymous (":memory:" or temporary) database lives inside one connection.
        sharedAcrossProcesses: !db.memory,
        maxResultBytes,
        supports: { listRows: true, resolve: true, auditTrail: true, listExpiredInFlight: true, retire: true },
      };
    } catch (cause) {
      if (this.ownsDatabase) db.close();
      const missing = /no such column: (request|claim_id|conversation_id|turn_index)|has no column named (request|claim_id|conversation_id|turn_index)/.exec(message(cause));
      const column = missing?.[1] ?? missing?.[2];
      const fix = column === "request" ? "addRequestColumnSql" : column === "claim_id" ? "addClaimIdColumnSql" : "addConversationColumnsSql";
      const noTable = /no such table: \S*_(audit|retired)\b/.exec(message(cause))?.[1];
      const hint = column !== undefined
        ? ` (the table predates the ${column} column: open with migrate: true, or run ${fix}(${JSON.stringify(table)}), then listIndexesSql(), auditTableSql() and retiredTableSql())`
        : noTable !== undefined
          ? ` (the ${noTable} table is missing: open with migrate: true, or run ${noTable}TableSql(${JSON.stringify(table)}))`
          : "";
      throw new LedgerUnavailableError(`cannot prepare SQLite ledger table ${table}: ${message(cause)}${hint}`, { cause });
    }
  }

  /** A brought connection's busy timeout: the one given, else its own, else the default. */
  private adoptBusyTimeout(db: SqliteDatabase, busyTimeoutMs: number | undefined): number {
    if (busyTimeoutMs !== undefined) db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    else if (Number(db.pragma("busy_timeout", { simple: true })) === 0) db.pragma(`busy_timeout = ${DEFAULT_BUSY_TIMEOUT_MS}`);
    return Number(db.pragma("busy_timeout", { simple: true }));
  }

  /** One attempt at the connection setup: journal mode, schema, statements (each step idempotent). */
  private setUp(
    db: SqliteDatabase,
    table: string,
    options: SqliteLedgerOptions,
  ): { journalMode: string; synchronous: number; stmts: Statements; nowSql: string } {
    let journalMode: string;
    if (this.ownsDatabase) {
      // WAL lets readers (waiting claimers, lookups) proceed while one process writes.
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
    if (options.migrate ?? true) ensureSchema(db, table, options.inFlightIndex ?? true);
    let nowSql = STORE_NOW_SQL;
    if (options.now !== undefined) {
      const clock = options.now;
      nowSql = `dispatch_once_now_${table}()`;
      db.function(`dispatch_once_now_${table}`, { deterministic: false }, () => clock());
    }
    return { journalMode, synchronous, stmts: prepare(db, table, nowSql), nowSql };
  }

  /**
   * Create the table if missing, add the `request` column to a table of an older version and
   * the in-flight index (unless `inFlightIndex: false`), the audit table and the retired claim
   * ids' table (LEDGER-28; a file of an older version gets it here)
   * (idempotent; also run on open unless `migrate: false`).
   */
  migrate(): void {
    this.guard(undefined, "migrate", () => ensureSchema(this.database, this.table, this.inFlightIndex));
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    // Leases are whole milliseconds, rounded up, in every ledger.
    const leaseMs = checkClaimRequest(request, STORE_LIMITS);
    if (leaseMs !== request.leaseMs) request = { ...request, leaseMs };
    return this.guard(request.key, "claim", () => {
      // Fast path, one statement: a key never seen is claimed with fence 1.
      const inserted = this.insert(request);
      if (inserted !== undefined) return inserted;
      // The key exists. Most of the time it is a live claim or a finished row, which a plain
      // read can report without taking the write lock (waiting claimers poll this path).
      const seen = this.read(request.key, request.claimId);
      // A late copy of a claim its dispatch gave up on takes nothing, whatever the row (LEDGER-28).
      if (seen?.retired === true) throw retiredClaimError(request.key, retainedFence(seen));
      if (seen !== undefined && !ownClaim(seen, request) && !this.needsTransition(seen.row, seen.expiresAt, seen.now)) {
        return { outcome: "existing", row: seen.row as InFlightRow | TerminalRow };
      }
      // Released, expired or past retention: decide and write under the write lock.
      return this.claimTransaction(request);
    });
  }

  async renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    const lease = checkLedgerLeaseMs(leaseMs);
    return this.guard(key, "renew", () => {
      // The fence, not the clock, decides ownership: an expired lease nobody acted on is still this owner's.
      const renewed = isFence(fence) ? this.stmts.renew.get(lease, key, fence) : undefined;
      if (renewed === undefined) throw new StaleClaimError(key, fence);
      return { leaseExpiresAt: renewed.lease_expires_at };
    });
  }

  async complete(key: string, fence: number, result: string): Promise<void> {
    return this.guard(key, "complete", () => {
      const refusal = resultRefusal(key, result, this.capabilities.maxResultBytes, STORE_LIMITS);
      if (refusal !== undefined) {
        this.assertOwned(key, fence); // a stale owner hears stale_claim first, as from the reference ledger
        throw refusal;
      }
      if (!isFence(fence) || this.stmts.complete.run(result, this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  async fail(key: string, fence: number, error: StoredError): Promise<void> {
    return this.guard(key, "fail", () => {
      const json = checkStoredError(error, STORE_LIMITS);
      if (!isFence(fence) || this.stmts.fail.run(json, this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  async markUnknown(key: string, fence: number, reason: string): Promise<void> {
    checkUnknownReason(reason, STORE_LIMITS);
    return this.guard(key, "markUnknown", () => {
      if (!isFence(fence)) throw new StaleClaimError(key, fence);
      // The audit entry and the transition commit together (RESOLVE-7).
      this.database.transaction(() => {
        this.stmts.auditMarkUnknown.run(reason, key, fence);
        if (this.stmts.markUnknown.run(reason, this.retentionMs, key, fence).changes !== 1) throw new StaleClaimError(key, fence);
      }).immediate();
    });
  }

  async release(key: string, fence: number): Promise<void> {
    return this.guard(key, "release", () => {
      if (!isFence(fence) || this.stmts.release.run(this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  /**
   * Retire a claim id of the key (LEDGER-28), in one IMMEDIATE transaction: from now until the
   * retention has passed on the store's clock every claim carrying it is refused with
   * stale_claim, row or no row; with `release`, a row in flight under it (live or expired) is
   * released as release() with its fence would. Idempotent.
   */
  async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const release = checkRetireRequest(key, claimId, options);
    // Stored as UTF-8: a lone surrogate would become U+FFFD and retire another key's id.
    checkLedgerKey(key, STORE_LIMITS);
    return this.guard(key, "retire", () =>
      this.database.transaction((): RetireResult => {
        this.stmts.retire.run(key, claimId, this.retentionMs);
        return { released: release && this.stmts.releaseClaimId.run(this.retentionMs, key, claimId).changes === 1 };
      }).immediate(),
    );
  }

  async lookup(key: string): Promise<LedgerRow | undefined> {
    // As claim checks it (LEDGER-12): a key that is not one answered undefined, as if absent.
    checkLedgerKey(key, STORE_LIMITS);
    return this.guard(key, "lookup", () => {
      const seen = this.read(key);
      if (seen === undefined) return undefined;
      if (seen.row.state !== "in_flight" && seen.expiresAt !== null && seen.expiresAt <= seen.now) return undefined;
      return seen.row;
    });
  }

  /**
   * Delete finished and released rows whose retention has passed. Rows are kept in claim
   * order (`seq`), and a row claimed within the last `retentionMs` cannot have expired
   * (it finished after it was claimed), so the walk starts at the front and stops at the
   * first such row: the cost is the expired rows plus the few old ones still held (in
   * flight for longer than the retention). Each batch of `sweepBatchSize` rows is one short
   * DELETE that re-checks every row's state and expiry under the write lock; claims from
   * other processes interleave between batches. In-flight rows are never deleted (LEDGER-13).
   */
  async sweep(): Promise<number> {
    // Retired claim ids past their retention are forgotten first, in batches (not counted: they are not rows, LEDGER-28).
    while (this.guard(undefined, "sweep", () => this.stmts.sweepRetired.run(this.sweepBatchSize).changes) === this.sweepBatchSize) {
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    let removed = 0;
    let after = Number.MIN_SAFE_INTEGER;
    for (;;) {
      const step = this.guard(undefined, "sweep", () => {
        const rows = this.stmts.sweepScan.all(after, this.sweepBatchSize);
        const first = rows[0];
        if (first === undefined) return { deleted: 0, upTo: after, done: true };
        const claimedBefore = first.now - this.retentionMs;
        let upTo = after;
        let young = false;
        for (const row of rows) {
          if (typeof row.claimed_at === "number" && row.claimed_at > claimedBefore) {
            young = true;
            break;
          }
          upTo = row.seq;
        }
        let deleted = 0;
        if (upTo !== after) {
          // The rows' audit entries go with them, in the same transaction (RESOLVE-7).
          deleted = this.database.transaction(() => {
            this.stmts.auditSweep.run(after, upTo);
            return this.stmts.sweepRange.run(after, upTo).changes;
          }).immediate();
        }
        return { deleted, upTo, done: young || rows.length < this.sweepBatchSize };
      });
      removed += step.deleted;
      after = step.upTo;
      if (step.done) return removed;
      // Let claims waiting in this process run between batches.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /**
   * In-flight rows whose lease ran out at least `olderThanMs` ago (store clock; default 0),
   * oldest expiry first, at most `limit` (default 100, at most 10 000). Read-only: nothing is
   * moved to `unknown` or taken over here. Such a row stays in flight until someone claims its
   * key again, which settles it by the rules of its effect class (an expired unkeyed_write
   * becomes unknown, LEDGER-7; an expired keyed_write is taken over and re-run under the same
   * key); this is how an operator or a reconciler finds claims nobody came back for. Read from
   * the partial index on in-flight rows, never from the finished rows. A listed row that does
   * not decode raises LedgerCorruptError naming its key (LEDGER-11).
   */
  async listExpiredInFlight(options: ListExpiredInFlightOptions = {}): Promise<InFlightRow[]> {
    checkExpiredInFlightOptions(options);
    const olderThanMs = options.olderThanMs ?? 0;
    if (typeof olderThanMs !== "number" || !Number.isSafeInteger(olderThanMs) || olderThanMs < 0 || olderThanMs > MAX_OLDER_THAN_MS) {
      throw new InvalidLedgerInputError("olderThanMs", `expected an integer number of milliseconds in 0..${MAX_OLDER_THAN_MS}, got ${String(olderThanMs)}`);
    }
    const limit = options.limit ?? DEFAULT_LIST_LIMIT;
    if (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
      throw new InvalidLedgerInputError("limit", `expected an integer in 1..${MAX_LIST_LIMIT}, got ${String(limit)}`);
    }
    return this.guard(undefined, "listExpiredInFlight", () =>
      this.stmts.expiredInFlight.all(olderThanMs, limit).map((raw) => {
        const key = typeof raw.key === "string" ? raw.key : String(raw.key);
        const { row } = decodeRow(key, raw);
        if (row.state !== "in_flight") throw new LedgerCorruptError(key, `listed as in flight but decoded as ${row.state}`);
        return row;
      }),
    );
  }

  /**
   * Rows matching the query, oldest last transition first (LIST-1..LIST-6). Served from the
   * listing indexes (by state, tool or conversation, each ordered by the last transition and
   * the key), never a walk of the table; the cursor is a keyset position, so a row that stays
   * put is listed exactly once however many rows are written meanwhile.
   */
  async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const { states, limit } = checkListQuery(query);
    const where: string[] = [`NOT (state <> 'in_flight' AND expires_at <= ${this.nowSql})`];
    const params: unknown[] = [];
    if (states !== undefined) {
      where.push(`state IN (${states.map(() => "?").join(", ")})`);
      params.push(...states);
    }
    if (query.toolName !== undefined) {
      where.push("tool_name = ?");
      params.push(query.toolName);
    }
    if (query.conversationId !== undefined) {
      where.push("conversation_id = ?");
      params.push(query.conversationId);
    }
    if (query.olderThanMs !== undefined) {
      where.push(`${SINCE} <= ${this.nowSql} - ?`);
      params.push(query.olderThanMs);
    }
    if (query.cursor !== undefined) {
      const after = decodeListCursor(query.cursor);
      where.push(`(${SINCE}, key) > (?, ?)`);
      params.push(after.since, after.key);
    }
    params.push(limit + 1);
    const sql = `SELECT ${COLUMNS} FROM "${this.table}" WHERE ${where.join(" AND ")} ORDER BY ${SINCE}, key LIMIT ?`;
    return this.guard(undefined, "listRows", () => {
      let stmt = this.listStatements.get(sql);
      if (stmt === undefined) {
        stmt = this.database.prepare(sql);
        this.listStatements.set(sql, stmt);
      }
      const raws = stmt.all(...params) as RawRow[];
      const rows = raws.slice(0, limit).map((raw) => {
        const key = typeof raw.key === "string" ? raw.key : String(raw.key);
        return decodeRow(key, raw).row;
      });
      const last = rows[rows.length - 1];
      return raws.length > limit && last !== undefined ? { rows, cursor: encodeListCursor(rowSince(last), last.key) } : { rows };
    });
  }

  /**
   * An operator's fenced, audited transition out of an open outcome (RESOLVE-1..RESOLVE-8): one
   * IMMEDIATE transaction reads the row, checks fence and state on the store's clock, writes
   * the resolution with the fence bumped and appends the audit entry.
   */
  async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    checkResolveRequest(request);
    const { key, resolution } = request;
    for (const [field, value] of [["actor", request.actor], ["reason", request.reason]] as const) {
      if (!value.isWellFormed()) throw new InvalidLedgerInputError(field, "expected a well-formed string");
    }
    let result: string | null = null;
    let error: string | null = null;
    if (resolution.outcome === "completed") {
      result = resolution.result;
      const refusal = resultRefusal(key, result, this.capabilities.maxResultBytes, STORE_LIMITS);
      if (refusal !== undefined) throw refusal;
    } else if (resolution.outcome === "failed") {
      error = checkStoredError(resolution.error, STORE_LIMITS);
    }
    const state = resolution.outcome === "not_performed" ? "released" : resolution.outcome;
    return this.guard(key, "resolve", () =>
      this.database.transaction((): ResolvedRow => {
        const seen = this.read(key);
        if (seen === undefined || (seen.row.state !== "in_flight" && seen.expiresAt !== null && seen.expiresAt <= seen.now)) {
          throw new ResolutionRefusedError(key, "absent");
        }
        const { row, now } = seen;
        if (request.expectedFence !== undefined && row.fence !== request.expectedFence) {
          throw new StaleClaimError(key, request.expectedFence, `the row's fence is ${row.fence}, not the expected one`);
        }
        const open = row.state === "unknown" || (row.state === "in_flight" && row.leaseExpiresAt <= now);
        if (!open) throw new ResolutionRefusedError(key, row.state);
        const written = this.stmts.resolve.get(state, state, result, error, this.retentionMs, key, row.fence);
        if (written === undefined) throw new Error("row changed while holding the write lock");
        const fence = row.fence + 1;
        this.stmts.auditInsert.run(key, request.actor, request.action ?? "resolved", row.state, state, fence, request.reason, resolution.outcome);
        const base = {
          key,
          toolName: row.toolName,
          effect: row.effect,
          fence,
          claimedAt: row.claimedAt,
          request: row.request,
          ...origin(row),
          finishedAt: written.finished_at,
        };
        if (resolution.outcome === "completed") return { ...base, state: "completed", result: resolution.result };
        if (resolution.outcome === "failed") return { ...base, state: "failed", error: JSON.parse(error!) as StoredError };
        return { ...base, state: "released" };
      }).immediate(),
    );
  }

  /** The key's audit entries, oldest first (RESOLVE-7). */
  async auditTrail(key: string): Promise<AuditEntry[]> {
    checkLedgerKey(key, STORE_LIMITS);
    return this.guard(key, "auditTrail", () =>
      this.stmts.auditSelect.all(key).map((raw) => {
        if (typeof raw.at !== "number" || typeof raw.actor !== "string" || typeof raw.fence !== "number" || typeof raw.reason !== "string") {
          throw new LedgerCorruptError(key, "an audit entry does not decode");
        }
        const entry: AuditEntry = {
          at: raw.at,
          actor: raw.actor,
          action: raw.action as AuditEntry["action"],
          fromState: raw.from_state as AuditEntry["fromState"],
          toState: raw.to_state as AuditEntry["toState"],
          fence: raw.fence,
          reason: raw.reason,
        };
        if (typeof raw.outcome === "string") entry.outcome = raw.outcome as NonNullable<AuditEntry["outcome"]>;
        return entry;
      }),
    );
  }

  /** Close the connection if the ledger opened it (a brought-your-own connection is left open). */
  async close(): Promise<void> {
    if (this.closed) return;
    // Writes already accepted are committed (or refused) before the connection goes.
    if (this.pending.length > 0) this.flush();
    this.closed = true;
    if (this.ownsDatabase && this.database.open) this.database.close();
  }

  private claimLocked(request: ClaimRequest): ClaimResult {
    const seen = this.read(request.key, request.claimId);
    // Checked first, before the claim id is recognised as the row's own (LEDGER-28, LEDGER-26).
    if (seen === undefined ? request.claimId !== undefined && this.stmts.retired.get(request.key, request.claimId) !== undefined : seen.retired) {
      throw retiredClaimError(request.key, seen === undefined ? 0 : retainedFence(seen));
    }
    if (seen === undefined) {
      // Swept between our insert attempt and the lock: the key is absent again.
      const inserted = this.insert(request);
      if (inserted === undefined) throw new Error("row appeared while holding the write lock");
      return inserted;
    }
    const { row, expiresAt, now } = seen;
    if (ownClaim(seen, request)) {
      // The same claim sent again (its reply was lost): it holds the row, live or expired, with
      // its fence; the lease restarts from now (LEDGER-26).
      const renewed = this.stmts.renew.get(request.leaseMs, row.key, row.fence);
      if (renewed === undefined) throw new Error("in-flight row changed while holding the write lock");
      return { outcome: "claimed", fence: row.fence, leaseExpiresAt: renewed.lease_expires_at, takeover: false, request: row.request };
    }
    if (releasedUnder(seen, request) && (expiresAt === null || expiresAt > now)) {
      // A late copy of a claim that was released by its claim id: it must not take the row again,
      // or nobody would hold it (LEDGER-27).
      throw releasedClaimError(request.key, row.fence);
    }
    if (!this.needsTransition(row, expiresAt, now)) {
      return { outcome: "existing", row: row as InFlightRow | TerminalRow };
    }
    if (row.state === "in_flight" && row.effect === "unkeyed_write") {
      // The owner's lease ran out and nothing downstream deduplicates: never re-run (LEDGER-7).
      const done = this.stmts.expireToUnknown.get(this.retentionMs, row.key, row.fence);
      if (done === undefined) throw new Error("in-flight row changed while holding the write lock");
      this.stmts.auditLeaseExpired.run(row.key, request.owner, row.fence);
      const unknown: UnknownRow = {
        key: row.key,
        toolName: row.toolName,
        effect: row.effect,
        fence: row.fence,
        claimedAt: row.claimedAt,
        request: row.request, // kept (LEDGER-21)
        ...origin(row),
        state: "unknown",
        reason: "lease_expired",
        finishedAt: done.finished_at,
      };
      return { outcome: "existing", row: unknown };
    }
    // Released, past retention, or an expired keyed_write (takeover: the downstream key makes a re-run safe).
    // A re-claim of a released row and a takeover keep the first claim's request, so the re-run
    // sends what the first run sent; a row past retention is forgotten, so this claim creates
    // it anew with its own request (LEDGER-21). NULL keeps the stored text without copying it.
    // A released row past its retention is forgotten too (LEDGER-19): it must not lend its request.
    const forgotten = row.state !== "in_flight" && expiresAt !== null && expiresAt <= now;
    const keep = !forgotten && (row.state === "released" || row.state === "in_flight");
    const fence = row.fence + 1;
    const taken = this.stmts.reclaim.get(
      ROW_FORMAT_VERSION,
      request.toolName,
      request.effect,
      fence,
      request.owner,
      request.claimId ?? null,
      request.leaseMs,
      keep ? null : request.request,
      keep ? null : (request.conversationId ?? null),
      keep ? null : (request.turnIndex ?? null),
      request.key,
      row.fence,
    );
    // A forgotten row's audit trail goes with it (LEDGER-19): the new row starts its own.
    if (forgotten) this.stmts.auditForget.run(request.key);
    if (taken === undefined) throw new Error("row changed while holding the write lock");
    return {
      outcome: "claimed",
      fence,
      leaseExpiresAt: taken.lease_expires_at,
      takeover: row.state === "in_flight",
      request: keep ? row.request : request.request,
    };
  }

  /**
   * The one-statement claim of an absent key; undefined when the key exists or the claim's claim
   * id is retired (LEDGER-28: only a claim that carries one reads the retired ids).
   */
  private insert(request: ClaimRequest): ClaimResult | undefined {
    const row = [
      request.key,
      ROW_FORMAT_VERSION,
      request.toolName,
      request.effect,
      request.owner,
      request.claimId ?? null,
      request.leaseMs,
      request.request,
      request.conversationId ?? null,
      request.turnIndex ?? null,
    ] as const;
    const inserted = request.claimId === undefined
      ? this.stmts.insertClaim.get(...row)
      : this.stmts.insertClaimUnlessRetired.get(...row, request.key, request.claimId);
    if (inserted === undefined) return undefined;
    return { outcome: "claimed", fence: 1, leaseExpiresAt: inserted.lease_expires_at, takeover: false, request: request.request };
  }

  /** Whether a claim must change this row (rather than report it as existing). */
  private needsTransition(row: LedgerRow, expiresAt: number | null, now: number): boolean {
    if (row.state === "in_flight") return row.leaseExpiresAt <= now;
    if (row.state === "released") return true;
    return expiresAt !== null && expiresAt <= now;
  }

  /**
   * The decoded row, its claim id and the store's time at the read; with a claim id, also whether
   * it is retired for the key (LEDGER-28), read in the same statement.
   */
  private read(key: string, claimId?: string): (DecodedRow & { now: number; claimId: unknown; retired: boolean }) | undefined {
    const raw = claimId === undefined ? this.stmts.select.get(key) : this.stmts.selectForClaimId.get(key, claimId, key);
    if (raw === undefined) return undefined;
    if (typeof raw.now !== "number") throw new Error(`the store's clock returned ${String(raw.now)}`);
    const { row, expiresAt } = decodeRow(key, raw);
    // Written out, not spread: V8 builds a spread followed by more members on a slow path.
    return { row, expiresAt, now: raw.now, claimId: raw.claim_id, retired: "retired" in raw && raw.retired === 1 };
  }

  private assertOwned(key: string, fence: number): void {
    if (!isFence(fence) || this.stmts.owns.get(key, fence) === undefined) throw new StaleClaimError(key, fence);
  }

  /** Run a store operation; every driver failure becomes a typed ledger error (LEDGER-11, LEDGER-12). */
  private guard<T>(key: string | undefined, operation: string, fn: () => T): T {
    // A connection closed under us (brought-your-own) makes the driver throw, mapped below.
    if (this.closed) throw new LedgerUnavailableError(`SQLite ledger ${operation}: the ledger is closed`);
    // Group commit: a write joins the next batch; its caller awaits the batch's commit (the
    // write methods return this promise, so none of them resolves before it).
    if (this.groupCommit && !this.flushing && WRITES.has(operation)) return this.enqueue(key, operation, fn) as T;
    if (this.database.inTransaction && !this.flushing) {
      // Inside the caller's transaction our writes could still roll back after we report them:
      // a claim undone after the tool ran lets a replay run it again (LEDGER-22). Refused
      // before any statement runs, so nothing is written.
      throw new InvalidLedgerInputError(
        "database",
        `SQLite ledger ${operation}: the connection is inside a transaction; the ledger must commit its own writes (commit or roll back first, or give the ledger its own connection)`,
      );
    }
    try {
      return fn();
    } catch (cause) {
      if (cause instanceof DispatchOnceError) throw cause;
      const code = (cause as { code?: unknown }).code;
      if (key !== undefined && typeof code === "string" && (code.startsWith("SQLITE_CORRUPT") || code === "SQLITE_NOTADB")) {
        throw new LedgerCorruptError(key, `the database file is damaged (${code})`, { cause });
      }
      // SQLITE_BUSY past the busy timeout, I/O errors, a closed or read-only connection:
      // the statement did not commit, so nothing is reported as done.
      throw new LedgerUnavailableError(`SQLite ledger ${operation} failed: ${message(cause)}`, { cause });
    }
  }

  private enqueue<T>(key: string | undefined, operation: string, fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ key, operation, fn, resolve: resolve as (value: unknown) => void, reject });
      if (this.pending.length === 1) setImmediate(() => this.flush());
    });
  }

  /**
   * Run the pending writes in one BEGIN IMMEDIATE transaction, each in a savepoint, then COMMIT,
   * then answer each caller: nothing is acknowledged before the commit. If the transaction
   * cannot begin or commit, every write in it fails with ledger_unavailable (none was written).
   */
  private flush(): void {
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    if (this.closed) {
      for (const op of batch) op.reject(new LedgerUnavailableError(`SQLite ledger ${op.operation}: the ledger is closed`));
      return;
    }
    const db = this.database;
    if (db.inTransaction) {
      // Same refusal as without group commit (LEDGER-22), before anything is written.
      for (const op of batch) {
        op.reject(new InvalidLedgerInputError("database", `SQLite ledger ${op.operation}: the connection is inside a transaction; the ledger must commit its own writes`));
      }
      return;
    }
    const outcomes: { ok: boolean; value?: unknown; error?: unknown }[] = [];
    this.flushing = true;
    try {
      try {
        db.exec("BEGIN IMMEDIATE");
      } catch (cause) {
        const error = new LedgerUnavailableError(`SQLite ledger group commit could not begin: ${message(cause)}`, { cause });
        for (const op of batch) op.reject(error);
        return;
      }
      for (const op of batch) {
        db.exec("SAVEPOINT dispatch_once_write");
        try {
          const value = this.guard(op.key, op.operation, op.fn);
          db.exec("RELEASE dispatch_once_write");
          outcomes.push({ ok: true, value });
        } catch (error) {
          db.exec("ROLLBACK TO dispatch_once_write");
          db.exec("RELEASE dispatch_once_write");
          outcomes.push({ ok: false, error });
        }
      }
      db.exec("COMMIT");
    } catch (cause) {
      // The commit (or a savepoint statement: the connection broke) failed: roll back and report
      // every write of the batch unwritten.
      try {
        if (db.inTransaction) db.exec("ROLLBACK");
      } catch {
        // The rollback's own failure changes nothing: the batch is reported as not written.
      }
      const error = new LedgerUnavailableError(`SQLite ledger group commit failed: ${message(cause)}`, { cause });
      for (const op of batch) op.reject(error);
      return;
    } finally {
      this.flushing = false;
    }
    batch.forEach((op, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) op.resolve(outcome.value);
      else op.reject(outcome.error);
    });
  }
}

/** The operations that write, and so join a group commit. */
const WRITES: ReadonlySet<string> = new Set(["claim", "renew", "complete", "fail", "markUnknown", "release", "retire"]);

interface PendingWrite {
  key: string | undefined;
  operation: string;
  fn: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/** Open (or adopt) a SQLite ledger. A string is a file path. */
export function createSqliteLedger(options: SqliteLedgerOptions | string): SqliteLedger {
  return new SqliteLedger(typeof options === "string" ? { path: options } : options);
}

function prepare(db: SqliteDatabase, table: string, now: string): Statements {
  const t = `"${table}"`;
  const a = `"${table}_audit"`;
  const r = `"${table}_retired"`;
  const owned = "WHERE key = ? AND state = 'in_flight' AND fence = ?";
  const finish = `owner = NULL, claim_id = NULL, lease_expires_at = NULL, finished_at = ${now}, expires_at = ${now} + ?`;
  // A released row keeps its claim id: a late copy of that claim is refused (LEDGER-27).
  const released = `state = 'released', ${finish.replace("claim_id = NULL, ", "")}`;
  return {
    insertClaim: db.prepare(
      `INSERT INTO ${t} (key, v, state, tool_name, effect, fence, claimed_at, owner, claim_id, lease_expires_at, request, conversation_id, turn_index)
       VALUES (?, ?, 'in_flight', ?, ?, 1, ${now}, ?, ?, ${now} + ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING
       RETURNING lease_expires_at`,
    ),
    // The same row, only when the claim id is not retired (LEDGER-28): the check and the insert
    // are one statement, so one write lock (the WHERE makes the upsert parse unambiguous).
    insertClaimUnlessRetired: db.prepare(
      `INSERT INTO ${t} (key, v, state, tool_name, effect, fence, claimed_at, owner, claim_id, lease_expires_at, request, conversation_id, turn_index)
       SELECT ?, ?, 'in_flight', ?, ?, 1, ${now}, ?, ?, ${now} + ?, ?, ?, ?
       WHERE NOT EXISTS (SELECT 1 FROM ${r} WHERE key = ? AND claim_id = ? AND retired_until > ${now})
       ON CONFLICT (key) DO NOTHING RETURNING lease_expires_at`,
    ),
    select: db.prepare(`SELECT ${COLUMNS}, claim_id, ${now} AS now FROM ${t} WHERE key = ?`),
    selectForClaimId: db.prepare(
      `SELECT ${COLUMNS}, claim_id, ${now} AS now,
         EXISTS (SELECT 1 FROM ${r} WHERE key = ? AND claim_id = ? AND retired_until > ${now}) AS retired
       FROM ${t} WHERE key = ?`,
    ),
    retired: db.prepare(`SELECT 1 AS one FROM ${r} WHERE key = ? AND claim_id = ? AND retired_until > ${now}`),
    retire: db.prepare(
      `INSERT INTO ${r} (key, claim_id, retired_until) VALUES (?, ?, ${now} + ?)
       ON CONFLICT (key, claim_id) DO UPDATE SET retired_until = max(retired_until, excluded.retired_until)`,
    ),
    // As release (LEDGER-8: fence and request kept, the claim id kept), found by claim id.
    releaseClaimId: db.prepare(`UPDATE ${t} SET ${released} WHERE key = ? AND state = 'in_flight' AND claim_id = ?`),
    sweepRetired: db.prepare(
      `DELETE FROM ${r} WHERE (key, claim_id) IN (SELECT key, claim_id FROM ${r} WHERE retired_until <= ${now} LIMIT ?)`,
    ),
    // Guarded by the fence read inside the same IMMEDIATE transaction (belt and braces).
    reclaim: db.prepare(
      `UPDATE ${t} SET seq = (SELECT max(seq) FROM ${t}) + 1, v = ?, state = 'in_flight', tool_name = ?, effect = ?, fence = ?, claimed_at = ${now}, owner = ?, claim_id = ?,
         lease_expires_at = ${now} + ?, request = coalesce(?, request), conversation_id = coalesce(?, conversation_id), turn_index = coalesce(?, turn_index), result = NULL, error = NULL, reason = NULL, finished_at = NULL, expires_at = NULL
       WHERE key = ? AND fence = ? RETURNING lease_expires_at`,
    ),
    expireToUnknown: db.prepare(
      `UPDATE ${t} SET state = 'unknown', reason = 'lease_expired', ${finish} ${owned} RETURNING finished_at`,
    ),
    renew: db.prepare(`UPDATE ${t} SET lease_expires_at = ${now} + ? ${owned} RETURNING lease_expires_at`),
    complete: db.prepare(`UPDATE ${t} SET state = 'completed', result = ?, ${finish} ${owned}`),
    fail: db.prepare(`UPDATE ${t} SET state = 'failed', error = ?, ${finish} ${owned}`),
    markUnknown: db.prepare(`UPDATE ${t} SET state = 'unknown', reason = ?, ${finish} ${owned}`),
    release: db.prepare(`UPDATE ${t} SET ${released} ${owned}`),
    owns: db.prepare(`SELECT 1 AS one FROM ${t} ${owned}`),
    sweepScan: db.prepare(`SELECT seq, claimed_at, ${now} AS now FROM ${t} WHERE seq > ? ORDER BY seq LIMIT ?`),
    sweepRange: db.prepare(
      `DELETE FROM ${t} WHERE seq > ? AND seq <= ? AND state <> 'in_flight' AND expires_at <= ${now}`,
    ),
    // state = 'in_flight' is the partial index's own predicate, so SQLite walks that index.
    expiredInFlight: db.prepare(
      `SELECT ${COLUMNS} FROM ${t} WHERE state = 'in_flight' AND lease_expires_at <= ${now} - ? ORDER BY lease_expires_at LIMIT ?`,
    ),
    auditMarkUnknown: db.prepare(
      `INSERT INTO ${a} (key, at, actor, action, from_state, to_state, fence, reason)
       SELECT key, ${now}, owner, 'marked_unknown', 'in_flight', 'unknown', fence, ? FROM ${t} WHERE key = ? AND state = 'in_flight' AND fence = ?`,
    ),
    auditLeaseExpired: db.prepare(
      `INSERT INTO ${a} (key, at, actor, action, from_state, to_state, fence, reason) VALUES (?, ${now}, ?, 'lease_expired', 'in_flight', 'unknown', ?, 'lease_expired')`,
    ),
    auditInsert: db.prepare(
      `INSERT INTO ${a} (key, at, actor, action, from_state, to_state, fence, reason, outcome) VALUES (?, ${now}, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    auditSelect: db.prepare(`SELECT at, actor, action, from_state, to_state, fence, reason, outcome FROM ${a} WHERE key = ? ORDER BY id`),
    auditForget: db.prepare(`DELETE FROM ${a} WHERE key = ?`),
    auditSweep: db.prepare(
      `DELETE FROM ${a} WHERE key IN (SELECT key FROM ${t} WHERE seq > ? AND seq <= ? AND state <> 'in_flight' AND expires_at <= ${now})`,
    ),
    // A release of an in-flight row keeps its claim id, as the owner's release does (LEDGER-27); the
    // CASE reads the row as it was before this UPDATE. Every other resolution clears it.
    resolve: db.prepare(
      `UPDATE ${t} SET claim_id = CASE WHEN ? = 'released' AND state = 'in_flight' THEN claim_id END, state = ?, fence = fence + 1, result = ?, error = ?, reason = NULL,
         ${finish.replace("claim_id = NULL, ", "")} WHERE key = ? AND fence = ? RETURNING finished_at`,
    ),
  };
}

/**
 * Create the table if missing, and add the `request` column (LEDGER-21) to a table an older
 * version created. The column check and the ALTER run under the write lock, so processes
 * opening the file at once add it exactly once; a table that has it costs one read.
 */
function ensureSchema(db: SqliteDatabase, table: string, inFlightIndex: boolean): void {
  db.exec(tableSql(table));
  const has = db.prepare("SELECT count(*) FROM pragma_table_info(?) WHERE name IN ('request', 'claim_id', 'conversation_id')").pluck();
  if (has.get(table) !== 3) {
    db.transaction(() => {
      const column = db.prepare("SELECT 1 FROM pragma_table_info(?) WHERE name = ?").pluck();
      if (column.get(table, "request") === undefined) db.exec(addRequestColumnSql(table));
      if (column.get(table, "claim_id") === undefined) db.exec(addClaimIdColumnSql(table)); // LEDGER-26
      if (column.get(table, "conversation_id") === undefined) db.exec(addConversationColumnsSql(table)); // LIST-3
    }).immediate();
  }
  // The indexes after the columns they cover exist (an older table gets them here).
  db.exec(`${inFlightIndex ? inFlightIndexSql(table) : ""}${listIndexesSql(table)}${auditTableSql(table)}${retiredTableSql(table)}`);
}

/** The optional conversation fields of a row, only when present. */
function origin(row: { conversationId?: string; turnIndex?: number }): { conversationId?: string; turnIndex?: number } {
  const out: { conversationId?: string; turnIndex?: number } = {};
  if (row.conversationId !== undefined) out.conversationId = row.conversationId;
  if (row.turnIndex !== undefined) out.turnIndex = row.turnIndex;
  return out;
}

/** Whether the claim meets an in-flight row written by itself: its claim id is on the row (LEDGER-26). */
function ownClaim(seen: DecodedRow & { claimId: unknown }, request: ClaimRequest): boolean {
  return request.claimId !== undefined && seen.row.state === "in_flight" && seen.claimId === request.claimId;
}

/** The fence a retired claim id's refusal names: the row's while it is retained, else 0 (LEDGER-28). */
function retainedFence(seen: DecodedRow & { now: number }): number {
  return seen.row.state !== "in_flight" && seen.expiresAt !== null && seen.expiresAt <= seen.now ? 0 : seen.row.fence;
}

/** Whether the claim meets the released row its own claim id was released under (LEDGER-27). */
function releasedUnder(seen: DecodedRow & { claimId: unknown }, request: ClaimRequest): boolean {
  return request.claimId !== undefined && seen.row.state === "released" && seen.claimId === request.claimId;
}

/**
 * SQLite's durability follows its journal and sync settings: WAL or a rollback journal
 * with synchronous=FULL (or EXTRA) fsyncs every commit; WAL with NORMAL can lose the last
 * commits on power loss; memory/off journals and anonymous databases lose everything.
 */
function durabilityOf(db: SqliteDatabase, journalMode: string, synchronous: number): "durable" | "volatile" {
  if (db.memory) return "volatile";
  if (journalMode === "memory" || journalMode === "off") return "volatile";
  return synchronous >= 2 ? "durable" : "volatile";
}

function positiveInteger(field: string, value: number | undefined, fallback: number, allowZero = false): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < (allowZero ? 0 : 1)) {
    throw new InvalidLedgerInputError(field, `expected a ${allowZero ? "non-negative" : "positive"} integer, got ${String(value)}`);
  }
  return value;
}

function isFence(fence: unknown): fence is number {
  return typeof fence === "number" && Number.isSafeInteger(fence) && fence >= 1;
}

function message(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
