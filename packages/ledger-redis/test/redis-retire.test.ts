// retire() (LEDGER-28) on a real Redis: what the script writes, what a claim carrying a retired
// claim id meets, how long the id is kept (the set's TTL and each member's time, both on the
// server's clock), and the script cache. Every assertion about what was written reads Redis directly.
import type { ClaimRequest } from "@dispatch-once/core";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RedisLedger, keySlot, type RedisLedgerOptions } from "../src/index.js";
import { EXPIRE_LEASE_LUA, REDIS_URL, closedPort, deleteByPrefix, keysByPrefix, parseStored, rawClient, serverNow, uniquePrefix } from "./helpers.js";
import { startServer, type PrivateServer } from "./server.js";

const ID = "retired-claim-id-0123456789";
const OTHER = "another-claim-id-0123456789";
const RETENTION = 3_600_000;

let raw: Redis;
const prefixes: string[] = [];
const ledgers: RedisLedger[] = [];

function ledger(options: RedisLedgerOptions = {}): RedisLedger {
  const prefix = options.prefix ?? uniquePrefix("retire");
  prefixes.push(prefix);
  const created = new RedisLedger({ url: REDIS_URL, retentionMs: RETENTION, ...options, prefix });
  ledgers.push(created);
  return created;
}

function request(key: string, claimId?: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return {
    key,
    toolName: "send_payment",
    effect: "keyed_write",
    owner: "attempt-1",
    leaseMs: 30_000,
    request: '{"amount":4200,"memo":"Zoë 😀"}',
    ...(claimId === undefined ? {} : { claimId }),
    ...overrides,
  };
}

async function expireLease(l: RedisLedger, key: string): Promise<void> {
  expect(await raw.eval(EXPIRE_LEASE_LUA, 2, l.redisKey(key), l.inflightIndexKey(key))).toBe(1);
}

/** The stored row's bytes (undefined when absent). */
async function bytes(l: RedisLedger, key: string): Promise<Buffer | undefined> {
  return (await raw.getBuffer(l.redisKey(key))) ?? undefined;
}

beforeAll(async () => {
  raw = rawClient();
  expect(await raw.ping()).toBe("PONG");
});

