import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { Ledger } from "@dispatch-once/core";
import { TurnFailedError, type FailurePosition, type RunnerEvent } from "@dispatch-once/anthropic";
import type { CutKind, Fault, FaultPlan } from "@dispatch-once/mock-provider";
import { CHAPTER } from "./incident.js";
import { Rng } from "./prng.js";
import { wilson, type RateEstimate } from "./stats.js";
import { countDuplicates, paymentMessage, startSide, type PaymentArgs, type Side } from "./world.js";

export const POSITIONS: readonly FailurePosition[] = [
  "before_any_call",
  "arguments_streaming",
  "during_dispatch",
  "after_dispatch_before_stop",
];

/** Positions inside the window: the payment may already have been made. */
export const IN_WINDOW: ReadonlySet<FailurePosition> = new Set(["during_dispatch", "after_dispatch_before_stop"]);

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

const CUT_KINDS: readonly CutKind[] = ["reset", "reset", "reset", "clean_close", "error_event"];
const MESSAGES_PER_CONVERSATION = 4;
const PAYEES = ["acme-supplies", "globex", "initech", "umbrella-logistics", "hooli", "stark-parts", "wayne-freight", "tyrell-labs"];

export interface PlannedFailure {
  position: FailurePosition;
  kind: CutKind;
  /** For arguments_streaming: how many argument fragments are sent before the cut. */
  afterFragment: number;
}

export interface TurnPlan {
  index: number;
  args: PaymentArgs;
  failure: PlannedFailure | undefined;
}

/** The plan of one turn, a function of (seed, route, index) alone. */
export function planTurn(seed: string, route: string, index: number, failureRate: number, reference: string): TurnPlan {
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
  if (!fails) return { index, args, failure: undefined };
  let position: FailurePosition;
  if (where < SPLIT.preDispatch) position = split < SPLIT.beforeAnyCallOfPreDispatch ? "before_any_call" : "arguments_streaming";
  else position = split < SPLIT.duringDispatchOfWindow ? "during_dispatch" : "after_dispatch_before_stop";
  return { index, args, failure: { position, kind, afterFragment } };
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
  /** POSTs the tool sent (the guarded side also has the downstream's own Idempotency-Key check behind the ledger). */
  posts: number;
  /** Retried dispatches answered from the ledger without calling the payments API. */
  replayedFromLedger: number;
  /** Turns that failed for good (the client saw an error). */
  failedTurns: number;
  streamFailures: number;
  byPosition: PositionCounts;
  /** Failures whose measured position differs from the planned one (expected 0). */
  positionMismatches: number;
  duplicatedReferences: string[];
  durationMs: number;
}

export interface RouteResult {
  name: "automatic_retry" | "client_resend" | "queue_redelivery";
  description: string;
  /** Turns this route replayed (re-issued). */
  replays: number;
  naive: { duplicates: number; payments: number };
  guarded: { duplicates: number; payments: number; posts: number };
}

export interface ChaosResult {
  turns: number;
  failureRate: number;
  seed: string;
  timeScale: number;
  concurrency: number;
  paymentsMs: number;
  gapMs: number;
  streamFailures: number;
  failuresInWindow: number;
  byPosition: PositionCounts;
  plannedByPosition: PositionCounts;
  naive: SideTotals;
  guarded: SideTotals;
  /** Naive duplicates per turn, with its 95 % Wilson interval. */
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
  /** Run the naive side in a worker thread, beside the guarded one (default true when the worker file exists). */
  parallel?: boolean;
  turns: number;
  failureRate: number;
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
  kind: CutKind;
  trigger: "call_complete" | "call_resolved";
}

/**
 * Turns faults planned per turn into provider faults, and fires the cuts that must land at a
 * point of the handler's own progress (inside the window) from the runner's events: the stream
 * is held at the position and cut when the handler has reached the right state.
 */
class FaultDirector {
  private readonly planned = new Map<string, PlannedFailure>();
  private readonly fired = new Set<string>();
  private readonly cuts = new Map<string, PendingCut>();
  private readonly gates = new Map<string, { open: () => void; promise: Promise<void>; consumed: boolean }>();
  readonly byPosition = zeroCounts();
  streamFailures = 0;
  positionMismatches = 0;
  readonly anomalies: string[] = [];

  constructor(private readonly side: Side) {}

