import { AsyncLocalStorage } from "node:async_hooks";
import {
  describeValue,
  CONVERSATION_ID_PATTERN,
  defineTool,
  Dispatcher,
  InvalidArgumentError,
  InvalidKeyInputError,
  InvalidToolDefinitionError,
  isRecordRowName,
  RECORD_ROW_PREFIX,
  LedgerUnavailableError,
  type DispatcherOptions,
  type EffectClass,
  type JsonValue,
  type Ledger,
  type LedgerRow,
  type ToolDefinition,
  type DispatchOutcome,
} from "@dispatch-once/core";
import { loggerOption, markRecordTool, MAX_TURN_MESSAGES, MESSAGE_ORDINAL_STRIDE, turnRowEffect, turnRowInput, turnRowsOf, UNLISTED_REASON, unknownOptionMessage, unknownOptionName, type OptionNames } from "@dispatch-once/core/internal";
import type { UnansweredCallRecord } from "@dispatch-once/runner";
import { asSchema, type FlexibleSchema, type ModelMessage, type Tool, type ToolCallRepairFunction, type ToolExecutionOptions, type ToolSet } from "ai";
import { z } from "zod";
import { checkProviderTool, isProviderDefined } from "./provider-tools.js";
import { turnCallsOf, type TurnHistoryCall } from "./turn-history.js";
import { turnIndexOf, turnMessageIdOf } from "./turn-index.js";

/** What a wrapped tool's `execute` finds in its options besides the AI SDK's own (read it with `dispatchOnceOf`). */
export interface DispatchOnceCallInfo {
  /** Forward it as the `Idempotency-Key` of the downstream request (DISPATCH-4). */
  idempotencyKey: string;
  conversationId: string;
  turnIndex: number;
  ordinal: number;
}

/** The execute options a wrapped tool receives: the AI SDK's, plus `dispatchOnce`. */
export type OnceExecutionOptions = ToolExecutionOptions & { dispatchOnce: DispatchOnceCallInfo };

export interface OnceToolsOptions<TOOLS extends ToolSet> {
  /**
   * The app's tools, made with `tool({ description, inputSchema, execute })`.
   * @example createOnceTools({ tools: { send_payment: sendPayment }, effects: { send_payment: "keyed_write" }, ledger })
   */
  tools: TOOLS;
  /**
   * The effect class of every tool that has `execute` (EFFECT-1: declared, never defaulted).
   * @example { create_invoice: "unkeyed_write", send_payment: "keyed_write", get_balance: "read" }
   */
  effects: { [K in keyof TOOLS]: EffectClass };
  /**
   * Where claims and results live; shared by every process that serves the chat route.
   * @example createOnceTools({ tools, effects, ledger: createSqliteLedger("ledger.db") })
   */
  ledger: Ledger;
  /**
   * Per tool, the input fields that identify the call (core's `identity`, spec §5.2): the key is
   * derived from them alone, so a retried model response that re-words a free-text field (a memo,
   * a note) is still the same call. Without it every field is part of the identity.
   * @default {}
   * @example { send_payment: ["payee", "amount", "currency", "reference"] }
   */
  identity?: { [K in keyof TOOLS]?: readonly string[] };
  /**
   * Per write tool, the names it had before (core's `formerNames`, spec IDENT-11): a renamed
   * tool's keys all change with its name, so a re-sent message (AISDK-18) after the rename finds
   * the rows the old name made only when the old name is listed. A former name may not be the name
   * of a tool (or another tool's former name).
   * @default {}
   * @example { send_payment: ["pay"] }
   */
  formerNames?: { [K in keyof TOOLS]?: readonly string[] };
  /**
   * The rest of core's dispatcher options (lease, wait bound, logger, events, ...).
   * @default {}
   * @example { dispatcher: { waitMs: 30_000 } }
   */
  dispatcher?: Omit<DispatcherOptions, "tools" | "ledger">;
}

/** Which request is being answered: the app's conversation and its messages (or an explicit turn index). */
export type OnceTurnInput = {
  /** The app's conversation id (the `useChat` chat id): core's alphabet `[A-Za-z0-9_.:~-]{1,256}`. */
  conversationId: string;
  /**
   * When the wrapped tools run: `"step"` (default) where the AI SDK runs them, after the model's
   * step finished; `"tool-call"` (low latency) as soon as the call's `tool-call` part arrives,
   * through `onChunk`. Both are keyed the same; the ledger makes the early run safe to replay
   * when the stream is then cut (AISDK-4).
   * @default "step"
   * @example { dispatchAt: "tool-call" }
   */
  dispatchAt?: "step" | "tool-call";
  /**
   * The app re-runs a turn that ran before, where nothing in the request tells (its user message
   * carries no id: model messages, or a turn index from the app's own store): a regenerate or
   * resubmit. Its write calls are dispatched as a re-run turn (core's `resumed`, IDENT-10), so a
   * deploy since the turn's earlier request that changed a write tool's identity or name answers
   * the call from the row that request made instead of running it again; one listing of the
   * turn's rows per request. Refused for a turn whose user message carries an id: the wrapper tells
   * a re-send there by the message's record (AISDK-18).
   * @default false
   * @example once.forTurn({ conversationId, turnIndex: stored.turnIndex, resumed: stored.ranBefore })
   */
  resumed?: boolean;
} & (
  | {
      /**
       * The request's messages (`UIMessage[]` or `ModelMessage[]`): the turn index is
       * `turnIndexOf(messages)` (AISDK-1), and the calls of the turn that earlier requests ran
       * (after the last user message) start this request's ordinals (AISDK-9).
       */
      messages: readonly { role: string }[];
      turnIndex?: undefined;
      turnMessages?: undefined;
    }
  | {
      /** The turn index from the app's own store, for a truncated or windowed history (AISDK-1). */
      turnIndex: number;
      messages?: undefined;
      /**
       * With `turnIndex`: the messages of the turn being answered (`UIMessage[]` or
       * `ModelMessage[]`), from its user message on, e.g. the app's windowed history when the
       * window holds the whole turn. The calls they show as run or approved start this request's
       * ordinals, as `messages` does (AISDK-9); messages before the last user message in it are
       * not read. Without it every request of the turn starts at ordinal 0, so a call in a
       * continuation (after an approval or a client-side tool result) that is identical to one
       * an earlier request of the turn ran is answered with that call's result instead of running.
       * @default undefined (no history: ordinals start at 0 in every request)
       * @example once.forTurn({ conversationId, turnIndex: stored.turnIndex, turnMessages: windowedMessages })
       */
      turnMessages?: readonly unknown[];
    }
);

