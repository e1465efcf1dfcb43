import pg from "pg";
import type { PoolConfig, QueryConfig, QueryResultRow } from "pg";
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
  checkReopenWithinMs,
  checkUserMessage,
  checkLeaseGrantId,
  checkLeaseOwner,
  checkTurnLeaseMs,
  decodeStoreJson,
  decodeStoredMessage,
  decodeStoredTurn,
  beginTurnIndex,
  encodeStoreJson,
  encodeCallKeys,
  type StoredMessageRow,
  type StoredTurnRow,
  unknownOptionName,
  unknownOptionMessage,
  type OptionNames,
  DeadlineError,
  MAX_TIMER_MS,
  withDeadline,
} from "@dispatch-once/core/internal";
import { DEFAULT_SCHEMA, DEFAULT_TABLE_PREFIX, schemaSql, statements, tablesFor, type ConversationTables, type Statement, type Statements } from "./sql.js";

/**
 * A pg.Pool, typed by the members every pg 8 pool has rather than as this package's `pg.Pool`: a
 * pool whose type comes from another `@types/pg` version than the one these types were built on
 * is the same pool at run time (the store checks it by shape, `isPool`), and was refused by the
 * compiler. A pg.Client or PoolClient is refused at run time (`invalid_store_input`, field `pool`).
 */
export interface PostgresPool {
  connect(): Promise<unknown>;
  query(...args: never[]): Promise<unknown>;
  end(): Promise<void>;
  readonly totalCount: number;
  readonly idleCount: number;
}

export interface PostgresConversationStoreOptions {
  /**
   * Bring your own pg.Pool (shared with the application). Only a pool is accepted: every
   * method runs its own transaction on a connection of its own, which a single pg.Client
   * (possibly inside the application's transaction, where a rollback would undo a commit
   * the store had reported) cannot give. Mutually exclusive with connectionString.
   * @default none: give connectionString instead (exactly one of the two is required)
   * @example new PostgresConversationStore({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) })
   */
  pool?: PostgresPool;
  /**
   * Or let the store create (and, on close(), end) its own pg.Pool. `undefined` counts as not
   * given, so `process.env.DATABASE_URL` can be passed as it is: when it is unset, the store
   * refuses it with `invalid_store_input` (field `pool`: give exactly one of the two).
   * @default none: give pool instead (exactly one of the two is required)
   * @example new PostgresConversationStore({ connectionString: "postgres://localhost:5432/app" })
   */
  connectionString?: string | undefined;
  /**
   * Extra pg.Pool settings for the pool the store creates from connectionString. They are applied
   * after the store's own, so a `statement_timeout` here replaces the session default that
   * statementTimeoutMs sets (each transaction's own `SET LOCAL` still applies).
   * @default no extra settings: pg's defaults, plus connectionTimeoutMillis 10000, statement_timeout = statementTimeoutMs and idle_in_transaction_session_timeout = max(statementTimeoutMs, 30000)
   * @example new PostgresConversationStore({ connectionString: "postgres://localhost:5432/app", poolConfig: { max: 20 } })
   */
  poolConfig?: Omit<PoolConfig, "connectionString">;
  /**
   * Schema holding the tables (default "public"); created by migrate() if missing.
   * @default "public"
   * @example new PostgresConversationStore({ pool, schema: "chat" })
   */
  schema?: string;
  /**
   * Prefix of the five table names (default "dispatch_once_").
   * @default "dispatch_once_"
   * @example new PostgresConversationStore({ pool, schema: "chat", tablePrefix: "support_" })
   */
  tablePrefix?: string;
  /**
   * Longest the SERVER lets a statement run, lock waits included, before it cancels it and the
   * method fails with store_unavailable (default 10 s). Set on every transaction the store runs
   * (SET LOCAL), and as the session default of the pool it creates; so is
   * idle_in_transaction_session_timeout = max(statementTimeoutMs, 30000), which bounds how long a
   * process stopped inside one of the store's transactions holds its conversation's row lock. The
   * server enforces it, so a server that is paused or cut off without a reset does not: the
   * bound on a method whatever the server does is timeoutMs.
   * @default 10000 (10 s)
   * @example new PostgresConversationStore({ pool, statementTimeoutMs: 5_000 })
   */
  statementTimeoutMs?: number;
  /**
   * What the store declares (default "durable": a committed transaction is in the fsync'd
   * WAL). Declare "volatile" if the server runs with fsync=off or synchronous_commit=off, or
   * replicates asynchronously and fails over: acknowledged turns can then be lost (TURN-14).
   * @default "durable"
   * @example new PostgresConversationStore({ pool, durability: "volatile" })
   */
  durability?: "durable" | "volatile";
  /**
   * The most any store method takes before it settles, in milliseconds (TURN-21), close()
   * included, whatever the server does (paused, partitioned, refusing, slow): waiting for a pooled connection,
   * connecting, every statement of the method's transaction and its COMMIT, all inside this one
   * bound, measured by this process. Past it the method rejects with store_unavailable (plus
   * timer latency) and reports nothing as done. The connection it gave up on is destroyed, never
   * reused (a late reply must not be read as another method's answer), and the server rolls back
   * whatever it had not committed; a connection that arrives after the bound is put back unused.
   * A COMMIT already sent when the bound ran out may still be applied by the server, under the
   * fence it names or not at all: re-send the same message id, which finds the turn committed,
   * the message failed, or the message still in progress (TURN-21).
   * @default 10000 (10 s)
   * @example new PostgresConversationStore({ pool, timeoutMs: 3_000 })
   */
  timeoutMs?: number;
}

