// Benchmark of @dispatch-once/ledger-sqlite against SQLite's raw primitive (not a test).
// Run: node bench/bench.mjs [--json] [--duration MS]   (build first: pnpm build)
//
// better-sqlite3 is synchronous: within one process every statement runs to completion
// on the calling thread, so "concurrency N" here is N async claimers interleaving on one
// connection (the same number of statements, serialised). Real parallelism on one file is
// measured separately: "claim+complete (N connections)" runs N worker threads, each with
// its own connection, which contend for SQLite's write lock exactly as N processes would.
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";
import { SqliteLedger } from "../dist/index.js";

const RESULT = JSON.stringify({ payment_id: "pay_0001", amount: 1250, currency: "EUR", status: "succeeded" });
/** The call's arguments as the dispatcher passes them (LEDGER-21: stored with every claim). */
const REQUEST = '{"amount":1250,"currency":"eur","to":"acct_1J2K3L4M"}';

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * Run `concurrency` async loops of each op for durationMs in total, in alternating slices
 * (adapter, floor, adapter, floor, ...) so that the noise of a shared machine (other
 * processes, fsync latency) falls on both sides of the ratio alike.
 */
async function measurePair(durationMs, concurrency, ops, slices = 20) {
  const stats = ops.map(() => ({ latencies: [], elapsed: 0, next: 0 }));
  const sliceMs = durationMs / slices;
  for (let s = 0; s < slices; s++) {
    for (let o = 0; o < ops.length; o++) {
      const st = stats[o];
      const op = ops[o];
      const started = performance.now();
      const deadline = started + sliceMs;
      async function loop() {
        while (performance.now() < deadline) {
          const i = st.next++;
          const t0 = performance.now();
          await op(i);
          st.latencies.push((performance.now() - t0) * 1000);
        }
      }
      await Promise.all(Array.from({ length: concurrency }, loop));
      st.elapsed += (performance.now() - started) / 1000;
    }
  }
  return stats.map((st) => {
    st.latencies.sort((a, b) => a - b);
    return {
      opsPerSec: Math.round(st.latencies.length / st.elapsed),
      p50us: Math.round(percentile(st.latencies, 50)),
      p99us: Math.round(percentile(st.latencies, 99)),
    };
  });
}

function openRaw(path, synchronous) {
  const db = new Database(path, { timeout: 5000 });
  db.pragma("journal_mode = WAL");
  db.pragma(`synchronous = ${synchronous}`);
  return db;
}

/** The floor: what the issue names as SQLite's primitive, INSERT OR IGNORE then UPDATE, on a plain keyed table. */
function floorStatements(db, table) {
  db.exec(`CREATE TABLE ${table} (key TEXT PRIMARY KEY, state TEXT NOT NULL, result TEXT)`);
  return {
    insert: db.prepare(`INSERT OR IGNORE INTO ${table} (key, state) VALUES (?, 'in_flight')`),
    update: db.prepare(`UPDATE ${table} SET state = 'completed', result = ? WHERE key = ?`),
  };
}

