import type { Ledger } from "@dispatch-once/core";
import type { Redis } from "ioredis";
import { RedisLedger } from "../src/index.js";
import { EXPIRE_LEASE_LUA, REDIS_URL, closedPort, deleteByPrefix, rawClient, uniquePrefix } from "./helpers.js";

/** The agreed @dispatch-once/conformance types (.tmp/conformance-api.md), structurally. */
export interface LedgerFixture {
  ledger: Ledger;
  reopen(): Promise<Ledger>;
  raw: {
    read(key: string): Promise<Record<string, unknown> | undefined>;
    expireLease(key: string): Promise<void>;
    expireRetention(key: string): Promise<void>;
    corrupt?(key: string): Promise<void>;
    disconnected?(): Promise<Ledger>;
  };
  destroy(): Promise<void>;
}
export interface LedgerSubject {
  name: string;
  capabilities: { sharedAcrossProcesses: boolean; survivesRestart: boolean; corruption: boolean; unavailability: boolean };
  create(options?: { retentionMs?: number; maxResultBytes?: number }): Promise<LedgerFixture>;
}

const NUMERIC = new Set(["fence", "claimedAt", "leaseExpiresAt", "finishedAt"]);

/** Decode a stored hash with the test's own code (not the adapter's), field names as core's LedgerRow. */
export async function readRow(client: Redis, redisKey: string, key: string): Promise<Record<string, unknown> | undefined> {
  const fields = await client.hgetall(redisKey);
  if (Object.keys(fields).length === 0) return undefined;
  const row: Record<string, unknown> = { key };
  for (const [name, value] of Object.entries(fields)) {
    if (name === "v") continue;
    if (NUMERIC.has(name)) row[name] = Number(value);
    else if (name === "error") row[name] = JSON.parse(value);
    else row[name] = value;
  }
  return row;
}

/** Fresh prefix per create(); raw hooks talk to Redis directly. */
export const redisSubject: LedgerSubject = {
  name: "ledger-redis",
  capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true },
  async create(options = {}) {
    const prefix = uniquePrefix("conf");
    const raw = rawClient();
    const ledgers: Ledger[] = [];
    const open = (): RedisLedger => {
      const ledger = new RedisLedger({ url: REDIS_URL, prefix, ...options });
      ledgers.push(ledger);
      return ledger;
    };
    const ledger = open();
    const keyOf = (key: string) => ledger.redisKey(key);
    return {
      ledger,
      reopen: async () => open(),
      raw: {
        read: (key) => readRow(raw, keyOf(key), key),
        async expireLease(key) {
          await raw.eval(EXPIRE_LEASE_LUA, 1, keyOf(key));
        },
        async expireRetention(key) {
          // A timestamp in the past: Redis removes the key at once, as it would when its TTL ran out.
          const state = await raw.hget(keyOf(key), "state");
          if (state !== null && state !== "in_flight") await raw.pexpireat(keyOf(key), 1);
        },
        async corrupt(key) {
          await raw.set(keyOf(key), "\u0000not a ledger row");
        },
        async disconnected() {
          const port = await closedPort();
          const broken = new RedisLedger({ url: `redis://127.0.0.1:${port}`, prefix });
          ledgers.push(broken);
          return broken;
        },
      },
      async destroy() {
        await Promise.all(ledgers.map((l) => l.close()));
        await deleteByPrefix(raw, prefix);
        await raw.quit();
      },
    };
  },
};

export default redisSubject;
