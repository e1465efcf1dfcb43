// Benchmark (not a test) of @dispatch-once/ledger-postgres against its floor, measured in
// the same run: the same workload done with PostgreSQL's raw primitive alone
// (INSERT ... ON CONFLICT DO NOTHING RETURNING, then UPDATE), also as named prepared
// statements over the same pool size. Adapter and floor run in interleaved slices so a
// noisy neighbour on the shared machine hurts both alike.
//
//   node bench/bench.mjs [--json] [--duration 3000] [--concurrency 1,16,64]
//
// Needs the built package (pnpm --filter @dispatch-once/ledger-postgres build) and
// DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test). Everything it creates
// lives in a fresh schema do_bench_<random>, dropped at the end.
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { PostgresLedger } from "../dist/index.js";

const ADAPTER = "ledger-postgres";
/** Adapter and floor alternate in slices of about this many ms, so load drift hits both alike. */
const SLICE_MS = 250;
/** Connections per measurement: min(concurrency, this). The server is shared (max_connections 100). */
const MAX_CONNECTIONS = 32;
const RESULT = JSON.stringify({ ok: true, id: "pay_0123456789", amount: 1250, currency: "EUR" });
/** The call's arguments as the dispatcher passes them (LEDGER-21: stored with every claim). */
const REQUEST = '{"amount":1250,"currency":"eur","to":"acct_1J2K3L4M"}';

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Run `op` from `concurrency` loops for `ms`; returns ops and latency samples (ns). */
async function drive(concurrency, ms, op) {
  const latencies = [];
  const deadline = performance.now() + ms;
  let ops = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const t0 = process.hrtime.bigint();
        await op();
        latencies.push(Number(process.hrtime.bigint() - t0));
        ops++;
      }
    }),
  );
  return { ops, seconds: (performance.now() - started) / 1000, latencies };
}

function summarise(parts) {
  const ops = parts.reduce((s, p) => s + p.ops, 0);
  const seconds = parts.reduce((s, p) => s + p.seconds, 0);
  const lat = parts.flatMap((p) => p.latencies).sort((a, b) => a - b);
  return {
    opsPerSec: Math.round(ops / seconds),
    p50us: Math.round(percentile(lat, 50) / 1000),
    p99us: Math.round(percentile(lat, 99) / 1000),
  };
}

/** Measure two ops in interleaved slices (floor, adapter, floor, adapter, ...). */
async function compare(concurrency, durationMs, floorOp, adapterOp) {
  const warm = Math.min(300, durationMs / 5);
  await drive(concurrency, warm, floorOp);
  await drive(concurrency, warm, adapterOp);
  const floor = [];
  const adapter = [];
  const slices = Math.max(2, Math.round(durationMs / SLICE_MS));
  for (let i = 0; i < slices; i++) {
    // Alternate which goes first, so neither always follows the other's checkpoint or vacuum.
    const pair = i % 2 === 0 ? [[floor, floorOp], [adapter, adapterOp]] : [[adapter, adapterOp], [floor, floorOp]];
    for (const [into, op] of pair) into.push(await drive(concurrency, durationMs / slices, op));
  }
  return { floor: summarise(floor), adapter: summarise(adapter) };
}

function row(workload, concurrency, connections, m) {
  return {
    adapter: ADAPTER,
    workload,
    concurrency,
    connections,
    opsPerSec: m.adapter.opsPerSec,
    p50us: m.adapter.p50us,
    p99us: m.adapter.p99us,
    floorOpsPerSec: m.floor.opsPerSec,
    floorP50us: m.floor.p50us,
    ratio: Math.round((m.adapter.opsPerSec / m.floor.opsPerSec) * 100) / 100,
  };
}

