import type { Ledger } from "@dispatch-once/core";
import { skewProcessClock, storeAddressOf, urlVia, type LedgerSubject } from "@dispatch-once/conformance/ledger";
import type { Redis } from "ioredis";
import { RedisLedger } from "../src/index.js";
import { EXPIRE_LEASE_LUA, REDIS_URL, closedPort, deleteByPrefix, parseStored, rawClient, uniquePrefix } from "./helpers.js";

/** The commandTimeoutMs of the instance behind the kit's SilenceProxy (LEDGER-12's silent-store checks). */
export const SILENT_BOUND_MS = 300;

const BODY_FIELD: Record<string, string> = { in_flight: "owner", completed: "result", unknown: "reason" };

/** Decode a stored row with the test's own code (not the adapter's), field names as core's LedgerRow. */
export async function readRow(client: Redis, redisKey: string, key: string): Promise<Record<string, unknown> | undefined> {
  // The bytes, not a decoded string: the request is split off by its UTF-8 length (requestBytes).
  const value = await client.getBuffer(redisKey);
  if (value === null) return undefined;
  const { header, request, body } = parseStored(value);
  // v, requestBytes and the claim token are the layout's, not LedgerRow fields.
  const { v: _version, requestBytes: _length, claim: _token, ...fields } = header;
  const row: Record<string, unknown> = { key, ...fields, request };
  const state = String(header.state);
  if (state === "failed") row.error = JSON.parse(body);
  else if (BODY_FIELD[state] !== undefined) row[BODY_FIELD[state]] = body;
  return row;
}

/**
 * Fresh prefix per create(); raw hooks talk to Redis directly. `LedgerClass` is the class to
 * certify (a blind round's mutant of it, test/round-k-blind.test.ts); `viaCommandTimeoutMs` the
 * commandTimeoutMs of raw.openVia's instance (test/silent-store.test.ts plants 0, no bound).
 */
export function createRedisSubject(LedgerClass: typeof RedisLedger = RedisLedger, name = "ledger-redis", tag = "conf", viaCommandTimeoutMs = SILENT_BOUND_MS): LedgerSubject {
  return {
    name,
    // clockSkew: RedisLedger has no clock option (leases are on the server's TIME inside its
    // scripts), so the skewed instance is another instance whose calls run with this process's Date
    // off (skewProcessClock): one that computed a lease from Date.now() would take over live claims.
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, clockSkew: true, resolve: true, auditTrail: true, listRows: true, retire: true, listExpiredInFlight: true, silentStore: true },
    // LEDGER-12: commandTimeoutMs bounds every operation (waiting for the connection, then the
    // command); raw.openVia's instance is configured with it, small so that the silent windows stay short.
    limits: { operationBoundMs: SILENT_BOUND_MS },
    async create(options = {}) {
      const prefix = uniquePrefix(tag);
      const raw = rawClient();
      const ledgers: Ledger[] = [];
      const open = (): RedisLedger => {
        // The kit watches real retention run out (retentionMs of a second or less): the test-only
        // escape from the 1 h floor (LEDGER-13), never set outside tests.
        const ledger = new LedgerClass({ url: REDIS_URL, prefix, allowShortRetentionForTests: true, ...options });
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
            await raw.eval(EXPIRE_LEASE_LUA, 2, keyOf(key), ledger.inflightIndexKey(key));
          },
          async expireRetention(key) {
            // A timestamp in the past: Redis removes the key at once, as it would when its TTL ran out.
            const value = await raw.get(keyOf(key));
            if (value !== null && parseStored(value).header.state !== "in_flight") await raw.pexpireat(keyOf(key), 1);
          },
          // As if every claim id of the key had been retired longer than the retention ago (LEDGER-28):
          // its members of the slot's set (`<claim id>:<key>`, a claim id has no ':') get a past time.
          async expireRetired(key) {
            const set = ledger.retiredKey(key);
            for (const member of await raw.zrange(set, "0", "-1")) {
              if (member.slice(member.indexOf(":") + 1) === key) await raw.zadd(set, "1", member);
            }
          },
          async corrupt(key) {
            await raw.set(keyOf(key), "\u0000not a ledger row\n{}");
          },
          skewedInstance: async (offsetMs) => skewProcessClock(open(), offsetMs),
          storeAddress: async () => storeAddressOf(REDIS_URL, 6379),
          // An instance whose connection goes through the kit's SilenceProxy (ioredis connects at once, unanswered).
          async openVia(via) {
            const other = new LedgerClass({ url: urlVia(REDIS_URL, via), prefix, allowShortRetentionForTests: true, commandTimeoutMs: viaCommandTimeoutMs, ...options });
            ledgers.push(other);
            return other;
          },
          async disconnected() {
            const port = await closedPort();
            const broken = new LedgerClass({ url: `redis://127.0.0.1:${port}`, prefix });
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
}

export const redisSubject: LedgerSubject = createRedisSubject();

export default redisSubject;
