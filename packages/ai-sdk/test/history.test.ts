import { InvalidArgumentError, MemoryLedger, isDispatchOnceError, type DispatchOnceError } from "@dispatch-once/core";
import { tool, type ModelMessage, type UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf, type OnceTurnInput } from "../src/index.js";

/*
 * AISDK-9, read from the request's own history: for each (tool, identity), the calls of the
 * current turn (after its last user message) that the history shows as run, or approved, start
 * the request's ordinals. Each test drives a wrapped tool's execute directly, as the AI SDK does.
 */

const pay = { payee: "bob", amount: 5, memo: "lunch" };
const payPart = (toolCallId: string, state: string, extra: Record<string, unknown> = {}) => ({ type: "tool-pay", toolCallId, state, input: pay, ...extra });

function setup(options: { identity?: boolean } = {}) {
  const runs: { ordinal: number; key: string; memo: string }[] = [];
  const payTool = tool({
    inputSchema: z.object({ payee: z.string(), amount: z.number(), memo: z.string() }),
    execute: async (input, execOptions) => {
      const info = dispatchOnceOf(execOptions)!;
      runs.push({ ordinal: info.ordinal, key: info.idempotencyKey, memo: input.memo });
      return { paid: runs.length };
    },
  });
  const ask = tool({ inputSchema: z.object({ question: z.string() }) }); // client-side
  const once = createOnceTools({
    tools: { pay: payTool, ask },
    effects: { pay: "keyed_write", ask: "read" }, // ask has no execute: not wrapped
    ledger: new MemoryLedger(),
    ...(options.identity ? { identity: { pay: ["payee", "amount"] } } : {}),
  });
  /** One request: forTurn, then the calls the AI SDK would execute in it, in order; the ordinals they got. */
  const request = async (input: OnceTurnInput, calls: { id: string; input?: typeof pay }[]) => {
    const turn = once.forTurn(input);
    const before = runs.length;
    const outputs: unknown[] = [];
    for (const call of calls) outputs.push(await turn.tools.pay.execute!(call.input ?? pay, { toolCallId: call.id, messages: [] }));
    return { ordinals: calls.map((c) => turn.outcomeOf(c.id)!.ordinal), ran: runs.length - before, outputs };
  };
  return { once, runs, request };
}

const user = (id: string): UIMessage => ({ id, role: "user", parts: [{ type: "text", text: "pay bob $5 twice" }] });
const assistant = (...parts: unknown[]): UIMessage => ({ id: "a", role: "assistant", parts: parts as UIMessage["parts"] });

function refusal(create: () => unknown): DispatchOnceError {
  try {
    create();
  } catch (error) {
    if (isDispatchOnceError(error)) return error;
    throw error;
  }
  throw new Error("not refused");
}

