import { AsyncLocalStorage } from "node:async_hooks";
import { createHash } from "node:crypto";
import {
  CONVERSATION_ID_PATTERN,
  defineTool,
  describeValue,
  Dispatcher,
  effectOf,
  retryableOf,
  InvalidArgumentError,
  InvalidToolDefinitionError,
  isDispatchOnceError,
  ToolError,
  ToolRegistry,
  type DispatcherOptions,
  type EffectClass,
  type EffectKnowledge,
  type JsonValue,
  type Ledger,
  type LedgerRow,
  type Retryable,
  type StoredError,
} from "@dispatch-once/core";
import { turnRowEffect, turnRowsOf, UNLISTED_REASON, unknownOptionMessage, unknownOptionName, type OptionNames } from "@dispatch-once/core/internal";
import type { McpServer, RegisteredTool } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { AnySchema, SchemaOutput, ShapeOutput, ZodRawShapeCompat } from "@modelcontextprotocol/sdk/server/zod-compat.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import { ErrorCode, McpError, type CallToolResult, type ServerNotification, type ServerRequest, type ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { McpGuardError } from "./errors/base.js";
import { IdempotencyKeyMalformedError } from "./errors/idempotency-key-malformed.js";
import { IdempotencyKeyMissingError } from "./errors/idempotency-key-missing.js";
import { ToolIdentityMismatchError } from "./errors/tool-identity-mismatch.js";
import { ToolResultInvalidError } from "./errors/tool-result-invalid.js";
import { UnguardedCallFailedError } from "./errors/unguarded-call-failed.js";
import { checkIdentity, projectArguments, sameIdentity } from "./identity.js";
import { EFFECT_META, ERROR_META, IDEMPOTENCY_KEY_META, IDEMPOTENCY_KEY_PATTERN, IDENTITY_META, REPLAYED_META, STORED_ARGUMENTS_META, TURN_CALLS_METHOD, TURN_META } from "./meta.js";

export interface McpToolGuardOptions {
  /**
   * Where claims and results live. Shared by every server process that serves the same tools.
   * @example new McpToolGuard({ ledger: createSqliteLedger("ledger.db") })
   */
  ledger: Ledger;
  /**
   * What a guarded write does with a call that carries no key (MCP-4): `"refuse"` answers the
   * tool error `idempotency_key_missing`; `"run"` runs the handler unguarded (with
   * `idempotencyKey` undefined), for clients that cannot send `_meta` yet. A malformed key is
   * refused either way.
   * @default "refuse"
   * @example { unkeyedCalls: "run" }
   */
  unkeyedCalls?: "refuse" | "run";
  /**
   * Scopes rows in a shared ledger: the ledger row of a call is derived from (namespace, tool
   * name, the client's key). A function is asked per call, so a server that serves several
   * principals can put the authenticated one in it (MCP-8) and one principal's key never replays
   * another's result. Core's conversation-id alphabet; a function's bad answer is refused per call
   * with `invalid_argument`.
   * @default "mcp"
   * @example { namespace: (extra) => `billing:${extra.authInfo?.clientId ?? "anonymous"}` }
   */
  namespace?: string | ((extra: RequestHandlerExtra<ServerRequest, ServerNotification>) => string);
  /**
   * The rest of core's dispatcher options (lease, wait bound, logger, events, ...).
   * @default {}
   * @example { dispatcher: { waitMs: 30_000, onEvent: (e) => log(e) } }
   */
  dispatcher?: Omit<DispatcherOptions, "tools" | "ledger">;
  /**
   * Which key a claimed handler gets as `idempotencyKey`, to forward downstream (MCP-16):
   * `"scoped"`, the call's ledger row key, derived from the namespace, the tool name and the
   * client's key, so two principals (or two tools) whose clients chose the same key never share
   * a downstream key; `"client"`, the client's key as sent, as before 0.2.0: only for a server
   * whose principals share no downstream account and whose downstream must see the client's key.
   * It applies to new claims: a re-run sends the key its row's first run sent (a row claimed
   * before 0.2.0 the client's), whatever this says. The client's key is `clientKey` either way.
   * @default "scoped"
   * @example { downstreamKey: "client" }
   */
  downstreamKey?: "scoped" | "client";
}

/**
 * What a guarded handler receives besides its arguments: the SDK's extra, plus the call's key.
 * For a claimed call, `signal` is the claim's: it aborts when the claim is lost (DISPATCH-11),
 * not when the client cancels the request or gives up waiting (MCP-5); the run goes on to an
 * outcome the ledger records, which the client's re-send with the same key is answered with.
 */
export type GuardedToolExtra = RequestHandlerExtra<ServerRequest, ServerNotification> & {
  /**
   * The key to forward as the `Idempotency-Key` of the downstream request (DISPATCH-4): the call's
   * ledger row key, scoped by the namespace and the tool (MCP-16), or the client's key under
   * `downstreamKey: "client"`; absent only for an unkeyed call run under `unkeyedCalls: "run"`.
   */
  idempotencyKey: string | undefined;
  /**
   * The key the client sent in `_meta` (absent for an unkeyed call), for logs and correlation.
   * Not the downstream key: two principals' clients may send the same one (MCP-16).
   */
  clientKey: string | undefined;
};

