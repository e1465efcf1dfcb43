// The audit survey: certifies every audit mutant of the kit's key-value ledger (test/fixtures/kv-ledger.ts,
// "Planted by the external audit") with the WHOLE ledger level, and writes which rules and checks failed
// each, as JSON. It asserts nothing: the planted-bug table in test/broken-ledgers.test.ts is the gate.
//
//   node --import tsx conformance/scripts/audit-survey.ts [--bugs a,b] [--out audit-survey.json] [--runs 200] [--seed 20261129]
//   pnpm run survey:audit --bugs releaseOfCompleted,truncatesReason   (in conformance/)
//
// About 4 minutes for every mutant (and the control, the ledger without a bug). Runs the kit's sources;
// the JSON is rewritten after each mutant, a line per mutant goes to stderr.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ledgerChecks, runChecks } from "../src/index.js";
import { kvSubject, type Bugs } from "../test/fixtures/kv-ledger.js";

const ALL: Array<keyof Bugs> = [
  "renewRevivesFinished", "markUnknownOverCompleted", "releaseOfCompleted", "completeOverFailed", "lookupDropsFinishedAt",
  "replayDropsErrorCode", "takeoverReturnsOldFence", "reclaimKeepsEffect", "takeoverKeepsEffect", "takeoverKeepsClaimId",
  "reclaimKeepsClaimId", "recognitionOverwritesRequest", "releaseDropsClaimId", "claimIdAcrossKeys", "sweepCountsScanned",
  "instanceRowCache", "oversizedMarksFailed", "sizeOfEscapedResult", "renewSkipsLeaseCheck", "renewKeepsFraction",
  "renewWhenOffline", "finishNeedsLiveLease", "truncatesReason", "retentionOnProcessClock",
  "listExpiredIncludesLive", "listExpiredIgnoresOlderThan", "listExpiredNewestFirst", "listExpiredIncludesFinished",
  "listExpiredActsOnExpiry", "listExpiredIgnoresLimit", "listExpiredOlderThanSign", "listExpiredOlderThanAsSeconds",
];
const CONTROL = "control";

const { values } = parseArgs({
  options: {
    bugs: { type: "string" },
    out: { type: "string", default: "audit-survey.json" },
    runs: { type: "string", default: "200" },
    seed: { type: "string", default: "20261129" },
  },
});
const runs = Number(values.runs);
const seed = Number(values.seed);
const only = values.bugs?.split(",").filter(Boolean) ?? [];
const unknown = only.filter((bug) => bug !== CONTROL && !(ALL as string[]).includes(bug));
if (unknown.length > 0) {
  // A misspelt mutant would plant nothing and be surveyed as the control.
  process.stderr.write(`audit-survey: not an audit mutant: ${unknown.join(", ")} (the mutants: ${ALL.join(", ")})\n`);
  process.exit(2);
}
const bugs: string[] = only.length > 0 ? only : [CONTROL, ...ALL];

const out: Record<string, unknown> = {};
for (const bug of bugs) {
  const started = Date.now();
  const subject = kvSubject(`kv-${bug}`, bug === CONTROL ? {} : { [bug]: true });
  const report = await runChecks(ledgerChecks(subject, { runs, seed }), { subject: subject.name, seed, runs });
  const failing = report.checks.filter((c) => c.status === "fail").map((c) => ({ rule: c.rule, name: c.name.slice(0, 110), error: String(c.error ?? "").slice(0, 300) }));
  const failingRules = report.rules.filter((r) => r.status === "fail").map((r) => r.rule);
  const ms = Date.now() - started;
  out[bug] = { conforms: report.conforms, failingRules, failing, ms };
  process.stderr.write(`${bug}: conforms=${report.conforms} rules=${JSON.stringify(failingRules)} ${ms}ms\n`);
  writeFileSync(values.out, JSON.stringify(out, null, 2));
}
