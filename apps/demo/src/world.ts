import Anthropic from "@anthropic-ai/sdk";
import {
  Dispatcher,
  ToolError,
  ToolRegistry,
  UnguardedDispatcher,
  defineTool,
  type CallDispatcher,
  type Ledger,
  type ToolRunContext,
} from "@dispatch-once/core";
import {
  ConversationRunner,
  MemoryConversationStore,
  type ConversationRunnerOptions,
  type RunnerEvent,
} from "@dispatch-once/anthropic";
import {
  lastToolResults,
  lastUserText,
  say,
  startMockProvider,
  toolUse,
  turn,
  type FaultPlan,
  type MockProvider,
  type Script,
  type Timing,
} from "@dispatch-once/mock-provider";
import {
  PaymentsError,
  DISPOSITION_BY_OUTCOME,
  createPaymentsClient,
  startMockPayments,
  type Effect,
  type MockPaymentsServer,
} from "@dispatch-once/mock-payments";
import { z } from "zod";

export const MODEL = "claude-demo";
export const PAYMENTS_ACCOUNT_TOKEN = "demo-account";

export interface PaymentArgs {
  payee: string;
  amount: number;
  currency: string;
  reference: string;
  memo: string;
}

/** What the user says: the scripted model answers it with exactly this send_payment call. */
export function paymentMessage(args: PaymentArgs): string {
  return `pay ${JSON.stringify(args)}`;
}

/**
 * The scripted model: a message "pay {...}" gets one send_payment call (whose memo a retried
 * response re-words, as a real model does); the tool result gets a one-line confirmation.
 * A function of the request alone, so a replayed turn gets the same call again.
 */
export const paymentScript: Script = (request) => {
  const results = lastToolResults(request);
  if (results.length > 0) {
    return { content: [say(`Done: ${results.map((r) => r.content).join("; ")}`)], stopReason: "end_turn" };
  }
  const text = lastUserText(request);
  if (!text.startsWith("pay ")) return { content: [say("I can only send payments in this demo.")], stopReason: "end_turn" };
  const args = JSON.parse(text.slice(4)) as PaymentArgs;
  return turn(toolUse("send_payment", { ...args }, { reword: ["memo"] }));
};

/** Hooks the demo uses to observe the tool and, in the chaos run, to fix where a cut lands. */
export interface ToolHooks {
  /** Called when the payments API has answered, before the tool returns to the dispatcher. */
  afterPost?(args: PaymentArgs, context: ToolRunContext, paymentId: string): Promise<void> | void;
}

export interface SideOptions {
  guarded: boolean;
  /** Required when guarded. */
  ledger?: Ledger;
  paymentsLatencyMs: number;
  providerTiming: Partial<Timing>;
  seed: string;
  pollMs?: number;
  hooks?: ToolHooks;
  onEffect?: (effect: Effect) => void;
}

/**
 * One side of the comparison: its own mock payments API (so its effect log counts only its
 * payments), its own mock provider, the send_payment tool, and a dispatcher, naive or guarded.
 */
export interface Side {
  guarded: boolean;
  payments: MockPaymentsServer;
  provider: MockProvider;
  client: Anthropic;
  tools: ToolRegistry;
  dispatcher: CallDispatcher;
  /** POSTs the tool sent to the payments API, per payment reference. */
  posts: Map<string, number>;
  /** Dispatcher warnings (e.g. a repeated call within one turn). */
  warnings: string[];
  /** A runner over this side; every runner of a side shares its conversation store unless given one. */
  runner(options?: Partial<ConversationRunnerOptions>): ConversationRunner;
  store: MemoryConversationStore;
  setFaultPlan(plan: FaultPlan | undefined): void;
  /** Payments the downstream actually created, per reference: the oracle. */
  paymentsByReference(): Map<string, number>;
  close(): Promise<void>;
}

