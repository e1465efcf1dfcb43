import { createOnceTools, turnIndexOf } from "@dispatch-once/ai-sdk";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { ToolSet } from "ai";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { runAiSdkCase, startAiSdkWorld } from "../src/ai-sdk-case.js";
import { aiSdkScenarioArbitrary, runEndToEnd, type AiSdkAppOptions, type AiSdkScenario } from "../src/index.js";
import { expectReached } from "./reached.js";

/**
 * The end-to-end level on the Vercel AI SDK profile (spec §13.2): an app that drives real
 * `streamText` with tools wrapped by `createOnceTools` against apps/mock-openai, re-sends after
 * mid-stream failures (AISDK-6) and regenerates answered turns, judged by the payments API's
 * effect log against what the app kept. CI sizes it with CONFORMANCE_E2E_AISDK_RUNS.
 */
const memory = memoryLedgerSubject();
const runs = Number(process.env.CONFORMANCE_E2E_AISDK_RUNS ?? 40);
/**
 * Finding each bug takes a few runs (the search stops at the first failure, so a budget no test
 * reaches costs nothing and a loaded host cannot cut it); shrinking whole chats is what costs, so
 * it has a small budget of its own. A shrink cut short leaves a larger counterexample (a CI run
 * under load reported "performed 4 times"), so the verdicts below name the duplicate, not the
 * minimal count.
 */
const SEARCH_BUDGET_MS = 60_000;
/**
 * The oracle's CONF-2 verdict on a duplicated intent, at whatever count the shrink reached: more
 * effects than the scenario asked for of one signature. An unshrunk case may ask for the same
 * call twice (a tool loop's identical follow-up), and then says "performed 3 times for 2 intents"
 * (AISDK-2, seed 7, shrinking off; AISDK-1, seed 1, shrunk to the end says "4 times for 2
 * intents"); the oracle words it so only when the count exceeds the asks.
 */
const PERFORMED_AGAIN = /performed ([2-9]|\d{2,}) times for (one intent|([2-9]|\d{2,}) intents)/;

describe("end-to-end level on the Vercel AI SDK (provider ai-sdk)", () => {
  it(`CONF-2 AISDK-1 AISDK-2 AISDK-4 AISDK-6 AISDK-7 AISDK-9 AISDK-14 AISDK-17 an app with createOnceTools performs each intent at most once and keeps only the truth, tool loops inside a request (and in a continuation's last request) process deaths in their step 2, on step 1's first call and on an approved call's run, re-runs the model answers without a call that ran, and other tabs of a chat asking at one turn index included, over ${runs} random scenarios`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, {
      provider: "ai-sdk",
      runs,
      seed: Number(process.env.CONFORMANCE_SEED ?? 20261201),
      onStats: (stats) => Object.assign(seen, stats),
    });
    // The oracle read what the app kept: an app that kept nothing would pass every check.
    expect(seen.told_successes ?? 0, "told_successes").toBeGreaterThan(0);
    if (runs < 20) return;
    for (const kind of ["attempts_failed", "failed_after_a_tool_ran", "resends", "regenerates", "continuations", "approvals", "client_tool_results", "lost_responses", "told_errors"]) {
      expectReached(seen, kind);
    }
    // Tool loops inside one request (AISDK-1), about one message in ten: follow_ups (answers kept
    // from two steps of one request), follow_up_repeats (step 2's call identical to a step-1 call),
    // failed_in_a_later_step (a request cut in its step 2). At CI's 30 runs there are 10, 2 and 3 of
    // them (seed 20261201).
    if (runs < 30) return;
    for (const kind of ["follow_ups", "follow_up_repeats", "failed_in_a_later_step"]) {
      expectReached(seen, kind);
    }
    // Deaths of the chat route's process on a loop's step-2 call, and loops in a continuation's
    // last request: deaths_after_effect (the payment made, its row left in flight), takeovers (the
    // next process's step 2 took the dead claim over), resends_after_death (the client re-sent the
    // cut turn, AISDK-6) and continuation_follow_ups: 2, 1, 2 and 8 at 30 runs (seed 20261201).
    // first_call_deaths: a death on step 1's first call (the next process's step 1 takes it over).
    // approval_deaths: a death on an approved call's run, in the request that carries the approval
    // (6 planned at 30 runs, seed 20261201; the re-sent approval's process takes it over).
    for (const kind of ["deaths_after_effect", "takeovers", "resends_after_death", "continuation_follow_ups", "first_call_deaths", "approval_deaths"]) {
      expectReached(seen, kind);
    }
    // AISDK-14: the model answered a re-run of a cut turn without a call the cut request had run
    // (rerunDivergence), and the app told the user of its effect from turn.unansweredCalls():
    // divergent_reruns 22, omitted_after_effect_told_by_unanswered_calls 3 at 30 runs (seed
    // 20261201; 59 and 15 at 60 runs, seed 777).
    for (const kind of ["divergent_reruns", "omitted_after_effect_told_by_unanswered_calls"]) {
      expectReached(seen, kind);
    }
    // AISDK-16: a proxy spliced the response to the request it sent again into a body, with its
    // own start, without it led by a sentence, and without it or a lead; the app's spliceGuard()
    // failed the step and the app re-sent (e2e-ai-sdk-splice-planted.test.ts: unguarded, it pays
    // again). One of each at 30 runs (seed 20261201): a splice falls on a turn without a
    // continuation or a death, on its first request or, when that one failed, its second.
    // regenerate_splices: into a regenerate's first request, the user's re-ask (4 at 30 runs, seed
    // 20261201; e2e-splice-reask-planted.test.ts: an app that guards the user's messages only).
    for (const kind of ["splices_restart", "splices_headless", "splices_headless_bare", "regenerate_splices"]) {
      expectReached(seen, kind);
    }
    // A later message asking for an earlier message's call again, exactly (repeatsEarlier): both
    // must run, each told its own turn's effect (e2e-ai-sdk-cross-turn-repeat-planted.test.ts: a
    // constant turn index answers the repeat with the first turn's payment). 5 drawn and 1 answer
    // kept at the later turn at 30 runs (seed 20261201).
    for (const kind of ["cross_turn_repeats", "cross_turn_repeats_told"]) {
      expectReached(seen, kind);
    }
    // Other tabs of a chat asking at one of its turn indexes (AiSdkChatPlan.tabs, AISDK-17): each
    // tab's message is an ask of its own, the same payment asked in two tabs is two payments, each
    // told its own; a reload of the store regenerates the last tab's message one index later, and
    // must meet its keys (e2e-ai-sdk-tabs-planted.test.ts: ordinals not per message fail both). At
    // 30 runs (seed 20261201): 16 tabs (10 together with the first tab's first request, 3 after it,
    // 3 once the chat went on), 10 same payments each told in its tab, 7 reloads answered.
    for (const kind of ["tabs_together", "tabs_after_first_request", "tabs_later", "tab_same_payments_told", "tab_reloads_answered"]) {
      expectReached(seen, kind);
    }
  }, 600_000);
});

