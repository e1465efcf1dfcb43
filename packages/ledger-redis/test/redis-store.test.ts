import type { ClaimRequest } from "@dispatch-once/core";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { InvalidLedgerInputError, RedisLedger, type RedisLedgerOptions } from "../src/index.js";
import {
  EXPIRE_LEASE_LUA,
  REDIS_URL,
  closedPort,
  deleteByPrefix,
  parseStored,
  rawClient,
  serverNow,
  uniquePrefix,
} from "./helpers.js";

// Store-specific contract: every assertion reads Redis directly, not only through the adapter.
// The general ledger contract is the conformance kit's (conformance.test.ts).

let raw: Redis;
const prefixes: string[] = [];
const ledgers: RedisLedger[] = [];

function ledger(options: RedisLedgerOptions = {}): RedisLedger {
  const prefix = options.prefix ?? uniquePrefix("store");
  prefixes.push(prefix);
  const created = new RedisLedger({ url: REDIS_URL, ...options, prefix });
  ledgers.push(created);
  return created;
}

function request(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { key, toolName: "send_payment", effect: "keyed_write", owner: "attempt-1", leaseMs: 30_000, ...overrides };
}

/** Everything Redis holds for one key: type, value (raw) and TTL. */
async function snapshot(l: RedisLedger, key: string) {
  const k = l.redisKey(key);
  const type = await raw.type(k);
  const value = type === "hash" ? await raw.hgetall(k) : type === "string" ? await raw.get(k) : type === "list" ? await raw.lrange(k, 0, -1) : null;
  return { type, value, pttl: await raw.pttl(k) };
}

/** The stored row read directly and parsed by the test: header fields, body, TTL. */
async function stored(l: RedisLedger, key: string) {
  const value = await raw.get(l.redisKey(key));
  if (value === null) return undefined;
  return { ...parseStored(value), pttl: await raw.pttl(l.redisKey(key)) };
}

async function expireLease(l: RedisLedger, key: string): Promise<void> {
  expect(await raw.eval(EXPIRE_LEASE_LUA, 1, l.redisKey(key))).toBe(1);
}

beforeAll(async () => {
  raw = rawClient();
  // Fail loudly (never skip) when the server is missing.
  expect(await raw.ping()).toBe("PONG");
});

afterEach(async () => {
  await Promise.all(ledgers.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) await deleteByPrefix(raw, prefix);
  await raw.quit();
});

describe("row layout", () => {
  it("a claim writes one string at prefix:{key}: JSON header with server-clock times, owner as body, no TTL", async () => {
    const l = ledger();
    const before = await serverNow(raw);
    const claim = await l.claim(request("k1"));
    const after = await serverNow(raw);
    expect(claim).toMatchObject({ outcome: "claimed", fence: 1, takeover: false });
    expect(l.redisKey("k1")).toBe(`${l.prefix}:{k1}`);
    const snap = await snapshot(l, "k1");
    expect(snap.type).toBe("string");
    expect(snap.pttl).toBe(-1); // an in-flight row must never expire: that would forget the claim
    const { header, body } = parseStored(snap.value as string);
    expect(header).toMatchObject({ v: 1, state: "in_flight", toolName: "send_payment", effect: "keyed_write", fence: 1 });
    expect(body).toBe("attempt-1");
    const row = header as Record<string, number>;
    const claimedAt = Number(row.claimedAt);
    expect(claimedAt).toBeGreaterThanOrEqual(before);
    expect(claimedAt).toBeLessThanOrEqual(after);
    expect(Number(row.leaseExpiresAt)).toBe(claimedAt + 30_000);
    expect(claim.outcome === "claimed" && claim.leaseExpiresAt).toBe(claimedAt + 30_000);
  });

  it("a claim of a live in-flight key returns the row and writes nothing", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    const before = await snapshot(l, "k1");
    const second = await l.claim(request("k1", { owner: "attempt-2", effect: "unkeyed_write" }));
    expect(second.outcome).toBe("existing");
    expect(second.outcome === "existing" && second.row).toMatchObject({ state: "in_flight", owner: "attempt-1", fence: 1 });
    expect(await snapshot(l, "k1")).toEqual(before);
  });

  it("renew moves leaseExpiresAt on the server clock and keeps the row TTL-free", async () => {
    const l = ledger();
    const claim = await l.claim(request("k1", { leaseMs: 1000 }));
    if (claim.outcome !== "claimed") throw new Error("expected a claim");
    const before = await serverNow(raw);
    const renewed = await l.renew("k1", claim.fence, 60_000);
    const after = await serverNow(raw);
    const row = await stored(l, "k1");
    const lease = Number(row?.header.leaseExpiresAt);
    expect(renewed.leaseExpiresAt).toBe(lease);
    expect(lease).toBeGreaterThanOrEqual(before + 60_000);
    expect(lease).toBeLessThanOrEqual(after + 60_000);
    expect(row).toMatchObject({ pttl: -1, body: "attempt-1", header: { state: "in_flight", fence: 1 } });
  });
});

