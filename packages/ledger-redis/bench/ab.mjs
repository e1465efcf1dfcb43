// Two builds of this package side by side at one concurrency, for a change of the client's or the
// scripts' cost per call: the build given as the first argument (e.g. main's dist copied aside)
// against this package's dist, in alternating slices (round i runs `current` first when i is even,
// `other` first when odd), each on a connection of its own. Workloads: `ledger` (claim + complete of
// a new key, as bench/cpu.mjs) or `dispatch` (the Dispatcher over the ledger, as `pnpm bench --peers`).
// Prints each round's throughput ratio current/other, their median and range, and each side's CPU
// per call in this process and in redis-server (from /proc, so only for a local server). A benchmark:
// asserts nothing.
//   node packages/ledger-redis/bench/ab.mjs <other build's index.js> [ledger|dispatch] [concurrency] [slice ms] [rounds]
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const requireFromBench = createRequire(join(root, "bench", "package.json"));
const { drive, pay, paymentTool, spread } = await import(pathToFileURL(join(root, "bench", "common.mjs")).href);
const core = await import(pathToFileURL(join(root, "packages", "core", "dist", "index.js")).href);
const current = await import(pathToFileURL(join(here, "..", "dist", "index.js")).href);
const [otherPath, workload = "ledger", concurrencyArg = "1", msArg = "2000", roundsArg = "8"] = process.argv.slice(2);
if (otherPath === undefined || (workload !== "ledger" && workload !== "dispatch")) {
  throw new Error("usage: ab.mjs <other build's index.js> [ledger|dispatch] [concurrency] [slice ms] [rounds]");
}
const other = await import(pathToFileURL(resolve(otherPath)).href);
const { Redis } = requireFromBench("ioredis");
const { z } = requireFromBench("zod");
const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `ledger-ab-${randomBytes(3).toString("hex")}`;
const concurrency = Number(concurrencyArg);
const rounds = Number(roundsArg);
// A typical stored request (LEDGER-21) and result, as bench/cpu.mjs.
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';
const RESULT = '{"payment_id":"pay_0123456789","status":"succeeded","amount":4200,"currency":"eur"}';

const clients = { other: new Redis(url, { ...current.LEDGER_REDIS_OPTIONS }), current: new Redis(url, { ...current.LEDGER_REDIS_OPTIONS }) };
await Promise.all(Object.values(clients).map((c) => once(c, "ready")));
const tool = paymentTool(core, z, { paymentId: "pay_0123456789", status: "accepted" });
let n = 0;
const sides = {};
const ledgers = [];
for (const [name, Ledger] of [["other", other.RedisLedger], ["current", current.RedisLedger]]) {
  const ledger = new Ledger({ client: clients[name], prefix: `${prefix}:${name}`, retentionMs: 60_000, allowShortRetentionForTests: true });
  ledgers.push(ledger);
  if (workload === "ledger") {
    sides[name] = async () => {
      const key = `k${n++}`;
      const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
      if (claim.outcome !== "claimed") throw new Error(`expected a fresh claim, got ${claim.outcome}`);
      await ledger.complete(key, claim.fence, RESULT);
    };
  } else {
    const dispatcher = new core.Dispatcher({ tools: [tool], ledger });
    sides[name] = async () => {
      const i = n++;
      await dispatcher.turn({ conversationId: `${prefix}-c${i}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(i, "P") });
    };
  }
}
const probe = new Redis(url);
const pid = Number((await probe.info("server")).match(/process_id:(\d+)/)[1]);
const serverCpuUs = () => {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // clock ticks of 10 ms
  } catch {
    return NaN; // not a local server
  }
};
try {
  // Warm-up: scripts loaded, code optimised on both sides.
  for (const name of ["other", "current", "other", "current"]) await drive(concurrency, 500, sides[name]);
  const acc = { other: { ops: 0, cpu: 0, server: 0 }, current: { ops: 0, cpu: 0, server: 0 } };
  const ratios = [];
  const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  for (let round = 0; round < rounds; round++) {
    const rate = {};
    for (const name of round % 2 === 0 ? ["current", "other"] : ["other", "current"]) {
      const s0 = serverCpuUs();
      const part = await drive(concurrency, Number(msArg), sides[name]);
      acc[name].server += serverCpuUs() - s0;
      acc[name].ops += part.ops;
      acc[name].cpu += part.cpuUs;
      rate[name] = part.ops / part.elapsedMs;
    }
    ratios.push(rate.current / rate.other);
  }
  const perCall = (a) => `node ${(a.cpu / a.ops).toFixed(1)} µs + redis ${(a.server / a.ops).toFixed(1)} µs a call`;
  const s = spread(ratios);
  console.log(
    `${workload} c=${concurrency}, ${rounds} rounds of ${msArg} ms (load ${load} -> ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}): ` +
      `current/other by round median ${s.median} (${s.min}-${s.max}); other ${perCall(acc.other)}; current ${perCall(acc.current)}; ` +
      `rounds ${ratios.map((r) => r.toFixed(3)).join(" ")}`,
  );
} finally {
  let cursor = "0";
  do {
    const [next, keys] = await probe.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await probe.unlink(...keys);
  } while (cursor !== "0");
  probe.disconnect();
  for (const ledger of ledgers) await ledger.close();
  for (const client of Object.values(clients)) client.disconnect();
}
