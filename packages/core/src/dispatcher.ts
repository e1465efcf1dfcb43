import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import { canonicalize, flatArgumentTexts, type JsonValue } from "./canonical.js";
import {
  ClaimReleasedError,
  DurabilityMismatchError,
  IdempotencyKeyReusedError,
  InFlightElsewhereError,
  InvalidArgumentError,
  InvalidToolDefinitionError,
  LedgerCorruptError,
  LedgerUnavailableError,
  OutcomeUnknownError,
  ResultNotStorableError,
  StaleClaimError,
  ToolError,
  ToolFailedError,
  ToolInputError,
  describeValue,
  isDispatchOnceError,
  type StoredError,
} from "./errors/index.js";
import { catalogueEntry, effectOf } from "./error-catalogue.js";
import { deriveKeyFromParts } from "./key.js";
import { jsonDataTexts, toJsonData } from "./json-data.js";
import { newClaimId, type Resolution, type ResolvedRow, type ClaimRequest, type ClaimResult, type InFlightRow, type Ledger, type LedgerEffect, type LedgerRow, type TerminalRow } from "./ledger.js";
import { utf8ByteLength } from "./memory-ledger.js";
import { ToolRegistry, type ReconcileCause, type ToolDefinition, type ToolRunContext } from "./registry.js";
import { RenewalWheel, type RenewalEntry } from "./renewals.js";
import { RunDeadline, RunDeadlines } from "./run-deadlines.js";
import { MAX_LEASE_MS } from "./internal/leases.js";
import { loggerOption } from "./internal/logger.js";
import { MAX_TIMER_MS, unknownOptionMessage, unknownOptionName, type OptionNames } from "./internal/options.js";
import { sameData, sameJsonData } from "./same-json.js";
import { DefinitionGuard, type DefinitionGuardDeps } from "./definition-guard.js";

/** Where a call sits: identical across every replay of the turn (spec §4). */
export interface TurnContext {
  conversationId: string;
  turnIndex: number;
  /**
   * The turn index was begun before under an earlier turn-lease grant (`TurnSnapshot.resumed`,
   * TURN-15): that holder's run of a call may still be alive (a paused process) and may claim
   * the key after this run releases it. A not-performed failure then speaks for this run only,
   * and the call may have happened. Not part of the key.
   *
   * It also marks the turn index as one that ran before (a take-over, a failed message's re-send
   * at its bound index, a new message at a failed turn's index: TURN-12, TURN-15), possibly under
   * another definition of a tool: at its first write call the dispatcher lists the turn's rows
   * once and dispatches a call whose key changed with its tool's definition under the row its
   * first run made (IDENT-10). A first run (absent or false) lists nothing.
   */
  resumed?: boolean;
  /**
   * With `resumed`: the turn index holds the calls of several asks (AISDK-17: two tabs' user
   * messages at one index), and a ledger row does not say which ask made it. A row of another
   * definition that the call matches may then be another ask's, so the guard never answers the call
   * from it: it refuses the call (`tool_definition_changed`, `ambiguous`) before anything is
   * claimed, as it does when several rows match (IDENT-10). Not part of the key.
   */
  sharedTurn?: boolean;
}

export interface ToolCall {
  name: string;
  /** The arguments exactly as the model produced them. */
  input: unknown;
  /** The provider's call id (toolu_...), for logs only: it never enters the key (KEY-9). */
  callId?: string;
}

export interface DispatchOutcome {
  key: string;
  toolName: string;
  effect: ToolDefinition["effect"];
  ordinal: number;
  /** The parse of the stored JSON text: identical on the first run and every replay (DISPATCH-5). */
  result: JsonValue;
  resultJson: string;
  /** True when the result came from the ledger and the tool did not run in this call. */
  replayed: boolean;
  /**
   * The request this outcome belongs to, present only when it is not this call's: the call was
   * re-worded outside its identity (a memo), so the stored first request is what was replayed
   * or re-run (IDENT-3, LEDGER-21). Show this, not the call's arguments, as what was done.
   * Absent when the two are the same JSON data (member order and number spelling aside).
   */
  storedRequest?: JsonValue;
  /**
   * The earlier turn index the call was dispatched at (`TurnDispatch.dispatch`'s `options.at`,
   * TURN-23), present only then. Its key need not be the one derived there: IDENT-10's guard at
   * that index may answer it from a row an earlier definition of its tool made. A caller tells
   * from this, not from the key, that `at` was honoured (a wrapper that drops the options
   * returns an outcome without it).
   * @example 0
   */
  dispatchedAt?: number;
}

/** The ledger writes that record a claimed run's outcome (DISPATCH-10, DISPATCH-17). */
export type RecordWrite = "complete" | "fail" | "markUnknown" | "release";

/**
 * What a claimed run established about its effect, in the failed-turn record's words (RECORD-2),
 * on its `recorded` or `record_failed` event (OTEL-5): `happened` when its tool returned a result
 * (stored, unstorable, or unrecorded) or a probe found it performed; `not_happened` for a definite
 * failure, or a release as not performed that nothing earlier can have acted on (LEDGER-8), once
 * recorded; `may_have_happened` otherwise (a `record_failed` of any other write among them).
 */
export type RunEffect = "happened" | "not_happened" | "may_have_happened";

export type DispatchEvent =
  | { type: "claimed"; key: string; toolName: string; ordinal: number; fence: number; takeover: boolean }
  | { type: "run_started"; key: string; toolName: string; ordinal: number }
  /** The tool returned or threw. `fence` is the run's claim (OTEL-4): a run that lost its claim reports this while a takeover holds its key. */
  | { type: "run_finished"; key: string; toolName: string; ordinal: number; fence: number; ok: boolean }
  | { type: "replayed"; key: string; toolName: string; ordinal: number; state: TerminalRow["state"]; effect?: RunEffect }
  | { type: "waiting"; key: string; toolName: string; ordinal: number; owner: string }
  | { type: "released"; key: string; toolName: string; ordinal: number; effectMayHaveHappened: boolean }
  /**
   * The row's stored request differs from this dispatch's arguments (outside the identity,
   * e.g. a re-worded memo): the stored one is what runs or is replayed (IDENT-3, LEDGER-21).
   */
  | { type: "request_differs"; key: string; toolName: string; ordinal: number; stored: string; replay: string }
  /**
   * The claim was lost while the tool ran: refused renewal (stale_claim), or renewals that
   * could not reach the ledger past the lease (self-fencing, DISPATCH-13). The tool was aborted.
   * `fence` is the lost claim's: the key may already be held by a takeover (OTEL-4).
   */
  | { type: "lease_lost"; key: string; toolName: string; ordinal: number; fence: number; reason: "stale_claim" | "lease_unconfirmed" }
  /**
   * The run did not settle within its run timeout (DISPATCH-18): its signal was aborted, its lease
   * is no longer renewed, and the dispatch answered `in_flight_elsewhere`. A run that settles later
   * is recorded under `fence` (its `run_finished` and `recorded` or `record_failed` follow). A read
   * has no fence: nothing was claimed.
   */
  | { type: "run_timed_out"; key: string; toolName: string; ordinal: number; fence?: number; runTimeoutMs: number }
  /**
   * A claim could not reach the ledger (it may have been applied, its reply lost): it is sent
   * again with the same claim id, which the ledger recognises as the same claim (LEDGER-26).
   */
  | { type: "claim_retry"; key: string; toolName: string; ordinal: number; attempt: number; error: string }
  /**
   * The claim retries ran out: the claim is released in the background by its claim id (claimed
   * again with it, then released), so a row it may have written is not left to expire into
   * `unknown` (LEDGER-26). `released` says whether a row was found and released.
   */
  | { type: "lost_claim_settled"; key: string; toolName: string; ordinal: number; released: boolean }
  /**
   * A dispatch one of whose claims met ledger_unavailable has ended, and its claim id is retired
   * on a ledger that offers retire (LEDGER-28, DISPATCH-16): a copy of the claim that reaches the
   * store later is refused. `released` says whether a row the claim had written, and the dispatch
   * never took, was released with it.
   */
  | { type: "claim_retired"; key: string; toolName: string; ordinal: number; released: boolean }
  /**
   * A record of this run's outcome could not reach the ledger after the tool ran: it is sent
   * again with the same fence for up to `recordRetryMs` (DISPATCH-10). `write` is the ledger
   * operation; `attempt` counts the re-sends from 1.
   */
  | { type: "record_retry"; key: string; toolName: string; ordinal: number; fence: number; write: RecordWrite; attempt: number; error: string }
  /**
   * This run's last write never went into the ledger: refused (stale_claim: the claim was lost),
   * or out of reach past `recordRetryMs` (DISPATCH-10). `state` is what it would have recorded;
   * the row is left as it was (in flight until its lease runs out, or another claim's). The last
   * event of such a run: no `recorded` follows (OTEL-4). `fence` is the run's: a run that lost its
   * claim reports this while the claim's new holder runs under the same key.
   */
  | { type: "record_failed"; key: string; toolName: string; ordinal: number; fence: number; write: RecordWrite; state: "completed" | "failed" | "unknown" | "released"; effect?: RunEffect; error: string }
  /**
   * This run's outcome went into the ledger (the last write of a claimed run; absent when the write
   * was refused: `record_failed`). `effect` (on this and `record_failed`, always given by this
   * dispatcher) says what the run established of its effect, which `state` alone cannot: a
   * `failed` row closed on an unstorable result happened (OTEL-5). A release after the tool ran carries `effectMayHaveHappened`,
   * as the `released` event that follows does: this is the run's last event, so telemetry can say
   * it on the run's own span.
   */
  | { type: "recorded"; key: string; toolName: string; ordinal: number; state: "completed" | "failed" | "unknown" | "released"; effect?: RunEffect; effectMayHaveHappened?: boolean }
  /**
   * A reconcile probe answered (RECON-10). `verdict` is the probe's answer (`error`: it threw or
   * answered something that is not a verdict); `settled` is what the dispatcher writes for it
   * (`none` on demand), confirmed by the `recorded` event that follows; a write refused (stale
   * fence) has no `recorded` event. No ordinal on demand.
   */
  | {
      type: "reconciled";
      key: string;
      toolName: string;
      ordinal?: number;
      /** The fence of the run whose outcome the probe settles (absent on demand): a run that lost its claim may probe while a takeover runs under the key. */
      fence?: number;
      cause: ReconcileCause;
      verdict: ProbeVerdict;
      settled: "completed" | "failed" | "released" | "unknown" | "none";
      error?: string;
    }
  /** A row was settled through the ledger's resolve(), by reconciliation (RESOLVE-6). */
  | { type: "resolved"; key: string; toolName: string; state: ResolvedRow["state"]; fence: number; actor: string };

/** A probe's answer as the dispatcher saw it; `error` when it threw or did not answer a verdict. */
export type ProbeVerdict = "performed" | "not_performed" | "unknown" | "error";

/** How the reason of a row left unknown after request_mismatch begins (RECON-6): reconcile reads it. */
const REQUEST_MISMATCH_REASON = "request_mismatch";

/** The actor a dispatcher's reconciliation is audited under (RESOLVE-6). */
export const RECONCILE_ACTOR = "dispatch-once:reconcile";

/** How long the automatic pass waits for one probe's answer (`reconcileUnknown`'s `probeTimeoutMs`). */
export const DEFAULT_PROBE_TIMEOUT_MS = 30_000;

/**
 * How long one tool run may take before its dispatch stops waiting for it (`runTimeoutMs`,
 * DISPATCH-18): five minutes, as the runner's stream idle bound (STREAM-16), far above any tool a
 * turn should wait on, so only a run that will never answer meets it.
 */
export const DEFAULT_RUN_TIMEOUT_MS = 300_000;

/** The options of `Dispatcher.reconcileUnknown` (RESOLVE-6). */
export interface ReconcileUnknownOptions {
  /**
   * Only rows that have been unknown at least this long.
   * @default undefined (every unknown row)
   * @example { olderThanMs: 60_000 }
   */
  olderThanMs?: number;
  /**
   * At most this many rows are reconciled in one pass.
   * @default 100
   * @example { limit: 500 }
   */
  limit?: number;
  /**
   * How long one probe may take, in milliseconds (an integer from 1 to 2^31 - 1): its signal
   * aborts then, and a probe that has not answered gives verdict `error` and writes nothing, as
   * with `reconcile(key, { signal: AbortSignal.timeout(probeTimeoutMs) })`.
   * @default 30000 (DEFAULT_PROBE_TIMEOUT_MS)
   * @example { probeTimeoutMs: 10_000 }
   */
  probeTimeoutMs?: number;
  /**
   * Bounds the whole pass (shutdown, a deadline): when it aborts, the probe in flight is aborted
   * (verdict `error`, nothing written), no later row is probed, and the reports so far are returned.
   * @default undefined (the pass ends when every row was reconciled)
   * @example { signal: AbortSignal.timeout(5 * 60_000) }
   */
  signal?: AbortSignal;
}

/** What `Dispatcher.reconcile(key)` found (RECON-9) and what it settled the row to (RESOLVE-6). */
export interface ReconcileReport {
  key: string;
  toolName?: string;
  state: LedgerRow["state"] | "absent";
  /** `none`: no probe ran (the row is not unknown, or its tool has no probe or is not registered). */
  verdict: ProbeVerdict | "none";
  /** The downstream's result, when the verdict is performed and the result is JSON data. */
  result?: JsonValue;
  resultJson?: string;
  detail?: string;
  /** What the row was resolved to; `none` when it was left as it was. */
  settled: "completed" | "failed" | "released" | "none";
  /** The row as the resolution wrote it, when one was written. */
  row?: ResolvedRow;
}

export interface DispatchLogger {
  warn(message: string, fields?: Record<string, unknown>): void;
}

