import { MemoryLedger } from "@dispatch-once/core";
import { it } from "vitest";
import { runEndToEnd } from "../src/e2e/index.js";
it("prof", async () => {
  const memory = { name: "m", capabilities: { sharedAcrossProcesses: false, survivesRestart: false, corruption: false, unavailability: false },
    async create() { const ledger = new MemoryLedger(); return { ledger, reopen: async () => ledger, raw: { read: async () => undefined, expireLease: async () => {}, expireRetention: async () => {} }, destroy: async () => {} }; } };
  await runEndToEnd(memory as never, { runs: 25, seed: 5, leaseMs: 60 });
}, 600000);
