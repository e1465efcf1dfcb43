import { createOnceTools } from "@dispatch-once/ai-sdk";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";

/**
 * AISDK-14 on the AI SDK profile: a request cut after a call ran is not kept (AISDK-8), and the
 * model may answer the turn's re-send or regenerate without the call (ai-sdk-scenario.ts
 * `rerunDivergence`): the answer the app keeps holds no trace of the payment. Only
 * `turn.unansweredCalls()` (the ledger's rows of the turn) can tell the user of it.
 *
 * The planted bug: the app's route never asks (its turn tools are `createOnceTools`' own, with
 * identity, but it drops `unansweredCalls`, as a route written before AISDK-14 does). The real
 * wrapper passes the same scenario and the app tells the user of the payment.
 */
const memory = memoryLedgerSubject();
const SEARCH_BUDGET_MS = 120_000;
const SEED = 20261205;

const neverAsks: AiSdkAppOptions = {
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
    return (request) => {
      const turn = once.forTurn(request);
      // The bug: the route keeps the answer and never asks the turn what it does not answer.
      return { tools: turn.tools, onChunk: turn.onChunk };
    };
  },
};

/** The real wrapper, whose `unansweredCalls()` says every row it lists had `effect` (the planted bug). */
const listingSays = (effect: "happened" | "not_happened"): AiSdkAppOptions => ({
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
    return (request) => {
      const turn = once.forTurn(request);
      return {
        tools: turn.tools,
        onChunk: turn.onChunk,
        outcomeOf: turn.outcomeOf,
        unansweredCalls: async () => {
          const found = await turn.unansweredCalls();
          return found.listed ? { listed: true, calls: found.calls.map((c) => ({ ...c, effect })) } : found;
        },
      };
    };
  },
});

describe("the ai-sdk side when the model answers a re-run without a call that ran", () => {
  it("AISDK-14 an app that never asks turn.unansweredCalls() keeps an answer with no trace of the cut request's payment; the real app passes the same scenario", async () => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: neverAsks }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(/breaks AISDK-14\): (payment_created|invoice_created) \S+ \(seq \d+, key \S+\) of chat-\d "c\d message \d" is told by no kept answer of its turn and listed by no unansweredCalls\(\) answer/);
    // The timeline shows the divergent re-run that left it out.
    expect(message).toMatch(/model\s+answers a re-run .* without/);
    const cx = (error as ConformanceFailure).counterexample!;
    let stats: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: cx.seed, path: cx.path, onStats: (s) => (stats = s) });
    expect(stats).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(stats.omitted_after_effect_told_by_unanswered_calls).toBeGreaterThan(0);
  }, 600_000);

  it("AISDK-14 a wrapper whose unansweredCalls() says every row it lists did not happen tells the user a payment that went through was not made", async () => {
    // The bug: "it is not in the answer, so it did not happen".
    const saysNotHappened = listingSays("not_happened");
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: saysNotHappened }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    // At seed 20261205 the first run rejected is a chat with another tab (AISDK-17), whose listing names the first tab's payment, at the same turn index.
    expect(message).toMatch(/breaks AISDK-14\): unansweredCalls\(\) after request \d of chat-\d "c\d message \d( tab \d)?" \((as sent|regenerated|reloaded, regenerated)\) listed (send_payment|create_invoice) key \S+ as not_happened \((completed|in_flight|unknown|released)\), but the payments API made/);
  }, 600_000);

  it("AISDK-14 a wrapper whose unansweredCalls() says every row it lists happened tells the user of a payment or invoice never made", async () => {
    // The bug: "it ran, so it happened" (a row released after a 503, or in flight before the API was called).
    const saysHappened = listingSays("happened");
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: saysHappened }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(/breaks AISDK-14\): unansweredCalls\(\) after request \d of chat-\d "c\d message \d( tab \d)?" \((as sent|regenerated|reloaded, regenerated)\) listed (send_payment|create_invoice) key \S+ as happened \((in_flight|unknown|released|failed)\), but the payments API made nothing under it/);
  }, 600_000);
});
