import { EventEmitter } from "node:events";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import express, { type Request, type Response as ExpressResponse } from "express";
import { jsonBody } from "@dispatch-once/mock-http";
import { z } from "zod";
import { MockOpenAIError } from "./errors.js";
import { sha256Hex, stableStringify } from "./random.js";
import { CHAT_DIALECTS, CHAT_DONE, groupChatCalls, renderChatCompletion, renderResponse, repeatCall, resolvePosition, type RenderedResponse } from "./render.js";
import { forcedByToolChoice, text } from "./script.js";
import type { Api, ChatDialect, CutKind, Fault, FaultPlan, RequestRecord, ResponsesRequest, Script, SentEvent, Timing } from "./types.js";

export interface MockOpenAIOptions {
  script: Script;
  port?: number;
  host?: string;
  /** Seeds every per-response variation; same seed, same ids and wording. */
  seed?: string;
  timing?: Partial<Timing>;
  model?: string;
  /** Keep at most this many requests in the log (oldest dropped); default unlimited. */
  logLimit?: number;
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
  /** Decides each request's fault (as `setFaultPlan` does from then on); default none. */
  faultPlan?: FaultPlan;
  /**
   * The dialect `POST /v1/chat/completions` answers in (as `setChatDialect` does from then on; a
   * request's `x-mock-chat-dialect` header overrides it for that request): how Azure, Gemini, vLLM,
   * DeepSeek, SGLang or Mistral stream the same script, and what they refuse. Anything but a
   * `ChatDialect` is refused with `invalid_option`.
   * @default "openai"
   * @example "deepseek"
   */
  chatDialect?: ChatDialect;
}

const OPTION_NAMES = new Set(["script", "port", "host", "seed", "timing", "model", "logLimit", "keepAliveTimeoutMs", "faultPlan", "chatDialect"]);

/** The dialect named, or an `invalid_option` error naming the ones there are. */
function checkDialect(value: unknown, where: string): ChatDialect {
  if (typeof value === "string" && (CHAT_DIALECTS as readonly string[]).includes(value)) return value as ChatDialect;
  throw new MockOpenAIError("invalid_option", `${where} must be one of ${CHAT_DIALECTS.join(", ")}, got ${JSON.stringify(value)}`);
}

/** A stream paused by a `hold` fault, waiting for `release()` or `cutNow()`. */
export interface HeldStream {
  requestNumber: number;
  /** Index of the event that is written next if released (the event the hold replaced). */
  beforeEvent: number;
  nextEventType: string | undefined;
}

export interface WaitOptions {
  /** Reject after this long; default: wait until the caller's own timeout. */
  timeoutMs?: number;
}

export interface MockOpenAI {
  url: string;
  /** What to pass to the SDK as `baseURL` (it appends `/responses`, or `/chat/completions`). */
  baseURL: string;
  readonly requests: RequestRecord[];
  setFaultPlan(plan: FaultPlan | undefined): void;
  /** The dialect Chat Completions requests are answered in from now on (`MockOpenAIOptions.chatDialect`). */
  setChatDialect(dialect: ChatDialect): void;
  /** Faults applied to the next requests, one each, in order. */
  queueFault(fault: Fault): void;
  /** Called after each event has been handed to the socket. Returns an unsubscribe function. */
  onEvent(listener: (event: SentEvent, record: RequestRecord) => void): () => void;
  /** Streams held by a `hold` fault right now. */
  readonly held: readonly HeldStream[];
  /** Resolves with a held stream (already held or future), optionally of one request. */
  waitForHold(requestNumber?: number, options?: WaitOptions): Promise<HeldStream>;
  /** Let held streams (all, or one request's) go on from where they stopped. */
  release(requestNumber?: number): void;
  /** End held streams (all, or one request's) now, as the positional fault `kind` would. */
  cutNow(requestNumber?: number, kind?: CutKind): void;
  clearRequests(): void;
  close(): Promise<void>;
}

