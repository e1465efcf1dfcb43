import type { Ledger } from "@dispatch-once/core";
import type { LedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";

/**
 * Two deaths around one released row (scenario.ts MessagePlan `releaseRerunDeath`). A keyed
 * write's payments response is lost (the payment happened); the dispatcher releases the row and
 * its worker dies right then. The re-send's worker re-claims the released row, runs the stored
 * request again under the same key and dies too; a third worker takes that claim over once it
 * lapsed, and must run the same stored request again (LEDGER-21).
 *
 * The planted bug: a ledger whose re-claim of a released row writes the re-claimant's request
 * into the row, while it answers the claim with the stored one (an upsert that sets every column
 * from the new claim and returns the old request). The re-claimant itself runs the right request;
 * only a later claim of the same row (a take-over of the re-claimant's lapsed claim) is handed the
 * re-worded one. The same scenarios with the second death left out (seed 777, 300 runs per side)
 * passed it on the Anthropic side, where the planted re-claim overwrote 195 rows' requests that
 * nobody read again; on the OpenAI side they reached it once, at run 110, and only by timing (a
 * 503's released row re-claimed by the worker's own retry, which died on another call before it
 * finished that one; the shrunk scenario passed on replay). The two deaths reach it at run 19.
 */
const SEARCH_BUDGET_MS = 240_000;
const SEED = 777;

/** How often the planted ledger overwrote a released row's request (the search reached what it breaks). */
const overwritten = { count: 0 };

/** The planted ledger: one row store per fixture, every worker's view over it. */
const reclaimOverwrites: LedgerSubject = {
  ...memory,
  async create(options) {
    const fixture = await memory.create(options);
    // The request each row now holds, where the planted re-claim wrote its own.
    const rowRequest = new Map<string, string>();
    const make = (inner: Ledger): Ledger => {
      const view = Object.create(inner) as Ledger;
      view.claim = async (request) => {
        const before = await inner.lookup(request.key);
        const claim = await inner.claim(request);
        if (claim.outcome !== "claimed") return claim;
        if (before === undefined) {
          rowRequest.delete(request.key);
          return claim;
        }
        const held = rowRequest.get(request.key) ?? claim.request;
        if (before.state === "released") {
          rowRequest.set(request.key, request.request);
          if (request.request !== held) overwritten.count++;
        }
        // A re-claim is answered with the old request (right for its own run); a take-over reads the row.
        return { ...claim, request: held };
      };
      return view;
    };
    return { ...fixture, ledger: make(fixture.ledger), reopen: async () => make(await fixture.reopen()) };
  },
};

function expectVerdict(message: string): void {
  // The first worker released its lost payment and died; the re-send's worker died on the re-run.
  expect(message).toMatch(/DIES after its dispatcher released the claim of key [0-9a-f]{8}, before it recorded anything/);
  expect(message).toMatch(/breaks LEDGER-21/);
  expect(message).toMatch(/(send|void)_payment key [0-9a-f]{8} ran with .* and later with .*: a re-run must send the stored request/);
}

describe.each(RUNNER_PROVIDERS)("two deaths around one released row: the end-to-end oracle rejects a ledger whose re-claim overwrites the stored request (provider %s)", (provider) => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`LEDGER-21 the take-over of a re-claimed released row is handed the re-claimant's re-worded request (${name})`, async () => {
      overwritten.count = 0;
      const error = await runEndToEnd(reclaimOverwrites, { deploys: false,
        provider,
        runs: 300,
        seed: SEED,
        timeLimitMs: SEARCH_BUDGET_MS,
        ...(shrinkTimeLimitMs !== undefined ? { shrinkTimeLimitMs } : {}),
      }).catch((e: unknown) => e);
      expect(overwritten.count).toBeGreaterThan(0);
      const message = expectReadable(error, SEED);
      expectVerdict(message);
      if (shrinkTimeLimitMs === undefined) expect(message).not.toMatch(/shrinking cut short/);
    }, 600_000);
  }
});
