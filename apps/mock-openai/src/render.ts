import { spellsNumber } from "@dispatch-once/mock-http";
import { MockOpenAIError } from "./errors.js";
import { Rng, mintId } from "./random.js";
import type { ChatDialect, FaultPosition, RenderedCall, ScriptedFunctionCall, ScriptedResponse } from "./types.js";

/*
 * Turns a scripted response into what one HTTP response carries. What a real model varies across
 * two responses to the same input is varied here, seeded by (seed, body hash, attempt, salt): ids
 * and call_ids, argument key order, JSON whitespace, fragment boundaries, re-wordable fields.
 */

export interface PlannedEvent {
  type: string;
  data: Record<string, unknown>;
  /** Ordinal among function calls of the item this event belongs to. */
  call?: number;
  /** For argument deltas: 1-based count of this call's fragments once this event is sent. */
  fragment?: number;
  /** The calls (ordinals) whose arguments a client knows to be final once this event arrived. */
  finalizes?: number[];
  /** The event that finishes the response (`response.completed`; a Chat Completions choice's `finish_reason`). */
  finish?: true;
}

export interface RenderedResponse {
  responseId: string;
  calls: RenderedCall[];
  events: PlannedEvent[];
  /** The non-streaming body: the response as `response.completed` carries it. */
  response: Record<string, unknown>;
}

const REWORDINGS: Array<(s: string) => string> = [
  (s) => `Re: ${s}`,
  (s) => `${s} (as requested)`,
  (s) => `Regarding ${s.charAt(0).toLowerCase()}${s.slice(1)}`,
];

function reword(call: ScriptedFunctionCall, rng: Rng, attempt: number): Record<string, unknown> {
  const args = JSON.parse(JSON.stringify(call.arguments)) as Record<string, unknown>;
  for (const field of call.reword ?? []) {
    const original = args[field];
    if (typeof original !== "string") {
      throw new MockOpenAIError("invalid_turn", `function_call ${call.name}: reword field ${JSON.stringify(field)} is not a string argument`);
    }
    const draw = rng.nextUint32();
    // The first response says it as scripted; a retried model may say it differently.
    if (attempt > 1) args[field] = REWORDINGS[draw % REWORDINGS.length]!(original);
  }
  return args;
}

