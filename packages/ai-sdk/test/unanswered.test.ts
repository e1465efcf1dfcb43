import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import { call, respond, say, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, tool, type ModelMessage, type ToolSet, type UIMessage } from "ai";
import { z } from "zod";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createOnceTools, type OnceTurn } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet, settled } from "./helpers.js";

/*
 * AISDK-14: a request of a turn whose earlier request paid and was not kept (a cut stream, AISDK-8)
 * is answered by a model that may not make the call again: it asks a question, calls with other
 * arguments, or the user edited the message. The kept answer then holds no trace of the payment,
 * and neither does the history the client sends next. `turn.unansweredCalls()` lists the turn's
 * ledger rows that neither the request nor its history answers, with what each says of its effect
 * (RECORD-8's statements), so the app can tell the user of every effect the turn made.
 */

const SLOW = { timeout: 30_000 };
const acme = { customer: "acme", amount: 12_500 };
const bob = { customer: "bob", amount: 700 };

let mock: MockOpenAI;
let payments: MockPaymentsServer;
/** What the model answers, request by request (a function of the request's number, from 0). */
let answers: ((request: { input: unknown }) => ReturnType<typeof say>)[] = [];
let served = 0;
beforeEach(async () => {
  payments = await startMockPayments();
  served = 0;
  mock = await startMockOpenAI({
    seed: "ai-sdk-unanswered",
    script: (request) => {
      const last = Array.isArray(request.input) ? request.input[request.input.length - 1] : undefined;
      // After a tool result the model says it is done, so a step loop ends.
      if (last?.type === "function_call_output") return say("Done.");
      const answer = answers[served++];
      if (answer === undefined) throw new Error(`no answer scripted for request ${served - 1}`);
      return answer(request);
    },
  });
});
afterEach(async () => {
  await mock.close();
  await payments.close();
});

const model = () => createOpenAI({ baseURL: mock.baseURL, apiKey: "test" }).responses("gpt-5");

function app(ledger: Ledger = new MemoryLedger()) {
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
  /** One request of the chat route: the turn's view of the tools, what the stream produced, and what the app would keep. */
  const request = async (messages: ModelMessage[], dispatchAt: "step" | "tool-call" = "tool-call") => {
    const turn = once.forTurn({ conversationId: "chat_u", messages, dispatchAt });
    const result = streamText({ model: model(), messages, tools: turn.tools as ToolSet, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 });
    const parts = await drain(result.fullStream);
    const cut = parts.some((p) => p.type === "error");
    return { turn: turn as OnceTurn<ToolSet>, parts, cut, kept: cut ? undefined : [...messages, ...(await result.response).messages] };
  };
  return { once, request, settle: () => settled(ledger, "chat_u") };
}

