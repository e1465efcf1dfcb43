import { silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting } from "@dispatch-once/conformance";
import { describe, expect, it } from "vitest";
import { createPostgresConversationSubject } from "./subject.js";

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
