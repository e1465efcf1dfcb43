import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";
import { controlOverSameRuns, noHeldItemName } from "./splice-plants.js";

/**
 * A proxy's splice without its start and without a lead (scenario.ts SplicePlan `headless_bare`):
 * the spliced response's first item lands on a held item of its own type (with thinking on, on
 * the Anthropic side, its thinking block on the held thinking block and its first call on the call
 * that ran; on the OpenAI side its first call on the first call), so neither STREAM-8 (no second
 * start) nor STREAM-17 (no other type) sees it: only STREAM-10's check of what the item names
 * does. Planted out (test/splice-plants.ts `noHeldItemName`: each such item reads as a delivery
 * again), the level of before, which drew no such splice, passed every run of CI's searches (200
 * runs at seed 20261129 on the Anthropic side, 30 at 20261201 on the OpenAI side); with the shape
 * drawn, those searches fail it at run 67 and run 15. Here a seed whose first run has one, with a
 * reordered spliced response: the call that ran comes back at a new position and is paid again
 * under the next ordinal. The control runs the real runner over the same scenarios.
 */
const SEED = 124;
const RUNS = 3;
const SEARCH_BUDGET_MS = 120_000;

describe.each(RUNNER_PROVIDERS)("headless splices without a lead: the end-to-end level rejects a stream side without STREAM-10's different-item check (provider %s)", (provider) => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`STREAM-10 the plant pays the call that ran again and commits a turn no response made; the real runner passes the same scenarios (${name})`, async () => {
      const error = await runEndToEnd(memory, { deploys: false, provider, runs: RUNS, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs, runner: noHeldItemName }).catch((e: unknown) => e);
      const message = expectReadable(error, SEED);
      // The call that ran, back at a new position under the next ordinal: paid twice (CONF-2, TURN-4).
      expect(message).toMatch(/breaks CONF-2\): payment .* performed \d+ times for one intent/);
      expect(message).toMatch(/proxy +splices into request \d of "[^"]+", after its call \d completed, the response to the request sent again without its start and without a lead, its first item on a held one of its type \(STREAM-10\)/);
      // On the Anthropic side the turn reaches message_stop and commits the mix: STREAM-10's judge names it.
      if (provider === "anthropic") expect(message).toMatch(/ {2}STREAM-10: conv-\d+: turn \d+ \(message "[^"]+"\) committed the calls \[.*\], which are no one response's: .*\(spliced into another's body, without its start or a lead\)/);
      if (shrinkTimeLimitMs === 0) expect(message).toContain(`after 1 runs`);

      // The control: the real runner over the same scenarios (the runs up to the failing one) passes, and meets the shape.
      const seen = await controlOverSameRuns(provider, SEED, error, message);
      expect(seen.splices_headless_bare ?? 0).toBeGreaterThan(0);
    }, 600_000);
  }
});