export async function bench({
  durationMs = 3000,
  concurrencies = [1, 16, 64],
  connectionString = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
} = {}) {
  const schema = `do_bench_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Pool({ connectionString, max: 1 });
  const rows = [];
  try {
    await admin.query(`CREATE SCHEMA ${schema}`);
    await admin.query(
      `CREATE TABLE ${schema}.floor (key text COLLATE "C" PRIMARY KEY, state text NOT NULL, result text)`,
    );
    await new PostgresLedger({ pool: admin, schema }).migrate();
    const floorInsert = {
      name: `bench_floor_insert_${schema}`,
      text: `INSERT INTO ${schema}.floor (key, state) VALUES ($1, 'in_flight') ON CONFLICT DO NOTHING RETURNING key`,
    };
    const floorUpdate = {
      name: `bench_floor_update_${schema}`,
      text: `UPDATE ${schema}.floor SET state = 'completed', result = $2 WHERE key = $1`,
    };
    // Real keys are 32 hex digits of a SHA-256: spread over the primary key, not appended.
    const nextKey = () => randomBytes(16).toString("hex");

    for (const concurrency of concurrencies) {
      const connections = Math.min(concurrency, MAX_CONNECTIONS);
      // Diagnostic only (BENCH_ASYNC_COMMIT=1): take the WAL flush out of both sides to see
      // the CPU cost alone. Never how the ledger should run (it would be volatile).
      const asyncCommit = process.env.BENCH_ASYNC_COMMIT === "1" ? { options: "-c synchronous_commit=off" } : {};
      const pool = new pg.Pool({ connectionString, max: connections, ...asyncCommit });
      pool.on("error", () => {});
      const ledger = new PostgresLedger({ pool, schema });
      try {
        // claim + complete on distinct keys: the path every first call of a write tool takes.
        const m = await compare(
          concurrency,
          durationMs,
          async () => {
            const key = nextKey();
            const { rowCount } = await pool.query({ ...floorInsert, values: [key] });
            if (rowCount !== 1) throw new Error("floor insert did not insert");
            await pool.query({ ...floorUpdate, values: [key, RESULT] });
          },
          async () => {
            const key = nextKey();
            const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
            if (claim.outcome !== "claimed") throw new Error("adapter claim did not win");
            await ledger.complete(key, claim.fence, RESULT);
          },
        );
        rows.push(row("claim+complete", concurrency, connections, m));

        // Same-key contention: `concurrency` claimers of one fresh key per round, one winner.
        // An op is one round; its latency is the slowest claimer's.
        if (concurrency > 1) {
          const contention = await compare(
            1,
            durationMs,
            async () => {
              const key = nextKey();
              const won = await Promise.all(
                Array.from({ length: concurrency }, () => pool.query({ ...floorInsert, values: [key] })),
              );
              const winners = won.filter((r) => r.rowCount === 1).length;
              if (winners !== 1) throw new Error(`floor: ${winners} winners`);
              await pool.query({ ...floorUpdate, values: [key, RESULT] });
            },
            async () => {
              const key = nextKey();
              const claims = await Promise.all(
                Array.from({ length: concurrency }, (_, i) =>
                  ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: `c${i}`, leaseMs: 30_000, request: REQUEST }),
                ),
              );
              const winners = claims.filter((c) => c.outcome === "claimed");
              if (winners.length !== 1) throw new Error(`adapter: ${winners.length} winners`);
              await ledger.complete(key, winners[0].fence, RESULT);
            },
          );
          rows.push(row(`same-key contention (${concurrency} claimers/round)`, concurrency, connections, contention));
        }
      } finally {
        await pool.end();
      }
    }
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
    await admin.end();
  }
  return rows;
}

function table(rows) {
  const cols = ["workload", "concurrency", "connections", "opsPerSec", "p50us", "p99us", "floorOpsPerSec", "floorP50us", "ratio"];
  const cells = [cols, ...rows.map((r) => cols.map((c) => String(r[c])))];
  const widths = cols.map((_, i) => Math.max(...cells.map((line) => line[i].length)));
  return cells.map((line) => line.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ")).join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const value = (flag) => {
    const i = args.indexOf(flag);
    return i === -1 ? undefined : args[i + 1];
  };
  const options = {};
  if (value("--duration") !== undefined) options.durationMs = Number(value("--duration"));
  if (value("--concurrency") !== undefined) options.concurrencies = value("--concurrency").split(",").map(Number);
  const rows = await bench(options);
  if (args.includes("--json")) console.log(JSON.stringify(rows, null, 2));
  else {
    console.log(`${ADAPTER}: claim+complete vs INSERT ... ON CONFLICT DO NOTHING RETURNING + UPDATE (same run)`);
    console.log(table(rows));
  }
}