export type GuardedToolCallback<Args extends undefined | ZodRawShapeCompat | AnySchema> = Args extends ZodRawShapeCompat
  ? (args: ShapeOutput<Args>, extra: GuardedToolExtra) => CallToolResult | Promise<CallToolResult>
  : Args extends AnySchema
    ? (args: SchemaOutput<Args>, extra: GuardedToolExtra) => CallToolResult | Promise<CallToolResult>
    : (extra: GuardedToolExtra) => CallToolResult | Promise<CallToolResult>;

/** `McpServer.registerTool`'s config, plus the tool's effect class (declared once, no default: EFFECT-1). */
export interface GuardedToolConfig<InputArgs, OutputArgs> {
  /**
   * The tool's display name in `tools/list`, passed on to `McpServer.registerTool`.
   * @default none (`tools/list` gives no title)
   * @example guard.registerTool(server, "send_payment", { title: "Send a payment", effect: "keyed_write" }, handler)
   */
  title?: string;
  /**
   * What the tool does, for the model, in `tools/list`; passed on to `McpServer.registerTool`.
   * @default none (`tools/list` gives no description)
   * @example guard.registerTool(server, "send_payment", { description: "Pay a payee", effect: "keyed_write" }, handler)
   */
  description?: string;
  /**
   * The arguments' zod shape or schema, passed on to `McpServer.registerTool`; the handler is then
   * called with (args, extra).
   * @default none (`tools/list` advertises an empty object schema and the handler is called with (extra) alone)
   * @example guard.registerTool(server, "send_payment", { inputSchema: { payee: z.string(), amount: z.number().int() }, effect: "keyed_write" }, handler)
   */
  inputSchema?: InputArgs;
  /**
   * The result's zod shape or schema, passed on to `McpServer.registerTool` (the SDK then requires
   * `structuredContent` matching it in every result that is not an error).
   * @default none (no output schema; `structuredContent` is not checked)
   * @example guard.registerTool(server, "send_payment", { outputSchema: { paymentId: z.string() }, effect: "keyed_write" }, handler)
   */
  outputSchema?: OutputArgs;
  /**
   * MCP's tool annotations (hints for clients), passed on to `McpServer.registerTool`; the guard
   * reads `effect`, never these.
   * @default none (no annotations in `tools/list`)
   * @example guard.registerTool(server, "get_balance", { annotations: { readOnlyHint: true }, effect: "read" }, handler)
   */
  annotations?: ToolAnnotations;
  /**
   * The tool definition's `_meta` in `tools/list`, passed on to `McpServer.registerTool` (not a
   * call's `_meta`, where the key travels). The guard adds the tool's effect class and identity
   * under `io.github.dispatch-once/` (MCP-11); those two members may not be given here.
   * @default none (no `_meta` in `tools/list`)
   * @example guard.registerTool(server, "send_payment", { _meta: { "com.example/team": "billing" }, effect: "keyed_write" }, handler)
   */
  _meta?: Record<string, unknown>;
  /**
   * How the handler's effect is guarded: `read` runs every time; writes are claimed first.
   * @example guard.registerTool(server, "send_payment", { inputSchema: { payee: z.string(), amount: z.number().int() }, effect: "keyed_write" }, handler)
   */
  effect: EffectClass;
  /**
   * The top-level argument names that identify a call of a write (IDENT-1, MCP-10): a call whose
   * key is stored with the same identity arguments but another wording elsewhere (a memo a
   * regenerate re-wrote) is that call, answered with its stored result (its arguments in
   * `_meta["io.github.dispatch-once/stored-arguments"]`) or re-run with its stored arguments;
   * only other identity arguments under the key are refused (MCP-9). Clients declare the same
   * identity, or read it from `tools/list` (`mcpTurn(..., { tools })`), where the guard advertises
   * it (MCP-11), so that their key does not change with the memo.
   * @default none (every argument counts: any difference under a key is refused)
   * @example guard.registerTool(server, "send_payment", { inputSchema, effect: "keyed_write", identity: ["payee", "amount", "currency", "reference"] }, handler)
   */
  identity?: readonly string[];
}

/** The machine-readable form of a refused or failed guarded call, in the result's `_meta` (MCP-6). */
export interface GuardErrorMeta {
  code: string;
  message: string;
  /** Whether re-sending the same call with the same key may succeed (core's error catalogue). */
  retryable: Retryable;
  /** Whether the effect may have happened. */
  effect: EffectKnowledge;
  key?: string;
  /** For `tool_failed`: the handler's recorded failure, replayed identically. */
  error?: StoredError;
}

const OPTION_NAMES: OptionNames<McpToolGuardOptions> = { ledger: true, unkeyedCalls: true, namespace: true, dispatcher: true, downstreamKey: true };

/**
 * Every member of registerTool's config: one it does not name would be passed on to McpServer and
 * ignored there, so a misspelt `identiy` left the tool without an identity and a re-worded
 * regenerate was another call (IDENT-4).
 */
const CONFIG_NAMES: OptionNames<GuardedToolConfig<unknown, unknown>> = {
  title: true,
  description: true,
  inputSchema: true,
  outputSchema: true,
  annotations: true,
  _meta: true,
  effect: true,
  identity: true,
};

/**
 * The dispatcher options the guard passes on: an object (5 was spread as nothing), without the
 * tools and ledger the guard sets itself (given here, they were silently replaced).
 */
