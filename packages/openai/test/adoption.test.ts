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

  it("ERR-1 an option the runner does not take is refused, naming it: a misspelt instructions or maxOutputTokens is never silently left unsent", async () => {
    const { runnerOptions } = await setup(provider(), { guarded: true });
    const cases: [string, Record<string, unknown>][] = [
      // A system prompt that says "confirm every payment first", dropped for a typo, lets the model pay unasked.
      ["options.instruction", { instruction: "Confirm every payment before sending it." }],
      ["options.maxOutputToken", { maxOutputToken: 100 }],
      ["options.temperature", { temperature: 0 }],
      ["options.retry.attempt", { retry: { attempt: 5 } }],
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

  it("ERR-1 a client without the Responses API, or tools that are not provider schemas, are refused when the runner is built, not reported as a retryable failed turn", async () => {
    const { runnerOptions, tools } = await setup(provider(), { guarded: true });
    const cases: [string, Record<string, unknown>][] = [
      ["options.client", { client: {} }],
      ["options.client", { client: { chat: { completions: { create: () => undefined } } } }],
      // The tool definitions themselves (what the Dispatcher takes), not registry.providerSchemas().
      ["options.tools[0]", { tools: [tools.get("send_payment")] }],
      ["options.tools[0]", { tools: [tools] }],
      ["options.tools[1]", { tools: [...tools.providerSchemas(), {}] }],
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

  it("ERR-1 a content list in another provider's shape ({ type: \"text\" }, as the Messages API takes it) is refused in send(), before it is stored or sent", async () => {
    const { runner, store, effects } = await setup(provider(), { guarded: true });
    await expect(runner.send("conv-parts", { id: "m1", content: [{ type: "text", text: "pay acme" }] as never })).rejects.toMatchObject({
      code: "invalid_argument",
      field: "message.content[0].type",
    });
    expect(await store.message("conv-parts", "m1")).toBeUndefined();
    expect(effects()).toEqual([]);
    // The Responses API's own parts are taken.
    const answered = await runner.send("conv-parts", { id: "m1", content: [{ type: "input_text", text: "hello" }] });
    expect(answered.status).toBe("answered");
  });

  it("TURN-10 an owner the conversation store cannot keep is refused when the runner is built: 10 KB or a lone surrogate was accepted, and every send() stored the message, then failed at the lease", async () => {
    const { runnerOptions } = await setup(provider(), { guarded: true });
    for (const owner of ["w".repeat(10_000), "worker-\uD800"]) {
      let error: unknown;
      try {
        new ConversationRunner({ ...runnerOptions, owner });
      } catch (e) {
        error = e;
      }
      expect(error, owner.slice(0, 12)).toBeInstanceOf(InvalidArgumentError);
      expect(error, owner.slice(0, 12)).toMatchObject({ field: "options.owner" });
    }
  });
});
