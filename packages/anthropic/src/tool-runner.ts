import { AsyncLocalStorage } from "node:async_hooks";
import type Anthropic from "@anthropic-ai/sdk";
import type { BetaRunnableTool, BetaToolRunContext } from "@anthropic-ai/sdk/lib/tools/BetaRunnableTool";
import type { BetaToolRunner, BetaToolRunnerParams, BetaToolRunnerRequestOptions } from "@anthropic-ai/sdk/lib/tools/BetaToolRunner";
import { ToolError as SdkToolError } from "@anthropic-ai/sdk/lib/tools/ToolError";
import {
  CONVERSATION_ID_PATTERN,
  Dispatcher,
  InvalidArgumentError,
  describeValue,
  InvalidKeyInputError,
  ToolError,
  catalogueEntry,
  defineTool,
  effectOf,
  retryableOf,
  isDispatchOnceError,
  type DispatchOutcome,
  type DispatcherOptions,
  type EffectClass,
  type EffectKnowledge,
  type FailureDisposition,
  type JsonValue,
  type Ledger,
  type Retryable,
  type ToolDefinition,
} from "@dispatch-once/core";
import { checkProviderRunParams, checkProviderTool, checkProviderToolsPolicy, type ProviderToolsPolicy } from "./provider-tools.js";
import { checkKnownOptions, type UnansweredCallRecord } from "@dispatch-once/runner";
import { turnRowEffect, turnRowInput, turnRowsOf, UNLISTED_REASON } from "@dispatch-once/core/internal";
import { z } from "zod";

/** What a wrapped tool's `run` finds in its context besides the SDK's own (read it with `dispatchOnceOf`). */
export interface DispatchOnceCallInfo {
  /** Forward it as the `Idempotency-Key` of the downstream request (DISPATCH-4). */
  idempotencyKey: string;
  conversationId: string;
  turnIndex: number;
  ordinal: number;
}

/** The run context a wrapped tool receives: the SDK's, plus `dispatchOnce`. */
export type OnceToolRunContext = BetaToolRunContext & { dispatchOnce: DispatchOnceCallInfo };

/** The Dispatch-Once part of a wrapped tool's run context (undefined when the tool runs unwrapped). */
export function dispatchOnceOf(context: BetaToolRunContext | undefined): DispatchOnceCallInfo | undefined {
  return (context as Partial<OnceToolRunContext> | undefined)?.dispatchOnce;
}

// The SDK's runnable tools are typed by their parsed input; the wrapper takes any of them.
type AnyRunnableTool = BetaRunnableTool<any>;

export interface OnceToolRunnerOptions {
  /**
   * The app's runnable tools, as `client.beta.messages.toolRunner` takes them (`betaZodTool(...)`,
   * `betaTool(...)`, or any object with `name`, `input_schema`, `parse` and `run`).
   * @example createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger })
   */
  tools: readonly AnyRunnableTool[];
  /**
   * The effect class of every tool (EFFECT-1: declared, never defaulted).
   * @example { send_payment: "keyed_write", get_balance: "read" }
   */
  effects: Readonly<Record<string, EffectClass>>;
  /**
   * Where claims and results live; shared by every process that runs the app's tool loops.
   * @example createOnceToolRunner({ tools, effects, ledger: createSqliteLedger("ledger.db") })
   */
  ledger: Ledger;
  /**
   * Per tool, the input fields that identify the call (IDENT-1): the key is derived from them
   * alone, so a re-run of the loop whose model re-words a free-text field (a memo) is answered
   * from the ledger. Every field must be in the tool's `input_schema` (IDENT-2). Without it every
   * field is part of the identity.
   * @default {}
   * @example { send_payment: ["payee", "amount", "currency", "reference"] }
   */
  identity?: Readonly<Record<string, readonly string[]>>;
  /**
   * Per write tool, the names it had before (core's `formerNames`, spec IDENT-11): a renamed tool's
   * keys all change with its name, so a re-run of a loop that ran under the old name (ATR-13) finds
   * the rows that name made only when it is listed. A former name may not be a tool's name.
   * @default {}
   * @example { send_payment: ["pay"] }
   */
  formerNames?: Readonly<Record<string, readonly string[]>>;
  /**
   * The rest of core's dispatcher options (lease, wait bound, logger, events, ...).
   * @default {}
   * @example { dispatcher: { waitMs: 30_000 } }
   */
  dispatcher?: Omit<DispatcherOptions, "tools" | "ledger">;
  /**
   * Which tools the Messages API runs itself (server tools) the runner's `params.tools` may carry
   * (STREAM-19): the API runs them inside the response, outside the dispatcher, and again in each
   * re-run of the loop. `"allow-reads"` lets the ones that only read through (`web_search_*`,
   * `web_fetch_*`, `tool_search_tool_*`). Code execution, an MCP connector toolset and any type
   * this version does not know are refused under either value, as are `params.mcp_servers` and
   * `params.container`, however the runner gets them.
   * @default "refuse"
   * @example createOnceToolRunner({ tools, effects, ledger, providerTools: "allow-reads" })
   */
  providerTools?: ProviderToolsPolicy;
}

/**
 * What `once.toolRunner` needs of a client: the SDK's own tool runner,
 * `client.beta.messages.toolRunner`. `new Anthropic()`, and Claude on a cloud platform through
 * `new AnthropicBedrock()` (`@anthropic-ai/bedrock-sdk`) or `new AnthropicVertex()`
 * (`@anthropic-ai/vertex-sdk`), which build the same Beta resource over `@anthropic-ai/sdk` but
 * lack other resources of `Anthropic` (`models`, `files`, ...) the wrapper never uses.
 */
export interface ToolRunnerClient {
  beta: { messages: Pick<Anthropic["beta"]["messages"], "toolRunner"> };
}

/** Which conversation a tool loop answers in. */
export interface OnceToolRunnerTurn {
  /**
   * The app's conversation id: core's alphabet `[A-Za-z0-9_.:~-]{1,256}`, the same on every
   * re-run of the loop (AISDK-3's advice applies: scope it by the authenticated principal).
   * @example { conversationId: "conv-42" }
   */
  conversationId: string;
  /**
   * The turn index of the user message the loop answers, from the app's own store (TURN-1).
   * Without it the wrapper counts the genuine user messages (not the tool_result-only ones the
   * loop adds) before each call in the runner's messages, which needs the full history (ATR-2).
   * A supplied index names the user message the runner starts with: a call answering a user
   * message pushed into the loop later is refused (`invalid_argument`), not run under its keys.
   * @default the number of genuine user messages before the call
   * @example { conversationId: "conv-42", turnIndex: 7 }
   */
  turnIndex?: number;
  /**
   * Whether this loop runs again for a user message whose loop ran before (the app's retry of a
   * failed loop, a re-sent message), possibly under an earlier release of its tools (spec ATR-13):
   * its writes are dispatched as resumed, so a call whose key a deploy changed (an identity, a
   * schema default, a rename) is answered from the row the earlier run made (IDENT-10). Implied
   * when the runner's messages already hold a call after the turn's user message. A first run
   * leaves it out: resumed costs one ledger listing, at the loop's first write.
   * @default false, or true when the messages hold a call of the turn
   * @example { conversationId: "conv-42", resumed: attempt > 0 }
   */
  resumed?: boolean;
}

