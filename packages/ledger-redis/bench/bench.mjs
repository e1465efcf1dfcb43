// Benchmark (not a test): claim+complete through RedisLedger vs the raw floor
// (ioredis SET NX + SET XX), measured in the same run, interleaved in slices so that
// load from other processes on the machine hits both alike.
//   node bench/bench.mjs            human table
//   node bench/bench.mjs --json     JSON rows
//   node bench/bench.mjs --cluster  the same on a local three-node Redis Cluster it starts
import { randomBytes } from "node:crypto";
import { pathToFileURL } from "node:url";
import { Cluster, Redis } from "ioredis";
import { LEDGER_CLUSTER_OPTIONS, RedisLedger } from "../dist/index.js";
// A typical stored request (LEDGER-21): the JCS text of a payment call's arguments, 55 bytes.
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';

const SINGLE_ADAPTER = "ledger-redis";
const SINGLE_FLOOR = "redis floor (SET NX + SET XX)";
const CLUSTER_ADAPTER = "ledger-redis (Cluster, 3 primaries)";
const CLUSTER_FLOOR = "redis cluster floor (SET NX + SET XX)";
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

/** Unlink every key under `prefix` (also used by the root bench's peers run); on a Cluster, on each primary. */
export async function deletePrefix(client, prefix, onClusterNode = false) {
  if (client instanceof Cluster) {
    await Promise.all(client.nodes("master").map((node) => deletePrefix(node, prefix, true)));
    return;
  }
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 2000);
    cursor = next;
    if (keys.length === 0) continue;
    // A Cluster node refuses one UNLINK of keys in different slots (CROSSSLOT): one per key there.
    if (onClusterNode) await Promise.all(keys.map((key) => client.unlink(key)));
    else await client.unlink(...keys);
  } while (cursor !== "0");
}

/**
 * `cluster`: the seed nodes of a Redis Cluster (`{ host, port }[]`) to run on instead of `url`:
 * the floor's and the ledger's keys spread over its slots, each command sent to its key's primary.
 */
export async function bench({ durationMs = 3000, concurrencies = [1, 16, 64], url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379", cluster = undefined } = {}) {
  const prefix = `do-bench-${process.pid}-${randomBytes(4).toString("hex")}`;
  // The floor's client keeps ioredis' defaults (its offline queue opens each node's connection on
  // first use); the ledger's has the settings it requires (LEDGER_CLUSTER_OPTIONS).
  const connect = () => (cluster === undefined ? new Redis(url) : new Cluster(cluster));
  const floor = connect();
  const admin = connect();
  const ledgerClient = cluster === undefined ? undefined : new Cluster(cluster, { ...LEDGER_CLUSTER_OPTIONS });
  const ledger = new RedisLedger({
    ...(ledgerClient === undefined ? { url } : { client: ledgerClient }),
    prefix: `${prefix}:ledger`,
    retentionMs: RETENTION_MS,
    allowShortRetentionForTests: true,
  });
  const [ADAPTER, FLOOR] = cluster === undefined ? [SINGLE_ADAPTER, SINGLE_FLOOR] : [CLUSTER_ADAPTER, CLUSTER_FLOOR];
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
    await ledgerClient?.quit();
  }
  return rows;
}

/**
 * The same rows on a local three-node Redis Cluster (no replicas, nothing on disk, like the
 * single server), started here on loopback and stopped after: the cluster helper of the tests
 * (test/cluster.ts, loaded through tsx), so the bench and the tests start a cluster one way.
 */
export async function benchCluster({ durationMs = 3000, concurrencies = [1, 16, 64] } = {}) {
  const { register } = await import("tsx/esm/api");
  const unregister = register();
  // A URL, not a specifier: plain node resolves it once tsx is registered, and the type-check of
  // this script does not follow it into the TypeScript source.
  const { startCluster } = await import(new URL("../test/cluster.ts", import.meta.url).href);
  const local = await startCluster();
  try {
    return await bench({ durationMs, concurrencies, cluster: local.ports.map((port) => ({ host: "127.0.0.1", port })) });
  } finally {
    await local.stop();
    await unregister();
  }
}

export function formatTable(rows) {
  const header = ["adapter", "workload", "conc", "ops/s", "p50 µs", "p99 µs", "floor ops/s", "ratio"];
  const body = rows.map((r) => [r.adapter, r.workload, String(r.concurrency), String(r.opsPerSec), String(r.p50us), String(r.p99us), String(r.floorOpsPerSec), r.ratio.toFixed(2)]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const line = (cells) => cells.map((c, i) => (i >= 2 ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ");
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...body.map(line)].join("\n");
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const rows = process.argv.includes("--cluster") ? await benchCluster() : await bench();
  console.log(process.argv.includes("--json") ? JSON.stringify(rows, null, 2) : formatTable(rows));
}
