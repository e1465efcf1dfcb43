import type { Ledger, ToolDefinition } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { DispatcherDefaults } from "../src/world.js";
import { FULL_SHRINK, expectReadable } from "./readable.js";
import { listingWithout, memory, realDispatcher } from "./audit-mutants.js";

/**
 * A released row a resumed turn's listing leaves out. A keyed write's lost payments response
 * (the payment happened) makes the dispatcher release its row for a re-run under the same key;
 * the worker then dies before it records anything (scenario.ts WorkerDeath `after_release`). The
 * take-over's re-run, which the model answers without that call (rerunDivergence), commits: only
 * the ledger's row, `released`, knows of the payment, and the resumed turn's record must name it
 * `may_have_happened` (RECORD-8: "may_have_happened for an in_flight, unknown or released row").
 * The planted bug: a listing that hides released rows (the real dispatcher over a ledger view
 * whose listRows pages leave them out): its record says `listed: true` and names nothing, and the
 * payment is told nowhere. The scenarios of before, where the worker that released a row always
 * lived to list the call in its own record, passed it 300 runs per side (22 rows hidden on the
 * Anthropic side, 21 on the OpenAI side, seed 777).
 */
const SEARCH_BUDGET_MS = 240_000;

/** How many released rows the planted listing hid (the search reached what it breaks). */
const hidden = { count: 0 };

/** The planted bug: the real dispatcher over a ledger view whose listings hide released rows. */
function releasedHidden(tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults) {
  return realDispatcher(tools, listingWithout(ledger, (row) => row.state === "released", hidden), defaults);
}

/**
 * Seed 4 stops at run 14 (path "13") on both sides, a typical seed: over seeds 1-24 at 30 runs the
 * search found the bug within 30 runs for 15 of 24, at a median of run 15. Seed 777, used before,
 * stopped at run 103, and the control then re-ran all 110 scenarios: about 85 s of CI per side.
 */
const SEED = 4;

function expectVerdict(message: string): void {
  // The worker's payments response was lost, its dispatcher released the row, and it died before
  // recording; the model answered the take-over's re-run without the call, which committed.
  expect(message).toMatch(/DIES after its dispatcher released the claim of key ([0-9a-f]{8}), before it recorded anything/);
  expect(message).toMatch(/answers a re-run of step 0 of .* \(its first response differed\)/);
  expect(message).toMatch(
    /breaks RECORD-8\): (RECORD-8: )?payment_(created|voided) \S+ \(seq \d+, key [0-9a-f]{8}\), made by \S+, which died before it could record it, \((send|void)_payment at turn \d+ of conv-\d\), is accounted for nowhere: turn \d+ committed \(message "[^"]+"\) without answering its key/,
  );
  // The dead worker's key is one its dispatcher released (a run can hold more than one release
  // death: a loaded CI run, shrinking off, reported the second one's).
  const released = [...message.matchAll(/DIES after its dispatcher released the claim of key ([0-9a-f]{8})/g)].map((m) => m[1]);
  const told = /breaks RECORD-8\): (?:RECORD-8: )?payment_\w+ \S+ \(seq \d+, key ([0-9a-f]{8})\)/.exec(message)?.[1];
  expect(released).toContain(told);
}

describe.each(RUNNER_PROVIDERS)("a released row: the end-to-end oracle rejects a resumed turn's listing that hides it (provider %s)", (provider) => {
  it("RECORD-8 the worker that released its lost payment dies, the take-over commits without the call, and its listing hides the released row (shrinking off); the real dispatcher passes that scenario and its record names the released row", async () => {
    hidden.count = 0;
    const error = await runEndToEnd(memory, { deploys: false,
      provider,
      runs: 300,
      seed: SEED,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: 0,
      dispatcher: releasedHidden,
    }).catch((e: unknown) => e);
    expect(hidden.count).toBeGreaterThan(0);
    const message = expectReadable(error, SEED);
    expectVerdict(message);
    // The control: the failing scenario, once, under the real dispatcher and the same hooks. It
    // passes, and its committed turn's record names the released row, so the verdict is the
    // planted listing's doing and not the scenario's.
    const cx = (error as ConformanceFailure).counterexample!;
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: cx.seed, path: cx.path, dispatcher: realDispatcher, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(seen.release_deaths ?? 0).toBeGreaterThan(0);
    expect(seen.omitted_dead_worker_released_row_told_by_committed_turn_record ?? 0).toBeGreaterThan(0);
  }, 600_000);

  // Fully shrunk only under CONFORMANCE_E2E_FULL_SHRINK=1 (readable.ts, SHRINKS): each shrink candidate
  // waits out lapsed leases, and on a loaded CI host the shrink outran its 240 s budget.
  if (FULL_SHRINK) it("RECORD-8 the same verdict, fully shrunk", async () => {
    const error = await runEndToEnd(memory, { deploys: false,
      provider,
      runs: 300,
      seed: SEED,
      timeLimitMs: SEARCH_BUDGET_MS,
      dispatcher: releasedHidden,
    }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).not.toMatch(/shrinking cut short/);
    expectVerdict(message);
  }, 600_000);
});
