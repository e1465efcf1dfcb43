import { canonicalize, CONVERSATION_ID_PATTERN, deriveKey, describeValue, InvalidArgumentError, InvalidKeyInputError } from "@dispatch-once/core";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { ErrorCode, McpError, type CallToolRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { unknownOptionMessage, unknownOptionName, type OptionNames } from "@dispatch-once/core/internal";
import { ToolIdentityMismatchError } from "./errors/tool-identity-mismatch.js";
import { advertisedIdentity, checkIdentity, projectArguments, sameIdentity, type ListedTool } from "./identity.js";
import { ERROR_META, IDEMPOTENCY_KEY_META, IDEMPOTENCY_KEY_PATTERN, IDENTITY_META, TURN_CALLS_METHOD, TURN_META } from "./meta.js";
import type { McpTurnCall, McpTurnCalls } from "./server.js";

export type { ListedTool } from "./identity.js";

/** Where a call sits in the agent's conversation: identical across every replay of the turn (spec §4). */
export interface McpTurnContext {
  /** The app's conversation id (core's alphabet: `[A-Za-z0-9_.:~-]{1,256}`). */
  conversationId: string;
  /** Position of the turn in the conversation; a regenerate or a retry of the turn keeps it. */
  turnIndex: number;
}

/** The params of a `tools/call` request, as `Client.callTool` takes them. */
export type CallToolParams = CallToolRequest["params"];

/** Options of one attempt at a turn. */
export interface McpTurnOptions {
  /**
   * Per tool, the argument names that identify a call (IDENT-1, MCP-10): the key is derived from
   * them alone, so a regenerate whose model re-words a free-text argument (a memo) sends the
   * first call's key and is answered from the server's ledger instead of paying again. Declare
   * the same identity on the server's tool (`registerTool(..., { identity })`), or the server
   * refuses the re-worded call as another request under the key (MCP-9). Without it every
   * argument is part of the key. For a tool in `tools`, it must be the identity the server lists
   * (in any order), or `mcpTurn` throws `ToolIdentityMismatchError` (MCP-11).
   * @default {}
   * @example mcpTurn(client, { conversationId, turnIndex }, { identity: { send_payment: ["payee", "amount", "currency", "reference"] } })
   */
  identity?: Record<string, readonly string[]>;
  /**
   * The server's tools as `tools/list` gives them (`(await client.listTools()).tools`): a tool
   * whose `_meta["io.github.dispatch-once/identity"]` advertises an identity is keyed by it
   * (MCP-11), so the client need not declare it by hand. A malformed advertisement (not an array
   * of distinct argument names of the tool's input schema) throws `invalid_tool_definition`; it
   * is never keyed over every argument instead. Each call keyed by an identity says so in its
   * `_meta`, and a server whose identity changed since the list refuses it. A listed tool without
   * an entry in `schemas` is keyed with each absent member its input schema gives a `default`
   * written out as that default (MCP-12): the server's schema writes it out too, so a regenerate
   * that spells the default out is the same request and carries the same key.
   * @default none (only `identity` counts)
   * @example mcpTurn(client, { conversationId, turnIndex }, { tools: (await client.listTools()).tools })
   */
  tools?: readonly ListedTool[];
  /**
   * Per tool, its input schema as the server declares it (a zod schema, or anything with
   * `safeParse`): the key is derived from the schema's output, as core keys a call (DISPATCH-3),
   * so spellings the server's schema folds into one request (text in NFD and NFC under
   * `.normalize("NFC")`, a field omitted and its `.default()` written out) carry one key. Keyed
   * over the arguments as sent, such a regenerate gets a new key and the server runs it again.
   * Arguments the schema refuses are keyed as sent (the server refuses them too). The arguments
   * are sent as given either way.
   * @default {}
   * @example mcpTurn(client, { conversationId, turnIndex }, { schemas: { send_payment: paymentInput } })
   */
  schemas?: Record<string, { safeParse(value: unknown): { success: boolean; data?: unknown } }>;
}

const TURN_OPTION_NAMES: OptionNames<McpTurnOptions> = { identity: true, schemas: true, tools: true };
/** idempotencyKeyFor's options: a misspelt `identiy` would be ignored, and the memo would stay in the key. */
const KEY_OPTION_NAMES: OptionNames<McpKeyOptions> = { identity: true, schema: true };
/** A turn's context, and idempotencyKeyFor's (which adds the ordinal): a misspelt `ordnal` gave the n-th identical call the first one's key. */
const CONTEXT_NAMES: OptionNames<McpTurnContext> = { conversationId: true, turnIndex: true };
const KEY_CONTEXT_NAMES: OptionNames<McpTurnContext & { ordinal?: number }> = { ...CONTEXT_NAMES, ordinal: true };

/** How one tool's calls are keyed (MCP-10): over its schema's output, projected onto its identity. */
export interface McpKeyOptions {
  /**
   * The tool's identity (MCP-10): the key is derived from these arguments alone.
   * @default every argument
   * @example idempotencyKeyFor(context, call, { identity: ["payee", "amount", "currency", "reference"] })
   */
  identity?: readonly string[];
  /**
   * The tool's input schema as the server declares it: the key is derived from its output.
   * @default the arguments as sent
   * @example idempotencyKeyFor(context, call, { schema: paymentInput })
   */
  schema?: { safeParse(value: unknown): { success: boolean; data?: unknown } };
}

/** The arguments a key is derived from: the schema's output when it accepts them, projected onto the identity. */
function keyedArguments(args: Record<string, unknown>, options: McpKeyOptions): Record<string, unknown> {
  const parsed = options.schema?.safeParse(args);
  const output = parsed?.success === true && typeof parsed.data === "object" && parsed.data !== null && !Array.isArray(parsed.data) ? (parsed.data as Record<string, unknown>) : args;
  return options.identity === undefined ? output : projectArguments(output, options.identity);
}

/**
 * The Dispatch-Once key of one MCP tool call: core's key over (conversation id, turn index, tool
 * name, ordinal, canonical arguments), so a replay of the turn sends the same key (MCP-2).
 * Absent arguments count as `{}`, the value MCP gives them. With `identity`, the arguments are
 * their projection onto it (MCP-10).
 *
 * @example
 * const key = idempotencyKeyFor({ conversationId: "c_1", turnIndex: 3 }, { name: "pay", arguments: { amount: 100 } });
 */
export function idempotencyKeyFor(
  context: McpTurnContext & { ordinal?: number },
  call: Pick<CallToolParams, "name" | "arguments">,
  options: McpKeyOptions = {},
): string {
  checkContext(context, KEY_CONTEXT_NAMES);
  checkCall(call);
  checkKeyOptions(options);
  if (options.identity !== undefined) checkIdentity("options.identity", options.identity);
  if (options.schema !== undefined) checkSchema("options.schema", options.schema);
  return deriveKey({
    conversationId: context.conversationId,
    turnIndex: context.turnIndex,
    name: call.name,
    args: keyedArguments(call.arguments ?? {}, options),
    ...(context.ordinal !== undefined ? { ordinal: context.ordinal } : {}),
  });
}

/**
 * The same params with the key in `_meta` (MCP-1); other `_meta` members are kept. A key the
 * guard would refuse as malformed (MCP-3) is refused here, with `invalid_argument`.
 */
export function withIdempotencyKey<P extends CallToolParams>(params: P, key: string): P {
  if (typeof key !== "string" || !IDEMPOTENCY_KEY_PATTERN.test(key)) {
    throw new InvalidArgumentError("key", `must match ${IDEMPOTENCY_KEY_PATTERN.source} (MCP-3), got ${typeof key === "string" ? JSON.stringify(key.slice(0, 40)) : typeof key}`);
  }
  if (typeof params !== "object" || params === null || Array.isArray(params)) throw new InvalidArgumentError("params", "must be the params of a tools/call request");
  const meta: unknown = params._meta;
  if (meta !== undefined && (typeof meta !== "object" || meta === null || Array.isArray(meta))) {
    throw new InvalidArgumentError("params._meta", `must be an object (MCP's request _meta) or absent, got ${describeValue(meta)}`);
  }
  return { ...params, _meta: { ...params._meta, [IDEMPOTENCY_KEY_META]: key } };
}

/**
 * The part of an MCP client the helper uses; `Client` from `@modelcontextprotocol/sdk` has it.
 * `request` is needed only by `unansweredCalls()` (MCP-15).
 */
export type ToolCallingClient = Pick<Client, "callTool"> & Partial<Pick<Client, "request">>;

/** One attempt at a turn: calls made through it carry keys whose ordinals follow call order (TURN-4). */
export interface McpTurn<C extends ToolCallingClient> {
  /** `client.callTool` with the call's key in `_meta`. */
  callTool(params: CallToolParams, ...rest: DropFirst<Parameters<C["callTool"]>>): ReturnType<C["callTool"]>;
  /**
   * Send a call with these params again, with its key (after a transport error or a timeout,
   * when its result never arrived): the server answers it from the ledger if it ran. Of identical
   * calls, it is the oldest whose outcome the client does not know (its send rejected, or was
   * answered with an error to re-send with the same key, `retryable: "same_message"`), else the
   * last: of two identical calls sent at once, the one whose response was lost is answered with
   * its own result, not the other's (MCP-14). `callTool` with the same params would be the next
   * identical call (a new ordinal, a new key).
   */
  resend(params: CallToolParams, ...rest: DropFirst<Parameters<C["callTool"]>>): ReturnType<C["callTool"]>;
  /** The key the next call with these params would carry, without sending it or using up its ordinal. */
  peekKey(params: Pick<CallToolParams, "name" | "arguments">): string;
  /**
   * The effects of this turn that this attempt's answers do not tell (MCP-15): the guarding
   * server's ledger rows claimed at this conversation and turn index (LIST-3, in the server's
   * namespace for this client) whose key no call of this attempt was answered under (a result or
   * an error reached the caller), each with the client's key, the call's arguments and what its
   * row says of the effect, as a runner's committed-turn record says it (RECORD-8): `happened`,
   * `may_have_happened` or `not_happened`. An earlier attempt of the turn that was cut (a lost
   * response, a broken model stream) may have paid, and a re-run whose model then asks a
   * question or pays another amount leaves that payment in nothing the user sees. Ask once the
   * attempt is done, before keeping or showing its answer, and tell the user of every call it
   * returns. `listed` is false when the server's ledger does not list rows, or the server does not
   * answer the request (not a guarding server, or one older than MCP-15): nothing can be said
   * then. A listing that fails rejects with the server's error (an `McpError` whose data carries
   * `io.github.dispatch-once/error`: `ledger_unavailable`, ask again). Needs the client's `request`.
   * @example const { listed, calls } = await turn.unansweredCalls(); // after the attempt's last call
   */
  unansweredCalls(): Promise<McpUnansweredCalls>;
}

/** What `unansweredCalls()` found (MCP-15); a listing that did not happen says why. */
export type McpUnansweredCalls = McpTurnCalls;
export type { McpTurnCall };

/** The guard's answer, checked before it is read: a server that answers something else is not listing. */
const TURN_CALLS_RESULT = z.object({
  listed: z.boolean(),
  reason: z.string().optional(),
  calls: z.array(z.object({ key: z.string(), name: z.string(), state: z.enum(["in_flight", "completed", "failed", "unknown", "released"]), effect: z.enum(["happened", "not_happened", "may_have_happened"]), summary: z.string() }).loose()),
}).loose();

type DropFirst<T extends unknown[]> = T extends [unknown, ...infer R] ? R : never;

/**
 * Start one attempt at a turn (a first run, a regenerate, a retry after a cut stream): make a
 * new one for each attempt, so the n-th identical call gets ordinal n-1 in every attempt and
 * so the same key (MCP-2, TURN-4).
 *
 * @example
 * const turn = mcpTurn(client, { conversationId: "c_1", turnIndex: 3 });
 * const result = await turn.callTool({ name: "pay", arguments: { amount: 100 } });
 */
export function mcpTurn<C extends ToolCallingClient>(client: C, context: McpTurnContext, options: McpTurnOptions = {}): McpTurn<C> {
  checkContext(context, CONTEXT_NAMES);
  if (typeof client?.callTool !== "function") throw new InvalidArgumentError("client", "must be an MCP client with callTool");
  const { identity: declared = {}, schemas = {}, tools } = checkTurnOptions(options);
  const identities = turnIdentities(declared, tools);
  const listed = listedSchemas(tools);
  const keyOptions = (params: Pick<CallToolParams, "name">): McpKeyOptions => {
    // The caller's own schema wins; without one, the listed input schema's defaults (MCP-12).
    const schema = Object.hasOwn(schemas, params.name) ? schemas[params.name] : listed.get(params.name);
    return { ...(identities.has(params.name) ? { identity: identities.get(params.name) } : {}), ...(schema !== undefined ? { schema } : {}) };
  };
  // The identity the key was derived from rides along, so a server that compares another refuses the call (MCP-11).
  const send = (params: CallToolParams, key: string, rest: unknown[]): ReturnType<C["callTool"]> => {
    const keyed = withIdempotencyKey(params, key);
    const identity = identities.get(params.name);
    // The turn rides along too: the guard stores it on the call's row, where a re-run of the turn finds it (MCP-15).
    const turn = { [TURN_META]: { conversationId: context.conversationId, turnIndex: context.turnIndex } };
    const sent = { ...keyed, _meta: { ...keyed._meta, ...turn, ...(identity === undefined ? {} : { [IDENTITY_META]: [...identity] }) } };
    return (client.callTool.bind(client) as (...args: unknown[]) => ReturnType<C["callTool"]>)(sent, ...rest);
  };
  const seen = new Map<string, number>();
  // The keys this attempt was answered under (a result or an error reached the caller): told (MCP-15).
  const answered = new Set<string>();
  // Per identical call (by its keyed arguments), the ordinals whose outcome the client does not
  // know yet: their last send rejected, or answered "re-send with the same key" (MCP-14).
  const unknown = new Map<string, Set<number>>();
  const track = (id: string, ordinal: number, key: string, sent: ReturnType<C["callTool"]>): ReturnType<C["callTool"]> => {
    const open = unknown.get(id) ?? new Set<number>();
    unknown.set(id, open);
    open.delete(ordinal);
    // A side chain: the caller gets the very promise (and its rejection) it would have got.
    Promise.resolve(sent).then(
      (result) => {
        answered.add(key);
        if (resendAsked(result)) open.add(ordinal);
      },
      () => open.add(ordinal),
    );
    return sent;
  };
  // Identical calls (TURN-4) are compared by the arguments the key is derived from.
  const identity = (params: Pick<CallToolParams, "name" | "arguments">) => {
    checkCall(params);
    return `${params.name}|${canonicalize(keyedArguments(params.arguments ?? {}, keyOptions(params)))}`;
  };
  return {
    callTool(params, ...rest) {
      const id = identity(params);
      const ordinal = seen.get(id) ?? 0;
      const key = idempotencyKeyFor({ ...context, ordinal }, params, keyOptions(params));
      // Counted only once the key exists: a call refused for its input does not shift later ordinals.
      seen.set(id, ordinal + 1);
      return track(id, ordinal, key, send(params, key, rest));
    },
    resend(params, ...rest) {
      const id = identity(params);
      const sent = seen.get(id);
      if (sent === undefined) throw new InvalidArgumentError("params", `no call to ${params.name} with these arguments was sent in this turn`);
      const open = [...(unknown.get(id) ?? [])];
      const ordinal = open.length > 0 ? Math.min(...open) : sent - 1;
      const key = idempotencyKeyFor({ ...context, ordinal }, params, keyOptions(params));
      return track(id, ordinal, key, send(params, key, rest));
    },
    peekKey(params) {
      return idempotencyKeyFor({ ...context, ordinal: seen.get(identity(params)) ?? 0 }, params, keyOptions(params));
    },
    async unansweredCalls() {
      if (typeof client.request !== "function") {
        throw new InvalidArgumentError("client", "must be an MCP client with request() to ask the server for the turn's calls (MCP-15)");
      }
      let found: z.infer<typeof TURN_CALLS_RESULT>;
      try {
        found = await client.request({ method: TURN_CALLS_METHOD, params: { conversationId: context.conversationId, turnIndex: context.turnIndex } } as never, TURN_CALLS_RESULT as never);
      } catch (error) {
        // A server that does not know the method never listed anything: say so, never "none".
        if (error instanceof McpError && error.code === ErrorCode.MethodNotFound) {
          return { listed: false, reason: `the server does not list a turn's calls (${TURN_CALLS_METHOD}: not a guarding server, or one older than MCP-15)`, calls: [] };
        }
        throw error;
      }
      const calls = (found.calls as McpTurnCall[]).filter((call) => !answered.has(call.key));
      return found.listed ? { listed: true, calls } : { listed: false, reason: found.reason ?? "the server did not list the turn's rows", calls };
    },
  };
}

/** Whether a tools/call result is the guard's error that says to re-send the call with the same key (MCP-6). */
function resendAsked(result: unknown): boolean {
  if (typeof result !== "object" || result === null) return false;
  const { isError, _meta } = result as { isError?: unknown; _meta?: unknown };
  const error = typeof _meta === "object" && _meta !== null ? (_meta as Record<string, unknown>)[ERROR_META] : undefined;
  return isError === true && typeof error === "object" && error !== null && (error as { retryable?: unknown }).retryable === "same_message";
}

/**
 * Each tool's identity for a turn: the declared one, or the one the server lists (MCP-11). A
 * declared identity that contradicts the listed one (the server lists none: it compares every
 * argument) is refused, not preferred: keyed over one and compared over the other, a re-worded
 * regenerate pays again or is refused, and which of the two lists is stale is not the client's to guess.
 */
function turnIdentities(declared: Record<string, readonly string[]>, tools: readonly ListedTool[] | undefined): Map<string, readonly string[]> {
  const identities = new Map(Object.entries(declared));
  for (const tool of tools ?? []) {
    const listed = advertisedIdentity(tool);
    if (identities.has(tool.name) && !sameIdentity(identities.get(tool.name), listed)) throw new ToolIdentityMismatchError(tool.name, identities.get(tool.name), listed);
    if (listed !== undefined) identities.set(tool.name, listed);
  }
  return identities;
}

/** A JSON Schema as tools/list gives it: the members whose defaults MCP-12 writes out. */
interface ListedSchema {
  properties?: Record<string, unknown>;
  items?: unknown;
  default?: unknown;
}

/**
 * Per listed tool, its input schema's defaults as a schema the key is derived over (MCP-12): the
 * server's schema writes an omitted field's default out before its ledger sees the call, so a
 * regenerate that writes it out itself is the same request there, and keyed as sent it would get
 * a second key and pay again. Nothing else of the listed schema is applied: it does not say how
 * the server normalises text or coerces values, and a fold it did not declare could make two
 * effects one key.
 */
function listedSchemas(tools: readonly ListedTool[] | undefined): Map<string, McpKeyOptions["schema"]> {
  const schemas = new Map<string, McpKeyOptions["schema"]>();
  for (const tool of tools ?? []) {
    const schema = tool.inputSchema as ListedSchema | undefined;
    if (isObject(schema)) schemas.set(tool.name, { safeParse: (value) => ({ success: true, data: withListedDefaults(value, schema) }) });
  }
  return schemas;
}

/** `value` with every absent member that `schema` gives a default written out as it, in nested objects and array items too. */
function withListedDefaults(value: unknown, schema: ListedSchema): unknown {
  if (Array.isArray(value)) return isObject(schema.items) ? value.map((item) => withListedDefaults(item, schema.items as ListedSchema)) : value;
  if (!isObject(value) || !isObject(schema.properties)) return value;
  const out: Record<string, unknown> = { ...value };
  for (const [name, member] of Object.entries(schema.properties)) {
    if (!isObject(member)) continue;
    const given = Object.hasOwn(out, name) ? out[name] : undefined;
    if (given === undefined) {
      // A default the server's validator writes out when the member is absent (not when it is null).
      if (Object.hasOwn(member, "default")) out[name] = structuredClone((member as ListedSchema).default);
    } else {
      out[name] = withListedDefaults(given, member as ListedSchema);
    }
  }
  return out;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** mcpTurn's options: a misspelt `identities` would be ignored, and the memo would stay in every key. */
function checkTurnOptions(options: unknown): McpTurnOptions {
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new InvalidArgumentError("options", "must be an object { identity?, schemas?, tools? }");
  const unknown = unknownOptionName(options as McpTurnOptions, TURN_OPTION_NAMES);
  if (unknown !== undefined) throw new InvalidArgumentError(`options.${unknown}`, unknownOptionMessage("mcpTurn", TURN_OPTION_NAMES));
  const { identity, schemas, tools } = options as McpTurnOptions;
  if (tools !== undefined && (!Array.isArray(tools) || !tools.every((tool) => typeof tool?.name === "string"))) {
    throw new InvalidArgumentError("options.tools", "must be the tools of a tools/list result ({ name, inputSchema, _meta? }[])");
  }
  for (const [option, map] of [["identity", identity], ["schemas", schemas]] as const) {
    if (map !== undefined && (typeof map !== "object" || map === null || Array.isArray(map))) {
      throw new InvalidArgumentError(`options.${option}`, "must map tool names to their " + (option === "identity" ? "identifying argument names" : "input schemas"));
    }
  }
  for (const [name, fields] of Object.entries(identity ?? {})) checkIdentity(`options.identity.${name}`, fields);
  for (const [name, schema] of Object.entries(schemas ?? {})) checkSchema(`options.schemas.${name}`, schema);
  return options as McpTurnOptions;
}

function checkKeyOptions(options: unknown): void {
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new InvalidArgumentError("options", `must be an object { identity?, schema? }, got ${describeValue(options)}`);
  const unknown = unknownOptionName(options, KEY_OPTION_NAMES);
  if (unknown !== undefined) throw new InvalidArgumentError(`options.${unknown}`, unknownOptionMessage("idempotencyKeyFor", KEY_OPTION_NAMES));
}

function checkSchema(field: string, schema: unknown): void {
  if (typeof (schema as { safeParse?: unknown } | null)?.safeParse !== "function") throw new InvalidArgumentError(field, "must be the tool's input schema (a zod schema: safeParse)");
}

/** The turn's context, checked where it is given (a bad one would otherwise fail every call of the turn). */
function checkContext(context: unknown, names: Readonly<Record<string, true>>): asserts context is McpTurnContext {
  if (typeof context !== "object" || context === null || Array.isArray(context)) {
    throw new InvalidArgumentError("context", "must be an object { conversationId, turnIndex }");
  }
  const unknown = unknownOptionName(context, names);
  if (unknown !== undefined) throw new InvalidArgumentError(`context.${unknown}`, `is not a member of the context (its members: ${Object.keys(names).join(", ")})`);
  const { conversationId, turnIndex } = context as Partial<McpTurnContext>;
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
    throw new InvalidKeyInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
  }
  if (typeof turnIndex !== "number" || !Number.isSafeInteger(turnIndex) || turnIndex < 0) {
    throw new InvalidKeyInputError("turnIndex", "must be a non-negative safe integer");
  }
}

/**
 * A call's `{ name, arguments }`, refused as the dispatcher refuses a call that is not an object
 * (`invalid_argument`); MCP's arguments are an object, so an array (or null) is refused too, not
 * keyed: only absent arguments count as `{}`.
 */
function checkCall(call: unknown): asserts call is Pick<CallToolParams, "name" | "arguments"> {
  if (typeof call !== "object" || call === null || Array.isArray(call)) {
    throw new InvalidArgumentError("call", "must be an object { name, arguments? }");
  }
  const args = (call as { arguments?: unknown }).arguments;
  if (args !== undefined && (typeof args !== "object" || args === null || Array.isArray(args))) {
    throw new InvalidArgumentError("call.arguments", `must be an object (MCP's tools/call arguments) or absent, got ${args === null ? "null" : Array.isArray(args) ? "an array" : typeof args}`);
  }
}
