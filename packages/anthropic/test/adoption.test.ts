import { describe, expect, it } from "vitest";
import { InvalidArgumentError } from "@dispatch-once/core";
import { ConversationRunner, TurnFailedError } from "../src/index.js";
import { providerPerTest, setup } from "./fixtures.js";

/** Findings of the adoption trial, through the SDK and the mock provider. */
const provider = providerPerTest();

const failure = (promise: Promise<unknown>) => promise.then(() => undefined, (e: unknown) => e) as Promise<TurnFailedError>;

describe("adoption trial findings (anthropic)", () => {
  it("TURN-12 a reset stream that fails the turn in this send: TurnFailedError.replayed is false", async () => {
    provider().setFaultPlan(() => ({ kind: "reset", at: { event: 2 } }));
    const { runner } = await setup(provider(), { guarded: true, runner: { retry: { attempts: 1, backoffMs: () => 10 } } });
    const error = await failure(runner.send("conv-rp", { id: "m1", content: "pay acme" }));
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.replayed).toBe(false);
    expect(error.record.retryable).toBe(true);
  });

  it("RECORD-5 a 400 invalid_request_error before any tool call: not retryable, one model request", async () => {
    provider().setFaultPlan(() => ({ kind: "status", status: 400, error: { type: "invalid_request_error", message: "messages: bad content" } }));
    const { runner, effects } = await setup(provider(), { guarded: true });
    const error = await failure(runner.send("conv-400", { id: "m1", content: "pay acme" }));
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record.position).toBe("before_any_call");
    expect(error.record.retryable).toBe(false);
    expect(provider().requests).toHaveLength(1);
    expect(effects()).toHaveLength(0);
  });

  it("TURN-7 a re-send of an answered message returns the first send's calls, key and ordinal included", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true });
    const first = await runner.send("conv-keys", { id: "m1", content: "pay acme twice" });
    expect(effects()).toHaveLength(2);
    const again = await runner.send("conv-keys", { id: "m1", content: "pay acme twice" });
    expect(again.fromStore).toBe(true);
    const strip = (r: typeof first) => r.turns.map((t) => t.calls.map(({ replayed: _replayed, ...call }) => call));
    expect(first.turns[0]!.calls.map((c) => c.ordinal)).toEqual([0, 1]);
    expect(first.turns[0]!.calls.every((c) => typeof c.key === "string")).toBe(true);
    expect(strip(again)).toEqual(strip(first));
    expect(effects()).toHaveLength(2);
  });

  it("TURN-2 the runner's options are checked when it is built: model, tools, maxTokens, maxTurns, retry.attempts, busyWaitMs", async () => {
    const { runnerOptions } = await setup(provider(), { guarded: true });
    const cases: [string, Record<string, unknown>][] = [
      ["options.model", { model: 5 }],
      ["options.model", { model: undefined }],
      ["options.tools", { tools: "x" }],
      ["options.maxTokens", { maxTokens: "big" }],
      ["options.maxTokens", { maxTokens: 0 }],
      ["options.system", { system: 3 }],
      ["options.maxTurns", { maxTurns: 0 }],
      ["options.retry.attempts", { retry: { attempts: -1 } }],
      ["options.busyWaitMs", { busyWaitMs: -5 }],
      ["options.onEvent", { onEvent: "log" }],
      // Adoption trial: a client that is not an Anthropic client was accepted, and the first
      // send() failed the user's message for good with "Cannot read properties of undefined".
      ["options.client", { client: {} }],
      ["options.client", { client: { messages: {} } }],
      // And a dispatcher or store without its methods failed at send() with a bare TypeError.
      ["options.dispatcher", { dispatcher: {} }],
      ["options.store", { store: {} }],
      // A tool that is no Messages API tool was sent, and every send() failed with a 400.
      ["options.tools[0]", { tools: [{ name: 5 }] }],
      ["options.tools[1]", { tools: [...runnerOptions.tools, { name: "send_payment", input: {}, run: () => undefined }] }],
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

  it("ERR-1 an option the runner does not take is refused, naming it: a misspelt system or maxTokens is never silently left unsent", async () => {
    const { runnerOptions } = await setup(provider(), { guarded: true });
    const cases: [string, Record<string, unknown>][] = [
      // A system prompt that says "confirm every payment first", dropped for a typo, lets the model pay unasked.
      ["options.systemPrompt", { systemPrompt: "Confirm every payment before sending it." }],
      ["options.max_tokens", { max_tokens: 4096 }],
      ["options.temperature", { temperature: 0 }],
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
    for (const content of [undefined, "", [], [5]]) {
      await expect(runner.send("conv-empty", { id: "m1", content: content as never })).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(provider().requests).toHaveLength(0);
    expect(await store.message("conv-empty", "m1")).toBeUndefined();
  });
});
