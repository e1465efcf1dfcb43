import {
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  LedgerCorruptError,
  LedgerUnavailableError,
  ROW_FORMAT_VERSION,
  ResultNotStorableError,
  StaleClaimError,
  assertStorableResult,
  type ClaimRequest,
  type ClaimResult,
  type InFlightRow,
  type Ledger,
  type LedgerCapabilities,
  type LedgerRow,
  type StoredError,
  type TerminalRow,
} from "@dispatch-once/core";
import { Redis, type Cluster } from "ioredis";
import { InvalidLedgerInputError, UnsafeStoreConfigError } from "./errors.js";
import { CLAIM_LUA, FINISH_LUA, RENEW_LUA } from "./scripts.js";

export type RedisClient = Redis | Cluster;

export interface RedisLedgerOptions {
  /** Bring your own client (Redis or Cluster). The ledger never closes a client it did not create. */
  client?: RedisClient;
  /** Used when no client is given; default REDIS_URL or redis://127.0.0.1:6379. */
  url?: string;
  /** Key prefix; rows live at `${prefix}:{${key}}`. Must not contain `{` or `}`. Default "dispatch-once". */
  prefix?: string;
  /** How long finished and released rows are kept (a PX TTL). Default DEFAULT_RETENTION_MS (24 h). */
  retentionMs?: number;
  /** Largest result (UTF-8 bytes of its JSON text) complete() accepts. Default 1 MiB. */
  maxResultBytes?: number;
  /**
   * "durable" is an ASSERTION by the operator that every node runs with `appendonly yes` and
   * `appendfsync always` (and that failover cannot lose acknowledged writes). Default "volatile":
   * a Redis without fsync'd AOF can lose acknowledged rows, so unkeyed_write tools are refused
   * by the dispatcher (LEDGER-14).
   */
  durability?: "durable" | "volatile";
  /** Per-command timeout for a client the ledger creates from `url`. Default 5000 ms. */
  commandTimeoutMs?: number;
  /** Where configuration warnings go. Default console.warn. */
  onWarning?: (message: string) => void;
}

export interface CreateRedisLedgerOptions extends RedisLedgerOptions {
  /**
   * What createRedisLedger does when a node's maxmemory-policy can evict keys: "refuse"
   * (default: throw UnsafeStoreConfigError) or "warn". Policies are read with CONFIG GET;
   * where CONFIG is not permitted (managed services) a warning says it could not be verified.
   */
  onUnsafeServer?: "refuse" | "warn";
  /** Skip the startup check entirely. Default true (check). */
  checkServer?: boolean;
}

/** What checkServer() found on each primary node. `undefined` where CONFIG GET was refused. */
export interface RedisServerReport {
  nodes: Array<{
    node: string;
    maxmemoryPolicy: string | undefined;
    appendonly: string | undefined;
    appendfsync: string | undefined;
  }>;
  /** Human-readable problems; empty when the configuration is safe for the declared durability. */
  warnings: string[];
  /** Settings that break the guarantee regardless of durability (evicting policies). */
  unsafe: Array<{ node: string; setting: string; value: string }>;
}

// V2: rows carry the stored request (LEDGER-21). A new name, so a client shared with an older
// copy of this package never runs the other copy's script under the same command.
const CMD_CLAIM = "dispatchOnceLedgerClaimV2";
const CMD_RENEW = "dispatchOnceLedgerRenewV2";
const CMD_FINISH = "dispatchOnceLedgerFinishV2";

type ScriptReply = [string, ...unknown[]];

interface ScriptClient {
  [CMD_CLAIM](key: string, ...args: string[]): Promise<ScriptReply>;
  [CMD_RENEW](key: string, ...args: string[]): Promise<ScriptReply>;
  [CMD_FINISH](key: string, ...args: string[]): Promise<ScriptReply>;
}

const STATES = new Set(["in_flight", "completed", "failed", "unknown", "released"]);
const EFFECTS = new Set(["keyed_write", "unkeyed_write"]);

function nonNegativeInteger(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidLedgerInputError(field, `must be a non-negative safe integer, got ${String(value)}`);
  }
  return value;
}

/**
 * A ledger on Redis or Redis Cluster. Every transition is one Lua script on one key
 * (EVALSHA via ioredis defineCommand), leases are measured on the server's clock, and
 * finished rows are removed by Redis itself (written with a PX TTL), so sweep() has nothing to do.
 */
export class RedisLedger implements Ledger {
  readonly capabilities: LedgerCapabilities;
  readonly prefix: string;
  readonly retentionMs: number;
  private readonly client: RedisClient;
  private readonly scripts: ScriptClient;
  private readonly ownsClient: boolean;
  private readonly retentionArg: string;
  private readonly onWarning: (message: string) => void;
  private closed = false;

