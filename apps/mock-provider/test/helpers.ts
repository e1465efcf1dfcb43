import Anthropic from "@anthropic-ai/sdk";
import { afterEach } from "vitest";
import { startMockProvider, type MockProvider, type MockProviderOptions } from "../src/index.js";

/** The four tools of the chapter's domain, declared as a product team would. */
export const tools = [
  {
    name: "send_payment",
    description: "Send a payment to a supplier",
    input_schema: {
      type: "object" as const,
      properties: { to: { type: "string" }, amount_cents: { type: "integer" }, currency: { type: "string" }, memo: { type: "string" } },
      required: ["to", "amount_cents"],
    },
  },
  {
    name: "void_payment",
    description: "Void a payment",
    input_schema: { type: "object" as const, properties: { payment_id: { type: "string" } }, required: ["payment_id"] },
  },
  {
    name: "create_invoice",
    description: "Create an invoice",
    input_schema: { type: "object" as const, properties: { customer: { type: "string" }, lines: { type: "array" } } },
  },
  {
    name: "search_orders",
    description: "Search orders",
    input_schema: { type: "object" as const, properties: { query: { type: "string" }, limit: { type: "integer" } } },
  },
];

export const payment = { to: "acme-supplies", amount_cents: 125_000, currency: "EUR", memo: "Invoice 1042 for March" };

export const invoice = {
  customer: "Globex",
  lines: [
    { sku: "A-1", qty: 2, unit_cents: 1999, note: "naïve café ☕ \"quoted\" \\ back\nslash" },
    { sku: "B-22", qty: 1, unit_cents: 50_000, tags: { "10": true, "2": false, z: null } },
  ],
};

export function body(userText: string, extra: Partial<Anthropic.MessageCreateParamsNonStreaming> = {}) {
  return {
    model: "claude-mock-1",
    max_tokens: 1024,
    tools,
    messages: [{ role: "user" as const, content: userText }],
    ...extra,
  };
}

const started: MockProvider[] = [];

/** A provider closed after each test, and an SDK client pointed at it (no SDK retries unless asked). */
export async function setup(options: MockProviderOptions = {}, clientOptions: { maxRetries?: number } = {}) {
  const provider = await startMockProvider(options);
  started.push(provider);
  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "sk-test", maxRetries: clientOptions.maxRetries ?? 0 });
  return { provider, client };
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((p) => p.close()));
});

/** Run a promise and hand back what it rejected with (fails the test if it resolved). */
export async function rejection(promise: Promise<unknown>): Promise<any> {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error("expected the promise to reject, it resolved");
}
