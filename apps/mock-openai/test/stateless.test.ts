import OpenAI from "openai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { call, reasoning, respond, scriptFromPlans, startMockOpenAI, text, type MockOpenAI } from "../src/index.js";

/*
 * A reasoning model used statelessly (`store: false`): the API keeps nothing between requests, so
 * each request carries the reasoning items of the turn's earlier responses back whole, and the API
 * refuses (400) one it cannot verify, one without its encrypted content, a call without the
 * reasoning item that preceded it and a reasoning item without the item that followed it.
 */
const PAY = { payee: "acme", amount: 100, currency: "EUR", reference: "INV-1", memo: "Invoice" };
const script = scriptFromPlans(
  { "pay, thinking": respond(reasoning("The user wants invoice 1 paid."), call("send_payment", PAY)), "hello, thinking": respond(reasoning("A greeting."), text("Hello.")) },
  { after: respond(reasoning("It went through."), text("Paid.")) },
);

let mock: MockOpenAI;
let client: OpenAI;
beforeEach(async () => {
  mock = await startMockOpenAI({ script, seed: "stateless" });
  client = new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });
});
afterEach(async () => {
  await mock.close();
});

type Item = Record<string, unknown>;
const stateless = { store: false, include: ["reasoning.encrypted_content" as const] };

/** One response's output items, as `response.completed` delivered them. */
async function turn(params: Record<string, unknown> = stateless, input = "pay, thinking", metadata?: Record<string, string>): Promise<Item[]> {
  const response = await client.responses.create({ model: "gpt-test", input, ...params, ...(metadata === undefined ? {} : { metadata }) } as never);
  return (response as unknown as { output: Item[] }).output;
}

/** A next message's request: a user message, the given items, then another user message; the error it met, if any. */
async function ask(items: Item[]): Promise<unknown> {
  const input = [{ role: "user", content: "hello, thinking" }, ...items, { role: "user", content: "hello, thinking" }];
  try {
    await client.responses.create({ model: "gpt-test", input, ...stateless } as never);
    return undefined;
  } catch (error) {
    return error;
  }
}

/** The follow-up request: the user's message, the given output items, the call's output. */
async function followUp(output: Item[], params: Record<string, unknown> = stateless, answered?: string): Promise<unknown> {
  const callId = answered ?? output.find((i) => i.type === "function_call")!.call_id;
  const input = [{ role: "user", content: "pay, thinking" }, ...output, { type: "function_call_output", call_id: callId, output: "{}" }];
  try {
    await client.responses.create({ model: "gpt-test", input, ...params } as never);
    return undefined;
  } catch (error) {
    return error;
  }
}

const refusal = (error: unknown) => {
  expect(error).toBeInstanceOf(OpenAI.BadRequestError);
  return (error as Error).message;
};

