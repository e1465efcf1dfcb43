import { describe, expect, it } from "vitest";
import { http, problemType, startServer } from "./helpers.js";

const invoice = { customer: "globex", amount: 9_900, currency: "USD", memo: "Q3 retainer" };

describe("POST /v1/invoices: the unkeyed internal API", () => {
  it("creates a new invoice on every call, even with the same Idempotency-Key and payload", async () => {
    const server = await startServer();
    const first = await http(server, "POST", "/v1/invoices", { key: "k-inv", body: invoice });
    const second = await http(server, "POST", "/v1/invoices", { key: "k-inv", body: invoice });
    const third = await http(server, "POST", "/v1/invoices", { body: invoice });
    for (const r of [first, second, third]) {
      expect(r.status).toBe(201);
      expect(r.headers.get("idempotent-replayed")).toBeNull();
      expect(r.body).toMatchObject({ object: "invoice", ...invoice });
      expect(r.body.id).toMatch(/^inv_[0-9a-f]{24}$/);
    }
    expect(new Set([first.body.id, second.body.id, third.body.id]).size).toBe(3);
    const effects = server.effects({ kind: "invoice_created" });
    expect(effects.map((e) => e.resourceId)).toEqual([first.body.id, second.body.id, third.body.id]);
    // The key is recorded for the oracle, but it deduplicated nothing.
    expect(effects.map((e) => e.idempotencyKey)).toEqual(["k-inv", "k-inv", null]);
    const list = await http(server, "GET", "/v1/invoices");
    expect(list.body.data).toHaveLength(3);
  });

  it("is not deduplicated under concurrency either", async () => {
    const server = await startServer();
    const settled = await Promise.all(
      Array.from({ length: 8 }, () => http(server, "POST", "/v1/invoices", { key: "same", body: invoice })),
    );
    expect(settled.every((r) => r.status === 201)).toBe(true);
    expect(server.effects()).toHaveLength(8);
  });

  it("still validates its body (400) and authenticates (401), even when requireIdempotencyKey is set", async () => {
    const server = await startServer({ requireIdempotencyKey: true });
    const bad = await http(server, "POST", "/v1/invoices", { body: { ...invoice, amount: -1 } });
    expect(bad.status).toBe(400);
    expect(bad.body.type).toBe(problemType("invalid-request-body"));
    expect((await http(server, "POST", "/v1/invoices", { token: null, body: invoice })).status).toBe(401);
    // No key is required here: the endpoint ignores keys.
    expect((await http(server, "POST", "/v1/invoices", { body: invoice })).status).toBe(201);
    // A malformed key is ignored too, not a 400.
    const odd = await http(server, "POST", "/v1/invoices", { key: '"unterminated', body: invoice });
    expect(odd.status).toBe(201);
    expect(server.effects().map((e) => e.idempotencyKey)).toEqual([null, null]);
  });
});
