// MEMORY USAGE of one row in each state (for the README's sizing section).
import { Redis } from "ioredis";
import { LEDGER_REDIS_OPTIONS, RedisLedger } from "../dist/index.js";
// A typical stored request (LEDGER-21): the JCS text of a payment call's arguments, 55 bytes.
const REQUEST = '{"amount":4200,"currency":"eur","to":"acct_0123456789"}';
const url = process.argv[2] ?? process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const client = new Redis(url, { ...LEDGER_REDIS_OPTIONS });
const prefix = `do-mem-${process.pid}`;
const ledger = new RedisLedger({ client, prefix });
const key = (i) => `${i}`.padStart(32, "0"); // a real key is 32 hex digits
const usage = async (k) => client.memory("USAGE", ledger.redisKey(k), "SAMPLES", "0");
const out = {};
await ledger.claim({ key: key(1), toolName: "send_payment", effect: "keyed_write", owner: "pid-12345:attempt-2", leaseMs: 30000, request: REQUEST });
out.in_flight = await usage(key(1));
for (const [name, size] of /** @type {[string, number][]} */ ([["completed_100B", 100], ["completed_1KiB", 1024], ["completed_10KiB", 10240]])) {
  const k = key(size);
  const c = await ledger.claim({ key: k, toolName: "send_payment", effect: "keyed_write", owner: "pid-12345:attempt-2", leaseMs: 30000, request: REQUEST });
  await ledger.complete(k, fenceOf(c), JSON.stringify({ payment_id: "pay_1", pad: "x".repeat(size - 30) }));
  out[name] = await usage(k);
}
const f = await ledger.claim({ key: key(2), toolName: "send_payment", effect: "keyed_write", owner: "o", leaseMs: 30000, request: REQUEST });
await ledger.fail(key(2), fenceOf(f), { name: "CardDeclined", message: "card declined", code: "card_declined" });
out.failed = await usage(key(2));
await ledger.release(key(1), 1);
out.released = await usage(key(1));
console.log(JSON.stringify(out));
let cursor = "0";
do { const [n, keys] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000); cursor = n; if (keys.length) await client.del(...keys); } while (cursor !== "0");
await client.quit();

/** The fence of a fresh claim: every bench key is new, so any other outcome is a bench bug. */
function fenceOf(claim) {
  if (claim.outcome !== "claimed") throw new Error(`expected a fresh claim, got ${claim.outcome}`);
  return claim.fence;
}
