import { describe, expect, it } from "vitest";
import {
  createPaymentsClient,
  PaymentsApiError,
  PaymentsConnectionError,
  type Effect,
  type FaultPlan,
  type MockPaymentsServer,
} from "../src/index.js";
import { http, payment, problemType, startServer, track, until } from "./helpers.js";

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected the call to fail");
}

describe("fail_before_accept", () => {
  it("answers 503 with nothing performed and nothing stored under the key", async () => {
    const server = await startServer();
    const res = await http(server, "POST", "/v1/payments", {
      key: "k-503",
      body: payment(),
      headers: { "x-mock-fault": "fail_before_accept" },
    });
    expect(res.status).toBe(503);
    expect(res.contentType).toBe("application/problem+json; charset=utf-8");
    expect(res.headers.get("retry-after")).toBe("1");
    expect(res.body).toMatchObject({ type: problemType("service-unavailable"), status: 503, code: "service_unavailable" });
    expect(server.effects()).toHaveLength(0);
    const retry = await http(server, "POST", "/v1/payments", { key: "k-503", body: payment() });
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBeNull();
    expect(server.effects()).toHaveLength(1);
  });
});

describe("drop_after_accept: the lost response", () => {
  it("performs the effect once; the caller sees only a dropped connection; the retry replays the original payment", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_lost" });
    server.injectFault({ outcome: "drop_after_accept" });

    const error = await rejection(client.createPayment(payment(), { idempotencyKey: "k-lost" }));
    expect(error).toBeInstanceOf(PaymentsConnectionError);
    expect(error).toMatchObject({ code: "connection_lost", outcome: "unknown", effectNotPerformed: false });

    const effects = server.effects();
    expect(effects).toHaveLength(1);
    expect(effects[0]).toMatchObject({ kind: "payment_created", account: "acct_lost", idempotencyKey: "k-lost" });

    const retry = await client.createPayment(payment(), { idempotencyKey: "k-lost" });
    expect(retry.status).toBe(201);
    expect(retry.replayed).toBe(true);
    expect(retry.body.id).toBe(effects[0]!.resourceId);
    expect(server.effects()).toHaveLength(1);
  });

  it("on the unkeyed invoice API, the retry after a lost response creates a second invoice", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_inv" });
    const body = { customer: "globex", amount: 500, currency: "USD" };
    const error = await rejection(client.createInvoice(body, { fault: "drop_after_accept" }));
    expect(error).toMatchObject({ outcome: "unknown" });
    const retry = await client.createInvoice(body);
    expect(retry.replayed).toBe(false);
    expect(server.effects({ kind: "invoice_created" })).toHaveLength(2);
  });

  it("a timeout is the same uncertainty: the effect may complete after the caller gave up", async () => {
    const server = await startServer();
    // The timeout only has to outlast the request's arrival at the server, which is waited for.
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_t", timeoutMs: 3_000 });
    const pending = rejection(client.createPayment(payment(), { idempotencyKey: "k-slow", fault: { latencyMs: 600_000 } }));
    await until(() => server.inFlight().length === 1, "the request to claim its key");
    const error = await pending;
    expect(error).toBeInstanceOf(PaymentsConnectionError);
    expect(error).toMatchObject({ code: "timeout", outcome: "unknown" });
    expect(server.effects()).toHaveLength(0);
    expect(server.releaseLatency()).toBe(1);
    await until(() => server.effects().length === 1, "the abandoned request to complete");
    const retry = await client.createPayment(payment(), { idempotencyKey: "k-slow" });
    expect(retry.replayed).toBe(true);
    expect(retry.body.id).toBe(server.effects()[0]!.resourceId);
  });
});

