import { request as httpRequest, type Agent, type IncomingMessage } from "node:http";
import { formatIdempotencyKey } from "./idempotency-key.js";
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
 * What a failed call means for the effect, from the caller's side:
 * - "rejected": the server refused the request; the effect did not happen and repeating the same
 *   request fails the same way (400, 401, 404, 413, a validation 422, 409 payment-already-voided).
 *   Maps to the core FailureDisposition "definite".
 * - "request_mismatch": 422 idempotency-key-reused: the key is held for a DIFFERENT request, which
 *   may well have been performed. It is never "did not happen": maps to "request_mismatch"
 *   (the dispatcher marks the call unknown; spec EFFECT-6).
 * - "not_performed": the effect certainly did not happen and a retry may succeed (503 before
 *   acceptance, connection refused). Maps to "not_performed".
 * - "in_flight": another request with the same Idempotency-Key is executing (409); its outcome
 *   is not known yet. Retry later with the same key.
 * - "unknown": the request may or may not have been performed (connection dropped mid-request,
 *   timeout, 5xx other than the mock's 503). Retry with the same key to learn the outcome.
 */
export type PaymentsOutcome = "rejected" | "not_performed" | "in_flight" | "unknown" | "request_mismatch";

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

export abstract class PaymentsError extends Error {
  abstract readonly code: string;
  abstract readonly outcome: PaymentsOutcome;
  /** True when the effect of this request certainly did not happen. */
  get effectNotPerformed(): boolean {
    return this.outcome === "rejected" || this.outcome === "not_performed";
  }
}

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
  if (options.agent !== undefined && options.fetch !== undefined) {
    throw new TypeError("createPaymentsClient: give either fetch or agent, not both");
  }
  const base = options.baseURL.replace(/\/+$/, "");
  if (options.agent !== undefined && !base.startsWith("http:")) {
    throw new TypeError(`createPaymentsClient: agent needs an http: baseURL, got ${options.baseURL}`);
  }
  const transport = options.agent !== undefined ? agentTransport(options.agent) : fetchTransport(options.fetch ?? globalThis.fetch);
  const keyFormat = options.idempotencyKeyFormat ?? "sf-string";

  async function call<T>(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    opts: KeyedRequestOptions | undefined,
  ): Promise<PaymentsResult<T>> {
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

  return {
    createPayment: (body, opts) => call<Payment>("POST", "/v1/payments", body, opts),
    voidPayment: (id, opts) =>
      call<Payment>("POST", `/v1/payments/${encodeURIComponent(id)}/void`, opts?.reason !== undefined ? { reason: opts.reason } : {}, opts),
    getPayment: (id, opts) => call<Payment>("GET", `/v1/payments/${encodeURIComponent(id)}`, undefined, opts),
    listPayments: (opts) => call<ListResponse<Payment>>("GET", "/v1/payments", undefined, opts),
    createInvoice: (body, opts) => call<Invoice>("POST", "/v1/invoices", body, opts),
    listInvoices: (opts) => call<ListResponse<Invoice>>("GET", "/v1/invoices", undefined, opts),
    lookupIdempotencyKey: (key, opts) =>
      call<IdempotencyKeyLookup>("GET", `/v1/idempotency-keys/${encodeURIComponent(key)}`, undefined, opts),
  };
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