describe("AISDK-14: the turn's effects that the kept answer does not answer", SLOW, () => {
  it("a regenerate after a cut whose model asks a question instead: the payment the cut request made is listed as happened", async () => {
    const { request, settle } = app();
    const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    answers = [() => respond(call("create_invoice", acme)), () => say("Which currency should the invoice be in?")];
    // The connection dies after the call's output_item.done: the call ran from its tool-call part.
    mock.queueFault({ kind: "reset", at: { beforeCompleted: true } });
    const cut = await request(messages);
    expect(cut.cut).toBe(true);
    await settle();
    // The regenerate (same messages) is answered with a question: nothing in it tells of the invoice.
    const regenerate = await request(messages);
    expect(regenerate.cut).toBe(false);
    expect(outputsOf(regenerate.parts)).toEqual([]);
    const unanswered = await regenerate.turn.unansweredCalls();
    expect(unanswered.listed).toBe(true);
    expect(unanswered.calls).toEqual([
      expect.objectContaining({ name: "create_invoice", state: "completed", effect: "happened", result: { invoice: payments.effects()[0]!.resourceId, amount: 12_500 } }),
    ]);
    // Which invoice: the arguments its claim stored, so the user is told more than "create_invoice happened".
    expect(unanswered.calls[0]).toMatchObject({ input: acme });
  });

  it("a response the provider ended at its output limit after a call that ran at its tool-call part (AISDK-8): its answer has no result for the call, so the request lists it", async () => {
    const { request, settle } = app();
    const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    answers = [() => respond(call("create_invoice", acme))];
    // response.incomplete right after the call's output_item.done: the AI SDK finishes the step
    // with `length` and runs no tool of it, while the call was dispatched at its tool-call part.
    mock.queueFault({ kind: "incomplete_event", at: { afterCallDone: 0 } });
    const ended = await request(messages);
    expect(ended.cut).toBe(false);
    expect(ended.parts.find((p) => p.type === "finish")).toMatchObject({ finishReason: "length" });
    expect(outputsOf(ended.parts)).toEqual([]);
    await settle();
    expect(payments.effects()).toHaveLength(1);
    // Nothing the request answers tells of the invoice: the app may show this answer (AISDK-8 says
    // not to tell the user the call did not happen), and only this listing can tell of it.
    const unanswered = await ended.turn.unansweredCalls();
    expect(unanswered.calls).toEqual([expect.objectContaining({ name: "create_invoice", state: "completed", effect: "happened" })]);
  });

  it("the user edits the cut message (same turn, AISDK-1) and the model bills someone else: the first bill is listed, the new one is answered", async () => {
    const { request, settle } = app();
    answers = [() => respond(call("create_invoice", acme)), () => respond(call("create_invoice", bob))];
    mock.queueFault({ kind: "reset", at: { beforeCompleted: true } });
    await request([{ role: "user", content: "bill acme" }]);
    await settle();
    const edited = await request([{ role: "user", content: "bill bob instead" }]);
    expect(edited.cut).toBe(false);
    expect(payments.effects()).toHaveLength(2);
    const unanswered = await edited.turn.unansweredCalls();
    expect(unanswered.calls.map((c) => [c.name, c.effect, (c.result as { amount?: number } | undefined)?.amount])).toEqual([["create_invoice", "happened", 12_500]]);
  });

  it("control: a regenerate whose model makes the call again is answered from the ledger, and nothing is unanswered", async () => {
    const { request, settle } = app();
    const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];
    answers = [() => respond(call("create_invoice", acme)), () => respond(call("create_invoice", acme))];
    mock.queueFault({ kind: "reset", at: { beforeCompleted: true } });
    await request(messages);
    await settle();
    const regenerate = await request(messages);
    expect(payments.effects()).toHaveLength(1);
    expect(outputsOf(regenerate.parts)).toHaveLength(1);
    expect(await regenerate.turn.unansweredCalls()).toEqual({ listed: true, calls: [] });
  });

  it("a call the history shows with its result is answered there; the next request of the turn lists nothing for it", async () => {
    const { request } = app();
    answers = [() => respond(call("create_invoice", acme)), () => say("Anything else?")];
    const first = await request([{ role: "user", content: "bill acme" }], "step");
    expect(first.cut).toBe(false);
    expect(payments.effects()).toHaveLength(1);
    // A continuation of the same turn (no new user message): its history carries the call and its result.
    const next = await request([...first.kept!, { role: "assistant", content: "Should I send it?" }]);
    expect(next.turn.turnIndex).toBe(first.turn.turnIndex);
    expect(await next.turn.unansweredCalls()).toEqual({ listed: true, calls: [] });
  });

  it("a ledger that does not list rows: listed false with the reason, and no call claimed to be the whole truth", async () => {
    // A memory ledger that declares no listing (capabilities.supports.listRows false).
    const ledger = new Proxy(new MemoryLedger(), {
      get(target, name, receiver) {
        if (name === "capabilities") return { ...target.capabilities, supports: { ...target.capabilities.supports, listRows: false } };
        const value = Reflect.get(target, name, receiver) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const { request } = app(ledger);
    answers = [() => say("Which customer?")];
    const asked = await request([{ role: "user", content: "bill someone" }]);
    const unanswered = await asked.turn.unansweredCalls();
    expect(unanswered).toEqual({ listed: false, calls: [], reason: expect.stringMatching(/listRows/) });
  });
});

describe("AISDK-14 over a UI history (the history's word against the ledger's)", () => {
  const input = { payee: "bob", amount: 5 };
  const user: UIMessage = { id: "m1", role: "user", parts: [{ type: "text", text: "pay bob $5" }] };
  const assistant = (state: "output-available" | "output-error", toolCallId = "call_a"): UIMessage => ({
    id: `a-${toolCallId}`,
    role: "assistant",
    parts: [
      state === "output-available"
        ? { type: "tool-pay", toolCallId, state, input, output: { ok: true } }
        : { type: "tool-pay", toolCallId, state, input, errorText: "outcome_unknown: the payment may have been made" },
    ] as UIMessage["parts"],
  });
  function chat() {
    let paid = 0;
    const pay = tool({ inputSchema: z.object({ payee: z.string(), amount: z.number() }), execute: async () => ({ ok: true, n: ++paid }) });
    const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger: new MemoryLedger() });
    const ask = async (messages: UIMessage[], calls: number) => {
      const turn = once.forTurn({ conversationId: "chat_ui", messages });
      for (let n = 0; n < calls; n++) await turn.tools.pay.execute!(input, { toolCallId: `call_${messages.length}_${n}`, messages: [] });
      return turn;
    };
    return { ask, paid: () => paid };
  }

  it("a call the history shows answered with its result is told there: not listed", async () => {
    const { ask } = chat();
    await ask([user], 1);
    const next = await ask([user, assistant("output-available")], 0);
    expect(await next.unansweredCalls()).toEqual({ listed: true, calls: [] });
  });

  it("a call the history shows as an error, whose row completed, is listed as happened (the history is not the ledger)", async () => {
    const { ask, paid } = chat();
    await ask([user], 1);
    expect(paid()).toBe(1);
    const next = await ask([user, assistant("output-error")], 0);
    const found = await next.unansweredCalls();
    expect(found.calls.map((c) => [c.name, c.state, c.effect])).toEqual([["pay", "completed", "happened"]]);
  });

  it("a second identical call of the turn in a continuation runs, is answered by its request, and the first stays told by the history", async () => {
    const { ask, paid } = chat();
    await ask([user], 1);
    const next = await ask([user, assistant("output-available")], 1);
    expect(paid()).toBe(2);
    expect(await next.unansweredCalls()).toEqual({ listed: true, calls: [] });
  });

  it("a request that does not carry the call's answer (a history cut into the turn) lists it", async () => {
    const { ask } = chat();
    await ask([user], 2);
    // The history shows one of the two identical calls: which ordinal it holds is the first (AISDK-9).
    const next = await ask([user, assistant("output-available")], 0);
    const found = await next.unansweredCalls();
    expect(found.calls.map((c) => [c.name, c.effect])).toEqual([["pay", "happened"]]);
  });

  it("only this turn's rows: a call of an earlier turn, and a repair the wrapper recorded, are not effects of this turn", async () => {
    const { ask } = chat();
    await ask([user], 1);
    const second: UIMessage = { id: "m2", role: "user", parts: [{ type: "text", text: "thanks" }] };
    const turn = await ask([user, assistant("output-available"), second], 0);
    expect(turn.turnIndex).toBe(2);
    // A repair recorded in this turn is a row of this turn, not an effect (AISDK-11).
    const repair = turn.repairToolCall(async ({ toolCall }) => ({ ...toolCall, input: JSON.stringify(input) }));
    await repair({ toolCall: { type: "tool-call", toolCallId: "call_r", toolName: "pay", input: "{payee: bob" } } as unknown as Parameters<typeof repair>[0]);
    expect(await turn.unansweredCalls()).toEqual({ listed: true, calls: [] });
  });
});
