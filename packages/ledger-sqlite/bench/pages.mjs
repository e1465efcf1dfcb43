// Where the SQLite ledger's cost above its floor goes, in WAL pages written (not a test).
// Run: node bench/pages.mjs [--n 20000] [--reps 5] [--sync NORMAL,FULL] [--page-sizes 4096,...]
//        [--variants floor,ledger,...] [--frames-only] [--cpu-only] [--autocheckpoint default,4000,...]
//        [--cache-size default,-2000,...] [--concurrency 1]
// (build first: pnpm build)
//
// Two kinds of run, on fresh files, N claim+complete pairs on fresh keys each:
// - frames (deterministic): wal_autocheckpoint=0, the -wal file's size read after every statement,
//   a TRUNCATE checkpoint every 1000 pairs (outside the counted deltas): WAL frames per claim and
//   per complete. Every commit appends each page it dirtied, whole (page_size + a 24-byte header).
// - cpu (noisy on a shared host): the file's ordinary settings (wal_autocheckpoint 1000 unless
//   --autocheckpoint), user and sys CPU (process.cpuUsage), wall, and the bytes and write calls
//   this process made (/proc/self/io wchar, syscw: WAL frames plus checkpoint copies), repeated
//   --reps times with the variants alternating; medians and ranges.
//
// Variants: "floor" (bench.mjs's: key TEXT PRIMARY KEY, state, result; INSERT OR IGNORE + UPDATE),
// "ledger" (SqliteLedger from dist, default options: it creates its own schema), and "ledger-no-X"
// (the ledger's schema, schemaSql(), with secondary index X dropped before SqliteLedger opens the
// file with migrate: false: the ledger's own statements on a table without that index; X one of
// in_flight, by_state, by_tool, by_conversation, or "all" for the four). Attribution only: every
// index backs a rule, none is proposed for removal. "ledger-group" is the ledger with its
// documented groupCommit option (it only batches when --concurrency is above 1).
// With --concurrency above 1 the calls interleave, so frames are counted per pair only.
//
// Claims are shaped as the dispatcher sends them (core's claimRequest): a 64-hex key, the
// request text, a fresh claim id (16 random bytes, base64url), conversationId and turnIndex.
// Conversations: 1000 live ones (random UUIDs), call i belongs to conversation i mod 1000, turn
// floor(i / 1000): the by_conversation index receives entries all over its key range, as a
// service with many conversations in flight does.
import Database from "better-sqlite3";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqliteLedger, schemaSql } from "../dist/index.js";

const RESULT = JSON.stringify({ payment_id: "pay_0001", amount: 1250, currency: "EUR", status: "succeeded" });
const REQUEST = '{"amount":1250,"currency":"eur","to":"acct_1J2K3L4M"}';
const TABLE = "dispatch_once_ledger";
const INDEXES = ["in_flight", "by_state", "by_tool", "by_conversation"];
const CONVERSATIONS = 1000;

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const N = Number(arg("n", "20000"));
const REPS = Number(arg("reps", "5"));
const SYNCS = arg("sync", "NORMAL,FULL").split(",");
const PAGE_SIZES = arg("page-sizes", "4096").split(",").map(Number);
const VARIANTS = arg("variants", "floor,ledger").split(",");
/** Lists: each combination is measured, alternating within each repetition ("default" leaves the setting alone). */
const AUTOCHECKPOINTS = arg("autocheckpoint", "default").split(",");
const CACHE_SIZES = arg("cache-size", "default").split(",");
const SETTINGS = AUTOCHECKPOINTS.flatMap((autocheckpoint) => CACHE_SIZES.map((cacheSize) => ({ autocheckpoint, cacheSize })));
/** Async loops sharing one connection, each taking the next call (bench.mjs's "concurrency"). */
const CONCURRENCY = Number(arg("concurrency", "1"));
const FRAMES = !process.argv.includes("--cpu-only");
const CPU = !process.argv.includes("--frames-only");

