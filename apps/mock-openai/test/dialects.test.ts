import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { CHAT_DIALECTS, MockOpenAIError, call, respond, say, scriptFromPlans, startMockOpenAI, text, type ChatDialect, type Fault, type FaultPosition, type MockOpenAI } from "../src/index.js";

// The Chat Completions dialects of real OpenAI-compatible servers: each renders the same script in
// its server's shapes, refuses what that server refuses, and takes a fault at the same logical point.

const PAY = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042" };
const BOB = { ...PAY, payee: "bob", reference: "LOAN-3" };
const script = scriptFromPlans({ "pay twice": respond(text("Paying."), call("send_payment", PAY), call("send_payment", BOB)), hello: say("Hi.") }, { after: "Paid." });

let mock: MockOpenAI | undefined;
afterEach(async () => {
  await mock?.close();
  mock = undefined;
});

type Obj = Record<string, unknown>;

/** The raw SSE data objects of one streamed request (fetch, not the SDK: every shape as sent). */
async function raw(m: MockOpenAI, body: Obj, headers: Record<string, string> = {}): Promise<{ status: number; chunks: Obj[]; body?: unknown }> {
  const response = await fetch(`${m.baseURL}/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ model: "m", stream: true, ...body }) });
  if (response.status !== 200) return { status: response.status, chunks: [], body: await response.json() };
  // Read up to a reset: what arrived before it counts.
  let textBody = "";
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      textBody += decoder.decode(value, { stream: true });
    }
  } catch {
    // the socket was destroyed
  }
  const chunks = textBody
    .split("\n\n")
    .map((l) => l.replace(/^data: /, ""))
    .filter((l) => l !== "" && l !== "[DONE]")
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Obj];
      } catch {
        return [];
      }
    });
  return { status: 200, chunks };
}

const user = (content: string) => ({ messages: [{ role: "user", content }] });
const choice0 = (c: Obj) => (c.choices as Obj[] | undefined)?.find((x) => x.index === 0);
const deltas = (chunks: Obj[]) => chunks.flatMap((c) => (choice0(c)?.delta !== undefined ? [choice0(c)!.delta as Obj] : []));
const fragmentsOf = (chunks: Obj[]) => deltas(chunks).flatMap((d) => (d.tool_calls as Obj[] | undefined) ?? []);
const realFinishes = (chunks: Obj[]) => chunks.flatMap((c) => { const f = choice0(c)?.finish_reason; return typeof f === "string" && f !== "" ? [f] : []; });

/** Each call's arguments text as a client folds them: by index, or (no index) by id, else the call begun last. */
function folded(chunks: Obj[]): { id: string; name: string; args: string }[] {
  const calls: { id: string; name: string; args: string; index?: number }[] = [];
  for (const f of fragmentsOf(chunks)) {
    const fn = (f.function ?? {}) as Obj;
    let held = typeof f.index === "number" ? calls.find((c) => c.index === f.index) : typeof f.id === "string" ? calls.find((c) => c.id === f.id) : calls.at(-1);
    if (held === undefined) {
      held = { id: String(f.id), name: String(fn.name), args: "", ...(typeof f.index === "number" ? { index: f.index } : {}) };
      calls.push(held);
    }
    if (typeof fn.arguments === "string") held.args += fn.arguments;
  }
  return calls.map(({ id, name, args }) => ({ id, name, args }));
}

describe("chatDialect: refused unless it names a dialect", () => {
  it("an unknown chatDialect option, setChatDialect value or x-mock-chat-dialect header is refused (invalid_option; a 400 naming the dialects)", async () => {
    await expect(startMockOpenAI({ script, chatDialect: "llamacpp" as ChatDialect })).rejects.toMatchObject({ code: "invalid_option", message: expect.stringContaining("openai, azure, gemini, vllm, deepseek, sglang, mistral") });
    mock = await startMockOpenAI({ script });
    let thrown: unknown;
    try {
      mock.setChatDialect("Azure" as ChatDialect);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(MockOpenAIError);
    expect(thrown).toMatchObject({ code: "invalid_option" });
    const refused = await raw(mock, user("hello"), { "x-mock-chat-dialect": "bedrock" });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body)).toContain("x-mock-chat-dialect must be one of");
    expect(mock.requests.at(-1)).toMatchObject({ outcome: "invalid_request" });
  });
});

describe("each dialect renders the script as its server streams it", () => {
  const answer = async (dialect: ChatDialect) => {
    mock = await startMockOpenAI({ script, seed: "dialects", chatDialect: dialect });
    const { chunks } = await raw(mock, user("pay twice"));
    expect(mock.requests[0]).toMatchObject({ chatDialect: dialect, outcome: "complete" });
    // Whatever the dialect, a client that reads its shapes gets the script's calls whole, and its text.
    expect(folded(chunks).map((c) => [c.name, JSON.parse(c.args)])).toEqual([
      ["send_payment", PAY],
      ["send_payment", BOB],
    ]);
    expect(folded(chunks).map((c) => c.id)).toEqual(mock.requests[0]!.calls.map((c) => c.callId));
    return chunks;
  };

  it("openai: fragments by index, finish_reason tool_calls", async () => {
    const chunks = await answer("openai");
    expect(fragmentsOf(chunks).every((f) => typeof f.index === "number")).toBe(true);
    expect(realFinishes(chunks)).toEqual(["tool_calls"]);
  });

  it("azure: a first chunk with an empty id and no choices (prompt_filter_results), annotation chunks without delta after each final call and after the finish", async () => {
    const chunks = await answer("azure");
    expect(chunks[0]).toMatchObject({ id: "", choices: [], prompt_filter_results: [expect.objectContaining({ prompt_index: 0 })] });
    const annotations = chunks.filter((c) => c.id === "" && (c.choices as Obj[]).length === 1 && choice0(c)!.delta === undefined);
    expect(annotations).toHaveLength(2);
    expect(choice0(annotations[0]!)).toMatchObject({ content_filter_offsets: expect.any(Object), finish_reason: null });
    expect(choice0(chunks.at(-1)!)).toMatchObject({ content_filter_results: expect.any(Object) });
  });

  it("gemini: fragments without index, function-call ids, the first call signed in extra_content, finish_reason stop beside calls", async () => {
    const chunks = await answer("gemini");
    expect(fragmentsOf(chunks).some((f) => "index" in f)).toBe(false);
    const named = fragmentsOf(chunks).filter((f) => f.id !== undefined);
    expect(named.map((f) => String(f.id).startsWith("function-call-"))).toEqual([true, true]);
    expect(named[0]!.extra_content).toEqual({ google: { thought_signature: expect.stringMatching(/^sig_/) } });
    expect(named[1]!.extra_content).toBeUndefined();
    expect(realFinishes(chunks)).toEqual(["stop"]);
    expect(deltas(chunks).every((d) => d.role === "assistant")).toBe(true);
  });

  it("vllm: the calls whole and side by side in one chunk", async () => {
    const chunks = await answer("vllm");
    const withCalls = chunks.filter((c) => (choice0(c)?.delta as Obj | undefined)?.tool_calls !== undefined);
    expect(withCalls).toHaveLength(1);
    expect(((choice0(withCalls[0]!)!.delta as Obj).tool_calls as Obj[]).map((f) => [f.index, String(f.id).slice(0, 14)])).toEqual([
      [0, "chatcmpl-tool-"],
      [1, "chatcmpl-tool-"],
    ]);
  });

  it("deepseek: thinking before every answer (reasoning_content deltas, content null), then the calls", async () => {
    const chunks = await answer("deepseek");
    const thinking = deltas(chunks).filter((d) => typeof d.reasoning_content === "string" && d.reasoning_content !== "");
    expect(thinking.length).toBeGreaterThan(0);
    expect(thinking.every((d) => d.content === null)).toBe(true);
    expect(realFinishes(chunks)).toEqual(["tool_calls"]);
  });

  it("sglang: finish_reason \"\" on every chunk before the real one", async () => {
    const chunks = await answer("sglang");
    const finishes = chunks.flatMap((c) => (choice0(c) === undefined ? [] : [choice0(c)!.finish_reason]));
    expect(finishes.slice(0, -1).every((f) => f === "")).toBe(true);
    expect(finishes.at(-1)).toBe("tool_calls");
  });

  it("mistral: content as text parts, nine-character call ids", async () => {
    const chunks = await answer("mistral");
    const parts = deltas(chunks).flatMap((d) => (Array.isArray(d.content) ? (d.content as Obj[]) : []));
    expect(parts.map((p) => p.text).join("")).toBe("Paying.");
    expect(folded(chunks).map((c) => /^[A-Za-z0-9]{9}$/.test(c.id))).toEqual([true, true]);
  });
});

describe("a fault lands at the same logical point in every dialect", () => {
  const cases: { at: FaultPosition; expected: (json: string[], fragments: string[][]) => string[] }[] = [
    // Call 0 final (call 1 named, none of its arguments).
    { at: { afterCallDone: 0 }, expected: (json) => [json[0]!, ""] },
    // Inside call 1's arguments, after its first piece.
    { at: { call: 1, afterFragment: 1 }, expected: (json, fragments) => [json[0]!, fragments[1]![0]!] },
    // Instead of the finish: both calls' text, the last not final.
    { at: { beforeCompleted: true }, expected: (json) => json },
  ];
  for (const dialect of CHAT_DIALECTS) {
    it(`${dialect}: reset at afterCallDone 0, inside call 1, instead of the finish; a hold there released plays the rest`, async () => {
      mock = await startMockOpenAI({ script, seed: `faults-${dialect}`, chatDialect: dialect });
      for (const { at, expected } of cases) {
        mock.clearRequests();
        mock.queueFault({ kind: "reset", at } as Fault);
        const { chunks } = await raw(mock, user("pay twice"));
        const record = mock.requests[0]!;
        expect(record.outcome, JSON.stringify(at)).toBe("reset");
        expect(folded(chunks).map((c) => c.args), `${dialect} ${JSON.stringify(at)}`).toEqual(expected(record.calls.map((c) => c.json), record.calls.map((c) => c.fragments)));
        expect(realFinishes(chunks)).toEqual([]);
      }
      mock.clearRequests();
      mock.queueFault({ kind: "hold", at: { afterCallDone: 0 } });
      const pending = raw(mock, user("pay twice"));
      const held = await mock.waitForHold();
      expect(folded(mock.requests[0]!.events.map((e) => e.data)).map((c) => c.args)).toEqual([mock.requests[0]!.calls[0]!.json, ""]);
      mock.release(held.requestNumber);
      const { chunks } = await pending;
      expect(folded(chunks).map((c) => JSON.parse(c.args))).toEqual([PAY, BOB]);
    });
  }
});

describe("what the dialect's server refuses, the mock refuses", () => {
  /** The follow-up a client sends after the calls: the assistant message as `shape` makes it, then the tool results. */
  const followUp = async (m: MockOpenAI, shape: (assistant: Obj) => Obj) => {
    const { chunks } = await raw(m, user("pay twice"));
    const calls = folded(chunks);
    const signed = fragmentsOf(chunks).filter((f) => f.extra_content !== undefined);
    const reasoningContent = deltas(chunks).map((d) => (typeof d.reasoning_content === "string" ? d.reasoning_content : "")).join("");
    const assistant: Obj = {
      role: "assistant",
      content: "Paying.",
      reasoning_content: reasoningContent,
      tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args }, ...(signed.find((f) => f.id === c.id) ? { extra_content: signed.find((f) => f.id === c.id)!.extra_content } : {}) })),
    };
    return raw(m, { messages: [{ role: "user", content: "pay twice" }, shape(assistant), ...calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: "{}" }))] });
  };

  it("deepseek: an assistant message with tool_calls and no reasoning_content is a 400 (DeepSeek's words); with it, answered", async () => {
    mock = await startMockOpenAI({ script, chatDialect: "deepseek" });
    const refused = await followUp(mock, ({ reasoning_content: _dropped, ...rest }) => rest);
    expect(refused.status).toBe(400);
    expect(refused.body).toEqual({ error: { message: "The `reasoning_content` in the thinking mode must be passed back to the API.", type: "invalid_request_error", param: null, code: "invalid_request_error" } });
    const taken = await followUp(mock, (a) => a);
    expect(taken.status).toBe(200);
    expect(deltas(taken.chunks).map((d) => (typeof d.content === "string" ? d.content : "")).join("")).toBe("Paid.");
  });

  it("gemini: a signed call of the current turn sent back without its thought signature, or with another, is a 400 (Google's error array); with it, answered", async () => {
    mock = await startMockOpenAI({ script, chatDialect: "gemini" });
    const strip = (a: Obj) => ({ ...a, tool_calls: (a.tool_calls as Obj[]).map(({ extra_content: _x, ...c }) => c) });
    const refused = await followUp(mock, strip);
    expect(refused.status).toBe(400);
    expect(refused.body).toEqual([{ error: { code: 400, message: expect.stringContaining("Function call is missing a thought_signature in functionCall parts."), status: "INVALID_ARGUMENT" } }]);
    const altered = await followUp(mock, (a) => ({ ...a, tool_calls: (a.tool_calls as Obj[]).map((c, i) => (i === 0 ? { ...c, extra_content: { google: { thought_signature: "sig_forged" } } } : c)) }));
    expect(altered.status).toBe(400);
    const taken = await followUp(mock, (a) => a);
    expect(taken.status).toBe(200);
    // An earlier turn (a user message since) is not checked: Gemini validates the current turn only.
    const later = await raw(mock, { messages: [{ role: "user", content: "pay twice" }, { role: "assistant", content: null, tool_calls: [{ id: "function-call-1", type: "function", function: { name: "send_payment", arguments: "{}" } }] }, { role: "tool", tool_call_id: "function-call-1", content: "{}" }, { role: "user", content: "hello" }] });
    expect(later.status).toBe(200);
  });
});

describe("the SDK reads every dialect", () => {
  it("streams of each dialect iterate through openai's SDK without error", async () => {
    for (const dialect of CHAT_DIALECTS) {
      const m = await startMockOpenAI({ script, chatDialect: dialect });
      try {
        const client = new OpenAI({ baseURL: m.baseURL, apiKey: "k", maxRetries: 0 });
        const stream = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "pay twice" }], stream: true, stream_options: { include_usage: true } });
        let n = 0;
        for await (const _chunk of stream) n++;
        expect(n, dialect).toBeGreaterThan(2);
      } finally {
        await m.close();
      }
    }
  });
});
