import { createAnthropic } from "@ai-sdk/anthropic";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, type MockProvider } from "@dispatch-once/mock-provider";
import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import { afterEach, beforeEach } from "vitest";
import { stepCountIs, streamText, tool, type LanguageModel, type ModelMessage, type TextStreamPart, type ToolSet } from "ai";
import { createOnceTools, type OnceTurn } from "../src/index.js";
import { z } from "zod";

/** The app's tool, as it would be written without Dispatch-Once: the payments API's unkeyed invoices. */
export function invoiceTool(payments: MockPaymentsServer, onRun: (key: string | undefined) => void = () => {}) {
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_ai" });
  return tool({
    description: "Bill a customer",
    inputSchema: z.object({ customer: z.string(), amount: z.number().int() }),
    execute: async ({ customer, amount }, options) => {
      onRun((options as { dispatchOnce?: { idempotencyKey: string } }).dispatchOnce?.idempotencyKey);
      const { body } = await api.createInvoice({ customer, amount, currency: "EUR" });
      return { invoice: body.id, amount: body.amount };
    },
  });
}

/**
 * Reads a whole `fullStream`, keeping its parts. A cut connection makes the iteration throw
 * (`AI_APICallError`, cause `TypeError: terminated`); it is kept as a last `error` part.
 */
export async function drain<T extends ToolSet>(stream: AsyncIterable<TextStreamPart<T>>): Promise<TextStreamPart<T>[]> {
  const parts: TextStreamPart<T>[] = [];
  try {
    for await (const part of stream) parts.push(part);
  } catch (error) {
    parts.push({ type: "error", error });
  }
  return parts;
}

export const outputsOf = (parts: readonly { type: string }[]) =>
  parts.filter((p) => p.type === "tool-result").map((p) => (p as unknown as { output: unknown }).output);

/** Polls a condition on the event loop (no wall-clock assertion: only the order of events matters). */
export async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 2));
}

/** Waits until no row of the conversation is in flight (a call started at its tool-call part runs on after a cut). */
export async function settled(ledger: Ledger, conversationId: string): Promise<void> {
  for (;;) {
    const { rows } = await ledger.listRows!({ conversationId, limit: 1000 });
    if (rows.length > 0 && rows.every((row) => row.state !== "in_flight")) return;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** The in-memory ledger is volatile: these tests are about the AI SDK's turns, not durability (LEDGER-14). */
export const quiet = { allowVolatileLedgerForUnkeyedWrites: true, logger: { warn: () => {} } };

/** A mock provider playing `plans` (its Messages, Bedrock, Converse, Vertex and Gemini routes) and a mock payments API, fresh for each test of the file. */
export function mocksPerTest(seed: string, plans: Parameters<typeof scriptFromPlans>[0]): { provider: MockProvider; payments: MockPaymentsServer } {
  const env = {} as { provider: MockProvider; payments: MockPaymentsServer };
  beforeEach(async () => {
    env.payments = await startMockPayments();
    env.provider = await startMockProvider({ seed, script: scriptFromPlans(plans) });
  });
  afterEach(async () => {
    await env.provider.close();
    await env.payments.close();
  });
  return env;
}

/** `mocksPerTest`, and the AI SDK's Anthropic model pointed at its Messages route. */
export function anthropicPerTest(seed: string, plans: Parameters<typeof scriptFromPlans>[0]): { env: { provider: MockProvider; payments: MockPaymentsServer }; model: () => LanguageModel } {
  const env = mocksPerTest(seed, plans);
  return { env, model: () => createAnthropic({ baseURL: `${env.provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5") };
}

/**
 * The chat route of an app that keeps AISDK-8: it keeps a response only when its stream produced
 * no error part and every step finished `stop` or `tool-calls`, and tells the user the results of
 * a kept response and the turn's unanswered effects (AISDK-14). One conversation, one ledger.
 */
export function keepingApp(payments: MockPaymentsServer, conversationId: string, model: () => LanguageModel) {
  const ledger = new MemoryLedger();
  const runs: string[] = [];
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments, (k) => runs.push(k ?? "")) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
  const request = async (messages: ModelMessage[], dispatchAt: "step" | "tool-call") => {
    const forTurn = once.forTurn({ conversationId, messages, dispatchAt }) as OnceTurn<ToolSet>;
    const result = streamText({ model: model(), messages, tools: forTurn.tools, onChunk: forTurn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} });
    const parts = await drain(result.fullStream);
    const steps = parts.filter((p) => p.type === "finish-step").map((p) => (p as { finishReason: string }).finishReason);
    const kept = !parts.some((p) => p.type === "error") && parts.some((p) => p.type === "finish") && steps.length > 0 && steps.every((r) => r === "stop" || r === "tool-calls");
    return { parts, steps, kept, told: kept ? outputsOf(parts) : [], turn: forTurn };
  };
  return { once, ledger, runs, request, settle: () => settled(ledger, conversationId) };
}
