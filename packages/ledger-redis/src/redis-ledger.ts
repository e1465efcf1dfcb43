import { createHash, randomBytes } from "node:crypto";
import {
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  LedgerCorruptError,
  LedgerUnavailableError,
  StaleClaimError,
  releasedClaimError,
  retiredClaimError,
  isDispatchOnceError,
  checkResolveRequest,
  checkRetireRequest,
  checkListQuery,
  decodeListCursor,
  encodeListCursor,
  rowSince,
  type ListRowsPage,
  type ListRowsQuery,
  ResolutionRefusedError,
  type AuditEntry,
  type ResolveRequest,
  type ResolvedRow,
  type RowState,
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
} from "@dispatch-once/core";
import { Redis, type Cluster } from "ioredis";
import {
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerKey,
  checkLedgerLeaseMs,
  checkStoredError,
  checkUnknownReason,
  decodeLedgerRow,
  resultRefusal,
  type LedgerStoreLimits,
  type StoredLedgerFields,
  unknownOptionName,
  unknownOptionMessage,
  type OptionNames,
  DeadlineError,
  withDeadline,
  RunDeadline,
  RunDeadlines,
  loggerOption,
} from "@dispatch-once/core/internal";
import { InvalidLedgerInputError, UnsafeStoreConfigError } from "./errors.js";
import { CANCEL_LUA, CLAIM_LUA, FINISH_LUA, FORGET_LISTED_LUA, LIST_EXPIRED_LUA, LIST_ROWS_LUA, RENEW_LUA, RESOLVE_LUA, RETIRE_LUA } from "./scripts.js";
import { SLOT_COUNT, keySlot, slotTags } from "./slots.js";

export type RedisClient = Redis | Cluster;

/**
 * The shortest retention the ledger accepts (1 hour). Retention must outlast every route that can
 * replay a turn (LEDGER-13); a replay after it runs the tool again. The floor catches the mistakes
 * that defeat deduplication outright: 0 (rows deleted as they finish), and seconds passed as
 * milliseconds (`retentionMs: 86400` is 86 s, not a day). Set your own above your replay horizon.
 */
export const MIN_RETENTION_MS = 60 * 60 * 1000;

/** Default bound on every operation (waiting for a connection, then the command). */
export const DEFAULT_COMMAND_TIMEOUT_MS = 5000;

/** The most rows listExpiredInFlight() returns in one call. */
export const MAX_LIST_LIMIT = 10_000;

/** The largest olderThanMs listExpiredInFlight() accepts (a year; more is a mistake, not a query). The SQL ledgers agree. */
export const MAX_OLDER_THAN_MS = 366 * 24 * 60 * 60 * 1000;

/**
 * ioredis settings a standalone client MUST have to be used by the ledger; the ledger refuses a
 * client without them (InvalidLedgerInputError) and creates its own with them. Each one stops a
 * script from being sent twice, or after its caller was told it failed:
 * - autoResendUnfulfilledCommands false: ioredis' default (true) re-sends, after a reconnect, every
 *   command whose reply was lost, though it may have run: a claim runs twice and its claimant meets
 *   its own row (in flight, then `unknown` for an unkeyed_write that never ran).
 * - enableOfflineQueue false: the default (true) queues a command while the connection is down and
 *   sends it when it is back, after a timeout already told the caller it failed: a late claim.
 * - maxRetriesPerRequest 0: a pending command fails as soon as its connection closes. A higher
 *   value keeps it across reconnects (to be re-sent with autoResend, or left pending until a timeout).
 * Spread it into your client's options: `new Redis(url, { ...LEDGER_REDIS_OPTIONS })`, or give the
 * ledger a dedicated connection with `client.duplicate(LEDGER_REDIS_OPTIONS)`.
 */
export const LEDGER_REDIS_OPTIONS = Object.freeze({
  autoResendUnfulfilledCommands: false,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 0,
} as const);

/**
 * The same for a Cluster client. `retryDelayOnFailover: 0`: ioredis' default (100) re-sends a
 * command whose node connection closed, to another node, though it may have run. Node connections
 * take `redisOptions` (ioredis always gives them an offline queue, so that one is not checked there).
 * `new Cluster(nodes, { ...LEDGER_CLUSTER_OPTIONS, redisOptions: { ...yours, ...LEDGER_CLUSTER_OPTIONS.redisOptions } })`.
 */
export const LEDGER_CLUSTER_OPTIONS = Object.freeze({
  enableOfflineQueue: false,
  retryDelayOnFailover: 0,
  redisOptions: Object.freeze({ autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0 } as const),
} as const);

export interface RedisLedgerOptions {
  /**
   * Bring your own client (Redis or Cluster). It must have LEDGER_REDIS_OPTIONS (a Cluster:
   * LEDGER_CLUSTER_OPTIONS), or the constructor throws InvalidLedgerInputError naming the setting.
   * The ledger never closes a client it did not create.
   * @default none: the ledger creates its own client from `url` (and closes it on close())
   * @example createRedisLedger({ client: new Redis("redis://cache:6379", { ...LEDGER_REDIS_OPTIONS }) })
   */
  client?: RedisClient;
  /**
   * Used when no client is given; default REDIS_URL or redis://127.0.0.1:6379.
   * @default process.env.REDIS_URL, else "redis://127.0.0.1:6379"
   * @example createRedisLedger({ url: "redis://cache:6379" })
   */
  url?: string;
  /**
   * Key prefix; rows live at `${prefix}:{${key}}`. Must not contain `{` or `}`. Default "dispatch-once".
   * @default "dispatch-once"
   * @example createRedisLedger({ url: process.env.REDIS_URL, prefix: "payments-ledger" })
   */
  prefix?: string;
  /**
   * How long finished and released rows are kept (a PX TTL). Default DEFAULT_RETENTION_MS (24 h).
   * At least MIN_RETENTION_MS (1 h) unless allowShortRetentionForTests; must outlast your longest
   * replay horizon (LEDGER-13).
   * @default DEFAULT_RETENTION_MS (86_400_000, 24 h)
   * @example createRedisLedger({ url: process.env.REDIS_URL, retentionMs: 48 * 3600_000 })
   */
  retentionMs?: number;
  /**
   * Tests only: accept any retentionMs of 1 ms or more, so a test can watch Redis expire a row.
   * A production ledger with a short retention re-runs every replay that comes later.
   * @default false
   * @example new RedisLedger({ retentionMs: 50, allowShortRetentionForTests: true })
   */
  allowShortRetentionForTests?: boolean;
  /**
   * Largest result (UTF-8 bytes of its JSON text) complete() accepts. Default 1 MiB.
   * @default DEFAULT_MAX_RESULT_BYTES (1_048_576, 1 MiB)
   * @example createRedisLedger({ url: process.env.REDIS_URL, maxResultBytes: 4 * 1024 * 1024 })
   */
  maxResultBytes?: number;
  /**
   * Default "volatile": a Redis without fsync'd AOF can lose acknowledged rows, so unkeyed_write
   * tools are refused by the dispatcher (LEDGER-14). "durable" is verified before the ledger
   * writes anything (createRedisLedger at start, `new RedisLedger` before its first operation):
   * every primary must run `appendonly yes` and `appendfsync always` and have no replica attached
   * (a failover to an asynchronous replica loses acknowledged writes). Otherwise every operation
   * raises UnsafeStoreConfigError. See the README, "Durability".
   * @default "volatile"
   * @example createRedisLedger({ url: "redis://ledger-primary:6379", durability: "durable" })
   */
  durability?: "durable" | "volatile";
  /**
   * Default true. false trusts a "durable" declaration without reading the server, for stores
   * that refuse CONFIG GET and whose durability you have established yourself (each acknowledged
   * write fsynced before the reply, and no failover that can lose it).
   * @default true
   * @example createRedisLedger({ url: process.env.REDIS_URL, durability: "durable", verifyDurability: false })
   */
  verifyDurability?: boolean;
  /**
   * The longest any operation takes before it settles, for any client: waiting for the connection,
   * then the command. Past it: LedgerUnavailableError. Default 5000 ms; 0 waits for ever.
   * @default 5000
   * @example createRedisLedger({ url: "redis://cache:6379", commandTimeoutMs: 2_000 })
   */
  commandTimeoutMs?: number;
  /**
   * Where configuration warnings and released lost claims are reported. Default console.warn.
   * @default console.warn, each message prefixed with "[ledger-redis] "
   * @example createRedisLedger({ url: process.env.REDIS_URL, onWarning: (message) => logger.warn(message) })
   */
  onWarning?: (message: string) => void;
}

export interface CreateRedisLedgerOptions extends RedisLedgerOptions {
  /**
   * What createRedisLedger does when a node's maxmemory-policy can evict keys: "refuse"
   * (default: throw UnsafeStoreConfigError) or "warn". Policies are read with CONFIG GET;
   * where CONFIG is not permitted (managed services) a warning says it could not be verified.
   * A "durable" declaration the server does not back is always refused (see `durability`).
   * @default "refuse"
   * @example createRedisLedger({ url: process.env.REDIS_URL, onUnsafeServer: "warn" })
   */
  onUnsafeServer?: "refuse" | "warn";
  /**
   * Whether to read each node's maxmemory-policy at creation (false skips that check). Default
   * true (check). A durable declaration is still verified.
   * @default true
   * @example createRedisLedger({ url: process.env.REDIS_URL, checkServer: false })
   */
  checkServer?: boolean;
}

