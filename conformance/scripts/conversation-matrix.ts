// Renders the conversation-store compliance matrix (spec §10.2) from an actual run of the kit's
// conversation-store level over the in-memory, SQLite and PostgreSQL stores, and writes it into the
// spec between <!-- conversation-matrix:start --> and <!-- conversation-matrix:end --> (CONF-4).
//
//   node --import tsx conformance/scripts/conversation-matrix.ts [--runs 1000] [--seed 2026] [--stdout]
//
// Needs a built kit (conformance/dist) and DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { conversationStoreChecks, memoryConversationSubject, renderComplianceMatrix, runChecks, type Report } from "../dist/index.js";
import { createSqliteConversationSubject } from "../../packages/conversation-sqlite/test/subject.js";
import { createPostgresConversationSubject } from "../../packages/conversation-postgres/test/subject.js";

const START = "<!-- conversation-matrix:start -->";
const END = "<!-- conversation-matrix:end -->";
const here = dirname(fileURLToPath(import.meta.url));

const { values } = parseArgs({
  options: { runs: { type: "string", default: "1000" }, seed: { type: "string", default: "2026" }, stdout: { type: "boolean", default: false } },
});
const runs = Number(values.runs);
const seed = Number(values.seed);

const subjects = {
  memory: memoryConversationSubject(),
  sqlite: createSqliteConversationSubject(),
  postgres: createPostgresConversationSubject(),
};
const reports: Record<string, Report> = {};
for (const [name, subject] of Object.entries(subjects)) {
  // The model-based property's time grows with its runs (a networked store runs about one per
  // 0.1-0.3 s): the same limit the kit's test registration gives it, not the 60 s default, which
  // 1,000 runs on PostgreSQL overran on a slower host and reported as a failure.
  const checkTimeoutMs = Math.max(300_000, runs * 1_000);
  const report = await runChecks(conversationStoreChecks(subject, { runs, seed }), { subject: name, levels: ["conversation"], seed, runs, checkTimeoutMs });
  const failed = report.checks.filter((c) => c.status === "fail");
  process.stderr.write(`${name}: ${report.checks.length} checks, ${failed.length} failed, conforms=${report.conforms}\n`);
  for (const f of failed) process.stderr.write(`  FAIL ${f.rule} ${f.name}: ${f.error ?? ""}\n`);
  reports[name] = report;
}
const matrix = renderComplianceMatrix(reports);
if (values.stdout) {
  process.stdout.write(`${matrix}\n`);
} else {
  const spec = resolve(here, "../../spec/dispatch-once.md");
  const text = readFileSync(spec, "utf8");
  const at = text.indexOf(START);
  const end = text.indexOf(END);
  if (at < 0 || end < at) throw new Error(`${spec} has no ${START} … ${END} block`);
  writeFileSync(spec, `${text.slice(0, at + START.length)}\n${matrix}\n${text.slice(end)}`);
  process.stderr.write(`wrote the conversation-store matrix into ${spec}\n`);
}
process.exit(Object.values(reports).every((r) => r.conforms) ? 0 : 1);