function checkDispatcherOptions(dispatcher: unknown): void {
  if (dispatcher === undefined) return;
  if (typeof dispatcher !== "object" || dispatcher === null || Array.isArray(dispatcher)) {
    throw new InvalidArgumentError("options.dispatcher", `must be an object of Dispatcher options (without tools and ledger), got ${describeValue(dispatcher)}`);
  }
  for (const member of ["tools", "ledger"]) {
    if (Object.hasOwn(dispatcher, member)) throw new InvalidArgumentError(`options.dispatcher.${member}`, `is set by the guard itself (its ${member === "tools" ? "registered tools" : "options.ledger"}); leave it out`);
  }
}

/**
 * What the dispatcher stores per call: the client's key is the identity; the arguments ride along,
 * with their identity projection beside them for a tool that declares one (MCP-10).
 */
/**
 * The stored request of a guarded call. `downstream: "scoped"` marks a row whose run forwards the
 * row's key (MCP-16); a row without it (claimed by a guard before MCP-16, or under `downstreamKey:
 * "client"`) forwards the client's: a re-run sends the key its first run sent, so the downstream
 * collapses the two (LEDGER-21). Not compared: it says how the call is sent, not which call it is.
 */
const ENVELOPE = z.object({ key: z.string(), args: z.unknown(), identityArgs: z.unknown().optional(), downstream: z.literal("scoped").optional() });

interface CallScope {
  /** The McpToolGuard whose dispatcher runs the call: another's scope is not this one's. */
  owner: object;
  handler: (args: unknown, extra: GuardedToolExtra) => CallToolResult | Promise<CallToolResult>;
  extra: RequestHandlerExtra<ServerRequest, ServerNotification>;
  /** The row's conversation and turn index (LIST-3), when the call said which turn it is of (MCP-15). */
  turn?: { conversationId: string; turnIndex: number };
  /** What this call's run returned, once it has: told with an error that says its effect happened (MCP-6). */
  ran?: CallToolResult;
}

/** One of a turn's ledger rows, as the guard lists it for the client (MCP-15): the client's key and the call's arguments. */
export interface McpTurnCall {
  /** The client's key of the call (the one it sent in `_meta`), not the ledger row's key. */
  key: string;
  name: string;
  /** The arguments the call was claimed with. */
  arguments?: JsonValue;
  state: LedgerRow["state"];
  /** What the row says of the effect, as a runner's committed-turn record says it (RECORD-8). */
  effect: "happened" | "not_happened" | "may_have_happened";
  summary: string;
  /** The stored result of a completed row: the tool's CallToolResult. */
  result?: JsonValue;
  error?: StoredError;
}

/** The guard's answer to TURN_CALLS_METHOD (MCP-15). */
export type McpTurnCalls = { listed: true; calls: McpTurnCall[] } | { listed: false; reason: string; calls: McpTurnCall[] };

const TURN_CALLS_REQUEST = z.object({
  method: z.literal(TURN_CALLS_METHOD),
  params: z.object({ conversationId: z.string().regex(CONVERSATION_ID_PATTERN), turnIndex: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER) }).loose(),
});

/** Per low-level MCP server, the guards whose tools it serves: one answer to TURN_CALLS_METHOD lists them all. */
const turnListings = new WeakMap<object, Set<McpToolGuard>>();

/**
 * The conversation a guarded call's row is stored at (LIST-3): the client's conversation inside
 * the guard's namespace, so one principal's listing never reaches another's rows (MCP-8). The
 * namespace's length comes first because both alphabets hold every separator: "a~b" + "c" and
 * "a" + "b~c" must not meet. One too long for a conversation id is hashed instead (a digest
 * starts with "h", never with a length's digit).
 */
export function guardConversationId(namespace: string, conversationId: string): string {
  const readable = `${namespace.length}~${namespace}~${conversationId}`;
  if (readable.length <= 256) return readable;
  return `h~${createHash("sha256").update(JSON.stringify([namespace, conversationId])).digest("hex")}`;
}

/** A call's `_meta` turn (MCP-15): `{ conversationId, turnIndex }` in core's alphabet, or a refusal. */
function turnOf(value: unknown): { conversationId: string; turnIndex: number } {
  const field = `_meta["${TURN_META}"]`;
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new InvalidArgumentError(field, `must be an object { conversationId, turnIndex }, got ${describeValue(value)}`);
  const { conversationId, turnIndex, ...rest } = value as Record<string, unknown>;
  const extra = Object.keys(rest)[0];
  if (extra !== undefined) throw new InvalidArgumentError(`${field}.${extra}`, "is not a member of a call's turn (its members: conversationId, turnIndex)");
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) throw new InvalidArgumentError(`${field}.conversationId`, `must match ${CONVERSATION_ID_PATTERN.source}, got ${describe(conversationId)}`);
  if (typeof turnIndex !== "number" || !Number.isSafeInteger(turnIndex) || turnIndex < 0) throw new InvalidArgumentError(`${field}.turnIndex`, `must be a non-negative safe integer, got ${describeValue(turnIndex)}`);
  return { conversationId, turnIndex };
}

/**
 * The guard's ledger as its dispatcher sees it: a claim made for a call that said its turn stores
 * that turn on the row (LIST-3), while the row's key stays derived from the namespace alone, as
 * before (a re-send from a client that sends no turn, or sent one before, finds the same row).
 */
function turnLabelledLedger(ledger: Ledger, owner: object): Ledger {
  return new Proxy(ledger, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      if (property !== "claim") return value.bind(target);
      return (request: Parameters<Ledger["claim"]>[0]) => {
        const scope = callScope.getStore();
        const turn = scope?.owner === owner ? scope.turn : undefined;
        return target.claim(turn === undefined ? request : { ...request, conversationId: turn.conversationId, turnIndex: turn.turnIndex });
      };
    },
  });
}

