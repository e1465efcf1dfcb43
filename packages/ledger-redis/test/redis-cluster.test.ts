import { randomBytes } from "node:crypto";
import type { ClaimRequest } from "@dispatch-once/core";
import { isDispatchOnceError } from "@dispatch-once/core";
import { Cluster, Redis, type ClusterOptions } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLAIM_LUA, LEDGER_CLUSTER_OPTIONS, RedisLedger, createRedisLedger, keySlot } from "../src/index.js";
import { startCluster, until, type LocalCluster } from "./cluster.js";
import { EXPIRE_LEASE_LUA, keysByPrefix, parseStored, uniquePrefix } from "./helpers.js";
import { FaultProxy } from "./proxy.js";

// Issue 5: each transition is one script on one key, so the adapter runs unchanged on Redis
// Cluster. A real three-node cluster is started here on loopback and torn down in afterAll.

let cluster: LocalCluster | undefined;
let client: Cluster | undefined;
let ledger: RedisLedger | undefined;
const prefix = uniquePrefix("cluster");

beforeAll(async () => {
  cluster = await startCluster();
  client = new Cluster(cluster.ports.map((port) => ({ host: "127.0.0.1", port })), { ...LEDGER_CLUSTER_OPTIONS });
  client.on("error", () => {});
  ledger = await createRedisLedger({ client, prefix, retentionMs: 7_200_000 });
}, 120_000);

afterAll(async () => {
  await ledger?.close();
  client?.disconnect();
  await cluster?.stop();
}, 60_000);

function request(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { key, toolName: "create_invoice", effect: "keyed_write", owner: "attempt-1", leaseMs: 60_000, request: first(key), ...overrides };
}

/** The request of a key's first claim: non-ASCII, so a byte/char mix-up in the split would show. */
function first(key: string): string {
  return JSON.stringify({ invoice: key, memo: "Zoë € 😀" });
}

