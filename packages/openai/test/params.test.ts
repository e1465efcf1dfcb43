import { InvalidArgumentError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();

describe("params: the Responses API's further request fields", () => {
  it("reach every request as given (reasoning, store, include)", async () => {
    const params = { reasoning: { effort: "low" as const }, store: false, include: ["reasoning.encrypted_content" as const], metadata: { app: "billing" } };
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { params } });
    const result = await runner.send("conv-params", { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(effects()).toHaveLength(1);
    expect(provider().requests.length).toBeGreaterThan(1);
    for (const request of provider().requests) expect(request.body).toMatchObject(params);
  });

  it("refuse, naming the field, what the runner writes itself and what would add server-side state to a request", async () => {
    for (const field of ["model", "input", "stream", "tools", "instructions", "max_output_tokens", "previous_response_id", "conversation", "background", "prompt"]) {
      const attempt = setup(provider(), { guarded: true, runner: { params: { [field]: "x" } as never } });
      await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt).rejects.toMatchObject({ field: `options.params.${field}` });
    }
    await expect(setup(provider(), { guarded: true, runner: { params: "reasoning" as never } })).rejects.toMatchObject({ field: "options.params" });
  });
});

describe("params.tool_choice: a tool the API runs itself never reaches a request (STREAM-19)", () => {
  // The runner sends options.tools as function tools only: a tool_choice naming any other type
  // names a tool the request does not carry, and a hosted one would run outside the ledger.
  const hosted = [
    { type: "mcp", server_label: "payments" },
    { type: "code_interpreter" },
    { type: "web_search_preview" },
    { type: "shell" },
    { type: "programmatic_tool_calling" },
    { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "send_payment" }, { type: "mcp", server_label: "payments" }] },
  ];
  it("refuses one naming a hosted (or any non-function) tool, naming the field", async () => {
    for (const tool_choice of hosted) {
      let outcome: unknown;
      try {
        const { runner } = await setup(provider(), { guarded: true, runner: { params: { tool_choice } as never } });
        await runner.send("conv-tool-choice", { id: "m1", content: "hello" });
        outcome = { sent: provider().requests.at(-1)?.body };
      } catch (error) {
        outcome = error;
      }
      expect(outcome, JSON.stringify(tool_choice)).toMatchObject({ code: "invalid_argument", field: "options.params.tool_choice" });
    }
  });

  it("sends one naming the runner's function tools, or a mode", async () => {
    const allowed = [
      "auto",
      "required",
      { type: "function", name: "send_payment" },
      { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "send_payment" }] },
    ];
    for (const tool_choice of allowed) {
      const { runner } = await setup(provider(), { guarded: true, runner: { params: { tool_choice } as never } });
      const first = provider().requests.length;
      // A forcing choice needs a plan that calls (the mock honours it); the first request carries it as given.
      await runner.send(`conv-tool-choice-${allowed.indexOf(tool_choice)}`, { id: "m1", content: "pay acme" });
      expect(provider().requests[first]?.body).toMatchObject({ tool_choice });
    }
  });
});
