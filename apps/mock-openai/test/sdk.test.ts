import { execFile, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { call, parseFault, reasoning, respond, say, scriptFromPlans, startMockOpenAI, text, type CutKind, type Fault, type MockOpenAI } from "../src/index.js";

const PAY = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };
const script = scriptFromPlans({
  pay: respond(text("Paying."), call("send_payment", PAY, { reword: ["memo"] })),
  "pay twice": respond(call("send_payment", PAY), call("send_payment", { ...PAY, reference: "INV-1043" })),
  hello: say("Hi there, how can I help?"),
  "pay, thinking": respond(reasoning("The user wants invoice 1042 paid."), call("send_payment", PAY)),
});

let mock: MockOpenAI;
let client: OpenAI;
beforeEach(async () => {
  mock = await startMockOpenAI({ script, seed: "test" });
  client = new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });
});
afterEach(async () => {
  await mock.close();
});

/** Drain a raw stream; returns the events seen and what it raised (if anything). */
async function drain(input: string, fault?: Fault) {
  if (fault) mock.queueFault(fault);
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  try {
    const stream = await client.responses.create({ model: "gpt-test", input, stream: true });
    for await (const event of stream) events.push(event);
    return { events, error: undefined as unknown };
  } catch (error) {
    return { events, error };
  }
}

describe("the Responses API stream, read by the real openai SDK", () => {
  it("a reasoning item streams its summary before the call, with a fresh id and encrypted content per response", async () => {
    const items: { id: string; encrypted_content?: string | null; summary: unknown }[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const { events, error } = await drain("pay, thinking");
      expect(error).toBeUndefined();
      const types = events.map((e) => e.type);
      expect(types.slice(2, 6)).toEqual(["response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta", expect.any(String)]);
      const deltas = events.filter((e) => e.type === "response.reasoning_summary_text.delta").map((e) => (e as { delta: string }).delta);
      expect(deltas.join("")).toBe("The user wants invoice 1042 paid.");
      const done = events.find((e) => e.type === "response.output_item.done" && e.item.type === "reasoning") as OpenAI.Responses.ResponseOutputItemDoneEvent;
      items.push(done.item as OpenAI.Responses.ResponseReasoningItem);
      // The call comes after the reasoning, at output index 1.
      expect(events.find((e) => e.type === "response.output_item.done" && e.item.type === "function_call")).toMatchObject({ output_index: 1 });
    }
    expect(items[0]!.summary).toEqual([{ type: "summary_text", text: "The user wants invoice 1042 paid." }]);
    expect(items[1]!.id).not.toBe(items[0]!.id);
    expect(items[1]!.encrypted_content).not.toBe(items[0]!.encrypted_content);
  });

  it("a complete turn: every event in order, sequence numbers, a function call done long before response.completed", async () => {
    const { events, error } = await drain("pay");
    expect(error).toBeUndefined();
    const types = events.map((e) => e.type);
    expect(types[0]).toBe("response.created");
    expect(types.at(-1)).toBe("response.completed");
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const done = events.find((e) => e.type === "response.output_item.done" && e.item.type === "function_call");
    expect(done).toMatchObject({ item: { type: "function_call", status: "completed", name: "send_payment" } });
    const item = (done as OpenAI.Responses.ResponseOutputItemDoneEvent).item as OpenAI.Responses.ResponseFunctionToolCall;
    expect(JSON.parse(item.arguments)).toEqual(PAY);
    const deltas = events.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => (e as { delta: string }).delta);
    expect(deltas.join("")).toBe(item.arguments);
    // What the wire carried: an event: line per event, equal to the data's type.
    expect(mock.requests[0]!.events.map((e) => e.type)).toEqual(types);
  });

  it("responses.stream() assembles the same response the non-streaming call returns (text and arguments)", async () => {
    const final = await client.responses.stream({ model: "gpt-test", input: "pay" }).finalResponse();
    expect(final.status).toBe("completed");
    expect(final.output_text).toBe("Paying.");
    const plain = await client.responses.create({ model: "gpt-test", input: "hello" });
    expect(plain.output_text).toBe("Hi there, how can I help?");
    const paid = await client.responses.create({ model: "gpt-test", input: "pay" });
    const fc = paid.output.find((o) => o.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall;
    expect(JSON.parse(fc.arguments).payee).toBe("acme");
  });

  it("two responses to the same request: fresh call_ids and item ids, the same values, a re-worded memo on the retry", async () => {
    await drain("pay");
    await drain("pay");
    const [a, b] = mock.requests.map((r) => r.calls[0]!);
    expect(a!.callId).not.toBe(b!.callId);
    expect(a!.id).not.toBe(b!.id);
    expect(a!.callId).toMatch(/^call_/);
    expect(a!.id).toMatch(/^fc_/);
    const { memo: memoA, ...restA } = JSON.parse(a!.json);
    const { memo: memoB, ...restB } = JSON.parse(b!.json);
    expect(restA).toEqual(restB);
    expect(memoA).toBe("Invoice 1042");
    expect(memoB).not.toBe(memoA);
    expect(mock.requests.map((r) => r.attempt)).toEqual([1, 2]);
  });

  it("serialisation varies across seeds (key order, whitespace, fragment boundaries) while values do not", async () => {
    const renders = new Set<string>();
    for (let seed = 0; seed < 12; seed++) {
      const other = await startMockOpenAI({ script, seed: String(seed) });
      const c = new OpenAI({ baseURL: other.baseURL, apiKey: "k", maxRetries: 0 });
      const stream = await c.responses.create({ model: "gpt-test", input: "pay twice", stream: true });
      for await (const _ of stream) void _;
      const calls = other.requests[0]!.calls;
      expect(calls.map((x) => JSON.parse(x.json).reference)).toEqual(["INV-1042", "INV-1043"]);
      renders.add(calls.map((x) => x.fragments.join("|")).join("#"));
      await other.close();
    }
    expect(renders.size).toBeGreaterThan(6);
  });
});

