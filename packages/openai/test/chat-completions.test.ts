import OpenAI from "openai";
import { Dispatcher, InvalidArgumentError, MemoryConversationStore, MemoryLedger, UnguardedDispatcher, type ConversationStore } from "@dispatch-once/core";
import type { MockOpenAI } from "@dispatch-once/mock-openai";
import { describe, expect, it } from "vitest";
import { ChatCompletionsRunner, TurnFailedError, type ChatCompletionsRunnerOptions, type RunnerEvent } from "../src/index.js";
import { PAY_ACME, PAY_BOB, isPaymentRequest, payments, providerPerTest, sdk } from "./fixtures.js";

const provider = providerPerTest();

/** The Chat Completions runner over the mock (its /v1/chat/completions), a real Dispatcher and the mock payments API. */
async function chatSetup(mock: MockOpenAI, runner: Partial<ChatCompletionsRunnerOptions> = {}, store: ConversationStore = new MemoryConversationStore()) {
  const downstream = await payments(20);
  const events: RunnerEvent[] = [];
  const options: ChatCompletionsRunnerOptions = {
    client: sdk(mock),
    dispatcher: new Dispatcher({ tools: downstream.tools, ledger: new MemoryLedger(), waitMs: 10_000, pollMs: 5 }),
    store,
    model: "gpt-test",
    tools: downstream.tools.providerSchemas(),
    retry: { backoffMs: () => 5 },
    onEvent: (e) => events.push(e),
    ...runner,
  };
  return { ...downstream, store, events, runner: new ChatCompletionsRunner(options) };
}

const chatRequests = (mock: MockOpenAI) => mock.requests.filter((r) => r.api === "chat.completions");
const messagesOf = (body: unknown) => (body as { messages: Record<string, unknown>[] }).messages;
/** The payment request's first attempt is cut (a reset) after call 0 is final, while call 1's arguments stream. */
const CUT_WHILE_CALL_1_STREAMS = { kind: "reset", at: { call: 1, afterFragment: 1 } } as const;