/** What became of one wrapped call, by its `tool_use` id. */
export interface OnceToolCall {
  toolName: string;
  conversationId: string;
  /** Undefined when the call was refused before its place in the turn was known (ATR-3). */
  turnIndex: number | undefined;
  /** Undefined when the call was refused before its place in the turn was known (ATR-3). */
  ordinal: number | undefined;
  /** The call settled: its key, its result, and whether it was `replayed` from the ledger. */
  outcome?: DispatchOutcome;
  /** The call did not settle: the Dispatch-Once error the model was told about. */
  error?: OnceToolCallError;
}

/**
 * A call of the turn that the runner's answer does not answer (ATR-12), with the arguments its
 * claim stored (`input`: the first claim's request, as the tool was run with it), so the app can
 * tell the user which payment it was and not only that one happened.
 */
export type UnansweredToolRunnerCall = UnansweredCallRecord & { input?: JsonValue };

/** What `unansweredCallsOf(runner)` found (ATR-12). */
export type UnansweredCalls =
  | { listed: true; calls: UnansweredToolRunnerCall[] }
  | { listed: false; reason: string; calls: [] };

const OPTION_NAMES = ["tools", "effects", "ledger", "identity", "formerNames", "dispatcher", "providerTools"];
const TURN_OPTION_NAMES = ["conversationId", "turnIndex", "resumed"];

type ToolResultContent = string | Anthropic.Beta.Messages.BetaToolResultContentBlockParam[];

/**
 * A wrapped call that did not settle, as the tool's error: the SDK's runner answers the model
 * with its `content` (it is the SDK's `ToolError`), whose text keeps the code, whether the effect
 * may have happened and whether re-running the loop can help (ATR-5); when the tool threw the
 * SDK's `ToolError`, its own content blocks come first (ATR-9). The app reads the same from
 * `callsOf(runner)`.
 */
export class OnceToolCallError extends SdkToolError {
  /** The Dispatch-Once code (`in_flight_elsewhere`, `outcome_unknown`, `claim_released`, ...). */
  readonly code: string;
  /** Whether the call's effect may have happened: "no", "yes" or "possibly" (spec §11). */
  readonly effect: EffectKnowledge;
  /** Whether re-running the loop for the same user message can help (spec §11). */
  readonly retryable: Retryable;
  /** The call's key, when it had one. */
  readonly key: string | undefined;
  constructor(cause: unknown) {
    const entry = catalogueEntry(cause);
    const code = entry?.code ?? "tool_error";
    const effect = effectOf(cause);
    const retryable = retryableOf(cause);
    const message = cause instanceof Error ? cause.message : String(cause);
    const happened = effect === "no" ? "it did not happen" : effect === "yes" ? "it happened" : "it may have happened";
    const again = retryable === "same_message" ? "re-running the same request may settle it" : "do not retry it: ask the user";
    const note = `Effect: ${happened}; ${again}.`;
    const text = `[dispatch-once ${code}] ${message}. ${note}`;
    // The tool's own content for the model (an SDK ToolError's blocks), then what became of the effect.
    const own = toolContentOf(cause);
    super(own === undefined ? `Error: ${text}` : [...(typeof own === "string" ? [{ type: "text" as const, text: own }] : own), { type: "text", text: `[dispatch-once ${code}] ${note}` }]);
    this.message = text;
    this.name = "OnceToolCallError";
    Object.defineProperty(this, "cause", { value: cause, configurable: true, writable: true });
    this.code = code;
    this.effect = effect;
    this.retryable = retryable;
    const key = (cause as { key?: unknown } | null)?.key;
    this.key = typeof key === "string" ? key : undefined;
  }
}

const FAILURE_DISPOSITIONS: readonly FailureDisposition[] = ["definite", "not_performed", "unknown", "request_mismatch"];
// Where the content of an SDK ToolError travels in core's ToolError (and in a definite failure's stored row).
const CONTENT_DETAIL = "toolResultContent";

/**
 * The SDK's `ToolError` (content for the model's error result) carrying what the failure means
 * for the effect (LEDGER-8), for a wrapped tool to throw: `definite` (did not happen, a re-run
 * fails the same way: recorded and replayed), `not_performed` (did not happen, a re-run may
 * succeed: the claim is released), `unknown` (may have happened), `request_mismatch`. A plain
 * SDK `ToolError` is `unknown` (ATR-9). The SDK's runner, wrapped or not, sends `content` as is.
 *
 * @example
 * throw declaredToolError([{ type: "text", text: "card declined" }], { disposition: "definite", code: "card_declined" });
 */
export function declaredToolError(content: ToolResultContent, options: { disposition: FailureDisposition; code?: string }): SdkToolError & { disposition: FailureDisposition; code?: string } {
  if (typeof content !== "string" && !Array.isArray(content)) throw new InvalidArgumentError("content", "must be the tool result's content: a string or an array of content blocks");
  const disposition = (options as { disposition?: unknown } | undefined)?.disposition;
  if (!FAILURE_DISPOSITIONS.includes(disposition as FailureDisposition)) {
    throw new InvalidArgumentError("options.disposition", `must be one of ${FAILURE_DISPOSITIONS.join(", ")} (LEDGER-8)`);
  }
  const code = options.code;
  if (code !== undefined && typeof code !== "string") throw new InvalidArgumentError("options.code", "must be a string");
  // Recorded under the tool's code, one Dispatch-Once reads back would be read as ours (ERR-6).
  if (code !== undefined && ToolError.reservedCodes.includes(code)) {
    throw new InvalidArgumentError("options.code", `${JSON.stringify(code)} is a code Dispatch-Once reads back from stored failures (${ToolError.reservedCodes.join(", ")}); name the tool's own failure otherwise (ERR-6)`);
  }
  return Object.assign(new SdkToolError(content), { disposition: disposition as FailureDisposition, ...(code !== undefined ? { code } : {}) });
}

/** An SDK `ToolError`, of any copy of the SDK (core's ToolError has `details`, never `content`). */
function isSdkToolError(error: unknown): error is SdkToolError {
  if (error instanceof SdkToolError) return true;
  return error instanceof Error && error.name === "ToolError" && "content" in error && !ToolError.isInstance(error);
}

