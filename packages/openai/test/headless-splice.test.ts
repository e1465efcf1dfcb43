/**
 * A proxy that sent the request again after its upstream died splices the new response into the
 * body without its response.created and without a leading message item: each of its items lands
 * on a position holding an item of its own type (reasoning on reasoning, its first function_call
 * on the first call), so STREAM-17's type check cannot see it. STREAM-10 tells a re-delivered
 * output_item.added / .done from another response's by the item it names (id, call_id, name).
 */
import { describe, expect, it } from "vitest";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool } from "@dispatch-once/core";
import { z } from "zod";
import { ConversationRunner, ResponsesTurnAccumulator } from "../src/index.js";

const ACME = { payee: "acme", amount: 5 };
const BOB = { payee: "bob", amount: 7 };

/** A runner whose n-th request (1-based) streams `responses(n)`; `paid` is the payments API's effect log. */
function wire(responses: (n: number, followUp: boolean) => unknown[]) {
  const paid: string[] = [];
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int() }),
      run: async (args) => {
        paid.push(`${args.payee} ${args.amount}`);
        return { paymentId: `pay_${paid.length}` };
      },
    }),
  ]);
  let requests = 0;
  const client = {
    responses: {
      create: async (body: { input: { type?: string }[] }) => {
        const events = responses(++requests, body.input.at(-1)?.type === "function_call_output");
        return (async function* () {
          yield* events;
        })();
      },
    },
  };
  const runner = new ConversationRunner({
    client: client as never,
    dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger() }),
    store: new MemoryConversationStore(),
    model: "gpt-test",
    tools: tools.providerSchemas(),
    retry: { backoffMs: () => 1 },
  });
  return { runner, paid };
}

const created = (id: string) => ({ type: "response.created", response: { id, status: "in_progress", output: [] } });
const fcItem = (callId: string, args: object | string, status = "completed") => ({
  type: "function_call",
  id: `fc_${callId}`,
  call_id: callId,
  name: "send_payment",
  arguments: typeof args === "string" ? args : JSON.stringify(args),
  status,
});
const call = (index: number, callId: string, args: object) => [
  { type: "response.output_item.added", output_index: index, item: fcItem(callId, "", "in_progress") },
  { type: "response.output_item.done", output_index: index, item: fcItem(callId, args) },
];
const reasoning = (index: number, id: string) => [
  { type: "response.output_item.added", output_index: index, item: { type: "reasoning", id, summary: [] } },
  { type: "response.output_item.done", output_index: index, item: { type: "reasoning", id, summary: [{ type: "summary_text", text: `thought ${id}` }] } },
];
const completed = (id: string, output: unknown[]) => ({ type: "response.completed", response: { id, status: "completed", output } });
const answer = (text: string) => [
  created("resp_9"),
  { type: "response.output_item.added", output_index: 0, item: { type: "message", id: "msg_9", role: "assistant", status: "in_progress", content: [] } },
  { type: "response.output_item.done", output_index: 0, item: { type: "message", id: "msg_9", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] } },
  completed("resp_9", []),
];

