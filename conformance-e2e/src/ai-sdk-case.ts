import { randomUUID } from "node:crypto";
import { createOpenAI } from "@ai-sdk/openai";
import { createOnceTools, dispatchOnceOf, providerToolsGuard, spliceGuard, turnIndexOf } from "@dispatch-once/ai-sdk";
import { ToolError, catalogueEntry, canonicalize, type DispatcherOptions, type FailureDisposition, type Ledger } from "@dispatch-once/core";
import type { LedgerFixture, LedgerSubject } from "@dispatch-once/conformance/ledger";
import { lastUserText, responsesView, scriptFromPlans, call, reasoning, respond, say as sayText, startMockOpenAI, type MockOpenAI, type RequestRecord, type ResponsesRequest, type ScriptedResponse } from "@dispatch-once/mock-openai";
import {
  lastUserPromptIndex,
  messagesFromConverse,
  messagesFromGemini,
  say as sayMessage,
  startMockProvider,
  toolUse,
  turn as messagesTurn,
  type AssistantTurn,
  type Fault as ProviderFault,
  type MessagesRequest,
  type MockProvider,
  type RequestRecord as ProviderRecord,
  type ScriptedContent,
} from "@dispatch-once/mock-provider";
import {
  DISPOSITION_BY_OUTCOME,
  PaymentsError,
  createPaymentsClient,
  startMockPayments,
  type Effect,
  type FaultSpec,
  type MockPaymentsServer,
} from "@dispatch-once/mock-payments";
import { defaultSettingsMiddleware, stepCountIs, streamText, tool, wrapLanguageModel, type LanguageModel, type ModelMessage, type ToolSet } from "ai";
import { z } from "zod";
import { APPROVAL_MARK, callsBeforeFollowUp, divergedStepsOf, followUpStepOf, messagesOf, stepsOf, type AiSdkChatPlan, type AiSdkCut, type AiSdkDeath, type AiSdkMessagePlan, type AiSdkScenario, type AiSdkSplice } from "./ai-sdk-scenario.js";
import type { OracleViolation } from "./oracle.js";
import { anthropicPosition, openAIPosition } from "./provider.js";
import type { PlannedCall } from "./scenario.js";
import { TOOL_SHAPES, short } from "./world.js";

/**
 * The `--provider ai-sdk` end-to-end level: not a second runner, but the app spec §13.2
 * describes. A chat route keeps each chat's messages, gives `streamText` (the real `ai` package,
 * through `@ai-sdk/openai` against apps/mock-openai) the tools wrapped by `createOnceTools`,
 * counts the turn from its messages (AISDK-1), re-sends the same messages after a mid-stream
 * failure (AISDK-6), continues a turn in a new request after the user approved its calls or
 * answered a client-side tool (AISDK-9), and regenerates turns. The AI SDK decides when tools run; the
 * app decides what it keeps. The oracle is the payments API's effect log against what the app
 * was told and kept.
 */

/**
 * The AI SDK's tool set and messages, structurally: this package's published types must not load
 * `ai`'s own .d.ts (it fails a consumer's strict type-check without skipLibCheck; see
 * tests/pack-install). Inside, they are the AI SDK's `ToolSet` and `ModelMessage[]`.
 */
export type AiSdkToolSet = Record<string, unknown>;
export interface AiSdkMessage {
  role: string;
  content: unknown;
}

/** One request of the app's chat route: what `once.forTurn` is given. */
export interface AiSdkRequest {
  conversationId: string;
  messages: AiSdkMessage[];
  dispatchAt: "step" | "tool-call";
}

/** What the app hands `streamText` for one request, and what it asks the turn once the stream finished. */
export interface AiSdkTurnTools {
  tools: AiSdkToolSet;
  onChunk?: (event: { chunk: { type: string } }) => void;
  /** The turn's effects this request and its history do not answer (AISDK-14); an app without it cannot tell them. */
  unansweredCalls?: () => Promise<AiSdkUnansweredCalls>;
  /** The dispatch outcome of a call of this request (its key): what the kept result tells. */
  outcomeOf?: (toolCallId: string) => { key: string } | undefined;
}

/** What `turn.unansweredCalls()` answers (AISDK-14), structurally. */
export type AiSdkUnansweredCalls =
  | { listed: true; calls: { key: string; name: string; state?: string; effect: "happened" | "may_have_happened" | "not_happened" | "none" }[] }
  | { listed: false; reason: string; calls: [] };

export interface AiSdkWrapOptions {
  effects: Record<string, "read" | "keyed_write" | "unkeyed_write">;
  identity: Record<string, readonly string[]>;
  dispatcher: Omit<DispatcherOptions, "tools" | "ledger">;
}

/**
 * How the app under test is built. The defaults are the app the AISDK rules describe; the kit's
 * own tests replace a piece with a broken one (planted bugs) to show the oracle rejects it.
 */
export interface AiSdkAppOptions {
  /**
   * Wraps the app's tools once, and returns the tools of each request.
   * Default: `createOnceTools({ tools, effects, identity, ledger })` and `forTurn(request)`.
   */
  wrap?: (tools: AiSdkToolSet, ledger: Ledger, options: AiSdkWrapOptions) => (request: AiSdkRequest) => AiSdkTurnTools;
  /** The disposition the app's tools give core for a payments error. Default: the client's own (DISPOSITION_BY_OUTCOME). */
  disposition?: (error: PaymentsError) => FailureDisposition;
  /**
   * Whether the app's route wraps its model (`@ai-sdk/openai`'s Responses model) with
   * `spliceGuard()` (AISDK-16), as the README's route does, so that a proxy's splice
   * (AiSdkMessagePlan.splice) fails the step instead of being taken in. `false` is the app without
   * it, a planted bug the kit must catch. A flag, not a model factory: the kit's public types name
   * none of the `ai` package's, so a project that type-checks its dependencies' declarations
   * (skipLibCheck: false) never checks `ai`'s for using the kit.
   * A function is asked for each request, by how the client asked (AI SDK UI's `trigger`: the
   * user's message sent, or a regenerate of the last answer), whether the route guards that one: a
   * planted app that guards some requests only (`({ trigger }) => trigger === "submit-message"`,
   * no guard on a regenerate, the user's re-ask of the turn; AiSdkMessagePlan.regenerateSplice).
   * @default true
   * @example { spliceGuard: false }
   */
  spliceGuard?: boolean | ((request: { trigger: "submit-message" | "regenerate-message" }) => boolean);
  /**
   * The splice check the route wraps its model with where `spliceGuard` says it guards, in place of
   * `spliceGuard()`: a `LanguageModelMiddleware` of the `ai` package (typed `unknown`, as above, so
   * the kit's public types name none of `ai`'s). The kit's planted tests give a weakened check here.
   * @default spliceGuard()
   * @example { spliceMiddleware: { specificationVersion: "v3", wrapStream: async ({ doStream }) => doStream() } }
   */
  spliceMiddleware?: unknown;
  /**
   * Which API the route's model speaks: `"responses"` (`@ai-sdk/openai`'s `openai.responses(...)`)
   * or `"chat"` (`openai.chat(...)`, Chat Completions, against the mock's `/v1/chat/completions`,
   * the way OpenAI-compatible servers are used). Under `"chat"` `runEndToEnd` draws no splices
   * (the mock has none on that API); cuts fall at the same positions, read on its chunks.
   * `"converse"` (`@ai-sdk/amazon-bedrock`, Bedrock's Converse API) and `"gemini"`
   * (`@ai-sdk/google`, the Gemini API) run against apps/mock-provider's routes, the model under
   * `providerToolsGuard()` too; every scenario kind is drawn there, splices included. Their
   * packages are optional peers: a run without the one it needs is refused, naming it.
   * `"gemini-vertex"` is the Gemini API on Vertex AI (`@ai-sdk/google-vertex`, the mock's Vertex
   * Gemini route) with what only Vertex AI sends: each call's arguments streamed (`partialArgs`),
   * and thoughts, a gateway that strips the chunks' `responseId` and a splice inside a call's
   * streamed arguments in a drawn share of cases (`vertex`).
   * @default "responses"
   * @example { modelApi: "chat" }
   */
  modelApi?: AiSdkModelApi;
  /**
   * On `modelApi: "gemini-vertex"`, what a case's app meets, pinned; each is drawn per scenario
   * otherwise (from its plans, so a seed draws the same): thought parts (`includeThoughts`, one
   * case in two), and a gateway between the app and Vertex AI that passes the chunks on without
   * their `responseId` (one case in three). A case whose ids are stripped has its splices land
   * inside a call's streamed arguments, the only place a reader of the stream can still see one.
   * @default {} (each drawn per scenario)
   * @example { modelApi: "gemini-vertex", vertex: { responseIdsStripped: true } }
   */
  vertex?: AiSdkVertexOptions;
}

/** What a case on Gemini on Vertex AI meets (AiSdkAppOptions.vertex); unset fields are drawn per scenario. */
export interface AiSdkVertexOptions {
  /**
   * The app asks for thought parts (`thinkingConfig.includeThoughts`); they come first and ride back signed.
   * @default drawn per scenario (one case in two)
   * @example { thoughts: true }
   */
  thoughts?: boolean;
  /**
   * A gateway strips every chunk's `responseId` before the app's model reads it; the case's splices then land inside a call's streamed arguments.
   * @default drawn per scenario (one case in three)
   * @example { responseIdsStripped: true }
   */
  responseIdsStripped?: boolean;
}

/**
 * The model APIs the profile's app can speak: OpenAI's Responses and Chat Completions (against
 * apps/mock-openai), Amazon Bedrock's Converse (`@ai-sdk/amazon-bedrock`) and Google's Gemini
 * (`@ai-sdk/google`), both against apps/mock-provider's routes.
 */
// "gemini-vertex", not "vertex": the wire API is Gemini's (the route's requests are the mock's
// api "gemini"), and "vertex" already names Claude on Vertex AI, in the mock (its :rawPredict
// route) and in this kit (provider anthropic's platform).
export const AI_SDK_MODEL_APIS = ["responses", "chat", "converse", "gemini", "gemini-vertex"] as const;
export type AiSdkModelApi = (typeof AI_SDK_MODEL_APIS)[number];
type CloudModelApi = "converse" | "gemini" | "gemini-vertex";

/** The routes of apps/mock-provider: the same scripts and faults as its Messages API, rendered in the cloud API's stream. */
const CLOUD_APIS = new Set<AiSdkModelApi>(["converse", "gemini", "gemini-vertex"]);
export const isCloudModelApi = (api: AiSdkModelApi | undefined): api is CloudModelApi => api !== undefined && CLOUD_APIS.has(api);

/**
 * The cloud providers' packages, imported when a run asks for their API (optional peers of the
 * kit, as `@anthropic-ai/bedrock-sdk` is). Kept as an object so a test can stand in for a
 * missing install.
 */
// Typed without the packages' own types: this module's declarations ship with the package, and an
// install without the optional peers must still type-check against them (pack-install's tsc).
export const aiSdkCloudImports: Record<CloudModelApi, () => Promise<unknown>> = {
  converse: async () => (await import("@ai-sdk/amazon-bedrock")).createAmazonBedrock,
  gemini: async () => (await import("@ai-sdk/google")).createGoogleGenerativeAI,
  "gemini-vertex": async () => (await import("@ai-sdk/google-vertex")).createVertex,
};
const CLOUD_PACKAGES = { converse: "@ai-sdk/amazon-bedrock", gemini: "@ai-sdk/google", "gemini-vertex": "@ai-sdk/google-vertex" } as const;

/** Imports the cloud API's provider package; refused, naming it, when it is not installed (an optional peer). Checked before a run starts. */
export async function requireCloudPackage(api: CloudModelApi): Promise<unknown> {
  try {
    return await aiSdkCloudImports[api]();
  } catch (error) {
    const code = (error as { code?: unknown } | undefined)?.code;
    if (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") {
      throw new TypeError(`aiSdk.modelApi "${api}" needs ${CLOUD_PACKAGES[api]} installed (an optional peer dependency of @dispatch-once/conformance-e2e)`);
    }
    throw error;
  }
}

type ProviderModel = Parameters<typeof wrapLanguageModel>[0]["model"];

/** The cloud API's model at the mock's route, with credentials that need no network (Bedrock: static AWS keys, SigV4-signed). */
async function cloudModel(api: CloudModelApi, mock: MockProvider, vertex: VertexDraw | undefined): Promise<ProviderModel> {
  if (api === "gemini-vertex") return vertexModel(mock, vertex!);
  if (api === "converse") {
    const createAmazonBedrock = (await requireCloudPackage("converse")) as typeof import("@ai-sdk/amazon-bedrock").createAmazonBedrock;
    return createAmazonBedrock({ baseURL: mock.bedrockBaseURL, region: "us-east-1", accessKeyId: "AKIDEXAMPLE", secretAccessKey: "conformance" })("anthropic.claude-sonnet-4-5-20250929-v1:0");
  }
  const createGoogleGenerativeAI = (await requireCloudPackage("gemini")) as typeof import("@ai-sdk/google").createGoogleGenerativeAI;
  return createGoogleGenerativeAI({ baseURL: mock.geminiBaseURL, apiKey: "conformance" })("gemini-2.5-flash");
}

