/**
 * What the silent-store checks of both store levels share (LEDGER-12 for ledgers, TURN-21 for
 * conversation stores): the slack past a subject's declared bound, the silent window that starts
 * every operation at once and judges which settled how, and the proxy's setup around a fixture.
 * Each level keeps its own operations and its own after-heal judgement of what is stored.
 */
import { CheckInconclusive } from "../errors/check-inconclusive.js";
import { ConformanceFailure, codeOf, describeError, must, show } from "../failure.js";
import { startSilenceProxy, type SilenceProxy, type StoreAddress } from "./silence-proxy.js";
import { startStallProbe, type StallProbe } from "./stall-probe.js";

/** Fixed part of the slack past the declared bound: timer latency on a loaded host, not the adapter's time. */
export const SILENT_STORE_SLACK_MS = 1_000;

/** The slack the checks allow past `operationBoundMs`: 1,000 ms plus a tenth of the bound. */
export function silentStoreSlackMs(operationBoundMs: number): number {
  return SILENT_STORE_SLACK_MS + Math.ceil(operationBoundMs / 10);
}

/** After heal(), how long a check waits for operations that had not settled (they are already failures). */
const AFTER_HEAL_WAIT_MS = 2_000;

/** What a level's silent-store checks judge by: the rule, the code past the bound, the word for its operations. */
export interface SilentRule {
  rule: string;
  code: string;
  operations: string;
}

/** The subject's declared bound, or a failure saying what to declare. */
export function checkedOperationBound(bound: unknown, rule: string): number {
  if (typeof bound !== "number" || !Number.isFinite(bound) || bound <= 0) {
    throw new ConformanceFailure(`the subject declares silentStore but limits.operationBoundMs is ${show(bound)}: declare the adapter's documented bound on every operation (${rule}), as configured in raw.openVia's instance`);
  }
  return bound;
}

type Outcome = { settled: false } | { settled: true; ok: true; value: unknown; ms: number } | { settled: true; ok: false; error: unknown; ms: number };

/**
 * An operation judged against its deadline on the kit's responsive time: `stalledMs` is how long
 * the kit's own process was stalled (StallProbe) from its start to when it settled or was given up
 * on; `waitedMs` how long the kit waited in all; `responsive` whether the kit had the whole limit
 * of responsive time (waited - stalled) when it gave up (false: it gave up at STALLED_WAIT_FACTOR
 * times the limit with the process stalled for most of it).
 */
type Judged = (Exclude<Outcome, { settled: false }> & { stalledMs: number }) | { settled: false; stalledMs: number; waitedMs: number; responsive: boolean };

/** How long past the limit, in wall time, the kit waits for a stalled process to give an operation the limit's responsive time. */
const STALLED_WAIT_FACTOR = 3;

/** One operation started in the silent window. */
export interface SilentOperation<Instance, Fixture = unknown> {
  name: string;
  start(instance: Instance): Promise<unknown>;
  /** An answer that is true without the store (a sweep that leaves expiry to the store's own TTLs removes nothing, 0). */
  mayAnswer?(value: unknown): boolean;
  /** After heal: what is stored is as it was, or this operation applied whole and late (the rules allow the store to apply it). */
  afterHeal?(fixture: Fixture): Promise<void>;
}

function oneLine(text: string): string {
  const flat = text.replace(/\s*\n\s*/g, " ");
  return flat.length > 160 ? `${flat.slice(0, 160)}…` : flat;
}

