import { describe, expect, it } from "vitest";
import { scriptFromPlans, say, toolUse, turn } from "../src/index.js";
import { body, invoice, payment, setup as setupProvider } from "./helpers.js";

const plans = scriptFromPlans({
  "pay acme": turn(say("Paying acme now."), toolUse("send_payment", payment)),
  "pay and invoice": turn(say("On it."), toolUse("send_payment", payment), toolUse("create_invoice", invoice)),
  "pay twice": turn(toolUse("send_payment", payment), toolUse("send_payment", payment)),
  "hello": turn(say("Hello there, how can I help?")),
});

const setup: typeof setupProvider = (options = {}, clientOptions = {}) => setupProvider({ script: plans, ...options }, clientOptions);

const TOOLU = /^toolu_01[0-9A-Za-z]{22}$/;

describe("messages.stream() parses the mock's turns", () => {
  it("gives finalMessage the scripted text and the scripted arguments, whatever the serialisation", async () => {
    // Many seeds, so compact/spaced/pretty JSON, shuffled keys and every fragmenting are exercised.
    for (let seed = 0; seed < 25; seed++) {
      const { provider, client } = await setup({ seed });
      const blocksAtStop: unknown[] = [];
      const stream = client.messages.stream(body("pay and invoice"));
      stream.on("contentBlock", (block) => blocksAtStop.push(structuredClone(block)));
      const message = await stream.finalMessage();

      expect(message.stop_reason).toBe("tool_use");
      expect(message.role).toBe("assistant");
      expect(message.model).toBe("claude-mock-1");
      expect(message.id).toMatch(/^msg_01[0-9A-Za-z]{22}$/);
      expect(message.content.map((b) => b.type)).toEqual(["text", "tool_use", "tool_use"]);
      const [text, pay, inv] = message.content as [any, any, any];
      expect(text.text).toBe("On it.");
      expect(pay).toMatchObject({ name: "send_payment", input: payment });
      expect(inv).toMatchObject({ name: "create_invoice", input: invoice });
      expect(pay.id).toMatch(TOOLU);
      expect(inv.id).toMatch(TOOLU);
      // contentBlock fires at each content_block_stop with the parsed arguments: the chapter's dispatch point.
      expect(blocksAtStop).toEqual(message.content.map((b) => structuredClone(b)));
      // What was streamed is the JSON the log says, and it parses to the scripted values.
      const record = provider.requests[0]!;
      expect(record.toolUses.map((t) => JSON.parse(t.json))).toEqual([payment, invoice]);
      expect(record.toolUses.map((t) => t.fragments.join(""))).toEqual(record.toolUses.map((t) => t.json));
      expect(record.outcome).toBe("complete");
    }
  });

  it("varies key order, whitespace and fragment boundaries across responses but never the values", async () => {
    const { provider, client } = await setup({ seed: "variety" });
    for (let i = 0; i < 16; i++) await client.messages.stream(body("pay and invoice")).finalMessage();
    const jsons = provider.requests.map((r) => r.toolUses[1]!.json);
    const fragmentations = provider.requests.map((r) => JSON.stringify(r.toolUses[1]!.fragments));
    expect(new Set(fragmentations).size).toBe(16);
    const style = (json: string) => (json.startsWith("{\n") ? "pretty" : /^\{"[a-z_]+": /.test(json) ? "spaced" : /^\{"[a-z_]+":\S/.test(json) ? "compact" : "other");
    expect(new Set(jsons.map(style))).toEqual(new Set(["pretty", "spaced", "compact"]));
    const keyOrders = jsons.map((j) => Object.keys(JSON.parse(j)).join(","));
    expect(new Set(keyOrders)).toEqual(new Set(["customer,lines", "lines,customer"]));
    for (const json of jsons) expect(JSON.parse(json)).toEqual(invoice);
    // The first fragment is often empty, as the API's is.
    expect(provider.requests.some((r) => r.toolUses[0]!.fragments[0] === "")).toBe(true);
  });
});

describe("messages.create({ stream: true }) raw events", () => {
  it("has the API's event sequence and shapes", async () => {
    const { provider, client } = await setup({ seed: 3 });
    const stream = await client.messages.create({ ...body("pay acme"), stream: true });
    const events: any[] = [];
    for await (const event of stream) events.push(event);
    const types = events.map((e) => e.type);

    // Pings are consumed by the SDK; the wire log shows where it was.
    const wire = provider.requests[0]!.events.map((e) => e.type);
    expect(wire.filter((t) => t === "ping")).toHaveLength(1);
    expect(wire.filter((t) => t !== "ping")).toEqual(types);

    const textDeltas = events.filter((e) => e.type === "content_block_delta" && e.index === 0);
    const jsonDeltas = events.filter((e) => e.type === "content_block_delta" && e.index === 1);
    expect(types).toEqual([
      "message_start",
      "content_block_start",
      ...textDeltas.map(() => "content_block_delta"),
      "content_block_stop",
      "content_block_start",
      ...jsonDeltas.map(() => "content_block_delta"),
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    const start = events[0];
    expect(start.message).toMatchObject({
      type: "message",
      role: "assistant",
      model: "claude-mock-1",
      content: [],
      stop_reason: null,
      stop_sequence: null,
    });
    expect(start.message.id).toMatch(/^msg_/);
    expect(start.message.usage.input_tokens).toBeGreaterThan(0);

    expect(events[1]).toEqual({ type: "content_block_start", index: 0, content_block: { type: "text", text: "", citations: null } });
    expect(textDeltas.map((e) => e.delta.text).join("")).toBe("Paying acme now.");
    expect(textDeltas.every((e) => e.delta.type === "text_delta")).toBe(true);

    const toolStart = events.find((e) => e.type === "content_block_start" && e.index === 1);
    expect(toolStart.content_block).toMatchObject({ type: "tool_use", name: "send_payment", input: {} });
    expect(toolStart.content_block.id).toMatch(TOOLU);
    expect(jsonDeltas.every((e) => e.delta.type === "input_json_delta")).toBe(true);
    expect(JSON.parse(jsonDeltas.map((e) => e.delta.partial_json).join(""))).toEqual(payment);

    const delta = events.at(-2);
    expect(delta.delta.stop_reason).toBe("tool_use");
    expect(delta.delta.stop_sequence).toBeNull();
    expect(delta.usage.output_tokens).toBeGreaterThan(0);
    expect(events.at(-1)).toEqual({ type: "message_stop" });
  });

  it("sends response headers like the API", async () => {
    const { provider, client } = await setup();
    const { response, data } = await client.messages.create({ ...body("hello"), stream: true }).withResponse();
    for await (const _ of data) void _;
    expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    expect(response.headers.get("cache-control")).toBe("no-cache");
    expect(response.headers.get("request-id")).toMatch(/^req_011C/);
    expect(response.headers.get("request-id")).toBe(provider.requests[0]!.requestId);
  });

  it("puts a ping before every event when asked, and the SDK still parses the turn", async () => {
    const { provider, client } = await setup({ pings: "every_event" });
    const message = await client.messages.stream(body("pay acme")).finalMessage();
    expect((message.content[1] as any).input).toEqual(payment);
    const wire = provider.requests[0]!.events.map((e) => e.type);
    expect(wire.filter((t) => t === "ping").length).toBe(wire.length / 2 - 0.5);
  });
});

describe("non-streaming messages.create()", () => {
  it("returns the whole message with the scripted content", async () => {
    const { provider, client } = await setup();
    const { data: message, response } = await client.messages.create(body("pay and invoice")).withResponse();
    expect(response.headers.get("content-type")).toMatch(/^application\/json/);
    expect(response.headers.get("request-id")).toMatch(/^req_011C/);
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content).toMatchObject([
      { type: "text", text: "On it." },
      { type: "tool_use", name: "send_payment", input: payment },
      { type: "tool_use", name: "create_invoice", input: invoice },
    ]);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    expect(provider.requests[0]).toMatchObject({ stream: false, outcome: "complete", status: 200, events: [] });
  });

  it("answers end_turn for a text-only turn", async () => {
    const { client } = await setup({ script: plans });
    const message = await client.messages.create(body("hello"));
    expect(message.stop_reason).toBe("end_turn");
    expect(message.content).toEqual([{ type: "text", text: "Hello there, how can I help?", citations: null }]);
  });
});

describe("the scripted model across responses", () => {
  it("mints fresh toolu_ ids per response while the calls stay the same", async () => {
    const { client } = await setup({ script: plans });
    const first = await client.messages.stream(body("pay twice")).finalMessage();
    const second = await client.messages.stream(body("pay twice")).finalMessage();
    const calls = (m: typeof first) => m.content.filter((b) => b.type === "tool_use") as any[];
    const ids = [...calls(first), ...calls(second)].map((c) => c.id);
    expect(new Set(ids).size).toBe(4);
    for (const id of ids) expect(id).toMatch(TOOLU);
    // Two identical calls in one turn stay two calls, with equal arguments.
    expect(calls(first).map((c) => [c.name, c.input])).toEqual([
      ["send_payment", payment],
      ["send_payment", payment],
    ]);
    expect(calls(second).map((c) => [c.name, c.input])).toEqual(calls(first).map((c) => [c.name, c.input]));
  });

  it("re-words only the fields marked re-wordable, and only after the first response", async () => {
    const script = scriptFromPlans({
      fixed: turn(toolUse("send_payment", payment)),
      loose: turn(toolUse("send_payment", payment, { reword: ["memo"] })),
      listed: turn(toolUse("send_payment", payment, { reword: { memo: ["Inv. 1042 (March)", "March invoice 1042"] } })),
    });
    const { client } = await setup({ script, seed: 11 });
    const memos = async (text: string) => {
      const out: Array<Record<string, unknown>> = [];
      for (let i = 0; i < 6; i++) {
        const message = await client.messages.stream(body(text)).finalMessage();
        out.push((message.content[0] as any).input);
      }
      return out;
    };
    const fixed = await memos("fixed");
    expect(fixed.every((input) => JSON.stringify(input) === JSON.stringify(fixed[0]) || expect(input).toEqual(payment))).toBe(true);
    for (const input of fixed) expect(input).toEqual(payment);

    const loose = await memos("loose");
    expect(loose[0]).toEqual(payment);
    for (const input of loose.slice(1)) {
      expect(input.memo).not.toBe(payment.memo);
      expect(String(input.memo)).toContain("nvoice 1042 for March");
      const { memo: _m, ...rest } = input;
      const { memo: _p, ...expected } = payment;
      expect(rest).toEqual(expected);
    }

    const listed = await memos("listed");
    expect(listed[0]!.memo).toBe(payment.memo);
    for (const input of listed.slice(1)) expect(["Inv. 1042 (March)", "March invoice 1042"]).toContain(input.memo);
  });

  it("is deterministic under a seed: same seed and requests, same bytes; another seed, other ids", async () => {
    const run = async (seed: string) => {
      const { provider, client } = await setup({ seed, script: plans });
      for (const text of ["pay acme", "pay acme", "pay and invoice"]) await client.messages.stream(body(text)).finalMessage();
      await client.messages.create(body("pay twice"));
      return provider.requests.map((r) => ({
        requestId: r.requestId,
        events: r.events.map((e) => `${e.type}:${JSON.stringify(e.data)}`),
        toolUses: r.toolUses,
        attempt: r.attempt,
      }));
    };
    const a = await run("seed-a");
    const b = await run("seed-a");
    const c = await run("seed-c");
    expect(b).toEqual(a);
    expect(c.map((r) => r.toolUses.map((t) => t.input))).toEqual(a.map((r) => r.toolUses.map((t) => t.input)));
    expect(c.flatMap((r) => r.toolUses.map((t) => t.id))).not.toEqual(a.flatMap((r) => r.toolUses.map((t) => t.id)));
    expect(a.map((r) => r.attempt)).toEqual([1, 2, 1, 1]);
  });
});

describe("a call's number spellings (spell)", () => {
  it("streams the given text for a number member, which the SDK parses to the same value; another value's spelling is refused", async () => {
    const spelt = scriptFromPlans({
      "pay acme": turn(toolUse("send_payment", payment, { spell: { amount_cents: "1.25e5" } })),
      "pay wrong": turn(toolUse("send_payment", payment, { spell: { amount_cents: "125001" } })),
    });
    const { provider, client } = await setupProvider({ script: spelt, seed: 3 });
    const message = await client.messages.stream(body("pay acme")).finalMessage();
    expect((message.content[0] as { input: unknown }).input).toEqual(payment);
    expect(provider.requests[0]!.toolUses[0]!.json).toMatch(/"amount_cents":\s*1\.25e5/);
    const refused = await client.messages.stream(body("pay wrong")).finalMessage().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(Error);
    expect(provider.requests[1]!.error).toContain('spell "amount_cents": "125001" is not a spelling of 125000');
  });
});