  /** Register the fault of the payment turn at (conversation, turn index). */
  plan(conversationId: string, turnIndex: number, failure: PlannedFailure | undefined): void {
    if (failure === undefined) return;
    const turnKey = `${conversationId}|${turnIndex}`;
    this.planned.set(turnKey, failure);
    if (failure.position === "during_dispatch") {
      let open!: () => void;
      const promise = new Promise<void>((resolve) => (open = resolve));
      this.gates.set(turnKey, { open, promise, consumed: false });
    }
  }

  readonly faultPlan: FaultPlan = (_request, info) => {
    const turnKey = info.headers["x-demo-turn"];
    if (turnKey === undefined) return undefined;
    const failure = this.planned.get(turnKey);
    // One failure per planned turn: its first request only.
    if (failure === undefined || this.fired.has(turnKey)) return undefined;
    this.fired.add(turnKey);
    const attempt = info.headers["x-demo-attempt"] ?? "1";
    const cutKind = failure.kind;
    const pending = (trigger: PendingCut["trigger"]) => {
      const attemptKey = `${turnKey}|${attempt}`;
      this.cuts.set(attemptKey, { requestNumber: info.requestNumber, kind: cutKind, trigger });
      // A held stream whose trigger never comes would hang the run: cut it anyway, and say so.
      setTimeout(() => {
        if (!this.cuts.delete(attemptKey)) return;
        this.anomalies.push(`${attemptKey}: no ${trigger} within 30 s; the held stream was cut anyway`);
        this.cutWhenHeld(info.requestNumber, cutKind, attemptKey);
      }, 30_000).unref();
    };
    let fault: Fault;
    switch (failure.position) {
      case "before_any_call":
        // Replaces the first content_block_start: only message_start was sent.
        fault = cut(cutKind, { event: 1 });
        break;
      case "arguments_streaming":
        fault = cut(cutKind, { toolUse: 0, afterFragment: failure.afterFragment });
        break;
      case "during_dispatch":
        // Held right after content_block_stop; cut once the call is dispatched (its POST is out).
        fault = { kind: "hold", at: { afterToolUseStop: 0 } };
        pending("call_complete");
        break;
      case "after_dispatch_before_stop":
        // Held where message_stop would go; cut once the payment has been accepted and resolved.
        fault = { kind: "hold", at: { beforeMessageStop: true } };
        pending("call_resolved");
        break;
    }
    return fault;
  };

  /** Tool hook: a during_dispatch turn's first POST does not return before the reset was seen. */
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

  /** Cut the stream once it is held (it may not have reached the hold yet). */
  private cutWhenHeld(requestNumber: number, kind: CutKind, attemptKey: string): void {
    const { provider } = this.side;
    void provider
      .waitForHold(requestNumber, { timeoutMs: 30_000 })
      .then(() => provider.cutNow(requestNumber, kind))
      .catch((error: unknown) => this.anomalies.push(`cut of ${attemptKey} failed: ${String(error)}`));
  }

  readonly onEvent = (event: RunnerEvent): void => {
    const turnKey = `${event.conversationId}|${event.turnIndex}`;
    if (event.type === "call_complete" || event.type === "call_resolved") {
      const attemptKey = `${turnKey}|${event.attempt}`;
      const cutPlan = this.cuts.get(attemptKey);
      if (cutPlan !== undefined && cutPlan.trigger === event.type) {
        this.cuts.delete(attemptKey);
        this.cutWhenHeld(cutPlan.requestNumber, cutPlan.kind, attemptKey);
      }
    } else if (event.type === "stream_failed") {
      this.streamFailures++;
      this.byPosition[event.position]++;
      const planned = this.planned.get(turnKey);
      if (planned === undefined || planned.position !== event.position) {
        this.positionMismatches++;
        this.anomalies.push(`${turnKey}: stream failed at ${event.position}, planned ${planned?.position ?? "no failure"}`);
      }
      this.gates.get(turnKey)?.open();
    }
  };
}

function cut(kind: CutKind, at: Extract<Fault, { kind: "reset" }>["at"]): Fault {
  return kind === "error_event" ? { kind, at, error: { type: "overloaded_error", message: "Overloaded" } } : { kind, at };
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
  resend: { replays: number; duplicates: number; payments: number; posts: number };
  redelivery: { replays: number; duplicates: number; payments: number; posts: number };
  anomalies: string[];
}

