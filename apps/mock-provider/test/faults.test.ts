import Anthropic, { AnthropicError, APIConnectionError, APIError, InternalServerError } from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { scriptFromPlans, say, toolUse, turn, type Fault } from "../src/index.js";
import { body, invoice, payment, rejection, setup as setupProvider } from "./helpers.js";

const plans = scriptFromPlans({
  "pay acme": turn(say("Paying acme now."), toolUse("send_payment", payment)),
  "invoice then pay": turn(toolUse("create_invoice", invoice), toolUse("send_payment", payment)),
});
const setup: typeof setupProvider = (options = {}, clientOptions = {}) => setupProvider({ script: plans, ...options }, clientOptions);

/** Consume a raw create({stream:true}) stream; returns the event types seen before it ended or threw. */
async function drainRaw(client: Anthropic, fault?: Fault) {
  const seen: string[] = [];
  const options = fault ? { headers: { "x-mock-fault": JSON.stringify(fault) } } : {};
  const stream = await client.messages.create({ ...body("pay acme"), stream: true }, options);
  try {
    for await (const event of stream) seen.push(event.type);
  } catch (error) {
    return { seen, error: error as any };
  }
  return { seen, error: undefined };
}

describe("hard reset (socket destroyed)", () => {
  it("messages.stream() rejects with AnthropicError('terminated') caused by undici's TypeError", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
    const error = await rejection(client.messages.stream(body("pay acme")).finalMessage());
    expect(error).toBeInstanceOf(AnthropicError);
    expect(error).not.toBeInstanceOf(APIError);
    expect(error.message).toBe("terminated");
    expect(error.cause).toBeInstanceOf(TypeError);
    expect(error.cause.message).toBe("terminated");
    const record = provider.requests[0]!;
    expect(record).toMatchObject({ outcome: "reset", faultFired: true, faultSource: "queue" });
    // Everything up to and including the tool's content_block_stop went out; nothing after.
    const wire = record.events.map((e) => e.type);
    expect(wire.at(-1)).toBe("content_block_stop");
    expect(wire).not.toContain("message_delta");
  });

  it("create({stream:true}) iteration throws a bare TypeError('terminated')", async () => {
    const { provider, client } = await setup();
    const { seen, error } = await drainRaw(client, { kind: "reset", at: { beforeMessageStop: true } });
    expect(error).toBeInstanceOf(TypeError);
    expect(error).not.toBeInstanceOf(AnthropicError);
    expect(error.message).toBe("terminated");
    expect(seen).not.toContain("message_stop");
    expect(provider.requests[0]!.outcome).toBe("reset");
    expect(provider.requests[0]!.faultSource).toBe("header");
  });

  it("a TCP RST (tcp_reset) surfaces the same way", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "tcp_reset", at: { afterBlockStop: 0 } });
    const error = await rejection(client.messages.stream(body("pay acme")).finalMessage());
    expect(error).toBeInstanceOf(AnthropicError);
    expect(error.message).toBe("terminated");
    expect(provider.requests[0]!.outcome).toBe("tcp_reset");
  });

  it("a cut while arguments stream leaves the call announced but never completed", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "reset", at: { toolUse: 0, afterFragment: 2 } });
    const stream = client.messages.stream(body("pay acme"));
    const completed: string[] = [];
    const jsonSeen: string[] = [];
    stream.on("contentBlock", (b) => completed.push(b.type));
    stream.on("inputJson", (partial) => jsonSeen.push(partial));
    const error = await rejection(stream.finalMessage());
    expect(error.message).toBe("terminated");
    const record = provider.requests[0]!;
    const toolEvents = record.events.filter((e) => (e.data as { index?: number }).index === 1);
    expect(toolEvents.map((e) => e.type)).toEqual(["content_block_start", "content_block_delta", "content_block_delta"]);
    expect(toolEvents.slice(1).map((e) => (e.data as any).delta.partial_json)).toEqual(record.toolUses[0]!.fragments.slice(0, 2));
    // The text block completed; the tool_use block never did.
    expect(completed).not.toContain("tool_use");
  });

  it("cutting at event N sends exactly N events", async () => {
    const { provider, client } = await setup();
    const { seen, error } = await drainRaw(client, { kind: "reset", at: { event: 4 } });
    expect(error.message).toBe("terminated");
    expect(provider.requests[0]!.events).toHaveLength(4);
    expect(seen.length).toBeLessThanOrEqual(4);
  });

  it("afterFragment beyond the block's fragments sends all of them but never its content_block_stop", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "reset", at: { toolUse: 1, afterFragment: 10_000 } });
    await rejection(client.messages.stream(body("invoice then pay")).finalMessage());
    const record = provider.requests[0]!;
    const block1 = record.events.filter((e) => (e.data as { index?: number }).index === 1).map((e) => e.type);
    expect(block1[0]).toBe("content_block_start");
    expect(block1).not.toContain("content_block_stop");
    expect(block1.length - 1).toBe(record.toolUses[1]!.fragments.length);
  });
});

