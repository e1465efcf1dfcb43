import { Agent, createServer } from "node:http";
import { afterAll, describe, expect, it } from "vitest";
import { createPaymentsClient, PaymentsApiError, PaymentsConnectionError, PaymentsInputError, type PaymentsClientOptions } from "../src/index.js";
import { failure, payment, startServer, until } from "./helpers.js";

const agent = new Agent({ keepAlive: true });
afterAll(() => agent.destroy());

// The same calls over either transport must tell the caller the same truth: what was performed,
// what certainly was not, and what is unknown.
const transports: [string, Pick<PaymentsClientOptions, "agent">][] = [
  ["fetch", {}],
  ["a keep-alive http.Agent", { agent }],
];

describe.each(transports)("createPaymentsClient over %s", (_name, transport) => {
  const client = (options: Omit<PaymentsClientOptions, "agent" | "fetch">) => createPaymentsClient({ ...options, ...transport });

  it("creates, replays (Idempotent-Replayed) and looks a key up", async () => {
    const server = await startServer();
    const c = client({ baseURL: server.url, token: "acct_agent" });
    const created = await c.createPayment(payment({ memo: "m" }), { idempotencyKey: "k-1" });
    expect(created).toMatchObject({ status: 201, replayed: false, body: { object: "payment", memo: "m" } });
    const replay = await c.createPayment(payment({ memo: "m" }), { idempotencyKey: "k-1" });
    expect(replay).toEqual({ ...created, replayed: true });
    const lookup = await c.lookupIdempotencyKey("k-1");
    expect(lookup.body).toMatchObject({ state: "completed", response: { status: 201, body: { id: created.body.id } } });
    expect(server.effects()).toHaveLength(1);
  });

  it.each([
    ["a reused key", "request_mismatch", 422],
    ["an invalid body", "rejected", 400],
    ["a failure before acceptance", "not_performed", 503],
  ] as const)("throws PaymentsApiError for %s with outcome %s", async (what, outcome, status) => {
    const server = await startServer();
    const c = client({ baseURL: server.url, token: "acct" });
    let call: Promise<unknown>;
    if (what === "a reused key") {
      await c.createPayment(payment(), { idempotencyKey: "x" });
      call = c.createPayment(payment({ amount: 2 }), { idempotencyKey: "x" });
    } else if (what === "an invalid body") {
      call = c.createPayment(payment({ currency: "euro" }), { idempotencyKey: "x" });
    } else {
      call = c.createPayment(payment(), { idempotencyKey: "x", fault: "fail_before_accept" });
    }
    const error = await failure(call);
    expect(error).toBeInstanceOf(PaymentsApiError);
    expect(error).toMatchObject({ status, outcome });
  });

  it("reports a lost response (accepted, then the connection dropped) as connection_lost, outcome unknown", async () => {
    const server = await startServer();
    const c = client({ baseURL: server.url, token: "acct_lost" });
    const error = await failure(c.createPayment(payment(), { idempotencyKey: "k-lost", fault: "drop_after_accept" }));
    expect(error).toBeInstanceOf(PaymentsConnectionError);
    expect(error).toMatchObject({ code: "connection_lost", outcome: "unknown", effectNotPerformed: false });
    expect(server.effects()).toHaveLength(1);
    // The next call on the same client still works (a dropped socket is not reused).
    const retry = await c.createPayment(payment(), { idempotencyKey: "k-lost" });
    expect(retry).toMatchObject({ status: 201, replayed: true, body: { id: server.effects()[0]!.resourceId } });
  });

  it("reports a body cut off mid-way as connection_lost, outcome unknown", async () => {
    const cutting = createServer((_req, res) => {
      res.writeHead(201, { "content-type": "application/json", "content-length": "100" });
      res.write('{"id":"pay_');
      setTimeout(() => res.socket?.destroy(), 10);
    });
    await new Promise<void>((resolve) => cutting.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = cutting.address() as { port: number };
      const error = await failure(client({ baseURL: `http://127.0.0.1:${port}`, token: "t" }).createPayment(payment(), { idempotencyKey: "k-cut" }));
      expect(error).toBeInstanceOf(PaymentsConnectionError);
      expect(error).toMatchObject({ code: "connection_lost", outcome: "unknown" });
    } finally {
      cutting.closeAllConnections();
      await new Promise((resolve) => cutting.close(resolve));
    }
  });

  it("reports a timeout as timeout, outcome unknown", async () => {
    const server = await startServer();
    const c = client({ baseURL: server.url, token: "acct_t", timeoutMs: 300 });
    const error = await failure(c.createPayment(payment(), { idempotencyKey: "k-slow", fault: { latencyMs: 600_000 } }));
    expect(error).toBeInstanceOf(PaymentsConnectionError);
    expect(error).toMatchObject({ code: "timeout", outcome: "unknown" });
    server.releaseLatency();
  });

  it("reports an abort by the caller as aborted, outcome unknown", async () => {
    const server = await startServer();
    const c = client({ baseURL: server.url, token: "t" });
    const controller = new AbortController();
    const pending = c.createPayment(payment(), { idempotencyKey: "a", signal: controller.signal, fault: { latencyMs: 600_000 } });
    await until(() => server.inFlight().length === 1, "the request to claim its key");
    controller.abort();
    expect(await failure(pending)).toMatchObject({ code: "aborted", outcome: "unknown" });
    server.releaseLatency();
  });

  it("reports a refused connection as connection_refused, not performed", async () => {
    const server = await startServer();
    const url = server.url;
    await server.close();
    const error = await failure(client({ baseURL: url, token: "t" }).listPayments());
    expect(error).toBeInstanceOf(PaymentsConnectionError);
    expect(error).toMatchObject({ code: "connection_refused", outcome: "not_performed", effectNotPerformed: true });
  });
});

describe("createPaymentsClient options", () => {
  it("refuses fetch and agent together, and an agent with a non-http: base URL", () => {
    expect(() => createPaymentsClient({ baseURL: "http://x", token: "t", agent, fetch })).toThrow(PaymentsInputError);
    expect(() => createPaymentsClient({ baseURL: "https://x", token: "t", agent })).toThrow(/http: baseURL/);
  });
});
