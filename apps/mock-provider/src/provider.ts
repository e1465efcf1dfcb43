import { EventEmitter } from "node:events";
import type { AddressInfo, Socket } from "node:net";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import express, { type NextFunction, type Request, type RequestHandler, type Response } from "express";
import { jsonBody } from "@dispatch-once/mock-http";
import { MockProviderError } from "./errors.js";
import { bedrockChunk, bedrockException, bedrockExceptionType } from "./eventstream.js";
import { converseEventOf, converseFrame, converseWhole, messagesFromConverse } from "./converse.js";
import { GeminiChunks, geminiError, geminiErrorCode, geminiSse, geminiWhole, messagesFromGemini } from "./gemini.js";
import { errorForStatus, parseFault, parseFaultRule, parseTiming, repeatToolUse, resolvePosition } from "./faults.js";
import { redactedThinkingRequested, thinkingEnabled } from "./thinking.js";
import { checkTurn, renderTurn, type PingMode, type PlannedEvent, type RenderedResponse } from "./render.js";
import { Rng, canonicalBodyText, mintId, sha256Hex } from "./random.js";
import { validateMessagesRequest, type MessagesRequest } from "./request-schema.js";
import { defaultScript, forcedByToolChoice } from "./script.js";
import type {
  ApiErrorBody,
  CloudApi,
  CutKind,
  Fault,
  FaultPlan,
  FaultRule,
  FaultSource,
  RequestInfo,
  RequestRecord,
  Script,
  SentEvent,
  Timing,
} from "./types.js";

export interface MockProviderOptions {
  /** Default 0 (an ephemeral port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Seeds every per-response variation; default "0". Same seed and same requests, same bytes. */
  seed?: string | number;
  /** The scripted model; default `defaultScript` (directives in the last user message). */
  script?: Script;
  timing?: Partial<Timing>;
  /** "standard" (one ping after the first content_block_start, as the API), "none", "every_event". */
  pings?: PingMode;
  faultPlan?: FaultPlan;
  faultRules?: FaultRule[];
  /** When set, only this key is accepted (x-api-key or Authorization: Bearer); otherwise any non-empty key. */
  apiKey?: string;
  /** Honour the `x-mock-fault` request header; default true. */
  allowFaultHeader?: boolean;
  onEvent?: (event: SentEvent, record: RequestRecord) => void;
  /** Keep at most this many requests in the log (oldest dropped); default unlimited. */
  logLimit?: number;
  /**
   * Count attempts for at most this many distinct request bodies, the least recently seen
   * forgotten first (a body seen again after that counts as attempt 1); default unlimited.
   * A long run whose retries come soon after their first request stays flat in memory.
   */
  attemptsLimit?: number;
  /**
   * How long an idle keep-alive connection stays open, in ms (Node's `server.keepAliveTimeout`,
   * announced as `Keep-Alive: timeout=N`). The SDKs' fetch (undici) drops an idle connection a
   * little before that hint (4 s without one), on ticks of its own event loop. A process that
   * stalls across both deadlines and then sends runs the server's timer first: the request is lost
   * before any byte of the response (`Connection error.`), a stream failure no fault planned.
   * Give the server a timeout no connection of the run stays idle for. From 1000 (announced in
   * whole seconds) to 3600000; anything else is refused with `invalid_option`.
   * @default 5000 (Node's)
   * @example 65_000
   */
  keepAliveTimeoutMs?: number;
  /**
   * Message threads (the Claude API beta `message-threads-2026-08-12`), served only to requests
   * whose body has a `thread` field; every other request is handled as before. `{type:"create"}`
   * takes the full conversation; the conversation with its completed reply (system and tools
   * included) is stored under the reply's message id. `{type:"continue", previous_message_id}`
   * takes only the new messages and no `system`/`tools`: the stored conversation is rebuilt before
   * validation, faults and the script see the request. A continue of an unknown or expired id is
   * a 404 `not_found_error` with `error.details.error_code` `thread_not_found`; of a reply already
   * continued, 400 `thread_already_continued`; of one a request is still continuing, 400
   * `thread_continue_in_flight` (the codes the SDK's thread helper replays the full conversation on).
   */
  threads?: {
    /** A stored reply can be continued this long after it was stored or last continued; default 300000 (5 minutes, as the API). */
    ttlMs?: number;
    /**
     * Whether a reply whose stream was cut before `message_stop` (or whose non-streamed response
     * was reset) is stored whole, as if generation finished server-side. The API stores either the
     * whole reply or none of it; default false (none: a continue from its id is `thread_not_found`).
     */
    storeCutReplies?: boolean;
    /**
     * What Threads cannot serve on this server, as the API's `thread_unsupported_request` names it:
     * a request field (`thinking`, `context_management`, `fallbacks`, `cache_control`) refuses a
     * thread request whose body has it; any other name (`hipaa`, `inference_hooks`) is an
     * organization setting and refuses every thread request. Refused: 400 `invalid_request_error`
     * with `error.details` `{ error_code: "thread_unsupported_request", unsupported: [...] }`, on
     * which the SDK's tool runner continues without a thread. Default none.
     * @default []
     * @example { unsupported: ["hipaa"] }
     */
    unsupported?: readonly string[];
  };
}

const OPTION_NAMES: { readonly [Name in keyof Required<MockProviderOptions>]: true } = {
  port: true, host: true, seed: true, script: true, timing: true, pings: true, faultPlan: true, faultRules: true, apiKey: true,
  allowFaultHeader: true, onEvent: true, logLimit: true, attemptsLimit: true, keepAliveTimeoutMs: true, threads: true,
};
const THREAD_OPTION_NAMES: { readonly [Name in keyof Required<NonNullable<MockProviderOptions["threads"]>>]: true } = { ttlMs: true, storeCutReplies: true, unsupported: true };

/** A misspelt option (`sead`) would be ignored and the server run on its default: refused, naming it. */
function checkOptionNames(options: unknown): asserts options is MockProviderOptions {
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new MockProviderError("invalid_option", `options must be an object, got ${options === null ? "null" : Array.isArray(options) ? "an array" : typeof options}`);
  const unknown = Object.keys(options).find((name) => !Object.hasOwn(OPTION_NAMES, name));
  if (unknown !== undefined) throw new MockProviderError("invalid_option", `${unknown} is not an option of startMockProvider (its options: ${Object.keys(OPTION_NAMES).join(", ")})`);
  const threads = (options as MockProviderOptions).threads;
  if (threads !== undefined) {
    if (typeof threads !== "object" || threads === null || Array.isArray(threads)) throw new MockProviderError("invalid_option", "threads must be an object { ttlMs?, storeCutReplies?, unsupported? }");
    const stray = Object.keys(threads).find((name) => !Object.hasOwn(THREAD_OPTION_NAMES, name));
    if (stray !== undefined) throw new MockProviderError("invalid_option", `threads.${stray} is not an option of threads (its options: ${Object.keys(THREAD_OPTION_NAMES).join(", ")})`);
  }
}

/** A stream paused by a `hold` fault, waiting for `release()` or `cutNow()`. */
export interface HeldStream {
  requestNumber: number;
  /** Index of the event that will be written next if released. */
  beforeEvent: number;
  nextEventType: string | undefined;
}

export interface WaitOptions {
  /** Reject after this long; default: wait until the test's own timeout. */
  timeoutMs?: number;
}