describe("AISDK-9: UI messages", () => {
  it("a call the turn already ran (output-available) moves an identical new call to the next ordinal, and it runs", async () => {
    const { request } = setup();
    await request({ conversationId: "c", messages: [user("u1")] }, [{ id: "t1" }]);
    const messages = [user("u1"), assistant({ type: "step-start" }, payPart("t1", "output-available", { output: { paid: 1 } }), payPart("t2", "approval-responded", { approval: { id: "ap2", approved: true } }))];
    // t2 was approved: the AI SDK executes it in this request; then the model makes t3, identical.
    const continued = await request({ conversationId: "c", messages }, [{ id: "t2" }, { id: "t3" }]);
    expect(continued).toMatchObject({ ordinals: [1, 2], ran: 2 });
    // The same continuation re-sent: the same ordinals, nothing runs.
    expect(await request({ conversationId: "c", messages }, [{ id: "t2" }, { id: "t3x" }])).toMatchObject({ ordinals: [1, 2], ran: 0 });
  });

  it("a call that ran and failed (output-error with its input) counts; a call the AI SDK found invalid (no input) does not", async () => {
    const { request } = setup();
    const failed = payPart("t1", "output-error", { errorText: "outcome_unknown" });
    const invalid = { type: "tool-pay", toolCallId: "t0", state: "output-error", input: undefined, rawInput: { payee: "bob", amount: "5" }, errorText: "Invalid input" };
    expect(await request({ conversationId: "c", messages: [user("u1"), assistant(invalid, failed)] }, [{ id: "t2" }])).toMatchObject({ ordinals: [1], ran: 1 });
  });

  it("a denied approval (output-denied, approved: false) did not run and does not count", async () => {
    const { request } = setup();
    const denied = payPart("t1", "output-denied", { approval: { id: "ap1", approved: false } });
    const answered = payPart("t2", "approval-responded", { approval: { id: "ap2", approved: true } });
    expect(await request({ conversationId: "c", messages: [user("u1"), assistant(denied, answered)] }, [{ id: "t2" }])).toMatchObject({ ordinals: [0] });
    // A denied approval response (approval-responded, approved: false) is not executed either.
    const no = payPart("t3", "approval-responded", { approval: { id: "ap3", approved: false } });
    expect(await request({ conversationId: "c", messages: [user("u1"), assistant(no)] }, [{ id: "t4" }])).toMatchObject({ ordinals: [0] });
  });

  it("an approved call the AI SDK denied on revalidation (output-denied, approved: true) keeps the ordinal it was given", async () => {
    const { request } = setup();
    // Request 2 gave t1 (approved) ordinal 0 and the model's t2 ordinal 1; t1 was then denied.
    const r2 = await request({ conversationId: "c", messages: [user("u1"), assistant(payPart("t1", "approval-responded", { approval: { id: "ap1", approved: true } }))] }, [{ id: "t2" }]);
    expect(r2.ordinals).toEqual([1]);
    const r3 = [user("u1"), assistant(payPart("t1", "output-denied", { approval: { id: "ap1", approved: true } }), payPart("t2", "output-available", { output: {} }))];
    // The next identical call is not t2's key.
    expect(await request({ conversationId: "c", messages: r3 }, [{ id: "t3" }])).toMatchObject({ ordinals: [2], ran: 1 });
  });

  it("calls still waiting (input-available, approval-requested), provider-executed calls and earlier turns' calls do not count", async () => {
    const { request } = setup();
    const earlier = assistant(payPart("t0", "output-available", { output: {} }));
    const messages = [
      user("u0"),
      earlier,
      user("u1"),
      assistant(payPart("t1", "input-available"), payPart("t2", "approval-requested", { approval: { id: "ap2" } }), payPart("t3", "output-available", { output: {}, providerExecuted: true })),
    ];
    expect(await request({ conversationId: "c", messages }, [{ id: "t4" }])).toMatchObject({ ordinals: [0] });
  });

  it("a client-side tool's result and another tool's calls do not count", async () => {
    const { request } = setup();
    const asked = { type: "tool-ask", toolCallId: "q1", state: "output-available", input: { question: "again?" }, output: { yes: true } };
    const dynamicOther = { type: "dynamic-tool", toolName: "lookup", toolCallId: "d1", state: "output-available", input: pay, output: {} };
    expect(await request({ conversationId: "c", messages: [user("u1"), assistant(asked, dynamicOther)] }, [{ id: "t1" }])).toMatchObject({ ordinals: [0] });
    // A dynamic-tool part of a wrapped tool (a static part the SDK normalized) counts as the tool's call.
    const dynamicPay = { type: "dynamic-tool", dynamic: false, toolName: "pay", toolCallId: "d2", state: "output-available", input: pay, output: {} };
    expect(await request({ conversationId: "c", messages: [user("u1"), assistant(dynamicPay)] }, [{ id: "t1" }])).toMatchObject({ ordinals: [1] });
  });

  it("two approved identical calls get their ordinals by toolCallId: re-sent with the parts reordered, each keeps its key", async () => {
    const { request, runs } = setup({ identity: true });
    const a = payPart("call_a", "approval-responded", { approval: { id: "x", approved: true }, input: { ...pay, memo: "first" } });
    const b = payPart("call_b", "approval-responded", { approval: { id: "y", approved: true }, input: { ...pay, memo: "second" } });
    const first = await request({ conversationId: "c", messages: [user("u1"), assistant(a, b)] }, [
      { id: "call_b", input: { ...pay, memo: "second" } },
      { id: "call_a", input: { ...pay, memo: "first" } },
    ]);
    expect(first.ordinals).toEqual([1, 0]);
    const again = await request({ conversationId: "c", messages: [user("u1"), assistant(b, a)] }, [
      { id: "call_a", input: { ...pay, memo: "first" } },
      { id: "call_b", input: { ...pay, memo: "second" } },
    ]);
    expect(again).toMatchObject({ ordinals: [0, 1], ran: 0 });
    expect(runs.map((r) => r.memo)).toEqual(["second", "first"]);
  });
});

