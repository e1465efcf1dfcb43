import { describe, expect, it } from "vitest";
import { MemoryStore } from "../src/store.js";

const RETENTION = 1_000;
const response = (id: string) => ({ status: 201, contentType: "application/json; charset=utf-8", body: { id, object: "payment", amount: 1 } });

/** Claim and complete `key` at `now`, as the server does for a keyed POST. */
function keep(store: MemoryStore, key: string, now: number): void {
  const claim = store.claim({ account: "acct", key, operation: "create_payment", fingerprint: `fp-${key}`, now, expiresAt: now + RETENTION });
  expect(claim.claimed).toBe(true);
  store.complete("acct", key, response(`pay_${key}`));
}

describe("MemoryStore idempotency records", () => {
  it("serves a completed record's response as it was stored, and a copy each time", () => {
    const store = new MemoryStore();
    keep(store, "a", 0);
    const first = store.getRecord("acct", "a", 10);
    expect(first?.response).toEqual(response("pay_a"));
    (first!.response!.body as { id: string }).id = "changed";
    expect(store.getRecord("acct", "a", 10)?.response).toEqual(response("pay_a"));
    const existing = store.claim({ account: "acct", key: "a", operation: "create_payment", fingerprint: "fp-a", now: 20, expiresAt: 20 + RETENTION });
    expect(existing).toEqual({ claimed: false, existing: expect.objectContaining({ state: "completed", response: response("pay_a") }) });
  });

  it("purges the completed records that expired, oldest first, and keeps in-flight ones", () => {
    const store = new MemoryStore();
    store.claim({ account: "acct", key: "running", operation: "create_payment", fingerprint: "fp", now: 0, expiresAt: RETENTION });
    keep(store, "a", 1);
    keep(store, "b", 2);
    keep(store, "c", 500);
    expect(store.purgeExpired(1_002)).toBe(2);
    expect(store.inFlight().map((r) => r.key)).toEqual(["running"]);
    expect(store.getRecord("acct", "c", 1_002)?.state).toBe("completed");
    expect(store.purgeExpired(1_500)).toBe(1);
    expect(store.getRecord("acct", "c", 1_400)).toBeNull();
  });

  it("a new claim of an expired key is purged with its own expiry, not its first one's", () => {
    // The purge stops at the first record that has not expired; a re-claimed key left at its
    // first position would stop it there, and every expired record behind it would stay.
    const store = new MemoryStore();
    keep(store, "a", 0);
    keep(store, "b", 100);
    keep(store, "a", 1_200); // "a" expired at 1,000: claimed again, now expires at 2,200
    keep(store, "c", 1_300);
    expect(store.purgeExpired(2_000)).toBe(1); // b (a's first record was replaced, not purged)
    expect(store.purgeExpired(2_250)).toBe(1); // a
    expect(store.getRecord("acct", "c", 2_250)?.response).toEqual(response("pay_c"));
    expect(store.purgeExpired(2_400)).toBe(1); // c
  });
});
