import { describe, expect, it } from "vitest";
import { MemoryLedger } from "@dispatch-once/core";
import { ledgerChecks, memoryLedgerSubject, runChecks, type Check, type LedgerSubject } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";
import { ROUND_I_LEDGER, type RoundIBug } from "./fixtures/round-i-bugs.js";

/**
 * Mutation round i (ledgermut) at the ledger level (the list and what each bug is:
 * fixtures/round-i-bugs.ts; the planted code in the key-value fixture). CI time: each planted
 * subject runs the one check that rejects it and stops there; the checks written for this round
 * run once more against the key-value ledger and the reference MemoryLedger without a bug.
 */
const SEED = 20261204;
const RUNS = 30;

/** sweep() forgets every retired claim id ("retired ids are garbage once the rows they guard are swept"). */
class RetiredForgottenOnSweep extends MemoryLedger {
  override async sweep(): Promise<number> {
    const removed = await super.sweep();
    (this as unknown as { retired: Map<string, unknown> }).retired.clear();
    return removed;
  }
}

function subjectOf(bug: RoundIBug): LedgerSubject {
  if (bug.memory) return memoryLedgerSubject(`memory-${bug.bug}`, RetiredForgottenOnSweep);
  return kvSubject(`kv-${bug.bug}`, { [bug.bug]: true });
}

function only(checks: Check[], bug: RoundIBug): Check[] {
  const picked = checks.filter((c) => c.rule === bug.rule && bug.check.test(c.name));
  expect(picked.map((c) => c.name), `exactly one ${bug.rule} check matching ${bug.check}`).toHaveLength(1);
  return picked;
}

describe("mutation round i: broken ledgers are rejected by the check of the rule they break", () => {
  for (const bug of ROUND_I_LEDGER) {
    it(`${bug.bug} (${bug.what}) fails ${bug.rule}${bug.new ? " (certified before this round)" : ""}`, async () => {
      const subject = subjectOf(bug);
      const report = await runChecks(only(ledgerChecks(subject, { runs: RUNS, seed: SEED }), bug), { subject: subject.name, seed: SEED, runs: RUNS });
      expect(report.conforms).toBe(false);
      const [check] = report.checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(check!.error).toMatch(bug.message);
    });
  }

  it("the list names 21 distinct bugs, 12 of them certified before this round (one only by chance)", () => {
    expect(new Set(ROUND_I_LEDGER.map((b) => b.bug)).size).toBe(ROUND_I_LEDGER.length);
    expect(ROUND_I_LEDGER).toHaveLength(21);
    expect(ROUND_I_LEDGER.filter((b) => b.new)).toHaveLength(12);
  });

  for (const subject of [kvSubject("kv-correct"), memoryLedgerSubject()]) {
    it(`the checks written for this round pass ${subject.name} without a bug`, async () => {
      const fresh = ROUND_I_LEDGER.filter((b) => b.new);
      const checks = ledgerChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => fresh.some((b) => c.rule === b.rule && b.check.test(c.name)));
      // Ten checks: two pairs of planted bugs share one (racyFail and racyRelease; the two LEDGER-30 key cases).
      expect(checks).toHaveLength(new Set(fresh.map((b) => `${b.rule} ${b.check.source}`)).size);
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS });
      expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
    });
  }
});
