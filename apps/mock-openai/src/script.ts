import { MockOpenAIError } from "./errors.js";
import type { ResponsesRequest, Script, ScriptedFunctionCall, ScriptedReasoning, ScriptedResponse, ScriptedText } from "./types.js";

export const text = (value: string): ScriptedText => ({ type: "text", text: value });
export const reasoning = (summary: string): ScriptedReasoning => ({ type: "reasoning", summary });
export const say = (value: string): ScriptedResponse => ({ output: [text(value)] });
export const call = (name: string, args: Record<string, unknown>, options: { reword?: string[]; spell?: Record<string, string> } = {}): ScriptedFunctionCall => ({
  type: "function_call",
  name,
  arguments: args,
  ...(options.reword !== undefined ? { reword: options.reword } : {}),
  ...(options.spell !== undefined ? { spell: options.spell } : {}),
});
export const respond = (...output: ScriptedResponse["output"]): ScriptedResponse => ({ output });

/** The text of the last user message in the input (a string input is itself the user message). */
export function lastUserText(request: ResponsesRequest): string | undefined {
  if (typeof request.input === "string") return request.input;
  for (let i = request.input.length - 1; i >= 0; i--) {
    const item = request.input[i]!;
    if (item.role !== "user") continue;
    if (typeof item.content === "string") return item.content;
    if (Array.isArray(item.content)) return item.content.map((p: { text?: string }) => p.text ?? "").join("");
  }
  return undefined;
}

/**
 * Plans by the last user message's text. Once the input ends with `function_call_output` items
 * the model answers with `after` (default the text "Done."), so a tool loop terminates. `after`
 * is a text, or a whole response: `respond(reasoning("…"), text("Paid."))` is a reasoning model's
 * closing answer, which opens with a reasoning item as gpt-5 and the o-series do on every response.
 */
export function scriptFromPlans(plans: Record<string, ScriptedResponse>, options: { after?: string | ScriptedResponse } = {}): Script {
  const after = options.after === undefined || typeof options.after === "string" ? say(options.after ?? "Done.") : options.after;
  return (request) => {
    const last = Array.isArray(request.input) ? request.input[request.input.length - 1] : undefined;
    if (last?.type === "function_call_output") return after;
    const text = lastUserText(request);
    const plan = text !== undefined ? plans[text] : undefined;
    if (plan === undefined) throw new MockOpenAIError("no_plan", `no plan for the user message ${JSON.stringify(text)}`);
    return plan;
  };
}

/**
 * The API's `tool_choice`: `"required"` (or `allowed_tools` in mode `required`) makes the response
 * a function call, `{type:"function", name}` a call of that function, whatever the model would have
 * said. A scripted response that already calls an allowed function is answered as scripted; one
 * that does not (the closing text after the outputs) becomes the forced call: the input's last call
 * of an allowed function, made again with the same arguments, as a model made to call once more
 * after "Paid." calls the payment again. `auto`, `none` and no `tool_choice` leave it as scripted.
 * Throws `invalid_turn` when the choice forces a call and the input holds none to make again.
 */
export function forcedByToolChoice(request: ResponsesRequest, scripted: ScriptedResponse): ScriptedResponse {
  const choice = request["tool_choice"] as string | { type?: string; name?: string; mode?: string; tools?: { name?: string }[] } | undefined;
  let allowed: (name: string) => boolean;
  if (choice === "required") allowed = () => true;
  else if (typeof choice === "object" && choice !== null && choice.type === "function") allowed = (name) => name === choice.name;
  else if (typeof choice === "object" && choice !== null && choice.type === "allowed_tools" && choice.mode === "required") {
    const names = new Set((choice.tools ?? []).map((t) => t.name));
    allowed = (name) => names.has(name);
  } else return scripted;
  if (scripted.output.some((o) => o.type === "function_call" && allowed(o.name))) return scripted;
  const input = Array.isArray(request.input) ? request.input : [];
  for (let i = input.length - 1; i >= 0; i--) {
    const item = input[i] as { type?: string; name?: string; arguments?: unknown };
    if (item.type !== "function_call" || typeof item.name !== "string" || !allowed(item.name)) continue;
    const args = typeof item.arguments === "string" ? (JSON.parse(item.arguments) as Record<string, unknown>) : {};
    return respond(call(item.name, args));
  }
  throw new MockOpenAIError("invalid_turn", `tool_choice ${JSON.stringify(choice)} forces a call, the scripted response makes none and the input holds none to make again`);
}
