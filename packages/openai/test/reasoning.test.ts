import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MemoryConversationStore, type JsonValue, type TurnCommit } from "@dispatch-once/core";
import { call, reasoning, respond, say, scriptFromPlans, startMockOpenAI, text, type Fault, type MockOpenAI } from "@dispatch-once/mock-openai";
import { ResponsesTurnAccumulator } from "../src/index.js";
import { PAY_ACME, closeDownstreams, providerPerTest, setup } from "./fixtures.js";

/*
 * A reasoning model's response: a reasoning item (summary streamed, fresh `rs_` id and
 * `encrypted_content` per response) before the function call. A cut inside it, or after the
 * call, must leave nothing of the cut attempt in the retry's input: the retry is the first
 * request again, its call is answered from the ledger, and the committed turn holds the
 * response the stream completed.
 */
const provider = providerPerTest();

function cutFirstAttempt(fault: Fault) {
  provider().setFaultPlan((request, info) => {
    const last = Array.isArray(request.input) ? (request.input.at(-1) as { role?: string }) : undefined;
    return info.attempt === 1 && last?.role === "user" ? fault : undefined;
  });
}

/*
 * Stateless (`store: false`, the encrypted content included), the API keeps nothing between the
 * requests, and the mock refuses as it does a follow-up whose reasoning item is not followed by an
 * item of its response named by its id: the committed call keeps its `fc_` item id beside its reasoning.
 */
const MODES = [
  ["stored", undefined],
  ["stateless", { store: false, include: ["reasoning.encrypted_content"] }],
] as const;

describe.each(MODES)("ConversationRunner: a reasoning item before the call, under a cut (%s)", (_mode, params) => {
  for (const [where, fault] of [
    ["inside the reasoning summary", { kind: "reset", at: { event: 4 } }],
    ["after the call, before response.completed", { kind: "reset", at: { beforeCompleted: true } }],
  ] as const) {
    it(`STREAM-5: a cut ${where} is retried with the first request's input; one payment`, async () => {
      cutFirstAttempt(fault as Fault);
      const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 20, ...(params === undefined ? {} : { runner: { params: params as never } }) });
      const result = await runner.send("conv-reasoning", { id: "m1", content: "pay acme, thinking" });
      expect(result.status).toBe("answered");
      expect(effects()).toHaveLength(1);
      const [first, retry, followUp] = provider().requests;
      expect(first!.faultFired).toBe(true);
      // The cut attempt's events really were reasoning events (the cut inside it) or all of them.
      expect(first!.events.some((e) => e.type.startsWith("response.reasoning_summary"))).toBe(true);
      // The retry is the first request again: nothing of the cut attempt (its reasoning item) came along.
      expect(retry!.bodyHash).toBe(first!.bodyHash);
      expect(retry!.attempt).toBe(2);
      // The follow-up carries the committed log and nothing the stream did not complete.
      const log = (await store.log("conv-reasoning")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Record<string, unknown>[];
      // The follow-up carries the whole committed log but the answer it was answered with.
      expect((followUp!.body as { input: unknown[] }).input).toEqual(log.slice(0, -1));
      expect(log.filter((i) => i.type === "function_call")).toHaveLength(1);
      // STREAM-15: the committed turn keeps the committing response's reasoning item as it was
      // done (its id, summary and encrypted content), in its place before the call; never the cut one's.
      const doneReasoning = (r: typeof retry) =>
        r!.events.filter((e) => e.type === "response.output_item.done" && (e.data as { item: { type: string } }).item.type === "reasoning").map((e) => (e.data as { item: unknown }).item);
      expect(log.map((i) => i.role ?? i.type)).toEqual(["user", "reasoning", "function_call", "function_call_output", "assistant"]);
      expect(log[1]).toEqual(doneReasoning(retry)[0]);
      // Beside it the call keeps its item id (`fc_…`), as delivered: the API pairs a reasoning item
      // with the item after it by that id and refuses a reasoning item it cannot pair.
      expect(log[2]).toMatchObject({ type: "function_call", id: retry!.calls[0]!.id, call_id: retry!.calls[0]!.callId });
      expect(doneReasoning(first)).not.toContainEqual(log[1]);
      expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: effects()[0]!.paymentId, status: "accepted" } })]);
    });
  }
});

/*
 * A reasoning model (gpt-5, the o-series) reasons on every response, its text answers too: the
 * closing answer of a tool loop, a plain answer, a sentence before or after a call. The API pairs a
 * reasoning item with the item after it by that item's id, so beside a reasoning item a committed
 * message is the output message item as the stream delivered it (its `msg_` id, `status`, its
 * content as `output_text` / `refusal` parts), never an id-less `{ role, content: "…" }`, which the
 * API refuses after a reasoning item (`Item 'rs_…' of type 'reasoning' was provided without its
 * required following item.`). A turn without reasoning commits its text as it always did.
 */
