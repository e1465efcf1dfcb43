import { mkdir, rmdir } from "node:fs/promises";
import { join } from "node:path";
import { Dispatcher, defineTool, effectOf, isDispatchOnceError, retryableOf, type DispatchEvent } from "@dispatch-once/core";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RedisLedger } from "../src/index.js";
import { parseStored, uniquePrefix } from "./helpers.js";
import { startServer, type PrivateServer } from "./server.js";

// The server answers, but refuses with an error class of its own (LEDGER-12, DISPATCH-10): out of
// memory under noeviction (OOM), a replica after a failover (READONLY), a failed snapshot with
// stop-writes-on-bgsave-error (MISCONF, what a full disk looks like to Redis). Each is produced
// for real on a private redis-server; the oracle is what the caller is told (code, effectOf,
// retryableOf), how often the tool ran, and the row Redis holds.

let server: PrivateServer;
let raw: Redis;
const ledgers: RedisLedger[] = [];

beforeAll(async () => {
  // CONFIG SET dir is a protected setting since Redis 7: allowed on this private server only.
  server = await startServer(["--enable-protected-configs", "yes", "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]);
  raw = new Redis({ port: server.port, host: "127.0.0.1", maxRetriesPerRequest: 1 });
  raw.on("error", () => {});
});

afterEach(async () => {
  await heal();
  await Promise.all(ledgers.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  raw?.disconnect();
  await server?.stop();
});

/** Undo every refusal a test set up: memory, role, snapshot errors. */
async function heal(): Promise<void> {
  await raw.call("REPLICAOF", "NO", "ONE");
  await raw.config("SET", "maxmemory", "0");
  await raw.config("SET", "dir", server.dir);
  await raw.config("SET", "save", "");
  await raw.config("SET", "stop-writes-on-bgsave-error", "no");
  await raw.del("storeerr:filler");
}

/** Redis refuses every write that may grow memory: maxmemory 1mb, noeviction, and more data than that. */
async function outOfMemory(): Promise<void> {
  await raw.set("storeerr:filler", "x".repeat(1024 * 1024));
  await raw.config("SET", "maxmemory", "1mb");
}

/** A failover left the app on a replica (of a primary that is not there): writes are refused READONLY. */
async function replica(): Promise<void> {
  await raw.call("REPLICAOF", "127.0.0.1", "1");
}

/** A snapshot that could not be written (its directory is gone): writes are refused MISCONF. */
async function snapshotFailed(): Promise<void> {
  const gone = join(server.dir, "gone");
  await mkdir(gone);
  await raw.config("SET", "dir", gone);
  await rmdir(gone);
  await raw.config("SET", "save", "3600 1");
  await raw.config("SET", "stop-writes-on-bgsave-error", "yes");
  await raw.bgsave();
  for (let i = 0; ; i++) {
    const info = await raw.info("persistence");
    if (/rdb_bgsave_in_progress:0/.test(info) && /rdb_last_bgsave_status:err/.test(info)) return;
    if (i > 200) throw new Error(`the snapshot did not fail: ${info}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const REFUSALS = [
  ["OOM (maxmemory, noeviction)", outOfMemory, /OOM/],
  ["READONLY (a replica)", replica, /READONLY/],
  ["MISCONF (a failed snapshot)", snapshotFailed, /MISCONF/],
] as const;

function subject() {
  const ledger = new RedisLedger({ url: server.url, prefix: uniquePrefix("storeerr"), commandTimeoutMs: 2000, onWarning: () => {} });
  ledgers.push(ledger);
  const effects: string[] = [];
  let during: (() => Promise<void>) | undefined;
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    // A pass-through schema: the test is about the store's refusals, not validation (no zod here).
    input: { safeParse: (value: unknown) => ({ success: true, data: value }) } as never,
    async run(_args, ctx) {
      effects.push(ctx.idempotencyKey);
      await during?.();
      return { paymentId: `pay_${effects.length}` };
    },
  });
  const events: DispatchEvent[] = [];
  const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 5, claimRetryMs: 50, recordRetryMs: 50, onEvent: (e) => events.push(e) });
  const dispatch = () => dispatcher.turn({ conversationId: "conv_storeerr", turnIndex: 0 }).dispatch({ name: "send_payment", input: { payee: "acme", amount: 125 } });
  const row = async (key: string) => {
    const value = await raw.get(ledger.redisKey(key));
    return value === null ? undefined : parseStored(value).header;
  };
  return { ledger, effects, events, dispatch, row, setDuring: (fn: () => Promise<void>) => (during = fn) };
}

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected the dispatch to be refused");
}

describe.each(REFUSALS)("Redis refuses writes: %s", (_name, refuse, said) => {
  it("ERR-5 LEDGER-12 DISPATCH-10 a claim of a new key is ledger_unavailable (retryable, not corrupt); the tool does not run and no row is written; once healed the call runs once", async () => {
    const s = subject();
    await s.ledger.lookup("warm-up");
    await refuse();
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(said);
    expect([effectOf(error), retryableOf(error)]).toEqual(["possibly", "same_message"]);
    expect(s.effects).toHaveLength(0);
    await heal();
    const outcome = await s.dispatch();
    expect(outcome).toMatchObject({ replayed: false, result: { paymentId: "pay_1" } });
    expect(await s.row(outcome.key)).toMatchObject({ state: "completed", fence: 1 });
    expect(s.effects).toHaveLength(1);
  });

  it("ERR-5 a replay that meets the refusal is ledger_unavailable, not ledger_corrupt; the completed row is untouched and answers the replay once healed", async () => {
    const s = subject();
    const first = await s.dispatch();
    await refuse();
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect(retryableOf(error)).toBe("same_message");
    await heal();
    expect(await s.dispatch()).toMatchObject({ replayed: true, resultJson: first.resultJson });
    expect(s.effects).toHaveLength(1);
  });

  it("DISPATCH-10 a completion refused after the payment ran is ledger_unavailable (effect happened: the run returned its result, ERR-4; never failed); the row stays in flight at fence 1 and the tool ran once", async () => {
    const s = subject();
    s.setDuring(refuse);
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(said);
    // The run returned its result: the effect happened and a re-send cannot help (DISPATCH-10, ERR-4).
    expect([effectOf(error), retryableOf(error)]).toEqual(["yes", "no"]);
    expect(s.effects).toHaveLength(1);
    expect(s.events.find((e) => e.type === "record_failed")).toMatchObject({ write: "complete", state: "completed" });
    await heal();
    expect(await s.row(s.effects[0]!)).toMatchObject({ state: "in_flight", fence: 1 });
  });
});
