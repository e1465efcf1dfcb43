import { spellsNumber } from "@dispatch-once/mock-http";
import { MockProviderError } from "./errors.js";
import { Rng, mintId } from "./random.js";
import { sealRedactedThinking, signThinking } from "./thinking.js";
import type { AssistantTurn, ScriptedToolUse } from "./types.js";

/*
 * Turns a scripted AssistantTurn into what one response carries. Everything a real model varies
 * across two responses to the same input is varied here, seeded by (seed, body hash, attempt):
 * ids, argument key order, JSON whitespace, fragment boundaries, and the wording of fields a call
 * marks as re-wordable. The values of the other arguments never vary.
 */

export type WhitespaceStyle = "compact" | "spaced" | "pretty";

export interface RenderedToolUse {
  id: string;
  name: string;
  input: Record<string, unknown>;
  /** The argument JSON as streamed: the concatenation of `fragments`. */
  json: string;
  fragments: string[];
  contentIndex: number;
  ordinal: number;
}

export interface PlannedEvent {
  type: string;
  data: Record<string, unknown>;
  /** Content index of the block this event belongs to. */
  block?: number;
  /** Ordinal among tool_use blocks of the block this event belongs to. */
  toolUse?: number;
  /** For input_json_delta: 1-based count of this block's fragments once this event is sent. */
  fragment?: number;
}

export interface RenderedResponse {
  messageId: string;
  requestId: string;
  stopReason: "tool_use" | "end_turn" | "max_tokens" | "refusal";
  toolUses: RenderedToolUse[];
  events: PlannedEvent[];
  /** The non-streaming response body. */
  message: Record<string, unknown>;
}

export type PingMode = "standard" | "none" | "every_event";

export interface RenderOptions {
  seed: string;
  bodyHash: string;
  attempt: number;
  model: string;
  inputTokens: number;
  pings: PingMode;
  /** Mixed into ids only, so ids stay fresh after the provider forgets its attempt counters. */
  idSalt?: string;
  /**
   * The request asked for thinking: the response opens with a signed thinking block, whose text
   * differs from one response to the next as a model's reasoning does; the scripted content
   * follows it, one content index later.
   */
  thinking?: boolean;
  /**
   * With `thinking`: a `redacted_thinking` block follows the thinking block (its `data` whole in
   * `content_block_start`, no deltas, as the API streams it), its own to each response; the
   * scripted content follows one content index later again.
   */
  redactedThinking?: boolean;
}

const BUILT_IN_REWORDINGS: Array<(s: string) => string> = [
  (s) => `Re: ${s}`,
  (s) => `${s} (as requested)`,
  (s) => `Regarding ${s.charAt(0).toLowerCase()}${s.slice(1)}`,
  (s) => `${s} - per the user's request`,
];

function cloneJson<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

function rewordInput(call: ScriptedToolUse, rng: Rng, attempt: number): Record<string, unknown> {
  const input = cloneJson(call.input);
  if (!call.reword) return input;
  const entries: Array<[string, string[] | undefined]> = Array.isArray(call.reword)
    ? call.reword.map((path) => [path, undefined])
    : Object.entries(call.reword);
  for (const [path, explicit] of entries) {
    const segments = path.split(".");
    let holder: Record<string, unknown> | undefined = input;
    for (const segment of segments.slice(0, -1)) {
      const next: unknown = holder?.[segment];
      holder = next !== null && typeof next === "object" && !Array.isArray(next) ? (next as Record<string, unknown>) : undefined;
    }
    const leaf = segments[segments.length - 1]!;
    const original = holder?.[leaf];
    if (holder === undefined || typeof original !== "string") {
      throw new MockProviderError(
        "invalid_turn",
        `tool_use ${call.name}: reword path ${JSON.stringify(path)} does not name a string argument`,
      );
    }
    // Draw even on the first attempt so that later draws do not depend on the attempt's branch.
    const draw = rng.nextUint32();
    // The first response says it as scripted; every later response re-words it, as a retried model may.
    if (attempt <= 1) continue;
    const variants = (explicit ?? BUILT_IN_REWORDINGS.map((f) => f(original))).filter((v) => v !== original);
    if (variants.length === 0) continue;
    holder[leaf] = variants[draw % variants.length];
  }
  return input;
}

