import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AIMessage, HumanMessage, RemoveMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { Dispatcher, MemoryLedger, ToolError, defineTool } from "@dispatch-once/core";
import { assertStopReason, commitAssistantMessage, createOnceToolsNode, onceRetryOn, onceToolsStopOf, onceTurns, stopReasonOf } from "../src/index.js";

/*
 * Real LangGraph (StateGraph, MemorySaver, retry policies) with a scripted model and core's
 * MemoryLedger. Each test reads both what was paid (the payments API's effect log) and what the
 * graph committed (the checkpoint's messages).
 */

type Fate = "ok" | "lose-response" | "refuse" | "unavailable";

/** A payments API that deduplicates by Idempotency-Key (`made`), and a wire API that cannot (`wires`). */
function payments(fate: (reference: string, attempt: number) => Fate = () => "ok") {
  const made = new Map<string, { id: string; payee: string; amount: number; reference: string }>();
  const wires: { payee: string; amount: number }[] = [];
  const attempts = new Map<string, number>();
  const sendPayment = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), reference: z.string() }),
    async run(args, { idempotencyKey }) {
      const attempt = (attempts.get(args.reference) ?? 0) + 1;
      attempts.set(args.reference, attempt);
      const what = fate(args.reference, attempt);
      if (what === "refuse") throw new ToolError("payments API 400: payee unknown", { disposition: "definite" });
      // Refused before the request was accepted: nothing paid, a re-run may succeed.
      if (what === "unavailable") throw new ToolError("payments API 503 before the request was accepted", { disposition: "not_performed" });
      if (!made.has(idempotencyKey)) made.set(idempotencyKey, { id: `pay_${made.size + 1}`, ...args });
      // Paid, and the response lost on the way back: the API has it under this key.
      if (what === "lose-response") throw new ToolError("payments API unreachable after the request was sent", { disposition: "unknown" });
      return { id: made.get(idempotencyKey)!.id, reference: args.reference };
    },
  });
  const sendWire = defineTool({
    name: "send_wire",
    effect: "unkeyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int() }),
    async run(args) {
      wires.push(args);
      throw new ToolError("wire API timed out after the request was sent", { disposition: "unknown" });
    },
  });
  return { made, wires, tools: [sendPayment, sendWire] };
}

/**
 * The model, scripted as ChatAnthropic hands its messages over (stop_reason in additional_kwargs).
 * "pay <payee> <amount> <reference> [twice]" or "wire <payee> <amount>". After tool results it
 * answers in text, or, when `retrying` and a result was an error, calls the tool again once (as
 * real models do). `cutNext` makes the next response a cut stream: no stop reason, amount 12.
 */
function scriptedModel(options: { retrying?: boolean } = {}) {
  let n = 0;
  const state = { calls: 0, cutNext: 0 };
  function respond(messages: BaseMessage[]): AIMessage {
    state.calls++;
    const last = messages.at(-1);
    const id = () => `toolu_${++n}`;
    if (last !== undefined && ToolMessage.isInstance(last)) {
      const retried = messages.some((m) => AIMessage.isInstance(m) && m.content === "retrying");
      if (options.retrying && last.status === "error" && !retried) {
        const asked = [...messages].reverse().find((m) => AIMessage.isInstance(m) && (m.tool_calls?.length ?? 0) > 0) as AIMessage;
        return new AIMessage({ content: "retrying", tool_calls: asked.tool_calls!.map((c) => ({ ...c, id: id() })), additional_kwargs: { stop_reason: "tool_use" } });
      }
      return new AIMessage({ content: `done: ${String(last.content)}`, additional_kwargs: { stop_reason: "end_turn" } });
    }
    const words = String(last?.content ?? "").split(" ");
    if (words[0] === "wire") {
      return new AIMessage({ content: "", tool_calls: [{ id: id(), name: "send_wire", args: { payee: words[1]!, amount: Number(words[2]) } }], additional_kwargs: { stop_reason: "tool_use" } });
    }
    const args = { payee: words[1]!, amount: Number(words[2]), reference: words[3]! };
    if (state.cutNext > 0) {
      state.cutNext--;
      // A stream cut inside the call's arguments: "amount": 1234567 arrived as 12, and no message_delta.
      return new AIMessage({ content: "", tool_calls: [{ id: id(), name: "send_payment", args: { ...args, amount: Number(String(args.amount).slice(0, 2)) } }] });
    }
    const calls = words[4] === "twice" ? [args, args] : [args];
    return new AIMessage({ content: "", tool_calls: calls.map((a) => ({ id: id(), name: "send_payment", args: a })), additional_kwargs: { stop_reason: "tool_use" } });
  }
  return { respond, state };
}

