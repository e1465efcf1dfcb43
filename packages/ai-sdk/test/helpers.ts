import { createAnthropic } from "@ai-sdk/anthropic";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, type MockProvider } from "@dispatch-once/mock-provider";
import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import { afterEach, beforeEach, expect } from "vitest";
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

/** What the mock payments API billed, in order, as "customer amount". */
export const billed = (payments: MockPaymentsServer): string[] => payments.effects().map((e) => `${String(e.payload["customer"])} ${String(e.payload["amount"])}`);

/** The user message that asks for the one invoice the mock's script makes (acme, 12 500). */
export const billAcme: ModelMessage[] = [{ role: "user", content: "bill acme" }];

/**
 * The chapter's incident through a keepingApp, on any route of the mock provider: the paying
 * response is held after its call's block (in tool-call mode, once the invoice was made) and cut
 * before the response's finish, so nothing is kept or told; the app's retry of the turn (AISDK-6:
 * the same messages, the same turn, the same key) keeps one answer that names the one invoice of
 * the effect log, the tool having run once, and leaves no call of the turn unanswered.
 */
export async function expectIncidentBillsOnce(env: { provider: MockProvider; payments: MockPaymentsServer }, app: ReturnType<typeof keepingApp>, dispatchAt: "step" | "tool-call"): Promise<void> {
  env.provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
  const cut = app.request(billAcme, dispatchAt);
  if (dispatchAt === "tool-call") await until(() => env.payments.effects().length === 1);
  else await env.provider.waitForHold();
  env.provider.cutNow();
  const first = await cut;
  expect(first.kept).toBe(false);
  expect(first.told).toEqual([]);
  if (dispatchAt === "tool-call") await app.settle();
  const retried = await app.request(billAcme, dispatchAt);
  expect(retried.kept).toBe(true);
  expect(billed(env.payments)).toEqual(["acme 12500"]);
  expect(app.runs).toHaveLength(1);
  expect(retried.told).toEqual([{ invoice: env.payments.effects()[0]!.resourceId, amount: 12_500 }]);
  expect(await retried.turn.unansweredCalls()).toEqual({ listed: true, calls: [] });
}