describe("the ai-sdk oracle rejects planted bugs", () => {
  it("AISDK-2 tools not wrapped (the app's tools as written) pay again on a regenerate or a re-send; the printed seed and path replay it", async () => {
    const unwrapped: AiSdkAppOptions = { wrap: (tools) => () => ({ tools }) };
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: 7, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: unwrapped }).catch((e: unknown) => e);
    const message = expectReadable(error, 7);
    expect(message).toMatch(/breaks CONF-2/);
    expect(message).toMatch(PERFORMED_AGAIN);
    // The printed seed and path replay that one shrunk scenario, once, failing the same rule.
    const cx = (error as ConformanceFailure).counterexample!;
    let stats: Record<string, number> = {};
    const again = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: cx.seed, path: cx.path, aiSdk: unwrapped, onStats: (s) => (stats = s) }).catch((e: unknown) => e);
    expect(stats.property_cases).toBe(1);
    expect((again as ConformanceFailure).violates).toBe("CONF-2");
    expect((again as ConformanceFailure).counterexample!.value).toEqual(cx.value);
  }, 600_000);

  it("AISDK-7 a wrapper that ignores identity pays again when the regenerated response re-words the memo", async () => {
    const noIdentity: AiSdkAppOptions = {
      wrap: (tools, ledger, o) => {
        const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, ledger, dispatcher: o.dispatcher });
        return (request) => once.forTurn(request);
      },
    };
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: 17, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: noIdentity }).catch((e: unknown) => e);
    const message = expectReadable(error, 17);
    expect(message).toMatch(/breaks CONF-2/);
    expect(message).toMatch(new RegExp(`send_payment for chat-\\d "c\\d message \\d" .*: ${PERFORMED_AGAIN.source}`));
  }, 600_000);

  it("AISDK-1 a wrapper that numbers turns by request instead of by user message gives a re-send or a regenerate new keys", async () => {
    const perRequest: AiSdkAppOptions = {
      wrap: (tools, ledger, o) => {
        const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
        const requests = new Map<string, number>();
        return (request) => {
          // The bug: each request (each response) is its own turn, as TURN-3 counts for a runner.
          const turnIndex = requests.get(request.conversationId) ?? 0;
          requests.set(request.conversationId, turnIndex + 1);
          return once.forTurn({ conversationId: request.conversationId, turnIndex, dispatchAt: request.dispatchAt });
        };
      },
    };
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: 1, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: perRequest }).catch((e: unknown) => e);
    const message = expectReadable(error, 1);
    expect(message).toMatch(/breaks CONF-2/);
    expect(message).toMatch(PERFORMED_AGAIN);
  }, 600_000);

  it("AISDK-9 a wrapper whose ordinals restart in every request of a turn answers a continuation's identical call with the first call's result", async () => {
    // The bug fixed in AISDK-9's first version: the turn index from the messages, but no history,
    // so the repeat the user asked for after an approval or a client-side tool's answer meets the
    // first call's key and is told it succeeded with the first call's payment.
    const restarting: AiSdkAppOptions = {
      wrap: (tools, ledger, o) => {
        const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
        return (request) => once.forTurn({ conversationId: request.conversationId, turnIndex: turnIndexOf(request.messages), dispatchAt: request.dispatchAt });
      },
    };
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: 9, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: restarting }).catch((e: unknown) => e);
    const message = expectReadable(error, 9);
    expect(message).toMatch(/breaks CONF-2/);
    expect(message).toMatch(/which call \S+ of the same turn was told too: the user asked for 2 of them/);
  }, 600_000);

  it("EFFECT-6 tools that tell a lost payments response as a definite failure keep 'did not happen' for a payment that happened", async () => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: 12, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, aiSdk: { disposition: () => "definite" } }).catch((e: unknown) => e);
    const message = expectReadable(error, 12);
    expect(message).toMatch(/breaks EFFECT-6/);
    expect(message).toMatch(/was kept as an error that says the effect did not happen \(tool_failed \(effect no\)/);
  }, 600_000);
});

