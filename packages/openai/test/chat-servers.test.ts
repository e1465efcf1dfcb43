import OpenAI from "openai";
import { Dispatcher, InvalidArgumentError, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool, type ConversationStore } from "@dispatch-once/core";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ChatCompletionsRunner, ChatCompletionsTurnAccumulator, TurnFailedError, type ChatCompletionsRunnerOptions, type RunnerEvent } from "../src/index.js";
import { PAY_ACME, PAY_BOB, closeDownstreams, payments } from "./fixtures.js";

// Chat Completions as real OpenAI-compatible servers stream it (Azure, Gemini, vLLM, Ollama, ...),
// through the real SDK over a scripted SSE body: shapes the mock does not make.

afterEach(closeDownstreams);

/**
 * One SSE body: chunk objects, raw lines, and whether `[DONE]` ends it; `refuse` answers the
 * request with a 400 instead when it returns a message (a server's validation of what it is sent).
 */
type Body = { chunks: (object | string)[]; done?: boolean; refuse?: (request: Record<string, unknown>) => string | undefined; bytesPerRead?: number; cutBytes?: number };

/** The real SDK over a server that answers request n with bodies[n]. */
function serverOf(bodies: Body[]): { client: OpenAI; requests: Record<string, unknown>[] } {
  const requests: Record<string, unknown>[] = [];
  const client = new OpenAI({
    baseURL: "http://chat.invalid/v1",
    apiKey: "test-key",
    maxRetries: 0,
    fetch: async (_url, init) => {
      requests.push(JSON.parse(String(init?.body)) as Record<string, unknown>);
      const body = bodies[requests.length - 1] ?? { chunks: [] };
      const refused = body.refuse?.(requests.at(-1)!);
      if (refused !== undefined) {
        return new Response(JSON.stringify({ error: { message: refused, type: "invalid_request_error" } }), { status: 400, headers: { "content-type": "application/json" } });
      }
      const lines = body.chunks.map((c) => (typeof c === "string" ? c : `data: ${JSON.stringify(c)}\n\n`));
      const encoded = new TextEncoder().encode(`${lines.join("")}${body.done === false ? "" : "data: [DONE]\n\n"}`);
      const bytes = encoded.slice(0, encoded.length - (body.cutBytes ?? 0));
      // The body in reads of a few bytes: a read may end inside a UTF-8 sequence.
      const step = body.bytesPerRead ?? bytes.length;
      let at = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (at >= bytes.length) return controller.close();
          controller.enqueue(bytes.slice(at, (at += step)));
        },
      });
      return new Response(stream, { status: 200, headers: { "content-type": "text/event-stream" } });
    },
  });
  return { client, requests };
}

/** A chunk of choice 0. */
const chunk = (delta: object | undefined, finish: string | null = null, extra: object = {}) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 0,
  model: "m",
  choices: [{ index: 0, ...(delta !== undefined ? { delta } : {}), finish_reason: finish }],
  ...extra,
});
const whole = (index: number | undefined, id: string, name: string, args: object | string) => ({
  ...(index !== undefined ? { index } : {}),
  id,
  type: "function",
  function: { name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
});
const answer = (text: string): Body => ({ chunks: [chunk({ role: "assistant", content: text }), chunk({}, "stop")] });

/**
 * The runner over a scripted server, the mock payments API (send_payment) and close_accounts, a
 * keyed write whose arguments are all optional (no argument closes every account): its own log is
 * the oracle for what it ran with.
 */
async function setup(client: OpenAI, runner: Partial<ChatCompletionsRunnerOptions> = {}, store: ConversationStore = new MemoryConversationStore()) {
  const downstream = await payments(5);
  const closed: unknown[] = [];
  const tools = new ToolRegistry([
    downstream.tools.get("send_payment"),
    defineTool({
      name: "close_accounts",
      description: "Close the given account, or every account",
      effect: "keyed_write",
      input: z.object({ account: z.string().optional() }),
      identity: ["account"],
      run: async (args) => {
        closed.push(args);
        return { closed: args.account ?? "all" };
      },
    }),
  ]);
  const events: RunnerEvent[] = [];
  const options: ChatCompletionsRunnerOptions = {
    client,
    dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger(), waitMs: 10_000, pollMs: 5 }),
    store,
    model: "m",
    tools: tools.providerSchemas(),
    retry: { attempts: 2, backoffMs: () => 1 },
    onEvent: (e) => events.push(e),
    ...runner,
  };
  return { effects: downstream.effects, closed, store, events, runner: new ChatCompletionsRunner(options) };
}

