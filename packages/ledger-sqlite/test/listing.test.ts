// SQLite specifics of listing, resolution and the audit trail (LIST-6, RESOLVE-7, migration);
// the behaviour every ledger shares is checked by the conformance kit (conformance.test.ts).
import Database from "better-sqlite3";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SqliteLedger, addConversationColumnsSql, auditTableSql, listIndexesSql, retiredTableSql, tableSql } from "../src/index.js";
import { manualClock, rawConnection, request, tempDir } from "./helpers.js";

const TABLE = "dispatch_once_ledger";
let dir: string;
let cleanup: () => void;
let path: string;
let clock: ReturnType<typeof manualClock>;
const opened: SqliteLedger[] = [];

function open(options: Partial<ConstructorParameters<typeof SqliteLedger>[0]> = {}): SqliteLedger {
  const l = new SqliteLedger({ path, now: clock.now, ...options });
  opened.push(l);
  return l;
}

beforeEach(() => {
  ({ dir, cleanup } = tempDir("listing"));
  path = join(dir, "ledger.db");
  clock = manualClock();
});

afterEach(async () => {
  for (const l of opened.splice(0)) await l.close();
  cleanup();
});

/** The query plan of the statement listRows() runs for a query, with the test clock's function replaced. */
function planOf(ledger: SqliteLedger, raw: Database.Database): string {
  const statements = (ledger as unknown as { listStatements: Map<string, unknown> }).listStatements;
  const sql = [...statements.keys()].at(-1)!;
  const params = (sql.match(/\?/g) ?? []).map((_, i) => (i === 0 ? "unknown" : 1));
  return (raw.prepare(`EXPLAIN QUERY PLAN ${sql.replace(/dispatch_once_now_\w+\(\)/g, "0")}`).all(...params) as { detail: string }[])
    .map((p) => p.detail)
    .join("\n");
}

describe("listing reads an index, never the whole table (LIST-6)", () => {
  it("LIST-6 by state, by tool and by conversation: a SEARCH of the listing index, no SCAN and no sort, with 50 000 other rows", async () => {
    const ledger = open();
    const raw = rawConnection(path);
    raw.exec("BEGIN");
    const insert = raw.prepare(
      `INSERT INTO "${TABLE}" (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, result, request, conversation_id)
       VALUES (?, 1, 'completed', 'send_payment', 'keyed_write', 1, ?, ?, 9e15, '"ok"', '{}', ?)`,
    );
    for (let i = 0; i < 50_000; i++) insert.run(`done-${i}`, 1_000 + i, 2_000 + i, `conv-${i % 500}`);
    raw.exec("COMMIT");
    raw.exec("ANALYZE");
    for (const [query, index] of [
      [{ state: "unknown" as const }, `${TABLE}_by_state`],
      [{ toolName: "send_sms" }, `${TABLE}_by_tool`],
      [{ conversationId: "conv-7" }, `${TABLE}_by_conversation`],
    ] as const) {
      await ledger.listRows(query);
      const plan = planOf(ledger, raw);
      expect(plan, JSON.stringify(query)).toMatch(new RegExp(`SEARCH ${TABLE} USING INDEX ${index}`));
      expect(plan, JSON.stringify(query)).not.toMatch(/SCAN|TEMP B-TREE/);
    }
    const page = await ledger.listRows({ conversationId: "conv-7", limit: 1000 });
    expect(page.rows).toHaveLength(100);
    expect(page.rows[0]).toMatchObject({ key: "done-7", conversationId: "conv-7" });
    raw.close();
  });
});

describe("migration of a table without the conversation columns or the audit table", () => {
  /** The table as the release before issue 15 created it. */
  const OLD = (table: string) =>
    tableSql(table).replace(/,\n\s*conversation_id\s+TEXT,\n\s*turn_index\s+INTEGER/, "") +
    `CREATE INDEX IF NOT EXISTS "${table}_in_flight" ON "${table}" (lease_expires_at) WHERE state = 'in_flight';`;

  it("migrate on open adds the columns, the listing indexes and the audit table; old rows list without a conversation", async () => {
    const raw = rawConnection(path);
    expect(OLD("old")).not.toContain("conversation_id");
    raw.exec(OLD("old"));
    raw
      .prepare(
        `INSERT INTO old (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, reason, request)
         VALUES ('legacy', 1, 'unknown', 'send_sms', 'unkeyed_write', 1, ?, ?, 9e15, 'lease_expired', '{}')`,
      )
      .run(clock.now(), clock.now());
    const ledger = open({ table: "old" });
    open({ table: "old" }).migrate(); // idempotent
    const names = raw.prepare("SELECT name FROM sqlite_master WHERE name LIKE 'old%' ORDER BY name").pluck().all();
    expect(names).toEqual(["old", "old_audit", "old_audit_by_key", "old_by_conversation", "old_by_state", "old_by_tool", "old_in_flight", "old_retired", "old_retired_by_until"]);
    const listed = await ledger.listRows({ state: "unknown" });
    expect(listed.rows).toHaveLength(1);
    expect(listed.rows[0]).not.toHaveProperty("conversationId");
    const resolved = await ledger.resolve({ key: "legacy", resolution: { outcome: "not_performed" }, actor: "ops", reason: "checked the SMS gateway" });
    expect(resolved).toMatchObject({ state: "released", fence: 2 });
    expect(await ledger.auditTrail("legacy")).toMatchObject([{ action: "resolved", actor: "ops", fromState: "unknown", toState: "released", fence: 2 }]);
    await ledger.claim({ ...request("new"), conversationId: "conv-a", turnIndex: 2 });
    expect(await ledger.lookup("new")).toMatchObject({ conversationId: "conv-a", turnIndex: 2 });
    raw.close();
  });

  it("with migrate: false a table without the columns is refused at open, naming addConversationColumnsSql(), which (with the indexes and audit table) is the fix", () => {
    const raw = rawConnection(path);
    raw.exec(OLD("old"));
    expect(() => open({ table: "old", migrate: false })).toThrow(/addConversationColumnsSql\("old"\)/);
    raw.exec(addConversationColumnsSql("old") + listIndexesSql("old") + auditTableSql("old") + retiredTableSql("old"));
    expect(open({ table: "old", migrate: false }).table).toBe("old");
    raw.close();
  });
});

describe("sweep takes a row's audit trail with it (RESOLVE-7)", () => {
  it("RESOLVE-7 the audit entries of a swept row are deleted with it, those of a kept row stay", async () => {
    const ledger = open({ retentionMs: 1_000 });
    for (const key of ["a", "b"]) {
      const claimed = await ledger.claim({ ...request(key), effect: "unkeyed_write" });
      if (claimed.outcome !== "claimed") throw new Error("not claimed");
      await ledger.markUnknown(key, claimed.fence, "tool_error");
      if (key === "a") clock.advance(5_000);
    }
    expect(await ledger.sweep()).toBe(1);
    expect(await ledger.auditTrail("a")).toEqual([]);
    expect(await ledger.auditTrail("b")).toHaveLength(1);
  });
});