/**
 * What the dispatcher records for an SDK `ToolError` a wrapped tool threw (ATR-9): core's
 * ToolError with the disposition the tool declared on it, "unknown" when it declared none (a
 * ToolError says the call failed, not that its effect did not happen), and its content kept.
 */
function asDispatchFailure(error: unknown): unknown {
  if (!isSdkToolError(error)) return error;
  const declared = (error as { disposition?: unknown }).disposition;
  const disposition = FAILURE_DISPOSITIONS.includes(declared as FailureDisposition) ? (declared as FailureDisposition) : "unknown";
  const code = (error as { code?: unknown }).code;
  // A code Dispatch-Once reads back declares nothing a record may keep (ERR-6): the failure names
  // no disposition, as a thrown value that is not core's ToolError.
  if (typeof code === "string" && ToolError.reservedCodes.includes(code)) return error;
  return new ToolError(error.message, { disposition, ...(typeof code === "string" ? { code } : {}), details: { [CONTENT_DETAIL]: error.content }, cause: error });
}

/** The content an SDK ToolError gave the model, found through the failure's causes or its stored row. */
function toolContentOf(error: unknown): ToolResultContent | undefined {
  let at: unknown = error;
  for (let depth = 0; depth < 8 && typeof at === "object" && at !== null; depth++) {
    if (isSdkToolError(at)) return at.content;
    const details = isDispatchOnceError(at, "tool_failed")
      ? (at as { error?: { details?: unknown } }).error?.details
      : ToolError.isInstance(at)
        ? at.details
        : undefined;
    if (typeof details === "object" && details !== null && Object.hasOwn(details, CONTENT_DETAIL)) {
      const content = (details as Record<string, unknown>)[CONTENT_DETAIL];
      // A stored row is data: only a string or an array of typed blocks goes to the model.
      if (typeof content === "string") return content;
      if (Array.isArray(content) && content.every((b) => typeof b === "object" && b !== null && typeof (b as { type?: unknown }).type === "string")) {
        return content as Anthropic.Beta.Messages.BetaToolResultContentBlockParam[];
      }
      return undefined;
    }
    at = (at as { cause?: unknown }).cause;
  }
  return undefined;
}

interface CallScope {
  /** The OnceToolRunner whose dispatcher runs the call: another's scope is not this one's. */
  owner: object;
  tool: AnyRunnableTool;
  context: BetaToolRunContext;
  effect: EffectClass;
}

/*
 * One storage for every OnceToolRunner, never one per instance: on Node 20 an AsyncLocalStorage
 * that has run once stays in the process's list of storages for good, and every promise created
 * afterwards walks that list, so an app that makes its runner per request or per conversation
 * would slow every promise of the process a little more with each (1 000: ~0.1 ms a promise).
 */
const callScope = new AsyncLocalStorage<CallScope>();

type MessageParam = Anthropic.Beta.Messages.BetaMessageParam;
type ToolUseLike = { type: string; id?: string; name?: string; input?: unknown };

/**
 * Runs the app's runnable tools inside the Anthropic SDK's own tool runner
 * (`client.beta.messages.toolRunner`) through a Dispatch-Once dispatcher: each call is keyed by
 * (conversation id, turn index, tool name, ordinal, identity arguments), claimed in the ledger
 * before it runs, and a re-run of the loop (from the user's message, or from the runner's
 * accumulated messages) is answered from the ledger instead of running again (§13.3).
 *
 * @example
 * const once = createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger });
 * const runner = once.toolRunner(client, { model, max_tokens: 1024, messages }, { conversationId });
 * const final = await runner.runUntilDone();
 */
export function createOnceToolRunner(options: OnceToolRunnerOptions): OnceToolRunner {
  return new OnceToolRunner(options);
}

export class OnceToolRunner {
  /** The dispatcher behind the tools (for `reconcile(key)` and `keyFor`). */
  readonly dispatcher: Dispatcher;
  private readonly tools: ReadonlyMap<string, AnyRunnableTool>;
  private readonly effects: ReadonlyMap<string, EffectClass>;
  private readonly calls = new WeakMap<object, Map<string, OnceToolCall>>();
  /** Per runner: its turn, and every key it dispatched, whatever the outcome (ATR-12). */
  private readonly turns = new WeakMap<object, { turn: OnceToolRunnerTurn; turnIndex: number; users: number; dispatched: Set<string> }>();
  private readonly ledger: Ledger;
  /** Every wrapped form of the app's tools, of any runner: one of another runner is bound to that runner's messages. */
  private readonly wrappedForms = new WeakSet<object>();
  private readonly providerTools: ProviderToolsPolicy;