/** How one case meets Gemini on Vertex AI (AiSdkVertexOptions, drawn where not pinned). */
interface VertexDraw {
  thoughts: boolean;
  responseIdsStripped: boolean;
  /** Express mode (an API key in `x-goog-api-key`, `/v1/publishers/google/...`) rather than a project and an OAuth token. */
  express: boolean;
  /** Where the case's splices land: after a call completed (as on "gemini"), or inside the next call's streamed arguments. */
  spliceInArgs: boolean;
}

/** A scenario's hash, salted per draw (FNV-1a over its plans, which carry no account: a seed and a replayed path draw the same). */
function scenarioHash(scenario: AiSdkScenario, salt: string): number {
  const text = salt + JSON.stringify(scenario);
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/**
 * A case's draw on Gemini on Vertex AI. A splice after a completed call whose chunks lost their
 * `responseId` is not drawn: the spliced response's calls then follow the first's as more calls
 * of one response, which no reader of the stream can tell (AISDK-16's limit, a splice made to look
 * like one response); inside a call's streamed arguments the order of the parts still shows it.
 */
export function vertexDrawOf(scenario: AiSdkScenario, pinned: AiSdkVertexOptions = {}): VertexDraw {
  const thoughts = pinned.thoughts ?? scenarioHash(scenario, "vertex thoughts:") % 2 === 0;
  const responseIdsStripped = pinned.responseIdsStripped ?? scenarioHash(scenario, "vertex ids:") % 3 === 0;
  const express = scenarioHash(scenario, "vertex auth:") % 4 === 0;
  const spliceInArgs = responseIdsStripped || scenarioHash(scenario, "vertex splice:") % 2 === 0;
  return { thoughts, responseIdsStripped, express, spliceInArgs };
}

/** What google-auth-library is given: a client that hands out a fixed token (none is fetched). */
const VERTEX_AUTH_CLIENT = { getAccessToken: async () => ({ token: "ya29.conformance" }) };

/**
 * `@ai-sdk/google-vertex`'s model at the mock's Vertex Gemini route, asking for what only Vertex AI
 * sends: streamed call arguments always (a Gemini 3 model), thoughts where drawn; behind a gateway
 * that strips the chunks' `responseId` where drawn.
 */
async function vertexModel(mock: MockProvider, draw: VertexDraw): Promise<ProviderModel> {
  const createVertex = (await requireCloudPackage("gemini-vertex")) as typeof import("@ai-sdk/google-vertex").createVertex;
  const fetch = draw.responseIdsStripped ? withoutResponseIds : undefined;
  const vertex = draw.express
    ? createVertex({ apiKey: "AQ.conformance", baseURL: `${mock.url}/v1/publishers/google`, ...(fetch ? { fetch } : {}) })
    : createVertex({
        project: "conformance",
        location: "us-central1",
        baseURL: `${mock.url}/v1beta1/projects/conformance/locations/us-central1/publishers/google`,
        googleAuthOptions: { authClient: VERTEX_AUTH_CLIENT as never },
        ...(fetch ? { fetch } : {}),
      });
  const google = { streamFunctionCallArguments: true, ...(draw.thoughts ? { thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } } : {}) };
  return wrapLanguageModel({ model: vertex("gemini-3-pro-preview") as ProviderModel, middleware: defaultSettingsMiddleware({ settings: { providerOptions: { google } } }) }) as ProviderModel;
}

/**
 * A gateway between the app and Vertex AI that re-serialises each chunk without its `responseId`
 * (the app's `fetch`: the mock's records keep what it sent). A line cut short by a fault is passed
 * on as it came, its id taken out by its text.
 */
export const withoutResponseIds: typeof fetch = async (input, init) => {
  const response = await fetch(input, init);
  if (response.body === null || !(response.headers.get("content-type") ?? "").includes("text/event-stream")) return response;
  const strip = (line: string): string => {
    if (!line.startsWith("data:")) return line;
    // The route ends its lines with CRLF: the CR stays where it was.
    const cr = line.endsWith("\r") ? "\r" : "";
    try {
      const chunk = JSON.parse(line.slice(5)) as unknown;
      if (typeof chunk !== "object" || chunk === null || !("responseId" in chunk)) return line;
      delete (chunk as Record<string, unknown>)["responseId"];
      return `data: ${JSON.stringify(chunk)}${cr}`;
    } catch {
      return line.replace(/"responseId":"[^"]*",?/g, "");
    }
  };
  let rest = "";
  const body = response.body.pipeThrough(new TextDecoderStream()).pipeThrough(
    new TransformStream<string, string>({
      transform(text, controller) {
        const lines = (rest + text).split("\n");
        rest = lines.pop()!;
        if (lines.length > 0) controller.enqueue(lines.map((l) => `${strip(l)}\n`).join(""));
      },
      flush(controller) {
        if (rest !== "") controller.enqueue(strip(rest));
      },
    }),
  );
  return new Response(body.pipeThrough(new TextEncoderStream()), { status: response.status, statusText: response.statusText, headers: response.headers });
};

/** The app the AISDK rules describe: its model under the splice check (AISDK-16). */
const guardedModel = (model: Parameters<typeof wrapLanguageModel>[0]["model"], middleware?: unknown, providerTools = false): LanguageModel =>
  wrapLanguageModel({
    model,
    // A cloud provider's model also refuses provider-executed tools the app did not name as reads (AISDK-15), as an app on it does.
    middleware: (providerTools ? [providerToolsGuard(), ...[middleware ?? spliceGuard()].flat()] : (middleware ?? spliceGuard())) as Parameters<typeof wrapLanguageModel>[0]["middleware"],
  });

/** The sentence a spliced response without its start begins with (the runner profile's too). */
const SPLICE_LEAD = "Paying now.";

/** The app's servers: the mock Responses API and the payments API, shared by a property's cases. */
export interface AiSdkWorld {
  /** The mock OpenAI API (modelApi responses and chat); unset on a cloud API's world. */
  openai: MockOpenAI;
  /** The mock provider whose Converse and Gemini routes a cloud API's model speaks to; unset otherwise. */
  provider?: MockProvider;
  /** The API the world's mock serves the app's model on. */
  modelApi?: AiSdkModelApi;
  payments: MockPaymentsServer;
  /**
   * The running cases' plans and attempts, by user text (the case's account is in it): what the
   * mock's script and fault plan read. Each case adds its own entries and removes only those, so
   * a case the property abandoned at its time limit, still running, never touches another's.
   */
  plans: Map<string, ScriptedResponse[]>;
  /**
   * Which attempt of its turn the app is making for a user text (1-based), that turn's plan, and
   * whether the model now answers it differently (a request of the turn failed and the plan has a
   * `rerunDivergence`): then `diverged` are its responses.
   */
  /** Per message: its requests so far (`attempt`), and `regenerateFrom`, how many came before its regenerate's first. */
  attempts: Map<string, { attempt: number; plan: AiSdkMessagePlan; diverging: boolean; diverged: ScriptedResponse[]; regenerateFrom?: number; spliceInArgs?: boolean; spliced?: { attempt: number; afterCall: number; shape: AiSdkSplice["shape"]; regenerate: boolean; inArgsOf?: number } }>;
  close(): Promise<void>;
}

export async function startAiSdkWorld(modelApi: AiSdkModelApi = "responses"): Promise<AiSdkWorld> {
  const world: AiSdkWorld = { openai: undefined as never, modelApi, payments: await startMockPayments({}), plans: new Map(), attempts: new Map(), close: async () => {} };
  if (isCloudModelApi(modelApi)) {
    // The Converse and Gemini routes play the Messages API's scripts and faults: the turn's
    // responses are the same plans, as the Messages API's turns (a reasoning item has no turn there).
    world.provider = await startMockProvider({
      seed: "conformance-ai-sdk",
      logLimit: 50,
      attemptsLimit: 2_000,
      keepAliveTimeoutMs: 65_000,
      script: (request) => {
        const text = cloudUserText(request);
        const steps = text === "" ? undefined : stepsFor(world, text);
        if (steps === undefined) return messagesTurn(sayMessage("Done."));
        const step = messagesStepOf(request, steps);
        return step < steps.length ? messagesTurnOf(steps[step]!) : messagesTurn(sayMessage("Done."));
      },
      faultPlan: (request) => {
        const text = cloudUserText(request);
        const planned = text === "" ? undefined : plannedFault(world, text, (steps) => messagesStepOf(request, steps));
        if (planned === undefined) return undefined;
        if (planned.kind === "splice") {
          // Gemini on Vertex AI: inside a call's streamed arguments where the case draws it (after its first fragment).
          const at = planned.inArgsOf !== undefined ? { toolUse: planned.inArgsOf, afterFragment: 1 } : { afterToolUseStop: planned.afterCall };
          if (planned.shape === "restart") return { kind: "splice", at, messageStart: true } satisfies ProviderFault;
          return planned.shape === "headless" ? { kind: "splice", at, messageStart: false, lead: SPLICE_LEAD } : { kind: "splice", at, messageStart: false };
        }
        const { cut } = planned;
        // Not drawn by runEndToEnd: the Messages API's output limit is a stop reason of the script, not a cut.
        if (cut.kind === "incomplete_event") return { kind: "error_event", at: anthropicPosition({ ...cut, kind: "error_event" }) };
        return { kind: cut.kind, at: anthropicPosition(cut) };
      },
    });
    world.close = async () => {
      await world.provider!.close();
      await world.payments.close();
    };
    return world;
  }
  world.openai = await startMockOpenAI({
    seed: "conformance-ai-sdk",
    // Nothing reads the requests across cases; a certification makes thousands.
    logLimit: 50,
    script: (request) => {
      const text = lastUserText(request);
      const steps = text === undefined ? undefined : stepsFor(world, text);
      if (steps === undefined) return scriptFromPlans({})(request);
      // The turn's responses in order: which one is due is read from the calls the input shows.
      const step = stepOf(request, steps);
      return step < steps.length ? steps[step]! : sayText("Done.");
    },
  });
  world.openai.setFaultPlan((request) => {
    const text = lastUserText(request);
    const planned = text === undefined ? undefined : plannedFault(world, text, (steps) => stepOf(request, steps));
    if (planned === undefined) return undefined;
    if (planned.kind === "splice") {
      const position = { afterCallDone: planned.afterCall };
      if (planned.shape === "restart") return { kind: "splice", at: position, responseCreated: true };
      return planned.shape === "headless" ? { kind: "splice", at: position, responseCreated: false, lead: SPLICE_LEAD } : { kind: "splice", at: position, responseCreated: false };
    }
    return { kind: planned.cut.kind, at: openAIPosition(planned.cut) };
  });
  world.close = async () => {
    await world.openai.close();
    await world.payments.close();
  };
  return world;
}

/** What the plan puts on a request of a turn, whichever API renders it: a cut, a proxy's splice, or nothing. */
type PlannedFault = { kind: "cut"; cut: AiSdkCut["cut"] } | { kind: "splice"; afterCall: number; shape: AiSdkSplice["shape"]; inArgsOf?: number };

/** The fault the plan puts on a request with this user text; `stepOfRequest` reads which scripted response is due. */
function plannedFault(world: AiSdkWorld, text: string, stepOfRequest: (steps: readonly ScriptedResponse[]) => number): PlannedFault | undefined {
  const at = world.attempts.get(text);
  const planned = at?.plan.cuts[at.attempt - 1];
  if (planned === undefined) {
    // No cut on this request: a proxy's splice, when the plan puts one on it, into the tool
    // step's response after a call of it completed (the response to the request sent again: the
    // script's answer to the same request). The turn's own splice first, then the regenerate's
    // (its attempt counts the regenerate's requests).
    const own = at?.plan.splice;
    const again = at?.plan.regenerateSplice;
    const regenerate = own?.attempt !== at?.attempt && again !== undefined && at!.regenerateFrom !== undefined && at!.attempt === at!.regenerateFrom + again.attempt;
    const splice = regenerate ? again : own;
    if (splice === undefined || (!regenerate && splice.attempt !== at!.attempt)) return undefined;
    const steps = stepsFor(world, text);
    if (steps === undefined || stepOfRequest(steps) !== 0 || steps[0] === undefined) return undefined;
    const calls = callsOf(steps[0]);
    if (calls === 0) return undefined;
    const afterCall = splice.afterCall % calls;
    // Inside a call's streamed arguments (Gemini on Vertex AI, where drawn): the call after the one the plan names, or, that one being the last, itself.
    const inArgsOf = at!.spliceInArgs === true ? Math.min(afterCall + 1, calls - 1) : undefined;
    at!.spliced = { attempt: at!.attempt, afterCall, shape: splice.shape, regenerate, ...(inArgsOf !== undefined ? { inArgsOf } : {}) };
    return { kind: "splice", afterCall, shape: splice.shape, ...(inArgsOf !== undefined ? { inArgsOf } : {}) };
  }
  const steps = stepsFor(world, text);
  const step = steps === undefined ? 0 : stepOfRequest(steps);
  // A tool loop's step 2 is answered in the request of the step before it (a continuation's
  // repeats are a request of their own; a loop after them is the turn's last response with calls).
  const loop = followUpStepOf(at!.plan) === step;
  const phase = steps !== undefined && step < steps.length ? (loop ? "follow_up" : "tool_step") : "confirmation";
  if (planned.phase !== phase) return undefined;
  // A continuation's step may make fewer calls than the cut was drawn for: cut its last one.
  const calls = steps?.[step] === undefined ? 1 : callsOf(steps[step]!);
  const cut = "toolUse" in planned.cut ? { ...planned.cut, toolUse: Math.min(planned.cut.toolUse, calls - 1) } : planned.cut;
  return { kind: "cut", cut };
}

