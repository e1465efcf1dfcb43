import OpenAI from "openai";
import { Dispatcher, MemoryConversationStore, MemoryLedger, StoreUnavailableError, ToolRegistry, defineTool, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { ChatCompletionsRunner, TurnFailedError } from "@dispatch-once/openai";
import { z } from "zod";

export const transfers: { key: string; payee: string }[] = [];
const tools = new ToolRegistry([
  defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string().optional() }),
    identity: ["payee", "amount", "currency", "reference"],
    run: async (args, { idempotencyKey }) => {
      // Your API call, with the key as a header.
      transfers.push({ key: idempotencyKey, payee: args.payee });
      return { paymentId: `pay_${transfers.length}` };
    },
  }),
]);

// Any server that speaks Chat Completions: new OpenAI({ baseURL: "http://localhost:8000/v1" }) for vLLM,
// Groq, OpenRouter, Ollama, DeepSeek; AzureOpenAI for Azure.
export function createChatRunner(client: OpenAI, store: ConversationStore = new MemoryConversationStore(), ledger: Ledger = new MemoryLedger()) {
  return new ChatCompletionsRunner({
    client,
    dispatcher: new Dispatcher({ tools, ledger }), // a durable ledger in production
    store,
    model: "gpt-4.1",
    tools: tools.providerSchemas(), // sent as { type: "function", function: { name, description, parameters } }
    instructions: "You are a billing assistant.", // a leading system message of every request, not stored
  });
}

export async function payFromChat(runner: ChatCompletionsRunner, conversationId: string, messageId: string, text: string) {
  try {
    const { turns, records } = await runner.send(conversationId, { id: messageId, content: text });
    // What each call did, as the ledger answered it; then the model's closing words.
    const calls = turns.flatMap((t) => t.calls.map((c) => `${c.name} ${JSON.stringify(c.result ?? c.error)}`));
    // A resumed or retried turn may have had effects its committed answer does not mention (its
    // model answered the re-run differently): the turn's records list them (RECORD-8). Tell them too.
    const untold = (records ?? []).flatMap((r) => r.calls).map(told);
    return [...calls, turns.at(-1)?.text ?? "", ...untold].join("\n");
  } catch (error) {
    // The store failed at the turn's end (PostgreSQL down after the payment ran): nothing was
    // committed, but the runner says what each call did (RECORD-9); the same message id completes it.
    if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
      return error.effects.map((e) => `${told(e)}; its confirmation was not saved, send the same message again`).join("\n");
    }
    if (!TurnFailedError.isInstance(error)) throw error;
    // Nothing was committed. A cut stream that ran out of retries is retryable: re-send the same
    // message id. finish_reason "length" or "content_filter" is not (the same request stops the same
    // way), nor is a request the server refused (a 4xx: vLLM's 400 for a context over its limit).
    const { retryable, error: cause } = error.record;
    const advice = retryable ? "connection lost; please retry" : cause.code === "stream_incomplete" ? "the model stopped; please rephrase" : `the turn failed and sending it again will not help (${cause.message})`;
    return [...error.record.effects.map(told), advice].join("\n");
  }
}

/** One effect as the user reads it: which call, with its arguments (the request that ran), and what is known. */
function told(e: { name: string; effect: string; input?: unknown }): string {
  return `${e.name}: ${e.effect.replace(/_/g, " ")}${e.input !== undefined ? ` ${JSON.stringify(e.input)}` : ""}`;
}
