// One workload in a loop of its own at a given concurrency (c=1 by default) on a Redis server,
// for profiling and counting what a call costs: `node --cpu-prof`, or cachegrind's instruction
// counts (a run of N2 calls minus one of N1, each after the same warm-up, over N2 - N1):
//   WARM=6000 valgrind --tool=cachegrind --cache-sim=no node --predictable --single-threaded \
//     --min-semi-space-size=16 --max-semi-space-size=16 bench/c1-loop.mjs dispatch 5000
// Workloads: `ledger` (RedisLedger claim+complete with the claim id, conversation and turn a
// dispatcher's claim carries), `dispatch` (Dispatcher.dispatch over that ledger), `memledger` and
// `memdispatch` (the same over a MemoryLedger: no I/O), `floor` (SET NX + SET XX), `powertools` (the
// AWS Powertools idempotency Redis layer, as bench/peers.mjs). Prints calls a second and CPU µs per
// call in this process and in redis-server (from /proc: a local server). A benchmark: asserts nothing.
//   node bench/c1-loop.mjs <workload> [calls] [concurrency]
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { pay, paymentTool } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const require = createRequire(join(here, "package.json"));
const core = await import(pathToFileURL(join(root, "packages", "core", "dist", "index.js")).href);
const { RedisLedger } = await import(pathToFileURL(join(root, "packages", "ledger-redis", "dist", "index.js")).href);
const { z } = require("zod");
const { Redis } = require("ioredis");

const [workload = "dispatch", callsArg = "20000", concurrencyArg = "1"] = process.argv.slice(2);
const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `c1-loop-${randomBytes(3).toString("hex")}`;
const run = randomBytes(3).toString("hex");
const result = { paymentId: "pay_0123456789", status: "accepted" };
const resultText = core.canonicalize(result);
const tool = paymentTool(core, z, result);
const admin = new Redis(url);
const ledger = new RedisLedger({ url, prefix: `${prefix}:l`, retentionMs: 60_000, allowShortRetentionForTests: true });
const mem = new core.MemoryLedger();
const dispatchers = { redis: new core.Dispatcher({ tools: [tool], ledger }), memory: new core.Dispatcher({ tools: [tool], ledger: new core.MemoryLedger() }) };
let n = 0;
/** A claim as the dispatcher sends it (claim id, conversation, turn), then its complete. */
const claimComplete = async (on, key, i) => {
  const claimId = `abcdefghijklmnopqrstu${i % 10}`;
  const claim = await on.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: JSON.stringify(pay(i, "D")), claimId, conversationId: `c${run}-${i}`, turnIndex: 0 });
  if (claim.outcome !== "claimed") throw new Error(`expected a fresh claim, got ${claim.outcome}`);
  await on.complete(key, claim.fence, resultText);
};
let closePowertools = async () => {};
let powertools;
if (workload === "powertools") {
  const { createClient } = require("@redis/client");
  const { makeIdempotent, IdempotencyConfig } = require("@aws-lambda-powertools/idempotency");
  const { CachePersistenceLayer } = require("@aws-lambda-powertools/idempotency/cache");
  const redisClient = createClient({ url });
  await redisClient.connect();
  const config = new IdempotencyConfig({ expiresAfterSeconds: 60 });
  config.registerLambdaContext({ getRemainingTimeInMillis: () => 900_000 });
  const pay1 = makeIdempotent(/** @type {(payment: object) => Promise<object>} */ (async () => result), { persistenceStore: new CachePersistenceLayer({ client: /** @type {any} */ (redisClient) }), config, keyPrefix: `${prefix}:pt` });
  powertools = () => pay1(pay(n++, "P"));
  closePowertools = async () => {
    await redisClient.quit().catch(() => {});
  };
}
const workloads = {
  ledger: () => claimComplete(ledger, `l${n}`, n++),
  memledger: () => claimComplete(mem, `m${n}`, n++),
  dispatch: () => dispatchers.redis.turn({ conversationId: `c${run}-${n}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(n++, "D") }),
  memdispatch: () => dispatchers.memory.turn({ conversationId: `c${run}-${n}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(n++, "D") }),
  floor: async () => {
    const key = `${prefix}:floor:{${n++}}`;
    if ((await admin.set(key, "in_flight", "NX")) !== "OK") throw new Error("floor claim lost");
    await admin.set(key, resultText, "PX", 60_000, "XX");
  },
  powertools: () => powertools(),
};
const op = workloads[workload];
if (op === undefined) throw new Error(`usage: node bench/c1-loop.mjs <${Object.keys(workloads).join("|")}> [calls] [concurrency]`);

const pid = Number(/process_id:(\d+)/.exec(await admin.info("server"))?.[1]);
const serverUs = () => {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 1e4; // clock ticks of 10 ms
  } catch {
    return NaN; // not a local server
  }
};
try {
  for (let i = 0; i < Number(process.env.WARM ?? 3000); i++) await op();
  const calls = Number(callsArg);
  const cpu = process.cpuUsage();
  const server = serverUs();
  const started = performance.now();
  let left = calls;
  await Promise.all(
    Array.from({ length: Number(concurrencyArg) }, async () => {
      while (left-- > 0) await op();
    }),
  );
  const used = process.cpuUsage(cpu);
  const perCall = (us) => (us / calls).toFixed(1);
  console.log(
    `${workload} c=${concurrencyArg}: ${Math.round((calls / (performance.now() - started)) * 1000)} calls/s, ` +
      `node ${perCall(used.user + used.system)} µs (user ${perCall(used.user)}, system ${perCall(used.system)}) + redis-server ${perCall(serverUs() - server)} µs a call`,
  );
} finally {
  let cursor = "0";
  do {
    const [next, keys] = await admin.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await admin.unlink(...keys);
  } while (cursor !== "0");
  await ledger.close();
  await closePowertools();
  admin.disconnect();
}