describe("faults, and what the SDK raises for each (facts written in the README)", () => {
  it("reset mid-stream: create({stream:true}) iteration throws a bare TypeError('terminated'); stream() raises OpenAIError('terminated')", async () => {
    const { events, error } = await drain("pay", { kind: "reset", at: { beforeCompleted: true } });
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toBe("terminated");
    expect(events.at(-1)!.type).toBe("response.output_item.done");
    mock.queueFault({ kind: "reset", at: { beforeCompleted: true } });
    const failure = await client.responses.stream({ model: "gpt-test", input: "pay" }).finalResponse().catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(OpenAI.OpenAIError);
    expect((failure as Error).message).toBe("terminated");
  });

  it("clean close before response.completed: the raw iterator just ends, and stream().finalResponse() RESOLVES with status in_progress", async () => {
    const { events, error } = await drain("pay", { kind: "clean_close", at: { beforeCompleted: true } });
    expect(error).toBeUndefined();
    expect(events.some((e) => e.type === "response.completed")).toBe(false);
    mock.queueFault({ kind: "clean_close", at: { beforeCompleted: true } });
    const final = await client.responses.stream({ model: "gpt-test", input: "pay" }).finalResponse();
    // The SDK does not notice: only the absence of response.completed tells the turn is incomplete.
    expect(final.status).toBe("in_progress");
    expect(final.output.some((o) => o.type === "function_call" && o.status === "completed")).toBe(true);
  });

  it("an error event is yielded as an event (no throw) by the raw iterator; stream() rejects with the event object itself", async () => {
    const { events, error } = await drain("pay", { kind: "error_event", at: { afterCallDone: 0 }, code: "server_error" });
    expect(error).toBeUndefined();
    expect(events.at(-1)).toMatchObject({ type: "error", code: "server_error" });
    mock.queueFault({ kind: "error_event", at: { afterCallDone: 0 } });
    const failure = await client.responses.stream({ model: "gpt-test", input: "pay" }).finalResponse().catch((e: unknown) => e);
    expect(failure).not.toBeInstanceOf(Error);
    expect(failure).toMatchObject({ type: "error" });
  });

  it("response.incomplete (the output limit) is yielded as an event, with the reason and the items done before it", async () => {
    const { events, error } = await drain("pay", { kind: "incomplete_event", at: { afterCallDone: 0 } });
    expect(error).toBeUndefined();
    const last = events.at(-1) as OpenAI.Responses.ResponseIncompleteEvent;
    expect(last).toMatchObject({ type: "response.incomplete", response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } });
    expect(last.response.output.map((o) => o.type)).toEqual(["message", "function_call"]);
    const cutInArguments = await drain("pay", { kind: "incomplete_event", at: { call: 0, afterFragment: 1 }, reason: "content_filter" });
    const incomplete = cutInArguments.events.at(-1) as OpenAI.Responses.ResponseIncompleteEvent;
    expect(incomplete.response.incomplete_details).toEqual({ reason: "content_filter" });
    expect(incomplete.response.output.map((o) => o.type)).toEqual(["message"]);
  });

  it("response.failed is yielded as an event; stream().finalResponse() resolves with status failed", async () => {
    const { events, error } = await drain("pay", { kind: "failed_event", at: { beforeCompleted: true } });
    expect(error).toBeUndefined();
    expect(events.at(-1)).toMatchObject({ type: "response.failed", response: { status: "failed" } });
  });

  it("5xx and 429 before the stream: typed APIErrors with the status; the SDK's own retry (maxRetries) recovers them", async () => {
    const five = await drain("pay", { kind: "status", status: 503 });
    expect(five.error).toBeInstanceOf(OpenAI.InternalServerError);
    expect((five.error as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    const rate = await drain("pay", { kind: "status", status: 429 });
    expect(rate.error).toBeInstanceOf(OpenAI.RateLimitError);
    const retrying = new OpenAI({ baseURL: mock.baseURL, apiKey: "k", maxRetries: 1 });
    mock.queueFault({ kind: "status", status: 500 });
    const ok = await retrying.responses.create({ model: "gpt-test", input: "hello" });
    expect(ok.output_text).toBe("Hi there, how can I help?");
  });

  it("a reset or clean close at every event position: the SDK saw exactly the events before it, never response.completed", async () => {
    // Each attempt renders its own fragment boundaries, so the event count varies: walk positions
    // until the mock says the position is past the end of that response.
    for (const kind of ["reset", "clean_close"] as const) {
      let at = 0;
      for (;; at++) {
        const { events, error } = await drain("pay twice", { kind, at: { event: at } });
        if (error instanceof OpenAI.InternalServerError && error.message.includes("fault_position_unreachable")) break;
        expect(events.length, `${kind} at event ${at}`).toBe(at);
        expect(events.some((e) => e.type === "response.completed")).toBe(false);
        if (kind === "reset") expect(error, `reset at event ${at}`).toBeInstanceOf(TypeError);
        else expect(error, `clean_close at event ${at}`).toBeUndefined();
      }
      expect(at).toBeGreaterThan(10);
    }
  });

  it("a cut during argument streaming leaves the call's arguments incomplete (no arguments.done, no output_item.done)", async () => {
    const { events } = await drain("pay", { kind: "reset", at: { call: 0, afterFragment: 1 } });
    expect(events.filter((e) => e.type === "response.function_call_arguments.delta")).toHaveLength(1);
    expect(events.some((e) => e.type === "response.function_call_arguments.done")).toBe(false);
  });

  it("an unreachable fault position and a bad fault fail loudly", async () => {
    const { error } = await drain("hello", { kind: "reset", at: { afterCallDone: 0 } });
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect((error as Error).message).toContain("fault_position_unreachable");
    expect(() => parseFault({ kind: "reset", at: { nowhere: 1 } })).toThrow(/invalid fault/);
    const { error: noPlan } = await drain("unknown words");
    expect((noPlan as Error).message).toContain("no_plan");
  });
});

/** Reads a raw stream event by event, so a test can act while the mock holds it. */
async function open(input: string, fault: Fault) {
  mock.queueFault(fault);
  const stream = await client.responses.create({ model: "gpt-test", input, stream: true }, { headers: { "x-demo": "held" } });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  const ended = (async () => {
    try {
      for await (const event of stream) events.push(event);
      return undefined;
    } catch (error) {
      return error;
    }
  })();
  return { events, ended };
}

describe("options", () => {
  it("keeps idle connections open for keepAliveTimeoutMs and announces it in Keep-Alive; refuses a value outside 1000..3600000", async () => {
    const keepAliveOf = async (other: MockOpenAI) => {
      try {
        const sdk = new OpenAI({ baseURL: other.baseURL, apiKey: "test-key", maxRetries: 0 });
        const { response } = await sdk.responses.create({ model: "gpt-test", input: "hello" }).withResponse();
        return response.headers.get("keep-alive");
      } finally {
        await other.close();
      }
    };
    expect(await keepAliveOf(await startMockOpenAI({ script }))).toBe("timeout=5");
    expect(await keepAliveOf(await startMockOpenAI({ script, keepAliveTimeoutMs: 65_000 }))).toBe("timeout=65");
    for (const bad of [0, 999, 1.5, 3_600_001]) {
      await expect(startMockOpenAI({ script, keepAliveTimeoutMs: bad }), String(bad)).rejects.toMatchObject({ code: "invalid_option" });
    }
  });
});

describe("hold, then release or cut: faults at a point of the client's own progress (the chaos run's controls)", () => {
  it("a stream held after the call's output_item.done waits there; the SDK has the completed call; release() finishes it", async () => {
    const { events, ended } = await open("pay", { kind: "hold", at: { afterCallDone: 0 } });
    const held = await mock.waitForHold(1, { timeoutMs: 5_000 });
    expect(held).toMatchObject({ requestNumber: 1, nextEventType: "response.completed" });
    expect(mock.held).toHaveLength(1);
    // The SDK already yielded the completed call: the client can dispatch while the stream is held.
    await expect.poll(() => events.at(-1)?.type).toBe("response.output_item.done");
    mock.release(1);
    expect(await ended).toBeUndefined();
    expect(events.at(-1)!.type).toBe("response.completed");
    expect(mock.held).toHaveLength(0);
    expect(mock.requests[0]).toMatchObject({ outcome: "complete", faultFired: true });
  });

  it("cutNow() ends a held stream as each positional fault does: reset throws TypeError('terminated'), the others end the body", async () => {
    const expected: Record<CutKind, (error: unknown, last: string | undefined) => void> = {
      reset: (error, last) => {
        expect(error).toBeInstanceOf(TypeError);
        expect((error as Error).message).toBe("terminated");
        expect(last).toBe("response.output_item.done");
      },
      clean_close: (error, last) => {
        expect(error).toBeUndefined();
        expect(last).toBe("response.output_item.done");
      },
      error_event: (error, last) => {
        expect(error).toBeUndefined();
        expect(last).toBe("error");
      },
      failed_event: (error, last) => {
        expect(error).toBeUndefined();
        expect(last).toBe("response.failed");
      },
      incomplete_event: (error, last) => {
        expect(error).toBeUndefined();
        expect(last).toBe("response.incomplete");
      },
    };
    for (const [n, kind] of (["reset", "clean_close", "error_event", "failed_event", "incomplete_event"] as const).entries()) {
      const { events, ended } = await open("pay", { kind: "hold", at: { beforeCompleted: true } });
      await mock.waitForHold(n + 1, { timeoutMs: 5_000 });
      mock.cutNow(n + 1, kind);
      const error = await ended;
      expected[kind](error, events.at(-1)?.type);
      expect(events.some((e) => e.type === "response.completed"), kind).toBe(false);
      expect(mock.requests[n]!.outcome).toBe(kind);
    }
  });

  it("a hold while arguments stream: the call is announced, never done; the plan sees the request's headers", async () => {
    const seen: Record<string, string>[] = [];
    mock.setFaultPlan((_request, info) => {
      seen.push(info.headers);
      return { kind: "hold", at: { call: 0, afterFragment: 1 } };
    });
    const stream = await client.responses.create({ model: "gpt-test", input: "pay twice", stream: true }, { headers: { "x-demo-turn": "c1|0" } });
    const events: string[] = [];
    const ended = (async () => {
      for await (const event of stream) events.push(event.type);
    })().catch((error: unknown) => error);
    const held = await mock.waitForHold(undefined, { timeoutMs: 5_000 });
    expect(held.nextEventType).toMatch(/^response\.function_call_arguments\.(delta|done)$/);
    mock.cutNow(held.requestNumber, "reset");
    expect(await ended).toBeInstanceOf(TypeError);
    expect(events.filter((t) => t === "response.function_call_arguments.delta")).toHaveLength(1);
    expect(events).not.toContain("response.output_item.done");
    expect(seen[0]!["x-demo-turn"]).toBe("c1|0");
  });

  it("a client that goes away while held ends the hold; release and cut of a stream not held fail loudly", async () => {
    const controller = new AbortController();
    mock.queueFault({ kind: "hold", at: { beforeCompleted: true } });
    const stream = await client.responses.create({ model: "gpt-test", input: "pay", stream: true }, { signal: controller.signal });
    const drained = (async () => {
      for await (const _ of stream) void _;
    })().catch(() => undefined);
    await mock.waitForHold(1, { timeoutMs: 5_000 });
    controller.abort();
    await drained;
    await expect.poll(() => mock.held.length).toBe(0);
    await expect.poll(() => mock.requests[0]!.outcome).toBe("client_closed");
    expect(() => mock.release(1)).toThrow(/not held/);
    expect(() => mock.cutNow()).toThrow(/no stream is held/);
    await expect(mock.waitForHold(7, { timeoutMs: 20 })).rejects.toThrow(/timed out/);
  });

  it("held streams are listed, released and cut over HTTP too; onEvent sees every event sent; logLimit keeps the newest records", async () => {
    await mock.close();
    mock = await startMockOpenAI({ script, seed: "test", logLimit: 2 });
    client = new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });
    const sent: string[] = [];
    const off = mock.onEvent((event, record) => sent.push(`${record.requestNumber}:${event.type}`));
    const first = await open("pay", { kind: "hold", at: { beforeCompleted: true } });
    await mock.waitForHold(1, { timeoutMs: 5_000 });
    const listed = (await (await fetch(`${mock.url}/_control/holds`)).json()) as { requestNumber: number }[];
    expect(listed).toEqual([{ requestNumber: 1, beforeEvent: expect.any(Number), nextEventType: "response.completed" }]);
    const post = (path: string, body: unknown) => fetch(`${mock.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    expect((await post("/_control/release", { requestNumber: 1 })).status).toBe(204);
    expect(await first.ended).toBeUndefined();
    const second = await open("pay", { kind: "hold", at: { beforeCompleted: true } });
    await mock.waitForHold(2, { timeoutMs: 5_000 });
    expect((await post("/_control/cut", { requestNumber: 2, kind: "nope" })).status).toBe(400);
    expect((await post("/_control/cut", { requestNumber: 2, kind: "clean_close" })).status).toBe(204);
    expect(await second.ended).toBeUndefined();
    expect((await post("/_control/cut", { requestNumber: 2 })).status).toBe(409);
    off();
    expect(sent.filter((s) => s.startsWith("1:"))).toEqual(first.events.map((e) => `1:${e.type}`));
    expect(sent.filter((s) => s.startsWith("2:"))).toEqual(second.events.map((e) => `2:${e.type}`));
    await drain("hello");
    expect(mock.requests.map((r) => r.requestNumber)).toEqual([2, 3]);
    // The script's own words are kept beside the rendered (re-worded) ones.
    expect(mock.requests[0]!.scripted?.output.some((o) => o.type === "function_call")).toBe(true);
  });
});

describe("control endpoints and CLI", () => {
  it("faults queued over HTTP apply to the next request; the request log is served; reset clears it", async () => {
    const queued = await fetch(`${mock.url}/_control/faults`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ kind: "clean_close", at: { beforeCompleted: true } }) });
    expect(queued.status).toBe(204);
    const bad = await fetch(`${mock.url}/_control/faults`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ kind: "nope" }) });
    expect(bad.status).toBe(400);
    await drain("pay");
    const log = (await (await fetch(`${mock.url}/_control/requests`)).json()) as Array<{ outcome: string; faultFired: boolean }>;
    expect(log).toMatchObject([{ outcome: "clean_close", faultFired: true }]);
    await fetch(`${mock.url}/_control/reset`, { method: "POST" });
    expect(mock.requests).toHaveLength(0);
  });

  it("the x-mock-fault header sets a fault for one request", async () => {
    const stream = await client.responses.create({ model: "gpt-test", input: "pay", stream: true }, { headers: { "x-mock-fault": JSON.stringify({ kind: "clean_close", at: { afterCallDone: 0 } }) } });
    const types: string[] = [];
    for await (const e of stream) types.push(e.type);
    expect(types.at(-1)).toBe("response.output_item.done");
    expect(mock.requests[0]!.outcome).toBe("clean_close");
  });

  it("the CLI serves the plan script and a fault given on the command line", async () => {
    const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
    const child = spawn(process.execPath, [cli, "--port", "0", "--fault", JSON.stringify({ kind: "reset", at: { beforeCompleted: true } })]);
    try {
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on("data", (d: Buffer) => {
          const m = /listening on (\S+)/.exec(d.toString());
          if (m) resolve(m[1]!);
        });
        child.on("exit", (code) => reject(new Error(`cli exited ${code}`)));
      });
      const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: "k", maxRetries: 0 });
      const failure = await c.responses.stream({ model: "gpt-test", input: "pay acme" }).finalResponse().catch((e: unknown) => e);
      expect((failure as Error).message).toBe("terminated");
      const ok = await c.responses.create({ model: "gpt-test", input: "hello" });
      expect(ok.output_text).toBe("Hi.");
      const help = await new Promise<string>((resolve) => execFile(process.execPath, [cli, "--help"], (_e, out) => resolve(out)));
      expect(help).toContain("usage: dispatch-once-mock-openai");
    } finally {
      child.kill("SIGTERM");
    }
  });

  it("a call's number member is streamed as its given spelling (spell), the same value; another value's spelling is refused", async () => {
    await mock.close();
    mock = await startMockOpenAI({
      script: scriptFromPlans({ pay: respond(call("send_payment", PAY, { spell: { amount: "125000.0" } })), wrong: respond(call("send_payment", PAY, { spell: { amount: "1e2" } })) }),
      seed: "spell",
    });
    client = new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });
    const { events } = await drain("pay");
    const done = events.find((e) => e.type === "response.output_item.done") as { item: { arguments: string } } | undefined;
    expect(done!.item.arguments).toMatch(/"amount":\s?125000\.0/);
    expect(JSON.parse(done!.item.arguments)).toEqual(PAY);
    const refused = await drain("wrong");
    expect(refused.error).toBeDefined();
    expect(mock.requests[1]!.error).toContain('spell "amount": "1e2" is not a spelling of 125000');
  });
});
