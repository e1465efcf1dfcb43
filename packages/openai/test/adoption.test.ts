import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@dispatch-once/core";
import { ConversationRunner } from "../src/index.js";
import { providerPerTest, setup } from "./fixtures.js";

/** Findings of the adoption trial, through the openai SDK and the mock Responses API. */
const provider = providerPerTest();

describe("adoption trial findings (openai)", () => {
  it("TURN-7 a re-send of an answered message returns the first send's calls, key and ordinal included", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true });
    const first = await runner.send("conv-keys", { id: "m1", content: "pay acme twice" });
    expect(effects()).toHaveLength(2);
    const again = await runner.send("conv-keys", { id: "m1", content: "pay acme twice" });
    expect(again.fromStore).toBe(true);
    const strip = (r: typeof first) => r.turns.map((t) => t.calls.map(({ replayed: _replayed, ...call }) => call));
    expect(first.turns[0]!.calls.map((c) => c.ordinal)).toEqual([0, 1]);
    expect(strip(again)).toEqual(strip(first));
    expect(effects()).toHaveLength(2);
  });

  it("TURN-2 the runner's options are checked when it is built: model, tools, maxOutputTokens, instructions, maxTurns", async () => {
    const { runnerOptions } = await setup(provider(), { guarded: true });
    const cases: [string, Record<string, unknown>][] = [
      ["options.model", { model: 5 }],
      ["options.tools", { tools: "x" }],
      ["options.maxOutputTokens", { maxOutputTokens: "big" }],
      ["options.instructions", { instructions: 1 }],
      ["options.maxTurns", { maxTurns: -1 }],
    ];
    for (const [field, extra] of cases) {
      let error: unknown;
      try {
        new ConversationRunner({ ...runnerOptions, ...extra } as never);
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect(error, field).toMatchObject({ field });
    }
  });

  it("TURN-2 a message whose content is missing or empty is refused before it is stored or sent", async () => {
    const { runner, store } = await setup(provider(), { guarded: true });
    for (const content of [undefined, "", []]) {
      await expect(runner.send("conv-empty", { id: "m1", content: content as never })).rejects.toMatchObject({ code: "invalid_argument", field: "message.content" });
    }
    expect(await store.message("conv-empty", "m1")).toBeUndefined();
  });
});
