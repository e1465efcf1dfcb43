// One process of a fleet starting together on a NEW database file (spawned by open.test.ts,
// compiled by compiledEntry). It loads everything first, prints "ready", waits for "go" on stdin and
// only then opens the ledger, so every process's first open (journal mode, schema, statements)
// lands at the same moment. Then it claims every key once; a winner completes.
import { createInterface } from "node:readline";
import { once } from "node:events";
import { SqliteLedger } from "../../src/index.js";

const [path, table, keyCount] = process.argv.slice(2) as [string, string, string];
const keys = Array.from({ length: Number(keyCount) }, (_, i) => `k-${i}`);
const lines = createInterface({ input: process.stdin });
process.stdout.write("ready\n");
const [first] = (await once(lines, "line")) as [string];
if (first !== "go") throw new Error(`expected go, got ${first}`);

const started = performance.now();
let ledger: SqliteLedger;
try {
  // The default busy timeout (5 s) is the bound under test.
  ledger = new SqliteLedger({ path, table });
} catch (error) {
  const e = error as { code?: string; message?: string };
  process.stdout.write(`${JSON.stringify({ pid: process.pid, openError: { code: e.code, message: e.message } })}\n`);
  lines.close();
  process.exit(0);
}
const openMs = performance.now() - started;
const won: { key: string; fence: number }[] = [];
let existing = 0;
for (const key of keys) {
  const claim = await ledger.claim({ key, toolName: "send_payment", effect: "unkeyed_write", owner: `pid-${process.pid}`, leaseMs: 600_000, request: "{}" });
  if (claim.outcome === "claimed") {
    await ledger.complete(key, claim.fence, JSON.stringify({ pid: process.pid }));
    won.push({ key, fence: claim.fence });
  } else existing++;
}
const durability = ledger.capabilities.durability;
const journalMode = String(ledger.database.pragma("journal_mode", { simple: true }));
await ledger.close();
lines.close();
process.stdout.write(`${JSON.stringify({ pid: process.pid, openMs, won, existing, durability, journalMode })}\n`);