describe("clean close without message_stop (res.end())", () => {
  it("the raw iterator simply ends after message_delta", async () => {
    const { provider, client } = await setup();
    const { seen, error } = await drainRaw(client, { kind: "clean_close", at: { beforeMessageStop: true } });
    expect(error).toBeUndefined();
    expect(seen.at(-1)).toBe("message_delta");
    expect(seen).not.toContain("message_stop");
    expect(provider.requests[0]!.outcome).toBe("clean_close");
  });

  it("messages.stream(): done() resolves, but there is no final message", async () => {
    const { client, provider } = await setup();
    provider.faults.enqueue({ kind: "clean_close", at: { afterToolUseStop: 0 } });
    const stream = client.messages.stream(body("pay acme"));
    await stream.done();
    const error = await rejection(stream.finalMessage());
    expect(error).toBeInstanceOf(AnthropicError);
    expect(error.message).toBe("stream ended without producing a Message with role=assistant");
  });
});

describe("event: error mid-stream", () => {
  it("becomes an APIError without status carrying the overloaded_error body", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "error_event", at: { toolUse: 0, afterFragment: 1 } });
    const error = await rejection(client.messages.stream(body("pay acme")).finalMessage());
    expect(error).toBeInstanceOf(APIError);
    expect(error.status).toBeUndefined();
    expect(error.error).toEqual({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
    const record = provider.requests[0]!;
    expect(record.outcome).toBe("error_event");
    expect(record.events.at(-1)).toMatchObject({ type: "error" });
  });

  it("carries a chosen error type on the raw iterator too", async () => {
    const { client } = await setup();
    const { error } = await drainRaw(client, {
      kind: "error_event",
      at: { afterBlockStop: 0 },
      error: { type: "api_error", message: "Internal server error" },
    });
    expect(error).toBeInstanceOf(APIError);
    expect(error.error.error).toEqual({ type: "api_error", message: "Internal server error" });
  });
});

describe("HTTP status before the stream starts", () => {
  it("a 529 is an OverloadedError when the SDK may not retry", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "status", status: 529 });
    const error = await rejection(client.messages.stream(body("pay acme")).finalMessage());
    expect(error).toBeInstanceOf(APIError);
    expect(error.constructor.name).toBe("OverloadedError");
    expect(error.status).toBe(529);
    expect(error.error.error).toEqual({ type: "overloaded_error", message: "Overloaded" });
    expect(provider.requests[0]).toMatchObject({ outcome: "status", status: 529, events: [] });
  });

  it("the SDK retries a 529 by itself (maxRetries), and the retry is a new attempt of the same body", async () => {
    const { provider, client } = await setup({}, { maxRetries: 2 });
    provider.faults.enqueue({ kind: "status", status: 529, retryAfterMs: 1 }, { kind: "status", status: 503, retryAfterMs: 1 });
    const message = await client.messages.stream(body("pay acme")).finalMessage();
    expect((message.content[1] as any).input).toEqual(payment);
    expect(provider.requests.map((r) => [r.attempt, r.outcome, r.status, r.headers["x-stainless-retry-count"]])).toEqual([
      [1, "status", 529, "0"],
      [2, "status", 503, "1"],
      [3, "complete", 200, "2"],
    ]);
  });

  it("x-should-retry: false stops the SDK's retry; a 500 is an InternalServerError", async () => {
    const { provider, client } = await setup({}, { maxRetries: 2 });
    provider.faults.enqueue({ kind: "status", status: 500, shouldRetry: false });
    const error = await rejection(client.messages.create(body("pay acme")));
    expect(error).toBeInstanceOf(InternalServerError);
    expect(provider.requests).toHaveLength(1);
  });
});

describe("cut after a delay", () => {
  it("fires mid-stream, whatever the writer was doing", async () => {
    const { provider, client } = await setup({ timing: { betweenEventsMs: 60 } });
    provider.faults.enqueue({ kind: "reset", at: { afterMs: 100 } });
    const error = await rejection(client.messages.stream(body("invoice then pay")).finalMessage());
    expect(error.message).toBe("terminated");
    const record = provider.requests[0]!;
    expect(record.outcome).toBe("reset");
    expect(record.events.length).toBeGreaterThan(0);
    expect(record.events.map((e) => e.type)).not.toContain("message_stop");
  });
});