describe("crash_after_accept", () => {
  it("performs the effect, then stops the server; in-memory state is lost on restart", async () => {
    const effectsSeen: Effect[] = [];
    const server = await startServer({ onEffect: (e) => effectsSeen.push(e) });
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_c" });
    const error = await rejection(client.createPayment(payment(), { idempotencyKey: "k-crash", fault: "crash_after_accept" }));
    expect(error).toMatchObject({ outcome: "unknown" });
    expect(server.crashed).toBe(true);
    expect(await server.stopped).toBe("crashed");
    // The oracle still knows what happened before the crash.
    expect(server.effects()).toHaveLength(1);
    expect(effectsSeen.map((e) => e.resourceId)).toEqual([server.effects()[0]!.resourceId]);

    // Nothing listens any more: a fresh connection is refused, so nothing was performed.
    const refused = await rejection(client.listPayments());
    expect(refused).toBeInstanceOf(PaymentsConnectionError);
    expect(refused).toMatchObject({ code: "connection_refused", outcome: "not_performed", effectNotPerformed: true });

    const restarted = track(await server.restart());
    expect(restarted.port).toBe(server.port);
    const again = await client.createPayment(payment(), { idempotencyKey: "k-crash" });
    expect(again.replayed).toBe(false);
    expect(again.body.id).not.toBe(server.effects()[0]!.resourceId);
  });

  it("abandons requests still waiting in latency: they perform nothing", async () => {
    const server = await startServer();
    const slow = http(server, "POST", "/v1/payments", { key: "k-wait", body: payment(), headers: { "x-mock-fault": '{"latencyMs":600000}' } });
    const slowOutcome = slow.then(
      () => "answered",
      () => "dropped",
    );
    await until(() => server.inFlight().length === 1, "the slow request to claim");
    await rejection(http(server, "POST", "/v1/payments", { key: "k-other", body: payment(), headers: { "x-mock-fault": "crash_after_accept" } }));
    expect(await slowOutcome).toBe("dropped");
    expect(server.effects().map((e) => e.idempotencyKey)).toEqual(["k-other"]);
  });
});

describe("fault selection", () => {
  it("queued faults apply to the next matching requests only, reads excluded by default", async () => {
    const server = await startServer();
    server.injectFault({ outcome: "fail_before_accept" }, { times: 2 });
    expect((await http(server, "GET", "/v1/payments")).status).toBe(200);
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(503);
    expect((await http(server, "POST", "/v1/invoices", { body: { customer: "c", amount: 1, currency: "EUR" } })).status).toBe(503);
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(201);
    expect(server.faultDecisions().map((d) => [d.operation, d.source, d.outcome])).toEqual([
      ["list_payments", "none", "none"],
      ["create_payment", "queue", "fail_before_accept"],
      ["create_invoice", "queue", "fail_before_accept"],
      ["create_payment", "none", "none"],
    ]);
  });

  it("queued faults can target an operation and an account", async () => {
    const server = await startServer();
    server.injectFault({ outcome: "fail_before_accept", operations: ["get_payment"], account: "acct_b" });
    const created = await http(server, "POST", "/v1/payments", { token: "acct_b", body: payment() });
    expect((await http(server, "GET", `/v1/payments/${created.body.id}`, { token: "acct_a" })).status).toBe(404);
    expect((await http(server, "GET", `/v1/payments/${created.body.id}`, { token: "acct_b" })).status).toBe(503);
    expect((await http(server, "GET", `/v1/payments/${created.body.id}`, { token: "acct_b" })).status).toBe(200);
  });

  it("the request's own header wins over queued and global faults, and does not consume the queue", async () => {
    const server = await startServer();
    server.setGlobalFault({ outcome: "fail_before_accept" });
    server.injectFault({ outcome: "fail_before_accept" });
    const res = await http(server, "POST", "/v1/payments", { body: payment(), headers: { "x-mock-fault": '{"latencyMs":0}' } });
    expect(res.status).toBe(201);
    expect(server.faultState().queued).toHaveLength(1);
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(503);
    expect(server.faultDecisions().map((d) => d.source)).toEqual(["header", "queue"]);
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(503);
    server.clearFaults();
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(201);
  });

  it("applies the baseline latency (the chapter's 820 ms) to requests no fault overrides", async () => {
    const server = await startServer({ latencyMs: 820 });
    const res = await http(server, "POST", "/v1/payments", { key: "k", body: payment() });
    expect(res.status).toBe(201);
    server.injectFault({ latencyMs: 0 });
    await http(server, "POST", "/v1/payments", { key: "k2", body: payment() });
    expect(server.faultDecisions().map(({ source, latencyMs }) => [source, latencyMs])).toEqual([
      ["baseline", 820],
      ["queue", 0],
    ]);
  });

  it("answers 400 invalid-fault for a malformed x-mock-fault header and performs nothing", async () => {
    const server = await startServer();
    for (const value of ["explode", '{"latencyMs":-1}', '{"outcome":"drop_after_accept","extra":1}']) {
      const res = await http(server, "POST", "/v1/payments", { body: payment(), headers: { "x-mock-fault": value } });
      expect(res.status).toBe(400);
      expect(res.body.type).toBe(problemType("invalid-fault"));
    }
    expect(server.effects()).toHaveLength(0);
  });

  it("ignores x-mock-fault when allowFaultHeader is false", async () => {
    const server = await startServer({ allowFaultHeader: false });
    const res = await http(server, "POST", "/v1/payments", { body: payment(), headers: { "x-mock-fault": "fail_before_accept" } });
    expect(res.status).toBe(201);
  });

  it("rejects an invalid in-process fault with a typed error", async () => {
    const server = await startServer();
    expect(() => server.injectFault({ latencyMs: -5 })).toThrowError(expect.objectContaining({ code: "invalid_fault" }));
    expect(() => server.setFaultPlan({ seed: 1, probabilities: { fail_before_accept: 0.7, drop_after_accept: 0.7 } })).toThrowError(
      expect.objectContaining({ code: "invalid_fault" }),
    );
  });
});

