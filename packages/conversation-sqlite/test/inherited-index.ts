import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/anthropic";
import { Dispatcher, MemoryLedger, defineTool, type ConversationStore } from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { expect } from "vitest";
import { z } from "zod";

export const HOUR = 60 * 60 * 1000;
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
  let now = 1_000_000;
  const ledger = new MemoryLedger({ now: () => now });
  const paid: unknown[] = [];
  // Every request for "pay acme" is cut right after its tool_use block stops (the call dispatched).
  const provider = await startMockProvider({
    script: scriptFromPlans({ "pay acme": turn(toolUse("pay", { to: "acme" })) }),
    faultRules: [{ bodyContains: "pay acme", fault: { kind: "reset", at: { afterToolUseStop: 0 } } }],
  });
  const runnerOver = (store: ConversationStore) => {
    const pay = defineTool({ name: "pay", effect: "keyed_write", input: z.object({ to: z.string() }), identity: ["to"], run: async (args) => ({ n: paid.push(args) }) });
    return new ConversationRunner({
      client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
      dispatcher: new Dispatcher({ tools: [pay], ledger }),
      store,
      model: "claude-test",
      tools: [{ name: "pay", input_schema: { type: "object" } }],
      retry: { attempts: 2, backoffMs: () => 5 },
      turnLeaseMs: 1_000,
    });
  };
  const fails = async (store: ConversationStore, id: string) => {
    const sent = await runnerOver(store).send(CONV, { id, content: "pay acme" }).catch((e: unknown) => e);
    expect(sent).toBeInstanceOf(TurnFailedError);
    return sent as TurnFailedError;
  };
  return {
    ledger,
    paid,
    clock: () => now,
    advanceLedger: (ms: number) => void (now += ms),
    close: () => provider.close(),
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
      const requests = provider.requests.length;
      const resent = await runnerOver(store).send(CONV, { id: "m2", content: "pay acme" }).catch((e: unknown) => e);
      expect(paid).toHaveLength(1);
      expect(provider.requests.length).toBe(requests);
      expect(resent).toBeInstanceOf(TurnFailedError);
      expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
      expect((await store.message(CONV, "m2"))?.state).toBe("failed");
    },
  };
}
