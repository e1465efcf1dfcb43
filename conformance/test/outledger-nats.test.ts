import { describe, expect, it } from "vitest";
import { ledgerChecks, memoryLedgerSubject, runChecks, type LedgerSubject } from "../src/index.js";

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