describe("fences, release, takeover, unknown", () => {
  it("release leaves a TTL'd tombstone that keeps the fence; a re-claim takes fence 2 and drops the TTL", async () => {
    const l = ledger({ retentionMs: 600_000 });
    await l.claim(request("k1"));
    await l.release("k1", 1);
    const released = await stored(l, "k1");
    expect(released).toMatchObject({ header: { state: "released", fence: 1 }, body: "" });
    expect(released?.pttl).toBeGreaterThan(0);
    expect(released?.pttl).toBeLessThanOrEqual(600_000);

    const again = await l.claim(request("k1", { owner: "attempt-2" }));
    expect(again).toMatchObject({ outcome: "claimed", fence: 2, takeover: false });
    const reclaimed = await stored(l, "k1");
    expect(reclaimed).toMatchObject({ pttl: -1, header: { state: "in_flight", fence: 2 }, body: "attempt-2" });
    expect(reclaimed?.header).not.toHaveProperty("finishedAt");
  });

  it("an expired keyed_write lease is taken over with fence+1; the old owner is then refused and changes nothing", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    await expireLease(l, "k1");
    const takeover = await l.claim(request("k1", { owner: "attempt-2" }));
    expect(takeover).toMatchObject({ outcome: "claimed", fence: 2, takeover: true });
    const after = await snapshot(l, "k1");
    expect(parseStored(after.value as string)).toMatchObject({ header: { state: "in_flight", fence: 2 }, body: "attempt-2" });

    await expect(l.complete("k1", 1, '"late"')).rejects.toMatchObject({ code: "stale_claim" });
    expect(await snapshot(l, "k1")).toEqual(after);
  });

  it("an expired unkeyed_write lease becomes unknown(lease_expired) with retention, and is never claimed again", async () => {
    const l = ledger({ retentionMs: 600_000 });
    await l.claim(request("k1", { effect: "unkeyed_write" }));
    await expireLease(l, "k1");
    const seen = await l.claim(request("k1", { effect: "unkeyed_write", owner: "attempt-2" }));
    expect(seen.outcome).toBe("existing");
    expect(seen.outcome === "existing" && seen.row).toMatchObject({ state: "unknown", reason: "lease_expired", fence: 1 });
    const row = await stored(l, "k1");
    expect(row).toMatchObject({ header: { state: "unknown", fence: 1 }, body: "lease_expired" });
    expect(row?.header).not.toHaveProperty("leaseExpiresAt");
    expect(row?.pttl).toBeGreaterThan(0);
    const third = await l.claim(request("k1", { effect: "unkeyed_write", owner: "attempt-3" }));
    expect(third.outcome).toBe("existing");
    expect((await stored(l, "k1"))?.header).toEqual(row?.header);
  });

  it("every transition with a stale fence is refused and leaves the stored row byte-identical", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    const before = await snapshot(l, "k1");
    const attempts: Array<() => Promise<unknown>> = [
      () => l.renew("k1", 2, 1000),
      () => l.complete("k1", 2, "{}"),
      () => l.fail("k1", 0, { name: "E", message: "m" }),
      () => l.markUnknown("k1", 7, "tool_error"),
      () => l.release("k1", 2),
      () => l.complete("absent", 1, "{}"),
      () => l.complete("k1", 1.5, "{}"),
    ];
    for (const attempt of attempts) await expect(attempt()).rejects.toMatchObject({ code: "stale_claim" });
    expect(await snapshot(l, "k1")).toEqual(before);
    expect(await raw.exists(l.redisKey("absent"))).toBe(0);

    await l.complete("k1", 1, "{}");
    const done = await snapshot(l, "k1");
    await expect(l.complete("k1", 1, '"again"')).rejects.toMatchObject({ code: "stale_claim" });
    await expect(l.release("k1", 1)).rejects.toMatchObject({ code: "stale_claim" });
    expect((await snapshot(l, "k1")).value).toEqual(done.value);
  });
});

