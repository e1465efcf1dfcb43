import { MemoryLedger } from "@dispatch-once/core";
import { toolUse, turn } from "@dispatch-once/mock-provider";
import { stepCountIs, streamText, type ModelMessage, type ToolCallRepairFunction, type ToolSet } from "ai";
import { describe, expect, it } from "vitest";

// Several streamed requests each, on a shared 2-core CI machine: the 5 s default is too tight under load.
const SLOW = { timeout: 30_000 };
import { createOnceTools } from "../src/index.js";
import { anthropicPerTest, drain, invoiceTool, outputsOf, quiet } from "./helpers.js";

/*
 * AISDK-11: `experimental_repairToolCall`. The model's call does not parse (here its amount is a
 * string where the schema wants an integer), the app's repair function makes a call that does,
 * and the AI SDK executes the repaired call. A repair is often another model request, so a
 * regenerate of the turn, whose model repeats the same broken call, may be repaired differently
 * (here the customer's spelling): keyed by its repaired arguments, it would be another call and
 * bill again. The first repair of a model call is the call's, on every re-run of the turn.
 */

const broken = { customer: "acme", amount: "12500" };
const { env, model } = anthropicPerTest("ai-sdk-repair", {
  "bill acme": turn(toolUse("create_invoice", broken)),
  "bill acme twice": [turn(toolUse("create_invoice", broken)), turn(toolUse("create_invoice", broken))],
});

/** The app's repair: "asks a model" to fix the input; each answer spells the customer its own way. */
function modelRepair() {
  const spellings = ["acme", "Acme", "ACME"];
  let repairs = 0;
  const repair: ToolCallRepairFunction<ToolSet> = async ({ toolCall }) => {
    const broken = JSON.parse(toolCall.input) as { customer: string; amount: string };
    const customer = spellings[repairs++ % spellings.length]!;
    return { ...toolCall, input: JSON.stringify({ customer: broken.customer === "acme" ? customer : broken.customer, amount: Number(broken.amount) }) };
  };
  return { repair, count: () => repairs };
}

function app() {
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(env.payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
  const { repair, count } = modelRepair();
  const request = async (messages: ModelMessage[], dispatchAt: "step" | "tool-call" = "step") => {
    const forTurn = once.forTurn({ conversationId: "chat_r", messages, dispatchAt });
    const result = streamText({
      model: model(),
      messages,
      tools: forTurn.tools,
      onChunk: forTurn.onChunk,
      experimental_repairToolCall: forTurn.repairToolCall(repair),
      stopWhen: stepCountIs(4),
      maxRetries: 0,
    });
    const parts = await drain(result.fullStream);
    const calls = parts.filter((p) => p.type === "tool-call") as { toolCallId: string; input: unknown; invalid?: boolean }[];
    return { parts, calls, outcomeOf: forTurn.outcomeOf, messages: [...messages, ...(await result.response).messages] };
  };
  return { request, repairs: count };
}

describe("AISDK-11 a repaired call (experimental_repairToolCall), through @ai-sdk/anthropic", SLOW, () => {
  it.each(["step", "tool-call"] as const)("a regenerate whose repair differs bills once, answered with the first repair's invoice and request (dispatchAt %s)", async (dispatchAt) => {
    const { request, repairs } = app();
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    const first = await request(ask, dispatchAt);
    expect(first.calls.map((c) => c.input)).toEqual([{ customer: "acme", amount: 12_500 }]);
    expect(env.payments.effects()).toHaveLength(1);
    const regenerated = await request(ask, dispatchAt);
    expect(env.payments.effects()).toHaveLength(1);
    expect(outputsOf(regenerated.parts)).toEqual(outputsOf(first.parts));
    expect(regenerated.outcomeOf(regenerated.calls[0]!.toolCallId)).toMatchObject({ replayed: true, key: first.outcomeOf(first.calls[0]!.toolCallId)!.key });
    // The regenerate's broken call got the first repair from the ledger: the app's repair ran once.
    expect(regenerated.calls.map((c) => c.input)).toEqual(first.calls.map((c) => c.input));
    expect(repairs()).toBe(1);
  });

  it("a second identical broken call in a later step is a new call: repaired and billed, not answered with the first one's invoice; the regenerate bills nothing", async () => {
    const { request, repairs } = app();
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme twice" }];
    // One request runs both steps: the second call is a later step of the same request.
    const both = await request(ask);
    expect(env.payments.effects()).toHaveLength(2);
    expect(new Set(outputsOf(both.parts).map((o) => (o as { invoice: string }).invoice)).size).toBe(2);
    // Its regenerate: both answered from the ledger.
    const again = await request(ask);
    expect(env.payments.effects()).toHaveLength(2);
    expect(outputsOf(again.parts)).toEqual(outputsOf(both.parts));
    expect(again.calls.map((c) => c.input)).toEqual(both.calls.map((c) => c.input));
    expect(repairs()).toBe(2);
  });

  it("a repair that failed is not recorded: the call is invalid and nothing bills; the regenerate repairs it and bills once", async () => {
    const once = createOnceTools({ tools: { create_invoice: invoiceTool(env.payments) }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    let attempts = 0;
    const repair: ToolCallRepairFunction<ToolSet> = async ({ toolCall }) => {
      if (attempts++ === 0) throw new Error("the repair model timed out");
      return { ...toolCall, input: JSON.stringify({ customer: "acme", amount: 12_500 }) };
    };
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    const outputs: unknown[][] = [];
    for (let send = 0; send < 3; send++) {
      const forTurn = once.forTurn({ conversationId: "chat_rf", messages: ask });
      const parts = await drain(streamText({ model: model(), messages: ask, tools: forTurn.tools, experimental_repairToolCall: forTurn.repairToolCall(repair), stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
      outputs.push(outputsOf(parts));
    }
    expect(attempts).toBe(2);
    expect(env.payments.effects()).toHaveLength(1);
    expect(outputs[0]).toEqual([]);
    expect(outputs[2]).toEqual(outputs[1]);
    expect(outputs[1]).toEqual([{ invoice: env.payments.effects()[0]!.resourceId, amount: 12_500 }]);
  });
});