async function benchMode({ dir, synchronous, groupCommit = false, adapterName, durationMs, concurrencies }) {
  const tag = `${synchronous}${groupCommit ? "-group" : ""}`;
  const rows = [];
  let run = 0;
  for (const concurrency of concurrencies) {
    run++;
    // claim+complete on distinct keys: the adapter (leases and fencing on) against the floor
    // (INSERT OR IGNORE + UPDATE on a plain table), same file settings, same run.
    const ledger = new SqliteLedger({ path: join(dir, `adapter-${tag}-${run}.db`), synchronous, groupCommit });
    const rawDb = openRaw(join(dir, `floor-${tag}-${run}.db`), synchronous);
    const floorStmts = floorStatements(rawDb, "floor");
    const [adapter, floor] = await measurePair(durationMs, concurrency, [
      async (i) => {
        const key = `k${i}`;
        const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
        if (claim.outcome !== "claimed") throw new Error(`bench key ${key} was not claimed`);
        await ledger.complete(key, claim.fence, RESULT);
      },
      async (i) => {
        const key = `k${i}`;
        if (floorStmts.insert.run(key).changes !== 1) throw new Error(`floor key ${key} was not inserted`);
        floorStmts.update.run(RESULT, key);
      },
    ]);
    await ledger.close();
    rawDb.close();
    rows.push(row(adapterName, "claim+complete", concurrency, adapter, floor));

    // Same-key contention: `concurrency` claimers race for one key; exactly one wins and
    // completes. ops/s counts claim attempts; latency is per round (all N claims + one complete).
    const contended = new SqliteLedger({ path: join(dir, `contention-${tag}-${run}.db`), synchronous, groupCommit });
    const rawContended = openRaw(join(dir, `contention-floor-${tag}-${run}.db`), synchronous);
    const cStmts = floorStatements(rawContended, "floor");
    const [contention, contentionFloor] = await measurePair(durationMs, 1, [
      async (i) => {
        const key = `hot${i}`;
        const results = await Promise.all(
          Array.from({ length: concurrency }, (_, c) =>
            contended.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: `c${c}`, leaseMs: 30_000, request: REQUEST }),
          ),
        );
        const winners = results.filter((r) => r.outcome === "claimed");
        if (winners.length !== 1) throw new Error(`key ${key}: ${winners.length} winners`);
        await contended.complete(key, winners[0].fence, RESULT);
      },
      async (i) => {
        const key = `hot${i}`;
        const results = await Promise.all(Array.from({ length: concurrency }, async () => cStmts.insert.run(key).changes));
        if (results.filter((n) => n === 1).length !== 1) throw new Error(`floor key ${key}: not one winner`);
        cStmts.update.run(RESULT, key);
      },
    ]);
    await contended.close();
    rawContended.close();
    const perAttempt = (m) => ({ ...m, opsPerSec: m.opsPerSec * concurrency });
    rows.push(row(adapterName, "same-key contention", concurrency, perAttempt(contention), perAttempt(contentionFloor)));
  }
  return rows;
}

function row(adapter, workload, concurrency, measured, floor) {
  return {
    adapter,
    workload,
    concurrency,
    opsPerSec: measured.opsPerSec,
    p50us: measured.p50us,
    p99us: measured.p99us,
    floorOpsPerSec: floor.opsPerSec,
    ratio: Math.round((measured.opsPerSec / floor.opsPerSec) * 100) / 100,
  };
}

/** Worker thread body: one connection, claim+complete (or the floor) on its own keys per slice. */
async function connectionWorker({ path, synchronous, kind, id }) {
  let op;
  if (kind === "adapter") {
    const ledger = new SqliteLedger({ path, synchronous, busyTimeoutMs: 60_000 });
    op = async (key) => {
      const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: `t${id}`, leaseMs: 30_000, request: REQUEST });
      if (claim.outcome !== "claimed") throw new Error(`bench key ${key} was not claimed`);
      await ledger.complete(key, claim.fence, RESULT);
    };
  } else {
    const db = new Database(path, { timeout: 60_000 });
    db.pragma(`synchronous = ${synchronous}`);
    const insert = db.prepare(`INSERT OR IGNORE INTO floor (key, state) VALUES (?, 'in_flight')`);
    const update = db.prepare(`UPDATE floor SET state = 'completed', result = ? WHERE key = ?`);
    op = async (key) => {
      if (insert.run(key).changes !== 1) throw new Error(`floor key ${key} was not inserted`);
      update.run(RESULT, key);
    };
  }
  let next = 0;
  parentPort.on("message", async (sliceMs) => {
    const latencies = [];
    const deadline = performance.now() + sliceMs;
    while (performance.now() < deadline) {
      const t0 = performance.now();
      await op(`t${id}-${next++}`);
      latencies.push((performance.now() - t0) * 1000);
    }
    parentPort.postMessage(latencies);
  });
  parentPort.postMessage("ready");
}

async function startWorkers(n, data) {
  const workers = Array.from({ length: n }, (_, id) => new Worker(fileURLToPath(import.meta.url), { workerData: { ledgerSqliteBench: { ...data, id } } }));
  await Promise.all(workers.map((w) => reply(w)));
  return workers;
}

/** The worker's next message (or its error), without leaving listeners behind. */
function reply(worker, message) {
  return new Promise((resolve, reject) => {
    const onMessage = (value) => {
      worker.off("error", onError);
      resolve(value);
    };
    const onError = (error) => {
      worker.off("message", onMessage);
      reject(error);
    };
    worker.once("message", onMessage);
    worker.once("error", onError);
    if (message !== undefined) worker.postMessage(message);
  });
}

