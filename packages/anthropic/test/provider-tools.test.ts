import { Dispatcher, InvalidArgumentError, MemoryConversationStore, MemoryLedger } from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, type MockProvider } from "@dispatch-once/mock-provider";
import Anthropic from "@anthropic-ai/sdk";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConversationRunner, createOnceToolRunner, type ConversationRunnerOptions } from "../src/index.js";
import { paymentsDownstream } from "./fixtures.js";
import { paymentsApp } from "./tool-runner-fixtures.js";

/**
 * A tool the API runs itself (STREAM-19) runs inside the response, outside every ledger, and
 * again in each retried attempt of a cut stream. Every route by which one reaches a request is
 * refused, naming the field; a provider-run read only with `providerTools: "allow-reads"`.
 * One "hello" request per case that is let through: what the request carried is the failure's text.
 */
let provider: MockProvider;
const closers: { close(): Promise<void> }[] = [];
beforeEach(async () => {
  provider = await startMockProvider({ script: scriptFromPlans({ hello: { content: [{ type: "text", text: "Hi." }], stopReason: "end_turn" } }) });
});
afterEach(async () => {
  await provider.close();
  await Promise.all(closers.splice(0).map((s) => s.close()));
});

const CODE_EXECUTION = { type: "code_execution_20250825", name: "code_execution" };
const WEB_SEARCH = { type: "web_search_20250305", name: "web_search" };
const WEB_FETCH = { type: "web_fetch_20250910", name: "web_fetch" };
const MCP_SERVER = { type: "url", url: "https://payments.example/mcp", name: "payments" };
const MCP_TOOLSET = { type: "mcp_toolset", mcp_server_name: "payments", name: "payments" };

/** The runner's refusal, or, when it was built, the request its first send carried. */
async function runnerOutcome(extra: Record<string, unknown>): Promise<unknown> {
  const downstream = await paymentsDownstream(0);
  closers.push(downstream.server);
  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test-key", maxRetries: 0 });
  let runner: ConversationRunner;
  try {
    runner = new ConversationRunner({
      client,
      dispatcher: new Dispatcher({ tools: downstream.tools, ledger: new MemoryLedger() }),
      store: new MemoryConversationStore(),
      model: "claude-test",
      tools: downstream.tools.providerSchemas(),
      ...extra,
    } as ConversationRunnerOptions);
  } catch (error) {
    return error;
  }
  await runner.send("conv-provider-tools", { id: "m1", content: "hello" });
  return { sent: provider.requests.at(-1)?.body };
}

describe("ConversationRunner: a tool the API runs itself never reaches a request (STREAM-19)", () => {
  const refused: [string, Record<string, unknown>, string][] = [
    ["code execution in tools", { tools: [CODE_EXECUTION] }, "options.tools[0]"],
    ["an MCP connector toolset in tools", { tools: [MCP_TOOLSET] }, "options.tools[0]"],
    ["a tool type this version does not know", { tools: [{ type: "payments_20270101", name: "pay" }] }, "options.tools[0]"],
    ["web search in tools, without the opt-in", { tools: [WEB_SEARCH] }, "options.tools[0]"],
    ["web fetch in tools, without the opt-in", { tools: [WEB_FETCH] }, "options.tools[0]"],
    ["code execution in tools, even with the reads' opt-in", { tools: [CODE_EXECUTION], providerTools: "allow-reads" }, "options.tools[0]"],
    ["the MCP connector's params.mcp_servers", { params: { mcp_servers: [MCP_SERVER] } }, "options.params.mcp_servers"],
    ["the MCP connector's params.mcp_servers, even with the reads' opt-in", { params: { mcp_servers: [MCP_SERVER] }, providerTools: "allow-reads" }, "options.params.mcp_servers"],
    ["params.container (code execution's container, its skills)", { params: { container: "container_011" } }, "options.params.container"],
    ["a misspelt opt-in", { providerTools: "allow-all" }, "options.providerTools"],
  ];
  for (const [name, extra, field] of refused) {
    it(`refuses ${name}`, async () => {
      const outcome = await runnerOutcome(extra);
      expect(outcome).toMatchObject({ code: "invalid_argument", field });
      expect(outcome).toBeInstanceOf(InvalidArgumentError);
    });
  }

  it("sends a provider-run read with providerTools: \"allow-reads\", and an Anthropic-defined tool the app runs (bash) without it", async () => {
    expect(await runnerOutcome({ tools: [WEB_SEARCH, WEB_FETCH], providerTools: "allow-reads" })).toMatchObject({ sent: { tools: [WEB_SEARCH, WEB_FETCH] } });
    const bash = { type: "bash_20250124", name: "bash" };
    expect(await runnerOutcome({ tools: [bash] })).toMatchObject({ sent: { tools: [bash] } });
  });
});