export interface DispatcherOptions {
  /**
   * The tools this dispatcher may run: a ToolRegistry, or an array of tool definitions it wraps in one.
   * @example new Dispatcher({ tools: [sendPayment], ledger })
   * @example new Dispatcher({ tools: new ToolRegistry([sendPayment]), ledger })
   */
  tools: ToolRegistry | readonly ToolDefinition<any, any>[];
  /**
   * Where claims and outcomes are recorded. unkeyed_write tools need a durable one (LEDGER-14).
   * @example new Dispatcher({ tools, ledger: new MemoryLedger() })
   */
  ledger: Ledger;
  /**
   * Identifies this process in ledger rows; diagnostics only.
   * @default "<hostname>:<pid>:<8 random hex characters>" (os.hostname(), process.pid and the start of a random UUID)
   * @example new Dispatcher({ tools, ledger, owner: "worker-1" })
   */
  owner?: string;
  /**
   * Lease on a claim; renewed every third of it while the tool runs (LEDGER-9). Default 30 s.
   * @default 30000
   * @example new Dispatcher({ tools, ledger, leaseMs: 60_000 })
   */
  leaseMs?: number;
  /**
   * How long a caller waits on another attempt's in-flight claim before giving up (LEDGER-15). Default 10 s.
   * @default 10000
   * @example new Dispatcher({ tools, ledger, waitMs: 30_000 })
   */
  waitMs?: number;
  /**
   * First back-off between re-claims while waiting; doubles up to `maxPollMs`. Default 20 ms.
   * @default 20
   * @example new Dispatcher({ tools, ledger, pollMs: 50 })
   */
  pollMs?: number;
  /**
   * Longest back-off between re-claims while waiting. Default 500 ms.
   * @default 500
   * @example new Dispatcher({ tools, ledger, maxPollMs: 1_000 })
   */
  maxPollMs?: number;
  /**
   * How long a claim that fails with ledger_unavailable is sent again, with the same claim id,
   * before the dispatch fails with ledger_unavailable (LEDGER-26). Default 2 s. After that the
   * claim is released in the background (for at most the lease plus a minute) by its claim id.
   * @default 2000
   * @example new Dispatcher({ tools, ledger, claimRetryMs: 8_000 })
   */
  claimRetryMs?: number;
  /**
   * How long a record of a run's outcome (`complete`, `fail`, `markUnknown`, `release`) that
   * fails with ledger_unavailable is sent again, with the same fence, before the dispatch fails
   * with ledger_unavailable (DISPATCH-10). The effect has happened by then, so a brief outage of
   * the ledger should not turn its known outcome into "may have happened". A re-send refused with
   * stale_claim is settled by reading the row: the first copy may have landed, its reply lost
   * (DISPATCH-17). 0 sends each record once.
   * @default 2000
   * @example new Dispatcher({ tools, ledger, recordRetryMs: 10_000 })
   */
  recordRetryMs?: number;
  /**
   * How long an unkeyed_write row must have been `unknown` before a probe's "not performed" may
   * release it (RECON-4, RESOLVE-6): a request still in transit when the probe asked may land
   * later, and nothing downstream would collapse the re-run with it. Measured on the ledger's
   * clock, from the row's `finishedAt` to the moment the probe is asked (a listing of unknown
   * rows at least this old, LIST-1), never on this process's clock, which may run ahead of the
   * store's, and never up to when the answer came back.
   * @default 60000
   * @example new Dispatcher({ tools, ledger, reconcileGraceMs: 300_000 })
   */
  reconcileGraceMs?: number;
  /**
   * How long one run of a tool may take, in milliseconds, before the dispatch stops waiting for it
   * (DISPATCH-18, a start-to-close timeout): an integer from 1 to 2^31 - 1, or `Infinity` for no
   * bound; a tool's own `runTimeoutMs` overrides it. When it passes, the run's signal aborts, its
   * claim's lease is no longer renewed, and the dispatch fails with `in_flight_elsewhere` carrying
   * `runTimeoutMs` (the effect may have happened). The row is not written then: a run that settles
   * later is recorded under its own fence (a completion lands unless the row was taken over
   * meanwhile); one that never settles leaves the row to its lease (LEDGER-7: a keyed_write is
   * taken over and re-run under the same key, an unkeyed_write turns `unknown`).
   * @default 300000 (DEFAULT_RUN_TIMEOUT_MS)
   * @example new Dispatcher({ tools, ledger, runTimeoutMs: 60_000 })
   * @example new Dispatcher({ tools, ledger, runTimeoutMs: Infinity }) // wait for every run, however long
   */
  runTimeoutMs?: number;
  /**
   * Run unkeyed_write tools on a ledger that declares itself volatile. Refused by default
   * because such a ledger can forget a claim and nothing downstream would catch the repeat (LEDGER-14).
   * @default false (the constructor throws DurabilityMismatchError for unkeyed_write tools on a volatile ledger)
   * @example new Dispatcher({ tools: [sendPayment], ledger: new MemoryLedger(), allowVolatileLedgerForUnkeyedWrites: true })
   */
  allowVolatileLedgerForUnkeyedWrites?: boolean;
  /**
   * Receives the dispatcher's warnings (failed lease renewals, lost claims released, repeated calls in a turn, ...).
   * A logger that throws, or returns a promise that rejects, changes nothing a dispatch does or tells and
   * leaves no unhandled rejection: that warning goes to console.error, with why the logger failed.
   * Warnings carry keys, tool names and field names, never argument values (a re-worded replay names
   * its `differingFields`; the `request_differs` event carries both requests for who wants them).
   * @default console.warn, each message prefixed with "[dispatch-once]"
   * @example new Dispatcher({ tools, ledger, logger: console })
   */
  logger?: DispatchLogger;
  /**
   * Called with each DispatchEvent (claimed, replayed, recorded, reconciled, ...) as it happens, e.g. for telemetry.
   * A callback that throws, or returns a promise that rejects, changes nothing a dispatch does or tells: its
   * error goes to the logger (OTEL-3).
   * @default none (no events are reported)
   * @example new Dispatcher({ tools, ledger, onEvent: telemetry.onDispatchEvent })
   */
  onEvent?: (event: DispatchEvent) => void;
}

/** What the stream side needs from a dispatcher; the guarded one and the unguarded baseline both provide it. */
export interface CallDispatcher {
  turn(context: TurnContext): TurnDispatch;
  /** The effect class of a registered tool, so a runner can tell reads from writes in its records. */
  effectClassOf?(toolName: string): ToolDefinition["effect"] | undefined;
}

export interface TurnDispatch {
  /**
   * Dispatch a call whose content_block_stop has arrived; ordinals follow the order of these calls.
   * `options.at` dispatches it under the key an earlier turn of the same conversation gave it (a
   * runner's TURN-23: the call an earlier turn's re-run left unanswered, made again): at that turn
   * index and ordinal, as a turn that ran before (`resumed`). The call still counts among this
   * turn's identical calls (TURN-4), so a later identical call's ordinal is the same in every attempt.
   */
  dispatch(call: ToolCall, options?: TurnDispatchOptions): Promise<DispatchOutcome>;
}

/** Where a call of a turn is dispatched when not at its own position (TurnDispatch.dispatch). */
export interface TurnDispatchOptions {
  /**
   * The turn index and ordinal whose key the call takes: an earlier turn of the conversation.
   * @default undefined (the call's own turn index and ordinal)
   * @example { at: { turnIndex: 4, ordinal: 0 } }
   */
  at?: {
    turnIndex: number;
    ordinal: number;
    /**
     * Keys of rows at that turn index that a committed turn already answered (a resumed turn's slot,
     * TURN-23): IDENT-10's guard there never answers the call from one of them, though it may match
     * any other row made under an earlier definition (an attempt's row a deploy left behind).
     * @default [] (every row of an earlier definition there may be matched)
     * @example { at: { turnIndex: 0, ordinal: 1, answered: ["3a5f2386..."] } }
     */
    answered?: readonly string[];
  };
}

/** What claimAndRun() learns about its claims, for retiring the claim id when the dispatch ends. */
interface ClaimState {
  /** The dispatch's one claim id (LEDGER-26). */
  readonly claimId: string;
  /** A claim met ledger_unavailable: it may have been applied, and a copy may still arrive. */
  unavailable: boolean;
  /** The dispatch received `claimed`: its tool runs (or ran) under the claim id. */
  took: boolean;
  /** The claim id was retired already (before this dispatch released its own row). */
  retired: boolean;
}

interface PreparedCall {
  tool: ToolDefinition;
  args: unknown;
  /** Canonical text of what identifies the call: the identity projection or all arguments. */
  identityText: string;
  /**
   * JSON text of all validated arguments, members in the order the schema produced them: what
   * a write asks the downstream to do, stored by the first claim so that every re-run sends
   * the same bytes (LEDGER-21). Order-preserving, because downstreams that fingerprint the raw
   * body would otherwise see a re-run as a different request.
   */
  requestText: string;
  /** JCS text of all validated arguments: compared when a stored request differs in bytes. */
  requestCanonical: string;
  /** JCS text of the tool's `comparedFields` projection (IDENT-9): only a difference there refuses. */
  comparedCanonical?: string;
}

/**
 * The exactly-once dispatcher (spec §7): validate, derive the key, claim before running,
 * run with the key, record the outcome, and answer repeats from the ledger.
 */
export class Dispatcher implements CallDispatcher {
  readonly registry: ToolRegistry;
  readonly ledger: Ledger;
  readonly owner: string;
  private readonly leaseMs: number;
  private readonly waitMs: number;
  private readonly pollMs: number;
  private readonly maxPollMs: number;
  private readonly claimRetryMs: number;
  private readonly recordRetryMs: number;
  /** The bound of one run of a tool without its own (DISPATCH-18); Infinity: none. */
  private readonly runTimeoutMs: number;
  /** The ledger offers retire (LEDGER-28): lost claims are settled by retiring their claim ids. */
  private readonly retires: boolean;
  /**
   * The claim state of each running dispatch one of whose claims met ledger_unavailable, by the
   * dispatch's `base` object: only then does a release of its own row retire the claim id first
   * (releaseOwn). Entered when the claim first meets it, not on every dispatch.
   */
  private readonly claimsOf = new WeakMap<object, ClaimState>();
  private readonly reconcileGraceMs: number;
  private readonly logger: DispatchLogger;
  private readonly onEvent: ((event: DispatchEvent) => void) | undefined;
  /** Renews the leases of every call this dispatcher is running, on one timer (LEDGER-9). */
  private readonly renewals: RenewalWheel<HeldLease>;
  /** The bounds of pending runs (DISPATCH-18): one timer per distinct bound, not one per run. */
  private readonly deadlines = new RunDeadlines();
  /** Tools already warned about key arguments not in NFC (IDENT-8): once each, not per call. */
  private nfcWarned: Set<string> | undefined;
  /** What the IDENT-10 guards of re-run turns read through, made at the first one. */
  private definitionGuardDeps: DefinitionGuardDeps | undefined;
  /** Warned that the ledger does not list rows, so IDENT-10 cannot act: once per dispatcher. */
  private unlistedWarned = false;

