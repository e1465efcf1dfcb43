import { afterEach, beforeEach } from "vitest";
import Anthropic from "@anthropic-ai/sdk";
import {
  Dispatcher,
  MemoryConversationStore,
  MemoryLedger,
  ToolError,
  ToolRegistry,
  UnguardedDispatcher,
  defineTool,
  type CallDispatcher,
  type ConversationStore,
  type Ledger,
} from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, startMockPayments } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { z } from "zod";
import { ConversationRunner, type ConversationRunnerOptions } from "../src/index.js";

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };
export const PAY_ALICE = { payee: "alice", amount: 2_500, currency: "EUR", reference: "RENT-11", memo: "November rent" };
export const PAY_BOB = { payee: "bob", amount: 4_000, currency: "EUR", reference: "LOAN-3", memo: "Loan repayment" };

/**
 * The send_payment tool over the mock payments API: the key travels as the Idempotency-Key
 * header, and the API's effect log is the oracle for how many payments were made.
 */
export async function paymentsDownstream(latencyMs: number, options: { result?: (paymentId: string) => unknown } = {}) {
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
        let payment;
        try {
          payment = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal });
        } catch (error) {
          // The truth about the effect, as the payments API's answer tells it (LEDGER-8, EFFECT-6).
          if (error instanceof PaymentsError) {
            throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
          }
          throw error;
        }
        return options.result?.(payment.body.id) ?? { paymentId: payment.body.id, status: "accepted" };
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
      "pay alice": turn(toolUse("send_payment", PAY_ALICE, { reword: ["memo"] })),
      "pay bob": turn(toolUse("send_payment", PAY_BOB, { reword: ["memo"] })),
      "hello": { content: [{ type: "text", text: "Hi." }], stopReason: "end_turn" },
    }),
  });
}

const servers: { close(): Promise<void> }[] = [];
/** Close every payments server the tests of a file started. */
export async function closeDownstreams(): Promise<void> {
  await Promise.all(servers.splice(0).map((s) => s.close()));
}

/**
 * Call at the top of a test file: each test gets a mock provider with the plans above, started
 * before it and closed after it with the payments servers it started. Returns the current one.
 */
export function providerPerTest(): () => MockProvider {
  let provider: MockProvider | undefined;
  beforeEach(async () => {
    provider = await providerWithPlans();
  });
  afterEach(async () => {
    await provider?.close();
    provider = undefined;
    await closeDownstreams();
  });
  return () => {
    if (provider === undefined) throw new Error("the mock provider runs only within a test");
    return provider;
  };
}

export async function setup(
  provider: MockProvider,
  options: {
    guarded: boolean;
    latencyMs?: number;
    runner?: Partial<ConversationRunnerOptions>;
    result?: (paymentId: string) => unknown;
    ledger?: Ledger;
    store?: ConversationStore;
  },
) {
  const downstream = await paymentsDownstream(options.latencyMs ?? 50, options.result ? { result: options.result } : {});
  servers.push(downstream.server);
  const ledger: Ledger & { size?: number } = options.ledger ?? new MemoryLedger();
  const dispatcher: CallDispatcher = options.guarded
    ? new Dispatcher({ tools: downstream.tools, ledger, waitMs: 10_000, pollMs: 5 })
    : new UnguardedDispatcher(downstream.tools);
  const store = options.store ?? new MemoryConversationStore();
  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test-key", maxRetries: 0 });
  /** The options `runner` was built with. */
  const runnerOptions: ConversationRunnerOptions = {
    client,
    dispatcher,
    store,
    model: "claude-test",
    tools: downstream.tools.providerSchemas(),
    retry: { backoffMs: () => 10 },
    ...options.runner,
  };
  const runner = new ConversationRunner(runnerOptions);
  /** Another worker process over the same ledger and conversation store (its own runner). */
  const worker = (extra: Partial<ConversationRunnerOptions> = {}) => new ConversationRunner({ ...runnerOptions, ...extra });
  return { ...downstream, ledger, store, runner, runnerOptions, client, dispatcher, worker };
}
