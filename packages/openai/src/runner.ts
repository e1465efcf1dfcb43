import type OpenAI from "openai";
import { InvalidArgumentError, describeValue, type JsonValue, type ProviderToolSchema, type StoredTurn } from "@dispatch-once/core";
import {
  TURN_RUNNER_OPTIONS,
  TurnRunner,
  checkKnownOptions,
  checkOptionValues,
  checkRunnerOptions,
  readStoredResult,
  type CallAnswer,
  type CommitShape,
  type StoredTurnView,
  type StreamProvider,
  type StreamStep,
  type TurnRunnerOptions,
} from "@dispatch-once/runner";
import { ResponsesTurnAccumulator } from "./accumulator.js";
import { checkContentParts, checkTools, isErrorOutput, parsedArguments } from "./openai-shared.js";

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/** A user message's content, as the Responses API takes it in an input message. */
export type UserContent = string | OpenAI.Responses.ResponseInputMessageContentList;

export interface ConversationRunnerOptions extends TurnRunnerOptions {
  /**
   * The `openai` SDK client whose Responses API streams every attempt.
   * @example new ConversationRunner({ client: new OpenAI(), dispatcher, store, model: "gpt-5", tools: registry.providerSchemas() })
   */
  client: OpenAI;
  /**
   * The Responses API's `model`, sent with every request.
   * @example new ConversationRunner({ client, dispatcher, store, model: "gpt-5", tools: registry.providerSchemas() })
   */
  model: string;
  /**
   * Core's provider schemas (`registry.providerSchemas()`), sent as function tools.
   * @example new ConversationRunner({ client, dispatcher, store, model, tools: registry.providerSchemas() })
   */
  tools: ProviderToolSchema[];
  /**
   * The Responses API's `instructions` (a system prompt), sent with every request.
   * @default none (no instructions are sent)
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, instructions: "You are a billing assistant. Confirm every payment before sending it." })
   */
  instructions?: string;
  /**
   * The Responses API's `max_output_tokens`; unset leaves the model's default.
   * @default none (`max_output_tokens` is not sent: the model's default)
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, maxOutputTokens: 4096 })
   */
  maxOutputTokens?: number;
  /**
   * Further Responses API parameters, sent as given with every request: `reasoning`, `include`,
   * `store`, `tool_choice`, `parallel_tool_calls`, `metadata`, `text`, ... Refused here, naming the
   * field: the ones the runner writes itself (`model`, `input`, `stream`, `tools`, `instructions`,
   * `max_output_tokens`: give them as the options of those names), and the ones that would make the
   * API add server-side state to the request (`previous_response_id`, `conversation`, a stored
   * `prompt` template, which may carry tools the API runs itself) or not stream it (`background`):
   * every request must be exactly the committed conversation (STREAM-14, STREAM-15). A
   * `tool_choice` naming anything but a function (a hosted tool: `mcp`, `code_interpreter`,
   * `web_search_preview`, ...) is refused too: the runner sends function tools only, and a tool the
   * API runs itself would run outside every ledger, again in each retried attempt (STREAM-19). A forcing
   * `tool_choice` goes with the message's first request only (see `resetToolChoice`).
   * @default none (only the runner's own fields are sent)
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, params: { reasoning: { effort: "low" }, store: false, include: ["reasoning.encrypted_content"] } })
   */
  params?: ConversationRunnerParams;
  /**
   * Whether a forcing `params.tool_choice` (`"required"`, a named function or other tool,
   * `allowed_tools` in mode `required`) applies to the message's first request only. The later
   * requests of the message carry its calls' outputs; forced there too, the model must call a tool
   * again after every output (a second payment, and one more each request, until `maxTurns`). So
   * they send `"auto"` instead (`allowed_tools` keeps its list in mode `auto`) (STREAM-18), as the
   * OpenAI Agents SDK's `reset_tool_choice` does. `false` sends the forcing value with every
   * request: only for a loop that ends by itself.
   * @default true
   * @example new ConversationRunner({ client, dispatcher, store, model, tools, params: { tool_choice: "required" }, resetToolChoice: false })
   */
  resetToolChoice?: boolean;
}

type ToolChoice = NonNullable<OpenAI.Responses.ResponseCreateParamsStreaming["tool_choice"]>;

/**
 * The tool choice of a request after the message's first (STREAM-18): `"required"` and a named
 * tool become `"auto"`, `allowed_tools` in mode `required` the same list in mode `auto`; `"auto"`,
 * `"none"` and none at all are sent as given.
 */