/** A scripted response as the Messages API's turn the cloud routes render: its calls (a reasoning item has no block there). */
function messagesTurnOf(response: ScriptedResponse): AssistantTurn {
  const content = response.output.flatMap((o): ScriptedContent[] =>
    o.type === "function_call" ? [toolUse(o.name, o.arguments, o.reword === undefined ? {} : { reword: o.reword })] : o.type === "text" ? [sayMessage(o.text)] : [],
  );
  return messagesTurn(...content);
}

/**
 * The user's last message in a Messages request: the last text block of the last user message
 * that answers no tool. Not the whole message's text: Bedrock's Converse API takes consecutive
 * user messages as one (`@ai-sdk/amazon-bedrock` merges them into one message of text blocks),
 * as a chat whose earlier message was never answered sends them.
 */
function cloudUserText(request: MessagesRequest): string {
  const i = lastUserPromptIndex(request);
  const content = i === -1 ? undefined : request.messages[i]!.content;
  if (typeof content === "string") return content.trim();
  const texts = (content ?? []).filter((b): b is Extract<typeof b, { type: "text" }> => b.type === "text" && b.text.trim() !== "");
  return texts.length === 0 ? "" : texts[texts.length - 1]!.text.trim();
}

/** `stepOf` on a Messages request: the tool_use blocks the assistant messages after the last user prompt show. */
function messagesStepOf(request: MessagesRequest, steps: readonly ScriptedResponse[]): number {
  const shown = request.messages
    .slice(lastUserPromptIndex(request) + 1)
    .filter((m) => m.role === "assistant")
    .flatMap((m) => (typeof m.content === "string" ? [] : m.content))
    .filter((b) => b.type === "tool_use").length;
  let step = 0;
  let through = 0;
  while (step < steps.length && through + callsOf(steps[step]!) <= shown) through += callsOf(steps[step++]!);
  return step;
}

/** The turn's scripted responses for a user text: as planned, or as the model answers its re-runs. */
function stepsFor(world: AiSdkWorld, text: string): ScriptedResponse[] | undefined {
  const state = world.attempts.get(text);
  return state?.diverging === true ? state.diverged : world.plans.get(text);
}

/**
 * Which of the turn's scripted responses a request is due: the one after the steps whose calls
 * its input already shows (function_call items after the last user message; a cut response is
 * never kept, so the count falls on a step boundary).
 */
function stepOf(request: ResponsesRequest, steps: readonly ScriptedResponse[]): number {
  const input = Array.isArray(request.input) ? request.input : [];
  let start = 0;
  for (let i = input.length - 1; i >= 0; i--) {
    if (input[i]!.role === "user") {
      start = i + 1;
      break;
    }
  }
  const shown = input.slice(start).filter((item) => item.type === "function_call").length;
  let step = 0;
  let through = 0;
  while (step < steps.length && through + callsOf(steps[step]!) <= shown) through += callsOf(steps[step++]!);
  return step;
}

const callsOf = (response: ScriptedResponse) => response.output.filter((o) => o.type === "function_call").length;

// ---- the app ---------------------------------------------------------------------------------

/** What the app was told about one tool call in an attempt it kept (a tool-result or tool-error part). */
interface Told {
  chat: string;
  message: string;
  /** 0 for the turn as first sent, 1 for its regenerate: the answers the app kept for one pass at the turn. */
  pass: number;
  /** The request of the pass (0, then each continuation) and the step of `streamText` in it (1-based) that told it. */
  request: number;
  step: number;
  toolCallId: string;
  tool: string;
  input: Record<string, unknown>;
  /** The key the result or error is of (the dispatch outcome's, the error's), when the app can read it. */
  key?: string | undefined;
  ok: boolean;
  output?: unknown;
  error?: unknown;
}

/** What `turn.unansweredCalls()` told the app after a request it kept (AISDK-14): what the app shows the user. */
interface Listing {
  chat: string;
  message: string;
  pass: number;
  request: number;
  /** The wrapper's answer; undefined when the app could not ask (its turn has no unansweredCalls) or the ask failed. */
  answer?: AiSdkUnansweredCalls | undefined;
  error?: string | undefined;
}

interface CaseLog {
  started: number;
  timeline: string[];
  told: Told[];
  listings: Listing[];
  /** The passes at a turn whose kept answer the model gave differently (rerunDivergence): their calls are the diverged ones. */
  diverged: Set<string>;
  /** The passes at a turn that were answered (chat, message text, pass): the oracle counts their kept answers. */
  answered: Set<string>;
  /**
   * Where each call the model streamed was made: the request (chat, turn, pass, request of the
   * pass) whose stream carried its `tool-call` part, by the call id the provider minted for it.
   */
  callAt: Map<string, CallSite>;
  /** Every call that reached the wrapped tool's `execute` (the AI SDK ran it) or the app's own (the dispatcher ran it), in order. */
  dispatched: Dispatched[];
  /** The mock's responses to this case's requests, as its log shows them: each one's call ids, and a spliced one's shape. */
  responses: CaseResponse[];
  /** The mock's records of this case's requests, by request number (read into `responses` once the case ended). */
  requests: Map<number, RequestRecord | ProviderRecord>;
  stats: Record<string, number>;
}

/** The request a call's `tool-call` part came in: its turn is its chat's user message (AISDK-1). */
interface CallSite {
  chat: string;
  message: string;
  pass: number;
  request: number;
}

/**
 * A call at a dispatch point: `execute`, the wrapped tool's (the AI SDK executed the call), or
 * `run`, the app's tool body under it (the dispatcher claimed the call and ran it, at the step or
 * at its `tool-call` part), with the key it forwarded to the payments API.
 */
interface Dispatched {
  at: "execute" | "run";
  toolCallId: string;
  tool: string;
  key?: string | undefined;
}

/** A response the mock rendered for a request of the case (ModelResponse's fields, as the runner profile reads them). */
interface CaseResponse {
  text: string;
  calls: string[];
  callIds: string[];
  spliced?: AiSdkSplice["shape"] | undefined;
}

const IDENTITY = { send_payment: TOOL_SHAPES.send_payment.identity! };
// ask_user has no execute (a client-side tool): createOnceTools leaves it as it is.
const EFFECTS = { send_payment: "keyed_write", create_invoice: "unkeyed_write", ask_user: "read" } as const;
/** A call needs approval when its identity carries the mark (the scenario puts it on an approval turn's calls). */
const needsApproval = (input: { reference?: string; memo?: string }) => (input.reference ?? input.memo ?? "").includes(APPROVAL_MARK);

function say(log: CaseLog, who: string, what: string): void {
  log.timeline.push(`${String(Date.now() - log.started).padStart(6)} ms  ${who.padEnd(7)} ${what}`);
}

function count(log: CaseLog, what: string, by = 1): void {
  log.stats[what] = (log.stats[what] ?? 0) + by;
}

/** The app's tools as an AI SDK app writes them: `tool({ inputSchema, execute })` over the payments client. */
function appTools(
  world: AiSdkWorld,
  account: string,
  log: CaseLog,
  faults: Map<string, FaultSpec["outcome"]>,
  running: { n: number },
  disposition: AiSdkAppOptions["disposition"],
  approvals: boolean,
  process: AppProcess,
  deaths: PlannedDeaths,
) {
  const api = createPaymentsClient({ baseURL: world.payments.url, token: account, fetch: process.fetch });
  const tell = disposition ?? ((e: PaymentsError) => DISPOSITION_BY_OUTCOME[e.outcome]);
  // The app forwards the call's Dispatch-Once key; an unwrapped app has only the provider's call id.
  const run = async <T>(name: string, args: Record<string, unknown>, options: { toolCallId: string }, perform: (key: string, fault: FaultSpec["outcome"] | undefined) => Promise<T>) => {
    const info = dispatchOnceOf(options as never);
    const key = info?.idempotencyKey ?? options.toolCallId;
    // The turn's own plans for this signature: two messages of a chat may ask for the identical
    // call (AiSdkMessagePlan.repeatsEarlier), and a later one inherits no fault or death of the
    // earlier's. The turn is the one whose request streamed the call (by call id: what ran).
    const site = log.callAt.get(options.toolCallId);
    const signature = site === undefined ? intentSignature(name, args) : planScope(site.chat, site.message, name, args);
    // The distinct keys this call's signature ran under at its turn, in order: a death planned on
    // a loop's follow-up lands on the first run under the key after those of the turn's earlier
    // identical calls (found by what ran, not by the ordinal the wrapper under test gave it).
    const keys = deaths.keys.get(signature) ?? [];
    if (!keys.includes(key)) keys.push(key);
    deaths.keys.set(signature, keys);
    const planned = deaths.planned.get(signature);
    const dying = planned !== undefined && keys.indexOf(key) === planned.nth ? planned.when : undefined;
    const where = planned !== undefined && planned.where !== "follow_up" ? ` (${planned.where})` : "";
    if (dying !== undefined) deaths.planned.delete(signature);
    // A downstream fault planned on the call waits for the run after the death (the take-over's).
    const fault = dying === undefined ? faults.get(signature) : undefined;
    if (dying === undefined) faults.delete(signature);
    log.dispatched.push({ at: "run", toolCallId: options.toolCallId, tool: name, key });
    running.n++;
    say(log, "tool", `${name} runs key ${short(key)}${info ? ` (turn ${info.turnIndex}, ordinal ${info.ordinal})` : " (unwrapped)"} with ${canonicalize(args as never)} in ${process.name}${fault ? ` [downstream fault ${fault}]` : ""}`);
    count(log, "tool_runs");
    if (process.takingOver.has(key)) count(log, "takeover_runs");
    try {
      if (dying === "before_downstream") process.die(`before calling the payments API for ${name} key ${short(key)}${where}`);
      const result = await perform(key, fault);
      say(log, "tool", `${name} key ${short(key)}: payments API answered ${JSON.stringify(result)}`);
      if (dying === "after_effect") process.die(`after the payments API accepted ${name} key ${short(key)}, before the ledger completed${where}`);
      return result;
    } catch (error) {
      if (!(error instanceof PaymentsError) || process.dead) throw error;
      say(log, "tool", `${name} key ${short(key)}: payments API failed ${error.code} (${error.outcome})`);
      if (error.outcome === "unknown") count(log, "lost_responses");
      throw new ToolError(error.message, { disposition: tell(error), code: error.code, cause: error });
    } finally {
      running.n--;
    }
  };
  const keyed = (key: string, fault: FaultSpec["outcome"] | undefined) => ({ idempotencyKey: key, ...(fault !== undefined ? { fault: { outcome: fault } } : {}) });
  // Only a chat with approval turns has the option: a tool with needsApproval is never dispatched at its tool-call part (AISDK-4).
  const approval = approvals ? { needsApproval: (input: { reference?: string; memo?: string }) => needsApproval(input) } : {};
  return {
    send_payment: tool({
      description: "Send a payment to a payee. Amount in minor units.",
      inputSchema: TOOL_SHAPES.send_payment.input,
      ...approval,
      execute: (args, options) =>
        run("send_payment", args, options, async (key, fault) => {
          const { body } = await api.createPayment(args, keyed(key, fault));
          return { paymentId: body.id, status: body.status };
        }),
    }),
    create_invoice: tool({
      description: "Create an invoice for a customer. Amount in minor units.",
      inputSchema: TOOL_SHAPES.create_invoice.input,
      ...approval,
      execute: (args, options) =>
        run("create_invoice", args, options, async (key, fault) => {
          const { body } = await api.createInvoice(args, keyed(key, fault));
          return { invoiceId: body.id };
        }),
    }),
    // A client-side tool: the browser answers it, in the turn's next request.
    ask_user: tool({ description: "Ask the user a question.", inputSchema: z.object({ question: z.string() }) }),
  } satisfies ToolSet;
}

/** The app the AISDK rules describe: its tools through `createOnceTools`, identity declared (AISDK-7). */
const wrapOnce: NonNullable<AiSdkAppOptions["wrap"]> = (tools, ledger, options) => {
  const once = createOnceTools({ tools: tools as ToolSet, effects: options.effects, identity: options.identity, ledger, dispatcher: options.dispatcher });
  return (request) => once.forTurn(request);
};