/** Options of listExpiredInFlight(). */
export interface ListExpiredInFlightOptions {
  /**
   * Only rows whose lease ended at least this long ago, on the store's clock. Default 0, at most MAX_OLDER_THAN_MS (a year).
   * @default 0
   * @example await ledger.listExpiredInFlight({ olderThanMs: 60_000 })
   */
  olderThanMs?: number;
  /**
   * At most this many rows, oldest lease first. Default 100, at most MAX_LIST_LIMIT.
   * @default 100
   * @example await ledger.listExpiredInFlight({ olderThanMs: 60_000, limit: 500 })
   */
  limit?: number;
}

/** A setting of one primary that a "durable" declaration needs and the server does not have. */
export interface DurabilityViolation {
  node: string;
  setting: string;
  value: string;
  why: string;
}

/** What checkServer() found on each primary node. `undefined` where CONFIG GET or INFO was refused. */
export interface RedisServerReport {
  nodes: Array<{
    node: string;
    maxmemoryPolicy: string | undefined;
    appendonly: string | undefined;
    appendfsync: string | undefined;
    /** `connected_slaves` from INFO replication. */
    connectedReplicas: number | undefined;
  }>;
  /** Human-readable problems; empty when the configuration is safe for the declared durability. */
  warnings: string[];
  /** Settings that break the guarantee regardless of durability (evicting policies). */
  unsafe: Array<{ node: string; setting: string; value: string }>;
  /** Why the server could not back a "durable" declaration (reported whatever was declared). */
  notDurable: DurabilityViolation[];
}

/** A row's audit list: the row's key (and so its hash tag) plus `:audit`; ends without '}', so it never equals a row key. */
function auditKeyOf(redisKey: string): string {
  return `${redisKey}:audit`;
}

// Resolve V8: a release of an in-flight row keeps its claim token (LEDGER-27); the other scripts
// are unchanged and keep their V7 names.
// V7: the claim that creates its row, the loser of a race and the caller's own finish run before
// the scripts' rarely used functions are made, and a finish at fence 1 skips the audit trail's
// PEXPIRE (there is none); rows, indexes and replies are unchanged.
// V6: claim reads the slot's retired claim ids (KEYS[4], LEDGER-28), which retire writes.
// V5: every state change moves the row in its slot's listing indexes, and the header's tail after
// the tool name carries the row's conversationId and turnIndex (LIST-3, LIST-6).
// V4: the row's audit list is KEYS[3] of claim, finish, cancel and resolve (V3: in-flight rows carry
// the claim token and the in-flight index is KEYS[2]). A new name, so a client shared with an older
// copy of this package never runs the other copy's script under it.
// The claim and finish scripts, every dispatch's two calls, are sent by EVALSHA straight from the
// client (EVAL of the text after a NOSCRIPT, which loads it): ioredis' defined commands (Script)
// copy the arguments twice and add a promise and a closure per call, about 10 % of the client's
// user-space instructions per claim+complete (callgrind). The other scripts stay defined commands.
const CLAIM_SHA = createHash("sha1").update(CLAIM_LUA).digest("hex");
const FINISH_SHA = createHash("sha1").update(FINISH_LUA).digest("hex");
const CMD_RENEW = "dispatchOnceLedgerRenewV7";
const CMD_CANCEL = "dispatchOnceLedgerCancelV7";
const CMD_RESOLVE = "dispatchOnceLedgerResolveV8";
const CMD_RETIRE = "dispatchOnceLedgerRetireV7";
const CMD_LIST = "dispatchOnceLedgerListExpiredV3";
const CMD_LIST_ROWS = "dispatchOnceLedgerListRowsV1";
const CMD_FORGET_LISTED = "dispatchOnceLedgerForgetListedV1";

type ScriptReply = [string, ...unknown[]];

interface ScriptClient {
  [CMD_RENEW](row: string, index: string, ...args: string[]): Promise<ScriptReply>;
  [CMD_CANCEL](row: string, index: string, audit: string, ...args: string[]): Promise<ScriptReply>;
  [CMD_RESOLVE](row: string, index: string, audit: string, ...args: string[]): Promise<ScriptReply>;
  [CMD_RETIRE](row: string, index: string, audit: string, retired: string, ...args: string[]): Promise<ScriptReply>;
}

/** What a Redis string holds: any well-formed text, NUL included, up to its 512 MiB bulk limit. */
const STORE_LIMITS: LedgerStoreLimits = { maxValueBytes: 512 * 1024 * 1024 };

/** A lost claim is released for at most its lease plus this long (then its row, if any, is settled by LEDGER-7). */
const CANCEL_GRACE_MS = 60_000;
/** At most this many lost claims are being released at once; past it, new ones are left to their lease. */
const MAX_PENDING_CANCELS = 10_000;

/** Raised by the ledger before anything was sent: the command cannot have run. */
class NotSentError extends Error {}

/** Resolves when `connection` emits "ready"; rejects with NotSentError when it emits one of `down` first. */
function untilReady(connection: Redis | Cluster, down: readonly ("close" | "end")[]): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const settle = (error?: Error) => {
      connection.off("ready", onReady);
      for (const event of down) connection.off(event, onDown);
      if (error) reject(error);
      else resolve();
    };
    const onReady = () => settle();
    const onDown = () => settle(new NotSentError(`the connection attempt failed (${connection.status})`));
    connection.on("ready", onReady);
    for (const event of down) connection.on(event, onDown);
  });
}

function nonNegativeInteger(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidLedgerInputError(field, `must be a non-negative safe integer, got ${String(value)}`);
  }
  return value;
}

/** Client settings that can send a script twice or late, as [option path, value, wanted, why]. */
function unsafeClientSettings(client: RedisClient): Array<[string, unknown, unknown, string]> {
  const found: Array<[string, unknown, unknown, string]> = [];
  const check = (path: string, value: unknown, wanted: unknown, why: string) => {
    if (value !== wanted) found.push([path, value, wanted, why]);
  };
  const resend = "re-sends a script whose reply was lost after a reconnect (it may have run: the claimant meets its own row)";
  const retries = "keeps a command whose connection closed pending across reconnects instead of failing it at once";
  if (client.isCluster) {
    const options = (client as Cluster).options;
    const node = options.redisOptions ?? {};
    check("client.enableOfflineQueue", options.enableOfflineQueue, false, "queues a command while the cluster is down and sends it after its caller was told it failed");
    check("client.retryDelayOnFailover", options.retryDelayOnFailover, 0, "re-sends a command whose node connection closed to another node, though it may have run");
    check("client.redisOptions.autoResendUnfulfilledCommands", node.autoResendUnfulfilledCommands ?? true, false, resend);
    check("client.redisOptions.maxRetriesPerRequest", node.maxRetriesPerRequest === undefined ? 20 : node.maxRetriesPerRequest, 0, retries);
  } else {
    const options = (client as Redis).options;
    check("client.autoResendUnfulfilledCommands", options.autoResendUnfulfilledCommands, false, resend);
    check("client.enableOfflineQueue", options.enableOfflineQueue, false, "queues a command while disconnected and sends it after its caller was told it failed");
    check("client.maxRetriesPerRequest", options.maxRetriesPerRequest, 0, retries);
  }
  return found;
}

/**
 * A ledger on Redis or Redis Cluster. Every transition is one Lua script on one row and the
 * in-flight index of the row's hash slot (EVALSHA via ioredis defineCommand), leases are measured
 * on the server's clock, and finished rows are removed by Redis itself (written with a PX TTL), so
 * sweep() has nothing to do.
 */
/** Every option the constructor takes (a misspelt one is refused, never ignored: ERR-1). */
const OPTION_NAMES: OptionNames<CreateRedisLedgerOptions> = { client: true, url: true, prefix: true, retentionMs: true, allowShortRetentionForTests: true, maxResultBytes: true, durability: true, verifyDurability: true, commandTimeoutMs: true, onWarning: true, onUnsafeServer: true, checkServer: true };

export class RedisLedger implements Ledger {
  readonly capabilities: LedgerCapabilities;
  readonly prefix: string;
  readonly retentionMs: number;
  private readonly client: RedisClient;
  private readonly scripts: ScriptClient;
  private readonly ownsClient: boolean;
  private readonly retentionArg: string;
  private readonly timeoutMs: number;
  private readonly onWarning: (message: string) => void;
  /** Claim tokens: unique per process (random) and per claim (counter). */
  private readonly tokenPrefix = randomBytes(6).toString("hex");
  private tokenCounter = 0;
  /** Lost claims being released (token -> timer), stopped by close(). */
  private readonly cancels = new Map<string, NodeJS.Timeout | undefined>();
  /**
   * The bound of every command sent under the fixed commandTimeoutMs (LEDGER-12): one timer for
   * all of them, armed for the oldest. A setTimeout made and cleared per command was about 4,200
   * client instructions a command at c=1 (Node makes and drops its timer list each time the last
   * timer of a duration is cleared), an entry here about a third of it.
   */
  private readonly commandDeadlines = new RunDeadlines();
  /** "ok" once a durable declaration was verified (or needs none); the check in progress otherwise. */
  private durabilityChecked: "ok" | Promise<void> | undefined;
  private readyWaiter: Promise<void> | undefined;
  private closed = false;
  /** The first close(), which a later one waits for. */
  private closing: Promise<void> | undefined;