/*
 * One storage for every McpToolGuard, never one per instance: on Node 20 an AsyncLocalStorage
 * that has run once stays in the process's list of storages for good, and every promise created
 * afterwards walks that list, so a server that makes its guard per session or request would slow
 * every promise of the process a little more with each (1 000: ~0.1 ms a promise).
 */
const callScope = new AsyncLocalStorage<CallScope>();

/**
 * Guards `McpServer` tools: reads the key from `_meta`, claims it in the ledger before the
 * handler runs, answers a repeated key from the ledger, and answers refusals and unsettled
 * outcomes as tool errors with a code (MCP-3..MCP-6). Everything after the key is core's
 * dispatcher, so leases, waits, fencing and failure dispositions are the same as anywhere else.
 *
 * @example
 * const guard = new McpToolGuard({ ledger });
 * guard.registerTool(server, "pay", { inputSchema: { amount: z.number() }, effect: "keyed_write" },
 *   async ({ amount }, { idempotencyKey }) => ({ content: [{ type: "text", text: await pay(amount, idempotencyKey) }] }));
 */
export class McpToolGuard {
  private readonly ledger: Ledger;
  private readonly unkeyedCalls: "refuse" | "run";
  private readonly downstreamKey: "scoped" | "client";
  private readonly namespace: string | ((extra: RequestHandlerExtra<ServerRequest, ServerNotification>) => string);
  private readonly dispatcherOptions: Omit<DispatcherOptions, "tools" | "ledger">;
  private registry = new ToolRegistry();
  /** Each guarded tool's identity (MCP-10), by name. */
  private readonly identities = new Map<string, readonly string[] | undefined>();
  /** Each guarded write's outputSchema, by name: its results are checked against it (MCP-13). */
  private readonly outputSchemas = new Map<string, unknown>();
  private current: Dispatcher;
  /** The ledger the dispatcher claims in: this.ledger, with each call's turn on its row (MCP-15). */
  private readonly claims: Ledger;