/** A payment is identified by its identity fields, an invoice by all of its own (its memo is unique per call). */
function intentSignature(tool: string, args: Record<string, unknown>): string {
  const fields = tool === "send_payment" ? IDENTITY.send_payment : ["customer", "amount", "currency", "memo"];
  return `${tool}:${canonicalize(Object.fromEntries(fields.map((f) => [f, args[f]])) as never)}`;
}

/**
 * What the harness keys a call's planned fault and death by: its turn (chat and message) and its
 * signature. Before cross-turn repeats every signature was one message's, and this changes nothing.
 */
const planScope = (chat: string, message: string, tool: string, args: Record<string, unknown>) => `${chat}\u0000${message}\u0000${intentSignature(tool, args)}`;

/** The user's words for a message, unique per case (the account is in them). */
const contentOf = (account: string, chat: string, text: string) => `${account} ${chat} ${text}`;

interface Chat {
  plan: AiSdkChatPlan;
  /** The app's committed messages (what `useChat` would send with the next request). */
  messages: ModelMessage[];
  /** The server process that answers the chat's requests; after a death, the next request's is a new one. */
  process: AppProcess;
  spawn: () => Promise<AppProcess>;
  /** The message whose request a death cut, until its turn is asked again (counted: re-sent or regenerated). */
  diedIn?: string | undefined;
  /** How the timeline names the chat's requests: another tab's (AiSdkChatPlan.tabs) or a reload's; its id otherwise. */
  name?: string | undefined;
  /** Called once after the next request of the chat ended, answered or not (another tab sends then, AiSdkTab.when). */
  afterRequest?: (() => void) | undefined;
}

/**
 * One server process of the chat route: its own `createOnceTools` over its own ledger instance
 * (`reopen()`) and its own payments client. When it dies every ledger and payments I/O it starts
 * or awaits fails, as a dead process's would, and its stream to the client is cut: its claims
 * stay held until they lapse on the ledger's clock.
 */
interface AppProcess {
  name: string;
  dead: boolean;
  /** The chat route's tools for one request (its own tool set: only a chat with approval turns has needsApproval). */
  forTurn: (request: AiSdkRequest) => AiSdkTurnTools;
  fetch: typeof fetch;
  /** Aborts the process's `streamText` when it dies (the client's stream is cut). */
  abort: AbortController;
  /** Why it died, once it has. */
  death?: string | undefined;
  /** Resolves when it dies: the client stops reading its stream there. */
  died: Promise<void>;
  /** Keys this process's dispatcher took over from an expired claim (its runs are counted). */
  takingOver: Set<string>;
  die(what: string): never;
}

/** Where a planned death lands, as the timeline says it and `onStats` counts it. */
type DeathSite = "follow_up" | "step 1" | "approved call";

const DEATH_STATS: Record<DeathSite, string> = { follow_up: "follow_up_deaths", "step 1": "first_call_deaths", "approved call": "approval_deaths" };

/**
 * The call a planned death lands on, and after how many distinct keys of its signature: step 1's
 * first call on its first run (the message's calls are distinct; in an approval turn that run is
 * the approved one, in the turn's second request); an approved repeat on its second; a loop's
 * follow-up after the runs of the turn's earlier identical calls.
 */
function deathTarget(message: AiSdkMessagePlan, death: AiSdkDeath): { call: PlannedCall; nth: number; where: DeathSite } | undefined {
  const approval = message.continuation?.kind === "approval";
  if (death.on === "approved_call" || (death.on === "first_call" && approval)) {
    const repeated = death.repeat === true ? message.continuation?.repeat[0] : undefined;
    const call = message.calls[repeated ?? 0];
    return call === undefined ? undefined : { call, nth: repeated === undefined ? 0 : 1, where: "approved call" };
  }
  if (death.on === "first_call") return { call: message.calls[0]!, nth: 0, where: "step 1" };
  const call = message.followUp?.[0];
  const same = (a: PlannedCall, b: PlannedCall) => intentSignature(a.tool, a.args) === intentSignature(b.tool, b.args);
  return call === undefined ? undefined : { call, nth: callsBeforeFollowUp(message, same), where: "follow_up" };
}

/** The deaths planned, by turn and signature (planScope), and the keys each ran under at its turn. */
interface PlannedDeaths {
  planned: Map<string, { when: AiSdkDeath["when"]; nth: number; where: DeathSite }>;
  keys: Map<string, string[]>;
}

class ProcessGone extends Error {
  constructor(name: string) {
    super(`the chat route's process ${name} is gone`);
    this.name = "ProcessGone";
  }
}

const LEDGER_METHODS = ["claim", "renew", "complete", "fail", "markUnknown", "release", "lookup", "sweep"] as const;

/** The ledger as a process sees it: once dead, every call it starts or awaits fails. */
function mortalLedger(target: Ledger, process: { dead: boolean; name: string }): Ledger {
  const view = Object.create(target) as Ledger;
  for (const method of LEDGER_METHODS) {
    const f = (target as unknown as Record<string, unknown>)[method] as ((...args: unknown[]) => Promise<unknown>) | undefined;
    if (typeof f !== "function") continue;
    (view as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      if (process.dead) return Promise.reject(new ProcessGone(process.name));
      return f.apply(target, args).then(
        (r) => (process.dead ? Promise.reject(new ProcessGone(process.name)) : r),
        (e: unknown) => Promise.reject(process.dead ? new ProcessGone(process.name) : e),
      );
    };
  }
  return view;
}

/**
 * How a request of the chat route went: its answer kept, failed (re-sent, AISDK-6), or ended for
 * good by the provider (not re-sent: the same request ends the same way, STREAM-13).
 */
type Attempted = "answered" | "failed" | "ended_for_good";

/** The wrapped tools: a call of one without its result is one the AI SDK did not run. */
const EXECUTED = new Set(["send_payment", "create_invoice"]);

/**
 * One request of the chat route: `streamText` with the chat's messages. Kept only when the
 * stream finished; a failed attempt leaves the messages as they were.
 */
async function attempt(ctx: RunContext, chat: Chat, message: AiSdkMessagePlan, content: string, label: string, pass: number, requestOfPass: number): Promise<Attempted> {
  const state = ctx.world.attempts.get(content)!;
  state.attempt++;
  const request: AiSdkRequest = { conversationId: chat.plan.id, messages: chat.messages, dispatchAt: chat.plan.dispatchAt };
  if (chat.process.dead) chat.process = await chat.spawn();
  const process = chat.process;
  say(ctx.log, "app", `${chat.name ?? chat.plan.id} ${label}: request ${state.attempt} of ${JSON.stringify(message.text)} (${chat.messages.length} messages, tools at ${chat.plan.dispatchAt}, in ${process.name})`);
  count(ctx.log, "attempts");
  if (chat.diedIn === message.text) {
    // The client asks the turn again after a death cut its stream: AISDK-6's re-send, or a regenerate.
    count(ctx.log, label.includes("re-sent") ? "resends_after_death" : "regenerates_after_death");
    chat.diedIn = undefined;
  }
  if (state.diverging) {
    // The model answers this re-run of the turn differently (rerunDivergence): what it leaves out may have run.
    const d = message.rerunDivergence!;
    const how = d.kind === "omit" ? `without ${message.calls[d.call]!.tool} ${canonicalize(message.calls[d.call]!.args as never)}${message.calls.length === 1 ? " (a text answer)" : ""}` : "with its two calls swapped";
    say(ctx.log, "model", `answers a re-run of ${JSON.stringify(message.text)} ${how}`);
    count(ctx.log, "divergent_reruns");
  }
  const turn = process.forTurn(request);
  // The dispatch points the oracle reads (AISDK-16): the request each call's part came in, and
  // each call the AI SDK handed the wrapped tool's execute. The app's own tool body records the
  // runs (appTools), a call dispatched at its tool-call part included.
  const site: CallSite = { chat: chat.plan.id, message: message.text, pass, request: requestOfPass };
  const seen = (toolCallId: string) => {
    if (!ctx.log.callAt.has(toolCallId)) ctx.log.callAt.set(toolCallId, site);
  };
  const tools = observed(turn.tools, ctx.log, seen);
  const onChunk = (event: { chunk: { type: string; toolCallId?: unknown } }) => {
    if (event.chunk.type === "tool-call" && typeof event.chunk.toolCallId === "string") seen(event.chunk.toolCallId);
    turn.onChunk?.(event);
  };
  const told: Told[] = [];
  const runsBefore = ctx.log.stats.tool_runs ?? 0;
  const calls = new Map<string, { tool: string; input: Record<string, unknown> }>();
  let failed: string | undefined;
  let listing: Listing | undefined;
  let forGood = false;
  let finished = false;
  /** The steps of `streamText` this request started (a tool loop's step 2 is the second). */
  let steps = 0;
  /** Calls of wrapped tools with a result or an approval request: the rest were not run by the AI SDK. */
  const answered = new Set<string>();
  try {
    const result = streamText({
      model: ctx.model({ trigger: pass === 0 ? "submit-message" : "regenerate-message" }),
      // A user message's id is the UI message's (AISDK-17), which the route reads; the model is sent model messages.
      messages: chat.messages.map(withoutId),
      tools: tools as ToolSet,
      onChunk: onChunk as never,
      stopWhen: stepCountIs(4),
      maxRetries: 0,
      // The process's death cuts the client's stream (its wrapped writes are not aborted by it, AISDK-2: they fail with the process's I/O).
      abortSignal: process.abort.signal,
      // The stream's error reaches the app as its error part; the AI SDK's default logs it too.
      onError: () => {},
    });
    // The client reads the stream until it ends, or until the process serving it dies: nothing a
    // dead process would still send arrives, and its aborted stream may never end. Seen at seed
    // 424242 (a death in a call dispatched at its tool-call part, in step 2), and the cause is
    // Node's fetch, not the wrapper: the model's response had fully arrived (undici's onComplete
    // had stopped listening for the abort), the abort came before the AI SDK read it to its end,
    // and undici's next read of the body then neither closes nor errors it; the AI SDK notices an
    // abort only when a read returns. The call's dispatch had settled (record_failed). Reproduced
    // with no Dispatch-Once code in packages/ai-sdk/test/abort-after-body.test.ts; the fix an app
    // uses is the package's boundedFetch (packages/ai-sdk README, "A silent or aborted model
    // stream"); this client's race does the same for the kit.
    const parts = result.fullStream[Symbol.asyncIterator]();
    const gone = process.died.then(() => ({ done: true as const, value: undefined }));
    for (;;) {
      const next = await Promise.race([parts.next(), gone]);
      if (next.done === true) {
        if (process.dead) void parts.return?.()?.catch?.(() => {});
        break;
      }
      const part = next.value;
      if (part.type === "start-step") steps++;
      else if (part.type === "finish-step") {
        // Any step, not only the last (AISDK-8): a Chat Completions body closed cleanly in a call's
        // arguments finishes its step "other" (or "error"), the AI SDK answers the cut call with a
        // tool-error and sends the next step, and the stream's own finish is that step's.
        if (part.finishReason === "error" || part.finishReason === "other") failed ??= `step ${steps} finish reason ${part.finishReason}`;
      }
      else if (part.type === "tool-call") {
        calls.set(part.toolCallId, { tool: part.toolName, input: part.input as Record<string, unknown> });
        say(ctx.log, "ai-sdk", `tool-call ${part.toolName} (${part.toolCallId})${steps > 1 ? ` in step ${steps}` : ""}`);
      } else if (part.type === "tool-approval-request") {
        answered.add(part.toolCall.toolCallId);
      } else if (part.type === "tool-result" || part.type === "tool-error") {
        answered.add(part.toolCallId);
        const c = calls.get(part.toolCallId);
        const ok = part.type === "tool-result";
        const key = ok ? turn.outcomeOf?.(part.toolCallId)?.key : keyOfError((part as { error: unknown }).error);
        const entry: Told = {
          chat: chat.plan.id,
          message: message.text,
          pass,
          request: requestOfPass,
          step: steps,
          toolCallId: part.toolCallId,
          tool: part.toolName,
          input: (c?.input ?? part.input) as Record<string, unknown>,
          ...(key !== undefined ? { key } : {}),
          ok,
          ...(ok ? { output: (part as { output: unknown }).output } : { error: (part as { error: unknown }).error }),
        };
        told.push(entry);
        say(ctx.log, "ai-sdk", `${part.type} ${part.toolName}: ${ok ? JSON.stringify(entry.output) : describeError(entry.error)}`);
      } else if (part.type === "error") {
        failed ??= describeError(part.error);
      } else if (part.type === "finish") {
        finished = true;
        // A stream that ended without its finishing event is no answer to keep (STREAM-1).
        if (part.finishReason === "error" || part.finishReason === "other") failed ??= `finish reason ${part.finishReason}`;
        // The provider ended the response for good (its output limit, a filter) after a call: the
        // AI SDK ran no tool of that step, and kept, the call without its result would make every
        // later request of the chat fail (AI_MissingToolResultsError). At the tool-call part it
        // may have run all the same (AISDK-8).
        const unrun = [...calls].filter(([id, c]) => EXECUTED.has(c.tool) && !answered.has(id));
        if ((part.finishReason === "length" || part.finishReason === "content-filter") && unrun.length > 0) {
          failed ??= `finish reason ${part.finishReason} with ${unrun.length} call(s) the AI SDK did not run`;
          forGood = true;
        }
      }
    }
    if (process.dead) failed = `the chat route's process died ${process.death ?? ""}: the client's stream was cut`;
    if (!finished) failed ??= "the stream ended without a finish part";
    if (failed === undefined) {
      const response = await result.response;
      // AISDK-14: once the stream finished, before the answer is kept and shown, the app asks the
      // turn which of its effects neither this request nor its history answers, and shows them.
      listing = await listUnanswered(ctx, chat, turn, message, pass, requestOfPass);
      chat.messages.push(...response.messages);
    }
  } catch (error) {
    failed ??= describeError(error);
  }
  if (process.dead) {
    failed = `the chat route's process died ${process.death ?? ""}: the client's stream was cut`;
    chat.diedIn = message.text;
  }
  keepRequests(ctx.world, ctx.log, [content]);
  const spliced = state.spliced?.attempt === state.attempt ? state.spliced : undefined;
  if (spliced !== undefined) {
    count(ctx.log, "splices");
    count(ctx.log, `splices_${spliced.shape}`);
    if (spliced.regenerate) count(ctx.log, "regenerate_splices");
    const shape = spliced.shape === "restart" ? "with its own start" : spliced.shape === "headless" ? "without its start, led by a sentence" : "without its start and without a lead";
    if (spliced.inArgsOf !== undefined) count(ctx.log, "splices_in_streamed_args");
    // Where spliceGuard() has only the streamed call's order to go by (AISDK-16).
    if (ctx.vertex?.responseIdsStripped === true) count(ctx.log, "splices_ids_stripped");
    const where = spliced.inArgsOf !== undefined ? `inside the streamed arguments of its call ${spliced.inArgsOf}` : `after its call ${spliced.afterCall} completed`;
    say(ctx.log, "proxy", `spliced into ${spliced.regenerate ? "the regenerate's " : ""}request ${state.attempt} of ${JSON.stringify(message.text)}, ${where}, the response to the request sent again ${shape} (AISDK-16)`);
  }
  if (failed !== undefined) {
    say(ctx.log, "app", `${chat.name ?? chat.plan.id} request ${state.attempt} failed (${failed}); nothing kept`);
    // From now on the model answers the turn's re-runs differently, where the plan says so.
    if (message.rerunDivergence !== undefined) state.diverging = true;
    count(ctx.log, "attempts_failed");
    // The chapter's incident: a call ran in this attempt, and the app re-sends the turn anyway.
    if ((ctx.log.stats.tool_runs ?? 0) > runsBefore) count(ctx.log, "failed_after_a_tool_ran");
    // Cut in a tool loop's later step: the re-send makes step 1's calls again, and then step 2's.
    if (steps === 2 && (message.followUp ?? []).length > 0) count(ctx.log, "failed_in_a_later_step");
    return forGood ? "ended_for_good" : "failed";
  }
  ctx.log.told.push(...told);
  if (listing !== undefined) ctx.log.listings.push(listing);
  if (state.diverging) ctx.log.diverged.add(passOf(chat.plan.id, message.text, pass));
  // A tool loop inside the request: answers kept from two of its steps, and a later step's call identical to an earlier step's.
  const later = told.filter((t) => t.step > 1);
  if (later.length > 0 && told.some((t) => t.step === 1)) {
    count(ctx.log, "follow_ups");
    const first = new Set(told.filter((t) => t.step === 1).map((t) => intentSignature(t.tool, t.input)));
    if (later.some((t) => first.has(intentSignature(t.tool, t.input)))) count(ctx.log, "follow_up_repeats");
  }
  // A tool loop in a continuation: the turn's last request answered after the follow-up's call
  // (a client-side tool's turn: its step 2; an approval turn: the call after the approved repeats).
  if (message.continuation !== undefined && (message.followUp ?? []).length > 0 && requestOfPass === (message.continuation.kind === "approval" ? 2 : 1)) {
    count(ctx.log, "continuation_follow_ups");
    const earlier = new Set(message.calls.map((c) => intentSignature(c.tool, c.args)));
    if (message.continuation.kind === "client_tool" && later.some((t) => earlier.has(intentSignature(t.tool, t.input)))) count(ctx.log, "continuation_follow_up_repeats");
  }
  // A later turn's call identical to an earlier turn's (repeatsEarlier): its kept answers.
  const repeated = message.repeatsEarlier === undefined ? undefined : message.calls[message.repeatsEarlier.call];
  if (repeated !== undefined) count(ctx.log, "cross_turn_repeats_told", told.filter((t) => intentSignature(t.tool, t.input) === intentSignature(repeated.tool, repeated.args)).length);
  say(ctx.log, "app", `${chat.name ?? chat.plan.id} request ${state.attempt} answered; kept ${told.length} tool answers`);
  return "answered";
}

