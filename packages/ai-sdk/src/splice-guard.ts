import { describeValue, InvalidArgumentError } from "@dispatch-once/core";
import { StreamIncompleteError } from "@dispatch-once/runner";
import type { LanguageModelMiddleware } from "ai";

type Part = { type: string; id?: unknown; rawValue?: unknown; error?: unknown };

/** The events of Amazon Bedrock's ConverseStream, and its in-stream exceptions (AWS API reference, ConverseStreamOutput). */
const CONVERSE_EVENTS: ReadonlySet<string> = new Set([
  "messageStart",
  "contentBlockStart",
  "contentBlockDelta",
  "contentBlockStop",
  "messageStop",
  "metadata",
  "internalServerException",
  "modelStreamErrorException",
  "serviceUnavailableException",
  "throttlingException",
  "validationException",
]);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Google's error envelope, `{ error: { code, message, status } }`, which the Gemini API sends as a stream's `data:` line when it fails mid-stream. */
function googleError(event: Record<string, unknown>): { code: unknown; message: unknown; status: string } | undefined {
  const error = event["error"];
  return isRecord(error) && typeof error["status"] === "string" ? { code: error["code"], message: error["message"], status: error["status"] } : undefined;
}

/** A Gemini API chunk (a GenerateContentResponse, as `@ai-sdk/google` passes it raw): no `type`, and one of its fields. */
function isGeminiChunk(event: Record<string, unknown>): boolean {
  return (
    Array.isArray(event["candidates"]) ||
    isRecord(event["usageMetadata"]) ||
    isRecord(event["promptFeedback"]) ||
    typeof event["responseId"] === "string" ||
    typeof event["modelVersion"] === "string" ||
    googleError(event) !== undefined
  );
}

/**
 * Watches one model stream (one request, so one response) for the signs of a second response
 * spliced into its body (AISDK-16). Reads the provider's raw events, which alone carry the
 * positions: `@ai-sdk/openai` turns an `output_item.added` at an occupied `output_index` into a
 * `tool-input-start` like any other, and drops the index.
 */
class SpliceWatch {
  events = 0;
  /** A Chat Completions body: some chunk carried `choices`. */
  chat = false;
  /** Choice 0 gave a `finish_reason` (an empty one, which SGLang and older Ollama send on every chunk, is none). */
  chatFinished = false;
  /** An Amazon Bedrock Converse body (`@ai-sdk/amazon-bedrock`): some raw event was one of ConverseStream's, `{ messageStart: {...} }`. */
  converse = false;
  /** The Converse body's `messageStop` came (its stop reason: the response's finishing event). */
  converseFinished = false;
  /** A Gemini API body (`@ai-sdk/google`): some raw chunk was a GenerateContentResponse or Google's error envelope. */
  gemini = false;
  /** The Gemini body's candidate 0 gave a `finishReason` (or its prompt was blocked): the response's last chunk came. */
  geminiFinished = false;
  private geminiResponseId: string | undefined;
  /** The name of the call whose arguments Vertex AI is streaming (`willContinue`, `partialArgs`), until its last part. */
  private geminiStreaming: string | undefined;
  /** The provider passed on an error part (an exception frame, a frame that did not decode): it told the failure itself. */
  errored = false;
  private converseStarted = false;
  /** Converse content block positions: opened by a `contentBlockStart` (a tool use) or a block's first delta (text, reasoning), closed by its `contentBlockStop`. */
  private readonly converseOpen = new Set<number>();
  private readonly converseClosed = new Set<number>();
  /** What each open Converse block holds (`toolUse`, `text`, `reasoningContent`), from its start or first delta: a block holds one kind. */
  private readonly converseKinds = new Map<number, string>();
  private responseId: string | undefined;
  private metadataId: string | undefined;
  private readonly positions = new Set<number>();
  /** Every `tool-call` part seen, by its id, tool and input text. */
  /** Each `tool-call` part seen, by its id, tool and input: the item ids it came under ("" for none). */
  private readonly toolCalls = new Map<string, string[]>();

