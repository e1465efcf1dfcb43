// Benchmark (not a test): claim+complete through RedisLedger vs the raw floor
// (ioredis SET NX + SET XX), measured in the same run, interleaved in slices so that
// load from other processes on the machine hits both alike.
//   node bench/bench.mjs            human table
//   node bench/bench.mjs --json     JSON rows
import { randomBytes } from "node:crypto";
import { pathToFileURL } from "node:url";
import { Redis } from "ioredis";
import { RedisLedger } from "../dist/index.js";
// A typical stored request (LEDGER-21): the JCS text of a payment call's arguments, 55 bytes.
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';

const ADAPTER = "ledger-redis";
const FLOOR = "redis floor (SET NX + SET XX)";
const SLICES = 3;
// Leftovers expire on their own even if cleanup is interrupted: a bench, so the test-only
// escape from the 1 h retention floor is fine here.
const RETENTION_MS = 60_000;

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Run `op` from `concurrency` loops for `ms`; returns op count and latencies (ns). */
async function drive(concurrency, ms, op) {
  const latencies = [];
  const end = performance.now() + ms;
  let ops = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const t0 = process.hrtime.bigint();
        await op();
        latencies.push(Number(process.hrtime.bigint() - t0));
        ops++;
      }
    }),
  );
  return { ops, elapsedMs: performance.now() - started, latencies };
}

function summarise(parts) {
  const ops = parts.reduce((n, p) => n + p.ops, 0);
  const elapsedMs = parts.reduce((n, p) => n + p.elapsedMs, 0);
  const latencies = parts.flatMap((p) => p.latencies).sort((a, b) => a - b);
  return {
    opsPerSec: Math.round((ops / elapsedMs) * 1000),
    p50us: Math.round(percentile(latencies, 50) / 1000),
    p99us: Math.round(percentile(latencies, 99) / 1000),
  };
}

/** Unlink every key under `prefix` (also used by the root bench's peers run). */
export async function deletePrefix(client, prefix) {
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 2000);
    cursor = next;
    if (keys.length > 0) await client.unlink(...keys);
  } while (cursor !== "0");
}

export async function bench({ durationMs = 3000, concurrencies = [1, 16, 64], url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379" } = {}) {
  const prefix = `do-bench-${process.pid}-${randomBytes(4).toString("hex")}`;
  const floor = new Redis(url);
  const admin = new Redis(url);
  const ledger = new RedisLedger({ url, prefix: `${prefix}:ledger`, retentionMs: RETENTION_MS, allowShortRetentionForTests: true });
  const result = '{"payment_id":"pay_0123456789","status":"succeeded","amount":4200,"currency":"eur"}';
  let n = 0;
  const rows = [];

  // The floor: claim = SET NX, complete = SET XX (with the same retention TTL).
  const floorClaimComplete = async () => {
    const key = `${prefix}:floor:{${n++}}`;
    if ((await floor.set(key, "in_flight", "NX")) !== "OK") throw new Error("floor claim lost");
    await floor.set(key, result, "PX", RETENTION_MS, "XX");
  };
  // The adapter: lease on the server clock, fence checked on complete.
  const ledgerClaimComplete = async () => {
    const key = `k${n++}`;
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
    if (claim.outcome !== "claimed") throw new Error("ledger claim lost");
    await ledger.complete(key, claim.fence, result);
  };

  // Same-key contention: `c` claimers of ONE key per round; exactly one wins and completes.
  const contended = (claimOne, completeOne) => async (c, ms) => {
    const latencies = [];
    const end = performance.now() + ms;
    const started = performance.now();
    let ops = 0;
    while (performance.now() < end) {
      const key = n++;
      const outcomes = await Promise.all(
        Array.from({ length: c }, async () => {
          const t0 = process.hrtime.bigint();
          const won = await claimOne(key);
          latencies.push(Number(process.hrtime.bigint() - t0));
          return won;
        }),
      );
      const winners = outcomes.filter(Boolean);
      if (winners.length !== 1) throw new Error(`${winners.length} winners for one key`);
      await completeOne(key, winners[0]);
      ops += c;
    }
    return { ops, elapsedMs: performance.now() - started, latencies };
  };
  const floorContended = contended(
    async (key) => (await floor.set(`${prefix}:floor:{c${key}}`, "in_flight", "NX")) === "OK",
    (key) => floor.set(`${prefix}:floor:{c${key}}`, result, "PX", RETENTION_MS, "XX"),
  );
  const ledgerContended = contended(
    async (key) => {
      const claim = await ledger.claim({ key: `c${key}`, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
      return claim.outcome === "claimed" ? claim.fence : 0;
    },
    (key, fence) => ledger.complete(`c${key}`, fence, result),
  );

  try {
    await floor.ping();
    await ledger.lookup("warm-up");
    // Warm up both paths (script load, JIT) before measuring.
    await drive(4, 300, floorClaimComplete);
    await drive(4, 300, ledgerClaimComplete);
    const slice = Math.max(50, Math.floor(durationMs / SLICES));
    for (const concurrency of concurrencies) {
      const f = [];
      const a = [];
      for (let s = 0; s < SLICES; s++) {
        f.push(await drive(concurrency, slice, floorClaimComplete));
        a.push(await drive(concurrency, slice, ledgerClaimComplete));
      }
      const fs = summarise(f);
      const as = summarise(a);
      rows.push({ adapter: FLOOR, workload: "claim+complete", concurrency, ...fs, floorOpsPerSec: fs.opsPerSec, ratio: 1 });
      rows.push({ adapter: ADAPTER, workload: "claim+complete", concurrency, ...as, floorOpsPerSec: fs.opsPerSec, ratio: Number((as.opsPerSec / fs.opsPerSec).toFixed(2)) });
      await deletePrefix(admin, prefix);
    }
    for (const concurrency of concurrencies.filter((c) => c > 1)) {
      const f = [];
      const a = [];
      for (let s = 0; s < SLICES; s++) {
        f.push(await floorContended(concurrency, slice));
        a.push(await ledgerContended(concurrency, slice));
      }
      const fs = summarise(f);
      const as = summarise(a);
      rows.push({ adapter: FLOOR, workload: "same-key contention", concurrency, ...fs, floorOpsPerSec: fs.opsPerSec, ratio: 1 });
      rows.push({ adapter: ADAPTER, workload: "same-key contention", concurrency, ...as, floorOpsPerSec: fs.opsPerSec, ratio: Number((as.opsPerSec / fs.opsPerSec).toFixed(2)) });
      await deletePrefix(admin, prefix);
    }
  } finally {
    await deletePrefix(admin, prefix).catch(() => {});
    await ledger.close();
    await floor.quit();
    await admin.quit();
  }
  return rows;
}

export function formatTable(rows) {
  const header = ["adapter", "workload", "conc", "ops/s", "p50 µs", "p99 µs", "floor ops/s", "ratio"];
  const body = rows.map((r) => [r.adapter, r.workload, String(r.concurrency), String(r.opsPerSec), String(r.p50us), String(r.p99us), String(r.floorOpsPerSec), r.ratio.toFixed(2)]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells) => cells.map((c, i) => (i >= 2 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ");
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...body.map(line)].join("\n");
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const rows = await bench();
  console.log(process.argv.includes("--json") ? JSON.stringify(rows, null, 2) : formatTable(rows));
}
