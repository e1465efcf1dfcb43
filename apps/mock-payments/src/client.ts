import { request as httpRequest, type Agent, type IncomingMessage } from "node:http";
import { formatIdempotencyKey, parseIdempotencyKey, type ParsedIdempotencyKey } from "./idempotency-key.js";
import { PaymentsError, type PaymentsOutcome } from "./payments-error.js";
import { PaymentsInputError } from "./payments-input-error.js";

export { PaymentsError, type PaymentsOutcome } from "./payments-error.js";
export { PaymentsInputError } from "./payments-input-error.js";
import { PROBLEM_TYPE_BASE, type Problem } from "./problems.js";
import type {
  CreateInvoiceBody,
  CreatePaymentBody,
  FaultSpec,
  IdempotencyKeyLookup,
  Invoice,
  ListResponse,
  Payment,
} from "./schemas.js";

/**
 * The core `FailureDisposition` each outcome maps to (spec LEDGER-8, EFFECT-6), so every tool
 * over this client tells the dispatcher the same truth:
 * `throw new ToolError(e.message, { disposition: DISPOSITION_BY_OUTCOME[e.outcome], code: e.code, cause: e })`.
 */
export const DISPOSITION_BY_OUTCOME = {
  rejected: "definite",
  not_performed: "not_performed",
  request_mismatch: "request_mismatch",
  in_flight: "unknown",
  unknown: "unknown",
} as const satisfies Record<PaymentsOutcome, "definite" | "not_performed" | "request_mismatch" | "unknown">;

/** The server answered with an error status and (normally) an RFC 9457 problem body. */
export class PaymentsApiError extends PaymentsError {
  readonly status: number;
  readonly problem: Problem;
  readonly code: string;
  readonly outcome: PaymentsOutcome;
  readonly replayed: boolean;
  constructor(status: number, problem: Problem, replayed: boolean) {
    super(`${status} ${problem.title}: ${problem.detail}`);
    this.name = "PaymentsApiError";
    this.status = status;
    this.problem = problem;
    this.code = problem.code;
    this.replayed = replayed;
    this.outcome = classify(status, problem);
  }
}

/** No HTTP response was received: refused, dropped mid-request, timed out or aborted. */
export class PaymentsConnectionError extends PaymentsError {
  readonly code: "connection_refused" | "connection_lost" | "timeout" | "aborted";
  readonly outcome: PaymentsOutcome;
  constructor(code: PaymentsConnectionError["code"], message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PaymentsConnectionError";
    this.code = code;
    // A refused connection never reached the server; every other loss may have happened after it acted.
    this.outcome = code === "connection_refused" ? "not_performed" : "unknown";
  }
}

function classify(status: number, problem: Problem): PaymentsOutcome {
  if (status === 409 && problem.type === `${PROBLEM_TYPE_BASE}idempotency-key-in-use`) return "in_flight";
  // Checked before the 4xx rule: this 422 says nothing about whether the first request happened.
  if (status === 422 && problem.type === `${PROBLEM_TYPE_BASE}idempotency-key-reused`) return "request_mismatch";
  if (status === 503 && problem.type === `${PROBLEM_TYPE_BASE}service-unavailable`) return "not_performed";
  if (status >= 400 && status < 500) return "rejected";
  return "unknown";
}

export interface PaymentsClientOptions {
  /** e.g. server.url */
  baseURL: string;
  /** The bearer token; it names the account. */
  token: string;
  fetch?: typeof fetch;
  /**
   * Send the requests with node:http over this agent (a keep-alive `http.Agent`, typically)
   * instead of fetch: the same calls, outcomes and errors, for a third of fetch's CPU per
   * request. An http: base URL only; not together with `fetch`. Give the agent a `timeout`:
   * only then does Node close idle sockets before the server's `Keep-Alive: timeout` (at the
   * hint minus one second, or the agent's timeout if shorter). Without it, a request can go out
   * on a socket the server is closing, and is reported lost; a stalled process overruns a small
   * margin, so give the server a much longer keep-alive (`keepAliveTimeoutMs` on the mock).
   */
  agent?: Agent;
  /** Abort a request after this long (the outcome is then unknown). Default: no timeout. */
  timeoutMs?: number;
  /** How to send Idempotency-Key: as an RFC 8941 sf-string (the IETF draft) or bare. Default "sf-string". */
  idempotencyKeyFormat?: "sf-string" | "bare";
}

