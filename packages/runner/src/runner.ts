import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import {
  CONVERSATION_ID_PATTERN,
  ConversationBusyError,
  DEFAULT_RETENTION_MS,
  DurabilityMismatchError,
  InvalidArgumentError,
  InvalidKeyInputError,
  canonicalize,
  checkMessageId,
  describeValue,
  isDispatchOnceError,
  newLeaseGrantId,
  LEASE_GRANT_RETENTION_MS,
  StoreUnavailableError,
  type CallDispatcher,
  type ConversationStore,
  type DispatchLogger,
  type DispatchOutcome,
  type JsonValue,
  type Ledger,
  type AppendResult,
  type LeaseResult,
  type LedgerRow,
  type StoredError,
  type StoredMessage,
  type StoredTurn,
  type CommittedCallKey,
  type ToolCall,
  type TurnContext,
  type TurnDispatch,
  type TurnSnapshot,
  type UnstoredEffect,
  type InProgressEffect,
} from "@dispatch-once/core";
import { MAX_CALL_KEY_LABEL_LENGTH, MAX_LEASE_MS, MAX_ORDINAL_TRIED, MAX_TIMER_MS, checkLeaseOwner, loggerOption, sameJsonData, turnRowInput } from "@dispatch-once/core/internal";
import { NOTHING_CARRIED, afterTurn, carryingDispatcher, matchCarried, pausedAfter, pausedSlot, refusedForCarried, withRecord, withoutSlots, type CarriedCall, type Carry, type PausedSlots } from "./carry.js";
import { InvalidArgumentsJsonError } from "./errors/invalid-arguments-json.js";
import { MessageIdReusedError } from "./errors/message-id-reused.js";
import { StreamIncompleteError } from "./errors/stream-incomplete.js";
import { TurnFailedError } from "./errors/turn-failed.js";
import type { CallPhases, CallState, FailurePosition } from "./phases.js";
import type { CallAnswer, StoredTurnView, StreamProvider } from "./provider.js";
import {
  classifyCallError,
  forResumedTurn,
  mergeUnanswered,
  notSettledByResend,
  readFailedTurnRecord,
  summarizeEffects,
  unansweredCall,
  unansweredOwnCall,
  recordableInput,
  turnRowsOf,
  type CallRecord,
  type FailedTurnRecord,
  type ResumedTurnRecord,
  type SupersededAttemptRecord,
} from "./record.js";
import { defaultRetryPolicy, isFinalStop, isPermanentRequestError, type AttemptFailure, type RetryPolicy } from "./retry.js";

export type RunnerEvent = { at: number; conversationId: string; turnIndex: number; attempt: number } & (
  | { type: "attempt_started"; messageId: string }
  /** Text as it streams, for a UI. An attempt that later fails is announced by `attempt_discarded`. */
  | { type: "text_delta"; index: number; text: string }
  | { type: "call_complete"; callId: string; name: string; index: number }
  | { type: "call_resolved"; callId: string; name: string; key?: string; replayed?: boolean; ok: boolean; error?: string }
  | { type: "call_abandoned"; callId: string; name: string; partialArguments: string }
  | { type: "stream_failed"; position: FailurePosition; error: string }
  | { type: "call_unresolved"; error: string }
  /** Everything this attempt streamed is void: a UI drops its text (the retry streams anew). */
  | { type: "attempt_discarded"; reason: "retry" | "failed" | "superseded" }
  | { type: "retry_scheduled"; delayMs: number }
  | { type: "turn_committed"; committed: boolean; stopReason: string | null }
  | { type: "turn_failed"; record: FailedTurnRecord }
  | { type: "attempt_superseded"; record: SupersededAttemptRecord }
  /**
   * A turn committed after more than one attempt, or resumed, without answering calls earlier
   * runs of it dispatched; its record went beside the conversation (RECORD-8).
   */
  | { type: "resumed_turn_recorded"; record: ResumedTurnRecord }
);

/** The runner's options; a stream side adds its own (client, model, tools). */
export interface TurnRunnerOptions {
  /**
   * Core's dispatcher: every tool call of a turn goes through it (its key, its ledger claim), and
   * its ledger's durability is checked against the store's (TURN-14).
   * @example new TurnRunner(provider, { dispatcher: new Dispatcher({ tools, ledger }), store })
   */
  dispatcher: CallDispatcher;
  /**
   * Where conversations live; a durable one beside a durable ledger (TURN-14).
   * @example new TurnRunner(provider, { dispatcher, store: createSqliteConversationStore("conversations.db") })
   */
  store: ConversationStore;
  /**
   * The retry policy of a turn's attempts: the members given replace those of `defaultRetryPolicy`,
   * one by one.
   * @default defaultRetryPolicy (3 attempts, 100 * 2 ** (n - 1) ms before retry n, its shouldRetry)
   * @example new TurnRunner(provider, { dispatcher, store, retry: { attempts: 5, backoffMs: (n) => 250 * 2 ** (n - 1) } })
   */
  retry?: Partial<RetryPolicy>;
  /**
   * Model responses per message before its turn is failed (position "turn_limit").
   * @default 8
   * @example new TurnRunner(provider, { dispatcher, store, maxTurns: 4 })
   */
  maxTurns?: number;
  /**
   * Extra request headers per attempt (tracing, or fault injection against a mock provider).
   * @default none (no extra headers are sent)
   * @example new TurnRunner(provider, { dispatcher, store, requestHeaders: ({ conversationId, turnIndex, attempt }) => ({ "x-request-id": `${conversationId}:${turnIndex}:${attempt}` }) })
   */
  requestHeaders?: (info: { conversationId: string; turnIndex: number; attempt: number }) => Record<string, string>;
  /**
   * Receives every `RunnerEvent` of every conversation this runner drives, each with `at` (ms),
   * as it happens (for a UI, logs, telemetry).
   * @default none (events are not reported)
   * @example new TurnRunner(provider, { dispatcher, store, onEvent: (event) => console.log(event.type, event.conversationId) })
   */
  onEvent?: (event: RunnerEvent) => void;
  /**
   * Receives the runner's warnings: an `onEvent` callback that threw (the error is logged and the
   * turn carries on: an event callback never changes what the runner does, OTEL-3).
   * @default console.warn, each message prefixed with "[dispatch-once]"
   * @example new TurnRunner(provider, { dispatcher, store, logger: { warn: (message, fields) => log.warn(fields, message) } })
   */
  logger?: DispatchLogger;
  /**
   * Names this worker in turn leases; diagnostics only.
   * @default `${hostname}:${pid}:${random}`
   * @example new TurnRunner(provider, { dispatcher, store, owner: `worker-${process.pid}` })
   */
  owner?: string;
  /**
   * The conversation's turn lease (TURN-10), renewed every third of it while this runner drives.
   * @default 30_000
   * @example new TurnRunner(provider, { dispatcher, store, turnLeaseMs: 60_000 })
   */
  turnLeaseMs?: number;
  /**
   * How long send() waits while another worker holds the conversation before `conversation_busy`
   * (the message stays queued; re-send the same id). When the message itself is in progress under
   * that worker, the error lists the calls the ledger holds for it (`effects`, TURN-25), read
   * within BUSY_LISTING_MS more. Behind a job queue keep it above `turnLeaseMs` (the default is):
   * a send that meets a dead holder waits out its lease and takes the message over.
   * @default 30_000, or `turnLeaseMs` and a third of it when that is longer (40_000 at the default lease; `defaultBusyWaitMs`)
   * @example new TurnRunner(provider, { dispatcher, store, busyWaitMs: 5_000 })
   */
  busyWaitMs?: number;
  /**
   * Poll interval while waiting for another worker.
   * @default 25
   * @example new TurnRunner(provider, { dispatcher, store, pollMs: 100 })
   */
  pollMs?: number;
  /**
   * Accept a volatile conversation store beside a durable ledger. Refused by default: after a
   * restart the store reissues turn indexes whose keys the ledger still holds, and new requests
   * are answered with old effects (TURN-14).
   * @default false
   * @example new TurnRunner(provider, { dispatcher, store: new MemoryConversationStore(), allowVolatileConversationStore: true })
   */
  allowVolatileConversationStore?: boolean;
  /**
   * The re-send window (TURN-12, LEDGER-13): a re-send of a failed message's id is retried only
   * while its turn first failed less than this long ago, on the conversation store's clock; later it
   * returns the stored failure without running anything (`TurnFailedError` with `notRetried:
   * "past_resend_window"`, `record.retryable` false). MUST be set BELOW the ledger's retention, by
   * at least the longest a turn runs (first call to failure, and a retry's attempts) plus any skew
   * between the store's clock and the ledger's: a retry after the ledger swept a call's row makes
   * that call again (a payment paid twice). A window above the ledger's retention, when the
   * dispatcher's ledger exposes `retentionMs`, is refused.
   * @default 23 h (DEFAULT_RESEND_WINDOW_MS: the default 24 h retention less one hour); 23/24 of the ledger's `retentionMs` when it exposes one
   * @example new TurnRunner(provider, { dispatcher, store, resendWindowMs: 6 * 24 * 60 * 60 * 1000 }) // beside a 7-day retention
   */
  resendWindowMs?: number;
  /**
   * The longest the runner waits for the stream's next event, from the moment the request is sent
   * (so it bounds the wait for the response's headers and first event too) and again after every
   * event (STREAM-16). A stream silent this long is a failed stream, classified by its position
   * like any cut (STREAM-1, STREAM-2): the request is aborted, calls already dispatched are awaited
   * and recorded (STREAM-6), and the retry policy applies; when it gives up, the turn fails with a
   * `StreamIncompleteError` whose `idleMs` is this bound. Without it a connection that a proxy or
   * NAT dropped without a FIN leaves `send()` pending for ever while the turn lease is renewed.
   * The default is inside the 90-300 s that deployments use: Anthropic sends `ping` events during
   * long generations, but OpenAI reasoning models can be silent for minutes before their first
   * output item, so a tighter bound would cut live responses. `Infinity` turns the bound off.
   * @default 300_000 (5 minutes)
   * @example new TurnRunner(provider, { dispatcher, store, streamIdleTimeoutMs: 120_000 })
   */
  streamIdleTimeoutMs?: number;
}

/** The default bound on the wait for a stream's next event (STREAM-16). */
export const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 300_000;

/**
 * How long a busy sender waits for the ledger's listing of a message in progress (TURN-25) before
 * it raises conversation_busy without it (`effectsUnknown` says so): the sender has waited
 * `busyWaitMs` already, and a slow ledger must not hold it longer than this.
 */
export const BUSY_LISTING_MS = 1_000;

/**
 * The default of `busyWaitMs` for a runner whose turn lease is `turnLeaseMs` (TURN-10): 30 s, or
 * the lease and a third of it when that is longer. A dead holder's lease lapses at most a lease
 * after its last renewal, which came before the send began; a third more covers the poll and some
 * skew between the store's clock and this process's. A wait at or below the lease ends every send
 * that meets a dead holder busy (a queue's every attempt, trials/app-bullmq) instead of taking the
 * message over.
 */
export function defaultBusyWaitMs(turnLeaseMs: number): number {
  return Math.max(30_000, turnLeaseMs + Math.ceil(turnLeaseMs / 3));
}

/** The default re-send window (TURN-12): the ledgers' default retention (24 h) less one hour. */
export const DEFAULT_RESEND_WINDOW_MS = DEFAULT_RETENTION_MS - 60 * 60 * 1000;

export interface CallReport {
  callId: string;
  name: string;
  /**
   * The call's ledger key (KEY-1). Absent when the call failed before a key was derived (an
   * unknown tool, arguments that are not JSON, input the tool's schema refused): nothing was
   * claimed, so nothing ran.
   */
  key?: string;
  ordinal?: number;
  replayed?: boolean;
  result?: JsonValue;
  /**
   * The request `result` belongs to, present only when it is not this call's arguments: the
   * model re-worded the call outside its identity (a memo) on a retry, so the first request
   * is what ran or was replayed (IDENT-3). What the user is shown as done is this. Set on the
   * send that dispatched the call; a report read back from the store (`fromStore`) has only
   * what the conversation holds, the call as the model sent it.
   */
  storedRequest?: JsonValue;
  error?: StoredError;
  /**
   * Set when the call was answered from a call an earlier turn of the same message left
   * unanswered (TURN-23): the turn index whose key it carries. The model had not seen that
   * call's effect (a re-run of that turn answered without it), and made the call again.
   */
  carriedFromTurn?: number;
}

export interface TurnOutcome {
  conversationId: string;
  turnIndex: number;
  /** Attempts this send made for the turn; 0 when the turn was read back from the store. */
  attempts: number;
  /** Always true for a returned turn: only committed turns are reported. */
  committed: boolean;
  stopReason: string | null;
  text: string;
  calls: CallReport[];
  /**
   * Present when earlier runs of the turn's index (this runner's earlier attempts, or, for a
   * resumed turn (TURN-15), an earlier holder's) dispatched calls it does not answer, or a resumed
   * turn's rows could not be listed: the record kept beside the conversation (RECORD-8). A UI
   * shows it: those effects are in no committed turn.
   */
  record?: ResumedTurnRecord;
}

export interface SendResult {
  conversationId: string;
  messageId: string;
  /** False when the message id was already known: a re-send, a redelivery, a double click (TURN-2). */
  appended: boolean;
  /**
   * "answered": the model ended its answer. "turn_limit" cannot be returned any more: a message
   * that reaches maxTurns fails with a record (kept for type compatibility).
   */
  status: "answered" | "turn_limit";
  /** The committed turns that answer the message, in order. */
  turns: TurnOutcome[];
  /** True when the answer was read back from the store (TURN-7): this send ran nothing. */
  fromStore: boolean;
  /**
   * The records of the message's turns that committed after more than one attempt, or resumed
   * (RECORD-8): effects of earlier runs (attempts, holders) that
   * the committed turns do not answer. Present only when there is one; read back from the store
   * when `fromStore`.
   */
  records?: ResumedTurnRecord[];
}

type Resolution = { ok: true; outcome: DispatchOutcome; carriedFromTurn?: number } | { ok: false; error: unknown };

type TurnResult =
  | { kind: "committed"; outcome: TurnOutcome; answers: boolean }
  | { kind: "failed"; record: FailedTurnRecord }
  | { kind: "superseded" };

/** Call errors that are themselves an established answer for the model: sent as is_error results. */
/**
 * Whether a send's content is the stored message's (TURN-20): the same JSON data, member order
 * aside (a store may give members back reordered, as PostgreSQL's jsonb does), and an undefined
 * member counted as absent. Where the quick comparison is in doubt (a container that is not plain),
 * their canonical texts decide; content with no canonical form is not the stored message's.
 */
