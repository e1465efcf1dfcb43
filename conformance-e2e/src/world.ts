import { AsyncLocalStorage } from "node:async_hooks";
import type { RunnerEvent, SendResult } from "@dispatch-once/runner";
import {
  Dispatcher,
  MemoryConversationStore,
  ToolError,
  ToolRegistry,
  canonicalize,
  defineTool,
  deriveKey,
  type CallDispatcher,
  type ConversationStore,
  type DispatchEvent,
  type DispatcherOptions,
  type Ledger,
  type StoredMessage,
  type ToolDefinition,
} from "@dispatch-once/core";
import {
  DISPOSITION_BY_OUTCOME,
  PaymentsError,
  createPaymentsClient,
  startMockPayments,
  type FaultSpec,
  type MockPaymentsServer,
  type PaymentsClient,
} from "@dispatch-once/mock-payments";
import { z } from "zod";
import { startProvider, type AnthropicSideOptions, type KitRunner, type ProviderSide, type RunnerProviderName } from "./provider.js";
import { divergedCalls, divergedFollowUp, type DeployKind, type MessagePlan, type PlannedCall, type Scenario, type SplicePlan, type StreamCut, type WorkerDeath } from "./scenario.js";

/** The servers one property run shares across its cases; each case gets its own account and ledger namespace. */
export interface World {
  /** The mock model provider and the stream side (runner, SDK) the workers drive it with. */
  provider: ProviderSide;
  payments: MockPaymentsServer;
  close(): Promise<void>;
}

/**
 * @param providerName the stream side to run on. @default "anthropic"
 * @param options the Anthropic side's: a platform every case runs on instead of the drawn one.
 */
export async function startWorld(providerName: RunnerProviderName = "anthropic", options: AnthropicSideOptions = {}): Promise<World> {
  const provider = await startProvider(providerName, options);
  const payments = await startMockPayments({});
  return {
    provider,
    payments,
    close: async () => {
      await provider.close();
      await payments.close();
    },
  };
}

/**
 * The conversation's turn lease (TURN-10). Long, so that a live worker never loses it to a
 * slow event loop (a takeover in a calm run is a finding); a death expires it at once by
 * moving that conversation store's clock past it (what waiting out the lease would do).
 */
export const TURN_LEASE_MS = 5_000;
/** How long a sender waits for a conversation another worker drives (conversation_busy after). */
export const BUSY_WAIT_MS = 15_000;
/** Claim lease when no worker dies: nobody waits on it, so it can be long and never lapse by accident. */
export const CALM_CLAIM_LEASE_MS = 5_000;

// ---- tools ---------------------------------------------------------------------------------

/** The kit's tools as data: the oracle derives the key of a committed call from them (KEY-1, DISPATCH-3). */
export const TOOL_SHAPES = {
  send_payment: {
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
    // The memo is free text a retried model re-words: not part of what the payment is (IDENT-1).
    identity: ["payee", "amount", "currency", "reference"] as string[] | undefined,
  },
  void_payment: { effect: "keyed_write", input: z.object({ reference: z.string() }), identity: undefined },
  // The internal API that deduplicates nothing: the ledger is the only guard (EFFECT-4).
  create_invoice: {
    effect: "unkeyed_write",
    input: z.object({ customer: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string() }),
    identity: undefined,
  },
  search_payments: { effect: "read", input: z.object({}), identity: undefined },
} as const;

export type KitToolName = keyof typeof TOOL_SHAPES;

const PAYMENT_IDENTITY = ["payee", "amount", "currency", "reference"];

/**
 * The payment tool as a new release defines it (scenario.ts DeployKind), each keying the same
 * call otherwise than TOOL_SHAPES (IDENT-4) while the earlier release's requests stay valid:
 * an identity field with a default, a transform of a key field, a rename with `formerNames`.
 */
export const DEPLOYED_PAYMENT: Record<DeployKind, { name: string; input: z.ZodType<Record<string, unknown>>; identity: string[]; formerNames?: string[] }> = {
  identity: {
    name: "send_payment",
    input: TOOL_SHAPES.send_payment.input.extend({ channel: z.string().default("sepa") }),
    identity: [...PAYMENT_IDENTITY, "channel"],
  },
  transform: {
    name: "send_payment",
    input: TOOL_SHAPES.send_payment.input.extend({ payee: z.string().transform((p) => (p.startsWith("acct:") ? p : `acct:${p}`)) }),
    identity: PAYMENT_IDENTITY,
  },
  rename: { name: "pay", input: TOOL_SHAPES.send_payment.input, identity: PAYMENT_IDENTITY, formerNames: ["send_payment"] },
};

/** A tool name as the kit's plans name it: a release's renamed payment tool (DEPLOYED_PAYMENT) is `send_payment`. */
export function kitToolName(name: string): string {
  return name === DEPLOYED_PAYMENT.rename.name ? "send_payment" : name;
}

/**
 * What the payments API is sent for a payment request, whichever release shaped it (DEPLOYED_PAYMENT):
 * without the `channel` a new identity defaults, the payee without the `acct:` a transform adds. The
 * oracle reads a record's `input` through it too (RECORD-10: which payment the effect log shows).
 */
export function paymentBody(args: Record<string, unknown>): Record<string, unknown> {
  const { channel: _, ...rest } = args;
  return typeof rest.payee === "string" ? { ...rest, payee: rest.payee.replace(/^acct:/, "") } : rest;
}

