import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner, type ConversationRunnerOptions, type FailurePosition, type SendResult } from "@dispatch-once/anthropic";
import type { CallDispatcher, ConversationStore, ToolRegistry } from "@dispatch-once/core";
import { startMockProvider, type Fault, type MockProvider, type Script, type Timing } from "@dispatch-once/mock-provider";
import type { PaymentArgs } from "./world.js";

/**
 * The stream side a demo side runs on. The chaos run and its oracle are the same on each; only
 * the mock provider, the SDK and the runner's stream provider differ, and they live behind
 * `DemoStream` (Anthropic here; OpenAI's Responses and Chat Completions APIs in openai.ts).
 */
export type StreamSide = "anthropic" | "openai" | "openai-chat";

/** How a planned stream failure ends the stream (each provider's mock maps it onto its own faults). */
export type StreamCut = "reset" | "clean_close" | "error_event";

/**
 * A fault in the demo's own terms, where the chaos run needs it on any provider:
 * - a cut replacing the first output block or item (`before_any_call`), or one during the
 *   call's argument streaming after `afterFragment` fragments (`arguments_streaming`);
 * - a hold right after the call is complete (`after_call_done`: content_block_stop,
 *   response.output_item.done) or where the finishing event goes (`before_finish`:
 *   message_stop, response.completed), released or cut from the runner's events.
 */
export type StreamFault =
  | { kind: "cut"; cut: StreamCut; at: "before_any_call" }
  | { kind: "cut"; cut: StreamCut; at: "arguments_streaming"; afterFragment: number }
  | { kind: "hold"; at: "after_call_done" | "before_finish" };

export type StreamFaultPlan = (info: { requestNumber: number; headers: Record<string, string> }) => StreamFault | undefined;

/** The runner options a demo sets per runner; the stream side supplies client, model and tools. */
export type RunnerOverrides = Partial<Omit<ConversationRunnerOptions, "client" | "model" | "tools" | "maxTokens" | "system" | "params">>;

/** What the demo needs of a runner: either stream side's `send` over the shared runner. */
export interface DemoRunner {
  send(conversationId: string, message: { id: string; content: string }): Promise<SendResult>;
}

export interface DemoStream {
  readonly kind: StreamSide;
  setFaultPlan(plan: StreamFaultPlan | undefined): void;
  /** Resolves once request `requestNumber` is held by a `hold` fault. */
  waitForHold(requestNumber: number, options?: { timeoutMs?: number }): Promise<unknown>;
  release(requestNumber: number): void;
  cutNow(requestNumber: number, kind: StreamCut): void;
  runner(overrides?: RunnerOverrides): DemoRunner;
  /** Per payment reference: responses whose send_payment memo differs from what the script said. */
  readonly rewordedResponses: Map<string, number>;
  /**
   * The position (STREAM-2) the runner reports for a cut the demo placed at `planned`: the same,
   * except where the stream cannot tell them apart (Chat Completions, see openai.ts).
   */
  reportedPosition(planned: FailurePosition): FailurePosition;
  close(): Promise<void>;
}

/** What a stream side is built over: the side's dispatcher, tools and store, and the scripted model's knobs. */
export interface StreamWorld {
  dispatcher: CallDispatcher;
  tools: ToolRegistry;
  store: ConversationStore;
  seed: string;
  /** Delays in the Anthropic mock's terms; the OpenAI side maps beforeMessageStopMs onto beforeCompletedMs. */
  timing: Partial<Timing>;
  /** Whether the model re-words this payment's memo on a retried response. */
  rewordsMemo: (args: PaymentArgs) => boolean;
}

/** Request records a mock provider keeps (the newest): enough for any one turn's diagnostics. */
export const PROVIDER_LOG_LIMIT = 256;
/**
 * The model mocks' keep-alive timeout. The SDKs' fetch drops an idle connection a little before
 * the server's announced timeout (Node's 5 s by default); a thread that stalls across both (a
 * loaded CI host) and then sends a request runs the server's timer first, and the request is lost
 * before its response starts: a stream failure no fault planned (CI saw one at
 * `before_any_call`). 65 s, as the payments server's: no connection of a run idles that long.
 */
export const PROVIDER_KEEP_ALIVE_MS = 65_000;
/**
 * Request bodies whose attempts the mock provider counts (the least recently seen forgotten): a
 * body is re-sent only by the retries of one message, and at most `--concurrency` messages of
 * a side run at once, each with a few bodies. Counted for every body, they grew with the run.
 */
const PROVIDER_ATTEMPTS_LIMIT = 4_096;

export const MODEL = "claude-demo";

