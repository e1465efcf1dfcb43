import { StreamIncompleteError } from "@dispatch-once/runner";
import { wrapLanguageModel } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV3 } from "ai/test";
import { describe, expect, it } from "vitest";
import { spliceGuard } from "../src/index.js";

// AISDK-16's signs, one by one: a fake provider that emits each raw event followed by a marker part
// (as @ai-sdk/openai and @ai-sdk/anthropic emit a chunk's raw part before the parts parsed from it).
type Part = { type: string; [k: string]: unknown };
async function guarded(events: unknown[], extra: Part[] = [], includeRawChunks = false, providerErrored = false) {
  const parts: Part[] = [{ type: "stream-start", warnings: [] }];
  events.forEach((rawValue, i) => parts.push({ type: "raw", rawValue }, { type: "text-delta", id: "t", delta: String(i) }));
  parts.push(...extra);
  let askedRaw: boolean | undefined;
  const model = new MockLanguageModelV3({
    doStream: async (options) => {
      askedRaw = options.includeRawChunks;
      return { stream: convertArrayToReadableStream(parts as never[]) };
    },
  });
  const { stream } = await wrapLanguageModel({ model, middleware: spliceGuard() }).doStream({ prompt: [], includeRawChunks });
  const seen: Part[] = [];
  for await (const part of stream as unknown as AsyncIterable<Part>) seen.push(part);
  // The guard's error part is the stream's last part (a provider's own error part is followed by its finish).
  const at = seen.findIndex((p) => p.type === "error");
  const error = at === -1 ? undefined : seen[at]!["error"];
  if (at !== -1 && !providerErrored) expect(seen.slice(at + 1)).toEqual([]);
  // The markers passed on: which events' parts reached the AI SDK.
  const passed = seen.filter((p) => p.type === "text-delta").map((p) => Number(p["delta"]));
  return { error, passed, seen, askedRaw };
}

const created = (id: string) => ({ type: "response.created", response: { id } });
const added = (index: number, item: Record<string, unknown>) => ({ type: "response.output_item.added", output_index: index, item });
const done = (index: number) => ({ type: "response.output_item.done", output_index: index, item: {} });
const fc = (id: string) => ({ type: "function_call", id, call_id: `call_${id}`, name: "pay" });

