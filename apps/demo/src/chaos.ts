import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { isDispatchOnceError, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { MemoryConversationStore, type FailurePosition, type RunnerEvent, type TurnFailedError } from "@dispatch-once/anthropic";
import { sideHeapLimits } from "./heap.js";
import { IN_WINDOW, POSITIONS } from "./positions.js";
import { CHAPTER } from "./incident.js";
import { Rng } from "./prng.js";
import type { StreamCut, StreamFaultPlan, StreamSide } from "./streams.js";
import { wilson, type RateEstimate } from "./stats.js";
import { addAudit, auditMessage, emptyTally, recordsOf, type AuditTally, type MisreportReason } from "./oracle.js";
import { countDuplicates, paymentMessage, startSide, type LostResponseDisposition, type PaymentArgs, type ReferenceCountsLike, type Side } from "./world.js";

export { IN_WINDOW, POSITIONS };

/**
 * How a failure is placed (all drawn from the turn's own seeded generator):
 * 89 % before dispatch, split evenly between "before any call" and "while arguments stream";
 * 11 % inside the window, split by the window's two parts, 820 ms of payment call and 240 ms of
 * provider gap, as a cut landing uniformly in the window would be.
 */
export const SPLIT = {
  preDispatch: 1 - CHAPTER.windowShare,
  beforeAnyCallOfPreDispatch: 0.5,
  duringDispatchOfWindow: CHAPTER.paymentsMs / (CHAPTER.paymentsMs + CHAPTER.gapMs),
} as const;

const CUT_KINDS: readonly StreamCut[] = ["reset", "reset", "reset", "clean_close", "error_event"];
/**
 * User messages per conversation in the main route. Each message is two model turns (the
 * payment, then the model's confirmation), so a conversation of three is six turns: short, as
 * a payments assistant's sessions are, which keeps each request's re-sent history small.
 */
export const MESSAGES_PER_CONVERSATION = 3;
/** The stalled worker's turn lease in the redelivery route; its store clock jumps past it. */
const STALLED_WORKER_LEASE_MS = 60_000;
const PAYEES = ["acme-supplies", "globex", "initech", "umbrella-logistics", "hooli", "stark-parts", "wayne-freight", "tyrell-labs"];

export interface PlannedFailure {
  position: FailurePosition;
  kind: StreamCut;
  /** For arguments_streaming: how many argument fragments are sent before the cut. */
  afterFragment: number;
}

export interface TurnPlan {
  index: number;
  args: PaymentArgs;
  /** Where the payment turn's stream is cut once (its first request only), if it is. */
  failure: PlannedFailure | undefined;
  /** The payment turn's first POST loses its response after the payments API accepted it. */
  loseResponse: boolean;
  /** Every retried response to the turn re-words the memo (outside the call's identity). */
  rewordsMemo: boolean;
}

/** Rates of the faults added on top of the chapter's stream cuts. */
export interface PlanRates {
  /** Share of payment turns whose first POST loses its response (mock payments `drop_after_accept`). */
  dropRate?: number;
  /** Share of messages whose memo the model re-words on a retried response (mock provider `reword`). */
  rewordRate?: number;
}

/** The plan of one turn, a function of (seed, route, index) and the rates alone. */
export function planTurn(seed: string, route: string, index: number, failureRate: number, reference: string, rates: PlanRates = {}): TurnPlan {
  const rng = new Rng(seed, route, index);
  const args: PaymentArgs = {
    payee: rng.pick(PAYEES),
    amount: rng.int(1_000, 2_500_000),
    currency: rng.pick(["EUR", "USD", "GBP"]),
    reference,
    memo: `Invoice ${reference}`,
  };
  const fails = rng.next() < failureRate;
  const where = rng.next();
  const split = rng.next();
  const kind = rng.pick(CUT_KINDS);
  const afterFragment = rng.int(0, 2);
  // Drawn after the cut's numbers, always: adding these faults moved no earlier decision.
  const loseResponse = rng.next() < (rates.dropRate ?? 0);
  const rewordsMemo = rng.next() < (rates.rewordRate ?? 0);
  if (!fails) return { index, args, failure: undefined, loseResponse, rewordsMemo };
  let position: FailurePosition;
  if (where < SPLIT.preDispatch) position = split < SPLIT.beforeAnyCallOfPreDispatch ? "before_any_call" : "arguments_streaming";
  else position = split < SPLIT.duringDispatchOfWindow ? "during_dispatch" : "after_dispatch_before_stop";
  return { index, args, failure: { position, kind, afterFragment }, loseResponse, rewordsMemo };
}

export type PositionCounts = Record<FailurePosition, number>;

function zeroCounts(): PositionCounts {
  return { before_any_call: 0, arguments_streaming: 0, during_dispatch: 0, after_dispatch_before_stop: 0 };
}

export interface SideTotals {
  turns: number;
  /** Payments the downstream's effect log shows. */
  payments: number;
  /** Payments beyond the first, per turn, summed. */
  duplicates: number;
  /**
   * Duplicates by what made the handler repeat the call: a stream cut inside the window (the
   * chapter's cause; also when the turn lost a response too), else a lost payments response.
   */
  duplicatesByCause: { streamCut: number; lostResponse: number };
  /** POSTs the tool sent (the guarded side's re-runs after a lost response included). */
  posts: number;
  /** Retried dispatches answered from the ledger without calling the payments API. */
  replayedFromLedger: number;
  /** POSTs whose response the payments API lost after accepting them (injected). */
  lostResponses: number;
  /** POSTs the payments API answered from its Idempotency-Key store instead of paying again. */
  downstreamReplays: number;
  /** Retried model responses whose memo was re-worded. */
  rewordedResponses: number;
  /**
   * Re-worded calls answered with, or re-run as, the first request (LEDGER-21); naive: always 0.
   * Not fixed by the seed: a second and a third response may pick the same re-wording (then the
   * third does not differ from what the second stored), and which one they pick depends on the
   * request's history: earlier turns' payment ids (random) and toolu_ ids (in global request order).
   */
  requestDiffers: number;
  /**
   * Lost payments responses the reconcile probe settled (RECON-3): the ledger row completed from
   * the payments API's lookup by idempotency key instead of staying open; naive: always 0.
   */
  reconciled: number;
  /** Messages whose committed turns or records disagree with the effect log (see oracle.ts). */
  misreports: number;
  misreportReasons: Record<MisreportReason, number>;
  misreportExamples: string[];
  /** Failed turns that told the user a payment "may have happened" (truthful; not misreports). */
  mayHaveHappened: number;
  /** Turns that failed for good (the client saw an error). */
  failedTurns: number;
  streamFailures: number;
  byPosition: PositionCounts;
  /** Failures whose measured position differs from the planned one (expected 0). */
  positionMismatches: number;
  duplicatedReferences: string[];
  durationMs: number;
}

/** One side's counts on one replay route. */
export interface RouteSide {
  duplicates: number;
  payments: number;
  posts: number;
  misreports: number;
  mayHaveHappened: number;
  /** ...of which the payment did exist. */
  mayHaveHappenedAndDid: number;
  /** The first few of those statements with their cause, "<reference>: <status> <code>: <message>". */
  mayHaveHappenedExamples: string[];
}

export interface RouteResult {
  name: "automatic_retry" | "client_resend" | "queue_redelivery";
  description: string;
  /** Turns this route replayed (re-issued). */
  replays: number;
  naive: RouteSide;
  guarded: RouteSide;
}

export interface ChaosResult {
  /** The stream side it ran on; absent in results written before the option existed means "anthropic". */
  provider: StreamSide;
  turns: number;
  failureRate: number;
  dropRate: number;
  rewordRate: number;
  seed: string;
  timeScale: number;
  concurrency: number;
  messagesPerConversation: number;
  paymentsMs: number;
  gapMs: number;
  streamFailures: number;
  failuresInWindow: number;
  byPosition: PositionCounts;
  plannedByPosition: PositionCounts;
  /** What the seed planned for the main route, besides the cuts. */
  planned: {
    lostResponses: number;
    /** Turns planned with both a lost response and a cut inside the window. */
    lostResponsesInWindow: number;
    rewordedMemos: number;
  };
  naive: SideTotals;
  guarded: SideTotals;
  /** Naive duplicates caused by a cut stream, per turn, with its 95 % Wilson interval (the chapter's quantity). */
  naiveDuplicateRate: RateEstimate;
  /** The chapter's arithmetic, at the chapter's rate and at the rate used. */
  chapter: {
    failureRate: number;
    windowShare: number;
    duplicateRate: number;
    oneIn: number;
    atThisFailureRate: { duplicateRate: number; oneIn: number; expectedDuplicates: number; insideInterval: boolean };
  };
  routes: RouteResult[];
  split: typeof SPLIT;
  anomalies: string[];
  durationMs: number;
}

export interface ChaosOptions {
  /** The stream side both sides run on (default anthropic). */
  provider?: StreamSide;
  /** Run the naive side in a worker thread, beside the guarded one (default true when the worker file exists). */
  parallel?: boolean;
  turns: number;
  failureRate: number;
  /** Share of payment turns whose first POST loses its response. */
  dropRate: number;
  /** Share of messages whose memo a retried response re-words. */
  rewordRate: number;
  /** What the tool reports for a lost response (default "unknown", the truth); tests make it lie. */
  lostResponseAs?: LostResponseDisposition;
  seed: string;
  timeScale: number;
  concurrency: number;
  redeliveries: number;
  ledger: Ledger;
  runId: string;
  onProgress?: (progress: ChaosProgress) => void;
}

export interface ChaosProgress {
  side: "naive" | "guarded";
  phase: "automatic_retry" | "client_resend" | "queue_redelivery";
  done: number;
  total: number;
  duplicates: number;
  streamFailures: number;
}

interface PendingCut {
  requestNumber: number;
  kind: StreamCut;
  trigger: "call_complete" | "call_resolved";
}

/** What the director does to one message's payment turn. */
interface Expectation {
  failure: PlannedFailure | undefined;
  loseResponse: boolean;
  /** Hold the first response before message_stop and report its request number once the call resolved. */
  stall?: (requestNumber: number | undefined) => void;
}

/**
 * Turns faults planned per message into provider and payments faults, and fires the cuts that
 * must land at a point of the handler's own progress (inside the window) from the runner's
 * events: the stream is held at the position and cut when the handler has reached the right
 * state. A message's faults go to its payment turn, the first turn the runner starts for it,
 * whatever index the conversation gives it.
 */
class FaultDirector {
  private readonly expected = new Map<string, Expectation>();
  private readonly turns = new Map<string, Expectation>();
  private readonly fired = new Set<string>();
  private readonly dropped = new Set<string>();
  private readonly cuts = new Map<string, PendingCut>();
  private readonly stalls = new Map<string, { requestNumber: number; report: (n: number | undefined) => void }>();
  private readonly gates = new Map<string, { open: () => void; promise: Promise<void>; consumed: boolean }>();
  readonly byPosition = zeroCounts();
  streamFailures = 0;
  positionMismatches = 0;
  readonly anomalies: string[] = [];

  constructor(private readonly side: Side) {}

  /** Register what happens to the payment turn of (conversation, message). */
  expect(conversationId: string, messageId: string, expectation: Expectation): void {
    if (expectation.failure === undefined && !expectation.loseResponse && expectation.stall === undefined) return;
    this.expected.set(`${conversationId}|${messageId}`, expectation);
  }

  /** The message's first attempt names its payment turn: bind the plan to that turn index. */
  private bind(conversationId: string, messageId: string, turnIndex: number): void {
    const messageKey = `${conversationId}|${messageId}`;
    const expectation = this.expected.get(messageKey);
    if (expectation === undefined) return;
    this.expected.delete(messageKey);
    const turnKey = `${conversationId}|${turnIndex}`;
    this.turns.set(turnKey, expectation);
    if (expectation.failure?.position === "during_dispatch") {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      this.gates.set(turnKey, { open, promise, consumed: false });
    }
  }

  readonly faultPlan: StreamFaultPlan = (info) => {
    const turnKey = info.headers["x-demo-turn"];
    if (turnKey === undefined) return undefined;
    const expectation = this.turns.get(turnKey);
    // One fault per planned turn: its first request only.
    if (expectation === undefined || this.fired.has(turnKey)) return undefined;
    this.fired.add(turnKey);
    const attemptKey = `${turnKey}|${info.headers["x-demo-attempt"] ?? "1"}`;
    if (expectation.stall !== undefined) {
      this.stalls.set(attemptKey, { requestNumber: info.requestNumber, report: expectation.stall });
      return { kind: "hold", at: "before_finish" };
    }
    const failure = expectation.failure;
    if (failure === undefined) return undefined;
    const cutKind = failure.kind;
    const pending = (trigger: PendingCut["trigger"]) => {
      this.cuts.set(attemptKey, { requestNumber: info.requestNumber, kind: cutKind, trigger });
      // A held stream whose trigger never comes would hang the run: cut it anyway, and say so.
      setTimeout(() => {
        if (!this.cuts.delete(attemptKey)) return;
        this.anomalies.push(`${attemptKey}: no ${trigger} within 30 s; the held stream was cut anyway`);
        this.cutWhenHeld(info.requestNumber, cutKind, attemptKey);
      }, 30_000).unref();
    };
    switch (failure.position) {
      case "before_any_call":
        // Replaces the first output block or item: the response had started, no call had.
        return { kind: "cut", cut: cutKind, at: "before_any_call" };
      case "arguments_streaming":
        return { kind: "cut", cut: cutKind, at: "arguments_streaming", afterFragment: failure.afterFragment };
      case "during_dispatch":
        // Held right after the call is complete; cut once the call is dispatched (its POST is out).
        pending("call_complete");
        return { kind: "hold", at: "after_call_done" };
      case "after_dispatch_before_stop":
        // Held where the finishing event would go; cut once the payment call has resolved.
        pending("call_resolved");
        return { kind: "hold", at: "before_finish" };
    }
  };

  /** Tool hook: whether this POST loses its response (the planned turn's first POST only). */
  loseResponse(conversationId: string, turnIndex: number): boolean {
    const turnKey = `${conversationId}|${turnIndex}`;
    if (this.turns.get(turnKey)?.loseResponse !== true || this.dropped.has(turnKey)) return false;
    this.dropped.add(turnKey);
    return true;
  }

  /** Tool hook: a during_dispatch turn's first POST does not return (or fail) before the reset was seen. */
  async afterPost(conversationId: string, turnIndex: number): Promise<void> {
    const gate = this.gates.get(`${conversationId}|${turnIndex}`);
    if (gate === undefined || gate.consumed) return;
    gate.consumed = true;
    const timeout = setTimeout(() => {
      this.anomalies.push(`gate of ${conversationId} turn ${turnIndex} opened by timeout: the reset was not observed`);
      gate.open();
    }, 30_000);
    await gate.promise;
    clearTimeout(timeout);
  }

  /** Let a stalled (held) stream go on to message_stop, once it is held. */
  releaseWhenHeld(requestNumber: number): void {
    const provider = this.side.stream;
    void provider
      .waitForHold(requestNumber, { timeoutMs: 30_000 })
      .then(() => provider.release(requestNumber))
      .catch((error: unknown) => this.anomalies.push(`release of request ${requestNumber} failed: ${String(error)}`));
  }

  /** Cut the stream once it is held (it may not have reached the hold yet). */
  private cutWhenHeld(requestNumber: number, kind: StreamCut, attemptKey: string): void {
    const provider = this.side.stream;
    void provider
      .waitForHold(requestNumber, { timeoutMs: 30_000 })
      .then(() => provider.cutNow(requestNumber, kind))
      .catch((error: unknown) => this.anomalies.push(`cut of ${attemptKey} failed: ${String(error)}`));
  }

  // Called for every runner event, text deltas included: a key is built only for the event types
  // that look one up, and only while a cut or a stall waits for its trigger.
  readonly onEvent = (event: RunnerEvent): void => {
    if (event.type === "attempt_started") {
      this.bind(event.conversationId, event.messageId, event.turnIndex);
    } else if (event.type === "call_complete" || event.type === "call_resolved") {
      if (this.cuts.size === 0 && this.stalls.size === 0) return;
      const attemptKey = `${event.conversationId}|${event.turnIndex}|${event.attempt}`;
      const cutPlan = this.cuts.get(attemptKey);
      if (cutPlan !== undefined && cutPlan.trigger === event.type) {
        this.cuts.delete(attemptKey);
        this.cutWhenHeld(cutPlan.requestNumber, cutPlan.kind, attemptKey);
      }
      const stall = this.stalls.get(attemptKey);
      if (stall !== undefined && event.type === "call_resolved") {
        this.stalls.delete(attemptKey);
        stall.report(stall.requestNumber);
      }
    } else if (event.type === "stream_failed") {
      const turnKey = `${event.conversationId}|${event.turnIndex}`;
      this.streamFailures++;
      const planned = this.turns.get(turnKey)?.failure;
      // Counted under the plan's position when the runner named it as this stream names a cut there.
      if (planned !== undefined && this.side.stream.reportedPosition(planned.position) === event.position) {
        this.byPosition[planned.position]++;
      } else {
        this.byPosition[event.position]++;
        this.positionMismatches++;
        this.anomalies.push(`${turnKey}: stream failed at ${event.position} (${event.error}), planned ${planned?.position ?? "no failure"}`);
      }
      this.gates.get(turnKey)?.open();
    }
  };
}

/** The references `<route>-0` .. `<route>-<count-1>`, made each time they are read. */
function messageReferences(route: string, count: number): Iterable<string> {
  return {
    *[Symbol.iterator]() {
      for (let i = 0; i < count; i++) yield `${route}-${i}`;
    },
  };
}

/** Run `count` jobs on `concurrency` workers; job i always goes to worker i % concurrency, in order. */
async function pool(count: number, concurrency: number, job: (index: number, worker: number, nth: number) => Promise<void>): Promise<void> {
  const workers = Math.min(concurrency, Math.max(1, count));
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      let nth = 0;
      for (let i = worker; i < count; i += workers) await job(i, worker, nth++);
    }),
  );
}

