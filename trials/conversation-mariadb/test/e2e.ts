// The end-to-end level with this store under the runner: conformance-e2e's `conversationStore`
// option (documented "for the kit's own tests") is the only way in. Its factory is synchronous and
// hands the store the case's clock `now` (the kit expires turn leases by moving it), so the store
// takes the difference from the process clock as an offset to its server clock.
// node --import tsx test/e2e.ts [--runs N] [--seed S] [--provider anthropic|openai]
import { randomUUID } from "node:crypto";
import { memoryLedgerSubject } from "@dispatch-once/conformance";
import { runEndToEnd } from "@dispatch-once/conformance-e2e";
import { MariaDbConversationStore } from "../src/store.js";
import { URI, dropAll } from "./subject.js";

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
const stores: MariaDbConversationStore[] = [];
let verdict = "PASS";
try {
  await runEndToEnd(memoryLedgerSubject(), {
    runs: Number(arg("--runs") ?? 100),
    seed: Number(arg("--seed") ?? 2026),
    provider: (arg("--provider") ?? "anthropic") as "anthropic",
    timeLimitMs: 900_000,
    shrinkTimeLimitMs: 60_000,
    conversationStore: ({ now }) => {
      // The kit never closes the stores it makes: keep few connections, closed when idle.
      const store = new MariaDbConversationStore({
        uri: URI,
        table: `outstore_${randomUUID().replaceAll("-", "").slice(0, 20)}`,
        clockOffsetMs: () => now() - Date.now(),
        connectionLimit: 4,
        maxIdle: 0,
      });
      stores.push(store);
      return store;
    },
    onStats: (s: Record<string, number>) => console.log(JSON.stringify(s)),
  } as Parameters<typeof runEndToEnd>[1]);
} catch (error) {
  verdict = "FAIL";
  console.log(String((error as Error).message ?? error));
} finally {
  for (const s of stores) await s.close().catch(() => undefined);
  await dropAll();
}
console.log(`e2e verdict: ${verdict} (${stores.length} stores)`);
process.exit(0);
