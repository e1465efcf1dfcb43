import pg from "pg";
import type { PoolConfig, QueryConfig, QueryResult, QueryResultRow } from "pg";
import {
  describeValue,
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  LedgerCorruptError,
  LedgerUnavailableError,
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
  type RetireOptions,
  type RetireResult,
  type RowState,
  type ClaimRequest,
  type ClaimResult,
  type InFlightRow,
  type Ledger,
  type LedgerCapabilities,
  type LedgerRow,
  type StoredError,
} from "@dispatch-once/core";
import {
  MAX_LEASE_MS,
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerKey,
  checkLedgerLeaseMs,
  checkStoredError,
  checkUnknownReason,
  resultRefusal,
  type LedgerStoreLimits,
  DeadlineError,
  withDeadline,
  unknownOptionName,
  unknownOptionMessage,
  type OptionNames,
} from "@dispatch-once/core/internal";
import { InvalidLedgerInputError } from "./errors.js";
import { decodeRow, retentionPassed, type RawRow } from "./row.js";
import {
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  NOW_MS,
  ROW_COLUMNS,
  SINCE,
  quoteIdentifier,
  schemaSql,
  statements,
  validateIdentifier,
  type Statement,
  type Statements,
  type TableName,
} from "./sql.js";

/**
 * Anything that runs a query: a pg.Pool, a pg.Client or a checked-out pg.PoolClient.
 * The ledger never ends a queryable it did not create.
 */
export interface Queryable {
  query<R extends QueryResultRow = any>(config: QueryConfig): Promise<QueryResult<R>>;
  /**
   * pg.Client's (and so PoolClient's) transaction status from the server's last ReadyForQuery:
   * "I" idle, "T" inside a transaction block, "E" inside a failed one. When present, the
   * ledger refuses to run while it is not idle (LEDGER-22).
   */
  getTransactionStatus?(): string | null;
}

export interface PostgresLedgerOptions {
  /**
   * Bring your own pool or client (shared with the application). Mutually exclusive with
   * connectionString. A client must not be inside your own transaction when the ledger uses
   * it: every ledger operation refuses that with InvalidLedgerInputError (field "pool"),
   * because your rollback would undo a claim the ledger had already reported (LEDGER-22).
   * @default none: give connectionString instead (exactly one of the two is required)
   * @example createPostgresLedger({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) })
   */
  pool?: Queryable;
  /**
   * Or let the ledger create (and, on close(), end) its own pg.Pool. `undefined` counts as not
   * given, so `process.env.DATABASE_URL` can be passed as it is: when it is unset, the ledger
   * refuses it with `invalid_ledger_input` (field `connectionString`).
   * @default none: give pool instead (exactly one of the two is required)
   * @example createPostgresLedger({ connectionString: "postgres://localhost:5432/app" })
   */
  connectionString?: string | undefined;
  /**
   * Extra pg.Pool settings for the pool the ledger creates from connectionString. Its `options`
   * are sent after the ledger's own session settings (statement_timeout, READ COMMITTED), so
   * an explicit setting there wins. `connectionTimeoutMillis` bounds one connection attempt, not an
   * operation: an operation settles at `timeoutMs` in any case, and an attempt still under way then
   * goes on and serves the next operation.
   * @default no extra settings: pg's defaults, plus connectionTimeoutMillis = max(timeoutMs, 5000) and the ledger's session settings
   * @example createPostgresLedger({ connectionString: "postgres://localhost:5432/app", poolConfig: { max: 20, idleTimeoutMillis: 30_000 } })
   */
  poolConfig?: Omit<PoolConfig, "connectionString">;
  /**
   * The most any ledger operation takes before it settles, in milliseconds (default 5000), close()
   * included: waiting
   * for a pooled connection, connecting, the statement, and any retries of a serialization
   * failure, all inside this one bound. Past it the operation rejects with LedgerUnavailableError
   * (plus timer latency). On the ledger's own pool a connection whose statement outlived the bound
   * is destroyed (never reused), a connection that arrives after the bound is kept for the next
   * operation (pg's connectionTimeoutMillis ends an attempt), and the server cancels a
   * statement after it too (statement_timeout). On a brought pool or client the ledger stops
   * waiting at the bound; the connection and its statement stay the pool's (set its timeouts).
   * @default 5000
   * @example createPostgresLedger({ pool, timeoutMs: 2_000 })
   */
  timeoutMs?: number;
  /**
   * Schema holding the table (default "public"). [A-Za-z_][A-Za-z0-9_]*, at most 63 characters.
   * @default "public"
   * @example createPostgresLedger({ pool, schema: "billing" })
   */
  schema?: string;
  /**
   * Table name (default "dispatch_once_ledger"). Same alphabet, at most 52 characters.
   * @default "dispatch_once_ledger"
   * @example createPostgresLedger({ pool, schema: "app", table: "tool_calls" })
   */
  table?: string;
  /**
   * How long finished and released rows are kept (default 24 h, LEDGER-13).
   * @default 86400000 (24 h)
   * @example createPostgresLedger({ pool, retentionMs: 7 * 24 * 60 * 60 * 1000 })
   */
  retentionMs?: number;
  /**
   * Largest result in UTF-8 bytes that complete() stores (default 1 MiB, at most 256 MiB).
   * @default 1048576 (1 MiB)
   * @example createPostgresLedger({ pool, maxResultBytes: 8 * 1024 * 1024 })
   */
  maxResultBytes?: number;
  /**
   * What the ledger declares (LEDGER-14). Default "probe": `capabilities.durability` is
   * "volatile" until `migrate()` or `probeDurability()` has read the server settings of a
   * session of this pool, then "durable" exactly when fsync, synchronous_commit and
   * full_page_writes keep a committed row across a server crash. Create the Dispatcher after
   * that (it reads capabilities once, and refuses unkeyed_write tools on a volatile ledger).
   * "durable" or "volatile" is an explicit override that skips the decision: declare "volatile"
   * when you fail over to asynchronous standbys, "durable" only when you know better than the
   * probe (it cannot see other sessions' SETs).
   * @default "probe"
   * @example createPostgresLedger({ pool, durability: "volatile" })
   */
  durability?: "probe" | "durable" | "volatile";
}