  constructor(options: OnceToolRunnerOptions) {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "needs { tools, effects, ledger }");
    // A misspelt option would be ignored: `identities` for `identity` keys calls on every field.
    checkKnownOptions(options, OPTION_NAMES);
    this.providerTools = checkProviderToolsPolicy(options.providerTools, "options.providerTools");
    if (!Array.isArray(options.tools)) throw new InvalidArgumentError("options.tools", "must be an array of the app's runnable tools");
    const tools = new Map<string, AnyRunnableTool>();
    options.tools.forEach((tool, i) => {
      if (typeof tool?.run !== "function" || typeof tool.name !== "string") {
        throw new InvalidArgumentError(`options.tools[${i}]`, "must be a runnable tool (name, input_schema, run), e.g. from betaZodTool()");
      }
      if (tools.has(tool.name)) throw new InvalidArgumentError(`options.tools[${i}]`, `is a second tool named ${tool.name}`);
      tools.set(tool.name, tool);
    });
    this.tools = tools;
    const effects = checkEffects(options, tools);
    this.effects = effects;
    const identity = checkIdentity(options, tools);
    const formerNames = checkFormerNames(options, tools);
    const definitions: ToolDefinition[] = [];
    for (const [name, tool] of tools) {
      const effect = effects.get(name)!;
      const fields = identity.get(name);
      // Only a tool whose input the SDK parses (betaZodTool's parse) has its defaults in every call; a
      // tool without parse gets the model's input as sent, and filling a default in would change the
      // key its calls had before this release.
      const defaults = typeof (tool as { parse?: unknown }).parse === "function" ? defaultsOf(tool) : new Map<string, unknown>();
      const former = formerNames.get(name);
      definitions.push(
        defineTool({
          name,
          effect,
          ...(former !== undefined ? { formerNames: former } : {}),
          ...(typeof (tool as { description?: unknown }).description === "string" ? { description: (tool as { description: string }).description } : {}),
          // The SDK's runner has parsed the input with the tool's own `parse` before `run`; an
          // identity only needs the schema's fields named (checked above against input_schema),
          // each optional here: the tool's schema already said which may be left out.
          // A field the schema defaults gets its default: the SDK's parse already put it in every
          // call's input (no key changes), and a stored request made before the field had it is
          // keyed as the schema makes the call now (IDENT-10 on a re-run, ATR-13).
          input: (fields === undefined ? z.unknown() : z.looseObject(Object.fromEntries(propertiesOf(tool).map((f) => [f, defaults.has(f) ? z.unknown().default(defaults.get(f)) : z.unknown().optional()])))) as z.ZodType<Record<string, unknown>>,
          ...(fields !== undefined ? { identity: fields } : {}),
          run: async (input, context) => {
            const scope = callScope.getStore();
            if (scope?.owner !== this) throw new Error(`tool ${name} ran outside a wrapped run`);
            // A claimed write gets the claim's signal alone: the runner's request signal aborts
            // when the app gives up on the request, and a run cut short there leaves an outcome
            // nobody knows, where the loop's re-run wants its result (ATR-6).
            const request = scope.effect === "read" ? scope.context.signal : undefined;
            const signal = request == null ? context.signal : AbortSignal.any([request, context.signal]);
            const info: DispatchOnceCallInfo = {
              idempotencyKey: context.idempotencyKey,
              conversationId: context.conversationId,
              turnIndex: context.turnIndex,
              ordinal: context.ordinal,
            };
            try {
              return await scope.tool.run(input, { ...scope.context, signal, dispatchOnce: info } as OnceToolRunContext);
            } catch (error) {
              throw asDispatchFailure(error);
            }
          },
        }),
      );
    }
    // Spread below: a value that is not an object would be spread as nothing, its options lost.
    if (options.dispatcher !== undefined && (typeof options.dispatcher !== "object" || options.dispatcher === null)) {
      throw new InvalidArgumentError("options.dispatcher", `must be an object of Dispatcher options, got ${describeValue(options.dispatcher)}`);
    }
    this.dispatcher = new Dispatcher({ ...options.dispatcher, tools: definitions, ledger: options.ledger });
    this.ledger = options.ledger;
  }

  /**
   * The SDK's own tool runner (`client.beta.messages.toolRunner(params, requestOptions)`) with
   * the wrapped tools: `params.tools` defaults to every wrapped tool; when given, each runnable
   * tool in it must be one of `options.tools` (it is replaced by its wrapped form) and every
   * other entry (a server tool) is passed on as is, if `providerTools` allows it; `mcp_servers`
   * and `container` are refused (STREAM-19). Every run of the loop for one user message
   * gets the same keys; build a new runner for each re-run, with the same conversation id.
   * `client` is any client with `beta.messages.toolRunner` (`ToolRunnerClient`): `new Anthropic()`,
   * `new AnthropicBedrock()` or `new AnthropicVertex()`, passed as they are.
   */
  toolRunner<Stream extends boolean = false>(
    client: ToolRunnerClient,
    params: Omit<BetaToolRunnerParams, "tools"> & { tools?: BetaToolRunnerParams["tools"]; stream?: Stream },
    turn: OnceToolRunnerTurn,
    requestOptions?: BetaToolRunnerRequestOptions,
  ): BetaToolRunner<Stream> {
    // Read at the end, after the tools were wrapped: anything else failed with a bare TypeError.
    if (typeof (client as { beta?: { messages?: { toolRunner?: unknown } } } | undefined)?.beta?.messages?.toolRunner !== "function") {
      throw new InvalidArgumentError("client", "must be a client with client.beta.messages.toolRunner (new Anthropic(), new AnthropicBedrock() or new AnthropicVertex(), over @anthropic-ai/sdk >= 1.14)");
    }
    if (typeof params !== "object" || params === null) throw new InvalidArgumentError("params", "must be the tool runner's params");
    checkTurn(turn);
    // Calls started while the reply streams are not in the runner's messages yet: their place in
    // the turn, and so their ordinal, cannot be read when they run.
    refuseEagerRuns(params, "params.runToolsEagerly");
    checkProviderRunParams(params, (name) => `params.${name}`);
    const calls = new Map<string, OnceToolCall>();
    const dispatched = new Set<string>();
    let runner: BetaToolRunner<Stream> | undefined;
    // The reply the loop body is handling, and the messages it answers (see replyInBody).
    const body: { current?: ReplyInBody; all: ReplyInBody[] } = { all: [] };
    // An app-supplied turn index names one user message: the one the runner starts with.
    const users = Array.isArray(params.messages) ? params.messages.filter(isGenuineUserMessage).length : 0;
    const wrapped = new Map<string, AnyRunnableTool>();
    // ATR-13: resumed for the app's say-so, or for messages that already hold a call of the turn.
    const resumed = turn.resumed === true || holdsTurnCall(params.messages);
    for (const [name, tool] of this.tools) {
      wrapped.set(name, this.wrap(tool, { ...turn, users, resumed }, calls, dispatched, () => runner, () => body.current, (toolUse) => stoppedReplyOf(toolUse, body.all)));
    }
    const wrapTools = <T>(list: readonly T[], field: string): T[] => this.wrappedTools(list, wrapped, field);
    const tools = params.tools === undefined ? [...wrapped.values()] : wrapTools(params.tools, "params.tools");
    runner = client.beta.messages.toolRunner({ ...params, tools } as BetaToolRunnerParams, requestOptions) as BetaToolRunner<Stream>;
    this.guardSurface(runner, wrapTools, turn.turnIndex === undefined ? users : undefined);
    observeReplies(runner, (reply) => {
      body.current = reply;
      body.all.push(reply);
    });
    this.calls.set(runner, calls);
    this.turns.set(runner, { turn, turnIndex: turn.turnIndex ?? users, users, dispatched });
    return runner;
  }

  /**
   * `list` with each of the app's runnable tools replaced by its wrapped form; a raw definition
   * (which the runner never runs) is kept, and a server tool only as `providerTools` allows
   * (STREAM-19). A runnable tool that is not wrapped (another tool, a runnable toolset) is
   * refused: it would run outside the dispatcher (ATR-7, ATR-8).
   */
  private wrappedTools<T>(list: readonly T[], wrapped: ReadonlyMap<string, AnyRunnableTool>, field: string): T[] {
    if (!Array.isArray(list)) throw new InvalidArgumentError(field, "must be an array of tools");
    return list.map((tool, i) => {
      if (typeof tool !== "object" || tool === null || !("run" in tool)) {
        checkProviderTool(tool, `${field}[${i}]`, this.providerTools);
        return tool;
      }
      const name = (tool as { name?: unknown }).name;
      const own = typeof name === "string" ? this.tools.get(name) : undefined;
      if (own === undefined || (own !== tool && !this.wrappedForms.has(tool))) {
        throw new InvalidArgumentError(`${field}[${i}]`, `runnable tool ${String(name ?? (tool as { type?: unknown }).type)} is not one of the wrapped tools, so it would run outside the dispatcher: pass it in createOnceToolRunner({ tools })`);
      }
      return wrapped.get(name as string)! as T;
    });
  }

  /**
   * The runner's methods that change which tool runs under a name, and how, after it was built
   * (ATR-8): `addTools` and `setMessagesParams` (and `pushMessages`, which calls it) get the
   * wrapped form of the app's tools, and refuse what would run outside the dispatcher or before
   * the call's place in the turn is known (`runToolsEagerly`).
   */
  private guardSurface(runner: BetaToolRunner<boolean>, wrapTools: <T>(list: readonly T[], field: string) => T[], countedFrom: number | undefined): void {
    const addTools = runner.addTools.bind(runner);
    const setMessagesParams = runner.setMessagesParams.bind(runner) as (params: BetaToolRunnerParams) => void;
    const guarded = {
      addTools: (...tools: Parameters<BetaToolRunner<boolean>["addTools"]>) => addTools(...wrapTools(tools, "runner.addTools(tools)")),
      setMessagesParams: (paramsOrMutator: BetaToolRunnerParams | ((prev: BetaToolRunnerParams) => BetaToolRunnerParams)) => {
        const params = typeof paramsOrMutator === "function" ? paramsOrMutator(runner.params as BetaToolRunnerParams) : paramsOrMutator;
        if (typeof params !== "object" || params === null) throw new InvalidArgumentError("runner.setMessagesParams(params)", "must be the tool runner's params");
        refuseEagerRuns(params, "runner.setMessagesParams(params).runToolsEagerly");
        checkProviderRunParams(params, (name) => `runner.setMessagesParams(params).${name}`);
        // A counted turn index needs the history whole (ATR-2): a window drops user messages, and the
        // count would name an earlier turn (its calls refused when they run; told here, where it happened).
        if (countedFrom !== undefined && Array.isArray(params.messages) && params.messages.filter(isGenuineUserMessage).length < countedFrom) {
          throw new InvalidArgumentError("runner.setMessagesParams(params.messages)", `drops user messages from the runner's history, whose count is the turn index (ATR-2): keep the history whole, or build the runner with turn.turnIndex from the app's store`);
        }
        setMessagesParams(params.tools === undefined ? params : { ...params, tools: wrapTools(params.tools, "runner.setMessagesParams(params.tools)") });
      },
    };
    // Own properties shadow the class's methods; the SDK's own calls (pushMessages) go through them too.
    for (const [name, value] of Object.entries(guarded)) Object.defineProperty(runner, name, { value, configurable: true, writable: true });
  }

  /** What became of each wrapped call a runner of `toolRunner` made, by `tool_use` id. */
  callsOf(runner: object): ReadonlyMap<string, OnceToolCall> {
    return this.calls.get(runner) ?? new Map();
  }

  /**
   * The effects of a runner's turn that neither its calls nor its messages answer (ATR-12): the
   * ledger's rows claimed at the turn index in the conversation (LIST-3) whose key no call of this
   * runner holds and no call its messages show with a result that is not an error holds, each
   * with what its row says of the effect, as a runner's committed-turn record says it (RECORD-8):
   * `happened`, `may_have_happened` or `not_happened`. An earlier runner of the same user message
   * that failed (a cut stream, a crash) may have paid in an iteration whose messages the re-run
   * does not carry (the README's loop starts again from the user's message); when the re-run's
   * model does not make the call again, the answer holds no trace of it. Ask once the loop is
   * done, and tell the user of every call it returns. `listed` is false when the ledger does not
   * list rows. A listing that fails throws the ledger's error (`ledger_unavailable`: ask again).
   * @example const { calls } = await once.unansweredCallsOf(runner); // after runUntilDone()
   */
  async unansweredCallsOf(runner: object): Promise<UnansweredCalls> {
    const entry = typeof runner === "object" && runner !== null ? this.turns.get(runner) : undefined;
    if (entry === undefined) throw new InvalidArgumentError("runner", "must be a runner this wrapper's toolRunner() built");
    const rows = await turnRowsOf(this.ledger, entry.turn.conversationId, entry.turnIndex);
    if (rows === undefined) return { listed: false, reason: UNLISTED_REASON, calls: [] };
    const told = new Set(entry.dispatched);
    const messages = (runner as { params?: { messages?: unknown } }).params?.messages;
    if (Array.isArray(messages)) for (const key of this.toldIn(messages as MessageParam[], entry.turn, entry.turnIndex, entry.users)) told.add(key);
    return { listed: true, calls: rows.filter((row) => !told.has(row.key)).map((row) => ({ ...turnRowEffect(row), ...turnRowInput(row) })) };
  }

  /**
   * The keys of the turn's calls that `messages` show answered with a result that is not an error
   * (ATR-12): each at the place ATR-2 and ATR-3 give it, among the calls that answer the user
   * message the runner started with (`users` genuine user messages before them): with a turn
   * index from the app's store every call of the history would be placed at that index, and an
   * identical call of an earlier turn would take this turn's key for told. A call shown with an
   * error result may still have happened, so its row is listed.
   */
  private toldIn(messages: readonly MessageParam[], turn: OnceToolRunnerTurn, turnIndex: number, users: number): string[] {
    const results = new Map<string, boolean>();
    for (const message of messages) {
      if (message.role !== "user") continue;
      for (const block of blocksOf(message)) {
        if (block.type !== "tool_result") continue;
        const id = String((block as { tool_use_id?: unknown }).tool_use_id);
        results.set(id, results.get(id) === true || (block as { is_error?: unknown }).is_error !== true);
      }
    }
    const keys: string[] = [];
    for (const message of messages) {
      if (message.role !== "assistant") continue;
      for (const block of blocksOf(message)) {
        if (block.type !== "tool_use" || results.get(String(block.id)) !== true) continue;
        const tool = block.name === undefined ? undefined : this.tools.get(block.name);
        const place = tool === undefined ? undefined : this.placeOf(block, messages, turn);
        if (tool === undefined || place === undefined || place.turnIndex !== turnIndex || place.users !== users) continue;
        try {
          keys.push(this.dispatcher.keyFor({ name: tool.name, input: typeof tool.parse === "function" ? tool.parse(block.input) : block.input }, { conversationId: turn.conversationId, turnIndex, ordinal: place.ordinal }));
        } catch {
          continue; // a call its tool refuses never ran
        }
      }
    }
    return keys;
  }

  private wrap(
    tool: AnyRunnableTool,
    turn: OnceToolRunnerTurn & { users: number },
    calls: Map<string, OnceToolCall>,
    dispatched: Set<string>,
    runnerOf: () => { params: { messages: MessageParam[] } } | undefined,
    replyInBody: () => ReplyInBody | undefined,
    stoppedReply: (toolUse: ToolUseLike) => Promise<string | undefined>,
  ): AnyRunnableTool {
    const name = tool.name;
    const effect = this.effects.get(name)!;
    const run = async (args: unknown, context?: BetaToolRunContext) => {
      const toolUse = context?.toolUse as ToolUseLike | undefined;
      const runner = runnerOf();
      if (context === undefined || toolUse === undefined || runner === undefined) {
        throw new OnceToolCallError(new InvalidArgumentError("context", `tool ${name} was run without the runner's tool_use context; not run`));
      }
      const place = this.placeOf(toolUse, await messagesHolding(toolUse, runner.params.messages, replyInBody()), turn);
      const record: OnceToolCall = { toolName: name, conversationId: turn.conversationId, turnIndex: place?.turnIndex, ordinal: place?.ordinal };
      calls.set(String(toolUse.id), record);
      const refuse = (error: InvalidArgumentError) => {
        record.error = new OnceToolCallError(error);
        return record.error;
      };
      if (place === undefined) {
        throw refuse(new InvalidArgumentError("context.toolUse", `tool ${name}'s call ${String(toolUse.id)} is not in the runner's messages, so its place in the turn is unknown; not run (ATR-3)`));
      }
      // The SDK's loop stops on such a reply without running its calls, but generateToolResponse()
      // runs them whatever the stop reason: a refused reply is never kept (the API refuses a
      // conversation that carries it), and a call the limit cut has arguments the model never finished.
      const stopped = await stoppedReply(toolUse);
      if (stopped !== undefined) {
        throw refuse(new InvalidArgumentError("context.toolUse", `tool ${name}'s call ${String(toolUse.id)} is in a reply that ended with ${stopped}; not run (ATR-10)`));
      }
      if (turn.turnIndex !== undefined && place.users !== turn.users) {
        // A user message pushed into the loop is another turn, which the supplied index does not name:
        // its calls would take the first message's keys and be answered with its results.
        throw refuse(new InvalidArgumentError("turn.turnIndex", `names the turn of the runner's first user message, but tool ${name}'s call answers a user message added since; not run (ATR-2)`));
      }
      if (turn.turnIndex === undefined && place.users < turn.users) {
        // Counted from a history that lost user messages since the runner started (windowed, compacted):
        // the count names an earlier turn, whose call with these arguments would answer this one.
        throw refuse(new InvalidArgumentError("turn.turnIndex", `is counted from the runner's messages, which hold fewer user messages (${place.users}) than when the runner started (${turn.users}): tool ${name}'s call would take an earlier turn's key; not run. Supply turn.turnIndex from the app's store (ATR-2)`));
      }
      const callContext = { conversationId: turn.conversationId, turnIndex: place.turnIndex, ordinal: place.ordinal };
      try {
        // Its answer (a result or an error) reaches the model and callsOf: not unanswered (ATR-12).
        dispatched.add(this.dispatcher.keyFor({ name, input: args }, callContext));
      } catch {
        // refused by the dispatch below, before any claim
      }
      try {
        const outcome = await callScope.run({ owner: this, tool, context, effect }, () =>
          this.dispatcher.dispatch(
            { name, input: args, callId: String(toolUse.id) },
            { conversationId: turn.conversationId, turnIndex: place.turnIndex, ordinal: place.ordinal, ...(turn.resumed === true ? { resumed: true } : {}) },
          ),
        );
        record.outcome = outcome;
        return outcome.result as string | Anthropic.Beta.Messages.BetaToolResultContentBlockParam[];
      } catch (error) {
        const reported = new OnceToolCallError(error);
        record.error = reported;
        throw reported;
      }
    };
    // Everything but `run` is the tool's own (schema, parse, description, the SDK's helper mark).
    const form = Object.assign(Object.create(Object.getPrototypeOf(tool) as object) as object, tool, { run }) as AnyRunnableTool;
    this.wrappedForms.add(form);
    return form;
  }

  /**
   * The turn index and ordinal of a call, read from the runner's messages (ATR-2, ATR-3): the
   * turn starts after the last genuine user message before the response holding the call; the
   * ordinal counts the identical calls (same tool, same identity) of the turn's earlier responses
   * that already have a tool_result, then those before it in its own response.
   */
  private placeOf(toolUse: ToolUseLike, messages: readonly MessageParam[], turn: OnceToolRunnerTurn): { turnIndex: number; ordinal: number; users: number } | undefined {
    let at = -1;
    for (let i = messages.length - 1; i >= 0 && at === -1; i--) {
      const message = messages[i]!;
      if (message.role === "assistant" && blocksOf(message).some((b) => b.type === "tool_use" && b.id === toolUse.id)) at = i;
    }
    if (at === -1) return undefined;
    let start = 0;
    let users = 0;
    for (let i = 0; i < at; i++) {
      if (isGenuineUserMessage(messages[i]!)) {
        users++;
        start = i + 1;
      }
    }
    const turnIndex = turn.turnIndex ?? users;
    const answered = new Set<string>();
    for (const message of messages) {
      if (message.role !== "user") continue;
      for (const block of blocksOf(message)) if (block.type === "tool_result") answered.add(String((block as { tool_use_id?: unknown }).tool_use_id));
    }
    const context = { conversationId: turn.conversationId, turnIndex, ordinal: 0 };
    const identityOf = (block: ToolUseLike): string | undefined => {
      const tool = block.name === undefined ? undefined : this.tools.get(block.name);
      if (tool === undefined) return undefined;
      try {
        return this.dispatcher.keyFor({ name: tool.name, input: typeof tool.parse === "function" ? tool.parse(block.input) : block.input }, context);
      } catch {
        return undefined; // a call its tool refuses is answered with the error and never runs
      }
    };
    const own = identityOf(toolUse);
    if (own === undefined) return { turnIndex, ordinal: 0, users }; // the dispatch refuses it (nothing runs)
    let ordinal = 0;
    for (let i = start; i <= at; i++) {
      const message = messages[i]!;
      if (message.role !== "assistant") continue;
      for (const block of blocksOf(message)) {
        if (block.type !== "tool_use") continue;
        if (i === at && block.id === toolUse.id) return { turnIndex, ordinal, users };
        if (i < at && !answered.has(String(block.id))) continue;
        if (identityOf(block) === own) ordinal++;
      }
    }
    return { turnIndex, ordinal, users };
  }
}

