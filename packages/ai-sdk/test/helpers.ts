import { createAnthropic } from "@ai-sdk/anthropic";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, type MockProvider } from "@dispatch-once/mock-provider";
import type { Ledger } from "@dispatch-once/core";
import { afterEach, beforeEach } from "vitest";
import { tool, type LanguageModel, type TextStreamPart, type ToolSet } from "ai";
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

/**
 * A mock Messages API playing `plans` and a mock payments API, fresh for each test of the file,
 * and the AI SDK's Anthropic model pointed at it.
 */
export function anthropicPerTest(seed: string, plans: Parameters<typeof scriptFromPlans>[0]): { env: { provider: MockProvider; payments: MockPaymentsServer }; model: () => LanguageModel } {
  const env = {} as { provider: MockProvider; payments: MockPaymentsServer };
  beforeEach(async () => {
    env.payments = await startMockPayments();
    env.provider = await startMockProvider({ seed, script: scriptFromPlans(plans) });
  });
  afterEach(async () => {
    await env.provider.close();
    await env.payments.close();
  });
  return { env, model: () => createAnthropic({ baseURL: `${env.provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5") };
}
