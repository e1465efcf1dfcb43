import { MemoryLedger } from "@dispatch-once/core";
import { toolUse, turn } from "@dispatch-once/mock-provider";
import { stepCountIs, streamText, type ModelMessage, type TextStreamPart, type ToolSet } from "ai";
import { describe, expect, it } from "vitest";

// Several streamed requests each, on a shared 2-core CI machine: the 5 s default is too tight under load.
const SLOW = { timeout: 30_000 };
import { createOnceTools } from "../src/index.js";
import { anthropicPerTest, drain, invoiceTool, outputsOf, quiet } from "./helpers.js";

/*
 * AISDK-9 and AISDK-2: a tool approval the user DENIED. The denied call never runs, in the request that
 * carries the denial or in any re-send of it; the denial is what the stream reports for it (the
 * AI SDK's `tool-output-denied`), never a result; and when the model asks for the same call again
 * in the same turn and the user approves that one, it runs once, however often the approval is
 * re-sent. (The denied call holds no ordinal, AISDK-9, so the approved one is ordinal 0.)
 */

const acme = { customer: "acme", amount: 12_500 };
// The model asks for the invoice; told it was denied, it asks for the same invoice again.
const { env, model } = anthropicPerTest("ai-sdk-denial", { "bill acme": [turn(toolUse("create_invoice", acme)), turn(toolUse("create_invoice", acme))] });
type Parts = TextStreamPart<ToolSet>[];
const approvalOf = (parts: Parts) => parts.find((p) => p.type === "tool-approval-request") as { approvalId: string; toolCall: { toolCallId: string } } | undefined;
const respond = (approvalId: string, approved: boolean): ModelMessage => ({ role: "tool", content: [{ type: "tool-approval-response", approvalId, approved, ...(approved ? {} : { reason: "not this one" }) }] });