describe("createOnceToolRunner: a tool the API runs itself never reaches the SDK runner's requests (STREAM-19)", () => {
  /** The wrapper's refusal, or, when the runner was built and run, the request it carried. */
  async function toolRunnerOutcome(params: Record<string, unknown>, options: Record<string, unknown> = {}, later?: (runner: { setMessagesParams(p: unknown): void; addTools(...t: unknown[]): void; params: unknown }) => void) {
    const app = await paymentsApp(provider);
    try {
      const once = createOnceToolRunner({ tools: [app.sendPayment], effects: { send_payment: "keyed_write" }, ledger: new MemoryLedger(), ...options });
      const runner = once.toolRunner(app.client, { model: "claude-test", max_tokens: 256, messages: [{ role: "user", content: "hello" }], ...params } as never, { conversationId: "conv-tr-provider-tools" });
      later?.(runner as never);
      await (runner as unknown as { runUntilDone(): Promise<unknown> }).runUntilDone();
    } catch (error) {
      return error;
    }
    return { sent: provider.requests.at(-1)?.body };
  }

  const refused: [string, Record<string, unknown>, string][] = [
    ["code execution in params.tools", { tools: [CODE_EXECUTION] }, "params.tools[0]"],
    ["web search in params.tools, without the opt-in", { tools: [WEB_SEARCH] }, "params.tools[0]"],
    ["params.mcp_servers", { mcp_servers: [MCP_SERVER] }, "params.mcp_servers"],
    ["params.container", { container: "container_011" }, "params.container"],
  ];
  for (const [name, params, field] of refused) {
    it(`refuses ${name}`, async () => {
      const outcome = await toolRunnerOutcome(params);
      expect(outcome).toMatchObject({ code: "invalid_argument", field });
      expect(outcome).toBeInstanceOf(InvalidArgumentError);
    });
  }

  it("refuses them given later: setMessagesParams (mcp_servers, container, tools) and addTools", async () => {
    const cases: [(r: { setMessagesParams(p: unknown): void; addTools(...t: unknown[]): void; params: unknown }) => void, string][] = [
      [(r) => r.setMessagesParams({ ...(r.params as object), mcp_servers: [MCP_SERVER] }), "runner.setMessagesParams(params).mcp_servers"],
      [(r) => r.setMessagesParams({ ...(r.params as object), container: "container_011" }), "runner.setMessagesParams(params).container"],
      [(r) => r.setMessagesParams({ ...(r.params as object), tools: [CODE_EXECUTION] }), "runner.setMessagesParams(params.tools)[0]"],
      [(r) => r.addTools(CODE_EXECUTION), "runner.addTools(tools)[0]"],
    ];
    for (const [later, field] of cases) {
      const outcome = await toolRunnerOutcome({}, {}, later);
      expect(outcome, field).toMatchObject({ code: "invalid_argument", field });
    }
  });

  it("sends web search with providerTools: \"allow-reads\"", async () => {
    expect(await toolRunnerOutcome({ tools: [WEB_SEARCH] }, { providerTools: "allow-reads" })).toMatchObject({ sent: { tools: [WEB_SEARCH] } });
  });
});
