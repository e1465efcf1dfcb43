import { AsyncLocalStorage } from "node:async_hooks";
import pg from "pg";
import {
  ConversationBusyError,
  ConversationLeaseLostError,
  InvalidArgumentError,
  StoreUnavailableError,
  UnsafeStoreConfigError,
  describeValue,
  isDispatchOnceError,
} from "@dispatch-once/core";

/** Default {@link PostgresThreadLocksOptions.namespace}. */
export const DEFAULT_NAMESPACE = "dispatch_once_thread";
/** Default {@link PostgresThreadLocksOptions.applicationName}: what `pg_stat_activity` shows for a lock's session. */
export const DEFAULT_APPLICATION_NAME = "dispatch-once-thread-lock";
/** Default {@link PostgresThreadLocksOptions.leaseMs}. */
export const DEFAULT_LEASE_MS = 30_000;
/** Default {@link PostgresThreadLocksOptions.waitMs}. */
export const DEFAULT_WAIT_MS = 60_000;
/** Default {@link PostgresThreadLocksOptions.connectTimeoutMs}. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** The shortest lease accepted: a shorter one is lost to an ordinary event-loop stall. */
export const MIN_LEASE_MS = 1_000;
/** The longest lease or wait: PostgreSQL's timeouts are 32-bit milliseconds. */
export const MAX_MS = 2_147_483_647;
/** The lowest server accepted: `idle_session_timeout`, which makes the lock expire, came in PostgreSQL 14. */
export const MIN_SERVER_VERSION_NUM = 140_000;
/** The longest thread id accepted, in characters. */
export const MAX_THREAD_ID_LENGTH = 1_024;

export interface PostgresThreadLocksOptions {
  /**
   * The server to open each lock's session on (a new `pg.Client` per send, named `applicationName`).
   * Not a transaction-mode pooler (PgBouncer `pool_mode=transaction`): a session lock needs a session.
   * @default none: give client instead (exactly one of the two is required)
   * @example process.env.DATABASE_URL // "postgres://app@db:5432/app"
   */
  connectionString?: string | undefined;
  /**
   * Makes a new, unconnected `pg.Client` for each send (TLS, credentials, ...); `withThread` connects
   * and ends it. Set its `application_name` yourself if you count sessions by it.
   * @default none: give connectionString instead (exactly one of the two is required)
   * @example () => new pg.Client({ host: "db", ssl: true, application_name: "chat-thread-lock" })
   */
  client?: (() => pg.Client) | undefined;
  /**
   * Separates this app's thread locks from another's on the same server: the lock's key is
   * `(hashtext(namespace), hashtext(threadId))`.
   * @default "dispatch_once_thread"
   * @example "support_bot_threads"
   */
  namespace?: string | undefined;
  /**
   * A holder silent this long (a stopped process, a frozen VM, a partition) loses its thread: the
   * server ends its session (`idle_session_timeout`, `idle_in_transaction_session_timeout`), which
   * drops the lock and fails every later write through that session. A live holder sends a heartbeat
   * every `leaseMs / 3`. Integer milliseconds, at least 1 000.
   * @default 30000 (30 s)
   * @example 10_000 // a stopped holder's thread is free again after 10 s
   */
  leaseMs?: number | undefined;
  /**
   * How long a send waits for a thread another send holds (`lock_timeout`) before
   * `ConversationBusyError`; 0 does not wait. Integer milliseconds.
   * @default 60000 (60 s)
   * @example 0 // answer "busy, send again" at once instead of queueing
   */
  waitMs?: number | undefined;
  /**
   * The `application_name` of every lock's session opened from `connectionString`, to find them in
   * `pg_stat_activity`.
   * @default "dispatch-once-thread-lock"
   * @example "chat-thread-lock"
   */
  applicationName?: string | undefined;
  /**
   * How long opening a lock's session from `connectionString` may take (pg's `connectionTimeoutMillis`)
   * before the send is refused with `StoreUnavailableError`: without it a server that accepts and never
   * answers keeps the send waiting for ever. Integer milliseconds, at least 1. Not accepted with
   * `client`: set `connectionTimeoutMillis` on the client your factory makes (pg's default, 0, never gives up).
   * @default 10000 (10 s)
   * @example 3_000
   */
  connectTimeoutMs?: number | undefined;
}