function identityArgs(name: KitToolName, args: Record<string, unknown>): Record<string, unknown> {
  const identity = TOOL_SHAPES[name].identity;
  if (identity === undefined) return args;
  return Object.fromEntries(identity.filter((f) => args[f] !== undefined).map((f) => [f, args[f]]));
}

/** What identifies a call for the ordinal count (TURN-4), or undefined when the input is invalid. */
export function identityText(name: string, input: unknown): string | undefined {
  if (!(name in TOOL_SHAPES)) return undefined;
  const parsed = TOOL_SHAPES[name as KitToolName].input.safeParse(input);
  if (!parsed.success) return undefined;
  return canonicalize(identityArgs(name as KitToolName, parsed.data as Record<string, unknown>) as never);
}

/** The key spec §3 gives a call, computed independently of the dispatcher under test. */
export function expectedKey(conversationId: string, turnIndex: number, name: string, input: unknown, ordinal: number): string | undefined {
  if (!(name in TOOL_SHAPES)) return undefined;
  const parsed = TOOL_SHAPES[name as KitToolName].input.safeParse(input);
  if (!parsed.success) return undefined;
  return deriveKey({ conversationId, turnIndex, name, args: identityArgs(name as KitToolName, parsed.data as Record<string, unknown>), ordinal });
}

/**
 * The keys spec §3 gives a call at an ordinal under each definition its tool had in the case: the
 * kit's (TOOL_SHAPES) and, for a payment in a conversation a deploy reached (MessagePlan `deploy`),
 * the new release's (DEPLOYED_PAYMENT: its identity, schema and name). A call of the renamed tool
 * is keyed under the old name too (the rows that release made). Computed independently of the
 * dispatcher under test.
 */
export function keysUnderReleases(conversationId: string, turnIndex: number, name: string, input: unknown, ordinal: number, release: DeployKind | undefined): string[] {
  const keys: string[] = [];
  const kitName = kitToolName(name);
  const old = expectedKey(conversationId, turnIndex, kitName, input, ordinal);
  if (old !== undefined) keys.push(old);
  if (release === undefined || kitName !== "send_payment") return keys;
  const now = DEPLOYED_PAYMENT[release];
  const parsed = now.input.safeParse(input);
  if (!parsed.success) return keys;
  const data = parsed.data;
  const args = Object.fromEntries(now.identity.filter((f) => data[f] !== undefined).map((f) => [f, data[f]]));
  keys.push(deriveKey({ conversationId, turnIndex, name: now.name, args: args as never, ordinal }));
  return keys;
}

/** Faults and deaths are planned per call; a re-worded memo must not hide the call from its plan. */
export function faultSignature(tool: string, args: Record<string, unknown>): string {
  const picked = tool in TOOL_SHAPES ? identityArgs(tool as KitToolName, args) : args;
  return `${tool}:${JSON.stringify(Object.keys(picked).sort().map((k) => [k, picked[k]]))}`;
}

/**
 * Where a planned fault applies: a call's signature in a step of its message's tool loop (0 the
 * first turn, 1 the follow-up). A follow-up may repeat a first-turn call exactly; a fault planned
 * on it must not fire on the first turn's execution.
 */
export function faultSlot(step: number, signature: string): string {
  return `${step > 0 ? 1 : 0}|${signature}`;
}

// ---- what a case records ----------------------------------------------------------------------

/** One line of the readable timeline a counterexample prints. */
export interface TimelineEntry {
  at: number;
  who: string;
  what: string;
}

/** One execution of a tool's run function: what the dispatcher handed it and what the downstream said. */
/**
 * Which send() a tool run or a runner event belongs to: a worker may run two sends at once (a
 * double click, a send whose stalled call outlives its turn), and a record speaks only for the
 * attempts of the send that wrote it.
 */
export const sendScope = new AsyncLocalStorage<number>();

export interface ToolRun {
  key: string;
  tool: string;
  conversationId: string;
  turnIndex: number;
  ordinal: number;
  /** JCS of the arguments the tool ran with: the stored request on every re-run (LEDGER-21). */
  request: string;
  worker: string;
  /** The send() whose attempt ran it (sendScope). */
  send?: number;
  startedAt: number;
  endedAt?: number;
  downstream?: string;
}

/** A message the case sent (each id once here, however often it was re-sent). */
export interface SentMessage {
  conversationId: string;
  id: string;
  text: string;
  plan: MessagePlan;
  /** Every call the user asked for: the first turn's, then the follow-up turn's (each an intent). */
  calls: PlannedCall[];
  /** For a re-ask: the id of the failed message it asks again (the same intent, TURN-12). */
  reaskOf?: string;
  /** Sent together with another message (TURN-9). */
  concurrent: boolean;
}

export type SendOutcome = "answered" | "failed" | "busy" | "error" | "died" | "timeout";

export interface SendRecord {
  conversationId: string;
  messageId: string;
  worker: string;
  startedAt: number;
  endedAt: number;
  outcome: SendOutcome;
  result?: SendResult;
  error?: unknown;
}

export type RecordedEvent = RunnerEvent & {
  worker: string;
  /** The send() that emitted it (sendScope). */
  send?: number;
  /** Effects (seq numbers) the payments API had performed when a record was written. */
  effectsSeen?: Set<number>;
};

/** A conversation store as the case owns it: `expireLeases` is the clock running past every lease. */
export interface CaseStore {
  store: ConversationStore;
  expireLeases(): void;
}

