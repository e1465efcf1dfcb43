import { Agent, get } from "node:http";
import { describe, expect, it } from "vitest";
import { http, payment, problemType, startServer, until } from "./helpers.js";

const PROBLEM_JSON = "application/problem+json; charset=utf-8";

describe("POST /v1/payments with Idempotency-Key", () => {
  it("executes the first request: 201, a server-generated pay_ id, one payment_created effect", async () => {
    const server = await startServer();
    const res = await http(server, "POST", "/v1/payments", { key: "k-first", body: payment({ memo: "March supplies" }) });
    expect(res.status).toBe(201);
    expect(res.contentType).toBe("application/json; charset=utf-8");
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    expect(res.body).toMatchObject({
      object: "payment",
      payee: "acme-supplies",
      amount: 12_500,
      currency: "EUR",
      reference: "INV-2041",
      memo: "March supplies",
      status: "succeeded",
    });
    expect(res.body.id).toMatch(/^pay_[0-9a-f]{24}$/);
    const effects = server.effects();
    expect(effects).toHaveLength(1);
    expect(effects[0]).toMatchObject({
      kind: "payment_created",
      account: "acct_test",
      idempotencyKey: "k-first",
      resourceId: res.body.id,
      payload: payment({ memo: "March supplies" }),
    });
    expect(Number.isNaN(Date.parse(effects[0]!.at))).toBe(false);
  });

  it("replays the original status and body for the same key and payload, with Idempotent-Replayed: true", async () => {
    const server = await startServer();
    const first = await http(server, "POST", "/v1/payments", { key: "k-replay", body: payment() });
    // Same values, members in another order: the canonical fingerprint matches.
    const reordered = { reference: "INV-2041", currency: "EUR", amount: 12_500, payee: "acme-supplies" };
    const second = await http(server, "POST", "/v1/payments", { key: "k-replay", body: reordered });
    expect(second.status).toBe(201);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(second.body).toEqual(first.body);
    expect(server.effects()).toHaveLength(1);
    expect(server.payments("acct_test")).toHaveLength(1);
  });

  it("answers 422 when the key is reused with a different payload, and stores nothing for it", async () => {
    const server = await startServer();
    const first = await http(server, "POST", "/v1/payments", { key: "k-reuse", body: payment() });
    const other = await http(server, "POST", "/v1/payments", { key: "k-reuse", body: payment({ amount: 12_501 }) });
    expect(other.status).toBe(422);
    expect(other.contentType).toBe(PROBLEM_JSON);
    expect(other.body).toMatchObject({
      type: problemType("idempotency-key-reused"),
      title: expect.any(String),
      status: 422,
      detail: expect.stringContaining("k-reuse"),
      code: "idempotency_key_reused",
    });
    // An added optional member is a different payload too.
    const withMemo = await http(server, "POST", "/v1/payments", { key: "k-reuse", body: payment({ memo: "x" }) });
    expect(withMemo.status).toBe(422);
    // The original is untouched and still replays.
    const again = await http(server, "POST", "/v1/payments", { key: "k-reuse", body: payment() });
    expect(again.body.id).toBe(first.body.id);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(server.effects()).toHaveLength(1);
  });

  it("answers 422 when a key used for a create is reused for a void", async () => {
    const server = await startServer();
    const created = await http(server, "POST", "/v1/payments", { key: "k-shared", body: payment() });
    const voided = await http(server, "POST", `/v1/payments/${created.body.id}/void`, { key: "k-shared", body: {} });
    expect(voided.status).toBe(422);
    expect(voided.body.type).toBe(problemType("idempotency-key-reused"));
    expect(server.payments("acct_test")[0]!.status).toBe("succeeded");
  });

  it("answers 409 while the first request with the key is still executing, then replays once it finished", async () => {
    const server = await startServer();
    // The first request holds its claim through a long injected latency, released by the test.
    const first = http(server, "POST", "/v1/payments", {
      key: "k-busy",
      body: payment(),
      headers: { "x-mock-fault": JSON.stringify({ latencyMs: 600_000 }) },
    });
    await until(() => server.inFlight().length === 1, "the first request to claim its key");
    expect(server.inFlight()[0]).toMatchObject({ account: "acct_test", key: "k-busy", operation: "create_payment" });
    expect(server.effects()).toHaveLength(0);

    const second = await http(server, "POST", "/v1/payments", { key: "k-busy", body: payment() });
    expect(second.status).toBe(409);
    expect(second.contentType).toBe(PROBLEM_JSON);
    expect(second.body).toMatchObject({ type: problemType("idempotency-key-in-use"), status: 409, code: "idempotency_key_in_use" });
    // A different payload during the execution is a misuse of the key, reported as such.
    const third = await http(server, "POST", "/v1/payments", { key: "k-busy", body: payment({ amount: 1 }) });
    expect(third.status).toBe(422);

    expect(server.releaseLatency()).toBe(1);
    const done = await first;
    expect(done.status).toBe(201);
    expect(server.inFlight()).toEqual([]);
    // The 409 was not stored: the retry gets the original response.
    const retry = await http(server, "POST", "/v1/payments", { key: "k-busy", body: payment() });
    expect(retry.status).toBe(201);
    expect(retry.body.id).toBe(done.body.id);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(server.effects()).toHaveLength(1);
  });

  it("answers 400 without a key when the server requires keys; accepts unkeyed writes otherwise", async () => {
    const strict = await startServer({ requireIdempotencyKey: true });
    const missing = await http(strict, "POST", "/v1/payments", { body: payment() });
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ type: problemType("idempotency-key-missing"), status: 400 });
    const missingVoid = await http(strict, "POST", "/v1/payments/pay_x/void", { body: {} });
    expect(missingVoid.body.type).toBe(problemType("idempotency-key-missing"));
    expect(strict.effects()).toHaveLength(0);

    const lenient = await startServer();
    const a = await http(lenient, "POST", "/v1/payments", { body: payment() });
    const b = await http(lenient, "POST", "/v1/payments", { body: payment() });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(a.body.id).not.toBe(b.body.id);
    expect(lenient.effects().map((e) => e.idempotencyKey)).toEqual([null, null]);
  });

  it("treats a quoted RFC 8941 sf-string and the bare token as the same key", async () => {
    const server = await startServer();
    const bare = await http(server, "POST", "/v1/payments", { key: "order-7:pay/1", body: payment() });
    const quoted = await http(server, "POST", "/v1/payments", { key: '"order-7:pay/1"', body: payment() });
    expect(quoted.status).toBe(201);
    expect(quoted.headers.get("idempotent-replayed")).toBe("true");
    expect(quoted.body.id).toBe(bare.body.id);

    // Escapes: "a\"b\\c" is the key a"b\c, which only the quoted form can carry.
    const escaped = await http(server, "POST", "/v1/payments", { key: '"a\\"b\\\\c"', body: payment() });
    expect(escaped.status).toBe(201);
    expect(escaped.headers.get("idempotent-replayed")).toBeNull();
    expect(server.effects().at(-1)!.idempotencyKey).toBe('a"b\\c');
    const escapedAgain = await http(server, "POST", "/v1/payments", { key: '"a\\"b\\\\c"', body: payment() });
    expect(escapedAgain.body.id).toBe(escaped.body.id);
    expect(server.effects()).toHaveLength(2);
  });

  it.each([
    ["empty", ""],
    ["unterminated sf-string", '"abc'],
    ["bad escape", '"a\\nb"'],
    ["text after the closing quote", '"abc"def'],
    ["empty sf-string", '""'],
    ["tab inside an sf-string", '"a\tb"'],
    ["non-ASCII", "caf\u00e9"],
    ["space in a bare key", "two words"],
    ["two header lines joined", "k1, k2"],
    ["over 255 characters", "k".repeat(256)],
  ])("answers 400 for a malformed key (%s) and performs nothing", async (_name, key) => {
    const server = await startServer();
    const res = await http(server, "POST", "/v1/payments", { key, body: payment() });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: problemType("idempotency-key-malformed"), status: 400 });
    expect(server.effects()).toHaveLength(0);
  });

  it("accepts a key of exactly 255 characters", async () => {
    const server = await startServer();
    const res = await http(server, "POST", "/v1/payments", { key: "k".repeat(255), body: payment() });
    expect(res.status).toBe(201);
  });

  it.each([
    ["amount zero", payment({ amount: 0 })],
    ["fractional amount", payment({ amount: 10.5 })],
    ["amount as a string", payment({ amount: "100" })],
    ["lower-case currency", payment({ currency: "eur" })],
    ["four-letter currency", payment({ currency: "EURO" })],
    ["missing payee", { amount: 1, currency: "EUR", reference: "r" }],
    ["empty reference", payment({ reference: "" })],
    ["unknown member", payment({ priority: "high" })],
    ["array body", [payment()]],
  ])("answers 400 for an invalid body (%s); the key stays unused", async (_name, body) => {
    const server = await startServer();
    const bad = await http(server, "POST", "/v1/payments", { key: "k-invalid", body });
    expect(bad.status).toBe(400);
    expect(bad.contentType).toBe(PROBLEM_JSON);
    expect(bad.body.type).toBe(problemType("invalid-request-body"));
    expect(Array.isArray(bad.body.errors)).toBe(true);
    expect(bad.body.errors.length).toBeGreaterThan(0);
    // Validation failed before execution, so nothing was stored under the key: the corrected
    // request with the same key executes.
    const good = await http(server, "POST", "/v1/payments", { key: "k-invalid", body: payment() });
    expect(good.status).toBe(201);
    expect(good.headers.get("idempotent-replayed")).toBeNull();
    expect(server.effects()).toHaveLength(1);
  });

  it("answers 400 for a body that is not JSON and for a missing body", async () => {
    const server = await startServer();
    const broken = await http(server, "POST", "/v1/payments", { key: "k", rawBody: '{"payee": ' });
    expect(broken.status).toBe(400);
    expect(broken.body.type).toBe(problemType("malformed-json"));
    const none = await http(server, "POST", "/v1/payments", { key: "k" });
    expect(none.status).toBe(400);
    expect(none.body.type).toBe(problemType("invalid-request-body"));
    const text = await http(server, "POST", "/v1/payments", { key: "k", rawBody: "hello", headers: { "content-type": "text/plain" } });
    expect(text.status).toBe(400);
    expect(text.body.type).toBe(problemType("invalid-request-body"));
    expect(server.effects()).toHaveLength(0);
  });

  it("answers 413 for an oversized body", async () => {
    const server = await startServer();
    const res = await http(server, "POST", "/v1/payments", { key: "k", body: payment({ memo: "m".repeat(200_000) }) });
    expect(res.status).toBe(413);
    expect(res.body.type).toBe(problemType("payload-too-large"));
  });

  it("forgets a stored response after the retention period, and not before", async () => {
    let now = Date.parse("2026-01-01T00:00:00Z");
    const server = await startServer({ retentionMs: 60_000, now: () => now });
    const first = await http(server, "POST", "/v1/payments", { key: "k-ttl", body: payment() });
    now += 59_999;
    const within = await http(server, "POST", "/v1/payments", { key: "k-ttl", body: payment() });
    expect(within.body.id).toBe(first.body.id);
    expect(within.headers.get("idempotent-replayed")).toBe("true");
    now += 1;
    const after = await http(server, "POST", "/v1/payments", { key: "k-ttl", body: payment({ amount: 7 }) });
    expect(after.status).toBe(201);
    expect(after.headers.get("idempotent-replayed")).toBeNull();
    expect(after.body.id).not.toBe(first.body.id);
    expect(server.effects()).toHaveLength(2);
  });

  it("keeps at most memoryLimit payments, effects and fault decisions, the newest; onEffect still sees every effect", async () => {
    const seen: string[] = [];
    const server = await startServer({ memoryLimit: 2, onEffect: (e) => seen.push(e.resourceId) });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await http(server, "POST", "/v1/payments", { key: `k-limit-${i}`, body: payment({ amount: 100 + i }) });
      expect(res.status).toBe(201);
      ids.push(res.body.id);
    }
    expect(seen).toEqual(ids);
    expect(server.effects().map((e) => e.resourceId)).toEqual(ids.slice(2));
    expect(server.payments("acct_test").map((p) => p.id)).toEqual(ids.slice(2));
    expect(server.faultDecisions()).toHaveLength(2);
    expect((await http(server, "GET", `/v1/payments/${ids[0]}`)).status).toBe(404);
    expect((await http(server, "GET", `/v1/payments/${ids[3]}`)).status).toBe(200);
    // Idempotency keys are bounded by retention, not by the limit: the first key still replays.
    const again = await http(server, "POST", "/v1/payments", { key: "k-limit-0", body: payment({ amount: 100 }) });
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body.id).toBe(ids[0]);
  });

  it("refuses an option it does not have, naming it (adoption trial: a misspelt requireIdempotencyKey left keys optional without a word, so a test that meant to prove keys are forwarded passed unkeyed)", async () => {
    for (const options of [{ requireIdempotency: true }, { latency: 5 }, null, [] as never]) {
      const outcome = await startServer(options as never).then(
        async (server) => {
          await server.close();
          return "started";
        },
        (error: unknown) => error,
      );
      expect(outcome, JSON.stringify(options)).toMatchObject({ code: "invalid_option" });
      if (options !== null && !Array.isArray(options)) expect(String((outcome as Error).message)).toContain(Object.keys(options)[0]);
    }
  });

  it("refuses a memoryLimit that is not a positive integer", async () => {
    await expect(startServer({ memoryLimit: 0 })).rejects.toMatchObject({ code: "invalid_option" });
  });

  it("keeps idle connections open for keepAliveTimeoutMs and says so in Keep-Alive (clients close theirs first); refuses a value outside 1000..3600000", async () => {
    const keepAliveOf = async (server: { url: string }) => {
      const agent = new Agent({ keepAlive: true });
      try {
        return await new Promise<string | undefined>((resolve, reject) => {
          get(`${server.url}/v1/payments/pay_none`, { agent, headers: { authorization: "Bearer acct_test" } }, (res) => {
            res.resume();
            res.on("end", () => resolve(String(res.headers["keep-alive"])));
          }).on("error", reject);
        });
      } finally {
        agent.destroy();
      }
    };
    expect(await keepAliveOf(await startServer())).toBe("timeout=5");
    expect(await keepAliveOf(await startServer({ keepAliveTimeoutMs: 65_000 }))).toBe("timeout=65");
    for (const bad of [0, 999, 1.5, 3_600_001]) {
      await expect(startServer({ keepAliveTimeoutMs: bad }), String(bad)).rejects.toMatchObject({ code: "invalid_option" });
    }
  });

  it("reports each committed effect to onEffect; a throwing listener does not turn the effect into an error", async () => {
    const seen: string[] = [];
    const server = await startServer({
      onEffect: (e) => {
        seen.push(e.resourceId);
        throw new Error("listener bug");
      },
    });
    const errors: unknown[] = [];
    const original = console.error;
    console.error = (...args: unknown[]) => errors.push(args);
    try {
      const res = await http(server, "POST", "/v1/payments", { key: "k-listener", body: payment() });
      expect(res.status).toBe(201);
      expect(seen).toEqual([res.body.id]);
      expect(errors).toHaveLength(1);
    } finally {
      console.error = original;
    }
  });

  it("defaults retention to 24 hours", async () => {
    let now = Date.parse("2026-01-01T00:00:00Z");
    const server = await startServer({ now: () => now });
    const first = await http(server, "POST", "/v1/payments", { key: "k-day", body: payment() });
    now += 24 * 3600 * 1000 - 1;
    expect((await http(server, "POST", "/v1/payments", { key: "k-day", body: payment() })).body.id).toBe(first.body.id);
    now += 1;
    expect((await http(server, "POST", "/v1/payments", { key: "k-day", body: payment() })).body.id).not.toBe(first.body.id);
  });
});

