// Survey: the whole ledger and conversation levels against every blind-J subject (and the reference copies).
import { conversationStoreChecks, ledgerChecks, runChecks } from "../src/index.js";
import { BLIND_LEDGER_BUGS, type BlindLedgerBug } from "../test/fixtures/blind-j/blind-ledger.js";
import { BLIND_STORE_BUGS, type BlindStoreBug } from "../test/fixtures/blind-j/blind-conversation-store.js";
import { blindLedgerSubject, blindStoreSubject } from "../test/fixtures/blind-j/subjects.js";

const SEED = Number(process.env.SEED ?? 20261205);
const RUNS = Number(process.env.RUNS ?? 100);
const which = process.argv[2] ?? "all";
const only = process.argv[3];

async function main() {
  if (which === "all" || which === "ledger") {
    for (const bug of [undefined, ...Object.keys(BLIND_LEDGER_BUGS)] as (BlindLedgerBug | undefined)[]) {
      if (only && (bug ?? "none") !== only) continue;
      const subject = blindLedgerSubject(bug);
      const t0 = Date.now();
      const report = await runChecks(ledgerChecks(subject, { runs: RUNS, seed: SEED }), { subject: subject.name, seed: SEED, runs: RUNS });
      const failing = report.checks.filter((c) => c.status === "fail");
      console.log(`LEDGER ${bug ?? "none"} expects ${bug ? BLIND_LEDGER_BUGS[bug] : "-"} conforms=${report.conforms} ${Date.now() - t0}ms`);
      for (const c of failing) console.log(`   FAIL ${c.rule} | ${c.name} | ${String(c.error).slice(0, 300).replace(/\n/g, " ")}`);
    }
  }
  if (which === "all" || which === "store") {
    for (const bug of [undefined, ...Object.keys(BLIND_STORE_BUGS)] as (BlindStoreBug | undefined)[]) {
      if (only && (bug ?? "none") !== only) continue;
      const subject = blindStoreSubject(bug);
      const t0 = Date.now();
      const report = await runChecks(conversationStoreChecks(subject, { runs: RUNS, seed: SEED }), { subject: subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
      const failing = report.checks.filter((c) => c.status === "fail");
      console.log(`STORE ${bug ?? "none"} expects ${bug ? BLIND_STORE_BUGS[bug] : "-"} conforms=${report.conforms} ${Date.now() - t0}ms`);
      for (const c of failing) console.log(`   FAIL ${c.rule} | ${c.name} | ${String(c.error).slice(0, 300).replace(/\n/g, " ")}`);
    }
  }
}
await main();
