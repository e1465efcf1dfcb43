/**
 * One run of the fault suite on one store: worker processes dispatch a fixed set of intents (a
 * keyed payment and an unkeyed invoice each) through the real dispatcher to mock payments, again
 * and again and concurrently (replays), while the parent SIGKILLs workers at random moments and
 * puts the store through its faults. Then, with the store healthy, every intent is dispatched
 * until it settles, and the oracle compares the effect log, the ledger rows and what the workers
 * reported. Every random choice comes from the seed.
 */
import { fork, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { mulberry32 } from "@dispatch-once/conformance/ledger";
import type { LedgerRow } from "@dispatch-once/core";
import { startMockPayments, type Effect } from "@dispatch-once/mock-payments";
import type { Call, Report, WorkerConfig } from "./protocol.js";
import type { StoreUnderTest } from "./stores.js";
import { compiledEntry } from "@dispatch-once/test-processes";

export interface SuiteOptions {
  seed: number;
  workers: number;
  intents: number;
  chaosMs: number;
  leaseMs: number;
  /** Between faults: time for the workers to run into the aftermath. */
  faultGapMs: number;
}

export interface Verdict {
  violations: string[];
  summary: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const WORKER = fileURLToPath(new URL("./worker.ts", import.meta.url));

interface Attempt {
  call: Call;
  intent: number;
  worker: number;
  report?: Report;
  /** The worker was killed before it answered: it may have died anywhere in the dispatch. */
  died?: boolean;
}

interface Worker {
  id: number;
  child: ChildProcess;
  pending: Set<number>;
  alive: boolean;
  killed: boolean;
}

export async function runSuite(store: StoreUnderTest, options: SuiteOptions): Promise<Verdict> {
  // The conformance kit's seeded generator: every choice of a run replays from its printed seed.
  const random = mulberry32(options.seed);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!;
  const payments = await startMockPayments({ latencyMs: 10 });
  const account = `acct_fault_${options.seed}`;
  const attempts = new Map<number, Attempt>();
  const workers: Worker[] = [];
  let nextAttempt = 1;
  let nextWorker = 1;
  let kills = 0;
  const crashes: string[] = [];
  const faultsRun: string[] = [];
  const faultLog: string[] = [];

  const intents: Call[] = Array.from({ length: options.intents }, (_, i) => ({
    attempt: 0,
    conversationId: `conv_${options.seed}_${i}`,
    turnIndex: i % 3,
    tool: i % 2 === 0 ? "pay" : "invoice",
    input: i % 2 === 0 ? { payee: `payee_${i}`, amount: 100 + i, reference: `inv_${i}` } : { customer: `cust_${i}`, amount: 200 + i },
  }));

  const waiters = new Map<number, (report: Report | undefined) => void>();
  const traces = mkdtempSync(join(tmpdir(), "fault-suite-trace-"));
  const startedAt = Date.now();

  async function spawnWorker(): Promise<Worker> {
    const id = nextWorker++;
    const config: WorkerConfig = {
      id,
      store: store.worker,
      paymentsUrl: payments.url,
      account,
      leaseMs: options.leaseMs,
      waitMs: options.leaseMs * 2,
      claimRetryMs: options.leaseMs * 2,
      tracePath: join(traces, `worker-${id}.jsonl`),
    };
    const child = fork(compiledEntry(WORKER), [JSON.stringify(config)], { execArgv: [], stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const worker: Worker = { id, child, pending: new Set(), alive: true, killed: false };
    await new Promise<void>((resolve, reject) => {
      child.once("message", () => resolve());
      child.once("exit", (code) => reject(new Error(`worker ${id} exited before it was ready (${String(code)})`)));
    });
    child.on("message", (report: Report) => {
      const attempt = attempts.get(report.attempt);
      if (attempt === undefined) return;
      attempt.report = report;
      worker.pending.delete(report.attempt);
      waiters.get(report.attempt)?.(report);
    });
    child.on("exit", (code, signal) => {
      worker.alive = false;
      // Only the suite's SIGKILL may end a worker: a crash of its own would pass for a fault we caused.
      if (!worker.killed) crashes.push(`worker ${id} exited by itself (code ${String(code)}, signal ${String(signal)})`);
      for (const n of worker.pending) {
        attempts.get(n)!.died = true;
        waiters.get(n)?.(undefined);
      }
      worker.pending.clear();
    });
    workers.push(worker);
    return worker;
  }

  function send(worker: Worker, intent: number): Promise<Report | undefined> {
    const call = { ...intents[intent]!, attempt: nextAttempt++ };
    attempts.set(call.attempt, { call, intent, worker: worker.id });
    worker.pending.add(call.attempt);
    const answered = new Promise<Report | undefined>((resolve) => waiters.set(call.attempt, resolve));
    if (!worker.child.connected) {
      // Died between the choice and the send: nothing was sent, so it is no attempt at all.
      attempts.delete(call.attempt);
      worker.pending.delete(call.attempt);
      return Promise.resolve(undefined);
    }
    worker.child.send(call, (error) => {
      if (error === null || !attempts.has(call.attempt) || attempts.get(call.attempt)!.report !== undefined) return;
      // The channel closed under the send: the worker is dying; its exit marks the attempt.
    });
    return answered;
  }

  const live = () => workers.filter((w) => w.alive);

  try {
    await Promise.all(Array.from({ length: options.workers }, () => spawnWorker()));

    // Chaos: calls and replays at random moments, workers killed at random moments, the store's faults in a seeded order.
    const until = Date.now() + options.chaosMs;
    const inflight: Promise<unknown>[] = [];
    const faults = [...store.faults].sort(() => random() - 0.5);
    const faultsDone = (async () => {
      for (const fault of faults) {
        await sleep(options.faultGapMs * (0.5 + random()));
        faultsRun.push(fault.name);
        faultLog.push(`+${Date.now() - startedAt} ms ${fault.name}`);
        await fault.run();
        faultLog.push(`+${Date.now() - startedAt} ms healthy again`);
      }
    })();
    const respawns: Promise<unknown>[] = [];
    const killer = (async () => {
      while (Date.now() < until) {
        await sleep(300 + random() * 700);
        const victims = live().filter((w) => w.pending.size > 0);
        if (victims.length === 0) continue;
        const victim = pick(victims);
        victim.killed = true;
        victim.child.kill("SIGKILL");
        kills++;
        await new Promise((resolve) => victim.child.once("exit", resolve));
        respawns.push(spawnWorker()); // in the background: the others carry on meanwhile
      }
    })();
    while (Date.now() < until) {
      const ready = live();
      if (ready.length > 0) {
        const intent = Math.floor(random() * intents.length);
        // Sometimes the same call at once on two workers: a replay while the first is in flight.
        const copies = random() < 0.3 ? 2 : 1;
        for (let c = 0; c < copies; c++) inflight.push(send(pick(ready), intent));
      }
      await sleep(20 + random() * 80);
    }
    await Promise.all([faultsDone, killer]);
    await Promise.all(respawns);
    await Promise.all(inflight);

    // Settle: with the store healthy and every lease run out, each intent is dispatched until it settles.
    await sleep(options.leaseMs + 200);
    const settled = new Map<number, Report>();
    // At least 8 rounds, and under heavy machine load (where a worker's store timeouts fire before a
    // connection is even made) as many more as fit in 40 s: settling is liveness, not the property.
    const settleUntil = Date.now() + 40_000;
    for (let round = 0; (round < 8 || Date.now() < settleUntil) && settled.size < intents.length; round++) {
      const ready = live();
      const open = intents.map((_, i) => i).filter((i) => !settled.has(i));
      // Each round moves every intent to the next worker: a worker that cannot reach the store
      // (its new connections time out under load) must not hold the same intent every round.
      const answers = await Promise.all(open.map((intent, n) => send(ready[(n + round) % ready.length]!, intent).then((report) => ({ intent, report }))));
      for (const { intent, report } of answers) {
        if (report === undefined) continue;
        if (report.ok || ["outcome_unknown", "tool_failed", "result_not_storable"].includes(report.code)) settled.set(intent, report);
      }
      if (settled.size < intents.length) await sleep(options.leaseMs / 2);
    }

    const verdict = await judge(store, intents, attempts, settled, payments.effects(), { kills, faultsRun, seed: options.seed }, readTrace(traces));
    return { ...verdict, violations: [...crashes, ...verdict.violations.map((v) => withTrace(v, traces, startedAt, faultLog))] };
  } finally {
    rmSync(traces, { recursive: true, force: true });
    for (const w of workers) {
      w.killed = true;
      if (w.alive) w.child.kill("SIGKILL");
    }
    await payments.close();
  }
}

async function judge(
  store: StoreUnderTest,
  intents: Call[],
  attempts: Map<number, Attempt>,
  settled: Map<number, Report>,
  effects: Effect[],
  run: { kills: number; faultsRun: string[]; seed: number },
  trace: TraceEvent[],
): Promise<Verdict> {
  const violations: string[] = [];
  const keyOf = new Map<number, string>();
  for (const a of attempts.values()) if (a.report !== undefined) keyOf.set(a.intent, a.report.key);
  const intentOf = new Map([...keyOf].map(([intent, key]) => [key, intent]));
  const effectsByKey = new Map<string, Effect[]>();
  for (const e of effects) {
    const key = e.idempotencyKey ?? "(none)";
    if (!intentOf.has(key)) violations.push(`an effect under a key no intent has: ${JSON.stringify(e)}`);
    effectsByKey.set(key, [...(effectsByKey.get(key) ?? []), e]);
  }
  const reader = store.reader();
  const rows = new Map<number, LedgerRow | undefined>();
  let unknownExcused = 0;
  let unknownCutOff = 0;
  let unknownTrue = 0;
  const counts = { ok: 0, replayed: 0, failedReports: 0, died: 0 };
  for (let intent = 0; intent < intents.length; intent++) {
    const key = keyOf.get(intent);
    if (key === undefined) {
      violations.push(`intent ${intent} (${intents[intent]!.tool}): never answered`);
      continue;
    }
    const what = `intent ${intent} (${intents[intent]!.tool}, ${key})`;
    const done = effectsByKey.get(key) ?? [];
    const row = await reader.lookup(key);
    rows.set(intent, row);
    const mine = [...attempts.values()].filter((a) => a.intent === intent);
    const died = mine.some((a) => a.died);
    // 0 duplicates per intent.
    if (done.length > 1) violations.push(`${what}: ${done.length} effects (duplicate) under ${key}`);
    // Every intent settled once the store was healthy.
    if (!settled.has(intent)) violations.push(`${what}: did not settle after the faults (last: ${JSON.stringify(mine.at(-1)?.report)})`);
    if (row === undefined || (row.state !== "completed" && row.state !== "unknown" && row.state !== "failed")) {
      violations.push(`${what}: the ledger row is ${row?.state ?? "absent"} after settling`);
    }
    for (const a of mine) {
      if (a.died) {
        counts.died++;
        continue;
      }
      const report = a.report;
      if (report === undefined) continue;
      if (report.ok) {
        counts.ok++;
        if (report.replayed) counts.replayed++;
        // 0 lost committed results: what a worker was told is what the ledger keeps, and the effect it names happened.
        if (row?.state !== "completed" || row.result !== report.resultJson) {
          violations.push(`${what}: reported ${report.resultJson} but the ledger row is ${row?.state} ${row?.state === "completed" ? row.result : ""}`);
        }
        const id = (JSON.parse(report.resultJson) as { paymentId?: string; invoiceId?: string });
        if (done.length !== 1 || done[0]!.resourceId !== (id.paymentId ?? id.invoiceId)) {
          violations.push(`${what}: reported ${report.resultJson} but the effect log has ${JSON.stringify(done.map((e) => e.resourceId))}`);
        }
      } else {
        counts.failedReports++;
        // 0 misreported effects: a report that the effect did not happen, while it did.
        if (report.effect === "no" && done.length > 0) violations.push(`${what}: reported ${report.code} (effect: no) but the effect happened: ${report.message}`);
      }
    }
    if (row?.state === "unknown") {
      if (done.length > 0) unknownTrue++;
      else if (died) unknownExcused++; // a claimant died holding or sending its claim: nobody alive can tell
      else if (cutOffClaimant(trace, key, row)) unknownCutOff++; // its claimant could not reach the store for the whole lease
      // 0 false unknowns: no effect, and every process that claimed it lived to say so.
      else violations.push(`${what}: unknown (${row.reason}) although the effect never happened and no claimant died (row: fence ${row.fence}, claimed at ${row.claimedAt}, settled at ${row.finishedAt})`);
    }
    if (row?.state === "completed" && done.length !== 1) violations.push(`${what}: completed with ${done.length} effects`);
  }
  const summary =
    `${store.name} seed ${run.seed}: ${intents.length} intents, ${attempts.size} dispatches (${counts.ok} ok of which ${counts.replayed} replayed, ` +
    `${counts.failedReports} errors reported, ${counts.died} cut off by ${run.kills} SIGKILLs); faults: ${run.faultsRun.join("; ") || "none"}; ` +
    `effects ${effects.length}; unknown rows: ${unknownTrue} after the effect, ${unknownExcused} excused by a dead claimant, ${unknownCutOff} by a claimant cut off from the store past its lease` +
    (store.skipped.length > 0 ? `; not done: ${store.skipped.join("; ")}` : "");
  return { violations, summary };
}

/** One line of a worker's trace: a dispatcher event, a warning, or a claim call (`ledger_claim`). */
interface TraceEvent {
  at: number;
  worker: number;
  type: string;
  key?: string;
  claimId?: string;
  sentAt?: number;
  error?: string;
  outcome?: string;
}

function readTrace(dir: string): TraceEvent[] {
  const events: TraceEvent[] = [];
  for (const file of readdirSync(dir)) {
    for (const line of readFileSync(join(dir, file), "utf8").split("\n")) if (line !== "") events.push(JSON.parse(line) as TraceEvent);
  }
  return events.sort((a, b) => a.at - b.at);
}

/**
 * Whether an unknown row's claim was one whose reply never came back and whose claimant could not
 * reach the store again before its lease ran out: a claim call in flight (sent, then failed
 * ledger_unavailable) when the row was claimed, and no call with that claim id answered between
 * the claim and the row turning unknown. The claimant was alive but cut off (its every retry timed
 * out), and the lease settled the row by LEDGER-7 as it settles a dead claimant's: the residual
 * the spec notes name (proposed LEDGER-27), not a false unknown. A ledger that does not recognise
 * the claim id answers the retries (`existing`), so that bug is never excused here.
 */
function cutOffClaimant(trace: TraceEvent[], key: string, row: { claimedAt: number; finishedAt: number }): boolean {
  const slack = 5; // the store's clock is this machine's; statement_timestamp() vs Date.now() rounding
  const claims = trace.filter((e) => e.type === "ledger_claim" && e.key === key && e.claimId !== undefined);
  const lost = claims.filter((c) => c.error === "ledger_unavailable" && c.sentAt! <= row.claimedAt + slack && c.at >= row.claimedAt - slack);
  return lost.some(
    (c) => !claims.some((d) => d.claimId === c.claimId && d.error === undefined && d.at >= row.claimedAt - slack && d.sentAt! <= row.finishedAt + slack),
  );
}

/**
 * A violation with what every worker's dispatcher did with its key (claims, retries, releases of
 * lost claims, warnings), in time order, and when the faults began and ended: enough to tell a
 * late copy of a claim from a lease that ran out during a pause, without running it again.
 */
function withTrace(violation: string, dir: string, startedAt: number, faultLog: string[]): string {
  const key = /[0-9a-f]{32}/.exec(violation)?.[0];
  if (key === undefined) return violation;
  const lines: Array<{ at: number } & Record<string, unknown>> = [];
  for (const file of readdirSync(dir)) {
    for (const line of readFileSync(join(dir, file), "utf8").split("\n")) {
      if (line === "") continue;
      const event = JSON.parse(line) as { at: number; key?: string };
      if (event.key === key) lines.push(event);
    }
  }
  lines.sort((a, b) => a.at - b.at);
  const shown = lines.map(({ at, key: _key, ...rest }) => `  +${at - startedAt} ms ${JSON.stringify(rest)}`);
  return [violation, `run started at ${startedAt} (epoch ms); faults: ${faultLog.join("; ")}`, `trace of ${key}:`, ...shown].join("\n");
}
