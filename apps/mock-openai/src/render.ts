import { spellsNumber } from "@dispatch-once/mock-http";
import { MockOpenAIError } from "./errors.js";
import { Rng, mintId } from "./random.js";
import type { FaultPosition, RenderedCall, ScriptedFunctionCall, ScriptedResponse } from "./types.js";

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
    push("response.output_item.done", { output_index: outputIndex, item: item("completed", json) }, { call: ordinal });
    items.push(item("completed", json));
  }
  const response = base("completed", items);
  push("response.completed", { response });
  events.forEach((e, i) => {
    e.data = { ...e.data, sequence_number: i };
  });
  return { responseId, calls, events, response };
}

/** The index of the event a fault replaces. A position the response never reaches is an error. */
export function resolvePosition(position: FaultPosition, events: readonly PlannedEvent[]): number {
  const unreachable = (why: string) => new MockOpenAIError("fault_position_unreachable", `fault position ${JSON.stringify(position)}: ${why}`);
  if ("event" in position) {
    if (position.event >= events.length) throw unreachable(`the response has only ${events.length} events`);
    return position.event;
  }
  if ("beforeCompleted" in position) return events.findIndex((e) => e.type === "response.completed");
  if ("afterCallDone" in position) {
    const done = events.findIndex((e) => e.type === "response.output_item.done" && e.call === position.afterCallDone);
    if (done === -1) throw unreachable(`the response has no function call number ${position.afterCallDone}`);
    return done + 1;
  }
  const added = events.findIndex((e) => e.type === "response.output_item.added" && e.call === position.call);
  if (added === -1) throw unreachable(`the response has no function call number ${position.call}`);
  let last = added;
  for (let i = added + 1; i < events.length; i++) {
    const e = events[i]!;
    if (e.call !== position.call || e.type !== "response.function_call_arguments.delta") continue;
    if ((e.fragment ?? 0) > position.afterFragment) break;
    last = i;
  }
  // Past the last fragment the fault replaces arguments.done: the arguments never complete.
  return last + 1;
}