/** The key a Dispatch-Once error is of (outcome_unknown, tool_failed, claim_released, ...), when it says one. */
function keyOfError(error: unknown): string | undefined {
  const key = typeof error === "object" && error !== null ? (error as { key?: unknown }).key : undefined;
  return typeof key === "string" ? key : undefined;
}

/** The wrapped tools as the AI SDK sees them, each execute noted first (the call id it was handed). */
function observed(tools: AiSdkToolSet, log: CaseLog, seen: (toolCallId: string) => void): AiSdkToolSet {
  return Object.fromEntries(
    Object.entries(tools).map(([name, t]) => {
      const execute = (t as { execute?: unknown }).execute;
      if (typeof execute !== "function") return [name, t];
      const noted = (input: unknown, options: { toolCallId: string }) => {
        seen(options.toolCallId);
        log.dispatched.push({ at: "execute", toolCallId: options.toolCallId, tool: name });
        return (execute as (input: unknown, options: unknown) => unknown).call(t, input, options);
      };
      return [name, { ...(t as object), execute: noted }];
    }),
  );
}

/**
 * The mock's records of this case's requests (by its messages' user texts), kept by reference:
 * the mock's log holds its last 50 requests only, and a record read now may still be rendering.
 * Read once per attempt, so no record leaves the log unread.
 */
function keepRequests(world: AiSdkWorld, log: CaseLog, contents: readonly string[]): void {
  const records: readonly (RequestRecord | ProviderRecord)[] = world.provider?.requests ?? world.openai.requests;
  for (const r of records) {
    if (log.requests.has(r.requestNumber)) continue;
    const text = userTextOf(r);
    if (text === undefined || !contents.includes(text)) continue;
    log.requests.set(r.requestNumber, r);
    // Which API the route's model spoke (AiSdkAppOptions.modelApi): a run says what it certified.
    count(log, r.api === "chat.completions" ? "chat_completions_requests" : r.api === "converse" ? "converse_requests" : r.api === "gemini" ? (isVertexGemini(r) ? "gemini_vertex_requests" : "gemini_requests") : "responses_requests");
    if (r.api === "gemini" && isVertexGemini(r)) {
      // What the request asked of Vertex AI: streamed call arguments (every one), thoughts (where drawn).
      const body = r.body as { toolConfig?: { functionCallingConfig?: { streamFunctionCallArguments?: unknown } }; generationConfig?: { thinkingConfig?: { includeThoughts?: unknown } } } | null;
      if (body?.toolConfig?.functionCallingConfig?.streamFunctionCallArguments === true) count(log, "vertex_streamed_args_requests");
      if (body?.generationConfig?.thinkingConfig?.includeThoughts === true) count(log, "vertex_thoughts_requests");
    }
  }
}

const isProviderRecord = (r: RequestRecord | ProviderRecord): r is ProviderRecord => "toolUses" in r;
/** A request of the mock provider's Vertex Gemini route (its path), not of the Gemini API's. */
const isVertexGemini = (r: RequestRecord | ProviderRecord) => isProviderRecord(r) && /\/publishers\/google\/models\//.test(r.path);

/** A logged request's last user text; none for a body the mock refused (not a Responses request). */
function userTextOf(r: RequestRecord | ProviderRecord): string | undefined {
  if (isProviderRecord(r)) {
    // A cloud route's body is read as the Messages request it stands for, as the mock's script reads it.
    const view = (r.api === "converse" ? messagesFromConverse(r.body, "m", true) : r.api === "gemini" ? messagesFromGemini(r.body, "m", true) : r.body) as MessagesRequest | undefined;
    if (typeof view !== "object" || view === null || !Array.isArray(view.messages)) return undefined;
    const text = cloudUserText(view);
    return text === "" ? undefined : text;
  }
  // A Chat Completions request is read as the Responses request it amounts to, as the mock's script reads it.
  const body = r.api === "chat.completions" && typeof r.body === "object" && r.body !== null ? responsesView(r.body as Record<string, unknown>) : (r.body as ResponsesRequest | undefined);
  return typeof body === "object" && body !== null && (typeof body.input === "string" || Array.isArray(body.input)) ? lastUserText(body) : undefined;
}

/** The responses the kept records show: each request's own, and the one a proxy spliced into its body. */
function responsesOf(requests: ReadonlyMap<number, RequestRecord | ProviderRecord>): CaseResponse[] {
  return [...requests.values()].flatMap((r): CaseResponse[] => {
    const text = userTextOf(r) ?? "";
    if (isProviderRecord(r)) {
      const own: CaseResponse = { text, calls: r.toolUses.map((c) => c.name), callIds: r.toolUses.map((c) => c.id) };
      if (r.splicedToolUses === undefined || r.fault?.kind !== "splice") return [own];
      const shape: AiSdkSplice["shape"] = r.fault.messageStart ? "restart" : r.fault.lead !== undefined ? "headless" : "headless_bare";
      return [own, { text, calls: r.splicedToolUses.map((c) => c.name), callIds: r.splicedToolUses.map((c) => c.id), spliced: shape }];
    }
    const own: CaseResponse = { text, calls: r.calls.map((c) => c.name), callIds: r.calls.map((c) => c.callId) };
    if (r.splicedCalls === undefined || r.fault?.kind !== "splice") return [own];
    const shape: AiSdkSplice["shape"] = r.fault.responseCreated ? "restart" : r.fault.lead !== undefined ? "headless" : "headless_bare";
    return [own, { text, calls: r.splicedCalls.map((c) => c.name), callIds: r.splicedCalls.map((c) => c.callId), spliced: shape }];
  });
}

/** `turn.unansweredCalls()` after a finished request, as the app shows it (the timeline says what the user is told). */
async function listUnanswered(ctx: RunContext, chat: Chat, turn: AiSdkTurnTools, message: AiSdkMessagePlan, pass: number, request: number): Promise<Listing> {
  const listing: Listing = { chat: chat.plan.id, message: message.text, pass, request };
  if (turn.unansweredCalls === undefined) return listing;
  try {
    listing.answer = await turn.unansweredCalls();
  } catch (error) {
    listing.error = describeError(error);
    say(ctx.log, "app", `${chat.name ?? chat.plan.id} unansweredCalls() failed: ${listing.error}`);
    return listing;
  }
  const answer = listing.answer;
  if (!answer.listed) say(ctx.log, "app", `${chat.name ?? chat.plan.id} tells the user: the turn may have effects its answer does not show (${answer.reason})`);
  else if (answer.calls.length > 0) {
    count(ctx.log, "unanswered_listed", answer.calls.length);
    say(ctx.log, "app", `${chat.name ?? chat.plan.id} tells the user of ${answer.calls.length} call(s) the answer does not show: ${answer.calls.map((c) => `${c.name} key ${short(c.key)} ${c.effect}${c.state !== undefined ? ` (${c.state})` : ""}`).join(", ")}`);
  }
  return listing;
}

/**
 * A turn as the app drives it: a request, and the same messages again after each failure
 * (AISDK-6); then, while the kept answer waits for the user (an approval, a client-side tool's
 * question), the user's answer as a tool message and the turn's next request (AISDK-1: the same
 * turn). A re-send of a continuation carries its approval again (a re-sent approval).
 */
async function driveTurn(ctx: RunContext, chat: Chat, message: AiSdkMessagePlan, content: string, label: string, pass: number): Promise<boolean> {
  for (let request = 0; ; request++) {
    let answered = false;
    const what = request === 0 ? label : `${label}, continuation ${request}`;
    for (let resend = 0; resend <= message.resends && !answered; resend++) {
      const attempted = await attempt(ctx, chat, message, content, resend === 0 ? what : `${what}, re-sent after a failure`, pass, request);
      const after = chat.afterRequest;
      chat.afterRequest = undefined;
      after?.();
      if (attempted === "ended_for_good") return false;
      answered = attempted === "answered";
      if (!answered && resend < message.resends) count(ctx.log, "resends");
    }
    if (!answered) return false;
    const answer = userAnswer(chat.messages);
    // Three requests at most: the plan's continuation, and (approval) its repeats' approval.
    if (answer === undefined || request >= 2) return answer === undefined;
    chat.messages.push(answer.message);
    count(ctx.log, "continuations");
    if (answer.approvals > 0) count(ctx.log, "approvals", answer.approvals);
    if (answer.results > 0) count(ctx.log, "client_tool_results", answer.results);
    say(ctx.log, "app", `${chat.name ?? chat.plan.id} the user answers: ${answer.approvals} approvals, ${answer.results} client-side tool results; the turn goes on`);
  }
}

