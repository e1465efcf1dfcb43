import { MemoryLedger } from "@dispatch-once/core";
import { toolUse, turn } from "@dispatch-once/mock-provider";
import { stepCountIs, streamText, type ModelMessage } from "ai";
import { describe, expect, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { anthropicPerTest, drain, invoiceTool, quiet } from "./helpers.js";

/*
 * STREAM-18 where the AI SDK owns the loop: its `toolChoice` goes with every step unless
 * `prepareStep` returns another, so a forced tool is called again after each result, under the next
 * ordinal of the turn (AISDK-9): a new key, a new invoice. The README's recipe resets it.
 */
const { env, model } = anthropicPerTest("ai-sdk-tool-choice", { "bill acme": turn(toolUse("create_invoice", { customer: "acme", amount: 12_500 })) });
const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
const FORCED = { type: "tool" as const, toolName: "create_invoice" as const };

function route(prepare: boolean) {
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(env.payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
  const turnTools = once.forTurn({ conversationId: "chat_forced", messages });
  return streamText({
    model: model(),
    messages,
    tools: turnTools.tools,
    toolChoice: FORCED,
    stopWhen: stepCountIs(3),
    maxRetries: 0,
    ...(prepare ? { prepareStep: ({ stepNumber }: { stepNumber: number }) => (stepNumber > 0 ? { toolChoice: "auto" as const } : undefined) } : {}),
  });
}

const choices = () => env.provider.requests.map((r) => (r.body as { tool_choice?: unknown }).tool_choice);

describe("a forced toolChoice in the AI SDK's loop (STREAM-18)", () => {
  it("left on every step, it invoices once per step: the risk the README names", async () => {
    await drain(route(false).fullStream);
    expect(choices()).toEqual([{ type: "tool", name: "create_invoice" }, { type: "tool", name: "create_invoice" }, { type: "tool", name: "create_invoice" }]);
    expect(env.payments.effects()).toHaveLength(3);
  });

  it("the README's recipe (prepareStep: auto after the first step) invoices once", async () => {
    await drain(route(true).fullStream);
    expect(choices()).toEqual([{ type: "tool", name: "create_invoice" }, { type: "auto" }]);
    expect(env.payments.effects()).toHaveLength(1);
  });
});