export interface RequestOptions {
  signal?: AbortSignal;
  /** Sent as `x-mock-fault` (test and demo use only). */
  fault?: FaultSpec | FaultSpec["outcome"];
}

export interface KeyedRequestOptions extends RequestOptions {
  idempotencyKey?: string;
}

export interface PaymentsResult<T> {
  body: T;
  status: number;
  /** The server answered with `Idempotent-Replayed: true`: this is the stored response of an earlier request. */
  replayed: boolean;
}

export interface PaymentsClient {
  createPayment(body: CreatePaymentBody, options?: KeyedRequestOptions): Promise<PaymentsResult<Payment>>;
  voidPayment(id: string, options?: KeyedRequestOptions & { reason?: string }): Promise<PaymentsResult<Payment>>;
  getPayment(id: string, options?: RequestOptions): Promise<PaymentsResult<Payment>>;
  listPayments(options?: RequestOptions): Promise<PaymentsResult<ListResponse<Payment>>>;
  /** The unkeyed "internal" API: every call creates a new invoice. */
  createInvoice(body: CreateInvoiceBody, options?: KeyedRequestOptions): Promise<PaymentsResult<Invoice>>;
  listInvoices(options?: RequestOptions): Promise<PaymentsResult<ListResponse<Invoice>>>;
  /** What the server holds under this account's idempotency key (for reconciliation). */
  lookupIdempotencyKey(key: string, options?: RequestOptions): Promise<PaymentsResult<IdempotencyKeyLookup>>;
}

/** What a call reads of a response, whichever transport carried it. */
interface WireResponse {
  status: number;
  statusText: string;
  /** The value of a response header (lower-case name), or null. */
  header(name: string): string | null;
  text: string;
}

type Transport = (url: string, method: "GET" | "POST", headers: Record<string, string>, body: string | undefined, signal: AbortSignal | undefined) => Promise<WireResponse>;

function fetchTransport(doFetch: typeof fetch): Transport {
  return async (url, method, headers, body, signal) => {
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body;
    if (signal !== undefined) init.signal = signal;
    const response = await doFetch(url, init);
    const text = await response.text();
    return { status: response.status, statusText: response.statusText, header: (name) => response.headers.get(name), text };
  };
}

/**
 * node:http over the caller's agent. Every way a response can fail to arrive whole (a refused
 * connection, a socket closed before or during the response, an abort) rejects, as fetch does,
 * so the call maps it onto the same connection errors; an abort rejects with an AbortError.
 */
function agentTransport(agent: Agent): Transport {
  return (url, method, headers, body, signal) =>
    new Promise<WireResponse>((resolve, reject) => {
      const fail = (error: unknown) => reject(signal?.aborted === true ? abortError(signal, error) : error);
      const request = httpRequest(url, { method, headers, agent, ...(signal !== undefined ? { signal } : {}) }, (response: IncomingMessage) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (text += chunk));
        response.on("error", fail);
        response.on("end", () => {
          const received = response.headers;
          resolve({
            status: response.statusCode ?? 0,
            statusText: response.statusMessage ?? "",
            header: (name) => {
              const value = received[name];
              return value === undefined ? null : Array.isArray(value) ? value.join(", ") : value;
            },
            text,
          });
        });
        // A body cut short ends in "close" without "end" (and, on Node 20, an "aborted" error).
        response.on("close", () => {
          if (!response.complete) fail(Object.assign(new Error("the response was cut off before its end"), { code: "ECONNRESET" }));
        });
      });
      request.on("error", fail);
      request.end(body);
    });
}

