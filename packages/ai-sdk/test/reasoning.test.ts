import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger } from "@dispatch-once/core";
import { call, reasoning, respond, say, startMockOpenAI, type MockOpenAI, type ResponsesRequest, type ScriptedResponse } from "@dispatch-once/mock-openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, tool, type ModelMessage, type UIMessage } from "ai";
import { z } from "zod";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools, dispatchOnceOf } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet } from "./helpers.js";

/*
 * A reasoning model's turn under cuts and re-sends: every response starts with a reasoning item
 * (fresh `rs_` id and `encrypted_content` per response, as apps/mock-openai renders it). The
 * app keeps reasoning parts in its messages; the AI SDK sends them back (an `item_reference`
 * with store, the encrypted content without). Neither the turn index nor the ordinals may read
 * them, and a re-send must send the first attempt's input again.
 */

let mock: MockOpenAI;
let payments: MockPaymentsServer;
const acme = { customer: "acme", amount: 12_500 };

/** The responses of one turn, chosen by the function calls its input already shows after the user message. */
function stepsScript(steps: ScriptedResponse[]) {
  return (request: ResponsesRequest): ScriptedResponse => {
    const input = Array.isArray(request.input) ? request.input : [];
    const lastUser = input.findLastIndex((item) => item.role === "user");
    const shown = input.slice(lastUser + 1).filter((item) => item.type === "function_call").length;
    let through = 0;
    for (const step of steps) {
      if (through === shown) return step;
      through += step.output.filter((o) => o.type === "function_call").length;
    }
    return say("Done.");
  };
}

beforeEach(async () => {
  payments = await startMockPayments();
  mock = await startMockOpenAI({
    seed: "ai-sdk-reasoning",
    // The user asked for two invoices, with a question (a client-side tool) between them; the model reasons before each step.
    script: stepsScript([
      respond(reasoning("The user wants acme billed, then asked."), call("create_invoice", acme), call("confirm", { question: "bill again?" })),
      respond(reasoning("Confirmed: bill acme once more."), call("create_invoice", acme)),
    ]),
  });
});
afterEach(async () => {
  await mock.close();
  await payments.close();
});

const confirm = tool({ description: "Ask the user", inputSchema: z.object({ question: z.string() }) }); // client-side: no execute
const model = () => createOpenAI({ baseURL: mock.baseURL, apiKey: "test" }).responses("gpt-5");
/** Without store the AI SDK sends each kept reasoning part back as an item with its encrypted content. */
const stateless = { openai: { store: false, include: ["reasoning.encrypted_content"] } };