/** What probeDurability() found, as seen by one session of the ledger's pool. */
export interface DurabilityProbe {
  durable: boolean;
  /** Why not durable, one line per setting. */
  reasons: string[];
  /**
   * What the probe cannot decide but you should know: asynchronous standbys it can see (a
   * failover to one can lose the last commits; declare "volatile" if you would fail over to it).
   */
  warnings: string[];
  settings: { fsync: string; synchronousCommit: string; fullPageWrites: string; synchronousStandbyNames: string };
  /** What capabilities.durability says after this probe (the probe's verdict, or your override). */
  declared: "durable" | "volatile";
}

/** Default bound on one ledger operation (timeoutMs), the same as the Redis ledger's command timeout. */
export const DEFAULT_TIMEOUT_MS = 5_000;

/**
 * The least time the ledger's own pool gives one connection attempt (pg's connectionTimeoutMillis,
 * unless poolConfig sets it): timeoutMs if that is longer. Not a bound on any operation.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

/**
 * Attempts of one operation that meets a serialization failure (40001) or a deadlock (40P01).
 * Such a statement was rolled back: nothing happened, so sending it again is safe; the retry sees
 * the newer snapshot (under REPEATABLE READ or SERIALIZABLE a claim that loses a race to a row it
 * cannot see fails this way, and its retry finds the row). Bounded by timeoutMs as well.
 */
export const MAX_SERIALIZATION_ATTEMPTS = 10;

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

const DEFAULT_LIST_LIMIT = 100;
/** The optional methods this ledger offers (capabilities.supports). */
const SUPPORTS = Object.freeze({ listRows: true, resolve: true, auditTrail: true, listExpiredInFlight: true, retire: true });
const MAX_LIST_LIMIT = 10_000;

/** Ceiling on maxResultBytes: PostgreSQL text holds 1 GB, but a row that large hurts every reader. */
export const MAX_CONFIGURABLE_RESULT_BYTES = 256 * 1024 * 1024;

/** Transaction-scoped advisory lock id serialising concurrent migrate() calls (any table). */
const MIGRATE_LOCK_ID = 7_326_119_502_418_913n;

const SWEEP_BATCH = 5_000;

/**
 * Keys are 32 hex digits in practice; 512 UTF-16 units is at most 2 KB of UTF-8, under
 * the ~2.7 KB a btree entry may hold.
 */
const MAX_KEY_LENGTH = 512;

function positiveInteger(field: string, value: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new InvalidLedgerInputError(field, `${String(value)} is not an integer in 1..${max}`);
  }
  return value;
}

/** Text PostgreSQL can hold exactly: no NUL (text cannot contain it) and no lone surrogate (UTF-8 cannot encode it). */
function storableText(value: string): boolean {
  return !value.includes("\u0000") && value.isWellFormed();
}

/** PostgreSQL's largest value (1 GB - 1 byte): a longer request cannot be stored. */
const MAX_TEXT_BYTES = 0x3fffffff;

/** What a PostgreSQL text column holds exactly; keys fit a btree entry (MAX_KEY_LENGTH). */
const STORE_LIMITS: LedgerStoreLimits = { maxKeyLength: MAX_KEY_LENGTH, maxValueBytes: MAX_TEXT_BYTES, storesNul: false };

function requestText(field: string, value: unknown, maxLength: number): string {
  if (typeof value !== "string" || value.length === 0 || value.length > maxLength || !storableText(value)) {
    throw new InvalidLedgerInputError(
      field,
      `must be a non-empty string of at most ${maxLength} characters without NUL or lone surrogates`,
    );
  }
  return value;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" ? `${error.message} (${code})` : error.message;
  }
  return String(error);
}

/**
 * Dispatch-Once ledger on PostgreSQL. Each transition is one statement and one round trip;
 * leases run on the server's clock; results are stored in a text column byte for byte.
 */
/** Every option the constructor takes (a misspelt one is refused, never ignored: ERR-1). */
const OPTION_NAMES: OptionNames<PostgresLedgerOptions> = { pool: true, connectionString: true, poolConfig: true, timeoutMs: true, schema: true, table: true, retentionMs: true, maxResultBytes: true, durability: true };