describe.each(MODES)("ConversationRunner: a reasoning model's text answers (%s)", (_mode, params) => {
  let mock: MockOpenAI;
  beforeEach(async () => {
    mock = await startMockOpenAI({
      seed: "openai-reasoning-text",
      script: scriptFromPlans(
        {
          "greet, thinking": respond(reasoning("A greeting: answer it."), text("Hello.")),
          "say then pay, thinking": respond(reasoning("Say it, then pay acme."), text("Paying acme."), call("send_payment", PAY_ACME)),
          "pay then say, thinking": respond(reasoning("Pay acme, then say so."), call("send_payment", PAY_ACME), text("Paying now.")),
          hello: say("Hi."),
        },
        // The closing answer after the outputs reasons too, as a reasoning model's does.
        { after: respond(reasoning("The payment went through."), text("Payment sent.")) },
      ),
    });
  });
  afterEach(async () => {
    await mock.close();
    await closeDownstreams();
  });

  type Item = Record<string, unknown>;
  /** The message items the stream delivered (`response.output_item.done`), request by request. */
  const deliveredMessages = (r: (typeof mock.requests)[number]) =>
    r.events.filter((e) => e.type === "response.output_item.done" && (e.data as { item: Item }).item.type === "message").map((e) => (e.data as { item: Item }).item);

  async function run(conversation: string, ...contents: string[]) {
    const { runner, effects, store } = await setup(mock, { guarded: true, latencyMs: 5, ...(params === undefined ? {} : { runner: { params: params as never } }) });
    const results = [];
    for (const [i, content] of contents.entries()) results.push(await runner.send(conversation, { id: `m${i + 1}`, content }));
    const log = (await store.log(conversation)).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Item[];
    return { runner, effects, results, log };
  }

  it("STREAM-15: a text-only answer commits the message item as delivered beside its reasoning; the next message's request carries both and is taken", async () => {
    const { runner, results, log } = await run("conv-greet", "greet, thinking", "hello");
    expect(results.map((r) => r.status)).toEqual(["answered", "answered"]);
    expect(log.map((i) => i.role ?? i.type)).toEqual(["user", "reasoning", "assistant", "user", "assistant"]);
    const [first, second] = mock.requests;
    expect(log[2]).toEqual(deliveredMessages(first!)[0]);
    expect(log[2]).toMatchObject({ type: "message", id: expect.stringMatching(/^msg_/), status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hello." }] });
    // The second message's request is the committed log, and the mock (the API's rules, stateless) took it.
    expect((second!.body as { input: unknown[] }).input).toEqual(log.slice(0, 4));
    expect(second!.status).toBe(200);
    // Without reasoning in its response, a turn commits its text as it always did.
    expect(log[4]).toEqual({ type: "message", role: "assistant", content: "Hi." });
    expect(results[0]!.turns[0]!.text).toBe("Hello.");
    // A re-send of the answered message reads the committed turn back: its text too.
    const again = await runner.send("conv-greet", { id: "m1", content: "greet, thinking" });
    expect(again.turns[0]!.text).toBe("Hello.");
  });

  /**
   * The previous version committed a message as `{ type, role, content: "…" }` beside its reasoning
   * item too: the API refuses that log's next request, and a failed turn commits nothing, so such a
   * conversation could never go on. Its earlier responses are sent without their reasoning (the API
   * discards an earlier turn's reasoning anyway) and without their items' ids, which name that
   * reasoning; the stored log is not touched.
   */
  class PreviousVersionStore extends MemoryConversationStore {
    override commitTurn(conversationId: string, commit: TurnCommit) {
      const legacy = (items: JsonValue): JsonValue =>
        Array.isArray(items)
          ? items.map((item) => {
              const m = item as { type?: string; role?: string; content?: { type: string; text?: string }[] };
              return m.type === "message" && m.role === "assistant" && Array.isArray(m.content) ? { type: "message", role: "assistant", content: m.content.map((p) => p.text ?? "").join("") } : item;
            })
          : items;
      return super.commitTurn(conversationId, { ...commit, assistant: legacy(commit.assistant) });
    }
  }

  it("STREAM-15: a log the previous version committed (an id-less message beside its reasoning item) is sent without that response's reasoning and item ids: the next message is answered", async () => {
    const store = new PreviousVersionStore();
    const { runner, effects } = await setup(mock, { guarded: true, latencyMs: 5, store, ...(params === undefined ? {} : { runner: { params: params as never } }) });
    const results = [];
    for (const [i, content] of ["say then pay, thinking", "greet, thinking", "hello"].entries()) results.push(await runner.send("conv-previous", { id: `m${i + 1}`, content }));
    expect(results.map((r) => r.status)).toEqual(["answered", "answered", "answered"]);
    expect(effects()).toHaveLength(1);
    const log = (await store.log("conv-previous")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Item[];
    // The stored log keeps what was committed: reasoning items beside id-less messages.
    expect(log.filter((i) => i.type === "reasoning")).toHaveLength(3);
    // The last request: every earlier response sent without its reasoning and its items' ids.
    const last = mock.requests.at(-1)!;
    const sent = (last.body as { input: Item[] }).input;
    expect(sent.filter((i) => i.type === "reasoning")).toEqual([]);
    expect(sent.filter((i) => i.id !== undefined)).toEqual([]);
    expect(sent.map((i) => i.role ?? i.type)).toEqual(["user", "assistant", "function_call", "function_call_output", "assistant", "user", "assistant", "user"]);
    expect(last.status).toBe(200);
  });

  for (const [content, order, said] of [
    ["say then pay, thinking", ["reasoning", "assistant", "function_call"], "Paying acme."],
    ["pay then say, thinking", ["reasoning", "function_call", "assistant"], "Paying now."],
  ] as const) {
    it(`STREAM-15: "${content}": the message and the call keep their ids beside the reasoning, and so does the closing answer; one payment`, async () => {
      const { effects, results, log } = await run(`conv-${content.split(" ")[0]}`, content, "hello");
      expect(results.map((r) => r.status)).toEqual(["answered", "answered"]);
      expect(effects()).toHaveLength(1);
      expect(log.map((i) => i.role ?? i.type)).toEqual(["user", ...order, "function_call_output", "reasoning", "assistant", "user", "assistant"]);
      const [first, closing, next] = mock.requests;
      const messageAt = 1 + order.indexOf("assistant");
      expect(log[messageAt]).toEqual(deliveredMessages(first!)[0]);
      expect(log[messageAt]).toMatchObject({ id: expect.stringMatching(/^msg_/), status: "completed", content: [{ type: "output_text", text: said }] });
      expect(log[1 + order.indexOf("function_call")]).toMatchObject({ id: first!.calls[0]!.id });
      // The closing answer (after the outputs) reasoned too: its message is kept as delivered.
      expect(log[6]).toEqual(deliveredMessages(closing!)[0]);
      expect(log[6]).toMatchObject({ id: expect.stringMatching(/^msg_/), status: "completed", content: [{ type: "output_text", text: "Payment sent." }] });
      expect(results[0]!.turns.map((t) => t.text)).toEqual([said, "Payment sent."]);
      expect((next!.body as { input: unknown[] }).input).toEqual(log.slice(0, 8));
      expect(next!.status).toBe(200);
    });
  }
});

describe("ResponsesTurnAccumulator: a message beside a reasoning item", () => {
  const events = (content: Item[]) =>
    [
      { type: "response.created", response: { id: "resp_1" } },
      { type: "response.output_item.done", output_index: 0, item: { id: "rs_1", type: "reasoning", summary: [], encrypted_content: "enc_1" } },
      { type: "response.output_item.added", output_index: 1, item: { id: "msg_1", type: "message", status: "in_progress", role: "assistant", content: [] } },
      { type: "response.output_item.done", output_index: 1, item: { id: "msg_1", type: "message", status: "completed", role: "assistant", content } },
      { type: "response.completed", response: { id: "resp_1", output: [] } },
    ] as never[];
  type Item = Record<string, unknown>;

  it("a refusal is committed as the API's refusal part, and is the turn's text", () => {
    const acc = new ResponsesTurnAccumulator();
    for (const e of events([{ type: "refusal", refusal: "I can't help with that." }])) acc.apply(e);
    expect(acc.output()[1]).toEqual({ id: "msg_1", type: "message", status: "completed", role: "assistant", content: [{ type: "refusal", refusal: "I can't help with that." }] });
    expect(acc.text()).toBe("I can't help with that.");
  });

  it("STREAM-15 a message whose output_item.done never came (a gateway that dropped it) is committed beside the reasoning with the id its added event gave, its text from the deltas", () => {
    // Without that id the item after the reasoning is id-less, and the API refuses every later
    // request of the conversation (the reasoning item "provided without its required following item").
    const acc = new ResponsesTurnAccumulator();
    const [created, reasoning, added, , completed] = events([]);
    const deltas = ["Hi ", "there."].map((delta) => ({ type: "response.output_text.delta", output_index: 1, content_index: 0, item_id: "msg_1", delta }) as never);
    for (const e of [created, reasoning, added, ...deltas, completed]) acc.apply(e!);
    expect(acc.completed).toBe(true);
    expect(acc.output()[1]).toEqual({ id: "msg_1", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Hi there.", annotations: [] }] });
    expect(acc.text()).toBe("Hi there.");
  });

  it("without reasoning, the same message commits as before: role and text only", () => {
    const acc = new ResponsesTurnAccumulator();
    for (const e of events([{ type: "output_text", text: "Hi.", annotations: [] }]).filter((_, i) => i !== 1)) acc.apply(e);
    expect(acc.output()).toEqual([{ type: "message", role: "assistant", content: "Hi." }]);
  });
});