const timingSchema = z.object({ betweenEventsMs: z.number().min(0), afterCallDoneMs: z.number().min(0), beforeCompletedMs: z.number().min(0) }).strict().partial();
const positionSchema = z.union([
  z.object({ event: z.number().int().min(0) }).strict(),
  z.object({ call: z.number().int().min(0), afterFragment: z.number().int().min(0) }).strict(),
  z.object({ afterCallDone: z.number().int().min(0) }).strict(),
  z.object({ beforeCompleted: z.literal(true) }).strict(),
]);
const faultSchema = z.union([
  z.object({ kind: z.enum(["reset", "clean_close", "hold"]), at: positionSchema, timing: timingSchema.optional() }).strict(),
  z.object({ kind: z.enum(["error_event", "failed_event"]), at: positionSchema, code: z.string().optional(), message: z.string().optional(), timing: timingSchema.optional() }).strict(),
  z.object({ kind: z.literal("incomplete_event"), at: positionSchema, reason: z.string().min(1).optional(), timing: timingSchema.optional() }).strict(),
  z.object({ kind: z.literal("status"), status: z.number().int().min(400).max(599), shouldRetry: z.boolean().optional() }).strict(),
  z.object({ kind: z.literal("splice"), at: positionSchema, responseCreated: z.boolean(), lead: z.string().min(1).optional(), timing: timingSchema.optional() }).strict(),
  z.object({ kind: z.literal("repeat_call"), call: z.number().int().min(0), timing: timingSchema.optional() }).strict(),
]);