/**
 * What the user answers to a kept response that waits: every approval request of the turn not
 * yet answered (approved), and every `ask_user` call without a result (yes), as one tool message.
 */
function userAnswer(messages: readonly ModelMessage[]): { message: ModelMessage; approvals: number; results: number } | undefined {
  const lastUser = messages.findLastIndex((m) => m.role === "user");
  const parts = messages.slice(lastUser + 1).flatMap((m) => (Array.isArray(m.content) ? (m.content as { type: string; toolCallId?: string; toolName?: string; approvalId?: string }[]) : []));
  const responded = new Set(parts.flatMap((p) => (p.type === "tool-approval-response" ? [p.approvalId] : [])));
  const resulted = new Set(parts.flatMap((p) => (p.type === "tool-result" ? [p.toolCallId] : [])));
  const content: unknown[] = [];
  let approvals = 0;
  let results = 0;
  for (const p of parts) {
    if (p.type === "tool-approval-request" && !responded.has(p.approvalId)) {
      content.push({ type: "tool-approval-response", approvalId: p.approvalId, approved: true });
      approvals++;
    } else if (p.type === "tool-call" && p.toolName === "ask_user" && !resulted.has(p.toolCallId)) {
      content.push({ type: "tool-result", toolCallId: p.toolCallId, toolName: "ask_user", output: { type: "json", value: { answer: "yes" } } });
      results++;
    }
  }
  return content.length === 0 ? undefined : { message: { role: "tool", content } as ModelMessage, approvals, results };
}

/** A user message as the app keeps it: with the id `useChat` gives it where the chat has tabs (AISDK-17). */
function userMessage(content: string, id: string | undefined): ModelMessage {
  return (id === undefined ? { role: "user", content } : { role: "user", content, id }) as ModelMessage;
}

/** The message the model is sent: a user message without its UI id. */
function withoutId(m: ModelMessage): ModelMessage {
  if (!("id" in m)) return m;
  const { id: _id, ...rest } = m as ModelMessage & { id?: unknown };
  return rest as ModelMessage;
}

/** The id of a user message of a chat with tabs (AiSdkChatPlan.tabs); none for a chat without. */
const messageIdOf = (plan: AiSdkChatPlan, text: string) => (plan.tabs === undefined ? undefined : `${plan.id} ${text}`.replaceAll(" ", "-"));

/**
 * A turn the app asks, its user message already sent: the request and its re-sends (driveTurn),
 * then the regenerate when the plan has one (the same user messages once more).
 */
async function settleTurn(ctx: RunContext, chat: Chat, message: AiSdkMessagePlan, content: string): Promise<void> {
  const answered = await driveTurn(ctx, chat, message, content, "send", 0);
  if (answered) ctx.log.answered.add(passOf(chat.plan.id, message.text, 0));
  if (answered) count(ctx.log, "turns_answered");
  else count(ctx.log, "turns_unanswered");
  // A turn given up while it waits for the user: the next message is a new turn, and the AI SDK
  // refuses a request whose history has a call left without its result.
  if (!answered && userAnswer(chat.messages) !== undefined) chat.messages.splice(chat.messages.findLastIndex((m) => m.role === "user") + 1);
  if (message.regenerate) {
    // Regenerate: drop the answer after the last user message and ask the same turn again.
    const lastUser = chat.messages.findLastIndex((m) => m.role === "user");
    chat.messages.splice(lastUser + 1);
    count(ctx.log, "regenerates");
    const state = ctx.world.attempts.get(content)!;
    state.regenerateFrom = state.attempt;
    if (await driveTurn(ctx, chat, message, content, "regenerate", 1)) ctx.log.answered.add(passOf(chat.plan.id, message.text, 1));
  }
}

async function runChat(ctx: RunContext, plan: AiSdkChatPlan, spawn: Chat["spawn"], spawnTab: (tab: number) => Chat["spawn"]): Promise<void> {
  const chat: Chat = { plan, messages: [], process: await spawn(), spawn };
  const tabs = plan.tabs;
  /** The other tabs' turns under way, and those of stale tabs that send once the chat went on to its end. */
  const running: Promise<void>[] = [];
  const stale: (() => Promise<void>)[] = [];
  const tabChats: Chat[] = [];
  let forkedAt = 0;
  for (const [index, message] of plan.messages.entries()) {
    const content = contentOf(ctx.account, plan.id, message.text);
    // Another tab holds the history as it was before this message (AISDK-17).
    if (tabs?.at === index) {
      forkedAt = chat.messages.length;
      const base = [...chat.messages];
      tabs.others.forEach((tab, k) => {
        const send = async () => {
          const other: Chat = { plan, name: `${plan.id} tab ${k + 2}`, messages: [...base], process: await spawnTab(k + 1)(), spawn: spawnTab(k + 1) };
          tabChats[k] = other;
          const tabContent = contentOf(ctx.account, plan.id, tab.message.text);
          other.messages.push(userMessage(tabContent, messageIdOf(plan, tab.message.text)));
          count(ctx.log, "tabs");
          count(ctx.log, `tabs_${tab.when}`);
          say(ctx.log, "app", `${plan.id} tab ${k + 2} sends ${JSON.stringify(tab.message.text)} on the history before ${JSON.stringify(message.text)} (${base.length} messages; ${tab.when.replaceAll("_", " ")})`);
          await settleTurn(ctx, other, tab.message, tabContent);
          // The same payment asked in this tab and the first (AiSdkTab.same): this tab's kept successes of it.
          const same = tab.same === undefined ? undefined : tab.message.calls[tab.same.call]!;
          if (same !== undefined) {
            count(ctx.log, "tab_same_payments");
            count(ctx.log, "tab_same_payments_told", ctx.log.told.filter((t) => t.ok && t.chat === plan.id && t.message === tab.message.text && intentSignature(t.tool, t.input) === intentSignature(same.tool, same.args)).length);
          }
        };
        if (tab.when === "together") running.push(send());
        else if (tab.when === "after_first_request") {
          const before = chat.afterRequest;
          chat.afterRequest = () => {
            before?.();
            running.push(send());
          };
        } else stale.push(send);
      });
    }
    chat.messages.push(userMessage(content, messageIdOf(plan, message.text)));
    await settleTurn(ctx, chat, message, content);
  }
  await Promise.all(running);
  for (const send of stale) await send();
  if (tabs?.reload === true) {
    // The server's store kept every message it was sent, one after the other: the first tab's
    // chat, then each other tab's message and its kept answer. Reloaded, the last tab's message
    // is counted at a later index than the one it was asked at; the user regenerates it.
    const last = tabs.others.at(-1)!;
    const lastChat = tabChats[tabs.others.length - 1]!;
    const messages = [...chat.messages, ...tabChats.slice(0, -1).flatMap((c) => c.messages.slice(forkedAt)), lastChat.messages[forkedAt]!];
    const reloaded: Chat = { plan, name: `${plan.id} reloaded`, messages, process: lastChat.process, spawn: lastChat.spawn };
    const content = contentOf(ctx.account, plan.id, last.message.text);
    count(ctx.log, "tab_reloads");
    say(ctx.log, "app", `${plan.id} reloads the store (${messages.length} messages) and regenerates ${JSON.stringify(last.message.text)}, now counted at turn ${turnIndexOf(messages)}`);
    if (await driveTurn(ctx, reloaded, last.message, content, "regenerate", RELOAD_PASS)) {
      ctx.log.answered.add(passOf(plan.id, last.message.text, RELOAD_PASS));
      count(ctx.log, "tab_reloads_answered");
    }
  }
}

/** The pass at a tab's message that a reload of the store regenerates (AiSdkTabs.reload): after its sending (0) and its regenerate (1). */
const RELOAD_PASS = 2;

/** How the timeline and the verdicts name a pass at a message. */
const passLabel = (pass: number) => (pass === 0 ? "as sent" : pass === RELOAD_PASS ? "reloaded, regenerated" : "regenerated");

/** The last pass the user saw of a message: the reload's for the last tab of a chat that reloads, then its regenerate's, else its sending's. */
function lastPassOf(chat: AiSdkChatPlan, m: AiSdkMessagePlan): number {
  if (chat.tabs?.reload === true && chat.tabs.others.at(-1)?.message === m) return RELOAD_PASS;
  return m.regenerate ? 1 : 0;
}

const passOf = (chat: string, message: string, pass: number) => `${chat}\u0000${message}\u0000${pass}`;

interface RunContext {
  world: AiSdkWorld;
  account: string;
  log: CaseLog;
  /** The route's model for a request, guarded or not (AiSdkAppOptions.spliceGuard). */
  model: (request: { trigger: "submit-message" | "regenerate-message" }) => LanguageModel;
  /** On Gemini on Vertex AI, what the case drew (AiSdkAppOptions.vertex). */
  vertex?: VertexDraw | undefined;
}

export interface AiSdkCaseRun {
  violations: OracleViolation[];
  timeline: string[];
  stats: Record<string, number>;
}