export interface SideRun {
  totals: SideTotals;
  main: { replays: number } & RouteSide;
  resend: { replays: number } & RouteSide;
  redelivery: { replays: number } & RouteSide;
  anomalies: string[];
}

/** The options one side needs; plain data, so a side can run in a worker thread. */
export type SideOptions = Omit<ChaosOptions, "ledger" | "onProgress" | "parallel"> & {
  ledger?: Ledger;
  onProgress?: (progress: ChaosProgress) => void;
};

const isTurnFailed = (error: unknown): error is TurnFailedError => isDispatchOnceError(error, "turn_failed");

/** One side of the chaos run: all three routes, naive (no ledger) or guarded. */
export async function runSide(options: SideOptions, guarded: boolean): Promise<SideRun> {
  const scale = options.timeScale;
  const started = Date.now();
  const sideName = guarded ? "guarded" : "naive";
  const rates: PlanRates = { dropRate: options.dropRate, rewordRate: options.rewordRate };
  // References whose memo the scripted model re-words on a retried response.
  const rewording = new Set<string>();
  let director: FaultDirector | undefined;
  const side = await startSide({
    guarded,
    ...(options.provider !== undefined ? { stream: options.provider } : {}),
    ledger: options.ledger,
    paymentsLatencyMs: CHAPTER.paymentsMs * scale,
    providerTiming: { beforeMessageStopMs: CHAPTER.gapMs * scale },
    seed: options.seed,
    pollMs: Math.max(1, Math.round(5 * scale)),
    rewordsMemo: (args) => rewording.has(args.reference),
    ...(options.lostResponseAs !== undefined ? { lostResponseAs: options.lostResponseAs } : {}),
    hooks: {
      loseResponse: (_args, context) => director!.loseResponse(context.conversationId, context.turnIndex),
      afterPost: (_args, context) => director!.afterPost(context.conversationId, context.turnIndex),
    },
  });
  try {
    director = new FaultDirector(side);
    side.setFaultPlan(director.faultPlan);
    let replayedFromLedger = 0;
    let failedTurns = 0;
    const headers = (info: { conversationId: string; turnIndex: number; attempt: number }) => ({
      "x-demo-turn": `${info.conversationId}|${info.turnIndex}`,
      "x-demo-attempt": String(info.attempt),
    });
    const onEvent = (event: RunnerEvent) => {
      director!.onEvent(event);
      if (event.type === "call_resolved" && event.replayed === true) replayedFromLedger++;
    };
    const backoffMs = (n: number) => Math.max(1, Math.round(100 * 2 ** (n - 1) * scale));
    const retryingOptions = { retry: { attempts: 3, backoffMs }, requestHeaders: headers, onEvent };
    let lastReport = 0;
    const progress = (phase: ChaosProgress["phase"], done: number, total: number, references: Iterable<string>) => {
      // Throttled: counting duplicates walks every reference.
      if (options.onProgress === undefined || (Date.now() - lastReport < 100 && done < total)) return;
      lastReport = Date.now();
      options.onProgress({
        side: sideName,
        phase,
        done,
        total,
        duplicates: countDuplicates(side.paymentsByReference(), references).duplicates,
        streamFailures: director!.streamFailures,
      });
    };
    // The second oracle, per route: what the conversation committed and the records say, against the effect log.
    const tallies = { main: emptyTally(), resend: emptyTally(), redelivery: emptyTally() };
    const audit = async (tally: AuditTally, store: ConversationStore, conversationId: string, messageId: string, reference: string) => {
      const [committed, records] = await Promise.all([store.turnsOf(conversationId, messageId), store.records(conversationId)]);
      const payments = side.paymentsOf(reference).map((e) => ({ resourceId: e.resourceId, idempotencyKey: e.idempotencyKey }));
      addAudit(tally, reference, auditMessage({ committed, records: recordsOf(records, messageId), payments }));
      // Read once: from here on the reference's payments are only counted, and its memo is
      // never re-worded again (its message has been answered).
      side.settle(reference);
      rewording.delete(reference);
    };
    const sumOf = (counts: ReferenceCountsLike, refs: Iterable<string>) => {
      let sum = 0;
      for (const r of refs) sum += counts.get(r) ?? 0;
      return sum;
    };

    // Route 1, the chapter's: the automatic retry around the streaming request. Every message
    // is sent as users send it (runner.send): the payment turn, then the model's confirmation.
    // Every message's reference, T-0 .. T-<turns-1>, read when counting; not kept as strings (a
    // message not yet sent has no payment, so counting all of them mid-run counts the same).
    const references = messageReferences("T", options.turns);
    // Progress counts over the messages started so far: T-0 .. T-<highest started>.
    let messagesStarted = 0;
    const faultedPlans: TurnPlan[] = [];
    // Each conversation has a store of its own, dropped once its last message is audited: one
    // store shared by the run kept every turn of it (most of what a long run's memory grew by).
    const conversations: { id: string; store: MemoryConversationStore; runner: ReturnType<Side["runner"]> }[] = [];
    let done = 0;
    await pool(options.turns, options.concurrency, async (index, worker, nth) => {
      const reference = `T-${index}`;
      messagesStarted = Math.max(messagesStarted, index + 1);
      const plan = planTurn(options.seed, "chaos", index, options.failureRate, reference, rates);
      if (plan.failure !== undefined || plan.loseResponse) faultedPlans.push(plan);
      if (plan.rewordsMemo) rewording.add(reference);
      const conversationId = `${options.runId}-w${worker}-c${Math.floor(nth / MESSAGES_PER_CONVERSATION)}`;
      let conversation = conversations[worker];
      if (conversation?.id !== conversationId) {
        const store = new MemoryConversationStore();
        conversation = { id: conversationId, store, runner: side.runner({ ...retryingOptions, store }) };
        conversations[worker] = conversation;
      }
      const messageId = `m-${index}`;
      director!.expect(conversationId, messageId, { failure: plan.failure, loseResponse: plan.loseResponse });
      try {
        await conversation.runner.send(conversationId, { id: messageId, content: paymentMessage(plan.args) });
      } catch (error) {
        if (!isTurnFailed(error)) throw error;
        failedTurns++;
      }
      await audit(tallies.main, conversation.store, conversationId, messageId, reference);
      done++;
      progress("automatic_retry", done, options.turns, messageReferences("T", messagesStarted));
    });
    const counts = side.paymentsByReference();
    const main = countDuplicates(counts, references);
    const byCause = { streamCut: 0, lostResponse: 0 };
    for (const reference of main.duplicatedReferences) {
      // The plan is a function of the seed and the index: drawn again rather than kept per turn.
      const failure = planTurn(options.seed, "chaos", Number(reference.slice(2)), options.failureRate, reference, rates).failure;
      const n = (counts.get(reference) ?? 0) - 1;
      if (failure !== undefined && IN_WINDOW.has(failure.position)) byCause.streamCut += n;
      else byCause.lostResponse += n;
    }
    const reworded = side.rewordedResponses;
    const totals: SideTotals = {
      turns: options.turns,
      payments: main.payments,
      duplicates: main.duplicates,
      duplicatesByCause: byCause,
      posts: sumOf(side.posts, references),
      replayedFromLedger,
      lostResponses: sumOf(side.lostResponses, references),
      downstreamReplays: sumOf(side.downstreamReplays, references),
      rewordedResponses: sumOf(reworded, references),
      requestDiffers: sumOf(side.requestDiffers, references),
      reconciled: sumOf(side.reconciled, references),
      misreports: tallies.main.misreports,
      misreportReasons: tallies.main.byReason,
      misreportExamples: tallies.main.examples,
      mayHaveHappened: tallies.main.mayHaveHappened,
      failedTurns,
      streamFailures: director.streamFailures,
      byPosition: { ...director.byPosition },
      positionMismatches: director.positionMismatches,
      duplicatedReferences: main.duplicatedReferences.sort(),
      durationMs: Date.now() - started,
    };

    // Route 2: no automatic retry; the turn fails and the client re-sends its pending message
    // (same id) until it is answered. Every turn of route 1 that met a fault (a cut stream or a
    // lost response) is replayed this way, with the same faults.
    const resendRunner = side.runner({ retry: { attempts: 1, backoffMs }, requestHeaders: headers, onEvent });
    faultedPlans.sort((a, b) => a.index - b.index);
    const resendReferences: string[] = [];
    let resendDone = 0;
    await pool(faultedPlans.length, options.concurrency, async (i) => {
      const original = faultedPlans[i]!;
      const reference = `RS-${original.index}`;
      resendReferences.push(reference);
      if (original.rewordsMemo) rewording.add(reference);
      const conversationId = `${options.runId}-resend-${original.index}`;
      const messageId = `m-${original.index}`;
      director!.expect(conversationId, messageId, { failure: original.failure, loseResponse: original.loseResponse });
      const message = { id: messageId, content: paymentMessage({ ...original.args, reference, memo: `Invoice ${reference}` }) };
      // A turn with a cut before dispatch and a lost response fails twice: three sends answer any plan.
      for (let send = 1; ; send++) {
        try {
          await resendRunner.send(conversationId, message);
          break;
        } catch (error) {
          if (!isTurnFailed(error)) throw error;
          if (send === 3 || !error.record.retryable) {
            director!.anomalies.push(`${conversationId}: send ${send} failed (${error.message}); retryable ${error.record.retryable}`);
            break;
          }
        }
      }
      await audit(tallies.resend, side.store, conversationId, messageId, reference);
      resendDone++;
      progress("client_resend", resendDone, faultedPlans.length, resendReferences);
    });
    const resend = countDuplicates(side.paymentsByReference(), resendReferences);

    // Route 3: an at-least-once queue redelivers a message whose first worker stalled mid-turn
    // (a GC pause, a partition) for longer than its conversation lease and the queue's
    // visibility timeout: the payment was made, message_stop had not arrived. A second worker
    // takes the conversation over and runs the turn at the same index (TURN-10); the first one
    // wakes up, its commit is refused and its effects are recorded beside the conversation
    // (TURN-13). (Two workers at once is harmless to both sides now: the turn lease queues one
    // behind the other, and the second reads the answer from the store, TURN-7.)
    const redeliveryReferences: string[] = [];
    let redeliveryDone = 0;
    await pool(options.redeliveries, options.concurrency, async (index) => {
      const reference = `RD-${index}`;
      redeliveryReferences.push(reference);
      const plan = planTurn(options.seed, "redelivery", index, 0, reference, { rewordRate: options.rewordRate });
      if (plan.rewordsMemo) rewording.add(reference);
      const conversationId = `${options.runId}-redeliver-${index}`;
      const messageId = `m-${index}`;
      // The queue's two consumers share one conversation store. Its clock is this conversation's
      // own, so the stalled worker's lease can expire at once without touching any other one.
      let skewMs = 0;
      const store = new MemoryConversationStore({ now: () => Date.now() + skewMs });
      const worker = () =>
        side.runner({ store, turnLeaseMs: STALLED_WORKER_LEASE_MS, retry: { attempts: 3, backoffMs }, requestHeaders: headers, onEvent });
      const [first, second] = [worker(), worker()];
      let stalled!: (requestNumber: number | undefined) => void;
      const stall = new Promise<number | undefined>((resolve) => (stalled = resolve));
      director!.expect(conversationId, messageId, { failure: undefined, loseResponse: false, stall: stalled });
      const message = { id: messageId, content: paymentMessage(plan.args) };
      const firstDone = first.send(conversationId, message);
      const held = await Promise.race([stall, firstDone.then(() => undefined)]);
      if (held === undefined) {
        director!.anomalies.push(`${conversationId}: the first worker never stalled`);
      } else {
        skewMs = STALLED_WORKER_LEASE_MS + 1;
        await second.send(conversationId, message);
        director!.releaseWhenHeld(held);
      }
      await firstDone;
      await audit(tallies.redelivery, store, conversationId, messageId, reference);
      redeliveryDone++;
      progress("queue_redelivery", redeliveryDone, options.redeliveries, redeliveryReferences);
    });
    const redelivery = countDuplicates(side.paymentsByReference(), redeliveryReferences);
    totals.durationMs = Date.now() - started;
    return {
      totals,
      resend: { replays: faultedPlans.length, ...routeSide(resend, sumOf(side.posts, resendReferences), tallies.resend) },
      redelivery: { replays: options.redeliveries, ...routeSide(redelivery, sumOf(side.posts, redeliveryReferences), tallies.redelivery) },
      main: { replays: faultedPlans.length, ...routeSide(main, totals.posts, tallies.main) },
      anomalies: [...director.anomalies.map((a) => `${sideName}: ${a}`), ...side.warnings.map((w) => `${sideName}: ${w}`)],
    };
  } finally {
    // Servers left open would keep the process alive after an error.
    await side.close();
  }
}

