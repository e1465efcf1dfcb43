// The checks blind round J added or sharpened, run against the real adapters' conformance subjects
// (no false positive): node --import tsx conformance/scripts/blind-j-real.ts [ledger|store]
import type { LedgerSubject, ConversationStoreSubject } from "../src/index.js";

// KIT=<path to a kit's src/index.ts> times another version of the kit (the one before this round) on the same subjects.
const { conversationStoreChecks, ledgerChecks, runChecks } = (await import(process.env.KIT ?? "../src/index.js")) as typeof import("../src/index.js");

const LEDGER_CHECKS = [
  /^olderThanMs counts a finished row from when it finished/,
  /^olderThanMs keeps only rows whose last transition/,
  /^resolving an expired claim bumps the fence/,
  /^the creating claim stores conversationId and turnIndex/,
  /^an owner that renews its expired lease/,
  /^an owner that renews after its lease ran out/,
];
const STORE_CHECKS = [
  /^a commit under a stale fence is refused/,
  /^a bound message shows boundAt/,
  /^listFailedTurns\(\{ olderThanMs \}\) counts on the store's clock/,
  /^a re-send with reopenWithinMs reopens a failed message only while/,
];
const SEED = 20261205;
const which = process.argv[2] ?? "all";

async function main() {
  let failed = 0;
  if (which !== "store") {
    const ledgers: LedgerSubject[] = [
      (await import("../../packages/ledger-sqlite/test/conformance-subject.mjs")).default,
      (await import("../../packages/ledger-postgres/test/conformance-subject.mjs")).default,
      (await import("../../packages/ledger-redis/test/conformance-subject.mjs")).default,
    ];
    for (const subject of ledgers) {
      const checks = ledgerChecks(subject, { runs: 30, seed: SEED }).filter((c) => LEDGER_CHECKS.some((r) => r.test(c.name)));
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: 30 });
      for (const c of report.checks) {
        console.log(`${subject.name} ${c.status} ${c.durationMs} ms ${c.rule} ${c.name.slice(0, 70)}${c.error ? ` | ${String(c.error).slice(0, 400)}` : ""}`);
        if (c.status === "fail") failed++;
      }
    }
  }
  if (which !== "ledger") {
    const stores: ConversationStoreSubject[] = [
      (await import("../../packages/conversation-sqlite/test/subject.js")).createSqliteConversationSubject(),
      (await import("../../packages/conversation-postgres/test/subject.js")).createPostgresConversationSubject(),
    ];
    for (const subject of stores) {
      const checks = conversationStoreChecks(subject, { runs: 30, seed: SEED }).filter((c) => STORE_CHECKS.some((r) => r.test(c.name)));
      const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: 30, levels: ["conversation"] });
      for (const c of report.checks) {
        console.log(`${subject.name} ${c.status} ${c.durationMs} ms ${c.rule} ${c.name.slice(0, 70)}${c.error ? ` | ${String(c.error).slice(0, 400)}` : ""}`);
        if (c.status === "fail") failed++;
      }
    }
  }
  console.log(`failed: ${failed}`);
  process.exit(failed === 0 ? 0 : 1);
}
await main();
