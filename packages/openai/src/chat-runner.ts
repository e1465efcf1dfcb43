import type OpenAI from "openai";
import { InvalidArgumentError, describeValue, type JsonValue, type ProviderToolSchema, type StoredTurn } from "@dispatch-once/core";
import {
  TURN_RUNNER_OPTIONS,
  TurnRunner,
  checkKnownOptions,
  checkOptionValues,
  checkRunnerOptions,
  errorsGivenBack,
  inStreamErrorBody,
  readStoredResult,
  type CallAnswer,
  type CommitShape,
  type StoredTurnView,
  type StreamProvider,
  type StreamStep,
  type TurnRunnerOptions,
} from "@dispatch-once/runner";
import { ChatCompletionsTurnAccumulator } from "./chat-accumulator.js";
import { checkContentParts, checkTools, isErrorOutput, parsedArguments } from "./openai-shared.js";

type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;

/** A user message's content, as Chat Completions takes it in a user message. */
export type ChatUserContent = string | OpenAI.Chat.Completions.ChatCompletionContentPart[];

/** The Chat Completions parameters a runner's `params` may carry. */
export type ChatCompletionsRunnerParams = Omit<
  OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming,
  "model" | "messages" | "stream" | "tools" | "max_completion_tokens" | "max_tokens" | "functions" | "function_call" | "web_search_options" | "audio"
>;

export interface ChatCompletionsRunnerOptions extends TurnRunnerOptions {
  /**
   * The `openai` SDK client whose Chat Completions API streams every attempt: OpenAI's, or any
   * OpenAI-compatible server's (`new OpenAI({ baseURL })`: Azure, vLLM, Groq, OpenRouter, Ollama, ...).
   * @example new ChatCompletionsRunner({ client: new OpenAI({ baseURL: "http://localhost:8000/v1" }), dispatcher, store, model: "qwen3", tools: registry.providerSchemas() })
   */
  client: OpenAI;
  /**
   * The `model`, sent with every request.
   * @example new ChatCompletionsRunner({ client, dispatcher, store, model: "gpt-4.1", tools: registry.providerSchemas() })
   */
  model: string;
  /**
   * Core's provider schemas (`registry.providerSchemas()`), sent as `{ type: "function", function: { name, description, parameters } }` tools.
   * @example new ChatCompletionsRunner({ client, dispatcher, store, model, tools: registry.providerSchemas() })
   */
  tools: ProviderToolSchema[];
  /**
   * A system prompt, sent as a leading `{ role: "system" }` message of every request; it is not
   * stored in the conversation.
   * @default none (no system message is sent)
   * @example new ChatCompletionsRunner({ client, dispatcher, store, model, tools, instructions: "You are a billing assistant. Confirm every payment before sending it." })
   */
  instructions?: string;
  /**
   * `max_completion_tokens`; unset leaves the model's default. A response that reaches it ends
   * with `finish_reason: "length"`: a failed turn, not retried (STREAM-13).
   * @default none (`max_completion_tokens` is not sent: the model's default)
   * @example new ChatCompletionsRunner({ client, dispatcher, store, model, tools, maxCompletionTokens: 4096 })
   */
  maxCompletionTokens?: number;
  /**
   * Further Chat Completions parameters, sent as given with every request: `temperature`,
   * `parallel_tool_calls`, `tool_choice`, `reasoning_effort`, `stream_options`, `metadata`, ...
   * Refused here, naming the field: the ones the runner writes itself (`model`, `messages`,
   * `stream`, `tools`, `max_completion_tokens`, and `max_tokens`, its older name: give them as the
   * options of those names), `n` other than 1 (several choices are several responses; the runner
   * commits one), the legacy `functions` / `function_call` (their calls stream outside `tool_calls`
   * and would never be dispatched), `web_search_options` (a search the API runs itself, outside
   * every ledger, once more in each retried attempt: STREAM-19) and `audio` (an audio answer has
   * no text to commit). A `tool_choice` naming anything but a function (`custom`) is refused too.
   * A forcing `tool_choice` goes with the message's first request only (see `resetToolChoice`).
   * The rest is sent as given, the same in a retried attempt: `store`/`metadata` keep a stored
   * completion per attempt that no later request reads; a server's own extension that runs a tool
   * itself (OpenRouter's `plugins`) is not refused and runs once per attempt, outside the ledger.
   * @default none (only the runner's own fields are sent)
   * @example new ChatCompletionsRunner({ client, dispatcher, store, model, tools, params: { temperature: 0, parallel_tool_calls: true, stream_options: { include_usage: true } } })
   */
  params?: ChatCompletionsRunnerParams;
  /**
   * Whether a forcing `params.tool_choice` (`"required"`, a named function, `allowed_tools` in mode
   * `required`) applies to the message's first request only. The later requests of the message
   * carry its calls' results; forced there too, the model must call again after every result (a
   * second payment, and one more each request, until `maxTurns`). So they send `"auto"` instead
   * (`allowed_tools` keeps its list in mode `auto`) (STREAM-18). `false` sends the forcing value
   * with every request: only for a loop that ends by itself.
   * @default true
   * @example new ChatCompletionsRunner({ client, dispatcher, store, model, tools, params: { tool_choice: "required" }, resetToolChoice: false })
   */
  resetToolChoice?: boolean;
}