/** Parse a fault from untrusted input (control endpoint, `x-mock-fault` header). */
export function parseFault(input: unknown): Fault {
  const parsed = faultSchema.safeParse(input);
  if (!parsed.success) throw new MockOpenAIError("invalid_fault", `invalid fault: ${parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
  return parsed.data as Fault;
}

const requestSchema = z
  .object({
    model: z.string().min(1),
    input: z.union([z.string(), z.array(z.record(z.string(), z.unknown()))]),
    stream: z.boolean().optional(),
    tools: z.array(z.unknown()).optional(),
  })
  .loose();

const chatRequestSchema = z
  .object({
    model: z.string().min(1),
    messages: z.array(z.record(z.string(), z.unknown())).min(1),
    stream: z.boolean().optional(),
    tools: z.array(z.unknown()).optional(),
  })
  .loose();

/**
 * A Chat Completions request as the Responses request it amounts to, which is what the script
 * (and `forcedByToolChoice`) reads: messages become input items (an assistant message's
 * `tool_calls` become `function_call` items after its text, a `tool` message a
 * `function_call_output`), and a `tool_choice` naming a function or an `allowed_tools` list of
 * them takes the Responses shape. The script stays one function of the request for both APIs.
 */
export function responsesView(body: Record<string, unknown>): ResponsesRequest {
  const { messages, tool_choice: choice, ...rest } = body as { messages: Record<string, unknown>[]; tool_choice?: unknown };
  const input: Record<string, unknown>[] = [];
  for (const message of messages) {
    if (message.role === "tool") {
      input.push({ type: "function_call_output", call_id: message.tool_call_id, output: message.content });
      continue;
    }
    const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as { id?: unknown; function?: { name?: unknown; arguments?: unknown } }[]) : [];
    if (message.role !== "assistant" || (message.content !== null && message.content !== undefined && message.content !== "")) {
      input.push({ role: message.role, content: message.content });
    }
    for (const c of calls) input.push({ type: "function_call", call_id: c.id, name: c.function?.name, arguments: c.function?.arguments });
  }
  const fn = (tool: { function?: { name?: unknown } }) => ({ type: "function", name: tool.function?.name });
  let toolChoice: unknown = choice;
  if (typeof choice === "object" && choice !== null) {
    const c = choice as { type?: unknown; function?: { name?: unknown }; allowed_tools?: { mode?: unknown; tools?: { function?: { name?: unknown } }[] } };
    if (c.type === "function") toolChoice = fn(c);
    else if (c.type === "allowed_tools") toolChoice = { type: "allowed_tools", mode: c.allowed_tools?.mode, tools: (c.allowed_tools?.tools ?? []).map(fn) };
  }
  return { ...rest, model: String(body["model"]), input, ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}) } as ResponsesRequest;
}

/** The Chat Completions `finish_reason` a Responses `incomplete_details.reason` stands for. */
const chatFinishReason = (reason: string | undefined): string => (reason === undefined || reason === "max_output_tokens" ? "length" : reason);

function statusError(status: number): { type: string; code: string | null; message: string } {
  if (status === 429) return { type: "rate_limit_exceeded", code: "rate_limit_exceeded", message: "Rate limit reached" };
  if (status >= 500) return { type: "server_error", code: "server_error", message: "The server had an error while processing your request." };
  return { type: "invalid_request_error", code: null, message: "Invalid request" };
}

/** The reasoning items the mock rendered, by id: what a stateless request must send back (`checkStatelessInput`). */
interface RenderedReasoning {
  /** Null when it was rendered without it (`store: false` without `include`): nothing verifies against it. */
  encryptedContent: string | null;
  /** The ids of the other output items of its response (its calls and messages). */
  siblings: Set<string>;
}

/** A request the API keeps nothing of (`store: false`): it must carry every earlier item it needs. */
const isStateless = (request: ResponsesRequest): boolean => request["store"] === false;

/** Whether the request asks for reasoning items' encrypted content (`include`). */
const includesEncryptedContent = (request: ResponsesRequest): boolean => Array.isArray(request["include"]) && (request["include"] as unknown[]).includes("reasoning.encrypted_content");

/**
 * The API's refusals of a stateless request's reasoning items (`store: false`; with store on it
 * keeps them itself): an item without its encrypted content is not found, one whose content is
 * not the one its id was delivered with cannot be verified, a function call or message of a
 * response that reasoned (named by its item id) must follow that reasoning item, and a reasoning
 * item must be followed by an output item of its own response, named by its id (a message without
 * it is refused; a call without it is taken). Undefined when the input is one the API takes.
 */
function checkStatelessInput(request: ResponsesRequest, reasonings: Map<string, RenderedReasoning>, requiredBy: Map<string, string>): string | undefined {
  if (!isStateless(request) || !Array.isArray(request.input)) return undefined;
  const input = request.input;
  for (const [i, item] of input.entries()) {
    const id = typeof item.id === "string" ? item.id : undefined;
    if (item.type === "reasoning" && id !== undefined) {
      if (typeof item.encrypted_content !== "string") {
        return `Item with id '${id}' not found. Items are not persisted when \`store\` is set to false. Try again with \`store\` set to true, or remove this item from your input.`;
      }
      if (reasonings.get(id)?.encryptedContent !== item.encrypted_content) return `The encrypted content for item ${id} could not be verified.`;
      // The item after it is an output item of its response, named by the id the response gave it.
      // A call sent without its item id (as @ai-sdk/openai 3.0.141 sends calls under store: false)
      // cannot be paired and is taken; a message without it is refused, as the API refuses it
      // (OpenHands software-agent-sdk #1754, continuedev/continue #9628); so are another
      // response's item and none at all (a tool output, a user message, the end).
      const next = input[i + 1];
      const unnamedCall = next !== undefined && next.id === undefined && next.type === "function_call";
      if (!unnamedCall && (typeof next?.id !== "string" || !reasonings.get(id)!.siblings.has(next.id))) {
        return `Item '${id}' of type 'reasoning' was provided without its required following item.`;
      }
    }
    const required = id === undefined ? undefined : requiredBy.get(id);
    if (required !== undefined) {
      // Its reasoning item comes before it, with only items of their one response in between.
      let j = i - 1;
      while (j >= 0 && input[j]!.id !== required && typeof input[j]!.id === "string" && reasonings.get(required)!.siblings.has(input[j]!.id as string)) j--;
      // A message may come without its item type (the AI SDK sends `{ role, content, id }`): the API names it a message.
      const type = item.type ?? (item.role === "assistant" ? "message" : undefined);
      if (j < 0 || input[j]!.id !== required) return `Item '${id}' of type '${String(type)}' was provided without its required 'reasoning' item: '${required}'.`;
    }
  }
  return undefined;
}

/** A dialect's server refusing a request: its status and its own error body. */
interface DialectRefusal {
  message: string;
  body: unknown;
}

/**
 * What a dialect's server refuses of a Chat Completions request that OpenAI takes. DeepSeek's
 * thinking mode: an assistant message with `tool_calls` and no `reasoning_content` (its reasoning
 * must be sent back in every later request). Gemini 3: a call of the current turn (after the last
 * user message) that was signed, sent back without its `extra_content.google.thought_signature`
 * or with another one (Google's error shape: an array of one `error`). Undefined when it is taken.
 */
