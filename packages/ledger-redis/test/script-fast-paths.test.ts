import fc from "fast-check";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLAIM_GENERAL_LUA, CLAIM_LUA, FINISH_GENERAL_LUA, FINISH_LUA } from "../src/scripts.js";
import { deleteByPrefix, rawClient, uniquePrefix } from "./helpers.js";

// The scripts' fast paths read a row without the general path's patterns (issue 14: server
// instructions per call). Each must do exactly what the general path does with the same row:
// the same reply, the same stored value and TTL, the same index members and the same audit
// trail, for well-formed rows and for rows damaged anywhere in their header. Each property runs
// the script with and without its fast path on two copies of one row and compares everything.

let raw: Redis;
const prefix = uniquePrefix("fast");
let finishFull: string;
let finishGeneral: string;
let claimFull: string;
let claimGeneral: string;
let copies = 0;

beforeAll(async () => {
  raw = rawClient();
  finishFull = String(await raw.script("LOAD", FINISH_LUA));
  finishGeneral = String(await raw.script("LOAD", FINISH_GENERAL_LUA));
  claimFull = String(await raw.script("LOAD", CLAIM_LUA));
  claimGeneral = String(await raw.script("LOAD", CLAIM_GENERAL_LUA));
});

afterAll(async () => {
  await deleteByPrefix(raw, prefix);
  raw.disconnect();
});

const STATES = ["in_flight", "completed", "failed", "unknown", "released"] as const;

/** One copy of a row: the row, its slot's in-flight index and audit trail, and the listing indexes. */
function keysOf(copy: number) {
  const row = `${prefix}:{c${copy}}`;
  const idx = `${prefix}:{c${copy}}:inflight`;
  return { row, idx, audit: `${prefix}:{c${copy}}:audit`, lists: STATES.map((s) => `${prefix}:{c${copy}}:rows:${s}`) };
}

/**
 * Write the row and what an in-flight row of it would have in the indexes, with a trail of one
 * entry unless the finish is at fence 1: no row in flight at fence 1 has a trail (FINISH_LUA
 * skips its PEXPIRE there, and says why).
 */
async function plant(copy: number, value: string, fence: string): Promise<ReturnType<typeof keysOf>> {
  const k = keysOf(copy);
  await raw.set(k.row, value);
  await raw.zadd(k.idx, "4000000000000", k.row);
  await raw.zadd(`${prefix}:{c${copy}}:rows:in_flight`, "1700000000000", k.row);
  if (fence !== "1") await raw.rpush(k.audit, '{"earlier":"entry"}');
  return k;
}

/** Everything the script may have changed, with the server's time of the call written as T. */
async function observe(k: ReturnType<typeof keysOf>, reply: unknown) {
  const time = Array.isArray(reply) && reply[0] === "ok" ? String(reply[1]) : undefined;
  const norm = (text: string | null) => (text === null || time === undefined ? text : text.split(time).join("T"));
  const value = await raw.get(k.row);
  const lists: Record<string, string | null> = {};
  for (const [i, list] of k.lists.entries()) lists[STATES[i]!] = norm(await raw.zscore(list, k.row));
  return {
    reply: Array.isArray(reply) ? reply.map((part) => norm(String(part))) : reply,
    value: norm(value),
    expires: (await raw.pttl(k.row)) > 0,
    inflight: await raw.zscore(k.idx, k.row),
    lists,
    audit: (await raw.lrange(k.audit, 0, -1)).map(norm),
    auditExpires: (await raw.pttl(k.audit)) > 0,
  };
}

async function run(sha: string, value: string, args: string[]) {
  const k = await plant(copies++, value, args[0]!);
  let reply: unknown;
  try {
    reply = await raw.evalsha(sha, 3, k.row, k.idx, k.audit, ...args);
  } catch (error) {
    reply = `error: ${(error as Error).message}`;
  }
  return observe(k, reply);
}

const digits = fc.stringMatching(/^[0-9]{1,14}$/);
/** A claim token: the adapter's and a claim id's characters, or now and then one no token has. */
const token = fc.oneof(fc.stringMatching(/^[A-Za-z0-9._-]{0,24}$/), fc.stringMatching(/^[A-Za-z0-9._\- :é{},/+]{1,8}$/));
const text = fc.string({ unit: "grapheme", maxLength: 30 });
const effect: fc.Arbitrary<string> = fc.constantFrom("keyed_write", "unkeyed_write", "x_write", "_write", "keyed_writ", "keyed-write");
/** The header's tail after the tool name: nothing, or a conversation and turn (LIST-3). */
const tail = fc.option(fc.tuple(text, fc.nat()).map(([c, t]) => `,"conversationId":${JSON.stringify(c)},"turnIndex":${t}`), { nil: "" });