export interface CaseContext {
  scenario: Scenario;
  account: string;
  stores: Map<string, CaseStore>;
  timeline: TimelineEntry[];
  messages: SentMessage[];
  sends: SendRecord[];
  /** Runner events of every live worker. */
  events: RecordedEvent[];
  dispatchEvents: (DispatchEvent & { worker: string; at: number })[];
  runs: ToolRun[];
  /** Violations seen while running (a send that never settled); the oracle adds the rest. */
  liveness: { rule: string; message: string }[];
  /** Things worth counting that are not violations (see the oracle). */
  diagnostics: Record<string, number>;
  /** Faults still to apply, by faultSignature: each on the first execution of its call. */
  pendingDownstream: Map<string, FaultSpec["outcome"]>;
  pendingDeaths: Map<string, WorkerDeath["when"]>;
  pendingUnstorable: Set<string>;
  /**
   * Faults planned on the re-run of a call whose worker died after its effect, by faultSlot; when
   * the death lands they move to `rerunFaults`, by the dead call's key, for its next execution.
   */
  pendingRerun: Map<string, FaultSpec["outcome"]>;
  rerunFaults: Map<string, FaultSpec["outcome"]>;
  /**
   * Deaths armed for right after a release (WorkerDeath `after_release`), by worker name and key:
   * the worker dies when its dispatcher has released that key's claim, before it records anything.
   */
  releaseDeaths: Set<string>;
  /**
   * A second death around a released row (MessagePlan `releaseRerunDeath`), by the slot of the
   * call whose release death carries it; once that death lands, by the released key
   * (`releaseRerunDeaths`), for the next run under it.
   */
  pendingReleaseRerunDeaths: Map<string, NonNullable<MessagePlan["releaseRerunDeath"]>>;
  releaseRerunDeaths: Map<string, NonNullable<MessagePlan["releaseRerunDeath"]>>;
  effectSeqs(): Set<number>;
  /** The queue hands a message to a fresh worker (its visibility timeout ran out); settles with that send. */
  redeliver(conversationId: string, messageId: string): Promise<void>;
  started: number;
  sendTimeoutMs: number;
  /**
   * The user texts (as the provider sees them) whose first turn (step 0) or follow-up turn (step
   * 1) the model answered on a re-run with other calls than its first response's (scenario.ts
   * rerunDivergence, followUpDivergence), with those calls, by step (a step it did not is empty).
   */
  divergedTexts: Map<string, PlannedCall[][]>;
  /** Sends of a stored message's id with other content (TURN-20; MessagePlan `reusedId`): never in `sends`. */
  reuses: ReuseRecord[];
  /**
   * Conversations whose workers run a new release from now on (scenario.ts `deploy`), with how
   * it defines the payment tool; set when a message with a deploy is first left unanswered.
   */
  deployed: Map<string, DeployKind>;
  /** Whether the subject's ledger lists rows (IDENT-10's guard needs it): deploys land only then. */
  deploysApply: boolean;
  /**
   * Keys of rows an earlier release claimed that a new release's guard dispatched a call under
   * (IDENT-10): among identical calls, the row is the one whose stored request is the call's, not
   * the one of the call's own ordinal (TURN-4 is not judged on them).
   */
  adoptedKeys: Set<string>;
  /** Per message (conversation id, newline, message id): sends begun and in flight (case.ts sendOnce). */
  sendsOf: Map<string, { started: number; inFlight: number }>;
  /**
   * Workers inside a send (case.ts boundedSend), by how many: a deploy lands only once no live
   * worker of its conversation's old release is inside one (case.ts deployIfPlanned, IDENT-10).
   */
  sending: Map<Worker, number>;
}

/**
 * A send under a stored message's id with other content (TURN-20), and the stored message read
 * just before it and just after it settled. `send` is its sendScope number: events and tool runs
 * that carry it were driven for it.
 */
export interface ReuseRecord {
  conversationId: string;
  messageId: string;
  worker: string;
  send: number;
  content: string;
  before: StoredMessage | undefined;
  after: StoredMessage | undefined;
  /** Another send of the message was in flight at some point of this one (its state may then have moved). */
  overlapped: boolean;
  startedAt: number;
  endedAt: number;
  outcome: SendOutcome;
  result?: SendResult;
  error?: unknown;
}

export function note(ctx: CaseContext, who: string, what: string): void {
  ctx.timeline.push({ at: Date.now() - ctx.started, who, what });
}

export const short = (key: string | undefined): string => (key === undefined ? "-" : /^[0-9a-f]{32}$/.test(key) ? key.slice(0, 8) : key);

// ---- workers -------------------------------------------------------------------------------------

class WorkerGone extends Error {
  constructor(name: string) {
    super(`worker ${name} is gone`);
    this.name = "WorkerGone";
  }
}

/**
 * A worker "process": its own SDK client, payments client, dispatcher, ledger instance and view
 * of the conversation store. When it dies every I/O it starts or awaits fails, as a dead
 * process's would: it writes nothing more anywhere, its claims and its turn lease stay held.
 */
export interface Worker {
  name: string;
  conversationId: string;
  runner: KitRunner;
  /** The release it runs: the payment tool of a deploy (DEPLOYED_PAYMENT), or the first one. */
  release?: DeployKind;
  dead: boolean;
  /** Rejects when the worker dies or is retired, so whoever waits on it stops waiting. */
  died: Promise<never>;
  /** Death mid-dispatch: the worker stops and its conversation's turn lease lapses. */
  kill(what: string): void;
  /** The end of the case (or of a send that never settled): stop everything it still does. */
  retire(): void;
}

export const DIED = Symbol("died");

export interface DispatcherDefaults {
  leaseMs: number;
  waitMs: number;
  pollMs: number;
  maxPollMs: number;
  allowVolatileLedgerForUnkeyedWrites: boolean;
  logger: DispatcherOptions["logger"];
  onEvent: DispatcherOptions["onEvent"];
}

