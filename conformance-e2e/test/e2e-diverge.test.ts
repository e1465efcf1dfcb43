import type { Ledger } from "@dispatch-once/core";
import type { LedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";

/**
 * Re-runs the model answers differently (scenario.ts rerunDivergence) on a ledger that does not
 * list rows: the committed turn's record of a resumed turn then names no row (RECORD-8 says so,
 * `listed: false`), and what an earlier attempt of a live worker made and the committed turn
 * does not answer must be in that worker's own records. Found here, in the runner: a holder
 * stalled past its lease whose attempt 1 made an invoice and was cut, and whose attempt 2 (the
 * model answering without the call) lost the commit to the take-over, recorded attempt 2's calls
 * only: the invoice was in no record (seed 777, path "23", both stream sides; RECORD-7). The
 * superseded attempt's record now lists every attempt of the turn
 * (packages/runner/test/superseded-earlier-attempts.test.ts).
 */

/** The reference ledger, declaring no listing (capabilities.supports.listRows false). */
function unlisted(ledger: Ledger): Ledger {
  const view = Object.create(ledger) as Ledger;
  Object.defineProperty(view, "capabilities", { value: { ...ledger.capabilities, supports: { ...ledger.capabilities.supports, listRows: false } } });
  return view;
}

const unlistedMemory: LedgerSubject = {
  ...memory,
  async create(options) {
    const fixture = await memory.create(options);
    return { ...fixture, ledger: unlisted(fixture.ledger), reopen: async () => unlisted(await fixture.reopen()) };
  },
};

const runs = Number(process.env.CONFORMANCE_E2E_DIVERGE_RUNS ?? 60);

describe.each(RUNNER_PROVIDERS)("re-runs the model answers differently, on a ledger that does not list rows (provider %s)", (provider) => {
  it(`RECORD-7 TURN-13 every effect an earlier attempt made and the committed turn does not answer is in a record, over ${runs} runs`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(unlistedMemory, { deploys: false, provider, runs, seed: 777, onStats: (s) => Object.assign(seen, s) });
    expect(seen.divergent_reruns ?? 0).toBeGreaterThan(0);
    expect(seen.omitted_after_effect ?? 0).toBeGreaterThan(0);
  }, 900_000);
});