describe("results", () => {
  const samples = [
    '{"name":"Zoë","city":"Zürich","note":"naïve café"}',
    '["😀","𝄞","\u{10FFFF}"]',
    '{ "spaced" :\t[ 1 ,2 ]\n}\n',
    '"\\u00e9 is not é"',
    '{"nul":"\u0000","bell":"\u0007"}',
    JSON.stringify({ deep: [[[{ a: [1, 2.5e-7, -0, true, null] }]]], text: "x".repeat(100_000) }),
  ];

  it("results are stored as UTF-8 bytes of the JSON text and come back byte-for-byte", async () => {
    const l = ledger();
    for (const [i, text] of samples.entries()) {
      const key = `r${i}`;
      const claim = await l.claim(request(key));
      if (claim.outcome !== "claimed") throw new Error("expected a claim");
      await l.complete(key, claim.fence, text);
      // The stored bytes end with exactly the UTF-8 bytes of the result, after the header line.
      const bytes = (await raw.getBuffer(l.redisKey(key)))!;
      const body = bytes.subarray(bytes.indexOf(0x0a) + 1);
      expect(body.equals(Buffer.from(text, "utf8"))).toBe(true);
      expect((await l.lookup(key))?.state === "completed" && (await l.lookup(key))).toMatchObject({ result: text });
      const replay = await l.claim(request(key, { owner: "attempt-2" }));
      expect(replay.outcome === "existing" && replay.row.state === "completed" && replay.row.result).toBe(text);
    }
  });

  it("a result over maxResultBytes (UTF-8 bytes) is refused and the claim is kept in flight", async () => {
    const l = ledger({ maxResultBytes: 16 });
    await l.claim(request("k1"));
    const before = await snapshot(l, "k1");
    const sixteen = '"ééééééé"'; // 2 quotes + 7 × 2 bytes
    const seventeen = '"éééééééx"';
    await expect(l.complete("k1", 1, seventeen)).rejects.toMatchObject({ code: "result_not_storable" });
    await expect(l.complete("k1", 1, '"\uD800"')).rejects.toMatchObject({ code: "result_not_storable" });
    expect(await snapshot(l, "k1")).toEqual(before);
    // A stale fence is reported as stale even when the result is also too big.
    await expect(l.complete("k1", 2, seventeen)).rejects.toMatchObject({ code: "stale_claim" });
    await l.complete("k1", 1, sixteen);
    expect((await stored(l, "k1"))?.body).toBe(sixteen);
  });

  it("a failure is stored as JSON and decoded back", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    const error = { name: "CardDeclined", message: "déclinée 💳", code: "card_declined", details: { attempt: 1, tags: ["a"] } };
    await l.fail("k1", 1, error);
    expect(JSON.parse((await stored(l, "k1"))?.body ?? "null")).toEqual(error);
    expect(await l.lookup("k1")).toMatchObject({ state: "failed", error });
  });
});

describe("corrupt rows", () => {
  const h = (fields: string) => `{"v":1,${fields}}`;
  const corruptions: Array<[string, (r: Redis, k: string) => Promise<unknown>]> = [
    ["a hash value", (r, k) => r.hset(k, { v: "1", state: "completed" })],
    ["a list value", (r, k) => r.rpush(k, "x")],
    ["a string without a header line", (r, k) => r.set(k, "\u0000garbage")],
    ["a header that is not JSON", (r, k) => r.set(k, '{"v":1,"state":"completed",\n{}')],
    ["an unknown format version", (r, k) => r.set(k, '{"v":2,"state":"completed","fence":1,"claimedAt":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"}\n1')],
    ["an unknown state", (r, k) => r.set(k, `${h('"state":"pending","fence":1,"claimedAt":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n`)],
    ["an in-flight row without a lease", (r, k) => r.set(k, `${h('"state":"in_flight","fence":1,"claimedAt":1,"effect":"keyed_write","toolName":"t"')}\no`)],
    ["a non-numeric fence", (r, k) => r.set(k, `${h('"state":"released","fence":"one","claimedAt":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n`)],
    ["a failed row whose error is not JSON", (r, k) => r.set(k, `${h('"state":"failed","fence":1,"claimedAt":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{oops`)],
    ["a completed row without finishedAt", (r, k) => r.set(k, `${h('"state":"completed","fence":1,"claimedAt":1,"effect":"keyed_write","toolName":"t"')}\n1`)],
    ["an expired in-flight row of an unknown effect", (r, k) => r.set(k, `${h('"state":"in_flight","fence":1,"claimedAt":1,"leaseExpiresAt":1,"effect":"write","toolName":"t"')}\no`)],
  ];

  for (const [name, write] of corruptions) {
    it(`${name}: claim and lookup raise ledger_corrupt, never absent, and the value is not overwritten`, async () => {
      const l = ledger();
      await write(raw, l.redisKey("bad"));
      const before = await snapshot(l, "bad");
      await expect(l.claim(request("bad"))).rejects.toMatchObject({ code: "ledger_corrupt" });
      await expect(l.claim(request("bad", { effect: "unkeyed_write" }))).rejects.toMatchObject({ code: "ledger_corrupt" });
      await expect(l.lookup("bad")).rejects.toMatchObject({ code: "ledger_corrupt" });
      expect(await snapshot(l, "bad")).toEqual(before);
    });
  }
});