  constructor(options: RedisLedgerOptions = {}) {
    if (typeof options !== "object" || options === null) throw new InvalidLedgerInputError("options", "expected an options object");
    const unknownOption = unknownOptionName(options, OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidLedgerInputError(unknownOption, unknownOptionMessage("RedisLedger", OPTION_NAMES));
    const prefix = options.prefix ?? "dispatch-once";
    if (typeof prefix !== "string" || prefix.length === 0 || /[{}]/.test(prefix)) {
      // A brace in the prefix would become the hash tag and pin every row to one slot.
      throw new InvalidLedgerInputError("prefix", "must be a non-empty string without '{' or '}'");
    }
    this.prefix = prefix;
    this.retentionMs = nonNegativeInteger("retentionMs", options.retentionMs, DEFAULT_RETENTION_MS);
    if (options.allowShortRetentionForTests === true) {
      if (this.retentionMs < 1) throw new InvalidLedgerInputError("retentionMs", "must be at least 1 ms");
    } else if (this.retentionMs < MIN_RETENTION_MS) {
      throw new InvalidLedgerInputError(
        "retentionMs",
        `must be at least ${MIN_RETENTION_MS} ms (1 hour), got ${this.retentionMs}: a finished row is the only ` +
          "deduplication, and a replay after its retention runs the tool again (LEDGER-13). Set it beyond your " +
          "longest replay horizon (default 24 h); allowShortRetentionForTests is for tests only",
      );
    }
    this.retentionArg = String(this.retentionMs);
    const maxResultBytes = nonNegativeInteger("maxResultBytes", options.maxResultBytes, DEFAULT_MAX_RESULT_BYTES);
    // 0 refused every result as result_not_storable, each after its effect had happened.
    if (maxResultBytes < 1) throw new InvalidLedgerInputError("maxResultBytes", "must be at least 1 byte");
    // Redis' own ceiling for one bulk string (proto-max-bulk-len default) is 512 MB.
    if (maxResultBytes > 512 * 1024 * 1024) {
      throw new InvalidLedgerInputError("maxResultBytes", "must not exceed 512 MiB (Redis' bulk string limit)");
    }
    const durability = options.durability ?? "volatile";
    if (durability !== "durable" && durability !== "volatile") {
      throw new InvalidLedgerInputError("durability", `must be "durable" or "volatile", got ${String(durability)}`);
    }
    // Any other value read as "warn": a misspelt "refuse" let an evicting server through.
    const onUnsafeServer = (options as CreateRedisLedgerOptions).onUnsafeServer;
    if (onUnsafeServer !== undefined && onUnsafeServer !== "refuse" && onUnsafeServer !== "warn") {
      throw new InvalidLedgerInputError("onUnsafeServer", `must be "refuse" or "warn", got ${JSON.stringify(onUnsafeServer)}`);
    }
    const checkServer = (options as CreateRedisLedgerOptions).checkServer;
    if (checkServer !== undefined && typeof checkServer !== "boolean") throw new InvalidLedgerInputError("checkServer", "must be a boolean");
    if (options.verifyDurability !== undefined && typeof options.verifyDurability !== "boolean") {
      throw new InvalidLedgerInputError("verifyDurability", "must be a boolean");
    }
    // Volatile needs no proof; durable is proven before the first write unless the operator vouches for it.
    if (durability === "volatile" || options.verifyDurability === false) this.durabilityChecked = "ok";
    this.timeoutMs = nonNegativeInteger("commandTimeoutMs", options.commandTimeoutMs, DEFAULT_COMMAND_TIMEOUT_MS);
    const onWarning = options.onWarning;
    if (onWarning !== undefined && typeof onWarning !== "function") throw new InvalidLedgerInputError("onWarning", "must be a function");
    // The sink is the app's: one that throws, or an async one that rejects, changes nothing and
    // leaves no unhandled rejection (a lost claim's release is reported in the background), as
    // core's logger option is guarded; its warning then goes to console.error.
    const sink = loggerOption({ warn: (message: string) => (onWarning ?? ((m: string) => console.warn(`[ledger-redis] ${m}`)))(message) });
    this.onWarning = (message) => sink.warn(message);
    this.capabilities = {
      durability,
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes,
      supports: { listRows: true, resolve: true, auditTrail: true, listExpiredInFlight: true, retire: true },
    };

    if (options.client !== undefined) {
      // Read below (its options): anything else failed with a bare TypeError.
      if (typeof options.client !== "object" || options.client === null || typeof (options.client as { options?: unknown }).options !== "object") {
        throw new InvalidLedgerInputError("client", "must be an ioredis Redis or Cluster client (new Redis(url, { ...LEDGER_REDIS_OPTIONS }))");
      }
      const unsafe = unsafeClientSettings(options.client);
      const first = unsafe[0];
      if (first !== undefined) {
        const fix = options.client.isCluster
          ? "create the Cluster with LEDGER_CLUSTER_OPTIONS (see its doc comment)"
          : "create the client with { ...LEDGER_REDIS_OPTIONS }, or give the ledger client.duplicate(LEDGER_REDIS_OPTIONS)";
        throw new InvalidLedgerInputError(
          first[0],
          unsafe.map(([path, value, wanted, why]) => `${path} is ${String(value)}, must be ${String(wanted)}: it ${why}`).join("; ") +
            `. Fix: ${fix}, or pass url and let the ledger create its own client`,
        );
      }
      this.client = options.client;
      this.ownsClient = false;
    } else {
      const url = options.url ?? process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
      const client = new Redis(url, {
        ...LEDGER_REDIS_OPTIONS,
        // Reconnect quickly (ioredis' default backs off to 2 s); meanwhile calls fail at once.
        retryStrategy: (times: number) => Math.min(times * 50, 250),
        connectTimeout: 5000,
      });
      // Connection errors surface on the commands as LedgerUnavailableError; without a
      // listener ioredis would print every reconnect failure.
      client.on("error", () => {});
      this.client = client;
      this.ownsClient = true;
    }
    // Idempotent per client: several ledgers may share one client.
    this.client.defineCommand(CMD_RENEW, { lua: RENEW_LUA, numberOfKeys: 2 });
    this.client.defineCommand(CMD_CANCEL, { lua: CANCEL_LUA, numberOfKeys: 3 });
    this.client.defineCommand(CMD_RESOLVE, { lua: RESOLVE_LUA, numberOfKeys: 3 });
    this.client.defineCommand(CMD_RETIRE, { lua: RETIRE_LUA, numberOfKeys: 4 });
    this.client.defineCommand(CMD_LIST, { lua: LIST_EXPIRED_LUA, numberOfKeys: 1, readOnly: true });
    this.client.defineCommand(CMD_LIST_ROWS, { lua: LIST_ROWS_LUA, numberOfKeys: 1, readOnly: true });
    this.client.defineCommand(CMD_FORGET_LISTED, { lua: FORGET_LISTED_LUA, numberOfKeys: 2 });
    this.scripts = this.client as unknown as ScriptClient;
    slotTags(); // built once per process (about 10 ms), not on a first claim
  }

  /** The Redis key of a ledger key. The `{...}` hash tag keeps a row in one slot by itself. */
  redisKey(key: string): string {
    return `${this.prefix}:{${key}}`;
  }

  /**
   * The in-flight index that holds a ledger key's in-flight row: a sorted set (score
   * leaseExpiresAt, member the row's Redis key) in the row's own hash slot, one per slot.
   */
  inflightIndexKey(key: string): string {
    return `${this.slotHead(this.redisKey(key))}inflight`;
  }

  /**
   * The row's audit list (RESOLVE-7): JSON entries, oldest first, in the row's own slot (the same
   * hash tag), expiring with the row. Ends without '}', so it never equals a row key.
   */
  auditKey(key: string): string {
    return auditKeyOf(this.redisKey(key));
  }

  /**
   * The retired claim ids of the slot that holds a ledger key's row (LEDGER-28): a sorted set in
   * that slot (the in-flight index's hash tag), member `<claim id>:<key>`, score the time until
   * which the id is refused, the whole set expiring a retention after its last retire.
   */
  retiredKey(key: string): string {
    return `${this.slotHead(this.redisKey(key))}retired`;
  }

  /**
   * Retire a claim id of the key (LEDGER-28), in one script on the row's slot: from now until the
   * retention has passed on the server's clock every claim carrying it is refused with
   * stale_claim, row or no row; with `release`, a row in flight under it (live or expired) is
   * released in the same script as release() with its fence would. Idempotent.
   */
  async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const release = checkRetireRequest(key, claimId, options);
    // Sent as UTF-8: a lone surrogate would become U+FFFD and retire another key's id.
    checkLedgerKey(key, STORE_LIMITS);
    checkHashTaggable(key);
    const reply = this.checked(
      await this.call("retire", key, () =>
        this.scripts[CMD_RETIRE](
          this.redisKey(key),
          this.inflightIndexKey(key),
          this.auditKey(key),
          this.retiredKey(key),
          retiredMember(key, claimId),
          claimId,
          this.retentionArg,
          release ? "1" : "0",
        ),
      ),
      "retire",
      key,
    );
    switch (reply[0]) {
      case "released":
        return { released: true };
      case "retired":
        return { released: false };
      case "corrupt":
        throw new LedgerCorruptError(key, String(reply[1]));
      default:
        throw new LedgerUnavailableError(`unexpected reply from the retire script: ${String(reply[0])}`);
    }
  }

