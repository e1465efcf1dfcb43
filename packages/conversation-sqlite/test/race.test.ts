// Two OS processes share one database file and race on the same conversations: on commitTurn
// of one turn under one live fence (TURN-5) and on acquireLease of an expired lease (TURN-10).
// Exactly one process wins each, asserted from the file itself.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteConversationStore } from "../src/index.js";
import { rawConnection, startWorker, tempDir } from "./helpers.js";

const CONVERSATIONS = 100;
const workerPath = fileURLToPath(new URL("./race-worker.ts", import.meta.url));

interface Report {
  pid: number;
  committed: string[];
  acquired: { conversationId: string; fence: number }[];
}

let dir: string;
let cleanup: () => void;
beforeAll(() => ({ dir, cleanup } = tempDir("race")));
afterAll(() => cleanup());

describe("two processes on one file", () => {
  it(`TURN-5 / TURN-10: of two processes committing one turn, and taking one expired lease, exactly one wins (${CONVERSATIONS} conversations each)`, async () => {
    const path = join(dir, "race.db");
    const setup = new SqliteConversationStore({ path });
    const commit: { conversationId: string; fence: number }[] = [];
    const acquire: string[] = [];
    for (let i = 0; i < CONVERSATIONS; i++) {
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
    }
    await setup.close();
    const raw = rawConnection(path);
    // The dead worker's leases lie in the past: both processes race to take each one over.
    raw.prepare(`UPDATE dispatch_once_conversations SET lease_expires_at = 0 WHERE conversation_id LIKE 'race-acquire-%'`).run();
    const planFile = join(dir, "plan.json");
    writeFileSync(planFile, JSON.stringify({ commit, acquire }));

    const workers = [0, 1].map((i) => startWorker<Report>(workerPath, [path, planFile, String(i)]));
    await Promise.all(workers.map((w) => w.ready));
    for (const w of workers) w.child.stdin.write("go\n");
    const reports = await Promise.all(workers.map((w) => w.report));

    // From the file: one turn per conversation, written by the process that says it won.
    const turns = raw.prepare(`SELECT conversation_id, turn_index, assistant FROM dispatch_once_turns`).all() as {
      conversation_id: string;
      turn_index: number;
      assistant: string;
    }[];
    expect(turns.length).toBe(2 * CONVERSATIONS);
    const byConversation = new Map(turns.map((t) => [t.conversation_id, t]));
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
      const lease = raw.prepare(`SELECT fence, lease_owner FROM dispatch_once_conversations WHERE conversation_id = ?`).get(conversationId);
      expect(lease).toEqual({ fence: 2, lease_owner: `pid-${winners[0]!.pid}` });
    }
    const states = raw.prepare(`SELECT state, count(*) AS n FROM dispatch_once_messages GROUP BY state`).all();
    expect(states).toEqual([{ state: "answered", n: 2 * CONVERSATIONS }]);
    console.log(`wins per process: ${reports.map((r) => `${r.pid}: ${r.committed.length} commits, ${r.acquired.length} leases`).join("; ")}`);
    raw.close();
  });
});