describe("a function_call delivered again at another position (STREAM-10)", () => {
  it("STREAM-10 the same item (its id, call_id and arguments) at a new output_index, as a relay that renumbers what it re-sends delivers it, fails the stream at its done event: dispatchable once", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [created("resp_1"), ...call(0, "call_a1", ACME), ...call(1, "call_a1", ACME), completed("resp_1", [fcItem("call_a1", ACME), fcItem("call_a1", ACME)])]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(c.callId);
    }
    expect(dispatchable).toEqual(["call_a1"]);
    expect(acc.streamError).toMatchObject({ event: "response.output_item.done", code: "output_item_repeated" });
    expect(acc.streamError?.message).toMatch(/the function_call at output_index 1 \(call_a1, send_payment\) repeats the call at output_index 0 whole/);
  });

  it("STREAM-10 a server that repeats call_ids under distinct item ids is not refused (its calls are two)", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    const twin = (index: number, itemId: string) => [
      { type: "response.output_item.added", output_index: index, item: { ...fcItem("call_0", "", "in_progress"), id: itemId } },
      { type: "response.output_item.done", output_index: index, item: { ...fcItem("call_0", ACME), id: itemId } },
    ];
    for (const e of [created("resp_1"), ...twin(0, "fc_x"), ...twin(1, "fc_y")]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(c.callId);
    }
    expect(acc.streamError).toBeUndefined();
    expect(dispatchable).toEqual(["call_0", "call_0"]);
  });

  it("STREAM-10 a server that repeats call_ids, two calls under distinct item ids, then a relay's repeat of the second item: the repeat is seen (its item is the second's), though the first call matches it too", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    const twin = (index: number, itemId: string) => [
      { type: "response.output_item.added", output_index: index, item: { ...fcItem("call_0", "", "in_progress"), id: itemId } },
      { type: "response.output_item.done", output_index: index, item: { ...fcItem("call_0", ACME), id: itemId } },
    ];
    for (const e of [created("resp_1"), ...twin(0, "fc_x"), ...twin(1, "fc_y"), ...twin(2, "fc_y")]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(c.callId);
    }
    // The two calls the model made, and not the third delivery of the second, which would pay again under ordinal 2.
    expect(dispatchable).toEqual(["call_0", "call_0"]);
    expect(acc.streamError).toMatchObject({ event: "response.output_item.done", code: "output_item_repeated" });
    expect(acc.streamError?.message).toMatch(/the function_call at output_index 2 \(call_0, send_payment\) repeats the call at output_index 1 whole/);
  });

  it("STREAM-10 one call_id under two items with other arguments is two calls", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [created("resp_1"), ...call(0, "call_0", ACME), ...call(1, "call_0", BOB)]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(`${c.callId} ${JSON.stringify(c.input)}`);
    }
    expect(acc.streamError).toBeUndefined();
    expect(dispatchable).toEqual(['call_0 {"payee":"acme","amount":5}', 'call_0 {"payee":"bob","amount":7}']);
  });

  it("STREAM-10 through the runner: two identical payments under one call_id (distinct item ids), then a relay's repeat of the second; the attempt fails at the repeat, the retry answers both from the ledger: paid twice, not three times", async () => {
    const item = (index: number, callId: string, itemId: string) => [
      { type: "response.output_item.added", output_index: index, item: { ...fcItem(callId, "", "in_progress"), id: itemId } },
      { type: "response.output_item.done", output_index: index, item: { ...fcItem(callId, ACME), id: itemId } },
    ];
    const both = (callId: string) => [{ ...fcItem(callId, ACME), id: `${callId}_x` }, { ...fcItem(callId, ACME), id: `${callId}_y` }];
    const w = wire((n, followUp) =>
      followUp
        ? answer("Paid twice.")
        : n === 1
          ? [created("resp_1"), ...item(0, "call_0", "call_0_x"), ...item(1, "call_0", "call_0_y"), ...item(2, "call_0", "call_0_y"), completed("resp_1", [...both("call_0"), both("call_0")[1]])]
          : [created(`resp_${n}`), ...item(0, `call_${n}`, `call_${n}_x`), ...item(1, `call_${n}`, `call_${n}_y`), completed(`resp_${n}`, both(`call_${n}`))],
    );
    const result = await w.runner.send("conv-twin-repeat", { id: "m1", content: "pay acme 5, twice" });
    expect(w.paid).toEqual(["acme 5", "acme 5"]);
    expect(result.turns[0]!.attempts).toBe(2);
    expect(result.turns[0]!.calls.map((c) => [c.ordinal, c.replayed ?? false])).toEqual([
      [0, true],
      [1, true],
    ]);
  });

  it("STREAM-10 through the runner: the attempt fails at the repeated item, the retry answers acme from the ledger; paid once", async () => {
    const w = wire((n, followUp) => (followUp ? answer("Paid.") : n === 1 ? [created("resp_1"), ...call(0, "call_a1", ACME), ...call(1, "call_a1", ACME), completed("resp_1", [fcItem("call_a1", ACME), fcItem("call_a1", ACME)])] : [created(`resp_${n}`), ...call(0, `call_a${n}`, ACME), completed(`resp_${n}`, [fcItem(`call_a${n}`, ACME)])]));
    const result = await w.runner.send("conv-dup-item", { id: "m1", content: "pay acme 5" });
    expect(w.paid).toEqual(["acme 5"]);
    expect(result.turns[0]!.attempts).toBe(2);
    expect(result.turns[0]!.calls.map((c) => [c.ordinal, c.replayed ?? false])).toEqual([[0, true]]);
  });
});