  constructor(options: McpToolGuardOptions) {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "the guard needs { ledger }");
    // A misspelt option would be ignored: `namepsace` for `namespace` puts every principal in one.
    const unknown = unknownOptionName(options, OPTION_NAMES);
    if (unknown !== undefined) throw new InvalidArgumentError(`options.${unknown}`, unknownOptionMessage("McpToolGuard", OPTION_NAMES));
    const unkeyed = options.unkeyedCalls ?? "refuse";
    if (unkeyed !== "refuse" && unkeyed !== "run") throw new InvalidArgumentError("options.unkeyedCalls", 'must be "refuse" or "run"');
    const downstreamKey = options.downstreamKey ?? "scoped";
    if (downstreamKey !== "scoped" && downstreamKey !== "client") throw new InvalidArgumentError("options.downstreamKey", `must be "scoped" or "client", got ${describe(downstreamKey)}`);
    const namespace = options.namespace ?? "mcp";
    if (typeof namespace !== "function") checkNamespace(namespace);
    checkDispatcherOptions(options.dispatcher);
    this.ledger = options.ledger;
    this.unkeyedCalls = unkeyed;
    this.downstreamKey = downstreamKey;
    this.namespace = namespace;
    this.dispatcherOptions = options.dispatcher ?? {};
    this.claims = turnLabelledLedger(this.ledger, this);
    this.current = new Dispatcher({ ...this.dispatcherOptions, tools: this.registry, ledger: this.claims });
  }

  /** The dispatcher behind the guard (for `reconcile(key)` and `keyFor`); replaced when a tool is registered. */
  get dispatcher(): Dispatcher {
    return this.current;
  }

  /**
   * `server.registerTool` with the guard in front of the handler. The handler receives the
   * SDK's extra plus `idempotencyKey`; for a claimed call its `signal` is the claim's (it aborts
   * when the claim is lost, not when the client cancels the request: MCP-5).
   */
  registerTool<OutputArgs extends ZodRawShapeCompat | AnySchema, InputArgs extends undefined | ZodRawShapeCompat | AnySchema = undefined>(
    server: Pick<McpServer, "registerTool">,
    name: string,
    config: GuardedToolConfig<InputArgs, OutputArgs>,
    handler: GuardedToolCallback<InputArgs>,
  ): RegisteredTool {
    if (typeof server?.registerTool !== "function") throw new InvalidArgumentError("server", "must be an McpServer");
    if (typeof handler !== "function") throw new InvalidArgumentError("handler", "must be a function");
    if (typeof config !== "object" || config === null) throw new InvalidArgumentError("config", "needs { effect } and McpServer's tool config");
    const unknownMember = unknownOptionName(config, CONFIG_NAMES);
    if (unknownMember !== undefined) throw new InvalidArgumentError(`config.${unknownMember}`, unknownOptionMessage("registerTool's config", CONFIG_NAMES));
    if (config.inputSchema !== undefined && (typeof config.inputSchema !== "object" || config.inputSchema === null)) {
      throw new InvalidArgumentError("config.inputSchema", `must be a zod object schema or a shape of zod schemas, got ${describeValue(config.inputSchema)}`);
    }
    const { effect, identity: declared, ...mcpConfig } = config;
    this.serveTurnCalls(server);
    const hasInput = mcpConfig.inputSchema !== undefined;
    const identity = declared === undefined ? undefined : checkToolIdentity(name, effect, mcpConfig.inputSchema, declared);
    const advertised = advertise(name, mcpConfig._meta, effect, identity);
    if (effect === "read" || mcpConfig.outputSchema === undefined) this.outputSchemas.delete(name);
    else this.outputSchemas.set(name, mcpConfig.outputSchema);
    const call = hasInput
      ? (handler as CallScope["handler"])
      : (_args: unknown, extra: GuardedToolExtra) => (handler as (extra: GuardedToolExtra) => CallToolResult | Promise<CallToolResult>)(extra);
    // The same tool registered again (a stateless HTTP server builds an McpServer per request):
    // the definition does not hold the handler (the call's scope does), so one entry serves all.
    if (this.registry.has(name)) {
      if (this.registry.get(name).effect !== effect) {
        throw new InvalidToolDefinitionError(`tool ${name} is registered again with effect ${effect}; it was ${this.registry.get(name).effect}`);
      }
      if (JSON.stringify(this.identities.get(name)) !== JSON.stringify(identity)) {
        throw new InvalidToolDefinitionError(`tool ${name} is registered again with another identity (IDENT-4)`);
      }
      return server.registerTool(name, { ...mcpConfig, _meta: advertised } as never, this.callback(name, effect, hasInput, call) as never);
    }
    // The grown registry is a copy, kept only once its dispatcher accepted it: a refused tool
    // (an unkeyed_write over a volatile ledger) must not stay behind and refuse every later one.
    const registry = new ToolRegistry(this.registry.list());
    registry.add(
      defineTool({
        name,
        effect,
        input: ENVELOPE,
        // The client's key is the identity; other arguments under it are another request (MCP-9).
        // With the tool's identity, only a difference in it is another request (IDENT-9, MCP-10).
        // The downstream mark is not compared: a retry after a deploy that added it is the same request.
        ...(effect === "read" ? {} : { identity: ["key"] as const, onRequestDiffers: "refuse" as const, comparedFields: identity === undefined ? (["key", "args"] as const) : (["key", "identityArgs"] as const) }),
        run: (envelope, context) => {
          const scope = callScope.getStore();
          if (scope?.owner !== this) throw new Error(`tool ${name} ran outside a guarded tools/call`);
          // The stored request's arguments (envelope.args): a re-run after a takeover sends the first request (LEDGER-21).
          // The signal is the claim's alone (MCP-5): the request's own signal aborts when the
          // client cancels it (the SDK does when it stops waiting), and a run cut short there
          // leaves an outcome nobody knows, where its re-send with the same key wants the result.
          // The downstream key is the row's (MCP-16): scoped by namespace and tool as the row is,
          // so another principal's client that chose the same key is another downstream request.
          // The stored request says which key its first run sent (a row claimed before MCP-16, or
          // under downstreamKey "client", sent the client's): a re-run sends that one again.
          const idempotencyKey = envelope.downstream === "scoped" ? context.idempotencyKey : envelope.key;
          return Promise.resolve(scope.handler(envelope.args, { ...scope.extra, idempotencyKey, clientKey: envelope.key, signal: context.signal })).then((result) => {
            // Kept for the caller's answer: a record that fails after this is told with it (MCP-6).
            scope.ran = result;
            return result;
          });
        },
      }),
    );
    // A new dispatcher over the grown registry: its constructor re-checks that unkeyed_write
    // tools have a durable ledger (LEDGER-14), which a registry grown after construction skips.
    this.current = new Dispatcher({ ...this.dispatcherOptions, tools: registry, ledger: this.claims });
    this.registry = registry;
    this.identities.set(name, identity);
    return server.registerTool(name, { ...mcpConfig, _meta: advertised } as never, this.callback(name, effect, hasInput, call) as never);
  }

  /**
   * Answer TURN_CALLS_METHOD on `server` (MCP-15) with the rows of every guard whose tools it
   * serves. Done by registerTool, so every server a guarded tool is on answers it.
   */
  private serveTurnCalls(server: object): void {
    const low = (server as { server?: { setRequestHandler?: unknown } }).server;
    if (typeof low?.setRequestHandler !== "function") return; // not an McpServer (a test double): no protocol to answer on
    const guards = turnListings.get(low);
    if (guards !== undefined) {
      guards.add(this);
      return;
    }
    const set = new Set<McpToolGuard>([this]);
    turnListings.set(low, set);
    (low as { setRequestHandler(schema: typeof TURN_CALLS_REQUEST, handler: (request: z.infer<typeof TURN_CALLS_REQUEST>, extra: RequestHandlerExtra<ServerRequest, ServerNotification>) => Promise<McpTurnCalls>): void }).setRequestHandler(
      TURN_CALLS_REQUEST,
      async (request, extra) => {
        const calls: McpTurnCall[] = [];
        let reason: string | undefined;
        for (const guard of set) {
          const found = await guard.turnCalls(request.params.conversationId, request.params.turnIndex, extra);
          calls.push(...found.calls);
          if (!found.listed) reason ??= found.reason;
        }
        return reason === undefined ? { listed: true, calls } : { listed: false, reason, calls };
      },
    );
  }

  /**
   * The rows this guard's ledger holds for a turn of a client's conversation, in the namespace of
   * the principal asking (MCP-15), each with the client's key, the call's arguments and what the
   * row says of the effect (RECORD-8). `listed` is false when the ledger does not list rows. A
   * ledger error is answered as a JSON-RPC error whose data carries the guard's error meta.
   * `extra` is the request's (it names the principal when the namespace is a function).
   * @example const { calls } = await guard.turnCalls("c_1", 3); // an operator, with a string namespace
   */
  async turnCalls(conversationId: string, turnIndex: number, extra?: RequestHandlerExtra<ServerRequest, ServerNotification>): Promise<McpTurnCalls> {
    // Called directly (an operator's process), not only through the request, whose params are checked already.
    if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) throw new InvalidArgumentError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}, got ${describe(conversationId)}`);
    if (typeof turnIndex !== "number" || !Number.isSafeInteger(turnIndex) || turnIndex < 0) throw new InvalidArgumentError("turnIndex", `must be a non-negative safe integer, got ${describeValue(turnIndex)}`);
    if (typeof this.namespace === "function" && extra === undefined) throw new InvalidArgumentError("extra", "the guard's namespace is a function: pass the request's extra, whose principal names the namespace");
    let rows: LedgerRow[] | undefined;
    try {
      const namespace = typeof this.namespace === "string" ? this.namespace : checkNamespace(namespaceOf(this.namespace, extra!));
      rows = await turnRowsOf(this.ledger, guardConversationId(namespace, conversationId), turnIndex);
    } catch (error) {
      if (!isDispatchOnceError(error)) throw error;
      const meta = errorResult(error)._meta![ERROR_META] as GuardErrorMeta;
      throw new McpError(isDispatchOnceError(error, "invalid_argument") ? ErrorCode.InvalidParams : ErrorCode.InternalError, error.message, { [ERROR_META]: meta });
    }
    if (rows === undefined) return { listed: false, reason: UNLISTED_REASON, calls: [] };
    return { listed: true, calls: rows.map(listedCall) };
  }

  /** The callback McpServer calls: with (args, extra) when the tool has an input schema, (extra) otherwise. */
  private callback(name: string, effect: EffectClass, hasInput: boolean, handler: CallScope["handler"]) {
    return (...params: unknown[]) => {
      const [args, extra] = (hasInput ? params : [undefined, params[0]]) as [unknown, RequestHandlerExtra<ServerRequest, ServerNotification>];
      return this.handle(name, effect, args, extra, handler);
    };
  }

  /**
   * The ledger row key of a call to `toolName` with the client's `key` (for lookups and
   * `reconcile`); `namespace` is the one the call ran under (default: the configured string).
   */
  ledgerKeyFor(toolName: string, key: string, namespace?: string): string {
    // The guard's own checks (MCP-3, MCP-8): a key or namespace no call could have run under has no row.
    if (typeof key !== "string" || !IDEMPOTENCY_KEY_PATTERN.test(key)) throw new IdempotencyKeyMalformedError(String(toolName), describe(key));
    const scope = namespace !== undefined ? checkNamespace(namespace, "namespace") : typeof this.namespace === "string" ? this.namespace : undefined;
    if (scope === undefined) throw new InvalidArgumentError("namespace", "the guard's namespace is a function: pass the call's namespace");
    return this.current.keyFor({ name: toolName, input: { key, args: null } }, { conversationId: scope, turnIndex: 0 });
  }

  /**
   * A write's result as the client gets it (MCP-13): one that fails the tool's outputSchema is
   * answered as the guard's error saying the effect happened, with the tool's own content and
   * without the structured content, never left to McpServer's bare "Output validation error".
   */
  private async checkedOutput(name: string, result: CallToolResult, key?: string): Promise<CallToolResult> {
    const problem = await outputProblem(this.outputSchemas.get(name), result);
    if (problem === undefined) return result;
    const refused = errorResult(new ToolResultInvalidError(name, problem), key);
    const { structuredContent: _dropped, ...rest } = result;
    return { ...rest, isError: true, content: [...(Array.isArray(result.content) ? result.content : []), ...refused.content], _meta: { ...result._meta, ...refused._meta } };
  }

  private async handle(
    name: string,
    effect: EffectClass,
    args: unknown,
    extra: RequestHandlerExtra<ServerRequest, ServerNotification>,
    handler: CallScope["handler"],
  ): Promise<CallToolResult> {
    const raw = extra._meta?.[IDEMPOTENCY_KEY_META];
    if (raw === undefined) {
      // A read has no effect to guard (EFFECT-2); a write is refused unless the server opted in.
      if (effect === "read") return handler(args, { ...extra, idempotencyKey: undefined, clientKey: undefined });
      if (this.unkeyedCalls === "run") {
        let result: CallToolResult;
        try {
          result = await handler(args, { ...extra, idempotencyKey: undefined, clientKey: undefined });
        } catch (error) {
          // Unclaimed, so unrecorded: still say what the failure means for the effect (MCP-4, MCP-6),
          // never McpServer's bare message, which reads as "it failed" and invites a call that pays again.
          const disposition = ToolError.dispositionOf(error);
          const notHappened = disposition === "definite" || disposition === "not_performed";
          return errorResult(new UnguardedCallFailedError(name, notHappened ? "no" : "possibly", error));
        }
        return this.checkedOutput(name, result);
      }
      return errorResult(new IdempotencyKeyMissingError(name));
    }
    if (typeof raw !== "string" || !IDEMPOTENCY_KEY_PATTERN.test(raw)) {
      return errorResult(new IdempotencyKeyMalformedError(name, describe(raw)));
    }
    // Keyed over another identity than this tool compares (it changed since tools/list, or was
    // declared by hand and differs): the key means another call here, so nothing runs (MCP-11).
    const keyedBy = extra._meta?.[IDENTITY_META];
    if (keyedBy !== undefined && !sameIdentity(keyedBy, this.identities.get(name))) {
      return errorResult(new ToolIdentityMismatchError(name, keyedBy, this.identities.get(name)), raw);
    }
    let scope: CallScope | undefined;
    try {
      const namespace = typeof this.namespace === "string" ? this.namespace : checkNamespace(namespaceOf(this.namespace, extra));
      const identity = this.identities.get(name);
      const downstream = this.downstreamKey === "scoped" ? { downstream: "scoped" as const } : {};
      const input =
        identity === undefined || typeof args !== "object" || args === null
          ? { key: raw, args: args ?? null, ...downstream }
          : { key: raw, args, identityArgs: projectArguments(args as Record<string, unknown>, identity), ...downstream };
      const turnMeta = extra._meta?.[TURN_META];
      const turn = turnMeta === undefined ? undefined : turnOf(turnMeta);
      const claimed: CallScope = { owner: this, handler, extra, ...(turn === undefined ? {} : { turn: { conversationId: guardConversationId(namespace, turn.conversationId), turnIndex: turn.turnIndex } }) };
      scope = claimed;
      const outcome = await callScope.run(claimed, () => this.current.dispatch({ name, input }, { conversationId: namespace, turnIndex: 0 }));
      const result = outcome.result as unknown as CallToolResult;
      // A re-worded call answered with (or re-run as) the stored request: say which arguments ran (IDENT-3).
      const stored = outcome.storedRequest === undefined ? {} : { [STORED_ARGUMENTS_META]: (outcome.storedRequest as { args?: unknown }).args };
      const answer =
        outcome.replayed || outcome.storedRequest !== undefined
          ? { ...result, _meta: { ...result._meta, ...(outcome.replayed ? { [REPLAYED_META]: true } : {}), ...stored } }
          : result;
      return await this.checkedOutput(name, answer, raw);
    } catch (error) {
      if (!isDispatchOnceError(error)) throw error;
      const refused = errorResult(error, raw);
      // The effect happened and this process's run returned its result, which the ledger lacks
      // (DISPATCH-8, DISPATCH-10, a result beyond its limit): tell it with the error, or the user
      // learns that a payment was made but never which (MCP-6). Its structured content is dropped,
      // as for MCP-13: the client checks it against the outputSchema even on an error result.
      const ran = scope?.ran;
      if (ran === undefined || effectOf(error) !== "yes" || !Array.isArray(ran.content)) return refused;
      return { ...refused, content: [...ran.content, ...refused.content] };
    }
  }
}

/** A row of a turn as the client reads it (MCP-15): its key and arguments are the client's, from the stored request. */
function listedCall(row: LedgerRow): McpTurnCall {
  const said = turnRowEffect(row);
  let envelope: { key?: unknown; args?: unknown } | undefined;
  try {
    envelope = JSON.parse(row.request) as { key?: unknown; args?: unknown };
  } catch {
    envelope = undefined;
  }
  // A row whose request is not the guard's envelope keeps the ledger's key: listed, never matched as told.
  const key = typeof envelope?.key === "string" ? envelope.key : row.key;
  return { ...said, key, ...(envelope !== undefined && envelope.args !== undefined ? { arguments: envelope.args as JsonValue } : {}) };
}

/**
 * What a result's structured content lacks by `schema` (a zod object schema, or a shape of zod
 * schemas, as McpServer takes `outputSchema`), checked as McpServer checks it; undefined when it
 * matches. Each member is parsed by its own schema, so a shape of zod 3 or zod 4 schemas both work.
 */
async function outputProblem(schema: unknown, result: CallToolResult): Promise<string | undefined> {
  try {
    return await outputIssues(schema, result);
  } catch (error) {
    // The schema is the app's: a refine or transform that throws is a check that failed, after the
    // effect happened, never McpServer's bare error text for a payment made (MCP-6).
    return `the outputSchema's check threw: ${error instanceof Error ? error.message : describeValue(error)}`;
  }
}

