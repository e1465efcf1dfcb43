import { createOnceTools, type OnceTurn } from "@dispatch-once/ai-sdk";
import { ToolFailedError } from "@dispatch-once/core";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { Tool, ToolExecutionOptions, ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { expectReadable } from "./readable.js";
import { checkAiSdkOracle } from "../src/ai-sdk-case.js";
import { runEndToEnd, type AiSdkAppOptions, type AiSdkScenario } from "../src/index.js";

/**
 * A tool loop inside one request on the AI SDK profile (AISDK-1): `streamText`'s step 1 makes
 * calls, their results go back, step 2 of the same request makes more, step 3 answers. Ordinals
 * run across the steps of the request: a step-2 call identical to a step-1 call (the user asked
 * for the same payment twice) is a second intent with its own key.
 */
const memory = memoryLedgerSubject();
const SEED = 5;
/**
 * No shrinking: the verdict names the steps at any size, and the per-request routing replays the
 * found scenario as it is (found at run 13 of seed 5; shrinking only cost CPU on every push).
 */
const NO_SHRINK = 0;

/**
 * The app's tools routed through `createOnceTools` by a hook of the test: `perStep` gives every
 * step of a request its own `forTurn` (the planted bug: ordinals counted per step, so step 2's
 * repeat gets step 1's ordinal and key); without it one `forTurn` per request, as the app the
 * AISDK rules describe. The same plumbing either way (each step is told apart by the messages
 * array the AI SDK hands every call of a step), and no `onChunk`: every call runs at its step.
 */
function routed(perStep: boolean): AiSdkAppOptions {
  return {
    wrap: (tools, ledger, o) => {
      const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
      return (request) => {
        const turns = new Map<unknown, OnceTurn<ToolSet>>();
        const turnOf = (step: unknown) => {
          const at = perStep ? step : request;
          let turn = turns.get(at);
          if (turn === undefined) {
            turn = once.forTurn({ conversationId: request.conversationId, messages: request.messages });
            turns.set(at, turn);
          }
          return turn;
        };
        const routedTools: Record<string, Tool> = {};
        for (const [name, t] of Object.entries(tools as ToolSet)) {
          routedTools[name] =
            t.execute === undefined
              ? t
              : ({ ...t, execute: (input: unknown, options: ToolExecutionOptions) => turnOf(options.messages).tools[name]!.execute!(input, options) } as Tool);
        }
        // What the app asks once a request finished (AISDK-14): the request's turn (per step, a
        // turn of its own that dispatched nothing lists this request's rows too: told twice, still true).
        const unansweredCalls = () => (turns.get(request) ?? turnOf(request)).unansweredCalls();
        const outcomeOf = (toolCallId: string) => [...turns.values()].map((t) => t.outcomeOf(toolCallId)).find((o) => o !== undefined);
        return { tools: routedTools, unansweredCalls, outcomeOf };
      };
    },
  };
}

describe("the ai-sdk oracle and a tool loop inside one request", () => {
  it("AISDK-1 a wrapper that counts ordinals per step answers step 2's repeat of a step-1 payment with the first payment's result; the same hooks with one forTurn per request pass that scenario", async () => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: SEED, timeLimitMs: 60_000, shrinkTimeLimitMs: NO_SHRINK, aiSdk: routed(true) }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(/breaks CONF-2/);
    expect(message).toMatch(/which call \S+ of the same turn was told too: the user asked for 2 of them, and one was never made \(in step 1 of the same request, this in step 2: ordinals run across steps, AISDK-1\)/);
    // The counterexample's scenario, once, with the per-request routing: the oracle accepts it.
    const cx = (error as ConformanceFailure).counterexample!;
    let stats: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", runs: 100, seed: cx.seed, path: cx.path, aiSdk: routed(false), onStats: (s) => (stats = s) });
    expect(stats).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(stats.follow_up_repeats).toBeGreaterThan(0);
  }, 120_000);
});

