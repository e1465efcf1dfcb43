import type Anthropic from "@anthropic-ai/sdk";
import { InvalidArgumentError, describeValue, type JsonValue, type ProviderToolSchema, type StoredTurn } from "@dispatch-once/core";
import {
  TURN_RUNNER_OPTIONS,
  TurnRunner,
  checkKnownOptions,
  checkOptionValues,
  checkRunnerOptions,
  checkUserContent,
  errorsGivenBack,
  inStreamErrorBody,
  type CallAnswer,
  type CommitShape,
  type RunnerEvent as SharedRunnerEvent,
  type StoredTurnView,
  type StreamProvider,
  type StreamStep,
  type TurnRunnerOptions,
  readStoredResult,
} from "@dispatch-once/runner";
import { TurnAccumulator } from "./accumulator.js";
import { checkProviderRunParams, checkProviderTool, checkProviderToolsPolicy, type ProviderToolsPolicy } from "./provider-tools.js";

export type UserContent = string | Anthropic.Messages.ContentBlockParam[];
type RawEvent = Anthropic.Messages.RawMessageStreamEvent;

/** The runner's events (defined by `@dispatch-once/runner`); every type is listed below. */
export type RunnerEvent = SharedRunnerEvent;
/**
 * Every event type, for a reader and for this package's README test: attempt_started,
 * text_delta (text as it streams; a UI drops it on attempt_discarded), call_complete,
 * call_resolved, call_abandoned, stream_failed, call_unresolved, attempt_discarded,
 * retry_scheduled, turn_committed, turn_failed, attempt_superseded, resumed_turn_recorded.
 */
type ListedEvent =
  | { type: "attempt_started" }
  | { type: "text_delta" }
  | { type: "call_complete" }
  | { type: "call_resolved" }
  | { type: "call_abandoned" }
  | { type: "stream_failed" }
  | { type: "call_unresolved" }
  | { type: "attempt_discarded" }
  | { type: "retry_scheduled" }
  | { type: "turn_committed" }
  | { type: "turn_failed" }
  | { type: "attempt_superseded" }
  | { type: "resumed_turn_recorded" };
// Fails to compile when the shared runner gains an event type the list above (and so the README) misses.
const everyEventListed: [Exclude<RunnerEvent["type"], ListedEvent["type"]>] extends [never] ? true : false = true;
void everyEventListed;

/**
 * What the runner needs of a client: the Messages API's `messages.create`. `Anthropic` has it, and
 * so do the platforms' clients built on the same `@anthropic-ai/sdk` (`AnthropicBedrock` from
 * `@anthropic-ai/bedrock-sdk`, `AnthropicVertex` from `@anthropic-ai/vertex-sdk`), which lack
 * other resources of `Anthropic` (`models`, `files`, ...) the runner never uses.
 */
export interface MessagesClient {
  messages: Pick<Anthropic["messages"], "create">;
}

