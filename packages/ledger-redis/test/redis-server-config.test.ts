import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, expect, it } from "vitest";
import { LEDGER_REDIS_OPTIONS, UnsafeStoreConfigError, createRedisLedger } from "../src/index.js";
import { REDIS_URL, rawClient, uniquePrefix } from "./helpers.js";

// The startup check reads CONFIG. The shared server's config must not be changed, so this
// test starts its own redis-server (port 0: unix socket only) with an evicting policy.

let dir = "";
let server: ChildProcess | undefined;
let socket = "";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "ledger-redis-config-"));
  socket = join(dir, "redis.sock");
  server = spawn(
    "redis-server",
    ["--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru", "--dir", dir],
    { stdio: "ignore" },
  );
  const probe = new Redis({ path: socket, lazyConnect: true, retryStrategy: () => null });
  probe.on("error", () => {});
  for (let i = 0; ; i++) {
    try {
      await probe.connect();
      break;
    } catch (error) {
      if (i > 100) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  probe.disconnect();
});

afterAll(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server!.once("exit", r));
    server.kill("SIGTERM");
    await exited;
  }
  await rm(dir, { recursive: true, force: true });
});

it("refuses a server whose maxmemory-policy can evict rows (an evicted in-flight row is a forgotten claim)", async () => {
  const client = new Redis({ path: socket, ...LEDGER_REDIS_OPTIONS });
  client.on("error", () => {});
  try {
    const refused = createRedisLedger({ client, prefix: uniquePrefix("evict") });
    await expect(refused).rejects.toBeInstanceOf(UnsafeStoreConfigError);
    await expect(refused).rejects.toMatchObject({ code: "unsafe_store_config", setting: "maxmemory-policy", value: "allkeys-lru" });

    const warnings: string[] = [];
    const warned = await createRedisLedger({
      client,
      prefix: uniquePrefix("evict"),
      onUnsafeServer: "warn",
      durability: "durable",
      verifyDurability: false,
      onWarning: (m) => warnings.push(m),
    });
    expect(warnings.some((w) => w.includes("maxmemory-policy is allkeys-lru"))).toBe(true);
    // durable was vouched for without verification, but this server has no AOF: say so.
    expect(warnings.some((w) => w.includes("appendonly=no"))).toBe(true);
    await warned.close();
    // Verified (the default), the same declaration is refused, whatever onUnsafeServer says (LEDGER-14).
    await expect(
      createRedisLedger({ client, prefix: uniquePrefix("evict"), onUnsafeServer: "warn", durability: "durable" }),
    ).rejects.toMatchObject({ code: "unsafe_store_config", setting: "appendonly", value: "no" });
    expect(await client.ping()).toBe("PONG"); // a caller's client is not closed
  } finally {
    client.disconnect();
  }
});

it("reads the shared server's settings without changing them and reports them", async () => {
  const raw = rawClient();
  try {
    const policy = ((await raw.config("GET", "maxmemory-policy")) as string[])[1];
    const warnings: string[] = [];
    const make = () => createRedisLedger({ url: REDIS_URL, prefix: uniquePrefix("check"), onWarning: (m) => warnings.push(m) });
    if (policy === "noeviction") {
      const ledger = await make();
      const report = await ledger.checkServer();
      expect(report.nodes).toHaveLength(1);
      expect(report.nodes[0]).toMatchObject({ maxmemoryPolicy: "noeviction" });
      expect(report.unsafe).toEqual([]);
      expect(ledger.capabilities.durability).toBe("volatile"); // never inferred: durable is an assertion
      await ledger.close();
    } else {
      await expect(make()).rejects.toMatchObject({ code: "unsafe_store_config" });
    }
  } finally {
    await raw.quit();
  }
});
