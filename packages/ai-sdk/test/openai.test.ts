import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger } from "@dispatch-once/core";
import { call, respond, scriptFromPlans, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { generateText, stepCountIs, streamText, tool, type ModelMessage } from "ai";
import { z } from "zod";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet, until } from "./helpers.js";

let mock: MockOpenAI;
let payments: MockPaymentsServer;
beforeEach(async () => {
  payments = await startMockPayments();
  mock = await startMockOpenAI({
    seed: "ai-sdk-openai",
    script: scriptFromPlans({ "bill acme": respond(call("create_invoice", { customer: "acme", amount: 12_500 })) }),
  });
});
afterEach(async () => {
  await mock.close();
  await payments.close();
});

// `openai.responses(...)`: the Responses API, which the mock serves (a call is complete at output_item.done).
const model = () => createOpenAI({ baseURL: mock.baseURL, apiKey: "test" }).responses("gpt-5");
const firstTurn: ModelMessage[] = [{ role: "user", content: "bill acme" }];

describe("through @ai-sdk/openai (Responses API) against the mock OpenAI provider", () => {
  it("the incident: without the wrapper, a regenerate of the turn bills twice", async () => {
    const tools = { create_invoice: invoiceTool(payments) };
    for (let attempt = 0; attempt < 2; attempt++) {
      await drain(streamText({ model: model(), messages: firstTurn, tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
    }
    expect(payments.effects().length).toBe(2);
  });

  it("AISDK-2: a regenerate of the same turn bills once and answers the stored result", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const outputs: unknown[][] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const turn = once.forTurn({ conversationId: "chat_o", messages: firstTurn });
      outputs.push(outputsOf(await drain(streamText({ model: model(), messages: firstTurn, tools: turn.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream)));
    }
    expect(payments.effects().length).toBe(1);
    expect(outputs[0]).toHaveLength(1);
    expect(outputs[1]).toEqual(outputs[0]);
  });

  it("AISDK-4: at the tool-call part, a stream cut before response.completed and retried bills once", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const attempt = () => {
      const turn = once.forTurn({ conversationId: "chat_o", messages: firstTurn, dispatchAt: "tool-call" });
      return drain(streamText({ model: model(), messages: firstTurn, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
    };
    // The connection dies after the call's output_item.done, before response.completed.
    mock.queueFault({ kind: "reset", at: { beforeCompleted: true } });
    const cutParts = await attempt();
    expect(cutParts.some((p) => p.type === "error")).toBe(true);
    expect(outputsOf(cutParts)).toEqual([]);
    // The call was started from its tool-call part, so the invoice exists although the step never finished.
    await until(() => payments.effects().length === 1);
    const retried = await attempt();
    expect(payments.effects().length).toBe(1);
    expect(outputsOf(retried)).toEqual([{ invoice: payments.effects()[0]!.resourceId, amount: 12_500 }]);
  });
});

describe("identity: a retried response that re-words a free-text field", () => {
  // The mock re-words `note` on every response after the first to the same request, as a model does.
  const noted = { customer: "acme", amount: 12_500, note: "March deliveries" };
  const notedTool = () => {
    const api = createPaymentsClient({ baseURL: payments.url, token: "acct_ai" });
    return tool({
      description: "Bill a customer",
      inputSchema: z.object({ customer: z.string(), amount: z.number().int(), note: z.string() }),
      execute: async ({ customer, amount }) => ({ invoice: (await api.createInvoice({ customer, amount, currency: "EUR" })).body.id }),
    });
  };
  const regenerateTwice = async (identity: { create_invoice?: readonly string[] }) => {
    const once = createOnceTools({ tools: { create_invoice: notedTool() }, effects: { create_invoice: "unkeyed_write" }, identity, ledger: new MemoryLedger(), dispatcher: quiet });
    const messages: ModelMessage[] = [{ role: "user", content: "bill with a note" }];
    for (let attempt = 0; attempt < 2; attempt++) {
      const turn = once.forTurn({ conversationId: "chat_id", messages });
      await drain(streamText({ model: model(), messages, tools: turn.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
    }
    const notes = mock.requests.filter((r) => r.calls.length > 0).map((r) => r.calls[0]!.arguments["note"]);
    expect(notes[0]).not.toBe(notes[1]);
  };
  beforeEach(() => mock.close().then(async () => {
    mock = await startMockOpenAI({ seed: "ai-sdk-identity", script: scriptFromPlans({ "bill with a note": respond(call("create_invoice", noted, { reword: ["note"] })) }) });
  }));

  it("KEY-1: with every field in the identity (the default), the re-worded call is a new call and bills again", async () => {
    await regenerateTwice({});
    expect(payments.effects().length).toBe(2);
  });

  it("LEDGER-21: with identity naming the fields that identify the call, the regenerate bills once", async () => {
    await regenerateTwice({ create_invoice: ["customer", "amount"] });
    expect(payments.effects().length).toBe(1);
  });

  it("IDENT-3: the turn says which request a re-worded call was answered with, so the app shows what was done", async () => {
    const once = createOnceTools({ tools: { create_invoice: notedTool() }, effects: { create_invoice: "unkeyed_write" }, identity: { create_invoice: ["customer", "amount"] }, ledger: new MemoryLedger(), dispatcher: quiet });
    const messages: ModelMessage[] = [{ role: "user", content: "bill with a note" }];
    const seen: { input: unknown; outcome: unknown }[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const turn = once.forTurn({ conversationId: "chat_shown", messages });
      const parts = await drain(streamText({ model: model(), messages, tools: turn.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
      for (const part of parts) if (part.type === "tool-result") seen.push({ input: part.input, outcome: turn.outcomeOf(part.toolCallId) });
    }
    expect(payments.effects().length).toBe(1);
    const [first, second] = seen;
    expect(first!.outcome).toMatchObject({ replayed: false, toolName: "create_invoice", ordinal: 0 });
    expect(first!.outcome).not.toHaveProperty("storedRequest");
    // The regenerate re-worded the note: its part's input is not what was billed; the outcome says what was.
    expect((second!.input as { note: string }).note).not.toBe((first!.input as { note: string }).note);
    expect(second!.outcome).toMatchObject({ replayed: true, storedRequest: first!.input });
  });

  it("an empty identity is refused, as core refuses it in a tool definition", () => {
    expect(() => createOnceTools({ tools: { create_invoice: notedTool() }, effects: { create_invoice: "unkeyed_write" }, identity: { create_invoice: [] }, ledger: new MemoryLedger() })).toThrow(/empty identity/);
  });
});

describe("generateText through @ai-sdk/openai (non-streaming Responses API)", () => {
  it("AISDK-2: a regenerate with generateText bills once", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const outputs: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const forTurn = once.forTurn({ conversationId: "chat_og", messages: firstTurn });
      const result = await generateText({ model: model(), messages: firstTurn, tools: forTurn.tools, stopWhen: stepCountIs(3), maxRetries: 0 });
      outputs.push(result.steps.flatMap((step) => step.toolResults.map((r) => r.output)));
    }
    expect(payments.effects().length).toBe(1);
    expect(outputs[1]).toEqual(outputs[0]);
  });
});

describe("the request's abortSignal (the client went away while a tool ran)", () => {
  it("AISDK-2: a claimed write is not aborted by it; the retry gets the invoice the run made", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const api = createPaymentsClient({ baseURL: payments.url, token: "acct_ai" });
    let runs = 0;
    // A careful tool: it stops its downstream request when its abortSignal aborts (as fetch does).
    const createInvoice = tool({
      inputSchema: z.object({ customer: z.string(), amount: z.number().int() }),
      execute: async ({ customer, amount }, { abortSignal }) => {
        runs++;
        await gate;
        abortSignal?.throwIfAborted();
        return { invoice: (await api.createInvoice({ customer, amount, currency: "EUR" })).body.id, amount };
      },
    });
    const settled: string[] = [];
    const once = createOnceTools({
      tools: { create_invoice: createInvoice },
      effects: { create_invoice: "unkeyed_write" },
      ledger: new MemoryLedger(),
      dispatcher: { ...quiet, onEvent: (event) => void (event.type === "run_finished" && settled.push(event.type)) },
    });
    const request = (abortSignal?: AbortSignal) => {
      const forTurn = once.forTurn({ conversationId: "chat_abort", messages: firstTurn });
      return drain(streamText({ model: model(), messages: firstTurn, tools: forTurn.tools, stopWhen: stepCountIs(3), maxRetries: 0, ...(abortSignal ? { abortSignal } : {}) }).fullStream);
    };
    // The app passes the HTTP request's signal to streamText; the browser disconnects while the tool runs.
    const controller = new AbortController();
    const first = request(controller.signal);
    await until(() => runs === 1);
    controller.abort();
    open();
    await first;
    await until(() => settled.length === 1);
    expect(payments.effects().length).toBe(1);
    const retried = await request();
    expect(retried.filter((p) => p.type === "tool-error")).toEqual([]);
    expect(outputsOf(retried)).toEqual([{ invoice: payments.effects()[0]!.resourceId, amount: 12_500 }]);
    expect(runs).toBe(1);
  });
});