export class PostgresLedger implements Ledger {
  /** Replaced, never mutated, when a probe decides the durability (durability: "probe"). */
  private declared: LedgerCapabilities;
  /** "probe" (decided by the server settings) or the explicit override. */
  readonly durabilityMode: "probe" | "durable" | "volatile";
  readonly schema: string;
  readonly table: string;
  readonly retentionMs: number;
  private readonly db: Queryable;
  /** The brought client's transaction status, when it has one (a pool has none). */
  private readonly transactionStatus: (() => unknown) | undefined;
  private readonly ownedPool: pg.Pool | undefined;
  /** The bound on every operation (timeoutMs). */
  readonly timeoutMs: number;
  private readonly sql: Statements;
  private closed = false;
  /** The first close(), which a later one waits for. */
  private closing: Promise<void> | undefined;

  constructor(options: PostgresLedgerOptions) {
    if (typeof options !== "object" || options === null) {
      throw new InvalidLedgerInputError("options", "an options object is required");
    }
    const unknownOption = unknownOptionName(options, OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidLedgerInputError(unknownOption, unknownOptionMessage("PostgresLedger", OPTION_NAMES));
    this.schema = validateIdentifier("schema", options.schema ?? DEFAULT_SCHEMA);
    this.table = validateIdentifier("table", options.table ?? DEFAULT_TABLE);
    this.retentionMs = positiveInteger("retentionMs", options.retentionMs ?? DEFAULT_RETENTION_MS);
    const maxResultBytes = positiveInteger(
      "maxResultBytes",
      options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES,
      MAX_CONFIGURABLE_RESULT_BYTES,
    );
    this.timeoutMs = positiveInteger("timeoutMs", options.timeoutMs ?? DEFAULT_TIMEOUT_MS, 24 * 60 * 60 * 1000);
    const durability = options.durability ?? "probe";
    if (durability !== "probe" && durability !== "durable" && durability !== "volatile") {
      throw new InvalidLedgerInputError("durability", `must be "probe", "durable" or "volatile", not ${String(durability)}`);
    }
    this.durabilityMode = durability;
    // Spread into the pool's config: a value that is not an object was spread as nothing (or as
    // its characters), and the pool made with defaults, without a word.
    if (options.poolConfig !== undefined && (typeof options.poolConfig !== "object" || options.poolConfig === null || Array.isArray(options.poolConfig))) {
      throw new InvalidLedgerInputError("poolConfig", `must be an object of pg.Pool settings, got ${describeValue(options.poolConfig)}`);
    }
    if (options.pool === undefined && options.connectionString === undefined && Object.hasOwn(options, "connectionString")) {
      // process.env.DATABASE_URL passed as it is, and not set where the process runs.
      throw new InvalidLedgerInputError("connectionString", "is undefined (is its environment variable set?): give a connection string, or a pool instead");
    }
    if ((options.pool === undefined) === (options.connectionString === undefined)) {
      throw new InvalidLedgerInputError("pool", "give exactly one of pool (bring your own) or connectionString");
    }
    if (options.pool !== undefined) {
      if (typeof (options.pool as { query?: unknown }).query !== "function") {
        throw new InvalidLedgerInputError("pool", "must be a pg.Pool, pg.Client or pg.PoolClient");
      }
      this.db = options.pool;
      const client = options.pool;
      this.transactionStatus =
        typeof client.getTransactionStatus === "function" ? () => client.getTransactionStatus?.() : undefined;
      this.ownedPool = undefined;
    } else {
      if (typeof options.connectionString !== "string" || options.connectionString.length === 0) {
        throw new InvalidLedgerInputError("connectionString", "must be a non-empty string");
      }
      if (/[?&]options=/.test(options.connectionString)) {
        // pg lets the connection string's options replace the config's, which would drop the
        // ledger's session settings (statement_timeout, READ COMMITTED) without a word.
        throw new InvalidLedgerInputError(
          "connectionString",
          "carries session options (?options=...): pass them as poolConfig.options instead, so the ledger can add its own",
        );
      }
      const given = options.poolConfig?.connectionTimeoutMillis;
      const pool = new pg.Pool({
        ...options.poolConfig,
        // A connection attempt to a paused server never ends by itself, so it has a bound; but
        // not the operation's. The operation still settles at timeoutMs (send() stops waiting and
        // puts a late connection back unused); the attempt goes on, so a server that is merely
        // slower to accept a connection than timeoutMs is reached by the next operation. Cut at
        // timeoutMs, every attempt to such a server was dropped and the ledger never connected.
        connectionTimeoutMillis: given !== undefined && given > 0 ? given : Math.max(this.timeoutMs, DEFAULT_CONNECT_TIMEOUT_MS),
        options: [ownSessionOptions(this.timeoutMs), options.poolConfig?.options].filter(Boolean).join(" "),
        connectionString: options.connectionString,
      });
      // An idle client whose server connection dies emits 'error' on the pool; without a
      // listener that is an uncaught exception. The next query simply gets a new connection.
      pool.on("error", () => {});
      this.db = pool;
      this.transactionStatus = undefined; // each query gets an idle client of the ledger's own pool
      this.ownedPool = pool;
    }
    this.sql = statements({ schema: this.schema, table: this.table });
    this.declared = Object.freeze({
      // Not yet probed: an unknown is not durable (the dispatcher refuses unkeyed_write tools).
      durability: durability === "probe" ? "volatile" : durability,
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes,
      supports: SUPPORTS,
    });
  }

  /** What the ledger declares (LEDGER-14); with durability "probe", decided by the last probe. */
  get capabilities(): LedgerCapabilities {
    return this.declared;
  }

  /** The DDL this ledger's migrate() runs (the shipped schema.sql is this for the default names). */
  schemaSql(options: { hashPartitions?: number; inFlightIndex?: boolean } = {}): string {
    return schemaSql({ schema: this.schema, table: this.table, ...options });
  }

  /**
   * Create the schema, table and index if they do not exist, add the `request` column to a
   * table of the previous version, and (re)create the claim function. Safe to run from many
   * processes at once: one simple-protocol round trip, one implicit transaction,
   * serialised by an advisory lock. `hashPartitions` creates a new table hash-partitioned
   * by key (an existing table is left as it is). Unlike the ledger operations it may run
   * inside your own (migration) transaction: DDL that rolls back leaves nothing to trust.
   */
  async migrate(options: { hashPartitions?: number; inFlightIndex?: boolean } = {}): Promise<void> {
    const text = `SELECT pg_advisory_xact_lock(${MIGRATE_LOCK_ID});\n${this.schemaSql(options)}`;
    await this.run("migrate", { text }, false);
    // Opening the ledger is where its durability is decided (durability: "probe").
    if (this.durabilityMode === "probe") await this.probeDurability();
  }

  /**
   * Read the server settings that decide whether a committed claim survives a crash, as seen
   * by a session of this ledger's pool (a shared pool inherits whatever the application SETs).
   * With durability "probe" (the default) this decides `capabilities.durability`; with an
   * explicit "durable" or "volatile" it only reports. `migrate()` calls it.
   */
  async probeDurability(): Promise<DurabilityProbe> {
    const { rows } = await this.run<{
      fsync: string;
      synchronous_commit: string;
      full_page_writes: string;
      synchronous_standby_names: string;
      async_standbys: number;
    }>(
      "probeDurability",
      {
        // pg_stat_replication shows sync_state only to roles with pg_read_all_stats; others count 0.
        text: `SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit,
                    current_setting('full_page_writes') AS full_page_writes,
                    current_setting('synchronous_standby_names') AS synchronous_standby_names,
                    (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('async', 'potential'))::int AS async_standbys`,
      },
      false,
    );
    const settings = rows[0]!;
    const reasons: string[] = [];
    if (settings.fsync !== "on") reasons.push("fsync is off: a server crash can lose or corrupt committed rows");
    if (settings.synchronous_commit === "off") {
      reasons.push("synchronous_commit is off: the last commits before a server crash can be lost");
    }
    if (settings.full_page_writes !== "on") reasons.push("full_page_writes is off: a crash can leave torn pages");
    const warnings: string[] = [];
    if (settings.async_standbys > 0) {
      warnings.push(
        `${settings.async_standbys} standby(s) replicate asynchronously: a failover to one can lose the last commits ` +
          `(declare durability "volatile" if you would fail over to it, or list it in synchronous_standby_names)`,
      );
    }
    const durable = reasons.length === 0;
    if (this.durabilityMode === "probe") {
      this.declared = Object.freeze({ ...this.declared, durability: durable ? "durable" : "volatile" });
    }
    return {
      durable,
      reasons,
      warnings,
      settings: {
        fsync: settings.fsync,
        synchronousCommit: settings.synchronous_commit,
        fullPageWrites: settings.full_page_writes,
        synchronousStandbyNames: settings.synchronous_standby_names,
      },
      declared: this.declared.durability,
    };
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const leaseMs = String(checkClaimRequest(request, STORE_LIMITS));
    const { key, toolName, owner, request: own } = request;
    const values = [
      key,
      toolName,
      request.effect,
      owner,
      leaseMs,
      String(this.retentionMs),
      own,
      request.claimId ?? null,
      request.conversationId ?? null,
      request.turnIndex === undefined ? null : String(request.turnIndex),
    ];
    // One text cell (see claimFunctionSql): 'c<fence> <leaseExpiresAt> <0|1>[ <stored request>]',
    // 'e<row JSON>', 't' (refused: inside the caller's transaction), 's<fence>' (refused: the
    // row was released under this claim id, so this is a late copy of a claim that is over; LEDGER-27)
    // or 'r<fence>' (refused: the claim id is retired, LEDGER-28; fence 0 without a row).
    const { rows } = await this.run<unknown[]>("claim", {
      ...this.prepared(this.sql.claim, values),
      rowMode: "array",
    } as QueryConfig);
    const answer = rows[0]?.[0];
    if (answer === "t") throw this.insideTransaction("claim", false);
    if (typeof answer !== "string" || answer.length < 2) {
      throw new LedgerUnavailableError(`claim of ${key} returned no answer; nothing was claimed`);
    }
    if (answer[0] === "c") return claimedAnswer(key, answer, own);
    if (answer[0] === "s") throw releasedClaimError(key, Number(answer.slice(1)));
    if (answer[0] === "r") throw retiredClaimError(key, Number(answer.slice(1)));
    const raw = JSON.parse(answer.slice(1)) as RawRow;
    // The claim turned an expired unkeyed_write claim unknown, or found a live in-flight
    // row or a terminal row within retention (or a row it cannot decode: corrupt).
    const row = decodeRow(raw);
    if (row.state === "released") throw new LedgerCorruptError(key, "a released row was not claimable");
    return { outcome: "existing", row };
  }

  async renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    const lease = String(checkLedgerLeaseMs(leaseMs));
    this.assertFence(key, fence);
    const { rows } = await this.run<{ lease_expires_at: string }>(
      "renew",
      this.prepared(this.sql.renew, [key, String(fence), lease]),
    );
    const row = rows[0];
    if (row === undefined) throw new StaleClaimError(key, fence);
    return { leaseExpiresAt: Number(row.lease_expires_at) };
  }

