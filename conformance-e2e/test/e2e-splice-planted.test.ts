import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { SplicePlan } from "../src/scenario.js";
import { memory } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";
import { noPositionType, noSecondStart } from "./splice-plants.js";

/**
 * A proxy's splice (scenario.ts SplicePlan, the mocks' `splice` fault): after a call of the
 * response completed, the body carries the response to the same request again, with its own
 * message_start / response.created (STREAM-8) or without, led by a sentence that lands on the
 * call's position (STREAM-17). The end-to-end level drew no splice before, so neither check of the
 * stream sides was needed to pass it: both planted out here passed every run. The searches run
 * CI's certification of the in-memory ledger (e2e.test.ts: its seed and run count per side) and
 * stop at the first failing scenario, unshrunk; the control replays it under the real runner.
 */
const CI: Record<(typeof RUNNER_PROVIDERS)[number], { seed: number; runs: number }> = {
  anthropic: { seed: 20261129, runs: 200 },
  openai: { seed: 20261201, runs: 30 },
};
const SEARCH_BUDGET_MS = 120_000;

describe.each(RUNNER_PROVIDERS)("splices: the end-to-end level rejects stream sides that take a spliced response in (provider %s)", (provider) => {
  const { seed, runs } = CI[provider];
  const planted = (runner: typeof noPositionType) => runEndToEnd(memory, { deploys: false, provider, runs, seed, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, runner }).catch((e: unknown) => e);

  /** The failing scenario once more under the real runner: it passes, and it had a splice of the shape the plant misses. */
  const control = async (error: unknown, shapes: SplicePlan["shape"][]) => {
    const cx = (error as ConformanceFailure).counterexample!;
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false, provider, runs, seed: cx.seed, path: cx.path, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(shapes.reduce((n, shape) => n + (seen[`splices_${shape}`] ?? 0), 0)).toBeGreaterThan(0);
  };

  it("STREAM-17 a stream side without the position-type check lets a spliced response's sentence replace the call that ran, and its own call pay again; the real runner passes that scenario", async () => {
    const error = await planted(noPositionType);
    const message = expectReadable(error, seed);
    // The text takes the paid call's place, its tool_result stays (RECORD-1), and the spliced
    // response's call, at the next position, is dispatched under the next ordinal (CONF-2, TURN-4).
    expect(message).toMatch(/breaks (RECORD-1|CONF-2|STREAM-17|STREAM-10)/);
    // The first such splice may fall on a re-ask's request (MessagePlan reaskSplice) or a follow-up's.
    expect(message).toMatch(/proxy +splices into (?:re-ask |follow-up )?request \d of "[^"]+", after its call \d completed, .* without its start/);
    // The plant forgets the names as well (STREAM-10's), so a bare splice, whose first item lands
    // on a held one of its type, is taken in too: the first failing scenario may have either.
    await control(error, ["headless", "headless_bare"]);
  }, 600_000);

  it("STREAM-8 a stream side without the second-start check takes the spliced response in: a turn of two responses, or the call that ran paid again; the real runner passes that scenario", async () => {
    const error = await planted(noSecondStart);
    const message = expectReadable(error, seed);
    // Anthropic: the committed turn mixes the two responses ("no one response's": the paid call
    // beside the spliced one's re-worded memo). OpenAI: the attempt fails at response.completed
    // anyway (it lists calls the stream never completed), but a reordered spliced response
    // brought the call that ran back at a new position, dispatched under the next ordinal (CONF-2).
    expect(message).toMatch(provider === "anthropic" ? /breaks STREAM-8\): .* which are no one response's/ : /breaks CONF-2\): payment .* performed \d+ times for one intent/);
    expect(message).toMatch(/proxy +splices into request \d of "[^"]+", after its call \d completed, .* with its own start/);
    await control(error, ["restart"]);
  }, 600_000);
});