describe("AISDK-9: a partly kept continuation (the client kept what streamed before the cut, against AISDK-8)", () => {
  it("the approved call's output kept and the model's next call cut before its result: the re-send's repeat of that call is answered from the ledger", async () => {
    const { request } = setup();
    const approvedA = payPart("tA", "approval-responded", { approval: { id: "ap", approved: true } });
    // The continuation: the AI SDK runs the approved tA, then the model's identical tB runs (dispatchAt tool-call), then the stream is cut.
    const cut = await request({ conversationId: "c", messages: [user("u1"), assistant(approvedA)] }, [{ id: "tA" }, { id: "tB" }]);
    expect(cut).toMatchObject({ ordinals: [0, 1], ran: 2 });
    // The client kept tA's output and tB's call without a result, and sends it again.
    const kept = [user("u1"), assistant(payPart("tA", "output-available", { output: {}, approval: { id: "ap", approved: true } }), payPart("tB", "input-available"))];
    expect(await request({ conversationId: "c", messages: kept }, [{ id: "tB2" }])).toMatchObject({ ordinals: [1], ran: 0, outputs: [cut.outputs[1]] });
  });
});

describe("DISPATCH-6 under AISDK-9", () => {
  it("warns for the second identical call of one request, not for a continuation's first call after the history's", async () => {
    const warnings: unknown[] = [];
    const payTool = tool({ inputSchema: z.object({ payee: z.string(), amount: z.number(), memo: z.string() }), execute: async () => "ok" });
    const once = createOnceTools({ tools: { pay: payTool }, effects: { pay: "keyed_write" }, ledger: new MemoryLedger(), dispatcher: { logger: { warn: (_m, fields) => void warnings.push(fields) } } });
    const continued = once.forTurn({ conversationId: "c", messages: [user("u1"), assistant(payPart("t1", "output-available", { output: {} }))] });
    await continued.tools.pay.execute!(pay, { toolCallId: "t2", messages: [] });
    expect(warnings).toEqual([]);
    await continued.tools.pay.execute!(pay, { toolCallId: "t3", messages: [] });
    expect(warnings).toEqual([{ tool: "pay", ordinal: 2, conversationId: "c", turnIndex: 1 }]);
  });
});

describe("AISDK-9: identity (a re-worded free-text field)", () => {
  it("a new call identical by identity runs though its memo is re-worded; its re-send with another wording is answered from the ledger", async () => {
    const { request, runs } = setup({ identity: true });
    const messages = [user("u1"), assistant(payPart("t1", "output-available", { output: {}, input: { ...pay, memo: "lunch with Bob" } }))];
    expect(await request({ conversationId: "c", messages }, [{ id: "t2", input: { ...pay, memo: "second lunch" } }])).toMatchObject({ ordinals: [1], ran: 1 });
    expect(await request({ conversationId: "c", messages }, [{ id: "t2b", input: { ...pay, memo: "another lunch" } }])).toMatchObject({ ordinals: [1], ran: 0 });
    expect(runs.map((r) => r.memo)).toEqual(["second lunch"]);
  });

  it("without an identity, a call whose memo differs is another call: it does not move the count", async () => {
    const { request } = setup();
    const messages = [user("u1"), assistant(payPart("t1", "output-available", { output: {}, input: { ...pay, memo: "lunch with Bob" } }))];
    expect(await request({ conversationId: "c", messages }, [{ id: "t2" }])).toMatchObject({ ordinals: [0] });
  });
});