/** Races `promise` against `ms`; the timer is always cleared. */
async function settleWithin(promise: Promise<unknown>, ms: number): Promise<Outcome> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<Outcome>((resolve) => {
    timer = setTimeout(() => resolve({ settled: false }), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        (value): Outcome => ({ settled: true, ok: true, value, ms: performance.now() - started }),
        (error: unknown): Outcome => ({ settled: true, ok: false, error, ms: performance.now() - started }),
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Races `promise` against `limitMs` of the kit's RESPONSIVE time: the deadline moves on by every
 * ms the kit's own process is stalled (a starved process's timers, and the operation's own, fire
 * late), up to STALLED_WAIT_FACTOR times the limit in wall time. An operation the kit gave up on
 * after the whole limit of responsive time missed its deadline with the process responsive: a
 * verdict. One it gave up on at the wall cap, or that settled past the limit by less than the
 * stall, could not be judged (CONF-5).
 */
async function settleResponsive(promise: Promise<unknown>, limitMs: number, probe: StallProbe): Promise<Judged> {
  const started = performance.now();
  const stall0 = probe.stalledMs();
  let judged: Judged | undefined;
  const settledNow = (): number => probe.stalledMs() - stall0;
  const signal = promise.then(
    (value) => void (judged ??= { settled: true, ok: true, value, ms: performance.now() - started, stalledMs: settledNow() }),
    (error: unknown) => void (judged ??= { settled: true, ok: false, error, ms: performance.now() - started, stalledMs: settledNow() }),
  );
  const capMs = limitMs * STALLED_WAIT_FACTOR;
  for (;;) {
    if (judged !== undefined) return judged;
    const waitedMs = performance.now() - started;
    const stalledMs = settledNow();
    const responsiveLeft = limitMs - (waitedMs - stalledMs);
    if (responsiveLeft <= 0) return { settled: false, stalledMs, waitedMs, responsive: true };
    if (waitedMs >= capMs) return { settled: false, stalledMs, waitedMs, responsive: false };
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([signal, new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(1, Math.min(responsiveLeft, capMs - waitedMs)))))]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** What the window calls `close` in its problems: it runs once the operations have settled, on its own. */
const CLOSE = "close (once the others had settled, the store still silent)";

/** `fn()`, a throw included, as a promise. */
function started(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    return fn();
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Runs `ops` at once on `instance` while the proxy is silent, then, still silent, the instance's
 * close(); throws one failure naming every operation that did not reject with the rule's code by
 * bound + slack, and a close that neither resolved nor rejected with that code by then (the rules
 * bound every method, close included; a close may resolve: releasing what the instance holds needs
 * no answer). Close runs on its own, after the others settled: a close that destroys connections
 * would otherwise end the waits of operations that have no bound of their own, and hide them.
 * Heals the proxy in any case and gives the ones still pending a short while to settle (so
 * destroy() does not wait on them).
 *
 * Bound + slack is counted on the kit's responsive time (settleResponsive): an operation late by no
 * more than the kit's own process was stalled may have been on time, so, when nothing else broke
 * the rule, the window is inconclusive (CheckInconclusive) rather than a violation. An adapter
 * that blocks the event loop itself shows as such a stall too: it is never certified either, since
 * the kit runs the check again and reports it inconclusive, not certified, when every run stalls.
 */
export async function judgeSilentWindow<Instance extends { close(): Promise<unknown> }>(rule: SilentRule, ops: SilentOperation<Instance>[], instance: Instance, proxy: SilenceProxy, bound: number, when: string): Promise<void> {
  const limit = bound + silentStoreSlackMs(bound);
  const probe = startStallProbe();
  const pending = ops.map((op) => started(() => op.start(instance)));
  let outcomes: Judged[];
  let closing: Promise<unknown> | undefined;
  let closed: Judged;
  try {
    outcomes = await Promise.all(pending.map((p) => settleResponsive(p, limit, probe)));
    closing = started(() => instance.close());
    closed = await settleResponsive(closing, limit, probe);
  } finally {
    proxy.heal();
    probe.stop();
  }
  if (closing !== undefined) pending.push(closing);
  const problems: string[] = [];
  const unjudged: string[] = [];
  const slack = `(the declared operationBoundMs ${bound} + ${limit - bound} ms slack)`;
  // Missed the deadline: a violation when the kit was responsive for the whole limit, else it could not judge.
  const late = (name: string, outcome: Judged): boolean => {
    if (!outcome.settled) {
      if (outcome.responsive) problems.push(`${name} did not settle within ${limit} ms ${slack}${outcome.stalledMs >= 1 ? ` of the kit's responsive time (it waited ${Math.round(outcome.waitedMs)} ms, its own process stalled for ${Math.round(outcome.stalledMs)} ms of them)` : ""}`);
      else unjudged.push(`${name} had not settled after ${Math.round(outcome.waitedMs)} ms, but the kit's own process was stalled for ${Math.round(outcome.stalledMs)} ms of them: it never had the ${limit} ms ${slack} of responsive time to judge it by`);
      return true;
    }
    if (outcome.ms <= limit) return false;
    if (outcome.ms - limit < outcome.stalledMs) {
      unjudged.push(`${name} settled after ${Math.round(outcome.ms)} ms, ${Math.round(outcome.ms - limit)} ms past the limit of ${limit} ms ${slack}, while the kit's own process was stalled for ${Math.round(outcome.stalledMs)} ms of that time: it may have been on time`);
    } else {
      problems.push(`${name} did not settle within ${limit} ms ${slack}: it settled after ${Math.round(outcome.ms)} ms, the kit's own process stalled for ${Math.round(outcome.stalledMs)} ms of them`);
    }
    return true;
  };
  for (const [i, outcome] of outcomes.entries()) {
    const name = ops[i]!.name;
    // What an operation answered is judged whenever it came: answering, or the wrong error, is never the kit's stall.
    if (outcome.settled && outcome.ok && ops[i]!.mayAnswer?.(outcome.value) === true) late(name, outcome);
    else if (outcome.settled && outcome.ok) problems.push(`${name} answered ${oneLine(show(outcome.value))} after ${Math.round(outcome.ms)} ms, though the store answered nothing: it must reject with ${rule.code}`);
    else if (outcome.settled && codeOf(outcome.error) !== rule.code) problems.push(`${name} rejected with ${describeError(outcome.error)} after ${Math.round(outcome.ms)} ms, expected code ${rule.code}`);
    else late(name, outcome);
  }
  if (closed.settled && !closed.ok && codeOf(closed.error) !== rule.code) problems.push(`${CLOSE} rejected with ${describeError(closed.error)} after ${Math.round(closed.ms)} ms: it must resolve, or reject with ${rule.code}`);
  else late(CLOSE, closed);
  if ([...outcomes, closed].some((o) => !o.settled)) {
    await settleWithin(Promise.allSettled(pending), AFTER_HEAL_WAIT_MS);
  } else {
    // Nothing of the window is left pending: the rejections were observed, so no unhandled one remains.
    await Promise.allSettled(pending);
  }
  const head = `with the store silent ${when} (connections open, nothing answered)`;
  if (problems.length > 0) {
    const also = unjudged.length > 0 ? `\n  and ${unjudged.length} the kit could not judge (its own process stalled):\n  - ${unjudged.join("\n  - ")}` : "";
    throw new ConformanceFailure(`${head}, ${problems.length} of ${ops.length + 1} ${rule.operations} (close included) broke ${rule.rule}'s bound:\n  - ${problems.join("\n  - ")}${also}`);
  }
  if (unjudged.length > 0) {
    throw new CheckInconclusive(`${head}, ${unjudged.length} of ${ops.length + 1} ${rule.operations} (close included) could not be judged against ${rule.rule}'s bound, the kit's own process being stalled (a loaded host, or a subject that blocks the event loop):\n  - ${unjudged.join("\n  - ")}`);
  }
}

/** The raw hooks a silenceable fixture gives (capabilities.silentStore). */
export interface SilenceableRaw<Instance> {
  storeAddress?(): Promise<StoreAddress>;
  openVia?(via: StoreAddress): Promise<Instance>;
}

/**
 * The kit's proxy in front of the fixture's store, and `openVia()` for an instance through it
 * (which must not wait for the store). The proxy is healed before destroy() (which may talk
 * through it) and closed after.
 */
export async function withSilenceProxy<Instance, Fixture extends { raw: SilenceableRaw<Instance>; destroy(): Promise<void> }>(
  create: () => Promise<Fixture>,
  bound: number,
  fn: (fixture: Fixture, proxy: SilenceProxy, openVia: () => Promise<Instance>) => Promise<void>,
): Promise<void> {
  const fixture = await create();
  let proxy: SilenceProxy | undefined;
  try {
    const { storeAddress, openVia } = fixture.raw;
    must(typeof storeAddress === "function" && typeof openVia === "function", "the subject declares silentStore but its fixture lacks raw.storeAddress or raw.openVia");
    const target = await storeAddress.call(fixture.raw);
    proxy = await startSilenceProxy(target);
    const via = proxy.address;
    const limit = bound + silentStoreSlackMs(bound);
    const open = async () => {
      const probe = startStallProbe();
      let outcome: Judged;
      try {
        outcome = await settleResponsive(openVia.call(fixture.raw, via), limit, probe);
      } finally {
        probe.stop();
      }
      if (!outcome.settled && outcome.responsive) throw new ConformanceFailure(`raw.openVia did not return within ${limit} ms: it must not wait for the store (the kit may call it while the store is silent)`);
      if (!outcome.settled) throw new CheckInconclusive(`raw.openVia had not returned after ${Math.round(outcome.waitedMs)} ms, but the kit's own process was stalled for ${Math.round(outcome.stalledMs)} ms of them: it never had ${limit} ms of responsive time to judge it by`);
      if (!outcome.ok) throw outcome.error;
      return outcome.value as Instance;
    };
    await fn(fixture, proxy, open);
  } finally {
    proxy?.heal();
    try {
      await fixture.destroy();
    } finally {
      await proxy?.close();
    }
  }
}

/**
 * One silent-store check, as both levels run it. `after`: an instance opened through the proxy
 * makes the operations' state (its first calls: its connections are open and pooled), then the
 * store goes silent. `before`: the fixture's own instance (`primary`) makes the state, the store
 * goes silent, and an instance is opened through the proxy (connecting never completes). Every
 * operation is judged in the window, then the instance's close() (still silent), then each
 * operation's afterHeal.
 */
export async function runSilentCheck<Instance extends { close(): Promise<unknown> }, Fixture extends { raw: SilenceableRaw<Instance>; destroy(): Promise<void> }>(check: {
  rule: SilentRule;
  bound: number;
  when: "after" | "before";
  create: () => Promise<Fixture>;
  primary: (fixture: Fixture) => Instance;
  prepare: (instance: Instance) => Promise<SilentOperation<Instance, Fixture>[]>;
}): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    let silenced = false;
    try {
      await withSilenceProxy<Instance, Fixture>(check.create, check.bound, async (fixture, proxy, openVia) => {
        let instance: Instance;
        let ops: SilentOperation<Instance, Fixture>[];
        if (check.when === "after") {
          instance = await openVia();
          ops = await check.prepare(instance);
        } else {
          ops = await check.prepare(check.primary(fixture));
        }
        proxy.silence();
        silenced = true;
        if (check.when === "before") instance = await openVia();
        await judgeSilentWindow(check.rule, ops, instance!, proxy, check.bound, check.when === "after" ? "after the instance connected" : "before the instance's first connection");
        for (const op of ops) await op.afterHeal?.(fixture);
      });
      return;
    } catch (error) {
      // The state made before the silence, on an answering store, can outlast a short declared
      // bound on a loaded host: that judges nothing of the window, so the check starts again on a
      // fresh fixture (twice at most). A failure in or after the window is the check's verdict.
      if (silenced || attempt === PREPARE_ATTEMPTS || !isUnavailable(error)) throw error;
    }
  }
}

/** How many times a check's preparation (before the silence) may meet an unavailable store. */
const PREPARE_ATTEMPTS = 3;

function isUnavailable(error: unknown): boolean {
  const code = codeOf(error);
  return code === "ledger_unavailable" || code === "store_unavailable";
}
