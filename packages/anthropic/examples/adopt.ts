import Anthropic from "@anthropic-ai/sdk";
import { ConversationBusyError, Dispatcher, MemoryLedger, StoreUnavailableError, ToolRegistry, defineTool, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { ConversationRunner, MemoryConversationStore, TurnFailedError } from "@dispatch-once/anthropic";
import { z } from "zod";

export const payments: { key: string; payee: string }[] = [];
const tools = new ToolRegistry([
  defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string() }),
    identity: ["payee", "amount", "currency"],
    run: async (args, { idempotencyKey }) => {
      payments.push({ key: idempotencyKey, payee: args.payee }); // your API call, with the key as a header
      return { paymentId: `pay_${payments.length}` };
    },
  }),
]);

// store: SqliteConversationStore / PostgresConversationStore beside a durable ledger in production.
export function createRunner(client: Anthropic, store: ConversationStore = new MemoryConversationStore(), ledger: Ledger = new MemoryLedger()) {
  return new ConversationRunner({
    client, // new Anthropic() in production; its own retries stop once headers arrived
    dispatcher: new Dispatcher({ tools, ledger }), // a durable ledger in production, one for every worker
    store,
    model: "claude-sonnet-5-5",
    tools: tools.providerSchemas(),
  });
}

export async function handleUserMessage(runner: ConversationRunner, conversationId: string, messageId: string, text: string) {
  try {
    const { turns, records } = await runner.send(conversationId, { id: messageId, content: text }); // messageId comes from the client
    // A turn that was resumed (its first holder died or paused) or retried may have had effects its
    // committed answer does not mention (its model answered the re-run differently): the turn's
    // records list them (RECORD-8). Tell them too.
    const untold = (records ?? []).flatMap((r) => r.calls).map(told);
    return [turns.at(-1)?.text ?? "", ...untold].filter((line) => line !== "").join("\n");
  } catch (error) {
    // The store failed at the turn's end (PostgreSQL down after the payment ran): nothing was
    // committed, but the runner says what each call did (RECORD-9); the same message id completes it.
    if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
      return error.effects.map((e) => `${told(e)}; its confirmation was not saved, send the same message again`).join("\n");
    }
    // Another worker is still on this very message (a queue's redelivery, a double submit): the
    // ledger says which of its calls went through or are under way so far (TURN-25).
    if (ConversationBusyError.isInstance(error) && error.inProgress) {
      const calls = error.effects?.map(told) ?? [`which payments it made is not known yet (${error.effectsUnknown})`];
      return [...calls, "still working on it; send the same message again for the answer"].join("\n");
    }
    if (!TurnFailedError.isInstance(error)) throw error; // by brand and code: any copy of the package
    // Nothing was written to the conversation. Tell the user what happened to each effect, in
    // every attempt, and let them re-send the SAME message id when record.retryable says it can
    // help (not after a permanent 4xx from the model API, a refusal or a max_tokens stop in a call).
    const { retryable, error: cause } = error.record;
    const advice = retryable ? "the answer did not complete; send the same message again" : `the turn failed and sending it again will not help (${cause.message})`;
    return [...error.record.effects.map(told), advice].join("\n");
  }
}

/** One effect as the user reads it: which call, with its arguments (the request that ran), and what is known. */
function told(e: { name: string; effect: string; input?: unknown; messageId?: string }): string {
  // `messageId`: a call an earlier message made (it failed at the turn index this one took), not this one's.
  const earlier = e.messageId !== undefined ? `from your earlier message ${e.messageId}: ` : "";
  return `${earlier}${e.name}: ${e.effect.replace(/_/g, " ")}${e.input !== undefined ? ` ${JSON.stringify(e.input)}` : ""}`;
}
