/**
 * DISPATCH-18 through the AI SDK wrapper (AISDK-2): a wrapped keyed payment whose downstream
 * answers only when the test says so, under a run timeout of 100 ms, in a real streamText over
 * the Responses wire (a scripted fetch).
 */
import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger, effectOf, retryableOf } from "@dispatch-once/core";
import { stepCountIs, streamText, tool, type ModelMessage } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf } from "../src/index.js";
import { drain, outputsOf } from "./helpers.js";

const PAY = { payee: "acme", amount: 5 };
const item = (callId: string, status: string, args: string) => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name: "pay", arguments: args, status });
const completed = { type: "response.completed", response: { id: "resp_1", status: "completed", incomplete_details: null, output: [], usage: { input_tokens: 1, output_tokens: 1 } } };
const text = (t: string) => [
  { type: "response.output_item.added", output_index: 0, item: { type: "message", id: "msg_1", role: "assistant", status: "in_progress", content: [] } },
  { type: "response.output_text.delta", output_index: 0, item_id: "msg_1", content_index: 0, delta: t },
  { type: "response.output_item.done", output_index: 0, item: { type: "message", id: "msg_1", role: "assistant", status: "completed", content: [{ type: "output_text", text: t, annotations: [] }] } },
];
const sse = (events: object[]) => events.map((e, n) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify({ ...e, sequence_number: n })}\n\n`).join("");

/** A model whose first request of each streamText calls pay (call id `callId`), the next answers text. */
function model(callId: string) {
  let n = 0;
  const fetch = async () => {
    n += 1;
    const events =
      n === 1
        ? [{ type: "response.created", response: { id: "resp_1", created_at: 1, model: "gpt-5", status: "in_progress", output: [] } }, { type: "response.output_item.added", output_index: 0, item: item(callId, "in_progress", "") }, { type: "response.output_item.done", output_index: 0, item: item(callId, "completed", JSON.stringify(PAY)) }, completed]
        : [...text("Done."), completed];
    return new Response(sse(events), { headers: { "content-type": "text/event-stream" } });
  };
  return createOpenAI({ apiKey: "test", fetch: fetch as typeof globalThis.fetch }).responses("gpt-5");
}

async function eventually(check: () => boolean, what: string): Promise<void> {
  const until = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > until) throw new Error(`not within 20 s: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("AISDK-2, DISPATCH-18: a wrapped execute past its bound", () => {
  it("AISDK-2 DISPATCH-18 the stream's tool-error part is in_flight_elsewhere (runTimeoutMs, possibly, same message), the execute's abortSignal aborts; the regenerate after the late completion gets its result, paid once", async () => {
    let answer!: () => void;
    const downstream = new Promise<void>((r) => (answer = r));
    const counts = { runs: 0, payments: 0 };
    const signals: AbortSignal[] = [];
    const pay = tool({
      inputSchema: z.object({ payee: z.string(), amount: z.number() }),
      execute: async (_input, options) => {
        counts.runs += 1;
        signals.push(options.abortSignal!);
        await downstream; // ignores the signal
        counts.payments += 1;
        return { paid: true, key: dispatchOnceOf(options)!.idempotencyKey };
      },
    });
    const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger: new MemoryLedger(), dispatcher: { runTimeoutMs: 100, waitMs: 5_000, pollMs: 5, logger: { warn: () => {} } } });
    const messages: ModelMessage[] = [{ role: "user", content: "pay acme $5" }];
    const first = once.forTurn({ conversationId: "chat_rt", messages });
    const parts = await drain(streamText({ model: model("call_1"), messages, tools: first.tools, stopWhen: stepCountIs(2), maxRetries: 0 }).fullStream);
    const toolError = parts.find((p) => p.type === "tool-error") as { error: unknown } | undefined;
    expect(toolError?.error).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 100 });
    expect(effectOf(toolError?.error)).toBe("possibly");
    expect(retryableOf(toolError?.error)).toBe("same_message");
    expect(signals[0]?.aborted).toBe(true);
    answer();
    await eventually(() => counts.payments === 1, "the late run paid");
    // The regenerate: the same messages, so the same turn and key; it waits on the row until the late record lands.
    const again = once.forTurn({ conversationId: "chat_rt", messages });
    const after = await drain(streamText({ model: model("call_2"), messages, tools: again.tools, stopWhen: stepCountIs(2), maxRetries: 0 }).fullStream);
    expect(outputsOf(after)).toEqual([{ paid: true, key: expect.any(String) as string }]);
    expect(again.outcomeOf("call_2")).toMatchObject({ replayed: true });
    expect(counts).toEqual({ runs: 1, payments: 1 });
  });
});