describe("ChatCompletionsRunner: the chapter's incident on Chat Completions, through the real SDK", () => {
  it("control: a naive loop (dispatch each call when final, retry the request on a cut) pays acme twice", async () => {
    provider().setFaultPlan((request, info) => (info.attempt === 1 && isPaymentRequest(request) ? CUT_WHILE_CALL_1_STREAMS : undefined));
    const { tools, effects } = await payments(20);
    const dispatcher = new UnguardedDispatcher(tools);
    const client = sdk(provider());
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: "user", content: "pay acme and bob" }];
    for (let attempt = 1; attempt <= 2; attempt++) {
      const turn = dispatcher.turn({ conversationId: "conv-naive", turnIndex: 0 });
      const calls = new Map<number, { id: string; name: string; args: string }>();
      const dispatches: Promise<unknown>[] = [];
      const dispatch = (index: number) => {
        const c = calls.get(index)!;
        dispatches.push(turn.dispatch({ name: c.name, input: JSON.parse(c.args), callId: c.id }));
      };
      try {
        const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true });
        for await (const chunk of stream) {
          const choice = chunk.choices[0];
          for (const fragment of choice?.delta.tool_calls ?? []) {
            // A higher index makes the call before it final: dispatch it now.
            if (!calls.has(fragment.index)) {
              if (fragment.index > 0) dispatch(fragment.index - 1);
              calls.set(fragment.index, { id: fragment.id!, name: fragment.function!.name!, args: "" });
            }
            calls.get(fragment.index)!.args += fragment.function?.arguments ?? "";
          }
          if (choice?.finish_reason === "tool_calls") dispatch(calls.size - 1);
        }
        await Promise.all(dispatches);
        break;
      } catch {
        await Promise.all(dispatches);
      }
    }
    const paid = effects();
    expect(chatRequests(provider())).toHaveLength(2);
    // acme twice (once per attempt, under two call ids), bob once.
    expect(paid).toHaveLength(3);
    expect(new Set(paid.map((p) => p.idempotencyKey)).size).toBe(3);
  });

  it("STREAM-5 guarded: acme and bob paid once each; acme's key is the same in both attempts; the commit holds the finished response's calls only", async () => {
    provider().setFaultPlan((request, info) => (info.attempt === 1 && isPaymentRequest(request) ? CUT_WHILE_CALL_1_STREAMS : undefined));
    const { runner, effects, store, events } = await chatSetup(provider());
    const result = await runner.send("conv-chat-incident", { id: "m1", content: "pay acme and bob" });

    // The oracle: one payment each in the payments API's effect log.
    const paid = effects();
    expect(paid).toHaveLength(2);
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, error: expect.stringContaining("terminated") });
    // Call 0 (acme) was dispatched in the cut attempt, at call 1's first fragment, and again in the retry: one key.
    const resolved = events.filter((e): e is Extract<RunnerEvent, { type: "call_resolved" }> => e.type === "call_resolved");
    const acme = resolved.filter((e) => e.key === result.turns[0]!.calls[0]!.key);
    expect(acme.map((e) => e.attempt)).toEqual([1, 2]);
    expect(acme[1]!.replayed).toBe(true);
    expect(paid.map((p) => p.idempotencyKey).sort()).toEqual(result.turns[0]!.calls.map((c) => c.key).sort());
    expect(events.filter((e) => e.type === "call_abandoned").map((e) => (e as { attempt: number }).attempt)).toEqual([1]);

    // The committed conversation: one assistant message with both calls of the retried response
    // and one tool message each; no call id of the cut response anywhere.
    const [cut, retry] = chatRequests(provider());
    expect(cut!.outcome).toBe("reset");
    const log = (await store.log("conv-chat-incident")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Record<string, unknown>[];
    const assistants = log.filter((m) => m.role === "assistant" && m.tool_calls !== undefined);
    expect(assistants).toEqual([
      {
        role: "assistant",
        content: "Two payments.",
        tool_calls: retry!.calls.map((c) => ({ id: c.callId, type: "function", function: { name: "send_payment", arguments: c.json } })),
      },
    ]);
    const toolMessages = log.filter((m) => m.role === "tool");
    expect(toolMessages.map((m) => m.tool_call_id)).toEqual(retry!.calls.map((c) => c.callId));
    expect(toolMessages.map((m) => JSON.parse(m.content as string).paymentId).sort()).toEqual(paid.map((p) => p.paymentId).sort());
    for (const c of cut!.calls) expect(JSON.stringify(log)).not.toContain(c.callId);
    expect(result.turns.map((t) => [t.stopReason, t.text])).toEqual([
      ["tool_calls", "Two payments."],
      ["stop", "Payment sent."],
    ]);
    // The follow-up request sent exactly the committed log (TURN-7 reads it back the same).
    expect(messagesOf(chatRequests(provider()).at(-1)!.body)).toEqual(log.slice(0, 4));
    const again = await runner.send("conv-chat-incident", { id: "m1", content: "pay acme and bob" });
    expect(again.fromStore).toBe(true);
    expect(again.turns[0]!.calls.map((c) => [c.callId, c.key, c.result])).toEqual(result.turns[0]!.calls.map((c) => [c.callId, c.key, c.result]));
  });

  it("STREAM-1 a clean close before finish_reason (call 0 final, dispatched) is a failed stream: not committed, retried, each paid once", async () => {
    provider().setFaultPlan((request, info) => (info.attempt === 1 && isPaymentRequest(request) ? { kind: "clean_close", at: { beforeCompleted: true } } : undefined));
    const { runner, effects, events } = await chatSetup(provider());
    const result = await runner.send("conv-chat-close", { id: "m1", content: "pay acme and bob" });
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, error: expect.stringContaining("without finish_reason") });
    expect(result.turns[0]!.attempts).toBe(2);
    expect(effects()).toHaveLength(2);
    expect(events.filter((e) => e.type === "turn_committed")).toHaveLength(2);
  });

  it("STREAM-20 a fragment for a call already final fails the stream: nothing of it committed, retried", async () => {
    // A server that streams call 1, then a fragment of call 0 (already final: dispatched), then finishes.
    const { bodies, client } = scriptedClient([
      [
        { tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: JSON.stringify(PAY_ACME) } }] },
        { tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "send_payment", arguments: JSON.stringify(PAY_BOB) } }] },
        // Taken in, acme's committed arguments would not be the ones that ran.
        { tool_calls: [{ index: 0, function: { arguments: "0" } }] },
        { finish: "tool_calls" },
      ],
      [{ tool_calls: [{ index: 0, id: "call_c", type: "function", function: { name: "send_payment", arguments: JSON.stringify(PAY_ACME) } }] }, { finish: "tool_calls" }],
      [{ content: "Paid." }, { finish: "stop" }],
    ]);
    const { runner, effects, events, store } = await chatSetup(provider(), { client });
    const result = await runner.send("conv-chat-late", { id: "m1", content: "pay acme" });
    expect(bodies).toHaveLength(3);
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, error: expect.stringContaining("tool_call_fragment_after_final") });
    // acme ran in the failed attempt (final at call 1's first fragment) and was replayed; bob never ran.
    expect(effects()).toHaveLength(1);
    const log = JSON.stringify(await store.log("conv-chat-late"));
    expect(log).not.toContain("call_a");
    expect(log).not.toContain("call_b");
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "call_c", replayed: true })]);
  });

  it("STREAM-20 a first fragment naming another call id at a held index, or a second choice, fails the stream; a refusal is committed as the model's text", async () => {
    const first = { index: 0, id: "call_a", type: "function", function: { name: "send_payment", arguments: "" } };
    const { client } = scriptedClient([
      [{ tool_calls: [first] }, { tool_calls: [{ ...first, id: "call_z", function: { name: "send_payment", arguments: JSON.stringify(PAY_ACME) } }] }, { finish: "tool_calls" }],
      [{ content: "Sure." }, { content: "Two.", choice: 1 }, { finish: "stop" }],
      [{ content: "I can't " }, { refusal: "help with that." }, { finish: "stop" }],
    ]);
    const { runner, effects, events, store } = await chatSetup(provider(), { client });
    const result = await runner.send("conv-chat-splice", { id: "m1", content: "pay acme" });
    expect(events.filter((e) => e.type === "stream_failed").map((e) => (e as { error: string }).error)).toEqual([
      expect.stringContaining("tool_call_index_reused"),
      expect.stringContaining("second_choice"),
    ]);
    expect(effects()).toHaveLength(0);
    expect(result.turns.map((t) => [t.attempts, t.text, t.stopReason])).toEqual([[3, "I can't help with that.", "stop"]]);
    expect((await store.log("conv-chat-splice")).at(-1)).toEqual({ role: "assistant", content: "I can't ", refusal: "help with that." });
    expect(events.filter((e) => e.type === "text_delta" && e.attempt === 3).map((e) => (e as { text: string }).text)).toEqual(["I can't ", "help with that."]);
  });

  it("STREAM-20 one chunk carrying whole calls and finish_reason (as vLLM and Ollama send them) dispatches each call once, in order", async () => {
    const whole = (index: number, id: string, args: object) => ({ index, id, type: "function", function: { name: "send_payment", arguments: JSON.stringify(args) } });
    const { client } = scriptedClient([[{ tool_calls: [whole(0, "call_a", PAY_ACME), whole(1, "call_b", PAY_BOB)], finish: "stop" }], [{ content: "Paid." }, { finish: "stop" }]]);
    const { runner, effects } = await chatSetup(provider(), { client });
    const result = await runner.send("conv-chat-whole", { id: "m1", content: "pay acme and bob" });
    expect(effects()).toHaveLength(2);
    expect(result.turns[0]!.calls.map((c) => [c.callId, c.ordinal])).toEqual([
      ["call_a", 0],
      ["call_b", 0],
    ]);
    expect(result.turns[0]!.calls.every((c) => c.result !== undefined)).toBe(true);
  });

  for (const reason of ["length", "content_filter"] as const) {
    it(`STREAM-13 finish_reason ${reason} ends the response for good: a failed turn, not retryable, one request`, async () => {
      provider().setFaultPlan((request) =>
        isPaymentRequest(request) ? { kind: "incomplete_event", at: { call: 1, afterFragment: 1 }, ...(reason === "content_filter" ? { reason } : {}) } : undefined,
      );
      const { runner, effects } = await chatSetup(provider());
      const error = (await runner.send(`conv-chat-${reason}`, { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e)) as TurnFailedError;
      expect(error).toBeInstanceOf(TurnFailedError);
      expect(chatRequests(provider())).toHaveLength(1);
      expect(error.record).toMatchObject({ attempts: 1, retryable: false, error: { name: "StreamIncompleteError" } });
      expect(error.record.error.message).toContain(reason);
      // acme was final (call 1 had begun) and ran; bob's arguments were cut by the stop: never run.
      expect(error.record.calls.map((c) => c.status)).toEqual(["completed", "not_run"]);
      expect(effects()).toHaveLength(1);
    });
  }

  it("refuses bad options and params with a typed error naming the field, before any request", async () => {
    for (const [params, field] of [
      [{ n: 2 }, "options.params.n"],
      [{ stream: false }, "options.params.stream"],
      [{ messages: [] }, "options.params.messages"],
      [{ model: "x" }, "options.params.model"],
      [{ tools: [] }, "options.params.tools"],
      [{ max_tokens: 10 }, "options.params.max_tokens"],
      [{ functions: [] }, "options.params.functions"],
      [{ web_search_options: {} }, "options.params.web_search_options"],
      [{ tool_choice: { type: "custom", custom: { name: "x" } } }, "options.params.tool_choice"],
      ["temperature", "options.params"],
    ] as const) {
      const attempt = chatSetup(provider(), { params: params as never });
      await expect(attempt, field).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt, field).rejects.toMatchObject({ field });
    }
    await expect(chatSetup(provider(), { maxCompletionTokens: 0 })).rejects.toMatchObject({ field: "options.maxCompletionTokens" });
    await expect(chatSetup(provider(), { client: {} as never })).rejects.toMatchObject({ field: "options.client" });
    const { runner } = await chatSetup(provider(), { params: { n: 1, temperature: 0 } });
    await expect(runner.send("conv-bad", { id: "m1", content: [{ type: "input_text", text: "x" }] as never })).rejects.toMatchObject({ field: "message.content[0].type" });
    expect(provider().requests).toHaveLength(0);
  });

  it("STREAM-18 a forcing tool_choice goes with the message's first request only; the second carries the committed messages exactly", async () => {
    const { runner, effects, store } = await chatSetup(provider(), { params: { tool_choice: "required" }, instructions: "You pay invoices.", maxCompletionTokens: 512 });
    const result = await runner.send("conv-chat-force", { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(effects()).toHaveLength(1);
    const [first, second] = chatRequests(provider());
    expect([first, second].map((r) => (r!.body as { tool_choice?: unknown }).tool_choice)).toEqual(["required", "auto"]);
    const log = (await store.log("conv-chat-force")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry]));
    const system = { role: "system", content: "You pay invoices." };
    expect(messagesOf(first!.body)).toEqual([system, { role: "user", content: "pay acme" }]);
    expect(messagesOf(second!.body)).toEqual([system, ...log.slice(0, 3)]);
    expect(messagesOf(second!.body).slice(2)).toEqual([
      { role: "assistant", content: null, tool_calls: [{ id: first!.calls[0]!.callId, type: "function", function: { name: "send_payment", arguments: first!.calls[0]!.json } }] },
      { role: "tool", tool_call_id: first!.calls[0]!.callId, content: JSON.stringify(result.turns[0]!.calls[0]!.result) },
    ]);
    expect(first!.body).toMatchObject({ stream: true, max_completion_tokens: 512, tools: [{ type: "function", function: { name: "send_payment" } }] });
  });
});

