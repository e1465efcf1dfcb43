// Survey of blind round K: the whole ledger or conversation level against every mutant of the
// REAL adapters (packages/*/test/blind-k/mutants.ts), each bundled from its patched source by
// mutatedEntry, with its own PG schema, Redis prefix or SQLite file (tag blindk).
//   node --import tsx conformance/scripts/blind-k-survey.ts [adapter|all] [mutant id|none]
// KIT=<path to a kit's src/index.ts> runs another version of the kit (the one before this round).
import { mutatedEntry } from "../../tests/processes/index.js";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { ConversationStoreSubject, LedgerSubject } from "../src/index.js";

const { conversationStoreChecks, ledgerChecks, runChecks } = (await import(process.env.KIT ?? "../src/index.js")) as typeof import("../src/index.js");

const SEED = Number(process.env.SEED ?? 20261205);
const RUNS = Number(process.env.RUNS ?? 50);
const which = process.argv[2] ?? "all";
const only = process.argv[3];
// CHECK=<regexp> runs only the checks whose name matches (the round's own checks, against the real adapters: CHECK=. with mutant id none).
const onlyChecks = process.env.CHECK === undefined ? undefined : new RegExp(process.env.CHECK);
const packages = join(import.meta.dirname, "..", "..", "packages");

interface Mutant {
  id: string;
  rule: string;
  patches: { file: string; from: string; to: string }[];
}

type Subject = { kind: "ledger"; subject: LedgerSubject } | { kind: "store"; subject: ConversationStoreSubject };

const ADAPTERS: Record<string, { className: string; subject: (cls: unknown, name: string) => Promise<Subject> }> = {
  "ledger-sqlite": {
    className: "SqliteLedger",
    subject: async (cls, name) => ({ kind: "ledger", subject: (await import("../../packages/ledger-sqlite/test/subject.js")).createSqliteSubject(cls as never, name) }),
  },
  "ledger-postgres": {
    className: "PostgresLedger",
    subject: async (cls, name) => ({ kind: "ledger", subject: (await import("../../packages/ledger-postgres/test/subject.js")).createPostgresSubject(cls as never, name, "blindk") }),
  },
  "ledger-redis": {
    className: "RedisLedger",
    subject: async (cls, name) => ({ kind: "ledger", subject: (await import("../../packages/ledger-redis/test/subject.js")).createRedisSubject(cls as never, name, "blindk") }),
  },
  "conversation-sqlite": {
    className: "SqliteConversationStore",
    subject: async (cls, name) => ({ kind: "store", subject: (await import("../../packages/conversation-sqlite/test/subject.js")).createSqliteConversationSubject(name, cls as never) }),
  },
  "conversation-postgres": {
    className: "PostgresConversationStore",
    subject: async (cls, name) => ({
      kind: "store",
      subject: (await import("../../packages/conversation-postgres/test/subject.js")).createPostgresConversationSubject(name, cls as never, "blindk"),
    }),
  },
};

async function main() {
  for (const [adapter, { className, subject: make }] of Object.entries(ADAPTERS)) {
    if (which !== "all" && which !== adapter) continue;
    const { MUTANTS } = (await import(`../../packages/${adapter}/test/blind-k/mutants.js`)) as { MUTANTS: Mutant[] };
    for (const mutant of [undefined, ...MUTANTS]) {
      if (only !== undefined && (mutant?.id ?? "none") !== only) continue;
      const entry = join(packages, adapter, "src", "index.ts");
      const path = await mutatedEntry(entry, mutant?.id ?? `${adapter}-none`, mutant?.patches ?? []);
      const cls = ((await import(pathToFileURL(path).href)) as Record<string, unknown>)[className];
      const s = await make(cls, `${adapter}:${mutant?.id ?? "none"}`);
      const t0 = Date.now();
      const picked = <T extends { name: string }>(checks: T[]): T[] => checks.filter((c) => onlyChecks === undefined || onlyChecks.test(c.name));
      const report =
        s.kind === "ledger"
          ? await runChecks(picked(ledgerChecks(s.subject, { runs: RUNS, seed: SEED })), { subject: s.subject.name, seed: SEED, runs: RUNS })
          : await runChecks(picked(conversationStoreChecks(s.subject, { runs: RUNS, seed: SEED })), { subject: s.subject.name, seed: SEED, runs: RUNS, levels: ["conversation"] });
      const failing = report.checks.filter((c) => c.status === "fail");
      const ruleCaught = mutant !== undefined && failing.some((c) => c.rule === mutant.rule);
      const verdict = mutant === undefined ? (failing.length === 0 ? "clean" : "FALSE POSITIVE") : ruleCaught ? "caught by its rule" : failing.length > 0 ? "caught only by another rule" : "ESCAPED";
      console.log(`${adapter} ${mutant?.id ?? "none"} (${mutant?.rule ?? "-"}): ${verdict}, ${report.checks.length} checks, ${Date.now() - t0} ms`);
      for (const c of failing) console.log(`   FAIL ${c.rule} | ${c.name} | ${String(c.error).slice(0, 300).replace(/\n/g, " ")}`);
    }
  }
  process.exit(0);
}
await main();