export interface MockProvider {
  /** http://host:port, without a trailing slash. */
  readonly url: string;
  /** What to give the SDK: `new Anthropic({ baseURL: provider.baseURL, apiKey: "test" })`. */
  readonly baseURL: string;
  /**
   * What to give `@anthropic-ai/vertex-sdk`: `new AnthropicVertex({ baseURL: provider.vertexBaseURL, region, projectId, authClient })`
   * (the SDK's default base URL ends in `/v1`, as this one does).
   */
  readonly vertexBaseURL: string;
  /** What to give `@anthropic-ai/bedrock-sdk`: `new AnthropicBedrock({ baseURL: provider.bedrockBaseURL, awsRegion, awsAccessKey, awsSecretKey })`. */
  readonly bedrockBaseURL: string;
  /** What to give `@ai-sdk/google`: `createGoogleGenerativeAI({ baseURL: provider.geminiBaseURL, apiKey })` (the Gemini API's `/v1beta`). */
  readonly geminiBaseURL: string;
  readonly port: number;
  /** The request log, oldest first (live array; do not mutate). */
  readonly requests: readonly RequestRecord[];
  readonly faults: {
    /** Faults consumed one per valid /v1/messages request, first in first out. */
    enqueue(...faults: Fault[]): void;
    clear(): void;
    readonly pending: readonly Fault[];
  };
  setFaultPlan(plan: FaultPlan | undefined): void;
  setFaultRules(rules: FaultRule[]): void;
  /** Merge into the provider-wide delays. */
  setTiming(timing: Partial<Timing>): void;
  readonly timing: Readonly<Timing>;
  setScript(script: Script): void;
  /** Called after each event has been handed to the socket. Returns an unsubscribe function. */
  onEvent(listener: (event: SentEvent, record: RequestRecord) => void): () => void;
  /** Resolves with the first sent event (already sent or future) matching the predicate. */
  waitForEvent(predicate: (event: SentEvent, record: RequestRecord) => boolean, options?: WaitOptions): Promise<SentEvent>;
  /** Resolves when request `requestNumber` has ended (any outcome but "pending"). */
  waitForEnd(requestNumber: number, options?: WaitOptions): Promise<RequestRecord>;
  /** Resolves with a held stream (already held or future), optionally of one request. */
  waitForHold(requestNumber?: number, options?: WaitOptions): Promise<HeldStream>;
  readonly held: readonly HeldStream[];
  /** Let held streams (all, or one request's) continue. */
  release(requestNumber?: number): void;
  /** Cut held streams (all, or one request's) now. */
  cutNow(requestNumber?: number, kind?: CutKind, error?: ApiErrorBody): void;
  /** Forget the log, request numbers and per-body attempt counters (stored threads are kept, as the API keeps them). */
  clearRequests(): void;
  /**
   * Drop stored thread replies (all, or the one with this message id), as the API may at any time:
   * a later continue from them is answered 404 `thread_not_found`.
   */
  forgetThreads(messageId?: string): void;
  /** The message ids of the stored thread replies a continue may still name (not expired, not yet continued). */
  readonly continuableThreads: readonly string[];
  /** Stop listening and destroy open sockets (streams in progress end as resets). */
  close(): Promise<void>;
}

const DEFAULT_TIMING: Timing = { firstEventMs: 0, betweenEventsMs: 0, afterBlockStopMs: 0, beforeMessageStopMs: 0 };
const ORGANIZATION_ID = "00000000-0000-4000-8000-00000000d15c";

const THREADS_BETA = "message-threads-2026-08-12";
/** The request fields `thread_unsupported_request` can name; its other names are organization settings. */
const THREAD_REQUEST_FIELDS: readonly string[] = ["thinking", "context_management", "fallbacks", "cache_control"];
const DEFAULT_THREAD_TTL_MS = 300_000;

/** A reply stored for a later `continue`: the conversation up to and including it. */
interface StoredThread {
  system: unknown;
  tools: unknown;
  messages: unknown[];
  usedAt: number;
  state: "open" | "in_flight" | "continued";
}

/** A thread request in progress: what to store once its reply is complete. */
interface ThreadContext {
  parent?: StoredThread;
  system: unknown;
  tools: unknown;
  conversation: MessagesRequest;
  reply?: { id: string; content: unknown };
}

type ThreadResolution =
  | { ok: true; type: "create" | "continue"; previousMessageId?: string; parent?: StoredThread; body: Record<string, unknown> }
  | { ok: false; status: number; error: ApiErrorBody };

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

type HoldAction = { type: "release" } | { type: "cut"; kind: CutKind; error?: ApiErrorBody } | { type: "gone" };

interface LiveHold extends HeldStream {
  resolve(action: HoldAction): void;
}

/** A request to POST /v1/messages, from express or from the plain server's hot route: its body parsed. */
type MessagesIncoming = IncomingMessage & { body?: unknown };

/**
 * The API a request came in through: the Messages API, or Claude on a cloud platform, whose
 * request names the model and whether it streams in its path, carries `anthropic_version` in its
 * body, and (Bedrock) streams in the AWS event-stream framing.
 */
type Route = { api: "messages" } | { api: Exclude<CloudApi, "messages">; model: string; stream: boolean; vertex?: boolean };
const MESSAGES_ROUTE: Route = { api: "messages" };

/**
 * Vertex AI: `POST {base}/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:streamRawPredict`
 * (`:rawPredict` without streaming). Amazon Bedrock: `POST /model/{modelId}/invoke-with-response-stream`
 * (`/invoke` without). As `@anthropic-ai/vertex-sdk` 1.1.5 and `@anthropic-ai/bedrock-sdk` 1.1.4 rewrite `/v1/messages`.
 */
function cloudRoute(url: string): Route | undefined {
  const path = url.split("?")[0]!;
  const vertex = /\/projects\/[^/]+\/locations\/[^/]+\/publishers\/anthropic\/models\/([^/:]+):(streamRawPredict|rawPredict)$/.exec(path);
  if (vertex) return { api: "vertex", model: decodeURIComponent(vertex[1]!), stream: vertex[2] === "streamRawPredict" };
  const bedrock = /^\/model\/([^/]+)\/(invoke-with-response-stream|invoke)$/.exec(path);
  if (bedrock) return { api: "bedrock", model: decodeURIComponent(bedrock[1]!), stream: bedrock[2] === "invoke-with-response-stream" };
  // Bedrock's Converse API (any model; `@ai-sdk/amazon-bedrock`'s language model): `/converse-stream`, `/converse` without.
  const converse = /^\/model\/([^/]+)\/(converse-stream|converse)$/.exec(path);
  if (converse) return { api: "converse", model: decodeURIComponent(converse[1]!), stream: converse[2] === "converse-stream" };
  // Google's Gemini API (`@ai-sdk/google`, `@google/genai`): `/v1beta/models/{model}:streamGenerateContent?alt=sse` (`/v1/...` too: the SDK's default), `:generateContent` without.
  const gemini = /^\/(?:v1|v1beta)\/models\/([^/:]+):(streamGenerateContent|generateContent)$/.exec(path);
  if (gemini) return { api: "gemini", model: decodeURIComponent(gemini[1]!), stream: gemini[2] === "streamGenerateContent" };
  // Gemini on Vertex AI (`@ai-sdk/google-vertex`): `/v1beta1/projects/{p}/locations/{l}/publishers/google/models/{model}:streamGenerateContent?alt=sse`
  // (`/v1/...` too), or in express mode (an API key, no project) `/v1/publishers/google/models/{model}:...`. The Gemini API's shapes.
  const vertexGemini = /^\/(?:v1|v1beta1)\/(?:projects\/[^/]+\/locations\/[^/]+\/)?publishers\/google\/models\/([^/:]+):(streamGenerateContent|generateContent)$/.exec(path);
  if (vertexGemini) return { api: "gemini", model: decodeURIComponent(vertexGemini[1]!), stream: vertexGemini[2] === "streamGenerateContent", vertex: true };
  return undefined;
}

/** A Vertex AI Gemini path (the route's `vertex`), as the request record keeps it. */
const VERTEX_GEMINI_PATH = /\/publishers\/google\/models\//;

/** Bedrock's error envelope: `{"message"}` and the exception's name in `x-amzn-ErrorType`, by status. */
function bedrockErrorType(status: number): string {
  switch (status) {
    case 400:
      return "ValidationException";
    case 403:
      return "AccessDeniedException";
    case 404:
      return "ResourceNotFoundException";
    case 408:
      return "ModelTimeoutException";
    case 424:
      return "ModelErrorException";
    case 429:
      return "ThrottlingException";
    case 503:
      return "ServiceUnavailableException";
    default:
      return status >= 500 ? "InternalServerException" : "ValidationException";
  }
}

