import type OpenAI from "openai";
import { InvalidArgumentError, describeValue } from "@dispatch-once/core";
import { CallPhases, checkEventMembers, type CallState as SharedCallState } from "@dispatch-once/runner";

type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;

// The phases are the shared runner's (@dispatch-once/runner); on this stream: announced = the first
// tool_calls fragment of an index (it names the call); arguments_streaming = an argument piece
// seen; complete = the first fragment of a higher index when its arguments are a whole JSON object by then, else choice 0's finish_reason (dispatchable);
// abandoned = the stream died, or stopped for good (length, content_filter), first.

export interface ChatCallState extends SharedCallState {
  /** The call's `index` in the message's `tool_calls`. */
  index: number;
  /** `id` (`call_…`): minted per response, so it cannot deduplicate a replay; for the record and the tool message only. */
  callId: string;
  /**
   * The call's `extra_content`, as the stream gave it (Gemini's thought signature, which Gemini 3
   * refuses a later request without); committed with the call and sent back.
   */
  extraContent?: unknown;
}

/** Why a Chat Completions stream ended without establishing its response, as the stream showed it. */
export interface ChatStreamErrorReport {
  /**
   * `finish_reason` for a stop the response ended with for good (`length`, `content_filter`) or
   * one this side does not know; `tool_calls` for a fragment of a call already final (STREAM-20);
   * `choices` for a choice other than 0; `function_call` for a legacy function call (the runner
   * never sends `functions`, so it would not be dispatched); `error` for a chunk carrying the
   * provider's error (its `code`, else its `type`, and its `message`: STREAM-12).
   */
  event: "finish_reason" | "tool_calls" | "choices" | "function_call" | "error";
  code: string;
  message: string;
}

/** A `tool_calls` fragment as servers send it: `index` may be absent (Gemini), and `extra_content` present. */
type Fragment = { index?: number | null; id?: string; function?: { name?: string; arguments?: string }; extra_content?: unknown };

/** The finish reasons that end a response this side commits: the model ended its answer, or waits for its calls' results. */
const FINISHED = new Set(["stop", "tool_calls", "function_call"]);
/** The finish reasons that end the response for good: the same request ends the same way (STREAM-13). */
const FINAL_STOPS = new Set(["length", "content_filter"]);

/**
 * Folds Chat Completions chunks (`chat.completions.create({ stream: true })`) into the assistant
 * message, tracking each tool call's phase (STREAM-20). Choice 0 is the response: its
 * `finish_reason` is the only proof it finished (STREAM-1). The `openai` SDK swallows `[DONE]` and
 * ends its iterator the same way on a body that closed before it, so a stream that ended without
 * that chunk is a failed one, whatever the SDK raised. A call's arguments are final at the first
 * fragment of a higher index (the API streams indexes in order) when they are a whole JSON object by then, otherwise at `finish_reason`.
 */
export class ChatCompletionsTurnAccumulator extends CallPhases<ChatCallState> {
  /** The response's id, from its first chunk that gave one. */
  responseId: string | undefined;
  /** Choice 0's `finish_reason`, once it arrived. */
  finishReason: string | undefined;
  streamError: ChatStreamErrorReport | undefined;
  /** The `content` the response streamed. */
  content = "";
  /** The `refusal` the response streamed: text the model said instead of an answer. */
  refusal = "";
  /**
   * The `reasoning_content` the response streamed (DeepSeek's thinking mode, and servers that
   * follow it): not the model's words, but its API refuses a later request whose assistant
   * message with calls lacks it.
   */
  reasoningContent = "";
  /** The text (content and refusal) the last applied chunk added, for the runner's text_delta. */
  lastText = "";
  /** The highest tool-call index seen: every call below it is final. */
  private highest = -1;

  /** True once a finishing `finish_reason` arrived with nothing wrong before it (STREAM-1, STREAM-20). */
  get completed(): boolean {
    return this.finishReason !== undefined && FINISHED.has(this.finishReason) && this.streamError === undefined;
  }

  /** The provider's reason when it ended the response for good (STREAM-13). */
  get finalStop(): string | undefined {
    return this.streamError?.event === "finish_reason" && FINAL_STOPS.has(this.streamError.code) ? this.streamError.code : undefined;
  }

  /** Whether any call completed in this response. */
  get hasCalls(): boolean {
    return this.calls.some((c) => c.phase !== "abandoned" && c.phase !== "announced" && c.phase !== "arguments_streaming");
  }

