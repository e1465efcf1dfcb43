/**
 * The Responses wire as a gateway, a proxy or an OpenAI-compatible server may send it: event
 * sequences the mock does not produce, fed to the runner through a client whose
 * `responses.create` yields them (what the SDK's stream yields). The oracle is what ran, what
 * the user was told, and what a re-send reads back.
 */
import { describe, expect, it } from "vitest";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolError, ToolRegistry, defineTool, type Ledger } from "@dispatch-once/core";
import { z } from "zod";
import { ConversationRunner, TurnFailedError } from "../src/index.js";
import { isErrorOutput } from "../src/openai-shared.js";

const ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042" };
const BOB = { payee: "bob", amount: 4_000, currency: "EUR", reference: "LOAN-3" };

/** A runner whose n-th request (1-based) streams `responses(n)`; `paid` is the payments made. */
function wire(
  responses: (n: number, followUp: boolean) => unknown[],
  resultOf: (paymentId: string) => Record<string, unknown> = (paymentId) => ({ paymentId }),
  ledger: Ledger = new MemoryLedger(),
  store: MemoryConversationStore = new MemoryConversationStore(),
) {
  const paid: { payee: string; paymentId: string }[] = [];
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      description: "Send a payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string() }),
      run: async (args) => {
        const payment = { payee: args.payee, paymentId: `pay_${paid.length + 1}` };
        paid.push(payment);
        return resultOf(payment.paymentId);
      },
    }),
  ]);
  let requests = 0;
  const client = {
    responses: {
      create: async (body: { input: { type?: string }[] }) => {
        // A follow-up carries the turn's function_call_output items; a (re)try of the message does not.
        const events = responses(++requests, body.input.at(-1)?.type === "function_call_output");
        return (async function* () {
          yield* events;
        })();
      },
    },
  };
  const runner = new ConversationRunner({
    client: client as never,
    dispatcher: new Dispatcher({ tools, ledger }),
    store,
    model: "gpt-test",
    tools: tools.providerSchemas(),
    retry: { backoffMs: () => 1 },
  });
  return { runner, paid, requests: () => requests };
}

const created = { type: "response.created", response: { id: "resp_1", status: "in_progress", output: [] } };
/** Another response beginning in the same body: a proxy splicing in the response of the request it sent again. */
const restarted = { type: "response.created", response: { id: "resp_2", status: "in_progress", output: [] } };
const fcItem = (callId: string, args: object | string, status = "completed") => ({
  type: "function_call",
  id: `fc_${callId}`,
  call_id: callId,
  name: "send_payment",
  arguments: typeof args === "string" ? args : JSON.stringify(args),
  status,
});
const added = (index: number, callId: string) => ({ type: "response.output_item.added", output_index: index, item: fcItem(callId, "", "in_progress") });
const done = (index: number, callId: string, args: object) => ({ type: "response.output_item.done", output_index: index, item: fcItem(callId, args) });
const call = (index: number, callId: string, args: object) => [added(index, callId), done(index, callId, args)];
const completed = (output: unknown[] = []) => ({ type: "response.completed", response: { id: "resp_1", status: "completed", output } });
const message = (index: number, content: unknown[]) => [
  { type: "response.output_item.added", output_index: index, item: { type: "message", id: `msg_${index}`, role: "assistant", status: "in_progress", content: [] } },
  { type: "response.output_item.done", output_index: index, item: { type: "message", id: `msg_${index}`, role: "assistant", status: "completed", content } },
];
const answer = (text: string) => [created, ...message(0, [{ type: "output_text", text, annotations: [] }]), completed()];

