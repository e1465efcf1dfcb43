import Anthropic from "@anthropic-ai/sdk";
import {
  Dispatcher,
  MemoryLedger,
  ToolRegistry,
  UnguardedDispatcher,
  defineTool,
  type CallDispatcher,
} from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { z } from "zod";
import { ConversationRunner, MemoryConversationStore, type ConversationRunnerOptions } from "../src/index.js";

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };

/** A downstream that performs an effect per call, like a payments API handed a fresh key each time. */
export function paymentsDownstream(latencyMs: number) {
  const effects: { idempotencyKey: string; payee: string; amount: number; at: number }[] = [];
  let accepted = 0;
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
        await new Promise((r) => setTimeout(r, latencyMs));
        effects.push({ idempotencyKey: ctx.idempotencyKey, payee: args.payee, amount: args.amount, at: Date.now() });
        return { paymentId: `pay_${++accepted}`, status: "accepted" };
      },
    }),
  ]);
  return { tools, effects };
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

export function setup(
  provider: MockProvider,
  options: { guarded: boolean; latencyMs?: number; runner?: Partial<ConversationRunnerOptions> },
) {
  const downstream = paymentsDownstream(options.latencyMs ?? 50);
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