function abortError(signal: AbortSignal, cause: unknown): Error {
  return Object.assign(new Error("the request was aborted", { cause: signal.reason ?? cause }), { name: "AbortError" });
}

export function createPaymentsClient(options: PaymentsClientOptions): PaymentsClient {
  checkClientOptions(options);
  const base = options.baseURL.replace(/\/+$/, "");
  if (options.agent !== undefined && !base.startsWith("http:")) {
    throw new PaymentsInputError("options.agent", `needs an http: baseURL, got ${options.baseURL}`);
  }
  const transport = options.agent !== undefined ? agentTransport(options.agent) : fetchTransport(options.fetch ?? globalThis.fetch);
  const keyFormat = options.idempotencyKeyFormat ?? "sf-string";

  async function call<T>(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    opts: KeyedRequestOptions | undefined,
  ): Promise<PaymentsResult<T>> {
    checkRequestOptions(opts, keyFormat);
    const headers: Record<string, string> = {
      authorization: `Bearer ${options.token}`,
      accept: "application/json, application/problem+json",
    };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (opts?.idempotencyKey !== undefined) {
      headers["idempotency-key"] = keyFormat === "sf-string" ? formatIdempotencyKey(opts.idempotencyKey) : opts.idempotencyKey;
    }
    if (opts?.fault !== undefined) headers["x-mock-fault"] = typeof opts.fault === "string" ? opts.fault : JSON.stringify(opts.fault);

    const signals: AbortSignal[] = [];
    if (opts?.signal !== undefined) signals.push(opts.signal);
    const timeout = options.timeoutMs !== undefined ? AbortSignal.timeout(options.timeoutMs) : undefined;
    if (timeout !== undefined) signals.push(timeout);
    const signal = signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);

    let response: WireResponse;
    try {
      response = await transport(`${base}${path}`, method, headers, body !== undefined ? JSON.stringify(body) : undefined, signal);
    } catch (error) {
      throw toConnectionError(error, timeout?.aborted === true, method, path);
    }
    const text = response.text;
    const replayed = response.header("idempotent-replayed") === "true";
    if (response.status < 200 || response.status > 299) {
      throw new PaymentsApiError(response.status, parseProblem(response, text), replayed);
    }
    let parsed: T;
    try {
      parsed = JSON.parse(text) as T;
    } catch (error) {
      // A 2xx we cannot read: the request was performed, but we cannot say what it returned.
      throw new PaymentsConnectionError("connection_lost", `${method} ${path}: unreadable ${response.status} body`, { cause: error });
    }
    return { body: parsed, status: response.status, replayed };
  }

  // Every call's arguments are checked before its request exists; a refusal is the call's rejection.
  const checked = <T>(run: () => Promise<PaymentsResult<T>>): Promise<PaymentsResult<T>> => {
    try {
      return run();
    } catch (error) {
      return Promise.reject(error);
    }
  };
  return {
    createPayment: (body, opts) => checked(() => call<Payment>("POST", "/v1/payments", body, checkOptions(opts, KEYED))),
    voidPayment: (id, opts) =>
      checked(() =>
        call<Payment>("POST", `/v1/payments/${encodeURIComponent(checkId("id", id))}/void`, opts?.reason !== undefined ? { reason: opts.reason } : {}, checkOptions(opts, VOID)),
      ),
    getPayment: (id, opts) => checked(() => call<Payment>("GET", `/v1/payments/${encodeURIComponent(checkId("id", id))}`, undefined, checkOptions(opts, PLAIN))),
    listPayments: (opts) => checked(() => call<ListResponse<Payment>>("GET", "/v1/payments", undefined, checkOptions(opts, PLAIN))),
    createInvoice: (body, opts) => checked(() => call<Invoice>("POST", "/v1/invoices", body, checkOptions(opts, KEYED))),
    listInvoices: (opts) => checked(() => call<ListResponse<Invoice>>("GET", "/v1/invoices", undefined, checkOptions(opts, PLAIN))),
    // A reconcile probe reads the answer as the effect's fate: asked about no key ("undefined"), it
    // was told "absent", and would settle a payment that happened as not performed.
    lookupIdempotencyKey: (key, opts) =>
      checked(() => call<IdempotencyKeyLookup>("GET", `/v1/idempotency-keys/${encodeURIComponent(checkId("key", key))}`, undefined, checkOptions(opts, PLAIN))),
  };
}

