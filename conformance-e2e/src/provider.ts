import Anthropic from "@anthropic-ai/sdk";
import type { AnthropicBedrock } from "@anthropic-ai/bedrock-sdk";
import type { AnthropicVertex } from "@anthropic-ai/vertex-sdk";
import { ConversationRunner as AnthropicRunner } from "@dispatch-once/anthropic";
import type { JsonValue, ProviderToolSchema } from "@dispatch-once/core";
import {
  CHAT_DIALECTS,
  call,
  lastUserText as openAIUserText,
  reasoning,
  respond,
  say,
  scriptFromPlans as openAIScript,
  startMockOpenAI,
  text as textItem,
  responsesView,
  type ChatDialect,
  type Fault as OpenAIFault,
  type FaultPosition as OpenAIPosition,
  type MockOpenAI,
  type Script as OpenAIMockScript,
  type ScriptedResponse,
} from "@dispatch-once/mock-openai";
import {
  lastUserPromptIndex,
  lastUserText as anthropicUserText,
  say as anthropicSay,
  scriptFromPlans as anthropicScript,
  startMockProvider,
  toolUse,
  turn,
  type Fault as AnthropicFault,
  type FaultPosition as AnthropicPosition,
} from "@dispatch-once/mock-provider";
import { ChatCompletionsRunner, ConversationRunner as OpenAIRunner } from "@dispatch-once/openai";
import type { SendResult, TurnRunnerOptions } from "@dispatch-once/runner";
import OpenAI from "openai";
import { fitCut, splicedCalls, type PlannedCall, type SplicePlan, type StreamCut } from "./scenario.js";

/**
 * The stream sides the kit's turn runner drives (their planted bugs replace the runner's parts):
 * the Messages API, the Responses API, and Chat Completions (`"openai-chat"`, the one API most
 * OpenAI-compatible servers speak) over apps/mock-openai's `/v1/chat/completions`.
 */
export type RunnerProviderName = "anthropic" | "openai" | "openai-chat";

/**
 * The runner's stream sides the kit's planted-bug suites run on, each planted test once per side.
 * `"openai-chat"` is not among them (CI's budget): its certification and its planted bugs are
 * test/e2e.test.ts's and test/e2e-chat-planted.test.ts's, and four record suites run on it too
 * (test/chat-sides.ts `WITH_CHAT`); every other planted suite was run on it once (README).
 */
export const RUNNER_PROVIDERS = ["anthropic", "openai"] as const satisfies readonly RunnerProviderName[];

/** The stream sides the end-to-end level runs on: the runner's, and an AI SDK app's (ai-sdk-case.ts). */
export type ProviderName = RunnerProviderName | "ai-sdk";

export const PROVIDERS: readonly ProviderName[] = [...RUNNER_PROVIDERS, "openai-chat", "ai-sdk"];

/** A committed call as the oracle reads it, whatever the provider's wire shape. */
export interface CommittedCall {
  /** The provider's call id (`tool_use.id`, `function_call.call_id`). */
  id: string;
  name: string;
  input: unknown;
}

/** A committed answer to a call: the text the model was given and whether it is an error. */
export interface CommittedResult {
  id: string;
  text: string;
  isError: boolean;
}

/**
 * How a provider's committed log reads, so that the oracle stays provider-neutral: which log
 * entries are the model's turns, which calls they made, which answers the next entry gave.
 */
export interface TranscriptReader {
  isAssistant(entry: JsonValue | undefined): boolean;
  /**
   * The entry's items with their positions in it (content blocks, output items), `reasoning` for
   * those the provider requires back (thinking blocks, reasoning items: STREAM-15).
   */
  items?(entry: JsonValue | undefined): { index: number; reasoning: boolean; item: unknown }[];
  calls(entry: JsonValue | undefined): CommittedCall[];
  results(entry: JsonValue | undefined): CommittedResult[];
}

/** A response the mock gave: the user text it answered and the calls it made, as rendered. */
export interface ModelResponse {
  text: string;
  calls: { name: string; input: unknown }[];
  /** Its calls' ids (`toolu_…`, `call_…`), in order: the mocks mint them per response, so no other response carries one. */
  callIds: string[];
  /** Set on a response a proxy spliced into another's body (its shape), not the body's own. */
  spliced?: SplicePlan["shape"];
  /** Set on a body's own response one of whose calls (this number) a relay delivered again whole, at the next free position (SplicePlan `repeat`). */
  repeatedCall?: number;
  /**
   * The reasoning the response's stream delivered whole (its thinking blocks, stopped; its reasoning
   * items, done), with their positions: what a turn committing this response must keep, as
   * delivered and in place (STREAM-15).
   */
  reasoning?: { index: number; item: unknown }[];
  /** Reasoning its stream began and the cut left unstopped (a thinking block whose text or signature came): a cut attempt's, for a verdict. */
  reasoningCut?: unknown[];
  /**
   * The message items its stream delivered whole (done), with their positions (the Responses API's
   * side): beside a reasoning item a committing turn keeps each as delivered, its id included (STREAM-15).
   */
  messages?: { index: number; item: unknown }[];
  /** Which request carried it (the mock's request number) and the attempt the mock counted, for a verdict. */
  request?: { number: number; attempt: number };
  /** Its stream was cut inside its thinking block or reasoning item (started, not stopped or done): the attempt keeps nothing of it. */
  cutInReasoning?: boolean;
}

/** A splice that fell on a request: the response's call it followed and the spliced response's calls. */
export interface SpliceFired {
  text: string;
  /** The tool loop's step whose request it fell on: 0 the first turn's, 1 the follow-up's. */
  step: number;
  attempt: number;
  plan: SplicePlan;
  afterCall: number;
  calls: PlannedCall[];
}

/** What a worker needs of a runner: the runner's send, whichever stream side it is. */
export interface KitRunner {
  send(conversationId: string, message: { id: string; content: string }): Promise<SendResult>;
}

