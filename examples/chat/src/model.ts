import { lastToolResults, lastUserPromptIndex, lastUserText, say, toolUse, turn, type AssistantTurn } from "@dispatch-once/mock-provider";
import type { MessagesRequest } from "@dispatch-once/mock-provider";

const PAY = /^pay\s+(\S+)\s+(\d+)(?:\.(\d{2}))?\s+([A-Za-z]{3})(?:\s+for\s+(\S+))?\s*$/i;

/**
 * The scripted "model" behind the mock provider: "pay acme 125.00 EUR for INV-1042" makes one
 * send_payment call (its memo re-worded on every retried response, as a real model re-words), then
 * closes with the payment id. Anything else is answered with a hint. A function of the request
 * alone, as the mock provider requires.
 */
export function chatModel(request: MessagesRequest): AssistantTurn {
  const text = lastUserText(request);
  const match = PAY.exec(text);
  if (match === null) {
    return { content: [say(`I can send payments. Try: "pay acme 125.00 EUR for INV-1042".`)], stopReason: "end_turn" };
  }
  const [, payee, units, cents, currency, reference] = match as unknown as [string, string, string, string | undefined, string, string | undefined];
  const amount = Number(units) * 100 + Number(cents ?? "0");
  const answered = request.messages.slice(lastUserPromptIndex(request) + 1).some((m) => m.role === "assistant");
  if (!answered) {
    const args = { payee, amount, currency: currency.toUpperCase(), reference: reference ?? "chat", memo: `Payment to ${payee}` };
    return turn(say(`Sending ${(amount / 100).toFixed(2)} ${args.currency} to ${payee}. `), toolUse("send_payment", args, { reword: ["memo"] }));
  }
  const [result] = lastToolResults(request);
  if (result === undefined || result.isError) {
    return { content: [say(`The payment did not go through: ${result?.content ?? "no result"}.`)], stopReason: "end_turn" };
  }
  const paid = JSON.parse(result.content) as { paymentId?: string };
  return { content: [say(`Done: payment ${paid.paymentId ?? "?"} was sent.`)], stopReason: "end_turn" };
}
