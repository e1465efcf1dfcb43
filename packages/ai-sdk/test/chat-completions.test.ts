import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { MemoryLedger } from "@dispatch-once/core";
import { call, reasoning, respond, scriptFromPlans, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, tool, wrapLanguageModel, type LanguageModel, type ModelMessage, type ToolCallRepairFunction, type ToolSet } from "ai";
import { z } from "zod";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools, spliceGuard } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet, settled, until } from "./helpers.js";

/*
 * The AI SDK over Chat Completions models (`createOpenAI(...).chat(...)` and
 * `@ai-sdk/openai-compatible`, what vLLM, Groq, Together, Ollama, DeepSeek and OpenRouter are used
 * through), against the mock's `POST /v1/chat/completions`. Both providers (their shared
 * `StreamingToolCallTracker`) make every call's `tool-call` part at the end of the body, right
 * before the `finish` part, also when the body ended without a `finish_reason`.
 */
let mock: MockOpenAI;
let payments: MockPaymentsServer;
beforeEach(async () => {
  payments = await startMockPayments();
  mock = await startMockOpenAI({
    seed: "ai-sdk-chat",
    script: scriptFromPlans({
      "bill acme": respond(call("create_invoice", { customer: "acme", amount: 12_500 })),
      "bill acme twice": respond(call("create_invoice", { customer: "acme", amount: 5 }), call("create_invoice", { customer: "acme", amount: 5 })),
      "close acme": respond(call("close_accounts", { customer: "acme" })),
    }),
  });
});
afterEach(async () => {
  await mock.close();
  await payments.close();
});

const models: [string, () => LanguageModel][] = [
  ["@ai-sdk/openai .chat()", () => createOpenAI({ baseURL: mock.baseURL, apiKey: "test" }).chat("gpt-4.1")],
  ["@ai-sdk/openai-compatible", () => createOpenAICompatible({ name: "vllm", baseURL: mock.baseURL, apiKey: "test" }).chatModel("qwen3")],
];
const ask = (text: string): ModelMessage[] => [{ role: "user", content: text }];

