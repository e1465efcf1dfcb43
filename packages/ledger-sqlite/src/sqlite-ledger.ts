import Database from "better-sqlite3";
import {
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  DispatchOnceError,
  LedgerCorruptError,
  LedgerUnavailableError,
  ROW_FORMAT_VERSION,
  ResultNotStorableError,
  StaleClaimError,
  assertStorableResult,
  utf8ByteLength,
  type ClaimRequest,
  type ClaimResult,
  type InFlightRow,
  type Ledger,
  type LedgerCapabilities,
  type LedgerRow,
  type StoredError,
  type TerminalRow,
  type UnknownRow,
} from "@dispatch-once/core";
import { InvalidLedgerInputError } from "./errors.js";
import { decodeRow, type RawRow } from "./row.js";
import { DEFAULT_TABLE, assertTableName, schemaSql } from "./schema.js";

/** better-sqlite3's connection type, re-exported so callers can bring their own. */
export type SqliteDatabase = Database.Database;

export type SqliteSynchronous = "FULL" | "NORMAL";

export interface SqliteLedgerOptions {
  /** Database file to open (created if absent). Exactly one of `path` and `database`. */
  path?: string;
  /**
   * Bring your own connection. The ledger does not change its journal mode or
   * synchronous setting (durability is read from them) and does not close it.
   * Do not call the ledger while the connection is inside your own transaction.
   */
  database?: SqliteDatabase;
  /** Table name (a plain identifier). Default "dispatch_once_ledger". */
  table?: string;
  /** How long finished and released rows are kept (LEDGER-13). Default 24 h. */
  retentionMs?: number;
  /** Largest result complete() accepts, in UTF-8 bytes (LEDGER-10). Default 1 MiB. */
  maxResultBytes?: number;
  /**
   * How long a statement waits for another process's write lock before the call fails
   * with LedgerUnavailableError. Default 5000 ms. With `database`, only set when given
   * (or when the connection has no busy timeout at all).
   */
  busyTimeoutMs?: number;
  /**
   * With `path`: "FULL" (default) fsyncs the WAL at every commit, so an acknowledged
   * claim survives power loss and the ledger declares durability "durable". "NORMAL" is
   * about 4x faster but the last commits can be lost on power loss or an OS crash (not
   * on a process crash), so the ledger declares "volatile" (unkeyed_write tools are then
   * refused by the dispatcher unless explicitly allowed, LEDGER-14).
   */
  synchronous?: SqliteSynchronous;
  /** Create the table and index if missing (default true). Set false when you run schemaSql() yourself. */
  migrate?: boolean;
  /** Largest number of rows one sweep statement deletes before yielding the write lock. Default 1000. */
  sweepBatchSize?: number;
  /**
   * Clock in milliseconds (default Date.now). SQLite has no server clock: leases are
   * measured on the process clock, which processes sharing one file on one machine share.
   */
  now?: () => number;
}

const DEFAULT_BUSY_TIMEOUT_MS = 5000;
const DEFAULT_SWEEP_BATCH = 1000;
/** SQLite's default SQLITE_MAX_LENGTH: no TEXT value can be longer. */
const SQLITE_MAX_LENGTH = 1_000_000_000;

const COLUMNS =
  "key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, result, error, reason, finished_at, expires_at";

/** Every statement the ledger runs, prepared once per instance. */
interface Statements {
  insertClaim: Database.Statement<[string, number, string, string, number, string, number]>;
  select: Database.Statement<[string], RawRow>;
  reclaim: Database.Statement<[number, string, string, number, number, string, number, string, number]>;
  expireToUnknown: Database.Statement<[number, number, string, number]>;
  renew: Database.Statement<[number, string, number]>;
  complete: Database.Statement<[string, number, number, string, number]>;
  fail: Database.Statement<[string, number, number, string, number]>;
  markUnknown: Database.Statement<[string, number, number, string, number]>;
  release: Database.Statement<[number, number, string, number]>;
  owns: Database.Statement<[string, number], { one: number }>;
  sweepBatch: Database.Statement<[number, number]>;
}