function routeSide(counted: { duplicates: number; payments: number }, posts: number, tally: AuditTally): RouteSide {
  return {
    duplicates: counted.duplicates,
    payments: counted.payments,
    posts,
    misreports: tally.misreports,
    mayHaveHappened: tally.mayHaveHappened,
    mayHaveHappenedAndDid: tally.mayHaveHappenedAndDid,
    mayHaveHappenedExamples: tally.mayHaveHappenedExamples,
  };
}

export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const started = Date.now();
  const { ledger, onProgress, parallel, ...plain } = options;
  const worker = parallel === false ? undefined : workerFile();
  let naive: SideRun;
  let guarded: SideRun;
  if (worker !== undefined) {
    // The two sides share nothing, so the naive one runs on the machine's other core.
    [naive, guarded] = await Promise.all([
      runSideInWorker(worker, plain, onProgress),
      runSide({ ...plain, ledger, ...(onProgress ? { onProgress } : {}) }, true),
    ]);
  } else {
    naive = await runSide({ ...plain, ...(onProgress ? { onProgress } : {}) }, false);
    guarded = await runSide({ ...plain, ledger, ...(onProgress ? { onProgress } : {}) }, true);
  }
  const plannedByPosition = zeroCounts();
  const planned = { lostResponses: 0, lostResponsesInWindow: 0, rewordedMemos: 0 };
  const rates = { dropRate: options.dropRate, rewordRate: options.rewordRate };
  for (let i = 0; i < options.turns; i++) {
    const plan = planTurn(options.seed, "chaos", i, options.failureRate, `T-${i}`, rates);
    if (plan.failure !== undefined) plannedByPosition[plan.failure.position]++;
    if (plan.loseResponse) planned.lostResponses++;
    if (plan.loseResponse && plan.failure !== undefined && IN_WINDOW.has(plan.failure.position)) planned.lostResponsesInWindow++;
    if (plan.rewordsMemo) planned.rewordedMemos++;
  }
  const byPosition = guarded.totals.byPosition;
  const failuresInWindow = byPosition.during_dispatch + byPosition.after_dispatch_before_stop;
  const naiveDuplicateRate = wilson(naive.totals.duplicatesByCause.streamCut, options.turns);
  const chapterRate = CHAPTER.failureRate * CHAPTER.windowShare;
  const thisRate = options.failureRate * CHAPTER.windowShare;
  const anomalies = [...naive.anomalies, ...guarded.anomalies];
  for (const position of POSITIONS) {
    if (naive.totals.byPosition[position] !== guarded.totals.byPosition[position]) {
      anomalies.push(`failures at ${position} differ between the sides: naive ${naive.totals.byPosition[position]}, guarded ${guarded.totals.byPosition[position]}`);
    }
  }
  return {
    provider: options.provider ?? "anthropic",
    turns: options.turns,
    failureRate: options.failureRate,
    dropRate: options.dropRate,
    rewordRate: options.rewordRate,
    seed: options.seed,
    timeScale: options.timeScale,
    concurrency: options.concurrency,
    messagesPerConversation: MESSAGES_PER_CONVERSATION,
    paymentsMs: CHAPTER.paymentsMs * options.timeScale,
    gapMs: CHAPTER.gapMs * options.timeScale,
    streamFailures: guarded.totals.streamFailures,
    failuresInWindow,
    byPosition,
    plannedByPosition,
    planned,
    naive: naive.totals,
    guarded: guarded.totals,
    naiveDuplicateRate,
    chapter: {
      failureRate: CHAPTER.failureRate,
      windowShare: CHAPTER.windowShare,
      duplicateRate: chapterRate,
      oneIn: Math.round(1 / chapterRate),
      atThisFailureRate: {
        duplicateRate: thisRate,
        oneIn: Math.round(1 / thisRate),
        expectedDuplicates: thisRate * options.turns,
        insideInterval: thisRate >= naiveDuplicateRate.low && thisRate <= naiveDuplicateRate.high,
      },
    },
    routes: [
      {
        name: "automatic_retry",
        description: "the SDK-level retry around the stream re-issues the turn (the chapter's route)",
        replays: naive.main.replays,
        naive: withoutReplays(naive.main),
        guarded: withoutReplays(guarded.main),
      },
      {
        name: "client_resend",
        description: "no automatic retry: the turn fails and the client re-sends its pending message (same message id)",
        replays: naive.resend.replays,
        naive: withoutReplays(naive.resend),
        guarded: withoutReplays(guarded.resend),
      },
      {
        name: "queue_redelivery",
        description: "an at-least-once queue redelivers a message whose worker stalled mid-turn past its lease; a second worker takes over",
        replays: naive.redelivery.replays,
        naive: withoutReplays(naive.redelivery),
        guarded: withoutReplays(guarded.redelivery),
      },
    ],
    split: SPLIT,
    anomalies,
    durationMs: Date.now() - started,
  };
}