  constructor(options: DispatcherOptions) {
    if (typeof options !== "object" || options === null) {
      throw new InvalidArgumentError("options", "the Dispatcher needs { tools, ledger }");
    }
    // A misspelt option (leasMs) would be ignored and its default used, silently (ERR-1).
    const unknownOption = unknownOptionName(options, DISPATCHER_OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidArgumentError(`options.${unknownOption}`, unknownOptionMessage("Dispatcher", DISPATCHER_OPTION_NAMES));
    this.registry = toRegistry(options.tools);
    if (typeof options.ledger?.claim !== "function") {
      throw new InvalidArgumentError("options.ledger", "must be a Ledger (an object with claim, complete, ...)");
    }
    // Read below (durability, supports): without it the constructor failed with a bare TypeError.
    if (typeof options.ledger.capabilities !== "object" || options.ledger.capabilities === null) {
      throw new InvalidArgumentError("options.ledger", `must be a Ledger: its capabilities is ${describeValue(options.ledger.capabilities)}`);
    }
    if (options.allowVolatileLedgerForUnkeyedWrites !== undefined && typeof options.allowVolatileLedgerForUnkeyedWrites !== "boolean") {
      throw new InvalidArgumentError("options.allowVolatileLedgerForUnkeyedWrites", `must be a boolean, got ${describeValue(options.allowVolatileLedgerForUnkeyedWrites)}`);
    }
    this.ledger = options.ledger;
    if (options.owner !== undefined && (typeof options.owner !== "string" || options.owner === "")) {
      throw new InvalidArgumentError("options.owner", `must be a non-empty string, got ${describeValue(options.owner)}`);
    }
    this.owner = options.owner ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    // Checked here, once: a value the dispatcher cannot use would otherwise be acted on at
    // dispatch time (a lease of 0 ms ends at its claim, and another attempt takes the row over
    // while the tool still runs) or refused by the ledger as if the ledger were at fault.
    this.leaseMs = millis(options.leaseMs, 30_000, "leaseMs", 1, MAX_LEASE_MS);
    this.waitMs = millis(options.waitMs, 10_000, "waitMs", 0);
    this.pollMs = millis(options.pollMs, 20, "pollMs", 1);
    this.maxPollMs = millis(options.maxPollMs, 500, "maxPollMs", this.pollMs);
    this.claimRetryMs = millis(options.claimRetryMs, 2_000, "claimRetryMs", 0);
    this.recordRetryMs = millis(options.recordRetryMs, 2_000, "recordRetryMs", 0);
    this.runTimeoutMs = options.runTimeoutMs === Infinity ? Infinity : millis(options.runTimeoutMs, DEFAULT_RUN_TIMEOUT_MS, "runTimeoutMs", 1, MAX_TIMER_MS);
    this.retires = options.ledger.capabilities.supports?.retire === true && typeof options.ledger.retire === "function";
    this.reconcileGraceMs = options.reconcileGraceMs ?? 60_000;
    if (!Number.isSafeInteger(this.reconcileGraceMs) || this.reconcileGraceMs < 0) {
      throw new InvalidArgumentError("options.reconcileGraceMs", "must be a non-negative integer");
    }
    this.logger = loggerOption(options.logger);
    if (options.onEvent !== undefined && typeof options.onEvent !== "function") {
      throw new InvalidArgumentError("options.onEvent", `must be a function, got ${describeValue(options.onEvent)}`);
    }
    this.onEvent = options.onEvent;
    this.renewals = new RenewalWheel<HeldLease>(Math.max(1, Math.floor(this.leaseMs / 3)), (lease) => this.renewLease(lease));

    const unkeyed = this.registry.list().filter((t) => t.effect === "unkeyed_write").map((t) => t.name);
    if (unkeyed.length > 0 && this.ledger.capabilities.durability !== "durable") {
      // A ledger that decides its durability by probing the server (PostgreSQL's) declares
      // "volatile" until the probe ran: the likely cause is a Dispatcher created before it.
      const probes = typeof (this.ledger as { probeDurability?: unknown }).probeDurability === "function";
      const message =
        `unkeyed_write tools (${unkeyed.join(", ")}) need a durable ledger: this one declares durability "volatile" ` +
        `(it can lose acknowledged rows), and nothing downstream would catch the repeat` +
        (probes
          ? `. This ledger decides its durability by a probe and declares "volatile" until migrate() or ` +
            `probeDurability() has run: await one of them before creating the Dispatcher (if it has run, ` +
            `probeDurability()'s reasons say which server setting is not durable)`
          : "");
      if (!options.allowVolatileLedgerForUnkeyedWrites) throw new DurabilityMismatchError(unkeyed, message);
      this.logger.warn(`${message} (allowed by allowVolatileLedgerForUnkeyedWrites)`, { tools: unkeyed });
    }
  }

  effectClassOf(toolName: string): ToolDefinition["effect"] | undefined {
    return this.registry.has(toolName) ? this.registry.get(toolName).effect : undefined;
  }

  /** A per-attempt dispatcher that assigns ordinals in dispatch order (TURN-4, TURN-6). */
  turn(context: TurnContext): TurnDispatch {
    checkTurnContext(context, TURN_CONTEXT_MEMBERS);
    // The first call's identity alone, and a Map of every identity's count only from a second
    // call on: most turns dispatch one call (a Map per turn was a measurable allocation).
    let first: string | undefined;
    let seen: Map<string, number> | undefined;
    // IDENT-10: made at the first write call of a re-run turn only (a first run lists nothing).
    let guard: DefinitionGuard | undefined;
    // IDENT-10 for calls dispatched at an earlier turn (TURN-23's { at }): one guard per turn index,
    // as the turn's own, so that a row one call adopted is not another's. A guard per call let two
    // calls carried across a deploy both adopt one row: two calls answered by one run (DISPATCH-6).
    let atGuards: Map<number, DefinitionGuard> | undefined;
    return {
      dispatch: (call: ToolCall, options?: TurnDispatchOptions) => {
        // Everything up to the ordinal is synchronous, so ordinals follow call order.
        let prepared: PreparedCall;
        let at: (TurnContext & { ordinal: number }) | undefined;
        try {
          at = options === undefined ? undefined : dispatchedAt(options, context);
          prepared = this.prepare(call);
        } catch (error) {
          return Promise.reject(error);
        }
        const identity = `${prepared.tool.name}|${prepared.identityText}`;
        let ordinal = 0;
        if (first === undefined) {
          first = identity;
        } else {
          seen ??= new Map([[first, 1]]);
          ordinal = seen.get(identity) ?? 0;
          seen.set(identity, ordinal + 1);
        }
        if (ordinal > 0) {
          // Usually a model error, but it may be meant: run it and make it visible (DISPATCH-6).
          this.logger.warn("the same call appears more than once in one turn; running it again", {
            tool: prepared.tool.name,
            ordinal,
            conversationId: context.conversationId,
            turnIndex: context.turnIndex,
          });
        }
        if (at !== undefined) {
          // TURN-23: under the earlier turn's key, having taken its ordinal here all the same.
          const dispatchedAt = at.turnIndex;
          const stamped = (outcome: DispatchOutcome): DispatchOutcome => ({ ...outcome, dispatchedAt });
          if (!guardable(prepared.tool)) return this.execute(prepared, at, at.ordinal).then(stamped);
          atGuards ??= new Map();
          let atGuard = atGuards.get(at.turnIndex);
          if (atGuard === undefined) atGuards.set(at.turnIndex, (atGuard = new DefinitionGuard(this.guardDeps(), at.conversationId, at.turnIndex)));
          return this.guarded(atGuard, prepared, at, at.ordinal, options?.at?.answered).then(stamped);
        }
        if (context.resumed === true && guardable(prepared.tool)) {
          guard ??= new DefinitionGuard(this.guardDeps(), context.conversationId, context.turnIndex, context.sharedTurn === true);
          return this.guarded(guard, prepared, context, ordinal);
        }
        return this.execute(prepared, context, ordinal);
      },
    };
  }

  /** Dispatch one call at an explicit ordinal (absent: 0; present, it must be a valid ordinal, KEY-4). */
  async dispatch(call: ToolCall, context: TurnContext & { ordinal?: number }): Promise<DispatchOutcome> {
    checkTurnContext(context);
    const prepared = this.prepare(call);
    // IDENT-10 for a single call: its own listing (turn() lists once for all its calls).
    if (context.resumed === true && guardable(prepared.tool)) {
      return this.guarded(new DefinitionGuard(this.guardDeps(), context.conversationId, context.turnIndex, context.sharedTurn === true), prepared, context, ordinalOf(context));
    }
    return this.execute(prepared, context, ordinalOf(context));
  }

  /**
   * A write of a re-run turn (IDENT-10): under the key of the row an earlier definition of its tool
   * made for it, when the turn holds one, else under its own. Nothing is claimed before the guard answers.
   */
  private async guarded(guard: DefinitionGuard, prepared: PreparedCall, context: TurnContext, ordinal: number, excluded?: readonly string[]): Promise<DispatchOutcome> {
    const own = this.keyOf(prepared, context, ordinal);
    const key = await guard.keyOf(prepared.tool.name, own, ordinal, prepared.requestCanonical, excluded);
    if (key !== own) {
      this.logger.warn("this call's key changed with its tool's definition since the turn ran before; dispatched under the earlier run's key (IDENT-10)", {
        tool: prepared.tool.name,
        key,
        derivedKey: own,
        conversationId: context.conversationId,
        turnIndex: context.turnIndex,
      });
    }
    return this.claimAndRun(prepared, context, ordinal, key);
  }

  /** What a DefinitionGuard needs of this dispatcher, made once. */
  private guardDeps(): DefinitionGuardDeps {
    // A row is keyed at up to 6 500 ordinals (checkRowDefinition): its call is prepared once, not per ordinal.
    let last: { call: ToolCall; prepared: PreparedCall } | undefined;
    return (this.definitionGuardDeps ??= {
      ledger: this.ledger,
      registry: this.registry,
      keyFor: (call, at) => {
        if (last?.call !== call) last = { call, prepared: this.prepare(call) };
        return this.keyOf(last.prepared, at, at.ordinal);
      },
      requestCanonical: (name, input) => this.prepare({ name, input }).requestCanonical,
      unlisted: () => {
        if (this.unlistedWarned) return;
        this.unlistedWarned = true;
        this.logger.warn(
          "the ledger does not list rows (capabilities.supports.listRows): a re-run turn cannot find rows made under an earlier definition of a tool (IDENT-10); " +
            "after a deploy that changes a write tool's identity or schema, a re-run of a turn that ran before it may perform a call again",
        );
      },
    });
  }

  /** The key a call would get, without claiming or running anything. */
  keyFor(call: ToolCall, context: TurnContext & { ordinal?: number }): string {
    checkTurnContext(context);
    const prepared = this.prepare(call);
    return this.keyOf(prepared, context, ordinalOf(context));
  }

  /**
   * Ask an `unknown` row's tool whether the effect happened, and settle the row from the answer
   * (RECON-9, RESOLVE-6) when the ledger offers `resolve`: performed with a storable result →
   * completed; performed without one → failed closed with result_not_storable; not performed →
   * released (a replay re-runs the stored request), for an unkeyed_write only once the row has
   * been unknown for `reconcileGraceMs` on the ledger's clock when the probe is asked, and never
   * for a row left unknown after request_mismatch (RECON-6); unknown or a failed probe → unchanged. Every settlement
   * is fenced on the fence that was looked at and audited under `options.actor` (an operator's
   * name when a person asked; RECONCILE_ACTOR by default). On a ledger without `resolve`, it
   * only reports.
   *
   * `options.signal` bounds the probe (e.g. `AbortSignal.timeout(30_000)`): the probe receives
   * it, and when it aborts before the probe answered, the verdict is `error` and nothing is
   * written, even if the probe answers later. An already aborted signal asks no probe.
   */
  async reconcile(key: string, options: { actor?: string; signal?: AbortSignal } = {}): Promise<ReconcileReport> {
    if (typeof key !== "string" || key.length === 0) throw new InvalidArgumentError("key", "must be a non-empty string");
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "must be an object { actor?, signal? }");
    // A misspelt option would be ignored: `{ timeout: 30_000 }` would leave the probe unbounded.
    const unknown = unknownOptionName(options, RECONCILE_OPTION_NAMES);
    if (unknown !== undefined) throw new InvalidArgumentError(`options.${unknown}`, unknownOptionMessage("reconcile", RECONCILE_OPTION_NAMES));
    const actor = options.actor ?? RECONCILE_ACTOR;
    if (typeof actor !== "string" || actor.trim() === "") throw new InvalidArgumentError("actor", "must be a non-empty string");
    const signal = options.signal;
    if (signal !== undefined && !isAbortSignal(signal)) throw new InvalidArgumentError("options.signal", "must be an AbortSignal when given");
    const row = await this.ledger.lookup(key);
    if (row === undefined) return { key, state: "absent", verdict: "none", settled: "none", detail: "no row for this key" };
    const report = { key, toolName: row.toolName, state: row.state };
    if (row.state !== "unknown") {
      return { ...report, verdict: "none", settled: "none", detail: `only an unknown row is reconciled; this one is ${row.state}` };
    }
    if (!this.registry.has(row.toolName)) {
      return { ...report, verdict: "none", settled: "none", detail: `tool ${row.toolName} is not registered with this dispatcher` };
    }
    const tool = this.registry.get(row.toolName);
    if (tool.reconcile === undefined) {
      return { ...report, verdict: "none", settled: "none", detail: `tool ${row.toolName} declares no reconcile probe` };
    }
    const args = parseStoredRequest(key, row.request);
    // A probe's "not performed" speaks for the moment it looked: it may release an unkeyed_write
    // only if the grace had passed by then, on the ledger's clock (RESOLVE-6), so that is decided
    // before the probe is asked, never from this process's clock or after the answer came back.
    // A listing that fails only withholds the release: a "performed" still settles the row.
    const graceBeforeProbe =
      row.effect === "unkeyed_write"
        ? await this.unknownForGrace(row).catch((error: unknown) => ({ passed: false, why: `not released: the ledger could not tell how long the row has been unknown (${describeError(error)})` }))
        : undefined;
    const answer = signal === undefined ? await this.probe(tool, args, key, "on_demand", new AbortController().signal) : await this.probeWithin(tool, args, key, signal);
    const found =
      answer.verdict === "performed" && answer.resultJson !== undefined
        ? { ...report, verdict: "performed" as const, result: JSON.parse(answer.resultJson) as JsonValue, resultJson: answer.resultJson }
        : { ...report, verdict: answer.verdict, ...(answer.detail !== undefined ? { detail: answer.detail } : {}) };
    const planned = this.settlementFor(row, answer, graceBeforeProbe);
    const plan = planned !== undefined && "resolution" in planned ? planned : undefined;
    if (plan === undefined || !this.canResolve()) {
      this.emitReconciled(key, tool.name, undefined, "on_demand", answer, "none");
      const why = plan === undefined ? (planned !== undefined && "left" in planned ? planned.left : undefined) : "the ledger offers no resolve(); the row is left for an operator";
      const probeDetail = "detail" in found && found.detail !== undefined ? found.detail : undefined;
      const detail = why === undefined ? probeDetail : probeDetail === undefined ? why : `${probeDetail}; ${why}`;
      return { ...found, settled: "none", ...(detail !== undefined ? { detail } : {}) };
    }
    this.emitReconciled(key, tool.name, undefined, "on_demand", answer, plan.resolution.outcome === "not_performed" ? "released" : plan.resolution.outcome);
    try {
      const written = await this.ledger.resolve!({
        key,
        resolution: plan.resolution,
        actor,
        reason: plan.reason,
        expectedFence: row.fence,
        action: "reconciled",
      });
      this.emit({ type: "resolved", key, toolName: tool.name, state: written.state, fence: written.fence, actor });
      return { ...found, settled: written.state, row: written };
    } catch (error) {
      // Someone settled or re-claimed the row since it was read: theirs stands (RESOLVE-4).
      if (isDispatchOnceError(error, "stale_claim") || isDispatchOnceError(error, "resolution_refused")) {
        return { ...found, settled: "none", detail: `the row changed while it was probed: ${describeError(error)}` };
      }
      throw error;
    }
  }

  /**
   * The automatic pass (RESOLVE-6): reconcile every `unknown` row of a registered tool with a
   * probe, oldest first, a page at a time, on a ledger that lists and resolves. Rows whose probe
   * still answers unknown stay for the next pass or an operator.
   *
   * Every probe is bounded as `reconcile(key, { signal })` bounds one: it receives a signal that
   * aborts after `options.probeTimeoutMs` (default 30 s) or when `options.signal` aborts, and a
   * probe that has not answered by then gives verdict `error` and writes nothing, even if it
   * answers later or ignores the signal; the pass goes on to the next row. When `options.signal`
   * aborts, no later row is probed and the reports so far are returned (the probe in flight's
   * with verdict `error`); an already aborted signal probes nothing.
   *
   * @example await dispatcher.reconcileUnknown({ olderThanMs: 60_000, probeTimeoutMs: 10_000 })
   * @example await dispatcher.reconcileUnknown({ signal: AbortSignal.timeout(5 * 60_000) }) // the whole pass
   */
  async reconcileUnknown(options: ReconcileUnknownOptions = {}): Promise<ReconcileReport[]> {
    if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", "must be an object { olderThanMs?, limit?, probeTimeoutMs?, signal? }");
    // A misspelt option would be ignored: `{ timeout: 5_000 }` would leave every probe at the default.
    const unknownOption = unknownOptionName(options, RECONCILE_UNKNOWN_OPTION_NAMES);
    if (unknownOption !== undefined) throw new InvalidArgumentError(`options.${unknownOption}`, unknownOptionMessage("reconcileUnknown", RECONCILE_UNKNOWN_OPTION_NAMES));
    const probeTimeoutMs = options.probeTimeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS;
    // setTimeout's own limit: a longer delay would fire at once (Node's TimeoutOverflowWarning).
    if (!Number.isSafeInteger(probeTimeoutMs) || probeTimeoutMs < 1 || probeTimeoutMs > MAX_TIMER_MS) {
      throw new InvalidArgumentError("options.probeTimeoutMs", `must be an integer from 1 to ${MAX_TIMER_MS} (milliseconds)`);
    }
    const signal = options.signal;
    if (signal !== undefined && !isAbortSignal(signal)) throw new InvalidArgumentError("options.signal", "must be an AbortSignal when given");
    const listRows = this.ledger.listRows;
    if (listRows === undefined || this.ledger.capabilities.supports?.listRows !== true) {
      throw new InvalidArgumentError("ledger", "reconcileUnknown needs a ledger that lists rows (capabilities.supports.listRows)");
    }
    const limit = options.limit ?? 100;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new InvalidArgumentError("limit", "must be a positive integer");
    const probed = this.registry.list().filter((t) => t.reconcile !== undefined).map((t) => t.name);
    const reports: ReconcileReport[] = [];
    for (const toolName of probed) {
      let cursor: string | undefined;
      do {
        if (signal?.aborted) return reports;
        const page = await listRows.call(this.ledger, {
          state: "unknown",
          toolName,
          limit: Math.min(limit - reports.length, 1000),
          ...(options.olderThanMs !== undefined ? { olderThanMs: options.olderThanMs } : {}),
          ...(cursor !== undefined ? { cursor } : {}),
        });
        for (const row of page.rows) {
          if (signal?.aborted) return reports;
          reports.push(await this.reconcileWithin(row.key, probeTimeoutMs, signal));
        }
        cursor = page.cursor;
      } while (cursor !== undefined && reports.length < limit);
      if (reports.length >= limit) break;
    }
    return reports;
  }

  /** `reconcile(key)` with a probe signal that aborts after `timeoutMs` or with `pass`. */
  private async reconcileWithin(key: string, timeoutMs: number, pass: AbortSignal | undefined): Promise<ReconcileReport> {
    const probe = new AbortController();
    const timeout = new Error(`the probe did not answer within ${timeoutMs} ms (probeTimeoutMs)`);
    timeout.name = "TimeoutError";
    // A plain timer, unref'd: a hung probe must not keep the process alive for the timeout.
    const timer = setTimeout(() => probe.abort(timeout), timeoutMs);
    (timer as { unref?: () => void }).unref?.();
    const onPassAbort = () => probe.abort(pass?.reason);
    pass?.addEventListener("abort", onPassAbort, { once: true });
    try {
      return await this.reconcile(key, { signal: probe.signal });
    } finally {
      clearTimeout(timer);
      pass?.removeEventListener("abort", onPassAbort);
    }
  }

  private canResolve(): boolean {
    return typeof this.ledger.resolve === "function" && this.ledger.capabilities.supports?.resolve === true;
  }

  /**
   * Whether an unknown row had been unknown for at least `reconcileGraceMs` on the LEDGER's clock
   * (RESOLVE-6): its `finishedAt` is the store's time, and an operator's machine (the CLI) may run
   * minutes ahead of it. Measured by the ledger itself, as a listing of unknown rows at least that
   * old (LIST-1): the row, under the fence read, is among them or not. Rows are listed by
   * (finishedAt, key), so the listing stops at the row's own time. A ledger that does not list is
   * measured on this process's clock only when that is its clock (`clock: "process"`); otherwise
   * the grace cannot be told to have passed: `{ passed: false, why }`.
   */
  private async unknownForGrace(row: LedgerRow): Promise<{ passed: boolean; why?: string }> {
    if (row.state !== "unknown") return { passed: false };
    if (this.reconcileGraceMs === 0) return { passed: true };
    const tooFresh = { passed: false, why: `not released: an unkeyed_write is released only once it has been unknown for reconcileGraceMs (${this.reconcileGraceMs} ms) on the ledger's clock when the probe looks; a request still in transit may land later (RECON-4)` };
    const listRows = this.ledger.listRows;
    if (listRows !== undefined && this.ledger.capabilities.supports?.listRows === true) {
      let cursor: string | undefined;
      do {
        const page = await listRows.call(this.ledger, {
          state: "unknown",
          toolName: row.toolName,
          ...(row.conversationId !== undefined ? { conversationId: row.conversationId } : {}),
          olderThanMs: this.reconcileGraceMs,
          limit: 1000,
          ...(cursor !== undefined ? { cursor } : {}),
        });
        for (const listed of page.rows) {
          if (listed.key === row.key) return listed.fence === row.fence ? { passed: true } : tooFresh;
          if (listed.state === "unknown" && listed.finishedAt > row.finishedAt) return tooFresh;
        }
        cursor = page.cursor;
      } while (cursor !== undefined);
      return tooFresh;
    }
    if (this.ledger.capabilities.clock === "process") return Date.now() - row.finishedAt >= this.reconcileGraceMs ? { passed: true } : tooFresh;
    return { passed: false, why: "not released: the ledger neither lists rows nor shares this process's clock, so reconcileGraceMs cannot be measured on its clock (RESOLVE-6); settle the row with resolve" };
  }

