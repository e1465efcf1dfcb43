// Certify the store at the conversation level of @dispatch-once/conformance.
// node --import tsx test/certify.ts [--runs N] [--seed S] [--only TEXT]
import { conversationStoreChecks, runChecks, renderReportTable, renderFailures } from "@dispatch-once/conformance";
import { subject, dropAll } from "./subject.js";

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
const runs = Number(arg("--runs") ?? 100);
const seed = arg("--seed") === undefined ? 2026 : Number(arg("--seed"));
const only = arg("--only");
const storePath = arg("--store");
const Store = storePath === undefined ? undefined : ((await import(new URL(storePath, `file://${process.cwd()}/`).href)) as { MariaDbConversationStore: never }).MariaDbConversationStore;
let checks = conversationStoreChecks(Store === undefined ? subject() : subject(Store, `mutant ${storePath}`), { runs, seed });
if (only !== undefined) checks = checks.filter((c) => `${c.rule} ${c.name}`.includes(only));
const report = await runChecks(checks, { subject: "conversation-mariadb" });
console.log(renderReportTable(report));
console.log(renderFailures(report));
await dropAll();
process.exit(0);