/** A reply the runner yielded to the loop body, with the messages it was the reply to. */
interface ReplyInBody {
  sent: readonly MessageParam[];
  reply: Promise<{ content: unknown } | undefined>;
}

/**
 * Keeps, for each item the runner yields, the reply and the messages it answers: while the loop
 * body handles a reply, `runner.params.messages` does not hold it yet, and a call that
 * `generateToolResponse()` runs from the body answers it (ATR-3).
 */
function observeReplies(runner: BetaToolRunner<boolean>, observe: (reply: ReplyInBody) => void): void {
  const iterate = runner[Symbol.asyncIterator].bind(runner);
  const iterator = () => {
    const inner = iterate();
    const wrapped: AsyncIterator<unknown> & AsyncIterable<unknown> = {
      next: async (...args: [] | [undefined]) => {
        const step = await inner.next(...args);
        if (step.done !== true) {
          const item = step.value as { finalMessage?: () => Promise<{ content: unknown }> } | Promise<{ content: unknown }>;
          const reply = typeof (item as { finalMessage?: unknown }).finalMessage === "function" ? (item as { finalMessage: () => Promise<{ content: unknown }> }).finalMessage() : Promise.resolve(item as Promise<{ content: unknown }>);
          // A reply that fails is the loop's error, raised by the runner; here it only means "no reply".
          observe({ sent: runner.params.messages, reply: reply.catch(() => undefined) });
        }
        return step;
      },
      return: async (value?: unknown) => (inner.return ? inner.return(value as never) : { done: true as const, value: undefined }),
      throw: async (error?: unknown) => (inner.throw ? inner.throw(error) : Promise.reject(error)),
      [Symbol.asyncIterator]() {
        return wrapped;
      },
    };
    return wrapped;
  };
  // runUntilDone() iterates `this`, so it goes through the own property too.
  Object.defineProperty(runner, Symbol.asyncIterator, { value: iterator, configurable: true, writable: true });
}