  /**
   * What an on-demand probe's answer settles an unknown row to, `{ left }` saying why a "not
   * performed" leaves it, or undefined to leave it (RESOLVE-6, RECON-4). `grace` is whether an
   * unkeyed_write had been unknown for reconcileGraceMs when the probe was asked.
   */
  private settlementFor(row: LedgerRow, answer: ProbeAnswer, grace: { passed: boolean; why?: string } | undefined): { resolution: Resolution; reason: string } | { left: string | undefined } | undefined {
    switch (answer.verdict) {
      case "performed":
        if (answer.resultJson !== undefined) {
          return { resolution: { outcome: "completed", result: answer.resultJson }, reason: "reconcile: performed" };
        }
        // It happened and its result cannot be kept: fail closed, never release (RECON-3).
        return {
          resolution: {
            outcome: "failed",
            error: { name: "ResultNotStorableError", code: "result_not_storable", message: `reconciled as performed, but ${answer.detail}` },
          },
          reason: `reconcile: performed, result not storable (${answer.detail})`,
        };
      case "not_performed": {
        // A request still in transit may land after the probe looked (RECON-4): an unkeyed_write is
        // released only once it has been unknown long enough for any such request to have landed.
        // After request_mismatch the downstream held the key for another request (RECON-6): finding
        // nothing under the key later says that record is gone, not that its effect never happened,
        // and a re-run would be performed anew. Whatever the class, only a person settles it.
        if (row.state === "unknown" && row.reason.startsWith(REQUEST_MISMATCH_REASON)) {
          return { left: `not released: the row is unknown after request_mismatch, and "not performed" cannot release a key the downstream held for another request (RECON-6); settle it with resolve` };
        }
        if (row.effect === "unkeyed_write" && grace?.passed !== true) return { left: grace?.why };
        return { resolution: { outcome: "not_performed" }, reason: "reconcile: not_performed" };
      }
      default:
        return undefined;
    }
  }

  private keyOf(prepared: PreparedCall, context: TurnContext, ordinal: number): string {
    // The identity's canonical text is made once, in prepare (KEY-1 hashes exactly it).
    return deriveKeyFromParts(context.conversationId, context.turnIndex, prepared.tool.name, ordinal, prepared.identityText);
  }

  private prepare(call: ToolCall): PreparedCall {
    if (typeof call !== "object" || call === null || Array.isArray(call)) {
      throw new InvalidArgumentError("call", `must be an object { name, input }, got ${describeValue(call)}`);
    }
    // A member the dispatcher never reads would be ignored: an ordinal put in the call instead of
    // the context reads as 0, takes an earlier identical call's key and replays its result.
    const unknown = unknownOptionName(call, CALL_MEMBERS);
    if (unknown !== undefined) {
      throw new InvalidArgumentError(`call.${unknown}`, `is not a member of a call (its members: ${Object.keys(CALL_MEMBERS).join(", ")}; an ordinal belongs to the context)`);
    }
    const tool = this.registry.get(call.name);
    const args = this.validate(tool, call.input);
    if (tool.effect !== "read" && typeof args === "object" && args !== null) {
      // The usual write's arguments, a flat object of scalars: its three texts from one read of it.
      const texts = flatArgumentTexts(args, tool.identity);
      if (texts !== undefined) {
        // IDENT-7 from the members already read: the walk runs only when one of them is beyond
        // 2^53 - 1, which is exactly when it throws (and its text scan would have let it run).
        if (tool.onRequestDiffers === "refuse" ? texts.inexact : texts.inexactIdentity) {
          checkExactNumbers(tool, args, tool.onRequestDiffers === "refuse" ? texts.canonical : texts.identity);
        }
        this.warnIfNotNfc(tool.name, texts.identity);
        this.checkIdentityStable(tool, call.input, args, texts.identity);
        return withCompared({ tool, args, identityText: texts.identity, requestText: texts.ordered, requestCanonical: texts.canonical });
      }
    }
    const identityArgs = tool.identity === undefined ? args : project(args as Record<string, unknown>, tool.identity);
    const identityText = canonicalize(identityArgs);
    if (tool.effect === "read") return { tool, args, identityText, requestText: identityText, requestCanonical: identityText };
    // A write's arguments are what a re-run sends again, so they must be JSON data (LEDGER-21):
    // canonicalize refuses anything JSON text cannot carry back (a Date, a Map, NaN).
    const requestCanonical = tool.identity === undefined ? identityText : canonicalize(args);
    const requestText = JSON.stringify(args);
    checkExactNumbers(tool, args, tool.onRequestDiffers === "refuse" ? requestCanonical : identityText);
    this.warnIfNotNfc(tool.name, identityText);
    this.checkIdentityStable(tool, call.input, args, identityText);
    return withCompared({ tool, args, identityText, requestText, requestCanonical });
  }

  /**
   * IDENT-8: the key does not normalise Unicode, so text in another form than NFC (the form a
   * model usually writes) may come back composed on a replay, under another key. Worth one
   * warning per tool: the cure is the schema's `.normalize("NFC")`. ASCII text skips the check.
   */
  private warnIfNotNfc(toolName: string, identityText: string): void {
    if (this.nfcWarned?.has(toolName) === true || !NON_ASCII.test(identityText)) return;
    if (identityText.normalize("NFC") === identityText) return;
    (this.nfcWarned ??= new Set()).add(toolName);
    this.logger.warn(
      "a write's key arguments hold text not in Unicode NFC; a replay that spells it composed gets another key " +
        '(normalise the field in the schema: z.string().normalize("NFC"))',
      { tool: toolName },
    );
  }

  /**
   * The key must be a function of the model's input alone: validate again and compare, so a
   * schema default or transform that is not pure (a timestamp, a random id) is refused instead
   * of minting a new key on every replay (IDENT-5).
   */
  private checkIdentityStable(tool: ToolDefinition, input: unknown, args: unknown, identityText: string): void {
    const again = this.validate(tool, input);
    // Equal JSON data has equal canonical text: the cheap structural comparison settles the
    // usual case, and only a difference is canonicalized to be sure (and to raise what that raises).
    if (sameIdentity(args, again, tool.identity)) return;
    const againIdentity = tool.identity === undefined ? again : project(again as Record<string, unknown>, tool.identity);
    if (canonicalize(againIdentity) !== identityText) {
      throw new InvalidToolDefinitionError(
        `tool ${tool.name}: two validations of the same input gave different identity arguments ` +
          `(an impure default or transform, e.g. a timestamp); its key would change on every replay (IDENT-5)`,
      );
    }
  }

  private validate(tool: ToolDefinition, input: unknown): unknown {
    let parsed: ReturnType<ToolDefinition["input"]["safeParse"]>;
    try {
      parsed = tool.input.safeParse(input);
    } catch (cause) {
      // A throwing getter or a revoked proxy in the input: the schema could not read it.
      throw new ToolInputError(tool.name, [{ path: [], message: `the input cannot be read: ${describeError(cause)}` }]);
    }
    if (!parsed.success) {
      throw new ToolInputError(
        tool.name,
        parsed.error.issues.map((issue) => ({
          path: issue.path.map((p) => (typeof p === "symbol" ? String(p) : p)),
          message: issue.message,
        })),
      );
    }
    return parsed.data;
  }

  /** A call's run: a read runs every time; a write claims first (claimAndRun). */
  private execute(prepared: PreparedCall, context: TurnContext, ordinal: number): Promise<DispatchOutcome> {
    return prepared.tool.effect === "read" ? this.runRead(prepared, context, ordinal) : this.claimAndRun(prepared, context, ordinal);
  }

  /** Reads have no effect to guard (EFFECT-2): run every time, never claim. */
  private async runRead(prepared: PreparedCall, context: TurnContext, ordinal: number): Promise<DispatchOutcome> {
    const { tool } = prepared;
    const key = this.keyOf(prepared, context, ordinal);
    const base = { key, toolName: tool.name, effect: tool.effect, ordinal };
    const abort = new LazyAbort();
    const running = tool.run(prepared.args, this.runContext(tool.name, key, context, ordinal, abort));
    let result: unknown;
    try {
      result = await this.within(running, tool);
    } catch (error) {
      if (!(error instanceof RunTimedOut)) throw error;
      // A read claims nothing, so there is nothing to record when it settles later (EFFECT-2).
      this.timedOut(abort, tool.name, key, ordinal, undefined, error.ms);
      throw new InFlightElsewhereError(key, error.ms, { runTimeoutMs: error.ms, read: true });
    }
    const { text, parsed } = jsonDataTexts(result === undefined ? null : result);
    return outcomeOf(base, text, false, parsed);
  }

  /**
   * A write: claim, then run, replay, or wait on another claimant's live claim. One async
   * function for the whole claimed path (it was two: an async frame less per dispatch).
   */
  private async claimAndRun(prepared: PreparedCall, context: TurnContext, ordinal: number, key: string = this.keyOf(prepared, context, ordinal)): Promise<DispatchOutcome> {
    const { tool } = prepared;
    // Every path below returns awaited (runTimedOut throws) inside this try: a ledger_unavailable from any of them gets the key (RECORD-2).
    try {
      const base = { key, toolName: tool.name, effect: tool.effect, ordinal };
      const size = sizeBeyond(prepared.requestText, this.ledger.capabilities.maxResultBytes);
      if (size > this.ledger.capabilities.maxResultBytes) {
        throw new ToolInputError(tool.name, [
          { path: [], message: `the arguments are ${size} bytes; the ledger stores at most ${this.ledger.capabilities.maxResultBytes}` },
        ]);
      }
      // One claim id for this dispatch's claims: a claim sent again after a lost reply is
      // recognised by the ledger as the same claim, not met as another attempt's row (LEDGER-26).
      const claimId = newClaimId();
      const started = Date.now();
      // The first attempt here; anything but the usual answer (claimed, with this call's own
      // request) goes on in claimLoop, as the loop's first attempt. This async function holds only
      // what the usual case needs: its frame is made (and collected) on every dispatch.
      const claimSentAt = Date.now();
      let claim: ClaimResult;
      try {
        claim = await this.ledger.claim(this.claimRequest(prepared, context, key, claimId));
      } catch (error) {
        return await this.claimLoop(prepared, context, key, base, claimId, started, { claimSentAt, error });
      }
      if (claim.outcome !== "claimed" || claim.request !== prepared.requestText) {
        return await this.claimLoop(prepared, context, key, base, claimId, started, { claimSentAt, claim });
      }
      const fence = claim.fence;
      if (this.onEvent !== undefined) this.emit({ type: "claimed", key, toolName: tool.name, ordinal, fence, takeover: claim.takeover });
      // runClaimed(), written out: its async frame and promise on every dispatch were measurable.
      // Keep the two alike. The lease began no earlier than the claim was sent, so this is a safe local bound.
      const lease = new HeldLease(key, fence, tool.name, ordinal, claimSentAt + this.leaseMs);
      // Keep the claim while a slow tool runs (LEDGER-9); if it is lost, tell the tool (DISPATCH-11).
      this.renewals.add(lease);
      if (this.onEvent !== undefined) this.emit({ type: "run_started", key, toolName: tool.name, ordinal });
      let result: unknown;
      let running: unknown;
      try {
        running = tool.run(prepared.args, this.runContext(tool.name, key, context, ordinal, lease));
        result = await this.within(running, tool, lease);
      } catch (error) {
        if (error instanceof RunTimedOut) return this.runTimedOut(running, error.ms, tool, prepared.args, context, key, fence, base, lease);
        return await this.runFailed(error, tool, prepared.args, context, key, fence, base, lease);
      }
      lease.finished = true;
      this.renewals.remove(lease);
      if (this.onEvent !== undefined) this.emit({ type: "run_finished", key, toolName: tool.name, ordinal, fence, ok: true });
      let texts: { text: string; parsed: JsonValue | undefined };
      try {
        texts = this.resultText(result, key);
      } catch (error) {
        if (!isDispatchOnceError(error, "not_canonicalizable") && !isDispatchOnceError(error, "result_not_storable")) throw error;
        return await this.reconcileUnstorable(tool, prepared.args, key, fence, error, base);
      }
      try {
        await this.ledger.complete(key, fence, texts.text);
      } catch (error) {
        return await this.completeAgain(error, tool, prepared.args, key, fence, base, texts.text, texts.parsed);
      }
      if (this.onEvent !== undefined) this.emit({ type: "recorded", key, toolName: tool.name, ordinal, state: "completed", effect: "happened" });
      return outcomeOf(base, texts.text, false, texts.parsed);
    } catch (error) {
      throw withCallKey(error, key);
    }
  }

  /** A claim of this dispatch: a new object for every attempt, the same members. */
  private claimRequest(prepared: PreparedCall, context: TurnContext, key: string, claimId: string): ClaimRequest {
    return {
      key,
      toolName: prepared.tool.name,
      effect: prepared.tool.effect as LedgerEffect, // execute() sends reads to runRead
      owner: this.owner,
      leaseMs: this.leaseMs,
      request: prepared.requestText,
      claimId,
      // Stored with the row so an operator can list a conversation's calls (LIST-3).
      conversationId: context.conversationId,
      turnIndex: context.turnIndex,
    };
  }

  /**
   * claimAndRun from its first attempt's answer (`first`) on: claim again while the ledger is
   * unavailable, run a claim of a stored request that differs, replay, or wait on another
   * claimant's live claim.
   */
  private async claimLoop(
    prepared: PreparedCall,
    context: TurnContext,
    key: string,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    claimId: string,
    started: number,
    first: { claimSentAt: number; claim: ClaimResult; error?: undefined } | { claimSentAt: number; claim?: undefined; error: unknown },
  ): Promise<DispatchOutcome> {
    const { tool } = prepared;
    const { ordinal } = base;
    // Whether a claim of this dispatch met ledger_unavailable (a copy of it may still reach the
    // store), and whether the dispatch took the row: both decide the retiring (DISPATCH-16).
    const claimState: ClaimState = { claimId, unavailable: false, took: false, retired: false };
    try {
      let delay = this.pollMs;
      let differenceLogged = false;
      // The stored request, when it is not this call's (IDENT-3): the outcome names it.
      let storedRequest: string | undefined;
      let attempt: typeof first | undefined = first;
      for (;;) {
        const request = this.claimRequest(prepared, context, key, claimId);
        let claimSentAt = attempt?.claimSentAt ?? Date.now();
        let claim: ClaimResult;
        if (attempt?.claim !== undefined) {
          claim = attempt.claim;
        } else {
          try {
            if (attempt !== undefined) throw attempt.error;
            claim = await this.ledger.claim(request);
          } catch (error) {
            ({ claim, sentAt: claimSentAt } = await this.claimRetrying(request, base, claimState, claimSentAt, error));
          }
        }
        attempt = undefined;
        const stored = claim.outcome === "claimed" ? claim.request : claim.row.request;
        storedRequest = undefined;
        if (stored !== prepared.requestText && !sameRequest(stored, prepared.requestCanonical)) {
          storedRequest = stored;
          // With comparedFields, a difference outside them is a re-wording of the stored request (IDENT-9).
          const refuse = tool.onRequestDiffers === "refuse" && (prepared.comparedCanonical === undefined || !sameProjection(stored, tool.comparedFields!, prepared.comparedCanonical));
          if (!differenceLogged) {
            // Same logical call, re-worded outside its identity: the first request is the one that
            // runs or is replayed; the difference is worth seeing (IDENT-3). Or, for a key a
            // client assigned, another request under a reused key (IDENT-6).
            differenceLogged = true;
            this.logger.warn(
              refuse
                ? "a call's arguments differ from the request stored under its key; refused (idempotency_key_reused)"
                : "a replay's arguments differ from the first request outside the identity; using the first request",
              // Field names only: a log is no place for a payee or a memo. The event carries both requests.
              { key, tool: tool.name, differingFields: differingFields(stored, prepared.requestText) },
            );
            this.emit({ type: "request_differs", key, toolName: tool.name, ordinal, stored, replay: prepared.requestText });
          }
          if (refuse) {
            // Neither the stored request's outcome nor a run of it is this call's (IDENT-6). A
            // claim that took the row (released, or taken over) gives it back at once, its stored
            // request kept for its own re-send (LEDGER-21); nothing is waited on.
            if (claim.outcome === "claimed") {
              claimState.took = true;
              const fence = claim.fence;
              await this.recorded(key, fence, () => this.releaseOwn(key, fence, base), {
                toolName: tool.name,
                ordinal,
                state: "released",
                write: "release",
              });
            }
            throw new IdempotencyKeyReusedError(key, tool.name);
          }
        }
        if (claim.outcome === "claimed") {
          if (this.onEvent !== undefined) this.emit({ type: "claimed", key, toolName: tool.name, ordinal, fence: claim.fence, takeover: claim.takeover });
          // A re-run (after release or takeover) sends exactly the first request (LEDGER-21).
          const args = claim.request === prepared.requestText ? prepared.args : parseStoredRequest(key, claim.request);
          claimState.took = true;
          // Awaited here: the dispatch ends (and its claim id is retired, below) when the run has.
          const ran = await this.runClaimed(tool, args, context, ordinal, key, claim.fence, claimSentAt, base).catch((error: unknown) => namingStored(error, key, storedRequest));
          // Parsed again: the tool may have changed the arguments it was handed.
          if (storedRequest !== undefined) ran.storedRequest = parseStoredRequest(key, storedRequest) as JsonValue;
          return ran;
        }
        const row = claim.row;
        if (row.state !== "in_flight") {
          let replayed: DispatchOutcome;
          try {
            replayed = this.replay(row, base);
          } catch (error) {
            return namingStored(error, key, storedRequest);
          }
          if (storedRequest !== undefined) replayed.storedRequest = parseStoredRequest(key, storedRequest) as JsonValue;
          return replayed;
        }
        const waited = Date.now() - started;
        if (waited >= this.waitMs) {
          const elsewhere = new InFlightElsewhereError(key, waited);
          // The holder runs the stored request, not this re-wording (IDENT-3, RECORD-10).
          if (storedRequest !== undefined) elsewhere.storedRequest = parseStoredRequest(key, storedRequest) as JsonValue;
          throw elsewhere;
        }
        this.emit({ type: "waiting", key, toolName: tool.name, ordinal, owner: (row as InFlightRow).owner });
        await sleep(Math.min(delay, this.waitMs - waited));
        delay = Math.min(delay * 2, this.maxPollMs);
      }
    } finally {
      if (claimState.unavailable && this.retires && !claimState.retired) this.retireClaim(key, claimId, !claimState.took, tool.name, ordinal);
    }
  }

