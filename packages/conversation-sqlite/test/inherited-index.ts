import { TurnFailedError } from "@dispatch-once/anthropic";
import type { ConversationStore } from "@dispatch-once/core";
import { expect } from "vitest";
import { HOUR, payAcmeWorld } from "./pay-world.js";

export { HOUR };
export const CONV = "conv-inherited-index";

/**
 * TURN-12 with TURN-11's inherited boundAt over a durable store (shared by the SQLite and
 * PostgreSQL suites). Keys come from the turn index, not the message: m1 ("pay acme") pays and
 * fails (every attempt is cut after the call's block), and m2, the same request under a new id,
 * bound at m1's index 23 h later, replays m1's completed row and fails too. At 24.5 h the
 * ledger's 24 h retention has swept the row; a re-send of m2 (1.5 h after its own binding) must
 * not retry, or the payment is made again. The caller moves the store's times (its clock where it
 * reads the test's, the rows' times where the server's clock decides) and this world moves the
 * ledger's. The payment is the test's own counter.
 */
export async function inheritedIndexWorld() {
  // Every request for "pay acme" is cut right after its tool_use block stops (the call dispatched).
  const { ledger, paid, requestCount, runnerOver, clock, advance, close } = await payAcmeWorld({
    faultRules: [{ bodyContains: "pay acme", fault: { kind: "reset", at: { afterToolUseStop: 0 } } }],
    attempts: 2,
  });
  const fails = async (store: ConversationStore, id: string) => {
    const sent = await runnerOver(store).send(CONV, { id, content: "pay acme" }).catch((e: unknown) => e);
    expect(sent).toBeInstanceOf(TurnFailedError);
    return sent as TurnFailedError;
  };
  return {
    ledger,
    paid,
    clock,
    advanceLedger: advance,
    close,
    /** m1 pays at T0 and fails. */
    async m1PaidAndFailed(store: ConversationStore): Promise<void> {
      await fails(store, "m1");
      expect(paid).toHaveLength(1);
    },
    /** m2 (the same request, a new id) bound at m1's index replays m1's row and fails: told the payment happened, none made. */
    async m2ReplayedAndFailed(store: ConversationStore): Promise<void> {
      const m2 = await fails(store, "m2");
      expect(m2.record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
      expect(paid).toHaveLength(1);
      expect((await store.message(CONV, "m2"))?.turnIndex).toBe((await store.message(CONV, "m1"))?.turnIndex);
    },
    /** The ledger's retention swept m1's row. */
    async swept(): Promise<void> {
      expect(await ledger.sweep()).toBeGreaterThan(0);
    },
    /** m2 re-sent: refused past the window counted from m1's binding; no request, no second payment. */
    async m2ResentPastWindow(store: ConversationStore): Promise<void> {
      const requests = requestCount();
      const resent = await runnerOver(store).send(CONV, { id: "m2", content: "pay acme" }).catch((e: unknown) => e);
      expect(paid).toHaveLength(1);
      expect(requestCount()).toBe(requests);
      expect(resent).toBeInstanceOf(TurnFailedError);
      expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
      expect((await store.message(CONV, "m2"))?.state).toBe("failed");
    },
  };
}