/** A row as the claim script writes it, its parts given, and the fence a finish sends. */
const row = fc.record({
  fence: digits,
  claimedAt: digits,
  lease: digits,
  claim: token,
  effect,
  tool: text.map((t) => JSON.stringify(t)),
  tail,
  request: fc.string({ unit: "grapheme", maxLength: 40 }),
  owner: text,
});

type Row = typeof row extends fc.Arbitrary<infer R> ? R : never;

/** The row with an effect and a claim token the claim script can write. */
function wellFormed(r: Row): Row {
  return { ...r, effect: r.effect.startsWith("un") ? "unkeyed_write" : "keyed_write", claim: r.claim.replace(/[^\w.-]/g, "x") };
}

function written(r: Row, requestBytes = Buffer.byteLength(r.request)): string {
  return (
    `{"v":1,"state":"in_flight","fence":${r.fence},"claimedAt":${r.claimedAt},"requestBytes":${requestBytes},` +
    `"leaseExpiresAt":${r.lease},"claim":"${r.claim}","effect":"${r.effect}","toolName":${r.tool}${r.tail}}\n${r.request}${r.owner}`
  );
}

/** A change anywhere in the row: a byte replaced, inserted or removed (the header's bytes most often). */
const damage = fc.record({
  kind: fc.constantFrom("replace", "insert", "remove", "none"),
  at: fc.nat(),
  char: fc.constantFrom('"', "}", "{", ",", ":", "\n", "0", "9", "a", "_", "-", ".", " ", "é"),
});

function damaged(value: string, d: { kind: string; at: number; char: string }): string {
  const headerEnd = value.indexOf("\n");
  const at = d.at % (headerEnd + 2);
  if (d.kind === "replace") return value.slice(0, at) + d.char + value.slice(at + 1);
  if (d.kind === "insert") return value.slice(0, at) + d.char + value.slice(at);
  if (d.kind === "remove") return value.slice(0, at) + value.slice(at + 1);
  return value;
}

describe("FINISH_LUA's fast path is the general path (issue 14)", () => {
  it("LEDGER-5 LEDGER-21 LEDGER-27 LIST-6 the same reply, row, TTL, indexes and trail for rows as written and damaged", async () => {
    let took = 0;
    await fc.assert(
      fc.asyncProperty(
        row,
        damage,
        fc.constantFrom("completed", "failed", "released", "unknown"),
        fc.constantFrom("row", "other", "negative"),
        fc.integer({ min: -3, max: 3 }),
        text,
        fc.boolean(),
        async (r0, d0, state, fenceOf0, bytesOff0, body, clean) => {
          // Half the cases are rows as written, finished under their fence: the fast path's own.
          const r = clean ? wellFormed(r0) : r0;
          const d = clean ? { ...d0, kind: "none" } : d0;
          const fenceOf = clean ? "row" : fenceOf0;
          const bytesOff = clean ? 0 : bytesOff0;
          const parts = fenceOf === "negative" ? { ...r, fence: "-1" } : r;
          const value = damaged(written(parts, Math.max(0, Buffer.byteLength(r.request) + bytesOff)), d);
          const fence = fenceOf === "other" ? String(Number(r.fence) + 1) : parts.fence;
          const args = [fence, state, "60000", body];
          const general = await run(finishGeneral, value, args);
          const full = await run(finishFull, value, args);
          expect(full).toEqual(general);
          if (Array.isArray(general.reply) && general.reply[0] === "ok" && state !== "unknown") took++;
        },
      ),
      { numRuns: 400 },
    );
    // Well-formed rows finished under their fence are common enough that the fast path ran.
    expect(took).toBeGreaterThan(100);
  }, 240_000);

  it("a row as the claim writes it, at fence 1 and later, finished each way", async () => {
    for (const fence of ["1", "7", "12345678901"]) {
      for (const state of ["completed", "failed", "released"]) {
        const value = written({
          fence,
          claimedAt: "1764000000000",
          lease: "1764000030000",
          claim: "Ab-_.9",
          effect: "keyed_write",
          tool: '"send_payment"',
          tail: ',"conversationId":"c\\"}\\n","turnIndex":3',
          request: '{"memo":"Zoë 😀\n}","x":1}',
          owner: "attempt-1",
        });
        const args = [fence, state, "60000", '{"ok":true}'];
        const general = await run(finishGeneral, value, args);
        expect(general.reply).toEqual(["ok", "T"]);
        expect(await run(finishFull, value, args)).toEqual(general);
      }
    }
  });
});