  /** What a raw event shows of another response, or `undefined`. */
  raw(value: unknown): string | undefined {
    this.events++;
    if (typeof value !== "object" || value === null) return undefined;
    const event = value as Record<string, unknown>;
    const type = event["type"];
    if (type === undefined) {
      const converse = this.converseEvent(event);
      if (converse !== null) return converse;
      if (!Array.isArray(event["choices"]) && isGeminiChunk(event)) return this.geminiChunk(event);
    }
    // OpenAI Responses API and Anthropic Messages API: the response's own id at its start.
    if (type === "response.created" || type === "response.in_progress" || type === "message_start") {
      const holder = (type === "message_start" ? event["message"] : event["response"]) as { id?: unknown } | undefined;
      return this.responseOf(typeof holder?.id === "string" ? holder.id : undefined, `${String(type)}`);
    }
    // A position holds one item: announced again, whatever its type, it is another response's item
    // (the spliced one restarts at 0). The AI SDK would open a second call there and execute it.
    if (type === "response.output_item.added" || type === "content_block_start") {
      const index = type === "content_block_start" ? event["index"] : event["output_index"];
      if (typeof index !== "number") return undefined;
      if (this.positions.has(index)) {
        const field = type === "content_block_start" ? "index" : "output_index";
        return `${String(type)} at ${field} ${index}, which already holds an item of ${this.responseId ?? "this response"}: another response in the stream`;
      }
      this.positions.add(index);
      return undefined;
    }
    // Chat Completions: every chunk names its completion. Known by its `choices`, not by `object`,
    // which the AI SDK does not read and a server may leave out; an empty id (Azure's first chunk,
    // its prompt filter results, has "") names nothing.
    if (Array.isArray(event["choices"])) {
      this.chat = true;
      const finish = (event["choices"] as { index?: unknown; finish_reason?: unknown }[]).find((c) => typeof c === "object" && c !== null && (c.index ?? 0) === 0)?.finish_reason;
      if (typeof finish === "string" && finish !== "") this.chatFinished = true;
      if (typeof event["id"] === "string" && event["id"] !== "") return this.responseOf(event["id"], "chat.completion.chunk");
    }
    return undefined;
  }

  /**
   * A `tool-call` part that repeats an earlier one of this stream whole (the same non-empty
   * `toolCallId`, tool and input): one call delivered again at another position, by a relay that
   * renumbers what it re-sends; the AI SDK would execute it again under the next ordinal
   * (STREAM-10). Calls that share an id and differ in their input are two calls (some models and
   * servers repeat ids), and so are identical calls under distinct ids (TURN-4), and, on the
   * Responses API, identical calls of two items (distinct item ids in the parts' `providerMetadata`,
   * as `@ai-sdk/openai` gives them): a server that repeats `call_id`s gives two asks one.
   */
  repeatedCall(part: Part): string | undefined {
    const call = part as { type: string; toolCallId?: unknown; toolName?: unknown; input?: unknown; providerMetadata?: unknown };
    if (call.type !== "tool-call" || typeof call.toolCallId !== "string" || call.toolCallId === "") return undefined;
    // Not on a Chat Completions body: compatible servers there repeat ids, and a model asking twice
    // for the same thing under one would fail every attempt (STREAM-10 leaves it to the side).
    if (this.chat) return undefined;
    const input = typeof call.input === "string" ? call.input : JSON.stringify(call.input);
    const seen = `${call.toolCallId}\u0000${String(call.toolName)}\u0000${input}`;
    const itemId = itemIdOf(call.providerMetadata);
    const items = this.toolCalls.get(seen);
    // A repeat is of the same item, or where either part names none; looked for among them all.
    if (items !== undefined && items.some((earlier) => earlier === "" || itemId === "" || earlier === itemId)) {
      return `a tool-call part (${call.toolCallId}, ${String(call.toolName)}) repeats an earlier call of ${this.responseId ?? "this response"} whole, its input too: the call delivered again at another position`;
    }
    if (items === undefined) this.toolCalls.set(seen, [itemId]);
    else items.push(itemId);
    return undefined;
  }

  /**
   * A Chat Completions body that ended without choice 0's `finish_reason`, seen at the first part
   * the provider makes at the body's end (its calls' `tool-call` parts, then `finish`): the AI SDK's
   * providers make the calls the body began into `tool-call` parts all the same, with the argument
   * text streamed so far (AISDK-16, STREAM-20).
   */
  unfinished(part: Part): string | undefined {
    if (!this.chat || this.chatFinished || (part.type !== "tool-call" && part.type !== "finish")) return undefined;
    return `the Chat Completions body ended without choice 0's finish_reason (before ${part.type === "tool-call" ? "a call's tool-call part" : "its finish"}): the response was cut, and a call it began may be cut too`;
  }

