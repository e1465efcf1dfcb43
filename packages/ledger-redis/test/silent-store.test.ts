import { bindLedgerCheck, silentStoreAfterConnecting, silentStoreBeforeConnecting } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
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