it("claim/complete/fail/release/takeover/unknown on 240 keys spread over all three nodes; every row keeps its first request (LEDGER-21)", async () => {
  if (!cluster || !client || !ledger) throw new Error("cluster did not start");
  const l = ledger;
  const report = await l.checkServer();
  expect(report.nodes).toHaveLength(3);
  expect(report.unsafe).toEqual([]);

  const keys = Array.from({ length: 240 }, () => randomBytes(16).toString("hex"));
  const expected = new Map<string, { header: Record<string, unknown>; request: string; body?: string }>();
  // Later claims send another request; every row must still hold the first one (LEDGER-21).
  const later = { request: '{"invoice":"someone else"}' };
  await Promise.all(
    keys.map(async (key, i) => {
      const kind = i % 6;
      const effect = kind === 5 ? "unkeyed_write" : "keyed_write";
      const claim = await l.claim(request(key, { effect, leaseMs: kind >= 4 ? 0 : 60_000 }));
      expect(claim).toMatchObject({ outcome: "claimed", fence: 1 });
      switch (kind) {
        case 0:
          await l.complete(key, 1, JSON.stringify({ invoice: key, note: "€ 😀" }));
          expected.set(key, { header: { state: "completed", fence: 1 }, request: first(key), body: JSON.stringify({ invoice: key, note: "€ 😀" }) });
          break;
        case 1:
          await l.fail(key, 1, { name: "Declined", message: "no" });
          expected.set(key, { header: { state: "failed", fence: 1 }, request: first(key) });
          break;
        case 2: {
          await l.release(key, 1);
          const again = await l.claim(request(key, { owner: "attempt-2", ...later }));
          expect(again).toMatchObject({ outcome: "claimed", fence: 2, takeover: false, request: first(key) });
          await expect(l.complete(key, 1, "{}")).rejects.toMatchObject({ code: "stale_claim" });
          expected.set(key, { header: { state: "in_flight", fence: 2 }, request: first(key), body: "attempt-2" });
          break;
        }
        case 3: {
          await client!.eval(EXPIRE_LEASE_LUA, 2, l.redisKey(key), l.inflightIndexKey(key));
          const takeover = await l.claim(request(key, { owner: "attempt-2", ...later }));
          expect(takeover).toMatchObject({ outcome: "claimed", fence: 2, takeover: true, request: first(key) });
          await l.complete(key, 2, '"second"');
          expected.set(key, { header: { state: "completed", fence: 2 }, request: first(key), body: '"second"' });
          break;
        }
        case 4: {
          // leaseMs 0: expired at once; a keyed_write is taken over.
          const takeover = await l.claim(request(key, { owner: "attempt-2", ...later }));
          expect(takeover).toMatchObject({ outcome: "claimed", fence: 2, takeover: true, request: first(key) });
          await l.markUnknown(key, 2, "tool_error");
          expected.set(key, { header: { state: "unknown", fence: 2 }, request: first(key), body: "tool_error" });
          break;
        }
        default: {
          const seen = await l.claim(request(key, { effect, owner: "attempt-2", ...later }));
          expect(seen.outcome === "existing" && seen.row).toMatchObject({ state: "unknown", reason: "lease_expired", request: first(key) });
          expected.set(key, { header: { state: "unknown", fence: 1 }, request: first(key), body: "lease_expired" });
        }
      }
    }),
  );

  // Read every primary directly: each row lives on exactly one node, all three nodes hold rows.
  // Beside the rows, each node holds the in-flight indexes of its slots: a row in flight is in
  // the index of its own slot (same node) with its lease as score, a finished row in none.
  const perNode = new Map<number, string[]>();
  const indexed = new Map<string, number>(); // row key -> score, over all nodes
  for (const port of cluster.ports) {
    const node = new Redis({ host: "127.0.0.1", port });
    try {
      const found = await keysByPrefix(node, prefix);
      const rows = found.filter((k) => k.endsWith("}"));
      perNode.set(port, rows);
      for (const indexKey of found.filter((k) => k.endsWith(":inflight"))) {
        const entries = await node.zrange(indexKey, "0", "-1", "WITHSCORES");
        for (let i = 0; i < entries.length; i += 2) {
          expect(rows, `${entries[i]} is indexed on the node that holds it`).toContain(entries[i]);
          indexed.set(entries[i]!, Number(entries[i + 1]));
        }
      }
      for (const redisKey of rows) {
        const key = redisKey.slice(prefix.length + 2, -1);
        const stored = parseStored((await node.getBuffer(redisKey))!);
        expect(stored, redisKey).toMatchObject(expected.get(key)!);
        const pttl = await node.pttl(redisKey);
        if (stored.header.state === "in_flight") {
          expect(pttl).toBe(-1);
          expect(indexed.get(redisKey), `${redisKey} in its index`).toBe(Number(stored.header.leaseExpiresAt));
        } else expect(pttl > 0 && pttl <= 7_200_000, `pttl ${pttl}`).toBe(true);
      }
    } finally {
      node.disconnect();
    }
  }
  const all = [...perNode.values()].flat();
  expect(all).toHaveLength(keys.length);
  expect(new Set(all)).toEqual(new Set(keys.map((k) => l.redisKey(k))));
  for (const [port, found] of perNode) expect(found.length, `rows on node ${port}`).toBeGreaterThan(0);
  const inFlight = keys.filter((k) => expected.get(k)!.header.state === "in_flight").map((k) => l.redisKey(k));
  expect(new Set(indexed.keys())).toEqual(new Set(inFlight));

  // And through the adapter (lookup routes by slot).
  for (const key of keys) {
    expect(await l.lookup(key)).toMatchObject({ state: expected.get(key)!.header.state, request: expected.get(key)!.request });
  }
}, 120_000);