const paymentInput = z.object({
  payee: z.string().min(1),
  amount: z.number().int().positive(),
  currency: z.string().regex(/^[A-Z]{3}$/),
  reference: z.string().min(1),
  memo: z.string().optional(),
});

export async function startSide(options: SideOptions): Promise<Side> {
  const payments = await startMockPayments({
    latencyMs: Math.round(options.paymentsLatencyMs),
    ...(options.onEffect !== undefined ? { onEffect: options.onEffect } : {}),
  });
  const provider = await startMockProvider({ script: paymentScript, timing: options.providerTiming, seed: options.seed });
  const paymentsClient = createPaymentsClient({ baseURL: payments.url, token: PAYMENTS_ACCOUNT_TOKEN });
  const posts = new Map<string, number>();
  const warnings: string[] = [];
  const hooks = options.hooks;

  const sendPayment = defineTool({
    name: "send_payment",
    description: "Send a payment to a payee. Amount in minor units (cents).",
    effect: "keyed_write",
    input: paymentInput,
    // The memo is free text a retried response may re-word: it does not identify the payment.
    identity: ["payee", "amount", "currency", "reference"],
    async run(args, context) {
      posts.set(args.reference, (posts.get(args.reference) ?? 0) + 1);
      let paymentId: string;
      try {
        // The key goes downstream as Idempotency-Key: the naive handler's is the toolu_ id.
        const response = await paymentsClient.createPayment(args, { idempotencyKey: context.idempotencyKey });
        paymentId = response.body.id;
      } catch (error) {
        if (error instanceof PaymentsError) {
          // A 422 "key reused with a different request" is request_mismatch, never "did not happen".
          throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
        }
        throw error; // not a payments answer at all: unknown outcome
      }
      await hooks?.afterPost?.(args as PaymentArgs, context, paymentId);
      return { paymentId, status: "accepted", amount: args.amount, currency: args.currency, payee: args.payee };
    },
  });
  const tools = new ToolRegistry([sendPayment]);

  let dispatcher: CallDispatcher;
  if (options.guarded) {
    if (options.ledger === undefined) throw new Error("a guarded side needs a ledger");
    dispatcher = new Dispatcher({
      tools,
      ledger: options.ledger,
      leaseMs: 30_000,
      waitMs: 30_000,
      pollMs: options.pollMs ?? 5,
      logger: { warn: (message) => warnings.push(message) },
    });
  } else {
    dispatcher = new UnguardedDispatcher(tools);
  }

  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "demo-key", maxRetries: 0 });
  const store = new MemoryConversationStore();
  return {
    guarded: options.guarded,
    payments,
    provider,
    client,
    tools,
    dispatcher,
    posts,
    warnings,
    store,
    runner: (overrides = {}) =>
      new ConversationRunner({
        client,
        dispatcher,
        store,
        model: MODEL,
        tools: tools.providerSchemas(),
        maxTokens: 256,
        ...overrides,
      }),
    setFaultPlan: (plan) => provider.setFaultPlan(plan),
    paymentsByReference() {
      const counts = new Map<string, number>();
      for (const effect of payments.effects({ kind: "payment_created" })) {
        const reference = String(effect.payload["reference"]);
        counts.set(reference, (counts.get(reference) ?? 0) + 1);
      }
      return counts;
    },
    async close() {
      await provider.close();
      await payments.close();
    },
  };
}

/** Duplicates = payments beyond the first, summed over references. */
export function countDuplicates(counts: Map<string, number>, references?: Iterable<string>): { payments: number; duplicates: number; duplicatedReferences: string[] } {
  let payments = 0;
  let duplicates = 0;
  const duplicatedReferences: string[] = [];
  const keys = references === undefined ? [...counts.keys()] : [...references];
  for (const reference of keys) {
    const n = counts.get(reference) ?? 0;
    payments += n;
    if (n > 1) {
      duplicates += n - 1;
      duplicatedReferences.push(reference);
    }
  }
  return { payments, duplicates, duplicatedReferences };
}

export type { RunnerEvent };