function sameContent(stored: unknown, sent: unknown): boolean {
  if (sameJsonData(stored, sent)) return true;
  try {
    return canonicalize(stored) === canonicalize(sent);
  } catch {
    return false;
  }
}

function committable(call: CallRecord): boolean {
  return call.status === "failed" || call.status === "rejected";
}

function storedErrorOf(error: unknown): StoredError {
  if (isDispatchOnceError(error, "tool_failed")) return (error as unknown as { error: StoredError }).error;
  const stored: StoredError = {
    name: error instanceof Error ? error.name : "Error",
    message: error instanceof Error ? error.message : describeValue(error),
  };
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === "string") stored.code = code;
  return stored;
}

/**
 * The methods the runner calls on its dispatcher and store. Checked when the runner is built:
 * an object without one was accepted and failed at send() with a bare TypeError, after the
 * message had been bound to a turn and left in progress (ERR-1).
 */
const REQUIRED_METHODS: Readonly<Record<string, { readonly what: string; readonly methods: readonly string[] }>> = {
  dispatcher: { what: "a Dispatcher (new Dispatcher({ tools, ledger }))", methods: ["turn"] },
  store: {
    what: "a ConversationStore",
    methods: ["appendUserMessage", "message", "turnsOf", "log", "acquireLease", "renewLease", "releaseLease", "beginTurn", "commitTurn", "failMessage", "addRecord", "records"],
  },
};

/**
 * Throws unless `options` is an object whose `fields` are objects (the dispatcher and the store
 * with the methods the runner calls); a stream side checks its client with the runner's own
 * fields, in one order, before it builds its provider.
 */
export function checkRunnerOptions(options: unknown, fields: readonly string[] = ["dispatcher", "store"]): void {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "must be an object");
  for (const field of fields) {
    const value = (options as Record<string, unknown>)[field];
    if (typeof value !== "object" || value === null) throw new InvalidArgumentError(`options.${field}`, "is required");
    const required = REQUIRED_METHODS[field];
    const missing = required?.methods.find((method) => typeof (value as Record<string, unknown>)[method] !== "function");
    if (required !== undefined && missing !== undefined) {
      throw new InvalidArgumentError(`options.${field}`, `must be ${required.what}: its ${missing} is not a function`);
    }
  }
}

type OptionRule = "function" | "boolean" | "nonEmptyString" | "string" | "positiveInteger" | "nonNegativeMs" | "positiveMs" | "positiveMsOrInfinity";

/**
 * Throws `InvalidArgumentError` naming `${prefix}.${field}` for the first present option whose
 * value breaks its rule; absent (undefined) options are left to their defaults. A stream side
 * checks its own options with it before it builds its provider.
 */
export function checkOptionValues(options: object, rules: Readonly<Record<string, OptionRule>>, prefix = "options"): void {
  for (const [field, rule] of Object.entries(rules)) {
    const value = (options as Record<string, unknown>)[field];
    if (value === undefined) continue;
    const reason = optionProblem(value, rule);
    if (reason !== undefined) throw new InvalidArgumentError(`${prefix}.${field}`, `${reason}, got ${describeValue(value)}`);
  }
}

function optionProblem(value: unknown, rule: OptionRule): string | undefined {
  switch (rule) {
    case "function":
      return typeof value === "function" ? undefined : "must be a function";
    case "boolean":
      return typeof value === "boolean" ? undefined : "must be a boolean";
    case "string":
      return typeof value === "string" ? undefined : "must be a string";
    case "nonEmptyString":
      return typeof value === "string" && value.length > 0 ? undefined : "must be a non-empty string";
    case "positiveInteger":
      return Number.isSafeInteger(value) && (value as number) >= 1 ? undefined : "must be an integer of at least 1";
    case "nonNegativeMs":
      return typeof value === "number" && Number.isFinite(value) && value >= 0 ? undefined : "must be a finite number of milliseconds, 0 or more";
    case "positiveMs":
      return typeof value === "number" && Number.isFinite(value) && value > 0 ? undefined : "must be a finite number of milliseconds above 0";
    case "positiveMsOrInfinity":
      // Above setTimeout's 2^31-1 ms a timer fires at once: only Infinity (no bound) is taken past it.
      return typeof value === "number" && (value === Infinity || (value > 0 && value <= MAX_TIMER_MS))
        ? undefined
        : `must be a number of milliseconds above 0 and at most ${MAX_TIMER_MS}, or Infinity`;
  }
}

/**
 * Every runner option's type and range, once, when the runner is built: a wrong one would
 * otherwise cost a model request and fail the user's message for good.
 */
function checkTurnRunnerOptionValues(options: TurnRunnerOptions): void {
  checkOptionValues(options, {
    maxTurns: "positiveInteger",
    requestHeaders: "function",
    onEvent: "function",
    owner: "nonEmptyString",
    turnLeaseMs: "positiveMs",
    busyWaitMs: "nonNegativeMs",
    pollMs: "positiveMs",
    allowVolatileConversationStore: "boolean",
    resendWindowMs: "nonNegativeMs",
    streamIdleTimeoutMs: "positiveMsOrInfinity",
  });
  // The stores refuse an owner they cannot keep (too long, not well-formed text), but only at
  // the first send(), after the message was stored: checked as they check it, now.
  if (options.owner !== undefined) {
    try {
      checkLeaseOwner(options.owner);
    } catch (error) {
      throw new InvalidArgumentError("options.owner", `${(error as Error).message.replace(/^owner: /, "")}, got ${describeValue(options.owner)}`);
    }
  }
  // The stores refuse a longer turn lease (checkTurnLeaseMs), but only at the first send().
  if (options.turnLeaseMs !== undefined && options.turnLeaseMs > MAX_LEASE_MS) {
    throw new InvalidArgumentError("options.turnLeaseMs", `must be at most ${MAX_LEASE_MS} ms, got ${options.turnLeaseMs}`);
  }
  const { retry } = options as { retry?: unknown };
  if (retry !== undefined) {
    if (typeof retry !== "object" || retry === null || Array.isArray(retry)) {
      throw new InvalidArgumentError("options.retry", `must be an object ({ attempts, backoffMs, shouldRetry }), got ${describeValue(retry)}`);
    }
    checkKnownOptions(retry, ["attempts", "backoffMs", "shouldRetry"], "options.retry");
    checkOptionValues(retry, { attempts: "positiveInteger", backoffMs: "function", shouldRetry: "function" }, "options.retry");
  }
}

/** Every option `TurnRunner` takes; listed as a record so a new option cannot be left out of it. */
const TURN_RUNNER_OPTION_SET: Record<keyof TurnRunnerOptions, true> = {
  dispatcher: true,
  store: true,
  retry: true,
  maxTurns: true,
  requestHeaders: true,
  onEvent: true,
  logger: true,
  owner: true,
  turnLeaseMs: true,
  busyWaitMs: true,
  pollMs: true,
  allowVolatileConversationStore: true,
  resendWindowMs: true,
  streamIdleTimeoutMs: true,
};
/** The names of `TurnRunnerOptions`: a stream side passes them, with its own, to `checkKnownOptions`. */
export const TURN_RUNNER_OPTIONS: readonly string[] = Object.keys(TURN_RUNNER_OPTION_SET);

/**
 * The re-send window (TURN-12): the option, refused above the ledger's retention when the
 * dispatcher's ledger exposes `retentionMs` (the optional `Ledger.retentionMs`; core's Dispatcher
 * exposes its ledger); by default 23/24 of that retention, else 23 h.
 */
function resendWindowOf(options: TurnRunnerOptions): number {
  const retention = (options.dispatcher as { ledger?: { retentionMs?: unknown } }).ledger?.retentionMs;
  const known = typeof retention === "number" && Number.isFinite(retention) && retention > 0 ? retention : undefined;
  const window = options.resendWindowMs;
  if (window === undefined) return known === undefined ? DEFAULT_RESEND_WINDOW_MS : Math.floor((known * 23) / 24);
  if (known !== undefined && window > known) {
    throw new InvalidArgumentError(
      "options.resendWindowMs",
      `must be below the ledger's retention (${known} ms), got ${window}: a re-send after the ledger swept a call's row makes the call again (LEDGER-13)`,
    );
  }
  return window;
}

/**
 * Throws `InvalidArgumentError` naming `${prefix}.${name}` for an own enumerable option that is not
 * in `known`: a misspelt option (`instruction` for `instructions`) would otherwise be ignored and
 * its default used without a word, e.g. a system prompt never sent.
 */
export function checkKnownOptions(options: object, known: readonly string[], prefix = "options"): void {
  for (const name of Object.keys(options)) {
    if (known.includes(name)) continue;
    const near = known.find((k) => editDistance(k.toLowerCase(), name.toLowerCase()) <= 2);
    throw new InvalidArgumentError(`${prefix}.${name}`, `is not an option here${near !== undefined ? ` (did you mean ${near}?)` : ""}; the options are ${known.join(", ")}`);
  }
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length]!;
}

/**
 * Runs conversations over a provider's stream: one turn in flight per conversation (a turn
 * lease in the store), each message answered in arrival order, each tool call dispatched the
 * moment the provider says its arguments are final, failed streams retried, and a turn
 * committed only when the stream established it (its finish event seen, every call resolved)
 * (RECORD-3). Every stream side uses this class; a provider supplies only a `StreamProvider`.
 */
export class TurnRunner<A extends CallPhases<CallState>, E, U = unknown> {
  private readonly options: TurnRunnerOptions;
  private readonly provider: StreamProvider<A, E, U>;
  private readonly retry: RetryPolicy;
  private readonly owner: string;
  private readonly logger: DispatchLogger;
  private readonly resendWindowMs: number;
  /**
   * Give-backs this runner still owes (TURN-10): grants it gave up on whose `releaseLeaseGrant`
   * failed too (the store still unreachable), per conversation, grant id → when it gave up
   * (process clock). Sent again by its next acquisition of that conversation, before it looks at
   * the lease. Sound because nobody ever learnt such a grant's fence (this runner minted the grant
   * id for one acquisition and never got its reply), so nobody works under it; and the store gives
   * back only the grant that carries the id, never a later holder's.
   */
  private readonly owedGiveBacks = new Map<string, Map<string, number>>();

  constructor(provider: StreamProvider<A, E, U>, options: TurnRunnerOptions) {
    checkRunnerOptions(options);
    checkTurnRunnerOptionValues(options);
    this.logger = loggerOption(options.logger);
    this.provider = provider;
    this.options = options;
    this.retry = { ...defaultRetryPolicy, ...options.retry };
    this.owner = options.owner ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.resendWindowMs = resendWindowOf(options);
    const ledgerDurability = (options.dispatcher as { ledger?: { capabilities?: { durability?: string } } }).ledger?.capabilities
      ?.durability;
    if (
      options.store.capabilities?.durability !== "durable" &&
      ledgerDurability === "durable" &&
      options.allowVolatileConversationStore !== true
    ) {
      throw new DurabilityMismatchError(
        ["conversation store"],
        "a volatile conversation store beside a durable ledger: after a restart the store reissues turn indexes " +
          "whose keys the ledger still holds, so new requests are answered with old effects (TURN-14). Use a durable " +
          "store (SqliteConversationStore, PostgresConversationStore) or pass allowVolatileConversationStore: true",
      );
    }
  }

