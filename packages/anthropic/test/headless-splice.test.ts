import { describe, expect, it } from "vitest";
import { TurnAccumulator } from "../src/index.js";
import { end, scriptedWorld, start } from "./scripted-world.js";

/**
 * A proxy that sent the request again after its upstream died splices the new response into the
 * body without its message_start and without a leading text block. With thinking on, every block
 * of the spliced response lands on a position holding a block of its own type (thinking on the
 * thinking block, its first tool_use on the first call), so STREAM-17's type check cannot see it:
 * STREAM-10 tells a re-delivered announcement from another response's by what it announces.
 */

const stop = (index: number) => ({ type: "content_block_stop", index });
const thinking = (index: number, text: string, signature: string) => [
  { type: "content_block_start", index, content_block: { type: "thinking", thinking: "", signature: "" } },
  { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: text } },
  { type: "content_block_delta", index, delta: { type: "signature_delta", signature } },
  stop(index),
];
const pay = (index: number, id: string, payee: string, amount: number) => [
  { type: "content_block_start", index, content_block: { type: "tool_use", id, name: "send_payment", input: {} } },
  { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: JSON.stringify({ payee, amount }) } },
  stop(index),
];
const text = (index: number, t: string) => [
  { type: "content_block_start", index, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index, delta: { type: "text_delta", text: t } },
  stop(index),
];

const world = (scripts: object[][]) => scriptedWorld(scripts, 3);

const ev = (e: unknown) => e as never;

describe("TurnAccumulator: a headless splice without a lead, thinking on (STREAM-10)", () => {
  it("STREAM-10 the spliced response's tool_use at the first call's index, with another id, fails the stream there: the spliced calls after it are never dispatchable, and the thinking block is kept", () => {
    const acc = new TurnAccumulator();
    const dispatchable: string[] = [];
    const feed = (events: object[]) => {
      for (const e of events) {
        const call = acc.apply(ev(e));
        if (call !== undefined) dispatchable.push(`${call.callId} ${JSON.stringify(call.input)}`);
      }
    };
    // The first response: thinking, acme (dispatched), then the upstream dies.
    feed([start("msg_1"), ...thinking(0, "Pay acme then bob.", "sig-1"), ...pay(1, "toolu_a1", "acme", 5)]);
    // The spliced response, reordered: [bob, acme].
    feed([...thinking(0, "Pay bob then acme.", "sig-2"), ...pay(1, "toolu_b2", "bob", 7), ...pay(2, "toolu_a2", "acme", 5), ...end("tool_use")]);
    expect(dispatchable).toEqual(['toolu_a1 {"payee":"acme","amount":5}']);
    expect(acc.secondMessage).toMatch(/tool_use block \(toolu_b2, send_payment\) started at index 1, which holds a tool_use block \(toolu_a1, send_payment\)/);
    expect(acc.messageStopped).toBe(false);
    expect(acc.content()[0]).toEqual({ type: "thinking", thinking: "Pay acme then bob.", signature: "sig-1" });
  });

  it("STREAM-10 a thinking block announced again at its index with other content fails the stream; announced again as it was, it is neither replaced nor extended", () => {
    const redacted = new TurnAccumulator();
    redacted.apply(ev(start("msg_1")));
    redacted.apply(ev({ type: "content_block_start", index: 0, content_block: { type: "redacted_thinking", data: "opaque-1" } }));
    redacted.apply(ev(stop(0)));
    redacted.apply(ev({ type: "content_block_start", index: 0, content_block: { type: "redacted_thinking", data: "opaque-2" } }));
    expect(redacted.secondMessage).toMatch(/redacted_thinking block \(opaque-2\) started at index 0, which holds a redacted_thinking block \(opaque-1\)/);
    expect(redacted.content()).toEqual([{ type: "redacted_thinking", data: "opaque-1" }]);

    // A proxy re-sending the whole block: same announcement, its deltas after its stop change nothing.
    const resent = new TurnAccumulator();
    for (const e of [start("msg_1"), ...thinking(0, "Pay acme.", "sig-1"), ...thinking(0, "Pay acme.", "sig-1")]) resent.apply(ev(e));
    expect(resent.secondMessage).toBeUndefined();
    expect(resent.content()).toEqual([{ type: "thinking", thinking: "Pay acme.", signature: "sig-1" }]);
  });

  it("STREAM-10 a server that numbers its call ids per response, and a spliced response identical to the first: every announcement is the held one's, nothing is dispatched twice and the first response's content stands", () => {
    const acc = new TurnAccumulator();
    const dispatchable: string[] = [];
    const response = [...thinking(0, "Pay acme then bob.", "sig-1"), ...pay(1, "call_0", "acme", 5), ...pay(2, "call_1", "bob", 7)];
    for (const e of [start("msg_1"), ...response.slice(0, 7), ...response, ...end("tool_use")]) {
      const call = acc.apply(ev(e));
      if (call !== undefined) dispatchable.push(call.callId);
    }
    expect(acc.secondMessage).toBeUndefined();
    expect(dispatchable).toEqual(["call_0", "call_1"]);
    expect(acc.content().map((b) => (b.type === "tool_use" ? `${b.id} ${JSON.stringify(b.input)}` : b.type))).toEqual(["thinking", 'call_0 {"payee":"acme","amount":5}', 'call_1 {"payee":"bob","amount":7}']);
  });
});

