import { describe, expect, it } from "vitest";
import { DEFAULT_RETENTION_MS, InvalidLedgerInputError, MemoryLedger, StaleClaimError, checkRetireRequest, newClaimId, type ClaimRequest } from "../src/index.js";
import { manualClock } from "./helpers.js";

/**
 * LEDGER-28 beyond the vectors (LT-062 onwards, run in vectors.test.ts): the argument check every
 * adapter shares, the refusal's fence, and the memory ledger forgetting retired ids on sweep.
 */
const claim = (key: string, claimId?: string): ClaimRequest => ({
  key,
  toolName: "send_payment",
  effect: "unkeyed_write",
  owner: "a",
  leaseMs: 30_000,
  request: "{}",
  ...(claimId === undefined ? {} : { claimId }),
});

describe("checkRetireRequest (LEDGER-28)", () => {
  it("LEDGER-28: answers whether to release; release defaults to false", () => {
    const id = newClaimId();
    expect(checkRetireRequest("k", id, undefined)).toBe(false);
    expect(checkRetireRequest("k", id, {})).toBe(false);
    expect(checkRetireRequest("k", id, { release: false })).toBe(false);
    expect(checkRetireRequest("k", id, { release: true })).toBe(true);
  });

  it.each([
    ["key", "", newClaimId(), undefined],
    ["key", 7, newClaimId(), undefined],
    // As a claim's key is checked (checkLedgerKey): a lone surrogate cannot be stored byte for byte.
    ["key", "k\uD800", newClaimId(), undefined],
    ["claimId", "k", "short", undefined],
    ["claimId", "k", undefined, undefined],
    ["claimId", "k", "cid-a_0123456789AB\n", undefined],
    ["options", "k", newClaimId(), null],
    ["options", "k", newClaimId(), "release"],
    ["release", "k", newClaimId(), { release: "true" }],
    ["release", "k", newClaimId(), { release: null }],
  ])("LEDGER-28: refuses a bad %s with invalid_ledger_input naming it", (field, key, claimId, options) => {
    let caught: unknown;
    try {
      checkRetireRequest(key, claimId, options);
    } catch (error) {
      caught = error;
    }
    expect(InvalidLedgerInputError.isInstance(caught)).toBe(true);
    expect((caught as InvalidLedgerInputError).field).toBe(field);
  });
});

describe("MemoryLedger.retire (LEDGER-28)", () => {
  it("LEDGER-28: the refusal is a StaleClaimError with the row's fence, or 0 without a row", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const id = newClaimId();
    await ledger.retire("none", id);
    await expect(ledger.claim(claim("none", id))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
    await ledger.claim(claim("held", id));
    await ledger.retire("held", id);
    const refused = await ledger.claim(claim("held", id)).catch((e: unknown) => e);
    expect(StaleClaimError.isInstance(refused)).toBe(true);
    expect(refused).toMatchObject({ fence: 1 });
  });

  it("LEDGER-28: sweep forgets retired ids past the retention, never sooner, and counts none of them", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const id = newClaimId();
    await ledger.retire("k", id);
    const retired = (ledger as unknown as { retired: Map<string, Map<string, number>> }).retired;
    clock.advance(DEFAULT_RETENTION_MS - 1);
    expect(await ledger.sweep()).toBe(0);
    expect(retired.get("k")?.has(id)).toBe(true);
    await expect(ledger.claim(claim("k", id))).rejects.toMatchObject({ code: "stale_claim" });
    clock.advance(1);
    expect(await ledger.sweep()).toBe(0);
    expect(retired.has("k")).toBe(false);
    await expect(ledger.claim(claim("k", id))).resolves.toMatchObject({ outcome: "claimed", fence: 1 });
  });

  it("LEDGER-28: retiring again restarts the retention from the later retire", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const id = newClaimId();
    await ledger.retire("k", id);
    clock.advance(DEFAULT_RETENTION_MS / 2);
    await ledger.retire("k", id);
    clock.advance(DEFAULT_RETENTION_MS / 2 + 1);
    await expect(ledger.claim(claim("k", id))).rejects.toMatchObject({ code: "stale_claim" });
  });
});