function followUpToolChoice(choice: ToolChoice | undefined): ToolChoice | undefined {
  if (choice === undefined || choice === "auto" || choice === "none") return choice;
  if (typeof choice === "object" && choice.type === "allowed_tools") return choice.mode === "required" ? { ...choice, mode: "auto" } : choice;
  return "auto";
}

/** Responses API parameters `params` may not carry, and why. */
const REFUSED_PARAMS: Record<string, string> = {
  model: "is written by the runner itself; give it as the runner's own option",
  input: "is written by the runner itself (the committed conversation); it is not an option",
  stream: "is written by the runner itself; it is not an option",
  tools: "is written by the runner itself; give it as the runner's own option",
  instructions: "is written by the runner itself; give it as the runner's own option",
  max_output_tokens: "is written by the runner itself; give it as the runner's maxOutputTokens",
  previous_response_id: "would make the API add a stored response to every request: each request must be exactly the committed conversation",
  conversation: "would make the API add a stored conversation to every request: each request must be exactly the committed conversation",
  background: "would make the response run in the background instead of streaming to the runner",
  // A stored prompt template adds its instructions, messages and tools, hosted ones included, which
  // the API runs itself in every attempt, with no ledger; its current version may change between attempts.
  prompt: "would make the API add a stored prompt (its instructions, messages and tools) to every request: each request must be exactly the committed conversation",
};

/** The Responses API parameters a runner's `params` may carry. */
export type ConversationRunnerParams = Omit<
  OpenAI.Responses.ResponseCreateParamsStreaming,
  "model" | "input" | "stream" | "tools" | "instructions" | "max_output_tokens" | "previous_response_id" | "conversation" | "background" | "prompt"
>;

function checkParams(params: unknown): void {
  if (params === undefined) return;
  if (params === null || typeof params !== "object" || Array.isArray(params)) {
    throw new InvalidArgumentError("options.params", `must be an object of Responses API parameters, got ${describeValue(params)}`);
  }
  for (const [field, why] of Object.entries(REFUSED_PARAMS)) {
    if (Object.prototype.hasOwnProperty.call(params, field)) throw new InvalidArgumentError(`options.params.${field}`, why);
  }
  checkToolChoice((params as { tool_choice?: unknown }).tool_choice);
}

/**
 * A tool choice names a mode, a function of `options.tools`, or an `allowed_tools` list of them
 * (STREAM-19). The runner sends function tools only, so any other type names a tool the request
 * does not carry, and a hosted one (a remote MCP server, a code interpreter, web search) is run by
 * the API itself inside the response, outside every ledger, once more in each retried attempt.
 */
function checkToolChoice(choice: unknown): void {
  if (choice === undefined || choice === null || typeof choice === "string") return;
  const named = (tool: unknown, where: string): void => {
    const type = typeof tool === "object" && tool !== null ? (tool as { type?: unknown }).type : undefined;
    if (type === "function") return;
    throw new InvalidArgumentError(
      "options.params.tool_choice",
      `names a tool of type ${JSON.stringify(type ?? null)}${where}, which no request carries: the runner sends options.tools as function tools only, and a tool the API runs itself (mcp, code_interpreter, web_search, ...) would run inside the response, outside every ledger, once more in each retried attempt of a cut stream`,
    );
  };
  if ((choice as { type?: unknown }).type === "allowed_tools") {
    const tools = (choice as { tools?: unknown }).tools;
    if (!Array.isArray(tools)) throw new InvalidArgumentError("options.params.tool_choice", `allowed_tools must list its tools in an array, got ${describeValue(tools)}`);
    tools.forEach((tool, i) => named(tool, ` (its tools[${i}])`));
    return;
  }
  named(choice, "");
}

const isObject = (item: JsonValue | undefined): item is { [key: string]: JsonValue } => typeof item === "object" && item !== null && !Array.isArray(item);

/**
 * A log entry as it is sent. A response's output items are one array; one that an earlier release
 * of this package committed holds an id-less `{ type: "message", role: "assistant", content: "…" }` right after a
 * reasoning item, which the API refuses (`Item 'rs_…' of type 'reasoning' was provided without its
 * required following item.`), and a failed turn commits nothing, so that conversation could never go
 * on. Such a response is sent without its reasoning items, which the API discards after their turn
 * anyway, and without its items' ids, which pair them with that reasoning; the stored log is not
 * changed. Every other entry is sent as it was committed.
 */
