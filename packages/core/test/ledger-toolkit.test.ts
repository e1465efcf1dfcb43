// The ledger adapter toolkit (@dispatch-once/core/internal): every ledger checks claims, stored
// errors and results, and decodes stored rows, through these functions, so a refusal here is a
// refusal in every adapter.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  MAX_LEASE_MS,
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerLeaseMs,
  checkStoredError,
  checkUnknownReason,
  decodeLedgerRow,
  decodeStoredError,
  resultRefusal,
  type StoredLedgerFields,
} from "../src/internal/index.js";
import { MemoryLedger, ROW_FORMAT_VERSION, type ClaimRequest, type LedgerRow } from "../src/index.js";

function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error("expected a refusal, but it returned");
}

const claim: ClaimRequest = { key: "k1", toolName: "send_payment", effect: "unkeyed_write", owner: "attempt-1", leaseMs: 30_000, request: '{"amount":1}' };

describe("checkClaimRequest", () => {
  const refusals: Array<[string, Partial<Record<keyof ClaimRequest, unknown>>]> = [
    ["key", { key: "" }],
    ["key", { key: 42 }],
    ["key", { key: "\ud800" }],
    ["toolName", { toolName: "" }],
    ["toolName", { toolName: "t".repeat(1025) }],
    ["owner", { owner: "" }],
    ["owner", { owner: "o\udc00" }],
    ["effect", { effect: "read" }],
    ["leaseMs", { leaseMs: -1 }],
    ["leaseMs", { leaseMs: Number.NaN }],
    ["leaseMs", { leaseMs: "1000" }],
    ["leaseMs", { leaseMs: MAX_LEASE_MS + 1 }],
    ["request", { request: undefined }],
    ["request", { request: { amount: 1 } }],
    ["request", { request: '{"s":"\ud800"}' }],
    ["claimId", { claimId: "short" }],
    ["conversationId", { conversationId: "" }],
    ["conversationId", { conversationId: "c\ud800" }],
    ["turnIndex", { turnIndex: -1 }],
    ["turnIndex", { turnIndex: 1.5 }],
  ];
  for (const [field, bad] of refusals) {
    it(`refuses ${field} ${JSON.stringify(Object.values(bad)[0]) ?? String(Object.values(bad)[0])} with invalid_ledger_input naming ${field}`, () => {
      expect(thrownBy(() => checkClaimRequest({ ...claim, ...bad } as ClaimRequest))).toMatchObject({ code: "invalid_ledger_input", field });
    });
  }

  it("refuses a member a claim does not have (a misspelt turnIndex, conversationID), naming it, before anything is stored", async () => {
    expect(thrownBy(() => checkClaimRequest({ ...claim, turnIdx: 3 } as unknown as ClaimRequest))).toMatchObject({ code: "invalid_ledger_input", field: "turnIdx" });
    expect(thrownBy(() => checkClaimRequest({ ...claim, conversationID: "c1" } as unknown as ClaimRequest))).toMatchObject({ code: "invalid_ledger_input", field: "conversationID" });
    // Every member a claim has, optional ones given as undefined included, is accepted.
    const full: Required<ClaimRequest> = { ...claim, claimId: "a".repeat(16), conversationId: "c1", turnIndex: 0 };
    expect(checkClaimRequest(full)).toBe(30_000);
    expect(checkClaimRequest({ ...claim, claimId: undefined, conversationId: undefined, turnIndex: undefined } as unknown as ClaimRequest)).toBe(30_000);
    const ledger = new MemoryLedger();
    await expect(ledger.claim({ ...claim, conversationID: "c1" } as unknown as ClaimRequest)).rejects.toMatchObject({ code: "invalid_ledger_input", field: "conversationID" });
    expect(await ledger.lookup(claim.key)).toBeUndefined();
  });

  it("refuses a claim that is not an object", () => {
    expect(thrownBy(() => checkClaimRequest(null as unknown as ClaimRequest))).toMatchObject({ code: "invalid_ledger_input", field: "request" });
  });

  it("applies the store's limits: key length, NUL, value size", () => {
    const pg = { maxKeyLength: 512, maxValueBytes: 16, storesNul: false };
    expect(thrownBy(() => checkClaimRequest({ ...claim, key: "k".repeat(513) }, pg))).toMatchObject({ field: "key" });
    expect(thrownBy(() => checkClaimRequest({ ...claim, key: "a\u0000b" }, pg))).toMatchObject({ field: "key" });
    expect(thrownBy(() => checkClaimRequest({ ...claim, request: '"a\u0000b"' }, pg))).toMatchObject({ field: "request" });
    expect(thrownBy(() => checkClaimRequest({ ...claim, request: '"ééééééééé"' }, pg))).toMatchObject({ field: "request" });
    // Without those limits the same values are storable.
    expect(checkClaimRequest({ ...claim, key: "k".repeat(513), request: '"a\u0000b"' })).toBe(30_000);
  });

  it("accepts an empty request and returns the lease in whole milliseconds, rounded up", () => {
    expect(checkClaimRequest({ ...claim, request: "", leaseMs: 0 })).toBe(0);
    expect(checkClaimRequest({ ...claim, leaseMs: 1000.2 })).toBe(1001);
    expect(checkLedgerLeaseMs(MAX_LEASE_MS)).toBe(MAX_LEASE_MS);
  });

  it("is what the memory ledger refuses with, before anything changes", async () => {
    const ledger = new MemoryLedger();
    await expect(ledger.claim({ ...claim, owner: "" })).rejects.toMatchObject({ code: "invalid_ledger_input", field: "owner" });
    expect(await ledger.lookup("k1")).toBeUndefined();
    const claimed = await ledger.claim(claim);
    if (claimed.outcome !== "claimed") throw new Error("expected a claim");
    await expect(ledger.renew("k1", claimed.fence, -1)).rejects.toMatchObject({ code: "invalid_ledger_input", field: "leaseMs" });
    await expect(ledger.fail("k1", claimed.fence, { name: "E" } as never)).rejects.toMatchObject({ code: "invalid_ledger_input", field: "error" });
    expect(await ledger.lookup("k1")).toMatchObject({ state: "in_flight" });
  });
});