const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;
/** Default bound on one store method (timeoutMs, TURN-21). */
export const DEFAULT_TIMEOUT_MS = 10_000;
/** What a DeadlineError says of a write already sent. */
const LATE_WRITE = "a COMMIT already sent may still be applied by the server, under its own fence: re-sending the same message id settles it";
/** How long the server lets one of the store's transactions sit idle before it ends the session (and its locks). */
const idleInTransactionMs = (statementTimeoutMs: number) => Math.max(statementTimeoutMs, 30_000);
interface ConversationRow {
  fence: string;
  lease_owner: string | null;
  lease_expires_at: string | null;
  last_bound: string | null;
  begun_turn: number | null;
  begun_fence: string | null;
  lease_grant: string | null;
  lease_grant_fence: string | null;
}

type Run = <R extends QueryResultRow = QueryResultRow>(statement: Statement, values: unknown[]) => Promise<R[]>;

/**
 * The conversation store on PostgreSQL. Every write method is one transaction that first
 * locks the conversation's row (SELECT ... FOR UPDATE), so all writers of one conversation,
 * in any number of processes, run one at a time; compare-and-append, binding and lease
 * grants decide on what they read under that lock. Leases are measured on the server's clock.
 */
/** Every option the constructor takes (a misspelt one is refused, never ignored: ERR-1). */
const OPTION_NAMES: OptionNames<PostgresConversationStoreOptions> = { pool: true, connectionString: true, poolConfig: true, schema: true, tablePrefix: true, statementTimeoutMs: true, durability: true, timeoutMs: true };

export class PostgresConversationStore implements ConversationStore {
  readonly capabilities: ConversationStoreCapabilities;
  readonly tables: ConversationTables;
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly sql: Statements;
  private readonly statementTimeoutMs: number;
  private readonly timeoutMs: number;
  private readonly prefix: string;
  private closed = false;
  /** The first close(), which a later one waits for. */
  private closing: Promise<void> | undefined;

  constructor(options: PostgresConversationStoreOptions) {
    if (typeof options !== "object" || options === null) throw new InvalidStoreInputError("options", "an options object is required");
    const unknownOption = unknownOptionName(options, OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidStoreInputError(unknownOption, unknownOptionMessage("PostgresConversationStore", OPTION_NAMES));
    this.prefix = options.tablePrefix ?? DEFAULT_TABLE_PREFIX;
    this.tables = tablesFor(options.schema ?? DEFAULT_SCHEMA, this.prefix);
    const timeout = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
    if (!Number.isSafeInteger(timeout) || timeout < 1) {
      throw new InvalidStoreInputError("statementTimeoutMs", `${String(timeout)} is not a positive integer`);
    }
    this.statementTimeoutMs = timeout;
    const bound = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (typeof bound !== "number" || !Number.isSafeInteger(bound) || bound < 1 || bound > MAX_TIMER_MS) {
      throw new InvalidStoreInputError("timeoutMs", `must be a whole number of milliseconds from 1 to ${MAX_TIMER_MS}, got ${describeValue(bound)}`);
    }
    this.timeoutMs = bound;
    const durability = options.durability ?? "durable";
    if (durability !== "durable" && durability !== "volatile") {
      throw new InvalidStoreInputError("durability", `must be "durable" or "volatile", not ${String(durability)}`);
    }
    // Spread into the pool's config: a value that is not an object was spread as nothing (or as
    // its characters), and the pool made with defaults, without a word.
    if (options.poolConfig !== undefined && (typeof options.poolConfig !== "object" || options.poolConfig === null || Array.isArray(options.poolConfig))) {
      throw new InvalidStoreInputError("poolConfig", `must be an object of pg.Pool settings, got ${describeValue(options.poolConfig)}`);
    }
    if (options.pool === undefined && options.connectionString === undefined && Object.hasOwn(options, "connectionString")) {
      // process.env.DATABASE_URL passed as it is, and not set where the process runs.
      throw new InvalidStoreInputError("connectionString", "is undefined (is its environment variable set?): give a connection string, or a pg.Pool as pool instead");
    }
    if ((options.pool === undefined) === (options.connectionString === undefined)) {
      throw new InvalidStoreInputError("pool", "give exactly one of pool (bring your own pg.Pool) or connectionString");
    }
    if (options.pool !== undefined) {
      if (!isPool(options.pool)) {
        throw new InvalidStoreInputError(
          "pool",
          "must be a pg.Pool: a pg.Client or PoolClient may be inside your transaction, where a rollback would undo what the store reported",
        );
      }
      // Checked by shape above: any copy of pg, whatever @types/pg version typed it.
      this.pool = options.pool as unknown as pg.Pool;
      this.ownsPool = false;
    } else {
      if (typeof options.connectionString !== "string" || options.connectionString.length === 0) {
        throw new InvalidStoreInputError("connectionString", "must be a non-empty string");
      }
      this.pool = new pg.Pool({
        connectionTimeoutMillis: 10_000,
        statement_timeout: timeout,
        // A process paused mid-transaction (SIGSTOP, a long GC) must not hold a conversation's row lock forever.
        idle_in_transaction_session_timeout: idleInTransactionMs(timeout),
        ...options.poolConfig,
        connectionString: options.connectionString,
      });
      // An idle client whose server connection dies emits 'error' on the pool; without a
      // listener that is an uncaught exception. The next query simply gets a new connection.
      this.pool.on("error", () => {});
      this.ownsPool = true;
    }
    this.sql = statements(this.tables);
    this.capabilities = { durability, clock: "store", sharedAcrossProcesses: true, recordsWithCommit: true, supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true } };
  }