export interface WorkerFactoryOptions {
  /** Make a ledger instance for a new worker (a second view of the same namespace). */
  ledger: () => Promise<Ledger>;
  /** Build the dispatcher; the default is the real one with `defaults`. Tests of the kit pass broken ones. */
  dispatcher?: (tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults) => CallDispatcher;
  /** Alter each worker's runner once built; the real one by default. Tests of the kit plant broken stream sides here. */
  runner?: (runner: KitRunner) => KitRunner;
  leaseMs: number;
}

function mortal<T extends object>(target: T, isDead: () => boolean, name: string, methods: readonly (keyof T)[]): T {
  const view = Object.create(target) as T;
  for (const method of methods) {
    const f = target[method] as unknown as ((...args: unknown[]) => Promise<unknown>) | undefined;
    // An OPTIONAL method the target lacks stays absent (the runner checks for it).
    if (typeof f !== "function") continue;
    (view as Record<keyof T, unknown>)[method] = (...args: unknown[]) => {
      if (isDead()) return Promise.reject(new WorkerGone(name));
      return f.apply(target, args).then(
        (r) => (isDead() ? Promise.reject(new WorkerGone(name)) : r),
        (e: unknown) => Promise.reject(isDead() ? new WorkerGone(name) : e),
      );
    };
  }
  return view;
}

const LEDGER_METHODS = ["claim", "renew", "complete", "fail", "markUnknown", "release", "lookup", "sweep"] as const;
const STORE_METHODS = [
  "appendUserMessage",
  "message",
  "turnsOf",
  "log",
  "acquireLease",
  "renewLease",
  "releaseLease",
  "releaseLeaseGrant",
  "beginTurn",
  "commitTurn",
  "failMessage",
  "addRecord",
  "records",
] as const;

/** Maps the payments client's classification onto the dispatcher's failure dispositions (LEDGER-8, EFFECT-6). */
function classify(error: unknown): never {
  if (error instanceof PaymentsError) {
    throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
  }
  throw error; // unknown outcome
}

function describeDownstream(error: unknown): string {
  if (error instanceof PaymentsError) return `${error.code} (${error.outcome})`;
  return error instanceof Error ? error.message : String(error);
}

