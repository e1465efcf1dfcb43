// `pnpm bench --peers`: Dispatch-Once beside a peer library on the same store and workload.
// The peer is the AWS Powertools idempotency utility with its Redis persistence layer
// (@aws-lambda-powertools/idempotency CachePersistenceLayer over @redis/client), wrapping the
// same payment function that Dispatch-Once's Dispatcher runs over its Redis ledger. Each call is
// a new logical call (a fresh key): claim, run, record the result. Sides are measured in
// interleaved slices, with the raw floor (SET NX + SET XX) beside them. A benchmark: asserts nothing.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { balancedOrders, drive, pay, paymentTool, ratioByRound } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const require = createRequire(join(here, "package.json"));

const sum = (parts, field) => parts.reduce((n, p) => n + p[field], 0);
const rate = (parts) => Math.round((sum(parts, "ops") / sum(parts, "elapsedMs")) * 1000);

export async function benchPeers({ durationMs = 3000, concurrencies = [1, 16, 64], url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379" } = {}) {
  const core = await import(pathToFileURL(join(root, "packages", "core", "dist", "index.js")).href);
  const { RedisLedger } = await import(pathToFileURL(join(root, "packages", "ledger-redis", "dist", "index.js")).href);
  const { deletePrefix } = await import(pathToFileURL(join(root, "packages", "ledger-redis", "bench", "bench.mjs")).href);
  const { z } = require("zod");
  const { Redis } = require("ioredis");
  const { createClient } = require("@redis/client");
  const { makeIdempotent, IdempotencyConfig } = require("@aws-lambda-powertools/idempotency");
  const { CachePersistenceLayer } = require("@aws-lambda-powertools/idempotency/cache");

  const prefix = `do-peers-${process.pid}-${randomBytes(4).toString("hex")}`;
  const floor = new Redis(url);
  const ledger = new RedisLedger({ url, prefix: `${prefix}:ledger`, retentionMs: 60_000, allowShortRetentionForTests: true });
  const redisClient = createClient({ url });
  await redisClient.connect();
  const result = { paymentId: "pay_0123456789", status: "accepted" };
  let n = 0;

  const tool = paymentTool(core, z, result);
  const dispatcher = new core.Dispatcher({ tools: [tool], ledger });
  const dispatchOnce = async () => {
    const i = n++;
    await dispatcher.turn({ conversationId: `${prefix}-c${i}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(i, "P") });
  };

  // Powertools: the payment arguments are the payload it hashes into the key (all of them: it has no identity projection).
  // @redis/client 6's typings and Powertools' CacheClient interface disagree on option types; the calls it makes (get, set NX EX, del) match.
  const persistenceStore = new CachePersistenceLayer({ client: /** @type {any} */ (redisClient) });
  const config = new IdempotencyConfig({ expiresAfterSeconds: 60 });
  // As inside a Lambda invocation: Powertools then bounds an in-progress record by the time left
  // (our lease), and does not warn on every call that it cannot tell the time left.
  config.registerLambdaContext({ getRemainingTimeInMillis: () => 900_000 });
  const idempotentPay = makeIdempotent(/** @type {(payment: object) => Promise<object>} */ (async () => result), { persistenceStore, config, keyPrefix: `${prefix}:pt` });
  const powertools = async () => {
    await idempotentPay(pay(n++, "P"));
  };

  const resultText = JSON.stringify(result);
  const floorOp = async () => {
    const key = `${prefix}:floor:{${n++}}`;
    if ((await floor.set(key, "in_flight", "NX")) !== "OK") throw new Error("floor claim lost");
    await floor.set(key, resultText, "PX", 60_000, "XX");
  };

  // The time each side costs, split where it is spent: this process (the client library and
  // the dispatcher or the decorator) and redis-server. Throughput on 2 shared cores moves with
  // the host; these per-call costs are what it is made of. The server's is read from
  // /proc/PID/stat, so only when redis-server runs on this machine (null otherwise).
  const serverCpuUs = await redisServerCpuReader(floor);
  const measure = async (concurrency, ms, op) => {
    const before = serverCpuUs?.();
    const part = await drive(concurrency, ms, op);
    return { ...part, serverCpuUs: before === undefined ? NaN : serverCpuUs() - before };
  };
  const perCall = (parts, field) => {
    const us = sum(parts, field) / sum(parts, "ops");
    return Number.isFinite(us) ? Number(us.toFixed(1)) : null;
  };

  const rows = [];
  try {
    // Warm-up (scripts loaded, JIT), then check that the peer really stores and replays.
    await drive(4, 300, floorOp);
    await drive(4, 300, dispatchOnce);
    await drive(4, 300, powertools);
    const probe = pay(-1, "P");
    let runs = 0;
    const counted = makeIdempotent(/** @type {(payment: object) => Promise<object>} */ (async () => ({ run: ++runs })), { persistenceStore, config, keyPrefix: `${prefix}:pt` });
    await counted(probe);
    await counted(probe);
    if (runs !== 1) throw new Error(`the Powertools layer ran a repeated call ${runs} times`);

    const sides = { floor: floorOp, dispatchOnce, powertools };
    // Every order of the three sides once: each side is first, second and last alike, and follows
    // each other side alike, so what one leaves behind (garbage, the server's state) falls evenly.
    const rounds = balancedOrders(Object.keys(sides));
    const slice = Math.max(50, Math.floor(durationMs / rounds.length));
    for (const concurrency of concurrencies) {
      const parts = { floor: [], dispatchOnce: [], powertools: [] };
      for (const order of rounds) for (const side of order) parts[side].push(await measure(concurrency, slice, sides[side]));
      const f = rate(parts.floor);
      const d = rate(parts.dispatchOnce);
      const p = rate(parts.powertools);
      rows.push({
        concurrency,
        floorOpsPerSec: f,
        dispatchOnceOpsPerSec: d,
        powertoolsOpsPerSec: p,
        dispatchOnceToFloor: round(d / f),
        powertoolsToFloor: round(p / f),
        dispatchOnceToPowertools: round(d / p),
        // The same ratio in each round on its own: how far it moves within this run.
        dispatchOnceToPowertoolsByRound: ratioByRound(parts.dispatchOnce, parts.powertools),
        // CPU µs per call: { client, server } for each side.
        cpuUsPerCall: Object.fromEntries(
          Object.entries(parts).map(([side, measured]) => [side, { client: perCall(measured, "cpuUs"), server: perCall(measured, "serverCpuUs") }]),
        ),
      });
    }
  } finally {
    await deletePrefix(floor, prefix).catch(() => {});
    await ledger.close();
    await redisClient.quit().catch(() => {});
    await floor.quit();
  }
  return { peer: "@aws-lambda-powertools/idempotency 2.35.0 (CachePersistenceLayer, @redis/client 6.3.1)", workload: "dispatch of a new payment call", rows };
}

/**
 * A reader of redis-server's CPU time (user + system, µs) when it runs on this machine: its pid
 * from INFO, its clock ticks from /proc. Undefined where either is not available.
 */
async function redisServerCpuReader(client) {
  const pid = /process_id:(\d+)/.exec(await client.info("server"))?.[1];
  if (pid === undefined) return undefined;
  const ticksPerSecond = 100; // USER_HZ: 100 on every Linux this bench runs on
  const read = () => {
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / ticksPerSecond;
  };
  try {
    // The pid is the server's own: a Redis in a container or on another machine may name a pid that here is another process.
    if (!readFileSync(`/proc/${pid}/comm`, "utf8").startsWith("redis-server")) return undefined;
    read();
  } catch {
    return undefined; // no such process here, or no /proc
  }
  return read;
}

function round(x) {
  return Number(x.toFixed(2));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(JSON.stringify(await benchPeers({ durationMs: Number(process.argv[2] ?? 3000) }), null, 2));
}