  /**
   * An operator's fenced, audited transition out of an open outcome (RESOLVE-1..RESOLVE-8), in
   * one script on the row's slot: state and lease checked on the server clock, the fence bumped,
   * the request kept, the audit entry appended.
   */
  async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    checkResolveRequest(request);
    const key = this.checkKey(request.key);
    const { resolution } = request;
    let state: "completed" | "failed" | "released";
    let body = "";
    if (resolution.outcome === "completed") {
      state = "completed";
      body = resolution.result;
      const refusal = resultRefusal(key, body, this.capabilities.maxResultBytes, STORE_LIMITS);
      if (refusal !== undefined) throw refusal;
    } else if (resolution.outcome === "failed") {
      state = "failed";
      body = checkStoredError(resolution.error, STORE_LIMITS);
    } else {
      state = "released";
    }
    for (const [field, value] of [["actor", request.actor], ["reason", request.reason]] as const) {
      if (!value.isWellFormed()) throw new InvalidLedgerInputError(field, "must be a well-formed string");
    }
    const reply = this.checked(
      await this.call("resolve", key, () =>
        this.scripts[CMD_RESOLVE](
          this.redisKey(key),
          this.inflightIndexKey(key),
          this.auditKey(key),
          request.expectedFence === undefined ? "" : String(request.expectedFence),
          state,
          this.retentionArg,
          body,
          request.actor,
          request.action ?? "resolved",
          request.reason,
          resolution.outcome,
        ),
      ),
      "resolve",
      key,
    );
    switch (reply[0]) {
      case "ok":
        return decodeRow(key, String(reply[1])) as ResolvedRow;
      case "refused":
        throw new ResolutionRefusedError(key, String(reply[1]) as RowState | "absent");
      case "stale":
        throw new StaleClaimError(key, request.expectedFence ?? Number(reply[1]), `the row's fence is ${String(reply[1])}, not the expected one`);
      case "corrupt":
        throw new LedgerCorruptError(key, String(reply[1]));
      default:
        throw new LedgerUnavailableError(`unexpected reply from the resolve script: ${String(reply[0])}`);
    }
  }

  /** The key's audit entries, oldest first (RESOLVE-7). */
  async auditTrail(key: string): Promise<AuditEntry[]> {
    this.checkKey(key);
    const auditKey = this.auditKey(key);
    const entries = await this.call("auditTrail", key, () => this.client.lrange(auditKey, 0, -1));
    return entries.map((text) => {
      let parsed: Record<string, unknown>;
      try {
        parsed = JSON.parse(text) as Record<string, unknown>;
      } catch (cause) {
        throw new LedgerCorruptError(key, "an audit entry is not JSON", { cause });
      }
      const entry: AuditEntry = {
        at: Number(parsed.at),
        actor: String(parsed.actor),
        action: String(parsed.action) as AuditEntry["action"],
        fromState: String(parsed.fromState) as RowState,
        toState: String(parsed.toState) as RowState,
        fence: Number(parsed.fence),
        reason: String(parsed.reason),
      };
      if (typeof parsed.outcome === "string") entry.outcome = parsed.outcome as NonNullable<AuditEntry["outcome"]>;
      return entry;
    });
  }

  private indexKeyOfSlot(slot: number): string {
    // Ends without '}', so it can never equal a row key (of any prefix); the tag is its hash tag.
    return `${this.prefix}:{${slotTags()[slot]!}}:inflight`;
  }

  /**
   * `prefix:{tag}:` of a row's slot, the head of the slot's in-flight index (`inflight`, as
   * indexKeyOfSlot) and retired-id keys (`retired`): the claim and finish paths hash the slot once.
   */
  private slotHead(redisKey: string): string {
    return this.indexKeyOfSlot(keySlot(redisKey)).slice(0, -"inflight".length);
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const leaseMs = String(checkClaimRequest(request, STORE_LIMITS));
    const key = request.key;
    checkHashTaggable(key);
    // The caller's claim id when given (LEDGER-26: a claim sent again is recognised by it), else
    // a token of this ledger's own, never repeated (it has a '.', which a claim id never has).
    const token = request.claimId ?? `${this.tokenPrefix}.${(this.tokenCounter++).toString(36)}`;
    const redisKey = this.redisKey(key);
    // The slot is hashed once for the row's index and retired-id keys (the hot path).
    const slotHead = this.slotHead(redisKey);
    let reply: ScriptReply;
    try {
      reply = await this.call("claim", key, (load) =>
        this.client[load ? "eval" : "evalsha"](
          load ? CLAIM_LUA : CLAIM_SHA,
          "4",
          redisKey,
          `${slotHead}inflight`,
          auditKeyOf(redisKey),
          `${slotHead}retired`,
          // JSON-escaped here, spliced into the row header by the script; the conversation and
          // turn follow the tool name, where every script copies them unchanged (LIST-3).
          JSON.stringify(request.toolName) +
            (request.conversationId === undefined ? "" : `,"conversationId":${JSON.stringify(request.conversationId)}`) +
            (request.turnIndex === undefined ? "" : `,"turnIndex":${request.turnIndex}`),
          request.effect,
          request.owner,
          leaseMs,
          this.retentionArg,
          request.request,
          token,
          // Only a claim that carries a claim id reads the retired ids (LEDGER-28).
          request.claimId === undefined ? "" : retiredMember(key, request.claimId),
        ) as Promise<ScriptReply>,
      );
    } catch (error) {
      // The claim may have run although its caller now hears ledger_unavailable (LEDGER-12): a
      // timeout, or a connection lost after sending. Its claimant never got the fence, so the tool
      // will not run under it: release the row it may have written, by its token, instead of
      // leaving an in-flight row whose lease later turns an unkeyed call unknown.
      // A claim with a claim id is its caller's to send again or release (LEDGER-26): released
      // here, it could be released under a retry that the ledger has just recognised as it.
      if (mayHaveRun(error) && request.claimId === undefined) this.cancelLostClaim(key, token, Number(leaseMs));
      throw error;
    }
    switch (this.checked(reply, "claim", key)[0]) {
      case "claimed":
        return {
          outcome: "claimed",
          fence: Number(reply[1]),
          leaseExpiresAt: Number(reply[2]),
          takeover: Number(reply[3]) === 1,
          // A re-claim or takeover replies with the row's stored request; a claim that created
          // the row replies without it, because what it stored is this very argument.
          request: reply.length > 4 ? String(reply[4]) : request.request,
        };
      case "existing": {
        const row = decodeRow(key, String(reply[1]));
        if (row.state === "released") throw new LedgerCorruptError(key, "claim returned a released row");
        return { outcome: "existing", row: row as InFlightRow | TerminalRow };
      }
      case "released_claim":
        // A late copy of a claim that was released by its claim id (or by its token): refused (LEDGER-27).
        throw releasedClaimError(key, Number(reply[1]));
      case "retired":
        // A late copy of a claim whose claim id its dispatcher retired: refused, nothing written (LEDGER-28).
        throw retiredClaimError(key, Number(reply[1]));
      case "corrupt":
        throw new LedgerCorruptError(key, String(reply[1]));
      default:
        throw new LedgerUnavailableError(`unexpected reply from the claim script: ${String(reply[0])}`);
    }
  }

  async renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    this.checkKey(key);
    const lease = String(checkLedgerLeaseMs(leaseMs));
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    const reply = this.checked(
      await this.call("renew", key, () => this.scripts[CMD_RENEW](this.redisKey(key), this.inflightIndexKey(key), String(fence), lease)),
      "renew",
      key,
    );
    this.expectOk(reply, key, fence);
    return { leaseExpiresAt: Number(reply[1]) };
  }

  async complete(key: string, fence: number, result: string): Promise<void> {
    this.checkKey(key);
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    const refusal = resultRefusal(key, result, this.capabilities.maxResultBytes, STORE_LIMITS);
    if (refusal !== undefined) {
      // Report a stale fence first, as a refused complete() on someone else's row would.
      await this.assertOwned(key, fence);
      throw refusal;
    }
    await this.finish(key, fence, "completed", result);
  }

  async fail(key: string, fence: number, error: StoredError): Promise<void> {
    this.checkKey(key);
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    const text = checkStoredError(error, STORE_LIMITS);
    await this.finish(key, fence, "failed", text);
  }

  async markUnknown(key: string, fence: number, reason: string): Promise<void> {
    this.checkKey(key);
    checkUnknownReason(reason, STORE_LIMITS);
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    await this.finish(key, fence, "unknown", reason);
  }

  async release(key: string, fence: number): Promise<void> {
    this.checkKey(key);
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    await this.finish(key, fence, "released", "");
  }

  async lookup(key: string): Promise<LedgerRow | undefined> {
    this.checkKey(key);
    let value: string | null;
    try {
      value = await this.call("lookup", key, () => this.client.get(this.redisKey(key)));
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      if (cause instanceof Error && cause.message.startsWith("WRONGTYPE")) {
        throw new LedgerCorruptError(key, "the key does not hold a string", { cause });
      }
      throw error;
    }
    // Redis removes finished rows when their retention passes, so absent means absent.
    if (value === null) return undefined;
    return decodeRow(key, value);
  }

  /**
   * In-flight rows whose lease has ended (at least `olderThanMs` ago, on the store's clock) and
   * that no claim has acted on yet, oldest lease first. Read from the per-slot in-flight indexes
   * (no keyspace scan: one read-only script per node reads all of that node's indexes) and
   * confirmed against each row; it changes nothing (LEDGER-17). An expired unkeyed_write row is
   * settled by the next claim of its key (LEDGER-7: it becomes `unknown`); an expired keyed_write
   * row is taken over by the next claim. Meant for an operator or a periodic checker.
   */
  async listExpiredInFlight(options: ListExpiredInFlightOptions = {}): Promise<InFlightRow[]> {
    checkExpiredInFlightOptions(options);
    const olderThanMs = nonNegativeInteger("olderThanMs", options.olderThanMs, 0);
    if (olderThanMs > MAX_OLDER_THAN_MS) {
      throw new InvalidLedgerInputError("olderThanMs", `must be at most ${MAX_OLDER_THAN_MS} (a year), got ${olderThanMs}`);
    }
    const limit = nonNegativeInteger("limit", options.limit, 100);
    if (limit < 1 || limit > MAX_LIST_LIMIT) {
      throw new InvalidLedgerInputError("limit", `must be between 1 and ${MAX_LIST_LIMIT}, got ${limit}`);
    }
    const deadline = this.deadline();
    const head = `${this.prefix}:{`;
    // The index is a hint: each candidate row is confirmed, and one that finished, was renewed or
    // was deleted since is skipped. When skipped entries leave the page short, read a wider window.
    for (let window = limit; ; window = Math.min(window * 4, MAX_LIST_LIMIT * 4)) {
      const candidates = await this.expiredCandidates(olderThanMs, window, deadline);
      const rows: InFlightRow[] = [];
      for (let i = 0; i < candidates.length && rows.length < limit; ) {
        const batch = candidates.slice(i, i + Math.max(limit - rows.length, 32));
        i += batch.length;
        const values = await Promise.all(
          batch.map((c) =>
            c.redisKey.startsWith(head) && c.redisKey.endsWith("}")
              ? // call() takes the ledger key (its message names it; on a Cluster it finds the row's node).
                this.call("listExpiredInFlight", c.redisKey.slice(head.length, -1), () => this.client.get(c.redisKey), deadline)
              : Promise.resolve(null),
          ),
        );
        batch.forEach((c, j) => {
          const value = values[j];
          if (value === null || value === undefined || rows.length >= limit) return;
          const row = decodeRow(c.redisKey.slice(head.length, -1), value);
          if (row.state === "in_flight" && row.leaseExpiresAt <= c.cutoff) rows.push(row);
        });
      }
      if (rows.length >= limit || candidates.length < window || window >= MAX_LIST_LIMIT * 4) {
        return rows.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt);
      }
    }
  }

  /**
   * Rows matching every filter given, oldest last transition first, ties by key, a page at a time
   * (LIST-1..LIST-5). Served from the per-state listing indexes of every slot (LIST-6): a sorted
   * set per state in each slot's hash tag, scored by the row's last transition, moved in the same
   * script as every state change. No keyspace scan: one read-only script per node reads that
   * node's indexes from the cursor on. Tool and conversation are filtered on the rows the state
   * index yields (there is no per-tool or per-conversation index: see LIST_ROWS_LUA), so a listing
   * by tool or conversation reads every row of the states asked for until its page is full.
   * Rows Redis expired (retention) are never listed; their index members are dropped on the way.
   * Rows written before this version have no index entry until their next transition.
   * Changes no row (LIST-1).
   */
  async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const { states, limit } = checkListQuery(query);
    const after = query.cursor === undefined ? undefined : decodeListCursor(query.cursor);
    const deadline = this.deadline();
    const head = `${this.prefix}:{`;
    const args = [
      String(query.olderThanMs ?? 0),
      // One more than the page: its presence says whether a cursor is due (LIST-5).
      String(limit + 1),
      after === undefined ? "" : String(after.since),
      after === undefined ? "" : after.key,
      query.toolName ?? "",
      query.conversationId ?? "",
      head,
      ...(() => {
        const list = states ?? ["in_flight", "completed", "failed", "unknown", "released"];
        return [String(list.length), ...list];
      })(),
    ];
    const found: Array<{ since: number; key: string; value: string }> = [];
    const gone: Array<[string, string]> = [];
    await this.ready("listRows", "-", deadline);
    const run = this.client as unknown as Record<string, (...a: unknown[]) => Promise<unknown[]>>;
    try {
      await Promise.all(
        [...this.slotGroups().values()].map(async (slots) => {
          const tags = slots.map((slot) => slotTags()[slot]!);
          const reply = await this.bounded(run[CMD_LIST_ROWS]!(this.indexKeyOfSlot(slots[0]!), ...args, ...tags), deadline, "listRows");
          if (reply[0] === "corrupt") throw new LedgerCorruptError(String(reply[1]), `listing index: ${String(reply[2])}`);
          const n = Number(reply[1]);
          for (let i = 0; i < n; i++) {
            const key = String(reply[2 + 2 * i]);
            const row = decodeRow(key, String(reply[3 + 2 * i]));
            found.push({ since: rowSince(row), key, value: String(reply[3 + 2 * i]) });
          }
          for (let i = 2 + 2 * n; i + 1 < reply.length; i += 2) gone.push([String(reply[i]), String(reply[i + 1])]);
        }),
      );
    } catch (error) {
      if (isDispatchOnceError(error)) throw error;
      throw this.unavailable("listRows", "-", error);
    }
    // Best effort, after the answer is known: a member whose row Redis expired is dropped only
    // while the row is still absent (a claim may have written it again meanwhile).
    for (const [index, member] of gone) {
      void (run[CMD_FORGET_LISTED]!(index, member) as Promise<unknown>).catch(() => {});
    }
    // The same order as each node's (LIST-2): transition time, then the key's UTF-8 bytes.
    found.sort((a, b) => a.since - b.since || Buffer.compare(Buffer.from(a.key, "utf8"), Buffer.from(b.key, "utf8")));
    const page = found.slice(0, limit);
    const rows = page.map((f) => decodeRow(f.key, f.value));
    const last = page[page.length - 1];
    return found.length > limit && last !== undefined ? { rows, cursor: encodeListCursor(last.since, last.key) } : { rows };
  }

  /** The `window` oldest expired index entries over every node, oldest first, each with its node's cutoff. */
  private async expiredCandidates(
    olderThanMs: number,
    window: number,
    deadline: number,
  ): Promise<Array<{ redisKey: string; lease: number; cutoff: number }>> {
    const candidates: Array<{ redisKey: string; lease: number; cutoff: number }> = [];
    await this.ready("listExpiredInFlight", "-", deadline);
    const list = this.client as unknown as Record<string, (...args: unknown[]) => Promise<string[]>>;
    try {
      await Promise.all(
        [...this.slotGroups().values()].map(async (slots) => {
          const [first, ...rest] = slots.map((slot) => this.indexKeyOfSlot(slot));
          const reply = await this.bounded(list[CMD_LIST]!(first, String(olderThanMs), String(window), ...rest), deadline, "listExpiredInFlight");
          if (reply[0] === "corrupt") throw new LedgerCorruptError(String(reply[1]), `in-flight index: ${String(reply[2])}`);
          const cutoff = Number(reply[0]);
          for (let i = 1; i + 1 < reply.length; i += 2) candidates.push({ redisKey: reply[i]!, lease: Number(reply[i + 1]), cutoff });
        }),
      );
    } catch (error) {
      if (isDispatchOnceError(error)) throw error;
      throw this.unavailable("listExpiredInFlight", "-", error);
    }
    candidates.sort((a, b) => a.lease - b.lease || (a.redisKey < b.redisKey ? -1 : 1));
    return candidates.slice(0, window);
  }

  /**
   * A no-op: Redis expires finished and released rows by their TTL (SET ... PX retentionMs),
   * and in-flight rows carry no TTL. Returns 0. (Expired in-flight rows: listExpiredInFlight().)
   */
  async sweep(): Promise<number> {
    // Refused like every other operation of a closed ledger, as the other adapters do.
    if (this.closed) throw new LedgerUnavailableError("ledger is closed (sweep of -)");
    return 0;
  }

  /**
   * Stops the releases of lost claims and closes the client only if the ledger created it (one you
   * passed in stays yours). Settles within commandTimeoutMs whatever the server does (LEDGER-12
   * bounds every operation, close included): a connected client says QUIT and waits for its reply,
   * which a paused server never sends; past the bound the connection is dropped and close rejects
   * with ledger_unavailable. The ledger is closed all the same, and holds no connection. Calling
   * close() again is a no-op: it resolves once the first call has settled.
   */
  close(): Promise<void> {
    if (this.closing !== undefined) return this.closing.catch(() => {});
    this.closed = true;
    for (const timer of this.cancels.values()) clearTimeout(timer);
    this.cancels.clear();
    this.closing = this.ownsClient ? this.quit(this.client as Redis) : Promise.resolve();
    return this.closing;
  }

  private async quit(client: Redis): Promise<void> {
    if (client.status !== "ready") {
      client.disconnect();
      return;
    }
    const quitting = client.quit();
    try {
      await withDeadline(quitting, { deadline: performance.now() + (this.timeoutMs > 0 ? this.timeoutMs : Number.POSITIVE_INFINITY), timeoutMs: this.timeoutMs, waitingFor: "the reply to QUIT", lateWrite: "close writes nothing" });
    } catch (cause) {
      client.disconnect();
      // disconnect() half-closes the socket and destroys it only after ioredis' disconnectTimeout
      // (2 s) if the server does not close its side, which a paused one never does.
      client.stream?.destroy();
      quitting.catch(() => {});
      // A QUIT that failed (the connection already gone) leaves nothing to close.
      if (!(cause instanceof DeadlineError)) return;
      throw new LedgerUnavailableError(`Redis ledger close: no reply to QUIT within commandTimeoutMs = ${this.timeoutMs} ms (the server did not answer); the connection was dropped: the ledger is closed and holds no connection`, { cause });
    }
  }

  /**
   * Read every primary's maxmemory-policy, appendonly and appendfsync (CONFIG GET) and its
   * attached replicas (INFO replication) and say what is unsafe. Never throws for a refused CONFIG.
   */
  async checkServer(): Promise<RedisServerReport> {
    const report: RedisServerReport = { nodes: [], warnings: [], unsafe: [], notDurable: [] };
    // Each command gets commandTimeoutMs of its own, as its name says: one deadline for the whole
    // check (PING, then INFO and three CONFIG GETs a node, one after another) made a slow but
    // answering server fail it.
    let nodes: Redis[];
    try {
      await this.ready("checkServer", "-", this.deadline());
      await this.bounded(this.client.ping(), this.deadline(), "checkServer");
      nodes = this.client.isCluster ? (this.client as Cluster).nodes("master") : [this.client as Redis];
    } catch (error) {
      if (isDispatchOnceError(error)) throw error;
      throw this.unavailable("checkServer", "-", error);
    }
    for (const node of nodes) {
      const name = node.options.path ?? `${node.options.host ?? "?"}:${node.options.port ?? "?"}`;
      // Only the server's refusal of the command is an answer ("not permitted"); a server still
      // loading its dataset after a restart, a dropped connection or a timeout says nothing about
      // its settings, and must not become a durability verdict that sticks: it is unavailable.
      const refusedOrUnavailable = (error: unknown): undefined => {
        if (isCommandRefusal(error)) return undefined;
        if (isDispatchOnceError(error)) throw error;
        throw this.unavailable("checkServer", "-", error);
      };
      const read = async (setting: string): Promise<string | undefined> => {
        try {
          const reply = (await this.bounded(node.config("GET", setting), this.deadline(), "checkServer")) as unknown as string[];
          return reply[1];
        } catch (error) {
          return refusedOrUnavailable(error);
        }
      };
      let connectedReplicas: number | undefined;
      try {
        const info = await this.bounded(node.info("replication"), this.deadline(), "checkServer");
        const match = /^connected_slaves:(\d+)/m.exec(info);
        connectedReplicas = match ? Number(match[1]) : undefined;
      } catch (error) {
        connectedReplicas = refusedOrUnavailable(error);
      }
      const entry = {
        node: name,
        maxmemoryPolicy: await read("maxmemory-policy"),
        appendonly: await read("appendonly"),
        appendfsync: await read("appendfsync"),
        connectedReplicas,
      };
      report.nodes.push(entry);
      if (entry.maxmemoryPolicy === undefined) {
        report.warnings.push(
          `${name}: CONFIG GET is not permitted; make sure maxmemory-policy is noeviction (an evicted in-flight row is a forgotten claim)`,
        );
      } else if (entry.maxmemoryPolicy !== "noeviction") {
        report.unsafe.push({ node: name, setting: "maxmemory-policy", value: entry.maxmemoryPolicy });
        report.warnings.push(
          `${name}: maxmemory-policy is ${entry.maxmemoryPolicy}; the ledger needs noeviction (an evicted in-flight row is a forgotten claim, an evicted completed row lets a replay run the tool again)`,
        );
      }
      const lost = "a crash can lose rows Redis has acknowledged";
      const violation = (setting: string, value: string | undefined, why: string) =>
        report.notDurable.push({ node: name, setting, value: value ?? "unknown (CONFIG GET refused)", why });
      if (entry.appendonly !== "yes") violation("appendonly", entry.appendonly, `without the AOF ${lost}`);
      else if (entry.appendfsync !== "always") violation("appendfsync", entry.appendfsync, `the AOF is fsynced only ${entry.appendfsync ?? "(unknown)"}: ${lost}`);
      if (entry.connectedReplicas === undefined) {
        report.notDurable.push({ node: name, setting: "connected_slaves", value: "unknown (INFO refused)", why: "replicas cannot be ruled out" });
      } else if (entry.connectedReplicas > 0) {
        report.notDurable.push({
          node: name,
          setting: "connected_slaves",
          value: String(entry.connectedReplicas),
          why: "replication is asynchronous and this ledger does not WAIT: a failover to a replica can lose acknowledged rows",
        });
      }
    }
    if (this.capabilities.durability === "durable") {
      for (const v of report.notDurable) report.warnings.push(`${v.node}: durability "durable" is declared but ${v.setting}=${v.value}: ${v.why}`);
    }
    return report;
  }

  /** Route a configuration warning to the configured sink. */
  warn(message: string): void {
    this.onWarning(message);
  }

  /**
   * Verify a "durable" declaration against the server (once; a refusal sticks, an unreachable
   * server is asked again next time). Called by createRedisLedger and before the first operation.
   */
  async verifyDurability(report?: RedisServerReport): Promise<void> {
    if (this.durabilityChecked === "ok") return;
    if (this.durabilityChecked === undefined) {
      const check = (async () => {
        report ??= await this.checkServer();
        const first = report.notDurable[0];
        if (first !== undefined) {
          throw new UnsafeStoreConfigError(
            first.node,
            first.setting,
            first.value,
            `durability "durable" is declared but ${first.why}. A durable Redis ledger needs appendonly yes, appendfsync always ` +
              `and no replica on every primary; declare "volatile" (the dispatcher then refuses unkeyed_write tools, LEDGER-14), ` +
              "or set verifyDurability: false only if you have made every acknowledged write survive yourself",
          );
        }
      })();
      this.durabilityChecked = check;
      check.then(
        () => {
          this.durabilityChecked = "ok";
        },
        (error: unknown) => {
          // Only a refusal is final; ask again after the server was unreachable.
          if (!isDispatchOnceError(error, "unsafe_store_config")) this.durabilityChecked = undefined;
        },
      );
    }
    await this.durabilityChecked;
  }

  private async finish(key: string, fence: number, state: string, body: string): Promise<void> {
    const op = state === "released" ? "release" : state;
    const redisKey = this.redisKey(key);
    const reply = this.checked(
      await this.call(
        op,
        key,
        (load) =>
          this.client[load ? "eval" : "evalsha"](
            load ? FINISH_LUA : FINISH_SHA,
            "3",
            redisKey,
            `${this.slotHead(redisKey)}inflight`,
            auditKeyOf(redisKey),
            String(fence),
            state,
            this.retentionArg,
            body,
          ) as Promise<ScriptReply>,
      ),
      op,
      key,
    );
    this.expectOk(reply, key, fence);
  }

  /**
   * Release the row a lost claim may have written (CANCEL_LUA), in the background: at once (on the
   * same connection it queues behind the claim, so it runs after it even on a paused server), then
   * again after each failure, for the claim's lease plus a minute. Harmless when the claim never ran.
   */
  private cancelLostClaim(key: string, token: string, leaseMs: number): void {
    if (this.closed || this.cancels.size >= MAX_PENDING_CANCELS) return;
    const until = Date.now() + leaseMs + CANCEL_GRACE_MS;
    let backoff = 100;
    const attempt = async (): Promise<void> => {
      this.cancels.set(token, undefined);
      try {
        // No deadline: a reply or a closed connection settles it (maxRetriesPerRequest 0).
        const reply = this.checked(
          await this.call(
            "cancel",
            key,
            () => this.scripts[CMD_CANCEL](this.redisKey(key), this.inflightIndexKey(key), this.auditKey(key), token, this.retentionArg),
            Number.POSITIVE_INFINITY,
          ),
          "cancel",
          key,
        );
        this.cancels.delete(token);
        if (reply[0] === "released") {
          this.warn(`a claim of ${key} whose reply was lost had been written (fence ${String(reply[1])}); it was released, the tool did not run under it`);
        }
      } catch {
        if (this.closed || Date.now() + backoff > until) {
          this.cancels.delete(token);
          return;
        }
        const timer = setTimeout(() => void attempt(), backoff);
        timer.unref();
        this.cancels.set(token, timer);
        backoff = Math.min(backoff * 2, 5000);
      }
    };
    void attempt();
  }

  /** Read-only ownership check, used only to classify an error path. */
  private async assertOwned(key: string, fence: number): Promise<void> {
    const row = await this.lookup(key);
    if (row === undefined || row.state !== "in_flight" || row.fence !== fence) throw new StaleClaimError(key, fence);
  }

  private expectOk(reply: ScriptReply, key: string, fence: number): void {
    if (reply[0] === "ok") return;
    if (reply[0] === "stale") throw new StaleClaimError(key, fence);
    if (reply[0] === "corrupt") throw new LedgerCorruptError(key, String(reply[1]));
    throw new LedgerUnavailableError(`unexpected reply from a ledger script: ${String(reply[0])}`);
  }

  /** The time by which an operation must settle (Infinity when commandTimeoutMs is 0). */
  private deadline(): number {
    return this.timeoutMs > 0 ? Date.now() + this.timeoutMs : Number.POSITIVE_INFINITY;
  }

  /**
   * Run one store command within the operation's deadline: verify a durable declaration first
   * (once), wait for a connection (sending nothing while there is none), then send. The common
   * case (verified, connected) is one wrapper promise around the client's: this is the hot path.
   */
  private call<T>(op: string, key: string, run: (load: boolean) => Promise<T>, deadline?: number): Promise<T> {
    if (this.closed) return Promise.reject(new LedgerUnavailableError(`ledger is closed (${op} of ${key})`));
    if (this.durabilityChecked !== "ok" || this.client.status !== "ready" || (this.client.isCluster && this.nodeNotReady(key) !== undefined)) {
      return this.callWhenReady(op, key, run, deadline ?? this.deadline());
    }
    return this.send(op, key, run, deadline);
  }

  /**
   * Send now, and settle with the reply, or ledger_unavailable on an error or at the deadline
   * (none given: commandTimeoutMs from now, as one fixed duration, which Node's timers handle
   * more cheaply than a different remainder each time).
   */
  private send<T>(op: string, key: string, run: (load: boolean) => Promise<T>, deadline?: number): Promise<T> {
    let sent: Promise<T>;
    try {
      sent = run(false);
    } catch (error) {
      return Promise.reject(this.unavailable(op, key, error));
    }
    return new Promise<T>((resolve, reject) => {
      const expire = (): void => reject(this.unavailable(op, key, new Error(`no reply within ${this.timeoutMs} ms`)));
      let timer: ReturnType<typeof setTimeout> | undefined;
      let bound: CommandDeadline | undefined;
      if (deadline === undefined) {
        // The usual command: commandTimeoutMs from now, an entry in the ledger's one list.
        if (this.timeoutMs > 0) this.commandDeadlines.add((bound = new CommandDeadline(expire)), this.timeoutMs);
      } else if (deadline !== Number.POSITIVE_INFINITY) {
        // An operation's own deadline (a remainder that differs each time): a timer of its own.
        timer = setTimeout(() => setImmediate(expire), Math.max(0, deadline - Date.now()));
      }
      sent.then(
        (reply) => {
          this.clearBound(bound, timer);
          resolve(reply);
        },
        (error: unknown) => {
          if (isNoScript(error)) {
            // EVALSHA of a script the server does not hold (a new or restarted server, SCRIPT
            // FLUSH): nothing ran; send its text once (EVAL), which loads it, within the same deadline.
            let again: Promise<T>;
            try {
              again = run(true);
            } catch (thrown) {
              again = Promise.reject(thrown);
            }
            again.then(
              (reply) => {
                this.clearBound(bound, timer);
                resolve(reply);
              },
              (failure: unknown) => {
                this.clearBound(bound, timer);
                reject(this.unavailable(op, key, failure));
              },
            );
            return;
          }
          this.clearBound(bound, timer);
          // Whatever went wrong (timed out after sending, connection lost, OOM, NOPERM), the caller
          // must assume nothing was claimed; a claim that ran anyway is released by its token.
          reject(this.unavailable(op, key, error));
        },
      );
    });
  }

  /** A command settled: its entry leaves the ledger's deadline list, or its own timer is cleared. */
  private clearBound(bound: CommandDeadline | undefined, timer: ReturnType<typeof setTimeout> | undefined): void {
    if (bound !== undefined) this.commandDeadlines.remove(bound);
    else clearTimeout(timer);
  }

  /** call() when a durable declaration is unverified or the client is not connected yet. */
  private async callWhenReady<T>(op: string, key: string, run: (load: boolean) => Promise<T>, deadline: number): Promise<T> {
    if (this.durabilityChecked !== "ok") await this.verifyDurability();
    await this.ready(op, key, deadline);
    if (this.client.isCluster) {
      const node = this.nodeNotReady(key);
      if (node !== undefined) await this.connected(node, op, key, deadline);
    }
    return this.send(op, key, run, deadline);
  }

  /**
   * On a Cluster: the connection to the primary that serves `key`'s slot, when it is not ready.
   * ioredis opens a node's connection on the first command routed to it, and a Cluster without an
   * offline queue refuses that command ("Connection is closed") while the connection opens: on a
   * new client most first claims failed so, though nothing had been sent. Undefined when the
   * node is ready, or the slot table does not name it yet (ioredis then routes and refreshes).
   */
  private nodeNotReady(key: string): Redis | undefined {
    const cluster = this.client as Cluster;
    const nodeKey = cluster.slots[keySlot(this.redisKey(key))]?.[0];
    if (nodeKey === undefined) return undefined;
    for (const node of cluster.nodes("master")) {
      if (`${node.options.host}:${node.options.port}` === nodeKey) return node.status === "ready" ? undefined : node;
    }
    return undefined;
  }

  /** Wait, within the deadline, until a Cluster node's connection is ready (nothing is sent before). */
  private async connected(node: Redis, op: string, key: string, deadline: number): Promise<void> {
    if (node.status === "ready") return;
    if (node.status === "wait") node.connect().catch(() => {});
    else if (node.status !== "connecting" && node.status !== "connect" && node.status !== "reconnecting") {
      throw new LedgerUnavailableError(`redis ${op} of ${key}: node ${node.options.host}:${node.options.port} not connected (${node.status}); nothing was sent`, {
        cause: new NotSentError(node.status),
      });
    }
    try {
      // A node's connection may close and retry while it opens: only its end is final.
      await this.bounded(untilReady(node, ["end"]), deadline, op, true);
    } catch (error) {
      throw new LedgerUnavailableError(`redis ${op} of ${key}: node ${node.options.host}:${node.options.port} not connected; nothing was sent: ${(error as Error).message}`, {
        cause: error instanceof NotSentError ? error : new NotSentError(String(error)),
      });
    }
  }

  /** A ledger script's reply must be a table whose first element names the outcome. */
  private checked(reply: unknown, op: string, key: string): ScriptReply {
    if (!Array.isArray(reply) || typeof reply[0] !== "string") {
      throw new LedgerUnavailableError(`redis ${op} of ${key}: malformed script reply ${JSON.stringify(reply)}`);
    }
    return reply as ScriptReply;
  }

  /**
   * "redis <op> of <key> at <host:port>" for an error raised before anything was sent: an operator
   * reading it at startup must see which server did not answer. "-" (no key) is left out.
   */
  private where(op: string, key: string): string {
    const client = this.client;
    const at = client.isCluster ? "the cluster" : `${(client as Redis).options.host}:${(client as Redis).options.port}`;
    return `redis ${op}${key === "-" ? "" : ` of ${key}`} at ${at}`;
  }

  /**
   * Wait, within the deadline, until the client is connected. Nothing is sent while it is not
   * (the client has no offline queue), so a failure here means the command did not run. A
   * client that lost its connection fails at once rather than waiting for its reconnect.
   */
  private async ready(op: string, key: string, deadline: number): Promise<void> {
    const client = this.client;
    if (client.status === "ready") return;
    if (client.status === "wait") client.connect().catch(() => {});
    else if (client.status !== "connecting" && client.status !== "connect") {
      throw new LedgerUnavailableError(`${this.where(op, key)}: not connected (${client.status}); nothing was sent`, {
        cause: new NotSentError(client.status),
      });
    }
    this.readyWaiter ??= untilReady(client, ["close", "end"]).finally(() => (this.readyWaiter = undefined));
    try {
      await this.bounded(this.readyWaiter, deadline, op, true);
    } catch (error) {
      throw new LedgerUnavailableError(`${this.where(op, key)}: not connected; nothing was sent: ${(error as Error).message}`, {
        cause: error instanceof NotSentError ? error : new NotSentError(String(error)),
      });
    }
  }

  /**
   * `promise`, or a rejection when the deadline passes first. As with CommandDeadline, the
   * deadline is judged after that loop turn's I/O: after a stall (a starved process, a GC pause)
   * the timer is due before a reply that is already waiting is read, and the reply wins.
   */
  private bounded<T>(promise: Promise<T>, deadline: number, op: string, waitingForConnection = false): Promise<T> {
    if (deadline === Number.POSITIVE_INFINITY) return promise;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => setImmediate(() => reject(new Error(`${waitingForConnection ? "no connection" : "no reply"} within ${this.timeoutMs} ms (${op})`))),
        Math.max(0, deadline - Date.now()),
      );
      promise.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  /** Slots grouped by the node group that serves them: one pipeline each. */
  private slotGroups(): Map<string, number[]> {
    const groups = new Map<string, number[]>();
    if (!this.client.isCluster) {
      groups.set("", Array.from({ length: SLOT_COUNT }, (_, slot) => slot));
      return groups;
    }
    const slots = (this.client as Cluster).slots;
    for (let slot = 0; slot < SLOT_COUNT; slot++) {
      const nodes = slots[slot];
      if (nodes === undefined || nodes.length === 0) throw new Error(`slot ${slot} is not served by any node`);
      const id = nodes.join(";");
      let group = groups.get(id);
      if (group === undefined) groups.set(id, (group = []));
      group.push(slot);
    }
    return groups;
  }

  private unavailable(op: string, key: string, error: unknown): LedgerUnavailableError {
    const message = error instanceof Error ? error.message : String(error);
    return new LedgerUnavailableError(`redis ${op} of ${key} failed: ${message}`, { cause: error });
  }

  private checkKey(key: unknown): string {
    // As claim checks it (LEDGER-12): lookup("") went to the server and answered undefined.
    return checkLedgerKey(key, STORE_LIMITS);
  }

}

