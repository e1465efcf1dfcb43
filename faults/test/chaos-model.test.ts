/**
 * The chaos suite's provider dimension reaches both mocks (chaos-harness.ts, modelHooks): the
 * drawn fault plays on a turn's first request and the drawn variation on the next response to
 * the same body. A mock that ignored the plan (mock-openai before it read `faultPlan`, or a
 * stale build of it) served every request as planned and the Responses API half of the suite
 * ran without its provider dimension, silently.
 */
import { describe, expect, it } from "vitest";
import { startMockOpenAI } from "@dispatch-once/mock-openai";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { modelHooks, type ModelDraw } from "./chaos-harness.js";

const draw: ModelDraw = { memoInIdentity: false, variations: ["string_amount", "same", "same"], faults: ["status_500", "none", "none", "none"], spelling: 0 };

describe("chaos provider dimension: the drawn plan reaches the mock", () => {
  it("openai: request 1 the drawn status, request 2 (same body) the drawn string_amount", async () => {
    const hooks = modelHooks("openai", draw);
    if (hooks.kind !== "openai") throw new Error("openai hooks expected");
    const mock = await startMockOpenAI({ script: hooks.script, faultPlan: hooks.faultPlan });
    try {
      const body = JSON.stringify({ model: "gpt-test", input: [{ role: "user", content: "invoice acme" }] });
      const post = () => fetch(`${mock.baseURL}/responses`, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer test" }, body });
      expect((await post()).status).toBe(500);
      expect((await post()).status).toBe(200);
      expect(mock.requests.map((r) => [r.attempt, r.outcome, r.calls.map((c) => c.arguments.amount)])).toEqual([
        [1, "status", []],
        [2, "complete", ["9900"]],
      ]);
    } finally {
      await mock.close();
    }
  });

  it("anthropic: the same draw, the same two responses", async () => {
    const hooks = modelHooks("anthropic", draw);
    if (hooks.kind !== "anthropic") throw new Error("anthropic hooks expected");
    const mock = await startMockProvider({ script: hooks.script, faultPlan: hooks.faultPlan });
    try {
      const body = JSON.stringify({ model: "claude-test", max_tokens: 256, tools: [{ name: "create_invoice", input_schema: { type: "object" } }], messages: [{ role: "user", content: "invoice acme" }] });
      const post = () => fetch(`${mock.baseURL}/v1/messages`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": "test", "anthropic-version": "2023-06-01" }, body });
      expect((await post()).status).toBe(500);
      expect((await post()).status).toBe(200);
      expect(mock.requests.map((r) => [r.attempt, r.outcome, r.toolUses.map((c) => c.input.amount)])).toEqual([
        [1, "status", []],
        [2, "complete", ["9900"]],
      ]);
    } finally {
      await mock.close();
    }
  });
});