describe("seeded fault plans are deterministic", () => {
  const plan: FaultPlan = {
    seed: 20_260_101,
    probabilities: { fail_before_accept: 0.25, drop_after_accept: 0.25 },
    latencyMs: { min: 0, max: 3 },
  };

  async function runScenario(server: MockPaymentsServer): Promise<string[]> {
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_plan" });
    const outcomes: string[] = [];
    for (let i = 0; i < 40; i++) {
      try {
        await client.createPayment(payment({ reference: `INV-${i}` }), { idempotencyKey: `k-${i}` });
        outcomes.push("ok");
      } catch (error) {
        if (error instanceof PaymentsApiError) outcomes.push(String(error.status));
        else if (error instanceof PaymentsConnectionError) outcomes.push(error.code);
        else throw error;
      }
    }
    return outcomes;
  }

  it("the same seed and request sequence give the same faults; the effect log agrees with them", async () => {
    const a = await startServer({ faultPlan: plan });
    const b = await startServer({ faultPlan: plan });
    const runA = await runScenario(a);
    const runB = await runScenario(b);
    expect(runB).toEqual(runA);
    const strip = (s: MockPaymentsServer) => s.faultDecisions().map(({ seq, operation, source, outcome, latencyMs }) => ({ seq, operation, source, outcome, latencyMs }));
    expect(strip(b)).toEqual(strip(a));
    // The seed yields a mix of every outcome (fixed by the seed, so this cannot flake).
    expect(new Set(runA)).toEqual(new Set(["ok", "503", "connection_lost"]));
    // Dropped requests were performed; refused ones were not.
    expect(a.effects()).toHaveLength(runA.filter((o) => o !== "503").length);
    expect(a.faultDecisions().every((d) => d.source === "plan")).toBe(true);
  });

  it("a different seed gives a different sequence, and setFaultPlan restarts the stream", async () => {
    const a = await startServer({ faultPlan: plan });
    const other = await startServer({ faultPlan: { ...plan, seed: 7 } });
    const runA = await runScenario(a);
    expect(await runScenario(other)).not.toEqual(runA);
    other.setFaultPlan(plan);
    other.clearEffects();
    expect(await runScenario(other)).toEqual(runA);
  });
});