  /**
   * Claim, sending the same claim again while the ledger is unavailable, for up to claimRetryMs
   * (LEDGER-26): a claim that timed out may have been applied, and only its own claim id lets the
   * retry take it instead of meeting it as a live row of someone else (and, once its lease runs
   * out, an unkeyed_write call that never ran as `unknown`). When the retries run out, the claim
   * is released in the background, and the dispatch fails with the last ledger_unavailable.
   * claimAndRun sends the first attempt; this takes over from what it met.
   */
  private async claimRetrying(
    request: ClaimRequest,
    base: { toolName: string; ordinal: number },
    claimState: ClaimState,
    /** When the first attempt was sent, and what it met. */
    firstSentAt: number,
    firstError: unknown,
  ): Promise<{ claim: ClaimResult; sentAt: number }> {
    const { ordinal } = base;
    const deadline = firstSentAt + this.claimRetryMs;
    let delay = this.pollMs;
    let error = firstError;
    for (let attempt = 1; ; attempt++) {
      if (!isDispatchOnceError(error, "ledger_unavailable")) throw error;
      if (!claimState.unavailable) {
        claimState.unavailable = true;
        // Keyed by this dispatch's `base`, which every recording path receives: a release of
        // this dispatch's own row retires the claim id first (releaseOwn, DISPATCH-16).
        this.claimsOf.set(base, claimState);
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        // A ledger that retires is settled when the dispatch ends (claimAndRun); else release by claim id.
        if (!this.retires) this.settleLostClaim(request, ordinal);
        throw error;
      }
      this.emit({ type: "claim_retry", key: request.key, toolName: request.toolName, ordinal, attempt, error: describeError(error) });
      await sleep(Math.min(delay, left));
      // Within a third of the lease: a claim the store applied late holds a fresh lease, and
      // only meeting it again before that lease runs out keeps it this claim's (LEDGER-26).
      delay = Math.min(delay * 2, this.maxPollMs, Math.max(1, Math.floor(request.leaseMs / 3)));
      const sentAt = Date.now();
      try {
        return { claim: await this.ledger.claim(request), sentAt };
      } catch (next) {
        error = next;
      }
    }
  }

  /**
   * Release, by its claim id, a claim whose reply never arrived (LEDGER-26): claim again with the
   * same id; `claimed` means the row is this claim's (the tool did not run under it), so release
   * it; `existing` means it never landed or someone else holds the key. Retried in the background
   * while the ledger stays unavailable, for the lease plus a minute (after that the row, if any,
   * is settled by LEDGER-7). Timers are unref'd: a process that exits leaves the row to its lease.
   */
  private settleLostClaim(request: ClaimRequest, ordinal: number): void {
    const until = Date.now() + request.leaseMs + 60_000;
    let delay = Math.min(Math.max(this.pollMs, 100), Math.max(1, Math.floor(request.leaseMs / 3)));
    const attempt = async (): Promise<void> => {
      try {
        const claim = await this.ledger.claim(request);
        let released = false;
        if (claim.outcome === "claimed") {
          await this.ledger.release(request.key, claim.fence);
          released = true;
          this.logger.warn("a claim whose reply was lost had been written; released by its claim id", { key: request.key, fence: claim.fence });
        }
        this.emit({ type: "lost_claim_settled", key: request.key, toolName: request.toolName, ordinal, released });
      } catch (error) {
        if (isDispatchOnceError(error, "stale_claim")) {
          // From the claim: the row was released under this claim id already (an earlier attempt's
          // release applied, its reply lost; LEDGER-27). From the release: someone acted on the row
          // first. Either way nothing of ours is left to release.
          this.emit({ type: "lost_claim_settled", key: request.key, toolName: request.toolName, ordinal, released: false });
          return;
        }
        if (!isDispatchOnceError(error, "ledger_unavailable") || Date.now() + delay > until) {
          this.logger.warn("a claim whose reply was lost could not be released; its lease will settle it (LEDGER-7)", {
            key: request.key,
            error: describeError(error),
          });
          return;
        }
        const timer = setTimeout(() => void attempt(), delay);
        timer.unref?.();
        // Within a third of the lease, as above: a late-applied claim must be met before its lease ends.
        delay = Math.min(delay * 2, 5_000, Math.max(1, Math.floor(request.leaseMs / 3)));
      }
    };
    void attempt();
  }

  /**
   * Retire a claim id of which a copy may still reach the store (LEDGER-28, DISPATCH-16): from
   * then on the ledger refuses it, so a late copy never takes a row nobody holds. `release` when
   * the dispatch never took the row: a row the claim wrote is released in the same step. In the
   * background, retried while the ledger stays unavailable for the lease plus a minute (after
   * that a row, if any, is settled by LEDGER-7); timers are unref'd.
   */
  private retireClaim(key: string, claimId: string, release: boolean, toolName: string, ordinal: number): void {
    const until = Date.now() + this.leaseMs + 60_000;
    let delay = Math.min(Math.max(this.pollMs, 100), Math.max(1, Math.floor(this.leaseMs / 3)));
    const attempt = async (): Promise<void> => {
      try {
        const { released } = await this.ledger.retire!(key, claimId, { release });
        if (released) this.logger.warn("a claim whose reply was lost had been written; released as its claim id was retired", { key });
        this.emit({ type: "claim_retired", key, toolName, ordinal, released });
      } catch (error) {
        if (!isDispatchOnceError(error, "ledger_unavailable") || Date.now() + delay > until) {
          this.logger.warn("a claim id whose claim may still reach the ledger could not be retired; a late copy is settled by its lease (LEDGER-7)", {
            key,
            error: describeError(error),
          });
          return;
        }
        const timer = setTimeout(() => void attempt(), delay);
        timer.unref?.();
        // Within a third of the lease: a late-applied claim must be met before its lease ends.
        delay = Math.min(delay * 2, 5_000, Math.max(1, Math.floor(this.leaseMs / 3)));
      }
    };
    void attempt();
  }

  private replay(row: TerminalRow, base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">): DispatchOutcome {
    // What the row says of the effect (OTEL-5): a failed row closed on an unstorable result happened.
    const effect: RunEffect = row.state === "completed" || (row.state === "failed" && row.error.code === "result_not_storable") ? "happened" : row.state === "failed" ? "not_happened" : "may_have_happened";
    this.emit({ type: "replayed", key: base.key, toolName: base.toolName, ordinal: base.ordinal, state: row.state, effect });
    switch (row.state) {
      case "completed":
        return outcomeOf(base, row.result, true);
      case "failed":
        // A replayed result_not_storable is a failure to KEEP the result of an effect that happened.
        if (row.error.code === "result_not_storable") {
          throw new ResultNotStorableError(base.key, `${row.error.message} (replayed)`);
        }
        throw new ToolFailedError(base.key, row.error, true);
      case "unknown":
        throw new OutcomeUnknownError(base.key, row.reason);
    }
  }

  private async runClaimed(
    tool: ToolDefinition,
    args: unknown,
    context: TurnContext,
    ordinal: number,
    key: string,
    fence: number,
    claimSentAt: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
  ): Promise<DispatchOutcome> {
    // claimAndRun runs the usual claim's tool itself, written out as here: keep the two alike.
    // The lease began no earlier than the claim was sent, so this is a safe local bound.
    const lease = new HeldLease(key, fence, tool.name, ordinal, claimSentAt + this.leaseMs);
    // Keep the claim while a slow tool runs (LEDGER-9); if it is lost, tell the tool (DISPATCH-11).
    this.renewals.add(lease);

    if (this.onEvent !== undefined) this.emit({ type: "run_started", key, toolName: tool.name, ordinal });
    let result: unknown;
    let running: unknown;
    try {
      running = tool.run(args, this.runContext(tool.name, key, context, ordinal, lease));
      result = await this.within(running, tool, lease);
    } catch (error) {
      if (error instanceof RunTimedOut) return this.runTimedOut(running, error.ms, tool, args, context, key, fence, base, lease);
      return await this.runFailed(error, tool, args, context, key, fence, base, lease);
    }
    return this.ran(result, tool, args, key, fence, base, lease);
  }

  /** A claimed run returned `result`: record it (DISPATCH-5, DISPATCH-7, DISPATCH-10). */
  private async ran(
    result: unknown,
    tool: ToolDefinition,
    args: unknown,
    key: string,
    fence: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    lease: HeldLease,
  ): Promise<DispatchOutcome> {
    const { ordinal } = base;
    lease.finished = true;
    this.renewals.remove(lease);
    if (this.onEvent !== undefined) this.emit({ type: "run_finished", key, toolName: tool.name, ordinal, fence, ok: true });

    let resultJson: string;
    let resultParsed: JsonValue | undefined;
    try {
      ({ text: resultJson, parsed: resultParsed } = this.resultText(result, key));
    } catch (error) {
      if (!isDispatchOnceError(error, "not_canonicalizable") && !isDispatchOnceError(error, "result_not_storable")) throw error;
      return await this.reconcileUnstorable(tool, args, key, fence, error, base);
    }
    // recorded(), written out: the closure and the extra promise on every dispatch were measurable.
    try {
      await this.ledger.complete(key, fence, resultJson);
    } catch (error) {
      return await this.completeAgain(error, tool, args, key, fence, base, resultJson, resultParsed);
    }
    if (this.onEvent !== undefined) this.emit({ type: "recorded", key, toolName: tool.name, ordinal, state: "completed", effect: "happened" });
    return outcomeOf(base, resultJson, false, resultParsed);
  }

  /**
   * `running` (what the tool's run returned), bounded by the tool's run timeout (DISPATCH-18): a
   * run still pending then rejects with RunTimedOut, the run itself left to settle. Whatever it
   * settles with first decides: a run that settles as the bound fires is either answered or left.
   */
  private within(running: unknown, tool: ToolDefinition, lease?: HeldLease): unknown {
    const ms = tool.runTimeoutMs ?? this.runTimeoutMs;
    if (ms === Infinity || !isThenable(running)) return running;
    return new Promise((resolve, reject) => {
      const deadline = new PendingRun(ms, reject);
      this.deadlines.add(deadline, ms);
      // A throw's probe ends by the same deadline (probeAfterThrow).
      if (lease !== undefined) lease.runDeadline = deadline.deadline;
      running.then(
        (value) => {
          this.deadlines.remove(deadline);
          resolve(value);
        },
        (error: unknown) => {
          this.deadlines.remove(deadline);
          reject(error);
        },
      );
    });
  }


  /** A run outlived its bound: tell it to stop, as a lost lease does (DISPATCH-13, DISPATCH-18). */
  private timedOut(abort: LazyAbort, toolName: string, key: string, ordinal: number, fence: number | undefined, ms: number): void {
    this.emit({ type: "run_timed_out", key, toolName, ordinal, ...(fence !== undefined ? { fence } : {}), runTimeoutMs: ms });
    this.logger.warn("a tool run did not settle within runTimeoutMs; it was signalled to stop and its call answered in_flight_elsewhere", { key, tool: toolName, runTimeoutMs: ms });
    const reason = new Error(`the run did not settle within ${ms} ms (runTimeoutMs)`);
    reason.name = "TimeoutError";
    abort.abort(reason);
  }

  /**
   * A claimed run outlived its bound (DISPATCH-18): stop renewing its lease, signal it, and answer
   * the dispatch now with in_flight_elsewhere. The row is not written: the run may still settle,
   * and is then recorded under its own fence in the background, as any run's outcome is (a lease
   * no longer renewed is still this claim's until another claimant acts on it, LEDGER-16; after a
   * takeover the write is refused and changes nothing). A run that never settles leaves the row
   * to its lease (LEDGER-7).
   */
  private runTimedOut(
    running: unknown,
    ms: number,
    tool: ToolDefinition,
    args: unknown,
    context: TurnContext,
    key: string,
    fence: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    lease: HeldLease,
  ): never {
    this.renewals.remove(lease);
    this.timedOut(lease, tool.name, key, base.ordinal, fence, ms);
    (running as PromiseLike<unknown>)
      .then(
        (result) => this.ran(result, tool, args, key, fence, base, lease),
        (error: unknown) => {
          // The dispatch was answered at the bound; the late throw's probe gets a bound of its own.
          lease.runDeadline = Date.now() + ms;
          return this.runFailed(error, tool, args, context, key, fence, base, lease);
        },
      )
      .then(undefined, (error: unknown) => {
        // The dispatch was answered at the bound; what the late record met is only worth a warning
        // (a stale_claim: the row was taken over, or settled by its lease, meanwhile).
        if (isDispatchOnceError(error) && !isDispatchOnceError(error, "stale_claim") && !isDispatchOnceError(error, "ledger_unavailable") && !isDispatchOnceError(error, "ledger_corrupt")) return;
        this.logger.warn("a run that settled after runTimeoutMs could not be recorded; the row is left as it is", { key, tool: tool.name, error: describeError(error) });
      });
    throw new InFlightElsewhereError(key, ms, { runTimeoutMs: ms });
  }

  /**
   * The tool's run threw: before an outcome becomes unknown, ask the downstream (RECON-2); the
   * run has ended, and the claim is still renewed while the probe asks. After a lost lease every
   * write is fenced.
   */
  private async runFailed(
    error: unknown,
    tool: ToolDefinition,
    args: unknown,
    context: TurnContext,
    key: string,
    fence: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    lease: HeldLease,
  ): Promise<DispatchOutcome> {
    if (this.onEvent !== undefined) this.emit({ type: "run_finished", key, toolName: tool.name, ordinal: base.ordinal, fence, ok: false });
    const cause: ReconcileCause = lease.aborted ? "lease_lost" : "tool_error";
    const answer = mayReconcile(error) ? await this.probeAfterThrow(tool, args, key, cause, lease) : undefined;
    lease.finished = true;
    this.renewals.remove(lease);
    return this.recordFailure(error, tool, key, fence, base, context, cause, answer);
  }