describe("AISDK-9: model messages", () => {
  const call = (toolCallId: string, input: unknown = pay) => ({ type: "tool-call", toolCallId, toolName: "pay", input });
  const result = (toolCallId: string, output: unknown = { type: "json", value: { paid: 1 } }) => ({ type: "tool-result", toolCallId, toolName: "pay", output });

  it("tool-call parts with a tool-result count; an execution-denied result does not; an approved call without a result is executed at its own ordinal", async () => {
    const { request } = setup();
    const messages = [
      { role: "user", content: "pay bob $5 twice" },
      { role: "assistant", content: [call("t1"), { type: "tool-approval-request", approvalId: "ap1", toolCallId: "t1" }] },
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: "ap1", approved: true }] },
      { role: "tool", content: [result("t1")] },
      { role: "assistant", content: [call("t2"), { type: "tool-approval-request", approvalId: "ap2", toolCallId: "t2" }] },
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: "ap2", approved: false }] },
      { role: "tool", content: [result("t2", { type: "execution-denied", reason: "no" })] },
      { role: "assistant", content: [call("t3"), { type: "tool-approval-request", approvalId: "ap3", toolCallId: "t3" }] },
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: "ap3", approved: true }] },
    ] as ModelMessage[];
    expect(await request({ conversationId: "c", messages }, [{ id: "t3" }, { id: "t4" }])).toMatchObject({ ordinals: [1, 2], ran: 2 });
    expect(await request({ conversationId: "c", messages }, [{ id: "t3" }, { id: "t5" }])).toMatchObject({ ordinals: [1, 2], ran: 0 });
  });

  it("a provider that numbers its calls per response (the same toolCallId in two requests): each result and approval belongs to its own call", async () => {
    const { request } = setup();
    const approval = (n: number, approved: boolean) => [
      { role: "assistant", content: [call("call_0"), { type: "tool-approval-request", approvalId: `ap${n}`, toolCallId: "call_0" }] },
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: `ap${n}`, approved }] },
    ];
    const history = [{ role: "user", content: "pay bob $5 twice" }, ...approval(1, true), { role: "tool", content: [result("call_0")] }, ...approval(2, true)] as ModelMessage[];
    // The second call_0 was approved and has no result: the AI SDK executes it now, after the first.
    expect(await request({ conversationId: "c", messages: history }, [{ id: "call_0" }, { id: "call_1" }])).toMatchObject({ ordinals: [1, 2], ran: 2 });
    // That request's response kept (call_0's result, then the model's call_1 and its result): the
    // next identical call is a new one, on neither of their keys.
    const next = [
      ...history,
      { role: "tool", content: [result("call_0")] },
      { role: "assistant", content: [call("call_1")] },
      { role: "tool", content: [result("call_1")] },
    ] as ModelMessage[];
    expect(await request({ conversationId: "c", messages: next }, [{ id: "call_0" }])).toMatchObject({ ordinals: [3], ran: 1 });
  });

  it("an approval appended again after the call ran (the AI SDK then executes it again): answered from the ledger at its own ordinal", async () => {
    const { request } = setup();
    const asked = [
      { role: "user", content: "pay bob $5 twice" },
      { role: "assistant", content: [call("tA"), { type: "tool-approval-request", approvalId: "apA", toolCallId: "tA" }] },
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: "apA", approved: true }] },
    ] as ModelMessage[];
    expect(await request({ conversationId: "c", messages: asked }, [{ id: "tA" }, { id: "tB" }])).toMatchObject({ ordinals: [0, 1], ran: 2 });
    const answered = [...asked, { role: "tool", content: [result("tA")] }, { role: "assistant", content: [call("tB")] }, { role: "tool", content: [result("tB")] }];
    // A client that appends tA's approval once more: its result is not in the last message, so the AI SDK runs tA again.
    const again = [...answered, { role: "tool", content: [{ type: "tool-approval-response", approvalId: "apA", approved: true }] }] as ModelMessage[];
    expect(await request({ conversationId: "c", messages: again }, [{ id: "tA" }, { id: "tC" }])).toMatchObject({ ordinals: [0, 2], ran: 1 });
  });

  it("a call whose stream was cut before its result (a partly kept response) does not count: the model's repeat of it is answered from the ledger", async () => {
    const { request } = setup();
    const ask = { role: "user", content: "pay bob $5" } as ModelMessage;
    const ran = await request({ conversationId: "c", messages: [ask] }, [{ id: "t1" }]);
    const partial = [ask, { role: "assistant", content: [call("t1")] }] as ModelMessage[];
    expect(await request({ conversationId: "c", messages: partial }, [{ id: "t1b" }])).toMatchObject({ ordinals: [0], ran: 0, outputs: ran.outputs });
  });
});

