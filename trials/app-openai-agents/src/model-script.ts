// The scripted model behind apps/mock-openai: a function of the request alone, as the mock requires.
//   "pay <payee> <amount> <reference> [<currency>]"     one send_payment call (memo re-worded on every response after the first)
//   "pay twice <payee> <amount> <reference>"            two identical calls in one response (the user asked twice)
//   "pay apart <payee> <amount> <reference>"            the user asked twice: one call, then after its output another
//   "... retry-errors"                                  a model that, told a tool failed, calls it again (as models do)
// After the tool outputs the model answers with text, except a retry-errors model told of an error.
// A reference in `readFirst` (set by a situation between runs) makes the model read the balance first and pay
// in its second response: the same payment at another place in the run.
import { call, lastUserText, respond, say, text, type ResponsesRequest, type ScriptedResponse } from "@dispatch-once/mock-openai";

export const readFirst = new Set<string>();
/** References whose "pay apart" model makes both calls in its first response (a re-run that took another path). */
export const together = new Set<string>();

export function script(request: ResponsesRequest): ScriptedResponse {
  const said = lastUserText(request) ?? "";
  const m = /^pay (twice |apart )?(\S+) (\d+) (\S+)(?: ([A-Z]{3}))?/.exec(said);
  if (m === null) return say("I can only send payments.");
  const [, how, payee, amount, reference, currency] = m;
  const twice = how === "twice " || (how === "apart " && together.has(reference!));
  const apart = how === "apart " && !together.has(reference!);
  const args = { payee, amount: Number(amount), currency: currency ?? "EUR", reference, memo: `Invoice ${reference}` };
  const payment = () => call("send_payment", args, { reword: ["memo"] });
  const input = Array.isArray(request.input) ? request.input : [];
  const last = input[input.length - 1];
  const lastCall = [...input].reverse().find((i) => i.type === "function_call") as { name?: string } | undefined;
  if (last?.type === "function_call_output" && lastCall?.name === "check_balance") return respond(payment());
  // This message's payment calls so far (after its user message).
  const sinceUser = input.slice(input.map((i) => (i as { role?: string }).role).lastIndexOf("user") + 1);
  const paymentsAsked = sinceUser.filter((i) => i.type === "function_call" && (i as { name?: string }).name === "send_payment").length;
  if (apart && last?.type === "function_call_output" && lastCall?.name === "send_payment" && paymentsAsked < 2 && !/error/i.test(String(last.output ?? ""))) {
    return respond(text("And the second one you asked for."), payment());
  }
  if (last?.type === "function_call_output") {
    const output = String(last.output ?? "");
    if (said.includes("retry-errors") && /error|timed out/i.test(output)) return respond(text("That failed; trying again."), payment());
    return say(`Done: ${output.slice(0, 120)}`);
  }
  if (readFirst.has(reference!)) return respond(call("check_balance", {}));
  return twice ? respond(payment(), payment()) : respond(payment());
}
