import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * A blind round's mutants (faults/blind-<round>: the sweep is `node faults/blind-l/run.mjs
 * --round=<round>`, not part of CI): each patch must still apply, exactly once, to the source it
 * names, so that a sweep never quietly runs the unmutated source as a mutant; each names a rule of
 * the specification; each has a verdict, and the check that catches it still exists.
 */
export function checkBlindRound(round: string): void {
  const repo = resolve(import.meta.dirname, "../..");
  const here = join(repo, "faults", `blind-${round}`);
  const mutants = JSON.parse(readFileSync(join(here, "mutants.json"), "utf8")) as { id: string; pkg: string; file: string; rule: string; find: string; replace: string }[];
  const results = JSON.parse(readFileSync(join(here, "results.json"), "utf8")) as Record<string, { caughtBy: string | null; file?: string; escaped?: { harmless: boolean; open?: boolean; catcher?: string; file?: string } }>;
  const rules = new Set((JSON.parse(readFileSync(join(repo, "spec", "rules.json"), "utf8")) as { id: string }[]).map((r) => r.id));
  // A catcher's directory from its name (run.mjs's CHAINS): a package's or app's tests, faults/, the
  // ledger kit's own tests (round P), the Python reference (round P), or the end-to-end kit.
  const catcherDir = (name: string) =>
    name.startsWith("packages/") || name.startsWith("apps/") || name.startsWith("spec/")
      ? name.split(" ")[0]!
      : name.startsWith("faults")
        ? "faults"
        : name.startsWith("conformance tests")
          ? "conformance"
          : "conformance-e2e";
  // Where a mutant's package keeps the source it may patch (round P added the ledger kit, the mock provider and the Python reference; round S the OpenAI mock).
  // Round Q added core's examples and README (the framework loop shown to users) and the byte-cut harness's modules.
  const srcOf = (pkg: string) =>
    pkg === "conformance-e2e" || pkg === "conformance"
      ? `${pkg}/src/`
      : pkg === "mock-provider" || pkg === "mock-openai"
        ? `apps/${pkg}/src/`
        : pkg === "spec-reference"
          ? "spec/reference/"
          : pkg === "core-example"
            ? "packages/core/examples/"
            : pkg === "core-readme"
              ? "packages/core/README.md"
              : pkg === "faults"
                ? "faults/test/"
                : `packages/${pkg}/src/`;

  describe(`blind round ${round.toUpperCase()}'s mutants still apply and keep their verdicts`, () => {
    it.each(mutants.map((m) => [m.id, m] as const))("%s applies once to its source, names a rule and has a catcher", (_id, m) => {
      const text = readFileSync(join(repo, m.file), "utf8");
      const at = text.indexOf(m.find);
      expect(at, `${m.id}: its patch is nowhere in ${m.file} (the source moved on: rewrite the mutant)`).toBeGreaterThanOrEqual(0);
      expect(text.indexOf(m.find, at + 1), `${m.id}: its patch occurs more than once in ${m.file}`).toBe(-1);
      // The kit's own source (round N) is conformance-e2e/src; every package's, packages/<pkg>/src.
      const src = srcOf(m.pkg);
      expect(m.file.startsWith(src), `${m.id}: ${m.file} is not in ${src}`).toBe(true);
      expect(m.replace).not.toBe(m.find);
      expect(rules.has(m.rule), `${m.id}: ${m.rule} is not a rule of spec/rules.json`).toBe(true);
      const r = results[m.id];
      expect(r, `${m.id} has no verdict in results.json`).toBeDefined();
      const catcher = r!.caughtBy ?? r!.escaped?.catcher;
      const file = r!.caughtBy !== null ? r!.file : r!.escaped?.file;
      if (r!.escaped?.harmless === true) return;
      // A gap found and named but not closed in its round (round O): its resolution says what is missing.
      if (r!.escaped?.open === true) return;
      expect(catcher, `${m.id}: neither caught nor resolved`).toBeTypeOf("string");
      expect(existsSync(join(repo, catcherDir(catcher!), file!)), `${m.id}: its catcher ${file} is gone`).toBe(true);
    });
  });
}
