#!/usr/bin/env node
// Writes a blind round's VERDICTS.md from its mutants.json and results.json (and the resolutions
// recorded there): `node faults/blind-l/table.mjs [--round=m]` (faults/blind-<round>/; round L by default).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const round = process.argv.find((a) => a.startsWith("--round="))?.slice("--round=".length) ?? "l";
if (!/^[a-z]$/.test(round)) throw new Error(`--round takes one letter, got ${JSON.stringify(round)}`);
const here = join(import.meta.dirname, "..", `blind-${round}`);
const ROUND = round.toUpperCase();
const mutants = JSON.parse(readFileSync(join(here, "mutants.json"), "utf8"));
const results = JSON.parse(readFileSync(join(here, "results.json"), "utf8"));
const cell = (s) => String(s).replaceAll("|", "\\|").replaceAll("\n", " ");
const rows = [];
const totals = { caught: 0, "escaped-fixed": 0, "escaped-harmless": 0, "escaped-open": 0, unrun: 0 };
for (const m of mutants) {
  const r = results[m.id];
  let verdict;
  let catcher;
  if (r === undefined) {
    verdict = "unrun";
    catcher = "";
  } else if (r.escaped !== undefined) {
    verdict = r.escaped.harmless ? "escaped-harmless" : r.escaped.open ? "escaped-open" : "escaped-fixed";
    catcher = `ESCAPED the sweep; ${r.escaped.resolution}`;
  } else if (r.caughtBy !== null) {
    verdict = "caught";
    catcher = `${r.caughtBy}: ${(r.test ?? "").split(" :: ")[0]}`;
  } else {
    verdict = "escaped (unresolved)";
    catcher = "ESCAPED";
  }
  totals[verdict] = (totals[verdict] ?? 0) + 1;
  rows.push(`| ${m.id} | ${m.pkg} | ${m.rule} | ${cell(m.cause)} | ${verdict} | ${cell(catcher)} |`);
}
const text = `# Blind round ${ROUND}: verdicts

Made by \`node faults/blind-l/table.mjs${round === "l" ? "" : ` --round=${round}`}\` from \`mutants.json\` (written and committed before any test
or harness was read) and \`results.json\` (\`node faults/blind-l/run.mjs${round === "l" ? "" : ` --round=${round}`}\`: each mutant against the
mutated package's own tests, then its dependents' tests, the byte-cut and crash harnesses of
\`faults/\` and the end-to-end kit's profiles, stopping at the first check that fails, and confirming
it: the failing file fails again on the mutant and passes unmutated, or the failure is one by chance
and the chain goes on). The escapes are the first sweep's (before the new checks, whose catches are
the later sweep's); "caught" rows name the later sweep's confirmed first catcher.

Totals: ${mutants.length} mutants; caught ${totals.caught}, escaped then fixed (a new check catches it) ${totals["escaped-fixed"]}, escaped and harmless ${totals["escaped-harmless"]}${totals["escaped-open"] ? `, escaped and left open (a gap named, no check yet) ${totals["escaped-open"]}` : ""}${totals.unrun ? `, not run ${totals.unrun}` : ""}.

| mutant | package | rule | cause | verdict | first catcher (file > test) or resolution |
|---|---|---|---|---|---|
${rows.join("\n")}
`;
writeFileSync(join(here, "VERDICTS.md"), text);
console.log(text.split("\n").find((l) => l.startsWith("Totals")));