type ToolChoice = OpenAI.Chat.Completions.ChatCompletionToolChoiceOption;

/** The tool choice of a request after the message's first (STREAM-18): forcing choices become `auto`. */
function followUpToolChoice(choice: ToolChoice): ToolChoice {
  if (choice === "auto" || choice === "none") return choice;
  if (typeof choice === "object" && choice.type === "allowed_tools") {
    return choice.allowed_tools.mode === "required" ? { ...choice, allowed_tools: { ...choice.allowed_tools, mode: "auto" } } : choice;
  }
  return "auto";
}

const WRITTEN = "is written by the runner itself; give it as the runner's own option";
/** Chat Completions parameters `params` may not carry, and why. */
const REFUSED_PARAMS: Record<string, string> = {
  model: WRITTEN,
  messages: "is written by the runner itself (the committed conversation); it is not an option",
  stream: "is written by the runner itself (every attempt streams); it is not an option",
  tools: WRITTEN,
  max_completion_tokens: "is written by the runner itself; give it as the runner's maxCompletionTokens",
  max_tokens: "is the older name of max_completion_tokens, which the runner writes itself; give it as the runner's maxCompletionTokens",
  functions: "is legacy function calling: its calls stream as function_call deltas, outside tool_calls, and would never be dispatched; give the tools as the runner's tools option",
  function_call: "is legacy function calling: its calls stream outside tool_calls and would never be dispatched; use tool_choice",
  web_search_options: "makes the API search the web itself inside the response, outside every ledger, once more in each retried attempt of a cut stream",
  audio: "asks for an audio answer, which has no text the runner could commit",
};

function checkParams(params: unknown): void {
  if (params === undefined) return;
  if (params === null || typeof params !== "object" || Array.isArray(params)) {
    throw new InvalidArgumentError("options.params", `must be an object of Chat Completions parameters, got ${describeValue(params)}`);
  }
  for (const [field, why] of Object.entries(REFUSED_PARAMS)) {
    if (Object.hasOwn(params, field)) throw new InvalidArgumentError(`options.params.${field}`, why);
  }
  const { n, tool_choice: choice } = params as { n?: unknown; tool_choice?: unknown };
  if (n !== undefined && n !== null && n !== 1) {
    throw new InvalidArgumentError("options.params.n", `must be 1 (or absent): several choices are several responses, and the runner commits one; got ${describeValue(n)}`);
  }
  checkToolChoice(choice);
}

/** A tool choice names a mode, a function, or an `allowed_tools` list of functions (STREAM-19): the runner sends function tools only. */
function checkToolChoice(choice: unknown): void {
  if (choice === undefined || choice === null || typeof choice === "string") return;
  const named = (tool: unknown, where: string): void => {
    const type = typeof tool === "object" && tool !== null ? (tool as { type?: unknown }).type : undefined;
    if (type === "function") return;
    throw new InvalidArgumentError("options.params.tool_choice", `names a tool of type ${JSON.stringify(type ?? null)}${where}, which no request carries: the runner sends options.tools as function tools only`);
  };
  if ((choice as { type?: unknown }).type === "allowed_tools") {
    const tools = (choice as { allowed_tools?: { tools?: unknown } }).allowed_tools?.tools;
    if (!Array.isArray(tools)) throw new InvalidArgumentError("options.params.tool_choice", `allowed_tools must list its tools in an array, got ${describeValue(tools)}`);
    tools.forEach((tool, i) => named(tool, ` (its allowed_tools.tools[${i}])`));
    return;
  }
  named(choice, "");
}

/** A chunk carrying `error`, which the SDK threw as an in-stream `APIError` whose body is that `error` (STREAM-12). */
function errorChunkOf(thrown: unknown): Chunk | undefined {
  const error = inStreamErrorBody(thrown);
  return error !== undefined ? ({ error } as unknown as Chunk) : undefined;
}