describe("retention", () => {
  it("finished rows get PEXPIRE retentionMs, in-flight rows none; sweep() is a no-op returning 0", async () => {
    const l = ledger({ retentionMs: 3_600_000 });
    for (const key of ["c", "f", "u", "r", "live"]) await l.claim(request(key));
    await l.complete("c", 1, "{}");
    await l.fail("f", 1, { name: "E", message: "m" });
    await l.markUnknown("u", 1, "tool_error");
    await l.release("r", 1);
    for (const key of ["c", "f", "u", "r"]) {
      const pttl = await raw.pttl(l.redisKey(key));
      expect(pttl).toBeGreaterThan(0);
      expect(pttl).toBeLessThanOrEqual(3_600_000);
    }
    expect(await raw.pttl(l.redisKey("live"))).toBe(-1);
    expect(await l.sweep()).toBe(0);
    expect(await raw.exists(l.redisKey("c"), l.redisKey("live"))).toBe(2);
  });

  it("a row whose retention ran out is gone from Redis; the key can be claimed afresh (fence 1)", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    await l.complete("k1", 1, '"first"');
    await raw.pexpireat(l.redisKey("k1"), 1); // retention in the past: Redis drops it, as the TTL would
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
    expect(await l.lookup("k1")).toBeUndefined();
    expect(await l.claim(request("k1"))).toMatchObject({ outcome: "claimed", fence: 1 });
  });

  it("retentionMs 0 removes a finished row at once", async () => {
    const l = ledger({ retentionMs: 0 });
    await l.claim(request("k1"));
    await l.complete("k1", 1, "{}");
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
  });
});

describe("instances and connections", () => {
  it("a new instance over the same prefix (a restart) sees the rows and their fences", async () => {
    const prefix = uniquePrefix("restart");
    const first = ledger({ prefix });
    await first.claim(request("done"));
    await first.complete("done", 1, '{"ok":true}');
    await first.claim(request("held"));
    await first.close();
    const second = ledger({ prefix });
    expect(await second.lookup("done")).toMatchObject({ state: "completed", result: '{"ok":true}' });
    const held = await second.claim(request("held", { owner: "restarted" }));
    expect(held.outcome === "existing" && held.row).toMatchObject({ state: "in_flight", owner: "attempt-1" });
    await second.complete("held", 1, "{}"); // the fence, not the instance, owns the row
    expect((await stored(second, "held"))?.header.state).toBe("completed");
  });

  it("a refused connection raises ledger_unavailable from every method and nothing is claimed", async () => {
    const port = await closedPort();
    const l = new RedisLedger({ url: `redis://127.0.0.1:${port}`, prefix: uniquePrefix("refused") });
    ledgers.push(l);
    await expect(l.claim(request("k1"))).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(l.renew("k1", 1, 1000)).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(l.complete("k1", 1, "{}")).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(l.fail("k1", 1, { name: "E", message: "m" })).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(l.markUnknown("k1", 1, "x")).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(l.release("k1", 1)).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(l.lookup("k1")).rejects.toMatchObject({ code: "ledger_unavailable" });
  });

  it("a closed ledger raises ledger_unavailable; a client brought by the caller is left open", async () => {
    const client = rawClient();
    const prefix = uniquePrefix("byo");
    prefixes.push(prefix);
    const l = new RedisLedger({ client, prefix });
    await l.claim(request("k1"));
    await l.close();
    await expect(l.claim(request("k2"))).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(await raw.exists(l.redisKey("k2"))).toBe(0);
    expect(parseStored((await client.get(l.redisKey("k1")))!).header.state).toBe("in_flight");
    await client.quit();
  });

  it("bad options and arguments raise invalid_ledger_input", () => {
    const bad: Array<() => unknown> = [
      () => new RedisLedger({ prefix: "a{b}" }),
      () => new RedisLedger({ prefix: "" }),
      () => new RedisLedger({ retentionMs: -1 }),
      () => new RedisLedger({ maxResultBytes: 1.5 }),
      () => new RedisLedger({ durability: "sometimes" as "durable" }),
    ];
    for (const make of bad) {
      let thrown: unknown;
      try {
        make();
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidLedgerInputError);
      expect(thrown).toMatchObject({ code: "invalid_ledger_input" });
    }
  });

  it("a negative lease or an unknown effect is refused before anything is sent", async () => {
    const l = ledger();
    await expect(l.claim(request("k1", { leaseMs: -5 }))).rejects.toMatchObject({ code: "invalid_ledger_input", field: "leaseMs" });
    await expect(l.claim(request("k1", { effect: "read" as "keyed_write" }))).rejects.toMatchObject({ code: "invalid_ledger_input", field: "effect" });
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
  });

  it("capabilities: volatile unless asserted, server clock, shared across processes", () => {
    expect(ledger().capabilities).toEqual({
      durability: "volatile",
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes: 1024 * 1024,
    });
    expect(ledger({ durability: "durable" }).capabilities.durability).toBe("durable");
  });
});