describe("hold (cut on signal)", () => {
  it("pauses after the tool's content_block_stop until the test cuts: the chapter's window", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const stream = client.messages.stream(body("pay acme"));
    const dispatched: unknown[] = [];
    // The handler dispatches at the per-call completion event; the test cuts once that happened.
    const seenCall = new Promise<void>((resolve) =>
      stream.on("contentBlock", (block) => {
        if (block.type === "tool_use") {
          dispatched.push(block.input);
          resolve();
        }
      }),
    );
    const held = await provider.waitForHold();
    expect(held).toEqual({ requestNumber: 1, beforeEvent: provider.requests[0]!.events.length, nextEventType: "message_delta" });
    await seenCall;
    provider.cutNow(held.requestNumber, "reset");
    const error = await rejection(stream.finalMessage());
    expect(error.message).toBe("terminated");
    expect(dispatched).toEqual([payment]);
    expect(provider.held).toEqual([]);
  });

  it("release() lets the held stream finish normally", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "hold", at: { beforeMessageStop: true } });
    const stream = client.messages.stream(body("pay acme"));
    await provider.waitForHold(1);
    provider.release(1);
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    expect(provider.requests[0]!.outcome).toBe("complete");
  });

  it("cutNow() can also close cleanly or send an error event; a missing hold is a typed error", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "hold", at: { beforeMessageStop: true } });
    const pending = drainRaw(client);
    await provider.waitForHold();
    provider.cutNow(undefined, "clean_close");
    const { seen, error } = await pending;
    expect(error).toBeUndefined();
    expect(seen).not.toContain("message_stop");
    expect(() => provider.release()).toThrowError(expect.objectContaining({ code: "no_held_stream" }));
  });
});

describe("fault plans and mistakes", () => {
  it("a plan sees the per-body attempt: fail the first attempt, let the retry through", async () => {
    const { provider, client } = await setup();
    provider.setFaultPlan((_req, info) => (info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    await rejection(client.messages.stream(body("pay acme")).finalMessage());
    const retried = await client.messages.stream(body("pay acme")).finalMessage();
    expect(retried.stop_reason).toBe("tool_use");
    await rejection(client.messages.stream(body("invoice then pay")).finalMessage());
    expect(provider.requests.map((r) => [r.requestNumber, r.attempt, r.outcome, r.faultSource ?? null])).toEqual([
      [1, 1, "reset", "plan"],
      [2, 2, "complete", null],
      [3, 1, "reset", "plan"],
    ]);
  });

  it("a fault position the turn never reaches fails the request loudly instead of passing silently", async () => {
    const { provider, client } = await setup({}, { maxRetries: 2 });
    provider.faults.enqueue({ kind: "reset", at: { toolUse: 3, afterFragment: 0 } });
    const error = await rejection(client.messages.stream(body("pay acme")).finalMessage());
    expect(error).toBeInstanceOf(InternalServerError);
    expect(error.message).toContain("fault_position_unreachable");
    expect(provider.requests).toHaveLength(1);
    expect(provider.requests[0]!.outcome).toBe("script_error");
  });

  it("an invalid fault is a typed error in-process and a 400 over the header", async () => {
    const { provider, client } = await setup();
    expect(() => provider.faults.enqueue({ kind: "reset", at: { nowhere: 1 } } as never)).toThrowError(
      expect.objectContaining({ code: "invalid_fault" }),
    );
    const error = await rejection(client.messages.create(body("pay acme"), { headers: { "x-mock-fault": "{nope" } }));
    expect(error.status).toBe(400);
    expect(error.message).toContain("invalid_fault");
  });

  it("a non-streaming request can be reset before its response: the SDK sees a connection error", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "reset", at: { event: 0 } });
    const error = await rejection(client.messages.create(body("pay acme")));
    expect(error).toBeInstanceOf(APIConnectionError);
    expect(provider.requests[0]!.outcome).toBe("reset");
  });
});