async function outputIssues(schema: unknown, result: CallToolResult): Promise<string | undefined> {
  if (schema === undefined || result.isError === true) return undefined;
  const structured: unknown = result.structuredContent;
  if (!structured) return "the result carries no structuredContent";
  type Parser = { safeParseAsync(value: unknown): Promise<{ success: boolean; error?: unknown }> };
  const issues = (error: unknown, at?: string): string => {
    const list = (error as { issues?: { path?: PropertyKey[]; message?: string }[] } | undefined)?.issues;
    if (!Array.isArray(list) || list.length === 0) return `${at ?? "structuredContent"}: ${String(error)}`;
    return list.map((i) => `${[at, ...(i.path ?? []).map(String)].filter((p) => p !== undefined && p !== "").join(".") || "structuredContent"}: ${i.message ?? "invalid"}`).join("; ");
  };
  if (typeof (schema as Partial<Parser>).safeParseAsync === "function") {
    const parsed = await (schema as Parser).safeParseAsync(structured);
    return parsed.success ? undefined : issues(parsed.error);
  }
  if (typeof structured !== "object" || Array.isArray(structured)) return "structuredContent is not an object";
  for (const [member, memberSchema] of Object.entries(schema as Record<string, unknown>)) {
    if (typeof (memberSchema as Partial<Parser>)?.safeParseAsync !== "function") continue;
    const parsed = await (memberSchema as Parser).safeParseAsync((structured as Record<string, unknown>)[member]);
    if (!parsed.success) return issues(parsed.error, member);
  }
  return undefined;
}