const failures = (events: RunnerEvent[]) => events.filter((e) => e.type === "stream_failed").map((e) => (e as { error: string }).error);
const flat = async (store: ConversationStore, conversationId: string) =>
  (await store.log(conversationId)).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Record<string, unknown>[];

describe("ChatCompletionsRunner against real servers' chunk shapes", () => {
  it("DeepSeek's thinking mode: the reasoning_content of a response with calls is committed with it and sent back (the API refuses the follow-up without it); not the turn's text", async () => {
    const thinking = (text: string) => chunk({ content: null, reasoning_content: text });
    const needsReasoning = (request: Record<string, unknown>) =>
      messagesOf(request).some((m) => m.role === "assistant" && m.tool_calls !== undefined && typeof m.reasoning_content !== "string")
        ? "The `reasoning_content` in the thinking mode must be passed back to the API."
        : undefined;
    const { client, requests } = serverOf([
      { chunks: [chunk({ role: "assistant", content: null, reasoning_content: "" }), thinking("Acme is owed "), thinking("invoice 1042."), chunk({ tool_calls: [whole(0, "call_0", "send_payment", PAY_ACME)] }), chunk({}, "tool_calls")] },
      { refuse: needsReasoning, chunks: [thinking("It went through."), chunk({ content: "Paid." }), chunk({}, "stop")] },
      { refuse: needsReasoning, chunks: [chunk({ content: "Hello." }), chunk({}, "stop")] },
    ]);
    const { runner, effects, store } = await setup(client);
    const result = await runner.send("conv-deepseek", { id: "m1", content: "pay acme" });
    expect(effects()).toHaveLength(1);
    expect(result.turns.map((t) => t.text)).toEqual(["", "Paid."]);
    const log = await flat(store, "conv-deepseek");
    expect(log.filter((m) => m.role === "assistant")).toEqual([
      { role: "assistant", content: null, reasoning_content: "Acme is owed invoice 1042.", tool_calls: [{ id: "call_0", type: "function", function: { name: "send_payment", arguments: JSON.stringify(PAY_ACME) } }] },
      // A response without calls: its reasoning is not needed again (and older servers refused it).
      { role: "assistant", content: "Paid." },
    ]);
    expect(messagesOf(requests[1]!)).toEqual(log.slice(0, 3));
    expect((await runner.send("conv-deepseek", { id: "m2", content: "hi" })).turns[0]!.text).toBe("Hello.");
  });

  it("Azure's asynchronous content filter: choice-0 annotation chunks without delta (between calls and after the finish) are no failure; each paid once, committed", async () => {
    const annotation = {
      id: "",
      object: "",
      created: 0,
      model: "",
      choices: [{ index: 0, finish_reason: null, content_filter_results: { hate: { filtered: false, severity: "safe" } }, content_filter_offsets: { check_offset: 0, start_offset: 0, end_offset: 40 } }],
    };
    const { client, requests } = serverOf([
      {
        chunks: [
          // The prompt's annotation: no choices at all.
          { id: "", object: "", created: 0, model: "", choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] },
          chunk({ role: "assistant", content: "" }),
          chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }),
          annotation,
          chunk({ tool_calls: [whole(1, "call_b", "send_payment", PAY_BOB)] }),
          chunk({}, "tool_calls"),
          annotation,
        ],
      },
      answer("Both paid."),
    ]);
    const { runner, effects, events, store } = await setup(client);
    const result = await runner.send("conv-azure", { id: "m1", content: "pay acme and bob" });
    expect(failures(events)).toEqual([]);
    expect(requests).toHaveLength(2);
    expect(effects()).toHaveLength(2);
    expect(result.turns.map((t) => t.calls.map((c) => c.callId))).toEqual([["call_a", "call_b"], []]);
    expect((await flat(store, "conv-azure")).filter((m) => m.role === "tool").map((m) => m.tool_call_id)).toEqual(["call_a", "call_b"]);
  });

  it("finish_reason \"\" on every chunk before the last (SGLang, older Ollama) is no finish: the calls complete at the real one, each paid once", async () => {
    const going = (delta: object) => ({ ...chunk(delta), choices: [{ index: 0, delta, finish_reason: "" }] });
    const { client } = serverOf([
      { chunks: [going({ role: "assistant", content: "Paying." }), going({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }), going({ tool_calls: [whole(1, "call_b", "send_payment", PAY_BOB)] }), chunk({}, "tool_calls")] },
      { chunks: [going({ content: "Done." }), chunk({}, "stop")] },
    ]);
    const { runner, effects, events } = await setup(client);
    const result = await runner.send("conv-empty-finish", { id: "m1", content: "pay acme and bob" });
    expect(failures(events)).toEqual([]);
    expect(effects()).toHaveLength(2);
    expect(result.turns.map((t) => [t.stopReason, t.text])).toEqual([
      ["tool_calls", "Paying."],
      ["stop", "Done."],
    ]);
  });

  it("arguments sent as a JSON object, not a string: the call never runs with other arguments ({}); a failed stream naming the field, nothing committed", async () => {
    // A server that sends the arguments as an object (Ollama's native shape) behind a compatible endpoint.
    const bad: Body = { chunks: [chunk({ role: "assistant", tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "close_accounts", arguments: { account: "acct_9" } } }] }), chunk({}, "tool_calls")] };
    const { client, requests } = serverOf([bad, bad]);
    const { runner, closed, events, store } = await setup(client);
    const error = await runner.send("conv-object-args", { id: "m1", content: "close acct_9" }).catch((e: unknown) => e);
    expect(closed).toEqual([]);
    expect(TurnFailedError.isInstance(error)).toBe(true);
    expect(requests).toHaveLength(2);
    expect(failures(events)).toEqual([
      expect.stringContaining("chunk.choices[0].delta.tool_calls[0].function.arguments"),
      expect.stringContaining("chunk.choices[0].delta.tool_calls[0].function.arguments"),
    ]);
    expect((await flat(store, "conv-object-args")).filter((m) => m.role !== "user")).toEqual([]);
  });

  it("STREAM-20 calls streamed interleaved (each named, then each one's arguments): a call whose arguments are not yet a whole JSON object when the next index begins is not final then; each runs once, with the model's arguments, at finish_reason", async () => {
    // A server that announces every call before streaming any arguments. Final at the next index's
    // first fragment, close_accounts would run with {} (every account closed), its arguments still to come.
    const named = (index: number, id: string, name: string) => ({ index, id, type: "function", function: { name, arguments: "" } });
    const args = (index: number, text: string) => ({ index, function: { arguments: text } });
    const body: Body = {
      chunks: [
        chunk({ role: "assistant", tool_calls: [named(0, "call_a", "close_accounts")] }),
        chunk({ tool_calls: [named(1, "call_b", "send_payment")] }),
        chunk({ tool_calls: [args(0, '{"account":')] }),
        chunk({ tool_calls: [args(0, '"acct_7"}')] }),
        chunk({ tool_calls: [args(1, JSON.stringify(PAY_ACME))] }),
        chunk({}, "tool_calls"),
      ],
    };
    const { client } = serverOf([body, answer("Done.")]);
    const { runner, closed, effects, events, store } = await setup(client);
    const result = await runner.send("conv-interleaved", { id: "m1", content: "close acct_7 and pay acme" });
    expect(closed).toEqual([{ account: "acct_7" }]);
    expect(effects()).toHaveLength(1);
    expect(failures(events)).toEqual([]);
    expect(result.turns[0]!.calls.map((c) => c.name)).toEqual(["close_accounts", "send_payment"]);
    const calls = (await flat(store, "conv-interleaved")).find((m) => m.role === "assistant" && m.tool_calls !== undefined)!.tool_calls as { function: { arguments: string } }[];
    expect(calls.map((c) => JSON.parse(c.function.arguments))).toEqual([{ account: "acct_7" }, PAY_ACME]);
  });

  it("a tool_calls index that is not a whole number >= 0 is a typed error naming it, before anything is folded", () => {
    for (const index of [-1, 1.5]) {
      const accumulator = new ChatCompletionsTurnAccumulator();
      let thrown: unknown;
      try {
        accumulator.apply(chunk({ tool_calls: [whole(index, "call_a", "send_payment", PAY_ACME)] }) as never);
      } catch (e) {
        thrown = e;
      }
      expect(thrown, String(index)).toBeInstanceOf(InvalidArgumentError);
      expect(thrown, String(index)).toMatchObject({ field: "chunk.choices[0].delta.tool_calls[0].index" });
      expect(accumulator.calls).toEqual([]);
      expect(accumulator.eventsSeen).toBe(0);
    }
  });

  it("ERR-1 a chunk whose fragment begins a call without naming it changes nothing: the open call before it is not made final (never dispatched half-checked)", () => {
    const accumulator = new ChatCompletionsTurnAccumulator();
    accumulator.apply(chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }) as never);
    expect(() => accumulator.apply(chunk({ tool_calls: [{ index: 1, type: "function", function: { name: "send_payment", arguments: "" } }] }) as never)).toThrow(
      expect.objectContaining({ field: "chunk.choices[0].delta.tool_calls[0].id" }),
    );
    expect(accumulator.calls.map((c) => [c.index, c.phase])).toEqual([[0, "arguments_streaming"]]);
    expect(accumulator.eventsSeen).toBe(1);
  });

  it("a later fragment naming another function at a held index is not this call's: a failed stream, the call never run under either name", async () => {
    const { client } = serverOf([
      {
        chunks: [
          chunk({ role: "assistant", tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: "" } }] }),
          // vLLM repeats the id and name on every fragment: the same name is the same call.
          chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: '{"account":' } }] }),
          chunk({ tool_calls: [{ index: 0, type: "function", function: { name: "close_accounts", arguments: '"acct_9"}' } }] }),
          chunk({}, "tool_calls"),
        ],
      },
      { chunks: [chunk({ tool_calls: [whole(0, "call_c", "close_accounts", { account: "acct_9" })] }), chunk({}, "tool_calls")] },
      answer("Closed."),
    ]);
    const { runner, closed, effects, events } = await setup(client);
    const result = await runner.send("conv-renamed", { id: "m1", content: "close acct_9" });
    expect(failures(events)).toEqual([expect.stringContaining("tool_call_index_reused")]);
    expect(effects()).toEqual([]);
    expect(closed).toEqual([{ account: "acct_9" }]);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.name])).toEqual([["call_c", "close_accounts"]]);
  });

  it("Gemini's compatibility layer: calls without index (read by their id), arguments split across indexless deltas, finish_reason stop, thought signatures sent back; a cut retried, each paid once", async () => {
    const signed = (call: object, signature: string) => ({ ...call, extra_content: { google: { thought_signature: signature } } });
    const acme = signed(whole(undefined, "function-call-1", "send_payment", PAY_ACME), "sig-acme");
    const bob = JSON.stringify(PAY_BOB);
    // Gemini 3 refuses a request whose assistant tool call lacks its thought signature.
    const needsSignatures = (request: Record<string, unknown>) =>
      messagesOf(request).some((m) => (m.tool_calls as { extra_content?: unknown }[] | undefined)?.some((c) => c.extra_content === undefined))
        ? "Function call is missing a thought_signature in functionCall parts."
        : undefined;
    const { client, requests } = serverOf([
      // Cut after acme is final (bob began): acme ran.
      { done: false, chunks: [chunk({ role: "assistant", tool_calls: [acme] }), chunk({ tool_calls: [signed({ id: "function-call-2", type: "function", function: { name: "send_payment", arguments: bob.slice(0, 9) } }, "sig-bob")] })] },
      {
        chunks: [
          chunk({ role: "assistant", tool_calls: [acme] }),
          chunk({ tool_calls: [signed({ id: "function-call-2", type: "function", function: { name: "send_payment", arguments: bob.slice(0, 9) } }, "sig-bob")] }),
          // The rest of bob's arguments: no index, no id.
          chunk({ tool_calls: [{ function: { arguments: bob.slice(9) } }] }),
          chunk({}, "stop"),
        ],
      },
      { refuse: needsSignatures, chunks: [chunk({ content: "Both paid." }), chunk({}, "stop")] },
    ]);
    const { runner, effects, events, store } = await setup(client);
    const result = await runner.send("conv-gemini", { id: "m1", content: "pay acme and bob" });
    expect(failures(events)).toEqual([expect.stringContaining("without finish_reason")]);
    expect(requests).toHaveLength(3);
    expect(effects()).toHaveLength(2);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.replayed])).toEqual([
      ["function-call-1", true],
      ["function-call-2", false],
    ]);
    const assistant = (await flat(store, "conv-gemini")).find((m) => m.role === "assistant")!;
    expect(assistant.tool_calls).toEqual([
      { id: "function-call-1", type: "function", function: { name: "send_payment", arguments: JSON.stringify(PAY_ACME) }, extra_content: { google: { thought_signature: "sig-acme" } } },
      { id: "function-call-2", type: "function", function: { name: "send_payment", arguments: bob }, extra_content: { google: { thought_signature: "sig-bob" } } },
    ]);
    expect(result.turns[1]!.text).toBe("Both paid.");
  });

  it("indexless fragments that cannot be one response's calls fail the stream: an earlier call's id again, another function with no id; an index of the wrong type is a typed error", async () => {
    const { client } = serverOf([
      { chunks: [chunk({ tool_calls: [whole(undefined, "c1", "send_payment", PAY_ACME)] }), chunk({ tool_calls: [whole(undefined, "c2", "send_payment", PAY_BOB)] }), chunk({ tool_calls: [{ id: "c1", function: { arguments: " " } }] }), chunk({}, "stop")] },
      { chunks: [chunk({ tool_calls: [{ id: "c3", type: "function", function: { name: "send_payment", arguments: "" } }] }), chunk({ tool_calls: [{ function: { name: "close_accounts", arguments: "{}" } }] }), chunk({}, "stop")] },
    ]);
    const { runner, effects, closed, store, events } = await setup(client);
    const error = await runner.send("conv-indexless", { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e);
    expect(TurnFailedError.isInstance(error)).toBe(true);
    expect(failures(events)).toEqual([expect.stringContaining("tool_call_fragment_after_final"), expect.stringContaining("tool_call_index_reused")]);
    // acme was final (c2 began) and ran in attempt 1; bob's fragment was final only at the finish, never reached.
    expect(effects()).toHaveLength(1);
    expect(closed).toEqual([]);
    expect((await flat(store, "conv-indexless")).filter((m) => m.role !== "user")).toEqual([]);
    const accumulator = new ChatCompletionsTurnAccumulator();
    expect(() => accumulator.apply(chunk({ tool_calls: [{ ...whole(0, "c1", "send_payment", PAY_ACME), index: "0" }] }) as never)).toThrow(
      expect.objectContaining({ field: "chunk.choices[0].delta.tool_calls[0].index" }),
    );
  });
});