describe("the ai-sdk cases share one world", () => {
  // fast-check abandons a run at the property's time limit (shrinking included) and goes on: the
  // abandoned case keeps running beside the next one. A case that owned the world's plans (one
  // "current" case) was cleared by the abandoned one's end and failed with a TypeError instead
  // of its verdict (seen in CI under load).
  it("two cases running at once on one world each get their own plans and verdicts", async () => {
    const scenarios = fc.sample(aiSdkScenarioArbitrary(), { seed: 3, numRuns: 4 });
    const world = await startAiSdkWorld();
    try {
      const runs = await Promise.all(scenarios.map((scenario) => runAiSdkCase(world, memory, scenario)));
      for (const run of runs) {
        expect(run.violations).toEqual([]);
        expect(run.stats.attempts).toBeGreaterThan(0);
      }
      // Each case removes what it added.
      expect(world.plans.size).toBe(0);
      expect(world.attempts.size).toBe(0);
    } finally {
      await world.close();
    }
  }, 120_000);
});

describe("a response the provider ended at its output limit after a call (AISDK-8, STREAM-13)", () => {
  // The Responses API's response.incomplete (max_output_tokens) right after the call's
  // output_item.done: the AI SDK finishes the step with `length`, raises no error, and runs no tool
  // of it; at the tool-call part (AISDK-4) the payment was made all the same.
  const payment = (message: number) => ({ tool: "send_payment" as const, args: { payee: "acme", amount: 500 + message, currency: "EUR", reference: `c1-m${message}-r0`, memo: "Invoice" } });
  const scenario: AiSdkScenario = {
    chats: [
      {
        id: "chat-1",
        dispatchAt: "tool-call",
        messages: [
          { text: "c1 message 1", calls: [payment(1)], cuts: [{ phase: "tool_step", cut: { at: "after_call", toolUse: 0, kind: "incomplete_event" } }], downstream: {}, resends: 1, regenerate: false },
          { text: "c1 message 2", calls: [payment(2)], cuts: [], downstream: {}, resends: 0, regenerate: false },
        ],
      },
    ],
  };

  it("AISDK-8 the app does not keep it (a call without its result would make every later request of the chat fail) nor re-send it (it ends the same way): the next message is answered", async () => {
    const world = await startAiSdkWorld();
    try {
      const run = await runAiSdkCase(world, memory, scenario);
      expect(run.violations).toEqual([]);
      const timeline = run.timeline.join("\n");
      expect(timeline).not.toMatch(/Tool result is missing/);
      // Message 1 failed for good after its one request; message 2 was answered with its payment.
      expect(run.stats).toMatchObject({ attempts: 2, attempts_failed: 1, turns_unanswered: 1, turns_answered: 1, told_successes: 1, effects: 2 });
      expect(run.stats.resends).toBeUndefined();
    } finally {
      await world.close();
    }
  }, 60_000);
});