describe("AISDK-9 a denied approval, through @ai-sdk/anthropic (model messages)", SLOW, () => {
  it.each(["step", "tool-call"] as const)("the denial and its re-sends run nothing and report the denial; the re-asked call, approved, runs once (dispatchAt %s)", async (dispatchAt) => {
    const keys: (string | undefined)[] = [];
    const approved = { ...invoiceTool(env.payments, (k) => keys.push(k)), needsApproval: true };
    const once = createOnceTools({ tools: { create_invoice: approved }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const request = async (messages: ModelMessage[]) => {
      const forTurn = once.forTurn({ conversationId: "chat_d", messages, dispatchAt });
      const result = streamText({ model: model(), messages, tools: forTurn.tools, onChunk: forTurn.onChunk, stopWhen: stepCountIs(4), maxRetries: 0 });
      const parts = await drain(result.fullStream);
      return { parts, messages: [...messages, ...(await result.response).messages], outcomeOf: forTurn.outcomeOf, claimedDenials: await forTurn.claimedDenials() };
    };

    const asked = await request([{ role: "user", content: "bill acme" }]);
    const first = approvalOf(asked.parts)!;
    expect(first).toBeDefined();
    // The user says no.
    const denial = [...asked.messages, respond(first.approvalId, false)];
    const denied: Awaited<ReturnType<typeof request>>[] = [];
    for (let send = 0; send < 2; send++) denied.push(await request(denial)); // the denial, and a re-send of it
    for (const { parts, outcomeOf, claimedDenials } of denied) {
      expect(claimedDenials).toEqual([]);
      // Told as denied (no result, no error), and the model asks for the same invoice again.
      expect(parts.filter((p) => p.type === "tool-output-denied").map((p) => (p as { toolCallId: string }).toolCallId)).toEqual([first.toolCall.toolCallId]);
      expect(outputsOf(parts)).toEqual([]);
      expect(parts.some((p) => p.type === "tool-error")).toBe(false);
      expect(outcomeOf(first.toolCall.toolCallId)).toBeUndefined();
      expect(approvalOf(parts)).toBeDefined();
    }
    expect(env.payments.effects()).toHaveLength(0);
    expect(keys).toEqual([]);

    // The user approves the re-asked call: it runs once, and every re-send of that approval, and
    // of the denial before it, is answered from the ledger or runs nothing.
    const second = approvalOf(denied[0]!.parts)!;
    const approval = [...denied[0]!.messages, respond(second.approvalId, true)];
    const runs = [await request(approval), await request(approval), await request(denial)];
    expect(env.payments.effects()).toHaveLength(1);
    expect(keys).toHaveLength(1);
    const told = { invoice: env.payments.effects()[0]!.resourceId, amount: 12_500 };
    expect(outputsOf(runs[0]!.parts)).toEqual([told]);
    expect(runs[0]!.outcomeOf(second.toolCall.toolCallId)).toMatchObject({ replayed: false });
    expect(outputsOf(runs[1]!.parts)).toEqual([told]);
    expect(runs[1]!.outcomeOf(second.toolCall.toolCallId)).toMatchObject({ replayed: true });
    expect(outputsOf(runs[2]!.parts)).toEqual([]);
  });

  it("a denial of an approval that an earlier request already carried and ran: the AI SDK reports it denied, claimedDenials() says it was done and with what", async () => {
    const approved = { ...invoiceTool(env.payments), needsApproval: true };
    const once = createOnceTools({ tools: { create_invoice: approved }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const request = async (messages: ModelMessage[]) => {
      const forTurn = once.forTurn({ conversationId: "chat_f", messages });
      const result = streamText({ model: model(), messages, tools: forTurn.tools, stopWhen: stepCountIs(2), maxRetries: 0 });
      const parts = await drain(result.fullStream);
      return { parts, messages: [...messages, ...(await result.response).messages], claimedDenials: await forTurn.claimedDenials() };
    };
    const asked = await request([{ role: "user", content: "bill acme" }]);
    const ask = approvalOf(asked.parts)!;
    const ran = await request([...asked.messages, respond(ask.approvalId, true)]);
    expect(env.payments.effects()).toHaveLength(1);
    expect(ran.claimedDenials).toEqual([]);
    // The client sends the same approval again, answered "no" this time (a second tab, a changed mind after a cut stream).
    const flipped = await request([...asked.messages, respond(ask.approvalId, false)]);
    expect(env.payments.effects()).toHaveLength(1);
    // The AI SDK tells the stream and the model "denied" ...
    expect(flipped.parts.some((p) => p.type === "tool-output-denied")).toBe(true);
    // ... but the invoice was made: the wrapper says so, with what it returned.
    expect(flipped.claimedDenials).toHaveLength(1);
    const [claimed] = flipped.claimedDenials;
    expect(claimed).toMatchObject({ toolCallId: ask.toolCall.toolCallId, toolName: "create_invoice", row: { state: "completed" } });
    expect(JSON.parse((claimed!.row as { result: string }).result)).toEqual({ invoice: env.payments.effects()[0]!.resourceId, amount: 12_500 });
  });
});

describe("AISDK-12 claimedDenials from UI messages", SLOW, () => {
  it("a part denied in the last message whose approval ran before is found; a denial that never ran is not", async () => {
    const runs: string[] = [];
    const once = createOnceTools({ tools: { create_invoice: { ...invoiceTool(env.payments, (k) => runs.push(k!)), needsApproval: true } }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    const user = { id: "u1", role: "user", parts: [{ type: "text", text: "bill acme" }] };
    const answered = (approved: boolean, toolCallId = "call_1") => [
      user,
      { id: "a1", role: "assistant", parts: [{ type: "tool-create_invoice", toolCallId, state: "approval-responded", input: acme, approval: { id: "ap_1", approved } }] },
    ];
    const approvedTurn = once.forTurn({ conversationId: "chat_u", messages: answered(true) });
    await approvedTurn.tools.create_invoice.execute!(acme, { toolCallId: "call_1", messages: [] });
    expect(runs).toHaveLength(1);
    const flipped = await once.forTurn({ conversationId: "chat_u", messages: answered(false) }).claimedDenials();
    expect(flipped).toEqual([expect.objectContaining({ toolCallId: "call_1", key: runs[0], row: expect.objectContaining({ state: "completed" }) })]);
    // Another conversation's denial of the same call never ran: nothing to tell.
    expect(await once.forTurn({ conversationId: "chat_v", messages: answered(false) }).claimedDenials()).toEqual([]);
  });
});