function kitTools(ctx: CaseContext, self: Worker, client: PaymentsClient, release: DeployKind | undefined): ToolDefinition<any, any>[] {
  const payment: (typeof DEPLOYED_PAYMENT)[DeployKind] = release === undefined ? { name: "send_payment", input: TOOL_SHAPES.send_payment.input, identity: PAYMENT_IDENTITY } : DEPLOYED_PAYMENT[release];
  // The step of the message's tool loop this run belongs to: its turn index less the message's
  // first turn's (the message of the attempt its send runs, sendScope).
  const stepOf = (conversationId: string, turnIndex: number): number => {
    const send = sendScope.getStore();
    const attempt = ctx.events.findLast((e) => e.type === "attempt_started" && e.send === send && e.worker === self.name && e.conversationId === conversationId);
    if (attempt?.type !== "attempt_started") return 0;
    const first = ctx.events.find((e) => e.type === "attempt_started" && e.conversationId === conversationId && e.messageId === attempt.messageId);
    return first === undefined ? 0 : turnIndex - first.turnIndex;
  };
  // Applies the planned death, downstream fault or unstorable result of this call, once, on its
  // first execution; and a fault planned on the re-run of a call whose worker died after its
  // effect, on the next execution under the dead call's key (the take-over's, or a re-ask's).
  const hooks = (tool: string, args: Record<string, unknown>, context: { conversationId: string; turnIndex: number; idempotencyKey: string }) => {
    const rerun = ctx.rerunFaults.get(context.idempotencyKey);
    if (rerun !== undefined) {
      ctx.rerunFaults.delete(context.idempotencyKey);
      ctx.diagnostics.rerun_faults = (ctx.diagnostics.rerun_faults ?? 0) + 1;
      if (rerun === "drop_after_accept") ctx.diagnostics.rerun_faults_lost_response = (ctx.diagnostics.rerun_faults_lost_response ?? 0) + 1;
      note(ctx, self.name, `${context.conversationId} re-runs the dead call's key ${short(context.idempotencyKey)}: the payments API will answer ${rerun}`);
      return { death: undefined, fault: rerun, unstorable: false, afterEffect: die };
    }
    const twice = ctx.releaseRerunDeaths.get(context.idempotencyKey);
    if (twice !== undefined) {
      // The re-run of a released row whose worker died at the release: this worker dies too.
      ctx.releaseRerunDeaths.delete(context.idempotencyKey);
      ctx.diagnostics.release_rerun_deaths = (ctx.diagnostics.release_rerun_deaths ?? 0) + 1;
      if (twice === "after_response_before_complete") ctx.diagnostics.release_rerun_deaths_after_effect = (ctx.diagnostics.release_rerun_deaths_after_effect ?? 0) + 1;
      note(ctx, self.name, `${context.conversationId} re-runs the released key ${short(context.idempotencyKey)}, and will die ${twice === "before_downstream" ? "before the payments API" : "after it answers"}`);
      return { death: twice, fault: undefined, unstorable: false, afterEffect: die };
    }
    const step = stepOf(context.conversationId, context.turnIndex);
    const slot = faultSlot(step, faultSignature(tool, args));
    const death = ctx.pendingDeaths.get(slot);
    const fault = ctx.pendingDownstream.get(slot);
    const unstorable = ctx.pendingUnstorable.has(slot);
    const rerunFault = ctx.pendingRerun.get(slot);
    ctx.pendingDownstream.delete(slot);
    ctx.pendingDeaths.delete(slot);
    ctx.pendingUnstorable.delete(slot);
    if (death !== undefined) ctx.pendingRerun.delete(slot);
    // Not here but once the dispatcher released this run's claim (newWorker's onEvent).
    if (death === "after_release") {
      ctx.releaseDeaths.add(`${self.name} ${context.idempotencyKey}`);
      const twice = ctx.pendingReleaseRerunDeaths.get(slot);
      ctx.pendingReleaseRerunDeaths.delete(slot);
      // Armed for the next run under the key once this worker died at the release (onEvent below).
      if (twice !== undefined) ctx.pendingReleaseRerunDeaths.set(context.idempotencyKey, twice);
    }
    // Armed where the worker dies after the effect (afterEffect below), for the next run of its key.
    const afterEffect = (what: string): never => {
      if (rerunFault !== undefined) ctx.rerunFaults.set(context.idempotencyKey, rerunFault);
      return die(what);
    };
    // Counted for the stats: a death or an unstorable result in a later turn of a tool loop.
    if (step > 0 && death !== undefined) ctx.diagnostics.follow_up_deaths = (ctx.diagnostics.follow_up_deaths ?? 0) + 1;
    if (step > 0 && unstorable) ctx.diagnostics.follow_up_unstorable = (ctx.diagnostics.follow_up_unstorable ?? 0) + 1;
    return { death, fault, unstorable, afterEffect };
  };
  const begin = (tool: string, args: Record<string, unknown>, context: { idempotencyKey: string; conversationId: string; turnIndex: number; ordinal: number }): ToolRun => {
    const run: ToolRun = {
      key: context.idempotencyKey,
      tool,
      conversationId: context.conversationId,
      turnIndex: context.turnIndex,
      ordinal: context.ordinal,
      request: canonicalize(args as never),
      worker: self.name,
      send: sendScope.getStore(),
      startedAt: Date.now() - ctx.started,
    };
    ctx.runs.push(run);
    note(ctx, self.name, `${context.conversationId} runs ${tool} key ${short(run.key)} (turn ${run.turnIndex}, ordinal ${run.ordinal}) with ${run.request}`);
    return run;
  };
  const end = (run: ToolRun, downstream: string) => {
    run.endedAt = Date.now() - ctx.started;
    run.downstream = downstream;
    note(ctx, self.name, `${run.conversationId} ${run.tool} key ${short(run.key)}: payments API answered ${downstream}`);
  };
  // A death stops the worker where it stands: everything it does from here on fails.
  const die = (what: string): never => {
    self.kill(what);
    throw new WorkerGone(self.name);
  };
  // A long pause past the turn lease: the queue redelivers the message meanwhile. The pause
  // ends when that send settled, or after a while (the other worker may be waiting on this call).
  const stall = async (conversationId: string) => {
    const current = ctx.events.filter((x) => x.type === "attempt_started" && x.worker === self.name && x.conversationId === conversationId).at(-1);
    note(ctx, self.name, `STALLS past its turn lease; the queue redelivers the message`);
    ctx.stores.get(conversationId)!.expireLeases();
    const since = Date.now() - ctx.started;
    const redelivered = current?.type === "attempt_started" ? ctx.redeliver(conversationId, current.messageId) : Promise.resolve();
    // Wake when the other worker settled, or waits on a claim this one holds, or after 300 ms.
    let done = false;
    const blocked = (async () => {
      while (!done && !ctx.dispatchEvents.some((x) => x.type === "waiting" && x.worker !== self.name && x.at >= since)) {
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    await Promise.race([redelivered, blocked, new Promise((r) => setTimeout(r, 300))]);
    done = true;
    note(ctx, self.name, `wakes up`);
  };
  const keyed = (key: string, signal: AbortSignal, fault: FaultSpec["outcome"] | undefined) => ({
    idempotencyKey: key,
    signal,
    ...(fault !== undefined ? { fault: { outcome: fault } } : {}),
  });
  // A value JSON cannot carry: the effect happened, the result cannot be kept (LEDGER-10, DISPATCH-7).
  const unstorableResult = (result: Record<string, unknown>) => ({ ...result, settlementRef: 10n ** 30n });
  return [
    defineTool({
      name: payment.name,
      ...(payment.formerNames !== undefined ? { formerNames: payment.formerNames } : {}),
      effect: "keyed_write",
      input: payment.input as z.ZodType<Record<string, unknown>>,
      identity: payment.identity as never,
      async run(handed: Record<string, unknown>, context) {
        // The run records what it was handed (the stored request on a re-run, LEDGER-21); the
        // payments API and the planned faults see the payment whatever release shaped it.
        const run = begin("send_payment", handed, context);
        const args = paymentBody(handed) as z.infer<typeof TOOL_SHAPES.send_payment.input>;
        const { death, fault, unstorable, afterEffect } = hooks("send_payment", args, context);
        if (death === "before_downstream") die("before calling the payments API");
        if (death === "stall_before_downstream") await stall(context.conversationId);
        let payment;
        try {
          payment = await client.createPayment(args, keyed(context.idempotencyKey, context.signal, fault));
        } catch (error) {
          end(run, describeDownstream(error));
          classify(error);
        }
        end(run, `${payment.status}${payment.replayed ? " (replayed)" : ""} ${payment.body.id}`);
        if (death === "after_response_before_complete") afterEffect("after the payment was accepted, before the ledger completed");
        const result = { paymentId: payment.body.id, status: payment.body.status };
        return unstorable ? unstorableResult(result) : result;
      },
    }),
    defineTool({
      name: "void_payment",
      effect: "keyed_write",
      input: TOOL_SHAPES.void_payment.input,
      async run(args, context) {
        const run = begin("void_payment", args, context);
        const { death, fault, unstorable, afterEffect } = hooks("void_payment", args, context);
        if (death === "before_downstream") die("before voiding");
        if (death === "stall_before_downstream") await stall(context.conversationId);
        let voided;
        try {
          // The open payment with this reference; failing that, the voided one, so that a
          // re-run of a void whose response was lost asks the API again (which replays it).
          const list = await client.listPayments({ signal: context.signal });
          const same = list.body.data.filter((p) => p.reference === args.reference);
          const target = same.find((p) => p.status !== "voided") ?? same.findLast((p) => p.status === "voided");
          if (target === undefined) {
            end(run, "nothing to void");
            throw new ToolError(`no payment with reference ${args.reference}`, { disposition: "definite", code: "no_such_payment" });
          }
          voided = await client.voidPayment(target.id, keyed(context.idempotencyKey, context.signal, fault));
        } catch (error) {
          if (ToolError.isInstance(error)) throw error;
          end(run, describeDownstream(error));
          classify(error);
        }
        end(run, `${voided.status}${voided.replayed ? " (replayed)" : ""} voided ${voided.body.id}`);
        if (death === "after_response_before_complete") afterEffect("after the void was accepted, before the ledger completed");
        const result = { paymentId: voided.body.id, status: voided.body.status };
        return unstorable ? unstorableResult(result) : result;
      },
    }),
    defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: TOOL_SHAPES.create_invoice.input,
      async run(args, context) {
        const run = begin("create_invoice", args, context);
        const { death, fault, unstorable, afterEffect } = hooks("create_invoice", args, context);
        if (death === "before_downstream") die("before creating the invoice");
        if (death === "stall_before_downstream") await stall(context.conversationId);
        let invoice;
        try {
          // The API ignores the key; it only lands in its effect log, where the oracle reads it.
          invoice = await client.createInvoice(args, keyed(context.idempotencyKey, context.signal, fault));
        } catch (error) {
          end(run, describeDownstream(error));
          classify(error);
        }
        end(run, `${invoice.status} ${invoice.body.id}`);
        if (death === "after_response_before_complete") afterEffect("after the invoice was created, before the ledger completed");
        const result = { invoiceId: invoice.body.id };
        return unstorable ? unstorableResult(result) : result;
      },
    }),
    defineTool({
      name: "search_payments",
      effect: "read",
      input: TOOL_SHAPES.search_payments.input,
      async run(_args, context) {
        const list = await client.listPayments({ signal: context.signal });
        return { count: list.body.data.length };
      },
    }),
  ];
}

export async function newWorker(
  world: World,
  ctx: CaseContext,
  name: string,
  conversationId: string,
  options: WorkerFactoryOptions,
  attempts = 3,
): Promise<Worker> {
  const abort = new AbortController();
  let rejectDied!: (reason: unknown) => void;
  const died = new Promise<never>((_, reject) => {
    rejectDied = reject;
  });
  died.catch(() => {});
  const caseStore = ctx.stores.get(conversationId)!;
  const worker: Worker = {
    name,
    conversationId,
    runner: undefined as never,
    dead: false,
    died,
    kill: (what) => {
      if (worker.dead) return;
      note(ctx, name, `DIES ${what}`);
      worker.retire();
      // Time passes for the rest of the world: its turn lease lapses (TURN-10). Its claims
      // lapse on the ledger's own clock, which the kit cannot move for a real adapter.
      caseStore.expireLeases();
    },
    retire: () => {
      if (worker.dead) return;
      worker.dead = true;
      abort.abort(new WorkerGone(name));
      rejectDied(DIED);
    },
  };
  const isDead = () => worker.dead;
  const mortalFetch = ((input: Parameters<typeof fetch>[0], init?: RequestInit) => {
    if (worker.dead) return Promise.reject(new WorkerGone(name));
    const signal = init?.signal ? AbortSignal.any([init.signal, abort.signal]) : abort.signal;
    return fetch(input, { ...init, signal });
  }) as typeof fetch;
  const ledger = mortal(await options.ledger(), isDead, name, LEDGER_METHODS);
  const store = mortal(caseStore.store, isDead, name, STORE_METHODS);
  const payments = createPaymentsClient({ baseURL: world.payments.url, token: ctx.account, fetch: mortalFetch });
  // A worker started after its conversation's deploy runs the new release (MessagePlan `deploy`).
  const release = ctx.deployed.get(conversationId);
  worker.release = release;
  const toolList = kitTools(ctx, worker, payments, release);
  const defaults: DispatcherDefaults = {
    leaseMs: options.leaseMs,
    // Long enough to outlive a dead worker's claim, so waiters see it lapse (LEDGER-7).
    waitMs: options.leaseMs * 6,
    pollMs: 2,
    maxPollMs: 20,
    // The kit never loses acknowledged rows, so a volatile ledger is fine for unkeyed writes here.
    allowVolatileLedgerForUnkeyedWrites: true,
    logger: {
      // Counted, not shown: a call of a re-run turn dispatched under the key of the row an earlier
      // release's definition claimed for it (IDENT-10, IDENT-11; the kit's deploys, MessagePlan `deploy`).
      warn: (message: string, meta?: unknown) => {
        if (!worker.dead && message.includes("dispatched under the earlier run's key (IDENT-10)")) {
          ctx.diagnostics.deploy_rows_adopted = (ctx.diagnostics.deploy_rows_adopted ?? 0) + 1;
          const key = (meta as { key?: unknown } | undefined)?.key;
          if (typeof key === "string") ctx.adoptedKeys.add(key);
        }
      },
    },
    onEvent: (event) => {
      if (worker.dead) return;
      ctx.dispatchEvents.push({ ...event, worker: name, at: Date.now() - ctx.started });
      if (event.type === "released" && ctx.releaseDeaths.delete(`${name} ${event.key}`)) {
        // The row says released (the payment may have happened); the worker records nothing more.
        ctx.diagnostics.release_deaths = (ctx.diagnostics.release_deaths ?? 0) + 1;
        const twice = ctx.pendingReleaseRerunDeaths.get(event.key);
        ctx.pendingReleaseRerunDeaths.delete(event.key);
        if (twice !== undefined) ctx.releaseRerunDeaths.set(event.key, twice);
        worker.kill(`after its dispatcher released the claim of key ${short(event.key)}, before it recorded anything`);
        return;
      }
      if (event.type === "claimed" && event.takeover) {
        note(ctx, name, `${conversationId} takes over the expired claim of key ${short(event.key)} (fence ${event.fence})`);
      }
    },
  };
  const dispatcher =
    options.dispatcher?.(toolList, ledger, defaults) ?? new Dispatcher({ tools: new ToolRegistry(toolList), ledger, ...defaults });
  const runner = world.provider.runner({
    fetch: mortalFetch,
    dispatcher,
    store,
    tools: new ToolRegistry(toolList.map((t) => ({ ...t, run: () => null }))).providerSchemas(),
    retry: { attempts, backoffMs: () => 2 },
    owner: name,
    turnLeaseMs: TURN_LEASE_MS,
    busyWaitMs: BUSY_WAIT_MS,
    pollMs: 5,
    // One case's stores never forget anything: the TURN-14 pairing rule is not what this level tests.
    allowVolatileConversationStore: true,
    onEvent: (event) => {
      if (worker.dead) return; // a dead process tells nobody anything
      const recorded: RecordedEvent = { ...event, worker: name, send: sendScope.getStore() };
      if (event.type === "turn_failed" || event.type === "attempt_superseded") recorded.effectsSeen = ctx.effectSeqs();
      ctx.events.push(recorded);
      const detail = describeEvent(event);
      if (detail !== undefined) ctx.timeline.push({ at: event.at - ctx.started, who: name, what: `${event.conversationId} ${detail}` });
    },
  });
  worker.runner = options.runner?.(runner) ?? runner;
  return worker;
}

function describeEvent(event: RunnerEvent): string | undefined {
  switch (event.type) {
    case "attempt_started":
      return `turn ${event.turnIndex} attempt ${event.attempt} for message ${JSON.stringify(event.messageId)} requested`;
    case "call_complete":
      return `${event.name} arguments complete (${event.callId}): dispatching`;
    case "stream_failed":
      return `stream failed (${event.position}): ${event.error}`;
    case "call_resolved":
      return `${event.name}${event.key === undefined ? "" : ` key ${short(event.key)}`} ${event.ok ? (event.replayed ? "replayed from the ledger" : "ran") : `failed: ${event.error}`}`;
    case "call_abandoned":
      return `${event.name} abandoned (arguments: ${JSON.stringify(event.partialArguments)})`;
    case "turn_committed":
      return `turn ${event.turnIndex} ${event.committed ? "committed" : "lost the commit race"} (${event.stopReason})`;
    case "turn_failed": {
      const effects = event.record.effects.map((e) => `${e.name} ${short(e.key)} ${e.effect}`).join(", ");
      return `turn ${event.turnIndex} of ${JSON.stringify(event.record.messageId)} failed (${event.record.position}); record: ${effects || "no effects"}; retryable ${event.record.retryable}`;
    }
    case "attempt_superseded":
      return `turn ${event.turnIndex} attempt ${event.attempt} superseded; recorded ${event.record.calls.length} calls`;
    default:
      return undefined;
  }
}

// ---- the provider ------------------------------------------------------------------------------

/** The user's words for a message, unique per case (the account is in them). */
export function contentOf(account: string, text: string): string {
  return `${account} ${text}`;
}

/** A re-ask repeats the request; the model words the payment memo differently this time. */
export function reaskCalls(calls: PlannedCall[]): PlannedCall[] {
  return calls.map((c) => (c.tool === "send_payment" ? { tool: c.tool, args: { ...c.args, memo: `${String(c.args.memo)} (asked again)` } } : c));
}

export const REASK_SUFFIX = " again";
/** The re-ask of a tool loop that failed in its follow-up turn: the user asks again for what did not finish. */
export const REASK_REST_SUFFIX = " again, the rest";

/**
 * Program the provider for this case: one plan per message text (and re-ask), cuts by request
 * attempt, and a message's divergence on its first turn's re-runs (from its second request on,
 * and its re-ask's first turn); `ctx` counts the diverging responses (`divergent_reruns`).
 */
export function programProvider(world: World, scenario: Scenario, account: string, ctx?: CaseContext): void {
  const plans = new Map<string, PlannedCall[][]>();
  const reruns = new Map<string, (PlannedCall[] | undefined)[]>();
  const cuts = new Map<string, StreamCut[]>();
  const followUpCuts = new Map<string, StreamCut[]>();
  const outages = new Map<string, StreamCut>();
  const followUpOutages = new Map<string, StreamCut>();
  const splices = new Map<string, (SplicePlan | undefined)[]>();
  for (const conversation of scenario.conversations) {
    for (const message of conversation.messages) {
      const text = contentOf(account, message.text);
      // By step: the first turn's request, then the tool loop's follow-up request.
      if (message.splice !== undefined || message.followUpSplice !== undefined) splices.set(text, [message.splice, message.followUpSplice]);
      // A re-ask is another request: its own splice, into its first turn's request (whichever
      // re-ask is sent: the whole request, or the rest of a loop that failed in its follow-up).
      if (message.reaskSplice !== undefined) {
        splices.set(text + REASK_SUFFIX, [message.reaskSplice]);
        splices.set(text + REASK_REST_SUFFIX, [message.reaskSplice]);
      }
      // A follow-up is the tool loop's next response: made once the first calls' results are back.
      plans.set(text, message.followUp !== undefined && message.followUp.length > 0 ? [message.calls, message.followUp] : [message.calls]);
      // Asked again whole (the first turn failed), or for the follow-up's calls (it failed there).
      const loop = message.followUp ?? [];
      // A re-ask re-runs the failed first turn: the model answers it as it answers a re-run.
      const diverged = divergedCalls(message);
      // By step: the first turn's re-runs, then the follow-up turn's (followUpDivergence).
      const divergedLoop = divergedFollowUp(message);
      if (diverged !== undefined || divergedLoop !== undefined) reruns.set(text, [diverged, divergedLoop]);
      const first = diverged ?? message.calls;
      plans.set(text + REASK_SUFFIX, loop.length > 0 ? [reaskCalls(first), reaskCalls(loop)] : [reaskCalls(first)]);
      if (loop.length > 0) plans.set(text + REASK_REST_SUFFIX, [reaskCalls(loop)]);
      cuts.set(text, message.cuts);
      if (message.followUpCuts !== undefined) followUpCuts.set(text, message.followUpCuts);
      if (message.outage !== undefined) (message.outageOnFollowUp === true ? followUpOutages : outages).set(text, message.outage);
    }
  }
  // The planned cut of this attempt; else, from the second request on, the outage (of its step).
  world.provider.program(
    plans,
    (text, attempt, step) =>
      step > 0
        ? (followUpCuts.get(text)?.[attempt - 1] ?? (attempt >= 2 ? followUpOutages.get(text) : undefined))
        : (cuts.get(text)?.[attempt - 1] ?? (attempt >= 2 ? outages.get(text) : undefined)),
    reruns,
    (text, step, calls) => {
      if (ctx === undefined) return;
      ctx.diagnostics.divergent_reruns = (ctx.diagnostics.divergent_reruns ?? 0) + 1;
      if (step > 0) ctx.diagnostics.follow_up_divergent_reruns = (ctx.diagnostics.follow_up_divergent_reruns ?? 0) + 1;
      const steps = ctx.divergedTexts.get(text) ?? [];
      steps[step] = calls;
      ctx.divergedTexts.set(text, steps);
      ctx.timeline.push({ at: Date.now() - ctx.started, who: "model", what: `answers a re-run of step ${step} of ${JSON.stringify(text)} with ${calls.length === 0 ? "text alone" : calls.map((c) => c.tool).join(", ")} (its first response differed)` });
    },
    splices,
    ({ text, step, attempt, plan, afterCall, calls }) => {
      if (ctx === undefined) return;
      if (plan.shape === "repeat") {
        // No second response: the body's own call, delivered again (STREAM-10's whole repeat).
        ctx.diagnostics.relay_repeats = (ctx.diagnostics.relay_repeats ?? 0) + 1;
        ctx.timeline.push({
          at: Date.now() - ctx.started,
          who: "relay",
          what: `re-sends call ${afterCall} of request ${attempt} of ${JSON.stringify(text)} whole (its id, name and arguments) at the next free position, then lets the response finish (STREAM-10)`,
        });
        return;
      }
      ctx.diagnostics.splices = (ctx.diagnostics.splices ?? 0) + 1;
      ctx.diagnostics[`splices_${plan.shape}`] = (ctx.diagnostics[`splices_${plan.shape}`] ?? 0) + 1;
      if (step > 0) ctx.diagnostics.follow_up_splices = (ctx.diagnostics.follow_up_splices ?? 0) + 1;
      const reask = text.endsWith(REASK_SUFFIX) || text.endsWith(REASK_REST_SUFFIX);
      if (reask) ctx.diagnostics.reask_splices = (ctx.diagnostics.reask_splices ?? 0) + 1;
      const shape =
        plan.shape === "restart"
          ? "with its own start (STREAM-8)"
          : plan.shape === "headless"
            ? "without its start, led by a sentence (STREAM-17)"
            : "without its start and without a lead, its first item on a held one of its type (STREAM-10)";
      ctx.timeline.push({
        at: Date.now() - ctx.started,
        who: "proxy",
        what: `splices into ${step > 0 ? "follow-up " : reask ? "re-ask " : ""}request ${attempt} of ${JSON.stringify(text)}, after its call ${afterCall} completed, the response to the request sent again ${shape}: ${calls.length === 0 ? "text alone" : calls.map((c) => c.tool).join(", ")}`,
      });
    },
  );
}

/** The kit's default conversation store: the reference one, on the case's clock. */
export function memoryConversationStore(options: { now: () => number }): ConversationStore {
  return new MemoryConversationStore({ now: options.now });
}