export interface ConversationRunnerOptions extends TurnRunnerOptions {
  /**
   * The client whose Messages API streams every attempt: `new Anthropic()`, or Claude on a cloud
   * platform through `new AnthropicBedrock()` or `new AnthropicVertex()` (their SDKs over the same
   * `@anthropic-ai/sdk`).
   * @example new ConversationRunner({ client: new Anthropic(), dispatcher, store, model: "claude-sonnet-5-5", tools: registry.providerSchemas() })
   */
  client: MessagesClient;
  /**
   * The Messages API's `model`, sent with every request.
   * @example new ConversationRunner({ client, dispatcher, store, model: "claude-sonnet-5-5", tools: registry.providerSchemas() })
   */
  model: string;
  /**
   * Core's provider schemas (`registry.providerSchemas()`), sent as the request's `tools` (left
   * out of the request when empty).
   * @example new ConversationRunner({ client, dispatcher, store, model, tools: registry.providerSchemas() })
   */
  tools: ProviderToolSchema[];
  /**
   * The Messages API's `max_tokens`, sent with every request.
   * @default 1024
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, maxTokens: 4096 })
   */
  maxTokens?: number;
  /**
   * The Messages API's `system` prompt, sent with every request.
   * @default none (no system prompt is sent)
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, system: "You are a billing assistant. Confirm every payment before sending it." })
   */
  system?: string;
  /**
   * Further Messages API parameters, sent as given with every request: `thinking`, `stop_sequences`,
   * `tool_choice`, `metadata`, `output_config`, ... The fields the runner writes itself (`model`,
   * `messages`, `stream`, `tools`, `system`, `max_tokens`) are refused here; give them as the
   * options of those names. A message thread (the beta API's `thread`) is refused too: every request
   * is the committed conversation, never one the API keeps (STREAM-15). With `thinking`, each committed turn keeps the response's thinking
   * blocks as the stream delivered them (STREAM-15), and `maxTokens` must exceed its budget. A
   * forcing `tool_choice` goes with the message's first request only (see `resetToolChoice`).
   * @default none (only the runner's own fields are sent)
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, maxTokens: 16_000, params: { thinking: { type: "enabled", budget_tokens: 10_000 } } })
   */
  params?: ConversationRunnerParams;
  /**
   * Whether a forcing `params.tool_choice` (`{ type: "any" }`, `{ type: "tool", name }`) applies to
   * the message's first request only. The later requests of the message carry its calls' results;
   * forced there too, the model must call a tool again after every result (a second payment, and
   * one more each request, until `maxTurns`). So they send `{ type: "auto" }` instead, keeping
   * `disable_parallel_tool_use` (STREAM-18), as the OpenAI Agents SDK's `reset_tool_choice` does.
   * `false` sends the forcing value with every request: only for a loop that ends by itself.
   * @default true
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, params: { tool_choice: { type: "tool", name: "send_payment" } }, resetToolChoice: false })
   */
  resetToolChoice?: boolean;
  /**
   * Which tools the Messages API runs itself (server tools) `tools` may carry (STREAM-19). The API
   * runs them inside the response, outside every ledger, and again in each retried attempt of a
   * cut stream. `"allow-reads"` lets the ones that only read through (`web_search_*`,
   * `web_fetch_*`, `tool_search_tool_*`): each attempt's runs are billed, and a committed turn
   * keeps the response's text, not their result blocks. Code execution, an MCP connector toolset
   * and any type this version does not know are refused under either value, as are
   * `params.mcp_servers` and `params.container`. Anthropic-defined tools the application runs
   * (bash, text editor, memory, computer use) are not server tools: they are sent either way.
   * @default "refuse"
   * @example new ConversationRunner({ client, dispatcher, store, model, tools: [...registry.providerSchemas(), { type: "web_search_20250305", name: "web_search" }], providerTools: "allow-reads" })
   */
  providerTools?: ProviderToolsPolicy;
}

/** The Messages API parameters the runner writes itself, which `params` may not carry. */
const RUNNER_REQUEST_FIELDS = ["model", "messages", "stream", "tools", "system", "max_tokens"] as const;

/**
 * The Messages API parameters a runner's `params` may carry: all but the runner's own and
 * `container` (with `mcp_servers`, which only the beta API's types name: STREAM-19).
 */
export type ConversationRunnerParams = Omit<Anthropic.Messages.MessageCreateParamsStreaming, (typeof RUNNER_REQUEST_FIELDS)[number] | "container">;

/** The options of this stream side, beside the shared runner's (TURN_RUNNER_OPTIONS). */
const PROVIDER_OPTIONS: readonly (keyof ConversationRunnerOptions)[] = ["client", "model", "tools", "maxTokens", "system", "params", "resetToolChoice", "providerTools"];

/**
 * The tool choice of a request after the message's first (STREAM-18): a forcing one (`any`, `tool`)
 * becomes `auto`, with its `disable_parallel_tool_use`; `auto`, `none` and none at all are sent as given.
 */
function followUpToolChoice(choice: Anthropic.Messages.ToolChoice | undefined): Anthropic.Messages.ToolChoice | undefined {
  if (choice === undefined || (choice.type !== "any" && choice.type !== "tool")) return choice;
  return { type: "auto", ...(choice.disable_parallel_tool_use !== undefined ? { disable_parallel_tool_use: choice.disable_parallel_tool_use } : {}) };
}

function checkParams(params: unknown): void {
  if (params === undefined) return;
  if (params === null || typeof params !== "object" || Array.isArray(params)) {
    throw new InvalidArgumentError("options.params", `must be an object of Messages API parameters, got ${describeValue(params)}`);
  }
  for (const field of RUNNER_REQUEST_FIELDS) {
    if (Object.prototype.hasOwnProperty.call(params, field)) {
      throw new InvalidArgumentError(`options.params.${field}`, `is written by the runner itself; ${field === "messages" || field === "stream" ? "it is not an option" : "give it as the runner's own option"}`);
    }
  }
  // STREAM-15: the request is the committed conversation and nothing else. A message thread (the
  // beta API's `thread`, in no type of this runner's params, so only an untyped caller gets here)
  // makes the API add the conversation it holds, which may hold the whole reply of a stream cut
  // before the runner saw it end (the server keeps all of a reply or none of it).
  const thread = (params as { thread?: unknown }).thread;
  if (thread !== undefined && thread !== null) {
    throw new InvalidArgumentError(
      "options.params.thread",
      "would make the API keep the conversation and add it to each request (a message thread): every request must be the committed conversation, which the runner sends whole (STREAM-15)",
    );
  }
  checkProviderRunParams(params, (name) => `options.params.${name}`);
}