export interface WithThreadOptions {
  /**
   * The id of the message the send answers: named by the `ConversationBusyError` of a send that waited too long.
   * @default "(not given)" in that error
   * @example "msg_01J9Z3"
   */
  messageId?: string | undefined;
}

/** A query result as `pg` returns it. */
export type ThreadQueryResult = pg.QueryResult;

/** One caller's turn on the locked session, as `pg.Pool#connect()` hands out a client. */
export interface ThreadSessionClient {
  query(text: string, values?: unknown[]): Promise<ThreadQueryResult>;
  query(config: pg.QueryConfig): Promise<ThreadQueryResult>;
  /** Hands the session to the next caller; an error argument is accepted (and ignored), as `pg`'s release takes one. */
  release(error?: unknown): void;
}

/**
 * The locked session as a `pg.Pool` to libraries that take one (LangGraph's `PostgresSaver`): `connect()`
 * hands the one connection out to one caller at a time, so a `BEGIN ... COMMIT` of one caller is not
 * interleaved with another's statements. `end()` does nothing: `withThread` ends the session.
 */
export interface ThreadSessionPool {
  connect(): Promise<ThreadSessionClient>;
  query(text: string, values?: unknown[]): Promise<ThreadQueryResult>;
  query(config: pg.QueryConfig): Promise<ThreadQueryResult>;
  end(): Promise<void>;
  on(event: string, listener: (...args: unknown[]) => void): this;
}

/** What `work` is given while it holds its thread. */
export interface HeldThread {
  readonly threadId: string;
  /**
   * The session that holds the lock, a `pg.Client` to give libraries that take one. Writes that must not
   * land after the lock is lost go through it (or `pool`): once the server ended the session they fail.
   * One query at a time, and not while a `pool` caller holds the session. Its `query` is wrapped on this
   * instance so that the heartbeat is never sent while one of work's queries is under way, nor one of
   * work's promise queries while a heartbeat is (pg would queue it and warn).
   */
  readonly client: pg.Client;
  /** The same session, one caller at a time, for libraries that take a pool. */
  readonly pool: ThreadSessionPool;
  /** Aborted when the session (and the lock) is lost; its reason is a `ConversationLeaseLostError`. */
  readonly signal: AbortSignal;
}

/** Internal seams for this package's tests; not part of the API. */
export const testSeams = Symbol.for("@dispatch-once/thread-lock-postgres.testSeams");
interface TestSeams {
  /** Send no heartbeat and set no idle timeouts, as a mechanism planted out. */
  heartbeat?: boolean;
  idleTimeouts?: boolean;
}

interface Resolved {
  connect: () => pg.Client;
  namespace: string;
  leaseMs: number;
  waitMs: number;
  applicationName: string;
}

const KNOWN_OPTIONS = new Set(["connectionString", "client", "namespace", "leaseMs", "waitMs", "applicationName", "connectTimeoutMs"]);

