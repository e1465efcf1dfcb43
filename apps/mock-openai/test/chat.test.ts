import OpenAI from "openai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { call, respond, say, scriptFromPlans, startMockOpenAI, text, type Fault, type MockOpenAI } from "../src/index.js";

const PAY = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042" };
const script = scriptFromPlans({
  "pay twice": respond(text("Paying."), call("send_payment", PAY), call("send_payment", { ...PAY, reference: "INV-1043" })),
  hello: say("Hi there, how can I help?"),
});

let mock: MockOpenAI;
let client: OpenAI;
beforeEach(async () => {
  mock = await startMockOpenAI({ script, seed: "chat" });
  client = new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });
});
afterEach(async () => {
  await mock.close();
});

type Chunk = OpenAI.Chat.Completions.ChatCompletionChunk;

/** Drain a Chat Completions stream through the real SDK; returns the chunks and what it raised. */
async function drain(messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[], fault?: Fault) {
  if (fault) mock.queueFault(fault);
  const chunks: Chunk[] = [];
  try {
    const stream = await client.chat.completions.create({ model: "gpt-test", messages, stream: true });
    for await (const chunk of stream) chunks.push(chunk);
    return { chunks, error: undefined as unknown };
  } catch (error) {
    return { chunks, error };
  }
}

const user = (content: string): OpenAI.Chat.Completions.ChatCompletionMessageParam[] => [{ role: "user", content }];
const finishes = (chunks: Chunk[]) => chunks.flatMap((c) => c.choices.flatMap((ch) => (ch.finish_reason !== null ? [ch.finish_reason] : [])));

describe("the Chat Completions stream (POST /v1/chat/completions), read by the real openai SDK", () => {
  it("renders the script's response as chunks: content deltas, tool-call fragments by index, finish_reason tool_calls, logged", async () => {
    const { chunks, error } = await drain(user("pay twice"));
    expect(error).toBeUndefined();
    const deltas = chunks.flatMap((c) => c.choices.map((ch) => ch.delta));
    expect(deltas.map((d) => d.content ?? "").join("")).toBe("Paying.");
    const fragments = deltas.flatMap((d) => d.tool_calls ?? []);
    // The first fragment of an index names the call; later ones carry arguments only.
    const firsts = fragments.filter((f) => f.id !== undefined);
    expect(firsts.map((f) => [f.index, f.type, f.function?.name])).toEqual([
      [0, "function", "send_payment"],
      [1, "function", "send_payment"],
    ]);
    const args = [0, 1].map((i) => JSON.parse(fragments.filter((f) => f.index === i).map((f) => f.function?.arguments ?? "").join("")));
    expect(args).toEqual([PAY, { ...PAY, reference: "INV-1043" }]);
    expect(finishes(chunks)).toEqual(["tool_calls"]);
    const [record] = mock.requests;
    expect(record).toMatchObject({ api: "chat.completions", stream: true, outcome: "complete" });
    expect(record!.calls.map((c) => c.callId)).toEqual(firsts.map((f) => f.id));
    expect(record!.responseId).toBe(chunks[0]!.id);
  });

  it("reads a multi-turn request the way the script reads a Responses input: tool messages answer with the plan's `after`", async () => {
    const { chunks } = await drain([
      { role: "user", content: "pay twice" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "send_payment", arguments: JSON.stringify(PAY) } }] },
      { role: "tool", tool_call_id: "call_1", content: "{}" },
    ]);
    expect(chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? "")).join("")).toBe("Done.");
    expect(finishes(chunks)).toEqual(["stop"]);
  });

  it("the fault plan's kinds apply to its chunks: a clean close before finish_reason, a cut, an error chunk, a length stop", async () => {
    const clean = await drain(user("pay twice"), { kind: "clean_close", at: { beforeCompleted: true } });
    // The SDK ends the iterator with no error: only the missing finish_reason tells.
    expect(clean.error).toBeUndefined();
    expect(finishes(clean.chunks)).toEqual([]);
    expect(mock.requests.at(-1)!.outcome).toBe("clean_close");

    const cut = await drain(user("pay twice"), { kind: "reset", at: { call: 1, afterFragment: 1 } });
    expect(String(cut.error)).toContain("terminated");
    // Call 1's first fragment arrived (so call 0 is final), and one of its argument fragments.
    expect(cut.chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? [])).filter((f) => f.index === 1)).toHaveLength(2);

    const errored = await drain(user("pay twice"), { kind: "error_event", at: { afterCallDone: 0 }, message: "overloaded" });
    expect(errored.error).toBeInstanceOf(OpenAI.APIError);
    expect(String(errored.error)).toContain("overloaded");

    const length = await drain(user("hello"), { kind: "incomplete_event", at: { beforeCompleted: true } });
    expect(length.error).toBeUndefined();
    expect(finishes(length.chunks)).toEqual(["length"]);
    const filtered = await drain(user("hello"), { kind: "incomplete_event", at: { beforeCompleted: true }, reason: "content_filter" });
    expect(finishes(filtered.chunks)).toEqual(["content_filter"]);
  });

  it("a hold pauses the chunks until release", async () => {
    mock.queueFault({ kind: "hold", at: { afterCallDone: 0 } });
    const pending = drain(user("pay twice"));
    const held = await mock.waitForHold(undefined, { timeoutMs: 10_000 });
    expect(mock.requests[0]!.events.length).toBe(held.beforeEvent);
    mock.release();
    const { chunks, error } = await pending;
    expect(error).toBeUndefined();
    expect(finishes(chunks)).toEqual(["tool_calls"]);
  });
});