describe("spliceGuard's signs of a second response (AISDK-16)", () => {
  it("tool-call parts under one id with other input (some models and servers repeat ids), or identical under distinct ids (two asks), pass whole", async () => {
    const r = await guarded([], [
      { type: "tool-call", toolCallId: "functions.pay:0", toolName: "pay", input: '{"to":"acme"}' },
      { type: "tool-call", toolCallId: "functions.pay:0", toolName: "pay", input: '{"to":"bob"}' },
      { type: "tool-call", toolCallId: "toolu_b", toolName: "pay", input: '{"to":"acme"}' },
      { type: "finish" },
    ]);
    expect(r.error).toBeUndefined();
    expect(r.seen.filter((p) => p.type === "tool-call")).toHaveLength(3);
    // On a Chat Completions body even a whole repeat passes: servers there repeat ids (STREAM-10's MAY).
    const repeat = { type: "tool-call", toolCallId: "call_0", toolName: "pay", input: '{"to":"acme"}' };
    const chat = await guarded([{ id: "c1", choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] }], [repeat, repeat, { type: "finish" }]);
    expect(chat.error).toBeUndefined();
    expect(chat.seen.filter((p) => p.type === "tool-call")).toHaveLength(2);
  });

  it("STREAM-10 on the Responses API: identical tool-call parts under one call_id with distinct item ids are two calls; a relay's repeat of the second (its item id again) is caught", async () => {
    // A compatible server that repeats call_ids gives two identical asks one; @ai-sdk/openai puts each
    // item's id in the part's providerMetadata. STREAM-10: distinct item ids are two calls.
    const twin = (itemId: string) => ({ type: "tool-call", toolCallId: "call_0", toolName: "pay", input: '{"to":"acme"}', providerMetadata: { openai: { itemId } } });
    const two = await guarded([], [twin("fc_1"), twin("fc_2"), { type: "finish" }]);
    expect(two.error).toBeUndefined();
    expect(two.seen.filter((p) => p.type === "tool-call")).toHaveLength(2);
    const repeated = await guarded([], [twin("fc_1"), twin("fc_2"), twin("fc_2"), { type: "finish" }]);
    expect(repeated.error).toBeInstanceOf(StreamIncompleteError);
    expect(repeated.seen.filter((p) => p.type === "tool-call")).toHaveLength(2);
    // A part without an item id is compared by id, tool and input alone.
    const bare = await guarded([], [twin("fc_1"), { ...twin("fc_1"), providerMetadata: undefined }, { type: "finish" }]);
    expect(bare.error).toBeInstanceOf(StreamIncompleteError);
  });

  it("identical tool-call parts without an id (a provider that leaves ids out) are two asks, not a repeat: an empty id names nothing", async () => {
    const bare = { type: "tool-call", toolCallId: "", toolName: "pay", input: '{"to":"acme"}' };
    const r = await guarded([], [bare, { ...bare }, { type: "finish" }]);
    expect(r.error).toBeUndefined();
    expect(r.seen.filter((p) => p.type === "tool-call")).toHaveLength(2);
  });

  it("a clean Responses stream passes whole; the raw parts it asked for are not the app's", async () => {
    const r = await guarded([created("r1"), { type: "response.in_progress", response: { id: "r1" } }, added(0, fc("a")), done(0), added(1, fc("b")), done(1)], [{ type: "finish" }]);
    expect(r.error).toBeUndefined();
    expect(r.askedRaw).toBe(true);
    expect(r.passed).toEqual([0, 1, 2, 3, 4, 5]);
    expect(r.seen.some((p) => p.type === "raw")).toBe(false);
    expect((await guarded([created("r1")], [], true)).seen.some((p) => p.type === "raw")).toBe(true);
  });

  it("a Chat Completions stream whose first chunk names no completion (Azure's prompt filter results, id \"\") passes whole", async () => {
    const chunk = (id: string, finish: string | null = null) => ({ id, object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "x" }, finish_reason: finish }] });
    const r = await guarded([{ id: "", object: "", choices: [], prompt_filter_results: [] }, chunk("c1"), chunk("c1", "stop")], [{ type: "tool-call", toolCallId: "1" }, { type: "finish" }]);
    expect(r.error).toBeUndefined();
    expect(r.passed).toEqual([0, 1, 2]);
    expect(r.seen.map((p) => p.type)).toContain("finish");
  });

  it("a Chat Completions body that ended without finish_reason (none, or only empty ones) fails at its first tool-call part, or at its finish", async () => {
    const chunk = (finish: string | null) => ({ id: "c1", choices: [{ index: 0, delta: { content: "x" }, finish_reason: finish }] });
    for (const [chunks, end] of [
      [[chunk(null), chunk(null)], [{ type: "tool-call", toolCallId: "1" }, { type: "finish" }]],
      [[chunk(""), chunk("")], [{ type: "finish" }]],
    ] as [unknown[], Part[]][]) {
      const r = await guarded(chunks, end);
      expect(StreamIncompleteError.isInstance(r.error), String(r.error)).toBe(true);
      expect((r.error as StreamIncompleteError).streamError).toMatch(/ended without choice 0's finish_reason/);
      expect(r.seen.filter((p) => p.type === "tool-call" || p.type === "finish")).toEqual([]);
    }
  });

  const cases: { name: string; events: unknown[]; extra?: Part[]; at: number; says: RegExp }[] = [
    { name: "a second response.created", events: [created("r1"), added(0, fc("a")), done(0), created("r2"), added(0, fc("c"))], at: 3, says: /response\.created second_response: a second response \(r2\) began in the stream of r1/ },
    { name: "headless: a call at an output_index that held a call (same type, no response event)", events: [created("r1"), added(0, fc("a")), done(0), added(0, fc("c")), done(0)], at: 3, says: /response\.output_item\.added at output_index 0, which already holds an item of r1/ },
    { name: "headless with a lead: a message at the index of a call", events: [created("r1"), added(0, fc("a")), done(0), added(1, fc("b")), added(0, { type: "message", id: "m" })], at: 4, says: /output_index 0/ },
    { name: "a response.in_progress of another response", events: [created("r1"), added(0, fc("a")), { type: "response.in_progress", response: { id: "r2" } }], at: 2, says: /response\.in_progress second_response/ },
    {
      name: "Messages API, headless under thinking: a thinking block at index 0 again (no type differs)",
      events: [
        { type: "message_start", message: { id: "msg_1" } },
        { type: "content_block_start", index: 0, content_block: { type: "thinking" } },
        { type: "content_block_stop", index: 0 },
        { type: "content_block_start", index: 1, content_block: { type: "tool_use" } },
        { type: "content_block_stop", index: 1 },
        { type: "content_block_start", index: 0, content_block: { type: "thinking" } },
      ],
      at: 5,
      says: /content_block_start at index 0/,
    },
    {
      name: "a tool-call part that repeats an earlier one whole (id, tool, input), as a relay that renumbers what it re-sends delivers it",
      events: [],
      extra: [
        { type: "tool-call", toolCallId: "toolu_a", toolName: "pay", input: '{"to":"acme"}' },
        { type: "tool-call", toolCallId: "toolu_a", toolName: "pay", input: '{"to":"acme"}' },
      ],
      at: 0,
      says: /a tool-call part \(toolu_a, pay\) repeats an earlier call of this response whole/,
    },
    { name: "Messages API, a second message_start", events: [{ type: "message_start", message: { id: "msg_1" } }, { type: "message_start", message: { id: "msg_2" } }], at: 1, says: /message_start second_response/ },
    { name: "Chat Completions, a chunk of another completion from a server that leaves out object", events: [{ id: "c1", choices: [] }, { id: "c2", choices: [] }], at: 1, says: /chat\.completion\.chunk second_response/ },
    { name: "Chat Completions, a chunk of another completion", events: [{ object: "chat.completion.chunk", id: "c1", choices: [] }, { object: "chat.completion.chunk", id: "c1", choices: [] }, { object: "chat.completion.chunk", id: "c2", choices: [] }], at: 2, says: /chat\.completion\.chunk second_response/ },
    { name: "no raw events, a second response-metadata part with another id", events: [], extra: [{ type: "response-metadata", id: "x1" }, { type: "tool-call", toolCallId: "1" }, { type: "response-metadata", id: "x2" }, { type: "tool-call", toolCallId: "2" }], at: 0, says: /response-metadata: a second response \(x2\)/ },
  ];
  for (const c of cases) {
    it(`${c.name}: the stream fails there, nothing after it passes`, async () => {
      const r = await guarded(c.events, c.extra);
      expect(StreamIncompleteError.isInstance(r.error), String(r.error)).toBe(true);
      expect((r.error as StreamIncompleteError).streamError).toMatch(c.says);
      expect(r.passed).toEqual([...Array(c.at).keys()]);
      expect(r.seen.filter((p) => p.type === "tool-call").length).toBeLessThanOrEqual(1);
    });
  }
});