type ScriptedChunk = { content?: string; refusal?: string; tool_calls?: unknown[]; finish?: string; choice?: number };

/**
 * The real SDK over a server that streams the given chunks (one list per request, in order): for
 * streams the mock's scripts cannot make (a fragment for a call already final).
 */
function scriptedClient(responses: ScriptedChunk[][]): { client: OpenAI; bodies: unknown[] } {
  const bodies: unknown[] = [];
  const client = new OpenAI({
    baseURL: "http://chat.invalid/v1",
    apiKey: "test-key",
    maxRetries: 0,
    fetch: async (_url, init) => {
      bodies.push(JSON.parse(String(init?.body)));
      const chunks = responses[bodies.length - 1] ?? [];
      const lines = chunks.map((c, i) => {
        const delta = {
          ...(c.content !== undefined ? { content: c.content } : {}),
          ...(c.refusal !== undefined ? { refusal: c.refusal } : {}),
          ...(c.tool_calls !== undefined ? { tool_calls: c.tool_calls } : {}),
        };
        const chunk = { id: `chatcmpl-${bodies.length}`, object: "chat.completion.chunk", created: 0, model: "gpt-test", choices: [{ index: c.choice ?? 0, delta: i === 0 ? { role: "assistant", ...delta } : delta, finish_reason: c.finish ?? null }] };
        return `data: ${JSON.stringify(chunk)}\n\n`;
      });
      return new Response(`${lines.join("")}data: [DONE]\n\n`, { status: 200, headers: { "content-type": "text/event-stream" } });
    },
  });
  return { client, bodies };
}