afterEach(async () => {
  await Promise.all(ledgers.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  for (const prefix of prefixes) await deleteByPrefix(raw, prefix);
  await raw.quit();
});

describe("retire (LEDGER-28)", () => {
  it("LEDGER-28: a claim id retired for a key with no row is refused with stale_claim (fence 0) and writes nothing; other ids and none claim normally", async () => {
    const l = ledger();
    expect(l.capabilities.supports?.retire).toBe(true);
    const before = await serverNow(raw);
    expect(await l.retire("k", ID)).toEqual({ released: false });
    const after = await serverNow(raw);
    // One member in the slot's set: the claim id, then the key; its time is the retention from the server's now.
    expect(await keysByPrefix(raw, l.prefix)).toEqual([l.retiredKey("k")]);
    const score = Number(await raw.zscore(l.retiredKey("k"), `${ID}:k`));
    expect(score).toBeGreaterThanOrEqual(before + RETENTION);
    expect(score).toBeLessThanOrEqual(after + RETENTION);
    const pttl = await raw.pttl(l.retiredKey("k"));
    expect(pttl > 0 && pttl <= RETENTION, `pttl ${pttl}`).toBe(true);

    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
    expect(await keysByPrefix(raw, l.prefix)).toEqual([l.retiredKey("k")]); // no row, no index entry
    expect(await l.lookup("k")).toBeUndefined();
    expect((await l.listRows()).rows).toEqual([]);
    expect(await l.sweep()).toBe(0);
    // The same id on another key, another id on this key, or none: claims as ever.
    expect(await l.claim(request("other-key", ID))).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(await l.claim(request("k", OTHER))).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(await l.claim(request("k"))).toMatchObject({ outcome: "existing" });
    // On another claim's live row the retired id is still refused (with the row's fence), not told "existing".
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    expect(parseStored((await bytes(l, "k"))!).header).toMatchObject({ state: "in_flight", fence: 1, claim: OTHER });
  });

  it("LEDGER-28: a retired id is refused before LEDGER-26 recognises it on its own in-flight row, live or expired, and the row's bytes stay as they were", async () => {
    const l = ledger();
    await l.claim(request("k", ID));
    const held = await bytes(l, "k");
    expect(await l.retire("k", ID)).toEqual({ released: false });
    expect(await bytes(l, "k")).toEqual(held);
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    await expireLease(l, "k");
    const expired = await bytes(l, "k");
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    expect(await bytes(l, "k")).toEqual(expired);
    // The owner still holds it by its fence (LEDGER-5).
    await l.complete("k", 1, '"done"');
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
  });

  it("LEDGER-28: release:true releases the row only when it is in flight under that very claim id, in the same script: fence, request, claim id kept; indexes moved (LEDGER-8, LEDGER-27)", async () => {
    const l = ledger();
    await l.claim(request("k", ID, { request: '{"first":true}' }));
    const held = await bytes(l, "k");
    expect(await l.retire("k", OTHER, { release: true })).toEqual({ released: false });
    expect(await l.retire("k", ID, { release: false })).toEqual({ released: false });
    expect(await l.retire("k", ID)).toEqual({ released: false });
    expect(await bytes(l, "k")).toEqual(held);
    expect(await raw.zscore(l.inflightIndexKey("k"), l.redisKey("k"))).not.toBeNull();

    expect(await l.retire("k", ID, { release: true })).toEqual({ released: true });
    const released = parseStored((await bytes(l, "k"))!);
    expect(released).toMatchObject({ header: { state: "released", fence: 1, claim: ID }, request: '{"first":true}', body: "" });
    const pttl = await raw.pttl(l.redisKey("k"));
    expect(pttl > 0 && pttl <= RETENTION, `pttl ${pttl}`).toBe(true);
    expect(await raw.zscore(l.inflightIndexKey("k"), l.redisKey("k"))).toBeNull();
    expect((await l.listRows({ state: "released" })).rows.map((r) => r.key)).toEqual(["k"]);
    expect((await l.listRows({ state: "in_flight" })).rows).toEqual([]);
    expect(await l.lookup("k")).toMatchObject({ state: "released", fence: 1 });

    // Idempotent: nothing more changes, nothing is released again.
    const tombstone = await bytes(l, "k");
    expect(await l.retire("k", ID, { release: true })).toEqual({ released: false });
    expect(await bytes(l, "k")).toEqual(tombstone);
    expect((await raw.zrange(l.retiredKey("k"), "0", "-1")).sort()).toEqual([`${ID}:k`, `${OTHER}:k`].sort());
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    expect(await l.claim(request("k", undefined, { request: '{"later":true}' }))).toMatchObject({ outcome: "claimed", fence: 2, request: '{"first":true}' });
  });

  it("LEDGER-28: an expired lease under the claim id is released too (keyed and unkeyed), never turned unknown", async () => {
    const l = ledger();
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      await l.claim(request(effect, ID, { effect }));
      await expireLease(l, effect);
    }
    expect(await l.listExpiredInFlight()).toHaveLength(2);
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      expect(await l.retire(effect, ID, { release: true })).toEqual({ released: true });
      expect(parseStored((await bytes(l, effect))!).header).toMatchObject({ state: "released", fence: 1, claim: ID });
    }
    expect(await l.listExpiredInFlight()).toEqual([]);
  });

  it("LEDGER-28: a finished row, or a row taken over under another id, is never changed by release:true", async () => {
    const l = ledger();
    await l.claim(request("done", ID));
    await l.complete("done", 1, '"ok"');
    const done = await bytes(l, "done");
    expect(await l.retire("done", ID, { release: true })).toEqual({ released: false });
    expect(await bytes(l, "done")).toEqual(done);

    await l.claim(request("taken", ID));
    await expireLease(l, "taken");
    expect(await l.claim(request("taken", OTHER))).toMatchObject({ outcome: "claimed", fence: 2, takeover: true });
    const taken = await bytes(l, "taken");
    expect(await l.retire("taken", ID, { release: true })).toEqual({ released: false });
    expect(await bytes(l, "taken")).toEqual(taken);
  });

  it("LEDGER-28: past its time on the server clock an id is forgotten: a member past its score is not refused, and the next retire in the slot drops it", async () => {
    const l = ledger();
    // Two keys of one slot (the hash tag of "s}1" and "s}2" is "s"): one set holds both ids.
    expect(l.retiredKey("s}1")).toBe(l.retiredKey("s}2"));
    await l.retire("s}1", ID);
    await raw.zadd(l.retiredKey("s}1"), (await serverNow(raw)) - 1, `${ID}:s}1`); // its time has passed
    expect(await l.claim(request("s}1", ID))).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(await raw.zscore(l.retiredKey("s}1"), `${ID}:s}1`)).not.toBeNull();
    await l.retire("s}2", ID);
    expect(await raw.zrange(l.retiredKey("s}1"), "0", "-1")).toEqual([`${ID}:s}2`]);
    await expect(l.claim(request("s}2", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
  });

  it("LEDGER-28: with a short retention Redis itself drops the retired ids (the set's TTL); the claim then takes the key", async () => {
    const l = ledger({ retentionMs: 150, allowShortRetentionForTests: true });
    await l.retire("k", ID);
    const pttl = await raw.pttl(l.retiredKey("k"));
    expect(pttl > 0 && pttl <= 150, `pttl ${pttl}`).toBe(true);
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
    await new Promise((r) => setTimeout(r, 400));
    expect(await raw.exists(l.retiredKey("k"))).toBe(0);
    expect(await l.claim(request("k", ID))).toMatchObject({ outcome: "claimed", fence: 1 });
  });

  it("LEDGER-28: a claim without a claim id never reads the retired ids: a damaged set fails only claims that carry one (ledger_corrupt, nothing written) and retire", async () => {
    const l = ledger();
    await raw.set(l.retiredKey("k"), "not a sorted set");
    expect(await l.claim(request("k"))).toMatchObject({ outcome: "claimed", fence: 1 });
    await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "ledger_corrupt" });
    const held = await bytes(l, "k");
    await expect(l.retire("k", ID, { release: true })).rejects.toMatchObject({ code: "ledger_corrupt" });
    expect(await bytes(l, "k")).toEqual(held);
    expect(await raw.get(l.retiredKey("k"))).toBe("not a sorted set");
  });

  it("LEDGER-28: invalid arguments are invalid_ledger_input before anything is sent", async () => {
    const l = ledger();
    const bad: [unknown, unknown, unknown, string][] = [
      ["", ID, undefined, "key"],
      [42, ID, undefined, "key"],
      ["a\uD800", ID, undefined, "key"],
      ["k", undefined, undefined, "claimId"],
      ["k", "short", undefined, "claimId"],
      ["k", "a.dotted.ledger.token.0123", undefined, "claimId"],
      ["k", ID, null, "options"],
      ["k", ID, { release: "yes" }, "release"],
    ];
    const retire = l.retire as (key: unknown, claimId: unknown, options?: unknown) => Promise<unknown>;
    for (const [key, claimId, options, field] of bad) {
      await expect(retire.call(l, key, claimId, options), `${String(key)} ${String(claimId)} ${JSON.stringify(options)}`).rejects.toMatchObject({
        code: "invalid_ledger_input",
        field,
      });
    }
    expect(await keysByPrefix(raw, l.prefix)).toEqual([]);
  });

  it("LEDGER-12: a refused connection or a closed ledger is ledger_unavailable", async () => {
    const port = await closedPort();
    const refused = new RedisLedger({ url: `redis://127.0.0.1:${port}`, prefix: uniquePrefix("retire-refused") });
    ledgers.push(refused);
    await expect(refused.retire("k", ID, { release: true })).rejects.toMatchObject({ code: "ledger_unavailable" });
    const l = ledger();
    await l.close();
    await expect(l.retire("k", ID)).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(await keysByPrefix(raw, l.prefix)).toEqual([]);
  });

  it("the retired set of every key is in the key's own slot (the in-flight index's hash tag), whatever braces the key holds", () => {
    const l = ledger();
    for (const key of ["k", "}", "a}b", "{x}", "😀", "s}1", "with spaces and : colons"]) {
      expect(keySlot(l.retiredKey(key)), JSON.stringify(key)).toBe(keySlot(l.redisKey(key)));
      expect(l.retiredKey(key)).toBe(l.inflightIndexKey(key).replace(/:inflight$/, ":retired"));
    }
  });
});

