import { it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
it("smoke", async () => {
  const seen: Record<string, number> = {};
  const t = Date.now();
  try {
    await runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", runs: Number(process.env.N ?? 10), seed: 1, timeLimitMs: 60_000, onStats: (s) => Object.assign(seen, s) });
  } finally {
    console.log(Date.now() - t, "ms", JSON.stringify(seen));
  }
}, 300_000);
