import { describe, expect, it } from "vitest";
import { createPaymentsClient, PaymentsApiError } from "../src/index.js";
import { failure, payment, problemType, startServer } from "./helpers.js";

describe("createPaymentsClient", () => {
  it("creates, replays, voids, gets and lists, reporting Idempotent-Replayed", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: `${server.url}/`, token: "acct_client" });
    const created = await client.createPayment(payment({ memo: "m" }), { idempotencyKey: "c-1" });
    expect(created).toMatchObject({ status: 201, replayed: false, body: { object: "payment", memo: "m" } });
    const replay = await client.createPayment(payment({ memo: "m" }), { idempotencyKey: "c-1" });
    expect(replay).toEqual({ ...created, replayed: true });
    const voided = await client.voidPayment(created.body.id, { idempotencyKey: "c-2", reason: "customer request" });
    expect(voided).toMatchObject({ status: 200, replayed: false, body: { status: "voided", void_reason: "customer request" } });
    expect((await client.getPayment(created.body.id)).body).toEqual(voided.body);
    expect((await client.listPayments()).body).toEqual({ object: "list", data: [voided.body] });
    const invoice = await client.createInvoice({ customer: "c", amount: 1, currency: "JPY" });
    expect((await client.listInvoices()).body.data).toEqual([invoice.body]);
    expect(server.effects().map((e) => [e.kind, e.account])).toEqual([
      ["payment_created", "acct_client"],
      ["payment_voided", "acct_client"],
      ["invoice_created", "acct_client"],
    ]);
  });

  it("sends keys as sf-strings by default and bare on request; both name the same key, escapes included", async () => {
    const server = await startServer();
    const seen: (string | null)[] = [];
    const spy: typeof fetch = (input, init) => {
      seen.push(new Headers(init?.headers).get("idempotency-key"));
      return fetch(input, init);
    };
    const quoted = createPaymentsClient({ baseURL: server.url, token: "t", fetch: spy });
    const bare = createPaymentsClient({ baseURL: server.url, token: "t", fetch: spy, idempotencyKeyFormat: "bare" });
    const a = await quoted.createPayment(payment(), { idempotencyKey: "turn-3:pay" });
    const b = await bare.createPayment(payment(), { idempotencyKey: "turn-3:pay" });
    expect(seen).toEqual(['"turn-3:pay"', "turn-3:pay"]);
    expect(b.replayed).toBe(true);
    expect(b.body.id).toBe(a.body.id);
    const odd = await quoted.createPayment(payment(), { idempotencyKey: 'q"uo\\te' });
    expect(seen.at(-1)).toBe('"q\\"uo\\\\te"');
    expect(odd.replayed).toBe(false);
    expect(server.effects().at(-1)!.idempotencyKey).toBe('q"uo\\te');
  });

  it.each([
    // The key is held for another request that may have been performed: never "rejected" (EFFECT-6).
    ["422 key reused", "request_mismatch", 422, "idempotency_key_reused"],
    ["409 key in use", "in_flight", 409, "idempotency_key_in_use"],
    ["400 invalid body", "rejected", 400, "invalid_request_body"],
    ["401 unauthorized", "rejected", 401, "unauthorized"],
    ["503 fail before accept", "not_performed", 503, "service_unavailable"],
    ["409 already voided", "rejected", 409, "payment_already_voided"],
  ] as const)("throws PaymentsApiError for %s with outcome %s", async (name, outcome, status, code) => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct" });
    let call: Promise<unknown>;
    switch (name) {
      case "422 key reused":
        await client.createPayment(payment(), { idempotencyKey: "x" });
        call = client.createPayment(payment({ amount: 2 }), { idempotencyKey: "x" });
        break;
      case "409 key in use":
        void client.createPayment(payment(), { idempotencyKey: "x", fault: { latencyMs: 600_000 } }).catch(() => undefined);
        while (server.inFlight().length === 0) await new Promise((r) => setTimeout(r, 5));
        call = client.createPayment(payment(), { idempotencyKey: "x" });
        break;
      case "400 invalid body":
        call = client.createPayment(payment({ currency: "euro" }), { idempotencyKey: "x" });
        break;
      case "401 unauthorized":
        call = createPaymentsClient({ baseURL: server.url, token: "two words" }).listPayments();
        break;
      case "503 fail before accept":
        call = client.createPayment(payment(), { idempotencyKey: "x", fault: "fail_before_accept" });
        break;
      case "409 already voided": {
        const p = await client.createPayment(payment());
        await client.voidPayment(p.body.id);
        call = client.voidPayment(p.body.id);
        break;
      }
    }
    const error = await failure(call);
    expect(error).toBeInstanceOf(PaymentsApiError);
    const api = error as PaymentsApiError;
    expect(api.status).toBe(status);
    expect(api.code).toBe(code);
    expect(api.outcome).toBe(outcome);
    expect(api.effectNotPerformed).toBe(outcome === "rejected" || outcome === "not_performed");
    expect(api.problem).toMatchObject({ status, code, type: problemType(code.replaceAll("_", "-")) });
    expect(typeof api.problem.detail).toBe("string");
  });

  it("marks a replayed stored error as replayed", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct" });
    const first = await failure(client.voidPayment("pay_missing", { idempotencyKey: "v" }));
    const again = await failure(client.voidPayment("pay_missing", { idempotencyKey: "v" }));
    expect(first).toMatchObject({ status: 404, replayed: false, outcome: "rejected" });
    expect(again).toMatchObject({ status: 404, replayed: true, outcome: "rejected" });
  });

  // A refused connection (not performed) is tested over each transport in client-agent.test.ts.
  it("reports a non-problem error body generically", async () => {
    const html: typeof fetch = async () => new Response("<h1>Bad Gateway</h1>", { status: 502, statusText: "Bad Gateway" });
    const gateway = await failure(createPaymentsClient({ baseURL: "http://x", token: "t", fetch: html }).listPayments());
    expect(gateway).toMatchObject({ status: 502, outcome: "unknown", code: "http_502", problem: { type: "about:blank" } });
  });

  it("reports an abort by the caller as an unknown outcome", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "t" });
    const controller = new AbortController();
    const pending = client.createPayment(payment(), { idempotencyKey: "a", signal: controller.signal, fault: { latencyMs: 600_000 } });
    while (server.inFlight().length === 0) await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    const error = await failure(pending);
    expect(error).toMatchObject({ code: "aborted", outcome: "unknown" });
  });
});
