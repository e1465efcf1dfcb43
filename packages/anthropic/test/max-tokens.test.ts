import { say, startMockProvider, toolUse, type MockProvider } from "@dispatch-once/mock-provider";
import { afterEach, describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { PAY_ACME, closeDownstreams, setup } from "./fixtures.js";

let provider: MockProvider | undefined;
afterEach(async () => {
  await provider?.close();
  provider = undefined;
  await closeDownstreams();
});

/** A model that runs into its output limit: inside the payment call's arguments, or in the text after it. */
async function limitedModel(where: "in_call" | "after_call") {
  provider = await startMockProvider({
    script: () =>
      where === "in_call"
        ? { content: [say("Paying acme."), toolUse("send_payment", PAY_ACME)], stopReason: "max_tokens" }
        : { content: [toolUse("send_payment", PAY_ACME), say("The payment to acme is on its way, and I will confirm it.")], stopReason: "max_tokens" },
  });
  return provider;
}

describe("a response cut at its output limit (Messages API stop_reason max_tokens, STREAM-13)", () => {
  it("STREAM-13 a call whose arguments the limit cut: never run, the turn fails at once with the reason, not retryable, and nothing is committed", async () => {
    const { runner, effects, store } = await setup(await limitedModel("in_call"), { guarded: true });
    const error = await runner.send("conv-limit", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const { record } = error as TurnFailedError;
    expect(effects()).toHaveLength(0);
    // The same request would stop at the same place: one request, no retry.
    expect(provider!.requests).toHaveLength(1);
    expect(record.retryable).toBe(false);
    expect(record.error.message).toMatch(/max_tokens/);
    expect(record.calls).toEqual([expect.objectContaining({ name: "send_payment", status: "rejected", effect: "not_happened" })]);
    expect(record.effects).toEqual([]);
    // Nothing the stream did not establish is written: no tool_use with invented arguments (RECORD-1).
    expect(await store.log("conv-limit")).toEqual([]);
  });

  it("STREAM-13 the limit reached after a whole call: the call runs once and the turn commits, as before", async () => {
    const { runner, effects } = await setup(await limitedModel("after_call"), { guarded: true });
    const result = await runner.send("conv-limit-2", { id: "m1", content: "pay acme" });
    expect(effects()).toHaveLength(1);
    expect(result.turns[0]).toMatchObject({ stopReason: "max_tokens" });
  });
});

describe("a response a streaming classifier refused (Messages API stop_reason refusal, STREAM-13)", () => {
  /** A model that pays, then is stopped by the classifier in its text; "hello" is answered normally. */
  async function refusingModel() {
    provider = await startMockProvider({
      script: (request) => {
        const first = request.messages[0]!;
        const said = typeof first.content === "string" ? first.content : JSON.stringify(first.content);
        if (request.messages.length === 1 && said.includes("pay acme")) {
          return { content: [toolUse("send_payment", PAY_ACME), say("Paid. Now, about the other thing you asked")], stopReason: "refusal", stopDetails: { category: "cyber", explanation: "declined by the classifier" } };
        }
        return { content: [say("Hello.")], stopReason: "end_turn" };
      },
    });
    return provider;
  }

  it("STREAM-13 a refused response is not retried or committed: the turn fails, its record says the payment happened, and the conversation goes on", async () => {
    const { runner, effects, store } = await setup(await refusingModel(), { guarded: true });
    const error = await runner.send("conv-refused", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const { record } = error as TurnFailedError;
    expect(effects()).toHaveLength(1);
    expect(provider!.requests).toHaveLength(1);
    expect(record.retryable).toBe(false);
    expect(record.error.message).toMatch(/refusal \(cyber\): declined by the classifier/);
    expect(record.effects).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened" })]);
    // The API refuses every later request of a conversation that still carries the refused turn;
    // nothing of it was committed, so the next message is answered.
    expect(await store.log("conv-refused")).toEqual([]);
    const next = await runner.send("conv-refused", { id: "m2", content: "hello" });
    expect(next.status).toBe("answered");
    expect(next.turns.at(-1)).toMatchObject({ stopReason: "end_turn" });
    expect(effects()).toHaveLength(1);
  });
});