  /** Apply one chunk; returns the calls whose arguments it made final, in index order. */
  apply(chunk: Chunk): ChatCallState[] {
    // Before anything is counted or folded: a malformed chunk changes nothing (ERR-1).
    if (typeof chunk !== "object" || chunk === null) throw new InvalidArgumentError("chunk", `must be a chat.completion.chunk object, got ${describeValue(chunk)}`);
    // The provider's error inside the stream (which the SDK throws as an APIError; the stream side
    // gives it back as this chunk): a failed stream that says what the provider said (STREAM-12).
    const reported: unknown = (chunk as { error?: unknown }).error;
    if (typeof reported === "object" && reported !== null && !Array.isArray(reported)) {
      this.eventsSeen++;
      this.lastText = "";
      if (this.streamError === undefined && !this.completed) this.streamError = providerError(reported as Record<string, unknown>);
      return [];
    }
    checkEventMembers(chunk, { choices: "array" }, "chunk", "chat.completion.chunk");
    const choice = chunk.choices.find((c) => c?.index === 0);
    // Azure's asynchronous content filter interleaves choice-0 annotations that carry no delta at
    // all: nothing streamed, read as an empty one (its finish_reason, null there, still counts).
    const delta: Chunk["choices"][number]["delta"] = choice === undefined || choice.delta === undefined || choice.delta === null ? {} : choice.delta;
    if (choice !== undefined) {
      checkEventMembers({ delta }, { delta: "object" }, "chunk.choices[0]", "chat.completion.chunk");
      const fragments: unknown = delta.tool_calls;
      if (fragments !== undefined && fragments !== null) {
        if (!Array.isArray(fragments)) throw new InvalidArgumentError("chunk.choices[0].delta.tool_calls", `must be an array, got ${describeValue(fragments)}`);
        fragments.forEach((f: unknown, i) => checkFragment(f, `chunk.choices[0].delta.tool_calls[${i}]`));
      }
      checkContent(delta.content);
    }
    const indexes = this.indexesOf((delta.tool_calls ?? []) as Fragment[]);
    this.eventsSeen++;
    this.lastText = "";
    // After a failure nothing more belongs to this attempt; a chunk after the finish may only carry usage.
    if (this.streamError !== undefined) return [];
    if (this.responseId === undefined && typeof chunk.id === "string" && chunk.id !== "") this.responseId = chunk.id;
    // Several choices are several responses: the runner asks for one (n is refused), so another is not this response's.
    const other = chunk.choices.find((c) => c?.index !== 0);
    if (other !== undefined) {
      this.streamError = { event: "choices", code: "second_choice", message: `a choice with index ${describeValue(other.index)} in a stream that asked for one` };
      return [];
    }
    // Choice 0 twice in one chunk: folding one would drop the other's pieces (an argument fragment
    // dropped can leave other arguments that parse: "1" of "100"), and no order between them is given.
    if (chunk.choices.filter((c) => c?.index === 0).length > 1) {
      this.streamError = { event: "choices", code: "repeated_choice", message: "choice 0 twice in one chunk" };
      return [];
    }
    if (choice === undefined) return [];
    // A legacy function call (a server that streams one though no functions were sent) is a call
    // the runner never dispatches: committed, the model's call would read as an empty answer.
    const legacy: unknown = (delta as { function_call?: unknown }).function_call;
    if (legacy !== undefined && legacy !== null) {
      this.streamError = { event: "function_call", code: "legacy_function_call", message: "a legacy function_call delta, which names no tool call (the runner sends tools, never functions)" };
      return [];
    }
    const completed: ChatCallState[] = [];
    for (const [i, given] of (delta.tool_calls ?? []).entries()) {
      const fragment = { ...given, index: indexes[i]! };
      const held = this.callAt(fragment.index);
      // Final: the response finished, the call at this index is no longer open (completed, maybe
      // dispatched and run), or no call was begun at an index below one already begun.
      const final = this.finishReason !== undefined || (held !== undefined ? !isOpen(held) : fragment.index < this.highest);
      if (final) {
        // A piece for a call already final (dispatched, maybe run): the arguments that ran are not
        // the call's, and taking it in would commit a call other than the one dispatched (STREAM-20).
        this.streamError = {
          event: "tool_calls",
          code: "tool_call_fragment_after_final",
          message: `a tool_calls fragment for index ${fragment.index}, whose call was already final (${this.finishReason !== undefined ? "after finish_reason" : `index ${this.highest} had begun`})`,
        };
        return completed;
      }
      if (fragment.index > this.highest) {
        // A higher index: a call before it whose arguments are by now a whole JSON object is final
        // (the API streams indexes in order, and any more text would make them not JSON). One whose
        // arguments are not yet whole (a server that names every call before streaming any
        // arguments) stays open until finish_reason: made final now, it would run with a prefix of
        // them, `{}` for none, a tool with optional arguments run with none of the model's.
        for (const call of this.openCalls()) {
          if (!wholeObject(call.partialJson)) continue;
          const done = this.completeCall(call, { requireObject: true });
          if (done !== undefined) completed.push(done);
        }
        this.highest = fragment.index;
        // Its id and name were checked with the chunk (indexesOf).
        this.openCall({ index: fragment.index, callId: fragment.id!, name: fragment.function!.name!, phase: "announced", partialJson: "" });
      }
      const call = this.callAt(fragment.index)!;
      // A first fragment delivered again names its call again (vLLM repeats id and name on every
      // fragment); one that names another call or function is another response's.
      if (typeof fragment.id === "string" && fragment.id !== "" && fragment.id !== call.callId) {
        this.streamError = { event: "tool_calls", code: "tool_call_index_reused", message: `a tool call ${fragment.id} at index ${fragment.index}, which holds ${call.callId}` };
        return completed;
      }
      const name: unknown = fragment.function?.name;
      if (typeof name === "string" && name !== "" && name !== call.name) {
        this.streamError = { event: "tool_calls", code: "tool_call_index_reused", message: `a tool call of ${name} at index ${fragment.index}, which holds a call of ${call.name} (${call.callId})` };
        return completed;
      }
      const piece: unknown = fragment.function?.arguments;
      if (typeof piece === "string" && piece !== "") this.appendArguments(call, piece);
      const extra: unknown = (fragment as Fragment).extra_content;
      if (extra !== undefined && extra !== null && call.extraContent === undefined) call.extraContent = extra;
    }
    const content = contentText(delta.content);
    this.content += content;
    if (typeof delta.refusal === "string") this.refusal += delta.refusal;
    const reasoning: unknown = (delta as { reasoning_content?: unknown }).reasoning_content;
    if (typeof reasoning === "string") this.reasoningContent += reasoning;
    this.lastText = content + (typeof delta.refusal === "string" ? delta.refusal : "");
    // "" is no finish: SGLang and older Ollama send it on every chunk before the last.
    if (choice.finish_reason !== null && choice.finish_reason !== undefined && (choice.finish_reason as string) !== "") {
      this.finishReason = String(choice.finish_reason);
      if (FINISHED.has(this.finishReason)) {
        for (const call of this.openCalls()) {
          const done = this.completeCall(call, { requireObject: true });
          if (done !== undefined) completed.push(done);
        }
      } else {
        // length / content_filter: the open call's arguments were cut (STREAM-13); an unknown
        // reason establishes nothing either: a failed stream, the open calls abandoned.
        this.streamError = {
          event: "finish_reason",
          code: this.finishReason,
          message: FINAL_STOPS.has(this.finishReason) ? `the response stopped for good (finish_reason ${this.finishReason})` : `finish_reason ${this.finishReason}, which ends no response this side commits`,
        };
      }
    }
    return completed;
  }

