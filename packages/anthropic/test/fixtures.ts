import Anthropic from "@anthropic-ai/sdk";
import {
  Dispatcher,
  MemoryLedger,
  ToolRegistry,
  UnguardedDispatcher,
  defineTool,
  type CallDispatcher,
} from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { z } from "zod";
import { ConversationRunner, MemoryConversationStore, type ConversationRunnerOptions } from "../src/index.js";

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };

/**
 * The send_payment tool over the mock payments API: the key travels as the Idempotency-Key
 * header, and the API's effect log is the oracle for how many payments were made.
 */
export async function paymentsDownstream(latencyMs: number) {
  const server = await startMockPayments({ latencyMs });
  const client = createPaymentsClient({ baseURL: server.url, token: "acct_test" });
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      description: "Send a payment to a payee",
      effect: "keyed_write",
      input: z.object({
        payee: z.string(),
        amount: z.number().int().positive(),
        currency: z.string().length(3),
        reference: z.string(),
        memo: z.string().optional(),
      }),
      identity: ["payee", "amount", "currency", "reference"],
      async run(args, ctx) {
        const payment = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey });
        return { paymentId: payment.body.id, status: "accepted" };
      },
    }),
  ]);
  const effects = () =>
    server.effects().filter((e) => e.kind === "payment_created").map((e) => ({ idempotencyKey: e.idempotencyKey, paymentId: e.resourceId, at: Date.parse(e.at) }));
  return { tools, effects, server };
}

export async function providerWithPlans(): Promise<MockProvider> {
  const payAcme = turn(toolUse("send_payment", PAY_ACME, { reword: ["memo"] }));
  return startMockProvider({
    script: scriptFromPlans({
      "pay acme": payAcme,
      "pay acme twice": turn(toolUse("send_payment", PAY_ACME), toolUse("send_payment", PAY_ACME)),
      "hello": { content: [{ type: "text", text: "Hi." }], stopReason: "end_turn" },
    }),
  });
}

const servers: { close(): Promise<void> }[] = [];
/** Close every payments server the tests of a file started. */
export async function closeDownstreams(): Promise<void> {
  await Promise.all(servers.splice(0).map((s) => s.close()));
}

export async function setup(
  provider: MockProvider,
  options: { guarded: boolean; latencyMs?: number; runner?: Partial<ConversationRunnerOptions> },
) {
  const downstream = await paymentsDownstream(options.latencyMs ?? 50);
  servers.push(downstream.server);
  const ledger = new MemoryLedger();
  const dispatcher: CallDispatcher = options.guarded
    ? new Dispatcher({ tools: downstream.tools, ledger, waitMs: 10_000, pollMs: 5 })
    : new UnguardedDispatcher(downstream.tools);
  const store = new MemoryConversationStore();
  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test-key", maxRetries: 0 });
  const runner = new ConversationRunner({
    client,
    dispatcher,
    store,
    model: "claude-test",
    tools: downstream.tools.providerSchemas(),
    retry: { backoffMs: () => 10 },
    ...options.runner,
  });
  return { ...downstream, ledger, store, runner, client };
}
