import { fileURLToPath, pathToFileURL } from "node:url";
import { ledgerChecks, runChecks } from "@dispatch-once/conformance";
import { mutatedEntry } from "@dispatch-once/test-processes";
import { describe, expect, it } from "vitest";
import type { RedisLedger } from "../src/index.js";
import { MUTANTS, type BlindKMutant } from "./blind-k/mutants.js";
import { createRedisSubject } from "./subject.js";

/**
 * Blind round K (conformance/README.md): mutants of this adapter's REAL source (blind-k/mutants.ts,
 * written before the kit's checks were read), each rejected by the one check named here, with its
 * message, or listed with why the kit cannot tell it from the adapter. Each mutant runs only its
 * check, against the real server under a key prefix of its own (tag blindk).
 */
interface Verdict {
  check: RegExp;
  message: RegExp;
  /** How the whole kit stood before this round, where it did not reject the mutant by this check. */
  before?: string;
}

const VERDICTS: Record<string, Verdict> = {
  "lr-takeover-keeps-fence": { check: /^the fence increases by one across 4 takeovers/, message: /takeover #1 got fence 1, expected 2/ },
  "lr-lease-from-node-clock": { check: /^an instance whose process clock is 10 minutes fast or slow/, message: /different clocks/ },
  "lr-ttl-from-claim": { check: /kept for its whole retention, counted from when it finished/, message: /lookup of the completed row/ },
  "lr-expiry-not-audited": { check: /^the transitions into unknown are audited/, message: /expired unkeyed_write claim/ },
  "lr-result-re-encoded": { check: /^results are replayed byte-for-byte \(14 tricky/, message: /not byte-for-byte/ },
};

/** Mutants the whole kit certifies, and why. */
const ESCAPES: Record<string, string> = {
  // The in-flight index is a hint: listExpiredInFlight reads every candidate's row and widens its window
  // when skipped members leave a page short, so stale members of finished rows change no answer. They
  // cost memory and listing time that grow with the finished rows (LEDGER-25's SHOULD), not a result.
  "lr-in-flight-index-kept": "no answer changes (the listing confirms each member against its row); a cost, not a result",
};

const ENTRY = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const SEED = 20261205;
const RUNS = 30;

async function mutantClass(mutant: BlindKMutant): Promise<typeof RedisLedger> {
  const path = await mutatedEntry(ENTRY, mutant.id, mutant.patches);
  return ((await import(pathToFileURL(path).href)) as { RedisLedger: typeof RedisLedger }).RedisLedger;
}

describe("blind round K: every mutant of the Redis ledger is rejected by the check of the rule it breaks, or listed as one no answer shows", () => {
  it("names a check or a reason for every mutant, never both; none escaped the kit and was fixed in this round", () => {
    expect([...Object.keys(VERDICTS), ...Object.keys(ESCAPES)].sort()).toEqual(MUTANTS.map((m) => m.id).sort());
    expect(Object.values(VERDICTS).filter((v) => v.before !== undefined)).toHaveLength(0);
  });

  for (const mutant of MUTANTS) {
    const verdict = VERDICTS[mutant.id];
    if (verdict === undefined) continue;
    it(`${mutant.id} fails ${mutant.rule}${verdict.before === undefined ? "" : ` (before this round: ${verdict.before})`}`, async () => {
      const subject = createRedisSubject(await mutantClass(mutant), `ledger-redis:${mutant.id}`, "blindk");
      const checks = ledgerChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => c.rule === mutant.rule && verdict.check.test(c.name));
      expect(checks.map((c) => c.name), `exactly one ${mutant.rule} check matching ${verdict.check}`).toHaveLength(1);
      const [check] = (await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS })).checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(String(check!.error)).toMatch(verdict.message);
    });
  }
});
