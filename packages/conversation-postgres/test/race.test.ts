// Two OS processes, each with its own pool, race on the same conversations: on commitTurn of
// one turn under one live fence (TURN-5) and on acquireLease of an expired lease (TURN-10).
// Exactly one process wins each, asserted from the tables themselves.
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresConversationStore } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, startWorker, uniqueSchema } from "./helpers.js";

const CONVERSATIONS = 100;
const workerPath = fileURLToPath(new URL("./race-worker.ts", import.meta.url));

interface Report {
  pid: number;
  committed: string[];
  acquired: { conversationId: string; fence: number }[];
}

const schema = uniqueSchema("race");
const admin = adminPool();
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "conversation-postgres-race-"));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await dropSchema(admin, schema);
  await admin.end();
});

describe("two processes on one database", () => {
  it(`TURN-5 / TURN-10: of two processes committing one turn, and taking one expired lease, exactly one wins (${CONVERSATIONS} conversations each)`, async () => {
    const setup = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await setup.migrate();
    const commit: { conversationId: string; fence: number }[] = [];
    const acquire: string[] = [];
    await Promise.all(
      Array.from({ length: CONVERSATIONS }, async (_, i) => {
        const c = `race-commit-${i}`;
        await setup.appendUserMessage(c, { id: "m1", content: { role: "user", content: `pay ${i} €` } });
        const lease = await setup.acquireLease(c, "setup", 600_000);
        if (!lease.acquired) throw new Error("setup could not acquire");
        await setup.beginTurn(c, lease.fence);
        commit.push({ conversationId: c, fence: lease.fence });
        const a = `race-acquire-${i}`;
        await setup.appendUserMessage(a, { id: "m1", content: { role: "user", content: `pay ${i} €` } });
        await setup.acquireLease(a, "dead-worker", 600_000);
        acquire.push(a);
      }),
    );
    await setup.close();
    // The dead worker's leases lie in the past: both processes race to take each one over.
    await admin.query(`UPDATE "${schema}".dispatch_once_conversations SET lease_expires_at = 0 WHERE conversation_id LIKE 'race-acquire-%'`);
    commit.sort((a, b) => a.conversationId.localeCompare(b.conversationId));
    acquire.sort();
    const planFile = join(dir, "plan.json");
    writeFileSync(planFile, JSON.stringify({ commit, acquire }));

    const workers = [0, 1].map((i) => startWorker<Report>(workerPath, [DATABASE_URL, schema, planFile, String(i)]));
    await Promise.all(workers.map((w) => w.ready));
    for (const w of workers) w.child.stdin.write("go\n");
    const reports = await Promise.all(workers.map((w) => w.report));

    const { rows: turns } = await admin.query(`SELECT conversation_id, turn_index, assistant FROM "${schema}".dispatch_once_turns`);
    expect(turns.length).toBe(2 * CONVERSATIONS);
    const byConversation = new Map(turns.map((t: { conversation_id: string; assistant: string }) => [t.conversation_id, t]));
    expect(byConversation.size).toBe(2 * CONVERSATIONS);
    for (const { conversationId } of commit) {
      const winners = reports.filter((r) => r.committed.includes(conversationId));
      expect(winners.map((w) => w.pid), conversationId).toHaveLength(1);
      expect(JSON.parse(byConversation.get(conversationId)!.assistant)).toEqual({ role: "assistant", content: [{ type: "text", text: `answered by ${winners[0]!.pid}` }] });
    }
    for (const conversationId of acquire) {
      const winners = reports.flatMap((r) => r.acquired.filter((a) => a.conversationId === conversationId).map((a) => ({ pid: r.pid, fence: a.fence })));
      expect(winners, conversationId).toHaveLength(1);
      expect(winners[0]!.fence, conversationId).toBe(2);
      expect(JSON.parse(byConversation.get(conversationId)!.assistant)).toEqual({ by: winners[0]!.pid });
      const { rows } = await admin.query(`SELECT fence, lease_owner FROM "${schema}".dispatch_once_conversations WHERE conversation_id = $1`, [conversationId]);
      expect(rows).toEqual([{ fence: "2", lease_owner: `pid-${winners[0]!.pid}` }]);
    }
    const { rows: states } = await admin.query(`SELECT state, count(*)::int AS n FROM "${schema}".dispatch_once_messages GROUP BY state`);
    expect(states).toEqual([{ state: "answered", n: 2 * CONVERSATIONS }]);
    console.log(`wins per process: ${reports.map((r) => `${r.pid}: ${r.committed.length} commits, ${r.acquired.length} leases`).join("; ")}`);
  });
});