describe("spliceGuard's signs over Google's Gemini chunks (AISDK-16)", () => {
  const g = (responseId: string | undefined, parts: unknown[], finishReason?: string) => ({
    candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}), index: 0 }],
    ...(responseId !== undefined ? { responseId } : {}),
    modelVersion: "gemini-2.5-flash",
  });
  const call = { functionCall: { name: "pay", args: { to: "acme" } } };

  it("a whole Gemini body passes: a usage-only chunk after finishReason, chunks that never name a response, a prompt blocked by promptFeedback", async () => {
    const usage = { usageMetadata: { promptTokenCount: 1, totalTokenCount: 2 }, responseId: "r1", modelVersion: "gemini-2.5-flash" };
    for (const events of [
      [g("r1", [{ text: "a" }]), g("r1", [call]), g("r1", [{ text: "" }], "STOP"), usage],
      [g(undefined, [call]), g(undefined, [{ text: "b" }], "STOP")],
      [{ promptFeedback: { blockReason: "SAFETY" }, usageMetadata: { promptTokenCount: 1 } }],
    ]) {
      const r = await guarded(events, [{ type: "finish" }]);
      expect(r.error, JSON.stringify(events)).toBeUndefined();
      expect(r.passed).toEqual(events.map((_, i) => i));
    }
  });

  it("fails at a chunk of another responseId, at content without the responseId, at content after finishReason, at an error chunk, and at a finish without finishReason", async () => {
    const cases: [unknown[], Part[], RegExp, number[]][] = [
      [[g("r1", [call]), g("r2", [call])], [], /^responseId second_response: a second response \(r2\) began in the stream of r1$/, [0]],
      [[g("r1", [call]), g(undefined, [call])], [], /^a chunk without the responseId the stream's chunks carried \(r1\)/, [0]],
      [[g("r1", [call], "STOP"), g("r1", [call])], [], /^a chunk after finishReason/, [0]],
      [[g("r1", [{ text: "a" }]), { error: { code: 429, message: "Resource exhausted", status: "RESOURCE_EXHAUSTED" } }], [], /^error chunk 429 RESOURCE_EXHAUSTED: Resource exhausted$/, [0]],
      [[g("r1", [call])], [{ type: "finish" }], /^the Gemini body ended without a finishReason/, [0]],
    ];
    for (const [events, extra, sign, passed] of cases) {
      const r = await guarded(events, extra);
      expect(StreamIncompleteError.isInstance(r.error), JSON.stringify(events)).toBe(true);
      expect((r.error as StreamIncompleteError).streamError).toMatch(sign);
      expect((r.error as StreamIncompleteError).finishEvent).toBe("finishReason");
      expect(r.passed).toEqual(passed);
      expect(r.seen.some((p) => p.type === "finish")).toBe(false);
    }
  });
});