/** Every option checked once, here: a bad one is an `InvalidArgumentError` naming it. */
function resolveOptions(options: unknown): Resolved {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new InvalidArgumentError("options", `expected an object, got ${describeValue(options)}`);
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!KNOWN_OPTIONS.has(key)) throw new InvalidArgumentError(`options.${key}`, "unknown option (a misspelt one would be ignored)");
  }
  const hasUrl = o.connectionString !== undefined;
  const hasClient = o.client !== undefined;
  if (hasUrl === hasClient) {
    throw new InvalidArgumentError("options.connectionString", "give exactly one of connectionString and client");
  }
  if (hasUrl && (typeof o.connectionString !== "string" || o.connectionString === "")) {
    throw new InvalidArgumentError("options.connectionString", `expected a non-empty string, got ${describeValue(o.connectionString)}`);
  }
  if (hasClient && typeof o.client !== "function") {
    throw new InvalidArgumentError("options.client", `expected a function returning a new pg.Client, got ${describeValue(o.client)}`);
  }
  const namespace = o.namespace ?? DEFAULT_NAMESPACE;
  if (typeof namespace !== "string" || namespace === "" || namespace.includes("\0")) {
    throw new InvalidArgumentError("options.namespace", `expected a non-empty string without NUL, got ${describeValue(o.namespace)}`);
  }
  const applicationName = o.applicationName ?? DEFAULT_APPLICATION_NAME;
  if (typeof applicationName !== "string" || applicationName === "" || applicationName.includes("\0")) {
    throw new InvalidArgumentError("options.applicationName", `expected a non-empty string without NUL, got ${describeValue(o.applicationName)}`);
  }
  const leaseMs = o.leaseMs ?? DEFAULT_LEASE_MS;
  if (!Number.isInteger(leaseMs) || (leaseMs as number) < MIN_LEASE_MS || (leaseMs as number) > MAX_MS) {
    throw new InvalidArgumentError("options.leaseMs", `expected an integer from ${MIN_LEASE_MS} to ${MAX_MS} (milliseconds), got ${describeValue(o.leaseMs)}`);
  }
  const waitMs = o.waitMs ?? DEFAULT_WAIT_MS;
  if (!Number.isInteger(waitMs) || (waitMs as number) < 0 || (waitMs as number) > MAX_MS) {
    throw new InvalidArgumentError("options.waitMs", `expected an integer from 0 to ${MAX_MS} (milliseconds), got ${describeValue(o.waitMs)}`);
  }
  if (hasClient && o.connectTimeoutMs !== undefined) {
    throw new InvalidArgumentError("options.connectTimeoutMs", "applies to connectionString only: set connectionTimeoutMillis on the client your factory makes");
  }
  const connectTimeoutMs = o.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!Number.isInteger(connectTimeoutMs) || (connectTimeoutMs as number) < 1 || (connectTimeoutMs as number) > MAX_MS) {
    throw new InvalidArgumentError("options.connectTimeoutMs", `expected an integer from 1 to ${MAX_MS} (milliseconds), got ${describeValue(o.connectTimeoutMs)}`);
  }
  const url = o.connectionString as string;
  const connect = hasClient
    ? (o.client as () => pg.Client)
    : () => new pg.Client({ connectionString: url, application_name: applicationName, connectionTimeoutMillis: connectTimeoutMs as number });
  return { connect, namespace, leaseMs: leaseMs as number, waitMs: waitMs as number, applicationName };
}

function checkThreadId(threadId: unknown): asserts threadId is string {
  if (typeof threadId !== "string" || threadId === "" || threadId.length > MAX_THREAD_ID_LENGTH || threadId.includes("\0")) {
    throw new InvalidArgumentError("threadId", `expected a non-empty string of at most ${MAX_THREAD_ID_LENGTH} characters without NUL, got ${describeValue(threadId)}`);
  }
}

/** A thread a send holds in this async context, while its work runs. */
interface HeldHere {
  readonly key: string;
  active: boolean;
}
/**
 * The threads the current async context holds. A withThread nested in work on the same thread would wait
 * for its own lock until waitMs and then be told busy; an entry is marked inactive when its work settles,
 * so a callback work left behind does not refuse a later send.
 */
const heldHere = new AsyncLocalStorage<readonly HeldHere[]>();

/** SQLSTATE lock_not_available: `lock_timeout` ran out. */
const LOCK_NOT_AVAILABLE = "55P03";

/**
 * Serialises a thread's messages for an app whose framework owns the loop (LangGraph, LlamaIndex,
 * Mastra, the OpenAI Agents SDK): one PostgreSQL session advisory lock per thread, on a session of its
 * own held for the whole send, that expires when its holder stops, and that fences the holder's writes
 * made through that session (spec §13.4, THREAD-1 … THREAD-6).
 */
export class PostgresThreadLocks {
  readonly #options: Resolved;
  readonly #seams: TestSeams;

  constructor(options: PostgresThreadLocksOptions) {
    const seams = (options as { [testSeams]?: TestSeams } | null | undefined)?.[testSeams];
    this.#options = resolveOptions(options);
    this.#seams = seams ?? {};
  }

