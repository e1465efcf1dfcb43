import { fileURLToPath, pathToFileURL } from "node:url";
import { ledgerChecks, runChecks } from "@dispatch-once/conformance";
import { mutatedEntry, type SourceMutant } from "@dispatch-once/test-processes";
import { describe, expect, it } from "vitest";
import type { SqliteLedger } from "../src/index.js";
import { OUTLEDGER_MUTANTS } from "./outledger/mutants.js";
import { createSqliteSubject } from "./subject.js";

/**
 * Round "outledger": each bug the MariaDB trial ledger (trials/ledger-mariadb, written from the
 * docs by an outside team) carried past the whole kit, as a mutant of this adapter, rejected by the
 * one check of its rule named here, with its message. Each mutant runs only that check.
 */
const VERDICTS: Record<string, { check: RegExp; message: RegExp }> = {
  "ol-forgotten-before-decode": { check: /^a corrupt row whose retention has passed still raises ledger_corrupt/, message: /past its retention/ },
};

const ENTRY = fileURLToPath(new URL("../src/index.ts", import.meta.url));
const SEED = 20261205;

async function mutantClass(mutant: SourceMutant): Promise<typeof SqliteLedger> {
  const path = await mutatedEntry(ENTRY, mutant.id, mutant.patches);
  return ((await import(pathToFileURL(path).href)) as { SqliteLedger: typeof SqliteLedger }).SqliteLedger;
}

describe("round outledger: every bug the MariaDB trial carried past the kit is rejected by the check of its rule", () => {
  it("names a check for every mutant", () => {
    expect(Object.keys(VERDICTS).sort()).toEqual(OUTLEDGER_MUTANTS.map((m) => m.id).sort());
  });

  for (const mutant of OUTLEDGER_MUTANTS) {
    const verdict = VERDICTS[mutant.id]!;
    it(`${mutant.id} fails ${mutant.rule}`, async () => {
      const subject = createSqliteSubject(await mutantClass(mutant), `ledger-sqlite:${mutant.id}`);
      const checks = ledgerChecks(subject, { runs: 1, seed: SEED }).filter((c) => c.rule === mutant.rule && verdict.check.test(c.name));
      expect(checks.map((c) => c.name), `exactly one ${mutant.rule} check matching ${verdict.check}`).toHaveLength(1);
      const [check] = (await runChecks(checks, { subject: subject.name, seed: SEED, runs: 1 })).checks;
      expect(check!.status, `${check!.rule} ${check!.name}: ${String(check!.error)}`).toBe("fail");
      expect(String(check!.error)).toMatch(verdict.message);
    });
  }
});