  /**
   * The result's stored text and its parse: JSON semantics first (toJSON, Dates, SDK objects),
   * then JCS; a tool that returns nothing has the result null. Throws not_canonicalizable, or
   * result_not_storable when the text is beyond the ledger's limit.
   */
  private resultText(result: unknown, key: string): { text: string; parsed: JsonValue | undefined } {
    const texts = jsonDataTexts(result === undefined ? null : result);
    const size = sizeBeyond(texts.text, this.ledger.capabilities.maxResultBytes);
    if (size > this.ledger.capabilities.maxResultBytes) {
      throw new ResultNotStorableError(key, `${size} bytes exceeds the ledger's limit of ${this.ledger.capabilities.maxResultBytes}`);
    }
    return texts;
  }

  /** The first complete of a run's result met `firstError`: send it again (DISPATCH-10, DISPATCH-17, recordAgain). */
  private async completeAgain(
    firstError: unknown,
    tool: ToolDefinition,
    args: unknown,
    key: string,
    fence: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    resultJson: string,
    resultParsed: JsonValue | undefined,
  ): Promise<DispatchOutcome> {
    try {
      const done: RecordDone = { toolName: tool.name, ordinal: base.ordinal, state: "completed", write: "complete", result: resultJson };
      await this.recordAgain(key, fence, () => this.ledger.complete(key, fence, resultJson), done, firstError);
    } catch (error) {
      if (isDispatchOnceError(error, "stale_claim")) throw performedButStale(key, fence, error);
      if (!isDispatchOnceError(error, "result_not_storable")) throw error;
      return this.reconcileUnstorable(tool, args, key, fence, error, base);
    }
    return outcomeOf(base, resultJson, false, resultParsed);
  }

  /** The wheel's renewal of a running call's lease (LEDGER-9). */
  private renewLease(lease: HeldLease): void {
    const sentAt = Date.now();
    // A ledger whose renew throws instead of rejecting is handled as one that rejects.
    new Promise<unknown>((resolve) => resolve(this.ledger.renew(lease.key, lease.fence, this.leaseMs))).then(
      () => {
        lease.confirmedUntil = sentAt + this.leaseMs;
      },
      (error: unknown) => {
        if (lease.finished) return;
        if (isDispatchOnceError(error, "stale_claim")) return this.loseLease(lease, "stale_claim", error);
        if (Date.now() >= lease.confirmedUntil) return this.loseLease(lease, "lease_unconfirmed", error);
        this.logger.warn("lease renewal failed; will retry", { key: lease.key, error: describeError(error) });
      },
    );
  }

  /** The claim was lost while the tool ran: stop renewing, and tell the tool (DISPATCH-11, DISPATCH-13). */
  private loseLease(lease: HeldLease, reason: "stale_claim" | "lease_unconfirmed", error: unknown): void {
    if (lease.finished || lease.aborted) return;
    this.renewals.remove(lease);
    this.emit({ type: "lease_lost", key: lease.key, toolName: lease.toolName, ordinal: lease.ordinal, fence: lease.fence, reason });
    lease.abort(error);
  }

  /**
   * The effect happened and its result cannot be kept (RECON-7): a probe may supply a result the
   * ledger can store (the downstream's own record of it). Any other answer keeps the failure
   * closed: a known effect never becomes "not performed".
   */
  private async reconcileUnstorable(
    tool: ToolDefinition,
    args: unknown,
    key: string,
    fence: number,
    error: Error,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
  ): Promise<DispatchOutcome> {
    if (tool.reconcile === undefined) return this.failClosed(key, fence, error, base);
    // The run has ended; its probe gets the tool's run bound afresh (DISPATCH-18), so the dispatch is answered.
    const ms = tool.runTimeoutMs ?? this.runTimeoutMs;
    const answer = await this.probeUntil(tool, args, key, "result_not_storable", ms === Infinity ? Infinity : Date.now() + ms, undefined);
    if (answer.verdict === "performed" && answer.resultJson !== undefined) {
      return this.settlePerformed(key, fence, answer.resultJson, "result_not_storable", answer, base);
    }
    return this.settle(key, fence, base, "result_not_storable", answer, "failed", () => this.failClosed(key, fence, error, base));
  }

  /**
   * The probe a run's throw asks (RECON-2), within what is left of the run's bound (DISPATCH-18):
   * its lease is renewed while it asks, so a probe that never answered would hold the row and the
   * dispatch forever. Past the bound its answer is `error`, which only weakens the record (RECON-5).
   */
  private probeAfterThrow(tool: ToolDefinition, args: unknown, key: string, cause: ReconcileCause, lease: HeldLease): Promise<ProbeAnswer> {
    return this.probeUntil(tool, args, key, cause, lease.runDeadline, lease.aborted ? undefined : lease.signal);
  }

  /**
   * A probe the dispatch waits on, ended at `deadline` (Date.now's clock; Infinity: never) or when
   * `signal` aborts: its answer is then `error` (RECON-5), so the dispatch is answered (DISPATCH-18).
   */
  private async probeUntil(tool: ToolDefinition, args: unknown, key: string, cause: ReconcileCause, deadline: number, signal: AbortSignal | undefined): Promise<ProbeAnswer> {
    if (deadline === Infinity) return this.probe(tool, args, key, cause, signal ?? new AbortController().signal);
    const bound = new AbortController();
    const reason = new Error("the probe did not answer within the run's bound (runTimeoutMs)");
    reason.name = "TimeoutError";
    // Not unref'd, as the run's own bound: the dispatch's answer is due then.
    const timer = setTimeout(() => bound.abort(reason), Math.max(0, deadline - Date.now()));
    const onAbort = (): void => bound.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      return await this.probeWithin(tool, args, key, bound.signal, cause);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * An on-demand probe bounded by the caller's signal: an abort before the answer is the verdict
   * `error` (RECON-5: it can only weaken the answer), whatever the probe does afterwards.
   */
  private async probeWithin(tool: ToolDefinition, args: unknown, key: string, signal: AbortSignal, cause: ReconcileCause = "on_demand"): Promise<ProbeAnswer> {
    const aborted = (): ProbeAnswer => ({ verdict: "error", detail: `the probe did not answer before its signal aborted: ${describeError(signal.reason)}` });
    if (signal.aborted) return aborted();
    let onAbort = (): void => {};
    const abort = new Promise<ProbeAnswer>((resolve) => {
      onAbort = () => resolve(aborted());
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const answer = await Promise.race([this.probe(tool, args, key, cause, signal), abort]);
      return signal.aborted ? aborted() : answer;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Run a tool's probe and read its answer. Whatever goes wrong in it (a throw, a non-verdict, a
   * result that is not JSON) can only weaken the answer to `error`, never strengthen it (RECON-5).
   */
  private async probe(tool: ToolDefinition, args: unknown, key: string, cause: ReconcileCause, signal: AbortSignal): Promise<ProbeAnswer> {
    const reconcile = tool.reconcile;
    if (reconcile === undefined) return { verdict: "unknown", detail: "no probe" };
    let answer: unknown;
    try {
      answer = await reconcile.call(tool, args, { idempotencyKey: key, toolName: tool.name, cause, signal });
    } catch (error) {
      return { verdict: "error", detail: describeError(error) };
    }
    // The answer's members are read as the result's are: a getter or a proxy trap that throws is
    // the probe's failure (RECON-5), never the dispatch's error with its claim renewed for ever.
    let outcome: unknown;
    try {
      outcome = typeof answer === "object" && answer !== null ? (answer as { outcome?: unknown }).outcome : undefined;
    } catch (error) {
      return { verdict: "error", detail: `the probe's answer cannot be read: ${describeError(error)}` };
    }
    switch (outcome) {
      case "performed": {
        try {
          const result = (answer as { result?: unknown }).result;
          const resultJson = canonicalize(toJsonData(result === undefined ? null : result));
          const size = utf8ByteLength(resultJson);
          if (size > this.ledger.capabilities.maxResultBytes) {
            return { verdict: "performed", detail: `the result is ${size} bytes; the ledger stores at most ${this.ledger.capabilities.maxResultBytes}` };
          }
          return { verdict: "performed", resultJson };
        } catch (error) {
          return { verdict: "performed", detail: `the result is not JSON data: ${describeError(error)}` };
        }
      }
      case "not_performed":
        return { verdict: "not_performed" };
      case "unknown": {
        let reason: unknown;
        try {
          reason = (answer as { reason?: unknown }).reason;
        } catch {
          // Its reason is only a detail: the verdict stands without it.
        }
        return typeof reason === "string" ? { verdict: "unknown", detail: reason } : { verdict: "unknown" };
      }
      default:
        return { verdict: "error", detail: "the probe did not answer a verdict ({ outcome: performed | not_performed | unknown })" };
    }
  }

  /** The probe says the effect happened: complete the row with its result, fenced (RECON-3). */
  private async settlePerformed(
    key: string,
    fence: number,
    resultJson: string,
    cause: ReconcileCause,
    answer: ProbeAnswer,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
  ): Promise<DispatchOutcome> {
    return this.settle(key, fence, base, cause, answer, "completed", async () => {
      try {
        await this.recorded(key, fence, () => this.ledger.complete(key, fence, resultJson), { toolName: base.toolName, ordinal: base.ordinal, state: "completed", write: "complete", result: resultJson });
      } catch (error) {
        if (isDispatchOnceError(error, "stale_claim")) throw performedButStale(key, fence, error);
        if (!isDispatchOnceError(error, "result_not_storable")) throw error;
        return this.failClosed(key, fence, error, base);
      }
      return outcomeOf(base, resultJson, false);
    });
  }

  /**
   * Emit the probe's answer and what the dispatcher writes for it, then write. The `recorded`
   * event that follows confirms the write; without it (a stale fence, the ledger down) nothing
   * was settled.
   */
  private async settle<T>(
    key: string,
    fence: number,
    base: { toolName: string; ordinal: number },
    cause: ReconcileCause,
    answer: ProbeAnswer,
    settled: "completed" | "failed" | "released" | "unknown",
    write: () => Promise<T>,
  ): Promise<T> {
    this.emitReconciled(key, base.toolName, base.ordinal, cause, answer, settled, fence);
    return write();
  }

  private emitReconciled(
    key: string,
    toolName: string,
    ordinal: number | undefined,
    cause: ReconcileCause,
    answer: ProbeAnswer,
    settled: "completed" | "failed" | "released" | "unknown" | "none",
    fence?: number,
  ): void {
    this.emit({
      type: "reconciled",
      key,
      toolName,
      ...(ordinal !== undefined ? { ordinal } : {}),
      ...(fence !== undefined ? { fence } : {}),
      cause,
      verdict: answer.verdict,
      settled,
      ...(answer.verdict === "error" && answer.detail !== undefined ? { error: answer.detail } : {}),
    });
  }

  /**
   * Release this dispatch's own claim. If one of its claims met ledger_unavailable, a copy of it
   * may still reach the store: retire the claim id first (LEDGER-28), so that the copy can never
   * find the row released and claimable, not even after someone else re-claims and releases it
   * (LEDGER-27 remembers only the last id released). If the retire cannot reach the ledger, the
   * release goes ahead (left in flight, an unkeyed call that was not performed would read
   * `unknown` once its lease ran out) and the retire is tried again when the dispatch ends.
   */
  private async releaseOwn(key: string, fence: number, base: { toolName: string; ordinal: number }): Promise<void> {
    const own = this.claimsOf.get(base);
    if (own !== undefined && own.unavailable && this.retires && !own.retired) {
      try {
        await this.ledger.retire!(key, own.claimId, { release: false });
        own.retired = true;
        this.emit({ type: "claim_retired", key, toolName: base.toolName, ordinal: base.ordinal, released: false });
      } catch (error) {
        if (!isDispatchOnceError(error, "ledger_unavailable")) throw error;
      }
    }
    await this.ledger.release(key, fence);
  }

  /**
   * Record a claimed run's outcome with its fence: the `recorded` event when it is written, and
   * on a failure the re-sends of DISPATCH-10 and DISPATCH-17 (recordAgain).
   */
  private async recorded(key: string, fence: number, write: () => Promise<void>, done: RecordDone): Promise<void> {
    try {
      await write();
    } catch (error) {
      return this.recordAgain(key, fence, write, done, error);
    }
    if (this.onEvent !== undefined) this.emit(recordedEvent(key, done));
  }

  /**
   * A record met `firstError`. The effect has happened (or is known not to have), so an outage
   * of the ledger should not leave its outcome unsaid: while the error is ledger_unavailable the
   * same write is sent again with the same fence, for up to recordRetryMs (DISPATCH-10). Fenced,
   * a copy that lands late is refused if anyone else acted on the row since. A re-send refused
   * with stale_claim may mean the first copy landed and its reply was lost: the row says which,
   * since only this claim holds this fence (DISPATCH-17).
   */
  private async recordAgain(key: string, fence: number, write: () => Promise<void>, done: RecordDone, firstError: unknown): Promise<void> {
    try {
      await this.resendRecord(key, fence, write, done, firstError);
    } catch (error) {
      // A result the ledger refuses to keep goes on to be settled (reconcileUnstorable), whose write is the last.
      if (isDispatchOnceError(error, "result_not_storable")) throw error;
      // The run ends without its record: said at once, so no one waits for a `recorded` (OTEL-4).
      // A hook that throws here must not replace the ledger's error, which says what the caller can do.
      try {
        // A write given up leaves the row in flight, to be taken over or turned unknown: only an
        // effect the run knows happened is more than "may have happened" then (as the error says).
        const effect: RunEffect = runEffect(done) === "happened" ? "happened" : "may_have_happened";
        this.emit({ type: "record_failed", key, toolName: done.toolName, ordinal: done.ordinal, fence, write: done.write, state: done.state, effect, error: describeError(error) });
      } catch {
        // as above
      }
      throw error;
    }
    if (this.onEvent !== undefined) this.emit(recordedEvent(key, done));
  }

  private async resendRecord(key: string, fence: number, write: () => Promise<void>, done: RecordDone, firstError: unknown): Promise<void> {
    const deadline = Date.now() + this.recordRetryMs;
    let delay = this.pollMs;
    let error = firstError;
    for (let attempt = 1; ; attempt++) {
      if (attempt > 1 && isDispatchOnceError(error, "stale_claim")) {
        let row: LedgerRow | undefined;
        try {
          row = await this.ledger.lookup(key);
        } catch (lookupError) {
          // Whether the first copy landed cannot be told: the effect may have happened (ERR-4).
          throw afterRunWriteError(key, lookupError, done);
        }
        if (!wroteThis(row, fence, done)) throw error;
        break;
      }
      const left = deadline - Date.now();
      if (!isDispatchOnceError(error, "ledger_unavailable") || left <= 0) throw afterRunWriteError(key, error, done);
      this.emit({ type: "record_retry", key, toolName: done.toolName, ordinal: done.ordinal, fence, write: done.write, attempt, error: describeError(error) });
      await sleep(Math.min(delay, left));
      delay = Math.min(delay * 2, this.maxPollMs);
      try {
        await write();
        break;
      } catch (next) {
        error = next;
      }
    }
  }

  /** The effect happened and its result cannot be kept: fail closed, never re-run (LEDGER-10). */
  private async failClosed(key: string, fence: number, error: Error, base: { toolName: string; ordinal: number }): Promise<never> {
    const notStorable = isDispatchOnceError(error, "result_not_storable")
      ? error
      : new ResultNotStorableError(key, error.message, { cause: error });
    try {
      await this.recorded(key, fence, () => this.ledger.fail(key, fence, {
        name: "ResultNotStorableError",
        message: notStorable.message,
        code: "result_not_storable",
      }), { toolName: base.toolName, ordinal: base.ordinal, state: "failed", write: "fail", happened: true });
    } catch (error) {
      // The effect happened and the claim is someone else's now (an operator's release, a
      // takeover): the caller is told it happened, as for a refused completion (DISPATCH-8).
      if (isDispatchOnceError(error, "stale_claim")) throw performedButStale(key, fence, error);
      throw error;
    }
    throw notStorable;
  }

  private async recordFailure(
    error: unknown,
    tool: ToolDefinition,
    key: string,
    fence: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    context: TurnContext,
    cause: ReconcileCause,
    answer: ProbeAnswer | undefined,
  ): Promise<DispatchOutcome> {
    // ERR-6: a ToolError under a code Dispatch-Once reads back (from a copy that let it through) is read
    // as naming no disposition: stored as definite, its code would be read back as ours.
    const disposition = ToolError.dispositionOf(error);
    const done = { toolName: tool.name, ordinal: base.ordinal };
    switch (disposition) {
      case "definite": {
        const stored = toStoredError(error as ToolError);
        await this.recorded(key, fence, () => this.ledger.fail(key, fence, stored), { ...done, state: "failed", write: "fail" });
        throw new ToolFailedError(key, stored, false);
      }
      case "not_performed": {
        // This run's request was not performed. But a row re-claimed or taken over (fence above 1)
        // may carry an earlier run whose response was lost: "not performed" speaks for this run
        // only, so the call as a whole may have happened (found by the spin model). That holds for
        // an unkeyed_write too (LEDGER-8: whatever the write class): its row is released again by
        // an operator's not_performed resolution, after which a paused earlier owner may still
        // send (§6.12's residual). A volatile ledger may have forgotten an earlier run's row, so
        // even fence 1 proves nothing there. In a resumed turn (TURN-15) an earlier holder's run
        // may claim after this release and perform the call: not even fence 1 proves it will not happen.
        const earlierRunMayHaveActed = fence > 1 || this.ledger.capabilities.durability !== "durable" || context.resumed === true;
        await this.recorded(key, fence, () => this.releaseOwn(key, fence, base), { ...done, state: "released", write: "release", effectMayHaveHappened: earlierRunMayHaveActed });
        this.emit({ type: "released", key, toolName: tool.name, ordinal: base.ordinal, effectMayHaveHappened: earlierRunMayHaveActed });
        throw new ClaimReleasedError(key, earlierRunMayHaveActed, error);
      }
      case "request_mismatch": {
        // The downstream holds this key for another request: the first one may have been
        // performed, and no re-run can tell, whatever the class (EFFECT-6). A probe that finds
        // the first request performed settles it (RECON-6); "not performed" cannot release a key
        // the downstream holds for another request that may still be in flight.
        if (answer?.verdict === "performed" && answer.resultJson !== undefined) {
          return this.settlePerformed(key, fence, answer.resultJson, "request_mismatch", answer, base);
        }
        return this.leaveUnknown(key, fence, `${REQUEST_MISMATCH_REASON}: ${describeError(error)}`, error, base, "request_mismatch", answer);
      }
      case "unknown":
        break;
    }
    if (answer?.verdict === "performed") {
      // The downstream has the effect: the user is told it happened, with its result (RECON-3).
      if (answer.resultJson !== undefined) return this.settlePerformed(key, fence, answer.resultJson, cause, answer, base);
      const notStorable = new ResultNotStorableError(key, `reconciled as performed, but ${answer.detail ?? "its result cannot be stored"}`);
      return this.settle(key, fence, base, cause, answer, "failed", () => this.failClosed(key, fence, notStorable, base));
    }
    if (tool.effect === "keyed_write") {
      // Unknown outcome (or not performed by the probe's account), but a re-run sends the stored
      // request under the same key and the downstream collapses it with any late landing of
      // this one (EFFECT-3, LEDGER-21, RECON-4).
      const release = async (): Promise<never> => {
        await this.recorded(key, fence, () => this.releaseOwn(key, fence, base), { ...done, state: "released", write: "release", effectMayHaveHappened: true });
        this.emit({ type: "released", key, toolName: tool.name, ordinal: base.ordinal, effectMayHaveHappened: true });
        throw new ClaimReleasedError(key, true, error);
      };
      return answer === undefined ? release() : this.settle(key, fence, base, cause, answer, "released", release);
    }
    // Unknown outcome and nothing downstream to collapse a repeat: never re-run (EFFECT-4). A
    // probe's "not performed" is not trusted here: the request may still be in transit (RECON-4).
    return this.leaveUnknown(key, fence, `${cause}: ${describeError(error)}`, error, base, cause, answer);
  }

  private async leaveUnknown(
    key: string,
    fence: number,
    reason: string,
    error: unknown,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
    cause: ReconcileCause,
    answer: ProbeAnswer | undefined,
  ): Promise<never> {
    // The probe's answer goes into the row's reason, for whoever settles it later.
    const full = answer === undefined ? reason : `${reason}; reconcile: ${answer.verdict}${answer.detail !== undefined ? ` (${answer.detail})` : ""}`;
    const mark = async (): Promise<never> => {
      await this.recorded(key, fence, () => this.ledger.markUnknown(key, fence, full), { toolName: base.toolName, ordinal: base.ordinal, state: "unknown", write: "markUnknown" });
      throw new OutcomeUnknownError(key, full, { cause: error });
    };
    return answer === undefined ? mark() : this.settle(key, fence, base, cause, answer, "unknown", mark);
  }

  private runContext(toolName: string, key: string, context: TurnContext, ordinal: number, abort: LazyAbort): ToolRunContext {
    const run = {
      idempotencyKey: key,
      conversationId: context.conversationId,
      turnIndex: context.turnIndex,
      ordinal,
      toolName,
    };
    // `signal` is made when the tool first reads it: most tools never do, and a controller per
    // call was a measurable share of the dispatcher's CPU. The same signal object on every read.
    // An own enumerable getter, as an object literal's `get signal()` made it, but one getter for
    // every context, reading the call's abort from a private field of the context (RunAbort):
    // a getter made per call gave each context a map of its own, in dictionary mode (0.7 µs a
    // call in a micro-benchmark, against 0.2).
    new RunAbort(run, abort);
    Object.defineProperty(run, "signal", RUN_SIGNAL);
    return run as ToolRunContext;
  }

  /**
   * Events are reports (OTEL-3): a listener that throws, or returns a promise that rejects, is
   * logged and changes nothing a dispatch does or tells. Before, its throw left the dispatch at the
   * event: after `recorded`, a payment made and completed was told to its caller as the
   * listener's error; at `run_started`, the claim was renewed for ever and its tool never ran.
   * On the hot path, call sites test `onEvent` first, so no event object is built for nobody.
   */
  private emit(event: DispatchEvent): void {
    const onEvent = this.onEvent;
    if (onEvent === undefined) return;
    try {
      const returned: unknown = onEvent(event);
      if (isThenable(returned)) returned.then(undefined, (error: unknown) => this.listenerFailed(event, error));
    } catch (error) {
      this.listenerFailed(event, error);
    }
  }

  private listenerFailed(event: DispatchEvent, error: unknown): void {
    this.logger.warn("an onEvent callback threw; the dispatch carries on (OTEL-3)", { type: event.type, key: event.key, error: describeError(error) });
  }
}

/**
 * An AbortController made only when its signal is first read. Aborted before that, the signal
 * it then hands out is already aborted with the same reason, as the eager one's would be.
 */
class LazyAbort {
  private controller: AbortController | undefined;
  private abortedWith: { reason: unknown } | undefined;

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.abortedWith !== undefined) this.controller.abort(this.abortedWith.reason);
    }
    return this.controller.signal;
  }

