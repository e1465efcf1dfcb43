// One OS process of the multi-process race: claims every key (in its own random order) as
// soon as the parent says "go"; for each key it wins it "runs" the tool (RPUSH to the run log)
// and completes the row. Prints a JSON summary on stdout.
import { createInterface } from "node:readline";
import { Redis } from "ioredis";
import { RedisLedger } from "../src/index.js";

const [prefix, keyCount, workerId] = process.argv.slice(2) as [string, string, string];
const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const ledger = new RedisLedger({ url, prefix });
const log = new Redis(url);
const keys = Array.from({ length: Number(keyCount) }, (_, i) => `race-${i}`);
for (let i = keys.length - 1; i > 0; i--) {
  const j = Math.floor(Math.random() * (i + 1));
  [keys[i], keys[j]] = [keys[j]!, keys[i]!];
}

await log.ping();
await ledger.lookup("warm-up");
process.stdout.write("ready\n");
const lines = createInterface({ input: process.stdin });
for await (const line of lines) if (line === "go") break;
lines.close();
process.stdin.destroy(); // or the open stdin keeps this process alive

const won: string[] = [];
const seen: string[] = [];
await Promise.all(
  [0, 1, 2, 3].map(async (lane) => {
    for (let i = lane; i < keys.length; i += 4) {
      const key = keys[i]!;
      const claim = await ledger.claim({ key, toolName: "send_payment", effect: "unkeyed_write", owner: `worker-${workerId}`, leaseMs: 60_000, request: JSON.stringify({ key }) });
      if (claim.outcome === "claimed") {
        won.push(key);
        await log.rpush(`${prefix}:runs`, `${key}|${workerId}|${claim.fence}`); // the side effect
        await ledger.complete(key, claim.fence, JSON.stringify({ worker: workerId, key }));
      } else {
        seen.push(key);
      }
    }
  }),
);
process.stdout.write(`${JSON.stringify({ workerId, won, seen: seen.length })}\n`);
await ledger.close();
await log.quit();
