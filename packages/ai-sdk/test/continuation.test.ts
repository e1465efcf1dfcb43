import { createAnthropic } from "@ai-sdk/anthropic";
import { MemoryLedger } from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { convertToModelMessages, readUIMessageStream, stepCountIs, streamText, tool, type ModelMessage, type UIMessage } from "ai";
import { z } from "zod";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet } from "./helpers.js";

/*
 * AISDK-9: a turn (one user message) may span several requests (a continuation after an approval
 * or a client-side tool result keeps the turn index). A call in a continuation that is identical
 * to one an earlier request of the turn ran is a new call and runs (as under TURN-3); a re-send of
 * any request of the turn (same messages) gets the same keys and is answered from the ledger.
 */

let provider: MockProvider;
let payments: MockPaymentsServer;
const acme = { customer: "acme", amount: 12_500 };
beforeEach(async () => {
  payments = await startMockPayments();
  provider = await startMockProvider({
    seed: "ai-sdk-continuation",
    script: scriptFromPlans({
      // The user asked for two invoices, with a confirmation (a client-side tool) between them.
      "bill acme twice, ask between": [turn(toolUse("create_invoice", acme)), turn(toolUse("confirm", { question: "bill again?" })), turn(toolUse("create_invoice", acme))],
      // The user asked for two invoices; each one needs the user's approval.
      "bill acme twice": [turn(toolUse("create_invoice", acme)), turn(toolUse("create_invoice", acme))],
    }),
  });
});
afterEach(async () => {
  await provider.close();
  await payments.close();
});

const model = () => createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5");
const confirm = tool({ description: "Ask the user", inputSchema: z.object({ question: z.string() }) }); // client-side: no execute