describe("ResponsesTurnAccumulator: a headless splice without a lead (STREAM-10)", () => {
  it("STREAM-10 the spliced response's reasoning and function_call at held positions, with other ids: the stream fails at the reasoning item, nothing of the spliced response is dispatchable, and the held reasoning stays", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    // The first response: reasoning, acme (dispatched), then the upstream dies; the spliced one, reordered: [bob, acme].
    const events = [created("resp_1"), ...reasoning(0, "rs_1"), ...call(1, "call_a1", ACME), ...reasoning(0, "rs_2"), ...call(1, "call_b2", BOB), ...call(2, "call_a2", ACME)];
    for (const e of [...events, completed("resp_1", [fcItem("call_b2", BOB), fcItem("call_a2", ACME)])]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(c.callId);
    }
    expect(dispatchable).toEqual(["call_a1"]);
    expect(acc.streamError).toMatchObject({ event: "response.output_item.added", code: "output_index_reused" });
    expect(acc.streamError?.message).toMatch(/a reasoning item \(rs_2\) at output_index 0, which holds the reasoning item \(rs_1\)/);
    expect(acc.output()[0]).toMatchObject({ type: "reasoning", id: "rs_1" });
  });

  it("STREAM-10 a function_call announced at the position of a call with another call_id fails the stream there", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    for (const e of [created("resp_1"), ...call(0, "call_a1", ACME), ...call(0, "call_b2", BOB), ...call(1, "call_a2", ACME)]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(c.callId);
    }
    expect(dispatchable).toEqual(["call_a1"]);
    expect(acc.streamError?.message).toMatch(/a function_call item \(fc_call_b2, call_b2, send_payment\) at output_index 0, which holds the function_call item \(fc_call_a1, call_a1, send_payment\)/);
  });

  it("STREAM-10 a server that numbers item and call ids per response, and a spliced response identical to the first: one call per position, each dispatched once, the first response's output stands", () => {
    const acc = new ResponsesTurnAccumulator();
    const dispatchable: string[] = [];
    const response = [...reasoning(0, "rs_0"), ...call(1, "call_0", ACME), ...call(2, "call_1", BOB)];
    for (const e of [created("resp_1"), ...response.slice(0, 4), ...response, completed("resp_1", [fcItem("call_0", ACME), fcItem("call_1", BOB)])]) {
      const c = acc.apply(e as never);
      if (c !== undefined) dispatchable.push(c.callId);
    }
    expect(acc.streamError).toBeUndefined();
    expect(dispatchable).toEqual(["call_0", "call_1"]);
    expect(acc.output().map((i) => (i.type === "function_call" ? `${i.call_id} ${i.arguments}` : i.type))).toEqual(["reasoning", `call_0 ${JSON.stringify(ACME)}`, `call_1 ${JSON.stringify(BOB)}`]);
  });
});

describe("ConversationRunner (Responses): a headless splice without a lead (STREAM-10)", () => {
  it("STREAM-10 [acme] then the spliced [bob, acme] without response.created: the attempt fails at bob's item, the retry pays bob; acme and bob are paid once each", async () => {
    const { runner, paid } = wire((n, followUp) =>
      followUp
        ? answer("Paid.")
        : n === 1
          ? [created("resp_1"), ...reasoning(0, "rs_1"), ...call(1, "call_a1", ACME), ...reasoning(0, "rs_2"), ...call(1, "call_b2", BOB), ...call(2, "call_a2", ACME), completed("resp_2", [fcItem("call_b2", BOB), fcItem("call_a2", ACME)])]
          : [created("resp_3"), ...reasoning(0, "rs_3"), ...call(1, "call_a3", ACME), ...call(2, "call_b3", BOB), completed("resp_3", [fcItem("call_a3", ACME), fcItem("call_b3", BOB)])],
    );
    const result = await runner.send("conv-headless-splice", { id: "m1", content: "pay acme 5 and bob 7" });
    expect(paid).toEqual(["acme 5", "bob 7"]);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.ordinal, c.replayed ?? false, c.result])).toEqual([
      ["call_a3", 0, true, { paymentId: "pay_1" }],
      ["call_b3", 0, false, { paymentId: "pay_2" }],
    ]);
  });
});