  /**
   * Runs `work` holding `threadId`'s lock, and releases it when `work` settles (its result or error
   * passes through unchanged). A send that finds the thread held waits up to `waitMs`, then rejects
   * with `ConversationBusyError` (nothing of `work` ran). A server below PostgreSQL 14 is refused with
   * `UnsafeStoreConfigError`.
   */
  async withThread<T>(threadId: string, work: (held: HeldThread) => Promise<T>, options: WithThreadOptions = {}): Promise<T> {
    checkThreadId(threadId);
    if (typeof work !== "function") throw new InvalidArgumentError("work", `expected a function, got ${describeValue(work)}`);
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", `expected an object, got ${describeValue(options)}`);
    const messageId = options.messageId;
    if (messageId !== undefined && (typeof messageId !== "string" || messageId === "")) {
      throw new InvalidArgumentError("options.messageId", `expected a non-empty string, got ${describeValue(messageId)}`);
    }
    const { leaseMs, namespace } = this.#options;
    const heldKey = `${namespace}\0${threadId}`;
    const outer = heldHere.getStore() ?? [];
    if (outer.some((h) => h.active && h.key === heldKey)) {
      throw new InvalidArgumentError(
        "threadId",
        `withThread nested in the work of a withThread that holds thread ${JSON.stringify(threadId)} (namespace ${JSON.stringify(namespace)}) in this async context: it would wait for its own lock; use the outer send's held thread instead`,
      );
    }
    const client = this.#options.connect();
    const lost = new AbortController();
    let pid = 0;
    let ending = false;
    const onLost = () => {
      if (!ending && !lost.signal.aborted) lost.abort(new ConversationLeaseLostError(threadId, pid));
    };
    // The server ending the session (the lease ran out) is told through `signal` and the next query's
    // failure, not as an unhandled 'error' event.
    client.on("error", onLost);
    client.on("end", onLost);
    let heartbeat: NodeJS.Timeout | undefined;
    const here: HeldHere = { key: heldKey, active: false };
    try {
      let pool: SessionPool;
      try {
        await client.connect();
        pool = await this.#acquire(client, threadId, messageId, (p) => (pid = p));
      } catch (error) {
        // Busy, a server below 14: already typed. Anything else (a connect refused or timed out, a session
        // the server ended while it waited) is a store that failed before work ran: the send may be sent again.
        if (isDispatchOnceError(error)) throw error;
        throw new StoreUnavailableError(
          `thread lock for ${JSON.stringify(threadId)}: could not open the lock's session or take the lock (${(error as Error)?.message ?? String(error)}); nothing of work ran`,
          { cause: error },
        );
      }
      if (this.#seams.heartbeat !== false) {
        // While this process runs its session is never idle for leaseMs; stopped, it is. Skipped while a
        // pool caller holds the session or one of work's queries is under way (they keep it busy; an idle
        // transaction is bounded).
        heartbeat = setInterval(() => {
          // A refused heartbeat is not a lost session (inside work's failed transaction it is refused with
          // 25P02); a lost one is told by the client's 'error' and 'end' events.
          if (pool.idle()) pool.beat();
        }, Math.max(1, Math.floor(leaseMs / 3)));
        heartbeat.unref();
      }
      here.active = true;
      return await heldHere.run([...outer, here], () => work({ threadId, client, pool, signal: lost.signal }));
    } finally {
      here.active = false;
      clearInterval(heartbeat);
      ending = true;
      // Ending the session releases the lock (and rolls back a transaction work left open).
      await client.end().catch(() => {});
    }
  }