/**
 * Why a call must not run because of how its reply ended (ATR-10, STREAM-13), or undefined: every
 * call of a reply a streaming classifier refused, and the last block of a reply that reached its
 * output limit (`max_tokens`, `model_context_window_exceeded`), which the limit cut. A call of a
 * reply the runner did not yield (one the app put in the messages itself) has no stop reason here.
 */
async function stoppedReplyOf(toolUse: ToolUseLike, replies: readonly ReplyInBody[]): Promise<string | undefined> {
  for (let i = replies.length - 1; i >= 0; i--) {
    const reply = (await replies[i]!.reply) as { content: unknown; stop_reason?: unknown; stop_details?: unknown } | undefined;
    const content = reply !== undefined && Array.isArray(reply.content) ? (reply.content as ToolUseLike[]) : [];
    const at = content.findIndex((b) => b?.type === "tool_use" && b.id === toolUse.id);
    if (at === -1) continue;
    const reason = reply!.stop_reason;
    if (reason === "refusal") {
      const details = (reply!.stop_details ?? {}) as { category?: unknown; explanation?: unknown };
      const category = typeof details.category === "string" ? ` (${details.category})` : "";
      return `stop_reason refusal${category}: ${typeof details.explanation === "string" ? details.explanation : "a streaming classifier stopped the reply"}`;
    }
    if ((reason === "max_tokens" || reason === "model_context_window_exceeded") && at === content.length - 1) {
      return `stop_reason ${reason}, which cut the call's arguments`;
    }
    return undefined;
  }
  return undefined;
}

