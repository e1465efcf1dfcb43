import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createPaymentsClient, PaymentsConnectionError } from "../src/index.js";
import { payment, startServer } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "mock-payments-lookup-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("GET /v1/idempotency-keys/:key (reconciliation lookup)", () => {
  it("reads the same from the SQLite store, across a restart", async () => {
    const path = join(dir, "lookup.db");
    const first = await startServer({ storage: { kind: "sqlite", path } });
    const client = createPaymentsClient({ baseURL: first.url, token: "acct_a" });
    const created = await client.createPayment(payment(), { idempotencyKey: "k-sql" });
    await first.close();
    const second = await startServer({ storage: { kind: "sqlite", path } });
    const again = createPaymentsClient({ baseURL: second.url, token: "acct_a" });
    expect((await again.lookupIdempotencyKey("k-sql")).body).toMatchObject({ state: "completed", response: { status: 201, body: created.body } });
    expect((await again.lookupIdempotencyKey("k-none")).body).toMatchObject({ state: "absent" });
    await second.close();
  });

  it("absent before, completed with the stored response after; the effect log agrees", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_a" });
    expect((await client.lookupIdempotencyKey("k-1")).body).toEqual({ object: "idempotency_key", key: "k-1", state: "absent" });
    const created = await client.createPayment(payment(), { idempotencyKey: "k-1" });
    const found = await client.lookupIdempotencyKey("k-1");
    expect(found.body).toEqual({
      object: "idempotency_key",
      key: "k-1",
      state: "completed",
      operation: "create_payment",
      response: { status: 201, body: created.body },
    });
    expect(server.effects().filter((e) => e.idempotencyKey === "k-1")).toHaveLength(1);
  });

  it("after a lost response the lookup finds the effect the caller never heard of", async () => {
    const server = await startServer();
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_a" });
    await expect(client.createPayment(payment(), { idempotencyKey: "k-lost", fault: "drop_after_accept" })).rejects.toBeInstanceOf(
      PaymentsConnectionError,
    );
    const found = await client.lookupIdempotencyKey("k-lost");
    expect(found.body).toMatchObject({ state: "completed", response: { status: 201 } });
    const effects = server.effects().filter((e) => e.idempotencyKey === "k-lost");
    expect(effects).toHaveLength(1);
    expect((found.body as { response: { body: { id: string } } }).response.body.id).toBe(effects[0]!.resourceId);
  });

  it("is scoped per account, like the keys: another account's key reads as absent", async () => {
    const server = await startServer();
    const a = createPaymentsClient({ baseURL: server.url, token: "acct_a" });
    const b = createPaymentsClient({ baseURL: server.url, token: "acct_b" });
    await a.createPayment(payment(), { idempotencyKey: "shared" });
    expect((await b.lookupIdempotencyKey("shared")).body).toMatchObject({ state: "absent" });
    expect((await a.lookupIdempotencyKey("shared")).body).toMatchObject({ state: "completed" });
  });
});
