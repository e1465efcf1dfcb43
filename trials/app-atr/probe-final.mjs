import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { MemoryLedger } from "@dispatch-once/core";
import { createOnceToolRunner } from "@dispatch-once/anthropic";
import { scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { z } from "zod";
const provider = await startMockProvider({ script: scriptFromPlans({ "pay acme": [turn(toolUse("send_payment", { payee: "acme" }))] }) });
const t = betaZodTool({ name: "send_payment", description: "pay", inputSchema: z.object({ payee: z.string() }), run: async () => "ok" });
const once = createOnceToolRunner({ tools: [t], effects: { send_payment: "keyed_write" }, ledger: new MemoryLedger() });
const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "x", maxRetries: 0 });
for (const [stream, max] of [[true, undefined], [false, undefined], [true, 1]]) {
  const runner = once.toolRunner(client, { model: "claude-sonnet-5-5", max_tokens: 100, messages: [{ role: "user", content: "pay acme" }], stream, ...(max ? { max_iterations: max } : {}) }, { conversationId: `probe-${stream}-${max}` });
  const final = await runner.runUntilDone();
  console.log(`stream ${stream} max_iterations ${max}: roles ${runner.params.messages.map((m) => m.role + ":" + (typeof m.content === "string" ? "text" : m.content.map((b) => b.type).join("+"))).join(", ")}; final stop_reason ${final.stop_reason}`);
}
await provider.close();