describe("checkStoredError, checkUnknownReason and resultRefusal", () => {
  it("refuses what would not read back as a StoredError", () => {
    const cyclic: Record<string, unknown> = { name: "E", message: "m" };
    cyclic.details = cyclic;
    for (const bad of [null, "E", [], { name: "E" }, { message: "m" }, { name: "E", message: "m", code: 7 }, cyclic]) {
      expect(thrownBy(() => checkStoredError(bad))).toMatchObject({ code: "invalid_ledger_input", field: "error" });
    }
    expect(thrownBy(() => checkStoredError({ name: "E", message: "m".repeat(64) }, { maxValueBytes: 32 }))).toMatchObject({ field: "error" });
    const error = { name: "CardDeclined", message: "declined", code: "card_declined", details: { attempt: 1 } };
    expect(JSON.parse(checkStoredError(error))).toEqual(error);
  });

  it("refuses an empty, over-long or unstorable reason", () => {
    for (const bad of ["", "r".repeat(4097), "\ud800", 5]) {
      expect(thrownBy(() => checkUnknownReason(bad))).toMatchObject({ code: "invalid_ledger_input", field: "reason" });
    }
    expect(thrownBy(() => checkUnknownReason("a\u0000b", { storesNul: false }))).toMatchObject({ field: "reason" });
    expect(checkUnknownReason("tool_error")).toBe("tool_error");
  });

  it("LEDGER-10: refuses a result that is not text, over maxResultBytes, or not storable byte for byte", () => {
    expect(resultRefusal("k", 42, 10)).toMatchObject({ code: "result_not_storable", key: "k" });
    expect(resultRefusal("k", '"ééééé"', 10)).toMatchObject({ code: "result_not_storable" });
    expect(resultRefusal("k", '"\ud800"', 10)).toMatchObject({ code: "result_not_storable" });
    expect(resultRefusal("k", '"a\u0000"', 10, { storesNul: false })).toMatchObject({ code: "result_not_storable" });
    expect(resultRefusal("k", '"a\u0000"', 10)).toBeUndefined();
    expect(resultRefusal("k", '"éééé"', 10)).toBeUndefined();
  });
});

/** A row as a store would keep it: every value a primitive; integers as text where the driver says so. */
function encode(row: LedgerRow, integersAsText: boolean): StoredLedgerFields {
  const int = (n: number | undefined) => (n === undefined ? null : integersAsText ? String(n) : n);
  return {
    v: ROW_FORMAT_VERSION,
    key: row.key,
    state: row.state,
    toolName: row.toolName,
    effect: row.effect,
    fence: int(row.fence),
    claimedAt: int(row.claimedAt),
    request: row.request,
    conversationId: row.conversationId ?? null,
    turnIndex: int(row.turnIndex),
    owner: row.state === "in_flight" ? row.owner : null,
    leaseExpiresAt: row.state === "in_flight" ? int(row.leaseExpiresAt) : null,
    result: row.state === "completed" ? row.result : null,
    error: row.state === "failed" ? JSON.stringify(row.error) : null,
    reason: row.state === "unknown" ? row.reason : null,
    finishedAt: row.state === "in_flight" ? null : int(row.finishedAt),
  };
}