describe("a new Cluster client (connections to its nodes open on first use)", () => {
  it("LEDGER-12: a ledger built on it with new RedisLedger (no server check to touch the nodes first) answers its first claims on every primary: a node whose connection is still opening is waited for within the bound, not reported unavailable", async () => {
    if (!cluster) throw new Error("cluster did not start");
    const fresh = new Cluster(cluster.ports.map((port) => ({ host: "127.0.0.1", port })), { ...LEDGER_CLUSTER_OPTIONS });
    fresh.on("error", () => {});
    const l = new RedisLedger({ client: fresh, prefix: uniquePrefix("cluster-fresh"), retentionMs: 7_200_000 });
    try {
      // ioredis opens a node's connection on the first command routed to it and, without an
      // offline queue, refuses that command ("Connection is closed") while it opens: nothing
      // was sent, so the ledger must wait for the connection within its deadline instead.
      const keys = Array.from({ length: 48 }, () => randomBytes(16).toString("hex"));
      const claims = await Promise.allSettled(keys.map((key) => l.claim(request(key))));
      const refused = claims.flatMap((c, i) => (c.status === "rejected" ? [`${keys[i]}: ${String((c.reason as Error).message)}`] : []));
      expect(refused).toEqual([]);
      // The keys did reach all three primaries (so each node's first claim was among them).
      const served = new Set(keys.map((key) => fresh.slots[keySlot(l.redisKey(key))]?.[0]));
      expect(served.size).toBe(3);
      for (const c of claims) expect(c).toMatchObject({ status: "fulfilled", value: { outcome: "claimed", fence: 1 } });
      // Read from the store: each key has one row, in flight at fence 1, holding its own request.
      for (const key of keys) {
        const stored = await fresh.getBuffer(l.redisKey(key));
        expect(stored, key).not.toBeNull();
        const row = parseStored(stored!);
        expect(row.header, key).toMatchObject({ state: "in_flight", fence: 1 });
        expect(row.request, key).toBe(first(key));
      }
    } finally {
      await l.close();
      fresh.disconnect();
    }
  });
});

describe("listRows on a cluster (LIST-1, LIST-2, LIST-5, LIST-6)", () => {
  it("merges every node's listing indexes: rows of all three nodes, filtered, oldest first, each once across pages", async () => {
    if (!cluster || !client || !ledger) throw new Error("cluster did not start");
    const l = ledger;
    const conversation = `conv-${randomBytes(4).toString("hex")}`;
    const keys = Array.from({ length: 45 }, () => randomBytes(16).toString("hex"));
    // Spread over the nodes: a listing that read one node only would miss rows.
    const nodesOf = new Set(keys.map((key) => client!.slots[keySlot(l.redisKey(key))]?.[0]));
    expect(nodesOf.size).toBe(3);
    const states = new Map<string, string>();
    for (const [i, key] of keys.entries()) {
      const claim = await l.claim(request(key, { conversationId: conversation, turnIndex: i, toolName: i % 2 === 0 ? "send_sms" : "create_invoice" }));
      if (claim.outcome !== "claimed") throw new Error("not claimed");
      if (i % 3 === 0) await l.complete(key, claim.fence, '"done"');
      if (i % 3 === 1) await l.markUnknown(key, claim.fence, "tool_error");
      states.set(key, i % 3 === 0 ? "completed" : i % 3 === 1 ? "unknown" : "in_flight");
    }
    const listed: Array<{ key: string; state: string; since: number; turnIndex?: number }> = [];
    let cursor: string | undefined;
    do {
      const page = await l.listRows({ conversationId: conversation, state: ["unknown", "in_flight"], limit: 4, ...(cursor === undefined ? {} : { cursor }) });
      for (const row of page.rows) {
        listed.push({ key: row.key, state: row.state, since: row.state === "in_flight" ? row.claimedAt : row.finishedAt, turnIndex: row.turnIndex });
      }
      cursor = page.cursor;
    } while (cursor !== undefined);
    const expected = keys.filter((key) => states.get(key) !== "completed");
    expect(listed.map((r) => r.key).sort()).toEqual([...expected].sort());
    for (const row of listed) expect([row.state, row.turnIndex]).toEqual([states.get(row.key), keys.indexOf(row.key)]);
    for (let i = 1; i < listed.length; i++) {
      const [a, b] = [listed[i - 1]!, listed[i]!];
      expect(a.since < b.since || (a.since === b.since && a.key < b.key), `${a.key} before ${b.key}`).toBe(true);
    }
    const sms = await l.listRows({ conversationId: conversation, toolName: "send_sms", state: "completed", limit: 1000 });
    expect(sms.rows.map((r) => r.key).sort()).toEqual(keys.filter((_, i) => i % 2 === 0 && i % 3 === 0).sort());
    expect(sms.cursor).toBeUndefined();
  });
});

