import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";

/*
 * A case found by a CI-scale run (seed 1394139834, first on the Redis ledger, then on every
 * ledger): message 1 of conv-1 failed twice before any call (re-sent each time), then its holder
 * paid and died, and the re-send that took it over paid and died as well. Its three re-sends were
 * used up, so nobody sent it again: it stayed in progress, and the payment of the first holder
 * was told nowhere. The kit's one later send under its id carried other content, which the
 * runner refuses (TURN-20) without resuming anything. A queue redelivers a dead worker's message
 * whatever came before it: the kit now re-sends once more after every death. Replayed on the
 * memory ledger, one case.
 */
describe("the kit redelivers a message whose holder died, whatever re-sends came before", () => {
  it("RECORD-7 a message whose holders both died after its re-sends for retryable failures is taken over and its payments told", async () => {
    const result = await runEndToEnd(memory, { deploys: false,
      provider: "anthropic",
      seed: 1394139834,
      path: "149:4:0:0:0:0:0:0:0:0:0:0:0:135:2:2:6:6:6:6:6:6:6:6:6:6:6:6:7:6:7:7:7:7:7:7",
    }).catch((e: unknown) => e);
    expect(result instanceof Error ? result.message : "conforms").toBe("conforms");
  }, 120_000);
});
