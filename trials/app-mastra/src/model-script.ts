// The mock provider's scripted model: "pay <payee> <amount> <reference> [<currency>] [and check balance | twice | refused] [retrying]".
// "retrying": a model that, as real ones do, calls a tool again once when its result was an error.
// "refused": the model's response is stopped by a classifier inside the call's arguments (stop_reason "refusal").
import { lastToolResults, lastUserPromptIndex, lastUserText, say, toolUse, turn, type Script } from "@dispatch-once/mock-provider";

/** References whose next run reads the balance before it pays ("divergent": a model that takes another path on a re-run). */
export const readFirst = new Set<string>();

export const script: Script = (request) => {
  const text = lastUserText(request);
  const results = lastToolResults(request);
  const divergent = /^pay (\S+) (\d+) (\S+) divergent$/.exec(text);
  if (divergent && readFirst.has(divergent[3] ?? "")) {
    const [, payee, amount, reference] = divergent;
    if (results.length === 0) return turn(say("Checking the balance first."), toolUse("check_balance", {}));
    if (results.every((r) => r.name === "check_balance")) return turn(say("Now paying."), toolUse("send_payment", { payee, amount: Number(amount), currency: "EUR", reference, memo: `Invoice ${reference}` }));
  }
  if (results.length > 0) {
    const rounds = request.messages.slice(lastUserPromptIndex(request) + 1).filter((m) => m.role === "assistant").length;
    const failed = results.filter((r) => r.isError || /^error/i.test(r.content));
    if (text.endsWith(" retrying") && failed.length > 0 && rounds === 1) {
      // Call the errored tools again with the arguments the previous assistant message gave them.
      const previous = request.messages.at(-2)?.content;
      const blocks = Array.isArray(previous) ? (previous as Array<{ type: string; id?: string; name?: string; input?: Record<string, unknown> }>) : [];
      const again = failed.flatMap((r) => blocks.filter((b) => b.type === "tool_use" && b.id === r.toolUseId).map((b) => toolUse(b.name ?? "", b.input ?? {})));
      return turn(say("That failed; trying again."), ...again);
    }
    return { content: [say(`Done. ${results.map((r) => `${r.name}: ${r.content}`).join("; ")}`)], stopReason: "end_turn" };
  }
  const m = /^pay (\S+) (\d+) (\S+)(?: ([A-Z]{3}))?( and check balance| twice| refused| divergent)?( retrying)?$/.exec(text);
  if (m === null) return turn(say(`I can only pay. You said: ${text}`));
  const [, payee, amount, reference, currency, more] = m;
  const pay = toolUse(
    "send_payment",
    { payee, amount: Number(amount), currency: currency ?? "EUR", reference, memo: `Invoice ${reference}` },
    { reword: ["memo"] },
  );
  if (more === " twice") return turn(say("Two payments."), pay, { ...pay }); // two identical calls in one response
  if (more === " refused") return { content: [say(`Paying ${reference}, refused.`), pay], stopReason: "refusal", stopDetails: { category: "cyber", explanation: "scripted refusal" } } as never;
  if (more === " divergent") return turn(say("Paying."), pay);
  return more ? turn(say("Paying, then checking the balance."), pay, toolUse("check_balance", {})) : turn(say("Paying."), pay);
};