const time = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const rowArb: fc.Arbitrary<LedgerRow> = fc
  .record(
    {
      key: fc.string({ minLength: 1 }),
      toolName: fc.string({ minLength: 1 }),
      effect: fc.constantFrom("keyed_write" as const, "unkeyed_write" as const),
      fence: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
      claimedAt: time,
      request: fc.string({ unit: "grapheme" }),
      conversationId: fc.option(fc.string({ minLength: 1, maxLength: 512 }), { nil: undefined }),
      turnIndex: fc.option(fc.nat(), { nil: undefined }),
      text: fc.string({ unit: "grapheme" }),
      at: time,
      error: fc.record(
        { name: fc.string(), message: fc.string(), code: fc.string(), details: fc.jsonValue() },
        { requiredKeys: ["name", "message"] },
      ),
      state: fc.constantFrom("in_flight", "completed", "failed", "unknown", "released"),
    },
    { requiredKeys: ["key", "toolName", "effect", "fence", "claimedAt", "request", "text", "at", "error", "state"] },
  )
  .map(({ text, at, error, state, conversationId, turnIndex, ...base }) => {
    const row = { ...base, ...(conversationId === undefined ? {} : { conversationId }), ...(turnIndex === undefined ? {} : { turnIndex }) };
    switch (state) {
      case "in_flight":
        return { ...row, state, owner: text, leaseExpiresAt: at };
      case "completed":
        return { ...row, state, result: text, finishedAt: at };
      case "failed":
        // What a store keeps is the JSON text: the row carries what that text reads back as.
        return { ...row, state, error: JSON.parse(JSON.stringify(error)), finishedAt: at };
      case "unknown":
        return { ...row, state, reason: text, finishedAt: at };
      default:
        return { ...row, state: "released" as const, finishedAt: at };
    }
  });

describe("decodeLedgerRow", () => {
  it("LEDGER-11: decode(encode(row)) is the row, for random valid rows of every state (numbers and integer text)", () => {
    fc.assert(
      fc.property(rowArb, fc.boolean(), (row, asText) => {
        expect(decodeLedgerRow(row.key, encode(row, asText), { integersAsText: asText })).toEqual(row);
      }),
      { numRuns: 300 },
    );
  });

  it("decodes into the members, in the order, the row was built with (no undefined members), for every state", () => {
    // The decoder builds rows member by member (not by spread, see decodeLedgerRow): a JSON
    // reader of a row (listings, the audit, an HTTP API) sees the same text as before.
    fc.assert(
      fc.property(rowArb, fc.boolean(), (row, asText) => {
        const decoded = decodeLedgerRow(row.key, encode(row, asText), { integersAsText: asText });
        expect(decoded).toStrictEqual(row);
        expect(JSON.stringify(decoded)).toBe(JSON.stringify(row));
      }),
      { numRuns: 300 },
    );
  });

  const good: LedgerRow = { key: "k", toolName: "t", effect: "keyed_write", fence: 3, claimedAt: 10, request: "{}", state: "failed", error: { name: "E", message: "m" }, finishedAt: 20 };
  const inFlight: LedgerRow = { key: "k", toolName: "t", effect: "keyed_write", fence: 3, claimedAt: 10, request: "{}", state: "in_flight", owner: "o", leaseExpiresAt: 20 };
  const malformed: Array<[string, LedgerRow, Partial<StoredLedgerFields>]> = [
    ["v", good, { v: 2 }],
    ["v", good, { v: null }],
    ["key", good, { key: "other" }],
    ["key", good, { key: null }],
    ["state", good, { state: "done" }],
    ["toolName", good, { toolName: null }],
    ["effect", good, { effect: "read" }],
    ["fence", good, { fence: 0 }],
    ["fence", good, { fence: 1.5 }],
    ["fence", good, { fence: "3" }],
    ["fence", good, { fence: null }],
    ["claimedAt", good, { claimedAt: -1 }],
    ["claimedAt", good, { claimedAt: Number.MAX_SAFE_INTEGER + 1 }],
    ["request", good, { request: null }],
    ["request", good, { request: 7 }],
    ["conversationId", good, { conversationId: "" }],
    ["conversationId", good, { conversationId: 5 }],
    ["turnIndex", good, { turnIndex: -1 }],
    ["error", good, { error: null }],
    ["error", good, { error: "not json" }],
    ["error", good, { error: "[]" }],
    ["error", good, { error: '{"name":"E"}' }],
    ["error", good, { error: '{"name":"E","message":"m","code":1}' }],
    ["finishedAt", good, { finishedAt: null }],
    ["owner", inFlight, { owner: null }],
    ["leaseExpiresAt", inFlight, { leaseExpiresAt: "20" }],
    ["result", { ...good, state: "completed", result: "1" } as LedgerRow, { result: null }],
    ["reason", { ...good, state: "unknown", reason: "r" } as LedgerRow, { reason: Buffer.from("r") }],
  ];
  for (const [field, row, change] of malformed) {
    it(`LEDGER-11: refuses a ${row.state} row whose ${field} is ${String(Object.values(change)[0])} with ledger_corrupt naming ${field}`, () => {
      const error = thrownBy(() => decodeLedgerRow("k", { ...encode(row as never, false), ...change }));
      expect(error).toMatchObject({ code: "ledger_corrupt", key: "k" });
      expect((error as Error).message).toContain(`field ${field} `);
    });
  }

  it("reads pg's integer text only when asked, and only canonical digits", () => {
    const fields = encode(good as never, true);
    expect(decodeLedgerRow("k", fields, { integersAsText: true })).toEqual(good);
    expect(thrownBy(() => decodeLedgerRow("k", fields))).toMatchObject({ code: "ledger_corrupt" });
    for (const fence of ["", " 3", "03", "3e0", "0x3", "-3"]) {
      expect(thrownBy(() => decodeLedgerRow("k", { ...fields, fence }, { integersAsText: true }))).toMatchObject({ code: "ledger_corrupt" });
    }
  });

  it("never returns what the store keeps beside the row (claim id, retention), and keeps a stored error's members", () => {
    const stored = { ...encode(good as never, false), claimId: "c".repeat(22), expiresAt: 99 } as StoredLedgerFields;
    expect(decodeLedgerRow("k", stored)).toEqual(good);
    expect(decodeStoredError("k", '{"name":"E","message":"m","details":{"a":[1]},"extra":true}')).toEqual({ name: "E", message: "m", details: { a: [1] }, extra: true });
  });
});

