import Anthropic from "@anthropic-ai/sdk";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry } from "@dispatch-once/core";
import { ConversationRunner } from "@dispatch-once/anthropic"; // or @dispatch-once/openai
import { dispatchTelemetry } from "@dispatch-once/opentelemetry";

export function createRunner(client: Anthropic, tools: ToolRegistry) {
  const telemetry = dispatchTelemetry(); // the global tracer and meter providers
  const dispatcher = new Dispatcher({ tools, ledger: new MemoryLedger(), onEvent: telemetry.onDispatchEvent });
  return new ConversationRunner({
    client,
    dispatcher,
    store: new MemoryConversationStore(),
    model: "claude-sonnet-5-5",
    tools: tools.providerSchemas(),
    onEvent: telemetry.onRunnerEvent,
  });
}