/** The server's times in a claim's reply and row (claimedAt, finishedAt, lease at leaseMs 0) written as T. */
function withoutNow(text: string, now: number): string {
  return text.replace(/\d{13}/g, (digits) => (Math.abs(Number(digits) - now) < 600_000 ? "T" : digits));
}

async function runClaim(sha: string, value: string, args: string[]) {
  const copy = copies++;
  const k = await plant(copy, value, "0");
  const retired = `${prefix}:{c${copy}}:retired`;
  let reply: unknown;
  try {
    reply = await raw.evalsha(sha, 4, k.row, k.idx, k.audit, retired, ...args);
  } catch (error) {
    reply = `error: ${(error as Error).message}`;
  }
  const seen = await observe(k, undefined);
  const now = Date.now();
  return JSON.parse(withoutNow(JSON.stringify({ ...seen, reply }), now)) as unknown;
}

/** A finished or released header with the same parts (a released one may keep its claim token). */
function writtenAs(state: string, r: Row, keepClaim: boolean): string {
  const kept = keepClaim ? `,"claim":"${r.claim}"` : "";
  return (
    `{"v":1,"state":"${state}","fence":${r.fence},"claimedAt":${r.claimedAt},"requestBytes":${Buffer.byteLength(r.request)},` +
    `"finishedAt":${r.lease}${kept},"effect":"${r.effect}","toolName":${r.tool}${r.tail}}\n${r.request}${state === "released" ? "" : r.owner}`
  );
}

describe("CLAIM_LUA's fast path is the general path (issue 14)", () => {
  it("LEDGER-7 LEDGER-26 LEDGER-27 the same reply, row, TTL, indexes and trail for a replay, a race's loser and every other row found", async () => {
    let took = 0;
    await fc.assert(
      fc.asyncProperty(
        row,
        damage,
        fc.constantFrom("in_flight", "completed", "failed", "unknown", "released", "releasedWithClaim"),
        fc.constantFrom("live", "expired"),
        fc.boolean(),
        fc.boolean(),
        async (r0, d0, state, leaseOf, sameToken, clean) => {
          const r = clean ? wellFormed(r0) : r0;
          const parts = { ...r, lease: leaseOf === "live" ? "9999999999999" : r.lease.slice(0, 12) };
          const whole =
            state === "in_flight" ? written(parts) : writtenAs(state === "releasedWithClaim" ? "released" : state, parts, state === "releasedWithClaim");
          const value = clean ? whole : damaged(whole, d0);
          const args = ['"send_payment"', "keyed_write", "attempt-2", "0", "60000", '{"later":true}', sameToken ? r.claim : "other.token", ""];
          const general = await runClaim(claimGeneral, value, args);
          expect(await runClaim(claimFull, value, args)).toEqual(general);
          const reply = (general as { reply: unknown }).reply;
          if (clean && Array.isArray(reply) && reply[0] === "existing" && reply[1] === value) took++;
        },
      ),
      { numRuns: 400 },
    );
    // Replays and losers on rows as written are common enough that the fast path ran.
    expect(took).toBeGreaterThan(60);
  }, 240_000);
});

describe("the finished state's listing index stays about one retention long (LIST-6)", () => {
  it("LIST-6 finishes drop members past the retention (a finish trims one time in 8, so 200 finishes trim with certainty but for 2.5e-12)", async () => {
    const idx = `${prefix}:{trim}:inflight`;
    const completed = `${prefix}:{trim}:rows:completed`;
    // A member whose row Redis has removed: finished long ago, past any retention.
    await raw.zadd(completed, "1", `${prefix}:{trim}:gone`);
    for (let i = 0; i < 200; i++) {
      const key = `${prefix}:{trim}:row${i}`;
      await raw.set(key, `{"v":1,"state":"in_flight","fence":1,"claimedAt":1,"requestBytes":2,"leaseExpiresAt":1,"claim":"t.${i}","effect":"keyed_write","toolName":"send_payment"}\n{}owner`);
      const reply = (await raw.evalsha(finishFull, 3, key, idx, `${key}:audit`, "1", "completed", "60000", '"ok"')) as string[];
      expect(reply[0]).toBe("ok");
    }
    expect(await raw.zscore(completed, `${prefix}:{trim}:gone`)).toBeNull();
    // Every row finished here is in the index: the trim takes only members past the retention.
    expect(await raw.zcard(completed)).toBe(200);
  });
});
