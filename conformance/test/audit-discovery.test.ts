// The audit survey: certifies every audit mutant (kv-ledger.ts, "Planted by the external audit") with the WHOLE kit
// and writes which rules and checks failed. Opt-in (about 4 minutes): AUDIT_SURVEY=1 npx vitest run test/audit-discovery.test.ts
// (AUDIT_BUGS=a,b to pick mutants, AUDIT_OUT=file for the JSON). The planted-bug table in broken-ledgers.test.ts is the gate.
import { it } from "vitest";
import { writeFileSync } from "node:fs";
import { ledgerChecks, runChecks } from "../src/index.js";
import { kvSubject, type Bugs } from "./fixtures/kv-ledger.js";

const SEED = 20261129;
const only = process.env.AUDIT_BUGS?.split(",").filter(Boolean) ?? [];
const ALL: Array<keyof Bugs> = [
  "renewRevivesFinished", "markUnknownOverCompleted", "releaseOfCompleted", "completeOverFailed", "lookupDropsFinishedAt",
  "replayDropsErrorCode", "takeoverReturnsOldFence", "reclaimKeepsEffect", "takeoverKeepsEffect", "takeoverKeepsClaimId",
  "reclaimKeepsClaimId", "recognitionOverwritesRequest", "releaseDropsClaimId", "claimIdAcrossKeys", "sweepCountsScanned",
  "instanceRowCache", "oversizedMarksFailed", "sizeOfEscapedResult", "renewSkipsLeaseCheck", "renewKeepsFraction",
  "renewWhenOffline", "finishNeedsLiveLease", "truncatesReason", "retentionOnProcessClock",
  "listExpiredIncludesLive", "listExpiredIgnoresOlderThan", "listExpiredNewestFirst", "listExpiredIncludesFinished",
  "listExpiredActsOnExpiry", "listExpiredIgnoresLimit", "listExpiredOlderThanSign", "listExpiredOlderThanAsSeconds",
];
const bugs = only.length > 0 ? (only as Array<keyof Bugs>) : (["control" as keyof Bugs, ...ALL]);

it.skipIf(process.env.AUDIT_SURVEY !== "1")("audit survey: every audit mutant against the whole kit", async () => {
  const out: Record<string, unknown> = {};
  for (const bug of bugs) {
    const started = Date.now();
    const subject = kvSubject(`kv-${String(bug)}`, bug === ("control" as keyof Bugs) ? {} : { [bug]: true });
    const report = await runChecks(ledgerChecks(subject, { runs: 200, seed: SEED }), { subject: subject.name, seed: SEED, runs: 200 });
    const failing = report.checks.filter((c) => c.status === "fail").map((c) => ({ rule: c.rule, name: c.name.slice(0, 110), error: String(c.error ?? "").slice(0, 300) }));
    out[String(bug)] = { conforms: report.conforms, failingRules: report.rules.filter((r) => r.status === "fail").map((r) => r.rule), failing, ms: Date.now() - started };
    console.log(`${String(bug)}: conforms=${report.conforms} rules=${JSON.stringify((out[String(bug)] as { failingRules: string[] }).failingRules)} ${Date.now() - started}ms`);
    writeFileSync(process.env.AUDIT_OUT ?? "audit-survey.json", JSON.stringify(out, null, 2));
  }
}, 3_600_000);