describe.each(models)("Chat Completions through %s", (_name, model) => {
  it("AISDK-2: a regenerate of the turn bills once, and a request goes to /v1/chat/completions", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const outputs: unknown[][] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const turn = once.forTurn({ conversationId: "chat_c", messages: ask("bill acme") });
      outputs.push(outputsOf(await drain(streamText({ model: model(), messages: ask("bill acme"), tools: turn.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream)));
    }
    expect(mock.requests.every((r) => r.api === "chat.completions")).toBe(true);
    expect(payments.effects()).toHaveLength(1);
    expect(outputs[1]).toEqual(outputs[0]);
  });

  it("AISDK-4: at the tool-call part, a stream cut before finish_reason and retried bills once; identical calls of one response bill twice, once each", async () => {
    const ledger = new MemoryLedger();
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
    const attempt = () => {
      const turn = once.forTurn({ conversationId: "chat_c", messages: ask("bill acme twice"), dispatchAt: "tool-call" });
      return drain(streamText({ model: model(), messages: ask("bill acme twice"), tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
    };
    // A body that ends cleanly after both calls, before finish_reason: the provider still makes both tool-call parts.
    mock.queueFault({ kind: "clean_close", at: { beforeCompleted: true } });
    const cut = await attempt();
    expect(outputsOf(cut)).toEqual([]);
    await settled(ledger, "chat_c");
    expect(payments.effects()).toHaveLength(2);
    const retried = await attempt();
    expect(payments.effects()).toHaveLength(2);
    expect(outputsOf(retried)).toHaveLength(2);
  });

  it("AISDK-4: a call is made at the body's end, not when its arguments parse: held after the next call's first fragment, nothing has run; cut there and retried, each call bills once", async () => {
    const ledger = new MemoryLedger();
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
    const seen: string[] = [];
    const attempt = () => {
      const turn = once.forTurn({ conversationId: "chat_h", messages: ask("bill acme twice"), dispatchAt: "tool-call" });
      const onChunk: typeof turn.onChunk = (event) => {
        seen.push(event.chunk.type);
        turn.onChunk(event);
      };
      return drain(streamText({ model: model(), messages: ask("bill acme twice"), tools: turn.tools, onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
    };
    // Call 0's arguments are whole and call 1 has begun (where the openai package's runner makes call 0 final).
    mock.queueFault({ kind: "hold", at: { call: 1, afterFragment: 0 } });
    const first = attempt();
    await mock.waitForHold(1, { timeoutMs: 10_000 });
    await until(() => seen.filter((t) => t === "tool-input-start").length === 2);
    expect(seen).not.toContain("tool-call");
    mock.cutNow(1, "reset");
    expect(outputsOf(await first)).toEqual([]);
    expect(seen).not.toContain("tool-call");
    expect(payments.effects()).toHaveLength(0);
    const retried = await attempt();
    expect(outputsOf(retried)).toHaveLength(2);
    expect(payments.effects()).toHaveLength(2);
  });

  it("AISDK-8, AISDK-14: finish_reason length after a whole call: not executed by the step, dispatched at its part, and the request's unansweredCalls names it", async () => {
    const ledger = new MemoryLedger();
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
    const turn = once.forTurn({ conversationId: "chat_l", messages: ask("bill acme"), dispatchAt: "tool-call" });
    mock.queueFault({ kind: "incomplete_event", at: { beforeCompleted: true } });
    const parts = await drain(streamText({ model: model(), messages: ask("bill acme"), tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
    expect(parts.find((p) => p.type === "finish")).toMatchObject({ finishReason: "length" });
    expect(outputsOf(parts)).toEqual([]);
    await settled(ledger, "chat_l");
    expect(payments.effects()).toHaveLength(1);
    const { calls } = await turn.unansweredCalls();
    expect(calls).toMatchObject([{ name: "create_invoice", effect: "happened", input: { customer: "acme", amount: 12_500 } }]);
  });

  it("AISDK-7: a regenerate that re-words a field outside the identity is answered from the ledger", async () => {
    const reworded = await startMockOpenAI({ seed: "ai-sdk-chat-reword", script: scriptFromPlans({ "bill acme": respond(call("create_invoice", { customer: "acme", amount: 12_500, note: "March deliveries" }, { reword: ["note"] })) }) });
    try {
      const noted = tool({
        description: "Bill a customer",
        inputSchema: z.object({ customer: z.string(), amount: z.number().int(), note: z.string() }),
        execute: async ({ customer, amount }, options) => invoiceTool(payments).execute!({ customer, amount }, options),
      });
      const once = createOnceTools({ tools: { create_invoice: noted }, effects: { create_invoice: "unkeyed_write" }, identity: { create_invoice: ["customer", "amount"] }, ledger: new MemoryLedger(), dispatcher: quiet });
      const notes: unknown[] = [];
      for (let attempt = 0; attempt < 2; attempt++) {
        const turn = once.forTurn({ conversationId: "chat_w", messages: ask("bill acme") });
        const m = model === models[0]![1] ? createOpenAI({ baseURL: reworded.baseURL, apiKey: "test" }).chat("gpt-4.1") : createOpenAICompatible({ name: "vllm", baseURL: reworded.baseURL, apiKey: "test" }).chatModel("qwen3");
        const parts = await drain(streamText({ model: m, messages: ask("bill acme"), tools: turn.tools, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
        notes.push(parts.filter((p) => p.type === "tool-call").map((p) => (p as { input: { note: string } }).input.note)[0]);
      }
      expect(notes[0]).not.toEqual(notes[1]);
      expect(payments.effects()).toHaveLength(1);
    } finally {
      await reworded.close();
    }
  });
});

/*
 * AISDK-8, AISDK-16: a body a proxy closed cleanly in a call's arguments. The provider makes the cut
 * call's tool-call part all the same; its arguments do not parse, the AI SDK answers it with a
 * tool-error at once and, every call of the step having an output, sends step 2 with it. Step 2
 * finishes "stop", and so does the whole stream: an app that reads the last finish keeps a turn
 * whose first step the stream never finished (the payment not made, "Done." said).
 */
describe.each(models)("a body closed cleanly in a call's arguments, through %s", (_name, model) => {
  const send = async (m: LanguageModel) => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const turn = once.forTurn({ conversationId: "chat_u", messages: ask("bill acme") });
    mock.queueFault({ kind: "clean_close", at: { call: 0, afterFragment: 1 } });
    const before = mock.requests.length;
    const parts = await drain(streamText({ model: m, messages: ask("bill acme"), tools: turn.tools, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
    return { parts, requests: mock.requests.length - before, steps: parts.filter((p) => p.type === "finish-step").map((p) => (p as { finishReason: string }).finishReason) };
  };

  it("unguarded: the truncated call gets a tool-error, the loop sends step 2, and the stream finishes stop", async () => {
    const { parts, requests, steps } = await send(model());
    expect(requests).toBe(2);
    expect(steps).toEqual([expect.stringMatching(/^(other|error)$/), "stop"]);
    expect(parts.find((p) => p.type === "finish")).toMatchObject({ finishReason: "stop" });
    expect(parts.some((p) => p.type === "tool-error")).toBe(true);
  });

  it("AISDK-16: spliceGuard fails the step at the body's end (no finish_reason): no tool-call part, no step 2, the stream finishes error", async () => {
    const { parts, requests, steps } = await send(wrapLanguageModel({ model: model() as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: spliceGuard() }));
    expect(parts.find((p) => p.type === "error")).toMatchObject({ error: { code: "stream_incomplete" } });
    expect(parts.filter((p) => p.type === "tool-call" || p.type === "tool-error")).toEqual([]);
    expect(requests).toBe(1);
    expect(steps).toEqual(["error"]);
    expect(payments.effects()).toEqual([]);
  });
});

describe("Gemini's compatibility layer: tool_calls fragments without index, each call whole in one fragment", () => {
  const chunk = (delta: object, finish: string | null = null) => ({ id: "chatcmpl-g", object: "chat.completion.chunk", created: 1, model: "gemini-2.5-flash", choices: [{ index: 0, delta, finish_reason: finish }] });
  const whole = (id: string, args: object) => ({ id, type: "function", function: { name: "create_invoice", arguments: JSON.stringify(args) } });
  // Two identical calls (the user asked for two invoices), then the loop's next step answers.
  const gemini = () => {
    let n = 0;
    return (async () => {
      const chunks =
        n++ % 2 === 0
          ? [chunk({ role: "assistant", tool_calls: [whole(`call_${n}a`, { customer: "acme", amount: 5 })] }), chunk({ tool_calls: [whole(`call_${n}b`, { customer: "acme", amount: 5 })] }), chunk({}, "tool_calls")]
          : [chunk({ content: "Done." }, "stop")];
      return new Response(chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join("") + "data: [DONE]\n\n", { headers: { "content-type": "text/event-stream" } });
    }) as typeof globalThis.fetch;
  };
  const send = async (once: ReturnType<typeof createOnceTools>, model: LanguageModel) => {
    const turn = once.forTurn({ conversationId: "chat_g", messages: ask("bill acme 5 twice"), dispatchAt: "tool-call" });
    return drain(streamText({ model, messages: ask("bill acme 5 twice"), tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
  };

  it("@ai-sdk/openai-compatible: two calls, two invoices; a regenerate meets both keys", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const model = createOpenAICompatible({ name: "gemini", baseURL: "http://gemini.invalid/v1", apiKey: "test", fetch: gemini() }).chatModel("gemini-2.5-flash");
    const first = await send(once, model);
    const again = await send(once, model);
    expect(outputsOf(first)).toHaveLength(2);
    expect(outputsOf(again)).toEqual(outputsOf(first));
    expect(payments.effects()).toHaveLength(2);
  });

  it("@ai-sdk/openai .chat() refuses such a chunk (its schema wants index): the step fails, nothing runs", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const parts = await send(once, createOpenAI({ apiKey: "test", fetch: gemini() }).chat("gemini-2.5-flash"));
    expect(parts.some((p) => p.type === "error")).toBe(true);
    expect(outputsOf(parts)).toEqual([]);
    expect(payments.effects()).toHaveLength(0);
  });
});

describe("DeepSeek's thinking (reasoning_content) in a tool loop: what the README's advice rests on", () => {
  it("@ai-sdk/openai-compatible sends the step's reasoning_content back with its calls; @ai-sdk/openai .chat() drops it (DeepSeek refuses such a request)", async () => {
    const thinking = await startMockOpenAI({ seed: "ai-sdk-chat-thinking", script: scriptFromPlans({ "bill acme": respond(reasoning("Acme is owed an invoice."), call("create_invoice", { customer: "acme", amount: 12_500 })) }) });
    try {
      const sentBack: unknown[] = [];
      for (const m of [createOpenAI({ baseURL: thinking.baseURL, apiKey: "test" }).chat("deepseek-reasoner"), createOpenAICompatible({ name: "deepseek", baseURL: thinking.baseURL, apiKey: "test" }).chatModel("deepseek-reasoner")]) {
        const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
        const turn = once.forTurn({ conversationId: "chat_t", messages: ask("bill acme") });
        await drain(streamText({ model: m, messages: ask("bill acme"), tools: turn.tools, stopWhen: stepCountIs(2), maxRetries: 0 }).fullStream);
        const next = thinking.requests.at(-1)!.body as { messages: { role: string; reasoning_content?: string }[] };
        sentBack.push(next.messages.find((message) => message.role === "assistant")?.reasoning_content);
      }
      expect(sentBack).toEqual([undefined, "Acme is owed an invoice."]);
    } finally {
      await thinking.close();
    }
  });
});

describe.each(models)("a body cut after a call's name, before its arguments, through %s", (_name, model) => {
  // A tool whose arguments are all optional: {} closes every account of the workspace.
  const closeAccounts = (ran: unknown[]) =>
    tool({
      description: "Close a customer's accounts (every customer's when none is named)",
      inputSchema: z.object({ customer: z.string().optional() }),
      execute: async (input) => {
        ran.push(input);
        return { closed: input.customer ?? "every account" };
      },
    });

  it("AISDK-4: the call is not dispatched at its tool-call part with {} (the AI SDK's reading of no arguments); the retry closes acme's accounts only", async () => {
    const ran: unknown[] = [];
    const once = createOnceTools({ tools: { close_accounts: closeAccounts(ran) }, effects: { close_accounts: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const attempt = () => {
      const turn = once.forTurn({ conversationId: "chat_x", messages: ask("close acme"), dispatchAt: "tool-call" });
      return drain(streamText({ model: model(), messages: ask("close acme"), tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
    };
    // The chunk that names the call (its arguments "") arrives, then the body ends cleanly.
    mock.queueFault({ kind: "clean_close", at: { call: 0, afterFragment: 0 } });
    const cut = await attempt();
    expect(cut.find((p) => p.type === "finish")).toMatchObject({ finishReason: expect.not.stringMatching(/^(stop|tool-calls)$/) });
    const retried = await attempt();
    expect(outputsOf(retried)).toEqual([{ closed: "acme" }]);
    expect(ran).toEqual([{ customer: "acme" }]);
  });

  it("AISDK-4: a call cut in its arguments and then repaired (AISDK-11) is not dispatched at its tool-call part either", async () => {
    const ran: unknown[] = [];
    const once = createOnceTools({ tools: { close_accounts: closeAccounts(ran) }, effects: { close_accounts: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    // A repair that drops arguments it cannot read (a JSON repair that keeps only whole members does the same here).
    const repairs: string[] = [];
    const dropUnreadable: ToolCallRepairFunction<ToolSet> = async ({ toolCall }) => {
      repairs.push(toolCall.input);
      return { ...toolCall, input: "{}" };
    };
    const attempt = () => {
      const turn = once.forTurn({ conversationId: "chat_r", messages: ask("close acme"), dispatchAt: "tool-call" });
      return drain(
        streamText({ model: model(), messages: ask("close acme"), tools: turn.tools, onChunk: turn.onChunk, experimental_repairToolCall: turn.repairToolCall(dropUnreadable), stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream,
      );
    };
    // Its first argument piece arrives, then the body ends cleanly.
    mock.queueFault({ kind: "clean_close", at: { call: 0, afterFragment: 1 } });
    await attempt();
    expect(repairs).toHaveLength(1);
    const retried = await attempt();
    expect(outputsOf(retried)).toEqual([{ closed: "acme" }]);
    expect(ran).toEqual([{ customer: "acme" }]);
  });

  it("AISDK-4: a call cut after its name whose {} the schema refuses, repaired into arguments, is not dispatched at its tool-call part", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    // A repair that asks the model again: it answers with arguments of its own.
    const reask: ToolCallRepairFunction<ToolSet> = async ({ toolCall }) => ({ ...toolCall, input: JSON.stringify({ customer: "acme", amount: 99 }) });
    const attempt = () => {
      const turn = once.forTurn({ conversationId: "chat_q", messages: ask("bill acme"), dispatchAt: "tool-call" });
      return drain(
        streamText({ model: model(), messages: ask("bill acme"), tools: turn.tools, onChunk: turn.onChunk, experimental_repairToolCall: turn.repairToolCall(reask), stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream,
      );
    };
    mock.queueFault({ kind: "clean_close", at: { call: 0, afterFragment: 0 } });
    await attempt();
    const retried = await attempt();
    expect(outputsOf(retried)).toHaveLength(1);
    expect(payments.effects().map((e) => e.payload.amount)).toEqual([12_500]);
  });
});

/*
 * AISDK-16 on Chat Completions: a proxy that sent the request again after its upstream died splices
 * the new completion into the body after the first's acme call. The tracker opens the spliced
 * completion's acme call at index 0 as another call (the held one's arguments are whole, and the
 * new fragment names a call and starts an object, as servers that send each call whole do), so unguarded
 * "bill acme 5 and bob 7" runs acme twice. Every chunk names its completion (`id`); `object` is not
 * read by the AI SDK, and a server may leave it out.
 */
describe("a second completion spliced into a Chat Completions body", () => {
  const fragment = (id: string, index: number, callId: string | undefined, name: string | undefined, args: string, object: boolean) => ({
    id,
    ...(object ? { object: "chat.completion.chunk" } : {}),
    created: 1,
    model: "m",
    choices: [{ index: 0, delta: { tool_calls: [{ index, ...(callId !== undefined ? { id: callId, type: "function" } : {}), function: { ...(name !== undefined ? { name } : {}), arguments: args } }] }, finish_reason: null }],
  });
  const body = (object: boolean) => [
    fragment("chatcmpl-1", 0, "call_a", "create_invoice", "", object),
    fragment("chatcmpl-1", 0, undefined, undefined, '{"customer":"acme","amount":5}', object),
    // The proxy's second upstream request, from its start:
    fragment("chatcmpl-2", 0, "call_b", "create_invoice", '{"customer":"acme","amount":5}', object),
    fragment("chatcmpl-2", 1, "call_c", "create_invoice", '{"customer":"bob","amount":7}', object),
    { id: "chatcmpl-2", ...(object ? { object: "chat.completion.chunk" } : {}), created: 1, model: "m", choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
  ];
  const sse = (chunks: object[]) => chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join("") + "data: [DONE]\n\n";
  // One request spliced, every later one (the loop's next step, a re-send) a plain answer.
  const spliced = (object: boolean) => {
    let n = 0;
    return (async () =>
      new Response(n++ === 0 ? sse(body(object)) : sse([{ id: `chatcmpl-${n + 2}`, object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "Done." }, finish_reason: "stop" }] }]), {
        headers: { "content-type": "text/event-stream" },
      })) as typeof globalThis.fetch;
  };
  const providers: [string, (fetch: typeof globalThis.fetch) => LanguageModel][] = [
    ["@ai-sdk/openai .chat()", (fetch) => createOpenAI({ apiKey: "test", fetch }).chat("gpt-4.1")],
    ["@ai-sdk/openai-compatible", (fetch) => createOpenAICompatible({ name: "vllm", baseURL: "http://vllm.invalid/v1", apiKey: "test", fetch }).chatModel("qwen3")],
  ];
  const paid = () => payments.effects().map((e) => `${String(e.payload["customer"])} ${String(e.payload["amount"])}`);
  const run = async (model: LanguageModel) => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const turn = once.forTurn({ conversationId: "chat_s", messages: ask("bill acme 5 and bob 7") });
    return drain(streamText({ model, messages: ask("bill acme 5 and bob 7"), tools: turn.tools, stopWhen: stepCountIs(2), maxRetries: 0, onError: () => {} }).fullStream);
  };

  it.each(providers)("a limit, %s: a fragment at a held index that names another call (a new id, a whole object) opens a second call, guarded or not (Ollama sends parallel calls so)", async (_name, make) => {
    const chunks = [
      fragment("chatcmpl-1", 0, "call_a", "create_invoice", '{"customer":"acme","amount":5}', true),
      fragment("chatcmpl-1", 0, "call_b", "create_invoice", '{"customer":"bob","amount":7}', true),
      { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
    ];
    let n = 0;
    const fetch = (async () => new Response(n++ === 0 ? sse(chunks) : sse([{ id: "chatcmpl-9", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "Done." }, finish_reason: "stop" }] }]), { headers: { "content-type": "text/event-stream" } })) as typeof globalThis.fetch;
    await run(wrapLanguageModel({ model: make(fetch) as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: spliceGuard() }));
    expect(paid()).toEqual(["acme 5", "bob 7"]);
  });

  it.each(providers)("unguarded, %s runs the spliced completion's acme call beside the first's", async (_name, make) => {
    await run(make(spliced(true)));
    expect(paid()).toEqual(["acme 5", "acme 5", "bob 7"]);
  });

  it.each(providers.flatMap(([name, make]) => [true, false].map((object) => [`${name}, chunks ${object ? "with" : "without"} object`, make, object] as const)))(
    "AISDK-16: spliceGuard fails the stream at the second completion's first chunk through %s",
    async (_name, make, object) => {
      const parts = await run(wrapLanguageModel({ model: make(spliced(object)) as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: spliceGuard() }));
      expect(parts.find((p) => p.type === "error")).toMatchObject({ error: { code: "stream_incomplete" } });
      expect(parts.find((p) => p.type === "finish-step")).toMatchObject({ finishReason: "error" });
      expect(paid()).toEqual([]);
    },
  );
});
