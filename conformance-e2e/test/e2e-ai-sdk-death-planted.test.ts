import { createOnceTools } from "@dispatch-once/ai-sdk";
import type { Ledger } from "@dispatch-once/core";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import type { ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";

/**
 * Deaths in a tool loop's step 2 on the AI SDK profile (ai-sdk-scenario.ts: `death` on a
 * message's follow-up call). The chat route's process dies on step 2's call, before the payments
 * API or after it accepted the payment, its claim left in flight; the client re-sends the same
 * messages (AISDK-6) or regenerates, and another process answers: its step 2 meets the dead
 * call's key, waits out the claim's lease and takes it over (the payments API answers the re-run
 * with the payment already made).
 *
 * The planted bug: a wrapper whose ledger settles a dead process's claim as a failure instead of
 * taking it over ("its process died, so the call failed"): the claim that would take over fails
 * the row, and the call is answered from it, `tool_failed` (effect no). The app keeps a tool-error
 * that says step 2's payment did not happen, while the dead process made it. The AI SDK side of
 * before had no deaths (no claim ever lapsed: a live claim is renewed, and a cut attempt's call
 * is waited for), so this wrapper passed it: 150 runs on seed 20261201.
 */
const SEARCH_BUDGET_MS = 180_000;
const SEED = 3;

/** The ledger under the planted wrapper: a take-over of an expired claim becomes a recorded failure. */
function failsDeadClaims(inner: Ledger): Ledger {
  const ledger = Object.create(inner) as Ledger;
  ledger.claim = async (request) => {
    const claim = await inner.claim(request);
    if (claim.outcome !== "claimed" || !claim.takeover) return claim;
    await inner.fail(request.key, claim.fence, { name: "ProcessGone", message: "the process that claimed this call died before it finished" });
    // Answered from the row it just failed, as any call that meets a failed row is.
    return inner.claim(request);
  };
  return ledger;
}

const planted: AiSdkAppOptions = {
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger: failsDeadClaims(ledger), dispatcher: o.dispatcher });
    return (request) => once.forTurn(request);
  },
};

/** The verdict on the dead process's payment, told as not made in the client's re-send or regenerate. */
const TOLD_NOT_MADE = /send_payment call \S+ of chat-\d "c\d message \d" was kept as an error that says the effect did not happen \(tool_failed \(effect no\): .*\) but it happened: payment_created/;

describe("the ai-sdk side with a process death in a tool loop's step 2", () => {
  // Fully shrunk only under CONFORMANCE_E2E_FULL_SHRINK=1 (readable.ts): its shrink took 35-120 s of CI.
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`EFFECT-6 a wrapper that settles the dead process's step-2 claim as failed tells the re-send the payment did not happen (${name}); the real wrapper passes the same scenario`, async () => {
      const error = await runEndToEnd(memory, {
        provider: "ai-sdk",
        runs: 200,
        seed: SEED,
        timeLimitMs: SEARCH_BUDGET_MS,
        ...(shrinkTimeLimitMs !== undefined ? { shrinkTimeLimitMs } : {}),
        aiSdk: planted,
      }).catch((e: unknown) => e);
      const message = expectReadable(error, SEED);
      expect(message).toMatch(/breaks EFFECT-6/);
      expect(message).toMatch(TOLD_NOT_MADE);
      // The scenario reached a death after the payment was accepted, and a take-over by the next process.
      expect(message).toMatch(/DIES after the payments API accepted send_payment key \S+, before the ledger completed/);
      const cx = (error as ConformanceFailure).counterexample!;
      if (shrinkTimeLimitMs === undefined) expect(message).not.toMatch(/shrinking cut short/);
      // The counterexample, once, with the real wrapper: a take-over that answers with the payment made.
      let stats: Record<string, number> = {};
      await runEndToEnd(memory, { provider: "ai-sdk", runs: 200, seed: cx.seed, path: cx.path, onStats: (s) => (stats = s) });
      expect(stats).toMatchObject({ property_cases: 1, replayed_passed: 1 });
      expect(stats.deaths_after_effect).toBeGreaterThan(0);
      expect(stats.takeovers).toBeGreaterThan(0);
    }, 300_000);
  }
});