describe("store: false: the reasoning items come back whole, in place", () => {
  it("the response's reasoning item carried back as delivered is taken", async () => {
    const output = await turn();
    expect(output[0]).toMatchObject({ type: "reasoning", encrypted_content: expect.stringMatching(/^enc_/) });
    expect(await followUp(output)).toBeUndefined();
  });

  it("without include, the item comes without its encrypted content, and sent back so it is not found", async () => {
    const output = await turn({ store: false });
    expect(output[0]).toMatchObject({ type: "reasoning", encrypted_content: null });
    expect(refusal(await followUp(output, { store: false }))).toMatch(/Item with id 'rs_\w+' not found\. Items are not persisted when `store` is set to false/);
  });

  it("an altered encrypted_content cannot be verified", async () => {
    const [item, ...rest] = await turn();
    const altered = { ...item, encrypted_content: `${String(item!.encrypted_content)}=` };
    expect(refusal(await followUp([altered, ...rest]))).toMatch(/The encrypted content for item rs_\w+ could not be verified/);
  });

  it("a call without the reasoning item its response opened with is refused", async () => {
    const output = await turn();
    expect(refusal(await followUp(output.slice(1)))).toMatch(/Item 'fc_\w+' of type 'function_call' was provided without its required 'reasoning' item: 'rs_\w+'/);
  });

  it("another response's reasoning item in its place (a cut attempt's) is refused", async () => {
    const cut = await turn({ ...stateless, input: "pay, thinking", metadata: { attempt: "1" } });
    const output = await turn();
    expect(refusal(await followUp([cut[0]!, ...output.slice(1)]))).toMatch(/Item 'rs_\w+' of type 'reasoning' was provided without its required following item/);
  });

  it("the reasoning item after the call it preceded is refused", async () => {
    const [item, ...rest] = await turn();
    expect(refusal(await followUp([...rest, item!]))).toMatch(/was provided without its required 'reasoning' item|without its required following item/);
  });

  it("a reasoning item followed by a tool output (its calls dropped) is refused; followed by its call without the item id, taken", async () => {
    const [item, fc] = await turn();
    expect(refusal(await followUp([item!], stateless, fc!.call_id as string))).toMatch(/Item 'rs_\w+' of type 'reasoning' was provided without its required following item/);
    const { id: _id, ...unnamed } = fc!;
    expect(await followUp([item!, unnamed])).toBeUndefined();
  });

  it("a message after its reasoning item carries the id its response gave it: sent without it (or with another response's), refused; as delivered, taken", async () => {
    const [item, message] = await turn(stateless, "hello, thinking");
    expect(message).toMatchObject({ type: "message", id: expect.stringMatching(/^msg_/), status: "completed", content: [{ type: "output_text", text: "Hello." }] });
    const error = await ask([item!, { type: "message", role: "assistant", content: "Hello." }]);
    expect(refusal(error)).toBe(`400 Item '${String(item!.id)}' of type 'reasoning' was provided without its required following item.`);
    // As the API words it: an invalid_request_error about the request's input.
    expect(error).toMatchObject({ status: 400, type: "invalid_request_error", param: "input", code: null });
    const { id: _id, ...unnamed } = message!;
    expect(refusal(await ask([item!, unnamed]))).toMatch(/Item 'rs_\w+' of type 'reasoning' was provided without its required following item/);
    const [, other] = await turn(stateless, "hello, thinking", { attempt: "2" });
    expect(refusal(await ask([item!, other!]))).toMatch(/Item 'rs_\w+' of type 'reasoning' was provided without its required following item/);
    expect(await ask([item!, message!])).toBeUndefined();
    // The AI SDK's shape (no item type, no status; @ai-sdk/openai 3.0.141 sends a message after its reasoning so): named by its id, taken.
    expect(await ask([item!, { role: "assistant", content: [{ type: "output_text", text: "Hello." }], id: message!.id }])).toBeUndefined();
  });

  it("a message named by the msg_ id of a response that reasoned, without that reasoning item, is refused", async () => {
    const [item, message] = await turn(stateless, "hello, thinking");
    expect(refusal(await ask([message!]))).toBe(`400 Item '${String(message!.id)}' of type 'message' was provided without its required 'reasoning' item: '${String(item!.id)}'.`);
    expect(refusal(await ask([{ role: "assistant", content: [{ type: "output_text", text: "Hello." }], id: message!.id }]))).toMatch(/Item 'msg_\w+' of type 'message' was provided without its required 'reasoning' item: 'rs_\w+'/);
    // Without the id it names nothing a reasoning item is required for: taken, as a message of no response.
    expect(await ask([{ type: "message", role: "assistant", content: "Hello." }])).toBeUndefined();
  });

  it("a tool loop's closing answer reasons too (scriptFromPlans' after as a response): its message comes after its own reasoning item", async () => {
    const output = await turn();
    const input = [{ role: "user", content: "pay, thinking" }, ...output, { type: "function_call_output", call_id: output[1]!.call_id, output: "{}" }];
    const closing = (await client.responses.create({ model: "gpt-test", input, ...stateless } as never)) as unknown as { output: Item[] };
    expect(closing.output.map((i) => i.type)).toEqual(["reasoning", "message"]);
    expect(closing.output[1]).toMatchObject({ content: [{ type: "output_text", text: "Paid." }] });
  });

  it("with store (the default), nothing is checked: the API keeps the items itself", async () => {
    const output = await turn({});
    expect(await followUp(output.slice(1), {})).toBeUndefined();
  });
});