describe("the Responses wire from gateways and compatible servers", () => {
  it("STREAM-8 response.completed listing a function call whose output_item.done never arrived is not an answer: the turn is retried and the call pays once", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? // The call was announced and streamed, its done event lost; the response's output says it was made.
          [created, added(0, "call_a"), { type: "response.function_call_arguments.delta", output_index: 0, delta: '{"payee":"ac' }, completed([fcItem("call_a", ACME)])]
        : n === 2
          ? [created, ...call(0, "call_b", ACME), completed([fcItem("call_b", ACME)])]
          : answer("Paid acme."),
    );
    const result = await runner.send("conv-lost-done", { id: "m1", content: "pay acme" });
    // Before: committed as the answer, with no call and no text, and nothing paid.
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: "pay_1" } })]);
    expect(result.turns.at(-1)!.text).toBe("Paid acme.");
    expect(paid).toHaveLength(1);
  });

  it("STREAM-8 response.completed after a function_call item that ended incomplete is not an answer: the call was abandoned, so the turn is retried and the call pays once", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? [created, added(0, "call_a"), { type: "response.output_item.done", output_index: 0, item: fcItem("call_a", '{"payee":"ac', "incomplete") }, completed([fcItem("call_a", '{"payee":"ac', "incomplete")])]
        : n === 2
          ? [created, ...call(0, "call_b", ACME), completed([fcItem("call_b", ACME)])]
          : answer("Paid acme."),
    );
    const result = await runner.send("conv-incomplete-item", { id: "m1", content: "pay acme" });
    // Before: committed as the answer, with no call and no text, and nothing paid.
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: "pay_1" } })]);
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
  });

  it("STREAM-8 a call that only response.completed lists, on every attempt: the turn fails with a record, never an empty answer", async () => {
    const { runner, paid } = wire(() => [created, completed([fcItem("call_a", ACME)])]);
    const error = await runner.send("conv-never-done", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(TurnFailedError.isInstance(error)).toBe(true);
    expect((error as TurnFailedError).message).toContain("output_item.done");
    expect(paid).toEqual([]);
  });

  it("STREAM-8 response.completed listing two calls under one call_id when the stream showed only one of them is not an answer: the turn is retried and each call pays once", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? // A server that repeats call_ids, and dropped the second call's events.
          [created, ...call(0, "call_same", ACME), completed([fcItem("call_same", ACME), fcItem("call_same", BOB)])]
        : n === 2
          ? [created, ...call(0, "call_same", ACME), ...call(1, "call_same", BOB), completed([fcItem("call_same", ACME), fcItem("call_same", BOB)])]
          : answer("Paid both."),
    );
    const result = await runner.send("conv-same-id-lost", { id: "m1", content: "pay acme and bob" });
    expect(result.turns[0]!.calls.map((c) => c.name)).toEqual(["send_payment", "send_payment"]);
    expect(paid.map((p) => p.payee)).toEqual(["acme", "bob"]);
  });

  it("TURN-7 two calls that share a call_id in one response: a re-send reads back each call's own payment", async () => {
    const { runner, paid } = wire((n) =>
      n === 1 ? [created, ...call(0, "call_same", ACME), ...call(1, "call_same", BOB), completed([fcItem("call_same", ACME), fcItem("call_same", BOB)])] : answer("Paid both."),
    );
    const first = await runner.send("conv-same-id", { id: "m1", content: "pay acme and bob" });
    const again = await runner.send("conv-same-id", { id: "m1", content: "pay acme and bob" });
    expect(again.fromStore).toBe(true);
    const told = (r: typeof first) => r.turns[0]!.calls.map((c) => [(c as { result?: { paymentId?: string } }).result?.paymentId, c.key]);
    expect(told(first)).toEqual([
      ["pay_1", expect.any(String)],
      ["pay_2", expect.any(String)],
    ]);
    // Before: both read back as pay_2, so the re-send told the user acme was paid with bob's payment.
    expect(told(again)).toEqual(told(first));
    expect(paid.map((p) => p.payee)).toEqual(["acme", "bob"]);
  });

  it("a refusal is what the model answered: its text is committed and returned, not an empty answer", async () => {
    const { runner } = wire(() => [created, ...message(0, [{ type: "refusal", refusal: "I can't send payments to that payee." }]), completed()]);
    const result = await runner.send("conv-refusal", { id: "m1", content: "pay acme" });
    expect(result.turns.map((t) => t.text)).toEqual(["I can't send payments to that payee."]);
    const again = await runner.send("conv-refusal", { id: "m1", content: "pay acme" });
    expect(again.turns.map((t) => t.text)).toEqual(["I can't send payments to that payee."]);
  });

  it("STREAM-10 an output_item.done whose arguments are empty after the deltas streamed them: the call runs with the streamed arguments, never with {}", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? [
            created,
            added(0, "call_a"),
            { type: "response.function_call_arguments.delta", output_index: 0, delta: JSON.stringify(ACME).slice(0, 9) },
            { type: "response.function_call_arguments.delta", output_index: 0, delta: JSON.stringify(ACME).slice(9) },
            // A gateway that does not repeat the arguments in the done item.
            { type: "response.output_item.done", output_index: 0, item: fcItem("call_a", "") },
            completed([fcItem("call_a", "")]),
          ]
        : answer("Paid acme."),
    );
    const result = await runner.send("conv-empty-done", { id: "m1", content: "pay acme" });
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ result: { paymentId: "pay_1" } })]);
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
  });

  it("STREAM-10 a function_call item whose output_item.added and output_item.done come again (a proxy re-delivering events) is one call: it pays once and is told once", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? // The same item (its output_index, item id and call_id) delivered twice.
          [created, ...call(0, "call_a", ACME), ...call(0, "call_a", ACME), completed([fcItem("call_a", ACME)])]
        : answer("Paid acme."),
    );
    const result = await runner.send("conv-redelivered", { id: "m1", content: "pay acme" });
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "call_a", ordinal: 0, result: { paymentId: "pay_1" } })]);
  });

  it("STREAM-10 a proxy that re-sends the request after its upstream died and splices the new response into the same body: the call the two responses share pays once", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? // Response 1 made the call and died before response.completed; response 2 follows in the same body.
          [created, ...call(0, "call_a", ACME), restarted, ...call(0, "call_b", ACME), completed([fcItem("call_b", ACME)])]
        : n === 2
          ? [created, ...call(0, "call_c", ACME), completed([fcItem("call_c", ACME)])]
          : answer("Paid acme."),
    );
    const result = await runner.send("conv-spliced", { id: "m1", content: "pay acme" });
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ ordinal: 0, result: { paymentId: "pay_1" } })]);
  });

  it("STREAM-8 a second response.created in one body (a spliced response whose call stands at another position) ends the attempt as a failed stream: the call pays once", async () => {
    const { runner, paid } = wire((n) =>
      n === 1
        ? // Response 1 said something, then made the call (position 1); response 2 makes it at position 0.
          [created, ...message(0, [{ type: "output_text", text: "Paying.", annotations: [] }]), ...call(1, "call_a", ACME), restarted, ...call(0, "call_b", ACME), completed([fcItem("call_b", ACME)])]
        : n === 2
          ? [created, ...call(0, "call_c", ACME), completed([fcItem("call_c", ACME)])]
          : answer("Paid acme."),
    );
    const result = await runner.send("conv-spliced-moved", { id: "m1", content: "pay acme" });
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ ordinal: 0, result: { paymentId: "pay_1" } })]);
  });

  it("STREAM-10 a spliced response without its response.created, whose message takes the position of the paid call and whose call stands after it: the attempt fails at the message, and the call pays once", async () => {
    const { runner, paid } = wire((n, followUp) =>
      followUp
        ? answer("Paid acme.")
        : n === 1
          ? // Response 1 made the call at position 0 and died; the proxy splices in response 2 from its first item on.
            [created, ...call(0, "call_a", ACME), ...message(0, [{ type: "output_text", text: "Paying acme.", annotations: [] }]), ...call(1, "call_b", ACME), completed([fcItem("call_b", ACME)])]
          : [created, ...call(0, "call_c", ACME), completed([fcItem("call_c", ACME)])],
    );
    const result = await runner.send("conv-spliced-position", { id: "m1", content: "pay acme" });
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ ordinal: 0, result: { paymentId: "pay_1" } })]);
  });

  it("STREAM-10 a message item at the position of a call that paid is not that call's answer: the turn never commits the payment's output without its call, and tells the payment", async () => {
    const { runner, paid } = wire((n, followUp) =>
      followUp
        ? answer("Paid acme.")
        : n === 1
          ? [created, ...call(0, "call_a", ACME), ...message(0, [{ type: "output_text", text: "Paying acme.", annotations: [] }]), completed([])]
          : [created, ...call(0, "call_c", ACME), completed([fcItem("call_c", ACME)])],
    );
    const result = await runner.send("conv-position-message", { id: "m1", content: "pay acme" });
    const again = await runner.send("conv-position-message", { id: "m1", content: "pay acme" });
    expect(paid.map((p) => p.payee)).toEqual(["acme"]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: "pay_1" } })]);
    // The re-send reads the committed turn back: it must hold the call its output answers.
    expect(again.turns[0]!.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: "pay_1" } })]);
  });

  it("TURN-7 a payment whose result looks like the runner's error answer ({ error: { name, message } }) is read back on a re-send as the result it was, not as a failure", async () => {
    const { runner, paid } = wire(
      (n) => (n === 1 ? [created, ...call(0, "call_a", ACME), completed([fcItem("call_a", ACME)])] : answer("Paid acme, with a warning.")),
      // The payments API accepted it and says something went wrong beside it: the effect happened.
      (paymentId) => ({ error: { name: "FxWarning", message: `${paymentId} settled at a stale rate` } }),
    );
    const first = await runner.send("conv-error-shaped", { id: "m1", content: "pay acme" });
    const again = await runner.send("conv-error-shaped", { id: "m1", content: "pay acme" });
    expect(first.turns[0]!.calls).toEqual([expect.objectContaining({ result: { error: { name: "FxWarning", message: "pay_1 settled at a stale rate" } }, ordinal: 0 })]);
    // Before: read back as { error }, so a client told the user the payment failed.
    expect(again.turns[0]!.calls).toEqual([{ ...first.turns[0]!.calls[0], replayed: true }]);
    expect(paid).toHaveLength(1);
  });

  // The runner's own codes inside such a result are the downstream's words, not the runner's: a
  // result carrying invalid_arguments_json was read back as a call that was never dispatched (no
  // key), and then as a failure, though it paid.
  // A store that keeps no call keys with a turn (TURN-24: one written before them) derives them again.
  it.each(["invalid_arguments_json"])("TURN-7 a payment whose error-shaped result carries the code %s is read back on a re-send as the result it was, with its key", async (code) => {
    const store = new MemoryConversationStore();
    Object.defineProperty(store, "capabilities", { value: { ...store.capabilities, supports: { ...store.capabilities.supports, callKeys: false } } });
    const { runner, paid } = wire(
      (n) => (n === 1 ? [created, ...call(0, "call_a", ACME), completed([fcItem("call_a", ACME)])] : answer("Paid acme, with a warning.")),
      (paymentId) => ({ error: { name: "FxWarning", message: `${paymentId} settled at a stale rate`, code } }),
      new MemoryLedger(),
      store,
    );
    const first = await runner.send(`conv-error-shaped-${code}`, { id: "m1", content: "pay acme" });
    const again = await runner.send(`conv-error-shaped-${code}`, { id: "m1", content: "pay acme" });
    console.log(`${code}: paid ${paid.length}; first ${JSON.stringify(first.turns[0]!.calls[0])}; re-send ${JSON.stringify(again.turns[0]!.calls[0])}`);
    expect(paid).toHaveLength(1);
    expect(first.turns[0]!.calls).toEqual([expect.objectContaining({ result: { error: { name: "FxWarning", message: "pay_1 settled at a stale rate", code } }, ordinal: 0 })]);
    expect(again.turns[0]!.calls).toEqual([{ ...first.turns[0]!.calls[0], replayed: true }]);
  });

  it("TURN-7 both OpenAI runners read invalid_arguments_json as their own answer only under arguments that are not a JSON object", () => {
    const output = JSON.stringify({ error: { name: "FxWarning", message: "settled at a stale rate", code: "invalid_arguments_json" } });
    // Chat Completions reads its stored turns through the same function (chat-runner.ts readTurn).
    expect(isErrorOutput(output, { payee: "acme" })).toBe(false);
    expect(isErrorOutput(output, undefined)).toBe(true); // arguments that were not JSON
    expect(isErrorOutput(output, [1])).toBe(true); // JSON, not an object
    expect(isErrorOutput(JSON.stringify({ error: { name: "ToolError", message: "declined", code: "card_declined" } }), { payee: "acme" })).toBe(true);
  });

  it("TURN-7 a committed error answer is read back as that error even when the call's row now holds a result: only the very output the turn committed counts as the tool's result", async () => {
    // The row no longer says what the turn committed (an operator's resolution, another request's
    // stored result under a reused key): the re-send must still answer with the committed turn.
    const base = new MemoryLedger();
    const ledger = Object.assign(Object.create(base) as Ledger, {
      lookup: async (key: string) => {
        const row = await base.lookup(key);
        return row === undefined ? undefined : { ...row, state: "completed", result: '{"paymentId":"pay_other"}' };
      },
    });
    const { runner } = wire(
      (n) => (n === 1 ? [created, ...call(0, "call_a", ACME), completed([fcItem("call_a", ACME)])] : answer("The payment was declined.")),
      () => {
        throw new ToolError("card declined", { disposition: "definite", code: "card_declined" });
      },
      ledger,
    );
    const first = await runner.send("conv-declined", { id: "m1", content: "pay acme" });
    expect(first.turns[0]!.calls).toEqual([expect.objectContaining({ error: expect.objectContaining({ message: expect.stringContaining("card declined") }) })]);
    const again = await runner.send("conv-declined", { id: "m1", content: "pay acme" });
    expect(again.fromStore).toBe(true);
    expect(again.turns[0]!.calls[0]).not.toHaveProperty("result");
    expect(again.turns[0]!.calls[0]).toMatchObject({ error: first.turns[0]!.calls[0]!.error });
  });
});