  async complete(key: string, fence: number, result: string): Promise<void> {
    this.assertFence(key, fence);
    const refusal = resultRefusal(key, result, this.capabilities.maxResultBytes, STORE_LIMITS);
    if (refusal !== undefined) {
      // Same precedence as the reference ledger: a stale owner hears "stale" first.
      const { rowCount } = await this.run("complete", this.prepared(this.sql.owns, [key, String(fence)]));
      if (rowCount === 0) throw new StaleClaimError(key, fence);
      throw refusal;
    }
    await this.finish("complete", this.sql.complete, key, fence, [result]);
  }

  async fail(key: string, fence: number, error: StoredError): Promise<void> {
    this.assertFence(key, fence);
    const json = checkStoredError(error, STORE_LIMITS);
    await this.finish("fail", this.sql.fail, key, fence, [json]);
  }

  async markUnknown(key: string, fence: number, reason: string): Promise<void> {
    this.assertFence(key, fence);
    await this.finish("markUnknown", this.sql.markUnknown, key, fence, [checkUnknownReason(reason, STORE_LIMITS)]);
  }

  async release(key: string, fence: number): Promise<void> {
    this.assertFence(key, fence);
    await this.finish("release", this.sql.release, key, fence, []);
  }

  /**
   * Retire a claim id of the key (LEDGER-28), in one round trip: from now until the retention has
   * passed on the server clock, every claim carrying it is refused with StaleClaimError and changes
   * nothing, row or no row; with `release`, the key's row in flight under it (lease live or expired)
   * is released in the same transaction, as release(fence) would. Idempotent. See retireFunctionSql
   * for why a claim racing it never takes the row unseen.
   */
  async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const release = checkRetireRequest(key, claimId, options);
    checkLedgerKey(key, STORE_LIMITS);
    const { rows } = await this.run<unknown[]>("retire", {
      ...this.prepared(this.sql.retire, [key, claimId, String(release), String(this.retentionMs)]),
      rowMode: "array",
    } as QueryConfig);
    const answer = rows[0]?.[0];
    if (answer === "t") throw this.insideTransaction("retire", false);
    if (answer === "1" || answer === "0") return { released: answer === "1" };
    // It may have committed; retiring again is harmless (idempotent).
    throw new LedgerUnavailableError(`retire of ${key} returned an answer the adapter cannot read: ${String(answer).slice(0, 40)}`);
  }

  async lookup(key: string): Promise<LedgerRow | undefined> {
    checkLedgerKey(key, STORE_LIMITS);
    const { rows } = await this.run<RawRow & { now_ms: string }>("lookup", this.prepared(this.sql.lookup, [key]));
    const raw = rows[0];
    if (raw === undefined) return undefined;
    // Decode first: a corrupt row is reported even when its retention column says "old".
    const row = decodeRow(raw);
    return retentionPassed(raw, Number(raw.now_ms)) ? undefined : row;
  }

  /**
   * In-flight rows whose lease ran out at least `olderThanMs` ago (server clock; default 0),
   * oldest expiry first, at most `limit` (default 100, at most 10 000). Read-only: nothing is
   * moved to `unknown` or taken over here. Such a row stays in flight until someone claims its
   * key again: a claim settles it by the rules of its effect class (an expired unkeyed_write
   * becomes unknown, LEDGER-7; an expired keyed_write is taken over and re-run under the same
   * key), so an operator or a reconciler can find claims nobody came back for. Backed by the
   * partial index on in-flight rows: the finished rows are never read. A listed row that does
   * not decode raises LedgerCorruptError naming its key (LEDGER-11).
   */
  async listExpiredInFlight(options: ListExpiredInFlightOptions = {}): Promise<InFlightRow[]> {
    checkExpiredInFlightOptions(options);
    const olderThanMs = options.olderThanMs ?? 0;
    if (typeof olderThanMs !== "number" || !Number.isSafeInteger(olderThanMs) || olderThanMs < 0 || olderThanMs > MAX_LEASE_MS) {
      throw new InvalidLedgerInputError("olderThanMs", `${String(olderThanMs)} is not an integer number of milliseconds in 0..${MAX_LEASE_MS}`);
    }
    const limit = positiveInteger("limit", options.limit ?? DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT);
    const { rows } = await this.run<RawRow>(
      "listExpiredInFlight",
      this.prepared(this.sql.expiredInFlight, [String(olderThanMs), String(limit)]),
    );
    return rows.map((raw) => {
      const row = decodeRow(raw);
      if (row.state !== "in_flight") throw new LedgerCorruptError(raw.key, `listed as in flight but decoded as ${row.state}`);
      return row;
    });
  }

  /** Delete finished and released rows past retention, and forget retired claim ids past theirs (not counted). */
  async sweep(): Promise<number> {
    let removed = 0;
    for (;;) {
      const { rows } = await this.run<{ removed: number; forgotten: number }>(
        "sweep",
        this.prepared(this.sql.sweep, [String(SWEEP_BATCH), String(this.retentionMs)]),
      );
      const count = Number(rows[0]?.removed ?? 0);
      removed += count;
      if (count < SWEEP_BATCH && Number(rows[0]?.forgotten ?? 0) < SWEEP_BATCH) return removed;
    }
  }

  /**
   * Rows matching the query, oldest last transition first (LIST-1..LIST-6), a page at a time.
   * Each filter is served by its listing index (state, tool or conversation, each ordered by the
   * last transition and the key), and the cursor is a keyset position in that order.
   */
  async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const { states, limit } = checkListQuery(query);
    const values: string[] = [];
    const param = (value: string, cast = "") => {
      values.push(value);
      return `$${values.length}${cast}`;
    };
    const where = [`NOT (state <> 'in_flight' AND expires_at <= ${NOW_MS})`];
    if (states !== undefined) where.push(`state IN (${states.map((st) => param(st)).join(", ")})`);
    if (query.toolName !== undefined) where.push(`tool_name = ${param(query.toolName)}`);
    if (query.conversationId !== undefined) where.push(`conversation_id = ${param(query.conversationId)}`);
    if (query.olderThanMs !== undefined) where.push(`${SINCE} <= ${NOW_MS} - ${param(String(query.olderThanMs), "::bigint")}`);
    if (query.cursor !== undefined) {
      const after = decodeListCursor(query.cursor);
      where.push(`(${SINCE}, key) > (${param(String(after.since), "::bigint")}, ${param(after.key)})`);
    }
    const table = `${quoteIdentifier(this.schema)}.${quoteIdentifier(this.table)}`;
    const text = `SELECT ${ROW_COLUMNS} FROM ${table} WHERE ${where.join(" AND ")} ORDER BY ${SINCE}, key LIMIT ${param(String(limit + 1), "::int")}`;
    const { rows: raws } = await this.run<RawRow>("listRows", { text, values });
    const rows = raws.slice(0, limit).map((raw) => decodeRow(raw));
    const last = rows[rows.length - 1];
    return raws.length > limit && last !== undefined ? { rows, cursor: encodeListCursor(rowSince(last), last.key) } : { rows };
  }

  /**
   * An operator's fenced, audited transition out of an open outcome (RESOLVE-1..RESOLVE-8): one
   * statement locks the row, checks its state and fence on the server clock, writes the
   * resolution with the fence bumped, and appends the audit entry.
   */
  async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    checkResolveRequest(request);
    const { key, resolution } = request;
    checkLedgerKey(key, STORE_LIMITS);
    requestText("actor", request.actor, 1024);
    requestText("reason", request.reason, 4096);
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
    const { rows } = await this.run<{ state: string; fence: string; v: number; expires_at: string | null; now_ms: string; written: string | null }>(
      "resolve",
      this.prepared(this.sql.resolve, [
        key,
        state,
        result,
        error,
        String(this.retentionMs),
        request.expectedFence === undefined ? null : String(request.expectedFence),
        request.actor,
        request.action ?? "resolved",
        request.reason,
        resolution.outcome,
      ]),
    );
    const found = rows[0];
    if (found === undefined) throw new ResolutionRefusedError(key, "absent");
    if (found.written !== null) {
      const row = decodeRow(JSON.parse(found.written) as RawRow);
      if (row.state !== "completed" && row.state !== "failed" && row.state !== "released") {
        throw new LedgerCorruptError(key, `resolved to ${row.state}`);
      }
      return row;
    }
    if (found.v !== 1) throw new LedgerCorruptError(key, `unknown row format version ${String(found.v)}`);
    if (found.state !== "in_flight" && found.expires_at !== null && Number(found.expires_at) <= Number(found.now_ms)) {
      throw new ResolutionRefusedError(key, "absent");
    }
    if (request.expectedFence !== undefined && Number(found.fence) !== request.expectedFence) {
      throw new StaleClaimError(key, request.expectedFence, `the row's fence is ${found.fence}, not the expected one`);
    }
    throw new ResolutionRefusedError(key, found.state as RowState);
  }

  /** The key's audit entries, oldest first (RESOLVE-7). */
  async auditTrail(key: string): Promise<AuditEntry[]> {
    checkLedgerKey(key, STORE_LIMITS);
    const { rows } = await this.run<{ at: string; actor: string; action: string; from_state: string; to_state: string; fence: string; reason: string; outcome: string | null }>(
      "auditTrail",
      this.prepared(this.sql.auditTrail, [key]),
    );
    return rows.map((raw) => {
      const entry: AuditEntry = {
        at: Number(raw.at),
        actor: raw.actor,
        action: raw.action as AuditEntry["action"],
        fromState: raw.from_state as RowState,
        toState: raw.to_state as RowState,
        fence: Number(raw.fence),
        reason: raw.reason,
      };
      if (raw.outcome !== null) entry.outcome = raw.outcome as NonNullable<AuditEntry["outcome"]>;
      return entry;
    });
  }

  /**
   * Ends the pool only if the ledger created it; a pool you passed in stays yours. Settles within
   * timeoutMs whatever the server does (LEDGER-12 bounds every operation, close included): the pool
   * ends its connections, waiting for operations still running (each within its own bound); past
   * the bound, the connections still open (one being made to a server that does not answer: pg's
   * end() waits for it until connectionTimeoutMillis) are destroyed and close rejects with
   * ledger_unavailable. The ledger is closed all the same, and holds no connection. Calling close()
   * again is a no-op: it resolves once the first call has settled.
   */
  close(): Promise<void> {
    if (this.closing !== undefined) return this.closing.catch(() => {});
    this.closed = true;
    this.closing = this.ownedPool === undefined ? Promise.resolve() : this.endPool(this.ownedPool);
    return this.closing;
  }

  private async endPool(pool: pg.Pool): Promise<void> {
    const ended = pool.end();
    try {
      await withDeadline(ended, { deadline: performance.now() + this.timeoutMs, timeoutMs: this.timeoutMs, waitingFor: "the pool's connections to end", lateWrite: "close writes nothing" });
    } catch (cause) {
      destroyConnections(pool);
      // Once its connections are destroyed the pool ends; nothing waits for it any more.
      ended.catch(() => {});
      const why = cause instanceof DeadlineError ? `the pool's connections did not end within timeoutMs = ${this.timeoutMs} ms (the server did not answer)` : `ending the pool failed: ${describe(cause)}`;
      throw new LedgerUnavailableError(`PostgreSQL ledger close: ${why}; they were destroyed: the ledger is closed and holds no connection`, { cause });
    }
  }

  private async finish(op: string, sql: Statement, key: string, fence: number, extra: string[]): Promise<void> {
    const { rowCount } = await this.run(op, this.prepared(sql, [key, String(fence), ...extra, String(this.retentionMs)]));
    if (rowCount === 0) throw new StaleClaimError(key, fence);
  }

  private assertFence(key: string, fence: number): void {
    checkLedgerKey(key, STORE_LIMITS);
    // No row can be owned by a fence that is not a positive integer: refuse without asking.
    if (typeof fence !== "number" || !Number.isSafeInteger(fence) || fence < 1) {
      throw new StaleClaimError(key, fence);
    }
  }

  private prepared(sql: Statement, values: Array<string | null>): QueryConfig {
    return { name: sql.name, text: sql.text, values };
  }

  /** Whether the brought client is inside a transaction block (pg's status from the last ReadyForQuery). */
  private inTransaction(): boolean {
    const status = this.transactionStatus?.();
    return status === "T" || status === "E";
  }

  private insideTransaction(op: string, ran: boolean): InvalidLedgerInputError {
    return new InvalidLedgerInputError(
      "pool",
      `PostgreSQL ledger ${op}: the client is inside a transaction, where a rollback would undo the ledger's write after it ` +
        `was reported (LEDGER-22); ${ran ? "the statement ran inside it and is not reported as done" : "nothing was written"}. ` +
        "Commit or roll back first, or give the ledger a pool or a client of its own.",
    );
  }

  /**
   * Every driver or server failure becomes LedgerUnavailableError with the cause (LEDGER-12).
   * `ownTransaction`: the statement must commit on its own (LEDGER-22). A brought client inside
   * a transaction block is refused before the statement is sent; and because the status read
   * first can be stale (a BEGIN the application queued on the client just before us), it is
   * read again after the statement: if the statement ran inside a transaction, its outcome is
   * not reported (a claim is not handed out, so no tool runs on it).
   *
   * Bounded: the whole operation (connection wait, statement, retries) settles within
   * `timeoutMs`. A serialization failure or deadlock (40001, 40P01: the statement was rolled
   * back, nothing happened) is sent again, up to MAX_SERIALIZATION_ATTEMPTS times within the
   * bound, so REPEATABLE READ or SERIALIZABLE sessions never turn a lost race into
   * ledger_unavailable while retries remain.
   */
  private async run<R extends QueryResultRow = QueryResultRow>(
    op: string,
    config: QueryConfig,
    ownTransaction = true,
  ): Promise<QueryResult<R>> {
    if (this.closed) throw new LedgerUnavailableError(`PostgreSQL ledger ${op}: the ledger is closed`);
    if (ownTransaction && this.inTransaction()) throw this.insideTransaction(op, false);
    const deadline = performance.now() + this.timeoutMs;
    for (let attempt = 1; ; attempt++) {
      let result: QueryResult<R>;
      try {
        result = await this.send<R>(config, deadline);
      } catch (error) {
        if (ownTransaction && this.inTransaction()) throw this.insideTransaction(op, true);
        if (isRetryable(error) && attempt < MAX_SERIALIZATION_ATTEMPTS && performance.now() < deadline) {
          // Immediately at first (the retry's snapshot already sees the racer's commit), then
          // with a little jitter so a crowd of retries spreads out.
          if (attempt > 1) await sleep(Math.min(Math.random() * 2 ** attempt, deadline - performance.now()));
          continue;
        }
        const code = (error as { code?: unknown }).code;
        const hint =
          code === "42P01"
            ? " (has migrate() been run?)"
            : isRetryable(error)
              ? ` (still failing after ${attempt} attempts)`
              : "";
        throw new LedgerUnavailableError(
          `PostgreSQL ledger ${op} on ${this.schema}.${this.table} failed: ${describe(error)}${hint}`,
          { cause: error },
        );
      }
      if (ownTransaction && this.inTransaction()) throw this.insideTransaction(op, true);
      return result;
    }
  }

  /**
   * One statement, settled by the deadline. On the ledger's own pool the connection is checked
   * out here (the same round trips as pool.query) so that one whose statement outlives the
   * deadline can be destroyed rather than handed to the next caller still waiting on a paused
   * server. A connection that arrives after the deadline is put back unused.
   */
  private async send<R extends QueryResultRow>(config: QueryConfig, deadline: number): Promise<QueryResult<R>> {
    const pool = this.ownedPool;
    if (pool === undefined) return withDeadline(this.db.query<R>(config), { deadline, timeoutMs: this.timeoutMs, waitingFor: "the statement", lateWrite: LATE_WRITE });
    const client = await withDeadline(pool.connect(), { deadline, timeoutMs: this.timeoutMs, waitingFor: "a connection", lateWrite: LATE_WRITE, late: (client) => client.release() });
    // pg-pool removes its own 'error' listener from a client while it is checked out, and a
    // client whose connection ends (a restart, a cut) emits 'error' even when its query has
    // already been rejected: without a listener that is an uncaught exception that kills the
    // process (found by the fault suite). The query's rejection is the error we report.
    if (!guarded.has(client)) {
      guarded.add(client);
      client.on("error", () => {});
    }
    let result: QueryResult<R>;
    try {
      result = await withDeadline(client.query<R>(config), { deadline, timeoutMs: this.timeoutMs, waitingFor: "the statement", lateWrite: LATE_WRITE });
    } catch (error) {
      // A server error (it has a SQLSTATE and a severity) leaves the connection usable; a
      // timeout or a broken connection does not: destroy it.
      client.release(sessionSurvives(error) ? undefined : (error as Error));
      throw error;
    }
    client.release();
    return result;
  }
}

