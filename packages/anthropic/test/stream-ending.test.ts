import { describe, expect, it } from "vitest";
import { end, scriptedWorld, start } from "./scripted-world.js";

const toolStart = (index: number, id: string) => ({ type: "content_block_start", index, content_block: { type: "tool_use", id, name: "send_payment", input: {} } });
const args = (index: number, partial_json: string) => ({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } });
const blockStop = (index: number) => ({ type: "content_block_stop", index });
const textBlock = (index: number, text: string) => [
  { type: "content_block_start", index, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index, delta: { type: "text_delta", text } },
  blockStop(index),
];

const world = (scripts: object[][]) => scriptedWorld(scripts, 2);

describe("a message_stop that leaves a tool_use block open (STREAM-8)", () => {
  it("STREAM-8 a tool_use announced but never stopped, then message_stop: the stream did not establish the call, so the attempt fails and is retried; nothing committed names a call without its result", async () => {
    const w = world([
      [start("msg_1"), toolStart(0, "toolu_1"), args(0, '{"payee":"acme","amount":5}'), ...end("tool_use")],
      [start("msg_2"), ...textBlock(0, "I could not pay."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-open-block", { id: "m1", content: "pay acme" });
    expect(w.requests).toHaveLength(2);
    expect(w.paid).toEqual([]);
    expect(result.turns.map((t) => [t.text, t.calls.length])).toEqual([["I could not pay.", 0]]);
    // What the next request will carry: no tool_use without its tool_result.
    const committed = JSON.stringify(await w.store.log("conv-open-block"));
    expect(committed).not.toContain("toolu_1");
  });

  it("STREAM-8 control: the same response with its content_block_stop pays once and commits the call with its result", async () => {
    const w = world([
      [start("msg_1"), toolStart(0, "toolu_1"), args(0, '{"payee":"acme","amount":5}'), blockStop(0), ...end("tool_use")],
      [start("msg_2"), ...textBlock(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-closed-block", { id: "m1", content: "pay acme" });
    expect(w.paid).toHaveLength(1);
    expect(result.turns.map((t) => t.calls.length)).toEqual([1, 0]);
  });
});

describe("a tool_use block delivered twice (a proxy re-sending events, STREAM-10)", () => {
  it("STREAM-10 a tool_use block whose content_block_start, deltas and content_block_stop come again at its index is one call: it pays once and is told once", async () => {
    const block = [toolStart(0, "toolu_1"), args(0, '{"payee":"acme","amount":5}'), blockStop(0)];
    const w = world([
      [start("msg_1"), ...block, ...block, ...end("tool_use")],
      [start("msg_2"), ...textBlock(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-redelivered-block", { id: "m1", content: "pay acme" });
    expect(w.paid).toEqual([{ payee: "acme", amount: 5 }]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "toolu_1", ordinal: 0, result: { paymentId: "pay_1" } })]);
  });
});

describe("events after message_stop (a proxy that splices a second response into the body, STREAM-1)", () => {
  it("STREAM-1 a tool_use block that arrives after message_stop belongs to no response of this attempt: it is not run, and the call pays once", async () => {
    const payment = (index: number, id: string) => [toolStart(index, id), args(index, '{"payee":"acme","amount":5}'), blockStop(index)];
    const w = world([
      [start("msg_1"), ...payment(0, "toolu_1"), ...end("tool_use"), start("msg_2"), ...textBlock(0, "Paying."), ...payment(1, "toolu_2"), ...end("tool_use")],
      [start("msg_3"), ...textBlock(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-after-stop", { id: "m1", content: "pay acme" });
    expect(w.paid).toEqual([{ payee: "acme", amount: 5 }]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "toolu_1", ordinal: 0, result: { paymentId: "pay_1" } })]);
  });

  it("STREAM-8 a second message_start before message_stop (the first response cut, the spliced one whose call stands at another index) ends the attempt as a failed stream: the call pays once", async () => {
    const payment = (index: number, id: string) => [toolStart(index, id), args(index, '{"payee":"acme","amount":5}'), blockStop(index)];
    const w = world([
      [start("msg_1"), ...textBlock(0, "Paying."), ...payment(1, "toolu_1"), start("msg_2"), ...payment(0, "toolu_2"), ...end("tool_use")],
      [start("msg_3"), ...payment(0, "toolu_3"), ...end("tool_use")],
      [start("msg_4"), ...textBlock(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-second-start", { id: "m1", content: "pay acme" });
    expect(w.paid).toEqual([{ payee: "acme", amount: 5 }]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "toolu_3", ordinal: 0, replayed: true, result: { paymentId: "pay_1" } })]);
  });
});

describe("a block of another kind at the index of a block (a spliced response without its message_start, STREAM-10)", () => {
  const payment = (index: number, id: string) => [toolStart(index, id), args(index, '{"payee":"acme","amount":5}'), blockStop(index)];
  it("STREAM-10 a text block at the index of a tool_use that paid, then the spliced response's tool_use at the next index: the attempt fails at the text block, and the call pays once and is told", async () => {
    const w = world([
      [start("msg_1"), ...payment(0, "toolu_1"), ...textBlock(0, "Paying acme."), ...payment(1, "toolu_2"), ...end("tool_use")],
      [start("msg_3"), ...payment(0, "toolu_3"), ...end("tool_use")],
      [start("msg_4"), ...textBlock(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-index-reused", { id: "m1", content: "pay acme" });
    const again = await w.runner.send("conv-index-reused", { id: "m1", content: "pay acme" });
    expect(w.paid).toEqual([{ payee: "acme", amount: 5 }]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ ordinal: 0, result: { paymentId: "pay_1" } })]);
    expect(again.turns[0]!.calls).toEqual([expect.objectContaining({ ordinal: 0, result: { paymentId: "pay_1" } })]);
  });
});

/**
 * STREAM-1 over every kind of event a body can carry after its message_stop, without a new
 * message_start (a proxy that re-sends the tail of the body, or appends another response's events
 * to it): none of them belongs to the turn. Each case runs the same first response with the tail
 * appended, and must pay, commit and answer exactly as the response without it does.
 */
describe("STREAM-1 events after message_stop with no new message_start (blind round L, L19)", () => {
  const payment = (index: number, id: string, json = '{"payee":"acme","amount":5}') => [toolStart(index, id), args(index, json), blockStop(index)];
  const tails: Record<string, object[]> = {
    "another tool_use block at the next index": payment(2, "toolu_2"),
    "another tool_use block with other arguments": payment(2, "toolu_2", '{"payee":"bob","amount":7}'),
    "the same tool_use block again at its index": payment(1, "toolu_1"),
    "a message_start of the same message, then a tool_use block": [start("msg_1"), ...payment(2, "toolu_2")],
    "a text block": textBlock(2, "spliced text"),
    "a text delta into the answered text block": [{ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: " spliced" } }],
    "a message_delta that says end_turn, and another message_stop": end("end_turn"),
    "an error event": [{ type: "error", error: { type: "overloaded_error", message: "Overloaded" } }],
  };
  const first = [start("msg_1"), ...textBlock(0, "Paying."), ...payment(1, "toolu_1"), ...end("tool_use")];
  const second = [start("msg_2"), ...textBlock(0, "Paid."), ...end("end_turn")];
  const outcome = async (tail: object[], name: string) => {
    const w = world([[...first, ...tail], second]);
    const conversationId = `conv-tail-${name.replace(/[^a-z]+/g, "-").slice(0, 40)}`;
    const result = await w.runner.send(conversationId, { id: "m1", content: "pay acme" });
    const turns = (await w.store.turnsOf(conversationId, "m1")).map((t) => ({ assistant: t.assistant, toolResults: t.toolResults, stopReason: t.stopReason }));
    return { paid: w.paid, requests: w.requests.length, texts: result.turns.map((t) => t.text), calls: result.turns.map((t) => t.calls.map((c) => [c.callId, c.ordinal])), turns };
  };
  it.each(Object.keys(tails))("STREAM-1 after message_stop: %s changes nothing the turn pays, commits or answers", async (name) => {
    const control = await outcome([], "control");
    expect(control.paid).toEqual([{ payee: "acme", amount: 5 }]);
    expect(await outcome(tails[name]!, name)).toEqual(control);
  });
});
