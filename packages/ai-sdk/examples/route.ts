import { convertToModelMessages, stepCountIs, streamText, tool, type LanguageModel, type UIMessage } from "ai";
import { ToolError, type Ledger } from "@dispatch-once/core";
import { createOnceTools, dispatchOnceOf, type UnansweredCallRecord } from "@dispatch-once/ai-sdk";
import { z } from "zod";

/**
 * `model`: wrapped with `[providerToolsGuard(), spliceGuard()]` (below: tools the provider runs itself are
 * refused, AISDK-15; a second response spliced into a stream fails the request, AISDK-16).
 * `tell` shows the user what the turn did that its answer does not say (AISDK-14), e.g. as a notice in the chat.
 */
export function chatRoute(model: LanguageModel, ledger: Ledger, paymentsUrl: string, tell: (chatId: string, calls: UnansweredCallRecord[]) => void) {
  const sendPayment = tool({
    description: "Pay a payee",
    inputSchema: z.object({ payee: z.string(), amount: z.number().int() }),
    execute: async ({ payee, amount }, options) => {
      // The call's key: forward it, so the payments API collapses a repeat too.
      const key = dispatchOnceOf(options)!.idempotencyKey;
      const res = await fetch(`${paymentsUrl}/v1/payments`, {
        method: "POST",
        headers: { authorization: "Bearer acct_demo", "content-type": "application/json", "idempotency-key": `"${key}"` },
        body: JSON.stringify({ payee, amount, currency: "EUR", reference: "agent" }),
      });
      // Never a result for a refusal: say what it means for the payment (core's ToolError).
      if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
      if (res.status >= 400 && res.status < 500 && res.status !== 409 && res.status !== 429) throw new ToolError(`payment refused (${res.status})`, { disposition: "definite" });
      if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" }); // 409 still in progress, 5xx: re-run with the key
      return (await res.json()) as { id: string; amount: number };
    },
  });
  const once = createOnceTools({ tools: { send_payment: sendPayment }, effects: { send_payment: "keyed_write" }, ledger });

  // One request of the chat: the first send, a regenerate, a resubmit after a cut stream or an
  // approval all carry the chat's messages; the turn index is the number of user messages.
  return async (chatId: string, messages: UIMessage[]) => {
    const turn = once.forTurn({ conversationId: chatId, messages, dispatchAt: "tool-call" });
    return streamText({
      model,
      messages: await convertToModelMessages(messages),
      tools: turn.tools,
      onChunk: turn.onChunk, // dispatchAt "tool-call": run each call as soon as its tool-call part arrives
      stopWhen: stepCountIs(5),
      // A request cut after a payment is not kept; the regenerate's model may then not pay again
      // (it asks a question, or the user edited the ask). The ledger still knows: tell the user.
      onFinish: async () => {
        const { calls } = await turn.unansweredCalls();
        if (calls.length > 0) tell(chatId, calls);
      },
    });
  };
}
