import type { MessagesRequest } from "./request-schema.js";

export type { MessagesRequest };

/** A text block the scripted model says. */
export interface ScriptedText {
  type: "text";
  text: string;
}

/**
 * A tool call the scripted model makes. `input` is the arguments as values; how they are serialised
 * (key order, whitespace, fragment boundaries) varies per response, the values do not.
 * `reword` names free-text fields (dotted paths for nested ones) whose wording may change across
 * responses, as a real model re-words a memo on a retry: either field names (built-in variants) or
 * a map from field to the explicit variants to choose from.
 */
export interface ScriptedToolUse {
  type: "tool_use";
  name: string;
  input: Record<string, unknown>;
  reword?: string[] | Record<string, string[]>;
  /**
   * How top-level number members are written in the streamed JSON, as a model may write them
   * (`"1.25e5"` or `"125000.0"` for 125000): raw JSON text that must parse to the member's value.
   * The value is unchanged; only its spelling is (a spelling of another value is refused).
   */
  spell?: Record<string, string>;
}

export type ScriptedContent = ScriptedText | ScriptedToolUse;

/**
 * How the response ends. `max_tokens`: the model ran into the request's output limit inside its
 * last block, whose text (or, for a tool call, whose argument JSON) stops part-way; the block is
 * still closed with `content_block_stop`, as the API closes it, and the response ends with
 * `stop_reason: "max_tokens"`. `refusal`: a streaming classifier stopped the response; its last block is
 * cut the same way and the response ends with `stop_reason: "refusal"` and `stop_details` (the
 * API's: a conversation that carries the refused turn is refused again, until it is reset).
 */
export type ScriptedStopReason = "tool_use" | "end_turn" | "max_tokens" | "refusal";

/** What the scripted model answers to one request. `stopReason` defaults to `tool_use` when there is a call. */
export interface AssistantTurn {
  content: ScriptedContent[];
  stopReason?: ScriptedStopReason;
  /** For a `refusal`: the `stop_details` category and explanation (null when absent). */
  stopDetails?: { category?: string | null; explanation?: string | null };
}

/**
 * The scripted "model". It must be a function of the request alone (no clock, no counters): the same
 * body must produce materially the same turn, which is what makes a retried turn dangerous.
 */
export type Script = (request: MessagesRequest) => AssistantTurn | Promise<AssistantTurn>;

/** Delays the stream writer inserts, in milliseconds. All default to 0. */
export interface Timing {
  /** After the response headers, before `message_start`. */
  firstEventMs: number;
  /** Before every event after the first. */
  betweenEventsMs: number;
  /** Extra delay after each `content_block_stop`, before the next event. */
  afterBlockStopMs: number;
  /** Extra delay before `message_stop` (the chapter's 240 ms gap between the last block and the message stop). */
  beforeMessageStopMs: number;
}

/**
 * Where in a stream a fault happens. Every position except `afterMs` names the event the fault
 * replaces: the delays due before that event are spent first, then the fault fires instead of it.
 */
export type FaultPosition =
  /** Instead of event number `event` (0-based, pings included): events 0..event-1 were sent. */
  | { event: number }
  /**
   * During argument streaming of the `toolUse`-th tool_use block (0-based among tool_use blocks),
   * after `afterFragment` of its `input_json_delta` fragments were sent (0 = right after its
   * `content_block_start`). If the block has fewer fragments, all are sent and the fault replaces
   * its `content_block_stop`: the arguments are never completed.
   */
  | { toolUse: number; afterFragment: number }
  /** In the gap after the `content_block_stop` of content block `afterBlockStop` (0-based content index). */
  | { afterBlockStop: number }
  /** In the gap after the `content_block_stop` of the `afterToolUseStop`-th tool_use block. */
  | { afterToolUseStop: number }
  /** Right before `message_stop` (after `message_delta` and the `beforeMessageStopMs` delay). */
  | { beforeMessageStop: true }
  /** After `message_stop` was written, before the response ends: the turn is complete, the transport then fails. */
  | { afterMessageStop: true }
  /** `ms` after the response headers were sent, whatever the writer is doing at that moment. */
  | { afterMs: number };

/** The body of an Anthropic API error, as sent in JSON error responses and `event: error`. */
export interface ApiErrorBody {
  type: string;
  message: string;
  /** Machine-readable details, as the API sends for thread errors: `{ error_code: "thread_not_found" }`. */
  details?: Record<string, unknown>;
}

/**
 * What goes wrong with one response.
 * - `reset`: the socket is destroyed (no terminating chunk). messages.stream() rejects with
 *   AnthropicError('terminated'); create({stream:true}) iteration throws TypeError('terminated').
 * - `tcp_reset`: like `reset` but with a TCP RST (socket.resetAndDestroy()); bytes in flight may be lost.
 * - `clean_close`: res.end() without `message_stop`; the raw iterator simply ends.
 * - `error_event`: an `event: error` (default overloaded_error) then res.end(); the SDK raises APIError.
 * - `truncate`: the first half (in bytes) of the event due at the position, then res.end(): on Bedrock
 *   an event-stream message cut inside (the SDK throws `Truncated event message received.`); on an
 *   SSE route a partial event.
 * - `hold`: the stream pauses at the position until `release()` or `cutNow()` (the on_signal cut).
 * - `status`: an HTTP error status before the stream starts (default 529 overloaded_error). The SDK
 *   retries 408/409/429/5xx itself (maxRetries, default 2) unless `shouldRetry: false`.
 * Every kind may carry `timing` overrides for the same response.
 */