describe("AISDK-9: an app that keeps its own history (turnIndex)", () => {
  it("turnMessages gives the turn's messages beside turnIndex: a windowed history seeds the ordinals", async () => {
    const { request } = setup();
    // The app's window kept only the turn's own messages; the turn index comes from its store.
    const window = [assistant(payPart("t1", "output-available", { output: {} }))];
    expect(await request({ conversationId: "c", turnIndex: 7, turnMessages: window }, [{ id: "t2" }])).toMatchObject({ ordinals: [1], ran: 1 });
    expect(await request({ conversationId: "c", turnIndex: 7, turnMessages: [user("u7"), ...window] }, [{ id: "t2" }])).toMatchObject({ ordinals: [1], ran: 0 });
  });

  it("turnIndex alone has no history: every request starts at ordinal 0 (a continuation's identical call is answered with the earlier one's result)", async () => {
    const { request } = setup();
    await request({ conversationId: "c", turnIndex: 3 }, [{ id: "t1" }]);
    expect(await request({ conversationId: "c", turnIndex: 3 }, [{ id: "t2" }])).toMatchObject({ ordinals: [0], ran: 0 });
  });

  it("turnMessages is refused with messages (one source) and without turnIndex", () => {
    const { once } = setup();
    const both = refusal(() => once.forTurn({ conversationId: "c", messages: [user("u1")], turnMessages: [] } as never));
    expect(both.code).toBe("invalid_argument");
    expect((both as InvalidArgumentError).field).toBe("input.turnMessages");
    expect(refusal(() => once.forTurn({ conversationId: "c", turnIndex: 1, turnMessages: "x" } as never)).message).toMatch(/turnMessages/);
  });
});

describe("AISDK-9: a history the wrapper cannot read is refused, naming the field", () => {
  const { once } = setup();
  const cases: [string, unknown[], string][] = [
    ["an unknown tool part state", [user("u1"), assistant(payPart("t1", "output-done"))], "messages[1].parts[0].state"],
    ["a tool part without its toolCallId", [user("u1"), assistant({ type: "tool-pay", state: "output-available", input: pay, output: {} })], "messages[1].parts[0].toolCallId"],
    ["an output without its input", [user("u1"), assistant({ type: "tool-pay", toolCallId: "t1", state: "output-available", output: {} })], "messages[1].parts[0].input"],
    ["an approval response without its approval", [user("u1"), assistant(payPart("t1", "approval-responded"))], "messages[1].parts[0].approval"],
    ["a dynamic tool part without its toolName", [user("u1"), assistant({ type: "dynamic-tool", toolCallId: "d1", state: "output-available", input: pay, output: {} })], "messages[1].parts[0].toolName"],
    ["a message that is not an object", [user("u1"), null], "messages[1]"],
    ["a message without a role", [user("u1"), { parts: [] }], "messages[1].role"],
    ["an assistant message with neither parts nor content", [user("u1"), { role: "assistant" }], "messages[1].content"],
    ["a tool message whose content is not an array", [{ role: "user", content: "hi" }, { role: "tool", content: "done" }], "messages[1].content"],
    ["a tool-call part without its toolName", [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "tool-call", toolCallId: "t1", input: pay }] }], "messages[1].content[0].toolName"],
    ["a tool-result without its output type", [{ role: "user", content: "hi" }, { role: "tool", content: [{ type: "tool-result", toolCallId: "t1", toolName: "pay", output: {} }] }], "messages[1].content[0].output.type"],
    ["an approval response whose approved is not a boolean", [{ role: "user", content: "hi" }, { role: "tool", content: [{ type: "tool-approval-response", approvalId: "a", approved: "yes" }] }], "messages[1].content[0].approved"],
  ];
  it.each(cases)("%s", (_, messages, field) => {
    const error = refusal(() => once.forTurn({ conversationId: "c", messages: messages as UIMessage[] }));
    expect(error.code).toBe("invalid_argument");
    expect((error as InvalidArgumentError).field).toBe(field);
  });

  it("an earlier turn's messages are not read (an old malformed part does not break the next turn)", () => {
    expect(() => once.forTurn({ conversationId: "c", messages: [user("u0"), assistant(payPart("t1", "output-done")), user("u1")] as UIMessage[] })).not.toThrow();
  });

  it("turnMessages' fields are named as such", () => {
    const error = refusal(() => once.forTurn({ conversationId: "c", turnIndex: 1, turnMessages: [assistant(payPart("t1", "output-done"))] }));
    expect((error as InvalidArgumentError).field).toBe("turnMessages[0].parts[0].state");
  });
});
