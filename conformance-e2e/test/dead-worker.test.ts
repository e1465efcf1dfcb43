import { MemoryConversationStore, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { runCase } from "../src/case.js";
import type { MessagePlan, Scenario } from "../src/scenario.js";
import { WITH_CHAT } from "./chat-sides.js";
import { startWorld } from "../src/world.js";

/**
 * Issue 12: a worker that dies after its tool's effect happened, where no later attempt reaches
 * that call, leaves an effect only the downstream and the ledger know of. What the user is told
 * must still account for it (RECORD-5, RECORD-6): the failed-turn record of the resumed turn says
 * `resumed: true` (the earlier holder's attempts, which it does not list, may have had effects).
 */
const memory = memoryLedgerSubject();

/**
 * The planted bug: a runner that omits a dead attempt's effects from what it tells the user. Here
 * the store tells it every turn is fresh (`resumed: false`, TURN-15), so its record neither lists
 * the dead worker's payment nor says that an earlier holder may have made effects.
 */
function neverResumed({ now }: { now: () => number }): ConversationStore {
  const inner = new MemoryConversationStore({ now });
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === "beginTurn") {
        return async (conversationId: string, fence: number) => {
          const snapshot = await target.beginTurn(conversationId, fence);
          return snapshot === undefined ? snapshot : { ...snapshot, resumed: false };
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * Two payments; the worker dies after the second one's effect, before its ledger row completes; the
 * provider then cuts every later response inside that call's arguments (an outage that outlasts
 * every retry and re-send), so no later attempt reaches it and the message ends failed.
 */
const message: MessagePlan = {
  text: "c0 message 0",
  calls: [
    { tool: "send_payment", args: { payee: "acme", amount: 120, currency: "EUR", reference: "c0-m0-r0", memo: "Invoice" } },
    { tool: "send_payment", args: { payee: "globex", amount: 340, currency: "USD", reference: "c0-m0-r1", memo: "Refund" } },
  ],
  cuts: [],
  downstream: {},
  death: { call: 1, when: "after_response_before_complete" },
  outage: { at: "arguments", toolUse: 1, afterFragment: 0, kind: "reset" },
  unstorable: [],
  route: "automatic_retry",
  concurrent: false,
  reask: false,
};
const scenario: Scenario = { conversations: [{ id: "conv-0", messages: [message] }], providerSeed: 5 };

describe.each(WITH_CHAT)("a dead worker's effect that no later attempt reaches (RECORD-6, provider %s)", (provider) => {
  it("occurs in the scenario: the dead worker's payment happened, no live attempt reached its key, and the real runner's resumed record reports it", async () => {
    const world = await startWorld(provider);
    try {
      const run = await runCase(world, memory, scenario, {});
      expect(run.violations, run.timeline.join("\n")).toEqual([]);
      expect(run.stats.deaths).toBe(1);
      expect(run.stats.dead_worker_effect_unreached, run.timeline.join("\n")).toBe(1);
      expect(run.stats.dead_worker_effect_unreached_reported_by_resumed_record).toBe(1);
    } finally {
      await world.close();
    }
  }, 120_000);

  it("RECORD-6 a runner whose record omits the dead attempt's effect (the turn not said to be resumed) is rejected", async () => {
    const world = await startWorld(provider);
    try {
      const run = await runCase(world, memory, scenario, { conversationStore: neverResumed });
      const rejected = run.violations.filter((v) => v.rule === "RECORD-6");
      expect(rejected, run.timeline.join("\n")).toHaveLength(1);
      expect(rejected[0]!.message).toMatch(/payment_created \S+ .* made by w0, which died before it could record it, \(send_payment at turn 0 of conv-0\), is accounted for nowhere/);
      expect(rejected[0]!.message).toContain("do not say the turn was resumed");
    } finally {
      await world.close();
    }
  }, 120_000);
});
