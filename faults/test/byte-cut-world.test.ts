import { describe, expect, it } from "vitest";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * byteCutWorld(seed, route): the provider of a mock-provider byte-cut file is scripted with the
 * file's seed, so a failing case's BYTE_CUT_SEED replays the same bodies (the ids and fragments
 * the cut points are placed on). Two worlds of one seed answer alike; another seed answers otherwise.
 */
const first = byteCutWorld("byte-cut-world-check", (p) => p.url);
const again = byteCutWorld("byte-cut-world-check", (p) => p.url);
const other = byteCutWorld("byte-cut-world-other", (p) => p.url);

/** The paying response to PROMPT, whole, straight from the world's provider (not through its proxy). */
async function paying(world: typeof first): Promise<string> {
  const response = await fetch(`${world.provider.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "test" },
    body: JSON.stringify({ model: "claude-test", max_tokens: 256, messages: [{ role: "user", content: PROMPT }], tools: [{ name: "send_payment", input_schema: { type: "object" } }] }),
  });
  expect(response.status).toBe(200);
  return response.text();
}

describe("byteCutWorld", () => {
  it("STREAM-8 scripts its provider with the file's seed: the same seed renders the same paying response, another seed another", async () => {
    const [a, b, c] = [await paying(first), await paying(again), await paying(other)];
    expect(a).toContain("send_payment");
    expect(b).toBe(a);
    expect(c).not.toBe(a);
  });
});
