import { fileURLToPath, pathToFileURL } from "node:url";
import { ledgerChecks, runChecks } from "@dispatch-once/conformance";
import { mutatedEntry } from "@dispatch-once/test-processes";
import { afterAll, describe, expect, it } from "vitest";
import type { PostgresLedger } from "../src/index.js";
import { MUTANTS, type BlindKMutant } from "./blind-k/mutants.js";
import { closeSubjectPool, createPostgresSubject } from "./subject.js";

/**
 * Blind round K (conformance/README.md): mutants of this adapter's REAL source (blind-k/mutants.ts,
 * written before the kit's checks were read), each rejected by the one check named here, with its
 * message. Each mutant runs only its check, against the real server in schemas of its own (tag
 * blindk).
 */
interface Verdict {
  check: RegExp;
  message: RegExp;
  /** How the whole kit stood before this round, where it did not reject the mutant by this check. */
  before?: string;
}

const VERDICTS: Record<string, Verdict> = {
  "lp-takeover-keeps-fence": { check: /^the fence increases by one across 4 takeovers/, message: /takeover #1 got fence 1, expected 2/ },
  "lp-reclaim-takes-new-request": { check: /^a re-claim after release keeps the stored request/, message: /the claimant's own request, not the stored one/ },
  "lp-release-clears-claim-id": { check: /^vector LT-058:/, message: /expected 'stale_claim'/ },
  "lp-cursor-without-key": { check: /^the cursor resumes within one millisecond/, message: /share their predecessor's time/, before: "escaped (claims one round trip apart rarely share a millisecond, so no page boundary fell inside a tie)" },
  "lp-resolve-keeps-fence": { check: /^resolving an expired claim bumps the fence/, message: /must bump the fence/ },
  "lp-renew-any-state": { check: /^operations on a finished or released row are refused/, message: /renew on a completed row/ },
};

const ENTRY = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const SEED = 20261205;
const RUNS = 30;

async function mutantClass(mutant: BlindKMutant): Promise<typeof PostgresLedger> {
  const path = await mutatedEntry(ENTRY, mutant.id, mutant.patches);
  return ((await import(pathToFileURL(path).href)) as { PostgresLedger: typeof PostgresLedger }).PostgresLedger;
}

describe("blind round K: every mutant of the PostgreSQL ledger is rejected by the check of the rule it breaks", () => {
  afterAll(closeSubjectPool);

  it("names a check for every mutant; 1 escaped the kit before this round", () => {
    expect(Object.keys(VERDICTS).sort()).toEqual(MUTANTS.map((m) => m.id).sort());
    expect(Object.values(VERDICTS).filter((v) => v.before?.startsWith("escaped"))).toHaveLength(1);
  });

  for (const mutant of MUTANTS) {
    const verdict = VERDICTS[mutant.id]!;
    it(`${mutant.id} fails ${mutant.rule}${verdict.before === undefined ? "" : ` (before this round: ${verdict.before})`}`, async () => {
      const subject = createPostgresSubject(await mutantClass(mutant), `ledger-postgres:${mutant.id}`, "blindk");
      const checks = ledgerChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => c.rule === mutant.rule && verdict.check.test(c.name));
      expect(checks.map((c) => c.name), `exactly one ${mutant.rule} check matching ${verdict.check}`).toHaveLength(1);
      const [check] = (await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS })).checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(String(check!.error)).toMatch(verdict.message);
    });
  }
});