/** One request's view of the wrapped tools: pass `tools` (and, for `dispatchAt: "tool-call"`, `onChunk`) to `streamText`. */
export interface OnceTurn<TOOLS extends ToolSet> {
  tools: TOOLS;
  conversationId: string;
  /**
   * The request's turn index (`turnIndexOf(messages)` or the app's own). A user message keeps the
   * turn at which it first dispatched a claimed call (AISDK-17): where a later history counts it at
   * another index, its calls are keyed, listed and told (`dispatchOnceOf(options).turnIndex`) at that first one.
   */
  turnIndex: number;
  /**
   * `streamText`'s `onChunk`: in `"tool-call"` mode it starts each wrapped call the moment its
   * `tool-call` part arrives; a no-op in `"step"` mode. It never waits for the call.
   */
  onChunk(event: { chunk: { type: string } }): void;
  /**
   * The outcome of a wrapped call of this request once it settled, by the `toolCallId` of its
   * `tool-result` part: its `key`, whether it was `replayed` from the ledger, and `storedRequest`
   * when the request that ran is not the part's `input` (a regenerate re-worded a field outside
   * the identity, IDENT-3): show that, not the part's `input`, as what was done. Undefined for a
   * call that has not settled or failed (its `tool-error` carries the error).
   */
  outcomeOf(toolCallId: string): DispatchOutcome | undefined;
  /**
   * The app's `experimental_repairToolCall`, made safe to re-run (AISDK-11): a model call's first
   * repair is recorded in the ledger, keyed by the call as the model wrote it (its tool name and
   * argument text) and its place among this request's identical broken calls, and a re-run of the
   * turn whose model repeats the broken call gets that repair again instead of a new one, so the
   * repaired call meets the key it had. Without it a repair that answers differently (another
   * model request) makes the regenerate's call another call, which runs again.
   * @example streamText({ model, messages, tools: turn.tools, experimental_repairToolCall: turn.repairToolCall(repair) })
   */
  repairToolCall<T extends ToolSet>(repair: ToolCallRepairFunction<T>): ToolCallRepairFunction<T>;
  /**
   * The calls this request's last message denies whose key the ledger holds as claimed (in
   * flight, completed, failed or unknown), each with its `toolCallId`, `key` and ledger `row`
   * (AISDK-12). The AI SDK reports a denied call as `tool-output-denied` and tells the model it
   * was denied, but a client can deny an approval that an earlier request of the turn already
   * carried and ran (a double click, a second tab, a re-send after a cut stream with the
   * answer changed): the effect may have happened. Check before showing a denial as "not done".
   */
  claimedDenials(): Promise<ClaimedDenial[]>;
  /**
   * The effects of this turn that neither this request nor its history answers (AISDK-14): the
   * ledger's rows claimed at this turn index in this conversation (LIST-3) whose key no call this
   * request executed holds (one started at its tool-call part in a step the provider ended at its
   * output limit was not executed, AISDK-8) and no call the history shows with its result holds, each with what its row
   * says of the effect, as a runner's committed-turn record says it (RECORD-8): `happened`,
   * `may_have_happened` or `not_happened`. An earlier request of the turn that was not kept (a cut
   * stream, AISDK-8) may have paid, and a regenerate whose model then asks a question, calls with
   * other arguments, or answers an edited message leaves that payment in nothing the user sees.
   * Call it once the request's stream has finished, before keeping or showing its answer; tell
   * the user of every call it returns. It lists every row of the conversation (one page at a
   * time) and keeps those of this turn. `listed` is false when the ledger does not list rows
   * (`capabilities.supports.listRows`): nothing can be said then. A listing that fails throws the
   * ledger's error (`ledger_unavailable`: ask again).
   * @example const { calls } = await turn.unansweredCalls(); // after the stream finished
   */
  unansweredCalls(): Promise<UnansweredCalls>;
}

/**
 * A call of the turn the request's answer does not answer (AISDK-14), with the arguments its claim
 * stored (`input`, as the tool ran with them), so the app can say which payment it was, not only
 * that one happened.
 */
export type UnansweredCall = UnansweredCallRecord & { input?: JsonValue };

/** What `unansweredCalls()` found (AISDK-14). */
export type UnansweredCalls =
  | { listed: true; calls: UnansweredCall[] }
  | { listed: false; reason: string; calls: [] };

/** A call the request denies whose key the ledger holds as claimed: its effect may have happened (AISDK-12). */
export interface ClaimedDenial {
  toolCallId: string;
  toolName: string;
  key: string;
  /** The ledger's row: `completed` (the effect happened; `result` is what it returned), `in_flight`, `failed`, `unknown`. */
  row: Exclude<LedgerRow, { state: "released" }>;
}

/** The name under which a model call's first repair is recorded (reserved by core: no app tool has it, EFFECT-8). */
const REPAIR_RECORD_NAME = `${RECORD_ROW_PREFIX}repair`;
/**
 * The name under which a turn's user messages are recorded, one row per message in the order they
 * first dispatched a call (AISDK-17): ordinal k holds the id of the turn's k-th message.
 */
const TURN_RECORD_NAME = `${RECORD_ROW_PREFIX}turn`;
/**
 * The name under which a user message's turn is recorded (AISDK-17), one row per message id: the
 * turn index at which it first dispatched a claimed call, where its calls stay keyed when a later
 * history counts it at another index (a store that keeps both tabs' messages one after the other).
 */
const MESSAGE_RECORD_NAME = `${RECORD_ROW_PREFIX}message`;
/**
 * The k-th user message of a turn (AISDK-17) starts its calls' ordinals at k * FORK_ORDINALS; one
 * turn index takes MAX_TURN_MESSAGES messages before a request is refused. Core's: its IDENT-10
 * guard keys a row at those ordinals too (another message's row is not another definition's).
 */
const FORK_ORDINALS = MESSAGE_ORDINAL_STRIDE;

const OPTION_NAMES: OptionNames<OnceToolsOptions<ToolSet>> = { tools: true, effects: true, ledger: true, identity: true, formerNames: true, dispatcher: true };
const TURN_OPTION_NAMES: OptionNames<OnceTurnInput> = { conversationId: true, messages: true, turnIndex: true, turnMessages: true, dispatchAt: true, resumed: true };

interface CallScope {
  /** The OnceTools whose dispatcher runs the call: another's scope (a call made inside its execute) is not this one's. */
  owner: object;
  execute: NonNullable<Tool["execute"]>;
  options: ToolExecutionOptions;
}

/*
 * One pair of storages for every OnceTools, never one per instance: on Node 20 an
 * AsyncLocalStorage that has run once stays in the process's list of storages for good, and every
 * promise created afterwards walks that list, so an app that makes its tools per request or per
 * chat would slow every promise of the process a little more with each (1 000: ~0.1 ms a promise).
 */
const callScope = new AsyncLocalStorage<CallScope>();
const repairScope = new AsyncLocalStorage<{ owner: object; repair: () => Promise<unknown> }>();
const turnRecordScope = new AsyncLocalStorage<{ owner: object; messageId: string; turnIndex: number }>();