/**
 * The Messages API as a `StreamProvider`: a call is final at its `content_block_stop`, only
 * `message_stop` finishes a response (STREAM-1), and a turn commits the assistant message
 * with one user message of `tool_result` blocks.
 */
class MessagesStream implements StreamProvider<TurnAccumulator, RawEvent, UserContent> {
  readonly finishEvent = "message_stop";
  constructor(private readonly options: ConversationRunnerOptions) {}

  createAccumulator(): TurnAccumulator {
    return new TurnAccumulator();
  }

  checkContent(content: UserContent): void {
    checkUserContent(content);
  }

  userMessage(content: UserContent): JsonValue {
    return { role: "user", content } as unknown as JsonValue;
  }

  async open(input: JsonValue[], { headers, signal, followUp }: { headers?: Record<string, string>; signal?: AbortSignal; followUp?: boolean }): Promise<AsyncIterable<RawEvent>> {
    const { client, model, tools, system, maxTokens, params, resetToolChoice } = this.options;
    // Forced after the first response too, the model would call again after each result (STREAM-18).
    const reset = followUp === true && resetToolChoice !== false && params?.tool_choice !== undefined;
    const stream = await client.messages.create(
      {
        ...params,
        ...(reset ? { tool_choice: followUpToolChoice(params.tool_choice)! } : {}),
        model,
        max_tokens: maxTokens ?? 1024,
        messages: input as unknown as Anthropic.Messages.MessageParam[],
        ...(tools.length > 0 ? { tools: tools as Anthropic.Messages.ToolUnion[] } : {}),
        ...(system !== undefined ? { system } : {}),
        stream: true,
      },
      // The runner aborts a stream that went idle past its bound (STREAM-16): the SDK frees the connection.
      { ...(headers !== undefined ? { headers } : {}), ...(signal !== undefined ? { signal } : {}) },
    );
    return errorsGivenBack(stream as AsyncIterable<RawEvent>, errorEventOf);
  }

  apply(accumulator: TurnAccumulator, event: RawEvent): StreamStep {
    // Text after message_stop, or of a second message, is no part of this response's answer.
    const belongs = !accumulator.messageStopped && accumulator.secondMessage === undefined;
    const complete = accumulator.apply(event);
    const step: StreamStep = complete !== undefined ? { complete } : {};
    if (belongs && event.type === "content_block_delta" && event.delta.type === "text_delta") step.textDelta = { index: event.index, text: event.delta.text };
    return step;
  }

  finished(accumulator: TurnAccumulator): boolean {
    return accumulator.messageStopped && accumulator.openAtStop === undefined && accumulator.endedForGood === undefined;
  }

  streamError(accumulator: TurnAccumulator): string | undefined {
    return accumulator.openAtStop ?? accumulator.endedForGood ?? accumulator.secondMessage ?? accumulator.providerError;
  }

  // A refusal, or a call cut by the output limit: the same request ends the same way (STREAM-13).
  finalStop(accumulator: TurnAccumulator): string | undefined {
    return accumulator.endedForGood !== undefined ? (accumulator.stopReason ?? "max_tokens") : undefined;
  }

  commitShape(accumulator: TurnAccumulator, answers: CallAnswer[]): CommitShape {
    const content = accumulator.content();
    const toolResults: Anthropic.Messages.ToolResultBlockParam[] = answers.map(({ call, answer }) =>
      answer.ok
        ? { type: "tool_result", tool_use_id: call.callId, content: answer.resultJson }
        : { type: "tool_result", tool_use_id: call.callId, content: JSON.stringify({ error: answer.error }), is_error: true },
    );
    const { stopReason } = accumulator;
    return {
      assistant: { role: "assistant", content } as unknown as JsonValue,
      ...(toolResults.length > 0 ? { toolResults: { role: "user", content: toolResults } as unknown as JsonValue } : {}),
      stopReason,
      answers: stopReason !== "tool_use",
      text: content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join(""),
    };
  }