/** One scenario: the chats run side by side, each through its own sequence of turns; then the oracle. */
export async function runAiSdkCase(world: AiSdkWorld, subject: LedgerSubject, scenario: AiSdkScenario, app: AiSdkAppOptions = {}): Promise<AiSdkCaseRun> {
  const fixture: LedgerFixture = await subject.create();
  const account = `acct_${randomUUID().slice(0, 12)}`;
  const log: CaseLog = { started: Date.now(), timeline: [], told: [], listings: [], diverged: new Set(), answered: new Set(), callAt: new Map(), dispatched: [], responses: [], requests: new Map(), stats: { cases: 1 } };
  const faults = new Map<string, FaultSpec["outcome"]>();
  const deaths: PlannedDeaths = { planned: new Map(), keys: new Map() };
  const { plans, attempts } = world;
  const contents: string[] = [];
  const vertex = app.modelApi === "gemini-vertex" ? vertexDrawOf(scenario, app.vertex) : undefined;
  if (vertex !== undefined) {
    count(log, "vertex_cases");
    if (vertex.thoughts) count(log, "vertex_thoughts_cases");
    if (vertex.responseIdsStripped) count(log, "vertex_ids_stripped_cases");
    if (vertex.express) count(log, "vertex_express_cases");
    say(log, "app", `Gemini on Vertex AI (@ai-sdk/google-vertex, ${vertex.express ? "express mode, an API key" : "a project and an OAuth token"}): streamed call arguments${vertex.thoughts ? ", thoughts" : ""}${vertex.responseIdsStripped ? ", behind a gateway that strips each chunk's responseId" : ""}; splices ${vertex.spliceInArgs ? "inside a call's streamed arguments" : "after a completed call"}`);
  }
  for (const chat of scenario.chats) {
    // Another tab's message (AiSdkChatPlan.tabs) is planned as the chat's own are: its own text, its own faults.
    for (const message of messagesOf(chat)) {
      const content = contentOf(account, chat.id, message.text);
      contents.push(content);
      plans.set(content, scripted(message, stepsOf(message)));
      attempts.set(content, { attempt: 0, plan: message, diverging: false, diverged: scripted(message, divergedStepsOf(message)), ...(vertex?.spliceInArgs ? { spliceInArgs: true } : {}) });
      [...message.calls, ...(message.followUp ?? [])].forEach((c, i) => {
        const fault = message.downstream[i];
        if (fault !== undefined) faults.set(planScope(chat.id, message.text, c.tool, c.args), fault);
      });
      const death = message.death;
      if (death !== undefined) {
        const target = deathTarget(message, death);
        if (target !== undefined) deaths.planned.set(planScope(chat.id, message.text, target.call.tool, target.call.args), { when: death.when, nth: target.nth, where: target.where });
      }
      if (message.repeatsEarlier !== undefined) count(log, "cross_turn_repeats");
    }
  }
  const running = { n: 0 };
  try {
    const dispatcher: AiSdkWrapOptions["dispatcher"] = {
      // Only a death needs a claim to lapse (the next process waits it out); otherwise a long
      // lease keeps a slow machine from taking over a live claim.
      leaseMs: deaths.planned.size > 0 ? DEATH_CLAIM_LEASE_MS : 5_000,
      // Longer than any early-dispatched call of a cut attempt takes, so its retry waits for it (LEDGER-15).
      waitMs: 15_000,
      pollMs: 2,
      maxPollMs: 20,
      allowVolatileLedgerForUnkeyedWrites: true,
      logger: { warn: () => {} },
    };
    const api = app.modelApi ?? "responses";
    if ((world.modelApi ?? "responses") !== api && (isCloudModelApi(api) || isCloudModelApi(world.modelApi))) {
      throw new TypeError(`aiSdk.modelApi "${api}" needs a world started for it (startAiSdkWorld("${api}")), not one serving ${world.modelApi ?? "responses"}`);
    }
    const provider = isCloudModelApi(api)
      ? await cloudModel(api, world.provider!, vertex)
      : api === "chat"
        ? createOpenAI({ baseURL: world.openai.baseURL, apiKey: "conformance" }).chat("gpt-conformance")
        : createOpenAI({ baseURL: world.openai.baseURL, apiKey: "conformance" }).responses("gpt-conformance");
    const guarded = guardedModel(provider, app.spliceMiddleware, isCloudModelApi(api));
    const guard = app.spliceGuard ?? true;
    const model = (request: { trigger: "submit-message" | "regenerate-message" }): LanguageModel => ((typeof guard === "function" ? guard(request) : guard) ? guarded : provider);
    const ctx: RunContext = { world, account, log, model, vertex };
    await Promise.all(
      scenario.chats.map((chat) => {
        // A server process of the chat route: the app's tools and createOnceTools built in it, over its own ledger instance.
        // Another tab's requests (AiSdkChatPlan.tabs) are served by processes of their own, each over a reopened instance.
        const spawner = (prefix: string, first: "fixture" | "reopen") => {
          let spawned = 0;
          return async (): Promise<AppProcess> => {
            const name = `${prefix}/p${++spawned}`;
            const abort = new AbortController();
            let dying!: () => void;
            const died = new Promise<void>((resolve) => (dying = resolve));
            const process: AppProcess = {
              died,
              name,
              dead: false,
              forTurn: undefined as never,
              abort,
              takingOver: new Set(),
              fetch: ((input: Parameters<typeof fetch>[0], init?: RequestInit) => {
                if (process.dead) return Promise.reject(new ProcessGone(name));
                return fetch(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, abort.signal]) : abort.signal });
              }) as typeof fetch,
              die: (what) => {
                if (!process.dead) {
                  process.dead = true;
                  process.death = what;
                  say(log, "app", `${name} DIES ${what}`);
                  count(log, "deaths");
                  if (what.startsWith("after")) count(log, "deaths_after_effect");
                  // A death is planned on a tool loop's follow-up call (step 2, or the call after a
                  // continuation's repeats), on step 1's first call, or on an approved call's run.
                  const site = (Object.keys(DEATH_STATS) as DeathSite[]).find((w) => what.endsWith(`(${w})`)) ?? "follow_up";
                  count(log, DEATH_STATS[site]);
                  abort.abort(new ProcessGone(name));
                  dying();
                }
                throw new ProcessGone(name);
              },
            };
            const ledger = mortalLedger(spawned === 1 && first === "fixture" ? fixture.ledger : await fixture.reopen(), process);
            const tools = appTools(world, account, log, faults, running, app.disposition, chat.messages.some((m) => m.continuation?.kind === "approval"), process, deaths);
            const onEvent: NonNullable<AiSdkWrapOptions["dispatcher"]["onEvent"]> = (event) => {
              if (process.dead || event.type !== "claimed" || !event.takeover) return;
              process.takingOver.add(event.key);
              say(log, "ledger", `${name} takes over the expired claim of key ${short(event.key)} (fence ${event.fence})`);
              count(log, "takeovers");
            };
            process.forTurn = (app.wrap ?? wrapOnce)(tools, ledger, { effects: EFFECTS, identity: IDENTITY, dispatcher: { ...dispatcher, onEvent } });
            return process;
          };
        };
        const tabSpawners = new Map<number, Chat["spawn"]>();
        const spawnTab = (tab: number) => tabSpawners.get(tab) ?? tabSpawners.set(tab, spawner(`${chat.id}/tab${tab + 1}`, "reopen")).get(tab)!;
        return runChat(ctx, chat, spawner(chat.id, "fixture"), spawnTab);
      }),
    );
    // A call started at its tool-call part may outlive the stream that was cut under it.
    await settled(running);
    keepRequests(world, log, contents);
    log.responses = responsesOf(log.requests);
    const effects = world.payments.effects({ account });
    const violations = checkAiSdkOracle(scenario, account, log, effects);
    count(log, "told_successes", log.told.filter((t) => t.ok).length);
    count(log, "told_errors", log.told.filter((t) => !t.ok).length);
    count(log, "effects", effects.length);
    return { violations, timeline: log.timeline, stats: log.stats };
  } finally {
    for (const content of contents) {
      plans.delete(content);
      attempts.delete(content);
    }
    await fixture.destroy().catch(() => {});
  }
}

/**
 * The mock's responses for a turn's steps. A reasoning model's way: each response that makes
 * calls reasons first (its item is kept with the answer and sent back). The memo is free text the
 * mock re-words on every later response to the same request (IDENT-1).
 */
function scripted(message: AiSdkMessagePlan, steps: { tool: string; args: Record<string, unknown> }[][]): ScriptedResponse[] {
  return steps.map((step) => respond(reasoning(`Do what ${message.text} asks.`), ...step.map((c) => call(c.tool, c.args, c.tool === "send_payment" ? { reword: ["memo"] } : {}))));
}

/**
 * The claim lease in a case where a process dies: its claim must lapse before the client's
 * re-send can take it over (the next process waits it out, waitMs). A live process renews its
 * claims well within it.
 */
const DEATH_CLAIM_LEASE_MS = 200;

/** Until no tool has run for a little while (a call dispatched early starts a moment after its part). */
async function settled(running: { n: number }): Promise<void> {
  const deadline = Date.now() + 20_000;
  let quiet = 0;
  while (quiet < 5 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    quiet = running.n === 0 ? quiet + 1 : 0;
  }
}

function describeError(error: unknown): string {
  const entry = catalogueEntry(error);
  // An `error` event of the stream reaches the app as the event's data, a plain object.
  const message = error instanceof Error ? error.message : typeof error === "object" && error !== null ? JSON.stringify(error) : String(error);
  return entry === undefined ? message.slice(0, 200) : `${entry.code} (effect ${entry.effect}): ${message.slice(0, 160)}`;
}

// ---- the oracle --------------------------------------------------------------------------------

/** How many errors kept in `t`'s pass at its turn say a call of `signature` did not happen. */
function toldNotHappened(told: readonly Told[], t: Told, signature: string): number {
  return told.filter((o) => !o.ok && o.chat === t.chat && o.message === t.message && o.pass === t.pass && intentSignature(o.tool, o.input) === signature && saysNotHappened(o.error)).length;
}

/** Whether what the app was told says the effect certainly did not happen. */
function saysNotHappened(error: unknown): boolean {
  const entry = catalogueEntry(error);
  if (entry !== undefined) return entry.effect === "no";
  if (ToolError.isInstance(error)) return error.disposition === "definite" || error.disposition === "not_performed";
  if (error instanceof PaymentsError) return error.outcome === "rejected" || error.outcome === "not_performed";
  return false;
}

function effectSignature(effect: Effect): string | undefined {
  if (effect.kind === "payment_created") return intentSignature("send_payment", effect.payload);
  if (effect.kind === "invoice_created") return intentSignature("create_invoice", effect.payload);
  return undefined;
}

const describeEffect = (e: Effect) => `${e.kind} ${e.resourceId} (seq ${e.seq}, key ${short(e.idempotencyKey ?? undefined)})`;

/**
 * Per intent (one planned call, found by its signature; a continuation's repeat is a second
 * intent with the same one): no more effects in the payments API's log than intents of that
 * signature; a success the app kept names one of them, and two successes kept in one pass at a
 * turn (its first sending with its continuations, or its regenerate) name two distinct effects;
 * and no error the app kept may say the effect did not happen when it did. A tool loop inside one
 * request (a message's `followUp`: step 2's calls are intents too) that was answered kept one
 * answer per call of each step.
 */
export function checkAiSdkOracle(scenario: AiSdkScenario, account: string, log: CaseLog, effects: Effect[]): OracleViolation[] {
  const violations: OracleViolation[] = [];
  const add = (rule: string, message: string) => violations.push({ rule, message });
  const intents = new Map<string, { chat: string; message: string; call: PlannedCall; times: number }>();
  for (const chat of scenario.chats) {
    for (const m of messagesOf(chat)) {
      for (const c of plannedOf(m)) {
        const signature = intentSignature(c.tool, c.args);
        const known = intents.get(signature);
        if (known !== undefined) known.times++;
        else intents.set(signature, { chat: chat.id, message: m.text, call: c, times: 1 });
      }
    }
  }
  const bySignature = new Map<string, Effect[]>();
  for (const e of effects) {
    const signature = effectSignature(e);
    if (signature === undefined) continue;
    if (!intents.has(signature)) add("CONF-2", `${describeEffect(e)} in account ${account} answers no intent of the scenario`);
    bySignature.set(signature, [...(bySignature.get(signature) ?? []), e]);
  }
  const where = (i: { chat: string; message: string; call: PlannedCall }) => `${i.call.tool} for ${i.chat} ${JSON.stringify(i.message)} ("${intentSignature(i.call.tool, i.call.args)}")`;
  // Per turn, not summed over the scenario: keys carry the turn index (the chat's user messages
  // so far, AISDK-1; a continuation, a re-send and a regenerate are the same turn) and the ordinal
  // among identical calls of the turn (TURN-4, AISDK-9), so a turn makes a signature at most as
  // often as its message asked for it. An extra identical payment at one turn is not excused by
  // an identical intent of another message of the chat, which a failed turn may never reach. An
  // effect is the turn's whose request made the call that ran under its key (its tool-call part's
  // request: found by what ran, not by the turn index the wrapper under test put in the key).
  const turnOfKey = new Map<string, CallSite>();
  for (const d of log.dispatched) {
    const site = log.callAt.get(d.toolCallId);
    if (d.at === "run" && d.key !== undefined && site !== undefined && !turnOfKey.has(d.key)) turnOfKey.set(d.key, site);
  }
  const turnOf = (e: Effect) => (e.idempotencyKey ? turnOfKey.get(e.idempotencyKey) : undefined);
  const atTurn = new Map<string, { chat: string; message: string; signature: string; effects: Effect[] }>();
  for (const [signature, list] of bySignature) {
    for (const e of list) {
      const site = turnOf(e);
      // An effect no run of the case can place (none should be) counts against every intent of its signature, summed.
      const group = site === undefined ? `\u0000${signature}` : `${site.chat}\u0000${site.message}\u0000${signature}`;
      const entry = atTurn.get(group) ?? { chat: site?.chat ?? "", message: site?.message ?? "", signature, effects: [] };
      entry.effects.push(e);
      atTurn.set(group, entry);
    }
  }
  for (const { chat, message, signature, effects: list } of atTurn.values()) {
    const intent = intents.get(signature);
    if (intent === undefined) continue; // answers no intent: said above
    const plan = planOf(scenario, chat, message);
    const times = chat === "" ? intent.times : plan === undefined ? 0 : plannedOf(plan).filter((c) => intentSignature(c.tool, c.args) === signature).length;
    if (list.length <= times) continue;
    const asked = times === 1 ? "one intent" : `${times} intents`;
    const others = chat !== "" && intent.times > times ? ` (at that turn; other turns asked for it ${intent.times - times} more times, which excuses none of these)` : "";
    const reloaded = chat !== "" && reloadedTab(scenario, chat) === message ? ` (a reload of the store counted this tab's message one or more turns later: a message keeps the turn at which it first dispatched, AISDK-17)` : "";
    add("CONF-2", `${where(chat === "" ? intent : { chat, message, call: intent.call })}: performed ${list.length} times for ${asked}: ${list.map(describeEffect).join(", ")}${others}${reloaded}`);
  }
  // How often a turn's message asked for a signature (CONF-2's and EFFECT-6's count per turn).
  const timesAt = (chat: string, message: string, signature: string) => {
    const plan = planOf(scenario, chat, message);
    return plan === undefined ? 0 : plannedOf(plan).filter((c) => intentSignature(c.tool, c.args) === signature).length;
  };
  const atTurnOf = (t: Told, e: Effect) => {
    const site = turnOf(e);
    return site === undefined || (site.chat === t.chat && site.message === t.message);
  };
  // The effect each kept success named, per pass at a turn and signature: two calls the user asked for are two effects (as many as the turn asked for).
  const namedIn = new Map<string, Map<string, Told>>();
  for (const t of log.told) {
    const signature = intentSignature(t.tool, t.input);
    const intent = intents.get(signature);
    const list = bySignature.get(signature) ?? [];
    const what = `${t.tool} call ${t.toolCallId} of ${t.chat} ${JSON.stringify(t.message)}`;
    if (intent === undefined) {
      add("CONF-2", `${what} was kept with input ${JSON.stringify(t.input)}, which no intent asked for`);
      continue;
    }
    if (t.ok) {
      const output = t.output as { paymentId?: string; invoiceId?: string } | undefined;
      const named = t.tool === "create_invoice" ? output?.invoiceId : output?.paymentId;
      if (list.length === 0) add("RECORD-3", `${what} was kept as a success (${JSON.stringify(t.output)}) but the payments API performed nothing for it`);
      else if (!list.some((e) => e.resourceId === named)) add("DISPATCH-5", `${what} was kept as a success naming ${named}, but the effects are ${list.map(describeEffect).join(", ")}`);
      else if (!atTurnOf(t, list.find((e) => e.resourceId === named)!)) {
        // Two messages of the chat asked for the identical call (two intents at two turn indexes):
        // this turn was told the other turn's effect, and the one it asked for was never made.
        const e = list.find((x) => x.resourceId === named)!;
        const site = turnOf(e)!;
        if (tabsAtOneTurn(scenario, t.chat, t.message, site.message)) {
          // Two tabs' messages at one turn index (AISDK-17): two asks, and this one was answered with the other's.
          add(
            "CONF-2",
            `${what} was kept as a success naming ${named}, the effect of ${site.chat} ${JSON.stringify(site.message)} (${describeEffect(e)}: its key ran in that message's request), ` +
              `which another tab sent at the same turn index: the user asked for it in both tabs, and this tab's was never made (AISDK-17: each user message's calls take ordinals of their own)`,
          );
          continue;
        }
        add(
          "CONF-2",
          `${what} was kept as a success naming ${named}, the effect of ${site.chat} ${JSON.stringify(site.message)} (${describeEffect(e)}: its key ran in that turn's request): ` +
            `the user asked for it at both turns, and this turn's was never made (DISPATCH-5: a success names the effect made for it; keys carry the turn index, AISDK-1)`,
        );
      } else {
        const group = `${t.chat}\u0000${t.message}\u0000${t.pass}\u0000${signature}`;
        const seen = namedIn.get(group) ?? new Map<string, Told>();
        namedIn.set(group, seen);
        const other = seen.get(named!);
        if (other !== undefined) {
          const how =
            other.request === t.request
              ? `in step ${other.step} of the same request, this in step ${t.step}: ordinals run across steps, AISDK-1`
              : `in request ${other.request + 1} of the turn, this in request ${t.request + 1}: ordinals of a continuation, AISDK-9`;
          add("CONF-2", `${what} was kept as a success naming ${named}, which call ${other.toolCallId} of the same turn was told too: the user asked for ${timesAt(t.chat, t.message, signature)} of them, and one was never made (${how})`);
        } else seen.set(named!, t);
      }
    } else if (saysNotHappened(t.error) && list.filter((e) => atTurnOf(t, e)).length > timesAt(t.chat, t.message, signature) - toldNotHappened(log.told, t, signature)) {
      // Of a signature asked for more than once at the turn (a continuation's repeat), the effects
      // may be the other intents': a lie only when more happened at the turn than the intents this
      // pass did not deny. Per turn: another turn's identical intent (repeatsEarlier) excuses none.
      add("EFFECT-6", `${what} was kept as an error that says the effect did not happen (${describeError(t.error)}) but it happened: ${list.map(describeEffect).join(", ")}`);
    }
  }
  // A tool loop inside the request: an answered pass kept one answer (a result or an error) for
  // each call of each step, so none of step 2's calls went untold (and the checks above judged each).
  for (const chat of scenario.chats) {
    for (const m of chat.messages) {
      if ((m.followUp ?? []).length === 0) continue;
      for (const pass of [0, 1]) {
        if (!log.answered.has(passOf(chat.id, m.text, pass))) continue;
        const kept = log.told.filter((t) => t.chat === chat.id && t.message === m.text && t.pass === pass);
        // A pass the model answered differently (rerunDivergence) made the diverged calls.
        const asked = log.diverged.has(passOf(chat.id, m.text, pass)) ? divergedStepsOf(m).flat() : plannedOf(m);
        for (const signature of new Set(asked.map((c) => intentSignature(c.tool, c.args)))) {
          const want = asked.filter((c) => intentSignature(c.tool, c.args) === signature).length;
          const got = kept.filter((t) => intentSignature(t.tool, t.input) === signature).length;
          if (got !== want) {
            add("AISDK-1", `${chat.id} ${JSON.stringify(m.text)} (a tool loop in one request, ${pass === 0 ? "as sent" : "regenerated"}) was answered keeping ${got} answers for "${signature}", whose calls the model made ${want} times`);
          }
        }
      }
    }
  }
  checkToldOfEveryEffect(scenario, log, effects, intents, turnOf, add);
  checkNoSplicedCallDispatched(log, add);
  return violations;
}

