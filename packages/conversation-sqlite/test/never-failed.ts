import { TurnFailedError } from "@dispatch-once/anthropic";
import type { ConversationStore } from "@dispatch-once/core";
import { expect } from "vitest";
import { HOUR, payAcmeWorld } from "./pay-world.js";

export { HOUR };
export const CONV = "conv-dead-holder";

/**
 * TURN-12 with TURN-11's boundAt over a durable store (shared by the SQLite and PostgreSQL
 * suites): m1's holder pays (its ledger row completes) and dies before the commit, so m1 stays in
 * progress and no failure dates it. The caller moves 25 h on (the ledger's clock, and the store's
 * as it can) so the ledger's 24 h retention sweeps the row, then re-sends m1 to a restarted
 * process: only the binding's time, read back by a new store object, tells it the turn is past
 * its re-send window. The payment is the test's own counter.
 */
export async function neverFailedWorld() {
  const { ledger, paid, clock, advance, close, runnerOver } = await payAcmeWorld();
  return {
    ledger,
    paid,
    clock,
    close,
    /** m1 sent through a holder that dies at its commit; returns once the payment's row completed, m1 in progress. */
    async paidThenDied(store: ConversationStore): Promise<void> {
      const never = () => new Promise<never>(() => undefined);
      const dying = Object.assign(Object.create(store) as ConversationStore, { commitTurn: never, renewLease: never, releaseLease: never });
      void runnerOver(dying).send(CONV, { id: "m1", content: "pay acme" });
      const completed = async () => (await ledger.listRows({ conversationId: CONV, state: "completed" })).rows.length;
      while (paid.length === 0 || (await completed()) === 0) await new Promise((r) => setTimeout(r, 2));
      expect((await store.message(CONV, "m1"))?.state).toBe("in_progress");
    },
    /** 25 h on the ledger's clock (and the store's, where it reads this one): the paid row swept. */
    async sweptAfter25Hours(): Promise<void> {
      advance(25 * HOUR);
      expect(await ledger.sweep()).toBeGreaterThan(0);
    },
    /** m1 re-sent to the restarted process: refused past the window, the payment made once, m1 failed. */
    async resentPastWindow(store: ConversationStore): Promise<void> {
      const resent = await runnerOver(store).send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      expect(paid).toHaveLength(1);
      expect(resent).toBeInstanceOf(TurnFailedError);
      expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
      expect((await store.message(CONV, "m1"))?.state).toBe("failed");
    },
  };
}
