import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { MemoryLedger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { createOnceToolRunner, dispatchOnceOf } from "../src/index.js";
import { paymentSchema, providerPerTest, toolResultsOf } from "./tool-runner-fixtures.js";

/**
 * DISPATCH-18 through the SDK's tool runner (ATR-5, ATR-6): a wrapped keyed payment whose
 * downstream answers only when the test says so, under a run timeout of 100 ms.
 */
const provider = providerPerTest();

async function eventually(check: () => boolean, what: string): Promise<void> {
  const until = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > until) throw new Error(`not within 20 s: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function app(downstream: Promise<void>) {
  const counts = { runs: 0, payments: 0 };
  const signals: AbortSignal[] = [];
  const sendPayment = betaZodTool({
    name: "send_payment",
    description: "Send a payment to a payee",
    inputSchema: paymentSchema,
    run: async (_input, context) => {
      counts.runs += 1;
      signals.push(context!.signal!);
      const key = dispatchOnceOf(context)?.idempotencyKey;
      await downstream; // ignores the signal
      counts.payments += 1;
      return JSON.stringify({ status: "accepted", key });
    },
  });
  const once = createOnceToolRunner({
    tools: [sendPayment],
    effects: { send_payment: "keyed_write" },
    ledger: new MemoryLedger(),
    identity: { send_payment: ["payee", "amount", "currency", "reference"] },
    dispatcher: { runTimeoutMs: 100, waitMs: 2_000, pollMs: 5, logger: { warn: () => {} } },
  });
  const client = new Anthropic({ baseURL: provider().baseURL, apiKey: "test-key", maxRetries: 0 });
  const run = async () => {
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, stream: true, thread: false, messages: [{ role: "user", content: "pay acme" }] }, { conversationId: "conv-atr-timeout" });
    await runner.runUntilDone();
    return { runner, results: toolResultsOf(runner.params.messages), call: [...once.callsOf(runner).values()][0]! };
  };
  return { counts, signals, run };
}

describe("ATR-5, ATR-6, DISPATCH-18: a wrapped run past its bound in the SDK's tool runner", () => {
  it("ATR-5 DISPATCH-18 the model's tool_result says the effect may have happened and a re-run may settle it; the run's signal aborts; after the late completion the loop's re-run replays it, paid once", async () => {
    let answer!: () => void;
    const a = app(new Promise((r) => (answer = r)));
    const first = await a.run();
    expect(first.call.error).toMatchObject({ code: "in_flight_elsewhere", effect: "possibly", retryable: "same_message" });
    expect(first.results).toHaveLength(1);
    expect(first.results[0]!.isError).toBe(true);
    expect(first.results[0]!.text).toMatch(/in_flight_elsewhere[\s\S]*runTimeoutMs[\s\S]*Effect: it may have happened; re-running the same request may settle it/);
    expect(a.signals[0]!.aborted).toBe(true);
    answer();
    await eventually(() => a.counts.payments === 1, "the late run paid");
    let second = await a.run();
    // The late completion's record may land a moment after the payment: a re-run meanwhile waits on the row.
    for (let i = 0; i < 50 && second.call.outcome === undefined; i++) second = await a.run();
    expect(second.call.outcome).toMatchObject({ replayed: true });
    expect(second.results[0]!.isError).toBe(false);
    expect(a.counts).toEqual({ runs: 1, payments: 1 });
  });
});
