import { isDispatchOnceError, type ClaimRequest } from "@dispatch-once/core";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisLedger } from "../src/index.js";
import { REDIS_URL, deleteByPrefix, parseStored, rawClient, uniquePrefix } from "./helpers.js";
import { FaultProxy } from "./proxy.js";

// onWarning is application code (a logger's sink) the ledger calls, in the background too: the
// release of a claim whose reply was lost is reported after the claim's caller was answered. A
// sink that throws, or an async one whose promise rejects, must change nothing the ledger does
// and must never leave an unhandled rejection behind (Node ends the process on one by default).

const [host, port] = ((): [string, number] => {
  const url = new URL(REDIS_URL);
  return [url.hostname, Number(url.port || 6379)];
})();
let raw: Redis;
const prefix = uniquePrefix("h_hostile_warn");

beforeAll(async () => {
  raw = rawClient();
  expect(await raw.ping()).toBe("PONG");
});
afterAll(async () => {
  await deleteByPrefix(raw, prefix);
  await raw.quit();
});

const request = (key: string): ClaimRequest => ({ key, toolName: "send_payment", effect: "unkeyed_write", owner: "owner-lost", leaseMs: 30_000, request: "{}" });

describe("onWarning that fails changes nothing and leaves no unhandled rejection", () => {
  for (const how of ["throws", "rejects"] as const) {
    it(`a sink that ${how} when a lost claim's release is reported: the row is released once, the warning goes to console.error, no unhandled rejection`, async () => {
      const unhandled: unknown[] = [];
      const onUnhandled = (reason: unknown) => void unhandled.push(reason);
      process.on("unhandledRejection", onUnhandled);
      const p = await FaultProxy.start({ host, port });
      let told = 0;
      const l = new RedisLedger({
        url: p.url,
        prefix,
        onWarning: (message) => {
          told++;
          if (how === "throws") throw new Error(`sink down: ${message}`);
          return Promise.reject(new Error(`sink down: ${message}`)) as unknown as void;
        },
      });
      try {
        await l.lookup("warm-up");
        p.watch("owner-lost");
        const cut = p.cutAfterReply("owner-lost");
        const lost = await l.claim(request("k1")).catch((error: unknown) => error);
        await cut;
        expect(isDispatchOnceError(lost, "ledger_unavailable"), String(lost)).toBe(true);
        for (let i = 0; i < 200 && told === 0; i++) await new Promise((r) => setTimeout(r, 25));
        await new Promise((r) => setTimeout(r, 300));
        const stored = await raw.get(l.redisKey("k1"));
        expect(stored === null ? undefined : parseStored(stored).header.state).toBe("released");
        expect(told).toBe(1);
        expect(unhandled).toEqual([]);
      } finally {
        process.off("unhandledRejection", onUnhandled);
        await l.close().catch(() => undefined);
        await p.close();
      }
    });
  }
});
