/**
 * The crash and chaos suites' oracle on a row a dead holder left in flight (seed 6028: the settler
 * committed a resumed turn 9 ms before the dead runner's lease ran out, and the rows were judged
 * then). No processes, no stores: the judge and the audit's wait, on rows written here.
 */
import type { LedgerRow } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { LEASE_MS, judgeLedger, leaseWaitMs, type Effect } from "./crash-harness.js";

const KEY = "2bae90fd078654ecaf76d8ef12cd1998";
const effect: Effect = { kind: "invoice_created", key: KEY, resourceId: "inv_dd3bff3602ae4c371963612f", payload: {}, at: 0 };
const inFlight = (leaseExpiresAt: number): LedgerRow => ({ key: KEY, toolName: "create_invoice", effect: "unkeyed_write", fence: 1, claimedAt: leaseExpiresAt - LEASE_MS, request: "{}", state: "in_flight", owner: "crash-worker-1", leaseExpiresAt });
// The resumed turn's record lists the dead holder's call (RECORD-8): the effect is told.
const records = [{ kind: "resumed_turn", calls: [{ key: KEY, effect: "may_have_happened" }] }] as never[];
const judged = (row: LedgerRow, now: number) => judgeLedger([effect], [row], "[]", records, now).filter((v) => v.startsWith("ledger:"));

describe("oracle: an effect's row left in flight by a dead holder", () => {
  const now = 1_000_000;
  it("waits for a live lease within the dispatcher's lease, then judges the row as the spec leaves it", () => {
    // Seed 6028's reading: claimed 791 ms before the judge, its lease 9 ms from running out.
    const row = inFlight(now + 9);
    expect(leaseWaitMs([effect], [row], now, LEASE_MS)).toBeGreaterThanOrEqual(9);
    // After the wait: in flight, its lease run out, for a reconciler (LEDGER-7, LEDGER-16, LEDGER-25).
    expect(judged(row, now + leaseWaitMs([effect], [row], now, LEASE_MS))).toEqual([]);
  });
  it("still reports a lease that outlives the wait (a holder renewing after every process answered)", () => {
    const row = inFlight(now + 9);
    expect(judged(row, now)).toEqual([`ledger: row ${KEY} is in_flight although its effect ${effect.resourceId} happened (its lease runs 9 ms more, past the oracle's wait)`]);
  });
  it("does not wait for a lease longer than any the dispatcher grants (FAULT_PLANT=long-lease), and reports it", () => {
    const row = inFlight(now + 59_000);
    expect(leaseWaitMs([effect], [row], now, LEASE_MS)).toBe(0);
    expect(judged(row, now)).toHaveLength(1);
  });
  it("waits for nothing when no effect's row is live", () => {
    expect(leaseWaitMs([effect], [inFlight(now - 1)], now, LEASE_MS)).toBe(0);
    expect(leaseWaitMs([], [inFlight(now + 9)], now, LEASE_MS)).toBe(0);
  });
});
