// What LlamaIndex's agent does, as shipped, when the model's stream is reset: run in a child process by
// situation 3f. Prints "settled: ..." if run() settles; the scenario reads the exit code.
import { Anthropic, AnthropicSession } from "@llamaindex/anthropic";
import { agent } from "@llamaindex/workflow";
import { tool } from "llamaindex";

const session = new AnthropicSession({ apiKey: "test", baseURL: process.env.PROVIDER_URL ?? "", maxRetries: 0, defaultHeaders: { "x-mock-fault": JSON.stringify({ kind: "reset", at: { afterToolUseStop: 0 } }) } });
const llm = new Anthropic({ model: "claude-sonnet-4-5", apiKey: "test", maxRetries: 0, session });
const ran: unknown[] = [];
const sendPayment = tool((input: unknown) => (ran.push(input), "ok"), { name: "send_payment", description: "pay", parameters: { type: "object", properties: {} } as never });
const checkBalance = tool(() => "ok", { name: "check_balance", description: "read", parameters: { type: "object", properties: {} } as never });
try {
  const result = await agent({ llm, tools: [sendPayment, checkBalance], timeout: 20 }).run("pay zed 1 R3f");
  console.log(`settled: resolved ${JSON.stringify(result.data.result).slice(0, 80)}; tools ran ${ran.length}`);
} catch (error) {
  console.log(`settled: rejected ${(error as Error).message}; tools ran ${ran.length}`);
}
