import { UnguardedDispatcher } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { cleanCloseTakenForTheEnd } from "./stream-plants.js";
import { expectReadable } from "./readable.js";
import { memory } from "./audit-mutants.js";

/**
 * The client platforms of provider anthropic (Bedrock, Vertex AI) carry the same oracle as the
 * Messages API: a planted bug is found when every scenario runs on the platform (anthropicPlatform
 * forces it), and the counterexample's timeline says which platform the workers reached the model
 * over, so a replay is read on the right route. The clean-close plant is the platform-sensitive one:
 * on Bedrock a clean close falls between two event-stream messages, and the SDK's decoder ends its
 * iterator without an error, as the Messages API's SSE reader does. Shrinking is off (0): the
 * verdict needs the rule, the platform and a replayable scenario, not the smallest one.
 */
const SEARCH_BUDGET_MS = 60_000;
const SAID = { bedrock: "Amazon Bedrock (AnthropicBedrock", vertex: "Google Vertex AI (AnthropicVertex" } as const;

describe.each(["bedrock", "vertex"] as const)("provider anthropic on platform %s: the end-to-end oracle rejects planted bugs", (platform) => {
  it(`STREAM-8 a runner that commits a response whose body closed cleanly before its finishing event is rejected on ${platform}`, async () => {
    const error = await runEndToEnd(memory, { deploys: false, anthropicPlatform: platform, runs: 300, seed: 3, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, runner: cleanCloseTakenForTheEnd }).catch((e: unknown) => e);
    const message = expectReadable(error, 3);
    expect(message).toMatch(/breaks (STREAM-8|RECORD-1)/);
    expect(message).toContain(`the workers reach the model over ${SAID[platform]}`);
  }, 300_000);

  it(`CONF-2 an unguarded dispatcher (no ledger) pays twice or tells an effect as an error on ${platform}`, async () => {
    const error = await runEndToEnd(memory, { deploys: false, anthropicPlatform: platform, runs: 300, seed: 7, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, dispatcher: (tools) => new UnguardedDispatcher(tools) }).catch((e: unknown) => e);
    const message = expectReadable(error, 7);
    expect(message).toMatch(/breaks (CONF-2|DISPATCH-5|RECORD-3)/);
    expect(message).toContain(`the workers reach the model over ${SAID[platform]}`);
  }, 300_000);
});

describe("anthropicPlatform is refused where it does not apply", () => {
  it("on another provider, and a platform of no such name", async () => {
    await expect(runEndToEnd(memory, { provider: "openai", anthropicPlatform: "bedrock", runs: 1 })).rejects.toThrow(/anthropicPlatform applies to provider anthropic only, not openai/);
    await expect(runEndToEnd(memory, { anthropicPlatform: "azure" as never, runs: 1 })).rejects.toThrow(/anthropicPlatform must be one of messages, bedrock, vertex, got "azure"/);
  });
});
