// Where does the time of one sequential (concurrency 1) claim go? Compares a plain SET,
// EVALSHA of a one-call script, EVALSHA of the claim script (ioredis evalsha), and ledger.claim.
import { Redis } from "ioredis";
import { RedisLedger, CLAIM_LUA } from "../dist/index.js";
// A typical stored request (LEDGER-21): the JCS text of a payment call's arguments, 55 bytes.
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';
const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const c = new Redis(url);
const prefix = `do-lat-${process.pid}`;
const ledger = new RedisLedger({ url, prefix, retentionMs: 60_000, allowShortRetentionForTests: true });
const shaSet = /** @type {string} */ (await c.script("LOAD", "return redis.call('SET', KEYS[1], ARGV[1], 'NX')"));
const shaClaim = /** @type {string} */ (await c.script("LOAD", CLAIM_LUA));
let n = 0;
const probes = {
  set: () => c.set(`${prefix}:s${n++}`, "x", "NX"),
  evalshaSet: () => c.evalsha(shaSet, 1, `${prefix}:e${n++}`, "x"),
  evalshaClaim: () => {
    const key = `c${n++}`;
    // The claim script's keys and arguments as RedisLedger.claim sends them (scripts V7: row,
    // in-flight index, audit trail, retired ids; no claim id, so no retired-id lookup).
    const index = ledger.inflightIndexKey(key);
    return c.evalsha(shaClaim, 4, ledger.redisKey(key), index, `${ledger.redisKey(key)}:audit`, index.replace(/inflight$/, "retired"), '"send_payment"', "keyed_write", "owner", "30000", "60000", REQUEST, `probe.${n}`, "");
  },
  ledgerClaim: () => ledger.claim({ key: `l${n++}`, toolName: "send_payment", effect: "keyed_write", owner: "owner", leaseMs: 30000, request: REQUEST }),
};
const res = {};
for (let round = 0; round < 5; round++) for (const [name, f] of Object.entries(probes)) {
  const lat = [];
  for (let i = 0; i < 2000; i++) { const t0 = process.hrtime.bigint(); await f(); lat.push(Number(process.hrtime.bigint() - t0) / 1000); }
  lat.sort((a, b) => a - b);
  (res[name] ??= []).push(lat[1000]);
}
for (const [k, v] of Object.entries(res)) console.log(k.padEnd(14), "p50 per round (µs):", v.map((x) => x.toFixed(0)).join(" "));
let cursor = "0";
do { const [nx, keys] = await c.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 2000); cursor = nx; if (keys.length) await c.unlink(...keys); } while (cursor !== "0");
await ledger.close(); c.disconnect();