  /** The DDL migrate() runs. */
  schemaSql(): string {
    return schemaSql(this.tables.schema, this.prefix);
  }

  /** Create the schema, tables and indexes if missing. Safe from many processes at once (advisory lock). */
  async migrate(): Promise<void> {
    await this.statement("migrate", "", { text: this.schemaSql() });
  }

  async appendUserMessage(conversationId: string, message: { id: string; content: JsonValue }, options?: AppendOptions): Promise<AppendResult> {
    checkUserMessage(message);
    checkMessageId(message.id);
    checkMessageIdType(message.id);
    checkConversationId(conversationId);
    const content = encodeStoreJson("content", message.content);
    const within = checkReopenWithinMs(options);
    return this.transaction(conversationId, "appendUserMessage", async (run) => {
      const conversation = await this.lock(run, conversationId, true);
      const [known] = await run<StoredMessageRow>(this.sql.message, [conversationId, message.id]);
      if (known !== undefined) {
        const stored = decodeStoredMessage(conversationId, known);
        // TURN-12: a failed message reopens only while no other message was bound since it.
        if (stored.state === "failed" && conversation!.last_bound === stored.id) {
          // TURN-12's re-send window, on the server's clock, under the conversation's row lock.
          if (within !== undefined) {
            const [row] = await run<{ age: unknown }>(this.sql.failedAge, [conversationId, stored.id]);
            if (Number(row!.age) >= within) return { appended: false, message: stored, reopened: false, pastReopenWindow: true };
          }
          await run(this.sql.reopen, [conversationId, stored.id]);
          // Read back: the reopened row shows the first failure its window counts from (TURN-12).
          const [reopened] = await run<StoredMessageRow>(this.sql.message, [conversationId, stored.id]);
          return { appended: false, message: decodeStoredMessage(conversationId, reopened!), reopened: true };
        }
        return { appended: false, message: stored, reopened: false };
      }
      const [inserted] = await run<{ seq: number }>(this.sql.insertMessage, [conversationId, message.id, content]);
      return { appended: true, message: { id: message.id, content: JSON.parse(content) as JsonValue, seq: inserted!.seq, state: "queued" }, reopened: false };
    });
  }

  async message(conversationId: string, messageId: string): Promise<StoredMessage | undefined> {
    checkConversationId(conversationId);
    checkMessageIdType(messageId);
    const [row] = await this.query<StoredMessageRow>("message", conversationId, this.sql.message, [conversationId, messageId]);
    return row === undefined ? undefined : decodeStoredMessage(conversationId, row);
  }

  async turnsOf(conversationId: string, messageId: string): Promise<StoredTurn[]> {
    checkConversationId(conversationId);
    checkMessageIdType(messageId);
    const rows = await this.query<StoredTurnRow>("turnsOf", conversationId, this.sql.turnsOf, [conversationId, messageId]);
    return rows.map((r) => decodeStoredTurn(conversationId, r));
  }

  async log(conversationId: string): Promise<JsonValue[]> {
    checkConversationId(conversationId);
    return buildLog(conversationId, await this.query("log", conversationId, this.sql.log, [conversationId]));
  }

