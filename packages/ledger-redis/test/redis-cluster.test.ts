import { randomBytes } from "node:crypto";
import type { ClaimRequest } from "@dispatch-once/core";
import { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createRedisLedger, type RedisLedger } from "../src/index.js";
import { startCluster, type LocalCluster } from "./cluster.js";
import { EXPIRE_LEASE_LUA, keysByPrefix, parseStored, uniquePrefix } from "./helpers.js";

// Issue 5: each transition is one script on one key, so the adapter runs unchanged on Redis
// Cluster. A real three-node cluster is started here on loopback and torn down in afterAll.

let cluster: LocalCluster | undefined;
let client: Cluster | undefined;
let ledger: RedisLedger | undefined;
const prefix = uniquePrefix("cluster");

beforeAll(async () => {
  cluster = await startCluster();
  client = new Cluster(cluster.ports.map((port) => ({ host: "127.0.0.1", port })), {
    redisOptions: { maxRetriesPerRequest: 1 },
  });
  client.on("error", () => {});
  ledger = await createRedisLedger({ client, prefix, retentionMs: 600_000 });
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
          await client!.eval(EXPIRE_LEASE_LUA, 1, l.redisKey(key));
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
  const perNode = new Map<number, string[]>();
  for (const port of cluster.ports) {
    const node = new Redis({ host: "127.0.0.1", port });
    try {
      const found = await keysByPrefix(node, prefix);
      perNode.set(port, found);
      for (const redisKey of found) {
        const key = redisKey.slice(prefix.length + 2, -1);
        const stored = parseStored((await node.getBuffer(redisKey))!);
        expect(stored, redisKey).toMatchObject(expected.get(key)!);
        const pttl = await node.pttl(redisKey);
        if (stored.header.state === "in_flight") expect(pttl).toBe(-1);
        else expect(pttl > 0 && pttl <= 600_000, `pttl ${pttl}`).toBe(true);
      }
    } finally {
      node.disconnect();
    }
  }
  const all = [...perNode.values()].flat();
  expect(all).toHaveLength(keys.length);
  expect(new Set(all)).toEqual(new Set(keys.map((k) => l.redisKey(k))));
  for (const [port, found] of perNode) expect(found.length, `rows on node ${port}`).toBeGreaterThan(0);

  // And through the adapter (lookup routes by slot).
  for (const key of keys) {
    expect(await l.lookup(key)).toMatchObject({ state: expected.get(key)!.header.state, request: expected.get(key)!.request });
  }
}, 120_000);
