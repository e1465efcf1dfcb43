import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";
import { noTypeCheck } from "./splice-plants.js";

/**
 * A stream side without STREAM-17's type check alone (test/splice-plants.ts `noTypeCheck`: STREAM-8
 * and STREAM-10 kept, the latter comparing names at a held item of the event's own type, as it is
 * worded). A proxy's splice led by a sentence (SplicePlan `headless`) after the response's first
 * call: the sentence takes the position of the call that ran, and the spliced response's calls,
 * past the held positions, are dispatched. The level of before saw that only by its harm: a turn
 * committed with the call's result but without the call (RECORD-1), or a payment beyond what the
 * user asked for (CONF-2). Where the attempt then failed on another fault (a lost payments
 * response) and each spliced call was one its message asked for, there was none to count: CI's
 * OpenAI search (30 runs, seed 20261201) caught the plant only at run 28, and seeds 9 and 17 passed
 * all 30 runs (the Anthropic search, 200 runs at seed 20261129, caught it at run 16). The oracle now
 * also judges what each attempt dispatched against the mock's log of call ids (oracle.ts, "no call
 * of a spliced response reaches the dispatcher"): CI's OpenAI search fails the plant at run 2.
 * Here seed 17's first eleven runs, whose eleventh has such a splice on both sides: the model
 * answers the request sent again without the payment that ran (rerunDivergence), so the spliced
 * response's one call is the void its message asked for, and the void's payments response is lost,
 * so the attempt fails and no turn commits the sentence. Only the new judge sees it. The control
 * runs the real runner over the same runs.
 */
const SEED = 17;
const RUNS = 11;
const SEARCH_BUDGET_MS = 120_000;

describe.each(RUNNER_PROVIDERS)("splices led by a sentence: the end-to-end level rejects a stream side without STREAM-17's type check alone (provider %s)", (provider) => {
  it("STREAM-17 the plant dispatches a call of the spliced response after its sentence replaced the call that ran; the real runner passes the same runs", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: RUNS, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, runner: noTypeCheck }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(
      /breaks STREAM-17\): conv-\d+: turn \d+ attempt \d+ \([^)]+\) dispatched \w+ \([^)]+\) at position \d+, a call of the response a proxy spliced into another's body \(without its start, led by a sentence/,
    );
    expect(message).toMatch(/proxy +splices into request \d of "[^"]+", after its call 0 completed, the response to the request sent again without its start, led by a sentence \(STREAM-17\)/);
    expect(message).toContain(`after ${RUNS} runs`);
    // No judge of the harm sees this scenario: every violation is the dispatched spliced call.
    const violations = message.split("\n").filter((l) => /^(the end-to-end oracle rejects the run \(breaks |  )[A-Z]+-\d+[):]/.test(l));
    expect(violations.length).toBeGreaterThan(0);
    expect(violations.filter((l) => !/dispatched .* a call of the response a proxy spliced/.test(l))).toEqual([]);

    // The control: the real runner over the same runs passes, and meets the shape.
    expect((error as ConformanceFailure).counterexample!.seed).toBe(SEED);
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false, provider, runs: RUNS, seed: SEED, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: RUNS });
    expect(seen.splices_headless ?? 0).toBeGreaterThan(0);
  }, 300_000);
});