/**
 * The Dispatch-Once ledger on one SQLite table (better-sqlite3, WAL). Several processes
 * may share the file: every transition is one atomic statement conditional on the
 * fencing token, or one BEGIN IMMEDIATE transaction (claims that must read the row
 * before deciding), so SQLite's single write lock serialises them across processes.
 */
export class SqliteLedger implements Ledger {
  readonly capabilities: LedgerCapabilities;
  /** The table this ledger uses. */
  readonly table: string;
  /** The underlying connection (for diagnostics and tests). */
  readonly database: SqliteDatabase;
  private readonly ownsDatabase: boolean;
  private readonly retentionMs: number;
  private readonly sweepBatchSize: number;
  private readonly now: () => number;
  private readonly stmts: Statements;
  private readonly claimTransaction: (request: ClaimRequest) => ClaimResult;
  private closed = false;

  constructor(options: SqliteLedgerOptions) {
    if (typeof options !== "object" || options === null) {
      throw new InvalidLedgerInputError("options", "expected an options object");
    }
    const table = options.table ?? DEFAULT_TABLE;
    assertTableName(table);
    this.table = table;
    this.retentionMs = positiveInteger("retentionMs", options.retentionMs, DEFAULT_RETENTION_MS);
    const maxResultBytes = positiveInteger("maxResultBytes", options.maxResultBytes, DEFAULT_MAX_RESULT_BYTES);
    if (maxResultBytes > SQLITE_MAX_LENGTH) {
      throw new InvalidLedgerInputError("maxResultBytes", `SQLite stores at most ${SQLITE_MAX_LENGTH} bytes in one value`);
    }
    this.sweepBatchSize = positiveInteger("sweepBatchSize", options.sweepBatchSize, DEFAULT_SWEEP_BATCH);
    if (options.busyTimeoutMs !== undefined) positiveInteger("busyTimeoutMs", options.busyTimeoutMs, 0, true);
    if (options.synchronous !== undefined && options.synchronous !== "FULL" && options.synchronous !== "NORMAL") {
      throw new InvalidLedgerInputError("synchronous", `expected "FULL" or "NORMAL", got ${JSON.stringify(options.synchronous)}`);
    }
    if (options.now !== undefined && typeof options.now !== "function") {
      throw new InvalidLedgerInputError("now", "expected a function returning milliseconds");
    }
    this.now = options.now ?? Date.now;
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
      let journalMode: string;
      if (this.ownsDatabase) {
        // WAL lets readers (waiting claimers, lookups) proceed while one process writes.
        journalMode = String(db.pragma("journal_mode = WAL", { simple: true })).toLowerCase();
        db.pragma(`synchronous = ${options.synchronous ?? "FULL"}`);
      } else {
        if (options.busyTimeoutMs !== undefined) db.pragma(`busy_timeout = ${options.busyTimeoutMs}`);
        else if (Number(db.pragma("busy_timeout", { simple: true })) === 0) {
          db.pragma(`busy_timeout = ${DEFAULT_BUSY_TIMEOUT_MS}`);
        }
        journalMode = String(db.pragma("journal_mode", { simple: true })).toLowerCase();
      }
      const synchronous = Number(db.pragma("synchronous", { simple: true }));
      if (options.migrate ?? true) db.exec(schemaSql(table));
      this.stmts = prepare(db, table);
      this.claimTransaction = db.transaction((request: ClaimRequest) => this.claimLocked(request)).immediate;
      this.capabilities = {
        durability: durabilityOf(db, journalMode, synchronous),
        clock: "process",
        // An anonymous (":memory:" or temporary) database lives inside one connection.
        sharedAcrossProcesses: !db.memory,
        maxResultBytes,
      };
    } catch (cause) {
      if (this.ownsDatabase) db.close();
      throw new LedgerUnavailableError(`cannot prepare SQLite ledger table ${table}: ${message(cause)}`, { cause });
    }
  }

  /** Create the table and index if missing (idempotent; also run on open unless `migrate: false`). */
  migrate(): void {
    this.guard(undefined, "migrate", () => this.database.exec(schemaSql(this.table)));
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    assertClaimRequest(request);
    return this.guard(request.key, "claim", () => {
      const now = this.now();
      const leaseExpiresAt = now + request.leaseMs;
      // Fast path, one statement: a key never seen is claimed with fence 1.
      const inserted = this.stmts.insertClaim.run(
        request.key,
        ROW_FORMAT_VERSION,
        request.toolName,
        request.effect,
        now,
        request.owner,
        leaseExpiresAt,
      );
      if (inserted.changes === 1) return { outcome: "claimed", fence: 1, leaseExpiresAt, takeover: false };
      // The key exists. Most of the time it is a live claim or a finished row, which a plain
      // read can report without taking the write lock (waiting claimers poll this path).
      const seen = this.read(request.key);
      if (seen !== undefined && !this.needsTransition(seen.row, seen.expiresAt, now)) {
        return { outcome: "existing", row: seen.row as InFlightRow | TerminalRow };
      }
      // Released, expired or past retention: decide and write under the write lock.
      return this.claimTransaction(request);
    });
  }

  async renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    assertLeaseMs(leaseMs);
    return this.guard(key, "renew", () => {
      // The fence, not the clock, decides ownership: an expired lease nobody acted on is still this owner's.
      const leaseExpiresAt = this.now() + leaseMs;
      if (!isFence(fence) || this.stmts.renew.run(leaseExpiresAt, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
      return { leaseExpiresAt };
    });
  }

  async complete(key: string, fence: number, result: string): Promise<void> {
    this.guard(key, "complete", () => {
      if (typeof result !== "string" || !result.isWellFormed()) {
        this.assertOwned(key, fence);
        // A lone surrogate cannot be stored as UTF-8 text and read back identically.
        throw new ResultNotStorableError(key, typeof result !== "string" ? "result is not JSON text" : "result is not well-formed Unicode");
      }
      const max = this.capabilities.maxResultBytes;
      // A UTF-16 code unit is 1 to 3 UTF-8 bytes: count bytes only when the text could be over.
      if (result.length * 3 > max && utf8ByteLength(result) > max) {
        this.assertOwned(key, fence); // a stale owner hears stale_claim first, as from the reference ledger
        assertStorableResult(key, result, max);
      }
      const now = this.now();
      if (!isFence(fence) || this.stmts.complete.run(result, now, now + this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  async fail(key: string, fence: number, error: StoredError): Promise<void> {
    this.guard(key, "fail", () => {
      const json = encodeStoredError(error);
      const now = this.now();
      if (!isFence(fence) || this.stmts.fail.run(json, now, now + this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  async markUnknown(key: string, fence: number, reason: string): Promise<void> {
    if (typeof reason !== "string" || !reason.isWellFormed()) {
      throw new InvalidLedgerInputError("reason", "expected a well-formed string");
    }
    this.guard(key, "markUnknown", () => {
      const now = this.now();
      if (!isFence(fence) || this.stmts.markUnknown.run(reason, now, now + this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  async release(key: string, fence: number): Promise<void> {
    this.guard(key, "release", () => {
      const now = this.now();
      if (!isFence(fence) || this.stmts.release.run(now, now + this.retentionMs, key, fence).changes !== 1) {
        throw new StaleClaimError(key, fence);
      }
    });
  }

  async lookup(key: string): Promise<LedgerRow | undefined> {
    return this.guard(key, "lookup", () => {
      const seen = this.read(key);
      if (seen === undefined) return undefined;
      if (seen.row.state !== "in_flight" && seen.expiresAt !== null && seen.expiresAt <= this.now()) return undefined;
      return seen.row;
    });
  }

  /**
   * Delete finished and released rows whose retention has passed, in batches of
   * `sweepBatchSize`, each its own short write so claims from other processes interleave.
   * In-flight rows have no expires_at and are never touched (LEDGER-13).
   */
  async sweep(): Promise<number> {
    let removed = 0;
    for (;;) {
      const cutoff = this.now();
      const batch = this.guard(undefined, "sweep", () => this.stmts.sweepBatch.run(cutoff, this.sweepBatchSize).changes);
      removed += batch;
      if (batch < this.sweepBatchSize) return removed;
      // Let claims waiting in this process run between batches.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /** Close the connection if the ledger opened it (a brought-your-own connection is left open). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsDatabase && this.database.open) this.database.close();
  }

  private claimLocked(request: ClaimRequest): ClaimResult {
    const now = this.now();
    const leaseExpiresAt = now + request.leaseMs;
    const seen = this.read(request.key);
    if (seen === undefined) {
      // Swept between our insert attempt and the lock: the key is absent again.
      this.stmts.insertClaim.run(request.key, ROW_FORMAT_VERSION, request.toolName, request.effect, now, request.owner, leaseExpiresAt);
      return { outcome: "claimed", fence: 1, leaseExpiresAt, takeover: false };
    }
    const { row, expiresAt } = seen;
    if (!this.needsTransition(row, expiresAt, now)) {
      return { outcome: "existing", row: row as InFlightRow | TerminalRow };
    }
    if (row.state === "in_flight" && row.effect === "unkeyed_write") {
      // The owner's lease ran out and nothing downstream deduplicates: never re-run (LEDGER-7).
      const finishedAt = now;
      this.stmts.expireToUnknown.run(finishedAt, finishedAt + this.retentionMs, row.key, row.fence);
      const unknown: UnknownRow = {
        key: row.key,
        toolName: row.toolName,
        effect: row.effect,
        fence: row.fence,
        claimedAt: row.claimedAt,
        state: "unknown",
        reason: "lease_expired",
        finishedAt,
      };
      return { outcome: "existing", row: unknown };
    }
    // Released, past retention, or an expired keyed_write (takeover: the downstream key makes a re-run safe).
    const fence = row.fence + 1;
    this.stmts.reclaim.run(
      ROW_FORMAT_VERSION,
      request.toolName,
      request.effect,
      fence,
      now,
      request.owner,
      leaseExpiresAt,
      request.key,
      row.fence,
    );
    return { outcome: "claimed", fence, leaseExpiresAt, takeover: row.state === "in_flight" };
  }

  /** Whether a claim must change this row (rather than report it as existing). */
  private needsTransition(row: LedgerRow, expiresAt: number | null, now: number): boolean {
    if (row.state === "in_flight") return row.leaseExpiresAt <= now;
    if (row.state === "released") return true;
    return expiresAt !== null && expiresAt <= now;
  }

  private read(key: string) {
    const raw = this.stmts.select.get(key);
    return raw === undefined ? undefined : decodeRow(key, raw);
  }

  private assertOwned(key: string, fence: number): void {
    if (!isFence(fence) || this.stmts.owns.get(key, fence) === undefined) throw new StaleClaimError(key, fence);
  }

  /** Run a store operation; every driver failure becomes a typed ledger error (LEDGER-11, LEDGER-12). */
  private guard<T>(key: string | undefined, operation: string, fn: () => T): T {
    if (this.closed || !this.database.open) {
      throw new LedgerUnavailableError(`SQLite ledger ${operation}: the database connection is closed`);
    }
    if (this.database.inTransaction) {
      // Inside the caller's transaction our writes could still roll back after we report them.
      throw new LedgerUnavailableError(`SQLite ledger ${operation}: the connection is inside another transaction`);
    }
    try {
      return fn();
    } catch (cause) {
      if (cause instanceof DispatchOnceError || cause instanceof InvalidLedgerInputError) throw cause;
      const code = (cause as { code?: unknown }).code;
      if (key !== undefined && typeof code === "string" && (code.startsWith("SQLITE_CORRUPT") || code === "SQLITE_NOTADB")) {
        throw new LedgerCorruptError(key, `the database file is damaged (${code})`, { cause });
      }
      // SQLITE_BUSY past the busy timeout, I/O errors, a closed or read-only connection:
      // the statement did not commit, so nothing is reported as done.
      throw new LedgerUnavailableError(`SQLite ledger ${operation} failed: ${message(cause)}`, { cause });
    }
  }
}

/** Open (or adopt) a SQLite ledger. A string is a file path. */
export function createSqliteLedger(options: SqliteLedgerOptions | string): SqliteLedger {
  return new SqliteLedger(typeof options === "string" ? { path: options } : options);
}

function prepare(db: SqliteDatabase, table: string): Statements {
  const t = `"${table}"`;
  const owned = "WHERE key = ? AND state = 'in_flight' AND fence = ?";
  const finish = "owner = NULL, lease_expires_at = NULL, finished_at = ?, expires_at = ?";
  return {
    insertClaim: db.prepare(
      `INSERT INTO ${t} (key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at)
       VALUES (?, ?, 'in_flight', ?, ?, 1, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
    ),
    select: db.prepare(`SELECT ${COLUMNS} FROM ${t} WHERE key = ?`),
    // Guarded by the fence read inside the same IMMEDIATE transaction (belt and braces).
    reclaim: db.prepare(
      `UPDATE ${t} SET v = ?, state = 'in_flight', tool_name = ?, effect = ?, fence = ?, claimed_at = ?, owner = ?,
         lease_expires_at = ?, result = NULL, error = NULL, reason = NULL, finished_at = NULL, expires_at = NULL
       WHERE key = ? AND fence = ?`,
    ),
    expireToUnknown: db.prepare(
      `UPDATE ${t} SET state = 'unknown', reason = 'lease_expired', ${finish} ${owned}`,
    ),
    renew: db.prepare(`UPDATE ${t} SET lease_expires_at = ? ${owned}`),
    complete: db.prepare(`UPDATE ${t} SET state = 'completed', result = ?, ${finish} ${owned}`),
    fail: db.prepare(`UPDATE ${t} SET state = 'failed', error = ?, ${finish} ${owned}`),
    markUnknown: db.prepare(`UPDATE ${t} SET state = 'unknown', reason = ?, ${finish} ${owned}`),
    release: db.prepare(`UPDATE ${t} SET state = 'released', ${finish} ${owned}`),
    owns: db.prepare(`SELECT 1 AS one FROM ${t} ${owned}`),
    sweepBatch: db.prepare(
      `DELETE FROM ${t} WHERE key IN (SELECT key FROM ${t} WHERE expires_at <= ? LIMIT ?)`,
    ),
  };
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

function assertLeaseMs(leaseMs: unknown): void {
  if (typeof leaseMs !== "number" || !Number.isFinite(leaseMs) || leaseMs < 0) {
    throw new InvalidLedgerInputError("leaseMs", `expected a non-negative number of milliseconds, got ${String(leaseMs)}`);
  }
}

function assertText(field: string, value: unknown, allowEmpty: boolean): void {
  if (typeof value !== "string" || (!allowEmpty && value.length === 0) || !value.isWellFormed()) {
    throw new InvalidLedgerInputError(field, `expected a ${allowEmpty ? "" : "non-empty "}well-formed string`);
  }
}

function assertClaimRequest(request: ClaimRequest): void {
  if (typeof request !== "object" || request === null) {
    throw new InvalidLedgerInputError("request", "expected a claim request object");
  }
  assertText("key", request.key, false);
  assertText("toolName", request.toolName, false);
  assertText("owner", request.owner, true);
  if (request.effect !== "keyed_write" && request.effect !== "unkeyed_write") {
    throw new InvalidLedgerInputError("effect", `expected "keyed_write" or "unkeyed_write", got ${JSON.stringify(request.effect)}`);
  }
  assertLeaseMs(request.leaseMs);
}

/** Serialise a StoredError as JSON, refusing what would not read back as one. */
function encodeStoredError(error: StoredError): string {
  if (
    typeof error !== "object" ||
    error === null ||
    typeof error.name !== "string" ||
    typeof error.message !== "string" ||
    (error.code !== undefined && typeof error.code !== "string")
  ) {
    throw new InvalidLedgerInputError("error", "expected a stored error {name: string, message: string, code?: string, details?}");
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(error);
  } catch (cause) {
    throw new InvalidLedgerInputError("error", `not JSON-serialisable: ${message(cause)}`);
  }
  return json;
}

function message(cause: unknown): string {
  return cause instanceof Error ? cause.message : String(cause);
}
