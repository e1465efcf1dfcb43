import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger } from "@dispatch-once/core";
import { streamText, stepCountIs, tool, type ModelMessage } from "ai";
import { z } from "zod";
import { describe, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { drain, quiet } from "./helpers.js";

const ACME = { customer: "acme", amount: 12500 };
const fcItem = (callId: string, args: object | string, status = "completed") => ({ type: "function_call", id: `fc_${callId}`, call_id: callId, name: "create_invoice", arguments: typeof args === "string" ? args : JSON.stringify(args), status });
const created = { type: "response.created", response: { id: "resp_1", created_at: 1, model: "gpt-5", status: "in_progress", output: [] } };
const added = (i: number, c: string) => ({ type: "response.output_item.added", output_index: i, item: fcItem(c, "", "in_progress") });
const done = (i: number, c: string) => ({ type: "response.output_item.done", output_index: i, item: fcItem(c, ACME) });
const completed = { type: "response.completed", response: { id: "resp_1", status: "completed", incomplete_details: null, output: [], usage: { input_tokens: 1, output_tokens: 1 } } };
const sse = (events: object[]) => events.map((e, n) => `event: ${(e as {type:string}).type}\ndata: ${JSON.stringify({ ...e, sequence_number: n })}\n\n`).join("");
describe("exp", () => {
  it("dup", async () => {
    let n = 0;
    const fetch = async () => {
      n++;
      const body = n === 1 ? sse([created, added(0, "call_a"), done(0, "call_a"), added(0, "call_a"), done(0, "call_a"), completed]) : sse([created, { type: "response.output_item.added", output_index: 0, item: { type: "message", id: "msg", role: "assistant", status: "in_progress", content: [] } }, { type: "response.output_text.delta", output_index: 0, item_id: "msg", content_index: 0, delta: "ok" }, { type: "response.output_item.done", output_index: 0, item: { type: "message", id: "msg", role: "assistant", status: "completed", content: [{ type: "output_text", text: "ok", annotations: [] }] } }, completed]);
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    };
    const model = createOpenAI({ apiKey: "x", fetch: fetch as never }).responses("gpt-5");
    let runs = 0;
    const t = tool({ inputSchema: z.object({ customer: z.string(), amount: z.number() }), execute: async () => ({ invoice: `inv_${++runs}` }) });
    for (const mode of ["step", "tool-call"] as const) {
      n = 0; runs = 0;
      const once = createOnceTools({ tools: { create_invoice: t }, effects: { create_invoice: "unkeyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
      const messages: ModelMessage[] = [{ role: "user", content: "bill" }];
      const turn = once.forTurn({ conversationId: "c", messages, dispatchAt: mode });
      const parts = await drain(streamText({ model, messages, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0 }).fullStream);
      console.log(mode, runs, parts.filter((p) => p.type.startsWith("tool-") && p.type !== "tool-input-delta").map((p) => `${p.type}:${(p as any).toolCallId ?? (p as any).id}:${JSON.stringify((p as any).output ?? "")}`));
    }
  });
});