export interface RunnerWiring extends TurnRunnerOptions {
  tools: ProviderToolSchema[];
  /** The worker's mortal fetch: every stream it opens is cut when it dies. */
  fetch: typeof fetch;
}

/** One mock provider of the world and how the kit drives it. */
export interface ProviderSide {
  name: RunnerProviderName;
  /**
   * Scripts the model: `plans` maps a user text to the calls the model makes for it, one list per
   * response of its tool loop (step 0 answers the user's text, step n the tool results of step
   * n - 1; once the steps are used up the model answers with text); `cutFor` gives the cut of the
   * `attempt`-th (1-based) request for that step of that user text.
   *
   * `reruns` maps a user text to the calls the model makes when it answers a RE-RUN of a step
   * (a request the provider has seen before, its attempt 2 on: a retry, a re-send, a take-over)
   * differently, by step (a step left undefined is answered as in `plans`): a real model does not
   * repeat itself. A cut of such a response is fitted to its calls (`fitCut`); `onRerun` hears of
   * every such response.
   *
   * `splices` maps a user text to a proxy's splice into one of its responses, by step (the
   * SplicePlan's attempt of that step's request, when `cutFor` gives that attempt no cut): after
   * the response's call `afterCall` completed, the body carries the model's answer to the same
   * request again (a re-run's calls, `reruns`, reordered as the plan says); `onSplice` hears of each.
   */
  program(
    plans: Map<string, PlannedCall[][]>,
    cutFor: (text: string, attempt: number, step: number) => StreamCut | undefined,
    reruns?: Map<string, (PlannedCall[] | undefined)[]>,
    onRerun?: (text: string, step: number, calls: PlannedCall[]) => void,
    splices?: Map<string, (SplicePlan | undefined)[]>,
    onSplice?: (fired: SpliceFired) => void,
  ): void;
  /** Every response the mock rendered since the last `program()`, spliced ones included. */
  responses(): ModelResponse[];
  /**
   * Loads what the case `program()` drew needs before a worker is built (the Anthropic side: the
   * client platform's SDK, imported on first use), so that `runner()` stays synchronous.
   */
  ready?(): Promise<void>;
  /** What the case ran over, for its timeline (the Anthropic side: the client platform). */
  platform?(): string;
  /** The case's counts of the side's own (the Anthropic side: its platform, its requests by route), read once the case is done. */
  caseStats?(): Record<string, number>;
  runner(wiring: RunnerWiring): KitRunner;
  transcript: TranscriptReader;
  close(): Promise<void>;
}

/** How many responses with calls the plan of a user text has (0 when there is none). */
const stepsOf = (plans: Map<string, PlannedCall[][]>, text: string | undefined): number => (text === undefined ? 0 : (plans.get(text)?.length ?? 0));

/**
 * The calls as the model makes them for a request that offers the payment tool under a new release's
 * name (world.ts DEPLOYED_PAYMENT `rename`): the only name it is offered, so the one it calls.
 */
function asOffered(request: object, calls: PlannedCall[]): PlannedCall[] {
  // A Responses tool names itself (`name`), a Chat Completions one in its `function` (`function.name`).
  const tools = (request as { tools?: { name?: unknown; function?: { name?: unknown } }[] }).tools;
  const named = (name: string) => Array.isArray(tools) && tools.some((t) => (t?.name ?? t?.function?.name) === name);
  if (!named(RENAMED_PAYMENT) || named("send_payment")) return calls;
  return calls.map((c) => (c.tool === "send_payment" ? { ...c, tool: RENAMED_PAYMENT as PlannedCall["tool"] } : c));
}
/** The payment tool's name after a rename (world.ts DEPLOYED_PAYMENT; not imported: world.ts imports this module). */
const RENAMED_PAYMENT = "pay";

/** The send_payment memo is free text: a retried model re-words it (IDENT-1). */
const rewordOf = (c: PlannedCall): { reword?: string[] } => (c.tool === "send_payment" || (c.tool as string) === RENAMED_PAYMENT ? { reword: ["memo"] } : {});

/**
 * Which requests get a re-run's different response: the fault plan (which the mocks consult
 * before the script, with the request's attempt number) marks the request object, and the script
 * (handed the same object) reads the mark.
 */
function rerunMarks(
  reruns: Map<string, (PlannedCall[] | undefined)[]> | undefined,
  onRerun: ((text: string, step: number, calls: PlannedCall[]) => void) | undefined,
) {
  const marked = new WeakMap<object, PlannedCall[]>();
  return {
    /** Marks the request when it re-runs a step the model answers differently; the calls it makes, if so. */
    mark(request: object, text: string | undefined, step: number, attempt: number): PlannedCall[] | undefined {
      const calls = text === undefined || attempt < 2 ? undefined : reruns?.get(text)?.[step];
      if (calls === undefined) return undefined;
      marked.set(request, calls);
      onRerun?.(text!, step, calls);
      return calls;
    },
    of: (request: object): PlannedCall[] | undefined => marked.get(request),
  };
}

/** The sentence a spliced response without its start begins with: on the call's position, another type (STREAM-17). */
const SPLICE_LEAD = "Paying now.";

/** A splice fault's shape (SplicePlan): with its own start, without it led by a sentence, or bare. */
const spliceShape = (start: boolean, lead: string | undefined): SplicePlan["shape"] => (start ? "restart" : lead === undefined ? "headless_bare" : "headless");

/**
 * Which requests carry a splice (SplicePlan): the fault plan decides it for a first-turn request
 * with no cut, and marks the request; the mock then asks the script twice for that request object,
 * first for the body's own response, then for the spliced one, which `script` answers from the mark.
 */
