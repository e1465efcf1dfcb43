import OpenAI from "openai";
import { call, lastUserText, respond, say, startMockOpenAI, type Fault, type MockOpenAI, type Script } from "@dispatch-once/mock-openai";
import type { CallDispatcher, ProviderToolSchema } from "@dispatch-once/core";
import { ChatCompletionsRunner, ConversationRunner as ResponsesRunner, type FailurePosition, type RunnerEvent } from "@dispatch-once/openai";
import { PROVIDER_KEEP_ALIVE_MS, PROVIDER_LOG_LIMIT, bumpReworded, mockControls, type DemoStream, type StreamFault, type StreamWorld } from "./streams.js";
import { CHECK_BALANCE, type PaymentArgs } from "./world.js";

export const OPENAI_MODEL = "gpt-demo";

/** The OpenAI API a stream side speaks: the Responses API, or Chat Completions. */
export type OpenAIApi = "responses" | "chat";

/**
 * The demo's scripted model on the OpenAI APIs, the same as the Anthropic one: "pay {...}" gets
 * one send_payment call; when `rewordsMemo(args)` is true a retried response re-words its memo;
 * the function outputs get a one-line confirmation. With `checksBalance` (Chat Completions) the
 * model also calls check_balance after the payment, in the same response: on that API a call is
 * final only at the next index's first fragment or at finish_reason, which also finishes the
 * response, so a lone call leaves no window between its dispatch and the finish (STREAM-20).
 */
export function createOpenAIPaymentScript(rewordsMemo: (args: PaymentArgs) => boolean = () => true, options: { checksBalance?: boolean } = {}): Script {
  return (request) => {
    const input = Array.isArray(request.input) ? request.input : [];
    if (input.at(-1)?.type === "function_call_output") {
      // Every output of the last response, in order (the payment's first).
      let first = input.length - 1;
      while (first > 0 && input[first - 1]?.type === "function_call_output") first--;
      return say(`Done: ${input.slice(first).map((o) => String(o.output)).join("; ")}`);
    }
    const text = lastUserText(request) ?? "";
    if (!text.startsWith("pay ")) return say("I can only send payments in this demo.");
    const args = JSON.parse(text.slice(4)) as PaymentArgs;
    const payment = call("send_payment", { ...args }, rewordsMemo(args) ? { reword: ["memo"] } : {});
    return options.checksBalance === true ? respond(payment, call(CHECK_BALANCE, { currency: args.currency })) : respond(payment);
  };
}

/** An OpenAI side of the chaos run: the mock (its Responses or Chat Completions endpoint) and `@dispatch-once/openai`'s runner for that API. */
export interface OpenAIStream extends DemoStream {
  readonly kind: "openai" | "openai-chat";
  readonly mock: MockOpenAI;
  /** The real `openai` SDK client over the mock (no SDK retries: the runner, or the app, retries). */
  readonly client: OpenAI;
  /** The tools as every request sends them (core's provider schemas). */
  readonly providerTools: ProviderToolSchema[];
}

