// @dispatch-once/langgraph: what a LangGraph.js agent on @dispatch-once/core needs so that a tool
// call's effect happens once (spec §13.5, LANGGRAPH-1..7): a turn counter committed with the
// assistant message, a stop-reason check for the model's response, and a tools node that runs one
// message's calls in one dispatch context and never hands a re-sendable error to the model.
import { AIMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { RunnableConfig } from "@langchain/core/runnables";
import { Annotation } from "@langchain/langgraph";
import {
  InvalidArgumentError,
  describeValue,
  effectOf,
  isDispatchOnceError,
  retryableOf,
  type CallDispatcher,
  type DispatchOnceError,
  type DispatchOutcome,
  type DispatchOnceErrorCode,
  type JsonValue,
} from "@dispatch-once/core";
import { InvalidArgumentsJsonError, StreamIncompleteError } from "@dispatch-once/runner";

/**
 * The turn counter channel: the number of assistant messages committed on the thread (TURN-1).
 * Last write wins; only the agent node writes it, with its AIMessage in the same step
 * (`commitAssistantMessage`), so trimming or summarising `messages` never lowers it (LANGGRAPH-2).
 * Spread it into your state: `Annotation.Root({ ...MessagesAnnotation.spec, onceTurns })`.
 */
export const onceTurns = Annotation<number>({ reducer: (_previous, next) => next, default: () => 0 });

/** The state the helpers read: the messages channel and the turn counter. */
export interface OnceState {
  messages: BaseMessage[];
  onceTurns: number;
}

/**
 * Where LangChain's chat models put the reason a response ended, read exactly as they write it:
 * - `ChatAnthropic` (@langchain/anthropic 1.5): `additional_kwargs.stop_reason`, from the stream's
 *   `message_delta` (streaming) or the response body (not streaming, which also copies it to
 *   `response_metadata.stop_reason`). A stream cut before `message_delta` leaves it absent.
 * - `ChatOpenAI` Chat Completions (@langchain/openai 1.6): `response_metadata.finish_reason`, set
 *   only from a chunk whose `finish_reason` is not null.
 * - `ChatOpenAI` Responses API: `response_metadata.status`, set from `response.completed` or
 *   `response.incomplete` (with `incomplete_details.reason`); absent when the stream never got there.
 * - A message assembled by @langchain/core's stream-event protocol (LangGraph's `streamEvents` v3
 *   messages mode): `response_metadata.finish_reason`, absent without a `message-finish` event.
 * Returns undefined when none is present: the response did not finish (STREAM-1, STREAM-8).
 */
export function stopReasonOf(message: BaseMessage): string | undefined {
  const kwargs = (message.additional_kwargs ?? {}) as Record<string, unknown>;
  const metadata = (message.response_metadata ?? {}) as Record<string, unknown>;
  for (const value of [kwargs["stop_reason"], metadata["stop_reason"], metadata["finish_reason"]]) {
    if (typeof value === "string" && value !== "") return value;
  }
  if (metadata["status"] === "completed") return "completed";
  if (metadata["status"] === "incomplete") {
    const reason = (metadata["incomplete_details"] as { reason?: unknown } | null | undefined)?.reason;
    return `incomplete:${typeof reason === "string" ? reason : "unknown"}`;
  }
  return undefined;
}

/**
 * Stop reasons that end a response for good (STREAM-13): the same request ends the same way. A
 * Responses API `incomplete` is never committed, whatever its reason (STREAM-8). An output limit
 * counts only in a message with calls: LangChain hands a call the limit cut over with its arguments
 * parsed as far as they go, and the message cannot say whether the limit fell after the last call.
 */
const FINAL_STOPS = new Set(["refusal", "content_filter"]);
const LIMIT_STOPS = new Set(["max_tokens", "model_context_window_exceeded", "length"]);
const isFinalStop = (reason: string, hasCalls: boolean) => FINAL_STOPS.has(reason) || reason.startsWith("incomplete:") || (hasCalls && LIMIT_STOPS.has(reason));

export interface StopReasonOptions {
  /**
   * Read the stop reason of another provider's message (undefined: the response did not finish).
   * @default stopReasonOf (LangChain's Anthropic and OpenAI clients)
   * @example (message) => (message.response_metadata as { finishReason?: string }).finishReason // a client that writes finishReason
   */
  stopReasonOf?: (message: BaseMessage) => string | undefined;
}

/**
 * Throws `stream_incomplete` (core's catalogue; the class is @dispatch-once/runner's) unless the
 * model's message ended with a stop reason whose calls are whole (LANGGRAPH-3). Without a reason,
 * the stream was cut: ChatAnthropic hands it over as a complete AIMessage, its last call's arguments
 * parsed from what arrived, so running it pays the wrong amount, and the retry, with a new turn's
 * key, pays again. Thrown, the agent node's retry policy calls the model again. A reason that ends
 * the response for good (refusal, an output limit with calls) is thrown with `finalStop` set, which
 * `onceRetryOn` does not retry.
 */
export function assertStopReason(message: BaseMessage, options: StopReasonOptions = {}): string {
  const read = options.stopReasonOf ?? stopReasonOf;
  const reason: unknown = read(message);
  // The app's reader: "" is no reason, as the default reader's is (taken for one, a cut stream's
  // calls would run); anything but a string is its mistake, named, never a bare TypeError retried.
  if (reason !== undefined && typeof reason !== "string") {
    throw new InvalidArgumentError("options.stopReasonOf", `must return a stop reason (a string) or undefined, got ${describeValue(reason)}`);
  }
  if (reason === undefined || reason === "") {
    throw new StreamIncompleteError(contentBlocksOf(message), "a stop reason (the model's stream ended without message_stop, response.completed or finish_reason)");
  }
  const hasCalls = AIMessage.isInstance(message) && ((message.tool_calls?.length ?? 0) > 0 || (message.invalid_tool_calls?.length ?? 0) > 0);
  if (isFinalStop(reason, hasCalls)) {
    throw new StreamIncompleteError(contentBlocksOf(message), "a stop reason that lets its calls run", undefined, reason);
  }
  return reason;
}

function contentBlocksOf(message: BaseMessage): number {
  return Array.isArray(message.content) ? message.content.length : message.content === "" ? 0 : 1;
}

/**
 * The agent node's update: the model's message and the turn counter + 1, in the same step, so the
 * counter and the message are one checkpoint write (LANGGRAPH-2, TURN-1). Checks the stop reason
 * first (LANGGRAPH-3): a cut response is thrown, never committed.
 * `return commitAssistantMessage(state, await model.invoke(state.messages));`
 */
export function commitAssistantMessage(state: Pick<OnceState, "onceTurns">, message: AIMessage, options: StopReasonOptions = {}): { messages: AIMessage[]; onceTurns: number } {
  assertStopReason(message, options);
  return { messages: [message], onceTurns: (state.onceTurns ?? 0) + 1 };
}

/**
 * A retry policy's `retryOn` for both nodes: retries what a re-run can settle (`retryableOf(e) ===
 * "same_message"`: a released claim, a call in flight elsewhere, a cut stream), never a response
 * that ended for good (`finalStop`) nor an effect that needs a person (LANGGRAPH-5, 6); an error
 * that is not Dispatch-Once's as LangGraph's own default does (a model's 5xx retried; a 4xx, an
 * abort, an exhausted quota not).
 */
export function onceRetryOn(error: unknown): boolean {
  if (isDispatchOnceError(error)) {
    if (isDispatchOnceError(error, "stream_incomplete") && (error as { finalStop?: unknown }).finalStop !== undefined) return false;
    return retryableOf(error) === "same_message";
  }
  return foreignRetryOn(error);
}

/** What @langchain/langgraph 1.7's default `retryOn` never retries (it does not export it): a request refused as it is. */
const STATUS_NO_RETRY = new Set([400, 401, 402, 403, 404, 405, 406, 407, 409]);

/** LangGraph's default judgement of an error that is not Dispatch-Once's (a model's 5xx, a reset connection: retried). */
function foreignRetryOn(error: unknown): boolean {
  if (error === null || typeof error !== "object") return true;
  const e = error as { name?: unknown; message?: unknown; code?: unknown; status?: unknown; response?: { status?: unknown } | null; error?: { code?: unknown } | null };
  const message = typeof e.message === "string" ? e.message : "";
  if (message.startsWith("Cancel") || message.startsWith("AbortError") || e.name === "AbortError") return false;
  if (e.name === "GraphValueError" || e.name === "GraphInterrupt") return false;
  if (e.code === "ECONNABORTED" || e.error?.code === "insufficient_quota") return false;
  const status = Number(e.response?.status ?? e.status);
  return !STATUS_NO_RETRY.has(status);
}

export interface OnceToolsNodeOptions {
  /**
   * Core's `Dispatcher` (or any `CallDispatcher`) over the tools the model may call.
   * @example new Dispatcher({ tools: [sendPayment], ledger: createPostgresLedger({ pool }) })
   */
  dispatcher: CallDispatcher;
  /**
   * The turn index of the message whose calls run (the agent node committed `onceTurns + 1` with
   * that message). Give your own for another counter channel, never a count of `messages`.
   * @default (state) => state.onceTurns - 1
   * @example (state) => (state as unknown as { assistantTurns: number }).assistantTurns - 1
   */
  turnIndexOf?: (state: OnceState) => number;
  /**
   * Read the stop reason of another provider's message (undefined: never dispatched).
   * @default stopReasonOf (LangChain's Anthropic and OpenAI clients)
   * @example (message) => (message.response_metadata as { finishReason?: string }).finishReason // a client that writes finishReason
   */
  stopReasonOf?: (message: BaseMessage) => string | undefined;
}


/**
 * What the tools node puts in each ToolMessage's `artifact` (checkpointed with it, never sent to
 * the model): how the call was answered, so the app can tell its user from the outcomes (a payment
 * answered from the ledger on a re-run is `replayed`; `storedRequest` is what was first asked when
 * the call was re-worded outside its identity).
 */
export type OnceToolArtifact =
  | { dispatchOnce: { key: string; toolName: string; effect: DispatchOutcome["effect"]; ordinal: number; replayed: boolean; storedRequest?: JsonValue } }
  | { dispatchOnce: { toolName: string; refused: DispatchOnceErrorCode; effect: "no" } };

function artifactOf(outcome: DispatchOutcome): OnceToolArtifact {
  const { key, toolName, effect, ordinal, replayed, storedRequest } = outcome;
  return { dispatchOnce: { key, toolName, effect, ordinal, replayed, ...(storedRequest === undefined ? {} : { storedRequest }) } };
}

/**
 * What a run of the tools node had established of its message's calls when an error stopped it
 * (LANGGRAPH-6): read it from the thrown error with `onceToolsStopOf`. Nothing of the run is
 * committed (the checkpoint stays before the tools node), so this is where the app learns, with
 * the stop, that a payment earlier in the message was made.
 */
export interface OnceToolsStop {
  /** The ToolMessages of the calls answered before the stop, in the message's order (their `artifact` says each effect). */
  readonly answered: readonly ToolMessage[];
  /** The call whose error stopped the run. */
  readonly stoppedAt: { readonly callId: string; readonly toolName: string };
  /** The message's calls after it, and those whose arguments did not parse (`invalid_tool_calls`): not dispatched by this run. */
  readonly notRun: readonly { readonly callId: string; readonly toolName: string }[];
}

// Shared by every copy of the package, as core's error brand is (ERR-3).
const STOP: unique symbol = Symbol.for("dispatch-once.langgraph.tools-stop") as never;

/**
 * The calls a stopped run of the tools node had answered, from the error it threw (LANGGRAPH-6);
 * undefined for any other value.
 * @example
 * catch (error) { const stop = onceToolsStopOf(error); for (const m of stop?.answered ?? []) tellUser(m.artifact); }
 */
export function onceToolsStopOf(error: unknown): OnceToolsStop | undefined {
  if ((typeof error !== "object" && typeof error !== "function") || error === null) return undefined;
  try {
    return (error as { [STOP]?: OnceToolsStop })[STOP];
  } catch {
    return undefined;
  }
}

/** The error, carrying the stop (an error that cannot carry it, a frozen one or a primitive, is thrown as it is). */
function withStop(error: unknown, stop: OnceToolsStop): unknown {
  if ((typeof error === "object" || typeof error === "function") && error !== null) {
    try {
      Object.defineProperty(error, STOP, { value: stop, configurable: true });
    } catch {
      // Not extensible: the error alone is still the truth about the call that stopped the run.
    }
  }
  return error;
}

/** An error ToolMessage for a call not run whose effect is no (LANGGRAPH-7): the model may read why. */
function refusedMessage(callId: string, toolName: string, error: DispatchOnceError): ToolMessage {
  const artifact: OnceToolArtifact = { dispatchOnce: { toolName, refused: error.code, effect: "no" } };
  return new ToolMessage({ tool_call_id: callId, name: toolName, status: "error", content: `error ${error.code}: ${error.message}`, artifact });
}

/**
 * The tools node (LANGGRAPH-1, 4, 5, 6, 7): `(state, config) => { messages: ToolMessage[] }` for the
 * last AIMessage in `state.messages`. One `dispatcher.turn()` per run of the node, under the thread
 * id and the counter's turn index; the calls dispatched one at a time, in the message's order; each
 * outcome's `resultJson` as its ToolMessage. Re-runs (the retry policy, a resume after a crash or
 * an `interrupt()`) are answered by the ledger under the same keys.
 * - `retryableOf(e) === "same_message"` (claim_released, in_flight_elsewhere, ...): thrown to the
 *   node's retry policy, never told to the model (it would ask again under the next turn's key).
 * - `effectOf(e) === "no"` (tool_failed, tool_input_invalid, unknown_tool, ...): an error ToolMessage;
 *   so is each of the message's `invalid_tool_calls` (arguments that did not parse:
 *   invalid_arguments_json), never dispatched.
 * - anything that happened or may have happened and cannot be re-run (outcome_unknown): thrown as
 *   it is, a typed core error; `onceRetryOn` does not retry it, the run stops for a person and
 *   nothing of this run of the node is committed (the checkpoint stays before the tools node).
 */
export function createOnceToolsNode(options: OnceToolsNodeOptions): (state: OnceState, config: RunnableConfig) => Promise<{ messages: ToolMessage[] }> {
  if (options === null || typeof options !== "object") throw new InvalidArgumentError("options", "must be an object with a dispatcher");
  for (const name of Object.keys(options)) {
    if (!["dispatcher", "turnIndexOf", "stopReasonOf"].includes(name)) throw new InvalidArgumentError(`options.${name}`, "is not an option of createOnceToolsNode (its options: dispatcher, turnIndexOf, stopReasonOf)");
  }
  const { dispatcher } = options;
  if (dispatcher === null || typeof dispatcher !== "object" || typeof (dispatcher as { turn?: unknown }).turn !== "function") {
    throw new InvalidArgumentError("options.dispatcher", "must be a Dispatcher (an object with turn())");
  }
  for (const name of ["turnIndexOf", "stopReasonOf"] as const) {
    if (options[name] !== undefined && typeof options[name] !== "function") throw new InvalidArgumentError(`options.${name}`, "must be a function when given");
  }
  const turnIndexOf = options.turnIndexOf ?? ((state: OnceState) => state.onceTurns - 1);
  const stopOptions: StopReasonOptions = options.stopReasonOf ? { stopReasonOf: options.stopReasonOf } : {};

  return async function onceTools(state: OnceState, config: RunnableConfig): Promise<{ messages: ToolMessage[] }> {
    const threadId = config?.configurable?.["thread_id"] as unknown;
    if (typeof threadId !== "string" || threadId === "") {
      // Without the thread there is no conversation to key by: every run would be a new one.
      throw new InvalidArgumentError("config.configurable.thread_id", "the tools node needs the thread id (the conversation id of its calls' keys): invoke the graph with { configurable: { thread_id } }");
    }
    const last = state.messages?.at(-1);
    if (last === undefined || !AIMessage.isInstance(last)) {
      throw new InvalidArgumentError("state.messages", "the tools node runs the calls of the last message, which is not an AIMessage");
    }
    // A message committed without a finished response (an agent node without the check) is never run.
    assertStopReason(last, stopOptions);
    const turnIndex = turnIndexOf(state);
    if (!Number.isSafeInteger(turnIndex) || turnIndex < 0) {
      throw new InvalidArgumentError("state.onceTurns", `gives turn index ${String(turnIndex)}: the agent node must commit onceTurns + 1 with its message (commitAssistantMessage)`);
    }
    // One dispatch context for the message: identical calls get ordinals 0, 1, ... (TURN-4).
    const turn = dispatcher.turn({ conversationId: threadId, turnIndex });
    const messages: ToolMessage[] = [];
    const calls = last.tool_calls ?? [];
    for (const [i, call] of calls.entries()) {
      const callId = call.id ?? "";
      // In the message's order, one at a time: the ordinals follow it, not the order runs finish.
      try {
        const outcome = await turn.dispatch({ name: call.name, input: call.args, callId });
        messages.push(new ToolMessage({ tool_call_id: callId, name: call.name, content: outcome.resultJson, artifact: artifactOf(outcome) }));
      } catch (error) {
        // A re-run settles it, or it may have happened and nothing may re-run it: not the model's.
        // Thrown with what this run established of the message's other calls (LANGGRAPH-6): none
        // of it is committed, and a payment made before the stop must not go untold.
        if (!isDispatchOnceError(error) || retryableOf(error) === "same_message" || effectOf(error) !== "no") {
          throw withStop(error, {
            answered: [...messages],
            stoppedAt: { callId, toolName: call.name },
            // The calls after it, and those whose arguments did not parse (answered only after the loop).
            notRun: [...calls.slice(i + 1).map((c) => ({ callId: c.id ?? "", toolName: c.name })), ...(last.invalid_tool_calls ?? []).map((c) => ({ callId: c.id ?? "", toolName: c.name ?? "" }))],
          });
        }
        messages.push(refusedMessage(callId, call.name, error));
      }
    }
    // A call whose arguments did not parse (LangChain keeps it apart, in invalid_tool_calls) is
    // never dispatched, but still answered: the next request would be refused with a call unanswered.
    for (const call of last.invalid_tool_calls ?? []) {
      const name = call.name ?? "";
      messages.push(refusedMessage(call.id ?? "", name, new InvalidArgumentsJsonError(name, call.error ?? "its arguments did not parse")));
    }
    return { messages };
  };
}
