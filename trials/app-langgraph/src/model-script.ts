// The mock provider's scripted model: "pay <payee> <amount> <reference> [<currency>] [and check balance | twice]".
import { lastToolResults, lastUserText, say, toolUse, turn, type Script } from "@dispatch-once/mock-provider";

export const script: Script = (request) => {
  const results = lastToolResults(request);
  if (results.length > 0) {
    return { content: [say(`Done. ${results.map((r) => `${r.name}: ${r.content}`).join("; ")}`)], stopReason: "end_turn" };
  }
  const text = lastUserText(request);
  const m = /^pay (\S+) (\d+) (\S+)(?: ([A-Z]{3}))?( and check balance| twice)?$/.exec(text);
  if (m === null) return turn(say(`I can only pay. You said: ${text}`));
  const [, payee, amount, reference, currency, more] = m;
  const pay = toolUse(
    "send_payment",
    { payee, amount: Number(amount), currency: currency ?? "EUR", reference, memo: `Invoice ${reference}` },
    { reword: ["memo"] },
  );
  if (more === " twice") return turn(say("Two payments."), pay, { ...pay }); // two identical calls in one response
  return more ? turn(say("Paying, then checking the balance."), pay, toolUse("check_balance", {})) : turn(say("Paying."), pay);
};