  /**
   * Amazon Bedrock's ConverseStream events, as `@ai-sdk/amazon-bedrock` passes them raw: one key,
   * the event's type (`messageStart`, `contentBlockStart`, `contentBlockDelta`, `contentBlockStop`,
   * `messageStop`, `metadata`, or an exception's name), over its payload. No event names the
   * response (`messageStart` carries only the role; the request id is one per request): a second
   * response shows as a second `messageStart`, a block started at a position that already held
   * one, a delta or a stop at a position whose block already stopped (Converse starts only tool-use
   * blocks: text begins with its first delta), or content after `messageStop`. `null`: not Converse.
   */
  private converseEvent(event: Record<string, unknown>): string | undefined | null {
    const keys = Object.keys(event);
    if (keys.length !== 1 || !CONVERSE_EVENTS.has(keys[0]!)) return null;
    const name = keys[0]!;
    this.converse = true;
    const payload = event[name] as { contentBlockIndex?: unknown } | null;
    if (name === "messageStart") {
      if (this.converseStarted) return "messageStart second_response: a second message began in the Converse stream";
      this.converseStarted = true;
      return undefined;
    }
    if (name === "messageStop") {
      if (this.converseFinished) return "messageStop: a second messageStop in the Converse stream, another response's";
      this.converseFinished = true;
      return undefined;
    }
    if (name !== "contentBlockStart" && name !== "contentBlockDelta" && name !== "contentBlockStop") return undefined;
    if (this.converseFinished) return `${name} after messageStop: another response's content in the Converse stream`;
    const index = typeof payload === "object" && payload !== null ? payload.contentBlockIndex : undefined;
    if (typeof index !== "number") return undefined;
    if (this.converseClosed.has(index)) return `${name} at contentBlockIndex ${index}, whose block already stopped: another response in the stream`;
    if (name === "contentBlockStart") {
      if (this.converseOpen.has(index)) return `contentBlockStart at contentBlockIndex ${index}, which already holds a block: another response in the stream`;
      this.converseOpen.add(index);
      this.converseKinds.set(index, isRecord(event[name]) && isRecord(event[name]["start"]) && "toolUse" in event[name]["start"] ? "toolUse" : "other");
    } else if (name === "contentBlockDelta") {
      // A delta of another kind than its open block's (text into a tool use, a tool use's input into
      // text): a response resumed into this body at the block it left open (AISDK-16). One of the
      // same kind is the block's own next delta to any reader of the stream: not a sign.
      const delta = isRecord(event[name]) && isRecord(event[name]["delta"]) ? event[name]["delta"] : {};
      const kind = "toolUse" in delta ? "toolUse" : "reasoningContent" in delta ? "reasoningContent" : "text" in delta || "citation" in delta ? "text" : undefined;
      const open = this.converseKinds.get(index);
      if (kind !== undefined && open !== undefined && open !== "other" && kind !== open) return `contentBlockDelta of ${kind} at contentBlockIndex ${index}, whose block is a ${open}: another response in the stream`;
      if (kind !== undefined && open === undefined) this.converseKinds.set(index, kind);
      this.converseOpen.add(index);
    } else {
      this.converseOpen.delete(index);
      this.converseClosed.add(index);
    }
    return undefined;
  }

