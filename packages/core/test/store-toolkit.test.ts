// The conversation-store side of the adapter toolkit (@dispatch-once/core/internal): a turn
// lease's owner and length are checked here for every store, so one configured value is taken
// or refused alike by the memory, SQLite and PostgreSQL stores (LEDGER-29, TURN-10).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_LEASE_MS, MAX_LEASE_OWNER_LENGTH, checkLeaseOwner, checkTurnLeaseMs } from "../src/internal/index.js";
import { MemoryConversationStore, isDispatchOnceError } from "../src/index.js";

function refusal(run: () => unknown): { code: string; field: unknown } {
  try {
    run();
  } catch (error) {
    if (!isDispatchOnceError(error)) throw error;
    return { code: error.code, field: (error as { field?: unknown }).field };
  }
  throw new Error("expected a refusal, but it returned");
}

describe("checkTurnLeaseMs", () => {
  it("takes 0..MAX_LEASE_MS and rounds a fraction up: a lease is never shorter than asked", () => {
    expect(checkTurnLeaseMs(0)).toBe(0);
    expect(checkTurnLeaseMs(1000.2)).toBe(1001);
    expect(checkTurnLeaseMs(MAX_LEASE_MS)).toBe(MAX_LEASE_MS);
  });

  it.each([[-1], [Number.NaN], [Number.POSITIVE_INFINITY], [MAX_LEASE_MS + 1], ["60000"], [null], [undefined]])("refuses %s with invalid_store_input naming leaseMs", (bad) => {
    expect(refusal(() => checkTurnLeaseMs(bad))).toEqual({ code: "invalid_store_input", field: "leaseMs" });
  });
});

describe("checkLeaseOwner", () => {
  it("takes a well-formed owner of 1 to 1,024 characters, NUL included where the store keeps it", () => {
    expect(checkLeaseOwner("w")).toBe("w");
    expect(checkLeaseOwner("é".repeat(MAX_LEASE_OWNER_LENGTH))).toHaveLength(MAX_LEASE_OWNER_LENGTH);
    expect(checkLeaseOwner("a\u0000b")).toBe("a\u0000b");
  });

  it.each([[""], ["x".repeat(MAX_LEASE_OWNER_LENGTH + 1)], ["lone \ud800"], [42], [null]])("refuses %j with invalid_store_input naming owner", (bad) => {
    expect(refusal(() => checkLeaseOwner(bad))).toEqual({ code: "invalid_store_input", field: "owner" });
  });

  it("refuses NUL for a store whose text cannot hold it (PostgreSQL)", () => {
    expect(refusal(() => checkLeaseOwner("a\u0000b", { storesNul: false }))).toEqual({ code: "invalid_store_input", field: "owner" });
  });
});

describe("MemoryConversationStore's turn lease", () => {
  it("renewLease refuses a bad length before reading the fence, and the held lease keeps its expiry", async () => {
    let now = 1_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const granted = await store.acquireLease("c1", "worker-a", 10_000);
    if (!granted.acquired) throw new Error("expected the lease");
    for (const bad of [Number.NaN, -5, "10"]) {
      await expect(store.renewLease("c1", granted.fence, bad as number)).rejects.toMatchObject({ code: "invalid_store_input", field: "leaseMs" });
      await expect(store.renewLease("c1", granted.fence + 1, bad as number)).rejects.toMatchObject({ code: "invalid_store_input", field: "leaseMs" });
    }
    // Before, the value was written: a NaN or negative expiry let anyone take the live lease at once.
    now += 9_999;
    expect(await store.acquireLease("c1", "worker-b", 10_000)).toEqual({ acquired: false, owner: "worker-a", leaseExpiresAt: 1_010_000 });
    now += 2;
    expect(await store.acquireLease("c1", "worker-b", 10_000)).toMatchObject({ acquired: true, fence: granted.fence + 1 });
  });

  it("takes the same owners and lengths as the durable stores: 0 ms, a fraction, an owner with NUL", async () => {
    const now = 5_000;
    const store = new MemoryConversationStore({ now: () => now });
    const zero = await store.acquireLease("c2", "a\u0000b", 0);
    expect(zero).toEqual({ acquired: true, fence: 1, leaseExpiresAt: 5_000 });
    const fractional = await store.renewLease("c2", 1, 0.5);
    expect(fractional).toEqual({ leaseExpiresAt: 5_001 });
  });
});

describe("MemoryConversationStore's copies (TURN-18)", () => {
  it("give back what a durable store's JSON text gives back, never the caller's objects (property)", async () => {
    const store = new MemoryConversationStore();
    let n = 0;
    // Objects with undefined members and a "__proto__" own member, besides any JSON value.
    const member = fc.oneof(fc.string(), fc.constant("__proto__"));
    const value = fc.letrec((tie) => ({
      node: fc.oneof({ depthSize: "small" }, fc.jsonValue({ maxDepth: 2 }), tie("object"), fc.array(tie("node"), { maxLength: 3 })),
      object: fc.dictionary(member, fc.oneof(tie("node"), fc.constant(undefined)), { maxKeys: 4 }),
    })).node;
    await fc.assert(
      fc.asyncProperty(value, async (content) => {
        const id = `m${++n}`;
        const c = `c${n}`;
        const expected = JSON.parse(JSON.stringify(content) ?? "null") as unknown;
        if (content === undefined) return;
        await store.appendUserMessage(c, { id, content: content as never });
        const stored = await store.message(c, id);
        expect(stored?.content).toStrictEqual(expected);
        if (typeof content === "object" && content !== null) expect(stored?.content).not.toBe(content);
        await store.addRecord(c, content as never);
        expect(await store.records(c)).toStrictEqual([expected]);
      }),
      { numRuns: 300 },
    );
  });

  it("give back -0 as 0, as JSON text does (found by the property above, seed -313919738)", async () => {
    const store = new MemoryConversationStore();
    await store.appendUserMessage("c-zero", { id: "m1", content: { n: -0, list: [-0, 1] } });
    const content = (await store.message("c-zero", "m1"))?.content as { n: number; list: number[] };
    expect(Object.is(content.n, 0)).toBe(true);
    expect(Object.is(content.list[0], 0)).toBe(true);
  });
});

describe("appendUserMessage refuses a message member other than id and content (checkUserMessage)", () => {
  it("a member it does not have is invalid_store_input naming it, nothing stored: ignored, it was dropped from the stored message", async () => {
    const store = new MemoryConversationStore();
    const appended = await store.appendUserMessage("conv-members", { id: "m1", content: "pay acme", role: "user" } as never).then(
      (result) => `appended: ${JSON.stringify(result.message)}`,
      (error: unknown) => error,
    );
    expect(appended).toMatchObject({ code: "invalid_store_input", field: "message.role" });
    expect(await store.message("conv-members", "m1")).toBeUndefined();
    await expect(store.appendUserMessage("conv-members", null as never)).rejects.toMatchObject({ code: "invalid_store_input", field: "message" });
    await expect(store.appendUserMessage("conv-members", { id: "m1", content: "pay acme" })).resolves.toMatchObject({ appended: true });
  });
});