describe("spliceGuard's signs over Bedrock's Converse events (AISDK-16)", () => {
  // Converse events as @ai-sdk/amazon-bedrock passes them raw: one key, the event's name.
  const start = { messageStart: { role: "assistant" } };
  const text = (i: number, t: string) => ({ contentBlockDelta: { contentBlockIndex: i, delta: { text: t } } });
  const toolStart = (i: number) => ({ contentBlockStart: { contentBlockIndex: i, start: { toolUse: { toolUseId: `t${i}`, name: "pay" } } } });
  const toolInput = (i: number) => ({ contentBlockDelta: { contentBlockIndex: i, delta: { toolUse: { input: '{"to":"acme"}' } } } });
  const stop = (i: number) => ({ contentBlockStop: { contentBlockIndex: i } });
  const messageStop = { messageStop: { stopReason: "tool_use" } };
  const metadata = { metadata: { usage: { inputTokens: 1, outputTokens: 2, totalTokens: 3 } } };

  it("a whole Converse body passes: text opened by its first delta, a tool use, messageStop, metadata", async () => {
    const events = [start, text(0, "Paying."), text(0, " Now."), stop(0), toolStart(1), toolInput(1), stop(1), messageStop, metadata];
    const r = await guarded(events, [{ type: "finish" }]);
    expect(r.error).toBeUndefined();
    expect(r.passed).toEqual(events.map((_, i) => i));
  });

  it("fails at a second messageStart, at a block started where a block is open, at a block continued where one stopped, at content after messageStop, at a second messageStop, and at a finish without messageStop", async () => {
    const cases: [unknown[], Part[], RegExp, number[]][] = [
      // A cut in the first response's text, the proxy's response with its own start: its text continues block 0.
      [[start, text(0, "Pay"), start, text(0, "Paying now.")], [], /^messageStart second_response/, [0, 1]],
      // The spliced tool use starts at the index of the first response's text, still open (cut mid-text):
      // a text block opens at its first delta, with no contentBlockStart.
      [[start, text(0, "Pay"), toolStart(0), toolInput(0)], [], /^contentBlockStart at contentBlockIndex 0, which already holds a block/, [0, 1]],
      // Headless, led by a sentence: its text continues at the first response's stopped call.
      [[start, toolStart(0), toolInput(0), stop(0), text(0, "Paying now.")], [], /^contentBlockDelta at contentBlockIndex 0, whose block already stopped/, [0, 1, 2, 3]],
      // After the first response's messageStop, at an index the first never used.
      [[start, toolStart(0), toolInput(0), stop(0), messageStop, toolStart(1), toolInput(1)], [], /^contentBlockStart after messageStop/, [0, 1, 2, 3, 4]],
      [[start, text(0, "Done."), stop(0), messageStop, messageStop], [], /^messageStop: a second messageStop/, [0, 1, 2, 3]],
      [[start, toolStart(0), toolInput(0), stop(0)], [{ type: "finish" }], /^the Converse body ended without messageStop/, [0, 1, 2, 3]],
    ];
    for (const [events, extra, sign, passed] of cases) {
      const r = await guarded(events, extra);
      expect(StreamIncompleteError.isInstance(r.error), JSON.stringify(events)).toBe(true);
      expect((r.error as StreamIncompleteError).streamError, JSON.stringify(events)).toMatch(sign);
      expect((r.error as StreamIncompleteError).finishEvent).toBe("messageStop");
      expect(r.passed, JSON.stringify(events)).toEqual(passed);
      expect(r.seen.some((p) => p.type === "finish")).toBe(false);
    }
  });

  it("an exception frame the provider told as its error part is that one error: the guard adds none at the finish", async () => {
    const providerError = new Error("throttled");
    const r = await guarded([start, text(0, "Pay"), { throttlingException: { message: "Too many requests" } }], [{ type: "error", error: providerError }, { type: "finish" }], false, true);
    expect(r.seen.filter((p) => p.type === "error").map((p) => p["error"])).toEqual([providerError]);
    expect(r.seen.at(-1)?.type).toBe("finish");
  });
});