async function runSlice(workers, sliceMs) {
  const started = performance.now();
  const parts = await Promise.all(workers.map((w) => reply(w, sliceMs)));
  return { latencies: parts.flat(), elapsed: (performance.now() - started) / 1000 };
}

/** N connections (worker threads) on one file: the adapter and the floor, in alternating slices. */
async function benchConnections({ dir, synchronous, adapterName, durationMs, connections }) {
  const rows = [];
  for (const n of connections) {
    const adapterPath = join(dir, `threads-adapter-${synchronous}-${n}.db`);
    const floorPath = join(dir, `threads-floor-${synchronous}-${n}.db`);
    await new SqliteLedger({ path: adapterPath, synchronous }).close(); // schema before the race
    const setup = openRaw(floorPath, synchronous);
    floorStatements(setup, "floor");
    setup.close();
    const adapterWorkers = await startWorkers(n, { path: adapterPath, synchronous, kind: "adapter" });
    const floorWorkers = await startWorkers(n, { path: floorPath, synchronous, kind: "floor" });
    const acc = [{ latencies: [], elapsed: 0 }, { latencies: [], elapsed: 0 }];
    const slices = 10;
    for (let s = 0; s < slices; s++) {
      for (const [i, workers] of [adapterWorkers, floorWorkers].entries()) {
        const r = await runSlice(workers, durationMs / slices);
        acc[i].latencies.push(...r.latencies);
        acc[i].elapsed += r.elapsed;
      }
    }
    await Promise.all([...adapterWorkers, ...floorWorkers].map((w) => w.terminate()));
    const [adapter, floor] = acc.map((a) => {
      a.latencies.sort((x, y) => x - y);
      return { opsPerSec: Math.round(a.latencies.length / a.elapsed), p50us: Math.round(percentile(a.latencies, 50)), p99us: Math.round(percentile(a.latencies, 99)) };
    });
    rows.push(row(adapterName, `claim+complete (${n} connections)`, n, adapter, floor));
  }
  return rows;
}

/**
 * Rows for the adapter's default (synchronous=FULL: fsync per commit, declared durable)
 * and for synchronous=NORMAL (declared volatile), each against a floor with the same setting;
 * then both again with `groupCommit: true` (the writes of one event-loop turn in one transaction,
 * so one commit, one fsync at FULL, and each hot index leaf written once per batch: bench/HISTORY.md,
 * "the SQLite ledger's pages per transition"). The floor does not batch: it is the same floor.
 * Group commit batches one connection's writes, so its rows have no several-connection workload.
 */
export async function bench({ durationMs = 3000, concurrencies = [1, 16, 64], connections = [2, 4], modes = ["FULL", "NORMAL"], groupCommit = [false, true] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "ledger-sqlite-bench-"));
  try {
    const rows = [];
    for (const group of groupCommit) {
      for (const synchronous of modes) {
        const settings = [...(synchronous === "FULL" ? [] : [`synchronous=${synchronous}`]), ...(group ? ["groupCommit"] : [])];
        const adapterName = settings.length === 0 ? "ledger-sqlite" : `ledger-sqlite (${settings.join(", ")})`;
        rows.push(...(await benchMode({ dir, synchronous, groupCommit: group, adapterName, durationMs, concurrencies })));
        if (!group) rows.push(...(await benchConnections({ dir, synchronous, adapterName, durationMs, connections })));
      }
    }
    return rows;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function printTable(rows) {
  const header = ["adapter", "workload", "conc", "ops/s", "p50 µs", "p99 µs", "floor ops/s", "ratio"];
  const lines = rows.map((r) => [r.adapter, r.workload, r.concurrency, r.opsPerSec, r.p50us, r.p99us, r.floorOpsPerSec, r.ratio.toFixed(2)].map(String));
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (cells) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  console.log(fmt(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const l of lines) console.log(fmt(l));
}

if (!isMainThread && workerData?.ledgerSqliteBench) {
  await connectionWorker(workerData.ledgerSqliteBench);
} else if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  const durationIndex = args.indexOf("--duration");
  const durationMs = durationIndex >= 0 ? Number(args[durationIndex + 1]) : 3000;
  const rows = await bench({ durationMs });
  if (args.includes("--json")) console.log(JSON.stringify(rows, null, 2));
  else printTable(rows);
}