/**
 * AISDK-16 (STREAM-8, STREAM-10, STREAM-17): no call of a spliced response reaches `execute`.
 * The model stream ends, failed, at the first event that shows a second response, and passes on
 * nothing after it: every call the AI SDK executes, and every call the dispatcher runs (at the
 * step, or at its `tool-call` part), is its request's own response's. The mock mints call ids per
 * response, so a call id only a spliced response carried was taken from it. The judges above see
 * such a call only by its harm: a payment beyond what its turn asked for, a mixed answer kept. A
 * spliced call identical to one its turn asks for again later (a tool loop's repeat) takes the
 * ordinal that later call takes, so the turn's count holds and the re-send answers the repeat
 * from the spliced call's row.
 */
function checkNoSplicedCallDispatched(log: CaseLog, add: (rule: string, message: string) => void): void {
  const own = new Set(log.responses.flatMap((r) => (r.spliced === undefined ? r.callIds : [])));
  const splicedBy = new Map<string, CaseResponse>();
  for (const r of log.responses) if (r.spliced !== undefined) for (const id of r.callIds) if (!own.has(id)) splicedBy.set(id, r);
  const judged = new Set<string>();
  for (const d of log.dispatched) {
    const r = splicedBy.get(d.toolCallId);
    if (r === undefined || judged.has(d.toolCallId)) continue;
    judged.add(d.toolCallId);
    const site = log.callAt.get(d.toolCallId);
    const whereAt = site === undefined ? "a request of the case" : `request ${site.request + 1} of ${site.chat} ${JSON.stringify(site.message)} (${passLabel(site.pass)})`;
    const how = r.spliced === "restart" ? "with its own start" : r.spliced === "headless" ? "without its start, led by a sentence" : "without its start or a lead";
    const point = d.at === "execute" ? "the AI SDK executed" : `the dispatcher ran (key ${short(d.key)})`;
    add(
      "AISDK-16",
      `in ${whereAt}, ${point} ${d.tool} (${d.toolCallId}), a call of the response a proxy spliced into another's body (${how}; its calls [${r.calls.join(", ")}]): ` +
        `the model stream took the spliced response in instead of ending, failed, at its first sign`,
    );
  }
}

/**
 * AISDK-14: the user is told of every effect of a turn they were answered. An effect in the
 * payments API's log is told by an answer the app kept of its turn (a success naming it, or an
 * error of its key that does not deny it), or by what `turn.unansweredCalls()` answered after a
 * request of that turn the app kept: its key listed as `happened` or `may_have_happened` (or
 * nothing listed, `listed: false`, which says the answer may not show every effect). A turn
 * whose last pass (its first sending, or the regenerate that replaced it) was not answered is
 * judged as before: the user was shown a failure, and this profile keeps no record of it. Every
 * listed call is also judged: never `not_happened` for a key that has an effect, `happened` only
 * for one that does.
 */
function checkToldOfEveryEffect(
  scenario: AiSdkScenario,
  log: CaseLog,
  effects: Effect[],
  intents: Map<string, { chat: string; message: string; call: PlannedCall; times: number }>,
  turnOf: (e: Effect) => CallSite | undefined,
  add: (rule: string, message: string) => void,
): void {
  const ofTurn = <T extends { chat: string; message: string }>(list: readonly T[], chat: string, message: string) => list.filter((x) => x.chat === chat && x.message === message);
  const keyed = new Set(effects.flatMap((e) => (e.idempotencyKey ? [e.idempotencyKey] : [])));
  for (const l of log.listings) {
    if (l.answer?.listed !== true) continue;
    for (const c of l.answer.calls) {
      const where = `unansweredCalls() after request ${l.request + 1} of ${l.chat} ${JSON.stringify(l.message)} (${passLabel(l.pass)})`;
      if ((c.effect === "not_happened" || c.effect === "none") && keyed.has(c.key)) add("AISDK-14", `${where} listed ${c.name} key ${short(c.key)} as ${c.effect} (${c.state ?? "no state"}), but the payments API made ${effects.filter((e) => e.idempotencyKey === c.key).map(describeEffect).join(", ")}`);
      if (c.effect === "happened" && !keyed.has(c.key)) add("AISDK-14", `${where} listed ${c.name} key ${short(c.key)} as happened (${c.state ?? "no state"}), but the payments API made nothing under it`);
    }
  }
  const lastPassAnswered = new Set<string>();
  for (const chat of scenario.chats) {
    for (const m of messagesOf(chat)) if (log.answered.has(passOf(chat.id, m.text, lastPassOf(chat, m)))) lastPassAnswered.add(`${chat.id}\u0000${m.text}`);
  }
  for (const e of effects) {
    const signature = effectSignature(e);
    const ofSignature = signature === undefined ? undefined : intents.get(signature);
    // An effect no intent asked for is CONF-2's (above). It is the turn's whose request made the call that ran under its key.
    const site = turnOf(e);
    const intent = ofSignature === undefined ? undefined : site === undefined ? ofSignature : { ...ofSignature, chat: site.chat, message: site.message };
    if (intent === undefined || !lastPassAnswered.has(`${intent.chat}\u0000${intent.message}`)) continue;
    const told = ofTurn(log.told, intent.chat, intent.message);
    const named = (t: Told) => {
      const output = t.output as { paymentId?: string; invoiceId?: string } | undefined;
      return t.tool === "create_invoice" ? output?.invoiceId : output?.paymentId;
    };
    if (told.some((t) => (t.ok ? named(t) === e.resourceId : t.key !== undefined && t.key === e.idempotencyKey && !saysNotHappened(t.error)))) continue;
    // An effect of a signature a kept error denies is EFFECT-6's to judge (above), once.
    if (told.some((t) => !t.ok && saysNotHappened(t.error) && intentSignature(t.tool, t.input) === signature)) continue;
    const listings = ofTurn(log.listings, intent.chat, intent.message);
    if (listings.some((l) => l.answer?.listed === false)) {
      count(log, "omitted_after_effect_told_by_unlisted");
      continue;
    }
    const listed = listings.flatMap((l) => (l.answer?.listed === true ? l.answer.calls : [])).filter((c) => c.key === e.idempotencyKey && (c.effect === "happened" || c.effect === "may_have_happened"));
    if (listed.length > 0) {
      count(log, "omitted_after_effect_told_by_unanswered_calls");
      if (listed.some((c) => c.state === "in_flight")) count(log, "omitted_dead_process_effect_told_by_unanswered_calls");
      continue;
    }
    const asked = listings.length === 0 ? "the app kept no request of the turn" : listings.map((l) => `after request ${l.request + 1}${l.pass === 1 ? " of the regenerate" : l.pass === RELOAD_PASS ? " of the reload's regenerate" : ""}: ${l.answer === undefined ? (l.error !== undefined ? `failed (${l.error})` : "not asked") : `listed ${l.answer.calls.map((c) => `${short(c.key)} ${c.effect}`).join(", ") || "nothing"}`}`).join("; ");
    add("AISDK-14", `${describeEffect(e)} of ${intent.chat} ${JSON.stringify(intent.message)} is told by no kept answer of its turn and listed by no unansweredCalls() answer of a request of it the app kept (${asked}): the user was answered with no trace of it`);
  }
}

/** A chat's message by its text: one of its own, or another tab's (AiSdkChatPlan.tabs). */
function planOf(scenario: AiSdkScenario, chat: string, text: string): AiSdkMessagePlan | undefined {
  const plan = scenario.chats.find((c) => c.id === chat);
  return plan === undefined ? undefined : messagesOf(plan).find((m) => m.text === text);
}

/** Whether two messages of a chat were sent by its tabs at one turn index: the message the others forked at, and each other tab's. */
function tabsAtOneTurn(scenario: AiSdkScenario, chat: string, a: string, b: string): boolean {
  const tabs = scenario.chats.find((c) => c.id === chat)?.tabs;
  if (tabs === undefined || a === b) return false;
  const plan = scenario.chats.find((c) => c.id === chat)!;
  const atTurn = [plan.messages[tabs.at]!.text, ...tabs.others.map((t) => t.message.text)];
  return atTurn.includes(a) && atTurn.includes(b);
}

/** The text of the tab message a reload of the chat's store regenerates (AiSdkTabs.reload), if any. */
function reloadedTab(scenario: AiSdkScenario, chat: string): string | undefined {
  const tabs = scenario.chats.find((c) => c.id === chat)?.tabs;
  return tabs?.reload === true ? tabs.others.at(-1)?.message.text : undefined;
}

/** Every call the user asked for in a message, in the model's order: step 1's, a tool loop's step 2, a continuation's repeats. */
function plannedOf(m: AiSdkMessagePlan): PlannedCall[] {
  return [...m.calls, ...(m.followUp ?? []), ...(m.continuation?.repeat ?? []).map((i) => m.calls[i]!)];
}
