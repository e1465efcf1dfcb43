import type Anthropic from "@anthropic-ai/sdk";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool } from "@dispatch-once/core";
import { z } from "zod";
import { ConversationRunner } from "../src/index.js";

/**
 * A client whose Messages API streams the given raw events, one script per request: the
 * streams no mock server sends (a block left open at message_stop, a splice without its start),
 * checked against the runner itself.
 */
export function scriptedClient(scripts: object[][]) {
  const requests: unknown[] = [];
  const client = {
    messages: {
      create: async (body: unknown) => {
        requests.push(structuredClone(body));
        const events = scripts[requests.length - 1] ?? [];
        return (async function* () {
          for (const event of events) yield event;
        })();
      },
    },
  };
  return { client: client as unknown as Anthropic, requests };
}

/** A runner over a scripted client with one keyed payment tool; `paid` is the payments API's effect log. */
export function scriptedWorld(scripts: object[][], attempts: number) {
  const paid: { payee: string; amount: number }[] = [];
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number() }),
      async run(input) {
        paid.push(input);
        return { paymentId: `pay_${paid.length}` };
      },
    }),
  ]);
  const store = new MemoryConversationStore();
  const { client, requests } = scriptedClient(scripts);
  const runner = new ConversationRunner({
    client,
    dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger() }),
    store,
    model: "claude-test",
    tools: tools.providerSchemas(),
    retry: { attempts, backoffMs: () => 1 },
  });
  return { runner, store, requests, paid };
}

/** A message_start of response `id`. */
export const start = (id: string) => ({ type: "message_start", message: { id, type: "message", role: "assistant", content: [], model: "m", stop_reason: null, stop_sequence: null, usage: { input_tokens: 1, output_tokens: 0 } } });
/** A response's message_delta with `stop_reason`, then its message_stop. */
export const end = (stop_reason: string) => [{ type: "message_delta", delta: { stop_reason, stop_sequence: null }, usage: { output_tokens: 1 } }, { type: "message_stop" }];
