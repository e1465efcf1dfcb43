import { ToolError, type CallDispatcher, type Ledger, type ToolDefinition } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { DispatcherDefaults } from "../src/world.js";
import { expectReadable } from "./readable.js";
import { memory, observeClaims, realDispatcher, wrapTools } from "./audit-mutants.js";

/**
 * A downstream fault on the re-run of a call whose worker died after its effect (scenario.ts
 * `rerunFault`): the dead worker's payment happened, its row stayed in flight, and the take-over
 * runs the call again under the same key. The planted bug: a dispatcher that takes the take-over
 * run's "not performed" (a 5xx before the payments API accepted the retry) for the whole call's
 * and records a definite failure, ignoring that an earlier run acted (the real one, in
 * recordFailure: fence > 1, "an earlier run may have acted"). The runner then commits an error
 * for a payment that happened. Faults landed only on a call's first execution in the kit of
 * before, so a take-over's re-run never met one and the bug passed every run.
 */
const SEARCH_BUDGET_MS = 120_000;

/** The planted bug: the real dispatcher, with a taken-over claim's "not performed" told as a definite failure. */
function takeoverNotPerformedAsFailed(tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults): CallDispatcher {
  // Keys whose latest claim took over an expired one (an earlier holder's run may have acted).
  const takenOver = new Set<string>();
  const observed = observeClaims(ledger, (key, claim) => {
    if (claim.outcome === "claimed" && claim.takeover) takenOver.add(key);
    else if (claim.outcome === "claimed") takenOver.delete(key);
  });
  const wrapped = wrapTools(tools, async (tool, args, context: { idempotencyKey: string }) => {
    try {
      return await tool.run(args, context as never);
    } catch (error) {
      if (!takenOver.has(context.idempotencyKey) || !ToolError.isInstance(error) || error.disposition !== "not_performed") throw error;
      throw new ToolError(`${error.message} (taken for a definite failure)`, { disposition: "definite", code: "declined", cause: error });
    }
  });
  return realDispatcher(wrapped, observed, defaults);
}

describe.each(RUNNER_PROVIDERS)("a fault on the re-run after a death: the end-to-end oracle rejects a take-over that denies the dead worker's effect (provider %s)", (provider) => {
  it("RECORD-3 a take-over's 5xx before accept told as a definite failure commits an error for a payment the dead worker made", async () => {
    const error = await runEndToEnd(memory, { deploys: false,
      provider,
      runs: 300,
      seed: 5,
      timeLimitMs: SEARCH_BUDGET_MS,
      // No shrinking: the first failing scenario carries the verdict and replays by its seed and path.
      shrinkTimeLimitMs: 0,
      dispatcher: takeoverNotPerformedAsFailed,
    }).catch((e: unknown) => e);
    const message = expectReadable(error, 5);
    // The take-over's re-run met the planted 5xx, and the call was committed as an error while the
    // dead worker's payment stands (seed 5: after 12 runs, path "11", on both sides).
    expect(message).toMatch(/re-runs the dead call's key [0-9a-f]{8}: the payments API will answer fail_before_accept/);
    expect(message).toMatch(/breaks RECORD-3\): send_payment key [0-9a-f]{8} .* was committed as an error .* but its effect happened: payment_created/);
    expect(message).toMatch(/taken for a definite failure/);
  }, 600_000);

  it("the real dispatcher under the same hooks passes the same scenarios", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false,
      provider,
      // The mutant's search stops at run 12 (path "11"): the same first 13 scenarios, the failing one included.
      runs: 13,
      seed: 5,
      dispatcher: realDispatcher,
      onStats: (stats) => Object.assign(seen, stats),
    });
    // The runs reached what the mutant breaks: a fault on the re-run of a dead worker's call.
    expect(seen.rerun_faults ?? 0).toBeGreaterThan(0);
  }, 600_000);
});
