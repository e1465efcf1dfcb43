import OpenAI from "openai";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ChatCompletionsRunner } from "../src/index.js";

// The Chat Completions runner's read-back of a committed turn (chat-runner.ts readTurn) through
// isErrorOutput(output, input), as the Responses runner's (wire.test.ts): a tool's result shaped like
// the runner's error answer and carrying invalid_arguments_json, under arguments that are a JSON
// object, is the tool's result (the payment happened), not a call never dispatched.

const chunk = (delta: object, finish: string | null = null) => ({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] });

function server(bodies: object[][]): OpenAI {
  let n = 0;
  return new OpenAI({
    baseURL: "http://chat.invalid/v1",
    apiKey: "test-key",
    maxRetries: 0,
    fetch: async () => {
      const chunks = bodies[n++] ?? [];
      const text = `${chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join("")}data: [DONE]\n\n`;
      return new Response(text, { status: 200, headers: { "content-type": "text/event-stream" } });
    },
  });
}

describe("ChatCompletionsRunner: a committed turn read back (TURN-7, ERR-6)", () => {
  it("TURN-7 a payment whose error-shaped result carries invalid_arguments_json is read back on a re-send as the result it was, with its key", async () => {
    const paid: string[] = [];
    const tools = new ToolRegistry([
      defineTool({
        name: "send_payment",
        description: "Pay",
        effect: "keyed_write",
        input: z.object({ payee: z.string() }),
        run: async (args) => {
          paid.push(args.payee);
          return { error: { name: "FxWarning", message: `pay_${paid.length} settled at a stale rate`, code: "invalid_arguments_json" } };
        },
      }),
    ]);
    // A store that keeps no call keys with a turn (TURN-24: one written before them): the keys are derived again.
    const store = new MemoryConversationStore();
    Object.defineProperty(store, "capabilities", { value: { ...store.capabilities, supports: { ...store.capabilities.supports, callKeys: false } } });
    const client = server([
      [chunk({ role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: '{"payee":"acme"}' } }] }), chunk({}, "tool_calls")],
      [chunk({ role: "assistant", content: "Paid acme, with a warning." }), chunk({}, "stop")],
    ]);
    const runner = new ChatCompletionsRunner({ client, dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger() }), store, model: "m", tools: tools.providerSchemas(), retry: { backoffMs: () => 1 } });
    const first = await runner.send("conv-chat-error-shaped", { id: "m1", content: "pay acme" });
    const again = await runner.send("conv-chat-error-shaped", { id: "m1", content: "pay acme" });
    expect(paid).toEqual(["acme"]);
    expect(first.turns[0]!.calls).toEqual([expect.objectContaining({ result: { error: { name: "FxWarning", message: "pay_1 settled at a stale rate", code: "invalid_arguments_json" } }, ordinal: 0 })]);
    expect(again.turns[0]!.calls).toEqual([{ ...first.turns[0]!.calls[0], replayed: true }]);
  });
});