describe("the script cache (SCRIPT FLUSH, NOSCRIPT)", () => {
  let server: PrivateServer | undefined;
  beforeAll(async () => {
    server = await startServer(["--save", "", "--appendonly", "no"]);
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("after SCRIPT FLUSH the claim and retire scripts are loaded again (EVALSHA answers NOSCRIPT, the client falls back to EVAL) and behave the same", async () => {
    if (!server) throw new Error("no server");
    const l = ledger({ url: server.url });
    await l.claim(request("k", ID));
    expect(await l.retire("k", ID, { release: true })).toEqual({ released: true });
    const own = new Redis(server.url);
    own.on("error", () => {});
    /** How often the server ran a script from its text (EVAL): what a client does after NOSCRIPT. */
    const evals = async () => Number(/cmdstat_eval:calls=(\d+)/.exec(await own.info("commandstats"))?.[1] ?? 0);
    try {
      expect(await own.script("FLUSH")).toBe("OK");
      let before = await evals();
      await expect(l.claim(request("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
      expect(await evals()).toBe(before + 1);
      expect(await own.script("FLUSH")).toBe("OK");
      before = await evals();
      expect(await l.retire("k2", ID)).toEqual({ released: false });
      expect(await evals()).toBe(before + 1);
      await expect(l.claim(request("k2", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
      expect(await l.claim(request("k2", OTHER))).toMatchObject({ outcome: "claimed", fence: 1 });
    } finally {
      own.disconnect();
    }
  });

  it("after SCRIPT FLUSH a fresh claim and each finish (complete, fail, markUnknown, release) load their script again by EVAL, once, and store what they would have", async () => {
    if (!server) throw new Error("no server");
    const l = ledger({ url: server.url });
    const own = new Redis(server.url);
    own.on("error", () => {});
    const evals = async () => Number(/cmdstat_eval:calls=(\d+)/.exec(await own.info("commandstats"))?.[1] ?? 0);
    const finishes: Array<[string, (key: string, fence: number) => Promise<void>, Record<string, unknown>]> = [
      ["complete", (key, fence) => l.complete(key, fence, '{"ok":true}'), { state: "completed", result: '{"ok":true}' }],
      ["fail", (key, fence) => l.fail(key, fence, { name: "Declined", message: "no" }), { state: "failed" }],
      ["markUnknown", (key, fence) => l.markUnknown(key, fence, "lost"), { state: "unknown", reason: "lost" }],
      ["release", (key, fence) => l.release(key, fence), { state: "released" }],
    ];
    try {
      for (const [name, finish, row] of finishes) {
        expect(await own.script("FLUSH")).toBe("OK");
        let before = await evals();
        const claimed = await l.claim(request(`fresh-${name}`, `${ID}-${name}`));
        expect(claimed).toMatchObject({ outcome: "claimed", fence: 1 });
        expect(await evals()).toBe(before + 1);
        expect(await own.script("FLUSH")).toBe("OK");
        before = await evals();
        await finish(`fresh-${name}`, 1);
        expect(await evals()).toBe(before + 1);
        expect(await l.lookup(`fresh-${name}`)).toMatchObject(name === "release" ? { state: "released" } : { ...row, fence: 1 });
        // Loaded again: the next finish of another row is an EVALSHA.
        await l.claim(request(`again-${name}`, `${OTHER}-${name}`));
        before = await evals();
        await finish(`again-${name}`, 1);
        expect(await evals()).toBe(before);
      }
    } finally {
      own.disconnect();
    }
  });
});