describe("TurnAccumulator: a call delivered again at another position (STREAM-10)", () => {
  it("STREAM-10 a tool_use that repeats the call at another index whole, its id, name and arguments (a relay that renumbers what it re-sends), fails the stream at its stop: the call is never dispatchable twice", () => {
    const acc = new TurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [start("msg_1"), ...text(0, "Paying."), ...pay(1, "toolu_a1", "acme", 5), ...pay(2, "toolu_a1", "acme", 5), ...end("tool_use")]) {
      const call = acc.apply(ev(e));
      if (call !== undefined) dispatchable.push(`${call.callId} ${JSON.stringify(call.input)}`);
    }
    expect(dispatchable).toEqual(['toolu_a1 {"payee":"acme","amount":5}']);
    expect(acc.secondMessage).toMatch(/the tool_use block at index 2 \(toolu_a1, send_payment\) repeats the call at index 1 whole/);
    // Never run: the attempt failed there, and its record lists the repeat as not run.
    expect(acc.calls.map((c) => c.phase)).toEqual(["complete", "abandoned"]);
  });

  it("STREAM-10 two calls under one id with other arguments (a model or server that repeats ids) are two calls: both dispatchable", () => {
    const acc = new TurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [start("msg_1"), ...pay(0, "functions.pay:0", "acme", 5), ...pay(1, "functions.pay:0", "bob", 7), ...end("tool_use")]) {
      const call = acc.apply(ev(e));
      if (call !== undefined) dispatchable.push(`${call.callId} ${JSON.stringify(call.input)}`);
    }
    expect(acc.secondMessage).toBeUndefined();
    expect(dispatchable).toEqual(['functions.pay:0 {"payee":"acme","amount":5}', 'functions.pay:0 {"payee":"bob","amount":7}']);
  });

  it("STREAM-10 two calls of one response with distinct ids, identical arguments, are two asks: both dispatchable (TURN-4)", () => {
    const acc = new TurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [start("msg_1"), ...pay(0, "toolu_a1", "acme", 5), ...pay(1, "toolu_a2", "acme", 5), ...end("tool_use")]) {
      const call = acc.apply(ev(e));
      if (call !== undefined) dispatchable.push(call.callId);
    }
    expect(acc.secondMessage).toBeUndefined();
    expect(dispatchable).toEqual(["toolu_a1", "toolu_a2"]);
  });
});

