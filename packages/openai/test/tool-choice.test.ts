import OpenAI from "openai";
import { InvalidArgumentError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();
const choiceOf = (body: unknown) => (body as { tool_choice?: unknown }).tool_choice;

/** An SDK client that keeps the exact bytes of every request body it sends. */
function recordingClient(baseURL: string): { client: OpenAI; bodies: string[] } {
  const bodies: string[] = [];
  const client = new OpenAI({
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

const ALLOWED = { type: "allowed_tools" as const, mode: "required" as const, tools: [{ type: "function", name: "send_payment" }] };

describe("a forcing tool_choice (STREAM-18)", () => {
  for (const [toolChoice, followUp] of [
    ["required", "auto"],
    [{ type: "function", name: "send_payment" }, "auto"],
    [ALLOWED, { ...ALLOWED, mode: "auto" }],
  ] as const) {
    it(`STREAM-18 ${JSON.stringify(toolChoice)}: one payment; the follow-up request that carries its output sends ${JSON.stringify(followUp)}`, async () => {
      const { runner, effects } = await setup(provider(), { guarded: true, runner: { params: { tool_choice: toolChoice as never } } });
      // Before: the message failed at maxTurns (8) and the effect log held 8 payments.
      const result = await runner.send("conv-force", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
      expect(effects()).toHaveLength(1);
      expect(result).toMatchObject({ status: "answered" });
      expect(provider().requests.map((r) => choiceOf(r.body))).toEqual([toolChoice, followUp]);
    });
  }

  it("STREAM-18 a retried request is byte-for-byte the request it replays; the next message's first request is forced again", async () => {
    const { client, bodies } = recordingClient(provider().baseURL);
    // Cut every body's first response before its first event: each request is sent twice.
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { event: 0 } } : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { client, params: { tool_choice: "required" } } });
    const result = await runner.send("conv-force-retry", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
    expect(effects()).toHaveLength(1);
    expect(result).toMatchObject({ status: "answered" });
    expect(bodies).toHaveLength(4);
    expect(bodies[1]).toBe(bodies[0]);
    expect(bodies[3]).toBe(bodies[2]);
    expect([bodies[0], bodies[2]].map((b) => choiceOf(JSON.parse(b!)))).toEqual(["required", "auto"]);
    provider().setFaultPlan(undefined);
    await runner.send("conv-force-retry", { id: "m2", content: "pay acme" });
    expect(bodies.slice(4).map((b) => choiceOf(JSON.parse(b)))).toEqual(["required", "auto"]);
  });

  it("STREAM-18 resetToolChoice: false sends the forcing value with every request, as the application chose", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { maxTurns: 2, resetToolChoice: false, params: { tool_choice: "required" } } });
    await expect(runner.send("conv-force-kept", { id: "m1", content: "pay acme" })).rejects.toMatchObject({ code: "turn_failed" });
    expect(provider().requests.map((r) => choiceOf(r.body))).toEqual(["required", "required"]);
    // The model made to call again paid again: what the default prevents.
    expect(effects()).toHaveLength(2);
  });

  it("STREAM-18 a resetToolChoice that is not a boolean is refused with invalid_argument", async () => {
    const attempt = setup(provider(), { guarded: true, runner: { resetToolChoice: 1 as never } });
    await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attempt).rejects.toMatchObject({ code: "invalid_argument", field: "options.resetToolChoice" });
  });
});