describe("ChatCompletionsRunner: content as parts, and choice 0 twice in one chunk", () => {
  it("Mistral's magistral: content streamed as parts (thinking, then text) commits the text parts as the model's words, the thinking not", async () => {
    const thinking = (text: string) => chunk({ content: [{ type: "thinking", thinking: [{ type: "text", text }] }] });
    const { client } = serverOf([{ chunks: [chunk({ role: "assistant", content: "" }), thinking("A greeting"), thinking(", I answer it."), chunk({ content: [{ type: "text", text: "Hello" }] }), chunk({ content: " there." }), chunk({}, "stop")] }]);
    const { runner, store, events } = await setup(client);
    const result = await runner.send("conv-mistral", { id: "m1", content: "hi" });
    expect(result.turns[0]!.text).toBe("Hello there.");
    expect((await flat(store, "conv-mistral")).at(-1)).toEqual({ role: "assistant", content: "Hello there." });
    expect(events.filter((e) => e.type === "text_delta").map((e) => (e as { text: string }).text)).toEqual(["Hello", " there."]);
    const accumulator = new ChatCompletionsTurnAccumulator();
    expect(() => accumulator.apply(chunk({ content: 5 }) as never)).toThrow(expect.objectContaining({ field: "chunk.choices[0].delta.content" }));
  });

  it("choice 0 twice in one chunk (a fragment in each): not one response's stream, a failed stream; never a call run with the second's fragment dropped", async () => {
    const twice = {
      ...chunk({}),
      choices: [
        { index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "1" } }] }, finish_reason: null },
        { index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "00" } }] }, finish_reason: null },
      ],
    };
    const body: Body = { chunks: [chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: '{"payee":"acme","currency":"EUR","reference":"INV-1","amount":' } }] }), twice, chunk({ tool_calls: [{ index: 0, function: { arguments: "}" } }] }), chunk({}, "tool_calls")] };
    const { client } = serverOf([body, body]);
    const { runner, effects, events, store } = await setup(client);
    const error = await runner.send("conv-twice", { id: "m1", content: "pay acme 100" }).catch((e: unknown) => e);
    // Read as the first entry only, acme was paid 1, not 100, and that was committed.
    expect(JSON.stringify(await store.log("conv-twice"))).not.toContain('\\"amount\\":1}');
    expect(effects()).toEqual([]);
    expect(TurnFailedError.isInstance(error)).toBe(true);
    expect(failures(events)).toEqual([expect.stringContaining("repeated_choice"), expect.stringContaining("repeated_choice")]);
  });
});

