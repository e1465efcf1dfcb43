import { InvalidArgumentError, describeValue, type JsonValue, type StoredError, type StoredTurn } from "@dispatch-once/core";
import type { CallPhases, CallState } from "./phases.js";

/** What one stream event meant to the runner. */
export interface StreamStep {
  /** The call whose arguments just became final: the runner dispatches it now (STREAM-4). */
  complete?: CallState;
  /**
   * Further calls the same event made final, after `complete`, in the response's order: a Chat
   * Completions chunk may carry several whole calls (each is final at the next one's first fragment
   * and the last at `finish_reason`). Dispatched as `complete` is.
   */
  completeMore?: CallState[];
  /** Text the model streamed, forwarded as a `text_delta` event for a UI. */
  textDelta?: { index: number; text: string };
}

/** How one dispatched call was answered, for the commit: a result, or an error that is a fact about the call. */
export interface CallAnswer<C extends CallState = CallState> {
  call: C;
  answer: { ok: true; resultJson: string } | { ok: false; error: StoredError };
}

/** What a turn commits, in the provider's own message shapes. */
export interface CommitShape {
  /** The response as the stream established it (the assistant message, or the output items). */
  assistant: JsonValue;
  /** The calls' results (tool_result blocks, function_call_output items); absent without calls. */
  toolResults?: JsonValue;
  /** The provider's word for how the response ended, reported in `TurnOutcome.stopReason`. */
  stopReason: string | null;
  /** False when the model waits for tool results, so the message needs another turn. */
  answers: boolean;
  /** The response's text, joined. */
  text: string;
}

/** A committed turn read back from the store (TURN-7), in neutral form. */
export interface StoredTurnView {
  text: string;
  /**
   * The calls in the order the response made them; `input` is the call's parsed arguments as
   * committed, from which the runner derives its key and ordinal again (absent: no key is reported).
   */
  calls: { callId: string; name: string; input?: unknown; result?: JsonValue; error?: StoredError }[];
}

/**
 * What a stream side supplies to the shared runner, and nothing else: the runner owns the turn
 * lease, the dispatch at the earliest safe event, the retries, the records and the commit rule.
 * The provider builds requests from the committed conversation, opens the stream, maps each
 * event onto its accumulator's phases, says whether the stream finished, and shapes what is
 * committed.
 *
 * @example
 * const runner = new TurnRunner(myProvider, { dispatcher, store });
 */
export interface StreamProvider<A extends CallPhases<CallState>, E, U = unknown> {
  /** The event that proves a response finished (STREAM-1), named in `StreamIncompleteError`. */
  readonly finishEvent: string;
  /** A fresh accumulator for one attempt. */
  createAccumulator(): A;
  /**
   * Throws (an `InvalidArgumentError` with `field` "message.content") for content the provider's
   * API cannot take as a user message; called by send() before anything is stored or sent.
   */
  checkContent?(content: U): void;
  /** The user message as stored in the conversation (and sent back in every later request). */
  userMessage(content: U): JsonValue;
  /**
   * Send the committed conversation (`input`, exactly what the store says the next request
   * sends) and return the stream's events. A failure here is a stream failure before any call.
   * `signal` aborts the request: the runner fires it when the stream went idle past its bound
   * (STREAM-16) or was left before its end, so pass it to the SDK to free the connection.
   * `followUp` is true for every request of the message after its first turn (its input ends with
   * the earlier turn's call results): a forcing tool choice is sent there as the provider's
   * `auto` (STREAM-18). It is a fact about the turn index, so a retried attempt is sent the same.
   */
  open(input: JsonValue[], options: { headers?: Record<string, string>; signal?: AbortSignal; followUp?: boolean }): Promise<AsyncIterable<E>>;
  /** Fold one event into the accumulator. */
  apply(accumulator: A, event: E): StreamStep;
  /** True once the stream established the whole response (its finish event arrived). */
  finished(accumulator: A): boolean;
  /**
   * An error the provider reported inside the stream (SDKs yield these as events and do not
   * throw), for the `StreamIncompleteError` of a stream that ended without finishing.
   */
  streamError?(accumulator: A): string | undefined;
  /**
   * The provider's reason when it ended the response for good: the same request ends the same way
   * again (the Responses API's `response.incomplete`: the output limit, a content filter). Such a
   * stream is not retried and its failed turn is not `retryable` (STREAM-13).
   */
  finalStop?(accumulator: A): string | undefined;
  /** What the turn commits: only called for a finished stream whose calls were all answered. */
  commitShape(accumulator: A, answers: CallAnswer[]): CommitShape;
  /** A committed turn read back from the store. */
  readTurn(turn: StoredTurn): StoredTurnView;
}

/** A stored result's text as a result or an error; text that is not JSON is the result itself. */
export function readStoredResult(content: unknown, isError: boolean): { result?: JsonValue; error?: StoredError } {
  if (typeof content !== "string") return {};
  try {
    const parsed = JSON.parse(content) as JsonValue;
    if (isError) return { error: (parsed as { error?: StoredError }).error ?? { name: "Error", message: content } };
    return { result: parsed };
  } catch {
    return { result: content };
  }
}


/**
 * A user message's content as both stream sides take it: a non-empty string, or a non-empty
 * array of content blocks (objects with a string `type`). Throws `InvalidArgumentError`
 * ("message.content") otherwise, before anything is stored or sent.
 */
export function checkUserContent(content: unknown): void {
  if (typeof content === "string") {
    if (content.length === 0) throw new InvalidArgumentError("message.content", "must not be an empty string");
    return;
  }
  if (!Array.isArray(content)) {
    throw new InvalidArgumentError("message.content", `must be a non-empty string or a non-empty array of content blocks, got ${describeValue(content)}`);
  }
  if (content.length === 0) throw new InvalidArgumentError("message.content", "must not be an empty array");
  content.forEach((block: unknown, i) => {
    if (typeof block !== "object" || block === null || Array.isArray(block) || typeof (block as { type?: unknown }).type !== "string") {
      throw new InvalidArgumentError(`message.content[${i}]`, `must be a content block (an object with a string type), got ${describeValue(block)}`);
    }
  });
}
