/**
 * The Responses wire as a proxy or a compatible server may send it, through the real
 * `@ai-sdk/openai` (a `fetch` that answers each request with scripted events): sequences the
 * mock does not produce. The oracle is the payments API's effect log against what the app is told.
 */
import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger } from "@dispatch-once/core";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { generateText, stepCountIs, streamText, type ModelMessage } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet, until } from "./helpers.js";

const ACME = { customer: "acme", amount: 12_500 };
const item = (callId: string, args: string, status: string) => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name: "create_invoice", arguments: args, status });
const created = { type: "response.created", response: { id: "resp_1", created_at: 1, model: "gpt-5", status: "in_progress", output: [] } };
const added = (index: number, callId: string) => ({ type: "response.output_item.added", output_index: index, item: item(callId, "", "in_progress") });
const done = (index: number, callId: string) => ({ type: "response.output_item.done", output_index: index, item: item(callId, JSON.stringify(ACME), "completed") });
const completed = { type: "response.completed", response: { id: "resp_1", status: "completed", incomplete_details: null, output: [], usage: { input_tokens: 1, output_tokens: 1 } } };
const message = (text: string) => [
  { type: "response.output_item.added", output_index: 0, item: { type: "message", id: "msg_1", role: "assistant", status: "in_progress", content: [] } },
  { type: "response.output_text.delta", output_index: 0, item_id: "msg_1", content_index: 0, delta: text },
  { type: "response.output_item.done", output_index: 0, item: { type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] } },
];
const sse = (events: object[]) => events.map((e, n) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify({ ...e, sequence_number: n })}\n\n`).join("");

/** The AI SDK's Responses model over a `fetch` whose n-th request (1-based) streams `responses(n)`. */
function scripted(responses: (n: number) => object[]) {
  let n = 0;
  const fetch = async () => new Response(sse(responses(++n)), { headers: { "content-type": "text/event-stream" } });
  return createOpenAI({ apiKey: "test", fetch: fetch as typeof globalThis.fetch }).responses("gpt-5");
}

let payments: MockPaymentsServer;
beforeEach(async () => {
  payments = await startMockPayments();
});
afterEach(async () => {
  await payments.close();
});

describe("a function_call's output_item.done delivered twice (a proxy re-sending events)", () => {
  for (const dispatchAt of ["step", "tool-call"] as const) {
    it(`STREAM-10, AISDK-4 (${dispatchAt}): the AI SDK emits its tool-call part twice; the wrapped tool bills once and both results name that invoice`, async () => {
      const model = scripted((n) => (n === 1 ? [created, added(0, "call_a"), done(0, "call_a"), done(0, "call_a"), completed] : [created, ...message("Billed."), completed]));
      const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
      const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
      const turn = once.forTurn({ conversationId: "chat_redelivered", messages, dispatchAt });
      const parts = await drain(streamText({ model, messages, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
      expect(parts.filter((p) => p.type === "tool-call")).toHaveLength(2);
      expect(payments.effects().map((e) => e.kind)).toEqual(["invoice_created"]);
      const invoice = payments.effects()[0]!.resourceId;
      expect(outputsOf(parts)).toEqual([
        { invoice, amount: 12_500 },
        { invoice, amount: 12_500 },
      ]);
    });
  }
});

describe("a non-streaming response whose output lists the same function_call item twice", () => {
  it("STREAM-10, AISDK-4 (generateText): the AI SDK makes two tool calls of it; the wrapped tool bills once", async () => {
    const output = (n: number) => (n === 1 ? [item("call_a", JSON.stringify(ACME), "completed"), item("call_a", JSON.stringify(ACME), "completed")] : [{ type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Billed.", annotations: [] }] }]);
    let n = 0;
    const fetch = async () => Response.json({ id: "resp_1", created_at: 1, model: "gpt-5", status: "completed", incomplete_details: null, output: output(++n), usage: { input_tokens: 1, output_tokens: 1 } });
    const model = createOpenAI({ apiKey: "test", fetch: fetch as typeof globalThis.fetch }).responses("gpt-5");
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    const result = await generateText({ model, messages, tools: once.forTurn({ conversationId: "chat_listed_twice", messages }).tools, stopWhen: stepCountIs(3), maxRetries: 0 });
    expect(payments.effects().map((e) => e.kind)).toEqual(["invoice_created"]);
    const invoice = payments.effects()[0]!.resourceId;
    expect(result.steps[0]!.toolResults.map((r) => r.output)).toEqual([
      { invoice, amount: 12_500 },
      { invoice, amount: 12_500 },
    ]);
  });
});

describe("a server that numbers its calls per response (the same call_id in two steps)", () => {
  for (const dispatchAt of ["step", "tool-call"] as const) {
    it(`TURN-4 (${dispatchAt}): the same call in the next step of the request, under the same call_id, is another call: it bills again (a repeated part is told apart by its step)`, async () => {
      // Each response of the request makes one call, always named call_0; the user asked for two invoices.
      const model = scripted((n) => (n <= 2 ? [created, added(0, "call_0"), done(0, "call_0"), completed] : [created, ...message("Billed twice."), completed]));
      const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
      const messages: ModelMessage[] = [{ role: "user", content: "bill acme twice, one after the other" }];
      const turn = once.forTurn({ conversationId: "chat_per_response", messages, dispatchAt });
      const parts = await drain(streamText({ model, messages, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(4), maxRetries: 0 }).fullStream);
      const invoices = payments.effects().map((e) => e.resourceId);
      expect(invoices).toHaveLength(2);
      expect(outputsOf(parts)).toEqual(invoices.map((invoice) => ({ invoice, amount: 12_500 })));
    });
  }
});

describe("an AI SDK that executes a call at its tool-call part (ai before 6.0.260), the part delivered twice", () => {
  it("AISDK-4 (tool-call): the repeated part reaches onChunk after the first execute took the early dispatch; it is not dispatched again", async () => {
    // A dispatch takes its ordinal synchronously, and a second one of the same call logs so at once:
    // the oracle for "dispatched again", since nobody awaits an early dispatch the step drops.
    const again: unknown[] = [];
    const dispatcher = { ...quiet, logger: { warn: (message: string, fields?: object) => void (message.includes("more than once") && again.push(fields)) } };
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher });
    const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    const turn = once.forTurn({ conversationId: "chat_immediate", messages, dispatchAt: "tool-call" });
    const part = { type: "tool-call", toolCallId: "call_a", toolName: "create_invoice", input: ACME };
    const options = { toolCallId: "call_a", messages };
    // The order such an AI SDK drives: each part to onChunk, then at once to execute.
    turn.onChunk({ chunk: part });
    const first = await turn.tools.create_invoice.execute!(ACME, options);
    turn.onChunk({ chunk: part });
    const second = await turn.tools.create_invoice.execute!(ACME, options);
    expect(again).toEqual([]);
    expect(payments.effects().map((e) => e.kind)).toEqual(["invoice_created"]);
    expect(second).toEqual(first);
  });
});

describe("a response that ended at the output limit right after a call (response.incomplete)", () => {
  it("AISDK-8 what the rule rests on: finish reason length, no error, the call left without a result (run anyway at its tool-call part, and outcomeOf says so), and a later request that keeps it is refused", async () => {
    const incomplete = { type: "response.incomplete", response: { id: "resp_1", status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, output: [], usage: { input_tokens: 1, output_tokens: 1 } } };
    const model = scripted(() => [created, added(0, "call_a"), done(0, "call_a"), incomplete]);
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    const turn = once.forTurn({ conversationId: "chat_length", messages, dispatchAt: "tool-call" });
    const result = streamText({ model, messages, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 });
    const parts = await drain(result.fullStream);
    expect(parts.filter((p) => p.type === "error")).toEqual([]);
    expect(parts.find((p) => p.type === "finish")).toMatchObject({ finishReason: "length" });
    expect(outputsOf(parts)).toEqual([]);
    // The invoice was made at the call's tool-call part; the wrapper tells it once the call settled.
    await until(() => turn.outcomeOf("call_a") !== undefined);
    expect(turn.outcomeOf("call_a")!.result).toEqual({ invoice: payments.effects()[0]!.resourceId, amount: 12_500 });
    // Kept, the response's call has no result: the next message's request is refused before it is sent.
    const kept: ModelMessage[] = [...messages, ...(await result.response).messages, { role: "user", content: "thanks" }];
    const next = once.forTurn({ conversationId: "chat_length", messages: kept });
    const after = await drain(streamText({ model, messages: kept, tools: next.tools, maxRetries: 0, onError: () => {} }).fullStream);
    expect(after.find((p) => p.type === "error")).toMatchObject({ error: { name: "AI_MissingToolResultsError" } });
    expect(payments.effects()).toHaveLength(1);
  });
});