/**
 * The app's namespace function, called before anything is claimed: a throw from it is the
 * guard's refusal (invalid_argument, effect "no"), not the SDK's bare error text, which tells
 * the client nothing of the effect (MCP-6).
 */
function namespaceOf(namespace: (extra: RequestHandlerExtra<ServerRequest, ServerNotification>) => string, extra: RequestHandlerExtra<ServerRequest, ServerNotification>): unknown {
  try {
    return namespace(extra);
  } catch (error) {
    throw new InvalidArgumentError("options.namespace", `the namespace function threw before the call was claimed (nothing ran): ${error instanceof Error ? error.message : describeValue(error)}`);
  }
}

/** A refusal or an unsettled outcome as an MCP tool error: text for the model, a code for programs (MCP-6). */
function errorResult(error: Error & { code: string }, key?: string): CallToolResult {
  const own = McpGuardError.isInstance(error);
  // The profile's own refusals ran nothing; an invalid result is of a run that happened (MCP-13).
  const effect = own ? (ToolResultInvalidError.isInstance(error) ? "yes" : UnguardedCallFailedError.isInstance(error) ? error.effect : "no") : effectOf(error);
  const meta: GuardErrorMeta = {
    code: error.code,
    message: error.message,
    // Never "re-send it" for an effect known to have happened (DISPATCH-8, MCP-6): retryableOf.
    retryable: own ? "no" : retryableOf(error),
    effect,
    ...(key !== undefined ? { key } : {}),
  };
  if (isDispatchOnceError(error, "tool_failed")) meta.error = (error as unknown as { error: StoredError }).error;
  // A re-worded call answered with the stored request's failure or unknown outcome, or whose run of
  // it (or wait on another's) is still in flight, released or unrecorded: say which request failed,
  // happened or may have (IDENT-3, MCP-10). Core names it on every error raised after the stored row (RECORD-10).
  let stored = {};
  const { storedRequest } = error as { storedRequest?: { args?: unknown } };
  if (!own && storedRequest !== undefined && isDispatchOnceError(error)) {
    stored = { [STORED_ARGUMENTS_META]: storedRequest.args };
  }
  return { isError: true, content: [{ type: "text", text: `[${error.code}] ${error.message.replace(/\.$/, "")}. ${effectNote(meta)}` }], _meta: { [ERROR_META]: meta, ...stored } };
}

