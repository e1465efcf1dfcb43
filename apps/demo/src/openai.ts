import OpenAI from "openai";
import { MemoryConversationStore } from "@dispatch-once/core";
import { call, lastUserText, respond, say, startMockOpenAI, type MockOpenAI, type Script } from "@dispatch-once/mock-openai";
import { ConversationRunner as ResponsesRunner, type ConversationRunnerOptions as ResponsesRunnerOptions } from "@dispatch-once/openai";
import type { Side } from "./world.js";

export const OPENAI_MODEL = "gpt-demo";

/**
 * The demo's scripted model on the OpenAI Responses API, the same as the Anthropic one: "pay
 * {...}" gets one send_payment call whose memo a retried response re-words; the function's output
 * gets a one-line confirmation.
 */
export const openaiPaymentScript: Script = (request) => {
  const last = Array.isArray(request.input) ? request.input.at(-1) : undefined;
  if (last?.type === "function_call_output") return say(`Done: ${String(last.output)}`);
  const text = lastUserText(request) ?? "";
  if (!text.startsWith("pay ")) return say("I can only send payments in this demo.");
  return respond(call("send_payment", JSON.parse(text.slice(4)) as Record<string, unknown>, { reword: ["memo"] }));
};

/**
 * The OpenAI stream side of one demo side: its own mock Responses API and the OpenAI runner over
 * the side's dispatcher (naive or guarded) and tools, so the payments API's effect log counts
 * the same way as on the Anthropic side.
 *
 * The Responses mock cannot hold a stream open at a point and cut it on request, as the Anthropic
 * mock can; so the client's fetch can: `holdNext()` marks the next response, and `cutHeld()`
 * errors its body the way a reset connection does (the SDK's iterator throws
 * `TypeError('terminated')`). The incident cuts once the payment was accepted, by construction.
 */
export async function startOpenAIStream(side: Side, options: { seed: string; gapMs: number }): Promise<{
  mock: MockOpenAI;
  /** The next response's body is held for `cutHeld()`. */
  holdNext(): void;
  /** Cut the held response's body now (a reset connection as the SDK sees it). */
  cutHeld(): void;
  runner(overrides?: Partial<ResponsesRunnerOptions>): ResponsesRunner;
}> {
  const mock = await startMockOpenAI({ seed: options.seed, timing: { beforeCompletedMs: options.gapMs }, script: openaiPaymentScript });
  let holdNext = false;
  let cut: (() => void) | undefined;
  const cuttableFetch: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (!holdNext || response.body === null) return response;
    holdNext = false;
    const reader = response.body.getReader();
    const cutOff = new Promise<never>((_resolve, reject) => {
      cut = () => reject(new TypeError("terminated", { cause: new Error("demo: connection reset after the payment was accepted") }));
    });
    cutOff.catch(() => undefined);
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const chunk = await Promise.race([reader.read(), cutOff]);
          if (chunk.done) controller.close();
          else controller.enqueue(chunk.value);
        } catch (error) {
          controller.error(error);
          await reader.cancel().catch(() => undefined);
        }
      },
      cancel: (reason) => reader.cancel(reason),
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "demo-key", maxRetries: 0, fetch: cuttableFetch });
  const store = new MemoryConversationStore();
  return {
    mock,
    holdNext: () => {
      holdNext = true;
    },
    cutHeld: () => cut?.(),
    runner: (overrides = {}) =>
      new ResponsesRunner({
        client,
        dispatcher: side.dispatcher,
        store,
        model: OPENAI_MODEL,
        tools: side.tools.providerSchemas(),
        // As on the Anthropic side: conversations live for one run under run-unique ids (TURN-14).
        allowVolatileConversationStore: true,
        ...overrides,
      }),
  };
}
