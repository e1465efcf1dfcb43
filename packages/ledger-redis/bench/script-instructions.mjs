// Benchmark (not a test): the instructions redis-server runs (user space, callgrind's Ir: the same
// on a quiet and a loaded machine, unlike times) per call of each script path: a claim that creates
// its row, a finish (complete) of it, a race's loser on a live row, a replay on a completed row.
// Beside them, an EVALSHA of `return 1` with the same arguments (the fixed cost of a script call)
// and the least a script ledger could do (TIME + SET NX GET; TIME + GET + SET PX, no index, no
// checks). Needs valgrind; starts its own redis-server under callgrind on port 6398, 1,000 calls each.
//   node bench/script-instructions.mjs                    this build (dist/)
//   BASE=path/to/other/dist/index.js node bench/...     also another build ("base"), e.g. main's
import { spawn } from "node:child_process";
import { readFileSync, rmSync, readdirSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { tmpdir } from "node:os";
import { pathToFileURL } from "node:url";
import { Redis } from "ioredis";
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';
const RESULT = '{"payment_id":"pay_0123456789","status":"succeeded","amount":4200,"currency":"eur"}';
const N = Number(process.env.N ?? 1000);
const cur = await import(new URL("../dist/index.js", import.meta.url).href);
const base = process.env.BASE ? await import(pathToFileURL(resolve(process.env.BASE)).href) : undefined;
const MIN_CLAIM = `local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) local nows = string.format('%d', now) local lease = string.format('%d', now + tonumber(ARGV[4])) local old = redis.pcall('SET', KEYS[1], '{"v":1,"state":"in_flight","fence":1,"claimedAt":' .. nows .. ',"requestBytes":' .. #ARGV[6] .. ',"leaseExpiresAt":' .. lease .. ',"claim":"' .. ARGV[7] .. '","effect":"' .. ARGV[2] .. '","toolName":' .. ARGV[1] .. '}\\n' .. ARGV[6] .. ARGV[3], 'NX', 'GET') return {'claimed', '1', lease, 0}`;
const MIN_FINISH = `local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) local old = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], old .. ARGV[4], 'PX', ARGV[3]) return {'ok', '1'}`;
const variants = { "return 1": ["return 1", "return 1"], least: [MIN_CLAIM, MIN_FINISH], ...(base ? { base: [base.CLAIM_LUA, base.FINISH_LUA] } : {}), "this build": [cur.CLAIM_LUA, cur.FINISH_LUA] };
const only = process.env.V ? process.env.V.split(",") : Object.keys(variants);
for (const name of only) {
  const [claim, finish] = variants[name];
  const out = join(tmpdir(), `ledger-redis-callgrind-${process.pid}-${name.replace(/\W/g, "_")}.out`);
  const server = spawn("valgrind", ["--tool=callgrind", `--callgrind-out-file=${out}`, "redis-server", "--port", "6398", "--save", "", "--appendonly", "no"], { stdio: "ignore" });
  const exited = new Promise((r) => server.on("exit", r));
  const c = new Redis("redis://127.0.0.1:6398", { retryStrategy: () => 200 }); c.on("error", () => {});
  while (true) { try { await c.ping(); break; } catch { await new Promise((r) => setTimeout(r, 200)); } }
  const sc = /** @type {string} */ (await c.script("LOAD", claim)), sf = /** @type {string} */ (await c.script("LOAD", finish));
  const keys = (p, i) => [`p:{${p}${i}}`, `p:{${p}${i}}:inflight`, `p:{${p}${i}}:audit`, `p:{${p}${i}}:retired`];
  const claimOp = (p, i, tok = `tok.${i}`) => c.evalsha(sc, 4, ...keys(p, i), '"send_payment"', "keyed_write", "bench", "30000", "60000", REQUEST, tok, "");
  const finishOp = (p, i) => c.evalsha(sf, 3, ...keys(p, i).slice(0, 3), "1", "completed", "60000", RESULT);
  const run = async (f) => { let i = 0; await Promise.all(Array.from({ length: 16 }, async () => { while (i < N) await f(i++); })); };
  for (let i = 0; i < 200; i++) { await claimOp("w", i); await finishOp("w", i); }
  const ctl = (a) => new Promise((r) => spawn("callgrind_control", [a, String(server.pid)], { stdio: "ignore" }).on("exit", r));
  await ctl("-z"); await run((i) => claimOp("m", i)); await ctl("-d");
  await run((i) => finishOp("m", i)); await ctl("-d");
  // contention loser: claim an existing live row
  for (let i = 0; i < 50; i++) await claimOp("l", i);
  await ctl("-z"); await run((i) => claimOp("l", i % 50, `lose.${i}`)); await ctl("-d");
  await run((i) => claimOp("m", i, `replay.${i}`)); await ctl("-d");
  await c.shutdown("NOSAVE").catch(() => {}); c.disconnect(); await exited;
  const ir = (k) => { const f = `${out}.${k}`; const m = readFileSync(f, "utf8").match(/^summary: (\d+)/m); return Number(m[1]) / N; };
  console.log(`${name.padEnd(10)} Ir per call: claim (new row) ${ir(1).toFixed(0)}  finish ${ir(2).toFixed(0)}  claim+finish ${(ir(1) + ir(2)).toFixed(0)}  claim (live row, loser) ${ir(3).toFixed(0)}  claim (completed row, replay) ${ir(4).toFixed(0)}`);
  for (const f of readdirSync(tmpdir()).filter((f) => f.startsWith(basename(out)))) rmSync(join(tmpdir(), f));
}