/** Core's MemoryLedger declared durable, as the app's PostgreSQL one is (an unkeyed write needs one). */
function durableLedger(): MemoryLedger {
  const ledger = new MemoryLedger();
  return Object.assign(Object.create(ledger) as MemoryLedger, { capabilities: { ...ledger.capabilities, durability: "durable" as const } });
}

/** An assistant message with these calls, ended with a stop reason (as commitAssistantMessage lets through). */
const callsMessage = (tool_calls: { id: string; name: string; args: Record<string, unknown> }[]) => new AIMessage({ content: "", tool_calls, additional_kwargs: { stop_reason: "tool_use" } });

/** The tools node alone over the payments API's tools (the graph's node, run by a test directly). */
const toolsNodeOf = (api: ReturnType<typeof payments>, ledger: MemoryLedger = durableLedger()) => createOnceToolsNode({ dispatcher: new Dispatcher({ tools: api.tools, ledger, logger: { warn: () => {} } }) });

const State = Annotation.Root({ ...MessagesAnnotation.spec, onceTurns });
type S = typeof State.State;

function agentGraph(options: { fate?: (reference: string, attempt: number) => Fate; retrying?: boolean; checkpointer?: boolean; ledger?: MemoryLedger } = {}) {
  const api = payments(options.fate);
  const model = scriptedModel({ retrying: options.retrying ?? false });
  const ledger = options.ledger ?? durableLedger();
  const dispatcher = new Dispatcher({ tools: api.tools, ledger, logger: { warn: () => {} } });
  const retryPolicy = { maxAttempts: 3, initialInterval: 1, jitter: false, logWarning: false, retryOn: onceRetryOn };
  const graph = new StateGraph(State)
    .addNode("agent", async (state: S) => commitAssistantMessage(state, model.respond(state.messages)), { retryPolicy })
    .addNode("tools", createOnceToolsNode({ dispatcher }), { retryPolicy })
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (s: S) => ((s.messages.at(-1) as AIMessage | undefined)?.tool_calls?.length ? "tools" : END), ["tools", END])
    .addEdge("tools", "agent")
    .compile(options.checkpointer === false ? {} : { checkpointer: new MemorySaver() });
  return { graph, api, model, ledger };
}

const config = (threadId: string) => ({ configurable: { thread_id: threadId } });
const ask = (text: string) => ({ messages: [new HumanMessage(text)] });

/** The payment ids the thread's ToolMessages committed, in order. */
function committedPayments(messages: BaseMessage[]): string[] {
  return messages.filter((m) => ToolMessage.isInstance(m) && m.name === "send_payment" && m.status !== "error").map((m) => (JSON.parse(String(m.content)) as { id: string }).id);
}

