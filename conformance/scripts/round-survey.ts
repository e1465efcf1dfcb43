// The 2026-12-03 mutation round's survey: certifies planted bugs of the kit's key-value ledger
// (test/fixtures/kv-ledger.ts) or conversation store (test/conversation-fixtures/kv-conversation-store.ts)
// with the WHOLE level, and prints which checks failed each (a mutant the level certifies is a hole
// in the oracle). It asserts nothing: the planted-bug tests are the gate.
//
//   node --import tsx scripts/round-survey.ts ledger control,leaseLiveAtExpiry,claimIdFoldsCase [--out FILE]
//   node --import tsx scripts/round-survey.ts conversation control,grantIdFoldsCase,reopenWindowOnProcessClock
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { conversationStoreChecks, ledgerChecks, runChecks } from "../src/index.js";
import { kvSubject } from "../test/fixtures/kv-ledger.js";
import { kvConversationSubject } from "../test/conversation-fixtures/kv-conversation-store.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { out: { type: "string" }, runs: { type: "string", default: "100" }, seed: { type: "string", default: "20261129" } },
});
const [level, list] = positionals;
if ((level !== "ledger" && level !== "conversation") || list === undefined) {
  process.stderr.write("usage: round-survey.ts ledger|conversation bug[,bug...] [--out FILE] [--runs N] [--seed S]\n");
  process.exit(2);
}
const runs = Number(values.runs);
const seed = Number(values.seed);
const out: Record<string, { conforms: boolean; failing: string[] }> = {};
for (const bug of list.split(",").filter(Boolean)) {
  const planted = bug === "control" ? {} : { [bug]: true };
  const report =
    level === "ledger"
      ? await runChecks(ledgerChecks(kvSubject(`kv-${bug}`, planted), { runs, seed }), { subject: bug, seed, runs })
      : await runChecks(conversationStoreChecks(kvConversationSubject(`kv-${bug}`, planted), { runs, seed }), { subject: bug, seed, runs, levels: ["conversation"] });
  const failing = report.checks.filter((c) => c.status === "fail").map((c) => `${c.rule} ${c.name.slice(0, 100)} :: ${String(c.error ?? "").slice(0, 200).replace(/\n/g, " ")}`);
  out[bug] = { conforms: report.conforms, failing };
  process.stderr.write(`${bug}: conforms=${report.conforms}\n${failing.map((f) => `   ${f}\n`).join("")}`);
  if (values.out !== undefined) writeFileSync(values.out, JSON.stringify(out, null, 2));
}