describe.each([
  ["store (item_reference)", {}],
  ["store: false (encrypted_content)", stateless],
] as const)("a reasoning model through @ai-sdk/openai, %s", (_name, providerOptions) => {
  const setup = () => {
    const keys: (string | undefined)[] = [];
    const once = createOnceTools({
      tools: { create_invoice: invoiceTool(payments, (k) => keys.push(k)), confirm },
      effects: { create_invoice: "unkeyed_write", confirm: "read" },
      ledger: new MemoryLedger(),
      dispatcher: quiet,
    });
    const request = (messages: ModelMessage[]) => {
      const turn = once.forTurn({ conversationId: "chat_r", messages });
      return streamText({ model: model(), messages, tools: turn.tools, stopWhen: stepCountIs(5), maxRetries: 0, providerOptions: providerOptions as never });
    };
    return { keys, request };
  };

  it("AISDK-6: a continuation cut in its confirmation and re-sent sends the first attempt's input again, and its repeat is answered from the ledger", async () => {
    const { keys, request } = setup();
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme twice, ask between" }];
    const first = request(ask);
    const firstParts = await drain(first.fullStream);
    expect(firstParts.some((p) => p.type === "reasoning-delta")).toBe(true);
    const question = firstParts.find((p) => p.type === "tool-call" && p.toolName === "confirm") as { toolCallId: string };
    const kept = (await first.response).messages;
    // The kept response carries its reasoning: what the AI SDK sends back in the continuation.
    expect(kept.flatMap((m) => (Array.isArray(m.content) ? (m.content as { type: string }[]) : [])).some((p) => p.type === "reasoning")).toBe(true);
    const answered: ModelMessage[] = [
      ...ask,
      ...kept,
      { role: "tool", content: [{ type: "tool-result", toolCallId: question.toolCallId, toolName: "confirm", output: { type: "json", value: { yes: true } } }] },
    ];
    // The continuation: its repeat runs (AISDK-9), then the confirmation is cut.
    mock.setFaultPlan((req) => {
      const input = Array.isArray(req.input) ? req.input : [];
      return input.filter((i) => i.type === "function_call").length === 3 ? { kind: "reset", at: { beforeCompleted: true } } : undefined;
    });
    const cut = await drain(request(answered).fullStream);
    expect(cut.some((p) => p.type === "error")).toBe(true);
    expect(payments.effects().length).toBe(2);
    expect(keys[1]).not.toBe(keys[0]);
    mock.setFaultPlan(() => undefined);
    const sent = mock.requests.length;
    const resent = outputsOf(await drain(request(answered).fullStream));
    // The re-send's first request is the cut attempt's, byte for byte: the kept reasoning is the
    // same item (or the same encrypted content), nothing of the cut attempt came along.
    const continuation = mock.requests.filter((r) => r.calls.some((c) => c.name === "create_invoice") && r.requestNumber > 1);
    expect(continuation).toHaveLength(2);
    expect(continuation[1]!.bodyHash).toBe(continuation[0]!.bodyHash);
    expect(continuation[1]!.requestNumber).toBe(sent + 1);
    // ... and it did carry the kept reasoning back, in the form this mode sends.
    const items = (continuation[1]!.body as { input: { type?: string; id?: string; encrypted_content?: string }[] }).input;
    const carried = providerOptions === stateless ? items.filter((i) => i.type === "reasoning" && i.encrypted_content?.startsWith("enc_")) : items.filter((i) => i.type === "item_reference" && i.id?.startsWith("rs_"));
    expect(carried).toHaveLength(1);
    // Answered from the ledger: no third invoice, and the second one's result.
    expect(payments.effects().length).toBe(2);
    expect(keys).toHaveLength(2);
    expect(resent).toEqual([{ invoice: payments.effects()[1]!.resourceId, amount: 12_500 }]);
  });

  it("AISDK-1 AISDK-9: the reasoning parts of a kept response neither start a turn nor count as calls; a regenerate runs nothing", async () => {
    const { keys, request } = setup();
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme twice, ask between" }];
    const first = request(ask);
    const firstParts = await drain(first.fullStream);
    const question = firstParts.find((p) => p.type === "tool-call" && p.toolName === "confirm") as { toolCallId: string };
    const answered: ModelMessage[] = [
      ...ask,
      ...(await first.response).messages,
      { role: "tool", content: [{ type: "tool-result", toolCallId: question.toolCallId, toolName: "confirm", output: { type: "json", value: { yes: true } } }] },
    ];
    await drain(request(answered).fullStream);
    expect(payments.effects().length).toBe(2);
    // A regenerate of the whole turn: a new reasoning item in each response, the same keys.
    await drain(request(ask).fullStream);
    expect(payments.effects().length).toBe(2);
    expect(keys).toHaveLength(2);
  });
});

describe("AISDK-9: reasoning parts in UI messages", () => {
  it("a reasoning part (with its OpenAI item id and encrypted content) and step-start parts beside a tool part change no count", async () => {
    const ordinals: number[] = [];
    const pay = tool({
      inputSchema: z.object({ payee: z.string(), amount: z.number() }),
      execute: async (_input, options) => {
        ordinals.push(dispatchOnceOf(options)!.ordinal);
        return { ok: true };
      },
    });
    const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const input = { payee: "bob", amount: 5 };
    const reasoningPart = (id: string) => ({ type: "reasoning", text: "Pay bob.", state: "done", providerMetadata: { openai: { itemId: id, reasoningEncryptedContent: `enc_${id}` } } });
    const messages: UIMessage[] = [
      { id: "u", role: "user", parts: [{ type: "text", text: "pay bob twice, ask between" }] },
      {
        id: "a",
        role: "assistant",
        parts: [
          { type: "step-start" },
          reasoningPart("rs_1"),
          { type: "tool-pay", toolCallId: "t1", state: "output-available", input, output: { ok: true } },
          reasoningPart("rs_2"),
          { type: "tool-ask", toolCallId: "t2", state: "output-available", input: { question: "again?" }, output: { yes: true } },
          { type: "step-start" },
          reasoningPart("rs_3"),
        ] as UIMessage["parts"],
      },
    ];
    const turn = once.forTurn({ conversationId: "chat_ui", messages });
    expect(turn.turnIndex).toBe(1);
    await turn.tools.pay.execute!(input, { toolCallId: "t3", messages: [] });
    // One call ran before: the repeat is ordinal 1, whatever reasoning surrounds it.
    expect(ordinals).toEqual([1]);
  });
});