/** The calls of one run, made before the clock starts. */
function workload(n) {
  const salt = randomBytes(8).toString("hex");
  const conversations = Array.from({ length: CONVERSATIONS }, () => randomUUID());
  return Array.from({ length: n }, (_, i) => ({
    key: createHash("sha256").update(`${salt}:${i}`).digest("hex"),
    claimId: randomBytes(16).toString("base64url"),
    conversationId: conversations[i % CONVERSATIONS],
    turnIndex: Math.floor(i / CONVERSATIONS),
  }));
}

/** A new file with the page size, WAL, and (for a ledger-no-X variant) the schema minus index X. */
function prepareFile(path, variant, pageSize) {
  const db = new Database(path);
  db.pragma(`page_size = ${pageSize}`);
  db.pragma("journal_mode = WAL");
  if (variant.startsWith("ledger-no-")) {
    db.exec(schemaSql(TABLE));
    const dropped = variant.slice("ledger-no-".length);
    for (const index of dropped === "all" ? INDEXES : [dropped]) {
      if (!INDEXES.includes(index)) throw new Error(`unknown index ${index}`);
      db.exec(`DROP INDEX "${TABLE}_${index}"`);
    }
  }
  if (db.pragma("page_size", { simple: true }) !== pageSize) throw new Error(`page_size ${pageSize} not applied`);
  db.close();
}

/** Opens a variant on a fresh file; returns { claim(call), complete(call, claimed), db, close() }. */
function open(dir, variant, synchronous, pageSize, run) {
  const path = join(dir, `${variant}-${synchronous}-${pageSize}-${run}.db`);
  prepareFile(path, variant, pageSize);
  if (variant === "floor") {
    const db = new Database(path, { timeout: 5000 });
    db.pragma("journal_mode = WAL");
    db.pragma(`synchronous = ${synchronous}`);
    db.exec("CREATE TABLE floor (key TEXT PRIMARY KEY, state TEXT NOT NULL, result TEXT)");
    const insert = db.prepare("INSERT OR IGNORE INTO floor (key, state) VALUES (?, 'in_flight')");
    const update = db.prepare("UPDATE floor SET state = 'completed', result = ? WHERE key = ?");
    return {
      path,
      db,
      claim: async (c) => {
        if (insert.run(c.key).changes !== 1) throw new Error(`floor key ${c.key} was not inserted`);
        return 1;
      },
      complete: async (c) => void update.run(RESULT, c.key),
      close: async () => db.close(),
    };
  }
  const group = variant === "ledger-group";
  const ledger = new SqliteLedger({ path, synchronous, migrate: variant === "ledger" || group, groupCommit: group });
  return {
    path,
    db: ledger.database,
    claim: async (c) => {
      const claim = await ledger.claim({
        key: c.key,
        toolName: "send_payment",
        effect: "keyed_write",
        owner: "pages-bench",
        leaseMs: 30_000,
        request: REQUEST,
        claimId: c.claimId,
        conversationId: c.conversationId,
        turnIndex: c.turnIndex,
      });
      if (claim.outcome !== "claimed") throw new Error(`key ${c.key} was not claimed`);
      return claim.fence;
    },
    complete: (c, fence) => ledger.complete(c.key, fence, RESULT),
    close: () => ledger.close(),
  };
}

function tune(db, { autocheckpoint, cacheSize }) {
  if (autocheckpoint !== "default") db.pragma(`wal_autocheckpoint = ${autocheckpoint}`);
  if (cacheSize !== "default") db.pragma(`cache_size = ${cacheSize}`);
}

/** Each run's files go when it ends, so no run shares the page cache's writeback with an earlier one's. */
function removeFiles(path) {
  for (const suffix of ["", "-wal", "-shm"]) rmSync(`${path}${suffix}`, { force: true });
}

function walSize(path) {
  return existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0;
}

/**
 * Frames per claim and per complete, counted from the -wal file's growth (no checkpoint inside a
 * delta), and which B-tree each frame's page belongs to (the frame header's page number, looked
 * up in dbstat before the WAL is checkpointed away).
 */
