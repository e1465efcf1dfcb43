import { createAnthropic, anthropic } from "@ai-sdk/anthropic";
import { createOpenAI, openai } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { isDispatchOnceError, MemoryLedger } from "@dispatch-once/core";
import { call, respond, scriptFromPlans as openaiScript, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, wrapLanguageModel, type LanguageModel, type ModelMessage, type ToolSet } from "ai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools, providerToolsGuard } from "../src/index.js";
import { drain, invoiceTool, quiet } from "./helpers.js";

/*
 * STREAM-19 / AISDK-15: a tool the provider runs itself (a code interpreter, a remote MCP server,
 * Anthropic's code execution or MCP connector) runs inside the response, outside the ledger, once
 * more in each retried attempt of a cut stream. The AI SDK lets an app put one in `tools` beside
 * `turn.tools`; the guard refuses each route before the request is sent.
 */
let mock: MockOpenAI;
let provider: MockProvider;
let payments: MockPaymentsServer;
beforeAll(async () => {
  payments = await startMockPayments();
  mock = await startMockOpenAI({ seed: "ai-sdk-provider-tools", script: openaiScript({ "bill acme": respond(call("create_invoice", { customer: "acme", amount: 12_500 })) }) });
  provider = await startMockProvider({ seed: "ai-sdk-provider-tools", script: scriptFromPlans({ "bill acme": turn(toolUse("create_invoice", { customer: "acme", amount: 12_500 })) }) });
});
afterAll(async () => {
  await mock.close();
  await provider.close();
  await payments.close();
});
beforeEach(() => {
  (mock.requests as unknown[]).length = 0;
  (provider.requests as unknown[]).length = 0;
});

const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
const gpt = () => createOpenAI({ baseURL: mock.baseURL, apiKey: "test" }).responses("gpt-5");
const claude = () => createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5");
const guarded = (model: LanguageModel, providerTools?: "allow-reads") =>
  wrapLanguageModel({ model: model as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: providerToolsGuard(providerTools === undefined ? {} : { providerTools }) });

function turnTools() {
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
  return once.forTurn({ conversationId: "chat_provider_tools", messages }).tools;
}

// Record<string, unknown>: the providers' tools are typed against their own copy of @ai-sdk/provider-utils.
async function run(model: LanguageModel, tools: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const parts = await drain(streamText({ model, messages, tools: tools as ToolSet, stopWhen: stepCountIs(1), maxRetries: 0, onError: () => {}, ...extra }).fullStream);
  return parts.filter((p) => p.type === "error").map((p) => (p as { error: unknown }).error);
}

const sentTools = () => mock.requests.map((r) => (r.body as { tools?: { type: string }[] }).tools?.map((t) => t.type));
const refusal = (errors: unknown[]) => {
  expect(errors).toHaveLength(1);
  expect(isDispatchOnceError(errors[0], "invalid_argument")).toBe(true);
  return (errors[0] as { field: string; message: string });
};

describe("a provider-run tool beside turn.tools (OpenAI Responses API)", () => {
  it("without the guard, the code interpreter reaches the request: the hole", async () => {
    await run(gpt(), { ...turnTools(), code_interpreter: openai.tools.codeInterpreter() });
    expect(sentTools()).toEqual([["function", "code_interpreter"]]);
  });

  it("with the guard, the code interpreter is refused naming the tool, and nothing is sent", async () => {
    const { field, message } = refusal(await run(guarded(gpt()), { ...turnTools(), code_interpreter: openai.tools.codeInterpreter() }));
    expect(field).toBe("params.tools[1] (code_interpreter)");
    expect(message).toContain('"openai.code_interpreter"');
    expect(mock.requests).toEqual([]);
  });

  it("a remote MCP server is refused under allow-reads too", async () => {
    const { field } = refusal(await run(guarded(gpt(), "allow-reads"), { ...turnTools(), payments: openai.tools.mcp({ serverLabel: "payments", serverUrl: "https://mcp.example/payments" }) }));
    expect(field).toBe("params.tools[1] (payments)");
    expect(mock.requests).toEqual([]);
  });

  it("web search (a read) is refused by default and sent under allow-reads", async () => {
    refusal(await run(guarded(gpt()), { ...turnTools(), web_search: openai.tools.webSearch() }));
    expect(mock.requests).toEqual([]);
    await run(guarded(gpt(), "allow-reads"), { ...turnTools(), web_search: openai.tools.webSearch() });
    expect(sentTools()).toEqual([["function", "web_search"]]);
  });

  it("without the guard, a toolChoice naming code_interpreter reaches the request as a hosted choice; with it, refused", async () => {
    await run(gpt(), turnTools(), { toolChoice: { type: "tool", toolName: "code_interpreter" } });
    expect(mock.requests.map((r) => (r.body as { tool_choice?: unknown }).tool_choice)).toEqual([{ type: "code_interpreter" }]);
    (mock.requests as unknown[]).length = 0;
    const { field } = refusal(await run(guarded(gpt()), turnTools(), { toolChoice: { type: "tool", toolName: "code_interpreter" } }));
    expect(field).toBe("params.toolChoice");
    expect(mock.requests).toEqual([]);
  });

  it("the app's own function tools pass the guard unchanged", async () => {
    expect(await run(guarded(gpt()), turnTools(), { toolChoice: { type: "tool", toolName: "create_invoice" } })).toEqual([]);
    expect(sentTools()).toEqual([["function"]]);
  });
});