export async function startOpenAIChaosStream(world: StreamWorld, api: OpenAIApi = "responses"): Promise<OpenAIStream> {
  const mock = await startMockOpenAI({
    seed: world.seed,
    script: createOpenAIPaymentScript(world.rewordsMemo, { checksBalance: api === "chat" }),
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
  const runnerOptions = {
    client,
    dispatcher: world.dispatcher,
    store: world.store,
    model: OPENAI_MODEL,
    tools: providerTools,
    // As on the Anthropic side: conversations live for one run under run-unique ids (TURN-14).
    allowVolatileConversationStore: true,
  };
  const chat = api === "chat";
  return {
    kind: chat ? "openai-chat" : "openai",
    mock,
    client,
    providerTools,
    rewordedResponses,
    reportedPosition: chat ? chatReportedPosition : (planned) => planned,
    ...mockControls(mock, (fault) => openaiFault(fault, chat)),
    runner: (overrides = {}) => (chat ? new ChatCompletionsRunner({ ...runnerOptions, ...overrides }) : new ResponsesRunner({ ...runnerOptions, ...overrides })),
  };
}

/**
 * On Chat Completions the payment is final at check_balance's first fragment, and check_balance
 * stays open until finish_reason: a cut after the payment resolved and before finish_reason (the
 * plan's after_dispatch_before_stop, inside the window) meets an open call, which STREAM-2's first
 * matching row names arguments_streaming. The runner reports that; the demo counts it under the plan's name.
 */
function chatReportedPosition(planned: FailurePosition): FailurePosition {
  return planned === "after_dispatch_before_stop" ? "arguments_streaming" : planned;
}

/** The demo's faults on the mock's OpenAI streams; the positions are the same marks on both APIs. */
function openaiFault(fault: StreamFault, chat: boolean): Fault {
  // After the payment is final: after its output_item.done, or check_balance's first fragment on Chat Completions.
  if (fault.kind === "hold") return { kind: "hold", at: fault.at === "after_call_done" ? { afterCallDone: 0 } : { beforeCompleted: true } };
  // Before any call: replaces the first output_item.added (response.created and in_progress were
  // sent), or the first tool_calls chunk (the role chunk was sent).
  const at = fault.at === "before_any_call" ? { event: chat ? 1 : 2 } : { call: 0, afterFragment: fault.afterFragment };
  return fault.cut === "error_event" ? { kind: "error_event", at, code: "server_error" } : { kind: fault.cut, at };
}

type ChatMessage = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** What the naive loop needs of the incident: its retries, its request headers, and where its events go. */
export interface NaiveChatLoopOptions {
  attempts: number;
  backoffMs: (retry: number) => number;
  requestHeaders: (info: { attempt: number; turnIndex: number }) => Record<string, string>;
  /** The runner's event shapes, so the incident's timeline reads the naive loop as it reads a runner. */
  onEvent: (event: RunnerEvent) => void;
}

/**
 * The naive app on Chat Completions, as one writes it on the raw SDK: a loop over
 * `client.chat.completions.create({ stream: true })` that dispatches each call when it is final
 * (at the next index's first fragment, or at finish_reason) and, when the stream is cut, sends the
 * same request again. Its dispatcher runs every call it is handed (the side's
 * UnguardedDispatcher: the key is the call_ id), so the retry's call, under a new id, pays again.
 * It keeps its conversation in memory; the chaos run's naive side is the runner with that
 * dispatcher instead, whose store and records the misreport oracle reads.
 */
export async function naiveChatLoop(
  stream: OpenAIStream,
  dispatcher: CallDispatcher,
  conversationId: string,
  message: { id: string; content: string },
  options: NaiveChatLoopOptions,
): Promise<void> {
  const tools = stream.providerTools.map((t) => ({ type: "function" as const, function: { name: t.name, description: t.description ?? "", parameters: t.input_schema } }));
  const messages: ChatMessage[] = [{ role: "user", content: message.content }];
  const emit = (turnIndex: number, attempt: number, event: DistributiveOmit<RunnerEvent, "at" | "conversationId" | "turnIndex" | "attempt">) =>
    options.onEvent({ ...event, at: Date.now(), conversationId, turnIndex, attempt } as RunnerEvent);
  for (let turnIndex = 0; turnIndex < 2; turnIndex++) {
    for (let attempt = 1; ; attempt++) {
      emit(turnIndex, attempt, { type: "attempt_started", messageId: message.id });
      const turn = dispatcher.turn({ conversationId, turnIndex });
      const calls: { id: string; name: string; args: string; state: "open" | "dispatched" | "resolved"; content?: string }[] = [];
      const dispatches: Promise<void>[] = [];
      const dispatch = (index: number) => {
        const c = calls[index]!;
        c.state = "dispatched";
        emit(turnIndex, attempt, { type: "call_complete", callId: c.id, name: c.name, index });
        dispatches.push(
          turn.dispatch({ name: c.name, input: JSON.parse(c.args) as unknown, callId: c.id }).then(
            (outcome) => {
              c.state = "resolved";
              c.content = outcome.resultJson;
              emit(turnIndex, attempt, { type: "call_resolved", callId: c.id, name: c.name, key: outcome.key, replayed: outcome.replayed, ok: true });
            },
            (error: unknown) => {
              c.state = "resolved";
              c.content = JSON.stringify({ error: { message: String(error) } });
              emit(turnIndex, attempt, { type: "call_resolved", callId: c.id, name: c.name, ok: false, error: String(error) });
            },
          ),
        );
      };
      let text = "";
      let finished = false;
      try {
        const chunks = await stream.client.chat.completions.create(
          { model: OPENAI_MODEL, messages, tools, stream: true },
          { headers: options.requestHeaders({ attempt, turnIndex }) },
        );
        for await (const chunk of chunks) {
          const choice = chunk.choices[0];
          text += choice?.delta.content ?? "";
          for (const fragment of choice?.delta.tool_calls ?? []) {
            if (calls[fragment.index] === undefined) {
              // A higher index makes the call before it final: dispatch it now.
              if (fragment.index > 0) dispatch(fragment.index - 1);
              calls[fragment.index] = { id: fragment.id ?? "", name: fragment.function?.name ?? "", args: "", state: "open" };
            }
            calls[fragment.index]!.args += fragment.function?.arguments ?? "";
          }
          if (choice?.finish_reason) {
            if (calls.length > 0) dispatch(calls.length - 1);
            finished = true;
          }
        }
        if (!finished) throw new Error("the stream ended without finish_reason");
      } catch (error) {
        // STREAM-2's order, as the runner reads it: a call still running, an open call, a resolved one.
        const position = calls.some((c) => c.state === "dispatched") ? "during_dispatch" : calls.some((c) => c.state === "open") ? "arguments_streaming" : calls.length > 0 ? "after_dispatch_before_stop" : "before_any_call";
        emit(turnIndex, attempt, { type: "stream_failed", position, error: String(error) });
      }
      await Promise.all(dispatches);
      if (finished) {
        // What a naive app keeps: the assistant message and each call's result, whatever the ledger would say.
        if (calls.length === 0) {
          messages.push({ role: "assistant", content: text });
        } else {
          messages.push({ role: "assistant", content: null, tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args } })) });
          for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: c.content ?? "" });
        }
        emit(turnIndex, attempt, { type: "turn_committed", committed: true, stopReason: calls.length > 0 ? "tool_calls" : "stop" });
        break;
      }
      if (attempt >= options.attempts) return;
      const delayMs = options.backoffMs(attempt);
      emit(turnIndex, attempt, { type: "retry_scheduled", delayMs });
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
