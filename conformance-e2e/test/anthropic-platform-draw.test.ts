import fc from "fast-check";
import { CHAT_DIALECTS } from "@dispatch-once/mock-openai";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { ANTHROPIC_PLATFORMS, anthropicPlatformOf, chatDialectOf } from "../src/provider.js";
import { scenarioArbitrary, withoutSplices, type PlannedCall, type Scenario } from "../src/scenario.js";
import { contentOf } from "../src/world.js";
import { memory } from "./audit-mutants.js";

/** A scenario's plans as a case names them: each message's text under the case's account, its calls. */
const plansOf = (scenario: Scenario, account: string) =>
  new Map<string, PlannedCall[][]>(scenario.conversations.flatMap((c) => c.messages.map((m): [string, PlannedCall[][]] => [contentOf(account, m.text), [m.calls]])));

describe("provider anthropic: the client platform (Messages API, Bedrock, Vertex AI) is drawn per scenario", () => {
  for (const seed of [20261207, 7, 424242]) {
    it(`seed ${seed}: a scenario draws the same platform under any account (a replayed path gets it again), and 30 scenarios draw every platform`, () => {
      const scenarios = fc.sample(scenarioArbitrary(), { seed, numRuns: 30 });
      const drawn = scenarios.map((s) => anthropicPlatformOf(plansOf(s, "acct_one")));
      expect(scenarios.map((s) => anthropicPlatformOf(plansOf(s, "acct_other"))), `seed ${seed}`).toEqual(drawn);
      expect(new Set(drawn), `seed ${seed}: ${drawn.join(",")}`).toEqual(new Set(ANTHROPIC_PLATFORMS));
    });
  }

  it("the chat side's dialect draw is what it was (pinned for seed 20261207): the platform draw takes its own salt", () => {
    const scenarios = fc.sample(scenarioArbitrary().map(withoutSplices), { seed: 20261207, numRuns: 12 });
    const dialects = scenarios.map((s) => chatDialectOf(plansOf(s, "acct_one")));
    expect(dialects.every((d) => CHAT_DIALECTS.includes(d))).toBe(true);
    expect(dialects).toMatchInlineSnapshot(`
      [
        "deepseek",
        "vllm",
        "mistral",
        "deepseek",
        "sglang",
        "mistral",
        "vllm",
        "openai",
        "openai",
        "mistral",
        "gemini",
        "sglang",
      ]
    `);
  });
});

describe("provider anthropic: a case's workers reach the model over its platform's route, and only it", () => {
  for (const platform of ANTHROPIC_PLATFORMS) {
    it(`anthropicPlatform ${platform}: every request of 2 runs came in through the ${platform} route (onStats anthropic_requests_<route>)`, async () => {
      let seen: Record<string, number> = {};
      await runEndToEnd(memory, { anthropicPlatform: platform, runs: 2, seed: 11, onStats: (stats) => (seen = stats) });
      const routes = Object.fromEntries(Object.entries(seen).filter(([k]) => k.startsWith("anthropic_")));
      expect(routes, "seed 11").toEqual({ [`anthropic_platform_${platform}`]: 2, [`anthropic_requests_${platform}`]: expect.any(Number) });
      expect(seen[`anthropic_requests_${platform}`] ?? 0).toBeGreaterThanOrEqual(seen.attempts!);
    });
  }
});
