// A LangGraph.js payments agent whose payments happen once: `npx tsx examples/agent.ts`.
// The model here is scripted so the example runs offline; in an app it is e.g.
// `new ChatAnthropic({ model, streaming: true, maxRetries: 0 }).bindTools(tools)`.
import { z } from "zod";
import { AIMessage, HumanMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { Annotation, END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { Dispatcher, MemoryLedger, defineTool } from "@dispatch-once/core";
import { commitAssistantMessage, createOnceToolsNode, onceRetryOn, onceTurns } from "@dispatch-once/langgraph";

export async function main(): Promise<{ payments: number; answer: string }> {
  const paid = new Map<string, string>(); // the payments API: one payment per Idempotency-Key
  const sendPayment = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), reference: z.string() }),
    async run(args, { idempotencyKey }) {
      if (!paid.has(idempotencyKey)) paid.set(idempotencyKey, `pay_${paid.size + 1}`);
      return { id: paid.get(idempotencyKey)!, ...args };
    },
  });
  const dispatcher = new Dispatcher({ tools: [sendPayment], ledger: new MemoryLedger() });

  const model = {
    async invoke(messages: BaseMessage[]): Promise<AIMessage> {
      const last = messages.at(-1);
      if (last !== undefined && ToolMessage.isInstance(last)) {
        return new AIMessage({ content: `Paid: ${String(last.content)}`, additional_kwargs: { stop_reason: "end_turn" } });
      }
      const args = { payee: "acme", amount: 1250, reference: "INV-1" };
      return new AIMessage({ content: "", tool_calls: [{ id: "toolu_1", name: "send_payment", args }], additional_kwargs: { stop_reason: "tool_use" } });
    },
  };

  // The turn counter is a channel of the graph's state, written only with the assistant message.
  const State = Annotation.Root({ ...MessagesAnnotation.spec, onceTurns });
  const retryPolicy = { maxAttempts: 3, retryOn: onceRetryOn };
  const graph = new StateGraph(State)
    // Throws stream_incomplete for a response without a stop reason (the retry calls the model
    // again); otherwise commits the message and onceTurns + 1 in one step.
    .addNode("agent", async (state: typeof State.State) => commitAssistantMessage(state, await model.invoke(state.messages)), { retryPolicy })
    .addNode("tools", createOnceToolsNode({ dispatcher }), { retryPolicy })
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (state: typeof State.State) => ((state.messages.at(-1) as AIMessage | undefined)?.tool_calls?.length ? "tools" : END), ["tools", END])
    .addEdge("tools", "agent")
    .compile({ checkpointer: new MemorySaver() });

  // The thread id is the conversation id of every call's key.
  const state = await graph.invoke({ messages: [new HumanMessage("pay acme 1250 for INV-1")] }, { configurable: { thread_id: "thread-1" } });
  return { payments: paid.size, answer: String(state.messages.at(-1)?.content) };
}

if (import.meta.url === `file://${process.argv[1]}`) console.log(await main());