function refusedByDialect(dialect: ChatDialect, messages: Record<string, unknown>[], signatures: ReadonlySet<string>, signedCalls: ReadonlySet<string>): DialectRefusal | undefined {
  if (dialect === "deepseek") {
    const at = messages.findIndex((m) => m.role === "assistant" && Array.isArray(m.tool_calls) && m.tool_calls.length > 0 && typeof m.reasoning_content !== "string");
    if (at === -1) return undefined;
    const message = "The `reasoning_content` in the thinking mode must be passed back to the API.";
    return { message, body: { error: { message, type: "invalid_request_error", param: null, code: "invalid_request_error" } } };
  }
  if (dialect === "gemini") {
    let lastUser = -1;
    messages.forEach((m, i) => {
      if (m.role === "user") lastUser = i;
    });
    for (const [i, m] of messages.entries()) {
      if (i < lastUser || m.role !== "assistant" || !Array.isArray(m.tool_calls)) continue;
      for (const c of m.tool_calls as { id?: unknown; function?: { name?: unknown }; extra_content?: { google?: { thought_signature?: unknown } } }[]) {
        const signature = c.extra_content?.google?.thought_signature;
        if (signature === undefined && !signedCalls.has(String(c.id))) continue;
        if (typeof signature === "string" && signatures.has(signature)) continue;
        const message =
          signature === undefined
            ? `Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call \`default_api:${String(c.function?.name)}\` , position ${i + 1}. please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.`
            : `Corrupted thought signature.`;
        return { message, body: [{ error: { code: 400, message, status: "INVALID_ARGUMENT" } }] };
      }
    }
  }
  return undefined;
}

const CUT_KINDS: readonly CutKind[] = ["reset", "clean_close", "error_event", "failed_event", "incomplete_event"];

type HoldAction = { type: "release" } | { type: "cut"; kind: CutKind } | { type: "gone" };

interface LiveHold extends HeldStream {
  resolve(action: HoldAction): void;
}

const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());