  get aborted(): boolean {
    return this.abortedWith !== undefined;
  }

  abort(reason: unknown): void {
    if (this.abortedWith !== undefined) return;
    this.abortedWith = { reason };
    this.controller?.abort(reason);
  }
}

/** A base class whose constructor gives back the object it is handed: its subclass's private fields then go on that object. */
class Stamp {
  constructor(target: object) {
    return target as Stamp;
  }
}

/**
 * A run context's abort, kept in a private field of the plain context object itself (Stamp):
 * invisible to Object.keys, spread, Reflect.ownKeys and structuredClone, and read by the one
 * `signal` getter that every context shares (RUN_SIGNAL).
 */
class RunAbort extends Stamp {
  readonly #abort: LazyAbort;
  constructor(context: object, abort: LazyAbort) {
    super(context);
    this.#abort = abort;
  }
  /**
   * The signal of the context the getter was read on, or of the context it inherits from
   * (`Object.create(context)`). A receiver that is neither (a Proxy around a context reads the
   * getter with the proxy as `this`) is refused with a TypeError: a getter made per call ignored
   * its receiver, this one cannot.
   */
  static signalOf(receiver: unknown): AbortSignal {
    for (let at = receiver; typeof at === "object" && at !== null; at = Object.getPrototypeOf(at)) {
      if (#abort in at) return (at as RunAbort).#abort.signal;
    }
    throw new TypeError("a run context's signal is read on the context the dispatcher made, or on an object that inherits from it");
  }
}

/** The run context's `signal`: what an object literal's `get signal() {}` defines (enumerable, configurable, no setter, named "get signal"). */
const RUN_SIGNAL: PropertyDescriptor = {
  get: Object.getOwnPropertyDescriptor(
    {
      get signal(): AbortSignal {
        return RunAbort.signalOf(this);
      },
    },
    "signal",
  )!.get,
  enumerable: true,
  configurable: true,
};

/**
 * A definite failure, an unknown outcome, a result that could not be stored, a release, a lost
 * claim, a run past its bound (DISPATCH-18) or a ledger error while recording (after the run) of
 * the stored request, not this call's (IDENT-3): the error names that request, as an outcome would
 * (RECORD-10: a record of a re-worded call tells the request that ran, not the re-wording). A
 * ledger_unavailable gets the call's key first (as claimAndRun would give it), so that it is named too.
 */
function namingStored(error: unknown, key: string, storedRequest: string | undefined): never {
  const keyed = storedRequest !== undefined ? withCallKey(error, key) : error;
  if (
    storedRequest !== undefined &&
    (isDispatchOnceError(keyed, "tool_failed") ||
      isDispatchOnceError(keyed, "outcome_unknown") ||
      isDispatchOnceError(keyed, "result_not_storable") ||
      isDispatchOnceError(keyed, "claim_released") ||
      isDispatchOnceError(keyed, "stale_claim") ||
      isDispatchOnceError(keyed, "in_flight_elsewhere") ||
      isDispatchOnceError(keyed, "ledger_unavailable") ||
      isDispatchOnceError(keyed, "ledger_corrupt")) &&
    (keyed as { key?: unknown }).key === key
  ) {
    (keyed as { storedRequest?: JsonValue }).storedRequest = parseStoredRequest(key, storedRequest) as JsonValue;
  }
  throw keyed;
}

/**
 * A claimed call's lease while its tool runs: an entry of the dispatcher's renewal wheel, and the
 * abort its tool is told through when the lease is lost (LEDGER-9, DISPATCH-11). One object per
 * call instead of closures over the run's variables.
 */
class HeldLease extends LazyAbort implements RenewalEntry {
  due = 0;
  prev: HeldLease | undefined = undefined;
  next: HeldLease | undefined = undefined;
  /** Not in the renewal wheel until added. */
  removed = true;
  /** The run (and its probe) has ended: a renewal's answer no longer matters. */
  finished = false;
  /** When the run's bound passes (DISPATCH-18), on Date.now's clock; a throw's probe ends by then too. */
  runDeadline = Infinity;

  constructor(
    readonly key: string,
    readonly fence: number,
    readonly toolName: string,
    readonly ordinal: number,
    /**
     * Our own estimate of the lease, on our clock: renewals that cannot reach the ledger past it
     * mean another attempt may already have taken the row over (DISPATCH-13).
     */
    public confirmedUntil: number,
  ) {
    super();
  }
}

/** A run still pending at its bound (DISPATCH-18); never leaves the dispatcher. */
class RunTimedOut {
  constructor(readonly ms: number) {}
}

/** A bounded run's entry in the dispatcher's RunDeadlines: at the bound, its wait rejects with RunTimedOut. */
class PendingRun extends RunDeadline {
  constructor(
    private readonly ms: number,
    private readonly reject: (reason: RunTimedOut) => void,
  ) {
    super();
  }

  expire(): void {
    this.reject(new RunTimedOut(this.ms));
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === "object" || typeof value === "function") && value !== null && typeof (value as { then?: unknown }).then === "function";
}

/** A probe's answer, read: a performed result is canonical JSON text ready for the ledger, or absent when it cannot be stored. */
type ProbeAnswer =
  | { verdict: "performed"; resultJson: string; detail?: undefined }
  | { verdict: "performed"; resultJson?: undefined; detail: string }
  | { verdict: "not_performed"; detail?: undefined }
  | { verdict: "unknown" | "error"; detail?: string };

/**
 * Whether a failure would leave the outcome open (a lost response, a lost lease, a key held for
 * another request), so a probe may settle it. A definite or not-performed ToolError is the
 * downstream's own answer about this run (RECON-2).
 */
function mayReconcile(error: unknown): boolean {
  const disposition = ToolError.dispositionOf(error);
  return disposition === "unknown" || disposition === "request_mismatch";
}

/**
 * The handler the chapter starts from: runs every call it is handed, with no memory.
 * Exported only as a baseline for demos and tests; it is the bug this package fixes.
 */
export class UnguardedDispatcher implements CallDispatcher {
  private readonly registry: ToolRegistry;
  constructor(tools: ToolRegistry | readonly ToolDefinition<any, any>[]) {
    this.registry = toRegistry(tools);
  }
  turn(context: TurnContext): TurnDispatch {
    return {
      dispatch: async (call) => {
        const tool = this.registry.get(call.name);
        const args = tool.input.parse(call.input);
        // Keyed on the provider's call id, as naive code does: it changes on every response.
        const key = call.callId ?? randomUUID();
        const result = await tool.run(args, {
          idempotencyKey: key,
          conversationId: context.conversationId,
          turnIndex: context.turnIndex,
          ordinal: 0,
          toolName: tool.name,
          signal: new AbortController().signal,
        });
        const resultJson = canonicalize(toJsonData(result === undefined ? null : result));
        return {
          key,
          toolName: tool.name,
          effect: tool.effect,
          ordinal: 0,
          result: JSON.parse(resultJson) as JsonValue,
          resultJson,
          replayed: false,
        };
      },
    };
  }
}

/**
 * The outcome of a call whose stored result text is `resultJson`: its members written out, in
 * the order `{ ...base, result, resultJson, replayed }` would give them, because that spread
 * followed by more members took V8's slow path (measured: a tenth of the dispatcher's CPU).
 */
function outcomeOf(
  base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
  resultJson: string,
  replayed: boolean,
  /** JSON.parse(resultJson), when it is at hand already. */
  parsed?: JsonValue,
): DispatchOutcome {
  return {
    key: base.key,
    toolName: base.toolName,
    effect: base.effect,
    ordinal: base.ordinal,
    result: parsed !== undefined ? parsed : (JSON.parse(resultJson) as JsonValue),
    resultJson,
    replayed,
  };
}

/**
 * Whether the identity projections (see project) of `a` and `b` are the same JSON data, as
 * sameJsonData of the two projections says, without making them; `a`'s projection is known to
 * have a canonical form. False whenever in doubt.
 */
function sameIdentity(a: unknown, b: unknown, fields: readonly string[] | undefined): boolean {
  if (fields === undefined) return sameJsonData(a, b);
  try {
    for (const field of fields) {
      const x = (a as Record<string, unknown>)[field];
      const y = (b as Record<string, unknown>)[field];
      // An undefined member is absent from a projection.
      if (x === undefined ? y !== undefined : y === undefined || !sameData(x, y)) return false;
    }
    return true;
  } catch {
    return false;
  }
}

/**
 * IDENT-7: a write's key arguments hold no number beyond 2^53 - 1. A JSON parser rounds a longer
 * integer to the nearest double, so two different numbers in the model's text (two account ids)
 * arrive as one value and would share a key. For a tool that refuses differing requests every
 * argument counts, since comparing the whole request decides whether a call is the stored one
 * (IDENT-6). `text` is the canonical text of what is checked: only one with a digit run of 16 or
 * more, or a positive exponent, can hold such a number, so others skip the walk.
 */
function checkExactNumbers(tool: ToolDefinition, args: unknown, text: string): void {
  if (!MAYBE_INEXACT.test(text)) return;
  const keyArgs =
    tool.identity === undefined || tool.onRequestDiffers === "refuse" ? args : project(args as Record<string, unknown>, tool.identity);
  // Canonicalised already, so plain JSON data of bounded depth: an explicit stack all the same.
  const stack: { value: unknown; path: (string | number)[] }[] = [{ value: keyArgs, path: [] }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value === "number") {
      if (Math.abs(value) > Number.MAX_SAFE_INTEGER) {
        throw new ToolInputError(tool.name, [
          {
            path,
            message:
              `${String(value)} is beyond 2^53 - 1: JSON parsing rounds such numbers, so different numbers in the ` +
              `call would share one key (IDENT-7); the tool should take this field as a string`,
          },
        ]);
      }
    } else if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push({ value: value[i], path: [...path, i] });
    } else if (typeof value === "object" && value !== null) {
      for (const name of Object.keys(value).reverse()) stack.push({ value: (value as Record<string, unknown>)[name], path: [...path, name] });
    }
  }
}

