// One racing process (spawned by race.test.ts): waits for "go", then, for every conversation of
// the plan in its own order, commits the prepared turn (set "commit", every process presents
// the same live fence) or takes the expired lease and, if it won, answers the message (set
// "acquire"). Prints what it won.
import { readFileSync } from "node:fs";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { SqliteConversationStore } from "../src/index.js";

interface Plan {
  commit: { conversationId: string; fence: number }[];
  acquire: string[];
}

const [path, planFile, orderArg] = process.argv.slice(2) as [string, string, string];
const plan = JSON.parse(readFileSync(planFile, "utf8")) as Plan;
// The second process walks backwards: the two meet on every conversation of the middle stretch,
// each winning some (walking the same way, the one that started first would win nearly all).
const reverse = Number(orderArg) % 2 === 1;
const store = new SqliteConversationStore({ path, busyTimeoutMs: 60_000 });
const lines = createInterface({ input: process.stdin });
process.stdout.write("ready\n");
const [first] = (await once(lines, "line")) as [string];
if (first !== "go") throw new Error(`expected go, got ${first}`);

const committed: string[] = [];
const acquired: { conversationId: string; fence: number }[] = [];
const commits = reverse ? [...plan.commit].reverse() : plan.commit;
const acquires = reverse ? [...plan.acquire].reverse() : plan.acquire;
for (let i = 0; i < Math.max(commits.length, acquires.length); i++) {
  const c = commits[i];
  if (c !== undefined) {
    const result = await store.commitTurn(c.conversationId, {
      fence: c.fence,
      messageId: "m1",
      turnIndex: 0,
      assistant: { role: "assistant", content: [{ type: "text", text: `answered by ${process.pid}` }] },
      stopReason: "end_turn",
      answers: true,
    });
    if (result.committed) committed.push(c.conversationId);
  }
  // A moment between conversations (as a real worker streams a turn): SQLite's busy handler
  // sleeps while it waits, so without a gap the first process would take every lock.
  await new Promise((resolve) => setTimeout(resolve, 1));
  const a = acquires[i];
  if (a !== undefined) {
    const lease = await store.acquireLease(a, `pid-${process.pid}`, 600_000);
    if (lease.acquired) {
      acquired.push({ conversationId: a, fence: lease.fence });
      const snapshot = await store.beginTurn(a, lease.fence);
      if (snapshot === undefined) throw new Error(`${a}: nothing to answer`);
      const { committed: ok } = await store.commitTurn(a, {
        fence: lease.fence,
        messageId: snapshot.message.id,
        turnIndex: snapshot.turnIndex,
        assistant: { by: process.pid },
        stopReason: "end_turn",
        answers: true,
      });
      if (!ok) throw new Error(`${a}: the lease winner could not commit`);
    }
  }
}
await store.close();
lines.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, committed, acquired })}\n`);
