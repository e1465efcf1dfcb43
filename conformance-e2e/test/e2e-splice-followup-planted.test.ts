import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";
import { controlOverSameRuns, spliceChecksOnFirstTurnOnly } from "./splice-plants.js";

/**
 * A proxy's splice into a tool loop's follow-up response (scenario.ts MessagePlan
 * `followUpSplice`: the request that sends the first turn's results back). The level drew splices
 * into a message's first-turn request only, so a stream side that checks for splices there alone
 * (test/splice-plants.ts `spliceChecksOnFirstTurnOnly`: on the runner's follow-up requests its
 * accumulators forget what STREAM-8, STREAM-17 and STREAM-10 read) passed every run. Seeds whose
 * first run splices a follow-up response: 97 led by a sentence (the text takes the call's place,
 * RECORD-1), 113 with its own start, 1278 bare (the follow-up's call is lost from the committed
 * turns, STREAM-8's count). The control runs the real runner over the same runs. On the OpenAI
 * side every response that makes calls now opens with a reasoning item (STREAM-15), one position
 * before its calls, so the same splices land one position earlier in the response they are taken
 * into: at 97 the sentence lands on the reasoning item and the spliced call past the held ones is
 * paid again (CONF-2); at 113 and 1278 the spliced response's first item takes the reasoning
 * item's place and the turn commits it beside the call that ran, its reasoning item moved
 * (STREAM-15). Still the first run of each seed. Since TURN-23 a spliced call that is a payment an
 * earlier turn of its message left unanswered is answered from that turn's row, not paid again.
 * Seed 97's first run draws a deferred call
 * (scenario.ts `deferred`, drawn after every other field) in another message, whose next turn
 * moves the spliced message's turn indexes and the mock's per-response variation: on the OpenAI
 * side the committed follow-up now mixes the two responses' calls (STREAM-17), where before the
 * spliced call was paid again (CONF-2).
 */
const SEARCH_BUDGET_MS = 120_000;
const SEEDS = [
  [97, "headless", { anthropic: /breaks RECORD-1\)/, openai: /breaks STREAM-17\): conv-0: turn \d+ \(message "conv-0:c0 message 1"\) committed the calls \[.*\], which are no one response's/ }],
  [113, "restart", { anthropic: /breaks STREAM-8\)/, openai: /breaks STREAM-15\): .* committed the reasoning item rs_\w+ at position 1, not at position 0/ }],
  [1278, "headless_bare", { anthropic: /breaks STREAM-8\)/, openai: /breaks STREAM-15\): .* committed the reasoning item rs_\w+ at position 1, not at position 0/ }],
] as const;

describe.each(RUNNER_PROVIDERS)("splices into follow-up requests: the end-to-end level rejects a stream side that checks the first turn's only (provider %s)", (provider) => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it.each(SEEDS)(`seed %i (%s): the plant takes the spliced follow-up response in; the real runner passes the same runs (${name})`, async (seed, shape, verdict) => {
      const error = await runEndToEnd(memory, { deploys: false, provider, runs: 3, seed, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs, runner: spliceChecksOnFirstTurnOnly }).catch((e: unknown) => e);
      const message = expectReadable(error, seed);
      expect(message).toMatch(/proxy +splices into follow-up request \d of "[^"]+", after its call \d completed/);
      if (shrinkTimeLimitMs === 0) {
        expect(message).toContain("after 1 runs");
        expect(message).toMatch(verdict[provider]);
      }

      const seen = await controlOverSameRuns(provider, seed, error, message);
      expect(seen.follow_up_splices ?? 0).toBeGreaterThan(0);
      expect(seen[`splices_${shape}`] ?? 0).toBeGreaterThan(0);
    }, 600_000);
  }
});