describe("spliceGuard's Gemini reading of candidate 0 and of every finishReason (AISDK-16)", () => {
  // Candidate 0 as the API may send it: proto3's JSON leaves a default index (0) out.
  const g = (responseId: string, parts: unknown[], finishReason?: string) => ({
    candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}) }],
    responseId,
    modelVersion: "gemini-2.5-flash",
  });
  const call = { functionCall: { name: "pay", args: { to: "acme" } } };

  it("a body whose candidate omits its index is read as candidate 0's: it finishes, and content after its finishReason fails", async () => {
    const whole = await guarded([g("r1", [call]), g("r1", [{ text: "" }], "STOP")], [{ type: "finish" }]);
    expect(whole.error).toBeUndefined();
    const after = await guarded([g("r1", [call], "STOP"), g("r1", [call])]);
    expect((after.error as StreamIncompleteError | undefined)?.streamError).toMatch(/^a chunk after finishReason/);
    expect(after.passed).toEqual([0]);
  });

  it("any finishReason finishes the response, not STOP alone: a MAX_TOKENS body passes, and content after a SAFETY finish fails", async () => {
    const limit = await guarded([g("r1", [{ text: "a" }]), g("r1", [{ text: "" }], "MAX_TOKENS")], [{ type: "finish" }]);
    expect(limit.error).toBeUndefined();
    expect(limit.passed).toEqual([0, 1]);
    const after = await guarded([g("r1", [{ text: "a" }], "SAFETY"), g("r1", [call])]);
    expect((after.error as StreamIncompleteError | undefined)?.streamError).toMatch(/^a chunk after finishReason/);
    expect(after.passed).toEqual([0]);
  });
});

