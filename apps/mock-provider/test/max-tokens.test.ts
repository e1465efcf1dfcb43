import { describe, expect, it } from "vitest";
import { say, toolUse } from "../src/index.js";
import { body, payment, setup } from "./helpers.js";

describe("a response cut at its output limit (stop_reason max_tokens)", () => {
  it("the last call's argument JSON stops part-way, its block is still closed, and the response ends with max_tokens", async () => {
    const { client, provider } = await setup({ script: () => ({ content: [say("Paying now."), toolUse("send_payment", payment)], stopReason: "max_tokens" }) });
    const events: { type: string; index?: number; delta?: { type: string; partial_json?: string; stop_reason?: string } }[] = [];
    for await (const event of await client.messages.create({ ...body("pay"), stream: true })) events.push(event as never);
    const json = events.filter((e) => e.delta?.type === "input_json_delta").map((e) => e.delta!.partial_json).join("");
    expect(json.length).toBeGreaterThan(0);
    expect(() => JSON.parse(json)).toThrow();
    expect(provider.requests[0]!.toolUses[0]!.json.startsWith(json)).toBe(true);
    expect(events.filter((e) => e.type === "content_block_stop").map((e) => e.index)).toEqual([0, 1]);
    expect(events.find((e) => e.type === "message_delta")!.delta!.stop_reason).toBe("max_tokens");
    expect(events.at(-1)!.type).toBe("message_stop");
  });

  it("a text block last is cut instead, and earlier calls stay whole", async () => {
    const { client } = await setup({ script: () => ({ content: [toolUse("send_payment", payment), say("I have sent the payment to acme.")], stopReason: "max_tokens" }) });
    const message = await client.messages.create(body("pay"));
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.content[0]).toMatchObject({ type: "tool_use", input: payment });
    const text = (message.content[1] as { text: string }).text;
    expect(text.length).toBeGreaterThan(0);
    expect("I have sent the payment to acme.".startsWith(text) && text !== "I have sent the payment to acme.").toBe(true);
  });
});

describe("a response a streaming classifier stopped (stop_reason refusal)", () => {
  it("ends with stop_reason refusal and stop_details, its last block cut; a conversation carrying it is refused again", async () => {
    const refused = { content: [say("Sure, here is how to do that in detail.")], stopReason: "refusal" as const, stopDetails: { category: "cyber", explanation: "declined" } };
    const { client } = await setup({ script: (request) => (JSON.stringify(request.messages[0]).includes("bad") ? refused : { content: [say("Hi.")], stopReason: "end_turn" }) });
    const message = await client.messages.create(body("bad request"));
    expect(message.stop_reason).toBe("refusal");
    expect((message as unknown as { stop_details: unknown }).stop_details).toEqual({ type: "refusal", category: "cyber", explanation: "declined" });
    const text = (message.content[0] as { text: string }).text;
    expect("Sure, here is how to do that in detail.".startsWith(text) && text.length > 0).toBe(true);

    const events: { type: string; delta?: { stop_reason?: string; stop_details?: unknown } }[] = [];
    for await (const event of await client.messages.create({ ...body("bad request"), stream: true })) events.push(event as never);
    expect(events.find((e) => e.type === "message_delta")!.delta).toMatchObject({ stop_reason: "refusal", stop_details: { type: "refusal", category: "cyber" } });

    // Continuing without resetting: refused again. Reset (the refused turn removed): answered.
    const continued = await client.messages.create(
      body("x", { messages: [{ role: "user", content: "bad request" }, { role: "assistant", content: [{ type: "text", text }] }, { role: "user", content: "hello" }] }),
    );
    expect(continued.stop_reason).toBe("refusal");
    const reset = await client.messages.create(body("hello"));
    expect(reset.stop_reason).toBe("end_turn");
  });
});