/**
 * Serialise with a seeded key order per object and the chosen whitespace style; `spell` gives the
 * raw text of top-level number members (a call's `spell`), which must parse to the same value.
 */
export function serialiseArguments(value: unknown, rng: Rng, style: WhitespaceStyle, depth = 0, spell?: Record<string, string>): string {
  const indent = (d: number) => "  ".repeat(d);
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    const items = value.map((v) => serialiseArguments(v, rng, style, depth + 1));
    if (style === "pretty") return `[\n${items.map((i) => indent(depth + 1) + i).join(",\n")}\n${indent(depth)}]`;
    return `[${items.join(style === "spaced" ? ", " : ",")}]`;
  }
  const keys = rng.shuffle(Object.keys(value as Record<string, unknown>).filter((k) => (value as Record<string, unknown>)[k] !== undefined));
  if (keys.length === 0) return "{}";
  const parts = keys.map((k) => {
    const member = (value as Record<string, unknown>)[k];
    const v = spell !== undefined && Object.hasOwn(spell, k) ? spelt(k, spell[k]!, member) : serialiseArguments(member, rng, style, depth + 1);
    return style === "compact" ? `${JSON.stringify(k)}:${v}` : `${JSON.stringify(k)}: ${v}`;
  });
  if (style === "pretty") return `{\n${parts.map((p) => indent(depth + 1) + p).join(",\n")}\n${indent(depth)}}`;
  return `{${parts.join(style === "spaced" ? ", " : ",")}}`;
}

/** A number member's given spelling, refused unless it is JSON text of the member's own value. */
function spelt(name: string, text: string, value: unknown): string {
  if (!spellsNumber(text, value)) throw new MockProviderError("invalid_turn", `spell ${JSON.stringify(name)}: ${JSON.stringify(text)} is not a spelling of ${JSON.stringify(value)}`);
  return text;
}

/** Cut JSON text into fragments on code point boundaries; the first fragment is often empty, as the API's is. */
export function fragment(json: string, rng: Rng): string[] {
  const codePoints = Array.from(json);
  const fragments: string[] = [];
  if (rng.next() < 0.75) fragments.push("");
  let i = 0;
  while (i < codePoints.length) {
    const size = rng.int(1, 12);
    fragments.push(codePoints.slice(i, i + size).join(""));
    i += size;
  }
  if (fragments.length === 0) fragments.push("");
  return fragments;
}

function splitText(text: string, rng: Rng): string[] {
  const words = text.match(/\S+\s*|\s+/g) ?? [];
  if (words.length === 0) return [text];
  const chunks: string[] = [];
  let i = 0;
  while (i < words.length) {
    const size = rng.int(1, 3);
    chunks.push(words.slice(i, i + size).join(""));
    i += size;
  }
  return chunks;
}

function estimateTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