describe("authentication", () => {
  it.each([
    ["no Authorization header", null, undefined],
    ["a Basic credential", null, { authorization: "Basic dXNlcjpwYXNz" }],
    ["an empty bearer token", null, { authorization: "Bearer " }],
  ])("answers 401 for %s", async (_name, token, headers) => {
    const server = await startServer();
    const init: Parameters<typeof http>[3] = { token, key: "k", body: payment() };
    if (headers !== undefined) init.headers = headers;
    const res = await http(server, "POST", "/v1/payments", init);
    expect(res.status).toBe(401);
    expect(res.contentType).toBe(PROBLEM_JSON);
    expect(res.headers.get("www-authenticate")).toContain("Bearer");
    expect(res.body).toMatchObject({ type: problemType("unauthorized"), status: 401 });
    expect((await http(server, "GET", "/v1/payments", { token: null })).status).toBe(401);
    expect(server.effects()).toHaveLength(0);
  });
});

describe("void, get and list", () => {
  it("voids a payment (200), replays the void, and answers 409 payment-already-voided for a new void", async () => {
    const server = await startServer();
    const created = await http(server, "POST", "/v1/payments", { key: "k-pay", body: payment() });
    const id = created.body.id as string;
    const voided = await http(server, "POST", `/v1/payments/${id}/void`, { key: "k-void", body: { reason: "duplicate" } });
    expect(voided.status).toBe(200);
    expect(voided.body).toMatchObject({ id, status: "voided", void_reason: "duplicate" });
    expect(voided.body.voided_at).toEqual(expect.any(String));

    const replay = await http(server, "POST", `/v1/payments/${id}/void`, { key: "k-void", body: { reason: "duplicate" } });
    expect(replay.status).toBe(200);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(voided.body);

    const again = await http(server, "POST", `/v1/payments/${id}/void`, { key: "k-void-2" });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ type: problemType("payment-already-voided"), code: "payment_already_voided", payment_id: id });
    // That business error happened after execution started, so it is stored and replayed.
    const againReplay = await http(server, "POST", `/v1/payments/${id}/void`, { key: "k-void-2" });
    expect(againReplay.status).toBe(409);
    expect(againReplay.headers.get("idempotent-replayed")).toBe("true");
    expect(againReplay.body).toEqual(again.body);

    expect(server.effects().map((e) => e.kind)).toEqual(["payment_created", "payment_voided"]);
    expect(server.effects()[1]).toMatchObject({ idempotencyKey: "k-void", resourceId: id, payload: { paymentId: id, reason: "duplicate" } });
    const fetched = await http(server, "GET", `/v1/payments/${id}`);
    expect(fetched.status).toBe(200);
    expect(fetched.body.status).toBe("voided");
  });

  it("answers 404 for an unknown payment on void (stored under the key) and on get", async () => {
    const server = await startServer();
    const voided = await http(server, "POST", "/v1/payments/pay_nope/void", { key: "k-404" });
    expect(voided.status).toBe(404);
    expect(voided.body).toMatchObject({ type: problemType("payment-not-found"), status: 404 });
    const replay = await http(server, "POST", "/v1/payments/pay_nope/void", { key: "k-404" });
    expect(replay.status).toBe(404);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    const get = await http(server, "GET", "/v1/payments/pay_nope");
    expect(get.status).toBe(404);
    expect(get.body.type).toBe(problemType("payment-not-found"));
    expect(server.effects()).toHaveLength(0);
  });

  it("answers 400 for an invalid void body", async () => {
    const server = await startServer();
    const created = await http(server, "POST", "/v1/payments", { body: payment() });
    const res = await http(server, "POST", `/v1/payments/${created.body.id}/void`, { key: "k", body: { reason: 5 } });
    expect(res.status).toBe(400);
    expect(res.body.type).toBe(problemType("invalid-request-body"));
    expect(server.payments("acct_test")[0]!.status).toBe("succeeded");
  });

  it("lists the account's payments in creation order", async () => {
    const server = await startServer();
    const a = await http(server, "POST", "/v1/payments", { key: "a", body: payment({ reference: "A" }) });
    const b = await http(server, "POST", "/v1/payments", { key: "b", body: payment({ reference: "B" }) });
    const list = await http(server, "GET", "/v1/payments");
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ object: "list", data: [a.body, b.body] });
  });

  it("answers 404 problem+json for an unknown route", async () => {
    const server = await startServer();
    const res = await http(server, "GET", "/v1/refunds");
    expect(res.status).toBe(404);
    expect(res.contentType).toBe(PROBLEM_JSON);
    expect(res.body.type).toBe(problemType("not-found"));
  });
});