  /**
   * A Gemini API chunk, as `@ai-sdk/google` passes it raw: a GenerateContentResponse (no `type`;
   * `candidates`, `usageMetadata`, `modelVersion`, `responseId`, each optional) or Google's error
   * envelope. The Gemini API has no start chunk and no positions (a call comes whole in one
   * chunk), but names its response in every chunk (`responseId`): a chunk of another id, or
   * without one once the body's chunks named one, is another response's; so is content after the
   * chunk that gave candidate 0's `finishReason`, the response's last. `@ai-sdk/google` reads an
   * error chunk (the API's mid-stream failure, on the 200) as a chunk of nothing, and would finish
   * the step `other` with the error told to nobody: it is a sign too, naming the error.
   */
  private geminiChunk(event: Record<string, unknown>): string | undefined {
    this.gemini = true;
    const error = googleError(event);
    if (error !== undefined) return `error chunk ${String(error.code)} ${error.status}: ${String(error.message)}`;
    const candidate = Array.isArray(event["candidates"]) ? (event["candidates"] as unknown[]).find((c) => isRecord(c) && (c["index"] ?? 0) === 0) : undefined;
    const content = isRecord(candidate) && isRecord(candidate["content"]) ? candidate["content"] : undefined;
    const parts = content !== undefined && Array.isArray(content["parts"]) ? (content["parts"] as unknown[]) : [];
    // An empty text part (the last chunk's, beside its finishReason) carries nothing.
    const carries = parts.some((p) => !(isRecord(p) && p["text"] === "" && Object.keys(p).length === 1));
    if (this.geminiFinished && carries) return "a chunk after finishReason: another response's content in the Gemini stream";
    const id = event["responseId"];
    if (typeof id === "string") {
      if (this.geminiResponseId !== undefined && id !== this.geminiResponseId) return `responseId second_response: a second response (${id}) began in the stream of ${this.geminiResponseId}`;
      this.geminiResponseId = id;
    } else if (this.geminiResponseId !== undefined && carries) {
      return `a chunk without the responseId the stream's chunks carried (${this.geminiResponseId}): another response's chunk in the Gemini stream`;
    }
    const streamed = this.geminiStreamedCall(parts);
    if (streamed !== undefined) return streamed;
    if (isRecord(candidate) && typeof candidate["finishReason"] === "string" && candidate["finishReason"] !== "") {
      // @ai-sdk/google drops a streamed call its parts never ended, and finishes the step as if it had not begun.
      if (this.geminiStreaming !== undefined) return `finishReason while the arguments of ${this.geminiStreaming} were streaming: the call never ended`;
      this.geminiFinished = true;
    }
    // A blocked prompt is answered by a chunk of promptFeedback alone: the response, whole.
    if (isRecord(event["promptFeedback"]) && typeof event["promptFeedback"]["blockReason"] === "string") this.geminiFinished = true;
    return undefined;
  }

  /**
   * Vertex AI's streamed call arguments (`streamFunctionCallArguments`): a call's parts come one
   * after another, its name with `willContinue`, its `partialArgs`, and its last part (without
   * `willContinue`, or the terminal `functionCall: {}`); nothing else comes between them. Another
   * call begun, or text or a thought, while one streams, or a call's partialArgs while none does,
   * is another response's, spliced in where this one's call was cut (`@ai-sdk/google` would begin
   * a second call beside the open one and run it). Read without the `responseId`, which a proxy may strip.
   */
  private geminiStreamedCall(parts: unknown[]): string | undefined {
    for (const part of parts) {
      if (!isRecord(part)) continue;
      const call = part["functionCall"];
      if (!isRecord(call)) {
        if (this.geminiStreaming !== undefined && !(part["text"] === "" || part["text"] === undefined)) return `a ${part["thought"] === true ? "thought" : "text"} part while the arguments of ${this.geminiStreaming} were streaming: another response in the Gemini stream`;
        continue;
      }
      const more = call["willContinue"] === true || (Array.isArray(call["partialArgs"]) && call["partialArgs"].some((a) => isRecord(a) && a["willContinue"] === true));
      if (typeof call["name"] === "string") {
        if (this.geminiStreaming !== undefined) return `functionCall ${call["name"]} began while the arguments of ${this.geminiStreaming} were streaming: another response in the Gemini stream`;
        if (more) this.geminiStreaming = call["name"];
      } else {
        // A terminal part with none streaming is let be (@ai-sdk/google ignores it, and Vertex AI may end a call both ways).
        if (this.geminiStreaming === undefined && !Array.isArray(call["partialArgs"])) continue;
        if (this.geminiStreaming === undefined) return "a functionCall's partialArgs with no call streaming: another response in the Gemini stream";
        if (!more) this.geminiStreaming = undefined;
      }
    }
    return undefined;
  }

  /**
   * A Converse body that ended without `messageStop`, or a Gemini body without candidate 0's
   * `finishReason`, seen at the `finish` part the provider makes at the body's end (each provider
   * finishes such a body `other`, with no error part). One whose failure the provider already told
   * by an error part (an exception frame) is left as it is: one error part.
   */
  bodyUnfinished(part: Part): string | undefined {
    if (part.type === "error") this.errored = true;
    if (this.errored || part.type !== "finish") return undefined;
    if (this.converse && !this.converseFinished) return "the Converse body ended without messageStop (before its finish): the response was cut";
    if (this.gemini && !this.geminiFinished) return "the Gemini body ended without a finishReason (before its finish): the response was cut";
    return undefined;
  }

