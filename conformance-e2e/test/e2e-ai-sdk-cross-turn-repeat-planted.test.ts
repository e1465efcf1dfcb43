import { createOnceTools, turnIndexOf } from "@dispatch-once/ai-sdk";
import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { ToolSet } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAiSdkCase, startAiSdkWorld, type AiSdkWorld } from "../src/ai-sdk-case.js";
import { runEndToEnd, type AiSdkAppOptions, type AiSdkScenario } from "../src/index.js";
import { expectReadable } from "./readable.js";

/**
 * Two user messages of a chat asking for the identical call ("pay acme 42" ... later "pay acme 42
 * again", AiSdkMessagePlan.repeatsEarlier): two intents at two turn indexes, which must both run
 * (the turn index is in the key, AISDK-1), and neither may be answered with the other's effect.
 * Before the draw no two turns of a scenario shared a signature (each call's reference or memo is
 * its message's), so a wrapper that got the turn index wrong never met a key of another turn.
 */
const memory = memoryLedgerSubject();

/**
 * The plant: an app that keeps its own turn counter and never advances it (`turnIndex` constant,
 * the turn's messages given for the ordinals). The second message's repeat meets the first
 * message's key, and the ledger answers it with the first turn's payment: one payment for two
 * intents, the second turn told the first's. Every count holds (the first turn made one, the
 * second none) and the success names a payment of its signature, so the oracle of before passed it
 * (30 runs at seeds 3, 5, 6, 9, 10 and 12, each with 6 to 10 repeats drawn).
 */
const constantTurn: AiSdkAppOptions = {
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
    return (request) => once.forTurn({ conversationId: request.conversationId, turnIndex: 1, turnMessages: request.messages, dispatchAt: request.dispatchAt });
  },
};

const SEED = 12;
const RUNS = 1;

describe("cross-turn repeats on the ai-sdk profile: the end-to-end level rejects a turn told another turn's effect", () => {
  it("CONF-2 a wrapper with a constant turn index answers the second message's repeat with the first message's payment; the real app passes the same run", async () => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: RUNS, seed: SEED, timeLimitMs: 120_000, shrinkTimeLimitMs: 0, aiSdk: constantTurn }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(
      /breaks CONF-2\): send_payment call \S+ of chat-0 "c0 message 1" was kept as a success naming (pay_\w+), the effect of chat-0 "c0 message 0" \(payment_created \1 .*\): the user asked for it at both turns, and this turn's was never made/,
    );
    expect(message).toContain(`after ${RUNS} runs`);
    // The control: the app the AISDK rules describe, over the same run, which draws a repeat.
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", runs: RUNS, seed: SEED, onStats: (s) => (seen = s) });
    expect(seen).toMatchObject({ property_cases: RUNS, cross_turn_repeats: 1 });
    expect(seen.cross_turn_repeats_told ?? 0).toBeGreaterThan(0);
  }, 120_000);
});

/**
 * CONF-2's count per turn, end to end (test/e2e-ai-sdk-intent-per-turn-planted.test.ts has it on
 * logs): a scenario of the draw's shape, by hand, where the first turn pays twice for its one
 * intent and the second turn, which asked for the identical payment, makes none. The scenario-wide
 * count (two payments for two intents) passed it. The plant: an app that reads the turn index from
 * its store before it saved the user's new message (the first request of a turn gets the turn
 * before's index, its re-sends the right one). The first turn's re-send, after a cut confirmation,
 * runs its payment under a new key, the second turn's index, and the second turn's request meets
 * that key and is answered from its row. The other judges reject the run too (the second turn was
 * told the first turn's payment; the first payment is told by no answer the app kept, AISDK-14):
 * this test pins the per-turn count's verdict, which the count summed over the scenario did not give.
 */
const payment = { tool: "send_payment" as const, args: { payee: "acme", amount: 4200, currency: "EUR", reference: "c0-m0-r0", memo: "Invoice" } };
const scenario: AiSdkScenario = {
  chats: [
    {
      id: "chat-0",
      dispatchAt: "step",
      messages: [
        { text: "c0 message 0", calls: [payment], cuts: [{ phase: "confirmation", cut: { at: "before_message_stop", kind: "reset" } }], downstream: {}, resends: 1, regenerate: false },
        {
          text: "c0 message 1",
          calls: [payment],
          cuts: [],
          downstream: {},
          resends: 0,
          regenerate: false,
          repeatsEarlier: { call: 0, of: { message: 0, call: 0 }, drawn: { calls: [{ tool: "send_payment", args: { ...payment.args, payee: "globex", reference: "c0-m1-r0" } }] } },
        },
      ],
    },
  ],
};

const savedLate: AiSdkAppOptions = {
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
    const last = new Map<string, number>();
    return (request) => {
      const n = turnIndexOf(request.messages);
      const first = last.get(request.conversationId) !== n;
      last.set(request.conversationId, n);
      return once.forTurn({ conversationId: request.conversationId, turnIndex: first ? n - 1 : n, turnMessages: request.messages, dispatchAt: request.dispatchAt });
    };
  },
};

describe("the ai-sdk oracle counts a turn's effects per turn, end to end", () => {
  let world: AiSdkWorld;
  beforeAll(async () => {
    world = await startAiSdkWorld();
  });
  afterAll(async () => {
    await world.close();
  });

  it("CONF-2 the first turn's re-send pays its payment again and the second turn's identical intent is answered from it: rejected at the first turn", async () => {
    const run = await runAiSdkCase(world, memory, scenario, savedLate);
    const verdicts = run.violations.map((v) => `${v.rule}: ${v.message}`);
    expect(verdicts, run.timeline.join("\n")).toContainEqual(
      expect.stringMatching(/^CONF-2: send_payment for chat-0 "c0 message 0" \(.*\): performed 2 times for one intent: .* \(at that turn; other turns asked for it 1 more times, which excuses none of these\)$/),
    );
    expect(run.stats).toMatchObject({ resends: 1, cross_turn_repeats: 1, effects: 2 });
  }, 60_000);

  it("the control: the real app makes one payment at each turn and tells each its own", async () => {
    const run = await runAiSdkCase(world, memory, scenario);
    expect(run.violations, run.timeline.join("\n")).toEqual([]);
    expect(run.stats).toMatchObject({ resends: 1, cross_turn_repeats: 1, cross_turn_repeats_told: 1, effects: 2 });
  }, 60_000);
});
