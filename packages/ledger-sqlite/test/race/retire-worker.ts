// One side of the retire race (spawned by retire.test.ts, compiled by compiledEntry): waits for "go"
// on stdin, then either claims every key with that key's claim id (mode "claim": a late copy of a
// claim) or retires that claim id with release (mode "retire": its dispatcher giving up on it),
// and prints what each call answered. The retirer walks the keys backwards, so the two meet midway.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { once } from "node:events";
import { isDispatchOnceError } from "@dispatch-once/core";
import { SqliteLedger } from "../../src/index.js";

const [path, table, keysFile, mode] = process.argv.slice(2) as [string, string, string, "claim" | "retire"];
const keys = JSON.parse(readFileSync(keysFile, "utf8")) as string[];
const ledger = new SqliteLedger({ path, table, busyTimeoutMs: 60_000 });
const lines = createInterface({ input: process.stdin });
process.stdout.write("ready\n");
const [first] = (await once(lines, "line")) as [string];
if (first !== "go") throw new Error(`expected go, got ${first}`);

const answers: Record<string, string> = {};
for (const key of mode === "retire" ? [...keys].reverse() : keys) {
  // A pause between calls lets the other process take the write lock (SQLite's lock is not fair).
  await new Promise((resolve) => setTimeout(resolve, 2));
  const claimId = `race-claim-id-${key}`;
  if (mode === "retire") {
    answers[key] = (await ledger.retire(key, claimId, { release: true })).released ? "released" : "not_released";
    continue;
  }
  try {
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "unkeyed_write", owner: "late-copy", leaseMs: 600_000, request: "{}", claimId });
    answers[key] = claim.outcome === "claimed" ? `claimed:${claim.fence}` : `existing:${claim.row.state}`;
  } catch (error) {
    if (!isDispatchOnceError(error, "stale_claim")) throw error;
    answers[key] = "stale";
  }
}
await ledger.close();
lines.close();
process.stdout.write(`${JSON.stringify(answers)}\n`);
