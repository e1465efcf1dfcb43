import OpenAI from "openai";
import { call, lastUserText, respond, say, startMockOpenAI, type Fault, type MockOpenAI, type Script } from "@dispatch-once/mock-openai";
import { ConversationRunner as ResponsesRunner } from "@dispatch-once/openai";
import { PROVIDER_KEEP_ALIVE_MS, PROVIDER_LOG_LIMIT, bumpReworded, mockControls, type DemoStream, type StreamFault, type StreamWorld } from "./streams.js";
import type { PaymentArgs } from "./world.js";

export const OPENAI_MODEL = "gpt-demo";

/**
 * The demo's scripted model on the OpenAI Responses API, the same as the Anthropic one: "pay
 * {...}" gets one send_payment call; when `rewordsMemo(args)` is true a retried response re-words
 * its memo; the function's output gets a one-line confirmation.
 */
export function createOpenAIPaymentScript(rewordsMemo: (args: PaymentArgs) => boolean = () => true): Script {
  return (request) => {
    const last = Array.isArray(request.input) ? request.input.at(-1) : undefined;
    if (last?.type === "function_call_output") return say(`Done: ${String(last.output)}`);
    const text = lastUserText(request) ?? "";
    if (!text.startsWith("pay ")) return say("I can only send payments in this demo.");
    const args = JSON.parse(text.slice(4)) as PaymentArgs;
    return respond(call("send_payment", { ...args }, rewordsMemo(args) ? { reword: ["memo"] } : {}));
  };
}

/** The OpenAI Responses API side of the chaos run: the mock Responses API and `@dispatch-once/openai`'s runner. */
export interface OpenAIStream extends DemoStream {
  readonly kind: "openai";
  readonly mock: MockOpenAI;
}

export async function startOpenAIChaosStream(world: StreamWorld): Promise<OpenAIStream> {
  const mock = await startMockOpenAI({
    seed: world.seed,
    script: createOpenAIPaymentScript(world.rewordsMemo),
    // The chapter's gap sits before response.completed here, where it sits before message_stop there.
    timing: { betweenEventsMs: world.timing.betweenEventsMs ?? 0, beforeCompletedMs: world.timing.beforeMessageStopMs ?? 0 },
    logLimit: PROVIDER_LOG_LIMIT,
    keepAliveTimeoutMs: PROVIDER_KEEP_ALIVE_MS,
  });
  const rewordedResponses = new Map<string, number>();
  mock.onEvent((event, record) => {
    // The first event of a response: its calls are rendered (and re-worded) before it is sent.
    if (event.index !== 0) return;
    const scripted = record.scripted?.output.filter((o) => o.type === "function_call") ?? [];
    record.calls.forEach((rendered, i) => {
      const said = scripted[i];
      if (said !== undefined && said.type === "function_call") bumpReworded(rewordedResponses, rendered.arguments, said.arguments);
    });
  });
  const client = new OpenAI({ baseURL: mock.baseURL, apiKey: "demo-key", maxRetries: 0 });
  // Converted from zod once: the chaos run starts a runner per conversation.
  const providerTools = world.tools.providerSchemas();
  return {
    kind: "openai",
    mock,
    rewordedResponses,
    ...mockControls(mock, openaiFault),
    runner: (overrides = {}) =>
      new ResponsesRunner({
        client,
        dispatcher: world.dispatcher,
        store: world.store,
        model: OPENAI_MODEL,
        tools: providerTools,
        // As on the Anthropic side: conversations live for one run under run-unique ids (TURN-14).
        allowVolatileConversationStore: true,
        ...overrides,
      }),
  };
}

function openaiFault(fault: StreamFault): Fault {
  if (fault.kind === "hold") return { kind: "hold", at: fault.at === "after_call_done" ? { afterCallDone: 0 } : { beforeCompleted: true } };
  // Before any call: replaces the first output_item.added (response.created and in_progress were sent).
  const at = fault.at === "before_any_call" ? { event: 2 } : { call: 0, afterFragment: fault.afterFragment };
  return fault.cut === "error_event" ? { kind: "error_event", at, code: "server_error" } : { kind: fault.cut, at };
}
