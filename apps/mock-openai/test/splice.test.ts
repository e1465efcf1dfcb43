import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { call, respond, scriptFromPlans, startMockOpenAI, type Fault, type MockOpenAI } from "../src/index.js";

const script = scriptFromPlans({ "pay acme": respond(call("send_payment", { payee: "acme", amount: 125000 })) });
let mock: MockOpenAI | undefined;
afterEach(async () => {
  await mock?.close();
  mock = undefined;
});

async function events(fault: Fault) {
  mock = await startMockOpenAI({ script, seed: "splice" });
  mock.queueFault(fault);
  const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "k", maxRetries: 0 });
  const stream = await client.responses.create({ model: "gpt-test", input: "pay acme", stream: true });
  const seen: any[] = [];
  for await (const event of stream) seen.push(event);
  return { seen, record: mock.requests[0]! };
}

const items = (seen: any[]) => seen.filter((e) => e.type === "response.output_item.added").map((e) => [e.output_index, e.item.type]);

describe("splice (a proxy that sent the request again splices the new response into the body)", () => {
  it("with its response.created: a second response begins after the first one's call (STREAM-8's shape)", async () => {
    const { seen, record } = await events({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: true });
    const created = seen.filter((e) => e.type === "response.created");
    expect(created).toHaveLength(2);
    expect(created[1].response.id).not.toBe(created[0].response.id);
    expect(items(seen)).toEqual([
      [0, "function_call"],
      [0, "function_call"],
    ]);
    expect(seen.filter((e) => e.type === "response.completed")).toHaveLength(1);
    expect(record).toMatchObject({ outcome: "complete", faultFired: true });
    // The request log keeps the spliced response's calls apart: another response asked for them.
    expect(record.calls).toHaveLength(1);
    expect(record.splicedCalls).toHaveLength(1);
  });

  it("without it, led by text: a message item lands on the position of the call that completed (STREAM-17's shape)", async () => {
    const { seen } = await events({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: false, lead: "Paying acme now." });
    expect(seen.filter((e) => e.type === "response.created")).toHaveLength(1);
    expect(items(seen)).toEqual([
      [0, "function_call"],
      [0, "message"],
      [1, "function_call"],
    ]);
    expect(seen.at(-1).type).toBe("response.completed");
  });

  it("without it and without a lead: the spliced call lands on the position of the call that completed, named otherwise (STREAM-10's shape)", async () => {
    const { seen, record } = await events({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: false });
    expect(seen.filter((e) => e.type === "response.created")).toHaveLength(1);
    expect(items(seen)).toEqual([
      [0, "function_call"],
      [0, "function_call"],
    ]);
    const added = seen.filter((e) => e.type === "response.output_item.added");
    expect(added[1].item.id).not.toBe(added[0].item.id);
    expect(added[1].item.call_id).not.toBe(added[0].item.call_id);
    expect(seen.at(-1).type).toBe("response.completed");
    expect(record).toMatchObject({ outcome: "complete", faultFired: true });
    expect(record.splicedCalls).toHaveLength(1);
  });

  it("is refused on a request that does not stream (fault_not_applicable)", async () => {
    mock = await startMockOpenAI({ script, seed: "splice" });
    mock.queueFault({ kind: "splice", at: { afterCallDone: 0 }, responseCreated: true });
    const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "k", maxRetries: 0 });
    await expect(client.responses.create({ model: "gpt-test", input: "pay acme" })).rejects.toThrow(/fault_not_applicable/);
  });
});

describe("repeat_call (a relay that renumbers what it re-sends delivers a completed call again)", () => {
  const two = scriptFromPlans({ "pay both": respond(call("send_payment", { payee: "acme", amount: 125000 }), call("send_payment", { payee: "bob", amount: 7 })) });

  it("re-sends the call's items and deltas unchanged but for the output_index, at the next free one, then the response completes (STREAM-10's shape)", async () => {
    mock = await startMockOpenAI({ script: two, seed: "repeat" });
    mock.queueFault({ kind: "repeat_call", call: 0 });
    const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "k", maxRetries: 0 });
    const stream = await client.responses.create({ model: "gpt-test", input: "pay both", stream: true });
    const seen: any[] = [];
    for await (const event of stream) seen.push(event);
    expect(items(seen)).toEqual([
      [0, "function_call"],
      [1, "function_call"],
      [2, "function_call"],
    ]);
    // The first call again, whole: its item id, call_id, name and every argument fragment.
    const at = (index: number) => seen.filter((e) => e.output_index === index).map(({ output_index: _, sequence_number: __, ...rest }) => rest);
    expect(at(2)).toEqual(at(0));
    expect(at(2).map((e) => e.type)).toEqual(["response.output_item.added", ...at(0).slice(1, -2).map(() => "response.function_call_arguments.delta"), "response.function_call_arguments.done", "response.output_item.done"]);
    expect(seen.at(-1).type).toBe("response.completed");
    expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
    const record = mock.requests[0]!;
    expect(record).toMatchObject({ outcome: "complete", faultFired: true, fault: { kind: "repeat_call", call: 0 } });
    // The log keeps the response's calls as rendered: the repeat is one of them delivered again.
    expect(record.calls?.map((c) => c.callId)).toEqual(seen.filter((e) => e.type === "response.output_item.added").slice(0, 2).map((e) => e.item.call_id));
  });

  it("is refused for a call the response does not make, on a request that does not stream, and on Chat Completions (fault_not_applicable)", async () => {
    mock = await startMockOpenAI({ script: two, seed: "repeat" });
    const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "k", maxRetries: 0 });
    mock.queueFault({ kind: "repeat_call", call: 2 });
    await expect(client.responses.create({ model: "gpt-test", input: "pay both", stream: true })).rejects.toThrow(/fault_not_applicable/);
    mock.queueFault({ kind: "repeat_call", call: 0 });
    await expect(client.responses.create({ model: "gpt-test", input: "pay both" })).rejects.toThrow(/fault_not_applicable/);
    mock.queueFault({ kind: "repeat_call", call: 0 });
    await expect(client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "pay both" }], stream: true })).rejects.toThrow(/fault_not_applicable/);
  });
});

describe("options", () => {
  it("faultPlan given to startMockOpenAI plans the faults (as the Anthropic mock's option does)", async () => {
    mock = await startMockOpenAI({ script, seed: "splice", faultPlan: (_request, info) => (info.attempt === 1 ? { kind: "splice", at: { afterCallDone: 0 }, responseCreated: true } : undefined) });
    const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "k", maxRetries: 0 });
    const stream = await client.responses.create({ model: "gpt-test", input: "pay acme", stream: true });
    for await (const _ of stream) void _;
    expect(mock.requests[0]).toMatchObject({ faultFired: true, fault: { kind: "splice" } });
  });

  it("a misspelt option is refused with invalid_option, naming it, not ignored", async () => {
    await expect(startMockOpenAI({ script, faultPlans: () => undefined } as never)).rejects.toMatchObject({ code: "invalid_option", message: expect.stringContaining("faultPlans") });
  });
});