/** `spell`: the raw text of top-level number members (a call's `spell`), which must parse to the same value. */
function serialise(value: unknown, rng: Rng, spaced: boolean, spell?: Record<string, string>): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map((v) => serialise(v, rng, spaced)).join(spaced ? ", " : ",")}]`;
  const record = value as Record<string, unknown>;
  const keys = rng.shuffle(Object.keys(record).filter((k) => record[k] !== undefined));
  const member = (k: string) => (spell !== undefined && Object.hasOwn(spell, k) ? spelt(k, spell[k]!, record[k]) : serialise(record[k], rng, spaced));
  return `{${keys.map((k) => `${JSON.stringify(k)}:${spaced ? " " : ""}${member(k)}`).join(spaced ? ", " : ",")}}`;
}

/** A number member's given spelling, refused unless it is JSON text of the member's own value. */
function spelt(name: string, text: string, value: unknown): string {
  if (!spellsNumber(text, value)) throw new MockOpenAIError("invalid_turn", `spell ${JSON.stringify(name)}: ${JSON.stringify(text)} is not a spelling of ${JSON.stringify(value)}`);
  return text;
}

function split(text: string, rng: Rng): string[] {
  const out: string[] = [];
  let at = 0;
  while (at < text.length) {
    const size = rng.int(1, Math.max(1, Math.min(12, text.length - at)));
    out.push(text.slice(at, at + size));
    at += size;
  }
  return out.length > 0 ? out : [""];
}

export interface RenderOptions {
  seed: string;
  bodyHash: string;
  attempt: number;
  salt: string;
  model: string;
  /**
   * False for a request with `store: false` that does not `include` `reasoning.encrypted_content`:
   * its reasoning items come with `encrypted_content: null`, as the API sends them (the content is
   * drawn all the same, so the rest of the response renders as it would with it).
   */
  encryptedContent?: boolean;
}

export function renderResponse(scripted: ScriptedResponse, options: RenderOptions): RenderedResponse {
  const rng = new Rng(options.seed, options.bodyHash, options.attempt, options.salt);
  const responseId = mintId("resp_", rng);
  const createdAt = Math.floor(Date.now() / 1000);
  const events: PlannedEvent[] = [];
  const calls: RenderedCall[] = [];
  const items: Record<string, unknown>[] = [];
  const base = (status: string, output: unknown[]) => ({
    id: responseId,
    object: "response",
    created_at: createdAt,
    status,
    model: options.model,
    output,
    error: null,
    incomplete_details: null,
    parallel_tool_calls: true,
    tool_choice: "auto",
    tools: [],
    usage: status === "completed" ? { input_tokens: 20, output_tokens: 10, total_tokens: 30, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } } : null,
  });
  const push = (type: string, data: Record<string, unknown>, extra: Partial<PlannedEvent> = {}) =>
    events.push({ type, data: { type, ...data }, ...extra });
  push("response.created", { response: base("in_progress", []) });
  push("response.in_progress", { response: base("in_progress", []) });
  for (const [outputIndex, out] of scripted.output.entries()) {
    if (out.type === "text") {
      const id = mintId("msg_", rng);
      const done = { id, type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: out.text, annotations: [] }] };
      push("response.output_item.added", { output_index: outputIndex, item: { id, type: "message", status: "in_progress", role: "assistant", content: [] } });
      push("response.content_part.added", { item_id: id, output_index: outputIndex, content_index: 0, part: { type: "output_text", text: "", annotations: [] } });
      for (const delta of split(out.text, rng)) push("response.output_text.delta", { item_id: id, output_index: outputIndex, content_index: 0, delta, logprobs: [] });
      push("response.output_text.done", { item_id: id, output_index: outputIndex, content_index: 0, text: out.text, logprobs: [] });
      push("response.content_part.done", { item_id: id, output_index: outputIndex, content_index: 0, part: done.content[0] });
      push("response.output_item.done", { output_index: outputIndex, item: done });
      items.push(done);
      continue;
    }
    if (out.type === "reasoning") {
      const id = mintId("rs_", rng);
      // Opaque and fresh per response, as a real model's: a client must send back the one it kept.
      const encrypted = mintId("enc_", rng);
      const summary = [{ type: "summary_text", text: out.summary }];
      push("response.output_item.added", { output_index: outputIndex, item: { id, type: "reasoning", summary: [], encrypted_content: null } });
      push("response.reasoning_summary_part.added", { item_id: id, output_index: outputIndex, summary_index: 0, part: { type: "summary_text", text: "" } });
      for (const delta of split(out.summary, rng)) push("response.reasoning_summary_text.delta", { item_id: id, output_index: outputIndex, summary_index: 0, delta });
      push("response.reasoning_summary_text.done", { item_id: id, output_index: outputIndex, summary_index: 0, text: out.summary });
      push("response.reasoning_summary_part.done", { item_id: id, output_index: outputIndex, summary_index: 0, part: summary[0] });
      const done = { id, type: "reasoning", summary, encrypted_content: options.encryptedContent === false ? null : encrypted };
      push("response.output_item.done", { output_index: outputIndex, item: done });
      items.push(done);
      continue;
    }
    const ordinal = calls.length;
    const args = reword(out, rng, options.attempt);
    const json = serialise(args, rng, rng.next() < 0.5, out.spell);
    const fragments = split(json, rng);
    const call: RenderedCall = { id: mintId("fc_", rng), callId: mintId("call_", rng), name: out.name, arguments: args, json, fragments };
    calls.push(call);
    const item = (status: string, argumentText: string) => ({ id: call.id, type: "function_call", status, arguments: argumentText, call_id: call.callId, name: call.name });
    push("response.output_item.added", { output_index: outputIndex, item: item("in_progress", "") }, { call: ordinal });
    fragments.forEach((delta, i) =>
      push("response.function_call_arguments.delta", { item_id: call.id, output_index: outputIndex, delta }, { call: ordinal, fragment: i + 1 }),
    );
    push("response.function_call_arguments.done", { item_id: call.id, output_index: outputIndex, name: call.name, arguments: json }, { call: ordinal });
    push("response.output_item.done", { output_index: outputIndex, item: item("completed", json) }, { call: ordinal, finalizes: [ordinal] });
    items.push(item("completed", json));
  }
  const response = base("completed", items);
  push("response.completed", { response }, { finish: true });
  events.forEach((e, i) => {
    e.data = { ...e.data, sequence_number: i };
  });
  return { responseId, calls, events, response };
}

/**
 * The index of the event a fault replaces, read from the events' marks (so it places a fault the
 * same way in a Responses stream and in a Chat Completions one). A position the response never
 * reaches is an error.
 */
export function resolvePosition(position: FaultPosition, events: readonly PlannedEvent[]): number {
  const unreachable = (why: string) => new MockOpenAIError("fault_position_unreachable", `fault position ${JSON.stringify(position)}: ${why}`);
  if ("event" in position) {
    if (position.event >= events.length) throw unreachable(`the response has only ${events.length} events`);
    return position.event;
  }
  if ("beforeCompleted" in position) return events.findIndex((e) => e.finish === true);
  if ("afterCallDone" in position) {
    const done = events.findIndex((e) => e.finalizes?.includes(position.afterCallDone) === true);
    if (done === -1) throw unreachable(`the response has no function call number ${position.afterCallDone}`);
    return done + 1;
  }
  // A call's first event opens it; its argument fragments carry `fragment`.
  const added = events.findIndex((e) => e.call === position.call);
  if (added === -1) throw unreachable(`the response has no function call number ${position.call}`);
  let last = added;
  for (let i = added + 1; i < events.length; i++) {
    const e = events[i]!;
    if (e.call !== position.call || e.fragment === undefined) continue;
    if (e.fragment > position.afterFragment) break;
    last = i;
  }
  // Past the last fragment the fault replaces what ends the arguments: they never complete.
  return last + 1;
}

/** The type of the planned event that stands for the `data: [DONE]` line ending a Chat Completions stream. */
export const CHAT_DONE = "[DONE]";

/** Every Chat Completions dialect, the default first. */
export const CHAT_DIALECTS: readonly ChatDialect[] = ["openai", "azure", "gemini", "vllm", "deepseek", "sglang", "mistral"];

/** What DeepSeek's thinking mode reasons when the script gave the response no reasoning: it always reasons. */
const DEEPSEEK_THOUGHT = "Working out what is asked.";

/** Azure's content filter verdict on a piece of text (every category safe, nothing filtered). */
const AZURE_SAFE = {
  hate: { filtered: false, severity: "safe" },
  self_harm: { filtered: false, severity: "safe" },
  sexual: { filtered: false, severity: "safe" },
  violence: { filtered: false, severity: "safe" },
};

/**
 * The same scripted response as a Chat Completions stream (`chat.completion.chunk`s of one choice),
 * varied as `renderResponse` varies it (ids, key order, whitespace, fragment boundaries, wording):
 * a first chunk with the role, the text as `content` deltas, each call as `tool_calls` fragments of
 * its index (the first names it: `id`, `type`, `function.name`; the rest carry argument pieces),
 * the choice's `finish_reason` (`tool_calls` or `stop`), a usage chunk when the request asked for
 * one (`stream_options.include_usage`), then `[DONE]`. A call is final to a client at the first
 * fragment of the next index or at `finish_reason`: those events carry its `finalizes` mark. The
 * API has no reasoning items: a reasoning output streams as `reasoning_content` deltas, the field
 * DeepSeek and vLLM use, which OpenAI's own SDK does not read.
 *
 * `dialect` renders it as another kind of server streams it (`ChatDialect`); every shape but
 * `vllm`'s whole calls is drawn here, with the same marks, so a fault position lands at the same
 * logical point in each (`groupChatCalls` does `vllm`'s after the position is resolved).
 */
export function renderChatCompletion(scripted: ScriptedResponse, options: RenderOptions & { includeUsage?: boolean; dialect?: ChatDialect }): RenderedResponse & { signatures: string[] } {
  const dialect = options.dialect ?? "openai";
  const rng = new Rng(options.seed, options.bodyHash, options.attempt, options.salt);
  const id = mintId("chatcmpl-", rng);
  const created = Math.floor(Date.now() / 1000);
  const events: PlannedEvent[] = [];
  const calls: RenderedCall[] = [];
  const signatures: string[] = [];
  const hasCalls = scripted.output.some((o) => o.type === "function_call");
  // Gemini's compatibility layer says stop beside calls; the others tool_calls.
  const finishReason = hasCalls && dialect !== "gemini" ? "tool_calls" : "stop";
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, filtered = false) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model: options.model,
    system_fingerprint: "fp_mock",
    choices: [
      {
        index: 0,
        delta: dialect === "gemini" ? { role: "assistant", ...delta } : delta,
        logprobs: null,
        // SGLang and older Ollama send "" on every chunk before the finish.
        finish_reason: finish ?? (dialect === "sglang" ? "" : null),
        ...(dialect === "azure" && filtered ? { content_filter_results: AZURE_SAFE } : {}),
      },
    ],
  });
  // Azure's asynchronous filter: a choice-0 annotation without delta, and with an empty id.
  const annotation = (end: number) => ({
    id: "",
    object: "",
    created: 0,
    model: "",
    choices: [{ index: 0, finish_reason: null, content_filter_results: AZURE_SAFE, content_filter_offsets: { check_offset: 0, start_offset: 0, end_offset: end } }],
  });
  let streamed = 0;
  const push = (type: string, data: Record<string, unknown>, extra: Partial<PlannedEvent> = {}) => {
    events.push({ type, data, ...extra });
    // Azure annotates what it checked once a call is final, and after the finish.
    if (dialect === "azure" && (extra.finalizes !== undefined || extra.finish === true)) events.push({ type: "chunk.annotation", data: annotation(streamed) });
  };
  if (dialect === "azure") push("chunk.prompt_filter", { id: "", object: "", created: 0, model: "", choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: AZURE_SAFE }] });
  if (dialect === "deepseek") push("chunk.role", chunk({ role: "assistant", content: null, reasoning_content: "" }));
  else if (dialect === "mistral") push("chunk.role", chunk({ role: "assistant", content: "" }));
  else if (dialect === "gemini") push("chunk.role", chunk({ content: "" }));
  else push("chunk.role", chunk({ role: "assistant", content: "", refusal: null }));
  let content = "";
  let reasoningText = "";
  const toolCalls: Record<string, unknown>[] = [];
  const thinking = (summary: string) => {
    reasoningText += summary;
    for (const delta of split(summary, rng)) {
      streamed += delta.length;
      if (dialect === "mistral") push("chunk.thinking", chunk({ content: [{ type: "thinking", thinking: [{ type: "text", text: delta }] }] }));
      else if (dialect === "deepseek") push("chunk.reasoning_content", chunk({ content: null, reasoning_content: delta }));
      else push("chunk.reasoning_content", chunk({ reasoning_content: delta }));
    }
  };
  // DeepSeek's thinking mode reasons before every answer.
  if (dialect === "deepseek" && !scripted.output.some((o) => o.type === "reasoning")) thinking(DEEPSEEK_THOUGHT);
  for (const out of scripted.output) {
    if (out.type === "text") {
      for (const delta of split(out.text, rng)) {
        streamed += delta.length;
        push("chunk.content", chunk(dialect === "mistral" ? { content: [{ type: "text", text: delta }] } : { content: delta }, null, true));
      }
      content += out.text;
      continue;
    }
    if (out.type === "reasoning") {
      // Gemini streams no thoughts unless asked to (include_thoughts).
      if (dialect !== "gemini") thinking(out.summary);
      continue;
    }
    const ordinal = calls.length;
    const args = reword(out, rng, options.attempt);
    const json = serialise(args, rng, rng.next() < 0.5, out.spell);
    const fragments = split(json, rng);
    const callId =
      dialect === "gemini" ? `function-call-${rng.nextUint32()}${rng.nextUint32()}` : dialect === "vllm" ? mintId("chatcmpl-tool-", rng) : dialect === "mistral" ? mintId("", rng).slice(0, 9) : mintId("call_", rng);
    calls.push({ id: callId, callId, name: out.name, arguments: args, json, fragments });
    // Gemini signs the first call of a response (of parallel calls, only the first).
    const signature = dialect === "gemini" && ordinal === 0 ? mintId("sig_", rng) : undefined;
    if (signature !== undefined) signatures.push(signature);
    const extra = signature === undefined ? {} : { extra_content: { google: { thought_signature: signature } } };
    const at = dialect === "gemini" ? {} : { index: ordinal };
    toolCalls.push({ id: callId, type: "function", function: { name: out.name, arguments: json }, ...extra });
    // Its first fragment makes the call before it final (OpenAI streams indexes in order).
    push("chunk.tool_call", chunk({ tool_calls: [{ ...at, id: callId, type: "function", function: { name: out.name, arguments: "" }, ...extra }] }), {
      call: ordinal,
      ...(ordinal > 0 ? { finalizes: [ordinal - 1] } : {}),
    });
    fragments.forEach((piece, i) => {
      streamed += piece.length;
      push("chunk.tool_call.arguments", chunk({ tool_calls: [{ ...at, function: { arguments: piece } }] }), { call: ordinal, fragment: i + 1 });
    });
  }
  push("chunk.finish", chunk({}, finishReason), { finish: true, ...(calls.length > 0 ? { finalizes: [calls.length - 1] } : {}) });
  const usage = { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30 };
  if (options.includeUsage === true) push("chunk.usage", { id, object: "chat.completion.chunk", created, model: options.model, system_fingerprint: "fp_mock", choices: [], usage });
  push(CHAT_DONE, {});
  const message = {
    role: "assistant",
    content: content === "" && calls.length > 0 ? null : content,
    ...(dialect === "deepseek" ? { reasoning_content: reasoningText } : {}),
    refusal: null,
    ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
  };
  const response = { id, object: "chat.completion", created, model: options.model, system_fingerprint: "fp_mock", choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }], usage };
  return { responseId: id, calls, events, response, signatures };
}

/**
 * vLLM's and Ollama's shape: the `tool_calls` fragments of consecutive chunks in one chunk (each
 * call whole, several calls side by side), except that the event at `keep` (a fault's position,
 * resolved on the fragment-by-fragment stream) begins a chunk of its own, so a cut there lands where
 * it lands in every other dialect: the calls before it delivered, none of what follows. Returns the
 * grouped events and where `keep` is among them.
 */
export function groupChatCalls(events: readonly PlannedEvent[], keep: number | undefined): { events: PlannedEvent[]; keep: number | undefined } {
  const out: PlannedEvent[] = [];
  let mapped: number | undefined;
  const isCall = (e: PlannedEvent) => e.type === "chunk.tool_call" || e.type === "chunk.tool_call.arguments" || e.type === "chunk.tool_calls";
  events.forEach((event, i) => {
    if (i === keep) mapped = out.length;
    const last = out.at(-1);
    if (last === undefined || !isCall(event) || !isCall(last) || i === keep || i === 0 || !isCall(events[i - 1]!)) {
      out.push(isCall(event) ? { ...event, type: "chunk.tool_calls", data: structuredClone(event.data) } : event);
      return;
    }
    const entries = ((last.data.choices as { delta: { tool_calls: Record<string, unknown>[] } }[])[0]!.delta.tool_calls);
    for (const entry of (event.data.choices as { delta: { tool_calls: Record<string, unknown>[] } }[])[0]!.delta.tool_calls) {
      const held = entries.at(-1) as { index: number; function: { arguments: string } } | undefined;
      // A piece of the call held last is appended to it: that call whole, as these servers send it.
      if (held !== undefined && entry.id === undefined && held.index === entry.index) held.function.arguments += (entry.function as { arguments: string }).arguments;
      else entries.push(structuredClone(entry));
    }
    const finalizes = [...(last.finalizes ?? []), ...(event.finalizes ?? [])];
    out[out.length - 1] = { ...last, ...(finalizes.length > 0 ? { finalizes } : {}) };
  });
  return { events: out, keep: mapped };
}

/**
 * The `repeat_call` fault's body: the events of function call number `call`, unchanged but for
 * their `output_index` (the next free one, past the response's last item), inserted before the
 * response's `response.completed`, and every event's `sequence_number` renumbered in order, as a
 * relay that renumbers what it re-sends delivers the call again.
 */
export function repeatCall(events: readonly PlannedEvent[], call: number): PlannedEvent[] {
  const own = events.filter((e) => e.call === call);
  if (!own.some((e) => e.type === "response.output_item.done")) {
    throw new MockOpenAIError("fault_not_applicable", `fault repeat_call: the response has no completed function call number ${call}`);
  }
  const index = Math.max(...events.map((e) => (typeof e.data.output_index === "number" ? e.data.output_index : -1))) + 1;
  // Unmarked as the call's (`call`, `fragment`, `finalizes`): a position names the call's first delivery.
  const again = own.map(({ type, data }): PlannedEvent => ({ type, data: { ...data, output_index: index } }));
  const end = events.findIndex((e) => e.finish === true);
  const at = end === -1 ? events.length : end;
  return [...events.slice(0, at), ...again, ...events.slice(at)].map((e, i) => ({ ...e, data: { ...e.data, sequence_number: i } }));
}