function withoutReplays(route: { replays: number } & RouteSide): RouteSide {
  const { duplicates, payments, posts, misreports, mayHaveHappened, mayHaveHappenedAndDid, mayHaveHappenedExamples } = route;
  return { duplicates, payments, posts, misreports, mayHaveHappened, mayHaveHappenedAndDid, mayHaveHappenedExamples };
}

/** The built worker entry beside this module, if there is one (running from source there is not). */
function workerFile(): string | undefined {
  try {
    const path = fileURLToPath(new URL("./chaos-worker.js", import.meta.url));
    return existsSync(path) ? path : undefined;
  } catch {
    return undefined;
  }
}

export type WorkerMessage = { type: "progress"; progress: ChaosProgress } | { type: "result"; result: SideRun } | { type: "error"; message: string; stack?: string };

function runSideInWorker(file: string, options: SideOptions, onProgress: ChaosOptions["onProgress"]): Promise<SideRun> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(file, { workerData: options, resourceLimits: sideHeapLimits(options.turns) });
    let settled = false;
    worker.on("message", (message: WorkerMessage) => {
      if (message.type === "progress") onProgress?.(message.progress);
      else if (message.type === "result") {
        settled = true;
        resolve(message.result);
      } else {
        settled = true;
        reject(Object.assign(new Error(`naive side (worker): ${message.message}`), { stack: message.stack }));
      }
    });
    worker.on("error", (error) => {
      settled = true;
      reject(error);
    });
    worker.on("exit", (code) => {
      if (!settled) reject(new Error(`naive side worker exited with code ${code} before reporting`));
    });
  });
}