function spliceMarks(splices: Map<string, (SplicePlan | undefined)[]> | undefined, onSplice: ((fired: SpliceFired) => void) | undefined) {
  const spliced = new WeakMap<object, PlannedCall[]>();
  const answered = new WeakSet<object>();
  return {
    /**
     * The splice of this request when one falls on it: the response's calls (`calls`) and the
     * calls of the model's answer to the request sent again (`again`); the position is after call
     * `afterCall` modulo the response's calls, none when it makes none.
     */
    mark(request: object, text: string | undefined, step: number, attempt: number, calls: PlannedCall[], again: PlannedCall[]): { afterCall: number; plan: SplicePlan } | undefined {
      const plan = text === undefined ? undefined : splices?.get(text)?.[step];
      if (plan === undefined || plan.attempt !== attempt || calls.length === 0) return undefined;
      const afterCall = plan.afterCall % calls.length;
      const second = splicedCalls(again, plan);
      spliced.set(request, second);
      onSplice?.({ text: text!, step, attempt, plan, afterCall, calls: second });
      return { afterCall, plan };
    },
    /** The spliced response's calls when the script is asked again for a marked request. */
    second(request: object): PlannedCall[] | undefined {
      if (!answered.has(request)) {
        answered.add(request);
        return undefined;
      }
      return spliced.get(request);
    },
  };
}

type Obj = Record<string, unknown>;

/**
 * The thinking blocks a Messages stream delivered whole (started, their deltas, stopped), in
 * order, with their content indexes: a spliced response's come after the body's own.
 */
function thinkingBlocks(events: readonly { type: string; data: Record<string, unknown> }[]): { done: { index: number; item: unknown }[]; cut: unknown[] } {
  const open = new Map<number, Obj>();
  const done: { index: number; item: unknown }[] = [];
  for (const { type, data } of events) {
    const index = data.index as number;
    const block = data.content_block as Obj | undefined;
    const delta = data.delta as Obj | undefined;
    if (type === "content_block_start" && block?.type === "thinking") open.set(index, { type: "thinking", thinking: str(block.thinking), signature: str(block.signature) });
    else if (type === "content_block_start" && block?.type === "redacted_thinking") open.set(index, { type: "redacted_thinking", data: str(block.data) });
    else if (type === "content_block_start") open.delete(index);
    else if (type === "content_block_delta" && delta?.type === "thinking_delta" && open.has(index)) open.get(index)!.thinking += str(delta.thinking);
    else if (type === "content_block_delta" && delta?.type === "signature_delta" && open.has(index)) open.get(index)!.signature += str(delta.signature);
    else if (type === "content_block_stop" && open.has(index)) {
      done.push({ index, item: open.get(index)! });
      open.delete(index);
    }
  }
  return { done, cut: [...open.values()] };
}
const asArray = (v: unknown): Obj[] => (Array.isArray(v) ? (v as Obj[]) : []);
const str = (v: unknown): string => (typeof v === "string" ? v : "");

// ---- Anthropic Messages API (apps/mock-provider) ---------------------------------------------

export function anthropicPosition(cut: StreamCut): AnthropicPosition {
  switch (cut.at) {
    case "event":
      return { event: cut.event };
    case "arguments":
      return { toolUse: cut.toolUse, afterFragment: cut.afterFragment };
    case "after_call":
      return { afterToolUseStop: cut.toolUse };
    case "before_message_stop":
      return { beforeMessageStop: true };
  }
}

const anthropicBlocks = (entry: JsonValue | undefined): Obj[] => asArray((entry as { content?: unknown } | undefined)?.content);

const anthropicTranscript: TranscriptReader = {
  isAssistant: (entry) => (entry as { role?: unknown } | undefined)?.role === "assistant",
  items: (entry) => anthropicBlocks(entry).map((item, index) => ({ index, reasoning: item.type === "thinking" || item.type === "redacted_thinking", item })),
  calls: (entry) =>
    anthropicBlocks(entry)
      .filter((b) => b.type === "tool_use")
      .map((b) => ({ id: str(b.id), name: str(b.name), input: b.input })),
  results: (entry) =>
    anthropicBlocks(entry)
      .filter((b) => b.type === "tool_result")
      .map((b) => ({ id: str(b.tool_use_id), text: typeof b.content === "string" ? b.content : JSON.stringify(b.content), isError: b.is_error === true })),
};

/**
 * The client a case's workers reach Claude with (provider `"anthropic"`): the Messages API
 * (`Anthropic`), Amazon Bedrock (`AnthropicBedrock` of `@anthropic-ai/bedrock-sdk`, the AWS
 * event-stream framing, in-stream errors as `exception` messages) or Google Vertex AI
 * (`AnthropicVertex` of `@anthropic-ai/vertex-sdk`, `:streamRawPredict`), each at apps/mock-provider's
 * route for it. The three share the mock's scripts and faults: a fault is placed by event index
 * before the route encodes the stream, so it lands at the same point of the response on each.
 */
export type AnthropicPlatform = "messages" | "bedrock" | "vertex";

export const ANTHROPIC_PLATFORMS: readonly AnthropicPlatform[] = ["messages", "bedrock", "vertex"];

/**
 * The client platform a scenario runs on (provider `"anthropic"`), drawn from its plans as
 * `chatDialectOf` draws a dialect (with a salt of its own): a seed and a replayed path draw the
 * same one, and every kind of scenario is drawn on each platform, none restricted (no kit
 * facility depends on the route: splices and cuts are placed among the rendered events, and the
 * kit reads each request's messages, which every route's body carries).
 */
export function anthropicPlatformOf(plans: Map<string, PlannedCall[][]>): AnthropicPlatform {
  return ANTHROPIC_PLATFORMS[planHash(plans, "anthropic platform:") % ANTHROPIC_PLATFORMS.length]!;
}

/** What a platform's runs are said as (the case's timeline). */
const PLATFORM_NAMES: Record<AnthropicPlatform, string> = {
  messages: "the Messages API (Anthropic)",
  bedrock: "Amazon Bedrock (AnthropicBedrock, @anthropic-ai/bedrock-sdk)",
  vertex: "Google Vertex AI (AnthropicVertex, @anthropic-ai/vertex-sdk)",
};

