import { fileURLToPath, pathToFileURL } from "node:url";
import { conversationStoreChecks, runChecks } from "@dispatch-once/conformance";
import { mutatedEntry } from "@dispatch-once/test-processes";
import { describe, expect, it } from "vitest";
import type { SqliteConversationStore } from "../src/index.js";
import { MUTANTS, type BlindKMutant } from "./blind-k/mutants.js";
import { createSqliteConversationSubject } from "./subject.js";

/**
 * Blind round K (conformance/README.md): mutants of this store's REAL source (blind-k/mutants.ts,
 * written before the kit's checks were read), each rejected by the one check named here, with its
 * message. Each mutant runs only that check, on database files of its own.
 */
interface Verdict {
  /** The rule of the check that rejects it, where it is not the rule the fixture names (and why). */
  rule?: string;
  check: RegExp;
  message: RegExp;
  /** How the whole kit stood before this round, where it did not reject the mutant by this check. */
  before?: string;
}

const VERDICTS: Record<string, Verdict> = {
  "cs-process-clock": { check: /^the turn lease is measured on the store's clock/, message: /a live lease was taken/, before: "escaped (the kit had no clock-skew hook for conversation stores)" },
  "cs-earlier-grant-dropped": { check: /^a copy of an earlier grant's acquire/, message: /late copy while the lease is free/ },
  // The conversation filter's check catches it only when two failures share a millisecond of SQLite's clock (a loaded CI host: not always).
  "cs-cursor-without-message": { check: /^a failed turn whose failure time the store did not keep/, message: /in pages of 1, against one page/, before: "by chance (TURN-17's conversation filter check, only when two failures shared a millisecond)" },
  // TURN-5 states the commit's condition ("the turn answers the bound message (TURN-11)"); the fixture named the binding's rule.
  "cs-commit-unbound-message": { rule: "TURN-5", check: /^a commit naming a message that is not in progress/, message: /commit naming the queued m2/ },
  "cs-reopen-restarts-window": { check: /^a reopened message shows firstFailedAt/, message: /after its retry failed again/ },
};

const ENTRY = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const SEED = 20261205;
const RUNS = 30;

async function mutantClass(mutant: BlindKMutant): Promise<typeof SqliteConversationStore> {
  const path = await mutatedEntry(ENTRY, mutant.id, mutant.patches);
  return ((await import(pathToFileURL(path).href)) as { SqliteConversationStore: typeof SqliteConversationStore }).SqliteConversationStore;
}

describe("blind round K: every mutant of the SQLite conversation store is rejected by the check named for it", () => {
  it("names a check for every mutant; 1 escaped the kit before this round", () => {
    expect(Object.keys(VERDICTS).sort()).toEqual(MUTANTS.map((m) => m.id).sort());
    expect(Object.values(VERDICTS).filter((v) => v.before?.startsWith("escaped"))).toHaveLength(1);
  });

  for (const mutant of MUTANTS) {
    const verdict = VERDICTS[mutant.id]!;
    const rule = verdict.rule ?? mutant.rule;
    it(`${mutant.id} fails ${rule}${verdict.before === undefined ? "" : ` (before this round: ${verdict.before})`}`, async () => {
      const subject = createSqliteConversationSubject(`conversation-sqlite:${mutant.id}`, await mutantClass(mutant));
      const checks = conversationStoreChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => c.rule === rule && verdict.check.test(c.name));
      expect(checks.map((c) => c.name), `exactly one ${rule} check matching ${verdict.check}`).toHaveLength(1);
      const [check] = (await runChecks(checks, { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] })).checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(String(check!.error)).toMatch(verdict.message);
    });
  }
});
