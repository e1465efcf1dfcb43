// `pnpm bench --rows N`: claim latency as the ledger table grows. Two tables per store, one
// filled with 10,000 finished rows and one with N, measured in interleaved slices of
// claim+complete of new keys (one at a time), so load from other jobs falls on both alike.
// Fill rows look like real ones: random 32-hex-digit keys (SHA-256 prefixes are uniformly
// spread over the key index), a stored request and a result. A benchmark: asserts nothing.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const require = createRequire(join(here, "package.json"));
const BASE_ROWS = 10_000;
const FILL_CHUNK = 200_000;
const REQUEST = '{"amount":12500,"currency":"EUR","memo":"invoice 7","payee":"acme-supplies","reference":"T-1"}';
const RESULT = '{"paymentId":"pay_0123456789","status":"accepted"}';

const sqlText = (s) => `'${s.replace(/'/g, "''")}'`;

function percentile(sorted, p) {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Interleaved slices of claim+complete, `sliceMs` each (at least 20 calls), on the small and the large ledger. */
async function compare(small, large, { slices = 6, sliceMs = 1_500 } = {}) {
  const lat = { small: [], large: [] };
  let n = 0;
  const once = async (ledger, into) => {
    const key = `b${process.pid}x${n++}x${randomBytes(6).toString("hex")}`;
    const t0 = process.hrtime.bigint();
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "bench", leaseMs: 30_000, request: REQUEST });
    await ledger.complete(key, claim.fence, RESULT);
    into.push(Number(process.hrtime.bigint() - t0) / 1000);
  };
  const slice = async (ledger, into) => {
    const end = performance.now() + sliceMs;
    for (let i = 0; i < 20 || performance.now() < end; i++) await once(ledger, into);
  };
  for (let i = 0; i < 20; i++) {
    await once(small, []);
    await once(large, []);
  }
  for (let s = 0; s < slices; s++) {
    await slice(small, lat.small);
    await slice(large, lat.large);
  }
  const stats = (xs) => {
    const sorted = [...xs].sort((a, b) => a - b);
    return { p50us: Math.round(percentile(sorted, 50)), p99us: Math.round(percentile(sorted, 99)), meanUs: Math.round(xs.reduce((a, b) => a + b, 0) / xs.length) };
  };
  const a = stats(lat.small);
  const b = stats(lat.large);
  return { at10k: a, atN: b, p50Ratio: Number((b.p50us / a.p50us).toFixed(2)), meanRatio: Number((b.meanUs / a.meanUs).toFixed(2)) };
}

async function sqliteRows(rows, log) {
  const { SqliteLedger } = await import(pathToFileURL(join(root, "packages", "ledger-sqlite", "dist", "index.js")).href);
  const dir = mkdtempSync(join(tmpdir(), "do-rows-"));
  // synchronous=NORMAL: with FULL every commit waits for an fsync of a few ms on this disk, and
  // that noise would hide what the table size does; the statements are the same.
  const open = (name) => new SqliteLedger({ path: join(dir, `${name}.db`), synchronous: "NORMAL" });
  const small = open("small");
  const large = open("large");
  try {
    const fill = (ledger, count) => {
      const table = "dispatch_once_ledger";
      const now = Date.now();
      // The fill alone gets a page cache big enough for the key index (SQLite's default is 2 MB,
      // and random keys then make nearly every insert a cache miss). Still, each chunk dirties
      // most pages of that index, which go to the WAL and back: 10M rows took 46 min at load
      // 10-30 (2 cores). Put back before measuring, and the WAL the fill left checkpointed away,
      // so the claims run with the ledger's own settings, not through a WAL of a bulk load.
      const cacheSize = ledger.database.pragma("cache_size", { simple: true });
      ledger.database.pragma("cache_size = -2000000");
      for (let done = 0; done < count; done += FILL_CHUNK) {
        const chunk = Math.min(FILL_CHUNK, count - done);
        ledger.database.exec(`INSERT INTO "${table}" (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, request, result)
          WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ${chunk})
          SELECT lower(hex(randomblob(16))), 1, 'completed', 'send_payment', 'keyed_write', 1, ${now}, ${now}, ${now + 86_400_000}, ${sqlText(REQUEST)}, ${sqlText(RESULT)} FROM c`);
        log(`sqlite: ${done + chunk} of ${count} rows`);
      }
      ledger.database.pragma(`cache_size = ${cacheSize}`);
      ledger.database.pragma("wal_checkpoint(TRUNCATE)");
    };
    fill(small, BASE_ROWS);
    fill(large, rows);
    return { store: "sqlite", rows, synchronous: "NORMAL", ...(await compare(small, large)) };
  } finally {
    await small.close();
    await large.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function postgresRows(rows, log, url) {
  const { PostgresLedger } = await import(pathToFileURL(join(root, "packages", "ledger-postgres", "dist", "index.js")).href);
  const pg = require("pg");
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const suffix = randomBytes(4).toString("hex");
  const schemas = { small: `do_rows_small_${suffix}`, large: `do_rows_large_${suffix}` };
  try {
    const ledgers = {};
    for (const [name, schema] of Object.entries(schemas)) {
      ledgers[name] = new PostgresLedger({ pool, schema });
      await ledgers[name].migrate();
    }
    const fill = async (schema, count) => {
      for (let done = 0; done < count; done += FILL_CHUNK) {
        const chunk = Math.min(FILL_CHUNK, count - done);
        await pool.query(`INSERT INTO "${schema}".dispatch_once_ledger (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, request, result)
          SELECT md5(random()::text || g::text), 1, 'completed', 'send_payment', 'keyed_write', 1, now_ms, now_ms, now_ms + 86400000, $1, $2
          FROM generate_series(1, ${chunk}) AS g, (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) AS t
          -- each chunk's keys in key order: uniformly spread over the index like random ones,
          -- but the chunk walks it once instead of hitting a random page per row
          ORDER BY 1
          ON CONFLICT (key) DO NOTHING`, [REQUEST, RESULT]);
        log(`postgres: ${done + chunk} of ${count} rows`);
      }
      await pool.query(`VACUUM ANALYZE "${schema}".dispatch_once_ledger`);
    };
    await fill(schemas.small, BASE_ROWS);
    await fill(schemas.large, rows);
    return { store: "postgres", rows, synchronous: null, ...(await compare(ledgers.small, ledgers.large)) };
  } finally {
    for (const schema of Object.values(schemas)) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await pool.end();
  }
}

export async function benchRows({ rows, stores = ["sqlite", "postgres"], url = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test", log = () => {} }) {
  const out = [];
  for (const store of stores) {
    const started = Date.now();
    const row = store === "sqlite" ? await sqliteRows(rows, log) : await postgresRows(rows, log, url);
    out.push({ ...row, seconds: Math.round((Date.now() - started) / 1000) });
  }
  return out;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  // node bench/rows.mjs [N] [sqlite,postgres]
  const stores = process.argv[3]?.split(",");
  console.log(JSON.stringify(await benchRows({ rows: Number(process.argv[2] ?? 100_000), stores, log: (m) => process.stderr.write(`${m}\n`) }), null, 2));
}