describe("@dispatch-once/langgraph: the tools node, the turn counter and the stop-reason check on real LangGraph", () => {
  it("LANGGRAPH-5 a lost response after the payment is thrown to the tools node's retry policy; the re-run is answered under the same key: 1 payment, committed once", async () => {
    const { graph, api } = agentGraph({ fate: (_r, attempt) => (attempt === 1 ? "lose-response" : "ok"), retrying: true });
    const state = await graph.invoke(ask("pay bob 2100 R6a"), config("t-6a"));
    expect([...api.made.values()].map((p) => p.reference)).toEqual(["R6a"]);
    expect(committedPayments(state.messages)).toEqual(["pay_1"]);
    // The model never read an error: it was not asked to try again under the next turn's key.
    expect(state.messages.filter((m) => ToolMessage.isInstance(m) && m.status === "error")).toEqual([]);
    expect(state.onceTurns).toBe(2);
  });

  it("LANGGRAPH-5 a call not performed (a 503 before the request was accepted: claim_released, effect no) is re-run by the retry policy under the same key, never told to the model", async () => {
    // Told to the model, it would ask again under the next turn's key, beside an earlier holder paused
    // before its claim that may still pay under this one (TURN-15); the retry keeps the one key (blind round R, R08).
    const { graph, api, model } = agentGraph({ fate: (_r, attempt) => (attempt === 1 ? "unavailable" : "ok"), retrying: true });
    const state = await graph.invoke(ask("pay bob 2100 R5n"), config("t-5n"));
    expect([...api.made.values()].map((p) => p.reference)).toEqual(["R5n"]);
    expect(committedPayments(state.messages)).toEqual(["pay_1"]);
    expect(state.messages.filter((m) => ToolMessage.isInstance(m) && m.status === "error")).toEqual([]);
    expect(model.state.calls).toBe(2); // the ask and the answer: the model never asked again
    expect(state.onceTurns).toBe(2);
  });

  it("LANGGRAPH-4 two identical calls in one message pay twice (ordinals 0, 1); the tools node re-run from the checkpoint before it pays nothing more", async () => {
    const { graph, api } = agentGraph();
    const state = await graph.invoke(ask("pay bob 2100 R2b twice"), config("t-2b"));
    expect(api.made.size).toBe(2);
    expect(committedPayments(state.messages)).toEqual(["pay_1", "pay_2"]);
    // Re-run the tools node: fork from the checkpoint whose next step is the tools node (as a resume does).
    let before: { config: { configurable?: Record<string, unknown> } } | undefined;
    for await (const snapshot of graph.getStateHistory(config("t-2b"))) if (snapshot.next.includes("tools")) before = snapshot;
    const rerun = await graph.invoke(null, before!.config);
    expect(api.made.size).toBe(2);
    expect(committedPayments(rerun.messages)).toEqual(["pay_1", "pay_2"]);
    // Each ToolMessage's artifact says how it was answered: on the re-run, from the ledger, ordinals 0 and 1.
    const artifacts = (messages: BaseMessage[]) => messages.filter((m) => ToolMessage.isInstance(m)).map((m) => (m as ToolMessage).artifact as { dispatchOnce: { ordinal: number; replayed: boolean } });
    expect(artifacts(state.messages).map((a) => [a.dispatchOnce.ordinal, a.dispatchOnce.replayed])).toEqual([[0, false], [1, false]]);
    expect(artifacts(rerun.messages).map((a) => [a.dispatchOnce.ordinal, a.dispatchOnce.replayed])).toEqual([[0, true], [1, true]]);
  });

  it("LANGGRAPH-2 a trimmed history keeps the turn index: the same ask sent again after RemoveMessage is a new ask, 2 payments", async () => {
    const { graph, api } = agentGraph();
    const first = await graph.invoke(ask("pay ines 700 R2c"), config("t-2c"));
    expect(first.onceTurns).toBe(2);
    await graph.updateState(config("t-2c"), { messages: first.messages.map((m) => new RemoveMessage({ id: m.id! })) });
    const second = await graph.invoke(ask("pay ines 700 R2c"), config("t-2c"));
    expect(api.made.size).toBe(2);
    expect(committedPayments(first.messages)).toEqual(["pay_1"]);
    expect(committedPayments(second.messages)).toEqual(["pay_2"]);
    expect(second.onceTurns).toBe(4);
  });

  it("LANGGRAPH-2 a state without the onceTurns counter (the channel left out, or an agent node that never wrote it) is refused with invalid_argument before anything is dispatched", async () => {
    const api = payments();
    const node = toolsNodeOf(api);
    const message = new AIMessage({ content: "", tool_calls: [{ id: "toolu_1", name: "send_payment", args: { payee: "bob", amount: 5, reference: "R0" } }], additional_kwargs: { stop_reason: "tool_use" } });
    for (const onceTurns of [undefined, 0]) {
      await expect(node({ messages: [message], onceTurns } as never, config("t-2n"))).rejects.toMatchObject({ code: "invalid_argument", field: "state.onceTurns" });
    }
    expect(api.made.size).toBe(0);
  });

  it("LANGGRAPH-3 a cut response (no stop reason) is thrown by the agent node and never dispatched; the retry calls the model again: 1 payment of the asked amount", async () => {
    const { graph, api, model } = agentGraph();
    model.state.cutNext = 1;
    const state = await graph.invoke(ask("pay gina 1234567 R3b"), config("t-3b"));
    expect([...api.made.values()].map((p) => p.amount)).toEqual([1234567]);
    expect(committedPayments(state.messages)).toEqual(["pay_1"]);
    // The cut message was never committed: one AIMessage with calls, with the whole amount.
    const asked = state.messages.filter((m) => AIMessage.isInstance(m) && (m.tool_calls?.length ?? 0) > 0) as AIMessage[];
    expect(asked.map((m) => m.tool_calls![0]!.args["amount"])).toEqual([1234567]);
    expect(model.state.calls).toBe(3); // the cut, its retry, the answer
  });

  it("LANGGRAPH-3 the tools node never dispatches the calls of a committed message without a stop reason (an agent node without the check)", async () => {
    const api = payments();
    const dispatcher = new Dispatcher({ tools: api.tools, ledger: durableLedger(), logger: { warn: () => {} } });
    const graph = new StateGraph(State)
      // The agent node an app writes without commitAssistantMessage: the cut message is committed.
      .addNode("agent", async (state: S) => ({ messages: [new AIMessage({ content: "", tool_calls: [{ id: "toolu_cut", name: "send_payment", args: { payee: "gina", amount: 12, reference: "R3c" } }] })], onceTurns: state.onceTurns + 1 }))
      .addNode("tools", createOnceToolsNode({ dispatcher }))
      .addEdge(START, "agent")
      .addEdge("agent", "tools")
      .addEdge("tools", END)
      .compile({ checkpointer: new MemorySaver() });
    await expect(graph.invoke(ask("pay gina 1234567 R3c"), config("t-3c"))).rejects.toMatchObject({ code: "stream_incomplete" });
    expect(api.made.size).toBe(0);
    const committed = (await graph.getState(config("t-3c"))).values as S;
    expect(committed.messages.filter((m) => ToolMessage.isInstance(m))).toEqual([]);
  });

  it("LANGGRAPH-3 stopReasonOf reads each LangChain client's shape; an output limit with calls or a refusal is a final stop the retry policy does not retry", () => {
    // ChatAnthropic streaming (message_delta's delta) and not streaming (the body, copied to response_metadata).
    expect(stopReasonOf(new AIMessage({ content: "", additional_kwargs: { stop_reason: "tool_use" } }))).toBe("tool_use");
    expect(stopReasonOf(new AIMessage({ content: "", response_metadata: { stop_reason: "end_turn" } }))).toBe("end_turn");
    // ChatOpenAI Chat Completions, and @langchain/core's stream-event protocol.
    expect(stopReasonOf(new AIMessage({ content: "", response_metadata: { finish_reason: "tool_calls" } }))).toBe("tool_calls");
    // ChatOpenAI Responses API.
    expect(stopReasonOf(new AIMessage({ content: "", response_metadata: { status: "completed" } }))).toBe("completed");
    expect(stopReasonOf(new AIMessage({ content: "", response_metadata: { status: "in_progress" } }))).toBeUndefined();
    expect(stopReasonOf(new AIMessage({ content: "", additional_kwargs: { stop_reason: null } }))).toBeUndefined();
    const cutByLimit = new AIMessage({ content: "", tool_calls: [{ id: "c", name: "send_payment", args: { payee: "x" } }], additional_kwargs: { stop_reason: "max_tokens" } });
    const error = (() => {
      try {
        assertStopReason(cutByLimit);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toMatchObject({ code: "stream_incomplete", finalStop: "max_tokens" });
    expect(onceRetryOn(error)).toBe(false);
    expect(assertStopReason(new AIMessage({ content: "long text", additional_kwargs: { stop_reason: "max_tokens" } }))).toBe("max_tokens");
    // ChatOpenAI's output limit is finish_reason "length" (blind round R, R02): with a call, the call
    // the limit cut would run with its arguments parsed as far as they went; without one, the text stands.
    const cutByLength = new AIMessage({ content: "", tool_calls: [{ id: "c", name: "send_payment", args: { payee: "x" } }], response_metadata: { finish_reason: "length" } });
    expect(() => assertStopReason(cutByLength)).toThrow(expect.objectContaining({ code: "stream_incomplete", finalStop: "length" }));
    expect(assertStopReason(new AIMessage({ content: "long text", response_metadata: { finish_reason: "length" } }))).toBe("length");
    // A Responses API response.incomplete is never committed, with or without calls (STREAM-8).
    expect(() => assertStopReason(new AIMessage({ content: "text", response_metadata: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } }))).toThrow(
      expect.objectContaining({ code: "stream_incomplete", finalStop: "incomplete:max_output_tokens" }),
    );
    let cut: unknown;
    try {
      assertStopReason(new AIMessage({ content: "" }));
    } catch (e) {
      cut = e;
    }
    expect(cut).toMatchObject({ code: "stream_incomplete", finalStop: undefined });
    expect(onceRetryOn(cut)).toBe(true);
  });

  it("LANGGRAPH-5 onceRetryOn judges an error that is not Dispatch-Once's as LangGraph's default retryOn does: a model's 5xx or a reset connection is retried, a 4xx, an abort or an exhausted quota is not", () => {
    const status = (code: number) => Object.assign(new Error(`${code} status code`), { status: code });
    expect(onceRetryOn(status(500))).toBe(true);
    expect(onceRetryOn(status(529))).toBe(true);
    expect(onceRetryOn(Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }))).toBe(true);
    // What LangGraph 1.7's default never retries: the same request fails the same way, or the caller stopped.
    for (const code of [400, 401, 402, 403, 404, 405, 406, 407, 409]) expect(onceRetryOn(status(code)), String(code)).toBe(false);
    expect(onceRetryOn(Object.assign(new Error("Request failed"), { response: { status: 401 } }))).toBe(false);
    expect(onceRetryOn(Object.assign(new Error("aborted"), { name: "AbortError" }))).toBe(false);
    expect(onceRetryOn(new Error("Cancel: the run was cancelled"))).toBe(false);
    expect(onceRetryOn(Object.assign(new Error("timeout"), { code: "ECONNABORTED" }))).toBe(false);
    expect(onceRetryOn(Object.assign(new Error("quota"), { error: { code: "insufficient_quota" } }))).toBe(false);
    expect(onceRetryOn("a thrown string")).toBe(true);
  });

  it("LANGGRAPH-1 a graph invoked without a thread id is refused with invalid_argument before anything is dispatched", async () => {
    const { graph, api } = agentGraph({ checkpointer: false });
    await expect(graph.invoke(ask("pay bob 2100 R1"))).rejects.toMatchObject({ code: "invalid_argument", field: "config.configurable.thread_id" });
    expect(api.made.size).toBe(0);
    expect(() => createOnceToolsNode({ dispatcher: {} as never })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.dispatcher" }));
    expect(() => createOnceToolsNode({ dispatcher: new Dispatcher({ tools: api.tools, ledger: durableLedger() }), turns: 1 } as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.turns" }));
    expect(() => createOnceToolsNode({ dispatcher: new Dispatcher({ tools: api.tools, ledger: durableLedger() }), turnIndexOf: 3 } as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.turnIndexOf" }));
  });

  it("LANGGRAPH-6 an effect that may have happened (outcome_unknown) stops the run for a person: thrown, not retried, never told to the model, nothing committed after the call", async () => {
    const { graph, api, model } = agentGraph({ retrying: true });
    await expect(graph.invoke(ask("wire carol 900"), config("t-6u"))).rejects.toMatchObject({ code: "outcome_unknown" });
    expect(api.wires).toHaveLength(1);
    expect(model.state.calls).toBe(1); // the model was not asked again (it would wire again under a new key)
    const committed = await graph.getState(config("t-6u"));
    expect((committed.values as S).messages.filter((m) => ToolMessage.isInstance(m))).toEqual([]);
    expect(committed.next).toEqual(["tools"]);
  });

  it("LANGGRAPH-6 the stop carries what the run established of the message's other calls: the payment made before it (happened, under its key), the call that stopped it, the calls not run after it; the re-run after the person answers them alike", async () => {
    const api = payments();
    const ledger = durableLedger();
    const node = toolsNodeOf(api, ledger);
    const message = callsMessage([
        { id: "toolu_pay", name: "send_payment", args: { payee: "bob", amount: 5, reference: "R6s" } },
        { id: "toolu_wire", name: "send_wire", args: { payee: "carol", amount: 900 } },
        { id: "toolu_pay2", name: "send_payment", args: { payee: "dave", amount: 7, reference: "R6t" } },
    ]);
    const stops: unknown[] = [];
    for (let run = 0; run < 2; run++) {
      stops.push(await node({ messages: [message], onceTurns: 1 }, config("t-6s")).then(() => undefined, (e: unknown) => e));
    }
    // The effect log: bob paid once, the wire sent once, dave not paid (the run stopped before him).
    expect([...api.made.values()].map((p) => p.reference)).toEqual(["R6s"]);
    expect(api.wires).toEqual([{ payee: "carol", amount: 900 }]);
    const rows = await ledger.listRows!({ conversationId: "t-6s" });
    const bobKey = rows.rows.find((r) => r.toolName === "send_payment")!.key;
    for (const [run, error] of stops.entries()) {
      expect(error, `run ${run}`).toMatchObject({ code: "outcome_unknown" });
      const stop = onceToolsStopOf(error);
      expect(stop, `run ${run}`).toBeDefined();
      // What the run knows and the user must be told with the stop: bob's payment HAPPENED (a result, under its key).
      expect(stop!.answered.map((m) => [m.tool_call_id, m.status ?? "success", (m.artifact as { dispatchOnce: { effect: string; key: string } }).dispatchOnce.effect, (m.artifact as { dispatchOnce: { key: string } }).dispatchOnce.key])).toEqual([["toolu_pay", "success", "keyed_write", bobKey]]);
      expect(JSON.parse(String(stop!.answered[0]!.content))).toEqual({ id: "pay_1", reference: "R6s" });
      expect(stop!.stoppedAt).toEqual({ callId: "toolu_wire", toolName: "send_wire" });
      expect(stop!.notRun).toEqual([{ callId: "toolu_pay2", toolName: "send_payment" }]);
    }
    // The re-run is answered by the ledger: the same payment, replayed.
    expect((onceToolsStopOf(stops[1])!.answered[0]!.artifact as { dispatchOnce: { replayed: boolean } }).dispatchOnce.replayed).toBe(true);
    // Nothing else carries a stop.
    expect(onceToolsStopOf(new Error("x"))).toBeUndefined();
    expect(onceToolsStopOf(undefined)).toBeUndefined();
  });

  it("LANGGRAPH-6 the stop's answers include a call refused before it (its error ToolMessage), and another copy of the package reads the stop", async () => {
    const api = payments((reference) => (reference === "R6r" ? "refuse" : "ok"));
    const node = toolsNodeOf(api);
    const message = callsMessage([
        { id: "toolu_refused", name: "send_payment", args: { payee: "nobody", amount: 5, reference: "R6r" } },
        { id: "toolu_wire", name: "send_wire", args: { payee: "carol", amount: 900 } },
    ]);
    const error = await node({ messages: [message], onceTurns: 1 }, config("t-6r")).then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ code: "outcome_unknown" });
    expect(api.made.size).toBe(0);
    expect(api.wires).toHaveLength(1);
    // The refused call was answered (effect no): without it in answered it is in neither list, and
    // the person told of the stop cannot say what became of it (blind round R, R11).
    const stop = onceToolsStopOf(error);
    expect(stop?.answered.map((m) => [m.tool_call_id, m.status ?? "success"])).toEqual([["toolu_refused", "error"]]);
    expect(stop?.notRun).toEqual([]);
    // A second copy of the package (an app that loads its ESM and CJS builds, or two versions) reads
    // the stop the first copy threw: its brand is shared, as core's error brand is (R12).
    const url = new URL("../src/index.ts?second-copy", import.meta.url).href;
    const copy = (await import(/* @vite-ignore */ url)) as typeof import("../src/index.js");
    expect(copy.onceToolsStopOf).not.toBe(onceToolsStopOf);
    expect(copy.onceToolsStopOf(error)).toBe(stop);
  });

  it("LANGGRAPH-6 the stop reaches the app through graph.invoke on real LangGraph, with nothing committed", async () => {
    const api = payments();
    const node = toolsNodeOf(api);
    const message = callsMessage([
        { id: "toolu_a", name: "send_payment", args: { payee: "bob", amount: 5, reference: "R6g" } },
        { id: "toolu_b", name: "send_wire", args: { payee: "carol", amount: 900 } },
    ]);
    const g = new StateGraph(State)
      .addNode("agent", async (state: S) => commitAssistantMessage(state, message))
      .addNode("tools", node, { retryPolicy: { maxAttempts: 3, initialInterval: 1, jitter: false, logWarning: false, retryOn: onceRetryOn } })
      .addEdge(START, "agent")
      .addEdge("agent", "tools")
      .addEdge("tools", END)
      .compile({ checkpointer: new MemorySaver() });
    const error = await g.invoke(ask("pay bob, wire carol"), config("t-6g")).then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ code: "outcome_unknown" });
    expect(onceToolsStopOf(error)?.answered.map((m) => m.tool_call_id)).toEqual(["toolu_a"]);
    expect([...api.made.values()].map((p) => p.reference)).toEqual(["R6g"]);
    const committed = await g.getState(config("t-6g"));
    expect((committed.values as S).messages.filter((m) => ToolMessage.isInstance(m))).toEqual([]);
  });

  it("LANGGRAPH-6 a re-sendable error the retry policy gave up on (claim_released after maxAttempts) carries the stop too: the payment before it is told", async () => {
    const api = payments((reference) => (reference === "R6u" ? "unavailable" : "ok"));
    const message = callsMessage([
      { id: "toolu_a", name: "send_payment", args: { payee: "bob", amount: 5, reference: "R6p" } },
      { id: "toolu_b", name: "send_payment", args: { payee: "carol", amount: 7, reference: "R6u" } },
    ]);
    const g = new StateGraph(State)
      .addNode("agent", async (state: S) => commitAssistantMessage(state, message))
      .addNode("tools", toolsNodeOf(api), { retryPolicy: { maxAttempts: 2, initialInterval: 1, jitter: false, logWarning: false, retryOn: onceRetryOn } })
      .addEdge(START, "agent")
      .addEdge("agent", "tools")
      .addEdge("tools", END)
      .compile({ checkpointer: new MemorySaver() });
    const error = await g.invoke(ask("pay bob, pay carol"), config("t-6u")).then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ code: "claim_released" });
    expect([...api.made.values()].map((p) => p.reference)).toEqual(["R6p"]);
    // The retry's run answered bob's payment from the ledger; the app learns of it from the stop.
    expect(onceToolsStopOf(error)).toMatchObject({ answered: [{ tool_call_id: "toolu_a" }], stoppedAt: { callId: "toolu_b", toolName: "send_payment" }, notRun: [] });
  });

  it("LANGGRAPH-6 a call of the message whose arguments did not parse (invalid_tool_calls) is in the stop's notRun: every call of the message is accounted for", async () => {
    const api = payments();
    const node = toolsNodeOf(api);
    const message = new AIMessage({
      content: "",
      tool_calls: [{ id: "toolu_w", name: "send_wire", args: { payee: "carol", amount: 900 } }],
      invalid_tool_calls: [{ id: "toolu_bad", name: "send_payment", args: '{"payee": "zoe",', error: "Unexpected end of JSON input", type: "invalid_tool_call" }],
      additional_kwargs: { stop_reason: "tool_use" },
    });
    const error = await node({ messages: [message], onceTurns: 1 }, config("t-6i")).then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ code: "outcome_unknown" });
    expect(api.made.size).toBe(0);
    expect(onceToolsStopOf(error)).toMatchObject({ answered: [], stoppedAt: { callId: "toolu_w", toolName: "send_wire" }, notRun: [{ callId: "toolu_bad", toolName: "send_payment" }] });
  });

  it("LANGGRAPH-7 a call whose arguments are not JSON (LangChain's invalid_tool_calls) is answered with an error ToolMessage (invalid_arguments_json) and never dispatched; the message's other call pays once", async () => {
    const api = payments();
    const node = toolsNodeOf(api);
    const message = new AIMessage({
      content: "",
      tool_calls: [{ id: "toolu_ok", name: "send_payment", args: { payee: "bob", amount: 5, reference: "R7j" } }],
      invalid_tool_calls: [{ id: "toolu_bad", name: "send_payment", args: '{"payee": "zoe", "amount": 5,', error: "Unexpected end of JSON input", type: "invalid_tool_call" }],
      additional_kwargs: { stop_reason: "tool_use" },
    });
    const { messages } = await node({ messages: [message], onceTurns: 1 }, config("t-7j"));
    expect([...api.made.values()].map((p) => p.reference)).toEqual(["R7j"]);
    // Every call of the message is answered (a tool_use without its tool_result is refused by the API).
    expect(messages.map((m) => [m.tool_call_id, m.status ?? "success"])).toEqual([["toolu_ok", "success"], ["toolu_bad", "error"]]);
    expect(String(messages[1]!.content)).toMatch(/^error invalid_arguments_json: arguments for send_payment are not JSON/);
    expect(messages[1]!.artifact).toEqual({ dispatchOnce: { toolName: "send_payment", refused: "invalid_arguments_json", effect: "no" } });
  });

  it("LANGGRAPH-7 a refusal whose effect is no (tool_failed) is an error ToolMessage the model reads; nothing paid", async () => {
    const { graph, api } = agentGraph({ fate: () => "refuse" });
    const state = await graph.invoke(ask("pay nobody 5 R6b"), config("t-6b"));
    expect(api.made.size).toBe(0);
    const errors = state.messages.filter((m) => ToolMessage.isInstance(m) && m.status === "error");
    expect(errors.map((m) => String(m.content))).toEqual([expect.stringMatching(/^error tool_failed: /)]);
  });
});