describe("slots and the in-flight index on a cluster", () => {
  it("keySlot agrees with CLUSTER KEYSLOT (hash tags, braces, empty tags, non-ASCII), and every row's index key is in the row's own slot", async () => {
    if (!cluster || !client || !ledger) throw new Error("cluster did not start");
    const node = new Redis({ host: "127.0.0.1", port: cluster.ports[0]! });
    try {
      const samples = ["", "{", "}", "{}", "a{}b", "{a}b", "a{b}c{d}", "x{{y}}", "é", "😀{😀}", "k}", "}{", ...Array.from({ length: 300 }, () => randomBytes(12).toString("base64"))];
      for (const s of samples) expect(keySlot(s), JSON.stringify(s)).toBe(await node.cluster("KEYSLOT", s));
      for (const key of ["", "}", "a}b", "{x}", "😀", ...Array.from({ length: 200 }, () => randomBytes(8).toString("hex"))]) {
        const row = ledger.redisKey(key);
        expect(await node.cluster("KEYSLOT", ledger.inflightIndexKey(key)), JSON.stringify(key)).toBe(await node.cluster("KEYSLOT", row));
        // LEDGER-28: the retired claim ids the claim script reads live in the row's slot too.
        expect(await node.cluster("KEYSLOT", ledger.retiredKey(key)), JSON.stringify(key)).toBe(await node.cluster("KEYSLOT", row));
      }
    } finally {
      node.disconnect();
    }
  });

  it("LEDGER-28 on a cluster: retire and the claims it refuses run on each key's own node; held rows are released, absent ones never created", async () => {
    if (!cluster || !client || !ledger) throw new Error("cluster did not start");
    const id = `cluster-retired-${randomBytes(8).toString("hex")}`;
    const keys = Array.from({ length: 60 }, () => `retire-${randomBytes(8).toString("hex")}`);
    const held = keys.filter((_, i) => i % 2 === 0);
    for (const key of held) expect(await ledger.claim(request(key, { claimId: id }))).toMatchObject({ outcome: "claimed", fence: 1 });
    const results = await Promise.all(keys.map((key) => ledger!.retire(key, id, { release: true })));
    keys.forEach((key, i) => expect(results[i], key).toEqual({ released: held.includes(key) }));
    const nodes = new Set<number>();
    for (const key of keys) {
      await expect(ledger.claim(request(key, { claimId: id })), key).rejects.toMatchObject({ code: "stale_claim", fence: held.includes(key) ? 1 : 0 });
      expect(await client.zscore(ledger.retiredKey(key), `${id}:${key}`), key).not.toBeNull();
      const row = await client.get(ledger.redisKey(key));
      if (held.includes(key)) expect(parseStored(row!).header, key).toMatchObject({ state: "released", fence: 1, claim: id });
      else expect(row, key).toBeNull();
      nodes.add(cluster.ports.findIndex((port) => (client!.slots[keySlot(ledger!.redisKey(key))] ?? []).includes(`127.0.0.1:${port}`)));
    }
    expect(nodes.size).toBe(3); // the keys spread over all three nodes
  });

  it("listExpiredInFlight lists the expired in-flight rows of every node, oldest first, and nothing else", async () => {
    if (!cluster || !client || !ledger) throw new Error("cluster did not start");
    const l = await createRedisLedger({ client, prefix: uniquePrefix("cluster-list"), retentionMs: 7_200_000 });
    try {
      const expired = Array.from({ length: 60 }, () => randomBytes(16).toString("hex"));
      const live = Array.from({ length: 60 }, () => randomBytes(16).toString("hex"));
      for (const key of expired) await l.claim(request(key, { effect: "unkeyed_write", leaseMs: 0 }));
      for (const key of live) await l.claim(request(key, { leaseMs: 60_000 }));
      const listed = await l.listExpiredInFlight({ limit: 1000 });
      expect(new Set(listed.map((r) => r.key))).toEqual(new Set(expired));
      const leases = listed.map((r) => r.leaseExpiresAt);
      expect(leases).toEqual([...leases].sort((a, b) => a - b));
      // Rows of all three nodes are among them.
      const ports = new Set<number>();
      for (const key of expired) {
        const nodeKey = client.slots[keySlot(l.redisKey(key))]![0]!;
        ports.add(Number(nodeKey.split(":")[1]));
      }
      expect(ports.size).toBe(3);
      expect(await l.listExpiredInFlight({ limit: 7 })).toEqual(listed.slice(0, 7));
    } finally {
      await l.close();
    }
  });
});