  async acquireLease(conversationId: string, owner: string, leaseMs: number, grantId?: string): Promise<LeaseResult> {
    checkConversationId(conversationId);
    checkLeaseOwner(owner, { storesNul: false });
    const ms = checkTurnLeaseMs(leaseMs);
    const id = checkLeaseGrantId(grantId);
    return this.transaction(conversationId, "acquireLease", async (run) => {
      const held = (await this.lock(run, conversationId, true))!;
      // TURN-10: the latest grant's own id, only while no grant (of any version) came after it.
      if (id !== undefined && held.lease_grant === id && held.lease_grant_fence !== null && held.lease_grant_fence === held.fence) {
        const [same] = await run<{ fence: string; lease_expires_at: string }>(this.sql.regrant, [conversationId, id, String(ms)]);
        if (same !== undefined) return { acquired: true, fence: toCount(conversationId, same.fence), leaseExpiresAt: toCount(conversationId, same.lease_expires_at) };
        // Released or expired: that grant is over, and a late copy of it takes nothing.
        throw new ConversationLeaseLostError(conversationId, toCount(conversationId, held.fence));
      }
      // An earlier grant's id: a late copy, which must not take a free lease and hold the
      // conversation for a whole lease with nobody working under it. Still in the row when a
      // process of an earlier version made the grants after it, else in lease_grants.
      if (id !== undefined) {
        if (held.lease_grant === id && held.lease_grant_fence !== null) throw new ConversationLeaseLostError(conversationId, toCount(conversationId, held.lease_grant_fence));
        const [earlier] = await run<{ fence: string }>(this.sql.earlierGrant, [conversationId, id, String(LEASE_GRANT_RETENTION_MS)]);
        if (earlier !== undefined) throw new ConversationLeaseLostError(conversationId, toCount(conversationId, earlier.fence));
      }
      // The grant decides on the server's clock read after the lock (see NOW_MS); the row is
      // locked, so the grant it supersedes is the one read above.
      const superseded = held.lease_grant !== null && held.lease_grant_fence !== null ? [held.lease_grant, held.lease_grant_fence] : [null, null];
      const [granted] = await run<{ fence: string; lease_expires_at: string }>(this.sql.grant, [conversationId, owner, String(ms), id ?? null, ...superseded, String(LEASE_GRANT_RETENTION_MS)]);
      if (granted !== undefined) return { acquired: true, fence: toCount(conversationId, granted.fence), leaseExpiresAt: toCount(conversationId, granted.lease_expires_at) };
      if (held.lease_owner === null || held.lease_expires_at === null) {
        throw new StoreCorruptError(conversationId, "the lease was neither free nor held");
      }
      return { acquired: false, owner: held.lease_owner, leaseExpiresAt: toCount(conversationId, held.lease_expires_at) };
    });
  }

  async renewLease(conversationId: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    checkConversationId(conversationId);
    const ms = checkTurnLeaseMs(leaseMs);
    if (!isFence(fence)) throw new ConversationLeaseLostError(conversationId, fence);
    // One statement: the fence, not the clock, decides (an expired lease nobody took is still held).
    const [row] = await this.query<{ lease_expires_at: string }>("renewLease", conversationId, this.sql.renew, [conversationId, String(fence), String(ms)]);
    if (row === undefined) throw new ConversationLeaseLostError(conversationId, fence);
    return { leaseExpiresAt: toCount(conversationId, row.lease_expires_at) };
  }

  async releaseLease(conversationId: string, fence: number): Promise<void> {
    checkConversationId(conversationId);
    if (!isFence(fence)) return;
    await this.query("releaseLease", conversationId, this.sql.release, [conversationId, String(fence)]);
  }

  async releaseLeaseGrant(conversationId: string, grantId: string): Promise<void> {
    checkConversationId(conversationId);
    const id = checkLeaseGrantId(grantId, { required: true })!;
    await this.transaction(conversationId, "releaseLeaseGrant", async (run) => {
      const held = (await this.lock(run, conversationId, true))!;
      if (held.lease_grant === id) {
        await run(this.sql.releaseGrant, [conversationId, id]);
        return;
      }
      const [earlier] = await run<{ fence: string }>(this.sql.earlierGrant, [conversationId, id, String(LEASE_GRANT_RETENTION_MS)]);
      // TURN-10: a grant id no grant carries: its acquire has not applied (yet), and its runner gave
      // it up. Kept as given back, so that a copy of that acquire landing later is refused rather
      // than taking a free lease for nobody.
      if (earlier === undefined) await run(this.sql.keepGivenBack, [conversationId, id, String(LEASE_GRANT_RETENTION_MS)]);
    });
  }

  async beginTurn(conversationId: string, fence: number): Promise<TurnSnapshot | undefined> {
    checkConversationId(conversationId);
    return this.transaction(conversationId, "beginTurn", async (run) => {
      const conversation = await this.lock(run, conversationId, false);
      this.assertHeld(conversationId, conversation, fence);
      const [row] = await run<StoredMessageRow & { turn_count: number; started: boolean }>(this.sql.current, [conversationId]);
      if (row === undefined) return undefined;
      const current = decodeStoredMessage(conversationId, row);
      const turnIndex = row.turn_count;
      // TURN-15: the fence that first began this index, kept in the same commit as the binding.
      const { begun_turn: begunTurn, begun_fence: begunFence } = conversation!;
      const begun = beginTurnIndex(conversationId, { begunTurn, begunFence: begunFence === null ? null : toCount(conversationId, begunFence) }, turnIndex, fence);
      if (begun.write) await run(this.sql.setBegun, [conversationId, turnIndex, String(fence)]);
      const bound = current.state === "queued";
      if (bound) {
        // TURN-11: bound durably before the first attempt: state, turn index and last_bound in this commit.
        const [written] = await run<{ bound_at: unknown }>(this.sql.bind, [conversationId, current.id, turnIndex]);
        current.state = "in_progress";
        current.turnIndex ??= turnIndex;
        // The first binding's time, from the binding's own statement (NULL: a row bound before bound_at).
        if (written !== undefined && written.bound_at !== null) current.boundAt = toCount(conversationId, written.bound_at);
      }
      const input = buildLog(conversationId, await run(this.sql.log, [conversationId]));
      if (!row.started) input.push(structuredClone(current.content));
      return { conversationId, turnIndex, message: current, input, resumed: begun.resumed, bound };
    });
  }

