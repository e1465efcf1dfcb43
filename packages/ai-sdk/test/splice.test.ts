import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger } from "@dispatch-once/core";
import { call, respond, scriptFromPlans, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { scriptFromPlans as anthropicPlans, startMockProvider, toolUse, turn as anthropicTurn, type MockProvider } from "@dispatch-once/mock-provider";
import { StreamIncompleteError } from "@dispatch-once/runner";
import { stepCountIs, streamText, wrapLanguageModel, type LanguageModel, type ModelMessage } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools, spliceGuard } from "../src/index.js";
import { drain, invoiceTool, quiet, settled } from "./helpers.js";

// AISDK-16: a proxy that sent the request again after its upstream died splices the new response
// into the same body. The splice comes right after the first call's completing event, so the first
// response's acme call is complete; the spliced response asks for acme and bob again.
let payments: MockPaymentsServer;
let openai: MockOpenAI;
let anthropic: MockProvider;
const ask = "pay acme 5 and bob 7";
beforeEach(async () => {
  payments = await startMockPayments();
  openai = await startMockOpenAI({ seed: "ai-sdk-splice", script: scriptFromPlans({ [ask]: respond(call("create_invoice", { customer: "acme", amount: 5 }), call("create_invoice", { customer: "bob", amount: 7 })) }) });
  anthropic = await startMockProvider({ seed: "ai-sdk-splice", script: anthropicPlans({ [ask]: anthropicTurn(toolUse("create_invoice", { customer: "acme", amount: 5 }), toolUse("create_invoice", { customer: "bob", amount: 7 })) }) });
});
afterEach(async () => {
  await openai.close();
  await anthropic.close();
  await payments.close();
});

const messages: ModelMessage[] = [{ role: "user", content: ask }];
const paid = () => payments.effects().map((e) => `${String(e.payload["customer"])} ${String(e.payload["amount"])}`);

type ProviderModel = Parameters<typeof wrapLanguageModel>[0]["model"];
interface Shape {
  name: string;
  model: () => ProviderModel;
  splice: () => void;
  requests: () => number;
}
const openaiModel = () => createOpenAI({ baseURL: openai.baseURL, apiKey: "test" }).responses("gpt-5");
const anthropicModel = () => createAnthropic({ baseURL: `${anthropic.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5");
const shapes: Shape[] = [
  { name: "openai, with its own response.created (STREAM-8's shape)", model: openaiModel, requests: () => openai.requests.length, splice: () => openai.queueFault({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: true }) },
  { name: "openai, headless: its first call at output_index 0 (STREAM-10's shape)", model: openaiModel, requests: () => openai.requests.length, splice: () => openai.queueFault({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: false }) },
  { name: "openai, headless, led by a sentence at output_index 0 (STREAM-17's shape)", model: openaiModel, requests: () => openai.requests.length, splice: () => openai.queueFault({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: false, lead: "Sure, paying now." }) },
  { name: "anthropic, headless: its first tool_use at index 0", model: anthropicModel, requests: () => anthropic.requests.length, splice: () => anthropic.faults.enqueue({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart: false }) },
  { name: "anthropic, with its own message_start", model: anthropicModel, requests: () => anthropic.requests.length, splice: () => anthropic.faults.enqueue({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart: true }) },
];

/** One request of the turn (a first send, or the app's re-send after a failed one, AISDK-6), the calls it ran. */
async function send(once: ReturnType<typeof onceTools>["once"], model: LanguageModel, dispatchAt: "step" | "tool-call") {
  const turn = once.forTurn({ conversationId: "chat_splice", messages, dispatchAt });
  return drain(streamText({ model, messages, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(2), maxRetries: 0, onError: () => {} }).fullStream);
}
function onceTools() {
  const runs: string[] = [];
  const ledger = new MemoryLedger();
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments, (key) => runs.push(key ?? "")) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
  return { once, ledger, runs };
}

describe("a response spliced into the body, through the AI SDK's providers", () => {
  // @ai-sdk/anthropic refuses a message_start while a message is open by itself (below); every other shape is taken in.
  for (const shape of shapes.filter((s) => s.name !== "anthropic, with its own message_start")) {
    it(`without the guard, ${shape.name}: taken in as one step, acme is paid twice`, async () => {
      const { once, ledger } = onceTools();
      shape.splice();
      const parts = await send(once, shape.model(), "step");
      await settled(ledger, "chat_splice");
      expect(parts.filter((p) => p.type === "error")).toEqual([]);
      expect(parts.filter((p) => p.type === "tool-call")).toHaveLength(3);
      expect(paid().sort()).toEqual(["acme 5", "acme 5", "bob 7"]);
    });
  }

  it("without the guard, anthropic, with its own message_start: @ai-sdk/anthropic ends the step with an error part itself", async () => {
    const { once } = onceTools();
    shapes.find((s) => s.name === "anthropic, with its own message_start")!.splice();
    const parts = await send(once, anthropicModel(), "step");
    expect(String((parts.find((p) => p.type === "error") as { error: unknown } | undefined)?.error)).toMatch(/Received message_start for message .* while message .* is still open/);
    expect(paid()).toEqual([]);
  });

  for (const shape of shapes) {
    for (const dispatchAt of ["step", "tool-call"] as const) {
      it(`AISDK-16: under spliceGuard(), ${shape.name}, dispatch at ${dispatchAt}: the request fails at the splice, its re-send pays each once`, async () => {
        const { once, ledger, runs } = onceTools();
        const model = wrapLanguageModel({ model: shape.model(), middleware: spliceGuard() });
        shape.splice();
        const failed = await send(once, model, dispatchAt);
        const error = failed.find((p) => p.type === "error") as { error: unknown } | undefined;
        expect(StreamIncompleteError.isInstance(error?.error), String(error?.error)).toBe(true);
        // Nothing of the spliced response reached the AI SDK: one tool-call part (the first response's acme),
        // a step that failed, and the loop went no further (one request).
        expect(failed.filter((p) => p.type === "tool-call")).toHaveLength(1);
        expect(failed.filter((p) => p.type === "finish-step").map((p) => (p as { finishReason: string }).finishReason)).toEqual(["error"]);
        expect(shape.requests()).toBe(1);
        if (dispatchAt === "tool-call") await settled(ledger, "chat_splice");
        expect(runs).toHaveLength(dispatchAt === "tool-call" ? 1 : 0);
        // The app re-sends the failed request (AISDK-6, AISDK-8): acme's key is met, bob runs.
        const resent = await send(once, model, dispatchAt);
        expect(resent.filter((p) => p.type === "error")).toEqual([]);
        await settled(ledger, "chat_splice");
        expect(paid().sort()).toEqual(["acme 5", "bob 7"]);
      });
    }
  }

  it("AISDK-16: raw parts reach the app only when it asked for them", async () => {
    const model = wrapLanguageModel({ model: openaiModel(), middleware: spliceGuard() });
    const { once } = onceTools();
    const turn = once.forTurn({ conversationId: "chat_raw", messages });
    for (const includeRawChunks of [false, true]) {
      const parts = await drain(streamText({ model, messages, tools: turn.tools, includeRawChunks, stopWhen: stepCountIs(1), maxRetries: 0 }).fullStream);
      expect(parts.some((p) => p.type === "raw")).toBe(includeRawChunks);
      expect(parts.some((p) => p.type === "finish")).toBe(true);
    }
  });

  it("spliceGuard refuses options it does not take", () => {
    expect(() => spliceGuard({ strict: true } as never)).toThrow(/options.strict/);
    expect(() => spliceGuard(null as never)).toThrow(/options/);
  });
});