/**
 * Routes the `execute` of AI SDK tools through core's dispatcher, keyed by (conversation id,
 * turn index, tool name, ordinal, canonical input), so a regenerate, a resubmit or a re-sent
 * approval of the same turn is answered from the ledger instead of running again (AISDK-2).
 *
 * @example
 * const once = createOnceTools({ tools: { create_invoice }, effects: { create_invoice: "unkeyed_write" }, ledger });
 * const turn = once.forTurn({ conversationId: chatId, messages });
 * const result = streamText({ model, messages: await convertToModelMessages(messages), tools: turn.tools });
 */
export function createOnceTools<TOOLS extends ToolSet>(options: OnceToolsOptions<TOOLS>): OnceTools<TOOLS> {
  return new OnceTools(options);
}

export class OnceTools<TOOLS extends ToolSet> {
  /** The dispatcher behind the tools (for `reconcile(key)` and `keyFor`). */
  readonly dispatcher: Dispatcher;
  private readonly tools: TOOLS;
  private readonly ledger: Ledger;
  private readonly logger: NonNullable<DispatcherOptions["logger"]>;

  constructor(options: OnceToolsOptions<TOOLS>) {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "needs { tools, effects, ledger }");
    // A misspelt option would be ignored: `identities` for `identity` keys calls on every field.
    const unknown = unknownOptionName(options, OPTION_NAMES);
    if (unknown !== undefined) throw new InvalidArgumentError(`options.${unknown}`, unknownOptionMessage("createOnceTools", OPTION_NAMES));
    if (typeof options.tools !== "object" || options.tools === null) throw new InvalidArgumentError("options.tools", "must be the app's tool set");
    // EFFECT-8: the wrapper's own rows (repairs, turn and message records) go under these names and
    // are never listed as effects (AISDK-14): an app's tool there would have its payments hidden.
    for (const name of Object.keys(options.tools)) {
      if (isRecordRowName(name)) throw new InvalidArgumentError(`options.tools.${name}`, `is reserved: tool names beginning with "${RECORD_ROW_PREFIX}" are Dispatch-Once's own bookkeeping rows, which hold no effect (EFFECT-8; this wrapper records repairs, AISDK-11, and a turn's user messages, AISDK-17, under them); rename the tool`);
    }
    this.tools = options.tools;
    this.ledger = options.ledger;
    checkDispatcherOptions(options.dispatcher);
    checkToolNames(options);
    this.logger = loggerOption(options.dispatcher?.logger);
    const definitions: ToolDefinition[] = [];
    for (const [name, tool] of Object.entries(options.tools)) {
      if (typeof tool !== "object" || tool === null) throw new InvalidArgumentError(`options.tools.${name}`, `must be a tool (tool({ inputSchema, execute? })), got ${describeValue(tool)}`);
      // A tool the provider runs inside the response never reaches execute, and would pass through
      // unwrapped like a client-side tool (STREAM-19, AISDK-15). A read the app allows goes beside
      // turn.tools, under providerToolsGuard({ providerTools: "allow-reads" }): one policy, one place.
      if (isProviderDefined(tool)) checkProviderTool(tool, `options.tools.${name}`, "refuse");
      if (typeof tool.execute !== "function") continue; // client-side tools run in the browser; nothing to guard here
      const effect = options.effects?.[name as keyof TOOLS];
      if (effect === undefined) throw new InvalidArgumentError(`options.effects.${name}`, "every tool with execute needs an effect class (EFFECT-1)");
      const identity = options.identity?.[name as keyof TOOLS];
      const formerNames = options.formerNames?.[name as keyof TOOLS];
      definitions.push(
        defineTool({
          name,
          effect,
          ...(formerNames !== undefined ? { formerNames } : {}),
          // The AI SDK has validated the input against the tool's own schema before execute; an
          // identity only needs the schema's fields named (core projects the input onto them,
          // untouched, and refuses an identity field the schema does not have: IDENT-2).
          // (Typed as an object schema so an identity type-checks; the input is passed on as is.)
          input: (identity === undefined || effect === "read" ? z.unknown() : fieldsOf(name, tool.inputSchema, identity)) as z.ZodType<Record<string, unknown>>,
          ...(identity !== undefined ? { identity } : {}),
          run: async (input, context) => {
            const scope = callScope.getStore();
            if (scope?.owner !== this) throw new Error(`tool ${name} ran outside a wrapped execute`);
            // A claimed write gets the claim's signal alone: the request's (streamText's
            // abortSignal, often the HTTP request's) aborts when the client goes away, and a run
            // cut short there leaves an outcome nobody knows, where the retry wants its result.
            const request = effect === "read" ? scope.options.abortSignal : undefined;
            const signal = request === undefined ? context.signal : AbortSignal.any([request, context.signal]);
            const info: DispatchOnceCallInfo = {
              idempotencyKey: context.idempotencyKey,
              conversationId: context.conversationId,
              turnIndex: context.turnIndex,
              ordinal: context.ordinal,
            };
            return lastValue(scope.execute(input, { ...scope.options, abortSignal: signal, dispatchOnce: info } as OnceExecutionOptions));
          },
        }),
      );
    }
    // A model call's first repair, recorded as a keyed write of the repair's own result: a re-run
    // of the claim is answered with the recorded repair, and a repair that failed may run again.
    definitions.push(
      defineTool(markRecordTool({
        name: REPAIR_RECORD_NAME,
        effect: "keyed_write",
        input: z.object({ toolName: z.string(), input: z.unknown() }),
        run: async () => {
          const scope = repairScope.getStore();
          if (scope?.owner !== this) throw new Error("a repair ran outside a wrapped repairToolCall");
          return scope.repair();
        },
      })),
    );
    // A turn's k-th user message (AISDK-17): the first request of a message to dispatch a call
    // claims the next free ordinal and records its id; a re-send finds it there.
    definitions.push(
      defineTool(markRecordTool({
        name: TURN_RECORD_NAME,
        effect: "keyed_write",
        input: z.object({}),
        run: async () => {
          const scope = turnRecordScope.getStore();
          if (scope?.owner !== this) throw new Error("a turn record ran outside forTurn");
          return { messageId: scope.messageId };
        },
      })),
    );
    // A user message's turn (AISDK-17): the turn index of the request that first claimed its record.
    definitions.push(
      defineTool(markRecordTool({
        name: MESSAGE_RECORD_NAME,
        effect: "keyed_write",
        input: z.object({ messageId: z.string() }),
        run: async () => {
          const scope = turnRecordScope.getStore();
          if (scope?.owner !== this) throw new Error("a message record ran outside forTurn");
          return { turnIndex: scope.turnIndex };
        },
      })),
    );
    this.dispatcher = new Dispatcher({ ...options.dispatcher, tools: definitions, ledger: options.ledger });
  }

  /**
   * AISDK-17: the message's place: the turn at which it first dispatched a claimed call (its
   * message record) and the ordinal base of its slot there. `claim`: record both when missing (a
   * request about to dispatch a claimed call); otherwise only read (a listing).
   */
  private async placeOf(context: { conversationId: string; turnIndex: number }, messageId: string, claim: boolean): Promise<{ turnIndex: number; base: number; resumed: boolean; shared: boolean }> {
    let first: unknown;
    let placedBefore: boolean;
    if (claim) {
      let outcome: DispatchOutcome;
      try {
        outcome = await turnRecordScope.run({ owner: this, messageId, turnIndex: context.turnIndex }, () => this.dispatcher.dispatch({ name: MESSAGE_RECORD_NAME, input: { messageId } }, { conversationId: context.conversationId, turnIndex: 0, ordinal: 0 }));
      } catch (cause) {
        throw notPlaced(context, messageId, cause);
      }
      first = (outcome.result as { turnIndex?: unknown } | null)?.turnIndex;
      placedBefore = outcome.replayed;
    } else {
      const row = await this.ledger.lookup(this.messageRecordKey(context.conversationId, messageId));
      if (row?.state === "completed") first = (JSON.parse(row.result) as { turnIndex?: unknown } | null)?.turnIndex;
      placedBefore = row?.state === "completed";
    }
    const turnIndex = typeof first === "number" && Number.isSafeInteger(first) && first >= 0 ? first : context.turnIndex;
    const at = { conversationId: context.conversationId, turnIndex };
    // A message placed by an earlier request has its slot, past any gap the retention left where
    // an earlier message's record was swept: found there, never given the gap as a new place.
    if (placedBefore) {
      let found: number | undefined;
      try {
        found = await this.findSlot(at, messageId);
      } catch (cause) {
        // As for the record's claim: the lookup's error names a record's key, not the call's.
        throw claim ? notPlaced(at, messageId, cause) : cause;
      }
      if (found !== undefined) return { turnIndex, base: found, resumed: claim, shared: claim && !(await this.aloneAt(at, found, messageId)) };
    }
    return { turnIndex, base: await this.forkBaseOf(at, messageId, claim), resumed: false, shared: false };
  }

  /**
   * AISDK-18: whether the message placed at `base` is the turn's only one. The guard matches a row
   * by its stored request, not by the message that made it: with two messages at the index, one's
   * row could answer the other's call (AISDK-17's collision again), so such a turn is guarded as
   * shared (`sharedTurn`: a call a row of an earlier definition matches is refused, never answered
   * from it nor run again). One lookup, on a re-send only.
   */
  private async aloneAt(at: { conversationId: string; turnIndex: number }, base: number, messageId: string): Promise<boolean> {
    if (base !== 0) return false;
    let next: unknown;
    try {
      next = await this.ledger.lookup(this.dispatcher.keyFor({ name: TURN_RECORD_NAME, input: {} }, { ...at, ordinal: 1 }));
    } catch (cause) {
      // The lookup's error names the record's key, not the call's: the call was not claimed (AISDK-17).
      throw notPlaced(at, messageId, cause);
    }
    return next === undefined;
  }

  private messageRecordKey(conversationId: string, messageId: string): string {
    return this.dispatcher.keyFor({ name: MESSAGE_RECORD_NAME, input: { messageId } }, { conversationId, turnIndex: 0, ordinal: 0 });
  }

  /** The turn at which `messageId` first dispatched a claimed call (AISDK-17), read only; the request's own when none. */
  private async messageTurnOf(context: { conversationId: string; turnIndex: number }, messageId: string): Promise<number> {
    const row = await this.ledger.lookup(this.messageRecordKey(context.conversationId, messageId));
    const first = row?.state === "completed" ? (JSON.parse(row.result) as { turnIndex?: unknown } | null)?.turnIndex : undefined;
    return typeof first === "number" && Number.isSafeInteger(first) && first >= 0 ? first : context.turnIndex;
  }

  /** The base of the slot that holds `messageId` at the turn, read through every slot (gaps included); undefined when none does. */
  private async findSlot(context: { conversationId: string; turnIndex: number }, messageId: string): Promise<number | undefined> {
    for (let k = 0; k < MAX_TURN_MESSAGES; k++) {
      const row = await this.ledger.lookup(this.dispatcher.keyFor({ name: TURN_RECORD_NAME, input: {} }, { ...context, ordinal: k }));
      if (row?.state === "completed" && (JSON.parse(row.result) as { messageId?: unknown } | null)?.messageId === messageId) return k * FORK_ORDINALS;
    }
    return undefined;
  }

  /**
   * AISDK-17: where the ordinals of the calls of `messageId`'s request start at this turn: the
   * turn's k-th user message (in the order they first dispatched a call) starts at k * FORK_ORDINALS.
   * `claim`: record the message when it has no place yet (a request about to dispatch a call);
   * otherwise only read (a listing): a message with no place has dispatched nothing, and the next
   * free place is where its calls would go.
   */
  private async forkBaseOf(context: { conversationId: string; turnIndex: number }, messageId: string, claim: boolean): Promise<number> {
    for (let k = 0; k < MAX_TURN_MESSAGES; k++) {
      let bound: unknown;
      if (claim) {
        let outcome: DispatchOutcome;
        try {
          outcome = await turnRecordScope.run({ owner: this, messageId, turnIndex: context.turnIndex }, () => this.dispatcher.dispatch({ name: TURN_RECORD_NAME, input: {} }, { ...context, ordinal: k }));
        } catch (cause) {
          // The record's own error speaks of the record (its key; a completion it could not write
          // is "happened, do not re-send"), not of the call waiting on it, which this request has not
          // claimed: the call's error is the ledger's, without a key (the call's depends on the
          // place not got) and without a known effect (an earlier request of the message may have run it).
          throw notPlaced(context, messageId, cause);
        }
        bound = (outcome.result as { messageId?: unknown } | null)?.messageId;
      } else {
        const row = await this.ledger.lookup(this.dispatcher.keyFor({ name: TURN_RECORD_NAME, input: {} }, { ...context, ordinal: k }));
        if (row === undefined || row.state === "released") return k * FORK_ORDINALS;
        if (row.state !== "completed") continue;
        bound = (JSON.parse(row.result) as { messageId?: unknown } | null)?.messageId;
      }
      if (bound === messageId) return k * FORK_ORDINALS;
    }
    throw new InvalidArgumentError("messages", `turn ${context.turnIndex} of conversation ${context.conversationId} already has ${MAX_TURN_MESSAGES} user messages of other ids (AISDK-17)`);
  }

  /**
   * The tools for one request (one attempt at a turn). The n-th identical call of the request
   * (same tool, same canonical identity arguments) gets ordinal s + n - 1, where s is the number
   * of identical calls the turn's history (`messages` after the last user message, or
   * `turnMessages`) shows as run or approved (AISDK-9): a re-send of the same messages gets the
   * same keys, and a call in a continuation that is identical to one the turn already ran is a
   * new call. An approved call the AI SDK executes from the history keeps the ordinal the
   * history gives it, by its `toolCallId`.
   */
  forTurn(input: OnceTurnInput): OnceTurn<TOOLS> {
    if (typeof input !== "object" || input === null) throw new InvalidArgumentError("input", "needs { conversationId, messages }");
    const unknown = unknownOptionName(input, TURN_OPTION_NAMES);
    if (unknown !== undefined) throw new InvalidArgumentError(`input.${unknown}`, unknownOptionMessage("forTurn", TURN_OPTION_NAMES));
    // One count per conversation (AISDK-1): given both, which one is the turn's would be a guess,
    // and two that agree today may not on the next request. Refused even when they agree.
    if (input.messages !== undefined && input.turnIndex !== undefined) {
      throw new InvalidArgumentError("input", "takes messages or turnIndex, not both (the turn index is turnIndexOf(messages) or the app's own)");
    }
    if (input.messages === undefined && input.turnIndex === undefined) {
      throw new InvalidArgumentError("input", "needs messages or turnIndex (one of them)");
    }
    // One history too: messages carry the turn's own; turnMessages is for an app that numbers turns itself.
    if (input.turnMessages !== undefined && input.turnIndex === undefined) {
      throw new InvalidArgumentError("input.turnMessages", "goes with turnIndex; with messages, the turn's history is read from messages");
    }
    const turnIndex = input.turnIndex ?? turnIndexOf(input.messages!);
    const mode = input.dispatchAt ?? "step";
    if (mode !== "step" && mode !== "tool-call") throw new InvalidArgumentError("input.dispatchAt", 'must be "step" or "tool-call"');
    // Checked here, not at the first call: a bad id would otherwise surface as every tool's error.
    if (typeof input.conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(input.conversationId)) {
      throw new InvalidKeyInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
    }
    if (!Number.isSafeInteger(turnIndex) || turnIndex < 0) throw new InvalidKeyInputError("turnIndex", "must be a non-negative safe integer");
    const context = { conversationId: input.conversationId, turnIndex };
    const deniedNow: TurnHistoryCall[] = [];
    const history =
      input.messages !== undefined ? turnCallsOf(input.messages, "messages", deniedNow) : input.turnMessages !== undefined ? turnCallsOf(input.turnMessages, "turnMessages", deniedNow) : [];
    // What identifies a call within this turn (tool name and canonical identity arguments): its key at ordinal 0.
    const identityOf = (call: { name: string; input: unknown }) => this.dispatcher.keyFor(call, { ...context, ordinal: 0 });
    const { starts, approved } = this.ordinalsOf(history, identityOf);
    // A denied call's key is the one the same message would have given it had it approved the call.
    const denials: { toolCallId: string; toolName: string; input: unknown; ordinal: number }[] = [];
    for (const denied of deniedNow) {
      const held = this.ordinalsOf([...history, denied], identityOf).approved.get(denied.toolCallId);
      if (held === undefined) continue; // not wrapped, or an input the dispatcher refuses: never dispatched
      denials.push({ toolCallId: denied.toolCallId, toolName: denied.toolName, input: denied.input, ordinal: held.ordinal });
    }
    // AISDK-17: a user message of this turn index that is not the turn's first (another tab sent
    // it on the same history) is another ask: its calls' ordinals start past the earlier messages'.
    // Model messages carry no id: their requests all start at 0, as before.
    const messageId = input.messages !== undefined ? turnMessageIdOf(input.messages) : undefined;
    // AISDK-18: the app says a request without a message id re-runs its turn; with one, the record tells.
    if (input.resumed !== undefined && typeof input.resumed !== "boolean") throw new InvalidArgumentError("input.resumed", `must be a boolean when given, got ${describeValue(input.resumed)}`);
    if (input.resumed === true && messageId !== undefined) {
      throw new InvalidArgumentError("input.resumed", "is for a turn whose user message carries no id; a message with an id is told re-sent by its record (AISDK-18)");
    }
    const saidResumed = input.resumed === true;
    // A message keeps the turn index at which it first dispatched a claimed call: a later history
    // that counts it at another index (both tabs' messages one after the other) meets its keys.
    type Place = { turnIndex: number; base: number; resumed: boolean; shared: boolean };
    let place: Promise<Place> | undefined;
    const claimedPlace = (): Promise<Place> => {
      if (place === undefined) {
        const pending = this.placeOf(context, messageId!, true);
        place = pending;
        pending.catch(() => {
          if (place === pending) place = undefined; // a ledger that failed: the next call asks again
        });
      }
      return place;
    };
    const knownPlace = async (): Promise<Place> => (messageId === undefined ? { turnIndex, base: 0, resumed: false, shared: false } : place !== undefined ? place : this.placeOf(context, messageId, false));
    const counts = new Map<string, number>();
    const started = new Map<string, Promise<DispatchOutcome>>();
    // The AI SDK executes a call once per tool-call part, and emits the part again when the
    // provider's stream repeats the call's completing event (a proxy re-sending events,
    // STREAM-10): the same call of the same step (its toolCallId and identity, the step's
    // messages array, which the AI SDK hands every call of a step) is answered by its one
    // dispatch. Not by toolCallId alone: a provider may number its calls per response, so a later
    // step's call can carry an earlier one's id, and answering it from the earlier call would
    // leave it silently not done.
    const executed = new Map<string, { step: unknown; identity: string; outcome: Promise<DispatchOutcome> }>();
    const sameStepIdentity = (name: string, toolInput: unknown, options: ToolExecutionOptions): string | undefined => {
      if (!Array.isArray(options.messages)) return undefined;
      try {
        return identityOf({ name, input: toolInput });
      } catch {
        return undefined; // refused by the dispatcher: its execute reports that, once per part
      }
    };
    const outcomes = new Map<string, DispatchOutcome>();
    // In "tool-call" mode, the argument text each call's tool-input parts streamed, by the part's id.
    const streamed = new Map<string, string>();
    // The calls `repairToolCall` was asked to repair: their arguments are the repair's, not the stream's.
    const repairedCalls = new Set<string>();
    // Every key of a call the AI SDK executed in this request, whatever its outcome: the answer
    // carries its result or error (AISDK-5), so it is not unanswered (AISDK-14). Not every key
    // dispatched: a call started at its tool-call part whose step the provider ended at its output
    // limit is never executed, and the answer has no result for it (AISDK-8).
    const executedKeys = new Set<{ key?: string }>();
    const keyOfDispatch = new WeakMap<Promise<DispatchOutcome>, { key?: string }>();
    const dispatch = (name: string, execute: CallScope["execute"], toolInput: unknown, options: ToolExecutionOptions): Promise<DispatchOutcome> => {
      const keyed: { key?: string } = {};
      // The key is known once the call's ordinal base is (AISDK-17); read it after the call settled.
      const outcome = dispatchKeyed(name, execute, toolInput, options, keyed);
      keyOfDispatch.set(outcome, keyed);
      return outcome;
    };
    const dispatchKeyed = async (name: string, execute: CallScope["execute"], toolInput: unknown, options: ToolExecutionOptions, keyed: { key?: string }) => {
      const call = { name, input: toolInput };
      // Everything up to the ordinal is synchronous, so ordinals follow call order (TURN-4).
      const identity = identityOf(call);
      let ordinal: number;
      const held = approved.get(options.toolCallId);
      if (held !== undefined && held.identity === identity) {
        approved.delete(options.toolCallId);
        ordinal = held.ordinal;
      } else {
        const n = counts.get(identity) ?? 0;
        counts.set(identity, n + 1);
        ordinal = (starts.get(identity) ?? 0) + n;
        if (n > 0) {
          // Usually a model error, but it may be meant: run it and make it visible (DISPATCH-6).
          this.logger.warn("the same call appears more than once in one turn; running it again", { tool: name, ordinal, ...context });
        }
      }
      // Only a message with an id can be a turn's second ask (AISDK-17); the others keep their path.
      // A read claims nothing (EFFECT-2), so it takes no place either: a read-only request writes
      // nothing, and a read runs while the ledger is down; its key is at the turn's first ordinals.
      let at: { conversationId: string; turnIndex: number } = context;
      // AISDK-18: a message that dispatched at its turn before re-runs it (a regenerate, a
      // resubmit, a re-sent approval): resumed, so a deploy since then that changed a write tool's
      // identity finds the row its earlier request made (IDENT-10). A first request is not: no listing.
      let resumed = saidResumed;
      let sharedTurn = false;
      if (messageId !== undefined && this.dispatcher.registry.get(name).effect !== "read") {
        const placed = await claimedPlace();
        ordinal += placed.base;
        resumed = placed.resumed;
        sharedTurn = placed.shared;
        if (placed.turnIndex !== turnIndex) at = { conversationId: context.conversationId, turnIndex: placed.turnIndex };
      }
      keyed.key = ordinal === 0 && at === context ? identity : this.dispatcher.keyFor(call, { ...at, ordinal });
      const outcome = await callScope.run({ owner: this, execute, options }, () =>
        this.dispatcher.dispatch({ ...call, callId: options.toolCallId }, resumed ? { ...at, ordinal, resumed, ...(sharedTurn ? { sharedTurn } : {}) } : { ...at, ordinal }),
      );
      keyed.key = outcome.key; // an earlier definition's row, when the guard dispatched it under that (IDENT-10)
      outcomes.set(options.toolCallId, outcome);
      return outcome;
    };

    const tools = {} as Record<string, Tool>;
    for (const [name, tool] of Object.entries(this.tools) as [string, Tool][]) {
      const execute = tool.execute;
      if (execute === undefined || !this.dispatcher.registry.has(name)) {
        tools[name] = tool;
        continue;
      }
      tools[name] = {
        ...tool,
        execute: async (toolInput: unknown, options: ToolExecutionOptions) => {
          const again = executed.get(options.toolCallId);
          const identity = sameStepIdentity(name, toolInput, options);
          if (again !== undefined && identity !== undefined && again.step === options.messages && again.identity === identity) return (await again.outcome).result;
          const early = started.get(options.toolCallId);
          started.delete(options.toolCallId);
          const outcome = early ?? dispatch(name, execute, toolInput, options);
          const keyed = keyOfDispatch.get(outcome);
          if (keyed !== undefined) executedKeys.add(keyed);
          if (identity !== undefined) executed.set(options.toolCallId, { step: options.messages, identity, outcome });
          return (await outcome).result;
        },
      } as Tool;
    }
    const messages = input.messages as ModelMessage[] | undefined;
    const repairs = new Map<string, number>();
    const repairToolCall = <T extends ToolSet>(repair: ToolCallRepairFunction<T>): ToolCallRepairFunction<T> => {
      if (typeof repair !== "function") throw new InvalidArgumentError("repair", "must be the app's experimental_repairToolCall function");
      return async (options) => {
        repairedCalls.add(options.toolCall.toolCallId);
        // Keyed by the call's canonical arguments when its text is JSON: a re-sent request's model may
        // write the same arguments with other whitespace or key order (KEY-8); as text otherwise.
        const broken = { toolName: options.toolCall.toolName, input: jsonOrText(options.toolCall.input) };
        // The n-th identical broken call of this request: its repair's ordinal (TURN-4's rule for calls).
        const identity = this.dispatcher.keyFor({ name: REPAIR_RECORD_NAME, input: broken }, { ...context, ordinal: 0 });
        const n = repairs.get(identity) ?? 0;
        repairs.set(identity, n + 1);
        // Recorded at the message's own turn (AISDK-17), where its calls are keyed: a later history
        // that counts the message at another index gets the repair its first requests got.
        const at = messageId === undefined ? context : { conversationId: context.conversationId, turnIndex: place !== undefined ? (await place).turnIndex : await this.messageTurnOf(context, messageId) };
        const outcome = await repairScope.run(
          {
            owner: this,
            repair: async () => {
              const repaired = await repair(options);
              // Only what makes the call is kept: the tool it calls and its argument text.
              return repaired === null ? null : { toolName: repaired.toolName, input: repaired.input };
            },
          },
          () => this.dispatcher.dispatch({ name: REPAIR_RECORD_NAME, input: broken, callId: options.toolCall.toolCallId }, { ...at, ordinal: n }),
        );
        const recorded = outcome.result as { toolName: string; input: string } | null;
        // The call keeps its own id: the provider minted it for this response.
        return recorded === null ? null : { ...options.toolCall, toolName: recorded.toolName, input: recorded.input };
      };
    };
    const claimedDenials = async (): Promise<ClaimedDenial[]> => {
      const found: ClaimedDenial[] = [];
      if (denials.length === 0) return found;
      const { turnIndex: at, base } = await knownPlace();
      for (const denial of denials) {
        const key = this.dispatcher.keyFor({ name: denial.toolName, input: denial.input }, { conversationId: context.conversationId, turnIndex: at, ordinal: base + denial.ordinal });
        const row = await this.ledger.lookup(key);
        if (row !== undefined && row.state !== "released") found.push({ toolCallId: denial.toolCallId, toolName: denial.toolName, key, row });
      }
      return found;
    };
    const unansweredCalls = async (): Promise<UnansweredCalls> => {
      const { turnIndex: at, base } = await knownPlace();
      const rows = await turnRowsOf(this.ledger, context.conversationId, at);
      if (rows === undefined) return { listed: false, reason: UNLISTED_REASON, calls: [] };
      const answered = this.answeredByHistory(history, starts, identityOf, { conversationId: context.conversationId, turnIndex: at }, base);
      for (const { key } of executedKeys) if (key !== undefined) answered.add(key);
      return { listed: true, calls: rows.filter((row) => !isRecordRowName(row.toolName) && !answered.has(row.key)).map((row) => ({ ...turnRowEffect(row), ...turnRowInput(row) })) };
    };
    return {
      tools: tools as TOOLS,
      repairToolCall,
      claimedDenials,
      unansweredCalls,
      conversationId: input.conversationId,
      turnIndex,
      outcomeOf: (toolCallId) => outcomes.get(toolCallId),
      onChunk: ({ chunk }) => {
        if (mode !== "tool-call") return;
        // The argument text each call streamed (AISDK-4): a tool-call part is not by itself a sign
        // that the call is whole. The AI SDK's Chat Completions providers make every call's part when
        // the body ends, whether or not finish_reason came, from the text streamed so far, and the AI
        // SDK executes an empty text as {} (a tool whose fields are optional: "every account").
        if (chunk.type === "tool-input-start" || chunk.type === "tool-input-delta") {
          const part = chunk as unknown as { id: string; delta?: string };
          if (chunk.type === "tool-input-start") streamed.set(part.id, "");
          else if (streamed.has(part.id) && typeof part.delta === "string") streamed.set(part.id, streamed.get(part.id)! + part.delta);
          return;
        }
        if (chunk.type !== "tool-call") return;
        const call = chunk as unknown as { toolCallId: string; toolName: string; input: unknown; invalid?: boolean; dynamic?: boolean };
        const text = streamed.get(call.toolCallId);
        streamed.delete(call.toolCallId);
        // Streamed and not a whole JSON object (empty, or cut and then repaired): left to the step,
        // which the AI SDK executes only when the response finished (stop or tool-calls). A call that
        // streamed no pieces but arrived with arguments (a Responses item whose done event carries
        // them) was made from those, not from the pieces; unless a repair gave them.
        const repaired = repairedCalls.delete(call.toolCallId);
        const whole = text === undefined || isWholeJsonObject(text) || (text.trim() === "" && hasMembers(call.input) && !repaired);
        if (!whole) return;
        const tool = this.tools[call.toolName] as Tool | undefined;
        // An invalid call is answered by the AI SDK itself; one that needs approval must wait for it.
        if (call.invalid === true || tool?.execute === undefined || tool.needsApproval !== undefined || !this.dispatcher.registry.has(call.toolName)) return;
        // Started already, or executed already (an AI SDK that executes at the part: a repeated part
        // comes after the execute that took the early dispatch). A later step's call under the same
        // id then waits for its execute, which dispatches it: only the early start is given up.
        if (started.has(call.toolCallId) || executed.has(call.toolCallId)) return;
        const promise = dispatch(call.toolName, tool.execute, call.input, { toolCallId: call.toolCallId, messages: messages ?? [] });
        // The step may never finish (a cut stream): nobody awaits the promise then, and its
        // failure is already in the ledger for the retry, so it must not go unhandled.
        promise.catch(() => {});
        started.set(call.toolCallId, promise);
      },
    };
  }
  /**
   * AISDK-9: from the turn's history, where this request's new calls start (per identity: every
   * call the history shows as run or approved), and the ordinal of each approved call the AI SDK
   * executes in this request. That ordinal is the one the request that carried its (first)
   * approval gave it: after the identity's calls counted then and not waiting for their approval,
   * among those waiting in `toolCallId` order, so a re-send that reorders the parts, or appends
   * the approval again after the call ran, gives it the same key. A history call the dispatcher
   * cannot key (an unwrapped tool, an input it refuses) was never dispatched, and holds no ordinal.
   */
  private ordinalsOf(history: readonly TurnHistoryCall[], identityOf: (call: { name: string; input: unknown }) => string) {
    const keyed: (TurnHistoryCall & { identity: string })[] = [];
    for (const call of history) {
      if (!this.dispatcher.registry.has(call.toolName)) continue;
      try {
        keyed.push({ ...call, identity: identityOf({ name: call.toolName, input: call.input }) });
      } catch {
        continue;
      }
    }
    const byToolCallId = (a: { toolCallId: string }, b: { toolCallId: string }) => (a.toolCallId < b.toolCallId ? -1 : a.toolCallId > b.toolCallId ? 1 : 0);
    /** The ordinals the request that carried the messages up to index p gave: where new calls start, and each waiting approved call's. */
    const as = (p: number) => {
      const starts = new Map<string, number>();
      const waiting = keyed.filter((c) => c.approvedAt <= p && c.resolvedAt > p).sort(byToolCallId);
      for (const c of keyed) if ((c.doneAt <= p || c.approvedAt <= p) && !waiting.includes(c)) starts.set(c.identity, (starts.get(c.identity) ?? 0) + 1);
      const held = new Map<string, { identity: string; ordinal: number }>();
      for (const c of waiting) {
        if (held.has(c.toolCallId)) continue; // the AI SDK executes a call once
        const ordinal = starts.get(c.identity) ?? 0;
        starts.set(c.identity, ordinal + 1);
        held.set(c.toolCallId, { identity: c.identity, ordinal });
      }
      return { starts, held };
    };
    const now = as(Infinity);
    const approved = new Map<string, { identity: string; ordinal: number }>();
    for (const c of keyed) {
      if (!c.executesNow || approved.has(c.toolCallId)) continue;
      const then = c.approvedAt === Infinity ? undefined : as(c.approvedAt).held.get(c.toolCallId);
      if (then !== undefined && then.identity === c.identity) approved.set(c.toolCallId, then);
    }
    return { starts: now.starts, approved };
  }

  /**
   * AISDK-14: the keys whose effect the history tells, per identity: the ordinals the history
   * gives (AISDK-9: 0 up to where this request's calls start) when it shows every one of them
   * answered with a result. Where some of them are shown as an error or a denial, which ordinal
   * each holds is not read, so none of that identity's keys is taken as told: their rows are
   * listed, each with what its row says (a happened effect told twice is still the truth; one
   * hidden is not).
   */
  private answeredByHistory(history: readonly TurnHistoryCall[], starts: ReadonlyMap<string, number>, identityOf: (call: { name: string; input: unknown }) => string, context: { conversationId: string; turnIndex: number }, base: number): Set<string> {
    const told = new Map<string, { call: { name: string; input: unknown }; answered: number }>();
    for (const c of history) {
      if (!this.dispatcher.registry.has(c.toolName)) continue;
      const call = { name: c.toolName, input: c.input };
      let identity: string;
      try {
        identity = identityOf(call);
      } catch {
        continue; // refused by the dispatcher: never dispatched
      }
      const entry = told.get(identity) ?? { call, answered: 0 };
      if (c.answered) entry.answered++;
      told.set(identity, entry);
    }
    const keys = new Set<string>();
    for (const [identity, { call, answered }] of told) {
      const given = starts.get(identity) ?? 0;
      if (answered !== given) continue;
      // (At the message's own turn, AISDK-17, which may not be the one its identity was taken at.)
      for (let ordinal = base; ordinal < base + given; ordinal++) keys.add(this.dispatcher.keyFor(call, { ...context, ordinal }));
    }
    return keys;
  }
}

