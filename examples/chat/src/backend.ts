import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner, type RunnerEvent } from "@dispatch-once/anthropic";
import { SqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import { Dispatcher, ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";
import { SqliteLedger } from "@dispatch-once/ledger-sqlite";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient } from "@dispatch-once/mock-payments";
import { z } from "zod";

/** A current model id (SDK 1.14.0 warns on every request naming a deprecated one). */
export const MODEL = "claude-sonnet-5-5";

export interface ChatBackendOptions {
  /** The Messages API: the mock provider's `baseURL` here; leave it out for the real API. */
  anthropicBaseURL?: string;
  anthropicApiKey?: string;
  /** The payments API the `send_payment` tool calls (mock payments here). */
  paymentsURL: string;
  /** The account (Bearer token) at the payments API. */
  paymentsToken?: string;
  /**
   * One SQLite file holds the ledger and the conversations: both durable, as the runner demands
   * beside a durable ledger (TURN-14). A restart finds every claim and every committed turn.
   */
  databasePath: string;
  /** Per-attempt request headers, e.g. fault injection for a mock provider. */
  requestHeaders?: (info: { conversationId: string; turnIndex: number; attempt: number }) => Record<string, string>;
  /** Runner retry back-off; short in tests. */
  backoffMs?: (retry: number) => number;
  attempts?: number;
  onEvent?: (event: RunnerEvent) => void;
}

export interface ChatBackend {
  runner: ConversationRunner;
  store: SqliteConversationStore;
  ledger: SqliteLedger;
  /** Runner events, fanned out to whoever listens (the HTTP layer routes them to streams). */
  subscribe(listener: (event: RunnerEvent) => void): () => void;
  close(): Promise<void>;
}

export const paymentInput = z.object({
  payee: z.string().min(1),
  amount: z.number().int().positive(),
  currency: z.string().regex(/^[A-Z]{3}$/),
  reference: z.string().min(1),
  memo: z.string(),
});

export function createChatBackend(options: ChatBackendOptions): ChatBackend {
  const payments = createPaymentsClient({ baseURL: options.paymentsURL, token: options.paymentsToken ?? "acct_chat" });
  const sendPayment = defineTool({
    name: "send_payment",
    description: "Send a payment. Amount in minor units (cents).",
    effect: "keyed_write", // the payments API deduplicates on Idempotency-Key
    input: paymentInput,
    identity: ["payee", "amount", "currency", "reference"], // a re-worded memo is the same payment
    async run(args, { idempotencyKey }) {
      try {
        const { body } = await payments.createPayment(args, { idempotencyKey });
        return { paymentId: body.id, amount: body.amount, currency: body.currency, payee: body.payee };
      } catch (error) {
        // What the payments API's answer means for the effect: did not happen, or may have.
        if (error instanceof PaymentsError) {
          throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
        }
        throw error; // not an answer at all: unknown outcome, released for a re-run with the same key
      }
    },
  });
  const tools = new ToolRegistry([sendPayment]);
  const ledger = new SqliteLedger({ path: options.databasePath });
  const store = new SqliteConversationStore({ path: options.databasePath });
  const listeners = new Set<(event: RunnerEvent) => void>();
  const runner = new ConversationRunner({
    client: new Anthropic({
      ...(options.anthropicBaseURL !== undefined ? { baseURL: options.anthropicBaseURL } : {}),
      ...(options.anthropicApiKey !== undefined ? { apiKey: options.anthropicApiKey } : {}),
      // The runner retries whole attempts; the SDK's own retries would hide a failed attempt.
      maxRetries: 0,
    }),
    dispatcher: new Dispatcher({ tools, ledger }),
    store,
    model: MODEL,
    tools: tools.providerSchemas(),
    system: "You are a payments assistant. Use send_payment to pay; amounts are in minor units.",
    retry: {
      ...(options.backoffMs !== undefined ? { backoffMs: options.backoffMs } : {}),
      ...(options.attempts !== undefined ? { attempts: options.attempts } : {}),
    },
    ...(options.requestHeaders !== undefined ? { requestHeaders: options.requestHeaders } : {}),
    onEvent: (event) => {
      options.onEvent?.(event);
      for (const listener of listeners) listener(event);
    },
  });
  return {
    runner,
    store,
    ledger,
    subscribe(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async close() {
      await store.close();
      await ledger.close();
    },
  };
}
