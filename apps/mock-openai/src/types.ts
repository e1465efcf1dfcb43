/** Text the scripted model says (one `message` output item). */
export interface ScriptedText {
  type: "text";
  text: string;
}

/**
 * A function call the scripted model makes. `arguments` are values; their serialisation (key
 * order, whitespace, fragment boundaries) varies per response, the values do not, except the
 * free-text fields named in `reword`, which a retried model may re-word.
 */
export interface ScriptedFunctionCall {
  type: "function_call";
  name: string;
  arguments: Record<string, unknown>;
  reword?: string[];
  /** Raw JSON text of top-level number members (`"1.25e5"` for 125000): the same value, spelt otherwise; another value is refused. */
  spell?: Record<string, string>;
}

/**
 * A reasoning item (what a reasoning model streams before its answer or its calls): its summary
 * text streams as `response.reasoning_summary_text.delta` events; its id and `encrypted_content`
 * are minted per response, as a real model's are, so a retried response carries different ones.
 */
export interface ScriptedReasoning {
  type: "reasoning";
  summary: string;
}

export type ScriptedOutput = ScriptedText | ScriptedFunctionCall | ScriptedReasoning;

export interface ScriptedResponse {
  output: ScriptedOutput[];
}

/** The Responses API request body, as far as the mock reads it. */
export interface ResponsesRequest {
  model: string;
  input: string | Array<Record<string, unknown>>;
  stream?: boolean;
  tools?: unknown[];
  [key: string]: unknown;
}

/** The scripted model: a function of the request alone, so equal requests give materially equal responses. */
export type Script = (request: ResponsesRequest) => ScriptedResponse;

/** Delays in milliseconds; all default to 0. */
export interface Timing {
  betweenEventsMs: number;
  /** Extra delay after each function call's `response.output_item.done`. */
  afterCallDoneMs: number;
  /** Extra delay before `response.completed` (the window the chapter's incident lives in). */
  beforeCompletedMs: number;
}

/**
 * Where a fault fires; every position names the event it replaces.
 * - `{ event }`: instead of event number `event` (0-based).
 * - `{ call, afterFragment }`: during argument streaming of the `call`-th function call, after
 *   `afterFragment` argument deltas (0 = right after its `response.output_item.added`).
 * - `{ afterCallDone }`: right after the `afterCallDone`-th call's `response.output_item.done`.
 * - `{ beforeCompleted: true }`: instead of `response.completed`.
 */
export type FaultPosition =
  | { event: number }
  | { call: number; afterFragment: number }
  | { afterCallDone: number }
  | { beforeCompleted: true };

/**
 * On a Chat Completions stream (`POST /v1/chat/completions`) the same kinds apply to its chunks:
 * `clean_close` ends the body without the choice's `finish_reason` (and without `[DONE]`);
 * `error_event` and `failed_event` send a chunk with `error` (that API has no response.failed);
 * `incomplete_event` sends the `finish_reason` `length` (`reason` `content_filter` sends that one),
 * then `[DONE]`; `{ afterCallDone: n }` is right after the chunk that makes call n final (the next
 * index's first fragment, or `finish_reason`), `{ beforeCompleted: true }` the `finish_reason`
 * chunk. `splice` and `repeat_call` are refused there.
 *
 * - `reset`: the socket is destroyed mid-body.
 * - `clean_close`: the body ends cleanly without `response.completed`.
 * - `error_event`: an `event: error` (type `error`, code, message), then the body ends.
 * - `failed_event`: `event: response.failed` with the response's error, then the body ends.
 * - `incomplete_event`: `event: response.incomplete` (status incomplete, `incomplete_details.reason`,
 *   default `max_output_tokens`) with the output items done so far, then the body ends: the
 *   model stopped at its output limit.
 * - `status`: an HTTP error before the stream (5xx, 429, ...).
 * - `hold`: the stream pauses at the position until `release()` or `cutNow()`, so a test (or the
 *   demo's chaos run) cuts it at a point of the client's own progress, not at a guessed time.
 */
