import { createServer } from "node:net";
import { randomBytes } from "node:crypto";
import { Redis, type Cluster } from "ioredis";
import { LEDGER_REDIS_OPTIONS } from "../src/index.js";

export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";

/** A prefix no other test run (or engineer) uses; every test deletes only keys under it. */
export function uniquePrefix(tag: string): string {
  return `do-test-${tag}-${process.pid}-${randomBytes(6).toString("hex")}`;
}

/** A plain client for reading and writing the store directly (not through the adapter). */
export function rawClient(): Redis {
  const client = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  client.on("error", () => {});
  return client;
}

/** A client with the settings the ledger requires of a brought client (LEDGER_REDIS_OPTIONS). */
export function safeClient(url = REDIS_URL): Redis {
  const client = new Redis(url, { ...LEDGER_REDIS_OPTIONS });
  client.on("error", () => {});
  return client;
}

/** Delete every key under `prefix` (SCAN MATCH, never FLUSHDB: the server is shared). */
export async function deleteByPrefix(client: Redis, prefix: string): Promise<number> {
  let cursor = "0";
  let deleted = 0;
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) deleted += await client.del(...keys);
  } while (cursor !== "0");
  return deleted;
}

/** Every key under `prefix` on one node. */
export async function keysByPrefix(client: Redis, prefix: string): Promise<string[]> {
  let cursor = "0";
  const found: string[] = [];
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    cursor = next;
    found.push(...keys);
  } while (cursor !== "0");
  return found;
}

/** A loopback port with nothing listening on it (bound, then released). */
export async function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") return reject(new Error("no port"));
      server.close(() => resolve(address.port));
    });
  });
}

/** Server clock in ms, as the ledger's scripts read it. */
export async function serverNow(client: Redis | Cluster): Promise<number> {
  const [seconds, micros] = (await client.time()) as [number | string, number | string];
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/**
 * Make an in-flight row's lease lie in the past on the server clock (atomically, in a script):
 * KEYS[1] the row, KEYS[2] its in-flight index (ledger.inflightIndexKey(key)), whose score moves
 * with it, as the ledger's own scripts keep them together.
 */
export const EXPIRE_LEASE_LUA = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local past = string.format('%d', now - 1)
local replaced, n = string.gsub(v, '^({"v":%d+,"state":"in_flight","fence":%d+,"claimedAt":%d+,"requestBytes":%d+,"leaseExpiresAt":)%d+',
  '%1' .. past, 1)
if n == 0 then return 0 end
redis.call('SET', KEYS[1], replaced)
if KEYS[2] then redis.call('ZADD', KEYS[2], past, KEYS[1]) end
return 1
`;

/**
 * The test's own reading of a stored row (not the adapter's), done on the bytes: JSON header,
 * newline, then the stored request (header.requestBytes UTF-8 bytes) and the state's body.
 * Pass the Buffer from getBuffer() to see exactly what Redis holds.
 */
export function parseStored(value: string | Buffer): { header: Record<string, unknown>; request: string; body: string } {
  const bytes = typeof value === "string" ? Buffer.from(value, "utf8") : value;
  const newline = bytes.indexOf(0x0a);
  if (newline < 0) throw new Error(`no header in ${JSON.stringify(bytes.subarray(0, 80).toString())}`);
  const header = JSON.parse(bytes.subarray(0, newline).toString("utf8")) as Record<string, unknown>;
  const requestBytes = header.requestBytes;
  if (typeof requestBytes !== "number") throw new Error(`no requestBytes in ${JSON.stringify(header)}`);
  const start = newline + 1;
  return {
    header,
    request: bytes.subarray(start, start + requestBytes).toString("utf8"),
    body: bytes.subarray(start + requestBytes).toString("utf8"),
  };
}
