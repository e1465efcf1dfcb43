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
 * the model answers with text, so a tool loop terminates.
 */
export function scriptFromPlans(plans: Record<string, ScriptedResponse>, options: { after?: string } = {}): Script {
  return (request) => {
    const last = Array.isArray(request.input) ? request.input[request.input.length - 1] : undefined;
    if (last?.type === "function_call_output") return say(options.after ?? "Done.");
    const text = lastUserText(request);
    const plan = text !== undefined ? plans[text] : undefined;
    if (plan === undefined) throw new MockOpenAIError("no_plan", `no plan for the user message ${JSON.stringify(text)}`);
    return plan;
  };
}