async function framesRun(dir, variant, synchronous, pageSize, calls) {
  const target = open(dir, variant, synchronous, pageSize, "frames");
  target.db.pragma("wal_autocheckpoint = 0");
  const frame = pageSize + 24;
  const counts = { claim: 0, complete: 0 };
  const byTree = { claim: new Map(), complete: new Map() };
  let spans = [];
  const attribute = () => {
    if (spans.length === 0) return;
    const rows = /** @type {{ pageno: number, name: string }[]} */ (target.db.prepare("SELECT pageno, name FROM dbstat").all());
    const owner = new Map(rows.map((r) => [r.pageno, r.name]));
    const wal = readFileSync(`${target.path}-wal`);
    for (const [from, to, kind] of spans) {
      // A span starts after the 32-byte WAL header; each frame is a 24-byte header (page number first) and the page.
      for (let at = Math.max(from, 32); at < to; at += frame) {
        const name = (owner.get(wal.readUInt32BE(at)) ?? "(free/new)").replace(`sqlite_autoindex_${TABLE}_1`, "key (UNIQUE)").replace(`${TABLE}_`, "").replace(TABLE, "table").replace("sqlite_autoindex_floor_1", "key (PRIMARY KEY)").replace("sqlite_schema", "page 1");
        byTree[kind].set(name, (byTree[kind].get(name) ?? 0) + 1);
        counts[kind]++;
      }
    }
    spans = [];
  };
  if (CONCURRENCY > 1) {
    // Interleaved calls: only the total is counted (the WAL's growth between TRUNCATE checkpoints).
    let next = 0;
    let done = 0;
    let total = 0;
    const drain = () => {
      total += Math.max(0, walSize(target.path) - 32) / frame;
      target.db.pragma("wal_checkpoint(TRUNCATE)");
    };
    drain();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < calls.length) {
          const call = calls[next++];
          await target.complete(call, await target.claim(call));
          if (++done % 1000 === 0) drain();
        }
      }),
    );
    drain();
    const fileBytes = statSync(target.path).size;
    await target.close();
    removeFiles(target.path);
    if (!Number.isInteger(total)) throw new Error("WAL growth is not whole frames");
    return { claim: NaN, complete: NaN, pair: total / calls.length, dbPages: fileBytes / pageSize, claimTrees: "(interleaved)", completeTrees: "(interleaved)" };
  }
  for (let i = 0; i < calls.length; i++) {
    if (i % 1000 === 0) {
      attribute();
      target.db.pragma("wal_checkpoint(TRUNCATE)");
    }
    const w0 = walSize(target.path);
    const fence = await target.claim(calls[i]);
    const w1 = walSize(target.path);
    await target.complete(calls[i], fence);
    const w2 = walSize(target.path);
    spans.push([w0, w1, "claim"], [w1, w2, "complete"]);
    for (const [from, to] of [[w0, w1], [w1, w2]]) {
      if ((to - Math.max(from, 32)) % frame !== 0) throw new Error("WAL growth is not whole frames");
    }
  }
  attribute();
  const fileBytes = statSync(target.path).size;
  await target.close();
  removeFiles(target.path);
  const n = calls.length;
  const per = (kind) => [...byTree[kind]].sort((a, b) => b[1] - a[1]).map(([name, c]) => `${name} ${fmt(c / n, 2)}`).join(", ");
  return { claim: counts.claim / n, complete: counts.complete / n, pair: (counts.claim + counts.complete) / n, dbPages: fileBytes / pageSize, claimTrees: per("claim"), completeTrees: per("complete") };
}

function procIo() {
  const text = readFileSync("/proc/self/io", "utf8");
  const get = (name) => Number(new RegExp(`^${name}: (\\d+)`, "m").exec(text)[1]);
  return { wchar: get("wchar"), syscw: get("syscw") };
}

