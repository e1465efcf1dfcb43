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
  /** The provider passed on an error part (an exception frame, a frame that did not decode): it told the failure itself. */
  errored = false;
  private converseStarted = false;
  /** Converse content block positions: opened by a `contentBlockStart` (a tool use) or a block's first delta (text, reasoning), closed by its `contentBlockStop`. */
  private readonly converseOpen = new Set<number>();
  private readonly converseClosed = new Set<number>();
  private responseId: string | undefined;
  private metadataId: string | undefined;
  private readonly positions = new Set<number>();

  /** What a raw event shows of another response, or `undefined`. */
  raw(value: unknown): string | undefined {
    this.events++;
    if (typeof value !== "object" || value === null) return undefined;
    const event = value as Record<string, unknown>;
    const type = event["type"];
    if (type === undefined) {
      const converse = this.converseEvent(event);
      if (converse !== null) return converse;
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
    } else if (name === "contentBlockDelta") {
      this.converseOpen.add(index);
    } else {
      this.converseOpen.delete(index);
      this.converseClosed.add(index);
    }
    return undefined;
  }

  /**
   * A Converse body that ended without `messageStop`, seen at the `finish` part the provider makes
   * at the body's end (it finishes such a body `other`, with no error part). One whose failure the
   * provider already told by an error part (an exception frame) is left as it is: one error part.
   */
  converseUnfinished(part: Part): string | undefined {
    if (part.type === "error") this.errored = true;
    if (!this.converse || this.converseFinished || this.errored || part.type !== "finish") return undefined;
    return "the Converse body ended without messageStop (before its finish): the response was cut";
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
 * Responses API, the Messages API, Chat Completions and Bedrock's Converse API; of any other
 * provider it sees only a second `response-metadata` id.
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
            const sign = part.type === "raw" ? watch.raw(part.rawValue) : part.type === "response-metadata" ? watch.metadata(part) : (watch.unfinished(part) ?? watch.converseUnfinished(part));
            if (sign !== undefined) {
              // Ends here: nothing of the spliced response (its tool-call parts) reaches the AI SDK,
              // and the provider's body is cancelled. An error part, not an errored stream: the AI SDK
              // ends the step with finish reason "error" and tells the app's onError, as it does for
              // a provider's own in-stream error; an errored stream would skip onError and throw from fullStream.
              controller.enqueue({ type: "error", error: new StreamIncompleteError(watch.events, watch.chat ? "choice 0's finish_reason" : watch.converse ? "messageStop" : "its finishing event", sign) });
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