/**
 * `effects` and `identity` name tools of `tools`, and an identity is an array (ERR-1): an entry
 * under a misspelt or renamed tool's name would otherwise be ignored, and an identity that is
 * ignored makes a re-worded call (a memo) a new call that runs again.
 */
/**
 * The dispatcher options passed on: an object (5 was spread as nothing), without the tools and
 * ledger the wrapper sets itself (given here, they were silently replaced).
 */
function checkDispatcherOptions(dispatcher: unknown): void {
  if (dispatcher === undefined) return;
  if (typeof dispatcher !== "object" || dispatcher === null || Array.isArray(dispatcher)) {
    throw new InvalidArgumentError("options.dispatcher", `must be an object of Dispatcher options (without tools and ledger), got ${describeValue(dispatcher)}`);
  }
  for (const member of ["tools", "ledger"]) {
    if (Object.hasOwn(dispatcher, member)) throw new InvalidArgumentError(`options.dispatcher.${member}`, `is set by createOnceTools itself (from options.${member}); leave it out`);
  }
}

function checkToolNames(options: OnceToolsOptions<ToolSet>): void {
  const names = Object.keys(options.tools);
  if (typeof options.effects === "object" && options.effects !== null) {
    for (const name of Object.keys(options.effects)) {
      if (!Object.hasOwn(options.tools, name)) throw new InvalidArgumentError(`options.effects.${name}`, `names no tool of options.tools (${names.join(", ")})`);
    }
  }
  if (options.formerNames !== undefined) {
    if (typeof options.formerNames !== "object" || options.formerNames === null) {
      throw new InvalidArgumentError("options.formerNames", "must map tool names to the names each had before");
    }
    for (const [name, former] of Object.entries(options.formerNames)) {
      if (former === undefined) continue;
      if (!Object.hasOwn(options.tools, name) || typeof options.tools[name]?.execute !== "function") {
        throw new InvalidArgumentError(`options.formerNames.${name}`, `names no tool with execute in options.tools (${names.join(", ")})`);
      }
      if (!Array.isArray(former)) throw new InvalidArgumentError(`options.formerNames.${name}`, "must be an array of the tool's earlier names");
    }
  }
  if (options.identity === undefined) return;
  if (typeof options.identity !== "object" || options.identity === null) {
    throw new InvalidArgumentError("options.identity", "must map tool names to the input fields that identify their calls");
  }
  for (const [name, fields] of Object.entries(options.identity)) {
    if (fields === undefined) continue;
    if (!Object.hasOwn(options.tools, name) || typeof options.tools[name]?.execute !== "function") {
      throw new InvalidArgumentError(`options.identity.${name}`, `names no tool with execute in options.tools (${names.join(", ")})`);
    }
    if (!Array.isArray(fields)) throw new InvalidArgumentError(`options.identity.${name}`, "must be an array of the input fields that identify the call");
  }
}

