import { ToolError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { checkAiSdkOracle } from "../src/ai-sdk-case.js";
import type { AiSdkScenario } from "../src/index.js";

/**
 * CONF-2's intent count per turn on the ai-sdk profile (the runner profile's `allowedAt`): keys
 * carry the turn index (the chat's user messages, AISDK-1) and the ordinal among identical calls
 * of the turn (TURN-4), so a turn makes a signature at most as often as its message asked for it.
 * The oracle of before summed a signature's intents over the whole scenario: an extra identical
 * payment at one turn was excused by the same payment asked for at another turn of the chat, which
 * a failed turn never reached. Each effect is now the turn's whose request made the call that ran
 * under its key (the call's `tool-call` part, by call id; not the turn index the wrapper under test
 * put in the key).
 *
 * End to end: test/e2e-ai-sdk-cross-turn-repeat-planted.test.ts (the profile's scenarios now draw
 * a later message that repeats an earlier message's call, AiSdkMessagePlan.repeatsEarlier). The
 * verdicts on logs (no servers): a chat whose two user messages ask for the identical payment, the first turn's failed request paying it twice (its re-sent request's
 * copy under the next ordinal), the second turn failing before its call ran.
 */
const payment = { tool: "send_payment" as const, args: { payee: "acme", amount: 500, currency: "EUR", reference: "c0-rent", memo: "Rent" } };
const message = (text: string) => ({ text, calls: [payment], cuts: [], downstream: {}, resends: 1, regenerate: false });
const scenario: AiSdkScenario = { chats: [{ id: "chat-0", dispatchAt: "tool-call", messages: [message("c0 message 0"), message("c0 message 1")] }] };
const effect = (seq: number) => ({ seq, kind: "payment_created" as const, account: "a", idempotencyKey: `k${seq}`, resourceId: `pay_${seq}`, payload: payment.args, at: "" });
const site = (text: string) => ({ chat: "chat-0", message: text, pass: 0, request: 0 });

/** The oracle's verdicts on a log where call i (call_i, key k_i) came in the request of `turns[i - 1]` and ran. */
function verdicts(turns: string[]): string[] {
  const callAt = new Map(turns.map((t, i) => [`call_${i + 1}`, site(t)]));
  const dispatched = turns.map((_, i) => ({ at: "run" as const, toolCallId: `call_${i + 1}`, tool: "send_payment", key: `k${i + 1}` }));
  const log = { started: 0, timeline: [], told: [], listings: [], diverged: new Set<string>(), answered: new Set<string>(), callAt, dispatched, responses: [], requests: new Map(), stats: {} };
  return checkAiSdkOracle(scenario, "a", log, turns.map((_, i) => effect(i + 1))).map((v) => `${v.rule}: ${v.message}`);
}

describe("the ai-sdk oracle counts intents per turn (no servers: the verdicts on a log)", () => {
  it("CONF-2 the first turn paid the payment twice, the second turn, which asked for it too, never ran it: rejected at the first turn", () => {
    expect(verdicts(["c0 message 0", "c0 message 0"])).toEqual([
      expect.stringMatching(/^CONF-2: send_payment for chat-0 "c0 message 0" \(.*\): performed 2 times for one intent: payment_created pay_1 .*, payment_created pay_2 .* \(at that turn; other turns asked for it 1 more times, which excuses none of these\)$/),
    ]);
  });

  it("CONF-2 the control: each turn paid it once", () => {
    expect(verdicts(["c0 message 0", "c0 message 1"])).toEqual([]);
  });
});

/**
 * EFFECT-6 per turn too: a "did not happen" kept at a turn is a lie when its turn made more than
 * the intents of it its pass did not deny. Summed over the scenario, the second message's
 * identical intent excused the first turn's lie when the second turn never ran its call.
 */
function deniedAtFirstTurn(paidAt: string): string[] {
  const callAt = new Map([["call_1", site(paidAt)]]);
  const dispatched = [{ at: "run" as const, toolCallId: "call_1", tool: "send_payment", key: "k1" }];
  const told = [{ chat: "chat-0", message: "c0 message 0", pass: 0, request: 0, step: 1, toolCallId: "call_0", tool: "send_payment", input: payment.args, key: "k0", ok: false, error: new ToolError("declined", { disposition: "definite" }) }];
  const log = { started: 0, timeline: [], told, listings: [], diverged: new Set<string>(), answered: new Set<string>(), callAt, dispatched, responses: [], requests: new Map(), stats: {} };
  return checkAiSdkOracle(scenario, "a", log, [effect(1)]).map((v) => `${v.rule}: ${v.message}`);
}

describe("the ai-sdk oracle judges a kept 'did not happen' per turn (no servers: the verdicts on a log)", () => {
  it("EFFECT-6 the first turn was told its payment did not happen, and its turn made it; the second turn never ran its identical call: rejected", () => {
    expect(deniedAtFirstTurn("c0 message 0")).toEqual([expect.stringMatching(/^EFFECT-6: send_payment call call_0 of chat-0 "c0 message 0" was kept as an error that says the effect did not happen .* but it happened: payment_created pay_1/)]);
  });

  it("EFFECT-6 the control: the payment is the second turn's", () => {
    expect(deniedAtFirstTurn("c0 message 1")).toEqual([]);
  });
});