/** What both mocks offer for holds and cuts, in their own request and fault types. */
interface HoldingMock<R, F> {
  setFaultPlan(plan: ((request: R, info: { requestNumber: number; headers: Record<string, string> }) => F | undefined) | undefined): void;
  waitForHold(requestNumber: number, options?: { timeoutMs?: number }): Promise<unknown>;
  release(requestNumber: number): void;
  cutNow(requestNumber: number, kind: StreamCut): void;
  close(): Promise<void>;
}

/** A mock's hold and cut controls as a DemoStream's, with the demo's faults mapped onto the mock's. */
export function mockControls<R, F>(
  mock: HoldingMock<R, F>,
  toMockFault: (fault: StreamFault) => F,
): Pick<DemoStream, "setFaultPlan" | "waitForHold" | "release" | "cutNow" | "close"> {
  return {
    setFaultPlan: (plan) =>
      mock.setFaultPlan(
        plan === undefined
          ? undefined
          : (_request, info) => {
              const fault = plan(info);
              return fault === undefined ? undefined : toMockFault(fault);
            },
      ),
    waitForHold: (requestNumber, options) => mock.waitForHold(requestNumber, options),
    release: (requestNumber) => mock.release(requestNumber),
    cutNow: (requestNumber, kind) => mock.cutNow(requestNumber, kind),
    close: () => mock.close(),
  };
}

/** Counts a re-worded memo per payment reference. */
export function bumpReworded(counts: Map<string, number>, rendered: Record<string, unknown>, scripted: Record<string, unknown>): void {
  if (rendered["memo"] === scripted["memo"]) return;
  const reference = String(rendered["reference"]);
  counts.set(reference, (counts.get(reference) ?? 0) + 1);
}

/** The Anthropic Messages API side: the mock provider and `@dispatch-once/anthropic`'s runner. */
export interface AnthropicStream extends DemoStream {
  readonly kind: "anthropic";
  readonly mock: MockProvider;
  readonly client: Anthropic;
}

export async function startAnthropicStream(world: StreamWorld, script: Script): Promise<AnthropicStream> {
  // The provider's request log keeps each request's body and every event it sent: kept whole it
  // grew with the run (hundreds of MB at 5,000 turns). The demo reads only the last few records;
  // what it counts over all of them (re-worded memos) is counted as each response starts.
  const mock = await startMockProvider({ script, timing: world.timing, seed: world.seed, logLimit: PROVIDER_LOG_LIMIT, attemptsLimit: PROVIDER_ATTEMPTS_LIMIT, keepAliveTimeoutMs: PROVIDER_KEEP_ALIVE_MS });
  const rewordedResponses = new Map<string, number>();
  mock.onEvent((event, record) => {
    // The first event of a response: its turn and rendered tool calls are set before it is sent.
    if (event.index !== 0) return;
    const scripted = record.turn?.content.filter((c) => c.type === "tool_use") ?? [];
    record.toolUses.forEach((rendered, i) => {
      const said = scripted[i];
      if (said !== undefined && said.type === "tool_use") bumpReworded(rewordedResponses, rendered.input, said.input);
    });
  });
  const client = new Anthropic({ baseURL: mock.baseURL, apiKey: "demo-key", maxRetries: 0 });
  // Converted from zod once: the chaos run starts a runner per conversation.
  const providerTools = world.tools.providerSchemas();
  return {
    kind: "anthropic",
    mock,
    client,
    rewordedResponses,
    reportedPosition: (planned) => planned,
    ...mockControls(mock, anthropicFault),
    runner: (overrides = {}) =>
      new ConversationRunner({
        client,
        dispatcher: world.dispatcher,
        store: world.store,
        model: MODEL,
        tools: providerTools,
        maxTokens: 256,
        // The demo's conversations live in this process for one run, under conversation ids
        // unique to the run: no restart can reissue a turn index whose keys the ledger holds
        // (the hazard TURN-14 refuses a volatile store for).
        allowVolatileConversationStore: true,
        ...overrides,
      }),
  };
}

function anthropicFault(fault: StreamFault): Fault {
  if (fault.kind === "hold") return { kind: "hold", at: fault.at === "after_call_done" ? { afterToolUseStop: 0 } : { beforeMessageStop: true } };
  // Before any call: replaces the first content_block_start (only message_start was sent).
  const at = fault.at === "before_any_call" ? { event: 1 } : { toolUse: 0, afterFragment: fault.afterFragment };
  return fault.cut === "error_event" ? { kind: "error_event", at, error: { type: "overloaded_error", message: "Overloaded" } } : { kind: fault.cut, at };
}
