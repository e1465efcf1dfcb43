import { MemoryConversationStore } from "@dispatch-once/core";
import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";

/**
 * Outside-store trial (2026-12-05): a team plugged its MariaDB store in through `conversationStore`
 * and every case left its connection pool open (the kit never closed the stores it made): 200 runs
 * opened 412 pools. Each case now closes its conversation stores once the oracle has read them.
 */
describe("the end-to-end level closes the conversation stores it makes", () => {
  it("every store a case made is closed once, after the case", async () => {
    const made: { closed: number }[] = [];
    await runEndToEnd(memoryLedgerSubject(), {
      runs: 3,
      seed: 20261205,
      conversationStore: ({ now }) => {
        const entry = { closed: 0 };
        made.push(entry);
        const store = new MemoryConversationStore({ now });
        const close = store.close.bind(store);
        store.close = async () => {
          entry.closed++;
          await close();
        };
        return store;
      },
    });
    expect(made.length).toBeGreaterThanOrEqual(3);
    expect(made.map((m) => m.closed)).toEqual(made.map(() => 1));
  }, 120_000);
});