/**
 * The bytes express's `res.json` writes (status, then `Content-Type: application/json;
 * charset=utf-8` and `Content-Length` in that case and order, the text in UTF-8), written on a
 * plain response: the hot route answers without express, the same bytes either way.
 */
function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const text = JSON.stringify(value);
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", String(Buffer.byteLength(text, "utf8")));
  res.end(text, "utf8");
}

function apiError(res: ServerResponse, status: number, error: ApiErrorBody, requestId: string, extraHeaders: Record<string, string> = {}): void {
  res.setHeader("request-id", requestId);
  for (const [k, v] of Object.entries(extraHeaders)) res.setHeader(k, v);
  sendJson(res, status, { type: "error", error, request_id: requestId });
}

function headerRecord(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  const headers = req.headers;
  // for-in, not Object.entries: no pair arrays for every header of every request.
  for (const k in headers) {
    const v = headers[k];
    if (v === undefined) continue;
    out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}

/** A fault that cuts or holds the stream at its position (a splice plays on: handled before the stream). */
function positionalFault(fault: Fault | undefined): Exclude<Extract<Fault, { at: unknown }>, { kind: "splice" }> | undefined {
  return fault && "at" in fault && fault.kind !== "splice" ? fault : undefined;
}

class Provider implements MockProvider {
  url = "";
  baseURL = "";
  vertexBaseURL = "";
  bedrockBaseURL = "";
  geminiBaseURL = "";
  port = 0;
  readonly requests: RequestRecord[] = [];
  private readonly emitter = new EventEmitter();
  private readonly queue: Fault[] = [];
  private rules: Array<{ rule: FaultRule; fired: number }> = [];
  private plan: FaultPlan | undefined;
  private script: Script;
  private baseTiming: Timing;
  private readonly seed: string;
  private readonly pings: PingMode;
  private readonly options: MockProviderOptions;
  private requestCounter = 0;
  private attempts = new Map<string, number>();
  /** The text of every refused response, to refuse a conversation that carries one (the API's rule). */
  private readonly refusedTexts = new Set<string>();
  /** Bumped by clearRequests(): attempt numbers restart, ids must not repeat. */
  private generation = 0;
  private readonly holds: LiveHold[] = [];
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  private closed = false;
  private readonly threads = new Map<string, StoredThread>();
  private readonly threadContexts = new WeakMap<RequestRecord, ThreadContext>();
  /** One parser for both ways in: express's app and the plain server's hot route. */
  private readonly bodyParser: RequestHandler = jsonBody({ limitBytes: 32 * 1024 * 1024 });
  readonly app: express.Express;

  constructor(options: MockProviderOptions) {
    checkOptionNames(options);
    this.options = options;
    this.seed = String(options.seed ?? "0");
    this.script = options.script ?? defaultScript;
    this.baseTiming = { ...DEFAULT_TIMING, ...(options.timing ? parseTiming(options.timing) : {}) };
    this.pings = options.pings ?? "standard";
    // Out of range, listen() threw node's untyped RangeError (ERR_SOCKET_BAD_PORT).
    if (options.port !== undefined && !(Number.isInteger(options.port) && options.port >= 0 && options.port <= 65_535)) {
      throw new MockProviderError("invalid_option", `port must be an integer 0..65535, got ${JSON.stringify(options.port)}`);
    }
    if (options.logLimit !== undefined && !(Number.isInteger(options.logLimit) && options.logLimit >= 1)) {
      throw new MockProviderError("invalid_option", "logLimit must be a positive integer");
    }
    if (options.attemptsLimit !== undefined && !(Number.isInteger(options.attemptsLimit) && options.attemptsLimit >= 1)) {
      throw new MockProviderError("invalid_option", "attemptsLimit must be a positive integer");
    }
    if (options.keepAliveTimeoutMs !== undefined && !(Number.isInteger(options.keepAliveTimeoutMs) && options.keepAliveTimeoutMs >= 1_000 && options.keepAliveTimeoutMs <= 3_600_000)) {
      throw new MockProviderError("invalid_option", `keepAliveTimeoutMs must be an integer 1000..3600000, got ${options.keepAliveTimeoutMs}`);
    }
    const unsupported = options.threads?.unsupported;
    if (unsupported !== undefined && !(Array.isArray(unsupported) && unsupported.every((u) => typeof u === "string" && u !== ""))) {
      throw new MockProviderError("invalid_option", "threads.unsupported must be an array of feature names, e.g. [\"hipaa\"]");
    }
    if (!["standard", "none", "every_event"].includes(this.pings)) {
      throw new MockProviderError("invalid_option", `pings must be standard, none or every_event`);
    }
    this.plan = options.faultPlan;
    this.setFaultRules(options.faultRules ?? []);
    this.emitter.setMaxListeners(0);
    if (options.onEvent) this.onEvent(options.onEvent);
    this.app = this.buildApp();
  }

  readonly faults: MockProvider["faults"] = (() => {
    const queue = this.queue;
    return {
      enqueue: (...faults: Fault[]) => {
        for (const f of faults) queue.push(parseFault(f));
      },
      clear: () => {
        queue.length = 0;
      },
      get pending(): readonly Fault[] {
        return queue.slice();
      },
    };
  })();

  get timing(): Readonly<Timing> {
    return { ...this.baseTiming };
  }

  get held(): readonly HeldStream[] {
    return this.holds.map(({ requestNumber, beforeEvent, nextEventType }) => ({ requestNumber, beforeEvent, nextEventType }));
  }

  setFaultPlan(plan: FaultPlan | undefined): void {
    this.plan = plan;
  }

  setFaultRules(rules: FaultRule[]): void {
    this.rules = rules.map((r) => ({ rule: parseFaultRule(r), fired: 0 }));
  }

  setTiming(timing: Partial<Timing>): void {
    this.baseTiming = { ...this.baseTiming, ...parseTiming(timing) };
  }

  setScript(script: Script): void {
    this.script = script;
  }

  onEvent(listener: (event: SentEvent, record: RequestRecord) => void): () => void {
    this.emitter.on("event", listener);
    return () => this.emitter.off("event", listener);
  }

  private waitOn<T>(
    eventName: string,
    check: () => T | undefined,
    options: WaitOptions | undefined,
    what: string,
  ): Promise<T> {
    const now = check();
    if (now !== undefined) return Promise.resolve(now);
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const listener = () => {
        const value = check();
        if (value === undefined) return;
        this.emitter.off(eventName, listener);
        if (timer) clearTimeout(timer);
        resolve(value);
      };
      this.emitter.on(eventName, listener);
      if (options?.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.emitter.off(eventName, listener);
          reject(new Error(`mock provider: timed out after ${options.timeoutMs} ms waiting for ${what}`));
        }, options.timeoutMs);
      }
    });
  }

  waitForEvent(predicate: (event: SentEvent, record: RequestRecord) => boolean, options?: WaitOptions): Promise<SentEvent> {
    const check = () => {
      for (const record of this.requests) {
        const hit = record.events.find((e) => predicate(e, record));
        if (hit) return hit;
      }
      return undefined;
    };
    return this.waitOn("event", check, options, "an event");
  }

  waitForEnd(requestNumber: number, options?: WaitOptions): Promise<RequestRecord> {
    const check = () => {
      const record = this.requests.find((r) => r.requestNumber === requestNumber);
      return record && record.outcome !== "pending" ? record : undefined;
    };
    return this.waitOn("end", check, options, `the end of request ${requestNumber}`);
  }

  waitForHold(requestNumber?: number, options?: WaitOptions): Promise<HeldStream> {
    const check = () => {
      const hold = this.holds.find((h) => requestNumber === undefined || h.requestNumber === requestNumber);
      return hold ? { requestNumber: hold.requestNumber, beforeEvent: hold.beforeEvent, nextEventType: hold.nextEventType } : undefined;
    };
    return this.waitOn("hold", check, options, "a held stream");
  }

  private takeHolds(requestNumber: number | undefined): LiveHold[] {
    const taken = this.holds.filter((h) => requestNumber === undefined || h.requestNumber === requestNumber);
    if (taken.length === 0) {
      throw new MockProviderError(
        "no_held_stream",
        requestNumber === undefined ? "no stream is held" : `request ${requestNumber} is not held`,
      );
    }
    for (const h of taken) this.holds.splice(this.holds.indexOf(h), 1);
    return taken;
  }

  release(requestNumber?: number): void {
    for (const h of this.takeHolds(requestNumber)) h.resolve({ type: "release" });
  }

  cutNow(requestNumber?: number, kind: CutKind = "reset", error?: ApiErrorBody): void {
    const action: HoldAction = error ? { type: "cut", kind, error } : { type: "cut", kind };
    for (const h of this.takeHolds(requestNumber)) h.resolve(action);
  }

  clearRequests(): void {
    this.requests.length = 0;
    this.requestCounter = 0;
    this.attempts.clear();
    this.generation += 1;
  }

  forgetThreads(messageId?: string): void {
    if (messageId === undefined) this.threads.clear();
    else this.threads.delete(messageId);
  }

  get continuableThreads(): readonly string[] {
    const now = Date.now();
    return [...this.threads].filter(([, t]) => t.state === "open" && now - t.usedAt <= this.threadTtlMs).map(([id]) => id);
  }

  private get threadTtlMs(): number {
    return this.options.threads?.ttlMs ?? DEFAULT_THREAD_TTL_MS;
  }

  /** The full request a thread request stands for, or the error the API answers it with. */
  private resolveThread(body: Record<string, unknown>, headers: Record<string, string>): ThreadResolution {
    const { thread, ...rest } = body;
    const invalid = (message: string, details?: Record<string, unknown>): ThreadResolution => ({
      ok: false,
      status: 400,
      error: { type: "invalid_request_error", message, ...(details ? { details } : {}) },
    });
    const betas = (headers["anthropic-beta"] ?? "").split(",").map((b) => b.trim());
    if (!betas.includes(THREADS_BETA)) return invalid(`thread: Extra inputs are not permitted (the field needs the anthropic-beta header ${THREADS_BETA})`);
    if (!isPlainObject(thread) || (thread["type"] !== "create" && thread["type"] !== "continue")) {
      return invalid("thread.type: Input should be 'create' or 'continue'");
    }
    // The API refuses, for either type, a thread request it cannot serve, naming what it cannot.
    const unsupported = (this.options.threads?.unsupported ?? []).filter((name) => !THREAD_REQUEST_FIELDS.includes(name) || rest[name] !== undefined);
    if (unsupported.length > 0) {
      return invalid(
        `This request cannot be served on a Thread (unsupported: ${unsupported.join(", ")}). Send the full conversation without thread, or change that field.`,
        { error_code: "thread_unsupported_request", unsupported },
      );
    }
    if (thread["type"] === "create") return { ok: true, type: "create", body: rest };
    const previousMessageId = thread["previous_message_id"];
    if (typeof previousMessageId !== "string" || previousMessageId === "") return invalid("thread.previous_message_id: Field required");
    for (const field of ["system", "tools"] as const) {
      if (rest[field] !== undefined) {
        return invalid(`${field}: not allowed when continuing a thread; the thread keeps the \`${field}\` of the request that created it`);
      }
    }
    if (rest["messages"] !== undefined && !Array.isArray(rest["messages"])) return invalid("messages: Input should be a valid list");
    const parent = this.threads.get(previousMessageId);
    const now = Date.now();
    if (!parent || now - parent.usedAt > this.threadTtlMs) {
      this.threads.delete(previousMessageId);
      return {
        ok: false,
        status: 404,
        error: {
          type: "not_found_error",
          message: 'No usable Thread state was found for previous_message_id. Replay the full conversation with thread: {"type": "create"} to start a new Thread.',
          details: { error_code: "thread_not_found" },
        },
      };
    }
    if (parent.state === "continued") {
      return invalid(
        "The response that previous_message_id names has already been continued, and each response can be continued only once. Continue from the Thread's most recent response id.",
        { error_code: "thread_already_continued" },
      );
    }
    if (parent.state === "in_flight") {
      return invalid(
        'Another request is still continuing from the same previous_message_id. Wait for it to complete and continue from its response id, or replay the full conversation with thread: {"type": "create"}.',
        { error_code: "thread_continue_in_flight" },
      );
    }
    const full: Record<string, unknown> = { ...rest, messages: [...parent.messages, ...((rest["messages"] as unknown[] | undefined) ?? [])] };
    if (parent.system !== undefined) full["system"] = parent.system;
    if (parent.tools !== undefined) full["tools"] = parent.tools;
    return { ok: true, type: "continue", previousMessageId, parent, body: full };
  }

  /** Store the reply of a finished thread request (whole, or not at all) and settle the reply it continued. */
  private settleThread(record: RequestRecord, context: ThreadContext, outcome: RequestRecord["outcome"]): void {
    const whole = outcome === "complete" || record.events.some((e) => e.type === "message_stop");
    const cutButGenerated =
      this.options.threads?.storeCutReplies === true && ["reset", "tcp_reset", "clean_close", "truncate", "client_closed"].includes(outcome);
    const stored = context.reply !== undefined && (whole || cutButGenerated);
    if (stored) {
      this.threads.set(context.reply!.id, {
        system: context.system,
        tools: context.tools,
        messages: [...context.conversation.messages, { role: "assistant", content: context.reply!.content }],
        usedAt: Date.now(),
        state: "open",
      });
    }
    if (context.parent) context.parent.state = stored ? "continued" : "open";
    if (record.thread) record.thread.stored = stored;
  }

  /**
   * The SDKs' request, POST /v1/messages, goes straight to its handler; everything else to the
   * express app. Express's router and request setup were about 3 % of a demo side's CPU for a
   * route that needs neither; the body parser, the handler and the error answers are the same
   * ones, so are the bytes (a test compares both ways in byte for byte).
   */
  private serve(req: IncomingMessage, res: ServerResponse): void {
    const route = req.method !== "POST" ? undefined : req.url === "/v1/messages" ? MESSAGES_ROUTE : cloudRoute(req.url ?? "");
    if (route === undefined) {
      this.app(req, res);
      return;
    }
    const path = route.api === "messages" ? "/v1/messages" : req.url!.split("?")[0]!;
    // express's types, not its objects: the parser reads only node's request (as express.json does).
    this.bodyParser(req as Request, res as Response, (err?: unknown) => {
      if (err !== undefined) return this.answerError(err, res);
      this.handleMessages(req, res, path, route).catch((e: unknown) => this.answerError(e, res));
    });
  }

  async listen(port: number, host: string): Promise<void> {
    const server = createServer((req, res) => this.serve(req, res));
    server.listen(port, host);
    this.server = server;
    if (this.options.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = this.options.keepAliveTimeoutMs;
    server.on("connection", (socket: Socket) => {
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      server.once("listening", resolve);
      server.once("error", reject);
    });
    const address = server.address() as AddressInfo;
    this.port = address.port;
    const shownHost = host.includes(":") ? `[${host}]` : host;
    this.url = `http://${shownHost}:${address.port}`;
    this.baseURL = this.url;
    this.vertexBaseURL = `${this.url}/v1`;
    this.bedrockBaseURL = this.url;
    this.geminiBaseURL = `${this.url}/v1beta`;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const h of this.holds.splice(0)) h.resolve({ type: "gone" });
    const server = this.server;
    if (!server) return;
    const done = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    server.closeAllConnections();
    await done;
  }

  private chooseFault(req: IncomingMessage, request: MessagesRequest, info: RequestInfo): { fault?: Fault; source?: FaultSource } {
    const header = req.headers["x-mock-fault"];
    if (typeof header === "string" && header.trim() !== "" && this.options.allowFaultHeader !== false) {
      let json: unknown;
      try {
        json = JSON.parse(header);
      } catch (e) {
        throw new MockProviderError("invalid_fault", "x-mock-fault header is not JSON", { cause: e });
      }
      return { fault: parseFault(json), source: "header" };
    }
    const queued = this.queue.shift();
    if (queued) return { fault: queued, source: "queue" };
    if (this.plan) {
      const planned = this.plan(request, info);
      if (planned) return { fault: parseFault(planned), source: "plan" };
    }
    // Serialised only when a rule looks into the body: most runs have no rules at all.
    let bodyText: string | undefined;
    for (const entry of this.rules) {
      const { rule } = entry;
      if (rule.attempt !== undefined && rule.attempt !== info.attempt) continue;
      if (rule.requestNumber !== undefined && rule.requestNumber !== info.requestNumber) continue;
      if (rule.bodyContains !== undefined && !(bodyText ??= JSON.stringify(request)).includes(rule.bodyContains)) continue;
      if (rule.times !== undefined && entry.fired >= rule.times) continue;
      entry.fired += 1;
      return { fault: rule.fault, source: "rules" };
    }
    return {};
  }

  private finish(record: RequestRecord, outcome: RequestRecord["outcome"], status?: number): void {
    if (record.outcome !== "pending") return;
    record.outcome = outcome;
    const threadContext = this.threadContexts.get(record);
    if (threadContext) {
      this.threadContexts.delete(record);
      this.settleThread(record, threadContext, outcome);
    }
    if (status !== undefined) record.status = status;
    record.endedAt = Date.now();
    this.emitter.emit("end", record);
  }

  private buildApp(): express.Express {
    const app = express();
    app.disable("x-powered-by");
    app.disable("etag");
    app.use(this.bodyParser);

    app.post("/v1/messages", (req, res) => this.handleMessages(req, res, req.path));

    const control = express.Router();
    control.get("/health", (_req, res) => {
      res.json({ ok: true, requests: this.requests.length });
    });
    control.get("/requests", (_req, res) => {
      res.json({ requests: this.requests });
    });
    control.delete("/requests", (_req, res) => {
      this.clearRequests();
      res.json({ ok: true });
    });
    control.get("/faults", (_req, res) => {
      res.json({ pending: this.queue, rules: this.rules.map((r) => ({ ...r.rule, fired: r.fired })) });
    });
    control.post("/faults", (req, res) => {
      const body = req.body as { enqueue?: unknown; rules?: unknown } | undefined;
      if (body && typeof body === "object" && ("enqueue" in body || "rules" in body)) {
        if (body.enqueue !== undefined) {
          if (!Array.isArray(body.enqueue)) throw new MockProviderError("invalid_fault", "enqueue must be an array of faults");
          const parsed = body.enqueue.map(parseFault);
          this.queue.push(...parsed);
        }
        if (body.rules !== undefined) {
          if (!Array.isArray(body.rules)) throw new MockProviderError("invalid_fault", "rules must be an array of fault rules");
          this.setFaultRules(body.rules as FaultRule[]);
        }
      } else {
        this.queue.push(parseFault(body));
      }
      res.json({ pending: this.queue, rules: this.rules.map((r) => ({ ...r.rule, fired: r.fired })) });
    });
    control.delete("/faults", (_req, res) => {
      this.queue.length = 0;
      this.rules = [];
      res.json({ ok: true });
    });
    control.delete("/threads", (_req, res) => {
      this.forgetThreads();
      res.json({ ok: true });
    });
    control.post("/timing", (req, res) => {
      this.setTiming(req.body as Partial<Timing>);
      res.json({ timing: this.baseTiming });
    });
    control.get("/holds", (_req, res) => {
      res.json({ held: this.held });
    });
    control.post("/release", (req, res) => {
      const n = (req.body as { requestNumber?: number } | undefined)?.requestNumber;
      this.release(n);
      res.json({ ok: true });
    });
    control.post("/cut", (req, res) => {
      const body = (req.body ?? {}) as { requestNumber?: number; kind?: CutKind; error?: ApiErrorBody };
      const kind = body.kind ?? "reset";
      if (!["reset", "tcp_reset", "clean_close", "truncate", "error_event"].includes(kind)) {
        throw new MockProviderError("invalid_fault", `kind must be reset, tcp_reset, clean_close, truncate or error_event`);
      }
      this.cutNow(body.requestNumber, kind, body.error);
      res.json({ ok: true });
    });
    app.use("/_control", control);

    app.use((req: Request, res: Response) => {
      apiError(res, 404, { type: "not_found_error", message: `Not found: ${req.method} ${req.path}` }, mintId("req_011C", new Rng(Math.random())));
    });

    app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => this.answerError(err, res));
    return app;
  }

  /** Body-parser failures and control-endpoint mistakes answer like the API: typed JSON errors. */
  private answerError(err: unknown, res: ServerResponse): void {
    const requestId = mintId("req_011C", new Rng(Math.random()));
    if (res.headersSent) return;
    if (err instanceof MockProviderError) {
      apiError(res, 400, { type: "invalid_request_error", message: `${err.code}: ${err.message}` }, requestId, { "x-should-retry": "false" });
      return;
    }
    const status = (err as { status?: number }).status;
    if (status === 400 || status === 413) {
      apiError(res, status, { type: status === 413 ? "request_too_large" : "invalid_request_error", message: "There was an error parsing the body of your request." }, requestId);
      return;
    }
    apiError(res, 500, { type: "api_error", message: `mock provider: ${String((err as Error)?.message ?? err)}` }, requestId, { "x-should-retry": "false" });
  }

  private async handleMessages(req: MessagesIncoming, res: ServerResponse, path: string, route: Route = MESSAGES_ROUTE): Promise<void> {
    const headers = headerRecord(req);
    const receivedAt = Date.now();
    const body: unknown = req.body;
    // A cloud platform's request names its model (and whether it streams) in its path and carries
    // its API version in the body: the model sees the Messages request it stands for.
    const cloudVersion = route.api !== "messages" && isPlainObject(body) ? body["anthropic_version"] : undefined;
    let modelBody: unknown = body;
    if (route.api === "converse") {
      // Converse's own request shape, read as the Messages request it stands for.
      modelBody = messagesFromConverse(body, route.model, route.stream);
    } else if (route.api === "gemini") {
      // Gemini's own request shape, read as the Messages request it stands for.
      modelBody = messagesFromGemini(body, route.model, route.stream);
    } else if (route.api !== "messages" && isPlainObject(body)) {
      const { anthropic_version: _version, ...rest } = body;
      modelBody = { ...rest, model: route.model, stream: route.stream };
    }
    // Hashed for the attempt count, and its length is the input token estimate: serialised once.
    let canonicalBody = canonicalBodyText(modelBody);
    let bodyHash = sha256Hex(canonicalBody);
    const requestNumber = ++this.requestCounter;
    const stream = route.api === "messages" ? typeof body === "object" && body !== null && (body as { stream?: unknown }).stream === true : route.stream;
    const record: RequestRecord = {
      api: route.api,
      requestNumber,
      attempt: 0,
      bodyHash,
      receivedAt,
      method: req.method ?? "POST", // a server's request always has one; only POST reaches here
      path,
      headers,
      body,
      stream,
      requestId: "",
      faultFired: false,
      toolUses: [],
      events: [],
      outcome: "pending",
    };
    this.requests.push(record);
    const limit = this.options.logLimit;
    if (limit !== undefined && this.requests.length > limit) this.requests.splice(0, this.requests.length - limit);
    this.emitter.emit("request", record);
    // Until the script has run, ids come from the request number: error responses need one too.
    record.requestId = mintId("req_011C", new Rng("request", this.seed, bodyHash, requestNumber));

    const reject = (status: number, type: string, message: string, outcome: RequestRecord["outcome"], extra: Record<string, string> = {}) => {
      record.error = message;
      if (route.api === "bedrock" || route.api === "converse") {
        // Bedrock's envelope: the message alone, the exception's name in a header.
        res.setHeader("x-amzn-requestid", record.requestId);
        for (const [k, v] of Object.entries(extra)) res.setHeader(k, v);
        res.setHeader("x-amzn-errortype", bedrockErrorType(status));
        sendJson(res, status, { message });
      } else if (route.api === "gemini") {
        // Google's envelope: `{error: {code, message, status}}`.
        for (const [k, v] of Object.entries(extra)) res.setHeader(k, v);
        sendJson(res, status, geminiError(status, message));
      } else {
        apiError(res, status, { type, message }, record.requestId, extra);
      }
      this.finish(record, outcome, status);
    };

    if (route.api === "messages") {
      const apiKey = headers["x-api-key"] ?? /^Bearer\s+(.+)$/i.exec(headers["authorization"] ?? "")?.[1];
      if (!apiKey) return reject(401, "authentication_error", "x-api-key header is required", "invalid_request");
      if (this.options.apiKey !== undefined && apiKey !== this.options.apiKey) {
        return reject(401, "authentication_error", "invalid x-api-key", "invalid_request");
      }
      if (!headers["anthropic-version"]) {
        return reject(400, "invalid_request_error", "anthropic-version: header is required", "invalid_request");
      }
    } else if (route.api === "gemini" && route.vertex === true && /^Bearer\s+\S/i.test(headers["authorization"] ?? "")) {
      // Vertex AI: a Google OAuth bearer token (not verified here), or an express-mode API key in `x-goog-api-key` (below).
    } else if (route.api === "gemini") {
      // The Gemini API's key: the `x-goog-api-key` header (or `?key=`). None: 403; not the configured one: 400, as Google answers.
      const apiKey = headers["x-goog-api-key"] ?? new URLSearchParams((req.url ?? "").split("?")[1] ?? "").get("key") ?? undefined;
      if (!apiKey) return reject(403, "permission_error", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", "invalid_request");
      if (this.options.apiKey !== undefined && apiKey !== this.options.apiKey) return reject(400, "invalid_request_error", "API key not valid. Please pass a valid API key.", "invalid_request");
    } else {
      // Vertex: a Google OAuth bearer token. Bedrock: a SigV4 signature (not verified here) or a Bedrock API key.
      const authorization = headers["authorization"] ?? "";
      const authorized = route.api === "vertex" ? /^Bearer\s+\S/i.test(authorization) : /^AWS4-HMAC-SHA256 Credential=\S/.test(authorization) || /^Bearer\s+\S/i.test(authorization);
      if (!authorized) {
        return route.api === "vertex"
          ? reject(401, "authentication_error", "Request had invalid authentication credentials. Expected OAuth 2 access token.", "invalid_request")
          : reject(403, "authentication_error", "Missing Authentication Token", "invalid_request");
      }
      if (route.api !== "converse" && (typeof cloudVersion !== "string" || cloudVersion === "")) {
        return reject(400, "invalid_request_error", "anthropic_version: Field required", "invalid_request");
      }
    }
    let threaded: Extract<ThreadResolution, { ok: true }> | undefined;
    if (isPlainObject(body) && body["thread"] !== undefined) {
      const resolved = this.resolveThread(body, headers);
      if (!resolved.ok) {
        record.error = resolved.error.message;
        apiError(res, resolved.status, resolved.error, record.requestId);
        return this.finish(record, "invalid_request", resolved.status);
      }
      threaded = resolved;
      modelBody = resolved.body;
      // The conversation, not the delta, is the model's input: its hash counts the attempts.
      canonicalBody = canonicalBodyText(modelBody);
      bodyHash = sha256Hex(canonicalBody);
      record.bodyHash = bodyHash;
    }
    const validation = validateMessagesRequest(modelBody);
    if (!validation.ok) return reject(400, "invalid_request_error", validation.message, "invalid_request");
    const request = validation.request;
    let threadContext: ThreadContext | undefined;
    if (threaded) {
      record.thread = {
        type: threaded.type,
        ...(threaded.previousMessageId !== undefined ? { previousMessageId: threaded.previousMessageId } : {}),
        stored: false,
        conversation: request,
      };
      threadContext = { system: request.system, tools: request.tools, conversation: request };
      if (threaded.parent) {
        threaded.parent.state = "in_flight";
        threaded.parent.usedAt = Date.now();
        threadContext.parent = threaded.parent;
      }
      this.threadContexts.set(record, threadContext);
    }

    const attempt = (this.attempts.get(bodyHash) ?? 0) + 1;
    // Re-inserted so the Map's order is by last use: the first key is the least recently seen.
    this.attempts.delete(bodyHash);
    this.attempts.set(bodyHash, attempt);
    const attemptsLimit = this.options.attemptsLimit;
    if (attemptsLimit !== undefined && this.attempts.size > attemptsLimit) this.attempts.delete(this.attempts.keys().next().value!);
    record.attempt = attempt;
    const info: RequestInfo = { requestNumber, attempt, bodyHash, stream, headers };

    let fault: Fault | undefined;
    try {
      const chosen = this.chooseFault(req, request, info);
      fault = chosen.fault;
      if (chosen.fault) record.fault = chosen.fault;
      if (chosen.source) record.faultSource = chosen.source;
    } catch (e) {
      const message = e instanceof MockProviderError ? `${e.code}: ${e.message}` : String(e);
      return reject(400, "invalid_request_error", `mock provider: ${message}`, "invalid_request", { "x-should-retry": "false" });
    }
    const timing: Timing = { ...this.baseTiming, ...(fault?.timing ?? {}) };

    if (fault?.kind === "status") {
      await this.sleepUnlessGone(res, timing.firstEventMs);
      const error = fault.error ?? errorForStatus(fault.status);
      const extra: Record<string, string> = {};
      if (fault.retryAfterMs !== undefined) extra["retry-after-ms"] = String(fault.retryAfterMs);
      if (fault.shouldRetry !== undefined) extra["x-should-retry"] = String(fault.shouldRetry);
      record.faultFired = true;
      return reject(fault.status, error.type, error.message, "status", extra);
    }

    // The scripted model, then the rendering of this one response.
    let rendered: RenderedResponse;
    let cutAt: number | undefined;
    try {
      const declared = request.tools ? new Set(request.tools.map((t) => t.name)) : undefined;
      // The API's rule after a refusal: a conversation still carrying the refused turn is refused again.
      const turn = carriesRefusedTurn(request, this.refusedTexts)
        ? { content: [], stopReason: "refusal" as const, stopDetails: { category: null, explanation: "mock provider: the conversation carries a refused turn; reset it before continuing" } }
        : forcedByToolChoice(request, await this.script(request));
      checkTurn(turn, declared ?? new Set());
      record.turn = turn;
      rendered = renderTurn(turn, {
        seed: this.seed,
        bodyHash,
        attempt,
        model: request.model,
        inputTokens: Math.max(1, Math.ceil(canonicalBody.length / 4)),
        pings: this.pings,
        idSalt: String(this.generation),
        thinking: thinkingEnabled(request),
        redactedThinking: redactedThinkingRequested(request),
      });
      const positional = fault && "at" in fault ? fault : undefined;
      if (positional) {
        if (!stream && positional.kind !== "reset" && positional.kind !== "tcp_reset" && positional.kind !== "hold") {
          throw new MockProviderError("fault_not_applicable", `fault ${positional.kind} applies to streaming requests only`);
        }
        cutAt = resolvePosition(positional.at, rendered.events);
      }
      if (fault?.kind === "splice") {
        if (cutAt === undefined) throw new MockProviderError("fault_not_applicable", "fault splice needs a position of events, not afterMs");
        const again = forcedByToolChoice(request, await this.script(request));
        const lead = fault.lead;
        const second = lead === undefined ? again : { ...again, content: [{ type: "text" as const, text: lead }, ...again.content] };
        checkTurn(second, declared ?? new Set());
        // Rendered as the next attempt's response: other ids, fragments and wording, as a second upstream request gets.
        const spliced = renderTurn(second, {
          seed: this.seed,
          bodyHash,
          attempt: attempt + 1,
          model: request.model,
          inputTokens: Math.max(1, Math.ceil(canonicalBody.length / 4)),
          pings: this.pings,
          idSalt: `${this.generation}:splice`,
          thinking: thinkingEnabled(request),
          redactedThinking: redactedThinkingRequested(request),
        });
        const tail = fault.messageStart ? spliced.events : spliced.events.filter((e) => e.type !== "message_start");
        rendered = { ...rendered, events: [...rendered.events.slice(0, cutAt), ...tail] };
        record.splicedToolUses = spliced.toolUses.map(({ id, name, input, json, fragments }) => ({ id, name, input, json, fragments }));
        cutAt = undefined;
      }
      if (fault?.kind === "repeat_call") {
        // The Messages API's events, on its own route or a cloud platform's (not Converse's, not Gemini's).
        if (!stream || route.api === "converse" || route.api === "gemini") throw new MockProviderError("fault_not_applicable", "fault repeat_call applies to Messages API streams only");
        rendered = { ...rendered, events: repeatToolUse(rendered.events, fault.call) };
      }
    } catch (e) {
      const message = e instanceof MockProviderError ? `${e.code}: ${e.message}` : e instanceof Error ? e.message : String(e);
      return reject(500, "api_error", `mock provider: ${message}`, "script_error", { "x-should-retry": "false" });
    }
    if (rendered.stopReason === "refusal") {
      for (const block of (rendered.message as { content: { type: string; text?: string }[] }).content) {
        if (block.type === "text" && block.text !== undefined && block.text !== "") this.refusedTexts.add(block.text);
      }
    }
    record.requestId = rendered.requestId;
    record.messageId = rendered.messageId;
    if (threadContext) threadContext.reply = { id: rendered.messageId, content: (rendered.message as { content: unknown }).content };
    record.toolUses = rendered.toolUses.map(({ id, name, input, json, fragments }) => ({ id, name, input, json, fragments }));

    if (!stream) return this.respondWhole(req, res, record, rendered, fault, timing, route.api);
    if (fault?.kind === "splice" || fault?.kind === "repeat_call") {
      // The spliced or repeated events are already in the rendered body: it plays to the end, no cut.
      record.faultFired = true;
      return this.respondStream(req, res, record, rendered, undefined, undefined, timing, route.api);
    }
    return this.respondStream(req, res, record, rendered, fault, cutAt, timing, route.api);
  }

  private sleepUnlessGone(res: ServerResponse, ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        res.off("close", done);
        resolve();
      }
      res.on("close", done);
    });
  }

  private async holdHere(record: RequestRecord, beforeEvent: number, nextEventType: string | undefined, res: ServerResponse): Promise<HoldAction> {
    return new Promise<HoldAction>((resolve) => {
      const hold: LiveHold = {
        requestNumber: record.requestNumber,
        beforeEvent,
        nextEventType,
        resolve: (action) => {
          res.off("close", onGone);
          resolve(action);
        },
      };
      const onGone = () => {
        const i = this.holds.indexOf(hold);
        if (i !== -1) this.holds.splice(i, 1);
        hold.resolve({ type: "gone" });
      };
      res.on("close", onGone);
      this.holds.push(hold);
      this.emitter.emit("hold", hold);
    });
  }

  private async respondWhole(
    req: IncomingMessage,
    res: ServerResponse,
    record: RequestRecord,
    rendered: RenderedResponse,
    fault: Fault | undefined,
    timing: Timing,
    api: CloudApi = "messages",
  ): Promise<void> {
    await this.sleepUnlessGone(res, timing.firstEventMs);
    if (fault && (fault.kind === "reset" || fault.kind === "tcp_reset" || fault.kind === "hold")) {
      record.faultFired = true;
      let kind: CutKind | "release" = fault.kind === "hold" ? "release" : fault.kind;
      if (fault.kind === "hold") {
        const action = await this.holdHere(record, 0, undefined, res);
        if (action.type === "gone") return this.finish(record, "client_closed");
        kind = action.type === "release" ? "release" : action.kind;
        if (kind === "clean_close" || kind === "truncate" || kind === "error_event") kind = "reset";
      }
      if (kind === "reset" || kind === "tcp_reset") {
        // No response at all: the SDK sees a connection error (and retries it, maxRetries).
        this.finish(record, kind);
        if (kind === "tcp_reset") req.socket.resetAndDestroy();
        else req.socket.destroy();
        return;
      }
    }
    if (res.destroyed || res.writableEnded) return this.finish(record, "client_closed");
    res.setHeader("request-id", rendered.requestId);
    res.setHeader("anthropic-organization-id", ORGANIZATION_ID);
    if (api === "converse") res.setHeader("x-amzn-requestid", rendered.requestId);
    const model = String((rendered.message as { model?: unknown }).model ?? "");
    sendJson(res, 200, api === "converse" ? converseWhole(rendered.message) : api === "gemini" ? geminiWhole(rendered.message, model) : rendered.message);
    this.finish(record, "complete", 200);
  }

  private async respondStream(
    req: IncomingMessage,
    res: ServerResponse,
    record: RequestRecord,
    rendered: RenderedResponse,
    fault: Fault | undefined,
    cutAt: number | undefined,
    timing: Timing,
    api: CloudApi = "messages",
  ): Promise<void> {
    const started = record.receivedAt;
    const positional = positionalFault(fault);
    let ended = false;
    let holdRequested = false;
    const wakers = new Set<() => void>();
    const wakeAll = () => {
      for (const w of [...wakers]) w();
    };

    res.statusCode = 200;
    if (api === "gemini") {
      // streamGenerateContent with alt=sse: server-sent events, `data:` lines only.
      res.setHeader("content-type", "text/event-stream");
    } else if (api === "converse") {
      // ConverseStream: the AWS event-stream framing, one message per Converse event.
      res.setHeader("content-type", "application/vnd.amazon.eventstream");
      res.setHeader("x-amzn-requestid", rendered.requestId);
    } else if (api === "bedrock") {
      // InvokeModelWithResponseStream: the AWS event-stream framing, one `chunk` message per event.
      res.setHeader("content-type", "application/vnd.amazon.eventstream");
      res.setHeader("x-amzn-requestid", rendered.requestId);
      res.setHeader("x-amzn-bedrock-content-type", "application/json");
    } else {
      res.setHeader("content-type", "text/event-stream; charset=utf-8");
      res.setHeader("cache-control", "no-cache");
    }
    res.setHeader("request-id", rendered.requestId);
    res.setHeader("anthropic-organization-id", ORGANIZATION_ID);
    res.setHeader("x-mock-request-number", String(record.requestNumber));
    res.setHeader("x-mock-attempt", String(record.attempt));
    // The headers go out with the first events, or on their own before any wait (below): a
    // client always has them before a delay, a hold or a cut.
    record.status = 200;

    res.on("close", () => {
      if (!ended) {
        ended = true;
        this.finish(record, "client_closed", 200);
      }
      wakeAll();
    });

    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        if (ms <= 0 || ended) return resolve();
        const done = () => {
          clearTimeout(timer);
          wakers.delete(done);
          resolve();
        };
        const timer = setTimeout(done, ms);
        wakers.add(done);
      });

    const writeRaw = (chunk: string | Buffer) =>
      new Promise<void>((resolve) => {
        const done = () => {
          wakers.delete(done);
          resolve();
        };
        wakers.add(done);
        res.write(chunk, () => done());
      });

    // Events due at the same moment (no delay between them) go out in one write, as a server
    // flushing its buffer would send them: one socket write and one client read per batch
    // instead of per event. A cut or hold lands between events all the same: the batch before
    // it is flushed first.
    let batch: SentEvent[] = [];
    let batchText = "";
    let batchBytes: Buffer[] = [];
    const messageUsage = (rendered.message as { usage?: { input_tokens?: number; output_tokens?: number } }).usage;
    const converseUsage = { input: messageUsage?.input_tokens ?? 0, output: messageUsage?.output_tokens ?? 0 };
    // Vertex AI streams a call's arguments when the request asks (`toolConfig.functionCallingConfig.streamFunctionCallArguments`); the Gemini API never does.
    const functionCalling = (record.body as { toolConfig?: { functionCallingConfig?: { streamFunctionCallArguments?: unknown } } } | null)?.toolConfig?.functionCallingConfig;
    const streamArgs = VERTEX_GEMINI_PATH.test(record.path) && functionCalling?.streamFunctionCallArguments === true;
    const gemini = api === "gemini" ? new GeminiChunks(String((rendered.message as { model?: unknown }).model ?? ""), converseUsage, { streamArgs }) : undefined;
    // One event's bytes on this route, or undefined when the route sends nothing for it (for `truncate`).
    const encodeAlone = (planned: PlannedEvent): Buffer | undefined => {
      if (api === "bedrock") return bedrockChunk(planned.data);
      if (api === "converse") {
        const event = converseEventOf(planned.data, converseUsage);
        return event ? converseFrame(event[0], event[1]) : undefined;
      }
      if (gemini) {
        const chunks = gemini.chunksOf(planned.data);
        return chunks.length > 0 ? Buffer.from(chunks.map(geminiSse).join("")) : undefined;
      }
      return Buffer.from(`event: ${planned.type}\ndata: ${JSON.stringify(planned.data)}\n\n`);
    };
    let nextEvent = 0;
    const write = (planned: PlannedEvent, index: number) => {
      const sent: SentEvent = {
        requestNumber: record.requestNumber,
        index,
        type: planned.type,
        data: planned.data,
        atMs: Date.now() - started,
      };
      record.events.push(sent);
      batch.push(sent);
      if (api === "bedrock") batchBytes.push(bedrockChunk(planned.data));
      else if (api === "converse") {
        // The Converse event at this point, or none (a text block's start, a ping): the same positions for faults.
        const event = converseEventOf(planned.data, converseUsage);
        if (event) batchBytes.push(converseFrame(event[0], event[1]));
      } else if (gemini) {
        // The Gemini chunk at this point, or none (a start, a block's start, a call's fragment, a ping): the same positions for faults.
        for (const chunk of gemini.chunksOf(planned.data)) batchText += geminiSse(chunk);
      } else batchText += `event: ${planned.type}\ndata: ${JSON.stringify(planned.data)}\n\n`;
    };
    const flush = async () => {
      if (batch.length === 0) return;
      const sent = batch;
      const chunk = api === "bedrock" || api === "converse" ? Buffer.concat(batchBytes) : batchText;
      batch = [];
      batchText = "";
      batchBytes = [];
      await writeRaw(chunk);
      for (const event of sent) this.emitter.emit("event", event, record);
    };

    const cut = async (kind: CutKind, error?: ApiErrorBody) => {
      if (ended) return;
      ended = true;
      record.faultFired = true;
      if (kind === "error_event") {
        const body = { type: "error", error: error ?? { type: "overloaded_error", message: "Overloaded" } };
        const sent: SentEvent = { requestNumber: record.requestNumber, index: record.events.length, type: "error", data: body, atMs: Date.now() - started };
        record.events.push(sent);
        this.finish(record, "error_event", 200);
        // Bedrock says a mid-stream error as an `exception` message of the event stream.
        // Gemini sends one on a 200 as a `data:` line carrying Google's error envelope (no event of its own).
        res.end(
          api === "bedrock" || api === "converse"
            ? bedrockException(bedrockExceptionType(body.error.type), body.error.message)
            : api === "gemini"
              ? geminiSse(geminiError(geminiErrorCode(body.error.type), body.error.message))
              : `event: error\ndata: ${JSON.stringify(body)}\n\n`,
        );
        this.emitter.emit("event", sent, record);
      } else if (kind === "clean_close") {
        this.finish(record, "clean_close", 200);
        res.end();
      } else if (kind === "truncate") {
        // The first half of the event due now (the next one that has bytes on this route), then a clean end.
        let bytes: Buffer | undefined;
        for (let i = nextEvent; i < rendered.events.length && bytes === undefined; i++) bytes = encodeAlone(rendered.events[i]!);
        // Events already batched (an afterMs cut between two writes) go out whole before it.
        const pending = api === "bedrock" || api === "converse" ? Buffer.concat(batchBytes) : Buffer.from(batchText);
        this.finish(record, "truncate", 200);
        res.end(Buffer.concat([pending, bytes === undefined ? Buffer.alloc(0) : bytes.subarray(0, Math.floor(bytes.length / 2))]));
      } else {
        // Destroying the socket leaves the chunked body unterminated: undici reports "terminated".
        this.finish(record, kind, 200);
        if (kind === "tcp_reset") req.socket.resetAndDestroy();
        else req.socket.destroy();
      }
      wakeAll();
    };

    const holdOrCut = async (index: number): Promise<boolean> => {
      // Returns true when the stream should go on writing.
      if (!positional) return true;
      if (positional.kind !== "hold") {
        await cut(positional.kind, positional.kind === "error_event" ? positional.error : undefined);
        return false;
      }
      record.faultFired = true;
      const action = await this.holdHere(record, index, rendered.events[index]?.type, res);
      if (action.type === "gone" || ended) {
        if (!ended) {
          ended = true;
          this.finish(record, "client_closed", 200);
        }
        return false;
      }
      if (action.type === "release") return true;
      await cut(action.kind, action.error);
      return false;
    };

    let timer: NodeJS.Timeout | undefined;
    if (positional && "afterMs" in positional.at) {
      timer = setTimeout(() => {
        if (ended) return;
        if (positional.kind === "hold") {
          holdRequested = true;
          return;
        }
        void cut(positional.kind, positional.kind === "error_event" ? positional.error : undefined);
      }, positional.at.afterMs);
    }

    try {
      const events = rendered.events;
      for (let i = 0; i < events.length && !ended; i++) {
        nextEvent = i;
        const planned = events[i]!;
        let delay = i === 0 ? timing.firstEventMs : timing.betweenEventsMs;
        if (i > 0 && events[i - 1]!.type === "content_block_stop") delay += timing.afterBlockStopMs;
        if (planned.type === "message_stop") delay += timing.beforeMessageStopMs;
        if (delay > 0 || i === cutAt || holdRequested) {
          await flush();
          if (!res.headersSent && !ended) res.flushHeaders();
        }
        if (ended) break;
        await sleep(delay);
        if (ended) break;
        if (i === cutAt || holdRequested) {
          holdRequested = false;
          if (!(await holdOrCut(i))) break;
        }
        if (ended) break;
        write(planned, i);
      }
      if (!ended) await flush();
      if (!ended && !res.headersSent) res.flushHeaders();
      nextEvent = events.length;
      if (!ended && cutAt === events.length) await holdOrCut(events.length);
      if (!ended) {
        ended = true;
        this.finish(record, "complete", 200);
        res.end();
      }
    } finally {
      if (timer) clearTimeout(timer);
    }
  }
}

/** Start a mock Anthropic Messages API on loopback (port 0 by default). */
export async function startMockProvider(options: MockProviderOptions = {}): Promise<MockProvider & { readonly app: express.Express }> {
  const provider = new Provider(options);
  await provider.listen(options.port ?? 0, options.host ?? "127.0.0.1");
  return provider;
}

/** True when an assistant message of the request carries the text of a response the provider refused. */
function carriesRefusedTurn(request: MessagesRequest, refusedTexts: ReadonlySet<string>): boolean {
  if (refusedTexts.size === 0) return false;
  return request.messages.some(
    (m) => m.role === "assistant" && typeof m.content !== "string" && m.content.some((b) => b.type === "text" && refusedTexts.has((b as { text: string }).text)),
  );
}
