import { bindLedgerCheck, silentStoreAfterConnecting, silentStoreBeforeConnecting } from "@dispatch-once/conformance/ledger";
import { afterAll, describe, expect, it } from "vitest";
import { closeSubjectPool, createPostgresSubject } from "./subject.js";

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
