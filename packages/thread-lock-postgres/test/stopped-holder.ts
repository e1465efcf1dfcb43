// A holder in a process of its own, which the test SIGSTOPs while it holds its thread: once resumed it
// writes through held.client and held.pool and reports what each write did.
import { setTimeout as sleep } from "node:timers/promises";
import { PostgresThreadLocks } from "../src/index.js";

const [url, threadId, table, applicationName, namespace] = process.argv.slice(2) as [string, string, string, string, string];
const locks = new PostgresThreadLocks({ connectionString: url, applicationName, namespace, leaseMs: 1_000, waitMs: 5_000 });
await locks.withThread(threadId, async ({ client, pool, signal }) => {
  process.stdout.write("held\n");
  // The test stops this process within a few milliseconds; this timer fires as soon as it resumes,
  // before the process has read that the server closed its session.
  await sleep(500);
  const outcomes: string[] = [];
  await client.query(`INSERT INTO ${table} VALUES ($1, 'stopped-client')`, [threadId]).then(
    () => outcomes.push("client landed"),
    () => outcomes.push("client failed"),
  );
  await pool.query(`INSERT INTO ${table} VALUES ($1, 'stopped-pool')`, [threadId]).then(
    () => outcomes.push("pool landed"),
    () => outcomes.push("pool failed"),
  );
  process.stdout.write(`${JSON.stringify({ outcomes, aborted: signal.aborted })}\n`);
});