/**
 * Whether the connection a statement failed on can serve the next one: a server error (it has a
 * SQLSTATE and a severity), unless it ended the session. The server closes the session after a
 * FATAL or PANIC (57P01 admin_shutdown from a fast shutdown or pg_terminate_backend, 57P02, 57P03)
 * and its socket closes a moment later; put back in the pool in between, the dead connection was
 * handed to the next operation, which failed with "Connection terminated unexpectedly" although
 * the server answered again. The severity is in the server's language, so the code decides too.
 */
function sessionSurvives(error: unknown): boolean {
  if (error instanceof DeadlineError) return false;
  const { severity, code } = error as { severity?: unknown; code?: unknown };
  if (typeof severity !== "string" || severity === "FATAL" || severity === "PANIC") return false;
  return !(typeof code === "string" && (code.startsWith("57P") || code.startsWith("08")));
}

/** Pool clients that carry the ledger's own 'error' listener (see send()). */
const guarded = new WeakSet<object>();

/**
 * Destroys the socket of every connection `pool` still has. Nothing public ends a connection whose
 * server does not answer (client.end() sends Terminate and waits for the server to close it), so
 * this reads pg-pool's `_clients` and each pg.Client's `connection.stream`, and does nothing where a
 * pg without them leaves it nothing to reach. A destroyed connection leaves the pool as failed.
 */