export function checkTurn(turn: AssistantTurn, declaredTools: ReadonlySet<string> | undefined): void {
  if (!turn || !Array.isArray(turn.content)) {
    throw new MockProviderError("invalid_turn", "a scripted turn needs a content array");
  }
  for (const [i, item] of turn.content.entries()) {
    if (item.type === "text") {
      if (typeof item.text !== "string") throw new MockProviderError("invalid_turn", `content.${i}: text must be a string`);
    } else if (item.type === "tool_use") {
      if (typeof item.name !== "string" || !/^[a-zA-Z0-9_-]{1,128}$/.test(item.name)) {
        throw new MockProviderError("invalid_turn", `content.${i}: tool name ${JSON.stringify(item.name)} is not a valid tool name`);
      }
      if (item.input === null || typeof item.input !== "object" || Array.isArray(item.input)) {
        throw new MockProviderError("invalid_turn", `content.${i}: tool_use input must be a JSON object`);
      }
      // A real model only calls tools the request declares; a script that does not is a test bug.
      if (declaredTools && !declaredTools.has(item.name)) {
        throw new MockProviderError(
          "unknown_tool",
          `content.${i}: the script calls ${item.name}, which the request does not declare in tools`,
        );
      }
    } else {
      throw new MockProviderError("invalid_turn", `content.${i}: unknown scripted content type ${JSON.stringify((item as { type: unknown }).type)}`);
    }
  }
  if (turn.stopReason !== undefined && !["tool_use", "end_turn", "max_tokens", "refusal"].includes(turn.stopReason)) {
    throw new MockProviderError("invalid_turn", `stopReason must be tool_use, end_turn, max_tokens or refusal`);
  }
  if (turn.stopReason === "max_tokens" && turn.content.length === 0) {
    throw new MockProviderError("invalid_turn", `a max_tokens turn needs a last block to cut`);
  }
}