export type Fault =
  | { kind: "reset"; at: FaultPosition; timing?: Partial<Timing> }
  | { kind: "tcp_reset"; at: FaultPosition; timing?: Partial<Timing> }
  | { kind: "clean_close"; at: FaultPosition; timing?: Partial<Timing> }
  | { kind: "truncate"; at: FaultPosition; timing?: Partial<Timing> }
  | { kind: "error_event"; at: FaultPosition; error?: ApiErrorBody; timing?: Partial<Timing> }
  | { kind: "hold"; at: FaultPosition; timing?: Partial<Timing> }
  | {
      kind: "status";
      status: number;
      error?: ApiErrorBody;
      /** Sent as `retry-after-ms` so the SDK's automatic retry waits this long instead of ~0.5 s. */
      retryAfterMs?: number;
      /** Sent as `x-should-retry`, which the SDK obeys over its status rules. */
      shouldRetry?: boolean;
      timing?: Partial<Timing>;
    }
  /**
   * A proxy that sent the request again after its upstream died splices the new response into
   * this body: instead of the event at `at` (a position of events, not `afterMs`), the response
   * the script gives the same request again (fresh ids and per-response variation) follows, to its
   * `message_stop`. With `messageStart` it begins with its own `message_start` (the shape STREAM-8
   * names); without, with its first `content_block_start` at index 0 (STREAM-17's shape). `lead`
   * puts a text block first in it (a model that wrote a sentence before its call this time), so
   * without `messageStart` a text block lands on the index of this response's first block.
   */
  | { kind: "splice"; at: FaultPosition; messageStart: boolean; lead?: string; timing?: Partial<Timing> }
  /**
   * A relay that renumbers what it re-sends delivers a completed call again: the events of
   * tool_use block number `call` (its `content_block_start`, input deltas and `content_block_stop`),
   * unchanged but for their `index`, at the next free content index (after the response's last
   * block), then the response finishes as rendered (STREAM-10: the one call delivered again at
   * another position, which a stream side must fail the stream at and never dispatch). Messages API
   * streams only; a turn without that call is `fault_not_applicable`.
   */
  | { kind: "repeat_call"; call: number; timing?: Partial<Timing> }
  /** No fault, only different delays for this response. */
  | { kind: "timing"; timing: Partial<Timing> };

export type CutKind = "reset" | "tcp_reset" | "clean_close" | "truncate" | "error_event";

/** Facts about a request a fault plan can decide on. */
export interface RequestInfo {
  /** 1-based over the provider's lifetime (or since `clearRequests()`). */
  requestNumber: number;
  /** 1-based count of requests with this same model input (body without `stream`). */
  attempt: number;
  /** Hash of the model input; equal bodies have equal hashes. */
  bodyHash: string;
  stream: boolean;
  headers: Record<string, string>;
}

export type FaultPlan = (request: MessagesRequest, info: RequestInfo) => Fault | undefined;

/**
 * A serialisable fault rule (control endpoint, CLI): the first rule whose conditions all match the
 * request gives its fault; `times` limits how often it fires (default unlimited).
 */
export interface FaultRule {
  attempt?: number;
  requestNumber?: number;
  /** Matches when the JSON of the request body contains this substring. */
  bodyContains?: string;
  times?: number;
  fault: Fault;
}

export type FaultSource = "header" | "queue" | "plan" | "rules";

export type ResponseOutcome =
  | "pending"
  | "complete"
  | "reset"
  | "tcp_reset"
  | "clean_close"
  | "truncate"
  | "error_event"
  | "status"
  | "invalid_request"
  | "script_error"
  | "client_closed";

/** One event the writer actually put on the wire. */
export interface SentEvent {
  requestNumber: number;
  /** 0-based position in this response's stream, pings included. */
  index: number;
  type: string;
  data: Record<string, unknown>;
  /** Milliseconds since the request arrived. */
  atMs: number;
}

/**
 * The API a request came in through: the Messages API, Vertex AI's `:streamRawPredict`/`:rawPredict`,
 * Bedrock's `invoke-with-response-stream`/`invoke`, Bedrock's Converse API `converse-stream`/`converse`,
 * Google's Gemini API `:streamGenerateContent`/`:generateContent`.
 */
export type CloudApi = "messages" | "vertex" | "bedrock" | "converse" | "gemini";

export interface RequestRecord {
  /** The API the request came in through (the same model, scripts and faults serve all three). */
  api: CloudApi;
  requestNumber: number;
  attempt: number;
  bodyHash: string;
  receivedAt: number;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: unknown;
  stream: boolean;
  /** `request-id` header sent back. */
  requestId: string;
  messageId?: string;
  fault?: Fault;
  faultSource?: FaultSource;
  /** Whether the fault's position was reached (false when the client left first). */
  faultFired: boolean;
  /** The turn the script produced, before rendering. */
  turn?: AssistantTurn;
  /** The tool calls as rendered for this response: fresh ids, re-worded values. */
  toolUses: Array<{ id: string; name: string; input: Record<string, unknown>; json: string; fragments: string[] }>;
  /** A `splice` fault's spliced response's tool_use blocks (another response: not in `toolUses`). */
  splicedToolUses?: Array<{ id: string; name: string; input: Record<string, unknown>; json: string; fragments: string[] }>;
  events: SentEvent[];
  outcome: ResponseOutcome;
  status?: number;
  /**
   * A message-threads request (a body with `thread`): its type, the reply it continues from, and
   * whether this response's reply was stored for a later `continue` (set once the request ended).
   * `conversation` is the full request the script and the faults saw (for a `continue`, the stored
   * conversation, system and tools with the new messages appended); `bodyHash` and `attempt` are
   * those of the conversation, so a replay under a new thread counts as the same input.
   */
  thread?: { type: "create" | "continue"; previousMessageId?: string; stored: boolean; conversation: MessagesRequest };
  /** Error text for invalid requests and script errors. */
  error?: string;
  endedAt?: number;
}