describe("AISDK-9 through @ai-sdk/anthropic, model messages", () => {
  it.each(["step", "tool-call"] as const)("a client-side tool result's continuation runs an identical call again; a re-send of either request and a regenerate run nothing (dispatchAt %s)", async (dispatchAt) => {
    const keys: (string | undefined)[] = [];
    const once = createOnceTools({
      tools: { create_invoice: invoiceTool(payments, (k) => keys.push(k)), confirm },
      effects: { create_invoice: "unkeyed_write", confirm: "read" }, // confirm has no execute: not wrapped
      ledger: new MemoryLedger(),
      dispatcher: quiet,
    });
    const request = (messages: ModelMessage[]) => {
      const forTurn = once.forTurn({ conversationId: "chat_c", messages, dispatchAt });
      return streamText({ model: model(), messages, tools: forTurn.tools, onChunk: forTurn.onChunk, stopWhen: stepCountIs(5), maxRetries: 0 });
    };
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme twice, ask between" }];
    const first = request(ask);
    const firstParts = await drain(first.fullStream);
    expect(payments.effects().length).toBe(1);
    const question = firstParts.find((p) => p.type === "tool-call" && p.toolName === "confirm") as { toolCallId: string } | undefined;
    expect(question).toBeDefined();
    // The client answers the question: a tool message, not a user message, so the turn goes on.
    const answered: ModelMessage[] = [
      ...ask,
      ...(await first.response).messages,
      { role: "tool", content: [{ type: "tool-result", toolCallId: question!.toolCallId, toolName: "confirm", output: { type: "json", value: { yes: true } } }] },
    ];
    const continued = outputsOf(await drain(request(answered).fullStream));
    // The second invoice the user asked for is made: not the first one's result reported as it.
    expect(payments.effects().length).toBe(2);
    expect(continued).toEqual([{ invoice: payments.effects()[1]!.resourceId, amount: 12_500 }]);
    expect(keys[1]).not.toBe(keys[0]);
    // A re-send of the continuation (a cut stream, a double submit): answered from the ledger.
    expect(outputsOf(await drain(request(answered).fullStream))).toEqual(continued);
    // A regenerate of the whole turn: the first request's key again.
    await drain(request(ask).fullStream);
    expect(payments.effects().length).toBe(2);
    expect(keys).toHaveLength(2);
  });

  it("an identical call approved in a continuation runs; every re-sent approval is answered from the ledger", async () => {
    const keys: (string | undefined)[] = [];
    const approved = { ...invoiceTool(payments, (k) => keys.push(k)), needsApproval: true };
    const once = createOnceTools({ tools: { create_invoice: approved }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const request = (messages: ModelMessage[]) => {
      const forTurn = once.forTurn({ conversationId: "chat_ap", messages });
      return streamText({ model: model(), messages, tools: forTurn.tools, stopWhen: stepCountIs(5), maxRetries: 0, onError: () => {} });
    };
    const approve = async (messages: ModelMessage[], result: ReturnType<typeof request>, parts: { type: string }[]): Promise<ModelMessage[]> => {
      const asked = parts.find((p) => p.type === "tool-approval-request") as { approvalId: string } | undefined;
      expect(asked).toBeDefined();
      return [...messages, ...(await result.response).messages, { role: "tool", content: [{ type: "tool-approval-response", approvalId: asked!.approvalId, approved: true }] }];
    };
    const ask: ModelMessage[] = [{ role: "user", content: "bill acme twice" }];
    const r1 = request(ask);
    const second = await approve(ask, r1, await drain(r1.fullStream));
    expect(payments.effects().length).toBe(0);

    // The first approval: the approved call runs, and the model asks for the second invoice.
    const r2 = request(second);
    const r2Parts = await drain(r2.fullStream);
    expect(payments.effects().length).toBe(1);
    const firstInvoice = outputsOf(r2Parts);
    // The first approval re-sent: the same key, nothing runs.
    expect(outputsOf(await drain(request(second).fullStream))).toEqual(firstInvoice);
    expect(payments.effects().length).toBe(1);

    // The second approval: an identical call, approved in a later request of the same turn. It runs.
    const third = await approve(second, r2, r2Parts);
    const secondInvoice = outputsOf(await drain(request(third).fullStream));
    expect(payments.effects().length).toBe(2);
    expect(secondInvoice).toEqual([{ invoice: payments.effects()[1]!.resourceId, amount: 12_500 }]);
    // ... and its re-send is answered with it, not run again, and not with the first invoice.
    expect(outputsOf(await drain(request(third).fullStream))).toEqual(secondInvoice);
    expect(payments.effects().length).toBe(2);
    expect(new Set(keys).size).toBe(2);

    // A client that appends the first approval once more after everything ran: the AI SDK
    // executes that call again (its result is not in the last message); the ledger answers it.
    const r3 = request(third);
    await drain(r3.fullStream);
    const firstApproval = (second.at(-1)!.content as { approvalId: string }[])[0]!;
    const appended: ModelMessage[] = [...third, ...(await r3.response).messages, { role: "tool", content: [{ type: "tool-approval-response", approvalId: firstApproval.approvalId, approved: true }] }];
    const rerun = await drain(request(appended).fullStream);
    expect(outputsOf(rerun)[0]).toEqual(firstInvoice[0]);
    expect(payments.effects().length).toBe(2);
    // (The provider then refuses the prompt, which holds that call's result twice: an error part.)
    expect(rerun.some((p) => p.type === "error")).toBe(true);
  });
});

describe("AISDK-9 with UI messages (useChat's shape, read from the UI message stream)", () => {
  it("a second approved identical call in the same assistant message runs; re-sent approvals run nothing", async () => {
    const ordinals: [string, number][] = [];
    const approved = { ...invoiceTool(payments), needsApproval: true };
    const once = createOnceTools({
      tools: { create_invoice: approved },
      effects: { create_invoice: "unkeyed_write" },
      ledger: new MemoryLedger(),
      // The calls only: the wrapper's own record of the turn's user message (AISDK-17) is dispatched too.
      dispatcher: { ...quiet, onEvent: (e) => void ((e.type === "claimed" || e.type === "replayed") && e.toolName === "create_invoice" && ordinals.push([e.type, e.ordinal])) },
    });
    // The chat route: UI messages in, the assistant message (continued, as useChat does) out.
    const route = async (messages: UIMessage[]): Promise<UIMessage> => {
      const forTurn = once.forTurn({ conversationId: "chat_ui", messages });
      const result = streamText({ model: model(), messages: await convertToModelMessages(messages), tools: forTurn.tools, stopWhen: stepCountIs(5), maxRetries: 0 });
      const last = messages.at(-1);
      let message: UIMessage | undefined;
      const stream = result.toUIMessageStream({ originalMessages: messages });
      for await (const m of readUIMessageStream({ ...(last?.role === "assistant" ? { message: structuredClone(last) } : {}), stream })) message = m;
      return message!;
    };
    /** addToolApprovalResponse: the pending approval of the assistant message, approved. */
    const approveAll = (message: UIMessage): UIMessage => ({
      ...message,
      parts: message.parts.map((p) =>
        "state" in p && p.state === "approval-requested" ? ({ ...p, state: "approval-responded", approval: { id: p.approval.id, approved: true } } as unknown as typeof p) : p,
      ),
    });
    const user: UIMessage = { id: "u1", role: "user", parts: [{ type: "text", text: "bill acme twice" }] };
    const asked = await route([user]);
    const second = [user, approveAll(asked)];
    const afterFirst = await route(second);
    expect(payments.effects().length).toBe(1);
    // The first approval re-sent, as it was: same key.
    await route(second);
    expect(payments.effects().length).toBe(1);
    const toolParts = afterFirst.parts.filter((p) => p.type === "tool-create_invoice") as { state: string }[];
    expect(toolParts.map((p) => p.state)).toEqual(["output-available", "approval-requested"]);
    const third = [user, approveAll(afterFirst)];
    const afterSecond = await route(third);
    expect(payments.effects().length).toBe(2);
    await route(third);
    expect(payments.effects().length).toBe(2);
    expect((afterSecond.parts.filter((p) => p.type === "tool-create_invoice") as { state: string }[]).map((p) => p.state)).toEqual(["output-available", "output-available"]);
    // Each approved call has one ordinal, the same on every re-send of its approval.
    expect(ordinals).toEqual([
      ["claimed", 0],
      ["replayed", 0],
      ["claimed", 1],
      ["replayed", 1],
    ]);
  });
});