describe("Anthropic routes (Messages API)", () => {
  it("without the guard, code execution and the MCP connector reach the request: the hole", async () => {
    await run(claude(), { ...turnTools(), code_execution: anthropic.tools.codeExecution_20250825() }, { providerOptions: { anthropic: { mcpServers: [{ type: "url", name: "payments", url: "https://mcp.example/payments" }] } } });
    const body = provider.requests[0]!.body as { tools: { type?: string }[]; mcp_servers?: unknown[] };
    expect(body.tools.map((t) => t.type ?? "custom")).toEqual(["custom", "code_execution_20250825"]);
    expect(body.mcp_servers).toHaveLength(1);
  });

  it("with the guard, code execution is refused; the MCP connector and a container are refused under allow-reads too", async () => {
    expect(refusal(await run(guarded(claude()), { ...turnTools(), code_execution: anthropic.tools.codeExecution_20250825() })).field).toBe("params.tools[1] (code_execution)");
    const mcpServers = [{ type: "url", name: "payments", url: "https://mcp.example/payments" }];
    expect(refusal(await run(guarded(claude(), "allow-reads"), turnTools(), { providerOptions: { anthropic: { mcpServers } } })).field).toBe("params.providerOptions.anthropic.mcpServers");
    expect(refusal(await run(guarded(claude(), "allow-reads"), turnTools(), { providerOptions: { anthropic: { container: { id: "cntr_1" } } } })).field).toBe("params.providerOptions.anthropic.container");
    expect(provider.requests).toEqual([]);
  });

  it("an Anthropic-defined tool the app runs (bash) is no provider-run tool", async () => {
    const bash = anthropic.tools.bash_20250124({ execute: async () => "ok" });
    expect(await run(guarded(claude()), { ...turnTools(), bash })).toEqual([]);
    expect(provider.requests).toHaveLength(1);
  });
});

describe("Chat Completions models (@ai-sdk/openai .chat(), @ai-sdk/openai-compatible)", () => {
  const chat = () => createOpenAI({ baseURL: mock.baseURL, apiKey: "test" }).chat("gpt-4.1");
  // openai-compatible copies its provider options, under the provider's name, into the request body as they are.
  const groq = () => createOpenAICompatible({ name: "groq", baseURL: mock.baseURL, apiKey: "test" }).chatModel("groq/compound");
  const sentBody = () => mock.requests.map((r) => r.body as Record<string, unknown>);
  const compound = { groq: { compound_custom: { tools: { enabled_tools: ["code_interpreter", "browser_automation"] } } } };

  it("a provider-defined tool beside turn.tools is refused, as on the Responses API (the chat model would drop it with a warning)", async () => {
    const error = refusal(await run(guarded(chat()), { ...turnTools(), code_interpreter: openai.tools.codeInterpreter() }));
    expect(error.field).toBe("params.tools[1] (code_interpreter)");
    expect(mock.requests).toHaveLength(0);
  });

  it("without the guard, Groq's compound_custom (code execution, browser automation on Groq's servers) reaches the request body: the hole", async () => {
    await run(groq(), turnTools(), { providerOptions: compound });
    expect(sentBody()[0]!["compound_custom"]).toEqual(compound.groq.compound_custom);
  });

  it("with the guard, compound_custom is refused under allow-reads too, and nothing is sent", async () => {
    expect(refusal(await run(guarded(groq(), "allow-reads"), turnTools(), { providerOptions: compound })).field).toBe("params.providerOptions.groq.compound_custom");
    expect(mock.requests).toHaveLength(0);
  });

  it("web_search_options (a search the provider runs) is refused by default and sent under allow-reads", async () => {
    const search = { providerOptions: { openrouter: { web_search_options: { search_context_size: "low" } } } };
    const openrouter = () => createOpenAICompatible({ name: "openrouter", baseURL: mock.baseURL, apiKey: "test" }).chatModel("openai/gpt-4.1");
    expect(refusal(await run(guarded(openrouter()), turnTools(), search)).field).toBe("params.providerOptions.openrouter.web_search_options");
    expect(mock.requests).toHaveLength(0);
    expect(await run(guarded(openrouter(), "allow-reads"), turnTools(), search)).toEqual([]);
    expect(sentBody()[0]!["web_search_options"]).toEqual({ search_context_size: "low" });
  });
});

describe("a provider-run tool given to createOnceTools", () => {
  it("is refused when the tools are made, naming the tool (a read too: it goes beside turn.tools, under the guard)", () => {
    for (const [name, providerTool] of [["code_interpreter", openai.tools.codeInterpreter()], ["web_search", openai.tools.webSearch()]] as const) {
      const tools = { create_invoice: invoiceTool(payments), [name]: providerTool } as unknown as ToolSet;
      expect(() => createOnceTools({ tools, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet })).toThrow(
        expect.objectContaining({ code: "invalid_argument", field: `options.tools.${name}` }),
      );
    }
  });

  it("an Anthropic-defined tool the app runs is wrapped as the app's own", () => {
    const tools = { bash: anthropic.tools.bash_20250124({ execute: async () => "ok" }) } as unknown as ToolSet;
    const once = createOnceTools({ tools, effects: { bash: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    expect(once.dispatcher.registry.has("bash")).toBe(true);
  });
});

describe("providerToolsGuard's options", () => {
  it("refuses a value or an option it does not take, naming it", () => {
    expect(() => providerToolsGuard({ providerTools: "allow-all" as never })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.providerTools" }));
    expect(() => providerToolsGuard({ providerTool: "allow-reads" } as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.providerTool" }));
    expect(() => providerToolsGuard(null as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options" }));
  });
});