const CLIENT_OPTIONS = ["baseURL", "token", "fetch", "agent", "timeoutMs", "idempotencyKeyFormat"] as const satisfies readonly (keyof PaymentsClientOptions)[];
const PLAIN = ["signal", "fault"] as const satisfies readonly (keyof RequestOptions)[];
const KEYED = [...PLAIN, "idempotencyKey"] as const satisfies readonly (keyof KeyedRequestOptions)[];
const VOID = [...KEYED, "reason"] as const;

function checkClientOptions(options: PaymentsClientOptions): void {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new PaymentsInputError("options", "must be an object { baseURL, token, fetch?, agent?, timeoutMs?, idempotencyKeyFormat? }");
  }
  // A misspelt option would be ignored: `timeoutMS` left every request without a timeout.
  checkNames("options", options, CLIENT_OPTIONS);
  const { baseURL, token, timeoutMs, idempotencyKeyFormat } = options as unknown as Record<string, unknown>;
  if (typeof baseURL !== "string" || !/^https?:\/\//.test(baseURL) || !URL.canParse(baseURL)) {
    throw new PaymentsInputError("options.baseURL", `must be an http: or https: URL (e.g. server.url), got ${describe(baseURL)}`);
  }
  // Sent as "Bearer <token>": undefined was sent as the token "undefined", and a line break cannot be sent at all.
  if (typeof token !== "string" || !/^[\x20-\x7e]+$/.test(token) || token.trim() === "") {
    throw new PaymentsInputError("options.token", `must be a non-empty string of printable ASCII characters, got ${describe(token)}`);
  }
  if (options.fetch !== undefined && typeof options.fetch !== "function") throw new PaymentsInputError("options.fetch", `must be a fetch function, got ${describe(options.fetch)}`);
  if (options.agent !== undefined && typeof (options.agent as { addRequest?: unknown } | null)?.addRequest !== "function") {
    throw new PaymentsInputError("options.agent", `must be an http.Agent, got ${describe(options.agent)}`);
  }
  if (options.agent !== undefined && options.fetch !== undefined) throw new PaymentsInputError("options.agent", "give either fetch or agent, not both");
  // NaN or 0 aborted every request at once, each reported as a timeout of unknown outcome.
  if (timeoutMs !== undefined && (!Number.isSafeInteger(timeoutMs) || (timeoutMs as number) < 1)) {
    throw new PaymentsInputError("options.timeoutMs", `must be a whole number of milliseconds, at least 1, got ${describe(timeoutMs)}`);
  }
  if (idempotencyKeyFormat !== undefined && idempotencyKeyFormat !== "sf-string" && idempotencyKeyFormat !== "bare") {
    throw new PaymentsInputError("options.idempotencyKeyFormat", `must be "sf-string" or "bare", got ${describe(idempotencyKeyFormat)}`);
  }
}

/** A call's options, as the call takes them (a misspelt `idempotency_key` sent the request without its key). */
function checkOptions<O>(opts: O, names: readonly string[]): O {
  if (opts === undefined) return opts;
  if (typeof opts !== "object" || opts === null || Array.isArray(opts)) throw new PaymentsInputError("options", `must be an object { ${names.join(", ")} }, got ${describe(opts)}`);
  checkNames("options", opts, names);
  return opts;
}

