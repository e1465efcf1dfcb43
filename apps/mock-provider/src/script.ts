import { MockProviderError } from "./errors.js";
import type { ContentBlockParam, MessageParam, MessagesRequest } from "./request-schema.js";
import type { AssistantTurn, Script, ScriptedContent, ScriptedText, ScriptedToolUse } from "./types.js";

/** A text block for a scripted turn. */
export function say(text: string): ScriptedText {
  return { type: "text", text };
}

/** A tool call for a scripted turn; `reword` marks free-text fields a retried model may re-word. */
export function toolUse(
  name: string,
  input: Record<string, unknown>,
  options: { reword?: string[] | Record<string, string[]>; spell?: Record<string, string> } = {},
): ScriptedToolUse {
  return { type: "tool_use", name, input, ...(options.reword ? { reword: options.reword } : {}), ...(options.spell ? { spell: options.spell } : {}) };
}

/** A scripted turn; it stops with `tool_use` when it calls a tool, `end_turn` otherwise. */
export function turn(...content: ScriptedContent[]): AssistantTurn {
  return { content, stopReason: content.some((c) => c.type === "tool_use") ? "tool_use" : "end_turn" };
}

function blocks(message: MessageParam): ContentBlockParam[] {
  return typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content;
}

function textOf(message: MessageParam): string {
  return blocks(message)
    .filter((b) => b.type === "text")
    .map((b) => (b as { text: string }).text)
    .join("\n");
}

function hasToolResults(message: MessageParam): boolean {
  return blocks(message).some((b) => b.type === "tool_result");
}

/**
 * The index of the last user message that is something the user said (text, no tool_result):
 * the message a turn of the tool-use loop answers.
 */
export function lastUserPromptIndex(request: MessagesRequest): number {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const m = request.messages[i]!;
    if (m.role === "user" && !hasToolResults(m) && textOf(m).trim() !== "") return i;
  }
  return -1;
}

/** The text of the last thing the user said, trimmed ("" when there is none). */
export function lastUserText(request: MessagesRequest): string {
  const i = lastUserPromptIndex(request);
  return i === -1 ? "" : textOf(request.messages[i]!).trim();
}

export interface ToolResultSeen {
  toolUseId: string;
  /** The name of the call it answers, found in the previous assistant message. */
  name: string | undefined;
  content: string;
  isError: boolean;
}

/** The tool results of the last message, if it is a user message carrying them. */
export function lastToolResults(request: MessagesRequest): ToolResultSeen[] {
  const last = request.messages[request.messages.length - 1];
  const prev = request.messages[request.messages.length - 2];
  if (!last || last.role !== "user") return [];
  const names = new Map<string, string>();
  if (prev && prev.role === "assistant") {
    for (const b of blocks(prev)) if (b.type === "tool_use") names.set((b as { id: string }).id, (b as { name: string }).name);
  }
  return blocks(last)
    .filter((b) => b.type === "tool_result")
    .map((b) => {
      const r = b as { tool_use_id: string; content?: string | Array<{ type: string; text?: string }>; is_error?: boolean };
      const content =
        typeof r.content === "string"
          ? r.content
          : (r.content ?? []).map((c) => (c.type === "text" ? (c.text ?? "") : `[${c.type}]`)).join("");
      return { toolUseId: r.tool_use_id, name: names.get(r.tool_use_id), content, isError: r.is_error === true };
    });
}

function summariseResults(results: ToolResultSeen[]): AssistantTurn {
  const parts = results.map((r) => {
    const content = r.content.length > 200 ? `${r.content.slice(0, 200)}…` : r.content;
    return `${r.name ?? r.toolUseId}${r.isError ? " failed" : ""}: ${content}`;
  });
  return { content: [say(`Done. ${parts.join("; ")}`)], stopReason: "end_turn" };
}

/**
 * The default script reads directives from the last user message, one per line:
 *   say <text>                       a text block
 *   call <tool_name> <json object>   a tool call with those arguments
 *   reword <field>[,<field>...]      the previous call's fields that may be re-worded on a retry
 * When the last message carries tool results it answers with a short summary and `end_turn`;
 * a message without directives gets a one-line acknowledgement.
 */
