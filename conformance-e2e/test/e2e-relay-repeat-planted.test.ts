import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";
import { controlOverSameRuns, noWholeRepeat } from "./splice-plants.js";

/**
 * A relay that renumbers what it re-sends delivers a completed call again, whole (its id, name and
 * arguments), at the next free position of the same response, which then finishes (scenario.ts
 * SplicePlan `repeat`, the mocks' `repeat_call` fault). STREAM-10 makes the stream side fail the
 * stream at the repeat's completing event and never dispatch it, on the Messages API and the
 * Responses API. Planted out (test/splice-plants.ts `noWholeRepeat`: no call is taken for a repeat),
 * the call runs again under the next ordinal: one ask, two payments. Here a seed whose first run
 * repeats a payment on its first attempt; the control runs the real runner over the same scenarios.
 */
const SEED = 73;
const RUNS = 3;
const SEARCH_BUDGET_MS = 120_000;

describe.each(RUNNER_PROVIDERS)("a relay's repeat of a completed call: the end-to-end level rejects a stream side without STREAM-10's whole-repeat check (provider %s)", (provider) => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`STREAM-10 the plant pays the repeated call again under the next ordinal; the real runner passes the same scenarios (${name})`, async () => {
      const error = await runEndToEnd(memory, { deploys: false, provider, runs: RUNS, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs, runner: noWholeRepeat }).catch((e: unknown) => e);
      const message = expectReadable(error, SEED);
      // The call delivered again, dispatched as a call of its own: paid twice (CONF-2, TURN-4).
      expect(message).toMatch(/breaks CONF-2\): payment .* performed \d+ times for one intent/);
      expect(message).toMatch(/relay +re-sends call \d of request 1 of "[^"]+" whole \(its id, name and arguments\) at the next free position, then lets the response finish \(STREAM-10\)/);
      if (shrinkTimeLimitMs === 0) expect(message).toContain(`after 1 runs`);
      // The turn committed with the call twice is named under the rule whose check was planted out (STREAM-10's
      // whole repeat), not under STREAM-8's second response: its author is sent to the right check (blind round S, S36).
      expect(message).toMatch(/\n {2}STREAM-10: conv-\d+: turn \d+ \(message [^)]*\) committed the calls \[[^\n]*\(its call \d delivered again whole by a relay, at another position\)/);


      // The control: the real runner over the same scenarios (the runs up to the failing one) passes, and meets the repeat.
      const seen = await controlOverSameRuns(provider, SEED, error, message);
      expect(seen.relay_repeats).toBeGreaterThan(0);
    }, 600_000);
  }
});
