// The full dispatcher path beside the ledger-only path, on the same store (issue 14: at least
// 0.75x at c=16). Both sides use ONE RedisLedger (same connection, same server): the ledger-only
// side is the adapter bench's claim+complete (packages/ledger-redis/bench) with the payment's
// request and result texts; the dispatcher side is Dispatcher.dispatch of the same payment call
// (validate, key, claim with claim id and conversation fields, run, complete). Each call is a new
// logical call. Sides alternate in slices at each concurrency, so load from other jobs falls on
// both alike; process CPU per call is taken in the same slices. A benchmark: asserts nothing.
import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { balancedOrders, drive, pay, paymentTool, ratioByRound } from "./common.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const require = createRequire(join(here, "package.json"));
// Rounds of the two sides, half of them in each order (balancedOrders).
const ROUNDS = 6;

function summarise(parts) {
  const ops = parts.reduce((n, p) => n + p.ops, 0);
  const elapsedMs = parts.reduce((n, p) => n + p.elapsedMs, 0);
  const cpuUs = parts.reduce((n, p) => n + p.cpuUs, 0);
  return { opsPerSec: Math.round((ops / elapsedMs) * 1000), cpuUsPerCall: Number((cpuUs / ops).toFixed(1)) };
}

export async function benchDispatcherToLedger({
  durationMs = 3000,
  concurrencies = [1, 16, 64],
  url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
  prefix = `do-dispatcher-ledger-${process.pid}-${randomBytes(4).toString("hex")}`,
} = {}) {
  const core = await import(pathToFileURL(join(root, "packages", "core", "dist", "index.js")).href);
  const { RedisLedger } = await import(pathToFileURL(join(root, "packages", "ledger-redis", "dist", "index.js")).href);
  const { deletePrefix } = await import(pathToFileURL(join(root, "packages", "ledger-redis", "bench", "bench.mjs")).href);
  const { z } = require("zod");
  const { Redis } = require("ioredis");

  const admin = new Redis(url);
  const ledger = new RedisLedger({ url, prefix: `${prefix}:ledger`, retentionMs: 60_000, allowShortRetentionForTests: true });
  const result = { paymentId: "pay_0123456789", status: "accepted" };
  // The text the dispatcher stores for this result (canonical JSON), so both sides write the same bytes.
  const resultText = core.canonicalize(result);
  let n = 0;

  const ledgerOnly = async () => {
    const i = n++;
    const key = `l${i}`;
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: JSON.stringify(pay(i, "D")) });
    if (claim.outcome !== "claimed") throw new Error("ledger claim lost");
    await ledger.complete(key, claim.fence, resultText);
  };
  const tool = paymentTool(core, z, result);
  const dispatcher = new core.Dispatcher({ tools: [tool], ledger });
  const run = randomBytes(4).toString("hex");
  const dispatch = async () => {
    const i = n++;
    const outcome = await dispatcher.turn({ conversationId: `c${run}-${i}`, turnIndex: 0 }).dispatch({ name: "send_payment", input: pay(i, "D") });
    if (outcome.replayed) throw new Error("a new call was replayed");
  };

  const rows = [];
  try {
    // Warm-up (scripts loaded, JIT) on both paths before measuring.
    await drive(4, 300, ledgerOnly);
    await drive(4, 300, dispatch);
    const rounds = balancedOrders(["ledger", "dispatcher"], ROUNDS);
    const slice = Math.max(50, Math.floor(durationMs / ROUNDS));
    for (const concurrency of concurrencies) {
      const l = [];
      const d = [];
      for (const order of rounds) {
        for (const side of order) (side === "ledger" ? l : d).push(await drive(concurrency, slice, side === "ledger" ? ledgerOnly : dispatch));
      }
      const ls = summarise(l);
      const ds = summarise(d);
      rows.push({
        store: "redis",
        concurrency,
        ledgerOpsPerSec: ls.opsPerSec,
        dispatcherOpsPerSec: ds.opsPerSec,
        ratio: Number((ds.opsPerSec / ls.opsPerSec).toFixed(2)),
        // The same ratio in each round on its own: how far it moves within this run.
        ratioByRound: ratioByRound(d, l),
        ledgerCpuUsPerCall: ls.cpuUsPerCall,
        dispatcherCpuUsPerCall: ds.cpuUsPerCall,
      });
      await deletePrefix(admin, prefix);
    }
  } finally {
    await deletePrefix(admin, prefix).catch(() => {});
    await ledger.close();
    await admin.quit();
  }
  return { workload: "a new payment call: Dispatcher.dispatch vs RedisLedger claim+complete, one ledger", rows };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const duration = process.argv.find((a) => a.startsWith("--duration-ms="));
  const prefix = process.argv.find((a) => a.startsWith("--prefix="));
  console.log(
    JSON.stringify(
      await benchDispatcherToLedger({
        ...(duration ? { durationMs: Number(duration.split("=")[1]) } : {}),
        ...(prefix ? { prefix: `${prefix.split("=")[1]}-${process.pid}` } : {}),
      }),
    ),
  );
}
