import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createPaymentsClient, startMockPayments } from "../src/index.js";
import { http, payment, startServer, track, until } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "mock-payments-sqlite-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const dbPath = () => join(dir, `payments-${process.pid}-${++n}.db`);

describe("SQLite storage", () => {
  it("a restart keeps payments, invoices, stored responses and the effect log", async () => {
    const path = dbPath();
    const first = await startServer({ storage: { kind: "sqlite", path } });
    expect(first.storage).toBe("sqlite");
    const created = await http(first, "POST", "/v1/payments", { key: "k-keep", body: payment() });
    const voided = await http(first, "POST", `/v1/payments/${created.body.id}/void`, { key: "k-void", body: {} });
    const invoice = await http(first, "POST", "/v1/invoices", { body: { customer: "c", amount: 5, currency: "GBP" } });
    const effectsBefore = first.effects();
    expect(effectsBefore).toHaveLength(3);
    await first.close();

    const second = await startServer({ storage: { kind: "sqlite", path } });
    expect(second.effects()).toEqual(effectsBefore);
    const replay = await http(second, "POST", "/v1/payments", { key: "k-keep", body: payment() });
    expect(replay.status).toBe(201);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(replay.body).toEqual(created.body);
    const voidReplay = await http(second, "POST", `/v1/payments/${created.body.id}/void`, { key: "k-void", body: {} });
    expect(voidReplay.body).toEqual(voided.body);
    expect((await http(second, "GET", `/v1/payments/${created.body.id}`)).body).toEqual(voided.body);
    expect((await http(second, "GET", "/v1/invoices")).body.data).toEqual([invoice.body]);
    // Still keyed: a different payload under the old key is a 422 after the restart too.
    expect((await http(second, "POST", "/v1/payments", { key: "k-keep", body: payment({ amount: 1 }) })).status).toBe(422);
    // New effects continue the sequence.
    await http(second, "POST", "/v1/payments", { key: "k-new", body: payment() });
    expect(second.effects().map((e) => e.seq)).toEqual([1, 2, 3, 4]);
  });

  it("after crash_after_accept and a restart, the retry of the lost request replays the same payment", async () => {
    const path = dbPath();
    const server = await startServer({ storage: { kind: "sqlite", path } });
    const client = createPaymentsClient({ baseURL: server.url, token: "acct_s" });
    await expect(client.createPayment(payment(), { idempotencyKey: "k-crash", fault: "crash_after_accept" })).rejects.toMatchObject({
      outcome: "unknown",
    });
    expect(server.crashed).toBe(true);
    const performed = server.effects();
    expect(performed).toHaveLength(1);

    const restarted = track(await server.restart());
    expect(restarted.url).toBe(server.url);
    const retry = await client.createPayment(payment(), { idempotencyKey: "k-crash" });
    expect(retry.replayed).toBe(true);
    expect(retry.body.id).toBe(performed[0]!.resourceId);
    expect(restarted.effects()).toEqual(performed);
  });

  it("a claim left in flight by a crash performed nothing, so the retry after restart executes once", async () => {
    const path = dbPath();
    const server = await startServer({ storage: { kind: "sqlite", path } });
    const slow = http(server, "POST", "/v1/payments", { key: "k-mid", body: payment(), headers: { "x-mock-fault": '{"latencyMs":600000}' } }).catch(
      () => "dropped",
    );
    await until(() => server.inFlight().length === 1, "the claim to be recorded");
    server.crash();
    expect(await slow).toBe("dropped");

    const restarted = track(await startMockPayments({ storage: { kind: "sqlite", path } }));
    expect(restarted.inFlight()).toEqual([]);
    expect(restarted.effects()).toEqual([]);
    const retry = await http(restarted, "POST", "/v1/payments", { key: "k-mid", body: payment() });
    expect(retry.status).toBe(201);
    expect(retry.headers.get("idempotent-replayed")).toBeNull();
    expect(restarted.effects()).toHaveLength(1);
  });

  it("keeps the exactly-once and scoping guarantees under concurrency", async () => {
    const server = await startServer({ storage: { kind: "sqlite", path: dbPath() } });
    const settled = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        http(server, "POST", "/v1/payments", { token: i % 2 === 0 ? "acct_even" : "acct_odd", key: "k-par", body: payment() }),
      ),
    );
    for (const r of settled) expect([201, 409]).toContain(r.status);
    expect(server.effects({ account: "acct_even" })).toHaveLength(1);
    expect(server.effects({ account: "acct_odd" })).toHaveLength(1);
  });

  it("reset() and clearEffects() are persisted", async () => {
    const path = dbPath();
    const server = await startServer({ storage: { kind: "sqlite", path } });
    await http(server, "POST", "/v1/payments", { key: "k", body: payment() });
    server.clearEffects();
    expect(server.payments("acct_test")).toHaveLength(1);
    server.reset();
    await server.close();
    const again = await startServer({ storage: { kind: "sqlite", path } });
    expect(again.effects()).toEqual([]);
    expect(again.payments("acct_test")).toEqual([]);
    const fresh = await http(again, "POST", "/v1/payments", { key: "k", body: payment() });
    expect(fresh.headers.get("idempotent-replayed")).toBeNull();
  });
});
