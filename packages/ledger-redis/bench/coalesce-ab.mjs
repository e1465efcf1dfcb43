// Two builds of this package side by side over one Dispatcher workload (bench/common.mjs): the
// build given as the first argument (e.g. an earlier commit's src built into dist-old) against
// this package's dist, in slices of alternating order. Prints, per concurrency, each side's
// throughput, this process's CPU and redis-server's CPU per dispatch (from /proc, so only for a
// local server), and redis-server's read and write events per dispatch (INFO stats). A benchmark:
// asserts nothing.
//   node packages/ledger-redis/bench/coalesce-ab.mjs packages/ledger-redis/dist-old/index.js 1,16,64 3000
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const requireFromBench = createRequire(join(root, "bench", "package.json"));
const { drive, pay, paymentTool } = await import(pathToFileURL(join(root, "bench", "common.mjs")).href);
const core = await import(pathToFileURL(join(root, "packages", "core", "dist", "index.js")).href);
const current = await import(pathToFileURL(join(here, "..", "dist", "index.js")).href);
const [oldPath, concurrencyArg = "1,16,64", msArg = "3000"] = process.argv.slice(2);
if (oldPath === undefined) throw new Error("usage: coalesce-ab.mjs <other build's index.js> [concurrencies] [slice ms]");
const other = await import(pathToFileURL(resolve(oldPath)).href);
const { Redis } = requireFromBench("ioredis");
const { z } = requireFromBench("zod");
const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = `coalesce-ab-${randomBytes(3).toString("hex")}`;

const clients = { other: new Redis(url, { ...current.LEDGER_REDIS_OPTIONS }), current: new Redis(url, { ...current.LEDGER_REDIS_OPTIONS }) };
await Promise.all(Object.values(clients).map((c) => once(c, "ready")));
const tool = paymentTool(core, z, { paymentId: "pay_0123456789", status: "accepted" });
let n = 0;
const sides = {};
for (const [name, Ledger] of [["other", other.RedisLedger], ["current", current.RedisLedger]]) {
  const ledger = new Ledger({ client: clients[name], prefix: `${prefix}:${name}`, retentionMs: 60_000, allowShortRetentionForTests: true });
  const dispatcher = new core.Dispatcher({ tools: [tool], ledger });
  sides[name] = async () => {
    const i = n++;
    await dispatcher.turn({ conversationId: `${prefix}-c${i}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(i, "P") });
  };
}
const probe = clients.other;
const pid = Number((await probe.info("server")).match(/process_id:(\d+)/)[1]);
const serverCpuUs = () => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // clock ticks of 10 ms
};
const events = async () => {
  const text = await probe.info("stats");
  return { reads: Number(text.match(/total_reads_processed:(\d+)/)[1]), writes: Number(text.match(/total_writes_processed:(\d+)/)[1]) };
};
for (const c of concurrencyArg.split(",").map(Number)) {
  const acc = Object.fromEntries(Object.keys(sides).map((s) => [s, { ops: 0, ms: 0, cpu: 0, server: 0, reads: 0, writes: 0 }]));
  for (let round = 0; round < 4; round++) {
    for (const name of round % 2 === 0 ? ["current", "other"] : ["other", "current"]) {
      const e0 = await events();
      const s0 = serverCpuUs();
      const part = await drive(c, Number(msArg), sides[name]);
      const e1 = await events();
      const a = acc[name];
      a.ops += part.ops;
      a.ms += part.elapsedMs;
      a.cpu += part.cpuUs;
      a.server += serverCpuUs() - s0;
      a.reads += e1.reads - e0.reads;
      a.writes += e1.writes - e0.writes;
    }
  }
  const show = (a) =>
    `${Math.round((a.ops / a.ms) * 1000)} ops/s, node ${(a.cpu / a.ops).toFixed(1)} µs, redis ${(a.server / a.ops).toFixed(1)} µs, reads/op ${(a.reads / a.ops).toFixed(2)}, writes/op ${(a.writes / a.ops).toFixed(2)}`;
  const rate = (a) => a.ops / a.ms;
  console.log(`c=${c} other: ${show(acc.other)} | current: ${show(acc.current)} | current/other ${(rate(acc.current) / rate(acc.other)).toFixed(2)}`);
}
let cursor = "0";
do {
  const [next, keys] = await probe.scan(cursor, "MATCH", `*${prefix}*`, "COUNT", 1000);
  cursor = next;
  if (keys.length > 0) await probe.del(...keys);
} while (cursor !== "0");
for (const client of Object.values(clients)) client.disconnect();
