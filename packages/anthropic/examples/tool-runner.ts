import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { MemoryLedger } from "@dispatch-once/core";
import { createOnceToolRunner, dispatchOnceOf } from "@dispatch-once/anthropic";
import { z } from "zod";

export const paid: { key: string; payee: string }[] = [];
const sendPayment = betaZodTool({
  name: "send_payment",
  description: "Send a payment",
  inputSchema: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string() }),
  run: async (args, context) => {
    const key = dispatchOnceOf(context)!.idempotencyKey; // send it as the Idempotency-Key header
    paid.push({ key, payee: args.payee }); // your API call
    return JSON.stringify({ paymentId: `pay_${paid.length}` });
  },
});

export const once = createOnceToolRunner({
  tools: [sendPayment],
  effects: { send_payment: "keyed_write" },
  identity: { send_payment: ["payee", "amount", "currency"] }, // a re-worded memo is the same payment
  ledger: new MemoryLedger(), // a durable ledger (SQLite, PostgreSQL, Redis) in production
});

/** Answer one user message with the SDK's tool runner; re-run the whole loop when a request fails. */
export async function answer(client: Anthropic, conversationId: string, history: Anthropic.Beta.Messages.BetaMessageParam[]) {
  for (let attempt = 1; ; attempt++) {
    const runner = once.toolRunner(client, { model: "claude-sonnet-5-5", max_tokens: 1024, messages: history, stream: true }, { conversationId });
    try {
      const message = await runner.runUntilDone(); // a re-run's calls are answered from the ledger
      // A call whose error a re-run can settle (its reply was lost after the payment went out:
      // claim_released; in flight elsewhere; the ledger unreachable) reached the model as "it may
      // have happened", and the loop went on: run it again for the same message, under the same key.
      if (attempt < 3 && [...once.callsOf(runner).values()].some((call) => call.error?.retryable === "same_message")) continue;
      // A failed run may have paid in an iteration whose call this run's model did not make again
      // (it asked a question instead): the ledger still knows. Show these to the user too (ATR-12).
      const { calls: unanswered } = await once.unansweredCallsOf(runner);
      return { message, unanswered };
    } catch (error) {
      if (attempt === 3) throw error;
    }
  }
}