/**
 * A command's bound in the ledger's deadline list. A timer due during a stall (a blocked loop, a
 * starved process) runs before that turn's I/O is read, when the reply may be waiting already:
 * the command is judged after the poll phase, and a reply read in it settles the command first.
 */
class CommandDeadline extends RunDeadline {
  constructor(private readonly fail: () => void) {
    super();
  }

  expire(): void {
    setImmediate(this.fail);
  }
}

/** An EVALSHA refused because the server does not hold the script: nothing ran. */
function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith("NOSCRIPT");
}

/** A retired claim id's member in its slot's set: the claim id first (it has no ':'), then the key. */
function retiredMember(key: string, claimId: string): string {
  return `${claimId}:${key}`;
}

/**
 * Whether a failed command may have run on the server: anything but a refusal before sending
 * (no connection) or an error reply (a script that raised wrote nothing: each raises only at or
 * before its single row write).
 */
function mayHaveRun(error: unknown): boolean {
  // Refusals of the ledger itself (unsafe_store_config, ...) come before anything is sent.
  if (isDispatchOnceError(error) && !isDispatchOnceError(error, "ledger_unavailable")) return false;
  let cause: unknown = error;
  while (cause instanceof Error) {
    if (cause instanceof NotSentError) return false;
    if (cause.name === "ReplyError") return false;
    if (/enableOfflineQueue options is false|ledger is closed/.test(cause.message)) return false;
    cause = (cause as { cause?: unknown }).cause;
  }
  return true;
}