/** The content part types a Chat Completions user message takes. */
const USER_PART_TYPES = new Set(["text", "image_url", "input_audio", "file"]);

/**
 * Chat Completions as a `StreamProvider`. A call is final at the first fragment of a higher index
 * (its arguments a whole JSON object by then) or at choice 0's `finish_reason`; only that `finish_reason` finishes the response (STREAM-1,
 * STREAM-20). The conversation is kept in the API's message shape, so the store's log is sent as
 * is: a turn commits the assistant message (its text and `tool_calls`) and one `tool` message per
 * call (as one array); `open` flattens the arrays.
 */
class ChatCompletionsStream implements StreamProvider<ChatCompletionsTurnAccumulator, Chunk, ChatUserContent> {
  readonly finishEvent = "finish_reason";
  constructor(private readonly options: ChatCompletionsRunnerOptions) {}

  createAccumulator(): ChatCompletionsTurnAccumulator {
    return new ChatCompletionsTurnAccumulator();
  }

  checkContent(content: ChatUserContent): void {
    checkContentParts(content, (type) => USER_PART_TYPES.has(type), "a Chat Completions content part type (text, image_url, input_audio, file)");
  }

  userMessage(content: ChatUserContent): JsonValue {
    return { role: "user", content } as unknown as JsonValue;
  }

  async open(input: JsonValue[], { headers, signal, followUp }: { headers?: Record<string, string>; signal?: AbortSignal; followUp?: boolean }): Promise<AsyncIterable<Chunk>> {
    const { client, model, tools, instructions, maxCompletionTokens, params, resetToolChoice } = this.options;
    // Forced after the first response too, the model would call again after each result (STREAM-18).
    const reset = followUp === true && resetToolChoice !== false && params?.tool_choice !== undefined;
    const messages = input.flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as unknown as OpenAI.Chat.Completions.ChatCompletionMessageParam[];
    const stream = await client.chat.completions.create(
      {
        ...params,
        ...(reset ? { tool_choice: followUpToolChoice(params.tool_choice!) } : {}),
        model,
        messages: instructions !== undefined ? [{ role: "system", content: instructions }, ...messages] : messages,
        ...(tools.length > 0 ? { tools: tools.map(functionTool) } : {}),
        ...(maxCompletionTokens !== undefined ? { max_completion_tokens: maxCompletionTokens } : {}),
        stream: true,
      },
      // The runner aborts a stream that went idle past its bound (STREAM-16): the SDK frees the connection.
      { ...(headers !== undefined ? { headers } : {}), ...(signal !== undefined ? { signal } : {}) },
    );
    return errorsGivenBack(stream, errorChunkOf);
  }

  apply(accumulator: ChatCompletionsTurnAccumulator, chunk: Chunk): StreamStep {
    const [complete, ...more] = accumulator.apply(chunk);
    const step: StreamStep = {};
    if (complete !== undefined) step.complete = complete;
    if (more.length > 0) step.completeMore = more;
    if (accumulator.lastText !== "") step.textDelta = { index: 0, text: accumulator.lastText };
    return step;
  }

  finished(accumulator: ChatCompletionsTurnAccumulator): boolean {
    return accumulator.completed;
  }

  streamError(accumulator: ChatCompletionsTurnAccumulator): string | undefined {
    const reported = accumulator.streamError;
    return reported === undefined ? undefined : `${reported.event} ${reported.code}: ${reported.message}`;
  }

  // length and content_filter are the model stopping at its limit or a filter: the same request
  // stops at the same place, so it is not retried (STREAM-13).
  finalStop(accumulator: ChatCompletionsTurnAccumulator): string | undefined {
    return accumulator.finalStop;
  }

  commitShape(accumulator: ChatCompletionsTurnAccumulator, answers: CallAnswer[]): CommitShape {
    const toolCalls = accumulator.toolCalls();
    const text = accumulator.text();
    // The API takes a null content beside tool_calls; a refusal goes back as the model said it.
    // Reasoning goes back beside calls only: DeepSeek refuses the follow-up without it there, and
    // its older reasoner refused it anywhere (it made no calls).
    const assistant = {
      role: "assistant",
      content: accumulator.content === "" && toolCalls.length > 0 ? null : accumulator.content,
      ...(accumulator.reasoningContent !== "" && toolCalls.length > 0 ? { reasoning_content: accumulator.reasoningContent } : {}),
      ...(accumulator.refusal !== "" ? { refusal: accumulator.refusal } : {}),
      ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
    };
    const results = answers.map(({ call, answer }) => ({
      role: "tool" as const,
      tool_call_id: call.callId,
      // The API has no error flag on a tool message: an error goes to the model as `{ error }`, as on the Responses side.
      content: answer.ok ? answer.resultJson : JSON.stringify({ error: answer.error }),
    }));
    return {
      assistant: assistant as unknown as JsonValue,
      ...(results.length > 0 ? { toolResults: results as unknown as JsonValue } : {}),
      stopReason: accumulator.finishReason ?? null,
      answers: toolCalls.length === 0,
      text,
    };
  }