/**
 * What the model reads of `_meta`'s `effect` and `retryable` (MCP-6): told only "in flight" it calls
 * the tool again, and a client keying per call (mcpTurn) sends that under a new key, which runs again.
 */
function effectNote({ effect, retryable }: GuardErrorMeta): string {
  const happened = effect === "no" ? "it did not happen" : effect === "yes" ? "it happened" : "it may have happened";
  const again =
    retryable === "same_message"
      ? "re-send this call with the same key to learn its outcome"
      : effect === "no"
        ? "re-sending it with the same key will not help"
        : "do not call it again: ask the user";
  return `Effect: ${happened}; ${again}.`;
}

/**
 * MCP-10's identity of a guarded tool: a write's, naming fields of its input schema (IDENT-2),
 * given as a zod shape or an object schema, the forms whose fields can be read here.
 */
function checkToolIdentity(name: string, effect: EffectClass, inputSchema: unknown, identity: unknown): readonly string[] {
  const fields = checkIdentity("config.identity", identity);
  if (effect === "read") throw new InvalidArgumentError("config.identity", `tool ${name} is a read; an identity only applies to writes`);
  if (typeof inputSchema !== "object" || inputSchema === null) {
    throw new InvalidArgumentError("config.identity", `tool ${name} needs an inputSchema whose fields the identity names`);
  }
  const shape = (inputSchema as { shape?: unknown }).shape;
  const names = Object.keys(typeof shape === "object" && shape !== null ? shape : inputSchema);
  for (const field of fields) {
    if (!names.includes(field)) throw new InvalidArgumentError("config.identity", `tool ${name}: identity field ${JSON.stringify(field)} is not in its inputSchema (${names.join(", ")})`);
  }
  return fields;
}

/** The tool definition's `_meta` for tools/list: the caller's, plus the effect class and identity the guard holds (MCP-11). */
function advertise(name: string, meta: Record<string, unknown> | undefined, effect: EffectClass, identity: readonly string[] | undefined): Record<string, unknown> {
  if (meta !== undefined && (typeof meta !== "object" || meta === null || Array.isArray(meta))) throw new InvalidArgumentError("config._meta", "must be an object");
  for (const member of [IDENTITY_META, EFFECT_META]) {
    // Given here, it could say something the guard does not do; the guard writes what it does.
    if (meta !== undefined && Object.hasOwn(meta, member)) throw new InvalidArgumentError(`config._meta["${member}"]`, `tool ${name}: the guard advertises this member itself (MCP-11); declare \`effect\` / \`identity\` instead`);
  }
  return { ...meta, [EFFECT_META]: effect, ...(identity === undefined ? {} : { [IDENTITY_META]: [...identity] }) };
}

function checkNamespace(namespace: unknown, field = "options.namespace"): string {
  if (typeof namespace !== "string" || !CONVERSATION_ID_PATTERN.test(namespace)) {
    throw new InvalidArgumentError(field, `must match ${CONVERSATION_ID_PATTERN.source}, got ${describe(namespace)}`);
  }
  return namespace;
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
  return value === null ? "null" : typeof value;
}
