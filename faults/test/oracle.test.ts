/**
 * The crash and chaos suites' oracle on a row a dead holder left in flight (seed 6028: the settler
 * committed a resumed turn 9 ms before the dead runner's lease ran out, and the rows were judged
 * then). No processes, no stores: the judge and the audit's wait, on rows written here.
 */
import type { LedgerRow } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import type { RecordWriteFailed } from "./crash-protocol.js";
import { LEASE_MS, judgeLedger, leaseWaitMs, type ClientAnswer, type Effect, type OwnerFacts } from "./crash-harness.js";

const KEY = "2bae90fd078654ecaf76d8ef12cd1998";
const effect: Effect = { kind: "invoice_created", key: KEY, resourceId: "inv_dd3bff3602ae4c371963612f", payload: {}, at: 0 };
const inFlight = (leaseExpiresAt: number): LedgerRow => ({ key: KEY, toolName: "create_invoice", effect: "unkeyed_write", fence: 1, claimedAt: leaseExpiresAt - LEASE_MS, request: "{}", state: "in_flight", owner: "crash-worker-1", leaseExpiresAt });
// The resumed turn's record lists the dead holder's call (RECORD-8): the effect is told.
const records = [{ kind: "resumed_turn", calls: [{ key: KEY, effect: "may_have_happened" }] }] as never[];
// Seed 6028's holder was SIGKILLed: dead, it reported nothing and told nobody anything.
const dead = new Map<string, OwnerFacts>([["crash-worker-1", { live: false, recordFailures: [], told: [] }]]);
const judged = (row: LedgerRow, now: number, owners: ReadonlyMap<string, OwnerFacts> = dead) => judgeLedger([effect], [row], "[]", records, now, owners).filter((v) => v.startsWith("ledger:"));

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

describe("oracle: an effect's row left in flight by a live owner (DISPATCH-10, or a record never written)", () => {
  const now = 1_000_000;
  const row = inFlight(now - 1); // its lease run out, fence 1, owner crash-worker-1
  const failure = (over: Partial<RecordWriteFailed> = {}): RecordWriteFailed => ({ type: "record_failed", key: KEY, fence: 1, write: "complete", error: "PostgreSQL ledger complete failed: read ECONNRESET", answered: "raised", raised: { code: "ledger_unavailable", message: "read ECONNRESET" }, ...over });
  // What runner A told its client when the turn failed on the unreachable ledger: the call's effect may have happened.
  const mayHave: ClientAnswer = { type: "refused", code: "turn_failed", message: "turn 0 failed", record: { kind: "failed_turn", messageId: "m1", turnIndex: 0, retryable: true, effects: [{ key: KEY, name: "create_invoice", effect: "may_have_happened" }], calls: [{ key: KEY, status: "error", effect: "may_have_happened" }] } };
  // What a runner that lost its complete without a word tells: the call answered, "done".
  const done: ClientAnswer = { type: "answered", result: { appended: true, fromStore: false, turns: [{ turnIndex: 0, text: "", calls: [{ name: "create_invoice", key: KEY, result: { invoiceId: effect.resourceId } }] }] } };
  const live = (facts: Partial<OwnerFacts>) => new Map<string, OwnerFacts>([["crash-worker-1", { live: true, recordFailures: [], told: [], ...facts }]]);

  it("accepts the record write that failed, raised to the runner, the user told may_have_happened or happened", () => {
    expect(judged(row, now, live({ recordFailures: [failure()], told: [mayHave] }))).toEqual([]);
    expect(judged(row, now, live({ recordFailures: [failure({ write: "fail" })], told: [mayHave] }))).toEqual([]);
    // The run returned its result and only the complete failed: its ledger_unavailable carries effectHappened and the record says happened (ERR-4).
    const happened = { ...mayHave, record: { ...mayHave.record!, retryable: false, effects: [{ key: KEY, name: "create_invoice", effect: "happened" }], calls: [{ key: KEY, status: "error", effect: "happened" }] } } as ClientAnswer;
    expect(judged(row, now, live({ recordFailures: [failure()], told: [happened] }))).toEqual([]);
  });
  it("rejects a live owner that reported no failed write (FAULT_PLANT=drop-complete: the complete lost without a word)", () => {
    expect(judged(row, now, live({ told: [done] }))).toEqual([
      `ledger: row ${KEY} is in_flight although its effect ${effect.resourceId} happened: its live owner crash-worker-1 reported no failed record write of fence 1 raised to its runner (DISPATCH-10): a record never written, or its failure swallowed`,
    ]);
    // The same with the user told may_have_happened: the words alone do not excuse a record nobody tried to write.
    expect(judged(row, now, live({ told: [mayHave] }))).toHaveLength(1);
  });
  it("rejects a report of another claim, or a failure the dispatch did not raise", () => {
    expect(judged(row, now, live({ recordFailures: [failure({ fence: 2 })], told: [mayHave] }))[0]).toContain("(it reported complete of fence 2, raised)");
    // A re-send of the write went through (the dispatch returned): that failure says nothing of this row.
    expect(judged(row, now, live({ recordFailures: [failure({ answered: "returned" })], told: [mayHave] }))).toHaveLength(1);
    expect(judged(row, now, live({ recordFailures: [failure({ answered: "earlier" })], told: [mayHave] }))).toHaveLength(1);
  });
  it("rejects a reported failure whose user was told done, not happened, or nothing", () => {
    expect(judged(row, now, live({ recordFailures: [failure()], told: [mayHave, done] }))[0]).toMatch(/told its clients \[may_have_happened, done\], not happened or may_have_happened$/);
    const notHappened: ClientAnswer = { ...mayHave, record: { ...mayHave.record!, effects: [{ key: KEY, name: "create_invoice", effect: "not_happened" }] } } as ClientAnswer;
    expect(judged(row, now, live({ recordFailures: [failure()], told: [notHappened] }))[0]).toContain("[not_happened, may_have_happened]");
    expect(judged(row, now, live({ recordFailures: [failure()], told: [] }))[0]).toContain("told its clients nothing of it");
  });
  it("judges an owner no runner of the world is as a live one that reported nothing", () => {
    expect(judged(row, now, new Map())[0]).toContain("an owner no runner of this world is crash-worker-1 reported no failed record write");
  });
});
