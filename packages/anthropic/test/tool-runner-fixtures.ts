import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import type { BetaToolRunContext } from "@anthropic-ai/sdk/lib/tools/BetaRunnableTool";
import { ToolError } from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, startMockPayments } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { afterEach, beforeEach, expect } from "vitest";
import { z } from "zod";
import { dispatchOnceOf } from "../src/index.js";
import { PAY_ACME, PAY_ALICE } from "./fixtures.js";

/**
 * The plans the SDK's tool runner plays: the n-th request after the user's message plays step n
 * (the runner's iterations), then "Done." with end_turn.
 */
export const PLANS = {
  // iteration 1 pays acme; iteration 2 closes
  "pay acme": [turn(toolUse("send_payment", PAY_ACME, { reword: ["memo"] }))],
  // iteration 1 pays acme, iteration 2 pays alice, iteration 3 closes
  "pay acme then alice": [turn(toolUse("send_payment", PAY_ACME, { reword: ["memo"] })), turn(toolUse("send_payment", PAY_ALICE, { reword: ["memo"] }))],
  // the same payment in iteration 1 and again (meant) in iteration 2
  "pay acme in two steps": [turn(toolUse("send_payment", PAY_ACME)), turn(toolUse("send_payment", PAY_ACME))],
  // two identical calls in one response
  "pay acme twice": [turn(toolUse("send_payment", PAY_ACME), toolUse("send_payment", PAY_ACME))],
  "check balance": [turn(toolUse("get_balance", { currency: "EUR" }))],
};

export function providerPerTest(): () => MockProvider {
  let provider: MockProvider | undefined;
  beforeEach(async () => {
    provider = await startMockProvider({ script: scriptFromPlans(PLANS) });
  });
  afterEach(async () => {
    await provider?.close();
    provider = undefined;
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });
  return () => {
    if (provider === undefined) throw new Error("the mock provider runs only within a test");
    return provider;
  };
}

const servers: { close(): Promise<void> }[] = [];

export const paymentSchema = z.object({
  payee: z.string(),
  amount: z.number().int().positive(),
  currency: z.string().length(3),
  reference: z.string(),
  memo: z.string().optional(),
});

/**
 * The app's tools as an SDK adopter writes them (betaZodTool), over the mock payments API: the
 * Dispatch-Once key, when the tool is wrapped, travels as the Idempotency-Key header.
 */
export async function paymentsApp(provider: MockProvider, options: { latencyMs?: number } = {}) {
  const server = await startMockPayments({ latencyMs: options.latencyMs ?? 20 });
  servers.push(server);
  const payments = createPaymentsClient({ baseURL: server.url, token: "acct_test" });
  const contexts: (BetaToolRunContext | undefined)[] = [];
  const sendPayment = betaZodTool({
    name: "send_payment",
    description: "Send a payment to a payee",
    inputSchema: paymentSchema,
    run: async (args, context) => {
      contexts.push(context);
      const key = context === undefined ? undefined : dispatchOnceOf(context)?.idempotencyKey;
      try {
        const payment = await payments.createPayment(args, { ...(key !== undefined ? { idempotencyKey: key } : {}), ...(context?.signal ? { signal: context.signal } : {}) });
        return JSON.stringify({ paymentId: payment.body.id, status: "accepted" });
      } catch (error) {
        if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
        throw error;
      }
    },
  });
  const getBalance = betaZodTool({
    name: "get_balance",
    description: "Read the balance",
    inputSchema: z.object({ currency: z.string() }),
    run: async (args) => JSON.stringify({ currency: args.currency, balance: 100 }),
  });
  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test-key", maxRetries: 0 });
  const effects = () => server.effects().filter((e) => e.kind === "payment_created");
  return { server, payments, client, sendPayment, getBalance, effects, contexts };
}

/** Cut the stream of the given request numbers (1-based, over the provider's lifetime) mid-way. */
export function cutRequests(provider: MockProvider, numbers: readonly number[]): void {
  provider.setFaultPlan((_request, info) => (info.stream && numbers.includes(info.requestNumber) ? { kind: "reset", at: { event: 2 } } : undefined));
}

/** The tool_result blocks the runner's messages hold, by tool_use id. */
export function toolResultsOf(messages: readonly Anthropic.Beta.Messages.BetaMessageParam[]) {
  const results: { toolUseId: string; isError: boolean; text: string }[] = [];
  for (const m of messages) {
    if (m.role !== "user" || typeof m.content === "string") continue;
    for (const b of m.content) {
      if (b.type !== "tool_result") continue;
      const text = typeof b.content === "string" ? b.content : (b.content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");
      results.push({ toolUseId: b.tool_use_id, isError: b.is_error === true, text });
    }
  }
  return results;
}

/**
 * The two modes of the SDK's runner the e2e cases run in: `thread: false` sends the full history on
 * each request; the default (no `thread` param) uses message threads: a create, then continues with
 * only the new messages, a new thread after a cut and a replay after a thread error.
 */
export type ThreadMode = readonly [name: string, params: { thread?: false }];
export const THREAD_MODES: readonly ThreadMode[] = [
  ["thread: false (full history each request)", { thread: false }],
  ["default: message threads", {}],
];

/**
 * The requests the mock provider saw were of the mode (so a case cannot pass in the other mode by
 * accident): threaded, every request carries `thread` and at least one is a continue of a stored
 * reply that the provider rebuilt; unthreaded, none carries it.
 */
export function expectRequestsOfMode(provider: MockProvider, [, params]: ThreadMode): void {
  const threads = provider.requests.map((r) => (r.body as { thread?: { type: string } }).thread);
  expect(threads.length).toBeGreaterThan(0);
  if (params.thread === false) {
    expect(threads.every((t) => t === undefined)).toBe(true);
  } else {
    expect(threads.every((t) => t !== undefined)).toBe(true);
    expect(provider.requests.some((r) => r.thread?.type === "continue" && r.status === 200)).toBe(true);
  }
}