/** Any character outside ASCII: only such text can be other than NFC. */
const NON_ASCII = /[\u0080-\uffff]/;

/** A digit run of 16 or more, or a positive exponent (JCS writes 1e21 and above that way). */
const MAYBE_INEXACT = /\d{16}|e\+/;

function project(args: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) if (args[field] !== undefined) out[field] = args[field];
  return out;
}

const RECONCILE_OPTION_NAMES: OptionNames<{ actor?: string; signal?: AbortSignal }> = { actor: true, signal: true };
const DISPATCHER_OPTION_NAMES: OptionNames<DispatcherOptions> = {
  tools: true,
  ledger: true,
  owner: true,
  leaseMs: true,
  waitMs: true,
  pollMs: true,
  maxPollMs: true,
  claimRetryMs: true,
  recordRetryMs: true,
  runTimeoutMs: true,
  reconcileGraceMs: true,
  allowVolatileLedgerForUnkeyedWrites: true,
  logger: true,
  onEvent: true,
};
const RECONCILE_UNKNOWN_OPTION_NAMES: OptionNames<ReconcileUnknownOptions> = { olderThanMs: true, limit: true, probeTimeoutMs: true, signal: true };
/** An AbortSignal, also of another realm (duck-typed: `instanceof` fails across realms). */
function isAbortSignal(value: unknown): value is AbortSignal {
  if (value instanceof AbortSignal) return true;
  const candidate = value as Partial<AbortSignal> | null;
  return typeof candidate === "object" && candidate !== null && typeof candidate.aborted === "boolean" && typeof candidate.addEventListener === "function" && typeof candidate.removeEventListener === "function";
}

/** A registry of any copy of this package (duck-typed: `instanceof` fails across copies), or a list of tools. */
function toRegistry(tools: unknown): ToolRegistry {
  if (Array.isArray(tools)) return new ToolRegistry(tools);
  const candidate = tools as Partial<ToolRegistry> | null | undefined;
  if (typeof candidate?.get === "function" && typeof candidate.list === "function") return candidate as ToolRegistry;
  throw new InvalidArgumentError("tools", "must be a ToolRegistry or an array of tool definitions");
}

/** The members of a `ToolCall`, as a record so that a new member cannot be left out of it. */
const CALL_MEMBERS: { readonly [Member in keyof Required<ToolCall>]: true } = { name: true, input: true, callId: true };
/** A turn()'s context members; dispatch() and keyFor() take an ordinal besides (turn() counts ordinals itself). */
const TURN_CONTEXT_MEMBERS: Readonly<Record<string, true>> = { conversationId: true, turnIndex: true, resumed: true, sharedTurn: true };
const CALL_CONTEXT_MEMBERS: Readonly<Record<string, true>> = { ...TURN_CONTEXT_MEMBERS, ordinal: true };

function checkTurnContext(context: unknown, members: Readonly<Record<string, true>> = CALL_CONTEXT_MEMBERS): asserts context is TurnContext {
  if (typeof context !== "object" || context === null || Array.isArray(context)) {
    throw new InvalidArgumentError("context", `must be an object { conversationId, turnIndex }, got ${describeValue(context)}`);
  }
  // A misspelt member would be ignored: an ordinal read as 0 takes an earlier identical call's key
  // and replays its result (the second payment never happens); a misspelt resumed drops TURN-15's caveat.
  const unknown = unknownOptionName(context, members);
  if (unknown !== undefined) {
    throw new InvalidArgumentError(`context.${unknown}`, `is not a member of ${members === TURN_CONTEXT_MEMBERS ? "turn()'s" : "a call's"} context (its members: ${Object.keys(members).join(", ")})`);
  }
  const resumed = (context as { resumed?: unknown }).resumed;
  if (resumed !== undefined && typeof resumed !== "boolean") {
    throw new InvalidArgumentError("context.resumed", "must be a boolean when given");
  }
  const sharedTurn = (context as { sharedTurn?: unknown }).sharedTurn;
  if (sharedTurn !== undefined && typeof sharedTurn !== "boolean") {
    throw new InvalidArgumentError("context.sharedTurn", "must be a boolean when given");
  }
}

/** An absent ordinal is 0; a present one, even null, goes to KEY-4's check. */
/** A duration option in whole milliseconds within [min, max], or its default when absent (ERR-1). */
function millis(value: unknown, fallback: number, field: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `at least ${min}` : `from ${min} to ${max}`;
    throw new InvalidArgumentError(`options.${field}`, `must be a whole number of milliseconds ${range}, got ${describeValue(value)}`);
  }
  return value;
}

/**
 * The position `TurnDispatch.dispatch`'s options name, or undefined for the call's own. Its turn
 * index and ordinal are checked where the key is derived (KEY-3, KEY-4), as a context's are.
 */
function dispatchedAt(options: TurnDispatchOptions, context: TurnContext): (TurnContext & { ordinal: number }) | undefined {
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new InvalidArgumentError("options", "must be an object when given");
  for (const name of Object.keys(options)) {
    if (name !== "at") throw new InvalidArgumentError(`options.${name}`, "is not an option of a turn's dispatch (its option: at)");
  }
  const at = options.at;
  if (at === undefined) return undefined;
  if (typeof at !== "object" || at === null || Array.isArray(at)) throw new InvalidArgumentError("options.at", "must be { turnIndex, ordinal }");
  for (const name of Object.keys(at)) {
    if (name !== "turnIndex" && name !== "ordinal" && name !== "answered") throw new InvalidArgumentError(`options.at.${name}`, "is not a member of options.at (its members: turnIndex, ordinal, answered)");
  }
  if (at.ordinal === undefined) throw new InvalidArgumentError("options.at.ordinal", "is required");
  if (at.answered !== undefined && (!Array.isArray(at.answered) || at.answered.some((k) => typeof k !== "string"))) throw new InvalidArgumentError("options.at.answered", "must be an array of keys when given");
  // Only a turn before this one: a later index would pre-empt a call nobody has made yet.
  if (typeof at.turnIndex === "number" && at.turnIndex >= context.turnIndex) {
    throw new InvalidArgumentError("options.at.turnIndex", `must be an earlier turn index than the turn's (${context.turnIndex}), got ${at.turnIndex}`);
  }
  return { conversationId: context.conversationId, turnIndex: at.turnIndex, ordinal: at.ordinal, resumed: true };
}

function ordinalOf(context: { ordinal?: number }): number {
  return context.ordinal === undefined ? 0 : context.ordinal;
}

/** Whether stored request text denotes the same JSON value as this dispatch's arguments. */
/**
 * A write whose rows IDENT-10 reads: not a tool that refuses differing requests, whose keys a
 * client assigns (IDENT-6): a changed definition does not change them.
 */
function guardable(tool: ToolDefinition): boolean {
  return tool.effect !== "read" && tool.onRequestDiffers !== "refuse";
}

function sameRequest(stored: string, canonical: string): boolean {
  try {
    return canonicalize(JSON.parse(stored)) === canonical;
  } catch {
    return false;
  }
}

/** IDENT-9: the compared fields of a call's arguments, as JCS text (undefined when the tool compares all). */
function withCompared(prepared: PreparedCall): PreparedCall {
  const fields = prepared.tool.comparedFields;
  if (fields === undefined) return prepared;
  return { ...prepared, comparedCanonical: canonicalize(project(prepared.args as Record<string, unknown>, fields)) };
}

/** Whether stored request text holds the same compared fields as this dispatch's arguments. */
function sameProjection(stored: string, fields: readonly string[], canonical: string): boolean {
  try {
    const value: unknown = JSON.parse(stored);
    return typeof value === "object" && value !== null && canonicalize(project(value as Record<string, unknown>, fields)) === canonical;
  } catch {
    return false;
  }
}

/** The stored request is JSON text written by an earlier claim; unreadable text is a corrupt row. */
function parseStoredRequest(key: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new LedgerCorruptError(key, "its stored request is not JSON", { cause });
  }
}

/**
 * The UTF-8 size of `text` when it may be more than `limit` bytes, else 0: a UTF-16 unit is at
 * most 3 UTF-8 bytes, so a text that short need not be counted (nor its rope flattened).
 */
function sizeBeyond(text: string, limit: number): number {
  return text.length * 3 <= limit ? 0 : utf8ByteLength(text);
}

/** What a ledger write made after the tool ran raises for `error` (see recorded, ERR-4). */
/** What a record writes, for its `recorded` event and for reading back whether it landed (DISPATCH-17). */
function recordedEvent(key: string, done: RecordDone): DispatchEvent {
  const { toolName, ordinal, state, effectMayHaveHappened } = done;
  return { type: "recorded", key, toolName, ordinal, state, effect: runEffect(done), ...(effectMayHaveHappened !== undefined ? { effectMayHaveHappened } : {}) };
}

/** What the run's record says of its effect (OTEL-5): its write's state, except a failure closed on a result that happened. */
function runEffect(done: RecordDone): RunEffect {
  if (done.happened === true || done.state === "completed") return "happened";
  if (done.state === "failed") return "not_happened";
  if (done.state === "released") return done.effectMayHaveHappened === false ? "not_happened" : "may_have_happened";
  return "may_have_happened";
}

interface RecordDone {
  toolName: string;
  ordinal: number;
  state: "completed" | "failed" | "unknown" | "released";
  write: RecordWrite;
  /** A completion's result text: the row must hold exactly it. */
  result?: string;
  /** A release after the tool ran: whether the call as a whole may have happened (the `released` event's). */
  effectMayHaveHappened?: boolean;
  /** A `fail` that closes a run whose effect happened (result_not_storable, LEDGER-10), not a definite failure. */
  happened?: true;
}

/**
 * Whether `row` is this claim's record: fences are never reused for a key (LEDGER-4), so a row
 * at this fence in the state the write makes was written by this claim's own write.
 */
function wroteThis(row: LedgerRow | undefined, fence: number, done: RecordDone): boolean {
  if (row === undefined || row.fence !== fence || row.state !== done.state) return false;
  return row.state !== "completed" || row.result === done.result;
}

/**
 * The run performed the effect (its tool returned a result, or a probe found it performed) and its
 * claim was lost before the result was recorded: someone else now owns the row (a takeover, an
 * operator's resolution, RESOLVE-5) and fencing keeps theirs (DISPATCH-8). The caller is told the
 * effect happened, not "possibly": the row may say otherwise (a resolution as not performed).
 */
function performedButStale(key: string, fence: number, error: unknown): StaleClaimError {
  return new StaleClaimError(
    key,
    fence,
    "the effect happened (the run returned a result), but the claim was lost before the result was recorded; the row is its new owner's or an operator's",
    { effectHappened: true, cause: error },
  );
}

/**
 * A ledger_unavailable raised by a write's dispatch, given the call's key when it has none: the
 * runner lists a failed call under the key its error names (RECORD-2), and an effect whose record
 * could not be written (DISPATCH-10) must be told under its row's key. The store's error stays the
 * cause, and what the error knows of the effect (`effectHappened`) is kept.
 */
function withCallKey(error: unknown, key: string): unknown {
  if (!isDispatchOnceError(error, "ledger_unavailable") || (error as { key?: unknown }).key !== undefined) return error;
  const happened = (error as { effectHappened?: unknown }).effectHappened === true;
  return new LedgerUnavailableError(error.message, { cause: error.cause ?? error, key, ...(happened ? { effectHappened: true as const } : {}) });
}

/**
 * A ledger write made AFTER the tool ran. An error from it says nothing about the effect,
 * which may have happened: one whose code would read "did not happen" (a refused argument,
 * a connection inside the caller's transaction) is re-raised as ledger_unavailable, so no
 * caller or record tells the user an effect failed that may have taken place (ERR-4).
 *
 * When the write recorded an effect the run knows happened (a result, stored or not storable,
 * or a probe's performed), every error raised for it says so (DISPATCH-10): the row stays in
 * flight and may later read `unknown` or be released by an operator, so the caller's error is
 * where the truth is told, as for DISPATCH-8's stale_claim. A ledger_corrupt (the row cannot be
 * read back, or holds what this version did not write) stays ledger_corrupt, for the operator,
 * with `effectHappened`; anything else that does not already say "yes" (ledger_unavailable, a
 * foreign error: a driver's bug, a TypeError in an adapter) is raised as ledger_unavailable with
 * `effectHappened` and the original as its cause. stale_claim passes (its callers raise
 * performedButStale), and so does result_not_storable (settled next, LEDGER-10).
 * A write whose effect the run does not know passes any other error as it is.
 */
function afterRunWriteError(key: string, error: unknown, done: RecordDone): unknown {
  const happened = runEffect(done) === "happened";
  if (!happened) {
    if (catalogueEntry(error)?.effect !== "no") return error;
    return new LedgerUnavailableError(`the ledger refused to record the outcome of call ${key} after the tool ran: ${describeError(error)}`, { cause: error });
  }
  if (effectOf(error) === "yes" || isDispatchOnceError(error, "stale_claim")) return error;
  if (isDispatchOnceError(error, "ledger_corrupt")) {
    // Under the call's key, which the runner lists it under (RECORD-2); the adapter's error is the cause.
    const prefix = `ledger row ${key} cannot be read: `;
    const detail = error.message.startsWith(prefix) ? error.message.slice(prefix.length) : error.message;
    return new LedgerCorruptError(key, `${detail} (the effect happened: the run returned a result before its record was lost)`, { cause: error, effectHappened: true });
  }
  const refused = catalogueEntry(error)?.effect === "no";
  return new LedgerUnavailableError(
    refused
      ? `the ledger refused to record the outcome of call ${key} after the tool ran (the effect happened): ${describeError(error)}`
      : `the effect of call ${key} happened (the run returned a result), but the ledger could not record it: ${describeError(error)}`,
    { cause: error, key, effectHappened: true },
  );
}

function describeError(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "an unprintable error";
  }
}

function toStoredError(error: ToolError): StoredError {
  const stored: StoredError = { name: error.name, message: error.message };
  const { code } = error;
  // Read once: recordFailure let no code of ours through (ERR-6), and a getter gets no second say.
  if (typeof code === "string" && !ToolError.reservedCodes.includes(code)) stored.code = code;
  if (error.details !== undefined) {
    try {
      stored.details = JSON.parse(canonicalize(toJsonData(error.details)));
    } catch {
      stored.details = describeError(error.details);
    }
  }
  return stored;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The top-level fields in which two request texts differ (sorted), for a warning that must not
 * carry the arguments' values; `["(the request)"]` when either is not a JSON object.
 */
function differingFields(storedText: string, replayText: string): string[] {
  let stored: unknown;
  let replay: unknown;
  try {
    stored = JSON.parse(storedText);
    replay = JSON.parse(replayText);
  } catch {
    return ["(the request)"];
  }
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObject(stored) || !isObject(replay)) return ["(the request)"];
  const text = (v: unknown) => (v === undefined ? undefined : canonicalize(v));
  try {
    return [...new Set([...Object.keys(stored), ...Object.keys(replay)])].filter((name) => text(stored[name]) !== text(replay[name])).sort();
  } catch {
    return ["(the request)"]; // a stored text no canonical form takes: the warning must not fail the call
  }
}
