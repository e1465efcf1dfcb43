import { isDispatchOnceError, type ClaimRequest } from "@dispatch-once/core";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { MIN_RETENTION_MS, RedisLedger, createRedisLedger, keySlot, type RedisLedgerOptions } from "../src/index.js";
import {
  EXPIRE_LEASE_LUA,
  REDIS_URL,
  closedPort,
  deleteByPrefix,
  parseStored,
  rawClient,
  safeClient,
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

/** The first claim's request: non-ASCII, so a byte/character mix-up in the split would show. */
const FIRST = '{"amount":4200,"memo":"Zoë 😀","to":"acct_1"}';
/** What a later attempt sends: a re-run must NOT use it (LEDGER-21). */
const LATER = '{"amount":9999,"to":"acct_2"}';

function request(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { key, toolName: "send_payment", effect: "keyed_write", owner: "attempt-1", leaseMs: 30_000, request: FIRST, ...overrides };
}

/** Everything Redis holds for one key: type, value (raw) and TTL. */
async function snapshot(l: RedisLedger, key: string) {
  const k = l.redisKey(key);
  const type = await raw.type(k);
  const value = type === "hash" ? await raw.hgetall(k) : type === "string" ? await raw.get(k) : type === "list" ? await raw.lrange(k, 0, -1) : null;
  return { type, value, pttl: await raw.pttl(k) };
}

/** The stored row read directly (bytes) and parsed by the test: header fields, request, body, TTL. */
async function stored(l: RedisLedger, key: string) {
  const value = await raw.getBuffer(l.redisKey(key));
  if (value === null) return undefined;
  return { ...parseStored(value), pttl: await raw.pttl(l.redisKey(key)) };
}

async function expireLease(l: RedisLedger, key: string): Promise<void> {
  expect(await raw.eval(EXPIRE_LEASE_LUA, 2, l.redisKey(key), l.inflightIndexKey(key))).toBe(1);
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
  it("a claim writes one string at prefix:{key}: JSON header with server-clock times, then the request and the owner, no TTL", async () => {
    const l = ledger();
    const before = await serverNow(raw);
    const claim = await l.claim(request("k1"));
    const after = await serverNow(raw);
    expect(claim).toMatchObject({ outcome: "claimed", fence: 1, takeover: false, request: FIRST });
    expect(l.redisKey("k1")).toBe(`${l.prefix}:{k1}`);
    const snap = await snapshot(l, "k1");
    expect(snap.type).toBe("string");
    expect(snap.pttl).toBe(-1); // an in-flight row must never expire: that would forget the claim
    const { header, request: storedRequest, body } = parseStored((await raw.getBuffer(l.redisKey("k1")))!);
    expect(header).toMatchObject({ v: 1, state: "in_flight", toolName: "send_payment", effect: "keyed_write", fence: 1 });
    expect(Object.keys(header)).toEqual(["v", "state", "fence", "claimedAt", "requestBytes", "leaseExpiresAt", "claim", "effect", "toolName"]);
    expect(header.claim).toMatch(/^[0-9a-f]{12}\.[0-9a-z]+$/); // the claim token, never returned to the caller
    expect(claim).not.toHaveProperty("claim");
    expect(header.requestBytes).toBe(Buffer.byteLength(FIRST, "utf8"));
    expect(storedRequest).toBe(FIRST);
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
    const second = await l.claim(request("k1", { owner: "attempt-2", effect: "unkeyed_write", request: LATER }));
    expect(second.outcome).toBe("existing");
    expect(second.outcome === "existing" && second.row).toMatchObject({ state: "in_flight", owner: "attempt-1", fence: 1, request: FIRST });
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
    expect(row).toMatchObject({ pttl: -1, request: FIRST, body: "attempt-1", header: { state: "in_flight", fence: 1 } });
  });
});

