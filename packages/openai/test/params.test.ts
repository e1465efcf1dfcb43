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