describe("resolve() and retire() refuse members they do not have (checkResolveRequest, checkRetireRequest)", () => {
  const key = "r".repeat(32);
  async function unknownRow(ledger: MemoryLedger): Promise<number> {
    const claimed = await ledger.claim({ ...claim, key, claimId: "c".repeat(16) });
    if (claimed.outcome !== "claimed") throw new Error("not claimed");
    await ledger.markUnknown(key, claimed.fence, "tool_error");
    return claimed.fence;
  }

  it("RESOLVE-4 a misspelt expectedFence is refused naming it, nothing written: read as absent, the resolution would settle whatever claim holds the row", async () => {
    const ledger = new MemoryLedger();
    const fence = await unknownRow(ledger);
    const outcome = await ledger.resolve({ key, resolution: { outcome: "not_performed" }, actor: "alice", reason: "checked", expectFence: fence + 5 } as never).then(
      (row) => `resolved: ${row.state}`,
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ code: "invalid_ledger_input", field: "expectFence" });
    expect(await ledger.lookup(key)).toMatchObject({ state: "unknown", fence });
  });

  it("a resolution member its outcome does not have is refused naming it (a result beside failed)", async () => {
    const ledger = new MemoryLedger();
    const fence = await unknownRow(ledger);
    const outcome = await ledger.resolve({ key, resolution: { outcome: "failed", error: { name: "E", message: "m" }, result: "{}" }, actor: "alice", reason: "checked", expectedFence: fence } as never).then(
      (row) => `resolved: ${row.state}`,
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ code: "invalid_ledger_input", field: "resolution.result" });
    expect(await ledger.lookup(key)).toMatchObject({ state: "unknown", fence });
    // Every member a request has is accepted.
    await expect(ledger.resolve({ key, resolution: { outcome: "completed", result: "{}" }, actor: "alice", reason: "checked", expectedFence: fence, action: "resolved" })).resolves.toMatchObject({ state: "completed" });
  });

  it("LEDGER-28 retire with a misspelt release is refused naming it: read as absent, the claim it means to release would stay in flight", async () => {
    const ledger = new MemoryLedger();
    const claimId = "d".repeat(16);
    const outcome = await ledger.retire(key, claimId, { relase: true } as never).then(
      (result) => `retired: ${JSON.stringify(result)}`,
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ code: "invalid_ledger_input", field: "relase" });
  });
});

describe("checkExpiredInFlightOptions", () => {
  it("a misspelt olderThanMs is refused naming it: read as absent, claims whose lease ran out a moment ago would be listed as abandoned", async () => {
    let now = 1_000_000;
    const ledger = new MemoryLedger({ now: () => now });
    await ledger.claim({ ...claim, leaseMs: 10 });
    now += 20;
    const listed = await ledger.listExpiredInFlight({ olderThan: 60_000 } as never).then(
      (rows) => `listed ${rows.length}`,
      (error: unknown) => error,
    );
    expect(listed).toMatchObject({ code: "invalid_ledger_input", field: "olderThan" });
    expect(await ledger.listExpiredInFlight({ olderThanMs: 60_000 })).toEqual([]);
    expect(thrownBy(() => checkExpiredInFlightOptions([]))).toMatchObject({ code: "invalid_ledger_input", field: "options" });
  });
});
