import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";

/**
 * TURN-23 in the oracle: a message with a deferred call (its first turn's re-runs answer without
 * a payment, made again in its next turn) that FAILS at its first turn has no next turn of its
 * own. The next message, bound at the failed index (TURN-12), takes that index and the one after
 * it; its own follow-up payment there is its own ask. The oracle counted the payments at both
 * indexes against the failed message's deferred call, and rejected the real runner (a fresh-clone
 * CI of 2026-12-06 on ledger-postgres, seed 284220673: "performed 2 times for message
 * \"conv-2:c2 message 0\" over its turns 0 and 1, which asked for it once"). The shrunk scenario,
 * replayed on the reference ledger, must pass.
 */
const PATH =
  "20:2:0:0:0:0:0:1:0:0:0:0:0:0:0:0:0:0:42:0:0:0:0:1:0:1:2:2:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:2:2:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1";

describe("CONF-2 TURN-23 a deferred call whose message failed at its first turn", () => {
  it("CONF-2 TURN-23 the next message's turns at and after the failed index are not the failed message's: its follow-up payment is its own ask (seed 284220673, the shrunk path)", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "anthropic", runs: 1, seed: 284220673, path: PATH, deploys: false, onStats: (s) => Object.assign(seen, s) });
    // The path still builds the case it was shrunk to (a scenario change would make it pass vacuously):
    // one deferred call, a failed turn, and the shrunk case replayed (not a fresh search).
    expect({ deferred: seen.deferred_calls, failed: seen.turns_failed, replayed: seen.replayed_passed }).toEqual({ deferred: 1, failed: 1, replayed: 1 });
  }, 120_000);
});