  /**
   * Each fragment's index in the message's `tool_calls`, checked before anything of the chunk is
   * folded (ERR-1): a fragment that begins a call must name it (`id`, `function.name`). A fragment
   * without `index` (Gemini's compatibility layer sends none) is read by its `id`, the API
   * streaming calls in order: a call's id again is that call, a new id the next call; no id
   * continues the call begun last. Anything else such a reading cannot place fails as a fragment
   * with an index would (a final call's id again, another name at the call begun last).
   */
  private indexesOf(fragments: readonly Fragment[]): number[] {
    let highest = this.highest;
    const byId = new Map(this.calls.map((c) => [c.callId, c.index]));
    return fragments.map((fragment, i) => {
      const id = fragment.id;
      const index = typeof fragment.index === "number" ? fragment.index : typeof id === "string" && id !== "" ? (byId.get(id) ?? highest + 1) : Math.max(highest, 0);
      // After a finish or a failure the fragment is not folded (it fails the stream, or is ignored).
      if (index > highest && this.finishReason === undefined && this.streamError === undefined) {
        const path = `chunk.choices[0].delta.tool_calls[${i}]`;
        checkEventMembers(fragment, { id: "string", function: "object" }, path, "chat.completion.chunk");
        checkEventMembers(fragment.function as object, { name: "string" }, `${path}.function`, "chat.completion.chunk");
        highest = index;
        byId.set(id!, index);
      }
      return index;
    });
  }