/** The platform SDKs' clients, imported on first use (each costs a few hundred ms of CPU to import): a process whose scenarios draw none imports none. */
const platformClients: { bedrock?: typeof AnthropicBedrock; vertex?: typeof AnthropicVertex } = {};

/**
 * How each platform's SDK is imported, and the cache of what was. Not exported from the package:
 * the kit's own tests stand in an install without the optional peer here (a module mock cannot,
 * once another test file in the same process imported the SDK into the shared module graph).
 */
// Typed without the SDKs' own types: this module's declarations ship with the package, and an
// install without the optional peers must still type-check against them (pack-install's tsc).
export const platformImports: { bedrock: () => Promise<unknown>; vertex: () => Promise<unknown>; loaded: { bedrock?: unknown; vertex?: unknown } } = {
  bedrock: async () => (await import("@anthropic-ai/bedrock-sdk")).AnthropicBedrock,
  vertex: async () => (await import("@anthropic-ai/vertex-sdk")).AnthropicVertex,
  loaded: platformClients,
};

/** Imports the platform's SDK once per process; false when it is not installed (an optional peer dependency). */
async function loadPlatform(platform: Exclude<AnthropicPlatform, "messages">): Promise<boolean> {
  try {
    if (platform === "bedrock") platformClients.bedrock ??= (await platformImports.bedrock()) as typeof AnthropicBedrock;
    else platformClients.vertex ??= (await platformImports.vertex()) as typeof AnthropicVertex;
    return true;
  } catch (error) {
    const code = (error as { code?: unknown } | undefined)?.code;
    if (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") return false;
    throw error;
  }
}

/** The package each platform's client comes from. */
const PLATFORM_PACKAGES: Record<Exclude<AnthropicPlatform, "messages">, string> = { bedrock: "@anthropic-ai/bedrock-sdk", vertex: "@anthropic-ai/vertex-sdk" };

/**
 * The API version each platform documents for the body's `anthropic_version`: both SDKs copy the
 * client's `anthropic-version` header into the body, so an app pins it there (packages/anthropic README).
 */
const PLATFORM_VERSIONS: Record<Exclude<AnthropicPlatform, "messages">, string> = { bedrock: "bedrock-2023-05-31", vertex: "vertex-2023-10-16" };

type VertexAuthClient = NonNullable<NonNullable<ConstructorParameters<typeof AnthropicVertex>[0]>["authClient"]>;

/**
 * The platform's client at the mock's route, with credentials that need no network: Bedrock static
 * AWS keys (the client signs each request, SigV4), Vertex an `authClient` with a fixed bearer token
 * (without one the client asks Google's application default credentials). No SDK retries, as on the
 * Messages API: the runner's attempts are the kit's to count.
 */
function anthropicClient(platform: AnthropicPlatform, mock: Awaited<ReturnType<typeof startMockProvider>>, fetch: typeof globalThis.fetch) {
  if (platform === "messages") return new Anthropic({ baseURL: mock.baseURL, apiKey: "conformance", maxRetries: 0, fetch });
  const defaultHeaders = { "anthropic-version": PLATFORM_VERSIONS[platform] };
  if (platform === "bedrock") {
    const Bedrock = platformClients.bedrock;
    if (Bedrock === undefined) throw new TypeError("the kit built a Bedrock worker before loading @anthropic-ai/bedrock-sdk (ProviderSide.ready)");
    return new Bedrock({ baseURL: mock.bedrockBaseURL, awsRegion: "us-east-1", awsAccessKey: "AKIDCONFORMANCE", awsSecretKey: "conformance", maxRetries: 0, fetch, defaultHeaders });
  }
  const Vertex = platformClients.vertex;
  if (Vertex === undefined) throw new TypeError("the kit built a Vertex AI worker before loading @anthropic-ai/vertex-sdk (ProviderSide.ready)");
  const authClient = { projectId: "conformance", getRequestHeaders: async () => new Headers({ authorization: "Bearer conformance" }) } as unknown as VertexAuthClient;
  return new Vertex({ baseURL: mock.vertexBaseURL, region: "us-east5", projectId: "conformance", authClient, maxRetries: 0, fetch, defaultHeaders });
}

/** Options of the Anthropic side. */
export interface AnthropicSideOptions {
  /** Every case on this platform instead of the drawn one (the kit's tests force one). */
  platform?: AnthropicPlatform;
}

async function anthropicSide(options: AnthropicSideOptions = {}): Promise<ProviderSide> {
  const mock = await startMockProvider({});
  // The mock's log is the world's; a case reads the requests made since it programmed the mock.
  let since = 0;
  // This case's client platform (drawn in program), and the one drawn whose SDK is not installed.
  let platform: AnthropicPlatform = options.platform ?? "messages";
  let missing: AnthropicPlatform | undefined;
  return {
    name: "anthropic",
    async ready() {
      missing = undefined;
      if (platform === "messages" || (await loadPlatform(platform))) return;
      if (options.platform !== undefined) throw new TypeError(`platform ${platform} needs ${PLATFORM_PACKAGES[platform]}, which is not installed`);
      // Drawn, not asked for: the case runs over the Messages API, and says so (caseStats, timeline).
      missing = platform;
      platform = "messages";
    },
    platform: () => (missing === undefined ? PLATFORM_NAMES[platform] : `${PLATFORM_NAMES[platform]}: ${missing} was drawn, but ${PLATFORM_PACKAGES[missing as Exclude<AnthropicPlatform, "messages">]} is not installed`),
    caseStats() {
      const stats: Record<string, number> = { [`anthropic_platform_${platform}`]: 1 };
      if (missing !== undefined) stats[`anthropic_platform_${missing}_not_installed`] = 1;
      // Which route each request of the case came in through: the platform's, and only it.
      for (const r of mock.requests.slice(since)) stats[`anthropic_requests_${r.api}`] = (stats[`anthropic_requests_${r.api}`] ?? 0) + 1;
      return stats;
    },
    program(plans, cutFor, reruns, onRerun, splices, onSplice) {
      since = mock.requests.length;
      platform = options.platform ?? anthropicPlatformOf(plans);
      // The mock plays step n of a plan as the n-th assistant turn after the user's text; a
      // re-run the model answers differently plays the re-run's calls instead (a text answer when none).
      const turnOf = (calls: PlannedCall[]) => (calls.length === 0 ? turn(anthropicSay("Done.")) : turn(...calls.map((c) => toolUse(c.tool, c.args, rewordOf(c)))));
      const marks = rerunMarks(reruns, onRerun);
      const splicing = spliceMarks(splices, onSplice);
      const scripted: Record<string, ((request: object) => ReturnType<typeof turn>)[]> = {};
      for (const [text, steps] of plans) {
        scripted[text] = steps.map((calls) => {
          const planned = turnOf(calls);
          return (request) => {
            const second = splicing.second(request);
            if (second !== undefined) return turnOf(asOffered(request, second));
            const rerun = marks.of(request);
            const offered = asOffered(request, rerun ?? calls);
            return offered === calls ? planned : turnOf(offered);
          };
        });
      }
      mock.setScript(anthropicScript(scripted));
      mock.setFaultPlan((request, info) => {
        // Faults apply to the requests of the tool loop's steps: the one whose last message is the
        // user's text (step 0), and those whose last message carries a step's tool results.
        const last = request.messages[request.messages.length - 1];
        const prompt = lastUserPromptIndex(request);
        const step = request.messages.slice(prompt + 1).filter((m) => m.role === "assistant").length;
        const rerun = marks.mark(request, prompt < 0 ? undefined : anthropicUserText(request), step, info.attempt);
        const text = typeof last?.content === "string" ? last.content : step > 0 && stepsOf(plans, anthropicUserText(request)) > step ? anthropicUserText(request) : undefined;
        const cut = text === undefined ? undefined : cutFor(text, info.attempt, step);
        const planned = cut === undefined || rerun === undefined ? cut : fitCut(cut, rerun.length);
        if (planned === undefined) {
          const user = text ?? "";
          const splice = splicing.mark(request, text, step, info.attempt, rerun ?? plans.get(user)?.[step] ?? [], reruns?.get(user)?.[step] ?? plans.get(user)?.[step] ?? []);
          if (splice === undefined) return undefined;
          if (splice.plan.shape === "repeat") return { kind: "repeat_call", call: splice.afterCall };
          const at: AnthropicPosition = { afterToolUseStop: splice.afterCall };
          if (splice.plan.shape === "restart") return { kind: "splice", at, messageStart: true };
          return splice.plan.shape === "headless" ? { kind: "splice", at, messageStart: false, lead: SPLICE_LEAD } : { kind: "splice", at, messageStart: false };
        }
        const fault: AnthropicFault = { kind: planned.kind, at: anthropicPosition(planned) };
        return fault;
      });
    },
    responses: () =>
      mock.requests.slice(since).flatMap((r): ModelResponse[] => {
        const text = anthropicUserText(r.body as Parameters<typeof anthropicUserText>[0]);
        // The body's own response opens with its thinking block, stopped before any call (and so
        // before a splice, which follows a call); a spliced response's comes after it.
        const { done: thinking, cut } = thinkingBlocks(r.events);
        const request = { number: r.requestNumber, attempt: r.attempt };
        const cutInReasoning = r.faultFired && r.fault !== undefined && r.fault.kind !== "splice" && cut.length > 0;
        const own = {
          text,
          calls: r.toolUses.map((c) => ({ name: c.name, input: c.input })),
          callIds: r.toolUses.map((c) => c.id),
          reasoning: thinking.slice(0, 1),
          request,
          ...(cut.length > 0 ? { reasoningCut: cut } : {}),
          ...(cutInReasoning ? { cutInReasoning } : {}),
          ...(r.fault?.kind === "repeat_call" ? { repeatedCall: r.fault.call } : {}),
        };
        if (r.splicedToolUses === undefined || r.fault?.kind !== "splice") return [own];
        const calls = r.splicedToolUses.map((c) => ({ name: c.name, input: c.input }));
        return [own, { text, calls, callIds: r.splicedToolUses.map((c) => c.id), spliced: spliceShape(r.fault.messageStart, r.fault.lead), reasoning: thinking.slice(1), request }];
      }),
    runner: ({ fetch, ...wiring }) =>
      new AnthropicRunner({
        ...wiring,
        client: anthropicClient(platform, mock, fetch),
        model: "claude-conformance",
        // Thinking on, as production agents run: every response opens with a signed thinking
        // block, which each tool result's request must carry back unaltered (STREAM-15); cuts
        // may fall inside it, and a runner that drops or mixes blocks fails every calm run.
        maxTokens: 2048,
        params: { thinking: { type: "enabled", budget_tokens: 1024 } },
      }),
    transcript: anthropicTranscript,
    close: () => mock.close(),
  };
}

// ---- OpenAI Responses API (apps/mock-openai) ---------------------------------------------------

/** The kit's cut positions in the Responses stream's terms (STREAM-2, as apps/mock-openai names them). */
/** Where a cut falls, whatever its kind (a test may plan one neither provider's runs draw). */
export type CutPosition = PositionOf<StreamCut>;
type PositionOf<T> = T extends unknown ? Omit<T, "kind"> : never;

export function openAIPosition(cut: CutPosition): OpenAIPosition {
  switch (cut.at) {
    case "event":
      return { event: cut.event };
    case "arguments":
      return { call: cut.toolUse, afterFragment: cut.afterFragment };
    case "after_call":
      return { afterCallDone: cut.toolUse };
    case "before_message_stop":
      return { beforeCompleted: true };
  }
}

/**
 * Whether a stored `function_call_output` is the runner's `{ error }` answer: the API keeps no
 * error flag, so this reads the one shape the runner writes for an error.
 */
function isErrorOutput(output: string): boolean {
  try {
    const parsed = JSON.parse(output) as unknown;
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return false;
    const error = (parsed as { error?: { name?: unknown; message?: unknown } }).error;
    return Object.keys(parsed).length === 1 && typeof error?.name === "string" && typeof error.message === "string";
  } catch {
    return false;
  }
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * The runner commits a turn's output items as one array and its `function_call_output` items
 * as another; a user message is an object. An array with no output item is the model's turn.
 */
const openAITranscript: TranscriptReader = {
  isAssistant: (entry) => Array.isArray(entry) && !asArray(entry).some((i) => i.type === "function_call_output"),
  items: (entry) => asArray(entry).map((item, index) => ({ index, reasoning: item.type === "reasoning", item })),
  calls: (entry) =>
    asArray(entry)
      .filter((i) => i.type === "function_call")
      .map((i) => ({ id: str(i.call_id), name: str(i.name), input: parseArguments(str(i.arguments)) })),
  results: (entry) =>
    asArray(entry)
      .filter((i) => i.type === "function_call_output")
      .map((i) => {
        const text = typeof i.output === "string" ? i.output : JSON.stringify(i.output);
        return { id: str(i.call_id), text, isError: isErrorOutput(text) };
      }),
};

/** The user text of a Responses request's last input item, when that item is the user's message. */
function lastUserMessage(input: unknown): string | undefined {
  const items = asArray(input);
  const last = items[items.length - 1];
  return last?.role === "user" && typeof last.content === "string" ? last.content : undefined;
}

/** Which step of its tool loop a Responses request is: the batches of tool outputs since the user's last message. */
function openAIStep(input: unknown): number {
  const items = asArray(input);
  let user = items.length - 1;
  while (user >= 0 && items[user]!.role !== "user") user--;
  let step = 0;
  for (let i = user + 1; i < items.length; i++) {
    if (items[i]!.type === "function_call_output" && items[i - 1]?.type !== "function_call_output") step++;
  }
  return step;
}

/**
 * How the kit's plans render on one API of apps/mock-openai (the Responses API, Chat Completions):
 * the scripted response making a step's calls, and a planned cut as that API's fault position.
 */
interface OpenAIMockShape {
  /** The model's response making `calls` for the user text `text` (none: its text answer). */
  responseOf(calls: PlannedCall[], text: string): ScriptedResponse;
  /** The response a proxy splices into another's body (refused where the API has no splices). */
  splicedOf(calls: PlannedCall[], text: string): ScriptedResponse;
  /** The cut as this API's fault position, on a response that makes `calls` calls. */
  position(cut: StreamCut, calls: number): OpenAIPosition;
}

/**
 * Programs apps/mock-openai for a case (ProviderSide.program), whichever API the runner speaks: the
 * mock hands the script and the fault plan a Chat Completions request as the Responses request it
 * amounts to (`responsesView`), so the user text, the tool loop's step and the attempt read alike.
 */
function programOpenAIMock(
  mock: MockOpenAI,
  setScript: (script: OpenAIMockScript) => void,
  shape: OpenAIMockShape,
  [plans, cutFor, reruns, onRerun, splices, onSplice]: Parameters<ProviderSide["program"]>,
): void {
  const { responseOf, splicedOf } = shape;
  const marks = rerunMarks(reruns, onRerun);
  const splicing = spliceMarks(splices, onSplice);
  const scripted: Record<string, ScriptedResponse[]> = {};
  for (const [text, steps] of plans) scripted[text] = steps.map((calls) => responseOf(calls, text));
  // The mock's own plans answer tool results with text; the kit's tool loop plays step n
  // after the n-th batch of function_call_output items that follows the user's text.
  const fallback = openAIScript({});
  setScript((request) => {
    const text = openAIUserText(request);
    const steps = text === undefined ? undefined : scripted[text];
    if (steps === undefined) return fallback(request);
    const step = openAIStep(request.input);
    // The response a proxy splices in (the fault plan below marked the request), asked for second.
    const second = splicing.second(request);
    if (second !== undefined) return splicedOf(asOffered(request, second), text!);
    // A re-run the model answers differently (the fault plan below marked the request).
    const rerun = marks.of(request);
    if (rerun !== undefined) return responseOf(asOffered(request, rerun), text!);
    const planned = plans.get(text!)?.[step];
    const offered = planned === undefined ? undefined : asOffered(request, planned);
    return offered !== undefined && offered !== planned ? responseOf(offered, text!) : (steps[step] ?? responseOf([], text!));
  });
  // The mock records every request; nothing reads them across cases, and a certification
  // makes thousands. Attempt numbers restart too, harmlessly: each case's texts are its own.
  mock.clearRequests();
  mock.setFaultPlan((request, info) => {
    const step = openAIStep(request.input);
    const loop = openAIUserText(request);
    const rerun = marks.mark(request, loop, step, info.attempt);
    const text = step === 0 ? lastUserMessage(request.input) : stepsOf(plans, loop) > step ? loop : undefined;
    const cut = text === undefined ? undefined : cutFor(text, info.attempt, step);
    const planned = cut === undefined || rerun === undefined ? cut : fitCut(cut, rerun.length);
    if (planned === undefined) {
      const user = text ?? "";
      const splice = splicing.mark(request, text, step, info.attempt, rerun ?? plans.get(user)?.[step] ?? [], reruns?.get(user)?.[step] ?? plans.get(user)?.[step] ?? []);
      if (splice === undefined) return undefined;
      if (splice.plan.shape === "repeat") return { kind: "repeat_call", call: splice.afterCall };
      const at: OpenAIPosition = { afterCallDone: splice.afterCall };
      if (splice.plan.shape === "restart") return { kind: "splice", at, responseCreated: true };
      return splice.plan.shape === "headless" ? { kind: "splice", at, responseCreated: false, lead: SPLICE_LEAD } : { kind: "splice", at, responseCreated: false };
    }
    // The calls the script answers this request with (as above): an `{ event }` cut is placed among them.
    const calls = rerun ?? (loop === undefined ? undefined : plans.get(loop)?.[step]) ?? [];
    const fault: OpenAIFault = { kind: planned.kind, at: shape.position(planned, calls.length) };
    return fault;
  });
}

async function openAISide(): Promise<ProviderSide> {
  // The mock takes its script once; the kit re-programs it per case through this indirection.
  let script = openAIScript({});
  const mock = await startMockOpenAI({ script: (request) => script(request) });
  // A reasoning model's way (as gpt-5's and the o-series'): each response reasons first, an item
  // with a fresh id and encrypted content per response, which the committed turn keeps and sends
  // back (STREAM-15); its text answers too (the closing "Done." of a tool loop), whose message the
  // turn keeps beside it as delivered, named by its msg_ id. No draw: each seed's scenarios are what
  // they were. A spliced response (the fault plan's, asked for second) answers as before.
  const responseOf = (calls: PlannedCall[], text: string) =>
    calls.length === 0 ? respond(reasoning(`Tell what ${text} did.`), textItem("Done.")) : respond(reasoning(`Do what ${text} asks.`), ...calls.map((c) => call(c.tool, c.args, rewordOf(c))));
  const shape: OpenAIMockShape = {
    responseOf,
    splicedOf: (calls, text) => (calls.length === 0 ? say("Done.") : responseOf(calls, text)),
    position: (cut) => openAIPosition(cut),
  };
  return {
    name: "openai",
    program: (...args) => programOpenAIMock(mock, (next) => (script = next), shape, args),
    responses: () =>
      mock.requests.flatMap((r): ModelResponse[] => {
        const text = openAIUserText(r.body as Parameters<typeof openAIUserText>[0]) ?? "";
        // The body's own response opens with its one reasoning item, done before any call (and so
        // before a splice, which follows a call); a spliced response's reasoning item comes after it.
        const reasoning = r.events
          .filter((e) => e.type === "response.output_item.done" && (e.data.item as Obj | undefined)?.type === "reasoning")
          .map((e) => ({ index: e.data.output_index as number, item: e.data.item }));
        const request = { number: r.requestNumber, attempt: r.attempt };
        const announced = r.events.some((e) => e.type === "response.output_item.added" && (e.data.item as Obj | undefined)?.type === "reasoning");
        const cutInReasoning = r.fault !== undefined && r.fault.kind !== "splice" && r.faultFired && announced && reasoning.length === 0;
        const own = {
          text,
          calls: (r.calls ?? []).map((c) => ({ name: c.name, input: c.arguments })),
          callIds: (r.calls ?? []).map((c) => c.callId),
          reasoning: reasoning.slice(0, 1),
          request,
          ...(cutInReasoning ? { cutInReasoning } : {}),
          ...(r.fault?.kind === "repeat_call" ? { repeatedCall: r.fault.call } : {}),
        };
        if (r.splicedCalls === undefined || r.fault?.kind !== "splice") {
          const messages = r.events
            .filter((e) => e.type === "response.output_item.done" && (e.data.item as Obj | undefined)?.type === "message")
            .map((e) => ({ index: e.data.output_index as number, item: e.data.item }));
          return [{ ...own, messages }];
        }
        const calls = r.splicedCalls.map((c) => ({ name: c.name, input: c.arguments }));
        return [own, { text, calls, callIds: r.splicedCalls.map((c) => c.callId), spliced: spliceShape(r.fault.responseCreated, r.fault.lead), reasoning: reasoning.slice(1), request }];
      }),
    runner: ({ fetch, ...options }) =>
      new OpenAIRunner({
        ...options,
        client: new OpenAI({ baseURL: mock.baseURL, apiKey: "conformance", maxRetries: 0, fetch }),
        model: "gpt-conformance",
        // A reasoning model used statelessly, as the API requires for it: nothing kept on the
        // provider's side (store: false), so every request carries the turn's reasoning items back
        // whole, their encrypted content included (STREAM-15); the mock refuses one altered,
        // missing or out of place, as the API does.
        params: { store: false, include: ["reasoning.encrypted_content"] },
      }),
    transcript: openAITranscript,
    close: () => mock.close(),
  };
}

// ---- OpenAI Chat Completions (apps/mock-openai's /v1/chat/completions) ---------------------

/**
 * A kit cut on a Chat Completions stream (STREAM-20's positions table): inside a call's arguments
 * → `{ call, afterFragment }` (after its first fragment, the one naming it: `arguments_streaming`);
 * after a call is complete (the next index's first fragment, or `finish_reason`) →
 * `{ afterCallDone }` (`during_dispatch`, or `arguments_streaming` once it resolved: the next call
 * is open); before the end of the response → `{ beforeCompleted }` (instead of the `finish_reason`
 * chunk: the last call is still open, so `arguments_streaming`; `after_dispatch_before_stop` never
 * occurs on this API, STREAM-20's table). A raw event number is
 * drawn for a Responses stream of as many calls (up to 6 + 6 per call, its reasoning item
 * included), whose events outnumber these chunks: it is scaled onto the fewest chunks such a
 * response can have (the role chunk, one content piece, per call its naming fragment and one
 * argument piece, the finish, the usage chunk, `[DONE]`), so that every draw falls on a chunk the
 * stream sends.
 */
export function chatPosition(cut: CutPosition, calls: number): OpenAIPosition {
  if (cut.at !== "event") return openAIPosition(cut);
  const drawnOver = 7 + 6 * calls;
  const fewest = 5 + 2 * calls;
  return { event: Math.floor((Math.min(cut.event, drawnOver - 1) * fewest) / drawnOver) };
}

const isMessage = (entry: JsonValue | undefined): entry is Record<string, JsonValue> => entry !== null && typeof entry === "object" && !Array.isArray(entry);

/**
 * The runner commits a turn's assistant message (its `tool_calls`) as one entry and its `tool`
 * messages as one array (STREAM-21); a user message is an object too, of its own role.
 */
const chatTranscript: TranscriptReader = {
  isAssistant: (entry) => isMessage(entry) && entry.role === "assistant",
  calls: (entry) =>
    isMessage(entry) && entry.role === "assistant"
      ? asArray(entry.tool_calls).map((c) => {
          const fn = (c.function ?? {}) as Obj;
          return { id: str(c.id), name: str(fn.name), input: parseArguments(str(fn.arguments)) };
        })
      : [],
  results: (entry) =>
    asArray(entry)
      .filter((m) => m.role === "tool")
      .map((m) => {
        const text = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
        return { id: str(m.tool_call_id), text, isError: isErrorOutput(text) };
      }),
};

/**
 * The Chat Completions dialect a case's model server speaks (apps/mock-openai `chatDialect`: OpenAI's
 * own, Azure, Gemini, vLLM, DeepSeek, SGLang, Mistral), drawn from the scenario: a hash of its plans
 * (each user text without its per-case account, and the calls), so a seed and a replayed path draw
 * the same one, and certification runs cover each dialect with cuts, retries, re-sends and take-overs.
 */
export function chatDialectOf(plans: Map<string, PlannedCall[][]>): ChatDialect {
  return CHAT_DIALECTS[planHash(plans) % CHAT_DIALECTS.length]!;
}

/**
 * A hash of a case's plans (each user text without its per-case account, and the calls), salted
 * per draw so that two draws of one scenario do not move together; an empty salt is the chat
 * dialect's, as it was before any other draw used it.
 */
function planHash(plans: Map<string, PlannedCall[][]>, salt = ""): number {
  const drawn = salt + JSON.stringify([...plans].map(([text, steps]) => [text.slice(text.indexOf(" ") + 1), steps]).sort(([a], [b]) => (String(a) < String(b) ? -1 : 1)));
  // FNV-1a: stable across processes and Node versions.
  let hash = 0x811c9dc5;
  for (let i = 0; i < drawn.length; i++) hash = Math.imul(hash ^ drawn.charCodeAt(i), 0x01000193) >>> 0;
  return hash;
}

async function openAIChatSide(): Promise<ProviderSide> {
  let script = openAIScript({});
  const mock = await startMockOpenAI({ script: (request) => script(request) });
  // Chat Completions has no reasoning items (a reasoning model's reasoning stays on the server). A
  // response that makes calls says a sentence first, as many models served over this API do: its
  // content chunks are where a cut falls before any call (STREAM-20's before_any_call: content may
  // have streamed), which a side that takes a clean close for the end commits as the answer.
  const responseOf = (calls: PlannedCall[], text: string) =>
    calls.length === 0 ? say("Done.") : respond(textItem(`Doing what ${text} asks.`), ...calls.map((c) => call(c.tool, c.args, rewordOf(c))));
  const shape: OpenAIMockShape = {
    responseOf,
    splicedOf: () => {
      throw new TypeError("the Chat Completions mock refuses splices: the kit draws none for provider openai-chat");
    },
    position: chatPosition,
  };
  return {
    name: "openai-chat",
    program(plans, cutFor, reruns, onRerun, splices, onSplice) {
      // runEndToEnd draws no splice for this side (withoutSplices): a planted one would be refused by the mock, a 500 the run would take for an outage.
      if ([...(splices?.values() ?? [])].some((steps) => steps.some((s) => s !== undefined))) throw new TypeError("provider openai-chat takes no splices: apps/mock-openai refuses them on Chat Completions streams");
      programOpenAIMock(mock, (next) => (script = next), shape, [plans, cutFor, reruns, onRerun, undefined, onSplice]);
      // The server this case's model runs behind: its chunk shapes, and what it refuses.
      mock.setChatDialect(chatDialectOf(plans));
    },
    // What the model emitted per request, as the mock rendered it: its calls, their call_ ids.
    responses: () =>
      mock.requests.map((r): ModelResponse => {
        const text = openAIUserText(responsesView(r.body as Record<string, unknown>)) ?? "";
        return { text, calls: r.calls.map((c) => ({ name: c.name, input: c.arguments })), callIds: r.calls.map((c) => c.callId), request: { number: r.requestNumber, attempt: r.attempt } };
      }),
    runner: ({ fetch, ...options }) =>
      new ChatCompletionsRunner({
        ...options,
        client: new OpenAI({ baseURL: mock.baseURL, apiKey: "conformance", maxRetries: 0, fetch }),
        model: "gpt-conformance",
        // A usage chunk after the finish_reason, as most apps ask for one: a cut may fall there too.
        params: { stream_options: { include_usage: true } },
      }),
    transcript: chatTranscript,
    close: () => mock.close(),
  };
}

/** Starts the mock of one provider. */
export function startProvider(name: RunnerProviderName, options: AnthropicSideOptions = {}): Promise<ProviderSide> {
  if (options.platform !== undefined && name !== "anthropic") throw new TypeError(`platform applies to provider anthropic only, not ${name}`);
  if (options.platform !== undefined && !ANTHROPIC_PLATFORMS.includes(options.platform)) {
    throw new TypeError(`platform must be one of ${ANTHROPIC_PLATFORMS.join(", ")}, got ${JSON.stringify(options.platform)}`);
  }
  switch (name) {
    case "anthropic":
      return anthropicSide(options);
    case "openai":
      return openAISide();
    case "openai-chat":
      return openAIChatSide();
  }
}