  async commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }> {
    checkConversationId(conversationId);
    const c = checkCommit(commit);
    return this.transaction(conversationId, "commitTurn", async (run) => {
      // TURN-5: the lease's fence, the log's version and the bound message, all read under the row lock.
      const conversation = await this.lock(run, conversationId, false);
      if (conversation === undefined || conversation.lease_owner === null || !isFence(c.fence) || toCount(conversationId, conversation.fence) !== c.fence) {
        return { committed: false };
      }
      const [state] = await run<StoredMessageRow & { turn_count: number }>(this.sql.commitState, [conversationId, c.messageId]);
      if (state === undefined || state.turn_count !== c.turnIndex) return { committed: false };
      if (state.message_id === null || decodeStoredMessage(conversationId, state).state !== "in_progress") return { committed: false };
      await run(this.sql.insertTurn, [conversationId, c.turnIndex, c.messageId, c.stopReason, c.assistant, c.toolResults, c.answers, c.callKeys]);
      // RECORD-4: beside the conversation, never in the log; in the commit's own transaction, under its row lock (RECORD-8).
      if (c.record !== null) await run(this.sql.insertRecord, [conversationId, c.record]);
      return { committed: true };
    });
  }

  async failMessage(conversationId: string, fence: number, messageId: string, record: JsonValue): Promise<void> {
    checkConversationId(conversationId);
    const text = encodeStoreJson("record", record);
    await this.transaction(conversationId, "failMessage", async (run) => {
      this.assertHeld(conversationId, await this.lock(run, conversationId, false), fence);
      const [row] = typeof messageId === "string" ? await run<StoredMessageRow>(this.sql.message, [conversationId, messageId]) : [];
      if (row === undefined || decodeStoredMessage(conversationId, row).state !== "in_progress") {
        throw new InvalidStoreInputError("messageId", `message ${String(messageId)} is not in progress`);
      }
      // RECORD-4: the record goes beside the conversation, never into the log (one statement).
      await run(this.sql.fail, [conversationId, messageId, text]);
    });
  }

  async addRecord(conversationId: string, record: JsonValue): Promise<void> {
    checkConversationId(conversationId);
    const text = encodeStoreJson("record", record);
    await this.transaction(conversationId, "addRecord", async (run) => {
      // The row lock orders records (seq = max + 1) against every other writer of the conversation.
      await this.lock(run, conversationId, true);
      await run(this.sql.insertRecord, [conversationId, text]);
    });
  }

  async records(conversationId: string): Promise<JsonValue[]> {
    checkConversationId(conversationId);
    const rows = await this.query<{ record: unknown }>("records", conversationId, this.sql.records, [conversationId]);
    return rows.map((r, i) => decodeStoreJson(conversationId, `record ${i + 1}`, r.record));
  }

  /** Failed turns across conversations, oldest failure first, a page at a time (TURN-17). */
  async listFailedTurns(query: FailedTurnsQuery = {}): Promise<FailedTurnsPage> {
    const { limit, after } = checkFailedTurnsQuery(query);
    const conversationId = query.conversationId ?? "";
    // One more than asked: whether a next page exists, without a second query.
    const rows = await this.query<{ conversation_id: string; message_id: string; turn_index: unknown; failure: unknown; failed_at: unknown; first_failed_at: unknown; reopenable: unknown; past_window: unknown }>(
      "listFailedTurns",
      conversationId,
      this.sql.listFailed,
      [query.conversationId ?? null, query.olderThanMs ?? null, after?.failedAt ?? null, after?.conversationId ?? null, after?.messageId ?? null, limit + 1, query.reopenWithinMs ?? null],
    );
    const turns: FailedTurn[] = rows.slice(0, limit).map((row) => {
      const turn: FailedTurn = {
        conversationId: row.conversation_id,
        messageId: row.message_id,
        failedAt: failedAtOf(row.conversation_id, row.message_id, row.failed_at),
        failure: decodeStoreJson(row.conversation_id, `failure of message ${row.message_id}`, row.failure),
        firstFailedAt: failedAtOf(row.conversation_id, row.message_id, row.first_failed_at),
        reopenable: row.reopenable === true,
      };
      // TURN-12's window, judged in the listing's own statement as appendUserMessage judges it.
      if (query.reopenWithinMs !== undefined) {
        turn.pastReopenWindow = turn.reopenable === true && row.past_window === true;
        turn.reopenable = turn.reopenable === true && !turn.pastReopenWindow;
      }
      if (row.turn_index !== null && row.turn_index !== undefined) turn.turnIndex = toCount(row.conversation_id, row.turn_index);
      return turn;
    });
    const last = turns.at(-1);
    return rows.length > limit && last !== undefined ? { turns, cursor: encodeFailedTurnsCursor(last) } : { turns };
  }

  async listStalledMessages(query: StalledMessagesQuery = {}): Promise<StalledMessagesPage> {
    const { limit, after } = checkStalledMessagesQuery(query);
    const conversationId = query.conversationId ?? "";
    const rows = await this.query<{ conversation_id: string; message_id: string; turn_index: unknown; lease_owner: string | null; bound_at: unknown; stalled_since: unknown }>(
      "listStalledMessages",
      conversationId,
      this.sql.listStalled,
      [query.conversationId ?? null, query.olderThanMs ?? 0, after?.failedAt ?? null, after?.conversationId ?? null, after?.messageId ?? null, limit + 1],
    );
    const messages: StalledMessage[] = rows.slice(0, limit).map((row) => {
      if (row.turn_index === null || row.turn_index === undefined) {
        throw new StoreCorruptError(row.conversation_id, `message ${row.message_id} is in progress without a turn index`);
      }
      const stalled: StalledMessage = {
        conversationId: row.conversation_id,
        messageId: row.message_id,
        turnIndex: toCount(row.conversation_id, row.turn_index),
        stalledSince: toCount(row.conversation_id, row.stalled_since),
      };
      if (row.lease_owner !== null) stalled.leaseOwner = row.lease_owner;
      if (row.bound_at !== null && row.bound_at !== undefined) stalled.boundAt = toCount(row.conversation_id, row.bound_at);
      return stalled;
    });
    const last = messages.at(-1);
    return rows.length > limit && last !== undefined
      ? { messages, cursor: encodeFailedTurnsCursor({ failedAt: last.stalledSince, conversationId: last.conversationId, messageId: last.messageId }) }
      : { messages };
  }

  /**
   * Ends the pool only if the store created it; a pool you passed in stays yours. Settles within
   * timeoutMs whatever the server does (TURN-21 bounds every method, close included): the pool ends
   * its connections, waiting for methods still running (each within its own bound); past the bound,
   * the connections still open (one being made to a server that does not answer: pg's end() waits
   * for it, for ever with connectionTimeoutMillis 0) are destroyed and close rejects with
   * store_unavailable. The store is closed all the same, and holds no connection. Calling close()
   * again is a no-op: it resolves once the first call has settled.
   */
  close(): Promise<void> {
    if (this.closing !== undefined) return this.closing.catch(() => {});
    this.closed = true;
    this.closing = this.ownsPool ? this.endPool() : Promise.resolve();
    return this.closing;
  }

  private async endPool(): Promise<void> {
    const ended = this.pool.end();
    try {
      await withDeadline(ended, { deadline: performance.now() + this.timeoutMs, timeoutMs: this.timeoutMs, waitingFor: "the pool's connections to end", lateWrite: "close writes nothing" });
    } catch (cause) {
      destroyConnections(this.pool);
      // Once its connections are destroyed the pool ends; nothing waits for it any more.
      ended.catch(() => {});
      if (!(cause instanceof DeadlineError)) throw this.unavailable("close", "", cause);
      throw new StoreUnavailableError(
        `PostgreSQL conversation store close: the pool's connections did not end within timeoutMs = ${this.timeoutMs} ms (the server did not answer); they were destroyed: the store is closed and holds no connection`,
        { cause },
      );
    }
  }

  /** Lock the conversation's row for this transaction (creating it first when `create`). */
  private async lock(run: Run, conversationId: string, create: boolean): Promise<ConversationRow | undefined> {
    let [row] = await run<ConversationRow>(this.sql.lock, [conversationId]);
    if (row === undefined && create) {
      await run(this.sql.ensure, [conversationId]);
      [row] = await run<ConversationRow>(this.sql.lock, [conversationId]);
      if (row === undefined) throw new StoreCorruptError(conversationId, "the conversation row vanished while it was created");
    }
    return row;
  }

  /** The fence, not the clock, decides: an expired lease nobody took is still its holder's. */
  private assertHeld(conversationId: string, row: ConversationRow | undefined, fence: number): void {
    if (row === undefined || row.lease_owner === null || !isFence(fence) || toCount(conversationId, row.fence) !== fence) {
      throw new ConversationLeaseLostError(conversationId, fence);
    }
  }

  /** One statement on its own (atomic by itself). */
  private async query<R extends QueryResultRow>(op: string, conversationId: string, statement: Statement, values: unknown[]): Promise<R[]> {
    return this.statement<R>(op, conversationId, { name: statement.name, text: statement.text, values });
  }

  /**
   * One statement on a connection checked out here (the round trips of pool.query), within
   * timeoutMs: a connection whose statement failed or outlived the bound is destroyed, as
   * pool.query destroys it, so a late reply is never read as the next caller's.
   */
  private async statement<R extends QueryResultRow>(op: string, conversationId: string, config: QueryConfig): Promise<R[]> {
    if (this.closed) throw new StoreUnavailableError(`PostgreSQL conversation store ${op}: the store is closed`);
    const deadline = performance.now() + this.timeoutMs;
    const client = await this.connect(op, conversationId, deadline);
    try {
      const { rows } = await this.within(client.query<R>(config), deadline, "the statement");
      client.release();
      return rows;
    } catch (cause) {
      client.release(cause instanceof Error ? cause : new Error(String(cause)));
      throw this.unavailable(op, conversationId, cause);
    }
  }

  /**
   * A connection of the pool by the deadline, carrying the store's 'error' listener. pg-pool takes
   * its own listener off a client while it is checked out, and a client whose connection ends
   * mid-transaction (a cut after COMMIT was sent: a lost reply) emits 'error' even though its query
   * was already rejected: without a listener that is an uncaught exception that kills the process.
   * A connection that arrives after the deadline is put back unused.
   */
  private async connect(op: string, conversationId: string, deadline: number): Promise<pg.PoolClient> {
    let client: pg.PoolClient;
    try {
      client = await withDeadline(this.pool.connect(), { deadline, timeoutMs: this.timeoutMs, waitingFor: "a connection", lateWrite: LATE_WRITE, late: (late) => late.release() });
    } catch (cause) {
      throw this.unavailable(op, conversationId, cause);
    }
    if (!guarded.has(client)) {
      guarded.add(client);
      client.on("error", () => {});
    }
    return client;
  }

  /** `promise` by the method's deadline (TURN-21), or a DeadlineError. */
  private within<T>(promise: Promise<T>, deadline: number, waitingFor: string): Promise<T> {
    return withDeadline(promise, { deadline, timeoutMs: this.timeoutMs, waitingFor, lateWrite: LATE_WRITE });
  }

  /**
   * One transaction on a connection of its own: BEGIN (with the statement timeout), `fn`, COMMIT.
   * A typed error from `fn` rolls back and is rethrown; any driver or server failure rolls
   * back and becomes store_unavailable (after a failed COMMIT the outcome is unknown: retry).
   */
  private async transaction<T>(conversationId: string, op: string, fn: (run: Run) => Promise<T>): Promise<T> {
    if (this.closed) throw new StoreUnavailableError(`PostgreSQL conversation store ${op}: the store is closed`);
    // One bound on the whole method (TURN-21): the connection, every statement and the COMMIT.
    const deadline = performance.now() + this.timeoutMs;
    const client = await this.connect(op, conversationId, deadline);
    let broken: Error | undefined;
    let committing = false;
    try {
      // One round trip (simple protocol); READ COMMITTED: each statement after the lock sees the latest commits.
      // The idle bound is set here too, not only on a pool the store creates: on a pool of yours, a process
      // stopped inside this transaction (SIGSTOP, a frozen container, a partition whose connection the server
      // keeps) would hold the conversation's row lock, so every other writer's store_unavailable, for good.
      await this.within(
        client.query(
          `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = ${this.statementTimeoutMs}; SET LOCAL idle_in_transaction_session_timeout = ${idleInTransactionMs(this.statementTimeoutMs)}`,
        ),
        deadline,
        "BEGIN",
      );
      const run: Run = async (statement, values) => (await this.within(client.query({ name: statement.name, text: statement.text, values }), deadline, `the statement ${statement.name}`)).rows;
      const result = await fn(run);
      committing = true;
      await this.within(client.query("COMMIT"), deadline, "the COMMIT");
      return result;
    } catch (error) {
      if (error instanceof DeadlineError) {
        // The server does not answer: a ROLLBACK would wait as long. Destroying the connection
        // ends the transaction on the server, which rolls back whatever it had not committed.
        broken = error;
      } else {
        try {
          await this.within(client.query("ROLLBACK"), deadline, "the ROLLBACK");
        } catch (rollback) {
          broken = rollback instanceof Error ? rollback : new Error(String(rollback));
        }
      }
      if (isDispatchOnceError(error)) throw error;
      // The connection failed once COMMIT was sent (no server error came back, which would have
      // rolled back): the server may have committed and its reply been lost. "Failed" would tell
      // a caller whose turn was committed that it was not.
      if (committing && typeof (error as { severity?: unknown } | null)?.severity !== "string") {
        throw new StoreUnavailableError(
          `PostgreSQL conversation store ${op} of ${conversationId}: the connection failed or went unanswered after COMMIT was sent, so whether it applied is unknown ` +
            `(${describe(error)}); re-sending the same message id is safe`,
          { cause: error },
        );
      }
      throw this.unavailable(op, conversationId, error);
    } finally {
      client.release(broken);
    }
  }

  private unavailable(op: string, conversationId: string, cause: unknown): Error {
    if (isDispatchOnceError(cause)) return cause;
    const code = (cause as { code?: unknown }).code;
    const hint = code === "42P01" ? " (has migrate() been run?)" : "";
    // listFailedTurns without a conversation has none to name.
    const of = conversationId === "" ? "" : ` of ${conversationId}`;
    return new StoreUnavailableError(`PostgreSQL conversation store ${op}${of} failed: ${describe(cause)}${hint}`, { cause });
  }
}

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