  readTurn(turn: StoredTurn): StoredTurnView {
    const assistant = turn.assistant as { content?: unknown };
    const blocks = Array.isArray(assistant.content)
      ? (assistant.content as { type: string; text?: string; id?: string; name?: string; input?: unknown }[])
      : [];
    const results = new Map<string, { content?: unknown; is_error?: boolean }>();
    const resultBlocks = (turn.toolResults as { content?: unknown } | undefined)?.content;
    if (Array.isArray(resultBlocks)) {
      for (const block of resultBlocks as { tool_use_id?: string; content?: unknown; is_error?: boolean }[]) {
        if (typeof block.tool_use_id === "string") results.set(block.tool_use_id, block);
      }
    }
    return {
      text: blocks.flatMap((b) => (b.type === "text" && typeof b.text === "string" ? [b.text] : [])).join(""),
      calls: blocks
        .filter((b) => b.type === "tool_use")
        .map((b) => {
          const found = results.get(b.id ?? "");
          return {
            callId: b.id ?? "",
            name: b.name ?? "",
            ...(b.input !== undefined ? { input: b.input } : {}),
            ...readStoredResult(found?.content, found?.is_error === true),
          };
        }),
    };
  }
}

/**
 * Each tool must be a Messages API tool: a custom tool's schema ({ name, input_schema }, from
 * registry.providerSchemas()) or a server tool ({ type, name }). A tool definition or anything
 * else was sent as it is, and the API refused every request of every conversation (400).
 */
function checkTools(tools: unknown, policy: ProviderToolsPolicy): void {
  if (!Array.isArray(tools)) throw new InvalidArgumentError("options.tools", "must be an array of provider tool schemas (registry.providerSchemas())");
  tools.forEach((tool: unknown, i) => {
    const t = tool as { name?: unknown; input_schema?: unknown; type?: unknown } | null;
    const named = typeof t === "object" && t !== null && typeof t.name === "string" && t.name !== "";
    if (!named || ((typeof t.input_schema !== "object" || t.input_schema === null) && typeof t.type !== "string")) {
      throw new InvalidArgumentError(
        `options.tools[${i}]`,
        `must be a Messages API tool ({ name, input_schema }, from registry.providerSchemas(), or a server tool { type, name }), got ${describeValue(tool)}`,
      );
    }
    checkProviderTool(tool, `options.tools[${i}]`, policy);
  });
}

/**
 * Runs conversations over the real SDK with the shared runner (`@dispatch-once/runner`): one
 * turn in flight per conversation (a turn lease in the store), each message answered in
 * arrival order, each tool call dispatched the moment its content_block_stop arrives, failed
 * streams retried, and a turn committed only when the stream established it (message_stop
 * seen, every call resolved) (RECORD-3).
 */
export class ConversationRunner extends TurnRunner<TurnAccumulator, RawEvent, UserContent> {
  constructor(options: ConversationRunnerOptions) {
    checkRunnerOptions(options, ["client", "dispatcher", "store"]);
    // Every request goes through client.messages.create: anything else would fail the user's
    // message for good at its first send(), with a bare TypeError as the record's error (ERR-1).
    if (typeof (options.client as { messages?: { create?: unknown } }).messages?.create !== "function") {
      throw new InvalidArgumentError("options.client", "must be an Anthropic client (new Anthropic()): its messages.create is not a function");
    }
    // A misspelt option (systemPrompt for system) is refused, never silently left unsent (ERR-1).
    checkKnownOptions(options, [...TURN_RUNNER_OPTIONS, ...PROVIDER_OPTIONS]);
    checkOptionValues(options, { model: "nonEmptyString", maxTokens: "positiveInteger", system: "string", resetToolChoice: "boolean" });
    checkParams(options.params);
    if (options.model === undefined) throw new InvalidArgumentError("options.model", "is required");
    checkTools(options.tools, checkProviderToolsPolicy(options.providerTools, "options.providerTools"));
    super(new MessagesStream(options), options);
  }
}

/** The `error` event an in-stream `APIError` was thrown for: its body is the event (`{ type: "error", error: { type, message } }`). */
function errorEventOf(thrown: unknown): RawEvent | undefined {
  const body = inStreamErrorBody(thrown);
  return body?.type === "error" && typeof body.error === "object" && body.error !== null ? ({ type: "error", error: body.error } as unknown as RawEvent) : undefined;
}
