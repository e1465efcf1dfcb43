import { describe, expect, it } from "vitest";
import { http, payment, startServer, until, type RawResponse } from "./helpers.js";

describe("concurrent identical requests with one key", () => {
  it("perform exactly one effect: one 201, every overlapping duplicate a 409, later retries replays", async () => {
    const server = await startServer({ latencyMs: 600_000 });
    const N = 12;
    const responses: RawResponse[] = [];
    const all = Array.from({ length: N }, () =>
      http(server, "POST", "/v1/payments", { key: "k-race", body: payment() }).then((r) => {
        responses.push(r);
        return r;
      }),
    );
    // Only the winner of the claim waits in latency; every other duplicate is answered at once.
    await until(() => responses.length === N - 1, "the duplicates to be answered");
    expect(responses.map((r) => r.status)).toEqual(Array(N - 1).fill(409));
    expect(server.effects()).toHaveLength(0);
    expect(server.inFlight()).toHaveLength(1);

    server.releaseLatency();
    const settled = await Promise.all(all);
    const created = settled.filter((r) => r.status === 201);
    expect(created).toHaveLength(1);
    expect(server.effects()).toHaveLength(1);
    expect(server.effects()[0]!.resourceId).toBe(created[0]!.body.id);

    const retry = await http(server, "POST", "/v1/payments", { key: "k-race", body: payment() });
    expect(retry.body.id).toBe(created[0]!.body.id);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
  });

  it("without injected latency, many parallel duplicates still produce one effect and agree on the id", async () => {
    const server = await startServer();
    const settled = await Promise.all(
      Array.from({ length: 25 }, () => http(server, "POST", "/v1/payments", { key: "k-burst", body: payment() })),
    );
    const ids = new Set<string>();
    for (const r of settled) {
      expect([201, 409]).toContain(r.status);
      if (r.status === 201) ids.add(r.body.id);
    }
    expect(ids.size).toBe(1);
    expect(settled.filter((r) => r.status === 201 && r.headers.get("idempotent-replayed") === null)).toHaveLength(1);
    expect(server.effects()).toHaveLength(1);
  });

  it("holds for a void: concurrent duplicates void once", async () => {
    const server = await startServer();
    const created = await http(server, "POST", "/v1/payments", { key: "k-p", body: payment() });
    server.setGlobalFault({ latencyMs: 600_000, operations: ["void_payment"] });
    let answered = 0;
    const all = Array.from({ length: 6 }, () =>
      http(server, "POST", `/v1/payments/${created.body.id}/void`, { key: "k-v" }).then((r) => {
        answered++;
        return r;
      }),
    );
    await until(() => answered === 5, "the duplicate voids to be answered");
    server.releaseLatency();
    const settled = await Promise.all(all);
    expect(settled.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409, 409]);
    expect(settled.filter((r) => r.status === 409).every((r) => r.body.code === "idempotency_key_in_use")).toBe(true);
    expect(server.effects({ kind: "payment_voided" })).toHaveLength(1);
  });
});
