// One racing process (spawned by race.test.ts, compiled by compiledEntry): waits for "go" on
// stdin, then claims every key in its own order. A winner "runs" the tool by appending to
// the run log table in the same file, then completes; a loser does nothing.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { once } from "node:events";
import { SqliteLedger } from "../../src/index.js";

const [path, table, keysFile, orderArg] = process.argv.slice(2) as [string, string, string, string];
const keys = JSON.parse(readFileSync(keysFile, "utf8")) as string[];
const offset = Number(orderArg);
// Start at a different point (odd offsets walk backwards) so processes meet on the same keys.
const rotated = [...keys.slice(offset % keys.length), ...keys.slice(0, offset % keys.length)];
const order = offset % 2 === 1 ? rotated.reverse() : rotated;

const ledger = new SqliteLedger({ path, table, busyTimeoutMs: 60_000 });
const runLog = ledger.database.prepare(`INSERT INTO "${table}_runs" (key, pid, fence, request) VALUES (?, ?, ?, ?)`);
const owner = `pid-${process.pid}`;

const lines = createInterface({ input: process.stdin });
process.stdout.write("ready\n");
const [first] = (await once(lines, "line")) as [string];
if (first !== "go") throw new Error(`expected go, got ${first}`);

const won: { key: string; fence: number; takeover: boolean }[] = [];
let existing = 0;
for (const key of order) {
  const effect = key.startsWith("unkeyed") ? "unkeyed_write" : "keyed_write";
  const claim = await ledger.claim({ key, toolName: "send_payment", effect, owner, leaseMs: 600_000, request: `{"key":"${key}","pid":${process.pid}}` });
  if (claim.outcome === "claimed") {
    // The tool runs with the request the claim returned: the stored one (LEDGER-21).
    runLog.run(key, process.pid, claim.fence, claim.request);
    // The tool takes a moment, so other processes meet this claim while it is in flight.
    await new Promise((resolve) => setTimeout(resolve, 1));
    await ledger.complete(key, claim.fence, JSON.stringify({ pid: process.pid, fence: claim.fence }));
    won.push({ key, fence: claim.fence, takeover: claim.takeover });
  } else {
    existing++;
  }
}
await ledger.close();
lines.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, won, existing })}\n`);