/**
 * The top-level fields of a tool's input schema, as the object schema core checks an identity
 * against (IDENT-2): read from the schema's JSON form, which the AI SDK gives for zod, Standard
 * Schema and `jsonSchema()` alike. A JSON form that is only available asynchronously
 * (`jsonSchema(promise)`) cannot be read here: the identity's own fields stand in for it.
 */
function fieldsOf(name: string, schema: FlexibleSchema<unknown>, identity: readonly string[]): z.ZodType {
  const json: unknown = asSchema(schema).jsonSchema;
  // Each field optional (the AI SDK validated the input: a field the schema leaves out may be
  // absent), and a field the schema defaults gets its default: the input the AI SDK hands execute
  // already holds it, so no call's key changes, while a stored request made before the field had
  // it is keyed as the call the schema makes of it now (IDENT-10 on a re-sent message, AISDK-18).
  const fields = (names: readonly string[], defaults: ReadonlyMap<string, unknown> = new Map()) =>
    z.looseObject(Object.fromEntries(names.map((field) => [field, defaults.has(field) ? z.unknown().default(defaults.get(field)) : z.unknown().optional()])));
  if (typeof (json as { then?: unknown } | null)?.then === "function") return fields(identity);
  const properties = (json as { type?: unknown; properties?: unknown } | null)?.properties;
  if ((json as { type?: unknown } | null)?.type !== "object" || typeof properties !== "object" || properties === null) {
    throw new InvalidToolDefinitionError(`tool ${name} declares identity, so its inputSchema must be an object schema`);
  }
  const defaults = new Map<string, unknown>();
  for (const [field, property] of Object.entries(properties as Record<string, unknown>)) {
    if (typeof property === "object" && property !== null && Object.hasOwn(property, "default")) defaults.set(field, (property as { default: unknown }).default);
  }
  return fields(Object.keys(properties), defaults);
}