/**
 * The messages a call's place is read from: the runner's, or, when they do not hold the call and
 * the reply the loop body handles does, the messages that reply answered followed by it (what the
 * runner's messages will be once the body ends, ATR-3).
 */
async function messagesHolding(toolUse: ToolUseLike, messages: readonly MessageParam[], body: ReplyInBody | undefined): Promise<readonly MessageParam[]> {
  const holds = (content: unknown) => Array.isArray(content) && content.some((b: ToolUseLike) => b?.type === "tool_use" && b.id === toolUse.id);
  if (body === undefined || messages.some((m) => m.role === "assistant" && holds(m.content))) return messages;
  const reply = await body.reply;
  if (reply === undefined || !holds(reply.content)) return messages;
  return [...body.sent, { role: "assistant", content: reply.content } as MessageParam];
}

function refuseEagerRuns(params: object, field: string): void {
  if ((params as { runToolsEagerly?: unknown }).runToolsEagerly === true) {
    throw new InvalidArgumentError(field, "is not supported by the Dispatch-Once tool runner: a call's ordinal is read from the runner's messages, which hold the reply only once it finished (ATR-3)");
  }
}

function blocksOf(message: MessageParam): ToolUseLike[] {
  return typeof message.content === "string" ? [] : (message.content as ToolUseLike[]);
}


/**
 * A user message that the user said, not one of the loop's tool_result messages: one whose
 * content is text, or holds a block that is not a tool_result.
 */
export function isGenuineUserMessage(message: { role: string; content?: unknown }): boolean {
  if (typeof message !== "object" || message === null) throw new InvalidArgumentError("message", `must be a message { role, content }, got ${describeValue(message)}`);
  if (message.role !== "user") return false;
  if (!Array.isArray(message.content)) return true;
  return message.content.length === 0 || message.content.some((block: { type?: unknown }) => block?.type !== "tool_result");
}

/**
 * The turn index of the user message a tool loop over `messages` answers (ATR-2): the number
 * of genuine user messages (text the user sent; the loop's tool_result-only messages are not
 * counted). The same on every re-run of the loop for that message.
 *
 * @example
 * toolRunnerTurnIndexOf([{ role: "user", content: "pay acme" }]) // 1
 */
export function toolRunnerTurnIndexOf(messages: readonly { role: string; content?: unknown }[]): number {
  if (!Array.isArray(messages)) throw new InvalidArgumentError("messages", "must be the runner's message array");
  const bad = messages.findIndex((message: unknown) => typeof message !== "object" || message === null);
  if (bad !== -1) throw new InvalidArgumentError(`messages[${bad}]`, `must be a message { role, content }, got ${describeValue(messages[bad])}`);
  return messages.filter(isGenuineUserMessage).length;
}

function checkTurn(turn: OnceToolRunnerTurn): void {
  if (typeof turn !== "object" || turn === null) throw new InvalidArgumentError("turn", "needs { conversationId }");
  checkKnownOptions(turn, TURN_OPTION_NAMES, "turn");
  // Checked here, not at the first call: a bad id would otherwise surface as every tool's error.
  if (typeof turn.conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(turn.conversationId)) {
    throw new InvalidKeyInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
  }
  if (turn.turnIndex !== undefined && (!Number.isSafeInteger(turn.turnIndex) || turn.turnIndex < 0)) {
    throw new InvalidKeyInputError("turnIndex", "must be a non-negative safe integer");
  }
  if (turn.resumed !== undefined && typeof turn.resumed !== "boolean") {
    throw new InvalidArgumentError("turn.resumed", `must be a boolean when given, got ${describeValue(turn.resumed)}`);
  }
}