export const defaultScript: Script = (request) => {
  const results = lastToolResults(request);
  if (results.length > 0) return summariseResults(results);
  const text = lastUserText(request);
  const content: ScriptedContent[] = [];
  for (const rawLine of text.split(/\r?\n/)) {
    const line = rawLine.trim();
    const call = /^call\s+([a-zA-Z0-9_-]+)\s*(.*)$/.exec(line);
    if (call) {
      let input: unknown = {};
      if (call[2]) {
        try {
          input = JSON.parse(call[2]);
        } catch (e) {
          throw new MockProviderError("invalid_turn", `directive "${line}": arguments are not JSON`, { cause: e });
        }
      }
      if (input === null || typeof input !== "object" || Array.isArray(input)) {
        throw new MockProviderError("invalid_turn", `directive "${line}": arguments must be a JSON object`);
      }
      content.push(toolUse(call[1]!, input as Record<string, unknown>));
      continue;
    }
    const reword = /^reword\s+(.+)$/.exec(line);
    if (reword) {
      const previous = content[content.length - 1];
      if (!previous || previous.type !== "tool_use") {
        throw new MockProviderError("invalid_turn", `directive "${line}" must follow a call directive`);
      }
      previous.reword = reword[1]!.split(",").map((f) => f.trim()).filter(Boolean);
      continue;
    }
    const sayLine = /^say\s+(.+)$/.exec(line);
    if (sayLine) content.push(say(sayLine[1]!));
  }
  if (content.length === 0) {
    return { content: [say(text === "" ? "Hello." : `Understood: ${text}`)], stopReason: "end_turn" };
  }
  return turn(...content);
};

/** One step of a plan: a turn, or a function of the request when the step depends on tool results. */
export type PlannedStep = AssistantTurn | ((request: MessagesRequest) => AssistantTurn);

export interface PlansOptions {
  /** The closing turn once a plan's steps are used up; default: a "Done. …" summary of the tool results. */
  final?: (request: MessagesRequest) => AssistantTurn;
  /** For user messages without a plan; default: fail the request with `no_plan` (loudly). */
  fallback?: Script;
}

/**
 * A script from plans keyed by what the user said. The n-th assistant turn after that user message
 * plays step n of the plan; once the steps are used up the model closes with `end_turn`.
 *
 *   scriptFromPlans({
 *     "pay acme": turn(toolUse("send_payment", { to: "acme", amount_cents: 1200, memo: "Invoice 1042" }, { reword: ["memo"] })),
 *     "pay twice": turn(toolUse("send_payment", args), toolUse("send_payment", args)),
 *     "pay then void": [turn(toolUse("send_payment", args)), turn(toolUse("void_payment", { payment_id: "p_1" }))],
 *   })
 */
export function scriptFromPlans(plans: Record<string, PlannedStep | PlannedStep[]>, options: PlansOptions = {}): Script {
  return async (request) => {
    const promptIndex = lastUserPromptIndex(request);
    const text = lastUserText(request);
    const plan = Object.prototype.hasOwnProperty.call(plans, text) ? plans[text] : undefined;
    if (plan === undefined) {
      if (options.fallback) return options.fallback(request);
      throw new MockProviderError(
        "no_plan",
        `no plan for the user message ${JSON.stringify(text)}; plans: ${Object.keys(plans).map((k) => JSON.stringify(k)).join(", ")}`,
      );
    }
    const steps = Array.isArray(plan) ? plan : [plan];
    const step = request.messages.slice(promptIndex + 1).filter((m) => m.role === "assistant").length;
    const planned = steps[step];
    if (planned !== undefined) return typeof planned === "function" ? planned(request) : planned;
    if (options.final) return options.final(request);
    const results = lastToolResults(request);
    return results.length > 0 ? summariseResults(results) : { content: [say("Done.")], stopReason: "end_turn" };
  };
}

/**
 * The API's `tool_choice`: `{type:"any"}` makes the response a tool call, `{type:"tool", name}` a
 * call of that tool, whatever the model would have said. A scripted turn that already calls an
 * allowed tool is answered as scripted; one that does not (a closing "Done." after the tool
 * results) becomes the forced call: the conversation's last call of an allowed tool, made again
 * with the same input, as a model made to call once more after "Paid." calls the payment again.
 * `auto`, `none` and no `tool_choice` leave the turn as scripted. Throws `invalid_turn` when the
 * choice forces a call and the conversation holds none to make again (script the call instead).
 */
export function forcedByToolChoice(request: MessagesRequest, scripted: AssistantTurn): AssistantTurn {
  const choice = request.tool_choice;
  if (choice === undefined || (choice.type !== "any" && choice.type !== "tool")) return scripted;
  const allowed = (name: string) => choice.type === "any" || name === choice.name;
  if (scripted.content.some((c) => c.type === "tool_use" && allowed(c.name))) return scripted;
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const message = request.messages[i]!;
    if (message.role !== "assistant") continue;
    const calls = blocks(message).filter((b) => b.type === "tool_use" && allowed((b as { name: string }).name)) as { name: string; input: unknown }[];
    const last = calls[calls.length - 1];
    if (last !== undefined) return turn(toolUse(last.name, last.input as Record<string, unknown>));
  }
  throw new MockProviderError("invalid_turn", `tool_choice ${JSON.stringify(choice)} forces a call, the scripted turn makes none and the conversation holds none to make again`);
}