describe("ChatCompletionsRunner: the legacy function_call a server streams anyway", () => {
  it("a delta.function_call (functions are never sent) is not this side's call: a failed stream, never committed as an empty answer", async () => {
    const legacy: Body = { chunks: [chunk({ role: "assistant", content: null, function_call: { name: "close_accounts", arguments: '{"account":"acct_9"}' } }), chunk({}, "function_call")] };
    const { client } = serverOf([legacy, legacy]);
    const { runner, closed, events, store } = await setup(client);
    const error = await runner.send("conv-legacy", { id: "m1", content: "close acct_9" }).catch((e: unknown) => e);
    expect(TurnFailedError.isInstance(error)).toBe(true);
    expect(failures(events)).toEqual([expect.stringContaining("function_call"), expect.stringContaining("function_call")]);
    expect(closed).toEqual([]);
    expect((await flat(store, "conv-legacy")).filter((m) => m.role !== "user")).toEqual([]);
  });
});

describe("ChatCompletionsRunner: attacks that hold (each judged by the effect log and by what was committed)", () => {
  it("STREAM-1 a clean close right after finish_reason (no usage chunk, no [DONE]) is committed: one request per turn, each paid once", async () => {
    const { client, requests } = serverOf([
      {
        done: false,
        chunks: [
          chunk({ role: "assistant" }), // a role-only chunk
          chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }),
          chunk({ tool_calls: [whole(1, "call_b", "send_payment", PAY_BOB)] }, "tool_calls"),
        ],
      },
      // stream_options.include_usage: a usage chunk with no choices after the finish.
      { chunks: [chunk({ content: "Paid." }), chunk({}, "stop"), { ...chunk({}), choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }] },
    ]);
    const { runner, effects, events } = await setup(client, { params: { stream_options: { include_usage: true } } });
    const result = await runner.send("conv-close-after-finish", { id: "m1", content: "pay acme and bob" });
    expect(failures(events)).toEqual([]);
    expect(requests).toHaveLength(2);
    expect(effects()).toHaveLength(2);
    expect(result.turns.map((t) => [t.attempts, t.stopReason, t.text])).toEqual([
      [1, "tool_calls", ""],
      [1, "stop", "Paid."],
    ]);
  });

  it("identical calls across a cut (empty call ids, finish_reason stop beside calls): ordinals 0 and 1, two payments not three; a re-send reads each result back to its own call", async () => {
    const { client, requests } = serverOf([
      // Cut after call 0 is final (call 1 began): call 0 ran.
      { done: false, chunks: [chunk({ tool_calls: [whole(0, "", "send_payment", PAY_ACME)] }), chunk({ tool_calls: [{ index: 1, id: "", type: "function", function: { name: "send_payment", arguments: '{"payee":' } }] })] },
      // Some servers say stop although the response has calls; and give every call an empty id.
      { chunks: [chunk({ tool_calls: [whole(0, "", "send_payment", PAY_ACME), whole(1, "", "send_payment", PAY_ACME)] }), chunk({}, "stop")] },
      answer("Paid twice."),
    ]);
    const { runner, effects, events } = await setup(client);
    const result = await runner.send("conv-identical", { id: "m1", content: "pay acme twice" });
    expect(failures(events)).toHaveLength(1);
    expect(requests).toHaveLength(3);
    // The retried attempt is the same request as the cut one (STREAM-14).
    expect(requests[1]).toEqual(requests[0]);
    const paid = effects();
    expect(paid).toHaveLength(2);
    const calls = result.turns[0]!.calls;
    expect(calls.map((c) => [c.ordinal, c.replayed])).toEqual([
      [0, true],
      [1, false],
    ]);
    expect(new Set(paid.map((p) => p.idempotencyKey))).toEqual(new Set(calls.map((c) => c.key)));
    expect(calls[0]!.result).not.toEqual(calls[1]!.result);
    const again = await runner.send("conv-identical", { id: "m1", content: "pay acme twice" });
    expect(again.fromStore).toBe(true);
    expect(again.turns[0]!.calls.map((c) => [c.key, c.result])).toEqual(calls.map((c) => [c.key, c.result]));
    expect(effects()).toHaveLength(2);
  });

  it("a chunk carrying error after a call was final (the SDK throws an APIError): retried, the call answered by the ledger, paid once", async () => {
    const { client } = serverOf([
      { done: false, chunks: [chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }), chunk({ tool_calls: [whole(1, "call_b", "send_payment", PAY_BOB)] }), { error: { message: "upstream overloaded", type: "server_error" } }] },
      { chunks: [chunk({ tool_calls: [whole(0, "call_c", "send_payment", PAY_ACME), whole(1, "call_d", "send_payment", PAY_BOB)] }), chunk({}, "tool_calls")] },
      answer("Paid."),
    ]);
    const { runner, effects, events } = await setup(client, { params: { store: true, metadata: { team: "billing" }, seed: 7, parallel_tool_calls: true, logit_bias: { "50256": -100 } } });
    const result = await runner.send("conv-error-chunk", { id: "m1", content: "pay acme and bob" });
    expect(failures(events)).toEqual([expect.stringContaining("upstream overloaded")]);
    expect(effects()).toHaveLength(2);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.replayed])).toEqual([
      ["call_c", true],
      ["call_d", false],
    ]);
  });

  it("STREAM-12 a chunk carrying error fails the turn with stream_incomplete saying what the provider said (event, code, message), as a Responses error event does; the call that ran is told", async () => {
    const failing: Body = { done: false, chunks: [chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }), chunk({ tool_calls: [whole(1, "call_b", "send_payment", PAY_BOB)] }), { error: { message: "upstream overloaded", type: "server_error", code: "overloaded" } }] };
    const { client } = serverOf([failing]);
    const { runner, effects } = await setup(client, { retry: { attempts: 1, backoffMs: () => 1 } });
    const error = await runner.send("conv-error-said", { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e);
    expect(TurnFailedError.isInstance(error)).toBe(true);
    const record = (error as TurnFailedError).record;
    expect(record.error).toMatchObject({ code: "stream_incomplete" });
    expect(record.error!.message).toContain("error overloaded: upstream overloaded");
    expect(record.position).toBe("during_dispatch");
    expect(effects()).toHaveLength(1);
    expect(record.effects).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened" })]);
    // Without a code the error's type is what names it.
    const accumulator = new ChatCompletionsTurnAccumulator();
    accumulator.apply({ error: { message: "slow down", type: "rate_limit_error" } } as never);
    expect(accumulator.streamError).toEqual({ event: "error", code: "rate_limit_error", message: "slow down" });
    expect(accumulator.completed).toBe(false);
  });

  it("a re-worded re-run (the memo, not an identity field, differs): the ledger answers it under the cut attempt's key; the committed call is the retry's words with the first run's result", async () => {
    const { client } = serverOf([
      { done: false, chunks: [chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }), chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "send_payment", arguments: "" } }] })] },
      { chunks: [chunk({ tool_calls: [whole(0, "call_c", "send_payment", { ...PAY_ACME, memo: "Inv. 1042" })] }), chunk({}, "tool_calls")] },
      answer("Paid."),
    ]);
    const { runner, effects, store } = await setup(client);
    const result = await runner.send("conv-reworded", { id: "m1", content: "pay acme" });
    const paid = effects();
    expect(paid).toHaveLength(1);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "call_c", replayed: true, key: paid[0]!.idempotencyKey, result: expect.objectContaining({ paymentId: paid[0]!.paymentId }) })]);
    const log = await flat(store, "conv-reworded");
    expect((log.find((m) => m.role === "assistant")!.tool_calls as { function: { arguments: string } }[])[0]!.function.arguments).toContain("Inv. 1042");
    expect(JSON.parse(log.find((m) => m.role === "tool")!.content as string)).toMatchObject({ paymentId: paid[0]!.paymentId });
  });

  it("RECORD-8 the retry's response makes fewer calls than the cut one: acme, paid in the cut attempt, is listed by the committed turn's record", async () => {
    const { client } = serverOf([
      { done: false, chunks: [chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }), chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "send_payment", arguments: "" } }] })] },
      { chunks: [chunk({ tool_calls: [whole(0, "call_c", "send_payment", PAY_BOB)] }), chunk({}, "tool_calls")] },
      answer("Paid bob."),
    ]);
    const { runner, effects, store } = await setup(client);
    const result = await runner.send("conv-fewer", { id: "m1", content: "pay acme and bob" });
    const paid = effects();
    expect(paid).toHaveLength(2);
    expect(result.turns[0]!.calls.map((c) => c.callId)).toEqual(["call_c"]);
    const acmeKey = paid.map((p) => p.idempotencyKey).find((k) => k !== result.turns[0]!.calls[0]!.key);
    expect(result.turns[0]!.record?.calls).toEqual([expect.objectContaining({ key: acmeKey, name: "send_payment", attempt: 1, effect: "happened" })]);
    expect(JSON.stringify(await store.log("conv-fewer"))).not.toContain("call_a");
  });

  it("a surrogate pair split across two argument fragments, and the body read 5 bytes at a time (reads ending inside UTF-8 sequences), is one character: the same key as the whole call, one payment", async () => {
    const emoji = { ...PAY_ACME, reference: "INV-\u{1F600}" };
    const text = JSON.stringify(emoji);
    const at = text.indexOf("\u{1F600}") + 1; // between the high and the low surrogate
    const { client } = serverOf([
      {
        done: false,
        bytesPerRead: 5,
        chunks: [
          chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: text.slice(0, at) } }] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: text.slice(at) } }] }),
          chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "send_payment", arguments: "" } }] }),
        ],
      },
      { bytesPerRead: 5, chunks: [chunk({ tool_calls: [whole(0, "call_c", "send_payment", emoji)] }), chunk({}, "tool_calls")] },
      // Cut inside the emoji's UTF-8 bytes of the answer after the finish: the turn stands as the finish left it.
      // (the last 9 bytes: the line's closing `"}}]}` and its two newlines, 7 bytes, and the emoji's last 2 of its 4).
      { done: false, cutBytes: 9, chunks: [chunk({ content: "Paid \u{1F600}" }, "stop"), `data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"\u{1F600}"}}]}\n\n`] },
    ]);
    const { runner, effects } = await setup(client);
    const result = await runner.send("conv-surrogate", { id: "m1", content: "pay acme" });
    expect(effects()).toHaveLength(1);
    expect(result.turns.map((t) => [t.attempts, t.text])).toEqual([
      [2, ""],
      [1, "Paid \u{1F600}"],
    ]);
    expect(result.turns[0]!.calls.map((c) => [c.replayed, c.result])).toEqual([[true, expect.objectContaining({ status: "accepted" })]]);
    expect(result.turns[0]!.record).toBeUndefined();
  });

  it("text after a complete JSON object for the same call makes it not JSON: never run, committed as the error the model reads", async () => {
    const { client, requests } = serverOf([
      {
        chunks: [
          chunk({ tool_calls: [whole(0, "call_a", "send_payment", PAY_ACME)] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: "}" } }] }),
          chunk({}, "tool_calls"),
        ],
      },
      answer("Sorry."),
    ]);
    const { runner, effects, store } = await setup(client);
    await runner.send("conv-trailing", { id: "m1", content: "pay acme" });
    expect(effects()).toEqual([]);
    const tool = (await flat(store, "conv-trailing")).find((m) => m.role === "tool")!;
    expect(JSON.parse(tool.content as string)).toMatchObject({ error: { code: "invalid_arguments_json" } });
    expect(messagesOf(requests[1]!).at(-1)).toEqual(tool);
  });
});

const messagesOf = (body: Record<string, unknown>) => body.messages as Record<string, unknown>[];
