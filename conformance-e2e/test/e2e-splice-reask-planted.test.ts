import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";
import { controlOverSameRuns, reaskPlant } from "./splice-plants.js";

/**
 * A proxy's splice into a RE-ASK's first request (scenario.ts MessagePlan `reaskSplice`: the new
 * message with the same request after the message failed, TURN-12). The level drew splices into a
 * message's own requests only (its first turn's, its tool loop's follow-up's), so a stream side
 * whose splice checks are skipped on re-asks (test/splice-plants.ts `reaskPlant`: on every request
 * of a new message sent after its conversation's last message failed, its accumulators forget what
 * STREAM-8, STREAM-17 and STREAM-10 read) passed CI's searches: 200 runs at seed 20261129 on the
 * Anthropic side reached it only at run 20, through a follow-up splice on the message sent after a
 * failed re-ask, and 30 runs at seed 20261201 on the OpenAI side passed it; a stream side that
 * skipped them on the kit's re-asks alone (the same request asked again) passed both, 56 re-asks
 * met. Seeds whose first run splices a re-ask, on both sides: 55 led by a sentence and 177 with its
 * own start (the spliced call's result lands beside the call that ran, RECORD-1), 135 bare (the
 * call that ran comes back at a new position and is paid again, CONF-2). The control runs the real
 * runner over the same runs. On the OpenAI side every response that makes calls now opens with a
 * reasoning item (STREAM-15), so the spliced items land one position earlier: at 55 and 177 the
 * re-ask's turn commits calls of both responses (STREAM-17's mixed turn, the first verdict), still
 * at the first run.
 *
 * The AI SDK profile's re-ask is the regenerate (the user asks the settled turn again; a failed
 * request is re-sent as it was, AISDK-6): AiSdkMessagePlan `regenerateSplice` splices its first
 * request. The plant is an app whose route guards its model with `spliceGuard()` (AISDK-16) on the
 * user's messages only, not on a regenerate (AiSdkAppOptions `spliceGuard` as a function of AI SDK
 * UI's `trigger`). Before the draw, CI's search (30 runs at seed 20261201, 37 regenerates, 3
 * splices) passed it; with it, that search fails it at run 22 (an invoice made twice, CONF-2).
 * Seeds whose first run splices a regenerate of each shape: 3 with its start, 7 led by a
 * sentence, 18 bare; the control runs the guarded app over the same runs.
 */
const SEARCH_BUDGET_MS = 120_000;
const SEEDS = [
  [55, "headless", { anthropic: /breaks RECORD-1\)/, openai: /breaks STREAM-17\): .* which are no one response's/ }],
  [177, "restart", { anthropic: /breaks RECORD-1\)/, openai: /breaks STREAM-17\): .* which are no one response's/ }],
  [135, "headless_bare", { anthropic: /breaks CONF-2\)/, openai: /breaks CONF-2\)/ }],
] as const;

describe.each(RUNNER_PROVIDERS)("splices into re-asks: the end-to-end level rejects a stream side that skips its splice checks on re-asks (provider %s)", (provider) => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it.each(SEEDS)(`seed %i (%s): the plant takes the spliced re-ask response in; the real runner passes the same runs (${name})`, async (seed, shape, verdict) => {
      const plant = reaskPlant();
      const error = await runEndToEnd(memory, { deploys: false, provider, runs: 3, seed, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs, runner: plant.runner }).catch((e: unknown) => e);
      const message = expectReadable(error, seed);
      expect(message).toMatch(/proxy +splices into re-ask request \d of "[^"]+ again(, the rest)?", after its call \d completed/);
      expect(plant.reasks()).toBeGreaterThan(0);
      if (shrinkTimeLimitMs === 0) {
        expect(message).toContain("after 1 runs");
        expect(message).toMatch(verdict[provider]);
      }

      const seen = await controlOverSameRuns(provider, seed, error, message);
      expect(seen.reask_splices ?? 0).toBeGreaterThan(0);
      expect(seen[`splices_${shape}`] ?? 0).toBeGreaterThan(0);
    }, 600_000);
  }
});

const regenerateUnguarded: AiSdkAppOptions = { spliceGuard: ({ trigger }) => trigger === "submit-message" };

describe("splices into regenerates: the end-to-end level rejects an app that guards its model on the user's messages only (provider ai-sdk)", () => {
  const subject = memoryLedgerSubject();
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it.each([
      [3, "restart"],
      [7, "headless"],
      [18, "headless_bare"],
    ] as const)(`AISDK-16 seed %i (%s): the app pays a spliced regenerate's call again; the guarded app passes the same runs (${name})`, async (seed, shape) => {
      const error = await runEndToEnd(subject, { deploys: false, provider: "ai-sdk", runs: 3, seed, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs, aiSdk: regenerateUnguarded }).catch((e: unknown) => e);
      const message = expectReadable(error, seed);
      expect(message).toMatch(/breaks CONF-2\): \w+ for chat-\d "c\d message \d" \(.*\): performed \d+ times for one intent/);
      expect(message).toMatch(/proxy +spliced into the regenerate's request \d of "c\d message \d", after its call \d completed, the response to the request sent again/);
      if (shrinkTimeLimitMs === 0) expect(message).toContain("after 1 runs");

      const runs = Number(/after (\d+) runs/.exec(message)![1]);
      expect((error as ConformanceFailure).counterexample!.seed).toBe(seed);
      const seen: Record<string, number> = {};
      await runEndToEnd(subject, { deploys: false, provider: "ai-sdk", runs, seed, onStats: (stats) => Object.assign(seen, stats) });
      expect(seen).toMatchObject({ cases: runs });
      expect(seen.regenerate_splices ?? 0).toBeGreaterThan(0);
      expect(seen[`splices_${shape}`] ?? 0).toBeGreaterThan(0);
    }, 600_000);
  }
});
