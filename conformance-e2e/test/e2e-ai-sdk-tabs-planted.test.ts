import { createOnceTools } from "@dispatch-once/ai-sdk";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { expectReadable } from "./readable.js";

/**
 * Two tabs of one chat (AISDK-17, AiSdkChatPlan.tabs): each sends a new user message, under its
 * own id, on the same history, so both count the same turn index. The same payment asked in both
 * is two asks: two payments, each tab told its own. A message keeps the turn at which it first
 * dispatched: a store that kept both tabs' messages one after the other, reloaded, counts the
 * second one index later, and its regenerate from there must meet its keys.
 */
const memory = memoryLedgerSubject();

/**
 * The plant: the wrapper of before AISDK-17, ordinals not per message (the user messages' ids are
 * not read, so every message of a turn starts at ordinal 0, and a message is counted where the
 * history puts it). The second tab's identical payment meets the first tab's key and is answered
 * with its payment; a reloaded history's regenerate of the second message pays it again.
 */
const notPerMessage: AiSdkAppOptions = {
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
    return (request) => once.forTurn({ conversationId: request.conversationId, messages: request.messages.map(({ id: _id, ...m }: { id?: unknown; role: string; content: unknown }) => m), dispatchAt: request.dispatchAt });
  },
};

/**
 * Seeds whose first run the plant fails, each a way of its own: at 2 the second tab's identical
 * payment is answered with the first tab's (both tabs shown one payment id for two asks); at 3 a
 * reload of the store counts the second tab's message one turn later, and its regenerate there pays
 * again. Before the tabs were drawn, the plant passed CI's 30 runs of seed 1 (no message had an id).
 */
const RUNS = 3;
const OTHER_TABS_PAYMENT = /breaks CONF-2\): send_payment call \S+ of chat-\d "c\d message \d( tab \d)?" was kept as a success naming (pay_\w+), the effect of chat-\d "c\d message \d( tab \d)?" \(payment_created \2 .*\), which another tab sent at the same turn index: the user asked for it in both tabs, and this tab's was never made \(AISDK-17/;
const RELOAD_PAYS_AGAIN = /breaks CONF-2\): \w+ for chat-\d "c\d message \d tab \d" \(.*\): performed 2 times for one intent: .* \(a reload of the store counted this tab's message one or more turns later: a message keeps the turn at which it first dispatched, AISDK-17\)/;

describe("tabs on the ai-sdk profile: the end-to-end level rejects a wrapper whose ordinals are not per user message", () => {
  // The replay of the printed seed and path is checked once (it costs a run); the timeline line each verdict stands on, for each.
  it.each([
    [2, OTHER_TABS_PAYMENT, "tab_same_payments_told", /app +chat-\d tab 2 sends "c\d message \d tab 2" on the history before "c\d message \d"/, true],
    [3, RELOAD_PAYS_AGAIN, "tab_reloads_answered", /app +chat-\d reloads the store \(\d+ messages\) and regenerates "c\d message \d tab \d", now counted at turn \d/, false],
  ] as const)("AISDK-17 CONF-2 seed %i: the plant is rejected with its seed and path; the real app passes the same runs", async (seed, verdict, drawn, line, replay) => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: RUNS, seed, timeLimitMs: 120_000, shrinkTimeLimitMs: 0, aiSdk: notPerMessage }).catch((e: unknown) => e);
    const message = expectReadable(error, seed);
    expect(message).toMatch(verdict);
    expect(message).toMatch(line);
    if (replay) {
      // The printed seed and path replay that one scenario, once, failing the same way.
      const cx = (error as ConformanceFailure).counterexample!;
      let stats: Record<string, number> = {};
      const again = await runEndToEnd(memory, { provider: "ai-sdk", runs: RUNS, seed: cx.seed, path: cx.path, aiSdk: notPerMessage, onStats: (s) => (stats = s) }).catch((e: unknown) => e);
      expect(stats.property_cases).toBe(1);
      expect((again as Error).message).toMatch(verdict);
    }
    // The control: the app the AISDK rules describe, over the same runs, which draw tabs.
    const runs = Number(/after (\d+) runs/.exec(message)![1]);
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", runs, seed, onStats: (s) => (seen = s) });
    expect(seen.tabs ?? 0).toBeGreaterThan(0);
    expect(seen[drawn] ?? 0, drawn).toBeGreaterThan(0);
  }, 300_000);
});