describe("control endpoints", () => {
  it("GET/DELETE /_control/effects read and reset the effect log", async () => {
    const server = await startServer();
    await http(server, "POST", "/v1/payments", { token: "acct_a", key: "k1", body: payment() });
    await http(server, "POST", "/v1/payments", { token: "acct_b", key: "k1", body: payment() });
    const all = await http(server, "GET", "/_control/effects", { token: null });
    expect(all.status).toBe(200);
    expect(all.body.effects).toEqual(server.effects());
    expect(all.body.effects).toHaveLength(2);
    const onlyB = await http(server, "GET", "/_control/effects?account=acct_b", { token: null });
    expect(onlyB.body.effects.map((e: Effect) => e.account)).toEqual(["acct_b"]);
    expect((await http(server, "DELETE", "/_control/effects", { token: null })).status).toBe(204);
    expect(server.effects()).toEqual([]);
    // Clearing the log does not forget stored responses.
    const replay = await http(server, "POST", "/v1/payments", { token: "acct_a", key: "k1", body: payment() });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
  });

  it("POST /_control/faults queues, sets global faults and plans; DELETE clears", async () => {
    const server = await startServer();
    const queued = await http(server, "POST", "/_control/faults", {
      token: null,
      body: { mode: "queue", fault: { outcome: "drop_after_accept" }, times: 1 },
    });
    expect(queued.status).toBe(200);
    expect(queued.body.queued).toHaveLength(1);
    await rejection(http(server, "POST", "/v1/payments", { key: "k", body: payment() }));
    expect(server.effects()).toHaveLength(1);

    await http(server, "POST", "/_control/faults", { token: null, body: { mode: "global", fault: { outcome: "fail_before_accept" } } });
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(503);
    await http(server, "POST", "/_control/faults", { token: null, body: { mode: "global", fault: null } });
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(201);

    const planned = await http(server, "POST", "/_control/faults", {
      token: null,
      body: { mode: "plan", plan: { seed: 3, probabilities: { fail_before_accept: 1 } } },
    });
    expect(planned.body.plan).toMatchObject({ seed: 3 });
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(503);
    const state = await http(server, "GET", "/_control/faults", { token: null });
    expect(state.body.decisions.length).toBeGreaterThan(0);

    expect((await http(server, "DELETE", "/_control/faults", { token: null })).status).toBe(204);
    expect((await http(server, "POST", "/v1/payments", { body: payment() })).status).toBe(201);

    const bad = await http(server, "POST", "/_control/faults", { token: null, body: { mode: "queue", fault: { outcome: "explode" } } });
    expect(bad.status).toBe(400);
    expect(bad.body.type).toBe(problemType("invalid-fault"));
  });

  it("in-flight and latency release are reachable over HTTP", async () => {
    const server = await startServer({ latencyMs: 600_000 });
    const pending = http(server, "POST", "/v1/payments", { key: "k-http", body: payment() });
    await until(() => server.inFlight().length === 1, "the request to claim");
    const inFlight = await http(server, "GET", "/_control/in-flight", { token: null });
    expect(inFlight.body.inFlight).toEqual([expect.objectContaining({ key: "k-http", operation: "create_payment" })]);
    expect((await http(server, "POST", "/_control/latency/release", { token: null })).body).toEqual({ released: 1 });
    expect((await pending).status).toBe(201);
    expect((await http(server, "POST", "/_control/reset", { token: null })).status).toBe(204);
    expect(server.effects()).toEqual([]);
    expect(server.payments("acct_test")).toEqual([]);
  });

  it("are absent when control is disabled", async () => {
    const server = await startServer({ control: false });
    expect((await http(server, "GET", "/_control/effects", { token: null })).status).toBe(404);
  });
});
