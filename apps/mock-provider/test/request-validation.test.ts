import { describe, expect, it } from "vitest";
import { validateMessagesRequest, validateWithSchema } from "../src/request-schema.js";

// The requests a runner sends in a payment turn: the user's message, then the tool_use and its result.
const tools = [
  {
    name: "send_payment",
    description: "Send a payment to a payee.",
    input_schema: { type: "object", properties: { payee: { type: "string" } }, required: ["payee"] },
  },
];
const toolUseStep = () => ({ model: "claude-demo", max_tokens: 256, messages: [{ role: "user", content: "pay 12 EUR" }], tools, stream: true });
const toolResultStep = () => ({
  model: "claude-demo",
  max_tokens: 256,
  system: "You pay invoices.",
  messages: [
    { role: "user", content: [{ type: "text", text: "pay 12 EUR" }] },
    { role: "assistant", content: [{ type: "text", text: "Paying." }, { type: "tool_use", id: "toolu_1", name: "send_payment", input: { payee: "acme" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: '{"paymentId":"pay_1"}', is_error: false }] },
  ],
  tools,
  stream: true,
});

type Body = ReturnType<typeof toolResultStep> & Record<string, unknown>;
// Each edit breaks (or bends) one rule; the fast walk must never disagree with the schema.
const edits: [string, (b: Body) => void][] = [
  ["no model", (b) => delete (b as Partial<Body>).model],
  ["an empty model", (b) => (b.model = "")],
  ["max_tokens 0", (b) => (b.max_tokens = 0)],
  ["a fractional max_tokens", (b) => (b.max_tokens = 1.5)],
  ["max_tokens as a string", (b) => ((b as Record<string, unknown>)["max_tokens"] = "256")],
  ["no messages", (b) => (b.messages = [])],
  ["messages not an array", (b) => ((b as Record<string, unknown>)["messages"] = { role: "user" })],
  ["an unknown role", (b) => ((b.messages[0] as Record<string, unknown>)["role"] = "bot")],
  ["content a number", (b) => ((b.messages[0] as Record<string, unknown>)["content"] = 5)],
  ["an empty user message", (b) => ((b.messages[0] as Record<string, unknown>)["content"] = "")],
  ["an image block", (b) => ((b.messages[0] as Record<string, unknown>)["content"] = [{ type: "image", source: {} }])],
  ["an unknown block type", (b) => ((b.messages[0] as Record<string, unknown>)["content"] = [{ type: "hologram" }])],
  // The SDK tool runner's addTools/removeTools send their changes as a system message (the inline-tools beta).
  ["a system message's tool changes", (b) => b.messages.splice(1, 0, { role: "system", content: [{ type: "tool_addition", tool: { type: "tool_definition", definition: tools[0] } }, { type: "tool_removal", tool: { type: "tool_reference", name: "get_balance" } }] } as never)],
  ["a text block with cache_control", (b) => ((b.messages[0]!.content[0] as Record<string, unknown>)["cache_control"] = { type: "ephemeral" })],
  ["a text block with bad cache_control", (b) => ((b.messages[0]!.content[0] as Record<string, unknown>)["cache_control"] = { type: "forever" })],
  ["a text block without text", (b) => delete (b.messages[0]!.content[0] as Record<string, unknown>)["text"]],
  ["a tool_use with an empty id", (b) => ((b.messages[1]!.content[1] as Record<string, unknown>)["id"] = "")],
  ["a tool_use whose input is an array", (b) => ((b.messages[1]!.content[1] as Record<string, unknown>)["input"] = [1])],
  ["a tool_use in a user message", (b) => ((b.messages[1] as Record<string, unknown>)["role"] = "user")],
  ["a tool_result with block content", (b) => ((b.messages[2]!.content[0] as Record<string, unknown>)["content"] = [{ type: "text", text: "ok" }])],
  ["a tool_result with bad content", (b) => ((b.messages[2]!.content[0] as Record<string, unknown>)["content"] = 7)],
  ["a tool_result with is_error as a string", (b) => ((b.messages[2]!.content[0] as Record<string, unknown>)["is_error"] = "yes")],
  ["a tool_result for an unknown call", (b) => ((b.messages[2]!.content[0] as Record<string, unknown>)["tool_use_id"] = "toolu_2")],
  ["a tool_use left unanswered", (b) => b.messages.pop()],
  ["a system prompt as blocks", (b) => ((b as Record<string, unknown>)["system"] = [{ type: "text", text: "s" }])],
  ["a system prompt as a number", (b) => ((b as Record<string, unknown>)["system"] = 1)],
  ["stream as a string", (b) => ((b as Record<string, unknown>)["stream"] = "yes")],
  ["temperature 2", (b) => (b["temperature"] = 2)],
  ["temperature 0.5", (b) => (b["temperature"] = 0.5)],
  ["a tool_choice", (b) => (b["tool_choice"] = { type: "any" })],
  ["metadata", (b) => (b["metadata"] = { user_id: "u" })],
  ["a bad tool name", (b) => (b.tools = [{ ...tools[0]!, name: "send payment" }])],
  ["a custom tool type", (b) => (b.tools = [{ ...tools[0]!, type: "custom" } as (typeof tools)[0]])],
  ["a server tool", (b) => (b.tools = [...tools, { type: "web_search_20250305", name: "web_search" } as unknown as (typeof tools)[0]])],
  ["an input_schema of type array", (b) => (b.tools = [{ ...tools[0]!, input_schema: { ...tools[0]!.input_schema, type: "array" } }])],
  ["duplicate tool names", (b) => (b.tools = [tools[0]!, tools[0]!])],
  ["no tools with tool blocks", (b) => delete (b as Partial<Body>).tools],
  ["tools not an array", (b) => ((b as Record<string, unknown>)["tools"] = {})],
  ["an unknown top-level field", (b) => (b["service_tier"] = "auto")],
];

describe("validateMessagesRequest", () => {
  it("accepts the runner's requests as they are, without the schema's copy", () => {
    for (const body of [toolUseStep(), toolResultStep()]) {
      const verdict = validateMessagesRequest(body);
      expect(verdict).toEqual(validateWithSchema(body));
      expect(verdict.ok && verdict.request).toBe(body);
    }
  });

  it.each(edits)("agrees with the schema on %s", (_what, edit) => {
    const body = structuredClone(toolResultStep()) as Body;
    edit(body);
    expect(validateMessagesRequest(body)).toEqual(validateWithSchema(body));
  });

  it("accepts a system message's tool changes, as the SDK runner's addTools/removeTools send them", () => {
    const body = structuredClone(toolResultStep()) as Body;
    edits.find(([what]) => what === "a system message's tool changes")![1](body);
    expect(validateWithSchema(body).ok).toBe(true);
  });

  it("the edits cover both verdicts", () => {
    const verdicts = edits.map(([, edit]) => {
      const body = structuredClone(toolResultStep()) as Body;
      edit(body);
      return validateWithSchema(body).ok;
    });
    expect(verdicts).toContain(true);
    expect(verdicts).toContain(false);
  });
});
