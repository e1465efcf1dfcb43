import { LedgerUnavailableError } from "@dispatch-once/core";
import { bindLedgerCheck, silentStoreAfterConnecting, silentStoreBeforeConnecting, startSilenceProxy, storeAddressOf, urlVia } from "@dispatch-once/conformance/ledger";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { DATABASE_URL } from "./helpers.js";
import { closeSubjectPool, createPostgresSubject } from "./subject.js";

/** Resolves at the first turn of the event loop where `condition` holds. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * LEDGER-12's silent-store checks hold this adapter to its own bound: the conformance run passes
 * them with timeoutMs = 300 (test/conformance.test.ts), and the same adapter with its bound taken
 * out of reach (timeoutMs of a day: connecting and every statement wait on a server that accepts
 * and never answers) is rejected by both, each operation named.
 */
const unbounded = createPostgresSubject(undefined, "ledger-postgres, timeoutMs a day", "silent", 24 * 60 * 60 * 1000);

describe("LEDGER-12 silent store: the PostgreSQL ledger without a usable bound is rejected", () => {
  it("by both checks, each naming the claim that did not settle (run side by side: one silent window of wall time)", async () => {
    const verdicts = await Promise.allSettled([silentStoreAfterConnecting, silentStoreBeforeConnecting].map((check) => bindLedgerCheck(check, unbounded, { seed: 20261205 }).run()));
    for (const verdict of verdicts) {
      expect(verdict.status).toBe("rejected");
      expect(String((verdict as PromiseRejectedResult).reason)).toMatch(/claim did not settle within 1330 ms \(the declared operationBoundMs 300 \+ 1030 ms slack\)/);
    }
  });
  afterAll(closeSubjectPool);
});

/**
 * LEDGER-12 bounds close() as it bounds every operation. A pool's end() waits for every connection
 * it has, and one still being made to a silent server is answered by nothing: before the bound,
 * close() hung until pg's connectionTimeoutMillis (max(timeoutMs, 5 s), or what poolConfig sets).
 * Now it settles within timeoutMs, destroys what is left, rejects with ledger_unavailable, and a
 * second close is a no-op.
 */
const HUNG_MS = 10_000;

describe("LEDGER-12 close(): within timeoutMs on a silent server", () => {
  it("rejects with ledger_unavailable, leaves the pool with no connection, and a second close() resolves", async () => {
    const proxy = await startSilenceProxy(storeAddressOf(DATABASE_URL, 5432));
    // A minute for one connection attempt (an adopter's setting): only the ledger's bound can end close() sooner.
    const ledger = new PostgresLedger({ connectionString: urlVia(DATABASE_URL, proxy.address), poolConfig: { max: 2, connectionTimeoutMillis: 60_000 }, timeoutMs: 300, durability: "durable" });
    try {
      proxy.silence();
      // An operation that gives up at its bound, leaving the pool's connection being made.
      await expect(ledger.lookup("k-close")).rejects.toMatchObject({ code: "ledger_unavailable" });
      // A verdict on hanging, not a speed: the bound is 300 ms.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const error = await Promise.race([
        ledger.close().then(() => "resolved", (e: unknown) => e),
        new Promise((resolve) => (timer = setTimeout(() => resolve(`close() still pending after ${HUNG_MS} ms`), HUNG_MS))),
      ]).finally(() => clearTimeout(timer));
      expect(LedgerUnavailableError.isInstance(error), `close() settled with ${String(error)}`).toBe(true);
      expect(String((error as Error).message)).toMatch(/^PostgreSQL ledger close: .*within timeoutMs = 300 ms.*destroyed/);
      await ledger.close(); // a no-op: the ledger is closed and holds nothing
      await expect(ledger.lookup("k-close")).rejects.toThrow(/the ledger is closed/);
      // The connection being made was destroyed, so the pool ends without waiting for the server.
      const pool = (ledger as unknown as { ownedPool: { totalCount: number; ended: boolean } }).ownedPool;
      await until(() => pool.totalCount === 0 && pool.ended);
    } finally {
      proxy.heal();
      await ledger.close();
      await proxy.close();
    }
  }, HUNG_MS + 20_000);

  it("with a server that answers, close() resolves, and so does a second one", async () => {
    const ledger = new PostgresLedger({ connectionString: DATABASE_URL, timeoutMs: 300, durability: "durable", schema: "do_ledger_close_none" });
    await expect(ledger.lookup("k-close")).rejects.toMatchObject({ code: "ledger_unavailable" }); // no table: it still connects
    await ledger.close();
    await ledger.close();
  });
});