describe("replays and the client side", () => {
  it("two identical requests in flight at once (a double-clicked send) are attempts 1 and 2 with their own ids", async () => {
    const { provider, client } = await setup();
    provider.setFaultPlan(() => ({ kind: "hold", at: { beforeMessageStop: true } }));
    const first = client.messages.stream(body("pay acme")).finalMessage();
    const second = client.messages.stream(body("pay acme")).finalMessage();
    await provider.waitForHold(1);
    await provider.waitForHold(2);
    expect(provider.held.map((h) => h.requestNumber).sort()).toEqual([1, 2]);
    provider.release(2);
    provider.release(1);
    const [a, b] = await Promise.all([first, second]);
    expect((a.content[1] as any).input).toEqual((b.content[1] as any).input);
    expect((a.content[1] as any).id).not.toBe((b.content[1] as any).id);
    expect(provider.requests.map((r) => r.attempt).sort()).toEqual([1, 2]);
  });

  it("a header fault rides along on the SDK's own retries: every attempt gets it", async () => {
    const { provider, client } = await setup({}, { maxRetries: 2 });
    const error = await rejection(
      client.messages.create(body("pay acme"), { headers: { "x-mock-fault": JSON.stringify({ kind: "status", status: 529, retryAfterMs: 1 }) } }),
    );
    expect(error.status).toBe(529);
    expect(provider.requests.map((r) => [r.attempt, r.faultSource])).toEqual([
      [1, "header"],
      [2, "header"],
      [3, "header"],
    ]);
  });

  it("a client that aborts mid-stream is logged as client_closed and the writer stops", async () => {
    const { provider, client } = await setup();
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const stream = client.messages.stream(body("pay acme"));
    const aborted = new Promise<void>((resolve) => stream.on("abort", () => resolve()));
    await provider.waitForHold(1);
    stream.abort();
    await aborted;
    const record = await provider.waitForEnd(1);
    expect(record.outcome).toBe("client_closed");
    expect(record.events.map((e) => e.type)).not.toContain("message_delta");
    expect(provider.held).toEqual([]);
  });
});

describe("splice (a proxy that sent the request again splices the new response into the body)", () => {
  const pay = scriptFromPlans({ "pay acme": turn(toolUse("send_payment", payment)) });
  async function events(fault: Fault) {
    const { provider, client } = await setup({ script: pay });
    provider.faults.enqueue(fault);
    const stream = await client.messages.create({ ...body("pay acme"), stream: true });
    const seen: any[] = [];
    for await (const event of stream) seen.push(event);
    return { seen, record: provider.requests[0]! };
  }

  it("with its message_start: a second message begins after the first one's call (STREAM-8's shape)", async () => {
    const { seen, record } = await events({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart: true });
    const starts = seen.filter((e) => e.type === "message_start");
    expect(starts).toHaveLength(2);
    expect(starts[1].message.id).not.toBe(starts[0].message.id);
    const blocks = seen.filter((e) => e.type === "content_block_start");
    expect(blocks.map((e) => [e.index, e.content_block.type])).toEqual([
      [0, "tool_use"],
      [0, "tool_use"],
    ]);
    expect(blocks[1].content_block.id).not.toBe(blocks[0].content_block.id);
    expect(seen.filter((e) => e.type === "message_stop")).toHaveLength(1);
    expect(seen.at(-1).type).toBe("message_stop");
    expect(record).toMatchObject({ outcome: "complete", faultFired: true });
    // The request log keeps the spliced response's calls apart: another response asked for them.
    expect(record.toolUses).toHaveLength(1);
    expect(record.splicedToolUses).toHaveLength(1);
  });

  it("without it, led by text: a text block lands on the index of the call that completed (STREAM-17's shape)", async () => {
    const { seen } = await events({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart: false, lead: "Paying acme now." });
    expect(seen.filter((e) => e.type === "message_start")).toHaveLength(1);
    const types = seen.map((e) => e.type);
    const firstStop = types.indexOf("content_block_stop");
    expect(seen[firstStop + 1]).toMatchObject({ type: "content_block_start", index: 0, content_block: { type: "text" } });
    expect(seen.filter((e) => e.type === "content_block_start").map((e) => [e.index, e.content_block.type])).toEqual([
      [0, "tool_use"],
      [0, "text"],
      [1, "tool_use"],
    ]);
    expect(seen.filter((e) => e.type === "message_stop")).toHaveLength(1);
  });

  it("without it and without a lead, thinking on: each block lands on a held block of its type, named otherwise (STREAM-10's shape)", async () => {
    const { provider, client } = await setup({ script: pay });
    provider.faults.enqueue({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart: false });
    const stream = await client.messages.create({ ...body("pay acme"), max_tokens: 2048, thinking: { type: "enabled", budget_tokens: 1024 }, stream: true });
    const seen: any[] = [];
    for await (const event of stream) seen.push(event);
    expect(seen.filter((e) => e.type === "message_start")).toHaveLength(1);
    const blocks = seen.filter((e) => e.type === "content_block_start");
    // The spliced response's thinking block on the thinking block, its call on the call that ran.
    expect(blocks.map((e) => [e.index, e.content_block.type])).toEqual([
      [0, "thinking"],
      [1, "tool_use"],
      [0, "thinking"],
      [1, "tool_use"],
    ]);
    expect(blocks[3].content_block.id).not.toBe(blocks[1].content_block.id);
    const signatures = seen.filter((e) => e.type === "content_block_delta" && e.delta.type === "signature_delta").map((e) => e.delta.signature);
    expect(signatures).toHaveLength(2);
    expect(signatures[1]).not.toBe(signatures[0]);
    expect(seen.filter((e) => e.type === "message_stop")).toHaveLength(1);
    expect(provider.requests[0]).toMatchObject({ outcome: "complete", faultFired: true, fault: { kind: "splice", messageStart: false } });
    expect(provider.requests[0]!.fault).not.toHaveProperty("lead");
    expect(provider.requests[0]!.splicedToolUses).toHaveLength(1);
  });

  it("is refused at a position that is a time, and on a request that does not stream (fault_not_applicable)", async () => {
    const { provider, client } = await setup({ script: pay });
    provider.faults.enqueue({ kind: "splice", at: { afterMs: 5 }, messageStart: true });
    provider.faults.enqueue({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart: true });
    const timed = await rejection(client.messages.create({ ...body("pay acme"), stream: true }));
    const whole = await rejection(client.messages.create(body("pay acme")));
    for (const error of [timed, whole]) {
      expect(error).toBeInstanceOf(APIError);
      expect(String(error.message)).toContain("fault_not_applicable");
    }
  });
});