/**
 * Create a ledger and check the server first: an evicting maxmemory-policy is refused (or warned
 * about), and a "durable" declaration the server does not back is refused.
 */
export async function createRedisLedger(options: CreateRedisLedgerOptions = {}): Promise<RedisLedger> {
  const ledger = new RedisLedger(options);
  try {
    if (options.checkServer !== false) {
      const report = await ledger.checkServer();
      const firstUnsafe = report.unsafe[0];
      if (firstUnsafe !== undefined && (options.onUnsafeServer ?? "refuse") === "refuse") {
        throw new UnsafeStoreConfigError(
          firstUnsafe.node,
          firstUnsafe.setting,
          firstUnsafe.value,
          "an evicting policy can drop in-flight rows (forgotten claims) and completed rows (re-runs); set noeviction",
        );
      }
      // A durable declaration the server does not back is refused here, before any warning.
      await ledger.verifyDurability(report);
      for (const warning of report.warnings) ledger.warn(warning);
    } else {
      await ledger.verifyDurability();
    }
    return ledger;
  } catch (error) {
    await ledger.close();
    throw error;
  }
}

/** Where each state keeps its own text in the body, after the request. */
const BODY_FIELD = { in_flight: "owner", completed: "result", failed: "error", unknown: "reason" } as const;

