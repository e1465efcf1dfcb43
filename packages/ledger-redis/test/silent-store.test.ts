import { LedgerUnavailableError } from "@dispatch-once/core";
import { bindLedgerCheck, silentStoreAfterConnecting, silentStoreBeforeConnecting, startSilenceProxy, storeAddressOf, urlVia } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { RedisLedger } from "../src/index.js";
import { REDIS_URL, uniquePrefix } from "./helpers.js";
import { createRedisSubject } from "./subject.js";

/**
 * LEDGER-12's silent-store checks hold this adapter to its own bound: the conformance run passes
 * them with commandTimeoutMs = 300 (test/conformance.test.ts), and the same adapter with its bound
 * removed (commandTimeoutMs 0: ioredis waits for a reply, and for its ready check, for ever) is
 * rejected by both, each operation named.
 */
const unbounded = createRedisSubject(undefined, "ledger-redis, commandTimeoutMs 0", "silent", 0);

describe("LEDGER-12 silent store: the Redis ledger without its bound is rejected", () => {
  it("by both checks, each naming the claim that did not settle (run side by side: one silent window of wall time)", async () => {
    const verdicts = await Promise.allSettled([silentStoreAfterConnecting, silentStoreBeforeConnecting].map((check) => bindLedgerCheck(check, unbounded, { seed: 20261205 }).run()));
    for (const verdict of verdicts) {
      expect(verdict.status).toBe("rejected");
      expect(String((verdict as PromiseRejectedResult).reason)).toMatch(/claim did not settle within 1330 ms \(the declared operationBoundMs 300 \+ 1030 ms slack\)/);
    }
  });
});

/**
 * LEDGER-12 bounds close() as it bounds every operation. On a connected client close() sent QUIT
 * and waited for its reply, which a silent server never sends: it hung for ever. Now it settles
 * within commandTimeoutMs, drops the connection, rejects with ledger_unavailable, and a second close
 * is a no-op.
 */
const HUNG_MS = 10_000;

/** Resolves at the first turn of the event loop where `condition` holds. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

describe("LEDGER-12 close(): within commandTimeoutMs on a silent server", () => {
  it("rejects with ledger_unavailable, drops the connection, and a second close() resolves", async () => {
    const proxy = await startSilenceProxy(storeAddressOf(REDIS_URL, 6379));
    const ledger = new RedisLedger({ url: urlVia(REDIS_URL, proxy.address), prefix: uniquePrefix("close"), commandTimeoutMs: 300 });
    try {
      // Connected and ready (a read writes nothing), then the server goes silent. On a loaded host
      // the first read may outlast the 300 ms bound before anything is silent: read again.
      let ready: unknown = "not read";
      for (let attempt = 0; attempt < 3 && ready === "not read"; attempt++) ready = await ledger.lookup("k-close").catch((e: unknown) => (LedgerUnavailableError.isInstance(e) ? "not read" : Promise.reject(e)));
      expect(ready).toBeUndefined();
      proxy.silence();
      // A verdict on hanging, not a speed: the bound is 300 ms.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const error = await Promise.race([
        ledger.close().then(() => "resolved", (e: unknown) => e),
        new Promise((resolve) => (timer = setTimeout(() => resolve(`close() still pending after ${HUNG_MS} ms`), HUNG_MS))),
      ]).finally(() => clearTimeout(timer));
      expect(LedgerUnavailableError.isInstance(error), `close() settled with ${String(error)}`).toBe(true);
      expect(String((error as Error).message)).toMatch(/^Redis ledger close: no reply to QUIT within commandTimeoutMs = 300 ms.*dropped/);
      await ledger.close(); // a no-op: the ledger is closed and holds nothing
      await expect(ledger.lookup("k-close")).rejects.toThrow(/ledger is closed/);
      // The dropped connection ends the client (ioredis says so once its socket has closed).
      const client = (ledger as unknown as { client: { status: string } }).client;
      await until(() => client.status === "end");
    } finally {
      proxy.heal();
      await ledger.close();
      await proxy.close();
    }
  }, HUNG_MS + 20_000);

  it("with a server that answers, close() resolves, and so does a second one", async () => {
    const ledger = new RedisLedger({ url: REDIS_URL, prefix: uniquePrefix("close"), commandTimeoutMs: 300 });
    expect(await ledger.lookup("k-close")).toBeUndefined();
    await ledger.close();
    await ledger.close();
  });
});
