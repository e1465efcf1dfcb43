import type Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import { MemoryLedger } from "@dispatch-once/core";
import { createPaymentsClient } from "@dispatch-once/mock-payments";
import { say, startMockProvider, toolUse, turn, type AssistantTurn, type MockProvider } from "@dispatch-once/mock-provider";
import { afterEach, describe, expect, it } from "vitest";
import { createOnceToolRunner, dispatchOnceOf, rerunMessagesOf, type OnceToolCallError } from "../src/index.js";
import { PAY_ACME, PAY_ALICE } from "./fixtures.js";
import { paymentsApp, toolResultsOf } from "./tool-runner-fixtures.js";

/*
 * ATR-10: the SDK's loop stops, without running tools, on a reply that ends with `refusal` or at
 * its output limit (`max_tokens`), but the reply's calls are still in the runner's messages, and
 * `runner.generateToolResponse()` (the SDK's documented way to get "the tool response for the
 * last message") runs them whatever the stop reason: a call the classifier refused, or one whose
 * arguments the limit cut (the SDK parses the partial JSON it got), would be paid.
 */

type Message = Anthropic.Beta.Messages.BetaMessageParam;

let provider: MockProvider | undefined;
afterEach(async () => {
  await provider?.close();
  provider = undefined;
});

/** Iteration 1 pays acme; iteration 2 (the reply to its tool result) ends as `second` says. */
async function loopEndingWith(second: AssistantTurn) {
  provider = await startMockProvider({
    script: (request) => {
      const last = request.messages.at(-1)!;
      const answersTools = Array.isArray(last.content) && last.content.some((b) => b.type === "tool_result");
      return answersTools ? second : turn(toolUse("send_payment", PAY_ACME));
    },
  });
  const app = await paymentsApp(provider, { latencyMs: 0 });
  // Written with betaTool (a JSON schema, which the SDK does not validate against): whatever the
  // SDK made of the reply's arguments reaches run, a cut call's `{}` or partial input too.
  const runs: unknown[] = [];
  const payments = createPaymentsClient({ baseURL: app.server.url, token: "acct_test" });
  const sendPayment = betaTool({
    name: "send_payment",
    description: "Send a payment to a payee",
    inputSchema: { type: "object", properties: { payee: { type: "string" }, amount: { type: "integer" }, currency: { type: "string" }, reference: { type: "string" }, memo: { type: "string" } } },
    run: async (args, context) => {
      runs.push(args);
      const payment = await payments.createPayment(args as typeof PAY_ACME, { idempotencyKey: dispatchOnceOf(context)!.idempotencyKey });
      return JSON.stringify({ paymentId: payment.body.id, status: "accepted" });
    },
  });
  const once = createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger: new MemoryLedger() });
  const start: Message[] = [{ role: "user", content: "pay acme, then alice" }];
  const build = (messages: Message[]) => once.toolRunner(app.client, { model: "claude-test", max_tokens: 1024, stream: true, thread: false, messages }, { conversationId: "conv-stop" });
  return { ...app, runs, once, start, build };
}

const REFUSED: AssistantTurn = {
  content: [toolUse("send_payment", PAY_ALICE), say("Paid. Now, about the other thing you asked")],
  stopReason: "refusal",
  stopDetails: { category: "cyber", explanation: "declined by the classifier" },
};
const CUT_IN_CALL: AssistantTurn = { content: [say("Now alice."), toolUse("send_payment", PAY_ALICE)], stopReason: "max_tokens" };

describe.each([
  ["refusal", REFUSED],
  ["max_tokens inside the call's arguments", CUT_IN_CALL],
] as const)("ATR-10 a reply of the SDK's loop that stopped with %s, after a tool already paid", (_name, second) => {
  it("the loop ends; the payment made is told; generateToolResponse() runs none of the stopped reply's calls; the re-run pays nothing again", async () => {
    const { build, start, once, effects, runs } = await loopEndingWith(second);
    const runner = build(start);
    const final = await runner.runUntilDone();
    expect(final.stop_reason).toBe(second.stopReason);
    expect(effects()).toHaveLength(1);
    // The payment of iteration 1 is told: in the runner's messages and in callsOf.
    const told = toolResultsOf(runner.params.messages).filter((r) => !r.isError);
    expect(told.map((r) => (JSON.parse(r.text) as { paymentId: string }).paymentId)).toEqual([effects()[0]!.resourceId]);
    const paid = [...once.callsOf(runner).values()].filter((c) => c.outcome !== undefined);
    expect(paid).toHaveLength(1);

    // The app asks the SDK for "the tool response for the last message": the stopped reply's.
    const response = await runner.generateToolResponse();
    expect(runs).toHaveLength(1);
    expect(effects()).toHaveLength(1);
    // Each of its calls is answered with an error that says it did not happen, and why.
    const results = (response?.content ?? []) as { type: string; is_error?: boolean; content?: unknown }[];
    for (const result of results) expect(result).toMatchObject({ type: "tool_result", is_error: true });
    const refused = [...once.callsOf(runner).values()].filter((c) => c.error !== undefined);
    for (const call of refused) {
      expect(call.error).toMatchObject({ code: "invalid_argument", effect: "no" } satisfies Partial<OnceToolCallError>);
      expect(call.error!.message).toMatch(new RegExp(`stop_reason ${second.stopReason}`));
    }
    expect(refused.length).toBe(results.length);

    // Nothing of the stopped reply is kept for the re-run; the re-run (from what the runner
    // accumulated) is answered from the ledger where it repeats the paid call, and pays nothing.
    const kept = rerunMessagesOf(runner);
    expect(kept.at(-1)!.role).toBe("user");
    expect(JSON.stringify(kept)).not.toContain(PAY_ALICE.reference);
    const again = build(start);
    await again.runUntilDone();
    expect(runs).toHaveLength(1);
    expect(effects()).toHaveLength(1);
    expect([...once.callsOf(again).values()].filter((c) => c.outcome !== undefined).map((c) => c.outcome!.replayed)).toEqual([true]);
  });
});
