import Anthropic from "@anthropic-ai/sdk";
import { InvalidArgumentError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();
const choiceOf = (body: unknown) => (body as { tool_choice?: unknown }).tool_choice;

/** An SDK client that keeps the exact bytes of every request body it sends. */
function recordingClient(baseURL: string): { client: Anthropic; bodies: string[] } {
  const bodies: string[] = [];
  const client = new Anthropic({
    baseURL,
    apiKey: "test-key",
    maxRetries: 0,
    fetch: (url, init) => {
      bodies.push(String(init?.body));
      return fetch(url, init);
    },
  });
  return { client, bodies };
}

describe("a forcing tool_choice (STREAM-18)", () => {
  for (const toolChoice of [{ type: "tool" as const, name: "send_payment" }, { type: "any" as const }]) {
    it(`STREAM-18 ${JSON.stringify(toolChoice)}: one payment; the follow-up request that carries its result sends auto`, async () => {
      const { runner, effects } = await setup(provider(), { guarded: true, runner: { params: { tool_choice: toolChoice } } });
      // Before: the message failed at maxTurns (8) and the effect log held 8 payments.
      const result = await runner.send("conv-force", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
      expect(effects()).toHaveLength(1);
      expect(result).toMatchObject({ status: "answered" });
      expect(provider().requests.map((r) => choiceOf(r.body))).toEqual([toolChoice, { type: "auto" }]);
    });
  }

  it("STREAM-18 disable_parallel_tool_use is kept on the auto it becomes; a choice that does not force (auto) is sent as given", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { params: { tool_choice: { type: "any", disable_parallel_tool_use: true } } } });
    await runner.send("conv-force-dp", { id: "m1", content: "pay acme" }).catch(() => undefined);
    expect(effects()).toHaveLength(1);
    expect(provider().requests.map((r) => choiceOf(r.body))).toEqual([
      { type: "any", disable_parallel_tool_use: true },
      { type: "auto", disable_parallel_tool_use: true },
    ]);
    provider().clearRequests();
    const auto = await setup(provider(), { guarded: true, runner: { params: { tool_choice: { type: "auto", disable_parallel_tool_use: true } } } });
    await auto.runner.send("conv-auto", { id: "m1", content: "pay acme" });
    expect(provider().requests.map((r) => choiceOf(r.body))).toEqual([
      { type: "auto", disable_parallel_tool_use: true },
      { type: "auto", disable_parallel_tool_use: true },
    ]);
  });

  it("STREAM-18 a retried request is byte-for-byte the request it replays: the first keeps the forcing value, a follow-up keeps auto", async () => {
    const { client, bodies } = recordingClient(provider().baseURL);
    // Cut every body's first response before its first event: each request is sent twice.
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { event: 0 } } : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { client, params: { tool_choice: { type: "tool", name: "send_payment" } } } });
    const result = await runner.send("conv-force-retry", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
    expect(effects()).toHaveLength(1);
    expect(result).toMatchObject({ status: "answered" });
    expect(bodies).toHaveLength(4);
    expect(bodies[1]).toBe(bodies[0]);
    expect(bodies[3]).toBe(bodies[2]);
    expect(choiceOf(JSON.parse(bodies[0]!))).toEqual({ type: "tool", name: "send_payment" });
    expect(choiceOf(JSON.parse(bodies[2]!))).toEqual({ type: "auto" });
  });

  it("STREAM-18 resetToolChoice: false sends the forcing value with every request, as the application chose", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { maxTurns: 2, resetToolChoice: false, params: { tool_choice: { type: "any" } } } });
    await expect(runner.send("conv-force-kept", { id: "m1", content: "pay acme" })).rejects.toMatchObject({ code: "turn_failed" });
    expect(provider().requests.map((r) => choiceOf(r.body))).toEqual([{ type: "any" }, { type: "any" }]);
    // The model made to call again paid again: what the default prevents.
    expect(effects()).toHaveLength(2);
  });

  it("STREAM-18 a resetToolChoice that is not a boolean is refused with invalid_argument", async () => {
    const attempt = setup(provider(), { guarded: true, runner: { resetToolChoice: "no" as never } });
    await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attempt).rejects.toMatchObject({ code: "invalid_argument", field: "options.resetToolChoice" });
  });
});
