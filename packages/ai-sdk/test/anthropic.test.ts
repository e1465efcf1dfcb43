import { createAnthropic } from "@ai-sdk/anthropic";
import { MemoryLedger, isDispatchOnceError } from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, tool, type ModelMessage } from "ai";
import { z } from "zod";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools, turnIndexOf } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet, until } from "./helpers.js";

let provider: MockProvider;
let payments: MockPaymentsServer;
beforeEach(async () => {
  payments = await startMockPayments();
  provider = await startMockProvider({
    seed: "ai-sdk-anthropic",
    script: scriptFromPlans({ "bill acme": turn(toolUse("create_invoice", { customer: "acme", amount: 12_500 })) }),
  });
});
afterEach(async () => {
  await provider.close();
  await payments.close();
});

const model = () => createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5");
const firstTurn: ModelMessage[] = [{ role: "user", content: "bill acme" }];

/** The chat route: one request of the app, with the tools wrapped for this conversation and turn. */
function route(once: ReturnType<typeof createOnceTools<{ create_invoice: ReturnType<typeof invoiceTool> }>>, messages: ModelMessage[], dispatchAt?: "tool-call") {
  const forTurn = once.forTurn({ conversationId: "chat_1", messages, ...(dispatchAt ? { dispatchAt } : {}) });
  return streamText({ model: model(), messages, tools: forTurn.tools, onChunk: forTurn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 });
}

describe("through @ai-sdk/anthropic against the mock provider", () => {
  it("the incident: without the wrapper, a regenerate of the turn bills twice", async () => {
    const tools = { create_invoice: invoiceTool(payments) };
    for (let attempt = 0; attempt < 2; attempt++) {
      await drain(streamText({ model: model(), messages: firstTurn, tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
    }
    expect(payments.effects().length).toBe(2);
  });

  it("AISDK-2: a regenerate of the same turn after the invoice bills once, and answers the stored result", async () => {
    const keys: (string | undefined)[] = [];
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments, (k) => keys.push(k)) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const first = await drain(route(once, firstTurn).fullStream);
    const regenerated = await drain(route(once, firstTurn).fullStream);
    expect(payments.effects().length).toBe(1);
    expect(keys.length).toBe(1);
    expect(outputsOf(first)).toHaveLength(1);
    expect(outputsOf(regenerated)).toEqual(outputsOf(first));
    // The provider minted a new tool-call id for the regenerate: it is not what identifies the call (KEY-9).
    const ids = [first, regenerated].map((parts) => parts.find((p) => p.type === "tool-call")?.toolCallId);
    expect(ids[0]).not.toBe(ids[1]);
  });

  it("AISDK-3: a new user message is a new turn and bills again", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const result = route(once, firstTurn);
    await drain(result.fullStream);
    const next: ModelMessage[] = [...firstTurn, ...(await result.response).messages, { role: "user", content: "bill acme" }];
    expect([turnIndexOf(firstTurn), turnIndexOf(next)]).toEqual([1, 2]);
    await drain(route(once, next).fullStream);
    expect(payments.effects().length).toBe(2);
  });

  it("AISDK-4: at the tool-call part (low latency), a stream cut after the invoice and retried bills once", async () => {
    const runs: (string | undefined)[] = [];
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments, (k) => runs.push(k)) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    // The chapter's incident: the stream pauses after the call's content_block_stop ...
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const cut = drain(route(once, firstTurn, "tool-call").fullStream);
    // ... the call ran from its tool-call part, before the step finished ...
    await until(() => payments.effects().length === 1);
    // ... and the connection dies before message_stop.
    provider.cutNow();
    const cutParts = await cut;
    expect(cutParts.some((p) => p.type === "error")).toBe(true);
    expect(outputsOf(cutParts)).toEqual([]);
    // The app retries the turn (mid-stream errors bypass maxRetries): same messages, same turn.
    const retried = await drain(route(once, firstTurn, "tool-call").fullStream);
    expect(payments.effects().length).toBe(1);
    expect(runs.length).toBe(1);
    expect(outputsOf(retried)).toEqual([{ invoice: payments.effects()[0]!.resourceId, amount: 12_500 }]);
  });
});

describe("tool approvals (needsApproval) through @ai-sdk/anthropic", () => {
  it("AISDK-2: a re-sent approval of the same call bills once", async () => {
    const runs: (string | undefined)[] = [];
    const approved = { ...invoiceTool(payments, (k) => runs.push(k)), needsApproval: true };
    const once = createOnceTools({ tools: { create_invoice: approved }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const ask = once.forTurn({ conversationId: "chat_2", messages: firstTurn });
    const asked = streamText({ model: model(), messages: firstTurn, tools: ask.tools, stopWhen: stepCountIs(3), maxRetries: 0 });
    const parts = await drain(asked.fullStream);
    const request = parts.find((p) => p.type === "tool-approval-request");
    expect(request).toBeDefined();
    expect(payments.effects().length).toBe(0);
    const approval: ModelMessage[] = [
      ...firstTurn,
      ...(await asked.response).messages,
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: (request as { approvalId: string }).approvalId, approved: true }] },
    ];
    expect(turnIndexOf(approval)).toBe(turnIndexOf(firstTurn));
    const outputs: unknown[][] = [];
    // The approval is sent twice (a double click, a retried request): the same turn, the same call.
    for (let attempt = 0; attempt < 2; attempt++) {
      const turnTools = once.forTurn({ conversationId: "chat_2", messages: approval });
      outputs.push(outputsOf(await drain(streamText({ model: model(), messages: approval, tools: turnTools.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream)));
    }
    expect(payments.effects().length).toBe(1);
    expect(runs.length).toBe(1);
    expect(outputs[0]).toHaveLength(1);
    expect(outputs[1]).toEqual(outputs[0]);
  });
});

describe("errors and approvals in the low-latency mode", () => {
  it("AISDK-5: an unsettled call surfaces as the tool's error with its code, and a regenerate does not run it again", async () => {
    let runs = 0;
    const failing = tool({
      inputSchema: z.object({ customer: z.string(), amount: z.number().int() }),
      execute: async (): Promise<{ invoice: string }> => {
        runs++;
        throw new Error("socket hang up after the request was sent");
      },
    });
    const once = createOnceTools({ tools: { create_invoice: failing }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const codes: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const forTurn = once.forTurn({ conversationId: "chat_e", messages: firstTurn });
      const parts = await drain(streamText({ model: model(), messages: firstTurn, tools: forTurn.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
      const toolError = parts.find((p) => p.type === "tool-error") as { error?: unknown } | undefined;
      codes.push(isDispatchOnceError(toolError?.error) ? toolError.error.code : toolError);
    }
    expect(codes).toEqual(["outcome_unknown", "outcome_unknown"]);
    expect(runs).toBe(1);
  });

  it("AISDK-4: a call that needs approval is not started at its tool-call part", async () => {
    const approved = { ...invoiceTool(payments), needsApproval: true };
    const once = createOnceTools({ tools: { create_invoice: approved }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const forTurn = once.forTurn({ conversationId: "chat_a", messages: firstTurn, dispatchAt: "tool-call" });
    const parts = await drain(streamText({ model: model(), messages: firstTurn, tools: forTurn.tools, onChunk: forTurn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
    expect(parts.some((p) => p.type === "tool-approval-request")).toBe(true);
    expect(payments.effects().length).toBe(0);
  });
});