  constructor(options: RedisLedgerOptions = {}) {
    const prefix = options.prefix ?? "dispatch-once";
    if (typeof prefix !== "string" || prefix.length === 0 || /[{}]/.test(prefix)) {
      // A brace in the prefix would become the hash tag and pin every row to one slot.
      throw new InvalidLedgerInputError("prefix", "must be a non-empty string without '{' or '}'");
    }
    this.prefix = prefix;
    this.retentionMs = nonNegativeInteger("retentionMs", options.retentionMs, DEFAULT_RETENTION_MS);
    this.retentionArg = String(this.retentionMs);
    const maxResultBytes = nonNegativeInteger("maxResultBytes", options.maxResultBytes, DEFAULT_MAX_RESULT_BYTES);
    // Redis' own ceiling for one bulk string (proto-max-bulk-len default) is 512 MB.
    if (maxResultBytes > 512 * 1024 * 1024) {
      throw new InvalidLedgerInputError("maxResultBytes", "must not exceed 512 MiB (Redis' bulk string limit)");
    }
    const durability = options.durability ?? "volatile";
    if (durability !== "durable" && durability !== "volatile") {
      throw new InvalidLedgerInputError("durability", `must be "durable" or "volatile", got ${String(durability)}`);
    }
    this.onWarning = options.onWarning ?? ((message) => console.warn(`[ledger-redis] ${message}`));
    this.capabilities = {
      durability,
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes,
    };

    if (options.client !== undefined) {
      this.client = options.client;
      this.ownsClient = false;
    } else {
      const url = options.url ?? process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
      const commandTimeout = nonNegativeInteger("commandTimeoutMs", options.commandTimeoutMs, 5000);
      const client = new Redis(url, {
        // Fail fast instead of queueing for ever: the dispatcher treats ledger_unavailable
        // as "nothing claimed, nothing run".
        maxRetriesPerRequest: 1,
        // Reconnect quickly (ioredis' default backs off to 2 s, and every queued command waits for it).
        retryStrategy: (times: number) => Math.min(times * 50, 250),
        // A command whose reply was lost is NOT resent after a reconnect: a resent claim
        // would meet its own row and a resent complete would be refused as stale.
        autoResendUnfulfilledCommands: false,
        commandTimeout: commandTimeout > 0 ? commandTimeout : undefined,
        connectTimeout: 5000,
      });
      // Connection errors surface on the commands as LedgerUnavailableError; without a
      // listener ioredis would print every reconnect failure.
      client.on("error", () => {});
      this.client = client;
      this.ownsClient = true;
    }
    // Idempotent per client: several ledgers may share one client.
    this.client.defineCommand(CMD_CLAIM, { lua: CLAIM_LUA, numberOfKeys: 1 });
    this.client.defineCommand(CMD_RENEW, { lua: RENEW_LUA, numberOfKeys: 1 });
    this.client.defineCommand(CMD_FINISH, { lua: FINISH_LUA, numberOfKeys: 1 });
    this.scripts = this.client as unknown as ScriptClient;
  }

  /** The Redis key of a ledger key. The `{...}` hash tag keeps a row in one slot by itself. */
  redisKey(key: string): string {
    return `${this.prefix}:{${key}}`;
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const key = this.checkKey(request?.key);
    if (typeof request.toolName !== "string") throw new InvalidLedgerInputError("toolName", "must be a string");
    if (!EFFECTS.has(request.effect)) {
      throw new InvalidLedgerInputError("effect", `must be keyed_write or unkeyed_write, got ${String(request.effect)}`);
    }
    if (typeof request.owner !== "string") throw new InvalidLedgerInputError("owner", "must be a string");
    // Stored as UTF-8 and returned byte for byte (LEDGER-21): a lone surrogate has no UTF-8 form.
    if (typeof request.request !== "string" || !request.request.isWellFormed()) {
      throw new InvalidLedgerInputError("request", "must be a string without lone surrogates");
    }
    const leaseMs = this.checkLease(request.leaseMs);
    const reply = await this.call("claim", key, () =>
      this.scripts[CMD_CLAIM](
        this.redisKey(key),
        // JSON-escaped here, spliced into the row header by the script.
        JSON.stringify(request.toolName),
        request.effect,
        request.owner,
        leaseMs,
        this.retentionArg,
        request.request,
      ),
    );
    switch (reply[0]) {
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
      case "corrupt":
        throw new LedgerCorruptError(key, String(reply[1]));
      default:
        throw new LedgerUnavailableError(`unexpected reply from the claim script: ${String(reply[0])}`);
    }
  }