/**
 * ATR-13: whether `messages` hold a call after their last genuine user message: the loop for that
 * message ran before (a first run starts at the user's message), so the run is a re-run.
 */
function holdsTurnCall(messages: unknown): boolean {
  if (!Array.isArray(messages)) return false;
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as { role?: unknown; content?: unknown };
    if (typeof message !== "object" || message === null) return false;
    if (message.role === "user" && isGenuineUserMessage(message as { role: string; content?: unknown })) return false;
    if (message.role === "assistant" && Array.isArray(message.content) && message.content.some((block: { type?: unknown }) => block?.type === "tool_use")) return true;
  }
  return false;
}

function checkEffects(options: OnceToolRunnerOptions, tools: ReadonlyMap<string, AnyRunnableTool>): Map<string, EffectClass> {
  if (typeof options.effects !== "object" || options.effects === null) {
    throw new InvalidArgumentError("options.effects", "must map every tool's name to its effect class (EFFECT-1)");
  }
  for (const name of Object.keys(options.effects)) {
    if (!tools.has(name)) throw new InvalidArgumentError(`options.effects.${name}`, `names no tool of options.tools (${[...tools.keys()].join(", ")})`);
  }
  const effects = new Map<string, EffectClass>();
  for (const name of tools.keys()) {
    const effect = Object.hasOwn(options.effects, name) ? options.effects[name] : undefined;
    if (effect === undefined) throw new InvalidArgumentError(`options.effects.${name}`, "every tool needs an effect class (EFFECT-1)");
    effects.set(name, effect);
  }
  return effects;
}

/**
 * `identity` names tools of `tools`, and only fields of their `input_schema` (IDENT-2): an entry
 * under a misspelt tool's name would be ignored, and a misspelt field would leave the field it
 * meant out of the key, collapsing two different effects into one.
 */
function checkIdentity(options: OnceToolRunnerOptions, tools: ReadonlyMap<string, AnyRunnableTool>): Map<string, readonly string[]> {
  const identity = new Map<string, readonly string[]>();
  if (options.identity === undefined) return identity;
  if (typeof options.identity !== "object" || options.identity === null) {
    throw new InvalidArgumentError("options.identity", "must map tool names to the input fields that identify their calls");
  }
  for (const [name, fields] of Object.entries(options.identity)) {
    if (fields === undefined) continue;
    const tool = tools.get(name);
    if (tool === undefined) throw new InvalidArgumentError(`options.identity.${name}`, `names no tool of options.tools (${[...tools.keys()].join(", ")})`);
    if (!Array.isArray(fields) || fields.length === 0 || fields.some((f) => typeof f !== "string")) {
      throw new InvalidArgumentError(`options.identity.${name}`, "must be a non-empty array of the input fields that identify the call");
    }
    const properties = propertiesOf(tool);
    for (const field of fields) {
      if (!properties.includes(field)) {
        throw new InvalidArgumentError(`options.identity.${name}`, `names the field "${field}", which the input_schema of ${name} does not have (its fields: ${properties.join(", ")})`);
      }
    }
    identity.set(name, fields);
  }
  return identity;
}

/** `options.formerNames` by tool (IDENT-11); the names themselves are checked by core's registry. */
function checkFormerNames(options: OnceToolRunnerOptions, tools: ReadonlyMap<string, AnyRunnableTool>): Map<string, readonly string[]> {
  const formerNames = new Map<string, readonly string[]>();
  if (options.formerNames === undefined) return formerNames;
  if (typeof options.formerNames !== "object" || options.formerNames === null) {
    throw new InvalidArgumentError("options.formerNames", "must map tool names to the names each had before");
  }
  for (const [name, former] of Object.entries(options.formerNames)) {
    if (former === undefined) continue;
    if (!tools.has(name)) throw new InvalidArgumentError(`options.formerNames.${name}`, `names no tool of options.tools (${[...tools.keys()].join(", ")})`);
    if (!Array.isArray(former)) throw new InvalidArgumentError(`options.formerNames.${name}`, "must be an array of the tool's earlier names");
    formerNames.set(name, former);
  }
  return formerNames;
}

/** The defaults the top-level fields of a runnable tool's `input_schema` declare. */
function defaultsOf(tool: AnyRunnableTool): Map<string, unknown> {
  const properties = (tool as { input_schema?: { properties?: unknown } }).input_schema?.properties;
  const defaults = new Map<string, unknown>();
  if (typeof properties !== "object" || properties === null) return defaults;
  for (const [field, property] of Object.entries(properties)) {
    if (typeof property === "object" && property !== null && Object.hasOwn(property, "default")) defaults.set(field, (property as { default: unknown }).default);
  }
  return defaults;
}

/** The top-level fields of a runnable tool's `input_schema` (a JSON Schema object). */
function propertiesOf(tool: AnyRunnableTool): string[] {
  const schema = (tool as { input_schema?: { properties?: unknown } }).input_schema;
  const properties = schema?.properties;
  return typeof properties === "object" && properties !== null ? Object.keys(properties) : [];
}

/**
 * The messages to run the loop again from after a request of it failed (ATR-1): the failed
 * runner's messages (`runner.params.messages`, or the runner itself) without the reply the
 * failure cut. The SDK's runner keeps the blocks of a cut reply that were complete, so its
 * messages may end with an assistant message whose `tool_use` has no `tool_result`: sent again
 * as they are, the API refuses every later request of the conversation (400, "tool_use ids were
 * found without tool_result blocks"). Such a reply's calls never ran (a call runs only once its
 * reply is in the runner's messages whole, ATR-3), so the re-run regenerates it and its calls
 * get the keys they would have had.
 *
 * @example
 * } catch (error) {
 *   messages = rerunMessagesOf(runner); // then build a new runner with them
 * }
 */
export function rerunMessagesOf(from: readonly MessageParam[] | { params: { messages: readonly MessageParam[] } }): MessageParam[] {
  const messages = Array.isArray(from) ? (from as readonly MessageParam[]) : (from as { params?: { messages?: unknown } } | null)?.params?.messages;
  if (!Array.isArray(messages)) throw new InvalidArgumentError("from", "must be a tool runner or its params.messages");
  const rerun = [...(messages as readonly MessageParam[])];
  // Every reply the runner answered is followed by its tool results (a user message); a
  // trailing assistant message is the failed request's reply, answered by nobody.
  while (rerun.length > 0 && rerun.at(-1)!.role === "assistant") rerun.pop();
  return rerun;
}