export type Fault =
  | { kind: "reset" | "clean_close"; at: FaultPosition; timing?: Partial<Timing> }
  | { kind: "hold"; at: FaultPosition; timing?: Partial<Timing> }
  | { kind: "error_event"; at: FaultPosition; code?: string; message?: string; timing?: Partial<Timing> }
  | { kind: "failed_event"; at: FaultPosition; code?: string; message?: string; timing?: Partial<Timing> }
  | { kind: "incomplete_event"; at: FaultPosition; reason?: string; timing?: Partial<Timing> }
  | { kind: "status"; status: number; shouldRetry?: boolean }
  /**
   * A proxy that sent the request again after its upstream died splices the new response into
   * this body: instead of the event at `at`, the response the script gives the same request again
   * (fresh ids, the next attempt's variation) follows, to its `response.completed`. With
   * `responseCreated` it begins with its own `response.created` (the shape STREAM-8 names); without,
   * its first item restarts at output_index 0 (STREAM-17's shape). `lead` puts a message item first
   * in it (a model that wrote a sentence before its call this time), so without `responseCreated` a
   * message lands on the position of this response's first item. Streaming requests only.
   */
  | { kind: "splice"; at: FaultPosition; responseCreated: boolean; lead?: string; timing?: Partial<Timing> }
  /**
   * A relay that renumbers what it re-sends delivers a completed call again: the events of function
   * call number `call` (`output_item.added`, its argument deltas, `function_call_arguments.done`,
   * `output_item.done`), unchanged but for their `output_index` (and the body's `sequence_number`s,
   * renumbered), at the next free output index (after the response's last item), then the response
   * finishes as rendered (STREAM-10: the one call delivered again at another position, its item id
   * and call_id too, which a stream side must fail the stream at and never dispatch). Responses API
   * streams only; a response without that call is `fault_not_applicable`.
   */
  | { kind: "repeat_call"; call: number; timing?: Partial<Timing> };

/** How `cutNow()` ends a held stream: the positional fault kinds. */
export type CutKind = "reset" | "clean_close" | "error_event" | "failed_event" | "incomplete_event";

export interface RequestInfo {
  requestNumber: number;
  /** The request's headers, lower-cased names (a client's `x-…` headers can steer a plan). */
  headers: Record<string, string>;
  /** 1-based count of requests with the same model input (body without `stream`). */
  attempt: number;
  bodyHash: string;
  stream: boolean;
}

export type FaultPlan = (request: ResponsesRequest, info: RequestInfo) => Fault | undefined;

export type ResponseOutcome = "pending" | "complete" | "reset" | "clean_close" | "error_event" | "failed_event" | "incomplete_event" | "status" | "invalid_request" | "script_error" | "client_closed";

export interface RenderedCall {
  /** The output item id (`fc_…`), fresh per response. */
  id: string;
  /** The `call_id` (`call_…`), fresh per response: it cannot deduplicate a replay. */
  callId: string;
  name: string;
  arguments: Record<string, unknown>;
  json: string;
  fragments: string[];
}

export interface SentEvent {
  index: number;
  type: string;
  data: Record<string, unknown>;
}

/**
 * The Chat Completions dialect a stream is rendered in: the same script, as a given kind of
 * OpenAI-compatible server streams it (README "Chat Completions dialects").
 * - `openai`: OpenAI's own shapes (the default).
 * - `azure`: Azure OpenAI with its content filter: a first chunk with an empty `id` and no choices
 *   (`prompt_filter_results`), and choice-0 annotation chunks without `delta` after each chunk that
 *   makes a call final and after the finish.
 * - `gemini`: Gemini's compatibility layer: `tool_calls` fragments without `index` (placed by `id`),
 *   `function-call-…` ids, `role` on every delta, the first call of each response signed
 *   (`extra_content.google.thought_signature`), `finish_reason` `stop` beside calls; a request whose
 *   current turn carries a call without the signature it was given is refused (400, Google's error).
 * - `vllm`: several whole calls in one chunk (vLLM, Ollama), `chatcmpl-tool-…` ids.
 * - `deepseek`: thinking mode: every response reasons first (`reasoning_content` deltas, `content:
 *   null`); a request with an assistant message that has `tool_calls` but no `reasoning_content` is
 *   refused (400).
 * - `sglang`: `finish_reason: ""` on every chunk before the real one (SGLang, older Ollama).
 * - `mistral`: `content` as parts (`thinking` parts for reasoning, `text` parts), 9-character call ids.
 */
export type ChatDialect = "openai" | "azure" | "gemini" | "vllm" | "deepseek" | "sglang" | "mistral";

/** The API a request was sent to: `POST /v1/responses` or `POST /v1/chat/completions`. */
export type Api = "responses" | "chat.completions";

export interface RequestRecord {
  requestNumber: number;
  api: Api;
  /** The dialect a Chat Completions request was answered in (absent on the Responses API). */
  chatDialect?: ChatDialect;
  attempt: number;
  bodyHash: string;
  body: unknown;
  headers: Record<string, string>;
  stream: boolean;
  responseId?: string;
  fault?: Fault;
  faultFired: boolean;
  /** What the script said, before the per-response variation (ids, wording) was applied. */
  scripted?: ScriptedResponse;
  calls: RenderedCall[];
  /** A `splice` fault's spliced response's calls (another response: not in `calls`). */
  splicedCalls?: RenderedCall[];
  events: SentEvent[];
  outcome: ResponseOutcome;
  status?: number;
  error?: string;
}
