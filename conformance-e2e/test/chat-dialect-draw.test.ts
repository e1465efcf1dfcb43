import fc from "fast-check";
import { CHAT_DIALECTS } from "@dispatch-once/mock-openai";
import { describe, expect, it } from "vitest";
import { chatDialectOf } from "../src/provider.js";
import { scenarioArbitrary, withoutSplices, type PlannedCall, type Scenario } from "../src/scenario.js";
import { contentOf } from "../src/world.js";

/** A scenario's plans as a case names them: each message's text under the case's account, its calls. */
const plansOf = (scenario: Scenario, account: string) =>
  new Map<string, PlannedCall[][]>(scenario.conversations.flatMap((c) => c.messages.map((m): [string, PlannedCall[][]] => [contentOf(account, m.text), [m.calls]])));

describe("provider openai-chat: the Chat Completions dialect is drawn per scenario", () => {
  it("a scenario draws the same dialect under any account (a replayed path gets it again), and a seed's scenarios draw every dialect", () => {
    const scenarios = fc.sample(scenarioArbitrary().map(withoutSplices), { seed: 20261207, numRuns: 60 });
    const drawn = scenarios.map((s) => chatDialectOf(plansOf(s, "acct_one")));
    expect(scenarios.map((s) => chatDialectOf(plansOf(s, "acct_other")))).toEqual(drawn);
    expect(new Set(drawn)).toEqual(new Set(CHAT_DIALECTS));
  });
});
