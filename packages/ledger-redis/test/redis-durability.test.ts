import type { ClaimRequest } from "@dispatch-once/core";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LEDGER_REDIS_OPTIONS, RedisLedger, createRedisLedger, type RedisLedgerOptions } from "../src/index.js";
import { isCommandRefusal } from "../src/redis-ledger.js";
import { closedPort, uniquePrefix } from "./helpers.js";
import { startServer, type PrivateServer } from "./server.js";

// What "durable" means on Redis (issue 18: "durable" ignored AOF settings and replication). The
// shared server's configuration is never touched: each case runs on a redis-server this file
// starts on its own loopback port and stops at the end.

let always: PrivateServer; // appendonly yes, appendfsync always: what "durable" needs
let everysec: PrivateServer; // appendonly yes, appendfsync everysec: loses up to a second
let plain: PrivateServer; // no AOF, no RDB: loses everything in a crash
const started: PrivateServer[] = [];
const opened: Array<{ close(): Promise<void> | void }> = [];

beforeAll(async () => {
  [always, everysec, plain] = await Promise.all([
    startServer(["--appendonly", "yes", "--appendfsync", "always", "--save", ""]),
    startServer(["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]),
    startServer(["--appendonly", "no", "--save", ""]),
  ]);
  started.push(always, everysec, plain);
}, 60_000);

afterAll(async () => {
  for (const item of opened.splice(0)) await item.close();
  await Promise.all(started.map((s) => s.stop()));
}, 60_000);

function request(key: string, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { key, toolName: "send_payment", effect: "unkeyed_write", owner: "attempt-1", leaseMs: 60_000, request: '{"amount":1}', ...overrides };
}

function on(server: PrivateServer, options: RedisLedgerOptions = {}): RedisLedgerOptions {
  return { url: server.url, prefix: uniquePrefix("durable"), onWarning: () => {}, ...options };
}

async function open(options: RedisLedgerOptions): Promise<RedisLedger> {
  const ledger = await createRedisLedger(options);
  opened.push(ledger);
  return ledger;
}

describe("LEDGER-14: the declared durability of a Redis ledger", () => {
  it("volatile is the default and is never inferred, even on a server that could back durable", async () => {
    const ledger = await open(on(always));
    expect(ledger.capabilities.durability).toBe("volatile");
    const report = await ledger.checkServer();
    expect(report.nodes[0]).toMatchObject({ appendonly: "yes", appendfsync: "always", connectedReplicas: 0 });
    expect(report.notDurable).toEqual([]);
  });

  // kill -9 ends the process, not the host: the page cache keeps what Redis wrote to its AOF, so
  // this shows the AOF at work. Surviving a host crash is what appendfsync always adds (fsync
  // before the reply); that needs a power cut to show, and is why the check requires it.
  it("durable is accepted on a primary with appendonly yes, appendfsync always and no replica, and every row it acknowledged survives kill -9 of the server process", async () => {
    const options = on(always, { durability: "durable" });
    const ledger = await open(options);
    expect(ledger.capabilities.durability).toBe("durable");
    const unchecked = new RedisLedger(options); // verified before its first operation
    opened.push(unchecked);
    await ledger.claim(request("done"));
    await ledger.complete("done", 1, '{"paid":true}');
    await unchecked.claim(request("held", { leaseMs: 0 }));
    await always.kill(); // a crash right after the acknowledgements
    await always.restart();
    const after = new RedisLedger(options);
    opened.push(after);
    expect(await after.lookup("done")).toMatchObject({ state: "completed", result: '{"paid":true}' });
    expect(await after.lookup("held")).toMatchObject({ state: "in_flight", owner: "attempt-1" });
    expect((await after.listExpiredInFlight()).map((r) => r.key)).toEqual(["held"]); // the index survived too
  });

  it("on a server without AOF, kill -9 loses rows Redis acknowledged: why volatile is the default", async () => {
    const options = on(plain);
    const ledger = await open(options);
    await ledger.claim(request("done"));
    await ledger.complete("done", 1, '{"paid":true}');
    expect(await ledger.lookup("done")).toMatchObject({ state: "completed" });
    await plain.kill();
    await plain.restart();
    const after = new RedisLedger(options);
    opened.push(after);
    expect(await after.lookup("done")).toBeUndefined(); // a replay would run the tool again
  });

  for (const [name, server, setting, value] of [
    ["no AOF", () => plain, "appendonly", "no"],
    ["an AOF fsynced once a second", () => everysec, "appendfsync", "everysec"],
  ] as const) {
    it(`durable is refused on ${name} (unsafe_store_config ${setting}=${value}): by createRedisLedger, and by a constructed ledger's first operation, which writes nothing`, async () => {
      const options = on(server(), { durability: "durable" });
      await expect(createRedisLedger({ ...options, onUnsafeServer: "warn" })).rejects.toMatchObject({ code: "unsafe_store_config", setting, value });
      const ledger = new RedisLedger(options);
      opened.push(ledger);
      for (let i = 0; i < 2; i++) {
        await expect(ledger.claim(request("k1"))).rejects.toMatchObject({ code: "unsafe_store_config", setting, value });
      }
      const raw = new Redis(server().url);
      try {
        expect(await raw.exists(ledger.redisKey("k1"))).toBe(0);
      } finally {
        raw.disconnect();
      }
    });
  }

  it("durable is refused on a primary with a replica attached (connected_slaves: a failover to an asynchronous replica loses acknowledged rows), and accepted again once it is gone", async () => {
    const replica = await startServer(["--replicaof", "127.0.0.1", String(always.port), "--appendonly", "yes", "--appendfsync", "always", "--save", ""]);
    started.push(replica);
    const admin = new Redis(always.url);
    try {
      const replicas = async () => Number(/connected_slaves:(\d+)/.exec(await admin.info("replication"))![1]);
      for (let i = 0; (await replicas()) !== 1; i++) {
        if (i > 200) throw new Error("the replica did not attach");
        await new Promise((r) => setTimeout(r, 50));
      }
      await expect(createRedisLedger(on(always, { durability: "durable" }))).rejects.toMatchObject({
        code: "unsafe_store_config",
        setting: "connected_slaves",
        value: "1",
      });
      await replica.stop();
      for (let i = 0; (await replicas()) !== 0; i++) {
        if (i > 200) throw new Error("the replica did not detach");
        await new Promise((r) => setTimeout(r, 50));
      }
      expect((await open(on(always, { durability: "durable" }))).capabilities.durability).toBe("durable");
    } finally {
      admin.disconnect();
    }
  });

  it("where CONFIG GET is refused (an ACL user without +config) durable cannot be verified and is refused; verifyDurability: false trusts it and reports what it could not check", async () => {
    const admin = new Redis(always.url);
    await admin.acl("SETUSER", "ledger", "on", ">secret", "~*", "&*", "+@all", "-config");
    admin.disconnect();
    const url = `redis://ledger:secret@127.0.0.1:${always.port}`;
    await expect(createRedisLedger({ url, prefix: uniquePrefix("acl"), durability: "durable", onWarning: () => {} })).rejects.toMatchObject({
      code: "unsafe_store_config",
      setting: "appendonly",
      value: "unknown (CONFIG GET refused)",
    });
    const warnings: string[] = [];
    const trusted = await open({ url, prefix: uniquePrefix("acl"), durability: "durable", verifyDurability: false, onWarning: (m) => warnings.push(m) });
    expect(trusted.capabilities.durability).toBe("durable");
    expect(warnings.some((w) => w.includes("CONFIG GET is not permitted"))).toBe(true);
    expect(warnings.some((w) => w.includes('"durable" is declared but appendonly=unknown'))).toBe(true);
    await trusted.claim(request("k1"));
    expect(await trusted.lookup("k1")).toMatchObject({ state: "in_flight" });
  });

  it("only the server's refusal of CONFIG or INFO is a verdict; LOADING after a restart, BUSY or a dropped connection is unavailability (found by the fault suite: a restarted Redis answered LOADING, and claims failed as unsafe_store_config, 'effect: no', for intents already paid)", () => {
    expect(isCommandRefusal(new Error("NOPERM User ledger has no permissions to run the 'config|get' command"))).toBe(true);
    expect(isCommandRefusal(new Error("ERR unknown command 'CONFIG', with args beginning with: 'GET' "))).toBe(true);
    expect(isCommandRefusal(new Error("ERR unknown subcommand 'GET'. Try CONFIG HELP."))).toBe(true);
    expect(isCommandRefusal(new Error("LOADING Redis is loading the dataset in memory"))).toBe(false);
    expect(isCommandRefusal(new Error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."))).toBe(false);
    expect(isCommandRefusal(new Error("Connection is closed."))).toBe(false);
    expect(isCommandRefusal(new Error("read ECONNRESET"))).toBe(false);
  });

  it("an unreachable server fails the verification as ledger_unavailable (asked again next time), never as a verdict", async () => {
    const port = await closedPort();
    const ledger = new RedisLedger({ url: `redis://127.0.0.1:${port}`, prefix: uniquePrefix("down"), durability: "durable", commandTimeoutMs: 500 });
    opened.push(ledger);
    await expect(ledger.claim(request("k1"))).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(ledger.claim(request("k1"))).rejects.toMatchObject({ code: "ledger_unavailable" });
  });

  it("a brought client is verified the same way", async () => {
    const client = new Redis(everysec.url, { ...LEDGER_REDIS_OPTIONS });
    client.on("error", () => {});
    opened.push({ close: () => client.disconnect() });
    await expect(createRedisLedger({ client, prefix: uniquePrefix("byo"), durability: "durable" })).rejects.toMatchObject({
      code: "unsafe_store_config",
      setting: "appendfsync",
    });
    expect(await client.ping()).toBe("PONG"); // refused, but the caller's client is left open
  });
});