export async function startMockOpenAI(options: MockOpenAIOptions): Promise<MockOpenAI> {
  // A misspelt or unsupported option would be ignored silently (a faultPlan this mock did not read left every planned fault out).
  const unknown = Object.keys(options).filter((k) => !OPTION_NAMES.has(k));
  if (unknown.length > 0) throw new MockOpenAIError("invalid_option", `unknown option(s): ${unknown.join(", ")}`);
  const seed = options.seed ?? "0";
  if (options.logLimit !== undefined && !(Number.isInteger(options.logLimit) && options.logLimit >= 1)) {
    throw new MockOpenAIError("invalid_option", "logLimit must be a positive integer");
  }
  if (options.keepAliveTimeoutMs !== undefined && !(Number.isInteger(options.keepAliveTimeoutMs) && options.keepAliveTimeoutMs >= 1_000 && options.keepAliveTimeoutMs <= 3_600_000)) {
    throw new MockOpenAIError("invalid_option", `keepAliveTimeoutMs must be an integer 1000..3600000, got ${options.keepAliveTimeoutMs}`);
  }
  let chatDialect: ChatDialect = options.chatDialect === undefined ? "openai" : checkDialect(options.chatDialect, "chatDialect");
  // Gemini's thought signatures as minted, and the calls that carried one (which must carry it back).
  const signatures = new Set<string>();
  const signedCalls = new Set<string>();
  const baseTiming: Timing = { betweenEventsMs: 0, afterCallDoneMs: 0, beforeCompletedMs: 0, ...options.timing };
  const requests: RequestRecord[] = [];
  const attempts = new Map<string, number>();
  const queued: Fault[] = [];
  let plan: FaultPlan | undefined = options.faultPlan;
  // Request numbers keep counting when the log drops its oldest records (logLimit).
  let requestCounter = 0;
  const holds: LiveHold[] = [];
  const emitter = new EventEmitter();
  emitter.setMaxListeners(0);
  const heldView = (h: LiveHold): HeldStream => ({ requestNumber: h.requestNumber, beforeEvent: h.beforeEvent, nextEventType: h.nextEventType });
  const takeHolds = (requestNumber: number | undefined): LiveHold[] => {
    const taken = holds.filter((h) => requestNumber === undefined || h.requestNumber === requestNumber);
    if (taken.length === 0) {
      throw new MockOpenAIError("no_held_stream", requestNumber === undefined ? "no stream is held" : `request ${requestNumber} is not held`);
    }
    for (const h of taken) holds.splice(holds.indexOf(h), 1);
    return taken;
  };
  const release = (requestNumber?: number) => {
    for (const h of takeHolds(requestNumber)) h.resolve({ type: "release" });
  };
  const cutNow = (requestNumber?: number, kind: CutKind = "reset") => {
    if (!CUT_KINDS.includes(kind)) throw new MockOpenAIError("invalid_fault", `cut kind must be one of ${CUT_KINDS.join(", ")}, got ${JSON.stringify(kind)}`);
    for (const h of takeHolds(requestNumber)) h.resolve({ type: "cut", kind });
  };
  // Ids stay fresh after clearRequests() resets the attempt counters.
  let generation = 0;
  // What a stateless request must carry back (checkStatelessInput): every reasoning item rendered,
  // and the reasoning item each of its response's other items requires.
  const reasonings = new Map<string, RenderedReasoning>();
  const requiredBy = new Map<string, string>();
  const remember = (response: Record<string, unknown>) => {
    const output = response.output as { id: string; type: string; encrypted_content?: string }[];
    const reasoning = output.find((i) => i.type === "reasoning");
    if (reasoning === undefined) return;
    const siblings = new Set(output.filter((i) => i !== reasoning).map((i) => i.id));
    reasonings.set(reasoning.id, { encryptedContent: reasoning.encrypted_content ?? null, siblings });
    for (const id of siblings) requiredBy.set(id, reasoning.id);
  };
  const app = express();
  app.use(jsonBody({ limitBytes: 10 * 1024 * 1024 }));

  app.get("/_control/requests", (_req, res) => {
    res.json(requests);
  });
  app.post("/_control/faults", (req, res) => {
    try {
      queued.push(parseFault(req.body));
      res.status(204).end();
    } catch (error) {
      res.status(400).json({ error: (error as Error).message });
    }
  });
  app.get("/_control/holds", (_req, res) => {
    res.json(holds.map(heldView));
  });
  app.post("/_control/release", (req, res) => {
    try {
      release((req.body as { requestNumber?: number } | undefined)?.requestNumber);
      res.status(204).end();
    } catch (error) {
      res.status(409).json({ error: (error as Error).message });
    }
  });
  app.post("/_control/cut", (req, res) => {
    const body = (req.body ?? {}) as { requestNumber?: number; kind?: CutKind };
    try {
      cutNow(body.requestNumber, body.kind);
      res.status(204).end();
    } catch (error) {
      res.status((error as MockOpenAIError).code === "no_held_stream" ? 409 : 400).json({ error: (error as Error).message });
    }
  });
  app.post("/_control/reset", (_req, res) => {
    requests.length = 0;
    attempts.clear();
    queued.length = 0;
    generation++;
    res.status(204).end();
  });

  // One handler for both APIs: the same script, variation, fault plan, holds and log; only the
  // request's shape, the rendering and the wire format of events and faults differ.
  const serve = (api: Api) => async (req: Request, res: ExpressResponse) => {
    const chat = api === "chat.completions";
    const parsed = chat ? chatRequestSchema.safeParse(req.body) : requestSchema.safeParse(req.body);
    const stream = parsed.success && parsed.data.stream === true;
    const body = req.body as Record<string, unknown>;
    const { stream: _ignored, ...modelInput } = (body ?? {}) as Record<string, unknown>;
    const bodyHash = sha256Hex(stableStringify(modelInput));
    const attempt = (attempts.get(bodyHash) ?? 0) + 1;
    attempts.set(bodyHash, attempt);
    const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
    const record: RequestRecord = { requestNumber: ++requestCounter, api, attempt, bodyHash, body, headers, stream, faultFired: false, calls: [], events: [], outcome: "pending" };
    requests.push(record);
    if (options.logLimit !== undefined && requests.length > options.logLimit) requests.splice(0, requests.length - options.logLimit);
    const fail = (status: number, outcome: RequestRecord["outcome"], message: string, type = "invalid_request_error", param: string | null = null) => {
      record.outcome = outcome;
      record.status = status;
      record.error = message;
      // x-should-retry: false so that a mis-scripted test fails loudly instead of being retried by the SDK.
      res.status(status).set("x-should-retry", "false").json({ error: { message, type, param, code: null } });
    };
    if (!parsed.success) return fail(400, "invalid_request", parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
    // What the script and the fault plan read: a Chat Completions request as its Responses request.
    const request: ResponsesRequest = chat ? responsesView(parsed.data as Record<string, unknown>) : (parsed.data as ResponsesRequest);
    let dialect: ChatDialect | undefined;
    if (chat) {
      try {
        const header = req.headers["x-mock-chat-dialect"];
        dialect = typeof header === "string" ? checkDialect(header, "x-mock-chat-dialect") : chatDialect;
      } catch (error) {
        return fail(400, "invalid_request", (error as Error).message);
      }
      record.chatDialect = dialect;
      const refusal = refusedByDialect(dialect, (parsed.data as { messages: Record<string, unknown>[] }).messages, signatures, signedCalls);
      if (refusal !== undefined) {
        record.outcome = "invalid_request";
        record.status = 400;
        record.error = refusal.message;
        res.status(400).set("x-should-retry", "false").json(refusal.body);
        return;
      }
    }
    const refused = chat ? undefined : checkStatelessInput(request, reasonings, requiredBy);
    // The API names the request's input as the parameter at fault.
    if (refused !== undefined) return fail(400, "invalid_request", refused, "invalid_request_error", "input");

    let fault: Fault | undefined;
    try {
      const header = req.headers["x-mock-fault"];
      fault = typeof header === "string" ? parseFault(JSON.parse(header)) : queued.shift() ?? plan?.(request, { requestNumber: record.requestNumber, headers, attempt, bodyHash, stream });
    } catch (error) {
      return fail(400, "invalid_request", (error as Error).message);
    }
    if (fault !== undefined) record.fault = fault;

    if (fault?.kind === "status") {
      record.faultFired = true;
      const error = statusError(fault.status);
      record.outcome = "status";
      record.status = fault.status;
      if (fault.shouldRetry !== undefined) res.set("x-should-retry", String(fault.shouldRetry));
      // retry-after-ms keeps the SDK's own retry (when enabled) fast.
      res.status(fault.status).set("retry-after-ms", "5").json({ error: { message: error.message, type: error.type, param: null, code: error.code } });
      return;
    }

    let rendered: RenderedResponse;
    let cutAt: number | undefined;
    try {
      const scripted = forcedByToolChoice(request, options.script(request));
      record.scripted = scripted;
      if (chat) {
        const includeUsage = (parsed.data as { stream_options?: { include_usage?: unknown } }).stream_options?.include_usage === true;
        const chatRendered = renderChatCompletion(scripted, { seed, bodyHash, attempt, salt: String(generation), model: parsed.data.model, includeUsage, dialect });
        for (const signature of chatRendered.signatures) signatures.add(signature);
        chatRendered.calls.forEach((c, i) => {
          if (i === 0 && chatRendered.signatures.length > 0) signedCalls.add(c.callId);
        });
        rendered = chatRendered;
      } else {
        const encryptedContent = !isStateless(request) || includesEncryptedContent(request);
        rendered = renderResponse(scripted, { seed, bodyHash, attempt, salt: String(generation), model: parsed.data.model, encryptedContent });
        remember(rendered.response);
      }
      if (fault !== undefined && "at" in fault && stream) cutAt = resolvePosition(fault.at, rendered.events);
      if (dialect === "vllm") {
        // Whole calls side by side, but a fault's position keeps a chunk boundary of its own.
        const grouped = groupChatCalls(rendered.events, cutAt);
        rendered = { ...rendered, events: grouped.events };
        cutAt = grouped.keep;
      }
      if (fault?.kind === "splice") {
        if (chat) throw new MockOpenAIError("fault_not_applicable", "fault splice applies to Responses API streams only");
        if (!stream) throw new MockOpenAIError("fault_not_applicable", "fault splice applies to streaming requests only");
        const again = forcedByToolChoice(request, options.script(request));
        const second = fault.lead === undefined ? again : { ...again, output: [text(fault.lead), ...again.output] };
        // Rendered as the next attempt's response: other ids, fragments and wording, as a second upstream request gets.
        const encryptedContent = !isStateless(request) || includesEncryptedContent(request);
        const spliced = renderResponse(second, { seed, bodyHash, attempt: attempt + 1, salt: `${generation}:splice`, model: parsed.data.model, encryptedContent });
        remember(spliced.response);
        const tail = fault.responseCreated ? spliced.events : spliced.events.filter((e) => e.type !== "response.created");
        rendered = { ...rendered, events: [...rendered.events.slice(0, cutAt), ...tail] };
        record.splicedCalls = spliced.calls;
        // The spliced events are in the body now: it plays to the end, no cut.
        record.faultFired = true;
        cutAt = undefined;
      }
      if (fault?.kind === "repeat_call") {
        if (chat) throw new MockOpenAIError("fault_not_applicable", "fault repeat_call applies to Responses API streams only");
        if (!stream) throw new MockOpenAIError("fault_not_applicable", "fault repeat_call applies to streaming requests only");
        rendered = { ...rendered, events: repeatCall(rendered.events, fault.call) };
        // The repeated events are in the body now: it plays to the end.
        record.faultFired = true;
      }
    } catch (error) {
      return fail(500, "script_error", `${(error as { code?: string }).code ?? "script_error"}: ${(error as Error).message}`, "server_error");
    }
    record.responseId = rendered.responseId;
    record.calls = rendered.calls;
    if (!stream) {
      record.outcome = "complete";
      record.status = 200;
      res.json(rendered.response);
      return;
    }

    const timing: Timing = { ...baseTiming, ...(fault !== undefined && "timing" in fault ? fault.timing : {}) };
    let clientGone = false;
    res.on("close", () => {
      if (!res.writableFinished) clientGone = true;
    });
    res.status(200).set({ "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "x-request-id": `req_${rendered.responseId.replace(/^(resp_|chatcmpl-)/, "")}` });
    res.flushHeaders();
    record.status = 200;
    // A Responses event carries an `event:` line, as the API sends them; a Chat Completions chunk is
    // a bare `data:` line, and its stream ends with `data: [DONE]`. Each write is awaited until it left
    // the process, so a reset after event n cuts after exactly n events, not somewhere in a buffer.
    const wire = (type: string, data: Record<string, unknown>) =>
      !chat ? `event: ${type}\ndata: ${JSON.stringify(data)}\n\n` : type === CHAT_DONE ? `data: ${CHAT_DONE}\n\n` : `data: ${JSON.stringify(data)}\n\n`;
    const write = (type: string, data: Record<string, unknown>) =>
      new Promise<void>((resolve) => {
        const sent: SentEvent = { index: record.events.length, type, data };
        record.events.push(sent);
        if (clientGone || res.destroyed) return resolve();
        res.write(wire(type, data), () => {
          emitter.emit("event", sent, record);
          resolve();
        });
      });
    // Ends the stream at event `i` as a positional fault of `kind` does.
    const cut = async (kind: CutKind, i: number, detail: { code?: string; message?: string; reason?: string }) => {
      record.faultFired = true;
      record.outcome = kind;
      if (kind === "reset") {
        // The chunked body stays unterminated: undici reports "terminated".
        req.socket.destroy();
        return;
      }
      if (chat) {
        // The API's in-stream failure is a chunk with `error` (the SDK throws an APIError for it);
        // it has no response.failed, so failed_event sends the same. Its output limit and content
        // filter are the choice's finish_reason (`length`, `content_filter`), then [DONE].
        const { id, created, model, system_fingerprint } = rendered.response as Record<string, unknown>;
        if (kind === "incomplete_event") {
          await write("chunk.finish", { id, object: "chat.completion.chunk", created, model, system_fingerprint, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: chatFinishReason(detail.reason) }] });
          await write(CHAT_DONE, {});
        } else if (kind === "error_event" || kind === "failed_event") {
          await write("error", { error: { message: detail.message ?? "The server had an error while processing your request.", type: "server_error", param: null, code: detail.code ?? "server_error" } });
        }
        res.end();
        return;
      }
      if (kind === "error_event") {
        await write("error", { type: "error", code: detail.code ?? "server_error", message: detail.message ?? "The server had an error while processing your request.", param: null, sequence_number: i });
      } else if (kind === "failed_event") {
        const response = { ...rendered.response, status: "failed", output: [], usage: null, error: { code: detail.code ?? "server_error", message: detail.message ?? "The server had an error." } };
        await write("response.failed", { type: "response.failed", response, sequence_number: i });
      } else if (kind === "incomplete_event") {
        // The items the stream had finished before the limit; an item cut by it never got its done event.
        const done = record.events.filter((e) => e.type === "response.output_item.done").map((e) => e.data["item"]);
        const response = { ...rendered.response, status: "incomplete", output: done, incomplete_details: { reason: detail.reason ?? "max_output_tokens" } };
        await write("response.incomplete", { type: "response.incomplete", response, sequence_number: i });
      }
      res.end();
    };
    // Pauses before event `i` until release() or cutNow(); a client that leaves ends the hold.
    const holdHere = (i: number) =>
      new Promise<HoldAction>((resolve) => {
        const hold: LiveHold = {
          requestNumber: record.requestNumber,
          beforeEvent: i,
          nextEventType: rendered.events[i]?.type,
          resolve: (action) => {
            res.off("close", onGone);
            resolve(action);
          },
        };
        const onGone = () => {
          const at = holds.indexOf(hold);
          if (at !== -1) holds.splice(at, 1);
          hold.resolve({ type: "gone" });
        };
        res.on("close", onGone);
        holds.push(hold);
        emitter.emit("hold");
      });
    for (let i = 0; i <= rendered.events.length; i++) {
      const event = rendered.events[i];
      if (i > 0) await sleep(timing.betweenEventsMs);
      const previous = rendered.events[i - 1];
      if (previous?.finalizes !== undefined) await sleep(timing.afterCallDoneMs);
      if (event?.finish === true) await sleep(timing.beforeCompletedMs);
      if (clientGone) {
        record.outcome = "client_closed";
        return;
      }
      if (fault !== undefined && fault.kind !== "splice" && fault.kind !== "repeat_call" && i === cutAt) {
        if (fault.kind !== "hold") return cut(fault.kind, i, fault.kind === "error_event" || fault.kind === "failed_event" || fault.kind === "incomplete_event" ? fault : {});
        record.faultFired = true;
        const action = await holdHere(i);
        if (action.type === "gone" || clientGone) {
          record.outcome = "client_closed";
          return;
        }
        if (action.type === "cut") return cut(action.kind, i, {});
      }
      if (event === undefined) break;
      await write(event.type, event.data);
    }
    record.outcome = "complete";
    res.end();
  };
  app.post("/v1/responses", serve("responses"));
  app.post("/v1/chat/completions", serve("chat.completions"));

  const server: Server = await new Promise((resolve) => {
    const s = app.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => resolve(s));
  });
  if (options.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = options.keepAliveTimeoutMs;
  const { port } = server.address() as AddressInfo;
  const url = `http://${options.host ?? "127.0.0.1"}:${port}`;
  return {
    url,
    baseURL: `${url}/v1`,
    requests,
    setFaultPlan(next) {
      plan = next;
    },
    setChatDialect(next) {
      chatDialect = checkDialect(next, "chatDialect");
    },
    queueFault(fault) {
      queued.push(parseFault(fault));
    },
    onEvent(listener) {
      emitter.on("event", listener);
      return () => emitter.off("event", listener);
    },
    get held() {
      return holds.map(heldView);
    },
    waitForHold(requestNumber, waitOptions) {
      const check = () => {
        const hold = holds.find((h) => requestNumber === undefined || h.requestNumber === requestNumber);
        return hold === undefined ? undefined : heldView(hold);
      };
      const now = check();
      if (now !== undefined) return Promise.resolve(now);
      return new Promise<HeldStream>((resolve, reject) => {
        let timer: NodeJS.Timeout | undefined;
        const listener = () => {
          const found = check();
          if (found === undefined) return;
          emitter.off("hold", listener);
          if (timer !== undefined) clearTimeout(timer);
          resolve(found);
        };
        emitter.on("hold", listener);
        if (waitOptions?.timeoutMs !== undefined) {
          timer = setTimeout(() => {
            emitter.off("hold", listener);
            reject(new MockOpenAIError("no_held_stream", `timed out after ${waitOptions.timeoutMs} ms waiting for ${requestNumber === undefined ? "a held stream" : `request ${requestNumber} to be held`}`));
          }, waitOptions.timeoutMs);
        }
      });
    },
    release,
    cutNow,
    clearRequests() {
      requests.length = 0;
      attempts.clear();
      generation++;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const h of holds.splice(0)) h.resolve({ type: "gone" });
        server.closeAllConnections();
        server.close((e) => (e ? reject(e) : resolve()));
      }),
  };
}