describe("spliceGuard's reading of Vertex AI's streamed call arguments, part by part (AISDK-16)", () => {
  // Chunks as @ai-sdk/google-vertex passes them raw behind a gateway that stripped responseId: the order of a streamed call's parts is all there is.
  const v = (parts: unknown[], finishReason?: string) => ({ candidates: [{ content: { role: "model", parts }, ...(finishReason ? { finishReason } : {}), index: 0 }], modelVersion: "gemini-3-pro-preview" });
  const begin = (name: string) => ({ functionCall: { name, willContinue: true } });
  /** A string member's first piece: it goes on (`willContinue` inside partialArgs), and the call goes on (`willContinue` on the call) unless `callLevel` is false. */
  const piece = (path: string, value: string, callLevel = true) => ({ functionCall: { partialArgs: [{ jsonPath: path, stringValue: value, willContinue: true }], ...(callLevel ? { willContinue: true } : {}) } });
  const last = (path: string, value: string) => ({ functionCall: { partialArgs: [{ jsonPath: path, stringValue: value }], willContinue: true } });
  const end = { functionCall: {} };
  const thought = { text: "The user wants acme paid.", thought: true };
  const finish = v([{ text: "" }], "STOP");

  it("a whole body passes: thoughts, a call streamed with a string's first piece marked only inside partialArgs, its terminal part, a call ended by its last partialArgs and a stray terminal part after it", async () => {
    for (const events of [
      [v([thought]), v([begin("pay")]), v([piece("$.to", "ac", false)]), v([last("$.to", "me")]), v([end]), finish],
      [v([begin("pay")]), v([{ functionCall: { partialArgs: [{ jsonPath: "$.to", stringValue: "acme" }] } }]), v([end]), v([{ text: "Paid." }]), finish],
    ]) {
      const r = await guarded(events, [{ type: "finish" }]);
      expect(r.error, JSON.stringify(events)).toBeUndefined();
      expect(r.passed).toEqual(events.map((_, i) => i));
    }
  });

  it("fails at a thought, a text or a call's name while a call streams, at partialArgs with none streaming, and at a finishReason while a call streams", async () => {
    const cases: [unknown[], RegExp, number[]][] = [
      // The spliced response's thoughts come first: inside the cut call's arguments.
      [[v([begin("pay")]), v([piece("$.to", "ac")]), v([thought])], /^a thought part while the arguments of pay were streaming/, [0, 1]],
      [[v([begin("pay")]), v([piece("$.to", "ac")]), v([{ text: "Paying acme." }])], /^a text part while the arguments of pay were streaming/, [0, 1]],
      // A string's piece that goes on only inside partialArgs still holds the call open.
      [[v([begin("pay")]), v([piece("$.to", "ac", false)]), v([{ text: "Paying acme." }])], /^a text part while the arguments of pay were streaming/, [0, 1]],
      [[v([begin("pay")]), v([piece("$.to", "ac")]), v([begin("pay")])], /^functionCall pay began while the arguments of pay were streaming/, [0, 1]],
      // Headless, spliced after the first response's call ended: it begins inside its own call's arguments.
      [[v([begin("pay")]), v([last("$.to", "acme")]), v([end]), v([piece("$.to", "ac")])], /^a functionCall's partialArgs with no call streaming/, [0, 1, 2]],
      [[v([begin("pay")]), v([piece("$.to", "ac")]), finish], /^finishReason while the arguments of pay were streaming/, [0, 1]],
    ];
    for (const [events, sign, passed] of cases) {
      const r = await guarded(events);
      expect(StreamIncompleteError.isInstance(r.error), JSON.stringify(events)).toBe(true);
      expect((r.error as StreamIncompleteError).streamError, JSON.stringify(events)).toMatch(sign);
      expect(r.passed, JSON.stringify(events)).toEqual(passed);
    }
  });
});

describe("spliceGuard's Converse delta kinds (AISDK-16)", () => {
  const start = { messageStart: { role: "assistant" } };
  const delta = (i: number, d: Record<string, unknown>) => ({ contentBlockDelta: { contentBlockIndex: i, delta: d } });
  const stop = (i: number) => ({ contentBlockStop: { contentBlockIndex: i } });
  const toolInput = { toolUse: { input: '{"to":"acme"}' } };
  const reasoning = { reasoningContent: { text: "The user wants acme paid." } };
  const citation = { citation: { title: "Invoice 7", location: {} } };

  it("a block keeps the kind its first delta gave: a tool use's input or reasoning into an open text block, a tool use's input into one a citation opened, fail", async () => {
    const cases: [unknown[], RegExp][] = [
      [[start, delta(0, { text: "Pay" }), delta(0, toolInput)], /^contentBlockDelta of toolUse at contentBlockIndex 0, whose block is a text/],
      [[start, delta(0, { text: "Pay" }), delta(0, reasoning)], /^contentBlockDelta of reasoningContent at contentBlockIndex 0, whose block is a text/],
      [[start, delta(0, citation), delta(0, toolInput)], /^contentBlockDelta of toolUse at contentBlockIndex 0, whose block is a text/],
    ];
    for (const [events, sign] of cases) {
      const r = await guarded(events);
      expect(StreamIncompleteError.isInstance(r.error), JSON.stringify(events)).toBe(true);
      expect((r.error as StreamIncompleteError).streamError, JSON.stringify(events)).toMatch(sign);
      expect(r.passed).toEqual([0, 1]);
    }
  });

  it("a block started with another kind than a tool use (an image) takes its deltas: a whole body passes", async () => {
    const events = [start, { contentBlockStart: { contentBlockIndex: 0, start: { image: { format: "png" } } } }, delta(0, { text: "x" }), stop(0), { messageStop: { stopReason: "end_turn" } }];
    const r = await guarded(events, [{ type: "finish" }]);
    expect(r.error).toBeUndefined();
    expect(r.passed).toEqual(events.map((_, i) => i));
  });
});