  /** The assistant's text: its content, then its refusal (the model's words either way). */
  text(): string {
    return this.content + this.refusal;
  }

  /** The completed calls in index order, as the assistant message's `tool_calls`. */
  toolCalls(): { id: string; type: "function"; function: { name: string; arguments: string }; extra_content?: unknown }[] {
    return this.orderedParts()
      .filter((part): part is ChatCallState => "phase" in part && part.phase !== "abandoned" && part.phase !== "announced" && part.phase !== "arguments_streaming")
      .map((call) => ({
        id: call.callId,
        type: "function",
        function: { name: call.name, arguments: call.partialJson },
        ...(call.extraContent !== undefined ? { extra_content: call.extraContent } : {}),
      }));
  }
}

/**
 * One `tool_calls` fragment, checked before anything of its chunk is folded (ERR-1). Its `index`
 * is a whole number >= 0 (a position in the message's `tool_calls`); its `arguments`, when given,
 * a string: a server that sends them as an object (Ollama's native shape) would otherwise have the
 * call run with none of them, as `{}`.
 */
function checkFragment(fragment: unknown, path: string): void {
  if (typeof fragment !== "object" || fragment === null) throw new InvalidArgumentError(path, `must be an object, got ${describeValue(fragment)}`);
  const { index, function: fn } = fragment as { index?: unknown; function?: unknown };
  // Absent (or null): read by the fragment's id (indexesOf).
  if (index !== undefined && index !== null && (typeof index !== "number" || !Number.isInteger(index) || index < 0)) throw new InvalidArgumentError(`${path}.index`, `must be a whole number >= 0 in a chat.completion.chunk event, got ${describeValue(index)}`);
  if (fn === undefined || fn === null) return;
  if (typeof fn !== "object" || Array.isArray(fn)) throw new InvalidArgumentError(`${path}.function`, `must be an object in a chat.completion.chunk event, got ${describeValue(fn)}`);
  const pieces: unknown = (fn as { arguments?: unknown }).arguments;
  if (pieces !== undefined && pieces !== null && typeof pieces !== "string") {
    throw new InvalidArgumentError(`${path}.function.arguments`, `must be a string (a piece of the arguments' JSON text) in a chat.completion.chunk event, got ${describeValue(pieces)}`);
  }
}

/**
 * A delta's `content`: a string, or (Mistral's magistral) an array of parts, checked before
 * anything of the chunk is folded (ERR-1).
 */
function checkContent(content: unknown): void {
  if (content === undefined || content === null || typeof content === "string") return;
  if (!Array.isArray(content)) throw new InvalidArgumentError("chunk.choices[0].delta.content", `must be a string or an array of content parts in a chat.completion.chunk event, got ${describeValue(content)}`);
  content.forEach((part: unknown, i) => {
    if (typeof part !== "object" || part === null || typeof (part as { type?: unknown }).type !== "string") {
      throw new InvalidArgumentError(`chunk.choices[0].delta.content[${i}]`, `must be a content part (an object with a string type) in a chat.completion.chunk event, got ${describeValue(part)}`);
    }
    if ((part as { type: string }).type === "text") checkEventMembers(part, { text: "string" }, `chunk.choices[0].delta.content[${i}]`, "chat.completion.chunk");
  });
}

/** The model's words a (checked) delta content carries: the string, or its text parts; a thinking part is not its words. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return (content as { type: string; text?: string }[]).flatMap((part) => (part.type === "text" ? [part.text!] : [])).join("");
}

/** What the provider said in an `error` chunk: its `code`, else its `type`, and its `message` (STREAM-12). */
function providerError(error: Record<string, unknown>): ChatStreamErrorReport {
  const named = [error.code, error.type].find((v): v is string => typeof v === "string" && v !== "");
  return { event: "error", code: named ?? "error", message: typeof error.message === "string" ? error.message : describeValue(error) };
}

function isOpen(call: ChatCallState): boolean {
  return call.phase === "announced" || call.phase === "arguments_streaming";
}

/** Whether a call's arguments text is already a whole JSON object (more text would make it not JSON). */
function wholeObject(text: string): boolean {
  if (!text.trimEnd().endsWith("}")) return false;
  try {
    const value: unknown = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value);
  } catch {
    return false;
  }
}
