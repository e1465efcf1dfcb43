import { StoreUnavailableError } from "@dispatch-once/core";
import { silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting, startSilenceProxy, storeAddressOf, urlVia } from "@dispatch-once/conformance";
import { describe, expect, it } from "vitest";
import { PostgresConversationStore } from "../src/index.js";
import { DATABASE_URL } from "./helpers.js";
import { SILENT_BOUND_MS, createPostgresConversationSubject } from "./subject.js";

/** Resolves at the first turn of the event loop where `condition` holds. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * TURN-21's silent-store checks hold this store to its own bound: the conformance run passes them
 * with timeoutMs = 300 (test/conformance.test.ts), and the same store with its bound taken out of
 * reach (timeoutMs of a day, statementTimeoutMs still 300: the server's own bound, which a silent
 * server does not enforce) is rejected by both, each method named.
 */
const unbounded = createPostgresConversationSubject("conversation-postgres, timeoutMs a day", undefined, "silent", 24 * 60 * 60 * 1000);

describe("TURN-21 silent store: the PostgreSQL conversation store without a usable bound is rejected", () => {
  it("by both checks, each naming the methods that did not settle (run side by side: one silent window of wall time)", async () => {
    const verdicts = await Promise.allSettled([silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting].map((check) => check.run(unbounded)));
    for (const verdict of verdicts) {
      expect(verdict.status).toBe("rejected");
      const reason = String((verdict as PromiseRejectedResult).reason);
      expect(reason).toMatch(/broke TURN-21's bound/);
      for (const method of ["message", "log", "commitTurn", "failMessage"]) {
        expect(reason).toMatch(new RegExp(`- ${method} did not settle within 1330 ms \\(the declared operationBoundMs 300 \\+ 1030 ms slack\\)`));
      }
    }
  });
});

/**
 * TURN-21 bounds close() as it bounds every method. A pool's end() waits for every connection it
 * has, and one still being made to a silent server is answered by nothing: before the bound, close()
 * hung until pg's connectionTimeoutMillis (10 s by default, never with 0). Now it settles within
 * timeoutMs, destroys what is left, rejects with store_unavailable, and a second close is a no-op.
 */
const HUNG_MS = 10_000;

describe("TURN-21 close(): within timeoutMs on a silent server", () => {
  it("rejects with store_unavailable, leaves the pool with no connection, and a second close() resolves", async () => {
    const proxy = await startSilenceProxy(storeAddressOf(DATABASE_URL, 5432));
    // connectionTimeoutMillis 0: pg never gives up on a connection by itself, so only the store's bound ends close().
    const store = new PostgresConversationStore({ connectionString: urlVia(DATABASE_URL, proxy.address), poolConfig: { max: 2, connectionTimeoutMillis: 0 }, timeoutMs: SILENT_BOUND_MS });
    try {
      proxy.silence();
      // A method that gives up at its bound, leaving the pool's connection being made.
      await expect(store.log("c-close")).rejects.toMatchObject({ code: "store_unavailable" });
      // A verdict on hanging, not a speed: the bound is 300 ms.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const error = await Promise.race([
        store.close().then(() => "resolved", (e: unknown) => e),
        new Promise((resolve) => (timer = setTimeout(() => resolve(`close() still pending after ${HUNG_MS} ms`), HUNG_MS))),
      ]).finally(() => clearTimeout(timer));
      expect(StoreUnavailableError.isInstance(error), `close() settled with ${String(error)}`).toBe(true);
      expect(String((error as Error).message)).toMatch(/^PostgreSQL conversation store close: .*within timeoutMs = 300 ms.*destroyed/);
      await store.close(); // a no-op: the store is closed and holds nothing
      await expect(store.log("c-close")).rejects.toThrow(/the store is closed/);
      // The connection being made was destroyed, so the pool ends without waiting for the server.
      const pool = (store as unknown as { pool: { totalCount: number; ended: boolean } }).pool;
      await until(() => pool.totalCount === 0 && pool.ended);
    } finally {
      proxy.heal();
      await store.close();
      await proxy.close();
    }
  });

  it("with a server that answers, close() resolves, and so does a second one", async () => {
    const store = new PostgresConversationStore({ connectionString: DATABASE_URL, timeoutMs: SILENT_BOUND_MS });
    await expect(store.log("c-close")).rejects.toMatchObject({ code: "store_unavailable" }); // no tables: it still connects
    await store.close();
    await store.close();
  });
});