describe("repeat_call (a relay that renumbers what it re-sends delivers a completed call again)", () => {
  const two = scriptFromPlans({ "pay both": turn(toolUse("send_payment", payment), toolUse("send_payment", { ...payment, to: "bob" })) });

  it("re-sends the call's start, deltas and stop unchanged but for the index, at the next free index, then the response finishes (STREAM-10's shape)", async () => {
    const { provider, client } = await setup({ script: two });
    provider.faults.enqueue({ kind: "repeat_call", call: 0 });
    const stream = await client.messages.create({ ...body("pay both"), max_tokens: 2048, thinking: { type: "enabled", budget_tokens: 1024 }, stream: true });
    const seen: any[] = [];
    for await (const event of stream) seen.push(event);
    const blocks = seen.filter((e) => e.type === "content_block_start");
    expect(blocks.map((e) => [e.index, e.content_block.type])).toEqual([
      [0, "thinking"],
      [1, "tool_use"],
      [2, "tool_use"],
      [3, "tool_use"],
    ]);
    // The first call again, whole: its id, name and every input fragment, only its index new.
    expect(blocks[3].content_block).toEqual(blocks[1].content_block);
    const at = (index: number) => seen.filter((e) => (e.type === "content_block_delta" || e.type === "content_block_stop") && e.index === index).map(({ index: _, ...rest }) => rest);
    expect(at(3)).toEqual(at(1));
    expect(at(3).at(-1)).toEqual({ type: "content_block_stop" });
    const types = seen.map((e) => e.type);
    expect(types.slice(-2)).toEqual(["message_delta", "message_stop"]);
    expect(types.lastIndexOf("content_block_stop")).toBeLessThan(types.indexOf("message_delta"));
    const record = provider.requests[0]!;
    expect(record).toMatchObject({ outcome: "complete", faultFired: true, fault: { kind: "repeat_call", call: 0 } });
    // The log keeps the response's calls as rendered: the repeat is one of them delivered again.
    expect(record.toolUses.map((c) => c.id)).toEqual([blocks[1].content_block.id, blocks[2].content_block.id]);
  });

  it("is refused for a call the turn does not make, and on a request that does not stream (fault_not_applicable)", async () => {
    const { provider, client } = await setup({ script: two });
    provider.faults.enqueue({ kind: "repeat_call", call: 2 });
    provider.faults.enqueue({ kind: "repeat_call", call: 0 });
    const missing = await rejection(client.messages.create({ ...body("pay both"), stream: true }));
    const whole = await rejection(client.messages.create(body("pay both")));
    for (const error of [missing, whole]) {
      expect(error).toBeInstanceOf(APIError);
      expect(String(error.message)).toContain("fault_not_applicable");
    }
  });
});
