// One OS process of the multi-process race (test/race.test.ts). It claims every key of the
// list in its own shuffled order, several claims in flight at once; whenever it wins a key
// it appends to the run log table (the stand-in for the tool's side effect) and completes
// the key. Prints one JSON line: which keys it won, and how.
//
//   node --import tsx test/race-worker.ts <schema> <keys file> <worker id> [same|shuffled]
// (race.test.ts runs a copy compiled to JavaScript: compiledEntry, in @dispatch-once/test-processes)
// "same": every process walks the keys in the same order, so they collide on every key at
// once (the hardest case for a takeover); "shuffled" (default): each in its own order.
// Writes "ready" once connected, then waits for "go" on stdin so every process starts together.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import pg from "pg";
import { PostgresLedger } from "../src/index.js";

const [schema, keysFile, workerId, orderMode = "shuffled"] = process.argv.slice(2);
if (schema === undefined || keysFile === undefined || workerId === undefined) throw new Error("usage: race-worker <schema> <keys file> <worker id>");
const keys: { key: string; effect: "keyed_write" | "unkeyed_write" }[] = JSON.parse(readFileSync(keysFile, "utf8"));

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test", max: 3 });
const ledger = new PostgresLedger({ pool, schema });
// Warm every connection so the start is a real race, not a connect race.
await Promise.all([1, 2, 3].map(() => pool.query("SELECT 1")));

// Deterministic per-worker shuffle: processes walk the keys in different orders.
let seed = Number(workerId) * 7919 + 17;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const order = [...keys];
for (let i = order.length - 1; orderMode === "shuffled" && i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [order[i], order[j]] = [order[j]!, order[i]!];
}

process.stdout.write("ready\n");
await new Promise<void>((resolve) => {
  const lines = createInterface({ input: process.stdin });
  lines.on("line", (line) => {
    if (line.trim() === "go") {
      lines.close();
      process.stdin.destroy(); // an open stdin would keep this process alive after its work
      resolve();
    }
  });
});

const won: { key: string; fence: number; takeover: boolean }[] = [];
const existing: Record<string, number> = {};
let next = 0;
async function lane(): Promise<void> {
  while (next < order.length) {
    const { key, effect } = order[next++]!;
    const claim = await ledger.claim({
      key,
      toolName: "send_payment",
      effect,
      owner: `worker-${workerId}`,
      leaseMs: 60_000,
      request: `{"key":"${key}","worker":${Number(workerId)}}`,
    });
    if (claim.outcome === "claimed") {
      // The tool runs with the request the claim returned: the stored one (LEDGER-21).
      await pool.query(`INSERT INTO "${schema}".run_log (key, worker, fence, request) VALUES ($1, $2, $3, $4)`, [
        key,
        workerId,
        claim.fence,
        claim.request,
      ]);
      await ledger.complete(key, claim.fence, JSON.stringify({ ranBy: Number(workerId), fence: claim.fence }));
      won.push({ key, fence: claim.fence, takeover: claim.takeover });
    } else {
      existing[claim.row.state] = (existing[claim.row.state] ?? 0) + 1;
    }
  }
}
await Promise.all([lane(), lane(), lane()]);
process.stdout.write(`${JSON.stringify({ worker: Number(workerId), won, existing })}\n`);
await ledger.close();
await pool.end();