/** Checked before the request exists, so that nothing is sent: a header fetch cannot send was reported as a lost connection of unknown outcome. */
function checkRequestOptions(opts: KeyedRequestOptions | undefined, format: "sf-string" | "bare"): void {
  if (opts === undefined) return;
  const { idempotencyKey: key, signal } = opts as { idempotencyKey?: unknown; signal?: unknown };
  if (key !== undefined) {
    // The server's own rules (parseIdempotencyKey), on the header as it will be sent.
    const parsed: ParsedIdempotencyKey = typeof key === "string" ? parseIdempotencyKey(format === "sf-string" ? formatIdempotencyKey(key) : key) : { ok: false, reason: "it is not a string" };
    if (!parsed.ok || (format === "sf-string" && parsed.key !== key)) {
      throw new PaymentsInputError("options.idempotencyKey", `cannot be sent as an Idempotency-Key (${parsed.ok ? "it does not survive the header" : parsed.reason}), got ${describe(key)}`);
    }
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new PaymentsInputError("options.signal", `must be an AbortSignal, got ${describe(signal)}`);
}

function checkNames(field: string, value: object, names: readonly string[]): void {
  for (const name of Object.keys(value)) {
    if (!names.includes(name)) throw new PaymentsInputError(`${field}.${name}`, `is not an option here (the options: ${names.join(", ")})`);
  }
}

/** A payment id or an idempotency key in a path: a non-empty string ("undefined" named nothing the caller had). */
function checkId(field: string, value: unknown): string {
  if (typeof value !== "string" || value.length === 0) throw new PaymentsInputError(field, `must be a non-empty string, got ${describe(value)}`);
  return value;
}

function describe(value: unknown): string {
  if (typeof value === "string") return value.length > 40 ? `a string of ${value.length} characters` : JSON.stringify(value);
  if (value === null || Array.isArray(value)) return value === null ? "null" : "an array";
  return typeof value === "number" || typeof value === "boolean" || value === undefined ? String(value) : typeof value;
}

function parseProblem(response: WireResponse, text: string): Problem {
  try {
    const body = JSON.parse(text) as Partial<Problem>;
    if (typeof body === "object" && body !== null && typeof body.type === "string") {
      return {
        ...body,
        type: body.type,
        title: typeof body.title === "string" ? body.title : response.statusText,
        status: typeof body.status === "number" ? body.status : response.status,
        detail: typeof body.detail === "string" ? body.detail : "",
        code: typeof body.code === "string" ? body.code : `http_${response.status}`,
      };
    }
  } catch {
    // fall through: not a problem document
  }
  return { type: "about:blank", title: response.statusText, status: response.status, detail: text.slice(0, 500), code: `http_${response.status}` };
}

function toConnectionError(error: unknown, timedOut: boolean, method: string, path: string): PaymentsConnectionError {
  const what = `${method} ${path}`;
  if (timedOut) return new PaymentsConnectionError("timeout", `${what}: timed out; the outcome is unknown`, { cause: error });
  if ((error as { name?: unknown } | null)?.name === "AbortError") {
    return new PaymentsConnectionError("aborted", `${what}: aborted; the outcome is unknown`, { cause: error });
  }
  if (hasCode(error, "ECONNREFUSED")) {
    return new PaymentsConnectionError("connection_refused", `${what}: connection refused; nothing was sent`, { cause: error });
  }
  return new PaymentsConnectionError("connection_lost", `${what}: the connection was lost before a response arrived; the outcome is unknown`, {
    cause: error,
  });
}

/** undici wraps socket errors in `cause`, sometimes in an AggregateError (one per address tried). */
function hasCode(error: unknown, code: string, depth = 0): boolean {
  if (error === null || typeof error !== "object" || depth > 5) return false;
  const e = error as { code?: unknown; cause?: unknown; errors?: unknown };
  if (e.code === code) return true;
  if (Array.isArray(e.errors) && e.errors.length > 0 && e.errors.every((inner) => hasCode(inner, code, depth + 1))) return true;
  return hasCode(e.cause, code, depth + 1);
}
