import { describe, expect, it } from "vitest";
import { ledgerChecks, memoryLedgerSubject, runChecks, type LedgerSubject } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";

/**
 * The NATS trial (trials/ledger-nats, 2026-12-08): a right ledger whose maxResultBytes is below
 * 900 KiB + a few hundred bytes (NATS's default max_payload is 1 MiB, so a first NATS ledger
 * declared 768 KiB) failed "a ~900 KB result is replayed byte-for-byte": the check asked bigResult
 * for limit - 64 bytes, and bigResult overshoots what it is asked by up to one item (about 90
 * bytes), so the check's own result was over the declared limit and the ledger refused it,
 * rightly, with result_not_storable.
 */
const SEED = 20261208;

/** The reference ledger declaring a smaller limit than its default, as a store with a 1 MiB message limit does. */
function limitedMemorySubject(maxResultBytes: number): LedgerSubject {
  const base = memoryLedgerSubject();
  return {
    ...base,
    name: `memory ledger (maxResultBytes ${maxResultBytes})`,
    create: (options = {}) => base.create({ ...options, maxResultBytes: options.maxResultBytes ?? maxResultBytes }),
  };
}

describe("outledger-nats: the ~900 KB check stays within a smaller declared maxResultBytes", () => {
  for (const limit of [786_432, 900 * 1024 + 64, 900 * 1024 + 100]) {
    it(`passes the reference ledger declaring ${limit} bytes`, async () => {
      const subject = limitedMemorySubject(limit);
      const checks = ledgerChecks(subject, { runs: 1, seed: SEED }).filter((c) => /a ~900 KB result is replayed byte-for-byte/.test(c.name));
      expect(checks).toHaveLength(1);
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: 1 });
      const failures = report.checks.filter((r) => r.status !== "pass").map((r) => `${r.name}: ${r.error ?? r.status}`);
      expect(failures).toEqual([]);
    });
  }
});

/**
 * The NATS trial's planted sweep (trials/ledger-nats/plants, "sweep-blind-delete"): a sweep that
 * scans the bucket key by key and deletes a row it judged forgotten by name, not by the revision it
 * read, removes a row a claim re-created between its read and its delete. The kit certified it:
 * both sweep-race checks issue every claim at the sweep's start, while such a sweep is still
 * listing, so it meets every row already claimed (they catch it only when the timing happens to
 * fall right). The check that claims, completes and ages the rows over and over while sweeps run
 * back to back rejects it; the reference ledger and the fixture's right sweep pass it.
 */
describe("outledger-nats: a sweep that scans and deletes by name, not by the version it judged", () => {
  const subject = kvSubject("kv-sweepScansBlindDelete", { sweepScansBlindDelete: true });
  const sweepRaces = (s: LedgerSubject) => ledgerChecks(s, { runs: 1, seed: SEED }).filter((c) => c.rule === "LEDGER-13" && /^sweep (racing claims|issued just after claims|run again and again)/.test(c.name));

  it("is rejected by LEDGER-13's sweep run again and again while claims re-create, finish and age its rows", async () => {
    const checks = sweepRaces(subject);
    expect(checks.map((c) => c.name.slice(0, 40))).toHaveLength(3);
    const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: 1 });
    const failed = report.checks.filter((r) => r.status === "fail");
    expect(failed.map((r) => r.name)).toContainEqual(expect.stringMatching(/^sweep run again and again/));
    expect(failed.find((r) => /^sweep run again and again/.test(r.name))!.error).toMatch(/a concurrent sweep removed the row after it was claimed again/);
  }, 60_000);

  it("the reference ledger and the fixture's right sweep pass the same checks", async () => {
    for (const s of [memoryLedgerSubject(), kvSubject("kv-right")]) {
      const report = await runChecks(sweepRaces(s), { subject: s.name, seed: SEED, runs: 1 });
      expect(report.checks.filter((r) => r.status !== "pass").map((r) => `${r.name}: ${r.error}`)).toEqual([]);
    }
  }, 60_000);
});
