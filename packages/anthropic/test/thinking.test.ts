import { InvalidArgumentError } from "@dispatch-once/core";
import { signThinking } from "@dispatch-once/mock-provider";
import { describe, expect, it } from "vitest";
import { TurnAccumulator } from "../src/index.js";
import { providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();
const THINKING = { params: { thinking: { type: "enabled" as const, budget_tokens: 1024 } }, maxTokens: 2048 };

type Block = { type: string; thinking?: string; signature?: string; id?: string; data?: string };

describe("extended thinking (STREAM-15)", () => {
  it("STREAM-15 a cut after the payment ran: one payment, the turn commits the committing attempt's signed thinking block, and the conversation goes on", async () => {
    // The chapter's cut on the first attempt only: after the call's content_block_stop, before message_stop.
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects, store } = await setup(provider(), { guarded: true, runner: THINKING });
    const result = await runner.send("conv-think", { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(effects()).toHaveLength(1);
    expect(result.turns[0]!.attempts).toBe(2);

    const log = (await store.log("conv-think")) as { role: string; content: Block[] }[];
    const assistant = log[1]!.content;
    expect(assistant.map((b) => b.type)).toEqual(["thinking", "tool_use"]);
    expect(assistant[0]!.signature).toBe(signThinking(assistant[0]!.thinking!));
    // The committing attempt's own block (the second response), never the cut one's (RECORD-1).
    const [cut, committed] = provider().requests.filter((r) => r.toolUses.length > 0);
    expect(committed!.toolUses[0]!.id).toBe(assistant[1]!.id);
    const thinkingOf = (r: typeof cut) =>
      r!.events.filter((e) => (e.data as { delta?: { type: string } }).delta?.type === "thinking_delta").map((e) => (e.data as { delta: { thinking: string } }).delta.thinking).join("");
    expect(assistant[0]!.thinking).toBe(thinkingOf(committed));
    expect(thinkingOf(cut)).not.toBe(assistant[0]!.thinking);
    // The tool_result step was accepted (the API refuses it when the thinking block is dropped).
    expect(provider().requests.at(-1)!.status).toBe(200);
    expect(log).toHaveLength(4);
  });

  it("STREAM-15 a next message after a thinking turn is accepted, and the conversation's turns keep their blocks", async () => {
    const { runner, effects, store } = await setup(provider(), { guarded: true, runner: THINKING });
    await runner.send("conv-think-2", { id: "m1", content: "pay acme" });
    const second = await runner.send("conv-think-2", { id: "m2", content: "pay alice" });
    expect(second.status).toBe("answered");
    expect(effects()).toHaveLength(2);
    const log = (await store.log("conv-think-2")) as { role: string; content: Block[] | string }[];
    const assistants = log.filter((m) => m.role === "assistant").map((m) => (m.content as Block[])[0]!.type);
    expect(assistants).toEqual(["thinking", "thinking", "thinking", "thinking"]);
    expect(provider().requests.every((r) => r.status === 200)).toBe(true);
  });

  it("the runner's own request fields cannot be given twice: params naming one is refused, naming the field", async () => {
    for (const field of ["model", "messages", "stream", "tools", "system", "max_tokens"]) {
      const attempt = setup(provider(), { guarded: true, runner: { params: { [field]: "x" } as never } });
      await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt).rejects.toMatchObject({ field: `options.params.${field}` });
    }
    await expect(setup(provider(), { guarded: true, runner: { params: [] as never } })).rejects.toMatchObject({ field: "options.params" });
    await expect(setup(provider(), { guarded: true, runner: { params: null as never } })).rejects.toMatchObject({ field: "options.params" });
  });

  it("STREAM-15 params that would make the API add state it keeps to the request are refused: a message thread (beta `thread`)", async () => {
    // SDK 1.14's beta Messages API holds a conversation server-side under `thread`; a request that
    // continues one sends only the new messages and the API adds the rest from its own copy, which
    // may hold the whole reply of a stream cut before the runner saw it end. Every request must be the
    // committed conversation.
    for (const thread of [{ type: "create" }, { type: "continue", previous_message_id: "msg_1" }]) {
      const attempt = setup(provider(), { guarded: true, runner: { params: { thread } as never } });
      await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(attempt).rejects.toMatchObject({ field: "options.params.thread" });
    }
    // Null (the field's "no thread") is sent as given.
    await expect(setup(provider(), { guarded: true, runner: { params: { thread: null } as never } })).resolves.toBeDefined();
  });

  it("params reach every request as given", async () => {
    const { runner } = await setup(provider(), { guarded: true, runner: { params: { stop_sequences: ["<END>"], metadata: { user_id: "u-7" } } } });
    await runner.send("conv-params", { id: "m1", content: "pay acme" });
    for (const request of provider().requests) expect(request.body).toMatchObject({ stop_sequences: ["<END>"], metadata: { user_id: "u-7" } });
  });
});

describe("TurnAccumulator: thinking blocks", () => {
  const ev = (e: unknown) => e as never;
  it("STREAM-15 keeps thinking (text and signature) and redacted_thinking blocks verbatim, in their place", () => {
    const acc = new TurnAccumulator();
    acc.apply(ev({ type: "message_start", message: { id: "msg_1" } }));
    acc.apply(ev({ type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } }));
    acc.apply(ev({ type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Pay " } }));
    acc.apply(ev({ type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "acme." } }));
    acc.apply(ev({ type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "sig-1" } }));
    acc.apply(ev({ type: "content_block_stop", index: 0 }));
    acc.apply(ev({ type: "content_block_start", index: 1, content_block: { type: "redacted_thinking", data: "opaque==" } }));
    acc.apply(ev({ type: "content_block_stop", index: 1 }));
    acc.apply(ev({ type: "content_block_start", index: 2, content_block: { type: "text", text: "" } }));
    acc.apply(ev({ type: "content_block_delta", index: 2, delta: { type: "text_delta", text: "Paying." } }));
    acc.apply(ev({ type: "content_block_stop", index: 2 }));
    acc.apply(ev({ type: "content_block_start", index: 3, content_block: { type: "tool_use", id: "toolu_1", name: "send_payment", input: {} } }));
    acc.apply(ev({ type: "content_block_delta", index: 3, delta: { type: "input_json_delta", partial_json: '{"payee":"acme"}' } }));
    acc.apply(ev({ type: "content_block_stop", index: 3 }));
    expect(acc.content()).toEqual([
      { type: "thinking", thinking: "Pay acme.", signature: "sig-1" },
      { type: "redacted_thinking", data: "opaque==" },
      { type: "text", text: "Paying." },
      { type: "tool_use", id: "toolu_1", name: "send_payment", input: { payee: "acme" } },
    ]);
  });
});
