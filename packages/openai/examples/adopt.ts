import OpenAI from "openai";
import { Dispatcher, MemoryConversationStore, MemoryLedger, StoreUnavailableError, ToolError, ToolRegistry, defineTool, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/openai";
import { z } from "zod";

export const payments: { key: string; payee: string }[] = [];
const tools = new ToolRegistry([
  defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string() }),
    identity: ["payee", "amount", "currency"],
    run: async (args, { idempotencyKey }) => {
      // Your API call, with the key as a header; a refusal is an error that says it did not happen.
      if (args.amount > 1_000_000) throw new ToolError("amount over the account's limit", { disposition: "definite" });
      payments.push({ key: idempotencyKey, payee: args.payee });
      return { paymentId: `pay_${payments.length}` };
    },
  }),
]);

// store: SqliteConversationStore / PostgresConversationStore beside a durable ledger in production.
export function createRunner(client: OpenAI, store: ConversationStore = new MemoryConversationStore(), ledger: Ledger = new MemoryLedger()) {
  return new ConversationRunner({
    client, // new OpenAI() in production
    dispatcher: new Dispatcher({ tools, ledger }), // a durable ledger in production, one for every worker
    store,
    model: "gpt-5",
    tools: tools.providerSchemas(), // sent as function tools (strict: false)
  });
}

export async function handleUserMessage(runner: ConversationRunner, conversationId: string, messageId: string, text: string) {
  try {
    const { turns, records } = await runner.send(conversationId, { id: messageId, content: text }); // messageId comes from the client
    // The model's words are not a receipt: say what each call did, as the ledger answered it.
    const calls = turns.flatMap((t) => t.calls.map((c) => (c.error !== undefined ? `${c.name} failed: ${c.error.message}` : `${c.name}: ${JSON.stringify(c.result)}`)));
    // A turn that was resumed (its first holder died or paused) or retried may have had effects its
    // committed answer does not mention (its model answered the re-run differently): the turn's
    // records list them (RECORD-8). Tell them too.
    const untold = (records ?? []).flatMap((r) => r.calls).map(told);
    return [turns.at(-1)?.text ?? "", ...calls, ...untold].join("\n");
  } catch (error) {
    // The store failed at the turn's end (PostgreSQL down after the payment ran): nothing was
    // committed, but the runner says what each call did (RECORD-9); the same message id completes it.
    if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
      return error.effects.map((e) => `${told(e)}; its confirmation was not saved, send the same message again`).join("\n");
    }
    if (!TurnFailedError.isInstance(error)) throw error; // by brand and code: any copy of the package
    // Nothing was written to the conversation. Tell the user what happened to each effect, in
    // every attempt, and let them re-send the SAME message id when record.retryable says it can
    // help (not after a permanent 4xx from the model API, a refusal or an output limit in a call).
    const { retryable, error: cause } = error.record;
    const advice = retryable ? "the answer did not complete; send the same message again" : `the turn failed and sending it again will not help (${cause.message})`;
    return [...error.record.effects.map(told), advice].join("\n");
  }
}

/** One effect as the user reads it: which call, with its arguments (the request that ran), and what is known. */
function told(e: { name: string; effect: string; input?: unknown }): string {
  return `${e.name}: ${e.effect.replace(/_/g, " ")}${e.input !== undefined ? ` ${JSON.stringify(e.input)}` : ""}`;
}