/**
 * Decode a stored value into a LedgerRow: a JSON header line, then the body (the request, then
 * the state's own text). The header and body are mapped onto core's toolkit, which refuses
 * anything this version did not write (LEDGER-11).
 */
export function decodeRow(key: string, value: string): LedgerRow {
  const corrupt = (why: string, cause?: unknown): never => {
    throw new LedgerCorruptError(key, why, cause === undefined ? undefined : { cause });
  };
  const newline = value.indexOf("\n");
  if (newline < 0) corrupt("no row header");
  let parsed: unknown;
  try {
    parsed = JSON.parse(value.slice(0, newline));
  } catch (cause) {
    corrupt("row header is not JSON", cause);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) corrupt("row header is not an object");
  const header = parsed as Record<string, unknown>;
  // The body after the first newline starts with the stored request (LEDGER-21). A row without
  // requestBytes was written before LEDGER-21: no request to re-run with, so corrupt, not absent.
  const body = value.slice(newline + 1);
  const requestBytes = header.requestBytes;
  if (typeof requestBytes !== "number" || !Number.isSafeInteger(requestBytes) || requestBytes < 0) corrupt("field requestBytes is missing or not an integer");
  const split = utf8Prefix(body, requestBytes as number);
  if (split === undefined) corrupt("the body does not start with requestBytes bytes of UTF-8");
  const rest = body.slice(split);
  const fields: StoredLedgerFields = { ...header, key: undefined, request: body.slice(0, split) } as StoredLedgerFields;
  const state = header.state;
  if (state === "released") {
    if (rest !== "") corrupt("a released row has text after its request");
  } else if (typeof state === "string" && Object.hasOwn(BODY_FIELD, state)) {
    fields[BODY_FIELD[state as keyof typeof BODY_FIELD]] = rest;
    // The claim token (never returned) releases a lost claim; a row without one is not this version's.
    if (state === "in_flight" && typeof header.claim !== "string") corrupt("field claim is missing");
  }
  return decodeLedgerRow(key, fields);
}