function destroyConnections(pool: pg.Pool): void {
  const clients = (pool as unknown as { _clients?: unknown })._clients;
  if (!Array.isArray(clients)) return;
  for (const client of clients as Array<{ connection?: { stream?: { destroy?: () => void } } }>) client.connection?.stream?.destroy?.();
}

/** What a DeadlineError says of a statement already sent. */
const LATE_WRITE = "a statement already sent may still be applied by the server: a claim then expires with its lease";

/** 40001 serialization_failure, 40P01 deadlock_detected: rolled back, safe to send again. */
function isRetryable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "40001" || code === "40P01";
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/**
 * Startup options of the ledger's own connections: the server cancels a statement that runs
 * past the bound (a lock wait, a slow disk), and every transaction runs at READ COMMITTED, the
 * level the claim function is written for, whatever the database or role defaults to.
 */
function ownSessionOptions(timeoutMs: number): string {
  return `-c statement_timeout=${timeoutMs} -c default_transaction_isolation=read\\ committed`;
}

/**
 * Read a claimed answer, 'c<fence> <leaseExpiresAt> <0|1>' (the claim created the row with
 * the caller's own request) or 'c<fence> <leaseExpiresAt> <0|1> <stored request>' (a re-claim
 * or takeover: everything after the third space is the stored request, byte for byte).
 */
function claimedAnswer(key: string, answer: string, own: string): ClaimResult {
  const first = answer.indexOf(" ");
  const second = answer.indexOf(" ", first + 1);
  const third = answer.indexOf(" ", second + 1);
  const fence = Number(answer.slice(1, first));
  const leaseExpiresAt = Number(answer.slice(first + 1, second));
  const takeover = answer.slice(second + 1, third === -1 ? undefined : third);
  if (first < 0 || second < 0 || !Number.isSafeInteger(fence) || !Number.isSafeInteger(leaseExpiresAt) || (takeover !== "0" && takeover !== "1")) {
    // The claim may have committed; unreadable, it is not handed out and expires with its lease.
    throw new LedgerUnavailableError(`claim of ${key} returned an answer the adapter cannot read: ${answer.slice(0, 40)}`);
  }
  return {
    outcome: "claimed",
    fence,
    leaseExpiresAt,
    takeover: takeover === "1",
    request: third === -1 ? own : answer.slice(third + 1),
  };
}

/** Create a PostgreSQL ledger. Call `await ledger.migrate()` once (or apply schema.sql yourself). */
export function createPostgresLedger(options: PostgresLedgerOptions): PostgresLedger {
  return new PostgresLedger(options);
}

export type { TableName };