  /**
   * Queue a user message (idempotent on its id, TURN-2) and return its answer: the committed
   * turns that answer it, produced now or read back (TURN-7). Throws `TurnFailedError` when
   * its turn failed (re-send the same id to retry while nothing moved past it, TURN-12) and
   * `ConversationBusyError` when another worker kept the conversation past `busyWaitMs`.
   */
  async send(conversationId: string, message: { id: string; content: U }): Promise<SendResult> {
    // Refused before any model request, and not retryable (KEY-2).
    if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
      throw new InvalidKeyInputError(
        "conversationId",
        `must match ${CONVERSATION_ID_PATTERN.source}, got ${describeValue(conversationId)}`,
      );
    }
    if (typeof message !== "object" || message === null || Array.isArray(message)) throw new InvalidArgumentError("message", "must be { id, content }");
    // A member it does not have (an idempotencyKey, a turnIndex) would be ignored: the message's
    // id alone makes a re-send idempotent (TURN-2), and a caller that believes otherwise pays twice.
    for (const name of Object.keys(message)) {
      if (name !== "id" && name !== "content") throw new InvalidArgumentError(`message.${name}`, "is not a member of a message (its members: id, content); a re-send is recognised by its id alone (TURN-2)");
    }
    checkMessageId(message.id);
    this.provider.checkContent?.(message.content);
    const { store } = this.options;
    const content = this.provider.userMessage(message.content);
    // TURN-12's re-send window, on the store's clock. A store that declares it decides it in the
    // same atomic step as the reopen; for one that does not, the runner checks first (below).
    const windowed = store.capabilities?.supports?.reopenWindow === true;
    // A message id names one message (TURN-8, TURN-20): other content under a known id is refused
    // before the append, which would reopen a failed message for a retry nobody asked for this time.
    const known = await store.message(conversationId, message.id);
    if (known !== undefined && !sameContent(known.content, content)) throw new MessageIdReusedError(conversationId, message.id);
    let append: AppendResult;
    if (!windowed && known !== undefined && (await this.pastResendWindow(conversationId, message.id, known))) {
      append = known.state === "failed" ? { appended: false, message: known, reopened: false, pastReopenWindow: true } : await store.appendUserMessage(conversationId, { id: message.id, content });
    } else {
      append = windowed
        ? await store.appendUserMessage(conversationId, { id: message.id, content }, { reopenWithinMs: this.resendWindowMs })
        : await store.appendUserMessage(conversationId, { id: message.id, content });
    }
    // Another send of this id with other content appended first, between the read above and this
    // append: the store kept that one's content, and this send is not that message.
    if (!append.appended && !sameContent(append.message.content, content)) throw new MessageIdReusedError(conversationId, message.id);
    const started = Date.now();
    let produced: TurnOutcome[] = [];
    // Whether this call failed the message (drove its failed turn), rather than only reading a
    // failure stored earlier (TurnFailedError.replayed).
    let failedHere = false;
    // Whether this call produced the turn that answered the message (the last of its turns).
    let answeredHere = false;
    let current = append.message;
    for (;;) {
      if (current.state === "answered") {
        const fromStore = produced.length === 0;
        // Every committed turn of the message, in order: this send may have finished a message
        // whose first turns an earlier holder committed, or begun one that another holder finished
        // (either died, or lost the lease, between two turns). Those turns are read back; the
        // turns produced here are reported as produced.
        const readBack = fromStore || !answeredHere || !producedEvery(produced, current.turnIndex);
        const mine = new Map(produced.map((t) => [t.turnIndex, t]));
        const records = readBack
          ? (await store.records(conversationId)).filter((r): r is ResumedTurnRecord & JsonValue => isResumedTurnRecordOf(r, message.id))
          : produced.flatMap((t) => (t.record !== undefined ? [t.record] : []));
        const turns = readBack ? await this.readBackTurns(conversationId, await store.turnsOf(conversationId, message.id), records, mine) : produced;
        return {
          conversationId,
          messageId: message.id,
          appended: append.appended,
          status: "answered",
          turns,
          fromStore,
          ...(records.length > 0 ? { records } : {}),
        };
      }
      if (current.state === "failed") {
        // As stored, perhaps by an older version: a call it lists as happened and unsettled is never offered a re-send (RECORD-5).
        let record = readFailedTurnRecord(current.failure as JsonValue);
        // The store kept the message failed on this re-send: another message was bound since, so
        // no re-send can reopen it (TURN-12) and re-sending cannot help (RECORD-5).
        // Or its turn failed longer ago than the re-send window: the ledger may have swept its
        // calls' rows, so a retry would run them again (TURN-12, LEDGER-13). Or a holder found its
        // reopened retry past the window when it took it up, and stored why in the record.
        const notRetried = !failedHere && current === append.message && append.reopened !== true
          ? append.pastReopenWindow === true ? "past_resend_window" as const : "another_message_bound" as const
          : record.notRetried;
        if (notRetried !== undefined && record.retryable) record = { ...record, retryable: false };
        throw new TurnFailedError(record, { replayed: !failedHere, ...(notRetried !== undefined ? { notRetried } : {}) });
      }
      const lease = await this.acquire(conversationId);
      if (lease.acquired) {
        const driven = await this.drive(conversationId, lease.fence, message.id);
        produced = produced.concat(driven.turns);
        if (driven.failed) failedHere = true;
        if (driven.answered) answeredHere = true;
      } else {
        const waited = Date.now() - started;
        if (waited >= (this.options.busyWaitMs ?? defaultBusyWaitMs(this.leaseMs))) throw await this.busyError(conversationId, message.id, waited, current);
        await sleep(this.options.pollMs ?? 25);
      }
      const latest = await store.message(conversationId, message.id);
      if (latest === undefined) throw new InvalidArgumentError("message.id", `message ${message.id} vanished from the store`);
      current = latest;
    }
  }

  /**
   * For a store without `supports.reopenWindow`: whether `messageId` is failed and its failure is
   * at least the re-send window old, on the store's clock when it lists failed turns
   * (`listFailedTurns({ olderThanMs })`, TURN-17), else by its record's time on this process's
   * clock (the only time such a store keeps). A step apart from the append that reopens: a
   * failure can cross the window's edge between the two, by the time one store call takes. That
   * is inside the margin the window keeps below the ledger's retention (a turn's run, clock skew),
   * so it does not reach a swept row. Such a store lists and dates only the LAST failure, which a
   * retry that failed again moves forward, so the FIRST is read from the failed-turn records kept
   * beside the conversation (`firstFailureFromRecords`, on the process clock of the runner that
   * failed it), or from the binding when the store dates it (`boundAt`): past when any says so.
   */
  private async pastResendWindow(conversationId: string, messageId: string, known: StoredMessage): Promise<boolean> {
    const { store } = this.options;
    if (known.state !== "failed") return false;
    // It failed, so it ran: its calls met the rows of any message that failed at its index before
    // it was bound (keys come from the index), and its window counts from theirs too (TURN-12).
    const records = await this.firstFailureFromRecords(conversationId, messageId, known.turnIndex);
    const first = earliest(records.own, records.atIndex);
    // A store that dates the binding (`supports.boundAt`) dates the rows of the message's first
    // calls: its window counts from there, the earlier time. Store clock against this process's
    // clock: that skew is in the margin the window keeps (as the records' times are).
    const boundAt = store.capabilities?.supports?.boundAt === true ? known.boundAt : undefined;
    const pastByRecords = [first, boundAt].some((at) => at !== undefined && Date.now() - at >= this.resendWindowMs);
    if (store.listFailedTurns !== undefined) {
      // Past by the records: listed at all is past (the store dates only the last failure).
      const olderThanMs = pastByRecords ? {} : { olderThanMs: this.resendWindowMs };
      let cursor: string | undefined;
      do {
        const page = await store.listFailedTurns({ conversationId, ...olderThanMs, limit: 1000, ...(cursor !== undefined ? { cursor } : {}) });
        // One no re-send can reopen (another message bound since) is left to the store to answer.
        if (page.turns.some((t) => t.messageId === messageId && t.reopenable !== false)) return true;
        cursor = page.cursor;
      } while (cursor !== undefined);
      return false;
    }
    if (pastByRecords) return true;
    const at = Date.parse(String((known.failure as { at?: unknown } | undefined)?.at));
    // No time to measure by: the age is unknown, so it may be past the ledger's retention.
    return !Number.isFinite(at) || Date.now() - at >= this.resendWindowMs;
  }

  private get leaseMs(): number {
    return this.options.turnLeaseMs ?? 30_000;
  }

  /**
   * Hold the turn lease and answer queued messages in arrival order until `messageId` is
   * answered or failed, or the lease is lost. Returns the turns it committed for `messageId`,
   * and whether the last of them answered it.
   */
  private async drive(conversationId: string, fence: number, messageId: string): Promise<{ turns: TurnOutcome[]; failed: boolean; answered: boolean }> {
    const { store } = this.options;
    let lost = false;
    const renewal = setInterval(() => {
      store.renewLease(conversationId, fence, this.leaseMs).catch((error: unknown) => {
        if (isDispatchOnceError(error, "conversation_lease_lost")) lost = true;
      });
    }, Math.max(1, Math.floor(this.leaseMs / 3)));
    renewal.unref?.();
    const turns: TurnOutcome[] = [];
    let failed = false;
    let answered = false;
    const ours = () => ({ turns, failed, answered });
    // Per message: the calls its committed turns left unanswered (TURN-23).
    const carried = new Map<string, Carry>();
    try {
      while (!lost) {
        let snapshot: TurnSnapshot | undefined;
        try {
          snapshot = await store.beginTurn(conversationId, fence);
        } catch (error) {
          if (isDispatchOnceError(error, "conversation_lease_lost")) return ours();
          throw error;
        }
        if (snapshot === undefined) return ours();
        const isOurs = snapshot.message.id === messageId;
        const window = await this.resumedPastWindow(snapshot, fence);
        if (window === "lost") return ours();
        if (window !== undefined) {
          await store.failMessage(conversationId, fence, snapshot.message.id, window as unknown as JsonValue);
          this.emit({ type: "turn_failed", conversationId, turnIndex: snapshot.turnIndex, attempt: 0, record: window });
          if (isOurs) {
            failed = true;
            return ours();
          }
          // The next queued message (the one whose send drove the conversation) is still answered.
          continue;
        }
        const turnsSoFar = snapshot.turnIndex - (snapshot.message.turnIndex ?? snapshot.turnIndex);
        if (turnsSoFar >= (this.options.maxTurns ?? 8)) {
          const record = this.turnLimitRecord(snapshot, turnsSoFar);
          await store.failMessage(conversationId, fence, snapshot.message.id, record as unknown as JsonValue);
          this.emit({ type: "turn_failed", conversationId, turnIndex: snapshot.turnIndex, attempt: 0, record });
          if (isOurs) {
            failed = true;
            return ours();
          }
          continue;
        }
        const carry = carried.get(snapshot.message.id) ?? (await this.carriedBefore(snapshot));
        const result = await this.runTurn(snapshot, fence, carry);
        if (result.kind === "committed") carried.set(snapshot.message.id, carriedAfter(carryingDispatcher(this.options.dispatcher), carry, result.outcome));
        if (result.kind === "superseded") return ours();
        if (result.kind === "failed") {
          if (isOurs) {
            failed = true;
            return ours();
          }
          continue;
        }
        if (isOurs) turns.push(result.outcome);
        if (isOurs && result.answers) {
          answered = true;
          return ours();
        }
      }
      return ours();
    } finally {
      clearInterval(renewal);
      await this.release(conversationId, fence);
    }
  }

  /**
   * TURN-12 for a reopened message's retry taken up again after its holder died (TURN-15): the
   * window was checked at the reopen, but this holder may come hours later (the next send to the
   * conversation), when the ledger may have swept the rows of the first attempts. Before running
   * any attempt of a message that shows `firstFailedAt` (a store with `supports.reopenWindow`),
   * the age is read on the store's clock (a lease renewal answers the store's now plus the
   * lease). A store without the capability shows no `firstFailedAt` (nor does a row an older
   * version reopened before it kept the first failure): for a resumed turn (a reopened message's
   * always is, TURN-15) the first failure is then the earliest failed-turn record of the message
   * kept beside the conversation (`firstFailureFromRecords`), on the process clock. A resumed
   * turn of a message with no failed-turn record never failed: its holder died before the commit,
   * perhaps after a payment, and only the binding's time (`boundAt`, a store with
   * `supports.boundAt`) dates the rows of its calls; the window is read from it on the store's
   * clock. A message the store dates counts from `boundAt` whenever that is earlier than its
   * first failure, as it always is: the rows of a failed message's calls may be as old as its
   * binding (a holder that paid and died, then a take-over that failed hours later). A message
   * the store cannot date (no `boundAt`: a row bound before the store kept it) counts from its
   * first failure, or runs when it never failed, as before. At or past `resendWindowMs`: the failed-turn record to store instead of
   * running it; "lost" when the lease is gone; undefined to run it.
   */
  private async resumedPastWindow(snapshot: TurnSnapshot, fence: number): Promise<FailedTurnRecord | "lost" | undefined> {
    const supports = this.options.store.capabilities?.supports;
    const boundAt = supports?.boundAt === true ? snapshot.message.boundAt : undefined;
    const shown = supports?.reopenWindow === true ? snapshot.message.firstFailedAt : undefined;
    if (shown !== undefined) {
      // The binding is never later than the first failure; the rows of the calls age from it.
      const fromBinding = boundAt !== undefined && boundAt < shown;
      return this.pastWindowOnStoreClock(snapshot, fence, fromBinding ? boundAt : shown, fromBinding ? "binding" : "first_failure");
    }
    if (!resumedTurn(snapshot)) return undefined;
    const records = await this.firstFailureFromRecords(snapshot.conversationId, snapshot.message.id, snapshot.message.turnIndex);
    // The call that bound a message that never failed is its first run: nothing of it ran before,
    // and a date it inherited from a failed message at its index (TURN-11) must not refuse a new
    // message, or no message could ever be answered at that index again.
    if (records.own === undefined && snapshot.bound === true) return undefined;
    // A message that ran before meets the rows of the messages that failed at its index before it
    // (keys come from the index): its window counts from their failures too. Only where the store
    // says which call bound it (`bound`): else a first run cannot be told from a take-over.
    const first = records.own !== undefined || snapshot.bound === false ? earliest(records.own, records.atIndex) : records.own;
    if (first !== undefined && Date.now() - first >= this.resendWindowMs) return this.pastWindowRecord(snapshot, first === records.own ? "first_failure" : "failed_index");
    if (boundAt === undefined) return undefined;
    return this.pastWindowOnStoreClock(snapshot, fence, boundAt, "binding");
  }

  /** Whether `since` (store clock) is at least the re-send window ago, read on the store's clock under the fence. */
  private async pastWindowOnStoreClock(
    snapshot: TurnSnapshot,
    fence: number,
    since: number,
    from: "first_failure" | "binding",
  ): Promise<FailedTurnRecord | "lost" | undefined> {
    let storeNow: number;
    try {
      const leaseMs = Math.ceil(this.leaseMs);
      storeNow = (await this.options.store.renewLease(snapshot.conversationId, fence, leaseMs)).leaseExpiresAt - leaseMs;
    } catch (error) {
      if (isDispatchOnceError(error, "conversation_lease_lost")) return "lost";
      throw error;
    }
    if (storeNow - since < this.resendWindowMs) return undefined;
    return this.pastWindowRecord(snapshot, from);
  }

  /**
   * When TURN-12's window counts from, for a store that does not keep it (no
   * `supports.reopenWindow`): the time of the earliest failed-turn record of `messageId` kept
   * beside the conversation (RECORD-4), on the clock of the runner that wrote it. `failMessage`
   * keeps the record in the same step as the failure and a reopen leaves it, so the earliest is
   * the first failure, whatever reopens and failures came after (a failure refused for a lost
   * lease adds one too: its attempts' rows age from then as well, so counting from it is only
   * earlier). 0 (past every window) when a record's time cannot be read; `own` undefined when the
   * message has no failed-turn record (it never failed). `atIndex`: the earliest failed-turn
   * record of another message whose turn failed at `boundIndex`, the message's own first index
   * (TURN-12: a message bound where a failed one stopped runs that message's keys and meets its
   * rows, so its window counts from that failure too once it has run).
   */
  private async firstFailureFromRecords(conversationId: string, messageId: string, boundIndex: number | undefined): Promise<{ own?: number; atIndex?: number }> {
    let own: number | undefined;
    let atIndex: number | undefined;
    for (const r of await this.options.store.records(conversationId)) {
      const mine = isFailedTurnRecordOf(r, messageId);
      const there = !mine && boundIndex !== undefined && isFailedTurnRecordAt(r, boundIndex);
      if (!mine && !there) continue;
      const at = Date.parse(String((r as { at?: unknown }).at));
      const time = Number.isFinite(at) ? at : 0;
      if (mine) own = earliest(own, time);
      else atIndex = earliest(atIndex, time);
    }
    return { ...(own !== undefined ? { own } : {}), ...(atIndex !== undefined ? { atIndex } : {}) };
  }

  /**
   * The failed-turn record of a turn taken up past its re-send window (TURN-12): it runs nothing.
   * A message that failed before: the effects of its earlier failed-turn record, whether the
   * window counted from its first failure or from its binding. One that never failed (from the
   * binding, its holder dead): the calls the ledger still lists at the turn index, as a resumed
   * turn's record lists them (RECORD-8); the dead holder wrote no record.
   */
  private async pastWindowRecord(snapshot: TurnSnapshot, from: "first_failure" | "binding" | "failed_index"): Promise<FailedTurnRecord> {
    const { store } = this.options;
    // The truth about effects: the previous failure's record, kept beside the conversation
    // (RECORD-4) when the reopen cleared it from the message. Never "not_happened" for a call.
    const previous = (await store.records(snapshot.conversationId))
      .filter((r): r is FailedTurnRecord & JsonValue => isFailedTurnRecordOf(r, snapshot.message.id))
      .at(-1);
    // A message that never failed left no record of its own: the ledger's rows at the index are all that tell.
    const listing = previous === undefined ? await this.turnRows(snapshot.conversationId, snapshot.turnIndex) : undefined;
    const listed = listing?.ok === true ? listing.rows.map(unansweredCall).map(({ key, name, effect }) => ({ key, name, effect })) : [];
    const measured =
      from === "binding" ? "its binding" : from === "failed_index" ? "the first failure at its turn index (a failed message's, whose rows its calls meet)" : "its first failure";
    const message =
      previous === undefined
        ? `not run: the message's turn was taken up after its re-send window, measured from ${measured} (it never failed: an earlier holder bound it and did not finish it; it died or lost the lease before the commit, or the store's reply to the binding was lost) (TURN-12); ` +
          "the ledger may have swept its calls' rows, so running it could make them again. " +
          (listing?.ok === true
            ? "Its effects are the calls the ledger still lists for the turn index; what the earlier holder did is unknown where nothing is listed"
            : `What the earlier holder did is unknown (${listing?.reason ?? "not listed"})`)
        : `not retried: the message's retry was taken up after its re-send window, measured from ${measured} (TURN-12); ` +
          "the ledger may have swept its calls' rows, so a retry could run them again. Its effects are those of the earlier failed-turn record";
    return {
      kind: "failed_turn",
      conversationId: snapshot.conversationId,
      messageId: snapshot.message.id,
      turnIndex: snapshot.turnIndex,
      attempts: 0,
      position: "past_resend_window",
      error: { name: "PastResendWindow", message },
      calls: [],
      effects: previous?.effects ?? listed,
      retryable: false,
      resumed: resumedTurn(snapshot),
      notRetried: "past_resend_window",
      at: new Date().toISOString(),
    };
  }

  /**
   * Take the turn lease (TURN-10). On a store that declares `supports.leaseGrants`, the acquire
   * carries a grant id minted for this acquisition, and an acquire that fails with
   * `store_unavailable` (its reply lost: it may have applied) is sent again with the same grant id,
   * backing off, for at most ACQUIRE_RETRY_LIMIT_MS and never longer than the lease: the store
   * answers a copy that meets its own live grant with that grant, so a grant whose reply was lost
   * does not keep this send waiting for its lease to expire. `conversation_lease_lost` on a copy
   * says that grant applied and is over (expired, or given back) before its reply came: nobody
   * holds the lease under it, so a fresh grant id is tried at once. When the time is up, the grant
   * is given back by its grant id (a landed grant would otherwise hold the conversation for its
   * whole lease) and the last error is thrown. When the give-back fails too (the store still
   * unreachable) it is owed, and this runner's next acquisition of the conversation sends it
   * again first; a landed grant otherwise holds the conversation until its lease expires, as a
   * holder that died leaves it. An acquisition whose re-send finds the lease held is given back
   * too: its earlier send may still land, and the store refuses a copy of a grant id given back.
   * A store without the flag is acquired once, as before.
   */
  private async acquire(conversationId: string): Promise<LeaseResult> {
    const { store } = this.options;
    if (store.capabilities.supports?.leaseGrants !== true || typeof store.releaseLeaseGrant !== "function") {
      return store.acquireLease(conversationId, this.owner, this.leaseMs);
    }
    await this.payOwedGiveBacks(conversationId);
    const started = Date.now();
    const limit = Math.min(this.leaseMs, ACQUIRE_RETRY_LIMIT_MS);
    let grantId = newLeaseGrantId();
    let sent = false;
    let backoff = ACQUIRE_BACKOFF_MS;
    for (;;) {
      try {
        const result = await store.acquireLease(conversationId, this.owner, this.leaseMs, grantId);
        // Not acquired after a send whose reply was lost: that send had not applied (it would be the
        // live grant), and a copy of it may still land. Given back by its grant id, which the store
        // then keeps as given back, the copy is refused instead of taking a free lease for nobody.
        if (sent && !result.acquired) await this.giveBack(conversationId, grantId);
        return result;
      } catch (error) {
        if (sent && isDispatchOnceError(error, "conversation_lease_lost")) {
          // This grant landed and is over; nothing holds the lease under it. A new acquisition.
          grantId = newLeaseGrantId();
          sent = false;
          backoff = ACQUIRE_BACKOFF_MS;
          if (Date.now() - started < limit) continue;
          // Out of time: not acquired now; the send's loop waits and tries again, up to busyWaitMs.
          return { acquired: false, owner: "", leaseExpiresAt: 0 };
        }
        if (!isDispatchOnceError(error, "store_unavailable")) throw error;
        sent = true;
        if (Date.now() - started + backoff > limit) {
          await this.giveBack(conversationId, grantId);
          throw error;
        }
        await sleep(backoff);
        backoff = Math.min(backoff * 2, ACQUIRE_BACKOFF_MAX_MS);
      }
    }
  }

  /**
   * Give back a grant whose reply never came, by its grant id (TURN-10): sent again when it fails,
   * as a release is. When every try fails the give-back is owed: the next acquisition of the
   * conversation by this runner sends it again (payOwedGiveBacks), so a user's re-send reaching
   * this runner does not wait out a lease nobody works under.
   */
  private async giveBack(conversationId: string, grantId: string): Promise<void> {
    for (let tries = 0; tries < RELEASE_TRIES; tries++) {
      try {
        await this.options.store.releaseLeaseGrant!(conversationId, grantId);
        return;
      } catch {
        // Unknown whether it applied: sending it again is safe (it gives back only that grant).
      }
    }
    this.oweGiveBack(conversationId, grantId);
  }

  private oweGiveBack(conversationId: string, grantId: string): void {
    let total = 0;
    for (const owed of this.owedGiveBacks.values()) total += owed.size;
    // Bounded: past MAX_OWED_GIVE_BACKS the oldest conversation's are dropped (their grants expire with their leases).
    if (total >= MAX_OWED_GIVE_BACKS) {
      const oldest = this.owedGiveBacks.keys().next().value;
      if (oldest !== undefined) this.owedGiveBacks.delete(oldest);
    }
    const owed = this.owedGiveBacks.get(conversationId) ?? new Map<string, number>();
    owed.set(grantId, Date.now());
    this.owedGiveBacks.set(conversationId, owed);
  }

  /**
   * Send the give-backs still owed for this conversation, once each, before acquiring. One that
   * fails with `store_unavailable` stays owed; any other outcome settles it. Kept no longer than
   * the lease or LEASE_GRANT_RETENTION_MS, whichever is longer: past both, the grant's lease has
   * expired and a late copy of its acquire is refused or long gone.
   */
  private async payOwedGiveBacks(conversationId: string): Promise<void> {
    const owed = this.owedGiveBacks.get(conversationId);
    if (owed === undefined) return;
    const keepMs = Math.max(this.leaseMs, LEASE_GRANT_RETENTION_MS);
    for (const [grantId, since] of [...owed]) {
      if (Date.now() - since >= keepMs) {
        owed.delete(grantId);
        continue;
      }
      try {
        await this.options.store.releaseLeaseGrant!(conversationId, grantId);
        owed.delete(grantId);
      } catch (error) {
        if (!isDispatchOnceError(error, "store_unavailable")) owed.delete(grantId);
      }
    }
    if (owed.size === 0) this.owedGiveBacks.delete(conversationId);
  }

  /**
   * Give the turn lease back. A release whose reply was lost may not have applied: the lease would
   * then keep every later send of the conversation waiting until it expires (turnLeaseMs). A
   * release is idempotent under its fence (a stale fence is ignored), so it is sent again; after
   * the last try the lease is left to expire, as a holder that died leaves it (TURN-10).
   */
  private async release(conversationId: string, fence: number): Promise<void> {
    for (let tries = 0; tries < RELEASE_TRIES; tries++) {
      try {
        await this.options.store.releaseLease(conversationId, fence);
        return;
      } catch {
        // Unknown whether it applied: sending it again is safe.
      }
    }
  }

  /** One model response at the snapshot's turn index, retried per the policy. */
  private async runTurn(snapshot: TurnSnapshot, fence: number, carry: Carry = NOTHING_CARRIED): Promise<TurnResult> {
    const { store } = this.options;
    const { conversationId, turnIndex } = snapshot;
    const messageId = snapshot.message.id;
    const calls: CallRecord[] = [];
    let lastFailure: AttemptFailure | undefined;
    let attempt = 0;
    for (;;) {
      attempt++;
      const run = await this.attempt(snapshot, attempt, carry);
      const records = this.callRecords(run.accumulator, run.resolutions, attempt, resumedTurn(snapshot));
      calls.push(...records);
      if (run.failure === undefined) {
        let outcome: TurnOutcome & { answers: boolean };
        try {
          outcome = await this.commit(snapshot, fence, attempt, run.accumulator, run.resolutions, calls);
        } catch (error) {
          // Unreachable at the commit: the turn may or may not be appended (TURN-7), but what
          // its calls did is known and is told (RECORD-9).
          if (isDispatchOnceError(error, "store_unavailable")) throw unstoredTurn(error, summarizeEffects(calls));
          // The store cannot keep what the stream established: the turn fails with a record
          // (what its calls did is known), instead of leaving the message in progress forever.
          if (!isDispatchOnceError(error, "invalid_store_input")) throw error;
          lastFailure = { kind: "commit", error };
          if (attempt >= this.retry.attempts || !this.policyRetries(lastFailure, snapshot)) break;
          continue;
        }
        if (outcome.committed) {
          const { answers, ...reported } = outcome;
          return { kind: "committed", outcome: reported, answers };
        }
        // Another worker took the conversation and committed (or will): what this attempt did
        // in the world is kept beside the conversation, never orphaned (TURN-13). With what this
        // runner's earlier attempts of the turn did (RECORD-5, RECORD-7): the model may have
        // answered this attempt without a call an earlier one made (a payment cut after it ran),
        // and the holder that committed saw none of them; on a ledger that does not list rows,
        // this record is the only one that can name them. An earlier attempt's call never
        // dispatched (no key: abandoned while its arguments streamed) had no effect to tell.
        const record: SupersededAttemptRecord = {
          kind: "superseded_attempt",
          conversationId,
          messageId,
          turnIndex,
          attempt,
          calls: await this.asOfTakeover(calls.filter((call) => call.attempt === attempt || call.key !== undefined)),
          resumed: resumedTurn(snapshot),
          at: new Date().toISOString(),
        };
        await store.addRecord(conversationId, record as unknown as JsonValue).catch(toldUnstored(summarizeEffects(record.calls)));
        this.emit({ type: "attempt_discarded", conversationId, turnIndex, attempt, reason: "superseded" });
        this.emit({ type: "attempt_superseded", conversationId, turnIndex, attempt, record });
        return { kind: "superseded" };
      }
      lastFailure = run.failure;
      // Whatever the app's policy: a retry is a re-send, and a call whose effect happened without
      // its result in hand (or is unknown) is not one a re-send can settle (RECORD-5, ERR-4).
      if (run.failure.kind === "call" && run.failure.calls.some(notSettledByResend)) break;
      if (attempt >= this.retry.attempts || !this.policyRetries(run.failure, snapshot)) break;
      const delayMs = this.policyBackoff(attempt, snapshot);
      if (delayMs === undefined) break;
      this.emit({ type: "attempt_discarded", conversationId, turnIndex, attempt, reason: "retry" });
      this.emit({ type: "retry_scheduled", conversationId, turnIndex, attempt, delayMs });
      await sleep(delayMs);
    }
    this.emit({ type: "attempt_discarded", conversationId, turnIndex, attempt, reason: "failed" });
    const record = this.failedTurnRecord(snapshot, attempt, lastFailure, calls);
    try {
      await store.failMessage(conversationId, fence, messageId, record as unknown as JsonValue);
    } catch (error) {
      // Unreachable at the failure: the message stays in progress (a re-send resumes it), and
      // the record it could not keep says what happened (RECORD-9).
      if (isDispatchOnceError(error, "store_unavailable")) throw unstoredTurn(error, record.effects);
      if (!isDispatchOnceError(error, "conversation_lease_lost")) throw error;
      // Lost the conversation meanwhile: the record still goes beside it; the new holder carries on.
      const calls = await this.asOfTakeover(record.calls);
      const told: FailedTurnRecord = { ...record, calls, effects: summarizeEffects(calls) };
      await store.addRecord(conversationId, told as unknown as JsonValue).catch(toldUnstored(told.effects));
      return { kind: "superseded" };
    }
    this.emit({ type: "turn_failed", conversationId, turnIndex, attempt, record });
    return { kind: "failed", record };
  }

  private async attempt(
    snapshot: TurnSnapshot,
    attempt: number,
    carry: Carry = NOTHING_CARRIED,
  ): Promise<{ accumulator: A; resolutions: Map<number, Resolution>; failure?: AttemptFailure }> {
    const { dispatcher } = this.options;
    const { provider } = this;
    const { conversationId, turnIndex } = snapshot;
    const info = { conversationId, turnIndex, attempt };
    const accumulator = provider.createAccumulator();
    const resolutions = new Map<number, Resolution>();
    // TURN-15: in a resumed turn a not-performed failure cannot say the call did not happen.
    const turn = dispatcher.turn({ conversationId, turnIndex, resumed: resumedTurn(snapshot) });
    // TURN-23: the carried calls this attempt's calls took, each once, and the slots of a resumed turn they took (each attempt anew).
    const carrying =
      carry.calls.length > 0 || carry.paused !== undefined
        ? { carry: carry.calls, paused: carry.paused, taken: new Set<string>(), seen: new Map<string, number>(), slots: new Map<string, number>() }
        : undefined;
    const dispatches: Promise<void>[] = [];
    let failure: AttemptFailure | undefined;
    this.emit({ type: "attempt_started", ...info, messageId: snapshot.message.id });
    // Aborts the request when the stream goes idle or the loop leaves early (frees the connection).
    const request = new AbortController();
    const idle = new IdleBound(this.options.streamIdleTimeoutMs ?? DEFAULT_STREAM_IDLE_TIMEOUT_MS);
    let drained = false;
    let undispatched: StreamIncompleteError | undefined;
    let events: AsyncIterator<E> | undefined;
    let opening: Promise<AsyncIterable<E>> | undefined;
    try {
      const headers = this.options.requestHeaders?.(info);
      // A turn after the message's first carries the results of its calls (STREAM-18).
      const followUp = snapshot.turnIndex > (snapshot.message.turnIndex ?? snapshot.turnIndex);
      opening = provider.open(snapshot.input, { ...(headers !== undefined ? { headers } : {}), signal: request.signal, followUp });
      const stream = await idle.race(opening);
      events = stream[Symbol.asyncIterator]();
      for (;;) {
        const next = await idle.race(events.next());
        if (next.done === true) break;
        const step = provider.apply(accumulator, next.value);
        if (step.textDelta !== undefined) this.emit({ type: "text_delta", ...info, index: step.textDelta.index, text: step.textDelta.text });
        // Dispatch the moment the arguments are final, as latency-minded handlers do (STREAM-4).
        if (step.complete !== undefined) dispatches.push(this.dispatchCall(turn, step.complete, resolutions, info, carrying));
        // One event may make several calls final (a Chat Completions chunk carrying whole calls): each, in order.
        for (const call of step.completeMore ?? []) dispatches.push(this.dispatchCall(turn, call, resolutions, info, carrying));
      }
      drained = true;
      if (!provider.finished(accumulator)) {
        throw new StreamIncompleteError(accumulator.eventsSeen, provider.finishEvent, provider.streamError?.(accumulator), provider.finalStop?.(accumulator));
      }
      undispatched = undispatchedAtFinish(accumulator, provider.finishEvent);
      if (undispatched !== undefined) throw undispatched;
    } catch (thrown) {
      // STREAM-16: a silent stream is a failed one, named by the bound it outwaited.
      const error =
        thrown instanceof StreamIdle
          ? new StreamIncompleteError(accumulator.eventsSeen, provider.finishEvent, provider.streamError?.(accumulator), provider.finalStop?.(accumulator), thrown.idleMs)
          : thrown;
      // A transport error after the finish event changes nothing: the stream established the turn (STREAM-1).
      if (!provider.finished(accumulator) || thrown === undispatched) {
        // Read the position now: calls still running belong to "during_dispatch" (STREAM-2).
        const position = accumulator.failurePosition();
        for (const call of accumulator.abandonOpenCalls()) {
          this.emit({ type: "call_abandoned", ...info, callId: call.callId, name: call.name, partialArguments: call.partialJson });
        }
        failure = { kind: "stream", position, error };
        this.emit({ type: "stream_failed", ...info, position, error: describe(error) });
      }
    } finally {
      idle.clear();
      if (!drained) {
        // Never awaited: after an abort Node's fetch may leave the pending read unsettled (STREAM-16).
        request.abort();
        // A stream side that ignores the signal still gets its iterator closed, as `for await` would
        // close it; not awaited either (a generator busy in a read closes only once that read ends).
        if (events !== undefined) closeQuietly(events);
        // An open() that outwaited the bound and resolves later (its side ignored the abort) hands
        // over a stream nobody will read: close that one too, when it comes.
        else opening?.then((late) => closeQuietly(late[Symbol.asyncIterator]()), () => undefined).catch(() => undefined);
      }
    }
    // A dispatched call is never cancelled by the stream's death: wait for its outcome (STREAM-6).
    await Promise.all(dispatches);
    if (failure === undefined) {
      const records = this.callRecords(accumulator, resolutions, attempt, resumedTurn(snapshot));
      const unresolved = records.find((c) => c.status !== "completed" && c.status !== "not_run" && !committable(c));
      if (unresolved !== undefined) {
        const first = resolutions.get(unresolved.index) as { ok: false; error: unknown };
        failure = { kind: "call", error: first.error, calls: records };
        this.emit({ type: "call_unresolved", ...info, error: describe(first.error) });
      }
    }
    return failure === undefined ? { accumulator, resolutions } : { accumulator, resolutions, failure };
  }

  private async dispatchCall(
    turn: TurnDispatch,
    call: CallState,
    resolutions: Map<number, Resolution>,
    info: { conversationId: string; turnIndex: number; attempt: number },
    carrying?: { carry: readonly CarriedCall[]; paused: PausedSlots | undefined; taken: Set<string>; seen: Map<string, number>; slots: Map<string, number> },
  ): Promise<void> {
    this.emit({ type: "call_complete", ...info, callId: call.callId, name: call.name, index: call.index });
    call.phase = "dispatched";
    let resolution: Resolution;
    if (call.inputError !== undefined) {
      resolution = { ok: false, error: new InvalidArgumentsJsonError(call.name, call.inputError) };
    } else {
      const toolCall: ToolCall = { name: call.name, input: call.input, callId: call.callId };
      // Decided before any await, as the turn's ordinals are: the same calls take the same carried calls in every attempt.
      const direct = carrying !== undefined ? carryingDispatcher(this.options.dispatcher) : undefined;
      if (carrying !== undefined && direct === undefined) this.warnCannotCarry();
      const match = direct !== undefined && carrying !== undefined ? matchCarried(direct, info.conversationId, toolCall, carrying.carry, carrying.taken) : undefined;
      if (match !== undefined) carrying?.taken.add(match.carried.key);
      // A listed call whose request the definition now refuses: a call no carried call answers may be it (TURN-23).
      const ordinal = direct !== undefined && carrying !== undefined ? ordinalAmongIdentical(direct, info, toolCall, carrying.seen) : undefined;
      const refused =
        direct !== undefined && carrying !== undefined && match === undefined && ordinal !== undefined
          ? refusedForCarried(direct, { conversationId: info.conversationId, turnIndex: info.turnIndex, ordinal }, toolCall, carrying.carry, carrying.taken)
          : undefined;
      // TURN-23 after a resumed turn (finding 29): a write call no listed call answers is dispatched
      // at that turn's index, where a holder of it paused before its claim would claim the same call.
      const slot =
        direct !== undefined && carrying?.paused !== undefined && match === undefined && refused === undefined && this.options.dispatcher.effectClassOf?.(call.name) !== "read"
          ? pausedSlot(direct, info.conversationId, toolCall, carrying.paused, carrying.slots, carrying.carry)
          : undefined;
      const carriedMatch = match ?? slot;
      try {
        if (refused !== undefined) {
          resolution = { ok: false, error: refused };
        } else if (carriedMatch === undefined) {
          resolution = { ok: true, outcome: await turn.dispatch(toolCall) };
        } else {
          // TURN-23: under the earlier turn's key, still counted among this turn's identical calls (TURN-4).
          // A slot (no listed row): IDENT-10's guard there never takes a row a committed turn answered (TURN-23).
          const outcome = await turn.dispatch(toolCall, {
            at: match !== undefined || slot === undefined ? { turnIndex: carriedMatch.carried.turnIndex, ordinal: carriedMatch.ordinal } : { turnIndex: carriedMatch.carried.turnIndex, ordinal: carriedMatch.ordinal, answered: slot.answered },
          });
          // A TurnDispatch that does not take `at` (a wrapper that drops dispatch's options)
          // dispatched it under its own key: said as it was, and said loudly, once. Told by the
          // outcome's `dispatchedAt` (core's Dispatcher), not by its key alone: at that index
          // IDENT-10's guard may answer the call from a row an earlier definition made, whose key
          // is not the carried one (a slot's is derived); that row's key is the one reported.
          // A dispatcher that says no `dispatchedAt` honoured `at` when the key is the carried one.
          if (outcome.dispatchedAt !== carriedMatch.carried.turnIndex && outcome.key !== carriedMatch.carried.key) {
            resolution = { ok: true, outcome };
            this.warnAtDropped(carriedMatch.carried.key, outcome.key);
          } else if (match !== undefined) {
            resolution = { ok: true, outcome, carriedFromTurn: match.carried.turnIndex };
          } else {
            // A slot of a resumed turn: claimed fresh it ran, a new run; met a paused holder's row it
            // is `replayed`. Not `carriedFromTurn`: a read-back cannot tell the two apart (the store
            // keeps no trace of which), and a re-send reports what the send reported.
            resolution = { ok: true, outcome };
          }
        }
      } catch (error) {
        resolution = { ok: false, error };
      }
    }
    resolutions.set(call.index, resolution);
    call.phase = "resolved";
    this.emit({
      type: "call_resolved",
      ...info,
      callId: call.callId,
      name: call.name,
      ok: resolution.ok,
      ...(resolution.ok
        ? { key: resolution.outcome.key, replayed: resolution.outcome.replayed }
        : { error: describe(resolution.error) }),
    });
  }

  /**
   * Commits the attempt's turn (TURN-5) with the record of the calls earlier runs of the turn made
   * that it does not answer (RECORD-8): in the commit's own write where the store keeps a record
   * with a commit, else added right after it; in either case before the turn is reported.
   */
  private async commit(
    snapshot: TurnSnapshot,
    fence: number,
    attempts: number,
    accumulator: A,
    resolutions: Map<number, Resolution>,
    own: readonly CallRecord[],
  ): Promise<TurnOutcome & { answers: boolean }> {
    const { conversationId, turnIndex } = snapshot;
    const calls: CallReport[] = [];
    const answers: CallAnswer[] = [];
    for (const call of accumulator.calls) {
      const resolution = resolutions.get(call.index);
      if (resolution === undefined) continue;
      if (resolution.ok) {
        const { outcome } = resolution;
        const report: CallReport = { callId: call.callId, name: call.name, key: outcome.key, ordinal: outcome.ordinal, replayed: outcome.replayed, result: outcome.result };
        if (outcome.storedRequest !== undefined) report.storedRequest = outcome.storedRequest;
        if (resolution.carriedFromTurn !== undefined) report.carriedFromTurn = resolution.carriedFromTurn;
        calls.push(report);
        answers.push({ call, answer: { ok: true, resultJson: outcome.resultJson } });
      } else {
        // Only errors that are facts about the call reach here (attempt() failed the rest).
        const error = storedErrorOf(resolution.error);
        const key = (resolution.error as { key?: unknown }).key;
        calls.push({ callId: call.callId, name: call.name, ...(typeof key === "string" ? { key } : {}), error });
        answers.push({ call, answer: { ok: false, error } });
      }
    }
    const shape = this.provider.commitShape(accumulator, answers);
    const { stopReason } = shape;
    const { store } = this.options;
    // RECORD-8: built before the commit, so that a store that keeps a record with its commit
    // writes both at once: a process that dies right after the commit cannot lose the record.
    const record = await this.committedTurnRecord(snapshot, attempts, own, calls);
    const withCommit = record !== undefined && store.capabilities?.recordsWithCommit === true;
    // TURN-24: the keys the calls ran under, beside the turn, to a store that keeps them.
    const callKeys = calls.length > 0 && store.capabilities?.supports?.callKeys === true ? committedCallKeys(calls) : undefined;
    const { committed } = await store.commitTurn(conversationId, {
      fence,
      messageId: snapshot.message.id,
      turnIndex,
      assistant: shape.assistant,
      ...(shape.toolResults !== undefined ? { toolResults: shape.toolResults } : {}),
      stopReason,
      answers: shape.answers,
      ...(withCommit ? { record: record as unknown as JsonValue } : {}),
      ...(callKeys !== undefined ? { callKeys } : {}),
    });
    this.emit({ type: "turn_committed", conversationId, turnIndex, attempt: attempts, committed, stopReason });
    const outcome: TurnOutcome & { answers: boolean } = { conversationId, turnIndex, attempts, committed, stopReason, text: shape.text, calls, answers: shape.answers };
    if (committed && record !== undefined) {
      // A store without recordsWithCommit: right after the commit, before the turn is reported.
      if (!withCommit) await store.addRecord(conversationId, record as unknown as JsonValue);
      this.emit({ type: "resumed_turn_recorded", conversationId, turnIndex, attempt: attempts, record });
      outcome.record = record;
    }
    return outcome;
  }

  private callRecords(accumulator: A, resolutions: Map<number, Resolution>, attempt: number, resumed: boolean): CallRecord[] {
    const records = accumulator.calls.map((call): CallRecord => {
      // A provider's text is not checked for well-formed Unicode: a lone UTF-16 half in a call's
      // id or name would make the record one no store can keep (TURN-18), and the turn's effects
      // would be told nowhere (RECORD-7).
      const input = call.phase !== "abandoned" ? recordableInput(call.input) : undefined;
      const base = { attempt, index: call.index, callId: call.callId.toWellFormed(), name: call.name.toWellFormed(), ...(input !== undefined ? { input } : {}) };
      const resolution = resolutions.get(call.index);
      if (call.phase === "abandoned" || resolution === undefined) {
        // A cut between two deltas that split a character's UTF-16 pair leaves a lone half, which
        // no store can keep (TURN-18): the record would be refused and the failure told nowhere.
        return { ...base, status: "not_run", effect: "not_happened", summary: "not run (connection lost)", partialArguments: call.partialJson.toWellFormed() };
      }
      if (resolution.ok) {
        const { outcome } = resolution;
        const isRead = outcome.effect === "read";
        return {
          ...base,
          status: "completed",
          effect: isRead ? "none" : "happened",
          summary: outcome.replayed ? "completed earlier (result replayed)" : "completed",
          key: outcome.key,
          ordinal: outcome.ordinal,
          replayed: outcome.replayed,
          result: outcome.result,
          ...(outcome.storedRequest !== undefined ? { storedRequest: outcome.storedRequest } : {}),
        };
      }
      const isRead = this.options.dispatcher.effectClassOf?.(call.name) === "read";
      const { status, effect, summary } = classifyCallError(resolution.error, isRead);
      const key = (resolution.error as { key?: unknown } | null)?.key;
      // RECORD-10: the request that ran under the key, when it is not this call's (a re-worded
      // call met the stored request's failure, unknown outcome, unstorable result or release).
      const storedRequest = typeof key === "string" ? recordableInput((resolution.error as { storedRequest?: unknown }).storedRequest) : undefined;
      return {
        ...base,
        status,
        effect,
        summary,
        ...(typeof key === "string" ? { key } : {}),
        ...(storedRequest !== undefined ? { storedRequest } : {}),
        error: storedErrorOf(resolution.error),
      };
    });
    if (!resumed) return records;
    return records.map((call) => forResumedTurn(call, this.options.dispatcher.effectClassOf?.(call.name) === "read"));
  }

  /**
   * The calls of a record written after another holder took the conversation over (TURN-13,
   * RECORD-5). Keys come from the turn index, not from the holder: the new holder runs the same
   * keys, so this attempt's own "not performed" says nothing of its run. Each call this attempt
   * saw as not having happened is read again in the ledger: completed (or failed with its result
   * not storable) is `happened`, another definite failure stays `not_happened` (a failed row is
   * final, LEDGER-8), and anything else (no row, in flight, released, unknown, the ledger out of
   * reach) is `may_have_happened`: the new holder may be running it right now.
   */
  private async asOfTakeover(calls: CallRecord[]): Promise<CallRecord[]> {
    const ledger = this.dispatcherLedger();
    const rows = new Map<string, Promise<LedgerRow | undefined | "unreadable">>();
    const rowOf = (key: string) => {
      let row = rows.get(key);
      if (row === undefined) {
        row = typeof ledger?.lookup === "function" ? ledger.lookup(key).catch(() => "unreadable" as const) : Promise.resolve("unreadable" as const);
        rows.set(key, row);
      }
      return row;
    };
    return Promise.all(
      calls.map(async (call): Promise<CallRecord> => {
        if (call.effect !== "not_happened" || call.key === undefined) return call;
        const row = await rowOf(call.key);
        if (row !== "unreadable" && row?.state === "completed") {
          return { ...call, effect: "happened", summary: `${call.summary}; performed under the same key by the holder that took the turn over` };
        }
        if (row !== "unreadable" && row?.state === "failed") {
          if (row.error?.code === "result_not_storable") return { ...call, effect: "happened", summary: `${call.summary}; performed under the same key by the holder that took the turn over (its result could not be stored)` };
          return call;
        }
        return { ...call, effect: "may_have_happened", summary: `${call.summary}; the holder that took the turn over runs the same key and may have performed it` };
      }),
    );
  }

  private failedTurnRecord(snapshot: TurnSnapshot, attempts: number, failure: AttemptFailure | undefined, calls: CallRecord[]): FailedTurnRecord {
    const effects = summarizeEffects(calls);
    return {
      kind: "failed_turn",
      conversationId: snapshot.conversationId,
      messageId: snapshot.message.id,
      turnIndex: snapshot.turnIndex,
      attempts,
      position: failure?.kind === "stream" ? failure.position : failure?.kind === "commit" ? "commit_refused" : "call_unresolved",
      error: storedErrorOf(failure?.error),
      calls,
      effects,
      // Re-sending helps unless an effect is left for a person to settle (or said to have happened
      // without its result in hand: ERR-4), or the provider ends
      // this request's response the same way every time (STREAM-13), or refused the request as
      // one it always refuses (a permanent 4xx: the re-send sends the same conversation, RECORD-5).
      retryable:
        failure?.kind !== "commit" &&
        !(failure?.kind === "stream" && (isFinalStop(failure.error) || isPermanentRequestError(failure.error))) &&
        !calls.some(notSettledByResend),
      resumed: resumedTurn(snapshot),
      at: new Date().toISOString(),
    };
  }

  /**
   * The record of a turn that commits after more than one attempt, or resumed (RECORD-8):
   * every call this runner's earlier attempts dispatched and every row claimed at its index
   * (when the turn was resumed, listed before the commit) whose key the turn does not answer, one entry per key;
   * for a resumed turn whose rows cannot be listed, the statement that earlier effects may exist
   * (RECORD-6). Undefined when the turn was not resumed and there is nothing the committed turn
   * leaves unanswered.
   */
  private async committedTurnRecord(
    snapshot: TurnSnapshot,
    attempts: number,
    own: readonly CallRecord[],
    calls: readonly CallReport[],
  ): Promise<ResumedTurnRecord | undefined> {
    const resumed = resumedTurn(snapshot);
    if (!resumed && attempts === 1) return undefined;
    const { conversationId, turnIndex } = snapshot;
    const base = { kind: "resumed_turn", conversationId, messageId: snapshot.message.id, turnIndex, resumed, attempts } as const;
    const answered = new Set(calls.flatMap((c) => (c.key !== undefined ? [c.key] : [])));
    const ownUnanswered = own.flatMap((call) => {
      const entry = unansweredOwnCall(call);
      return entry !== undefined && !answered.has(entry.key) ? [entry] : [];
    });
    // This runner saw its own attempts: only a resumed turn has rows it did not see.
    const listing = resumed ? await this.turnRows(conversationId, turnIndex) : undefined;
    if (listing !== undefined && !listing.ok) {
      return { ...base, listed: false, unlistedReason: listing.reason, calls: mergeUnanswered([], ownUnanswered), at: new Date().toISOString() };
    }
    const listedRows = listing?.ok === true ? listing.rows.filter((row) => !answered.has(row.key)) : [];
    // A row of a message that failed at this index (TURN-12) is named by that message's id, as a busy answer names it (TURN-25).
    // Only that name (a SHOULD) depends on this read: a store that cannot read its records now must not fail a commit whose
    // effects are known; the record still lists the row.
    const madeFor = listedRows.length > 0 ? await this.otherMessagesKeys(conversationId, snapshot.message.id).catch(() => new Map<string, string>()) : new Map<string, string>();
    const rows = listedRows.map((row) => {
      const entry = unansweredCall(row);
      const other = madeFor.get(row.key);
      return other !== undefined ? { ...entry, messageId: other } : entry;
    });
    const unanswered = mergeUnanswered(rows, ownUnanswered);
    // A resumed turn keeps its record even when it lists nothing: an earlier holder paused before
    // its claim may claim after the listing, pay and die before recording; only `resumed: true`
    // here then tells of that effect (RECORD-8, RECORD-7; the model's resume-omits-record).
    if (unanswered.length === 0 && !resumed) return undefined;
    return { ...base, listed: listing !== undefined, calls: unanswered, at: new Date().toISOString() };
  }

  /**
   * conversation_busy (TURN-10). For a message in progress under another holder, with the calls the
   * dispatcher's ledger lists for its turns (TURN-25), or why they are not known: the user is told
   * which payment went through or is under way, not only "busy". Never another error: a listing
   * that fails, or does not answer within BUSY_LISTING_MS, is said in `effectsUnknown`.
   */
  private async busyError(conversationId: string, messageId: string, waited: number, current: StoredMessage): Promise<ConversationBusyError> {
    if (current.state !== "in_progress") return new ConversationBusyError(conversationId, messageId, waited);
    const listing = current.turnIndex === undefined ? { ok: false as const, reason: "the store gave no turn index for the message in progress" } : await this.messageEffects(conversationId, messageId, current.turnIndex);
    return new ConversationBusyError(conversationId, messageId, waited, { inProgress: true, ...(listing.ok ? { effects: listing.effects } : { effectsUnknown: listing.reason }) });
  }

  /**
   * The calls the ledger lists at a message's turn index and the later ones (its later turns; a
   * message in progress is the conversation's last bound one), in the order they were claimed
   * (`claimedAt`, then turn index, then a failed message's calls before this one's, then ordinal,
   * then key; the ledger lists by last transition, LIST-2), each with what its row says of its
   * effect (RECORD-8's reading) and its stored request. Bounded: a busy
   * sender has waited already, and a ledger that does not answer must not hold it longer.
   */
  private async messageEffects(conversationId: string, messageId: string, turnIndex: number): Promise<{ ok: true; effects: InProgressEffect[] } | { ok: false; reason: string }> {
    const listed = (async () => {
      try {
        const rows = await turnRowsOf(this.dispatcherLedger(), conversationId, turnIndex, { andLater: true });
        if (rows === undefined) return { ok: false as const, reason: "the dispatcher's ledger does not list rows (capabilities.supports.listRows)" };
        // A row at the index this message took from a failed one (TURN-12) may be that message's
        // call: its failed-turn record lists the key, and the entry names it, so that a user who
        // asked for one payment is not told another message's as this one's.
        const madeFor = rows.length > 0 ? await this.otherMessagesKeys(conversationId, messageId) : new Map<string, string>();
        const ordered = rows.map((row) => ({ row, ordinal: this.rowOrdinal(row) }));
        // Claims that share a millisecond of the ledger's clock: an earlier turn's were made before a
        // later turn's (a message's turns run one after another); at one index, the calls of a message
        // that failed there before this one was bound (TURN-12) before this message's own, the failed
        // messages in the order their records were kept (RECORD-4); then identical calls by ordinal;
        // only what none of these tells apart falls back to the key.
        const turnOf = (row: LedgerRow) => row.turnIndex ?? turnIndex;
        const failedInOrder = [...new Set(madeFor.values())];
        const madeRank = (row: LedgerRow) => {
          const other = madeFor.get(row.key);
          return other === undefined ? failedInOrder.length : failedInOrder.indexOf(other);
        };
        ordered.sort(
          (x, y) =>
            x.row.claimedAt - y.row.claimedAt ||
            turnOf(x.row) - turnOf(y.row) ||
            madeRank(x.row) - madeRank(y.row) ||
            (x.ordinal ?? 0) - (y.ordinal ?? 0) ||
            (x.row.key < y.row.key ? -1 : x.row.key > y.row.key ? 1 : 0),
        );
        return {
          ok: true as const,
          effects: ordered.map(({ row, ordinal }): InProgressEffect => {
            // The row's reading as a record lists it (RECORD-8), without its summary, worded for an earlier run.
            const { key, name, state, effect, result, error, input } = unansweredCall(row);
            const madeForMessage = madeFor.get(key);
            return {
              key,
              name,
              turnIndex: row.turnIndex ?? turnIndex,
              ...(ordinal !== undefined ? { ordinal } : {}),
              state,
              effect,
              ...(input !== undefined ? { input } : {}),
              ...(result !== undefined ? { result } : {}),
              ...(error !== undefined ? { error } : {}),
              ...(madeForMessage !== undefined ? { messageId: madeForMessage } : {}),
            };
          }),
        };
      } catch (error) {
        return { ok: false as const, reason: `listing the message's ledger rows failed: ${describe(error)}` };
      }
    })();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const bound = new Promise<{ ok: false; reason: string }>((resolve) => {
      timer = setTimeout(() => resolve({ ok: false, reason: `listing the message's ledger rows did not answer within ${BUSY_LISTING_MS} ms` }), BUSY_LISTING_MS);
    });
    try {
      return await Promise.race([listed, bound]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * The keys other messages' failed-turn records list (their calls and effects), each with that
   * message's id: the calls a message bound where one of them failed meets at its index (TURN-12).
   */
  private async otherMessagesKeys(conversationId: string, messageId: string): Promise<Map<string, string>> {
    const keys = new Map<string, string>();
    for (const r of await this.options.store.records(conversationId)) {
      const record = failedTurnRecordOf(r);
      if (record === undefined || typeof record.messageId !== "string" || record.messageId === messageId) continue;
      for (const list of [record.calls, record.effects]) {
        if (!Array.isArray(list)) continue;
        for (const entry of list as { key?: unknown }[]) if (typeof entry?.key === "string" && !keys.has(entry.key)) keys.set(entry.key, record.messageId);
      }
    }
    return keys;
  }

  /**
   * A row's ordinal among its turn's identical calls (TURN-4), which the row does not store: the
   * one at which the dispatcher's `keyFor` derives the row's key again from its stored request
   * (0 to MAX_ORDINAL_TRIED, as IDENT-10 reads a row); undefined when none does (a dispatcher
   * without keyFor, a tool it no longer defines, a row made under another definition).
   */
  private rowOrdinal(row: LedgerRow): number | undefined {
    const { dispatcher } = this.options;
    const keyFor = (dispatcher as { keyFor?: (call: ToolCall, context: TurnContext & { ordinal?: number }) => string }).keyFor;
    const { input } = turnRowInput(row);
    if (typeof keyFor !== "function" || input === undefined || row.conversationId === undefined || row.turnIndex === undefined) return undefined;
    try {
      for (let ordinal = 0; ordinal <= MAX_ORDINAL_TRIED; ordinal++) {
        if (keyFor.call(dispatcher, { name: row.toolName, input }, { conversationId: row.conversationId, turnIndex: row.turnIndex, ordinal }) === row.key) return ordinal;
      }
    } catch {
      // Refused by the tool's definition now: no ordinal is known.
    }
    return undefined;
  }

  /** The ledger rows claimed at the turn index, through the dispatcher's ledger when it lists (LIST-3). */
  private async turnRows(conversationId: string, turnIndex: number): Promise<{ ok: true; rows: LedgerRow[] } | { ok: false; reason: string }> {
    // Duck-typed: a CallDispatcher need not have a ledger (the unguarded baseline, a custom one).
    const ledger = this.dispatcherLedger();
    try {
      const rows = await turnRowsOf(ledger, conversationId, turnIndex);
      return rows === undefined ? { ok: false, reason: "the dispatcher's ledger does not list rows (capabilities.supports.listRows)" } : { ok: true, rows };
    } catch (error) {
      // The turn is committed already: say what is not known rather than fail a committed turn.
      return { ok: false, reason: `listing the turn's ledger rows failed: ${describe(error)}` };
    }
  }

  private turnLimitRecord(snapshot: TurnSnapshot, turns: number): FailedTurnRecord {
    return {
      kind: "failed_turn",
      conversationId: snapshot.conversationId,
      messageId: snapshot.message.id,
      turnIndex: snapshot.turnIndex,
      attempts: 0,
      position: "turn_limit",
      error: { name: "TurnLimit", message: `the model used ${turns} turns for this message (maxTurns)` },
      calls: [],
      effects: [],
      retryable: false,
      resumed: resumedTurn(snapshot),
      at: new Date().toISOString(),
    };
  }

  /** A committed turn read back from the store (TURN-7): its text and its calls' results. */
  /**
   * A message's committed turns read back (TURN-7), those this send produced as produced. A call
   * answered from a call an earlier turn left unanswered (TURN-23) is found again as it was
   * dispatched: the same records, the same calls in the same order, the same matching.
   */
  private async readBackTurns(conversationId: string, stored: readonly StoredTurn[], records: readonly ResumedTurnRecord[], mine: ReadonlyMap<number, TurnOutcome>): Promise<TurnOutcome[]> {
    const direct = records.length > 0 ? carryingDispatcher(this.options.dispatcher) : undefined;
    let carry: Carry = NOTHING_CARRIED;
    const turns: TurnOutcome[] = [];
    for (const turn of stored) {
      const view = this.provider.readTurn(turn);
      const { calls, matches } = this.storedMatches(direct, conversationId, carry, view, turn);
      const outcome = mine.get(turn.turnIndex) ?? (await this.storedTurnOutcome(conversationId, turn, view, matches));
      turns.push(outcome);
      const atSlot = await this.slotRowKeys(conversationId, carry.paused, records, turn.turnIndex);
      carry = this.storedCarryAfter(direct, conversationId, carry, calls, records, turn.turnIndex, outcome.calls, view, atSlot);
    }
    return turns;
  }

  /**
   * TURN-23 for a holder that takes a message up after some of its turns were committed (its
   * first holder died or lost the lease between two turns): the calls those turns left unanswered,
   * from the records kept beside the conversation and the committed turns since. Nothing for a
   * message's first turn, or with a dispatcher that cannot key a call at another turn.
   */
  private async carriedBefore(snapshot: TurnSnapshot): Promise<Carry> {
    const first = snapshot.message.turnIndex ?? snapshot.turnIndex;
    const direct = carryingDispatcher(this.options.dispatcher);
    if (snapshot.turnIndex <= first || direct === undefined) return NOTHING_CARRIED;
    const { store } = this.options;
    const { conversationId } = snapshot;
    const messageId = snapshot.message.id;
    const [all, stored] = await Promise.all([store.records(conversationId), store.turnsOf(conversationId, messageId)]);
    const records = all.filter((r): r is ResumedTurnRecord & JsonValue => isResumedTurnRecordOf(r, messageId));
    let carry: Carry = NOTHING_CARRIED;
    for (const turn of stored) {
      if (turn.turnIndex >= snapshot.turnIndex) break;
      const view = this.provider.readTurn(turn);
      const { calls, matches } = this.storedMatches(direct, conversationId, carry, view, turn);
      // The keys the turn's calls were dispatched under, as its read-back reports them (a slot's key among them).
      const reports = carry.paused !== undefined || records.some((r) => r.turnIndex === turn.turnIndex) ? await this.carriedReports(conversationId, turn, view.calls, matches) : [];
      const atSlot = await this.slotRowKeys(conversationId, carry.paused, records, turn.turnIndex);
      carry = this.storedCarryAfter(direct, conversationId, carry, calls, records, turn.turnIndex, reports, view, atSlot);
    }
    return carry;
  }

  /**
   * The keys a committed turn's records list whose ledger rows stand at the slot's turn index
   * (TURN-23: a later turn's attempt claimed them there, and the committed turn did not answer
   * them), read from the rows themselves: derived under the tool's definition now, after a deploy
   * (TURN-24), the slot's keys are not the ones that attempt claimed under. Empty without a slot,
   * or for the slot's own turn; a row that cannot be looked up is left to the derivation.
   */
  private async slotRowKeys(conversationId: string, paused: PausedSlots | undefined, records: readonly ResumedTurnRecord[], turnIndex: number): Promise<ReadonlySet<string>> {
    const keys = new Set<string>();
    if (paused === undefined || turnIndex === paused.turnIndex) return keys;
    const ledger = this.dispatcherLedger();
    if (typeof ledger?.lookup !== "function") return keys;
    for (const record of records) {
      if (record.turnIndex !== turnIndex) continue;
      for (const call of record.calls) {
        const row = await ledger.lookup(call.key).catch(() => undefined);
        if (row?.conversationId === conversationId && row.turnIndex === paused.turnIndex) keys.add(call.key);
      }
    }
    return keys;
  }

  /**
   * A stored turn's calls matched as its holder dispatched them (TURN-23): the listed calls they
   * answered, then, after a resumed turn, the slot each write call no listed call answers took.
   * `calls`: the listed calls still carried after it. A turn committed with its calls' keys
   * (TURN-24) says which listed calls it answered: those under its keys, whatever the tools'
   * definitions derive now.
   */
  private storedMatches(
    direct: ReturnType<typeof carryingDispatcher>,
    conversationId: string,
    carry: Carry,
    view: StoredTurnView,
    turn: Pick<StoredTurn, "callKeys">,
  ): { calls: readonly CarriedCall[]; matches: ({ carried: CarriedCall; ordinal: number } | undefined)[] } {
    if (direct === undefined) return { calls: carry.calls, matches: [] };
    let calls = carry.calls;
    let matches: ({ carried: CarriedCall; ordinal: number } | undefined)[] = [];
    const stored = this.options.store.capabilities?.supports?.callKeys === true ? turn.callKeys : undefined;
    if (calls.length > 0) ({ carry: calls, matches } = afterTurn(direct, conversationId, calls, view.calls, stored));
    const { paused } = carry;
    if (paused !== undefined) {
      const slots = new Map<string, number>();
      matches = view.calls.map((call, i) => {
        const code = call.error?.code;
        if (matches[i] !== undefined || call.input === undefined || code === "invalid_arguments_json" || code === "tool_definition_changed") return matches[i];
        if (this.options.dispatcher.effectClassOf?.(call.name) === "read") return undefined;
        return pausedSlot(direct, conversationId, { name: call.name, input: call.input }, paused, slots, carry.calls);
      });
    }
    return { calls, matches };
  }

  /** What a stored turn leaves carried (TURN-23): its listed calls still unanswered, its records', and the slots of a resumed turn. */
  private storedCarryAfter(
    direct: ReturnType<typeof carryingDispatcher>,
    conversationId: string,
    carry: Carry,
    calls: readonly CarriedCall[],
    records: readonly ResumedTurnRecord[],
    turnIndex: number,
    reports: readonly CallReport[],
    view: StoredTurnView,
    atSlot?: ReadonlySet<string>,
  ): Carry {
    let next = calls;
    let paused = carry.paused;
    for (const record of records) {
      if (record.turnIndex !== turnIndex) continue;
      next = withRecord(next, direct !== undefined ? withoutSlots(direct, conversationId, carry.paused, record, atSlot) : record);
      paused = pausedAfter(paused, record, [], []);
    }
    if (paused !== undefined) {
      const keys = reports.flatMap((r) => (r.key !== undefined ? [r.key] : []));
      // A committed call whose arguments cannot be read back, or that ran (it has a result) and that the
      // current definition cannot key (a deploy since refuses its stored request): which slot it
      // answered cannot be told, so its tool's slots cannot be counted (a slot at its key would
      // answer a second ask with its effect).
      const unkeyed = (c: StoredTurnView["calls"][number], i: number) => c.input !== undefined && c.error === undefined && reports[i] !== undefined && reports[i].key === undefined;
      const unread = view.calls.flatMap((c, i) =>
        ((c.input === undefined && c.error?.code !== "invalid_arguments_json") || unkeyed(c, i)) && this.options.dispatcher.effectClassOf?.(c.name) !== "read" ? [c.name] : [],
      );
      paused = pausedAfter(paused, undefined, keys, unread);
    }
    if (next === carry.calls && paused === carry.paused) return carry;
    return { calls: next, ...(paused !== undefined ? { paused } : {}) };
  }

  private async storedTurnOutcome(
    conversationId: string,
    turn: StoredTurn,
    view: StoredTurnView = this.provider.readTurn(turn),
    matches: readonly ({ carried: CarriedCall; ordinal: number } | undefined)[] = [],
  ): Promise<TurnOutcome> {
    const calls = await this.carriedReports(conversationId, turn, view.calls, matches);
    return {
      conversationId,
      turnIndex: turn.turnIndex,
      attempts: 0,
      committed: true,
      stopReason: turn.stopReason,
      text: view.text,
      calls: await Promise.all(calls.map((report) => this.confirmedError(report))),
    };
  }

  /**
   * A stored error answer checked against the ledger: a provider without an error flag (the
   * Responses API) reads an error from the output's shape, which a tool's own result can have.
   * When the call's row says completed with that very output, it was a result: reporting it as a
   * failure would tell the user an effect that happened did not.
   */
  private async confirmedError(report: CallReport): Promise<CallReport> {
    if (report.error === undefined) return report;
    // As in the first send, a call answered with an error carries its key but no ordinal.
    const { ordinal, ...failed } = report;
    if (report.key === undefined || ordinal === undefined) return failed;
    const ledger = this.dispatcherLedger();
    if (typeof ledger?.lookup !== "function") return failed;
    const row = await ledger.lookup(report.key).catch(() => undefined);
    // Only the very output the turn committed: a row completed with anything else (an operator's
    // resolution, another request's result under a reused key) leaves the committed error standing.
    if (row?.state !== "completed" || row.result !== canonicalText({ error: report.error })) return failed;
    const { error: _error, ...completed } = report;
    return { ...completed, result: JSON.parse(row.result) as JsonValue };
  }

  /**
   * The reports of a stored turn's calls, those answered from a carried call (TURN-23) under its
   * key. A turn committed before the runner carried calls dispatched them all under their own
   * turn's keys, so it claimed one more own key of each carried call's tool and identity than
   * this release does: when a row stands under such a key (one this release's reading gives no
   * call), the turn is read as that release dispatched it. A key this release's reading gives an
   * identical call that was not carried proves nothing: in this release that call ran under it.
   * Nor does a completed row whose result is not the one the turn committed for that call: a
   * holder of the earlier release paid under it and died, and this release's holder that took the
   * turn over answered the call from the carried row (a rolling deploy).
   *
   * A turn committed with its calls' keys (TURN-24, a store with `supports.callKeys`) is reported
   * with them: they are the keys the calls ran under, whatever the definition is now, so neither
   * the derivation nor the earlier release's reading is needed.
   */
  private async carriedReports(
    conversationId: string,
    turn: Pick<StoredTurn, "turnIndex" | "callKeys">,
    calls: StoredTurnView["calls"],
    matches: readonly ({ carried: CarriedCall; ordinal: number } | undefined)[],
  ): Promise<CallReport[]> {
    const { turnIndex } = turn;
    const stored = this.options.store.capabilities?.supports?.callKeys === true ? turn.callKeys : undefined;
    if (stored !== undefined) return withStoredKeys(calls, stored);
    const own = this.storedCallReports(conversationId, turnIndex, calls);
    if (!matches.some((m) => m !== undefined)) return own;
    const carried = this.storedCallReports(conversationId, turnIndex, calls, matches);
    const ledger = this.dispatcherLedger();
    if (typeof ledger?.lookup === "function") {
      const keysNow = new Set(carried.flatMap((r) => (r.key !== undefined ? [r.key] : [])));
      for (const [i, report] of own.entries()) {
        if (report.key === undefined || keysNow.has(report.key)) continue;
        const row = await ledger.lookup(report.key).catch(() => undefined);
        if (row === undefined) continue;
        const committed = calls[i];
        const answered = committed?.result !== undefined ? canonicalText(committed.result) : committed?.error !== undefined ? canonicalText({ error: committed.error }) : undefined;
        if (row.state === "completed" && answered !== undefined && row.result !== answered) continue;
        return own;
      }
    }
    return carried;
  }

  /**
   * The calls of a committed turn read back, with the key and ordinal the first send reported, for
   * a turn committed without its calls' keys (an earlier release, a store without
   * `supports.callKeys`): keys are derived (conversation id, turn index, tool, ordinal, identity
   * arguments), so they are recomputed through the dispatcher. After a deploy that changed a tool's
   * identity (IDENT-10) that is not the key the call ran under (TURN-24 keeps it for that). Ordinals are counted per identical
   * call in the committed order, as the dispatcher's `turn()` counted them: a call refused before
   * its key (unknown tool, invalid arguments) took none. Every keyed call gets its ordinal here;
   * `confirmedError` drops it from a call that stays an error, as the first send reports it.
   */
  private storedCallReports(
    conversationId: string,
    turnIndex: number,
    calls: StoredTurnView["calls"],
    matches: readonly ({ carried: CarriedCall; ordinal: number } | undefined)[] = [],
  ): CallReport[] {
    const { dispatcher } = this.options;
    const keyFor = (dispatcher as { keyFor?: (call: ToolCall, context: TurnContext & { ordinal?: number }) => string }).keyFor;
    const seen = new Map<string, number>();
    return calls.map(({ input, ...call }, i): CallReport => {
      const report: CallReport = { ...call, replayed: true };
      const match = matches[i];
      // A call whose arguments were not JSON was never dispatched: it has no key.
      if (typeof keyFor !== "function" || input === undefined || call.error?.code === "invalid_arguments_json") return report;
      const toolCall: ToolCall = { name: call.name, input, callId: call.callId };
      let first: string;
      try {
        first = keyFor.call(dispatcher, toolCall, { conversationId, turnIndex, ordinal: 0 });
      } catch {
        return report; // refused before its key, as when it was dispatched
      }
      // Identical calls share the key at ordinal 0 (it is made of the tool and its identity).
      const ordinal = seen.get(first) ?? 0;
      seen.set(first, ordinal + 1);
      // A call IDENT-10 refused at the carried call's index (tool_definition_changed) answered nothing
      // (afterTurn keeps the carried call carried): the first send reported the key of the refusal, the
      // call's own at that index and ordinal, never the carried row's (a read-back that said the
      // row's key would deny, under it, the effect that happened there).
      if (match !== undefined && call.error?.code === "tool_definition_changed") {
        try {
          return { ...report, key: keyFor.call(dispatcher, toolCall, { conversationId, turnIndex: match.carried.turnIndex, ordinal: match.ordinal }), ordinal: match.ordinal };
        } catch {
          return report;
        }
      }
      // TURN-23: dispatched under the carried call's key, having taken its ordinal here (TURN-4).
      // A slot of a resumed turn (finding 29): whether its row was there before the call is not stored.
      if (match !== undefined) return { ...report, key: match.carried.key, ordinal: match.ordinal, ...(match.carried.paused === true ? {} : { carriedFromTurn: match.carried.turnIndex }) };
      let key = first;
      if (ordinal > 0) {
        try {
          key = keyFor.call(dispatcher, toolCall, { conversationId, turnIndex, ordinal });
        } catch {
          return report;
        }
      }
      return { ...report, key, ordinal };
    });
  }

  /** The ledger of the dispatcher, when it shows one (core's Dispatcher does): rows are looked up and listed there. */
  private dispatcherLedger(): Partial<Ledger> | undefined {
    return (this.options.dispatcher as { ledger?: Partial<Ledger> }).ledger;
  }

  private atDroppedWarned = false;
  private cannotCarryWarned = false;

  /** TURN-23 could not act: an earlier turn of the message left calls unanswered, and the dispatcher cannot key a call elsewhere. */
  private warnCannotCarry(): void {
    if (this.cannotCarryWarned) return;
    this.cannotCarryWarned = true;
    this.logger.warn(
      "an earlier turn of this message left calls unanswered that a later turn may make again, but the dispatcher has no keyFor (a CallDispatcher that is not core's Dispatcher, or wraps it without passing keyFor through): such a call runs under its own turn's key and may run again (TURN-23)",
    );
  }

  /** TURN-23 could not act: the dispatcher's turn() dropped `TurnDispatch.dispatch`'s options. */
  private warnAtDropped(carriedKey: string, key: string): void {
    if (this.atDroppedWarned) return;
    this.atDroppedWarned = true;
    this.logger.warn(
      "a call an earlier turn of its message left unanswered was dispatched under its own turn's key: the dispatcher's turn() does not pass TurnDispatch.dispatch's options ({ at }) through, so the call may have run again (TURN-23); a CallDispatcher that wraps another must forward them",
      { carriedKey, key },
    );
  }

  /**
   * The app's `retry.shouldRetry`, asked. One that throws is a policy that did not ask for a retry
   * (its error logged): the turn fails with its record, which tells what its calls did (RECORD-5).
   * Before, its error left runTurn bare: a payment made in the attempt was told as the policy's
   * error, "possibly", with no record, and the message stayed in progress, every re-send meeting
   * the same throw.
   */
  private policyRetries(failure: AttemptFailure, snapshot: TurnSnapshot): boolean {
    try {
      return Boolean(this.retry.shouldRetry(failure));
    } catch (error) {
      this.policyFailed("shouldRetry", snapshot, error);
      return false;
    }
  }

  /** The app's `retry.backoffMs(attempt)`, asked; undefined (no retry) when it throws, as `policyRetries`. */
  private policyBackoff(attempt: number, snapshot: TurnSnapshot): number | undefined {
    try {
      return this.retry.backoffMs(attempt);
    } catch (error) {
      this.policyFailed("backoffMs", snapshot, error);
      return undefined;
    }
  }

  private policyFailed(member: "shouldRetry" | "backoffMs", snapshot: TurnSnapshot, error: unknown): void {
    this.logger.warn(`the retry policy's ${member} threw; the turn is not retried and fails with its record`, {
      conversationId: snapshot.conversationId,
      turnIndex: snapshot.turnIndex,
      error: describe(error),
    });
  }

  /** Events are reports: a callback that throws is logged and changes nothing the runner does (OTEL-3). */
  private emit(event: Omit<RunnerEvent, "at"> & Record<string, unknown>): void {
    const { onEvent } = this.options;
    if (onEvent === undefined) return;
    const warn = (error: unknown) => {
      try {
        this.logger.warn("an onEvent callback threw; the runner carries on", {
          type: event.type,
          conversationId: event.conversationId,
          turnIndex: event.turnIndex,
          error: describe(error),
        });
      } catch {
        // A logger that throws cannot change the protocol either.
      }
    };
    try {
      const returned: unknown = onEvent({ at: Date.now(), ...event } as RunnerEvent);
      // An async callback's rejection is logged too, never left unhandled.
      if (typeof (returned as { then?: unknown } | undefined)?.then === "function") (returned as Promise<unknown>).then(undefined, warn);
    } catch (error) {
      warn(error);
    }
  }
}

/** Asks an abandoned stream's iterator to close, without waiting for it or hearing its errors. */
function closeQuietly(events: AsyncIterator<unknown> | undefined): void {
  try {
    const closing = events?.return?.();
    if (closing !== undefined) Promise.resolve(closing).catch(() => undefined);
  } catch {
    // A stream side's close that throws changes nothing: the attempt has already failed.
  }
}

/**
 * STREAM-11 whatever the stream side: a response that reached its finish event while holding a
 * call the runner never dispatched (still open: its side finished without its completing event;
 * or made final without a StreamStep saying so) cannot be committed, since the commit would carry
 * that call without its result, which the provider refuses on every later request. A failed
 * stream instead: open calls are abandoned, never run (STREAM-3), as a cut would leave them.
 */
function undispatchedAtFinish(accumulator: CallPhases<CallState>, finishEvent: string): StreamIncompleteError | undefined {
  const held = accumulator.calls.filter((c) => c.phase === "announced" || c.phase === "arguments_streaming" || c.phase === "complete");
  if (held.length === 0) return undefined;
  const named = held.map((c) => `${c.name} (${c.callId}, ${c.phase === "complete" ? "final but never handed to the runner" : "never completed"})`).join(", ");
  // A final call no StreamStep handed over was never run: abandoned with the open ones, not "during dispatch".
  for (const call of held) if (call.phase === "complete") call.phase = "abandoned";
  return new StreamIncompleteError(accumulator.eventsSeen, finishEvent, `${finishEvent} arrived while the response held calls the runner did not dispatch: ${named}`);
}

/** The idle bound's expiry, turned into the attempt's `StreamIncompleteError` (STREAM-16). */
class StreamIdle extends Error {
  constructor(readonly idleMs: number) {
    super(`no stream event for ${idleMs} ms`);
  }
}

/**
 * Races each wait of an attempt's stream (the response, every next event) against the idle bound
 * (STREAM-16). The losing wait is left behind, never awaited: a read pending when the request is
 * aborted may never settle (Node 20's fetch), and its late rejection is handled here (the
 * rejection handler given to its `then`).
 *
 * One timer per attempt, re-armed (`refresh`) at each wait, not one per stream event: the demo's
 * streams are about 30 events a turn and side, and a timer, two closures and a promise per event
 * were a few percent of what a side thread allocated. A wait settled before the timer fires hands
 * its value over through `settle`; the timer, when it fires, rejects the wait pending then (there
 * is always one: between two waits the runner does not yield to timers) unless it settles in the
 * same turn of the event loop (see `expire`).
 */
class IdleBound {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private resolvePending: ((value: unknown) => void) | undefined;
  private rejectPending: ((error: unknown) => void) | undefined;
  private readonly onValue = (value: unknown): void => {
    const resolve = this.resolvePending;
    this.resolvePending = this.rejectPending = undefined;
    resolve?.(value);
  };
  private readonly onError = (error: unknown): void => {
    const reject = this.rejectPending;
    this.resolvePending = this.rejectPending = undefined;
    reject?.(error);
  };
  private readonly expire = (): void => {
    // A wait that settled already was handed over; a late expiry with none pending does nothing.
    const pending = this.rejectPending;
    if (pending === undefined) return;
    // Judged after the poll phase, as withDeadline does: a timer due during a stall of this
    // process (a loaded host) runs before that turn's I/O is read, when the next event may be
    // waiting already. Only the wait pending when the timer fired expires: one that settled in
    // that poll phase was handed over, and a wait begun since re-armed the timer.
    setImmediate(() => {
      if (this.rejectPending === pending) this.onError(new StreamIdle(this.ms));
    });
  };
  constructor(private readonly ms: number) {}

  race<T>(wait: Promise<T>): Promise<T> {
    if (this.ms === Infinity) return wait;
    const raced = new Promise<T>((resolve, reject) => {
      this.resolvePending = resolve as (value: unknown) => void;
      this.rejectPending = reject;
    });
    if (this.timer === undefined) this.timer = setTimeout(this.expire, this.ms);
    else this.timer.refresh();
    // Settles `raced` unless the timer did first; its rejection is handled either way.
    wait.then(this.onValue, this.onError);
    return raced;
  }

  clear(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.resolvePending = this.rejectPending = undefined;
  }
}

/** Sends of one lease release before it is left to expire (see `TurnRunner.release`). */
const RELEASE_TRIES = 3;
/** Most give-backs one runner keeps owing across conversations (see `TurnRunner.oweGiveBack`). */
const MAX_OWED_GIVE_BACKS = 1_000;
/**
 * Longest an acquire whose reply was lost is sent again with its grant id (TURN-10, see
 * `TurnRunner.acquire`); never longer than the lease, past which a landed grant is over anyway.
 */
const ACQUIRE_RETRY_LIMIT_MS = 10_000;
/** First wait before an acquire is sent again; doubled each time up to ACQUIRE_BACKOFF_MAX_MS. */
const ACQUIRE_BACKOFF_MS = 25;
const ACQUIRE_BACKOFF_MAX_MS = 1_000;

/**
 * A stored record read as a failed-turn record (RECORD-2), its fields unchecked beyond `kind`:
 * records are the store's JSON and may have been written by another release.
 */
function failedTurnRecordOf(record: JsonValue): { messageId?: unknown; turnIndex?: unknown; calls?: unknown; effects?: unknown } | undefined {
  const r = record as { kind?: unknown } | null;
  return typeof r === "object" && r !== null && r.kind === "failed_turn" ? (r as { messageId?: unknown; turnIndex?: unknown; calls?: unknown; effects?: unknown }) : undefined;
}

/** A failed-turn record of the message `messageId`. */
function isFailedTurnRecordOf(record: JsonValue, messageId: string): boolean {
  return failedTurnRecordOf(record)?.messageId === messageId;
}

/** A failed-turn record of any message whose turn failed at `turnIndex`. */
function isFailedTurnRecordAt(record: JsonValue, turnIndex: number): boolean {
  return failedTurnRecordOf(record)?.turnIndex === turnIndex;
}

/** The earlier of two optional times. */
function earliest(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

/**
 * The call's place among the attempt's identical calls (TURN-4), counted as the dispatcher counts
 * them (the same key at ordinal 0 is the same identity): the ordinal of the key a TURN-23 refusal
 * carries. Undefined for a call that cannot be keyed (its dispatch raises what it raises).
 */
function ordinalAmongIdentical(
  direct: NonNullable<ReturnType<typeof carryingDispatcher>>,
  info: { conversationId: string; turnIndex: number },
  call: ToolCall,
  seen: Map<string, number>,
): number | undefined {
  let identity: string;
  try {
    identity = direct.keyFor(call, { conversationId: info.conversationId, turnIndex: info.turnIndex, ordinal: 0 });
  } catch {
    return undefined;
  }
  const ordinal = seen.get(identity) ?? 0;
  seen.set(identity, ordinal + 1);
  return ordinal;
}

/** The calls still carried after a committed turn (TURN-23): those its calls did not answer, then those its record lists. */
function carriedAfter(direct: ReturnType<typeof carryingDispatcher>, carry: Carry, outcome: TurnOutcome): Carry {
  // Most turns: nothing carried, nothing recorded (no allocation on the hot path).
  if (carry.calls.length === 0 && carry.paused === undefined && outcome.record === undefined) return carry;
  const keys = outcome.calls.flatMap((c) => (c.key !== undefined ? [c.key] : []));
  const answered = new Set(keys);
  const still = carry.calls.filter((c) => !answered.has(c.key));
  const paused = pausedAfter(carry.paused, outcome.record, keys);
  const record = outcome.record !== undefined && direct !== undefined ? withoutSlots(direct, outcome.conversationId, carry.paused, outcome.record) : outcome.record;
  return { calls: record !== undefined ? withRecord(still, record) : still, ...(paused !== undefined ? { paused } : {}) };
}

/**
 * The keys a turn's calls were dispatched under, as its commit keeps them (TURN-24): one entry per
 * call that had a key, in the turn's order, with its ordinal (absent for a call answered with an
 * error, as its report) and the turn it was carried from (TURN-23). Undefined when a keyed call's id
 * or key is one the store could not keep exactly (empty, too long): a read-back takes a call without
 * an entry for one that had no key, so such a turn is committed without keys and read back by
 * derivation, as before, rather than refused.
 */
function committedCallKeys(calls: readonly CallReport[]): CommittedCallKey[] | undefined {
  const keys: CommittedCallKey[] = [];
  for (const c of calls) {
    if (c.key === undefined) continue;
    const keepable = (text: string) => text.length > 0 && text.length <= MAX_CALL_KEY_LABEL_LENGTH && text.isWellFormed();
    if (!keepable(c.callId) || !keepable(c.key)) return undefined;
    keys.push({ callId: c.callId, key: c.key, ...(c.ordinal !== undefined ? { ordinal: c.ordinal } : {}), ...(c.carriedFromTurn !== undefined ? { carriedFromTurn: c.carriedFromTurn } : {}) });
  }
  return keys;
}

/**
 * A stored turn's call reports with the keys its commit kept (TURN-24), matched by call id in
 * order (a repeated id takes the next entry of it). A call without an entry had no key when it was
 * dispatched (refused before its key: an unknown tool, arguments that were not JSON) and gets none
 * now, whatever the definition now derives for it. A call's ordinal is its entry's; an error
 * answer's key has none, as its report at the first send.
 */
function withStoredKeys(calls: StoredTurnView["calls"], stored: readonly CommittedCallKey[]): CallReport[] {
  const used = new Set<number>();
  return calls.map(({ input: _input, ...call }): CallReport => {
    const report: CallReport = { ...call, replayed: true };
    const at = stored.findIndex((entry, i) => !used.has(i) && entry.callId === call.callId);
    if (at < 0) return report;
    used.add(at);
    const entry = stored[at]!;
    return { ...report, key: entry.key, ...(entry.ordinal !== undefined ? { ordinal: entry.ordinal } : {}), ...(entry.carriedFromTurn !== undefined ? { carriedFromTurn: entry.carriedFromTurn } : {}) };
  });
}

/**
 * Whether the snapshot's turn index was begun under an earlier turn lease (TURN-15). A store
 * that does not say (written before the field) is taken to have resumed: the record then says
 * "may have happened" where it cannot show otherwise, never a "not happened" it cannot back.
 */
function resumedTurn(snapshot: TurnSnapshot): boolean {
  return snapshot.resumed !== false;
}

/** Whether `produced` holds every turn of a message whose first turn is `firstTurnIndex`, in order, up to the last one produced. */
function producedEvery(produced: readonly TurnOutcome[], firstTurnIndex: number | undefined): boolean {
  return firstTurnIndex !== undefined && produced.length > 0 && produced.every((t, i) => t.turnIndex === firstTurnIndex + i);
}

function isResumedTurnRecordOf(record: JsonValue, messageId: string): boolean {
  const r = record as Partial<ResumedTurnRecord> | null;
  return typeof r === "object" && r !== null && r.kind === "resumed_turn" && r.messageId === messageId;
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return describeValue(error);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** JCS text of JSON data read back from the store; undefined where it cannot be made (too deep). */
function canonicalText(value: unknown): string | undefined {
  try {
    return canonicalize(value as JsonValue);
  } catch {
    return undefined;
  }
}

/**
 * The store's `store_unavailable` at a turn's end (its commit or its failure), told with what the
 * runner knew of each effect of the turn's calls (RECORD-9): without it the user hears "possibly"
 * of a payment the runner saw happen. The same code, so the same re-send completes the message
 * (TURN-7); the store's own error is its cause. Nothing to tell (no call had a key) leaves it as it was.
 */
function unstoredTurn(error: Error, known: FailedTurnRecord["effects"]): Error {
  const effects = known.flatMap((e): UnstoredEffect[] => (e.effect === "none" ? [] : [{ key: e.key, name: e.name, effect: e.effect, ...(e.input !== undefined ? { input: e.input } : {}) }]));
  if (effects.length === 0) return error;
  return new StoreUnavailableError(`${error.message}; the turn's end was not stored, and its calls' effects are known: ${effects.map((e) => `${e.name} ${e.effect}`).join(", ")} (re-send the same message id to complete it)`, { cause: error, effects });
}

/** A `.catch` for a record written at a turn's end: a `store_unavailable` is told with what the calls did (RECORD-9). */
function toldUnstored(known: FailedTurnRecord["effects"]): (error: unknown) => never {
  return (error) => {
    throw isDispatchOnceError(error, "store_unavailable") ? unstoredTurn(error, known) : error;
  };
}