  /** Checks the server, sets the session's timeouts and takes the lock: nothing of work runs before it returns. */
  async #acquire(client: pg.Client, threadId: string, messageId: string | undefined, setPid: (pid: number) => void): Promise<SessionPool> {
    const { leaseMs, waitMs, namespace } = this.#options;
    const version = await client.query<{ v: string; pid: number }>("SELECT current_setting('server_version_num') AS v, pg_backend_pid() AS pid");
    const row = version.rows[0];
    setPid(row?.pid ?? 0);
    if (row === undefined || !(Number(row.v) >= MIN_SERVER_VERSION_NUM)) {
      throw new UnsafeStoreConfigError(
        "postgresql",
        "server_version_num",
        String(row?.v),
        "a thread lock needs PostgreSQL 14 or later (idle_session_timeout): on an older server a stopped holder would keep its thread for ever",
      );
    }
    if (this.#seams.idleTimeouts !== false) {
      await client.query(`SET idle_session_timeout = ${leaseMs}; SET idle_in_transaction_session_timeout = ${leaseMs}`);
    }
    const key = [namespace, threadId];
    const started = Date.now();
    if (waitMs === 0) {
      const got = await client.query<{ ok: boolean }>("SELECT pg_try_advisory_lock(hashtext($1), hashtext($2)) AS ok", key);
      if (got.rows[0]?.ok !== true) throw new ConversationBusyError(threadId, messageId ?? "(not given)", 0);
    } else {
      // waitMs alone bounds the wait: a role's statement_timeout would cut it short with a raw error.
      await client.query(`SET lock_timeout = ${waitMs}; SET statement_timeout = 0`);
      try {
        await client.query("SELECT pg_advisory_lock(hashtext($1), hashtext($2))", key);
      } catch (error) {
        if ((error as { code?: unknown }).code === LOCK_NOT_AVAILABLE) {
          throw new ConversationBusyError(threadId, messageId ?? "(not given)", Date.now() - started);
        }
        throw error;
      }
      // Back to the session's own settings (the role's or server's) for work.
      await client.query("RESET lock_timeout; RESET statement_timeout");
    }
    return new SessionPool(client);
  }
}

type AnyQuery = (...args: unknown[]) => unknown;
/** pg 8's own queue state: a query of work's in any form (callback, cursor) is under way or queued. */
const pgBusy = (client: pg.Client): boolean => {
  const c = client as unknown as { _activeQuery?: unknown; _queryQueue?: unknown[] };
  return (c._activeQuery !== null && c._activeQuery !== undefined) || (c._queryQueue?.length ?? 0) > 0;
};

/** The locked session handed out to one caller at a time. */
class SessionPool implements ThreadSessionPool {
  #queue: Promise<void> = Promise.resolve();
  #out = 0;
  /** Work's promise queries under way on the session (held.client's and this pool's). */
  #working = 0;
  /** The heartbeat under way, which work's next promise query waits for. */
  #beat: Promise<void> | undefined;
  readonly #send: AnyQuery;
  constructor(private readonly session: pg.Client) {
    const send = (session.query as AnyQuery).bind(session);
    this.#send = send;
    // Wrapped on the instance, so held.client stays the pg.Client libraries take (instanceof, events).
    // A callback or submittable (cursor) query is passed straight on: pg's own queue state covers it.
    (session as unknown as { query: AnyQuery }).query = (...args: unknown[]) => {
      const first = args[0] as { submit?: unknown } | undefined;
      if (typeof args[args.length - 1] === "function" || typeof first?.submit === "function") return send(...args);
      this.#working++;
      const run = () => send(...args) as Promise<unknown>;
      const beat = this.#beat;
      return (beat === undefined ? run() : beat.then(run)).finally(() => this.#working--);
    };
  }
  idle(): boolean {
    return this.#out === 0 && this.#working === 0 && this.#beat === undefined && !pgBusy(this.session);
  }
  /** One heartbeat; its failure is ignored (see withThread). */
  beat(): void {
    this.#beat = (this.#send("SELECT 1") as Promise<unknown>).then(
      () => {},
      () => {},
    ).finally(() => (this.#beat = undefined));
  }
  async connect(): Promise<ThreadSessionClient> {
    let done!: () => void;
    const previous = this.#queue;
    this.#out++;
    this.#queue = new Promise<void>((resolve) => (done = resolve));
    await previous;
    let released = false;
    const session = this.session;
    return {
      query: ((text: string | pg.QueryConfig, values?: unknown[]) => session.query(text as string, values)) as ThreadSessionClient["query"],
      release: () => {
        if (released) return;
        released = true;
        this.#out--;
        done();
      },
    };
  }
  query(text: string, values?: unknown[]): Promise<ThreadQueryResult>;
  query(config: pg.QueryConfig): Promise<ThreadQueryResult>;
  async query(text: string | pg.QueryConfig, values?: unknown[]): Promise<ThreadQueryResult> {
    const client = await this.connect();
    try {
      return await client.query(text as string, values);
    } finally {
      client.release();
    }
  }
  async end(): Promise<void> {}
  on(): this {
    return this;
  }
}