/** Pool clients that carry the store's own 'error' listener (see transaction()). */
const guarded = new WeakSet<object>();

/** Create a PostgreSQL conversation store. Call `await store.migrate()` once before use. */
export function createPostgresConversationStore(options: PostgresConversationStoreOptions): PostgresConversationStore {
  return new PostgresConversationStore(options);
}

/** A pg.Pool (of any copy of pg): it hands out connections; a Client or PoolClient does not count them. */
function isPool(value: unknown): value is PostgresPool {
  const v = value as { connect?: unknown; query?: unknown; totalCount?: unknown; idleCount?: unknown; release?: unknown } | null;
  return typeof v === "object" && v !== null && typeof v.connect === "function" && typeof v.query === "function" && typeof v.totalCount === "number" && typeof v.idleCount === "number" && v.release === undefined;
}

/** The log: per committed turn in order, the message's content before its first turn, then assistant and tool results. */
function buildLog(conversationId: string, rows: QueryResultRow[]): JsonValue[] {
  const out: JsonValue[] = [];
  const started = new Set<string>();
  let previous: string | undefined;
  for (const row of rows as (StoredTurnRow & { content: unknown; known: boolean })[]) {
    if (row.message_id !== previous) {
      // A message's turns are contiguous (TURN-9: one message in progress at a time).
      if (started.has(row.message_id) || !row.known) {
        throw new StoreCorruptError(
          conversationId,
          `turn ${String(row.turn_index)} belongs to message ${row.message_id}, which ${!row.known ? "is not stored" : "answered an earlier turn before another message"}`,
        );
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

/** A bigint column (pg returns text) as a safe integer, or store_corrupt. */
function toCount(conversationId: string, value: unknown): number {
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isSafeInteger(n)) throw new StoreCorruptError(conversationId, `${String(value)} is not a safe integer`);
  return n;
}

/**
 * A failed message's failure time. NULL cannot be written while migrate()'s triggers are in place; read as 0 it
 * would be listed where the index puts NULL (last), and the cursor after it would skip rows, so it
 * is store_corrupt, naming the row and the remedy.
 */
function failedAtOf(conversationId: string, messageId: string, value: unknown): number {
  if (value === null) {
    throw new StoreCorruptError(conversationId, `failed message ${messageId} has no failure time (failed_at is NULL: written where the triggers migrate() creates were missing or bypassed); migrate() sets it to 0, an unknown time`);
  }
  return toCount(conversationId, value);
}

function isFence(fence: unknown): fence is number {
  return typeof fence === "number" && Number.isSafeInteger(fence) && fence >= 1;
}

/** Text PostgreSQL can hold exactly: no NUL and no lone surrogate. */
function storable(text: string): boolean {
  return !text.includes("\u0000") && text.isWellFormed();
}

function checkConversationId(conversationId: unknown): asserts conversationId is string {
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
    throw new InvalidStoreInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
  }
}

function checkMessageIdType(messageId: unknown): asserts messageId is string {
  if (typeof messageId !== "string") throw new InvalidStoreInputError("messageId", "must be a string");
  // A text column cannot hold NUL: such an id can be neither stored nor found.
  if (!storable(messageId)) throw new InvalidStoreInputError("messageId", "must not contain NUL or lone surrogates");
}

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
  if (commit.stopReason !== null && (typeof commit.stopReason !== "string" || !storable(commit.stopReason))) {
    throw new InvalidStoreInputError("stopReason", "must be a string without NUL or lone surrogates, or null");
  }
  if (typeof commit.answers !== "boolean") throw new InvalidStoreInputError("answers", "must be a boolean");
  return {
    fence: commit.fence,
    messageId: commit.messageId,
    // Not a whole number: it can never equal the committed count (refused, not an error).
    turnIndex: Number.isSafeInteger(commit.turnIndex) ? commit.turnIndex : -1,
    assistant: encodeStoreJson("assistant", commit.assistant),
    toolResults: commit.toolResults === undefined ? null : encodeStoreJson("toolResults", commit.toolResults),
    stopReason: commit.stopReason,
    answers: commit.answers,
    record: commit.record === undefined ? null : encodeStoreJson("record", commit.record),
    // TURN-24: JSON text beside the turn (a NUL in an id is escaped there), never in the log.
    callKeys: encodeCallKeys(commit.callKeys),
  };
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" ? `${error.message} (${code})` : error.message;
  }
  return String(error);
}