describe("Cluster client settings that can send a script twice", () => {
  it("a Cluster with ioredis' defaults is refused (invalid_ledger_input), naming each setting; each alone is refused; LEDGER_CLUSTER_OPTIONS is accepted", () => {
    if (!cluster) throw new Error("cluster did not start");
    const nodes = cluster.ports.map((port) => ({ host: "127.0.0.1", port }));
    const made: Cluster[] = [];
    const make = (options: ClusterOptions) => {
      const c = new Cluster(nodes, { lazyConnect: true, ...options });
      made.push(c);
      try {
        new RedisLedger({ client: c, prefix: uniquePrefix("cluster-refused") });
        return undefined;
      } catch (error) {
        return error;
      }
    };
    try {
      const defaults = make({});
      expect(isDispatchOnceError(defaults, "invalid_ledger_input")).toBe(true);
      expect(defaults).toMatchObject({ field: "client.enableOfflineQueue" });
      for (const text of ["client.retryDelayOnFailover is 100", "client.redisOptions.autoResendUnfulfilledCommands is true", "client.redisOptions.maxRetriesPerRequest is 20", "LEDGER_CLUSTER_OPTIONS"]) {
        expect((defaults as Error).message).toContain(text);
      }
      const safe = LEDGER_CLUSTER_OPTIONS;
      const cases: Array<[ClusterOptions, string]> = [
        [{ ...safe, enableOfflineQueue: true }, "client.enableOfflineQueue"],
        [{ ...safe, retryDelayOnFailover: 100 }, "client.retryDelayOnFailover"],
        [{ ...safe, redisOptions: { ...safe.redisOptions, autoResendUnfulfilledCommands: true } }, "client.redisOptions.autoResendUnfulfilledCommands"],
        [{ ...safe, redisOptions: { ...safe.redisOptions, maxRetriesPerRequest: 2 } }, "client.redisOptions.maxRetriesPerRequest"],
      ];
      for (const [options, field] of cases) expect(make(options), field).toMatchObject({ code: "invalid_ledger_input", field });
      expect(make({ ...safe, redisOptions: { ...safe.redisOptions } })).toBeUndefined();
    } finally {
      for (const c of made) c.disconnect();
    }
  });

  /** A Cluster client whose every node connection goes through a FaultProxy (ioredis natMap). */
  async function proxiedCluster(options: ClusterOptions): Promise<{ c: Cluster; proxies: FaultProxy[] }> {
    const proxies = await Promise.all(cluster!.ports.map((port) => FaultProxy.start({ host: "127.0.0.1", port })));
    const natMap = Object.fromEntries(cluster!.ports.map((port, i) => [`127.0.0.1:${port}`, { host: "127.0.0.1", port: proxies[i]!.port }]));
    const c = new Cluster(proxies.map((p) => ({ host: "127.0.0.1", port: p.port })), { ...options, natMap });
    c.on("error", () => {});
    await new Promise<void>((resolve, reject) => {
      c.once("ready", () => resolve());
      c.once("end", () => reject(new Error("cluster client ended")));
    });
    return { c, proxies };
  }

  it("the hazard on a Cluster, shown on ioredis itself: with its defaults a claim whose reply was lost is re-sent (retryDelayOnFailover) and runs twice; its token makes the second run the same claim (LEDGER-26), where it used to meet its own row", async () => {
    if (!cluster || !ledger) throw new Error("cluster did not start");
    const { c, proxies } = await proxiedCluster({});
    try {
      c.defineCommand("claimForHazardTest", { lua: CLAIM_LUA, numberOfKeys: 4 });
      const key = randomBytes(16).toString("hex");
      for (const p of proxies) p.watch("owner-cluster-hazard");
      const cuts = proxies.map((p) => p.cutAfterReply("owner-cluster-hazard"));
      const reply = (await (c as unknown as Record<string, (...a: string[]) => Promise<unknown[]>>).claimForHazardTest!(
        ledger.redisKey(key), ledger.inflightIndexKey(key), ledger.auditKey(key), ledger.retiredKey(key),
        '"create_invoice"', "unkeyed_write", "owner-cluster-hazard", "60000", "7200000", first(key), "hazard.1", "",
      )) as [string, string];
      await Promise.race(cuts);
      expect(proxies.reduce((n, p) => n + p.count("owner-cluster-hazard"), 0)).toBeGreaterThanOrEqual(2);
      // Before LEDGER-26: 'existing' with the claimant's own live row (it would wait, then see unknown).
      expect(reply.slice(0, 2)).toEqual(["claimed", "1"]);
    } finally {
      c.disconnect();
      await Promise.all(proxies.map((p) => p.close()));
    }
  });

  it("LEDGER-12 on a Cluster with LEDGER_CLUSTER_OPTIONS: a claim whose reply is lost raises ledger_unavailable, reaches a node once, and its row is released; the retry claims it", async () => {
    if (!cluster || !ledger) throw new Error("cluster did not start");
    const { c, proxies } = await proxiedCluster({ ...LEDGER_CLUSTER_OPTIONS });
    const l = new RedisLedger({ client: c, prefix: uniquePrefix("cluster-lost"), retentionMs: 7_200_000, onWarning: () => {} });
    try {
      const key = randomBytes(16).toString("hex");
      await l.lookup(key);
      for (const p of proxies) p.watch("owner-cluster-lost");
      const cuts = proxies.map((p) => p.cutAfterReply("owner-cluster-lost"));
      await expect(l.claim(request(key, { effect: "unkeyed_write", owner: "owner-cluster-lost" }))).rejects.toMatchObject({ code: "ledger_unavailable" });
      await Promise.race(cuts);
      const deadline = Date.now() + 5000;
      while ((await l.lookup(key).catch(() => undefined))?.state !== "released") {
        if (Date.now() > deadline) throw new Error(`the lost claim was not released: ${JSON.stringify(await l.lookup(key))}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(proxies.reduce((n, p) => n + p.count("owner-cluster-lost"), 0)).toBe(1);
      // The client is still reconnecting to the node whose connection the proxy cut: until it has,
      // a claim can meet a redirection loop (a CI run: "Too many Cluster redirections. Last error:
      // MOVED"), ledger_unavailable. A dispatcher retries such a claim with the same claim id; so
      // does this, and the row must still be claimed at fence 2 by it.
      const retry = request(key, { effect: "unkeyed_write", owner: "attempt-2", request: "{}", claimId: "attempt2claimAAAAAAAAAAAA" });
      const retried = await until("the retried claim, while the client reconnects", 2_000, () => l.claim(retry));
      expect(retried).toMatchObject({ outcome: "claimed", fence: 2, request: first(key) });
    } finally {
      await l.close();
      c.disconnect();
      await Promise.all(proxies.map((p) => p.close()));
    }
  });
});