/** The options one side needs; plain data, so a side can run in a worker thread. */
export type SideOptions = Omit<ChaosOptions, "ledger" | "onProgress" | "parallel"> & {
  ledger?: Ledger;
  onProgress?: (progress: ChaosProgress) => void;
};

/** One side of the chaos run: all three routes, naive (no ledger) or guarded. */
export async function runSide(options: SideOptions, guarded: boolean): Promise<SideRun> {
  const scale = options.timeScale;
  const started = Date.now();
  const sideName = guarded ? "guarded" : "naive";
  let director: FaultDirector | undefined;
  const side = await startSide({
    guarded,
    ledger: options.ledger,
    paymentsLatencyMs: CHAPTER.paymentsMs * scale,
    providerTiming: { beforeMessageStopMs: CHAPTER.gapMs * scale },
    seed: options.seed,
    pollMs: Math.max(1, Math.round(5 * scale)),
    hooks: { afterPost: (_args, context) => director!.afterPost(context.conversationId, context.turnIndex) },
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
    const retrying = side.runner({ retry: { attempts: 3, backoffMs }, requestHeaders: headers, onEvent });
    let lastReport = 0;
    const progress = (phase: ChaosProgress["phase"], done: number, total: number, references: string[]) => {
      // Throttled: counting duplicates reads the whole effect log.
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

    // Route 1, the chapter's: the automatic retry around the streaming request.
    const references: string[] = [];
    const failingPlans: TurnPlan[] = [];
    let done = 0;
    await pool(options.turns, options.concurrency, async (index, worker, nth) => {
      const reference = `T-${index}`;
      const plan = planTurn(options.seed, "chaos", index, options.failureRate, reference);
      if (plan.failure !== undefined) failingPlans.push(plan);
      references.push(reference);
      const conversationId = `${options.runId}-w${worker}-c${Math.floor(nth / MESSAGES_PER_CONVERSATION)}`;
      // Only the payment turn is run (runTurn), not the model's closing confirmation: it cannot
      // pay, and skipping it halves the cost of a turn. The replay routes below run full sends.
      const turnIndex = nth % MESSAGES_PER_CONVERSATION;
      director!.plan(conversationId, turnIndex, plan.failure);
      try {
        await side.store.appendUserMessage(conversationId, { id: `m-${index}`, content: paymentMessage(plan.args) });
        await retrying.runTurn(conversationId);
      } catch (error) {
        if (!(error instanceof TurnFailedError)) throw error;
        failedTurns++;
      }
      done++;
      progress("automatic_retry", done, options.turns, references);
    });
    const counts = side.paymentsByReference();
    const main = countDuplicates(counts, references);
    const posts = references.reduce((sum, r) => sum + (side.posts.get(r) ?? 0), 0);
    const totals: SideTotals = {
      turns: options.turns,
      payments: main.payments,
      duplicates: main.duplicates,
      posts,
      replayedFromLedger,
      failedTurns,
      streamFailures: director.streamFailures,
      byPosition: { ...director.byPosition },
      positionMismatches: director.positionMismatches,
      duplicatedReferences: main.duplicatedReferences.sort(),
      durationMs: Date.now() - started,
    };

    // Route 2: no automatic retry; the turn fails and the client re-sends its pending message.
    // Every failure of route 1 is replayed this way, at the same position.
    const resendRunner = side.runner({ retry: { attempts: 1, backoffMs }, requestHeaders: headers, onEvent });
    failingPlans.sort((a, b) => a.index - b.index);
    const resendReferences: string[] = [];
    let resendDone = 0;
    await pool(failingPlans.length, options.concurrency, async (i) => {
      const original = failingPlans[i]!;
      const reference = `RS-${original.index}`;
      resendReferences.push(reference);
      const conversationId = `${options.runId}-resend-${original.index}`;
      director!.plan(conversationId, 0, original.failure);
      const message = { id: `m-${original.index}`, content: paymentMessage({ ...original.args, reference, memo: `Invoice ${reference}` }) };
      try {
        await resendRunner.send(conversationId, message);
      } catch (error) {
        if (!(error instanceof TurnFailedError)) throw error;
        try {
          await resendRunner.send(conversationId, message);
        } catch (again) {
          if (!(again instanceof TurnFailedError)) throw again;
          // Only the first request of a turn is cut: a re-send that fails too is a defect.
          director!.anomalies.push(`${conversationId}: the client's re-send failed too (${again.message})`);
        }
      }
      resendDone++;
      progress("client_resend", resendDone, failingPlans.length, resendReferences);
    });
    const resend = countDuplicates(side.paymentsByReference(), resendReferences);

    // Route 3: a queue with at-least-once delivery hands the same message to two workers at once.
    const redeliveryReferences: string[] = [];
    const second = side.runner({ retry: { attempts: 3, backoffMs }, requestHeaders: headers, onEvent });
    let redeliveryDone = 0;
    await pool(options.redeliveries, options.concurrency, async (index) => {
      const reference = `RD-${index}`;
      redeliveryReferences.push(reference);
      const plan = planTurn(options.seed, "redelivery", index, 0, reference);
      const conversationId = `${options.runId}-redeliver-${index}`;
      const message = { id: `m-${index}`, content: paymentMessage(plan.args) };
      await Promise.all([retrying.send(conversationId, message), second.send(conversationId, message)]);
      redeliveryDone++;
      progress("queue_redelivery", redeliveryDone, options.redeliveries, redeliveryReferences);
    });
    const redelivery = countDuplicates(side.paymentsByReference(), redeliveryReferences);
    const postsOf = (refs: string[]) => refs.reduce((sum, r) => sum + (side.posts.get(r) ?? 0), 0);
    totals.durationMs = Date.now() - started;
    return {
      totals,
      resend: { replays: failingPlans.length, duplicates: resend.duplicates, payments: resend.payments, posts: postsOf(resendReferences) },
      redelivery: {
        replays: options.redeliveries,
        duplicates: redelivery.duplicates,
        payments: redelivery.payments,
        posts: postsOf(redeliveryReferences),
      },
      anomalies: [...director.anomalies.map((a) => `${sideName}: ${a}`), ...side.warnings.map((w) => `${sideName}: ${w}`)],
    };
  } finally {
    // Servers left open would keep the process alive after an error.
    await side.close();
  }
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
  for (let i = 0; i < options.turns; i++) {
    const failure = planTurn(options.seed, "chaos", i, options.failureRate, `T-${i}`).failure;
    if (failure !== undefined) plannedByPosition[failure.position]++;
  }
  const byPosition = guarded.totals.byPosition;
  const failuresInWindow = byPosition.during_dispatch + byPosition.after_dispatch_before_stop;
  const naiveDuplicateRate = wilson(naive.totals.duplicates, options.turns);
  const chapterRate = CHAPTER.failureRate * CHAPTER.windowShare;
  const thisRate = options.failureRate * CHAPTER.windowShare;
  const anomalies = [...naive.anomalies, ...guarded.anomalies];
  for (const position of POSITIONS) {
    if (naive.totals.byPosition[position] !== guarded.totals.byPosition[position]) {
      anomalies.push(`failures at ${position} differ between the sides: naive ${naive.totals.byPosition[position]}, guarded ${guarded.totals.byPosition[position]}`);
    }
  }
  return {
    turns: options.turns,
    failureRate: options.failureRate,
    seed: options.seed,
    timeScale: options.timeScale,
    concurrency: options.concurrency,
    paymentsMs: CHAPTER.paymentsMs * options.timeScale,
    gapMs: CHAPTER.gapMs * options.timeScale,
    streamFailures: guarded.totals.streamFailures,
    failuresInWindow,
    byPosition,
    plannedByPosition,
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
        replays: guarded.totals.streamFailures,
        naive: { duplicates: naive.totals.duplicates, payments: naive.totals.payments },
        guarded: { duplicates: guarded.totals.duplicates, payments: guarded.totals.payments, posts: guarded.totals.posts },
      },
      {
        name: "client_resend",
        description: "no automatic retry: the turn fails and the client re-sends its pending message (same message id)",
        replays: naive.resend.replays,
        naive: { duplicates: naive.resend.duplicates, payments: naive.resend.payments },
        guarded: { duplicates: guarded.resend.duplicates, payments: guarded.resend.payments, posts: guarded.resend.posts },
      },
      {
        name: "queue_redelivery",
        description: "an at-least-once queue hands the same message to two workers at once",
        replays: naive.redelivery.replays,
        naive: { duplicates: naive.redelivery.duplicates, payments: naive.redelivery.payments },
        guarded: { duplicates: guarded.redelivery.duplicates, payments: guarded.redelivery.payments, posts: guarded.redelivery.posts },
      },
    ],
    split: SPLIT,
    anomalies,
    durationMs: Date.now() - started,
  };
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
    const worker = new Worker(file, { workerData: options });
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