describe("hash tags", () => {
  it("a key that starts with '}' is refused before anything is sent: its row would hash whole and its audit list land in another cluster slot", async () => {
    const l = ledger();
    // What the refusal protects: with an empty hash tag the row and its audit list part ways.
    expect(keySlot(l.redisKey("}x"))).not.toBe(keySlot(l.auditKey("}x")));
    expect(keySlot(l.redisKey("x}"))).toBe(keySlot(l.auditKey("x}")));
    await expect(l.claim(request("}x"))).rejects.toMatchObject({ code: "invalid_ledger_input", field: "key" });
    await expect(l.retire("}x", "c".repeat(22), { release: true })).rejects.toMatchObject({ code: "invalid_ledger_input", field: "key" });
    expect(await raw.exists(l.redisKey("}x"), l.auditKey("}x"))).toBe(0);
    // A '}' anywhere else keeps a non-empty tag shared by the row and its audit list.
    expect(await l.claim(request("x}"))).toMatchObject({ outcome: "claimed", fence: 1 });
  });
});

describe("fences, release, takeover, unknown", () => {
  it("release leaves a TTL'd tombstone that keeps the fence and the request; a re-claim takes fence 2, drops the TTL and returns the stored request (LEDGER-21)", async () => {
    const l = ledger({ retentionMs: 7_200_000 });
    await l.claim(request("k1"));
    await l.release("k1", 1);
    const released = await stored(l, "k1");
    expect(released).toMatchObject({ header: { state: "released", fence: 1 }, request: FIRST, body: "" });
    expect(released?.pttl).toBeGreaterThan(0);
    expect(released?.pttl).toBeLessThanOrEqual(7_200_000);
    expect(await l.lookup("k1")).toMatchObject({ state: "released", request: FIRST });

    const again = await l.claim(request("k1", { owner: "attempt-2", request: LATER }));
    expect(again).toEqual({ outcome: "claimed", fence: 2, takeover: false, leaseExpiresAt: expect.any(Number), request: FIRST });
    const reclaimed = await stored(l, "k1");
    expect(reclaimed).toMatchObject({ pttl: -1, header: { state: "in_flight", fence: 2 }, request: FIRST, body: "attempt-2" });
    expect(reclaimed?.header).not.toHaveProperty("finishedAt");
  });

  it("an expired keyed_write lease is taken over with fence+1 and the stored request (LEDGER-21); the old owner is then refused and changes nothing", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    await expireLease(l, "k1");
    const takeover = await l.claim(request("k1", { owner: "attempt-2", request: LATER }));
    expect(takeover).toMatchObject({ outcome: "claimed", fence: 2, takeover: true, request: FIRST });
    const after = await snapshot(l, "k1");
    expect(parseStored(after.value as string)).toMatchObject({ header: { state: "in_flight", fence: 2 }, request: FIRST, body: "attempt-2" });

    await expect(l.complete("k1", 1, '"late"')).rejects.toMatchObject({ code: "stale_claim" });
    expect(await snapshot(l, "k1")).toEqual(after);
  });

  it("an expired unkeyed_write lease becomes unknown(lease_expired) with retention, keeps the request (LEDGER-21), and is never claimed again", async () => {
    const l = ledger({ retentionMs: 7_200_000 });
    await l.claim(request("k1", { effect: "unkeyed_write" }));
    await expireLease(l, "k1");
    const seen = await l.claim(request("k1", { effect: "unkeyed_write", owner: "attempt-2", request: LATER }));
    expect(seen.outcome).toBe("existing");
    expect(seen.outcome === "existing" && seen.row).toMatchObject({ state: "unknown", reason: "lease_expired", fence: 1, request: FIRST });
    const row = await stored(l, "k1");
    expect(row).toMatchObject({ header: { state: "unknown", fence: 1 }, request: FIRST, body: "lease_expired" });
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
      // After the header line: exactly the UTF-8 bytes of the request, then those of the result.
      const bytes = (await raw.getBuffer(l.redisKey(key)))!;
      const body = bytes.subarray(bytes.indexOf(0x0a) + 1);
      expect(body.equals(Buffer.concat([Buffer.from(FIRST, "utf8"), Buffer.from(text, "utf8")]))).toBe(true);
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

describe("stored request (LEDGER-21)", () => {
  // Requests the ledger must keep byte for byte: it treats them as opaque text, and the split
  // from the body is by UTF-8 length, so newlines, NULs, header look-alikes and astral characters
  // must all survive.
  const samples = [
    '{"amount":4200,"to":"acct_1"}',
    "",
    "é",
    '["😀","𝄞","\u{10FFFF}"]',
    '{"nul":"\u0000","raw":"\u0000\u0007"}',
    '\n{"v":1,"state":"completed","fence":9,"claimedAt":1,"requestBytes":0}\n',
    '{ "spaced" :\t[ 1 ,2 ]\n}\n',
    JSON.stringify({ text: "ü".repeat(50_000) }),
  ];

  /** The stored row's bytes must be header, newline, the request's UTF-8 bytes, then exactly `body`. */
  async function expectBytes(l: RedisLedger, key: string, req: string, body: string): Promise<void> {
    const bytes = (await raw.getBuffer(l.redisKey(key)))!;
    const after = bytes.subarray(bytes.indexOf(0x0a) + 1);
    expect(after.equals(Buffer.concat([Buffer.from(req, "utf8"), Buffer.from(body, "utf8")]))).toBe(true);
  }

  it("the claim that creates the row stores the request; re-claim after release and takeover return it unchanged, byte for byte", async () => {
    const l = ledger();
    for (const [i, req] of samples.entries()) {
      const key = `q${i}`;
      const label = `sample ${i}`;
      expect((await l.claim(request(key, { request: req }))).outcome === "claimed" && "claimed", label).toBe("claimed");
      const created = await l.claim(request(key, { request: LATER })); // live: existing, writes nothing
      expect(created.outcome === "existing" && created.row.request, label).toBe(req);
      await expectBytes(l, key, req, "attempt-1");
      await l.renew(key, 1, 30_000);
      await expectBytes(l, key, req, "attempt-1");

      await l.release(key, 1);
      await expectBytes(l, key, req, "");
      const reclaimed = await l.claim(request(key, { owner: "attempt-2", request: LATER }));
      expect(reclaimed.outcome === "claimed" && reclaimed.request, label).toBe(req);
      await expectBytes(l, key, req, "attempt-2");

      await expireLease(l, key);
      const takeover = await l.claim(request(key, { owner: "attempt-3", request: LATER }));
      expect(takeover.outcome === "claimed" && takeover.takeover && takeover.request, label).toBe(req);
      await expectBytes(l, key, req, "attempt-3");

      await l.complete(key, 3, '"done"');
      await expectBytes(l, key, req, '"done"');
      expect(await l.lookup(key), label).toMatchObject({ state: "completed", fence: 3, request: req, result: '"done"' });
      const replay = await l.claim(request(key, { request: LATER }));
      expect(replay.outcome === "existing" && replay.row.request, label).toBe(req);
    }
  });

  it("fail, markUnknown and release keep the stored request (raw bytes and lookup)", async () => {
    const l = ledger();
    const error = { name: "Declined", message: "no" };
    for (const key of ["f", "u", "r"]) await l.claim(request(key));
    await l.fail("f", 1, error);
    await l.markUnknown("u", 1, "tool_error");
    await l.release("r", 1);
    await expectBytes(l, "f", FIRST, JSON.stringify(error));
    await expectBytes(l, "u", FIRST, "tool_error");
    await expectBytes(l, "r", FIRST, "");
    for (const key of ["f", "u", "r"]) expect(await l.lookup(key), key).toMatchObject({ request: FIRST });
  });

  it("the expiry of an unkeyed_write lease keeps the request in the unknown row", async () => {
    const l = ledger();
    await l.claim(request("k1", { effect: "unkeyed_write" }));
    await expireLease(l, "k1");
    await l.claim(request("k1", { effect: "unkeyed_write", owner: "attempt-2", request: LATER }));
    await expectBytes(l, "k1", FIRST, "lease_expired");
    expect(await l.lookup("k1")).toMatchObject({ state: "unknown", request: FIRST });
  });

  it("a request that is not a string or has a lone surrogate is refused (invalid_ledger_input, field request) before anything is sent", async () => {
    const l = ledger();
    const bad: unknown[] = [undefined, null, 42, { amount: 1 }, "\uD800", 'a\uDC00b', '{"x":"\uDBFF"}'];
    for (const value of bad) {
      await expect(l.claim(request("k1", { request: value as string })), JSON.stringify(value)).rejects.toMatchObject({
        code: "invalid_ledger_input",
        field: "request",
      });
    }
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
    // Refused even where it would not be stored: the argument is checked once, up front.
    await l.claim(request("k1"));
    await l.release("k1", 1);
    const before = await raw.get(l.redisKey("k1"));
    await expect(l.claim(request("k1", { request: "\uD800" }))).rejects.toMatchObject({ field: "request" });
    expect(await raw.get(l.redisKey("k1"))).toBe(before); // still the released tombstone, fence 1
  });
});

describe("corrupt rows", () => {
  const h = (fields: string) => `{"v":1,${fields}}`;
  // Each row is well formed but for ONE defect (the control test below decodes a row built the
  // same way), so each case fails for its own reason. Rows carry a 2-byte request "{}".
  const corruptions: Array<[string, (r: Redis, k: string) => Promise<unknown>]> = [
    ["a hash value", (r, k) => r.hset(k, { v: "1", state: "completed" })],
    ["a list value", (r, k) => r.rpush(k, "x")],
    ["a string without a header line", (r, k) => r.set(k, "\u0000garbage")],
    ["a header that is not JSON", (r, k) => r.set(k, '{"v":1,"state":"completed",\n{}')],
    ["an unknown format version", (r, k) => r.set(k, '{"v":2,"state":"completed","fence":1,"claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"}\n{}1')],
    ["an unknown state", (r, k) => r.set(k, `${h('"state":"pending","fence":1,"claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}`)],
    ["an in-flight row without a lease", (r, k) => r.set(k, `${h('"state":"in_flight","fence":1,"claimedAt":1,"requestBytes":2,"effect":"keyed_write","toolName":"t"')}\n{}o`)],
    ["a non-numeric fence", (r, k) => r.set(k, `${h('"state":"released","fence":"one","claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}`)],
    ["a failed row whose error is not JSON", (r, k) => r.set(k, `${h('"state":"failed","fence":1,"claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}{oops`)],
    ["a completed row without finishedAt", (r, k) => r.set(k, `${h('"state":"completed","fence":1,"claimedAt":1,"requestBytes":2,"effect":"keyed_write","toolName":"t"')}\n{}1`)],
    ["an expired in-flight row of an unknown effect", (r, k) => r.set(k, `${h('"state":"in_flight","fence":1,"claimedAt":1,"requestBytes":2,"leaseExpiresAt":1,"claim":"c","effect":"write","toolName":"t"')}\n{}o`)],
    ["an expired in-flight row without a claim token", (r, k) => r.set(k, `${h('"state":"in_flight","fence":1,"claimedAt":1,"requestBytes":2,"leaseExpiresAt":1,"effect":"keyed_write","toolName":"t"')}\n{}o`)],
    // LEDGER-21: a row written before requests were stored has none to re-run with. Neither a
    // re-claim of its tombstone nor a takeover of its expired lease may invent one.
    ["a completed row without requestBytes (written before LEDGER-21)", (r, k) => r.set(k, `${h('"state":"completed","fence":1,"claimedAt":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n1`)],
    ["a released row without requestBytes (written before LEDGER-21)", (r, k) => r.set(k, `${h('"state":"released","fence":1,"claimedAt":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n`)],
    ["an expired in-flight row without requestBytes (written before LEDGER-21)", (r, k) => r.set(k, `${h('"state":"in_flight","fence":1,"claimedAt":1,"leaseExpiresAt":1,"claim":"c","effect":"keyed_write","toolName":"t"')}\no`)],
    ["a released row whose body is shorter than requestBytes", (r, k) => r.set(k, `${h('"state":"released","fence":1,"claimedAt":1,"requestBytes":3,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}`)],
    ["a completed row whose requestBytes ends inside a character", (r, k) => r.set(k, `${h('"state":"completed","fence":1,"claimedAt":1,"requestBytes":1,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\né1`)],
    ["a released row with text after its request", (r, k) => r.set(k, `${h('"state":"released","fence":1,"claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}x`)],
  ];

  it("control: a hand-written row in the same format decodes, so each case below is corrupt for its own defect", async () => {
    const l = ledger();
    await raw.set(l.redisKey("ok"), `${h('"state":"completed","fence":1,"claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}1`);
    expect(await l.lookup("ok")).toEqual({
      key: "ok", state: "completed", fence: 1, claimedAt: 1, finishedAt: 2, effect: "keyed_write", toolName: "t", request: "{}", result: "1",
    });
    await raw.set(l.redisKey("rel"), `${h('"state":"released","fence":4,"claimedAt":1,"requestBytes":2,"finishedAt":2,"effect":"keyed_write","toolName":"t"')}\n{}`);
    expect(await l.claim(request("rel", { request: LATER }))).toMatchObject({ outcome: "claimed", fence: 5, request: "{}" });
    await raw.set(l.redisKey("exp"), `${h('"state":"in_flight","fence":1,"claimedAt":1,"requestBytes":2,"leaseExpiresAt":1,"claim":"c","effect":"keyed_write","toolName":"t"')}\n{}o`);
    expect(await l.claim(request("exp", { request: LATER }))).toMatchObject({ outcome: "claimed", fence: 2, takeover: true, request: "{}" });
  });

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

  it("a row whose retention ran out is gone from Redis; the key can be claimed afresh (fence 1) and stores the new request (LEDGER-21)", async () => {
    const l = ledger();
    await l.claim(request("k1"));
    await l.complete("k1", 1, '"first"');
    await raw.pexpireat(l.redisKey("k1"), 1); // retention in the past: Redis drops it, as the TTL would
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
    expect(await l.lookup("k1")).toBeUndefined();
    expect(await l.claim(request("k1", { request: LATER }))).toMatchObject({ outcome: "claimed", fence: 1, request: LATER });
    expect(await stored(l, "k1")).toMatchObject({ header: { state: "in_flight", fence: 1 }, request: LATER, body: "attempt-1" });
  });

  it("LEDGER-13: a retention below MIN_RETENTION_MS (1 h) is refused (invalid_ledger_input, field retentionMs): 0 and seconds-as-ms among them", () => {
    for (const retentionMs of [0, 1, 86_400, MIN_RETENTION_MS - 1]) {
      let thrown: unknown;
      try {
        ledger({ retentionMs });
      } catch (error) {
        thrown = error;
      }
      expect(isDispatchOnceError(thrown, "invalid_ledger_input"), String(retentionMs)).toBe(true);
      expect(thrown, String(retentionMs)).toMatchObject({ field: "retentionMs" });
      expect((thrown as Error).message).toContain("replay");
    }
    expect(ledger({ retentionMs: MIN_RETENTION_MS }).retentionMs).toBe(3_600_000);
    expect(ledger().retentionMs).toBe(24 * 3_600_000);
    // The test escape hatch still refuses 0: a row gone as it finishes deduplicates nothing, even in a test.
    expect(() => ledger({ retentionMs: 0, allowShortRetentionForTests: true })).toThrow(/retentionMs/);
  });

  it("LEDGER-19: with allowShortRetentionForTests Redis itself expires a finished row after its retention; the key is then claimed afresh", async () => {
    const l = ledger({ retentionMs: 150, allowShortRetentionForTests: true });
    await l.claim(request("k1"));
    await l.complete("k1", 1, '"first"');
    const pttl = await raw.pttl(l.redisKey("k1"));
    expect(pttl > 0 && pttl <= 150, `pttl ${pttl}`).toBe(true);
    await new Promise((r) => setTimeout(r, 400));
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
    expect(await l.claim(request("k1", { request: LATER }))).toMatchObject({ outcome: "claimed", fence: 1, request: LATER });
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

  it("a refused connection's error names the server it could not reach (adoption trial: 'redis checkServer of -: not connected')", async () => {
    const port = await closedPort();
    const startup = await createRedisLedger({ url: `redis://127.0.0.1:${port}`, prefix: uniquePrefix("refused"), commandTimeoutMs: 500 }).then(
      () => undefined,
      (error: unknown) => error as Error & { code?: string },
    );
    expect(startup?.code).toBe("ledger_unavailable");
    expect(startup?.message).toContain(`127.0.0.1:${port}`);
    expect(startup?.message).not.toContain(" of -");
    const l = new RedisLedger({ url: `redis://127.0.0.1:${port}`, prefix: uniquePrefix("refused"), commandTimeoutMs: 500 });
    ledgers.push(l);
    const claim = await l.claim(request("k1")).then(
      () => undefined,
      (error: unknown) => error as Error & { code?: string },
    );
    expect(claim?.code).toBe("ledger_unavailable");
    expect(claim?.message).toContain(`127.0.0.1:${port}`);
    expect(claim?.message).toContain("claim of k1");
  });

  it("a closed ledger raises ledger_unavailable; a client brought by the caller is left open", async () => {
    const client = safeClient();
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
      () => new RedisLedger({ retentionMs: 0 }),
      () => new RedisLedger({ commandTimeoutMs: -1 }),
      () => new RedisLedger({ verifyDurability: "no" as unknown as boolean }),
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
      expect(isDispatchOnceError(thrown, "invalid_ledger_input")).toBe(true);
    }
  });

  it("a negative lease or an unknown effect is refused before anything is sent", async () => {
    const l = ledger();
    await expect(l.claim(request("k1", { leaseMs: -5 }))).rejects.toMatchObject({ code: "invalid_ledger_input", field: "leaseMs" });
    await expect(l.claim(request("k1", { effect: "read" as "keyed_write" }))).rejects.toMatchObject({ code: "invalid_ledger_input", field: "effect" });
    expect(await raw.exists(l.redisKey("k1"))).toBe(0);
  });

  it("LEDGER-11: fail() refuses an error that would not read back as a StoredError (a code that is not a string), so no row it writes is unreadable", async () => {
    const l = ledger();
    const claim = await l.claim(request("k1"));
    if (claim.outcome !== "claimed") throw new Error("expected a claim");
    await expect(l.fail("k1", claim.fence, { name: "E", message: "m", code: 5 } as never)).rejects.toMatchObject({ code: "invalid_ledger_input", field: "error" });
    expect(await l.lookup("k1")).toMatchObject({ state: "in_flight", fence: claim.fence });
  });

  it("capabilities: volatile unless asserted, server clock, shared across processes", () => {
    expect(ledger().capabilities).toEqual({
      durability: "volatile",
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes: 1024 * 1024,
      supports: { listRows: true, resolve: true, auditTrail: true, listExpiredInFlight: true, retire: true },
    });
    expect(ledger({ durability: "durable" }).capabilities.durability).toBe("durable");
  });
});

describe("the audit list (RESOLVE-7)", () => {
  it("RESOLVE-7 lives in the row's slot, expires with the row, and an in-flight re-claim keeps it from expiring under it", async () => {
    const l = ledger();
    await l.claim(request("k1", { effect: "unkeyed_write", owner: "worker-9" }));
    await l.markUnknown("k1", 1, "tool_error: socket hang up");
    const auditKey = l.auditKey("k1");
    expect(auditKey.slice(auditKey.indexOf("{"), auditKey.indexOf("}") + 1)).toBe(`{k1}`); // the row's hash tag
    const rowTtl = await raw.pttl(l.redisKey("k1"));
    const auditTtl = await raw.pttl(auditKey);
    expect(auditTtl > 0 && Math.abs(auditTtl - rowTtl) < 1000, `row ${rowTtl} ms, audit ${auditTtl} ms`).toBe(true);
    expect(JSON.parse((await raw.lrange(auditKey, 0, -1))[0]!)).toMatchObject({ actor: "worker-9", action: "marked_unknown", fence: "1" });
    // Resolved not performed, then claimed again: the row is in flight (no TTL), and so is its trail.
    await l.resolve({ key: "k1", resolution: { outcome: "not_performed" }, actor: "ops", reason: "no trace at the gateway" });
    expect(await l.claim(request("k1", { effect: "unkeyed_write", owner: "worker-10" }))).toMatchObject({ outcome: "claimed", fence: 3, request: FIRST });
    expect(await raw.pttl(l.redisKey("k1"))).toBe(-1);
    expect(await raw.pttl(auditKey)).toBe(-1);
    await l.complete("k1", 3, '"sent"');
    expect(await raw.pttl(auditKey)).toBeGreaterThan(0);
    expect((await l.auditTrail("k1")).map((e) => [e.action, e.actor, e.fence])).toEqual([
      ["marked_unknown", "worker-9", 1],
      ["resolved", "ops", 2],
    ]);
  });
});

describe("the listing indexes (LIST-3, LIST-6)", () => {
  const STATES = ["in_flight", "completed", "failed", "unknown", "released"] as const;
  /** The index key of a state in a row's slot: the in-flight index's hash tag, `rows:<state>`. */
  const listIndex = (l: RedisLedger, key: string, state: string) => l.inflightIndexKey(key).replace(/inflight$/, `rows:${state}`);
  /** Which listing indexes hold the row, with their scores (read from Redis, not through listRows). */
  async function listedIn(l: RedisLedger, key: string): Promise<Record<string, number>> {
    const found: Record<string, number> = {};
    for (const state of STATES) {
      const score = await raw.zscore(listIndex(l, key, state), l.redisKey(key));
      if (score !== null) found[state] = Number(score);
    }
    return found;
  }
  /** The row's last transition time (LIST-2), from the stored header. */
  async function since(l: RedisLedger, key: string): Promise<number> {
    const { header } = (await stored(l, key))!;
    return Number(header.state === "in_flight" ? header.claimedAt : header.finishedAt);
  }

  it("LIST-6: every transition moves the row to exactly its state's index, scored by its last transition, in the same script", async () => {
    const l = ledger({ retentionMs: MIN_RETENTION_MS });
    const expectIn = async (key: string, state: string) => expect(await listedIn(l, key)).toEqual({ [state]: await since(l, key) });
    // claim -> complete
    const a = await l.claim(request("a"));
    await expectIn("a", "in_flight");
    if (a.outcome !== "claimed") throw new Error("not claimed");
    await l.complete("a", a.fence, '"ok"');
    await expectIn("a", "completed");
    // claim -> release -> re-claim -> fail
    const b = await l.claim(request("b"));
    if (b.outcome !== "claimed") throw new Error("not claimed");
    await l.release("b", b.fence);
    await expectIn("b", "released");
    const b2 = await l.claim(request("b", { owner: "attempt-2" }));
    if (b2.outcome !== "claimed") throw new Error("not claimed");
    await expectIn("b", "in_flight");
    await l.fail("b", b2.fence, { name: "Error", message: "declined" });
    await expectIn("b", "failed");
    // keyed takeover after the lease, then markUnknown, then resolve
    const c = await l.claim(request("c"));
    if (c.outcome !== "claimed") throw new Error("not claimed");
    await expireLease(l, "c");
    const taken = await l.claim(request("c", { owner: "attempt-2" }));
    expect(taken).toMatchObject({ outcome: "claimed", takeover: true });
    await expectIn("c", "in_flight");
    await l.markUnknown("c", 2, "lost");
    await expectIn("c", "unknown");
    await l.resolve({ key: "c", resolution: { outcome: "not_performed" }, actor: "ops", reason: "checked" });
    await expectIn("c", "released");
    // unkeyed claim whose lease ran out: the next claim turns it unknown
    const d = await l.claim(request("d", { effect: "unkeyed_write" }));
    if (d.outcome !== "claimed") throw new Error("not claimed");
    await expireLease(l, "d");
    expect(await l.claim(request("d", { effect: "unkeyed_write", owner: "attempt-2" }))).toMatchObject({ outcome: "existing", row: { state: "unknown" } });
    await expectIn("d", "unknown");
  });

  it("LIST-1: a row Redis expired is not listed, and its index member is dropped (only while the row is absent)", async () => {
    const l = ledger({ retentionMs: MIN_RETENTION_MS });
    const claim = await l.claim(request("gone"));
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await l.complete("gone", claim.fence, '"ok"');
    await raw.pexpireat(l.redisKey("gone"), 1); // as its retention running out would
    expect((await l.listRows({})).rows).toEqual([]);
    for (let i = 0; i < 50 && (await raw.zscore(listIndex(l, "gone", "completed"), l.redisKey("gone"))) !== null; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await listedIn(l, "gone")).toEqual({});
  });

  it("LIST-3: a row written before conversations were stored still decodes (without them), is listed, and a re-claim keeps its header tail", async () => {
    const l = ledger({ retentionMs: MIN_RETENTION_MS });
    const claim = await l.claim(request("old"));
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await l.release("old", claim.fence);
    // The stored header of a claim without conversation is the pre-LIST-3 layout exactly.
    const { header } = (await stored(l, "old"))!;
    expect(Object.keys(header)).toEqual(["v", "state", "fence", "claimedAt", "requestBytes", "finishedAt", "claim", "effect", "toolName"]);
    const reclaimed = await l.claim(request("old", { owner: "attempt-2", conversationId: "conv-late", turnIndex: 1 }));
    expect(reclaimed).toMatchObject({ outcome: "claimed", fence: 2, request: FIRST });
    const row = await l.lookup("old");
    // A later claim does not add a conversation the creating claim did not give (LIST-3: kept, not replaced).
    expect(row).toMatchObject({ state: "in_flight", toolName: "send_payment" });
    expect(row?.conversationId).toBeUndefined();
    expect((await l.listRows({ state: "in_flight" })).rows.map((r) => r.key)).toEqual(["old"]);
  });

  it("LIST-3: conversationId and turnIndex are stored in the header and kept by a takeover and a resolution", async () => {
    const l = ledger({ retentionMs: MIN_RETENTION_MS });
    const first = await l.claim(request("k", { conversationId: 'conv "quoted" \\ Zoë', turnIndex: 7 }));
    if (first.outcome !== "claimed") throw new Error("not claimed");
    expect((await stored(l, "k"))!.header).toMatchObject({ conversationId: 'conv "quoted" \\ Zoë', turnIndex: 7 });
    await expireLease(l, "k");
    expect(await l.claim(request("k", { owner: "attempt-2", conversationId: "other", turnIndex: 1 }))).toMatchObject({ takeover: true });
    await l.markUnknown("k", 2, "lost");
    const resolved = await l.resolve({ key: "k", resolution: { outcome: "completed", result: '"done"' }, actor: "ops", reason: "checked" });
    expect(resolved).toMatchObject({ state: "completed", conversationId: 'conv "quoted" \\ Zoë', turnIndex: 7, toolName: "send_payment" });
    const listed = await l.listRows({ conversationId: 'conv "quoted" \\ Zoë' });
    expect(listed.rows.map((r) => [r.key, r.state, r.turnIndex])).toEqual([["k", "completed", 7]]);
  });
});
