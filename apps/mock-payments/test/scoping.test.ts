import { describe, expect, it } from "vitest";
import { http, payment, startServer } from "./helpers.js";

describe("keys and resources are scoped to the account (bearer token)", () => {
  it("two accounts using the same key with different payloads each get their own payment", async () => {
    const server = await startServer();
    const a = await http(server, "POST", "/v1/payments", { token: "acct_a", key: "shared-key", body: payment({ amount: 100 }) });
    const b = await http(server, "POST", "/v1/payments", { token: "acct_b", key: "shared-key", body: payment({ amount: 200 }) });
    // Not a 422: B's key does not collide with A's.
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.headers.get("idempotent-replayed")).toBeNull();
    expect(b.body.id).not.toBe(a.body.id);

    // Each replay returns that account's own stored response.
    const aAgain = await http(server, "POST", "/v1/payments", { token: "acct_a", key: "shared-key", body: payment({ amount: 100 }) });
    const bAgain = await http(server, "POST", "/v1/payments", { token: "acct_b", key: "shared-key", body: payment({ amount: 200 }) });
    expect(aAgain.body).toEqual(a.body);
    expect(bAgain.body).toEqual(b.body);
    expect(server.effects().map((e) => [e.account, e.idempotencyKey, e.resourceId])).toEqual([
      ["acct_a", "shared-key", a.body.id],
      ["acct_b", "shared-key", b.body.id],
    ]);
  });

  it("an account never receives another account's stored response, even for an identical request", async () => {
    const server = await startServer();
    const a = await http(server, "POST", "/v1/payments", { token: "acct_a", key: "same", body: payment() });
    const b = await http(server, "POST", "/v1/payments", { token: "acct_b", key: "same", body: payment() });
    expect(b.status).toBe(201);
    expect(b.headers.get("idempotent-replayed")).toBeNull();
    expect(b.body.id).not.toBe(a.body.id);
    expect(server.effects()).toHaveLength(2);
  });

  it("an in-flight key of one account does not block another account", async () => {
    const server = await startServer();
    const slow = http(server, "POST", "/v1/payments", {
      token: "acct_a",
      key: "busy",
      body: payment(),
      headers: { "x-mock-fault": '{"latencyMs":600000}' },
    });
    while (server.inFlight().length === 0) await new Promise((r) => setTimeout(r, 5));
    const other = await http(server, "POST", "/v1/payments", { token: "acct_b", key: "busy", body: payment() });
    expect(other.status).toBe(201);
    server.releaseLatency();
    expect((await slow).status).toBe(201);
  });

  it("reads, lists and voids see only the caller's payments", async () => {
    const server = await startServer();
    const a = await http(server, "POST", "/v1/payments", { token: "acct_a", key: "k", body: payment() });
    const id = a.body.id as string;
    expect((await http(server, "GET", `/v1/payments/${id}`, { token: "acct_b" })).status).toBe(404);
    expect((await http(server, "GET", "/v1/payments", { token: "acct_b" })).body.data).toEqual([]);
    const foreignVoid = await http(server, "POST", `/v1/payments/${id}/void`, { token: "acct_b", key: "v" });
    expect(foreignVoid.status).toBe(404);
    expect((await http(server, "GET", `/v1/payments/${id}`, { token: "acct_a" })).body.status).toBe("succeeded");
    expect((await http(server, "GET", "/v1/payments", { token: "acct_a" })).body.data).toEqual([a.body]);
  });
});
