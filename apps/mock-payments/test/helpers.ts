import { afterEach } from "vitest";
import { startMockPayments, type MockPaymentsOptions, type MockPaymentsServer, type PaymentsError } from "../src/index.js";

const started: MockPaymentsServer[] = [];

afterEach(async () => {
  while (started.length > 0) await started.pop()!.close();
});

/** A server closed automatically after the test. */
export async function startServer(options: MockPaymentsOptions = {}): Promise<MockPaymentsServer> {
  const server = await startMockPayments(options);
  started.push(server);
  return server;
}

/** Register a server (e.g. one returned by restart()) for closing after the test. */
export function track(server: MockPaymentsServer): MockPaymentsServer {
  started.push(server);
  return server;
}

export interface RawResponse {
  status: number;
  headers: Headers;
  contentType: string | null;
  body: any;
}

/** A raw HTTP call, so tests see exactly what goes over the wire. */
export async function http(
  server: { url: string },
  method: string,
  path: string,
  init: { token?: string | null; key?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<RawResponse> {
  const headers: Record<string, string> = { ...init.headers };
  const token = init.token === undefined ? "acct_test" : init.token;
  if (token !== null) headers["authorization"] = `Bearer ${token}`;
  if (init.key !== undefined) headers["idempotency-key"] = init.key;
  let body: string | undefined;
  if (init.rawBody !== undefined) body = init.rawBody;
  else if (init.body !== undefined) body = JSON.stringify(init.body);
  if (body !== undefined && headers["content-type"] === undefined) headers["content-type"] = "application/json";
  const requestInit: RequestInit = { method, headers };
  if (body !== undefined) requestInit.body = body;
  const res = await fetch(`${server.url}${path}`, requestInit);
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    contentType: res.headers.get("content-type"),
    body: text.length > 0 ? JSON.parse(text) : null,
  };
}

export const payment = (overrides: Record<string, unknown> = {}) => ({
  payee: "acme-supplies",
  amount: 12_500,
  currency: "EUR",
  reference: "INV-2041",
  ...overrides,
});

export const problemType = (slug: string) => `https://dispatch-once.dev/problems/${slug}`;

/** Wait (without timing assertions) until a condition holds, failing loudly after a bound. */
export async function until(condition: () => boolean, what: string, maxMs = 10_000): Promise<void> {
  const deadline = Date.now() + maxMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** The error a client call fails with; throws when it succeeds. */
export async function failure(promise: Promise<unknown>): Promise<PaymentsError> {
  try {
    await promise;
  } catch (error) {
    return error as PaymentsError;
  }
  throw new Error("expected the call to fail");
}