function sendable(entry: JsonValue): JsonValue[] {
  if (!Array.isArray(entry)) return [entry];
  const isReasoning = (item: JsonValue | undefined) => isObject(item) && item["type"] === "reasoning";
  const idlessMessage = (item: JsonValue | undefined) => isObject(item) && item["type"] === "message" && item["id"] === undefined && typeof item["content"] === "string";
  if (!entry.some((item, i) => isReasoning(item) && idlessMessage(entry[i + 1]))) return entry;
  return entry.filter((item) => !isReasoning(item)).map((item) => {
    if (!isObject(item) || item["id"] === undefined) return item;
    const { id: _id, ...rest } = item;
    return rest;
  });
}

/**
 * The Responses API as a `StreamProvider`. A function call is final at its
 * `response.output_item.done` (status completed), long before the response ends; only
 * `response.completed` finishes a response (STREAM-1). A clean end of the body without it,
 * an `error` event, `response.failed` and `response.incomplete` are failed streams: the SDK
 * yields the last three as ordinary events and raises nothing for any of them. The first three
 * are retried; `response.incomplete` is not (STREAM-13).
 *
 * The conversation is kept in the API's input-item shape, so the store's log is sent as is: a
 * turn commits its output items (messages and function calls, as one array) and one
 * `function_call_output` item per call (as another); `open` flattens the arrays.
 */
class ResponsesStream implements StreamProvider<ResponsesTurnAccumulator, StreamEvent, UserContent> {
  readonly finishEvent = "response.completed";
  constructor(private readonly options: ConversationRunnerOptions) {}

  createAccumulator(): ResponsesTurnAccumulator {
    return new ResponsesTurnAccumulator();
  }

  checkContent(content: UserContent): void {
    // The Responses API's input parts are input_text, input_image, input_file, ...
    checkContentParts(content, (type) => type.startsWith("input_"), "a Responses API input part type (input_text, input_image, input_file, ...)");
  }

  userMessage(content: UserContent): JsonValue {
    return { role: "user", content } as unknown as JsonValue;
  }

  async open(input: JsonValue[], { headers, signal, followUp }: { headers?: Record<string, string>; signal?: AbortSignal; followUp?: boolean }): Promise<AsyncIterable<StreamEvent>> {
    const { client, model, tools, instructions, maxOutputTokens, params, resetToolChoice } = this.options;
    // Forced after the first response too, the model would call again after each output (STREAM-18).
    const reset = followUp === true && resetToolChoice !== false && params?.tool_choice !== undefined && params.tool_choice !== null;
    return client.responses.create(
      {
        ...params,
        ...(reset ? { tool_choice: followUpToolChoice(params.tool_choice!)! } : {}),
        model,
        input: input.flatMap(sendable) as unknown as OpenAI.Responses.ResponseInput,
        ...(tools.length > 0 ? { tools: tools.map(functionTool) } : {}),
        ...(instructions !== undefined ? { instructions } : {}),
        ...(maxOutputTokens !== undefined ? { max_output_tokens: maxOutputTokens } : {}),
        stream: true,
      },
      // The runner aborts a stream that went idle past its bound (STREAM-16): the SDK frees the connection.
      { ...(headers !== undefined ? { headers } : {}), ...(signal !== undefined ? { signal } : {}) },
    );
  }

  apply(accumulator: ResponsesTurnAccumulator, event: StreamEvent): StreamStep {
    const complete = accumulator.apply(event);
    const step: StreamStep = complete !== undefined ? { complete } : {};
    if ((event.type === "response.output_text.delta" || event.type === "response.refusal.delta") && accumulator.terminal === undefined) {
      step.textDelta = { index: event.output_index, text: event.delta };
    }
    return step;
  }

  finished(accumulator: ResponsesTurnAccumulator): boolean {
    return accumulator.completed;
  }

  streamError(accumulator: ResponsesTurnAccumulator): string | undefined {
    const reported = accumulator.streamError;
    if (reported === undefined) return undefined;
    return `${reported.event}${reported.code !== null ? ` ${reported.code}` : ""}: ${reported.message}`;
  }

  // response.incomplete is the model stopping at its output limit (or a content filter): the same
  // input under the same limit stops at the same place, so it is not retried (STREAM-13).
  finalStop(accumulator: ResponsesTurnAccumulator): string | undefined {
    const reported = accumulator.streamError;
    return reported?.event === "response.incomplete" ? (reported.code ?? "incomplete") : undefined;
  }