/**
 * The index in `text` (UTF-16 code units) after its first `bytes` UTF-8 bytes, or undefined when
 * `text` is shorter or the count ends inside a character. Walks only the prefix, so reading the
 * request in front of a 1 MiB result costs the request's length, not the result's.
 */
function utf8Prefix(text: string, bytes: number): number | undefined {
  let i = 0;
  let n = 0;
  while (n < bytes) {
    if (i >= text.length) return undefined;
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i += 1;
    } else n += 3; // the rest of the BMP; a lone surrogate (never stored) reads back as U+FFFD, also 3 bytes
    i += 1;
  }
  return n === bytes ? i : undefined;
}
/**
 * Whether a command failed because the server refuses it to this client (an ACL without the
 * command, a managed service that renamed or disabled CONFIG): a permanent answer. Anything else
 * (LOADING after a restart, BUSY, a dropped connection, a timeout) is the server being unavailable.
 * @internal exported for tests
 */
/**
 * A key that starts with '}' gives its row `prefix:{}...}` an empty hash tag: Redis Cluster then
 * hashes the whole name, and the row's audit list (`...:audit`) lands in another slot, so every
 * script that touches both would fail with CROSSSLOT. Refused before anything is sent; keys from
 * deriveKey are hex and never start with it.
 */
function checkHashTaggable(key: string): void {
  if (key.startsWith("}")) throw new InvalidLedgerInputError("key", "must not start with '}' (its row and audit list would not share a Redis Cluster slot)");
}

export function isCommandRefusal(error: unknown): boolean {
  const message = error instanceof Error ? error.message : typeof error === "string" ? error : "";
  return /^(NOPERM|ERR unknown command|ERR unknown subcommand|ERR command not allowed|ERR .*not allowed)/i.test(message);
}
