import { fileURLToPath, pathToFileURL } from "node:url";
import { ledgerChecks, runChecks } from "@dispatch-once/conformance";
import { mutatedEntry } from "@dispatch-once/test-processes";
import { describe, expect, it } from "vitest";
import type { SqliteLedger } from "../src/index.js";
import { MUTANTS, type BlindKMutant } from "./blind-k/mutants.js";
import { createSqliteSubject } from "./subject.js";

/**
 * Blind round K (conformance/README.md): mutants of this adapter's REAL source (blind-k/mutants.ts,
 * written before the kit's checks were read), each rejected by the one check named here, with its
 * message, or listed with why no check of the kit can see it. Each mutant runs only its check, on
 * database files of its own.
 */
interface Verdict {
  check: RegExp;
  message: RegExp;
  /** How the whole kit stood before this round, where it did not reject the mutant by this check. */
  before?: string;
}

const VERDICTS: Record<string, Verdict> = {
  "ls-ties-by-rowid": { check: /^rows are listed oldest last transition first/, message: /rows out of order/ },
  "ls-forgotten-lends-request": { check: /^a claim after retention stores the new claimant's request/, message: /past retention/ },
  "ls-renew-live-only": { check: /^an owner that renews after its lease ran out, before anyone acted, keeps the claim/, message: /stale_claim/ },
};

/** Mutants the whole kit certifies, and why that is not a gap a check in one process can close. */
const ESCAPES: Record<string, string> = {
  // Date.now and julianday('now') read the one host clock every process sharing the file shares; the
  // kit's raw.skewedInstance moves globalThis.Date, which a Date.now captured at open never sees (the
  // `now: () => Date.now()` form is rejected: test/conformance.test.ts, "planted").
  "ls-process-clock": "equivalent on one host; a captured Date.now is out of reach of the in-process skew hook",
  // better-sqlite3 runs a transaction synchronously: in one process no other claim can run between its
  // read and its write, so the race needs other processes (test/race.test.ts).
  "ls-deferred-claim": "needs several OS processes on one file; the kit runs in one",
};

const ENTRY = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const SEED = 20261205;
const RUNS = 30;

async function mutantClass(mutant: BlindKMutant): Promise<typeof SqliteLedger> {
  const path = await mutatedEntry(ENTRY, mutant.id, mutant.patches);
  return ((await import(pathToFileURL(path).href)) as { SqliteLedger: typeof SqliteLedger }).SqliteLedger;
}

describe("blind round K: every mutant of the SQLite ledger is rejected by the check of the rule it breaks, or listed as out of the kit's reach", () => {
  it("names a check or a reason for every mutant, never both; none escaped the kit and was fixed in this round", () => {
    expect([...Object.keys(VERDICTS), ...Object.keys(ESCAPES)].sort()).toEqual(MUTANTS.map((m) => m.id).sort());
    expect(Object.values(VERDICTS).filter((v) => v.before !== undefined)).toHaveLength(0);
  });

  for (const mutant of MUTANTS) {
    const verdict = VERDICTS[mutant.id];
    if (verdict === undefined) continue;
    it(`${mutant.id} fails ${mutant.rule}${verdict.before === undefined ? "" : ` (before this round: ${verdict.before})`}`, async () => {
      const subject = createSqliteSubject(await mutantClass(mutant), `ledger-sqlite:${mutant.id}`);
      const checks = ledgerChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => c.rule === mutant.rule && verdict.check.test(c.name));
      expect(checks.map((c) => c.name), `exactly one ${mutant.rule} check matching ${verdict.check}`).toHaveLength(1);
      const [check] = (await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS })).checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(String(check!.error)).toMatch(verdict.message);
    });
  }
});