  commitShape(accumulator: ResponsesTurnAccumulator, answers: CallAnswer[]): CommitShape {
    const outputs = answers.map(({ call, answer }) => ({
      type: "function_call_output" as const,
      call_id: call.callId,
      // The API has no error flag on an output: an error goes to the model as `{ error }`.
      output: answer.ok ? answer.resultJson : JSON.stringify({ error: answer.error }),
    }));
    const calls = accumulator.hasCalls;
    return {
      assistant: accumulator.output() as unknown as JsonValue,
      ...(outputs.length > 0 ? { toolResults: outputs as unknown as JsonValue } : {}),
      // The Responses API has no stop reason; this names why the turn ended in the same terms.
      stopReason: calls ? "function_call" : "completed",
      answers: !calls,
      text: accumulator.text(),
    };
  }

  readTurn(turn: StoredTurn): StoredTurnView {
    const items = Array.isArray(turn.assistant)
      ? (turn.assistant as { type?: string; content?: unknown; call_id?: string; name?: string; arguments?: unknown }[])
      : [];
    // Outputs are paired with calls by call_id in order: a server that repeats a call_id within
    // one response must not have every such call read back with the last one's result.
    const outputs = new Map<string, unknown[]>();
    if (Array.isArray(turn.toolResults)) {
      for (const item of turn.toolResults as { call_id?: string; output?: unknown }[]) {
        if (typeof item.call_id === "string") outputs.set(item.call_id, [...(outputs.get(item.call_id) ?? []), item.output]);
      }
    }
    return {
      text: items.flatMap((i) => (i.type === "message" ? [messageText(i.content)] : [])).join(""),
      calls: items
        .filter((i) => i.type === "function_call")
        .map((i) => {
          const output = outputs.get(i.call_id ?? "")?.shift();
          const input = parsedArguments(i.arguments);
          return {
            callId: i.call_id ?? "",
            name: i.name ?? "",
            ...(input !== undefined ? { input } : {}),
            ...readStoredResult(output, isErrorOutput(output, input)),
          };
        }),
    };
  }
}

/**
 * A committed message's text: its content string (a turn without reasoning), or its `output_text`
 * and `refusal` parts joined (the message item as delivered, beside a reasoning item).
 */
function messageText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return (content as { type?: unknown; text?: unknown; refusal?: unknown }[])
    .flatMap((p) => (p.type === "output_text" && typeof p.text === "string" ? [p.text] : p.type === "refusal" && typeof p.refusal === "string" ? [p.refusal] : []))
    .join("");
}

/** Core's tool schema as a Responses function tool; not strict, since a zod schema need not meet strict mode's rules. */
function functionTool(tool: ProviderToolSchema): OpenAI.Responses.FunctionTool {
  return {
    type: "function",
    name: tool.name,
    ...(tool.description !== undefined ? { description: tool.description } : {}),
    parameters: tool.input_schema,
    strict: false,
  };
}

/**
 * Runs conversations over the `openai` SDK's Responses API streaming with the shared runner
 * (`@dispatch-once/runner`), under the same rules as the Anthropic side: a turn lease per
 * conversation, each function call dispatched at its `response.output_item.done` (status
 * completed), a stream that ends without `response.completed` retried (the ledger answers the
 * re-emitted call, whatever its new `call_id`), a turn committed only at `response.completed`
 * with one `function_call_output` per call, and a failed-turn record when retries run out.
 *
 * @example
 * const runner = new ConversationRunner({ client: new OpenAI(), dispatcher, store, model: "gpt-5", tools: registry.providerSchemas() });
 * const { turns } = await runner.send("conv-1", { id: "msg-1", content: "pay acme" });
 */
export class ConversationRunner extends TurnRunner<ResponsesTurnAccumulator, StreamEvent, UserContent> {
  constructor(options: ConversationRunnerOptions) {
    checkRunnerOptions(options, ["client", "dispatcher", "store"]);
    checkKnownOptions(options, [...TURN_RUNNER_OPTIONS, ...PROVIDER_OPTIONS]);
    checkOptionValues(options, { model: "nonEmptyString", maxOutputTokens: "positiveInteger", instructions: "string", resetToolChoice: "boolean" });
    checkParams(options.params);
    if (options.model === undefined) throw new InvalidArgumentError("options.model", "is required");
    // Checked now: without it every send() fails the same way, reported as a retryable stream failure.
    if (typeof (options.client as { responses?: { create?: unknown } }).responses?.create !== "function") {
      throw new InvalidArgumentError("options.client", "must be an openai SDK client with the Responses API (new OpenAI(), openai >= 6)");
    }
    checkTools(options.tools);
    super(new ResponsesStream(options), options);
  }
}

const PROVIDER_OPTIONS: readonly (keyof ConversationRunnerOptions)[] = ["client", "model", "tools", "instructions", "maxOutputTokens", "params", "resetToolChoice"];