describe("TurnAccumulator: what a whole repeat is, member by member (STREAM-10, CallPhases.repeatedCall)", () => {
  /** A tool_use block of any name and any argument text. */
  const use = (index: number, id: string, name: string, json: string) => [
    { type: "content_block_start", index, content_block: { type: "tool_use", id, name, input: {} } },
    { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json } },
    stop(index),
  ];
  const run = (events: object[]) => {
    const acc = new TurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [start("msg_1"), ...events, ...end("tool_use")]) {
      const call = acc.apply(ev(e));
      if (call !== undefined) dispatchable.push(`${call.callId}|${call.name}|${JSON.stringify(call.input)}`);
    }
    return { acc, dispatchable };
  };

  it("STREAM-10 two identical calls without ids (a gateway that strips them) are two asks, not a repeat: an empty id names nothing", () => {
    const { acc, dispatchable } = run([...use(0, "", "send_payment", '{"payee":"acme","amount":5}'), ...use(1, "", "send_payment", '{"payee":"acme","amount":5}')]);
    expect(acc.secondMessage).toBeUndefined();
    expect(dispatchable).toEqual(['|send_payment|{"payee":"acme","amount":5}', '|send_payment|{"payee":"acme","amount":5}']);
  });

  it("STREAM-10 one id under two tools with the same arguments (a model or server that repeats ids) is two calls", () => {
    const { acc, dispatchable } = run([...use(0, "functions:0", "lookup_order", '{"order":42}'), ...use(1, "functions:0", "cancel_order", '{"order":42}')]);
    expect(acc.secondMessage).toBeUndefined();
    expect(dispatchable).toEqual(['functions:0|lookup_order|{"order":42}', 'functions:0|cancel_order|{"order":42}']);
  });

  it("STREAM-10 a repeat is judged by its arguments' data, not their text: re-serialised by the relay (its keys in another order, other spacing), it is still the call delivered again", () => {
    const { acc, dispatchable } = run([...use(0, "toolu_a1", "send_payment", '{"payee":"acme","amount":5}'), ...use(1, "toolu_a1", "send_payment", '{ "amount": 5, "payee": "acme" }')]);
    expect(dispatchable).toEqual(['toolu_a1|send_payment|{"payee":"acme","amount":5}']);
    expect(acc.secondMessage).toMatch(/the tool_use block at index 1 \(toolu_a1, send_payment\) repeats the call at index 0 whole/);
  });
});

describe("ConversationRunner: a call delivered again at another position (STREAM-10)", () => {
  it("STREAM-10 [acme] delivered again at the next index: the attempt fails there, the retry answers acme from the ledger; paid once, the turn commits one call", async () => {
    const w = world([
      [start("msg_1"), ...pay(0, "toolu_a1", "acme", 5), ...pay(1, "toolu_a1", "acme", 5), ...end("tool_use")],
      [start("msg_2"), ...pay(0, "toolu_a2", "acme", 5), ...end("tool_use")],
      [start("msg_3"), ...text(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-dup-id", { id: "m1", content: "pay acme 5" });
    expect(w.paid).toEqual([{ payee: "acme", amount: 5 }]);
    expect(result.turns[0]!.attempts).toBe(2);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.ordinal, c.replayed ?? false, c.result])).toEqual([["toolu_a2", 0, true, { paymentId: "pay_1" }]]);
    const log = await w.store.log("conv-dup-id");
    const uses = log.flatMap((m) => (Array.isArray((m as { content: unknown }).content) ? ((m as { content: { type: string }[] }).content.filter((b) => b.type === "tool_use")) : []));
    expect(uses).toHaveLength(1);
  });
});

describe("ConversationRunner: a headless splice without a lead, thinking on (STREAM-10)", () => {
  it("STREAM-10 [acme] then the spliced [bob, acme]: the attempt fails at bob's tool_use, the retry pays bob; acme and bob are paid once each and the turn commits [acme, bob]", async () => {
    const w = world([
      [start("msg_1"), ...thinking(0, "Pay acme then bob.", "sig-1"), ...pay(1, "toolu_a1", "acme", 5), ...thinking(0, "Pay bob then acme.", "sig-2"), ...pay(1, "toolu_b2", "bob", 7), ...pay(2, "toolu_a2", "acme", 5), ...end("tool_use")],
      [start("msg_3"), ...thinking(0, "Pay acme then bob.", "sig-3"), ...pay(1, "toolu_a3", "acme", 5), ...pay(2, "toolu_b3", "bob", 7), ...end("tool_use")],
      [start("msg_4"), ...text(0, "Paid."), ...end("end_turn")],
    ]);
    const result = await w.runner.send("conv-headless-splice", { id: "m1", content: "pay acme 5 and bob 7" });
    expect(w.paid).toEqual([
      { payee: "acme", amount: 5 },
      { payee: "bob", amount: 7 },
    ]);
    // The retry's acme is the first attempt's payment, answered from the ledger.
    expect(result.turns[0]!.attempts).toBe(2);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.ordinal, c.replayed ?? false, c.result])).toEqual([
      ["toolu_a3", 0, true, { paymentId: "pay_1" }],
      ["toolu_b3", 0, false, { paymentId: "pay_2" }],
    ]);
  });
});