  async renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    this.checkKey(key);
    const lease = this.checkLease(leaseMs);
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    const reply = await this.call("renew", key, () =>
      this.scripts[CMD_RENEW](this.redisKey(key), String(fence), lease),
    );
    this.expectOk(reply, key, fence);
    return { leaseExpiresAt: Number(reply[1]) };
  }

  async complete(key: string, fence: number, result: string): Promise<void> {
    this.checkKey(key);
    if (typeof result !== "string") throw new ResultNotStorableError(key, "result must be JSON text (a string)");
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    try {
      assertStorableResult(key, result, this.capabilities.maxResultBytes);
      // A lone surrogate has no UTF-8 form: it could not come back byte-for-byte.
      if (!result.isWellFormed()) throw new ResultNotStorableError(key, "result contains a lone surrogate");
    } catch (error) {
      // Report a stale fence first, as a refused complete() on someone else's row would.
      await this.assertOwned(key, fence);
      throw error;
    }
    await this.finish(key, fence, "completed", result);
  }

  async fail(key: string, fence: number, error: StoredError): Promise<void> {
    this.checkKey(key);
    if (!Number.isSafeInteger(fence)) throw new StaleClaimError(key, fence);
    if (error === null || typeof error !== "object" || typeof error.name !== "string" || typeof error.message !== "string") {
      throw new InvalidLedgerInputError("error", "must be a StoredError { name, message, code?, details? }");
    }
    let text: string;
    try {
      text = JSON.stringify(error);
    } catch (cause) {
      throw new InvalidLedgerInputError("error", `is not JSON-serialisable: ${(cause as Error).message}`);
    }
    await this.finish(key, fence, "failed", text);
  }

  async markUnknown(key: string, fence: number, reason: string): Promise<void> {
    this.checkKey(key);
    if (typeof reason !== "string") throw new InvalidLedgerInputError("reason", "must be a string");
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
      value = await this.client.get(this.redisKey(key));
    } catch (error) {
      if (error instanceof Error && error.message.startsWith("WRONGTYPE")) {
        throw new LedgerCorruptError(key, "the key does not hold a string", { cause: error });
      }
      throw this.unavailable("lookup", key, error);
    }
    // Redis removes finished rows when their retention passes, so absent means absent.
    if (value === null) return undefined;
    return decodeRow(key, value);
  }

  /**
   * A no-op: Redis expires finished and released rows by their TTL (SET ... PX retentionMs),
   * and in-flight rows carry no TTL. Returns 0.
   */
  async sweep(): Promise<number> {
    return 0;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (!this.ownsClient) return;
    const client = this.client as Redis;
    if (client.status === "ready") {
      await client.quit().catch(() => client.disconnect());
    } else {
      client.disconnect();
    }
  }

  /**
   * Read the nodes' maxmemory-policy, appendonly and appendfsync (CONFIG GET, on every
   * primary of a cluster) and say what is unsafe. Never throws for a refused CONFIG.
   */
  async checkServer(): Promise<RedisServerReport> {
    const report: RedisServerReport = { nodes: [], warnings: [], unsafe: [] };
    let nodes: Redis[];
    try {
      await this.client.ping();
      nodes = this.client.isCluster ? (this.client as Cluster).nodes("master") : [this.client as Redis];
    } catch (error) {
      throw this.unavailable("checkServer", "-", error);
    }
    for (const node of nodes) {
      const name = node.options.path ?? `${node.options.host ?? "?"}:${node.options.port ?? "?"}`;
      const read = async (setting: string): Promise<string | undefined> => {
        try {
          const reply = (await node.config("GET", setting)) as unknown as string[];
          return reply[1];
        } catch {
          return undefined;
        }
      };
      const entry = {
        node: name,
        maxmemoryPolicy: await read("maxmemory-policy"),
        appendonly: await read("appendonly"),
        appendfsync: await read("appendfsync"),
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
      if (this.capabilities.durability === "durable" && entry.appendonly !== undefined) {
        if (entry.appendonly !== "yes" || entry.appendfsync !== "always") {
          report.warnings.push(
            `${name}: durability "durable" was asserted but appendonly=${entry.appendonly} appendfsync=${entry.appendfsync ?? "?"}; acknowledged rows can be lost in a crash`,
          );
        }
      }
    }
    return report;
  }

  /** Route a configuration warning to the configured sink. */
  warn(message: string): void {
    this.onWarning(message);
  }

  private async finish(key: string, fence: number, state: string, body: string): Promise<void> {
    const reply = await this.call(state === "released" ? "release" : state, key, () =>
      this.scripts[CMD_FINISH](this.redisKey(key), String(fence), state, this.retentionArg, body),
    );
    this.expectOk(reply, key, fence);
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

  private async call(op: string, key: string, run: () => Promise<ScriptReply>): Promise<ScriptReply> {
    if (this.closed) throw new LedgerUnavailableError(`ledger is closed (${op} of ${key})`);
    try {
      const reply = await run();
      if (!Array.isArray(reply) || typeof reply[0] !== "string") {
        throw new Error(`malformed script reply ${JSON.stringify(reply)}`);
      }
      return reply;
    } catch (error) {
      // Whatever went wrong (refused, timed out after sending, OOM, NOPERM), the caller
      // must assume nothing was claimed; an uncertain claim is recovered by its lease.
      throw this.unavailable(op, key, error);
    }
  }

  private unavailable(op: string, key: string, error: unknown): LedgerUnavailableError {
    const message = error instanceof Error ? error.message : String(error);
    return new LedgerUnavailableError(`redis ${op} of ${key} failed: ${message}`, { cause: error });
  }

  private checkKey(key: unknown): string {
    if (typeof key !== "string") throw new InvalidLedgerInputError("key", "must be a string");
    return key;
  }

  private checkLease(leaseMs: unknown): string {
    if (typeof leaseMs !== "number" || !Number.isFinite(leaseMs) || leaseMs < 0 || leaseMs > Number.MAX_SAFE_INTEGER) {
      throw new InvalidLedgerInputError("leaseMs", `must be a non-negative number of milliseconds, got ${String(leaseMs)}`);
    }
    return String(Math.ceil(leaseMs));
  }
}

/** Create a ledger and check the server's configuration first (maxmemory-policy, persistence). */
export async function createRedisLedger(options: CreateRedisLedgerOptions = {}): Promise<RedisLedger> {
  const ledger = new RedisLedger(options);
  if (options.checkServer === false) return ledger;
  try {
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
    for (const warning of report.warnings) ledger.warn(warning);
    return ledger;
  } catch (error) {
    await ledger.close();
    throw error;
  }
}

/** Decode a stored value into a LedgerRow, refusing anything this version did not write (LEDGER-11). */
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
  // The body after the first newline: the result's bytes, exactly as stored.
  const body = value.slice(newline + 1);
  const int = (name: string): number => {
    const n = header[name];
    return typeof n === "number" && Number.isSafeInteger(n) && n >= 0 ? n : corrupt(`field ${name} is missing or not an integer`);
  };
  if (header.v !== ROW_FORMAT_VERSION) corrupt(`unknown format version ${JSON.stringify(header.v)}`);
  const state = header.state;
  if (typeof state !== "string" || !STATES.has(state)) corrupt(`unknown state ${JSON.stringify(state)}`);
  const effect = header.effect;
  if (typeof effect !== "string" || !EFFECTS.has(effect)) corrupt(`unknown effect ${JSON.stringify(effect)}`);
  if (typeof header.toolName !== "string") corrupt("field toolName is missing");
  // The body starts with the stored request (LEDGER-21). A row without requestBytes was
  // written before LEDGER-21: it has no request to re-run with, so it is corrupt, not absent.
  const split = utf8Prefix(body, int("requestBytes"));
  if (split === undefined) corrupt("the body does not start with requestBytes bytes of UTF-8");
  const request = body.slice(0, split);
  const rest = body.slice(split);
  const base = {
    key,
    toolName: header.toolName as string,
    effect: effect as "keyed_write" | "unkeyed_write",
    fence: int("fence"),
    claimedAt: int("claimedAt"),
    request,
  };
  if (base.fence < 1) corrupt("fence is below 1");
  switch (state) {
    case "in_flight":
      return { ...base, state, owner: rest, leaseExpiresAt: int("leaseExpiresAt") };
    case "completed":
      return { ...base, state, result: rest, finishedAt: int("finishedAt") };
    case "failed":
      return { ...base, state, error: decodeStoredError(key, rest), finishedAt: int("finishedAt") };
    case "unknown":
      return { ...base, state, reason: rest, finishedAt: int("finishedAt") };
    default:
      if (rest !== "") corrupt("a released row has text after its request");
      return { ...base, state: "released", finishedAt: int("finishedAt") };
  }
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
function decodeStoredError(key: string, text: string): StoredError {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new LedgerCorruptError(key, "stored error is not JSON", { cause });
  }
  if (
    value === null ||
    typeof value !== "object" ||
    Array.isArray(value) ||
    typeof (value as StoredError).name !== "string" ||
    typeof (value as StoredError).message !== "string" ||
    ((value as StoredError).code !== undefined && typeof (value as StoredError).code !== "string")
  ) {
    throw new LedgerCorruptError(key, "stored error is not a StoredError");
  }
  return value as StoredError;
}