describe("the ai-sdk oracle on an answered tool loop (no servers: the verdicts on a log)", () => {
  const payment = { tool: "send_payment" as const, args: { payee: "acme", amount: 500, currency: "EUR", reference: "c0-m0-r0", memo: "Invoice" } };
  // Step 1 pays, step 2 pays the same again: two intents with one signature.
  const scenario: AiSdkScenario = {
    chats: [{ id: "chat-0", dispatchAt: "step", messages: [{ text: "c0 message 0", calls: [payment], followUp: [payment], cuts: [], downstream: {}, resends: 0, regenerate: false }] }],
  };
  const effect = (seq: number) => ({ seq, kind: "payment_created" as const, account: "a", idempotencyKey: `k${seq}`, resourceId: `pay_${seq}`, payload: payment.args, at: "" });
  const told = (step: number, paymentId: string) => ({ chat: "chat-0", message: "c0 message 0", pass: 0, request: 0, step, toolCallId: `call_${step}`, tool: "send_payment", input: payment.args, ok: true, output: { paymentId } });
  const verdicts = (kept: ReturnType<typeof told>[], effects: ReturnType<typeof effect>[]) =>
    checkAiSdkOracle(scenario, "a", { started: 0, timeline: [], told: kept, listings: [], diverged: new Set(), answered: new Set(["chat-0\u0000c0 message 0\u00000"]), callAt: new Map(), dispatched: [], responses: [], requests: new Map(), stats: {} }, effects).map((v) => `${v.rule}: ${v.message}`);

  it("AISDK-1 CONF-2 both payments made and each told its own: no violation", () => {
    expect(verdicts([told(1, "pay_1"), told(2, "pay_2")], [effect(1), effect(2)])).toEqual([]);
  });

  it("CONF-2 step 2 told step 1's payment: the verdict names the steps", () => {
    expect(verdicts([told(1, "pay_1"), told(2, "pay_1")], [effect(1)])).toEqual([
      expect.stringMatching(/^CONF-2: .*told too: the user asked for 2 of them, and one was never made \(in step 1 of the same request, this in step 2: ordinals run across steps, AISDK-1\)$/),
    ]);
  });

  it("AISDK-1 an answered loop that kept no answer for step 2's call", () => {
    expect(verdicts([told(1, "pay_1")], [effect(1)])).toEqual([expect.stringMatching(/^AISDK-1: .*was answered keeping 1 answers for "send_payment:.*", whose calls the model made 2 times$/)]);
  });
});

describe("the ai-sdk oracle on a continuation's repeat told as not made (no servers: the verdicts on a log)", () => {
  const payment = { tool: "send_payment" as const, args: { payee: "acme", amount: 500, currency: "EUR", reference: "c0-m0-r0-approve", memo: "Invoice" } };
  // An approval turn: the approved payment, and its approved repeat (two intents, one signature).
  const scenario: AiSdkScenario = {
    chats: [{ id: "chat-0", dispatchAt: "step", messages: [{ text: "c0 message 0", calls: [payment], continuation: { kind: "approval", repeat: [0] }, cuts: [], downstream: {}, resends: 0, regenerate: false }] }],
  };
  const effect = (seq: number) => ({ seq, kind: "payment_created" as const, account: "a", idempotencyKey: `k${seq}`, resourceId: `pay_${seq}`, payload: payment.args, at: "" });
  const base = { chat: "chat-0", message: "c0 message 0", pass: 0, step: 1, tool: "send_payment", input: payment.args };
  const paid = { ...base, request: 1, toolCallId: "call_1", ok: true, output: { paymentId: "pay_1" } };
  // What the wrapper tells for a call it settled as failed: tool_failed, effect no.
  const notMade = { ...base, request: 2, toolCallId: "call_2", ok: false, error: new ToolFailedError("k2", { name: "ApprovalSpent", message: "not run" }, true) };
  const verdicts = (kept: unknown[], effects: ReturnType<typeof effect>[]) =>
    checkAiSdkOracle(scenario, "a", { started: 0, timeline: [], told: kept as never, listings: [], diverged: new Set(), answered: new Set(["chat-0\u0000c0 message 0\u00000"]), callAt: new Map(), dispatched: [], responses: [], requests: new Map(), stats: {} }, effects).map((v) => `${v.rule}: ${v.message}`);

  it("EFFECT-6 the first payment made and told, the repeat told as not made and not made: no violation (the one effect is the first intent's)", () => {
    expect(verdicts([paid, notMade], [effect(1)])).toEqual([]);
  });

  it("EFFECT-6 the repeat told as not made while both payments were made", () => {
    expect(verdicts([paid, notMade], [effect(1), effect(2)])).toEqual([expect.stringMatching(/^EFFECT-6: send_payment call call_2 .* was kept as an error that says the effect did not happen \(tool_failed \(effect no\): .*\) but it happened/)]);
  });

  it("EFFECT-6 both told as not made while one payment was made", () => {
    expect(verdicts([{ ...notMade, request: 1, toolCallId: "call_1" }, notMade], [effect(1)])).toHaveLength(2);
  });
});