  readTurn(turn: StoredTurn): StoredTurnView {
    const message = (typeof turn.assistant === "object" && turn.assistant !== null && !Array.isArray(turn.assistant) ? turn.assistant : {}) as {
      content?: unknown;
      refusal?: unknown;
      tool_calls?: { id?: string; function?: { name?: string; arguments?: unknown } }[];
    };
    // Results are paired with calls by tool_call_id in order: a server that repeats an id within
    // one response must not have every such call read back with the last one's result.
    const results = new Map<string, unknown[]>();
    if (Array.isArray(turn.toolResults)) {
      for (const m of turn.toolResults as { tool_call_id?: string; content?: unknown }[]) {
        if (typeof m.tool_call_id === "string") results.set(m.tool_call_id, [...(results.get(m.tool_call_id) ?? []), m.content]);
      }
    }
    return {
      text: contentText(message.content) + (typeof message.refusal === "string" ? message.refusal : ""),
      calls: (Array.isArray(message.tool_calls) ? message.tool_calls : []).map((c) => {
        const result = results.get(c.id ?? "")?.shift();
        const input = parsedArguments(c.function?.arguments);
        return { callId: c.id ?? "", name: c.function?.name ?? "", ...(input !== undefined ? { input } : {}), ...readStoredResult(result, isErrorOutput(result, input)) };
      }),
    };
  }
}

/** A committed message's text: its content string, or its text parts joined. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return (content as { type?: unknown; text?: unknown }[]).flatMap((p) => (p.type === "text" && typeof p.text === "string" ? [p.text] : [])).join("");
}



/** Core's tool schema as a Chat Completions function tool; not strict, since a zod schema need not meet strict mode's rules. */
function functionTool(tool: ProviderToolSchema): OpenAI.Chat.Completions.ChatCompletionFunctionTool {
  return {
    type: "function",
    function: { name: tool.name, ...(tool.description !== undefined ? { description: tool.description } : {}), parameters: tool.input_schema as Record<string, unknown>, strict: false },
  };
}

/**
 * Runs conversations over the `openai` SDK's Chat Completions streaming (OpenAI, or any
 * OpenAI-compatible server) with the shared runner (`@dispatch-once/runner`), under the same rules
 * as the Responses side: a turn lease per conversation, each call dispatched once its arguments are
 * final (the next index's first fragment, or `finish_reason`), a stream that ends without choice
 * 0's `finish_reason` retried (the ledger answers the re-emitted call, whatever its new id), a turn
 * committed only at that `finish_reason` with one `tool` message per call, and a failed-turn record
 * when retries run out or the response stopped for good (`length`, `content_filter`).
 *
 * @example
 * const runner = new ChatCompletionsRunner({ client: new OpenAI(), dispatcher, store, model: "gpt-4.1", tools: registry.providerSchemas() });
 * const { turns } = await runner.send("conv-1", { id: "msg-1", content: "pay acme" });
 */
export class ChatCompletionsRunner extends TurnRunner<ChatCompletionsTurnAccumulator, Chunk, ChatUserContent> {
  constructor(options: ChatCompletionsRunnerOptions) {
    checkRunnerOptions(options, ["client", "dispatcher", "store"]);
    checkKnownOptions(options, [...TURN_RUNNER_OPTIONS, ...PROVIDER_OPTIONS]);
    checkOptionValues(options, { model: "nonEmptyString", maxCompletionTokens: "positiveInteger", instructions: "string", resetToolChoice: "boolean" });
    checkParams(options.params);
    if (options.model === undefined) throw new InvalidArgumentError("options.model", "is required");
    // Checked now: without it every send() fails the same way, reported as a retryable stream failure.
    if (typeof (options.client as { chat?: { completions?: { create?: unknown } } }).chat?.completions?.create !== "function") {
      throw new InvalidArgumentError("options.client", "must be an openai SDK client with the Chat Completions API (new OpenAI(), openai >= 6)");
    }
    checkTools(options.tools);
    super(new ChatCompletionsStream(options), options);
  }
}

const PROVIDER_OPTIONS: readonly (keyof ChatCompletionsRunnerOptions)[] = ["client", "model", "tools", "instructions", "maxCompletionTokens", "params", "resetToolChoice"];