  /** A `response-metadata` part: the AI SDK's own sign of a response's start, for providers whose raw events this does not read. */
  metadata(part: Part): string | undefined {
    if (typeof part.id !== "string") return undefined;
    if (this.metadataId !== undefined && part.id !== this.metadataId) return `response-metadata: a second response (${part.id}) began in the stream of ${this.metadataId}`;
    this.metadataId = part.id;
    return undefined;
  }

  private responseOf(id: string | undefined, event: string): string | undefined {
    if (id === undefined) return undefined;
    if (this.responseId !== undefined && id !== this.responseId) return `${event} second_response: a second response (${id}) began in the stream of ${this.responseId}`;
    this.responseId = id;
    return undefined;
  }
}

/**
 * A language-model middleware (`wrapLanguageModel({ model, middleware: spliceGuard() })`) that
 * fails a model stream carrying a second response (AISDK-16): a proxy that sent the request again
 * after its upstream died may splice the new response into the same body, with its own start
 * (`response.created`, `message_start`) or headless, its items restarting at position 0. The AI
 * SDK's parsers take such a response in as more of the first, and execute its calls beside the
 * first response's: an identical call runs again under the next ordinal, a second payment.
 * The guard asks the provider for its raw events, stops the stream at the first sign, before
 * any part of the spliced response reaches the AI SDK, and ends it with a `stream_incomplete`
 * error (`StreamIncompleteError`, its `streamError` naming the event): `streamText` reports it
 * as its `error` part (and to `onError`) and ends the step with finish reason `"error"`; the
 * request is a failed attempt, not to be kept (AISDK-8) but sent again (AISDK-6). Raw parts
 * reach the app only when it asked for them (`includeRawChunks`). It reads the raw events of the
 * Responses API, the Messages API, Chat Completions, Bedrock's Converse API and Google's Gemini
 * API (`@ai-sdk/google`) and Gemini on Vertex AI (`@ai-sdk/google-vertex`, its streamed call
 * arguments too); of any other provider it sees only a second `response-metadata` id.
 * @example const model = wrapLanguageModel({ model: openai.responses("gpt-5"), middleware: [providerToolsGuard(), spliceGuard()] });
 */
export function spliceGuard(options: Record<string, never> = {}): LanguageModelMiddleware {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", `must be an object (spliceGuard takes no options yet), got ${describeValue(options)}`);
  for (const name of Object.keys(options)) throw new InvalidArgumentError(`options.${name}`, "is not an option of spliceGuard (it takes none)");
  return {
    specificationVersion: "v3",
    wrapStream: async ({ params, model }) => {
      const wantsRaw = params.includeRawChunks === true;
      // The raw events carry the positions and ids the parsed parts drop; asked for here, not by the app.
      const result = await model.doStream({ ...params, includeRawChunks: true });
      const watch = new SpliceWatch();
      const stream = result.stream.pipeThrough(
        new TransformStream<Part, Part>({
          transform(part, controller) {
            const sign =
              part.type === "raw" ? watch.raw(part.rawValue) : part.type === "response-metadata" ? watch.metadata(part) : (watch.unfinished(part) ?? watch.bodyUnfinished(part) ?? watch.repeatedCall(part));
            if (sign !== undefined) {
              // Ends here: nothing of the spliced response (its tool-call parts) reaches the AI SDK,
              // and the provider's body is cancelled. An error part, not an errored stream: the AI SDK
              // ends the step with finish reason "error" and tells the app's onError, as it does for
              // a provider's own in-stream error; an errored stream would skip onError and throw from fullStream.
              controller.enqueue({ type: "error", error: new StreamIncompleteError(watch.events, watch.chat ? "choice 0's finish_reason" : watch.converse ? "messageStop" : watch.gemini ? "finishReason" : "its finishing event", sign) });
              controller.terminate();
              return;
            }
            if (part.type === "raw" && !wantsRaw) return;
            controller.enqueue(part);
          },
        }),
      ) as typeof result.stream;
      return { ...result, stream };
    },
  };
}

/** The item id a provider put in a part's metadata (`@ai-sdk/openai`: `providerMetadata.openai.itemId`), or "". */
function itemIdOf(metadata: unknown): string {
  if (typeof metadata !== "object" || metadata === null) return "";
  for (const value of Object.values(metadata as Record<string, unknown>)) {
    const itemId = typeof value === "object" && value !== null ? (value as { itemId?: unknown }).itemId : undefined;
    if (typeof itemId === "string" && itemId !== "") return itemId;
  }
  return "";
}