/** Read the Dispatch-Once part of a wrapped tool's execute options (undefined when the tool is not wrapped). */
export function dispatchOnceOf(options: ToolExecutionOptions): DispatchOnceCallInfo | undefined {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", `must be the options execute was called with, got ${describeValue(options)}`);
  return (options as Partial<OnceExecutionOptions>).dispatchOnce;
}

/** Whether `text` is a whole JSON object: more text would make it not JSON, so the call it carries is final. */
function isWholeJsonObject(text: string): boolean {
  try {
    const value = JSON.parse(text) as unknown;
    return typeof value === "object" && value !== null && !Array.isArray(value);
  } catch {
    return false;
  }
}

/** Whether `value` is an object with at least one member (not what the AI SDK makes of an empty argument text). */
function hasMembers(value: unknown): boolean {
  return typeof value === "object" && value !== null && Object.keys(value).length > 0;
}

/** The value of a JSON text, or the text itself when it is not JSON. */
function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** A streaming tool (an async iterable of preliminary results) is settled by its last value. */
async function lastValue(value: unknown): Promise<unknown> {
  const resolved = await value;
  if (resolved !== null && typeof resolved === "object" && Symbol.asyncIterator in resolved) {
    let last: unknown;
    for await (const item of resolved as AsyncIterable<unknown>) last = item;
    return last;
  }
  return resolved;
}

/** An error's code and message, for the message of the error that wraps it. */
function describeCause(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" ? `${code}: ${error.message}` : error.message;
  }
  return describeValue(error);
}

/** The error of a call whose request could not get its message's place (AISDK-17): the call was not claimed. */
function notPlaced(context: { conversationId: string; turnIndex: number }, messageId: string, cause: unknown): LedgerUnavailableError {
  return new LedgerUnavailableError(
    `the ledger could not give user message ${messageId} its place at turn ${context.turnIndex} of conversation ${context.conversationId} (AISDK-17), so this request claimed and ran none of its calls; re-send the same message (${describeCause(cause)})`,
    { cause },
  );
}