async function cpuRun(dir, variant, synchronous, pageSize, setting, calls, run) {
  const target = open(dir, variant, synchronous, pageSize, run);
  tune(target.db, setting);
  const io0 = procIo();
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < calls.length) {
        const call = calls[next++];
        await target.complete(call, await target.claim(call));
      }
    }),
  );
  const wall = Number(process.hrtime.bigint() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const io1 = procIo();
  await target.close();
  removeFiles(target.path);
  const n = calls.length;
  return { user: cpu.user / n, sys: cpu.system / n, wall: wall / n, wchar: (io1.wchar - io0.wchar) / n, syscw: (io1.syscw - io0.syscw) / n };
}

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const fmt = (x, d = 1) => x.toFixed(d);
const spread = (values, d = 1) => `${fmt(median(values), d)} (${fmt(Math.min(...values), d)}-${fmt(Math.max(...values), d)})`;

const dir = mkdtempSync(join(tmpdir(), "ledger-sqlite-pages-"));
try {
  console.log(`# N=${N} pairs per run, concurrency ${CONCURRENCY}, reps=${REPS}, ${new Date().toISOString()}, wal_autocheckpoint ${AUTOCHECKPOINTS.join("/")}, cache_size ${CACHE_SIZES.join("/")} (cpu runs)`);
  if (FRAMES) {
    console.log("\n## WAL frames per operation (wal_autocheckpoint=0; deterministic up to B-tree splits)");
    console.log("| variant | page size | frames/claim | frames/complete | frames/pair | WAL KiB/pair | db pages at end |");
    console.log("|---|---|---|---|---|---|---|");
    const trees = [];
    for (const pageSize of PAGE_SIZES) {
      for (const variant of VARIANTS) {
        const f = await framesRun(dir, variant, "NORMAL", pageSize, workload(N));
        const pair = f.pair;
        console.log(`| ${variant} | ${pageSize} | ${Number.isNaN(f.claim) ? "-" : fmt(f.claim, 2)} | ${Number.isNaN(f.complete) ? "-" : fmt(f.complete, 2)} | ${fmt(pair, 2)} | ${fmt((pair * (pageSize + 24)) / 1024, 1)} | ${f.dbPages} |`);
        if (!Number.isNaN(f.claim)) trees.push(`- ${variant}, ${pageSize}: claim: ${f.claimTrees}; complete: ${f.completeTrees}`);
      }
    }
    console.log("\nFrames per operation by B-tree (the page's owner in dbstat):");
    for (const line of trees) console.log(line);
  }
  if (CPU) {
    for (const synchronous of SYNCS) {
      const results = new Map();
      for (let r = 0; r < REPS; r++) {
        for (const setting of SETTINGS) {
          for (const pageSize of PAGE_SIZES) {
            for (const variant of VARIANTS) {
              const id = `${variant}|${pageSize}|${setting.autocheckpoint}|${setting.cacheSize}`;
              if (!results.has(id)) results.set(id, []);
              results.get(id).push(await cpuRun(dir, variant, synchronous, pageSize, setting, workload(N), `${r}-${setting.autocheckpoint}-${setting.cacheSize}`));
            }
          }
        }
      }
      console.log(`\n## synchronous=${synchronous}: per claim+complete pair, median (min-max) of ${REPS} runs`);
      console.log("| variant | page size | wal_autocheckpoint | cache_size | user µs | sys µs | user+sys µs | wall µs | bytes written | write calls |");
      console.log("|---|---|---|---|---|---|---|---|---|---|");
      for (const [id, runs] of results) {
        const [variant, pageSize, autocheckpoint, cacheSize] = id.split("|");
        const col = (k, d) => spread(runs.map((x) => x[k]), d);
        console.log(`| ${variant} | ${pageSize} | ${autocheckpoint} | ${cacheSize} | ${col("user")} | ${col("sys")} | ${spread(runs.map((x) => x.user + x.sys))} | ${col("wall")} | ${fmt(median(runs.map((x) => x.wchar)), 0)} | ${fmt(median(runs.map((x) => x.syscw)), 1)} |`);
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
