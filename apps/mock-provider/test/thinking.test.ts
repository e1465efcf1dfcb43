import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { REDACTED_THINKING_TRIGGER, signThinking } from "../src/index.js";
import { body, payment, setup } from "./helpers.js";

const THINKING = { thinking: { type: "enabled" as const, budget_tokens: 1024 }, max_tokens: 2048 };

type Block = Anthropic.Messages.ContentBlock;

/** The tool_result step after `first`, carrying `assistant` as the model's message. */
function followUp(assistant: unknown[], toolUseId: string, extra: Record<string, unknown> = THINKING) {
  return body("call send_payment " + JSON.stringify(payment), {
    ...extra,
    messages: [
      { role: "user", content: "call send_payment " + JSON.stringify(payment) },
      { role: "assistant", content: assistant as Anthropic.Messages.ContentBlockParam[] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: toolUseId, content: '{"paymentId":"pay_1"}' }] },
    ],
  });
}

describe("extended thinking, as the API checks it", () => {
  it("a response to a request with thinking opens with a signed thinking block, streamed and whole", async () => {
    const { client } = await setup();
    const stream = client.messages.stream(body("call send_payment " + JSON.stringify(payment), THINKING));
    const deltas: string[] = [];
    stream.on("thinking", (delta) => deltas.push(delta));
    const message = await stream.finalMessage();
    const [thinking, call] = message.content as [Extract<Block, { type: "thinking" }>, Extract<Block, { type: "tool_use" }>];
    expect(thinking.type).toBe("thinking");
    expect(deltas.join("")).toBe(thinking.thinking);
    expect(thinking.signature).toBe(signThinking(thinking.thinking));
    expect(call).toMatchObject({ type: "tool_use", name: "send_payment", input: payment });
    const plain = await client.messages.create(body("call send_payment " + JSON.stringify(payment), THINKING));
    expect(plain.content[0]!.type).toBe("thinking");
  });

  it("a retried request thinks differently: each response's thinking and signature are its own", async () => {
    const { client } = await setup();
    const request = body("call send_payment " + JSON.stringify(payment), THINKING);
    const first = await client.messages.create(request);
    const second = await client.messages.create(request);
    expect((first.content[0] as { thinking: string }).thinking).not.toBe((second.content[0] as { thinking: string }).thinking);
  });

  it("without thinking, nothing changes: no thinking block", async () => {
    const { client } = await setup();
    const message = await client.messages.create(body("call send_payment " + JSON.stringify(payment)));
    expect(message.content.map((b) => b.type)).toEqual(["tool_use"]);
  });

  it("the tool_result step is accepted with the thinking block kept, and refused without it or with it altered", async () => {
    const { client } = await setup();
    const first = await client.messages.create(body("call send_payment " + JSON.stringify(payment), THINKING));
    const call = first.content.find((b) => b.type === "tool_use")!;
    const thinking = first.content[0] as Extract<Block, { type: "thinking" }>;
    await expect(client.messages.create(followUp(first.content, call.id))).resolves.toMatchObject({ stop_reason: "end_turn" });

    const dropped = client.messages.create(followUp([call], call.id));
    await expect(dropped).rejects.toMatchObject({ status: 400 });
    await expect(dropped).rejects.toThrow(/messages\.1\.content\.0\.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`/);

    const altered = client.messages.create(followUp([{ ...thinking, thinking: thinking.thinking + " " }, call], call.id));
    await expect(altered).rejects.toThrow(/messages\.1\.content\.0: Invalid `signature` in `thinking` block/);

    const moved = client.messages.create(followUp([call, thinking], call.id));
    await expect(moved).rejects.toThrow(/the first block must be thinking or redacted_thinking\. Found tool_use/);

    // Thinking off: the block may stay (it is checked), and is not required.
    await expect(client.messages.create(followUp([call], call.id, {}))).resolves.toMatchObject({ stop_reason: "end_turn" });
  });

  it("thinking's parameter is checked: a budget of at least 1024, below max_tokens", async () => {
    const { client } = await setup();
    const prompt = "call send_payment " + JSON.stringify(payment);
    await expect(client.messages.create(body(prompt, { thinking: { type: "enabled", budget_tokens: 512 }, max_tokens: 2048 }))).rejects.toThrow(
      /budget_tokens: Input should be greater than or equal to 1024/,
    );
    await expect(client.messages.create(body(prompt, { thinking: { type: "enabled", budget_tokens: 1024 }, max_tokens: 1024 }))).rejects.toThrow(
      /`max_tokens` must be greater than `thinking.budget_tokens`/,
    );
    await expect(client.messages.create(body(prompt, { thinking: { type: "disabled" } }))).resolves.toMatchObject({ stop_reason: "tool_use" });
  });

  it("the API's test string gets a redacted_thinking block after the thinking block, its data whole at content_block_start; it is checked when it comes back", async () => {
    const { client } = await setup();
    const prompt = "call send_payment " + JSON.stringify(payment);
    const ask = (extra: Partial<Anthropic.MessageCreateParamsNonStreaming> = THINKING) =>
      body(prompt, { ...extra, messages: [{ role: "user", content: [{ type: "text", text: prompt }, { type: "text", text: REDACTED_THINKING_TRIGGER }] }] });
    const stream = client.messages.stream(ask());
    const starts: unknown[] = [];
    stream.on("streamEvent", (event) => {
      if (event.type === "content_block_start") starts.push(event.content_block);
      if (event.type === "content_block_delta") expect(event.index).not.toBe(1);
    });
    const message = await stream.finalMessage();
    expect(message.content.map((b) => b.type)).toEqual(["thinking", "redacted_thinking", "tool_use"]);
    const redacted = message.content[1] as Extract<Block, { type: "redacted_thinking" }>;
    expect(starts[1]).toEqual({ type: "redacted_thinking", data: redacted.data });
    // Each response's data is its own; without thinking, or without the string, there is none.
    const again = await client.messages.create(ask());
    expect((again.content[1] as { data: string }).data).not.toBe(redacted.data);
    expect((await client.messages.create(ask({}))).content.map((b) => b.type)).toEqual(["tool_use"]);
    expect((await client.messages.create(body(prompt, THINKING))).content.map((b) => b.type)).toEqual(["thinking", "tool_use"]);

    const call = message.content[2] as Extract<Block, { type: "tool_use" }>;
    const followUpOf = (assistant: unknown[]) => ({ ...followUp(assistant, call.id), messages: [ask().messages[0]!, ...followUp(assistant, call.id).messages.slice(1)] });
    await expect(client.messages.create(followUpOf(message.content))).resolves.toMatchObject({ stop_reason: "end_turn" });
    for (const data of [redacted.data.slice(0, -4), redacted.data + "AAAA", Buffer.from(Buffer.from(redacted.data, "base64").toString("utf8") + " ").toString("base64")]) {
      const altered = client.messages.create(followUpOf([message.content[0], { type: "redacted_thinking", data }, call]));
      await expect(altered).rejects.toThrow(/messages\.1\.content\.1: Invalid `data` in `redacted_thinking` block/);
    }
  });
});