export function renderTurn(turn: AssistantTurn, options: RenderOptions): RenderedResponse {
  const rng = new Rng("render", options.seed, options.bodyHash, options.attempt);
  const ids = new Rng("ids", options.seed, options.idSalt ?? "", options.bodyHash, options.attempt);
  const messageId = mintId("msg_01", ids);
  const requestId = mintId("req_011C", ids);
  const hasToolUse = turn.content.some((c) => c.type === "tool_use");
  const stopReason = turn.stopReason ?? (hasToolUse ? "tool_use" : "end_turn");
  const style = rng.pick<WhitespaceStyle>(["compact", "spaced", "spaced", "pretty"]);

  const events: PlannedEvent[] = [];
  const toolUses: RenderedToolUse[] = [];
  const finalContent: Array<Record<string, unknown>> = [];
  let outputText = "";

  const usage = {
    input_tokens: options.inputTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    output_tokens: 1,
    output_tokens_details: null,
    server_tool_use: null,
    service_tier: "standard",
  };

  events.push({
    type: "message_start",
    data: {
      type: "message_start",
      message: {
        id: messageId,
        type: "message",
        role: "assistant",
        model: options.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        stop_details: null,
        container: null,
        usage,
      },
    },
  });

  let offset = 0;
  if (options.thinking === true) {
    // Its own generator, so that the rest of the response renders as it would without thinking.
    const thoughts = new Rng("thinking", options.seed, options.bodyHash, options.attempt);
    const thinking = `Let me work out what the user asks for before I answer (line of thought ${thoughts.int(1, 999_999)}).`;
    const signature = signThinking(thinking);
    events.push({
      type: "content_block_start",
      block: 0,
      data: { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } },
    });
    for (const piece of splitText(thinking, rng)) {
      events.push({ type: "content_block_delta", block: 0, data: { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: piece } } });
    }
    events.push({ type: "content_block_delta", block: 0, data: { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature } } });
    events.push({ type: "content_block_stop", block: 0, data: { type: "content_block_stop", index: 0 } });
    finalContent.push({ type: "thinking", thinking, signature });
    outputText += thinking;
    offset = 1;
    if (options.redactedThinking === true) {
      const data = sealRedactedThinking(`${options.bodyHash}:${options.attempt}:${thoughts.int(1, 999_999_999)}`);
      events.push({ type: "content_block_start", block: 1, data: { type: "content_block_start", index: 1, content_block: { type: "redacted_thinking", data } } });
      events.push({ type: "content_block_stop", block: 1, data: { type: "content_block_stop", index: 1 } });
      finalContent.push({ type: "redacted_thinking", data });
      offset = 2;
    }
  }

  // At the output limit the last block stops part-way (never empty, never whole).
  const cutLast = stopReason === "max_tokens" || stopReason === "refusal";
  const stopDetails =
    stopReason === "refusal" ? { type: "refusal", category: turn.stopDetails?.category ?? null, explanation: turn.stopDetails?.explanation ?? null } : null;
  const cut = (text: string): string => {
    const codePoints = Array.from(text);
    return codePoints.slice(0, Math.max(1, Math.min(codePoints.length - 1, Math.floor(codePoints.length / 2)))).join("");
  };
  turn.content.forEach((scripted, position) => {
    const index = position + offset;
    const last = cutLast && position === turn.content.length - 1;
    const item = last && scripted.type === "text" ? { ...scripted, text: cut(scripted.text) } : scripted;
    if (item.type === "text") {
      outputText += item.text;
      events.push({
        type: "content_block_start",
        block: index,
        data: { type: "content_block_start", index, content_block: { type: "text", text: "", citations: null } },
      });
      for (const piece of splitText(item.text, rng)) {
        events.push({
          type: "content_block_delta",
          block: index,
          data: { type: "content_block_delta", index, delta: { type: "text_delta", text: piece } },
        });
      }
      events.push({ type: "content_block_stop", block: index, data: { type: "content_block_stop", index } });
      finalContent.push({ type: "text", text: item.text, citations: null });
      return;
    }
    const ordinal = toolUses.length;
    const id = mintId("toolu_01", ids);
    const input = rewordInput(item, rng, options.attempt);
    const whole = serialiseArguments(input, rng, style, 0, item.spell);
    // A call cut by the output limit: its JSON stops part-way and never parses.
    const json = last ? cut(whole) : whole;
    const fragments = fragment(json, rng);
    outputText += json;
    toolUses.push({ id, name: item.name, input, json, fragments, contentIndex: index, ordinal });
    events.push({
      type: "content_block_start",
      block: index,
      toolUse: ordinal,
      data: {
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id, name: item.name, input: {}, caller: { type: "direct" } },
      },
    });
    fragments.forEach((partial, f) => {
      events.push({
        type: "content_block_delta",
        block: index,
        toolUse: ordinal,
        fragment: f + 1,
        data: { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: partial } },
      });
    });
    events.push({ type: "content_block_stop", block: index, toolUse: ordinal, data: { type: "content_block_stop", index } });
    finalContent.push({ type: "tool_use", id, name: item.name, input: last ? {} : input, caller: { type: "direct" } });
  });

  const outputTokens = estimateTokens(outputText) + 8 * toolUses.length;
  events.push({
    type: "message_delta",
    data: {
      type: "message_delta",
      delta: { stop_reason: stopReason, stop_sequence: null, stop_details: stopDetails, container: null },
      usage: {
        input_tokens: options.inputTokens,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: outputTokens,
        server_tool_use: null,
      },
    },
  });
  events.push({ type: "message_stop", data: { type: "message_stop" } });

  const withPings = insertPings(events, options.pings);
  const message = {
    id: messageId,
    type: "message",
    role: "assistant",
    model: options.model,
    content: finalContent,
    stop_reason: stopReason,
    stop_sequence: null,
    stop_details: stopDetails,
    container: null,
    usage: { ...usage, output_tokens: outputTokens },
  };
  return { messageId, requestId, stopReason, toolUses, events: withPings, message };
}

function insertPings(events: PlannedEvent[], mode: PingMode): PlannedEvent[] {
  const ping = (): PlannedEvent => ({ type: "ping", data: { type: "ping" } });
  if (mode === "none") return events;
  if (mode === "every_event") {
    return events.flatMap((e, i) => (i === 0 ? [e] : [ping(), e]));
  }
  // As the API does: one ping early in the stream, after the first content_block_start.
  const at = events.findIndex((e) => e.type === "content_block_start");
  const out = events.slice();
  out.splice(at === -1 ? 1 : at + 1, 0, ping());
  return out;
}
