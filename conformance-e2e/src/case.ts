import { randomUUID } from "node:crypto";
import { isDispatchOnceError, type ConversationStore, type StoredMessage } from "@dispatch-once/core";
import type { FailedTurnRecord } from "@dispatch-once/runner";
import type { LedgerFixture, LedgerSubject } from "@dispatch-once/conformance/ledger";
import { checkOracle, type OracleViolation } from "./oracle.js";
import { divergedCalls, faultFree, plannedCalls, sendGroups, type MessagePlan, type Scenario } from "./scenario.js";
import {
  CALM_CLAIM_LEASE_MS,
  DIED,
  REASK_REST_SUFFIX,
  REASK_SUFFIX,
  TURN_LEASE_MS,
  contentOf,
  faultSignature,
  faultSlot,
  memoryConversationStore,
  newWorker,
  note,
  programProvider,
  sendScope,
  reaskCalls,
  short,
  type CaseContext,
  type CaseStore,
  type RecordedEvent,
  type SendOutcome,
  type SentMessage,
  type Worker,
  type WorkerFactoryOptions,
  type World,
} from "./world.js";

export interface CaseOptions {
  /** Claim lease in runs where a worker dies; short, so that its claim lapses quickly. Default 100 ms. */
  leaseMs?: number;
  dispatcher?: WorkerFactoryOptions["dispatcher"];
  /** Each worker's runner, altered once built (the kit's tests plant broken stream sides); unchanged by default. */
  runner?: WorkerFactoryOptions["runner"];
  /** One conversation store per conversation, on the case's clock; the reference one by default. */
  conversationStore?: (options: { now: () => number }) => ConversationStore;
  /** Longest a single send() may take before the run is a TURN-10 violation. Default 20 s. */
  sendTimeoutMs?: number;
  /**
   * Whether a message's planned deploy lands (scenario.ts `deploy`, IDENT-10, IDENT-11). The kit's
   * planted-bug tests of other rules replay scenarios found before deploys were drawn and turn it
   * off, so that they run as found (the drawn field is then inert); a certification keeps it on.
   * @default true
   * @example { deploys: false }
   */
  deploys?: boolean;
}

export interface CaseRun {
  violations: OracleViolation[];
  timeline: string[];
  /** What the case exercised, counted (coverage of the random runs). */
  stats: Record<string, number>;
}

/** Attempts whose stream failed after they dispatched a call (caseStats), and 1 when the case had any. */
function failedAfterDispatch(events: RecordedEvent[]): { failed_after_dispatch: number; cases_failed_after_dispatch: number } {
  const dispatched = new Set<string>();
  let failed = 0;
  for (const e of events) {
    const attempt = `${e.worker} ${e.send ?? ""} ${e.conversationId} ${e.turnIndex} ${e.attempt}`;
    if (e.type === "attempt_started") dispatched.delete(attempt);
    else if (e.type === "call_complete") dispatched.add(attempt);
    else if (e.type === "stream_failed" && dispatched.delete(attempt)) failed++;
  }
  return { failed_after_dispatch: failed, cases_failed_after_dispatch: failed > 0 ? 1 : 0 };
}

function caseStats(ctx: CaseContext, elapsedMs: number): Record<string, number> {
  const count = (f: (x: unknown) => boolean, list: unknown[]) => list.filter(f).length;
  const stats: Record<string, number> = {
    cases: 1,
    calm: faultFree(ctx.scenario) ? 1 : 0,
    messages: ctx.messages.length,
    concurrent_messages: count((m) => (m as SentMessage).concurrent, ctx.messages),
    reasks: count((m) => (m as SentMessage).reaskOf !== undefined, ctx.messages),
    // Messages whose tool loop has a later turn with calls, and those where it repeats a first-turn call exactly.
    follow_ups: count((m) => ((m as SentMessage).plan.followUp ?? []).length > 0, ctx.messages),
    // Deaths and unstorable results in a later turn of a tool loop are counted where they apply
    // (world.ts: follow_up_deaths, follow_up_unstorable), re-asks of a loop by where it failed.
    // rerun_faults (world.ts): a downstream fault met by the re-run of a call whose worker died
    // after its effect (scenario.ts rerunFault); planned ones are counted here.
    rerun_faults_planned: count((m) => (m as SentMessage).plan.rerunFault !== undefined && (m as SentMessage).reaskOf === undefined, ctx.messages),
    follow_up_repeats: count((m) => {
      const { calls, followUp = [] } = (m as SentMessage).plan;
      return followUp.some((f) => calls.some((c) => faultSignature(c.tool, c.args) === faultSignature(f.tool, f.args)));
    }, ctx.messages),
    // A payment a re-run of the first turn omits that the model makes again in the next turn (scenario.ts `deferred`).
    deferred_calls: count((m) => (m as SentMessage).plan.deferred !== undefined && (m as SentMessage).reaskOf === undefined, ctx.messages),
    sends: ctx.sends.length,
    attempts: count((e) => (e as { type: string }).type === "attempt_started", ctx.events),
    tool_runs: ctx.runs.length,
    key_reused_422: count((r) => /idempotency_key_reused/.test((r as { downstream?: string }).downstream ?? ""), ctx.runs),
    lost_responses: count((r) => /connection_lost/.test((r as { downstream?: string }).downstream ?? ""), ctx.runs),
    takeovers: count((e) => (e as { type: string; takeover?: boolean }).type === "claimed" && (e as { takeover?: boolean }).takeover === true, ctx.dispatchEvents),
    deaths: count((t) => (t as { what: string }).what.startsWith("DIES"), ctx.timeline),
    turns_failed: count((e) => (e as { type: string }).type === "turn_failed", ctx.events),
    superseded: count((e) => (e as { type: string }).type === "attempt_superseded", ctx.events),
    outcome_unknown: count((e) => /outcome_unknown|is unknown/.test((e as { error?: string }).error ?? ""), ctx.events),
    not_storable: count((e) => /could not be stored|result_not_storable|exceeds|not JSON|bigint/.test((e as { error?: string }).error ?? ""), ctx.events),
    reused_ids: ctx.reuses.length,
    reused_ids_of_answered: count((r) => (r as { before?: StoredMessage }).before?.state === "answered", ctx.reuses),
    reused_ids_of_failed: count((r) => (r as { before?: StoredMessage }).before?.state === "failed", ctx.reuses),
    reused_ids_in_flight: count((r) => ["queued", "in_progress"].includes((r as { before?: StoredMessage }).before?.state ?? ""), ctx.reuses),
    // Attempts whose stream failed after one of their calls was dispatched (its call_complete came
    // first), and whether the case had one: the failed attempt most record rules are about (RECORD-*,
    // TURN-15, TURN-23). On Chat Completions a call is dispatched at the next call's first fragment or
    // at finish_reason, so only a cut between two calls of a response reaches it (README).
    ...failedAfterDispatch(ctx.events),
    elapsed_ms: elapsedMs,
  };
  for (const s of ctx.sends) stats[`send_${s.outcome}`] = (stats[`send_${s.outcome}`] ?? 0) + 1;
  Object.assign(stats, ctx.diagnostics);
  return stats;
}

export async function runCase(world: World, subject: LedgerSubject, scenario: Scenario, options: CaseOptions): Promise<CaseRun> {
  const fixture: LedgerFixture = await subject.create();
  const account = `acct_${randomUUID().slice(0, 12)}`;
  const stores = new Map<string, CaseStore>();
  for (const conversation of scenario.conversations) {
    let skew = 0;
    const store = (options.conversationStore ?? memoryConversationStore)({ now: () => Date.now() + skew });
    stores.set(conversation.id, { store, expireLeases: () => (skew += TURN_LEASE_MS + 1) });
  }
  const ctx: CaseContext = {
    scenario,
    account,
    stores,
    timeline: [],
    messages: [],
    sends: [],
    events: [],
    dispatchEvents: [],
    runs: [],
    liveness: [],
    diagnostics: {},
    pendingDownstream: new Map(),
    pendingDeaths: new Map(),
    pendingUnstorable: new Set(),
    pendingRerun: new Map(),
    rerunFaults: new Map(),
    releaseDeaths: new Set(),
    pendingReleaseRerunDeaths: new Map(),
    releaseRerunDeaths: new Map(),
    effectSeqs: () => new Set(world.payments.effects({ account }).map((e) => e.seq)),
    redeliver: () => Promise.resolve(),
    started: Date.now(),
    sendTimeoutMs: options.sendTimeoutMs ?? 20_000,
    divergedTexts: new Map(),
    reuses: [],
    deployed: new Map(),
    adoptedKeys: new Set(),
    // IDENT-10 binds a dispatcher whose ledger lists rows; over one that does not it warns and
    // dispatches as before (a re-run after a deploy may pay again, IDENT-4's to prevent): no deploy then.
    deploysApply: options.deploys !== false && fixture.ledger.capabilities?.supports?.listRows === true && typeof fixture.ledger.listRows === "function",
    sendsOf: new Map(),
    sending: new Map(),
  };
  let deaths = false;
  for (const conversation of scenario.conversations) {
    for (const message of conversation.messages) {
      // Faults index the first turn's calls, then the follow-up's (step 1 of the tool loop).
      const all = plannedCalls(message);
      const sig = (index: number) => {
        const call = all[index];
        return call === undefined ? undefined : faultSlot(index >= message.calls.length ? 1 : 0, faultSignature(call.tool, call.args));
      };
      for (const [index, fault] of Object.entries(message.downstream)) {
        const s = sig(Number(index));
        if (s !== undefined && fault !== undefined) ctx.pendingDownstream.set(s, fault);
      }
      if (message.death !== undefined) {
        const s = sig(message.death.call);
        if (s !== undefined) ctx.pendingDeaths.set(s, message.death.when);
        if (s !== undefined && message.rerunFault !== undefined) ctx.pendingRerun.set(s, message.rerunFault);
        if (s !== undefined && message.releaseRerunDeath !== undefined) ctx.pendingReleaseRerunDeaths.set(s, message.releaseRerunDeath);
        deaths = true;
      }
      for (const index of message.unstorable) {
        const s = sig(index);
        if (s !== undefined) ctx.pendingUnstorable.add(s);
      }
    }
  }
  programProvider(world, scenario, account, ctx);
  // The client platform the case drew (provider anthropic): its SDK is imported before any worker is built.
  await world.provider.ready?.();
  const platform = world.provider.platform?.();
  if (platform !== undefined) ctx.timeline.push({ at: 0, who: "world", what: `the workers reach the model over ${platform}` });
  let first = true;
  const factory: WorkerFactoryOptions = {
    // The first worker uses the fixture's ledger; every later one a second view of the same namespace.
    ledger: async () => {
      if (first) {
        first = false;
        return fixture.ledger;
      }
      return fixture.reopen();
    },
    // Only a death needs a claim to lapse; otherwise a long lease keeps a slow machine honest.
    leaseMs: deaths ? (options.leaseMs ?? 100) : CALM_CLAIM_LEASE_MS,
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
    ...(options.runner ? { runner: options.runner } : {}),
  };
  const workers: Worker[] = [];
  const background: Promise<void>[] = [];
  const spawn = async (wanted: string, conversationId: string, attempts?: number) => {
    // Names are unique in a case: the oracle tells workers' attempts and runs apart by name.
    let name = wanted;
    for (let n = 2; workers.some((w) => w.name === name); n++) name = `${wanted}#${n}`;
    const worker = await newWorker(world, ctx, name, conversationId, factory, attempts);
    workers.push(worker);
    return worker;
  };
  // A dead worker is replaced, and so is one of the release before its conversation's deploy.
  const stale = (w: Worker) => w.dead || w.release !== ctx.deployed.get(w.conversationId);
  ctx.redeliver = (conversationId, messageId) => {
    const message = ctx.messages.find((m) => m.id === messageId);
    if (message === undefined) return Promise.resolve();
    const delivery = spawn(`${conversationId.replace("conv-", "w")}~`, conversationId).then((w) => {
      note(ctx, w.name, `${conversationId} receives the redelivered ${JSON.stringify(messageId)}`);
      return sendOnce(ctx, w, conversationId, messageId, contentOf(ctx.account, message.text));
    });
    background.push(delivery);
    return delivery;
  };
  try {
    // Conversations run concurrently, as several workers serving several users.
    await Promise.all(
      scenario.conversations.map(async (conversation, n) => {
        let primary: Worker = await spawn(`w${n}`, conversation.id);
        for (const group of sendGroups(conversation)) {
          if (stale(primary)) primary = await spawn(`${primary.name}*`, conversation.id);
          if (group.length === 2) {
            // Two distinct messages close together, from two workers (TURN-9).
            const second = await spawn(`${primary.name}b`, conversation.id);
            const [a, b] = group.map((plan) => register(ctx, conversation.id, plan, true));
            note(ctx, "user", `${conversation.id} sends ${JSON.stringify(a!.text)} and ${JSON.stringify(b!.text)} at once`);
            await Promise.all([sendMessage(ctx, a!, spawn, primary), sendMessage(ctx, b!, spawn, second)]);
            continue;
          }
          const message = register(ctx, conversation.id, group[0]!, false);
          const state = await sendMessage(ctx, message, spawn, primary);
          const plan = group[0]!;
          if (plan.reusedId === true) {
            // Another request under this message's id (TURN-20), once its own sends settled.
            if (primary.dead) primary = await spawn(`${primary.name}*`, conversation.id);
            await reuseId(ctx, message, primary);
          }
          const loop = plan.followUp ?? [];
          // The turns of its tool loop a failed message committed: none (its first turn failed),
          // one (its follow-up failed), or both (only its answer failed: nothing is left to ask for).
          const committed = state === "failed" && loop.length > 0 ? (await ctx.stores.get(conversation.id)!.store.turnsOf(conversation.id, message.id)).length : 0;
          if (state === "failed" && plan.reask && committed < 2) {
            // "That failed, try again": a new message with the same request (TURN-12). A tool
            // loop whose first turn committed failed in its follow-up: the user asks again for
            // the rest, which the new message's first turn makes at the failed turn's index.
            const rest = committed === 1;
            const suffix = rest ? REASK_REST_SUFFIX : REASK_SUFFIX;
            // Asked again whole, the model answers the failed first turn as it answers a re-run
            // (rerunDivergence: a call omitted, two swapped); the rest of a loop it asks as before.
            const first = divergedCalls(plan) ?? plan.calls;
            const reaskPlan: MessagePlan = rest
              ? { ...plan, calls: reaskCalls(loop), route: "automatic_retry" }
              : { ...plan, calls: first, ...(loop.length > 0 ? { followUp: reaskCalls(loop) } : {}), route: "automatic_retry" };
            if (rest) delete reaskPlan.followUp;
            // Its own response is the one the model gives; the re-ask's re-runs repeat it.
            delete reaskPlan.rerunDivergence;
            if (!rest && first !== plan.calls) ctx.diagnostics.divergent_reasks = (ctx.diagnostics.divergent_reasks ?? 0) + 1;
            const reask: SentMessage = {
              conversationId: conversation.id,
              id: `${message.id}${suffix}`,
              text: `${message.text}${suffix}`,
              plan: reaskPlan,
              calls: rest ? reaskCalls(loop) : reaskCalls([...first, ...loop]),
              reaskOf: message.id,
              concurrent: false,
            };
            const stat = rest ? "follow_up_reasks_rest" : "follow_up_reasks_whole";
            if (loop.length > 0) ctx.diagnostics[stat] = (ctx.diagnostics[stat] ?? 0) + 1;
            ctx.messages.push(reask);
            deployIfPlanned(ctx, message);
            if (stale(primary)) primary = await spawn(`${primary.name}*`, conversation.id);
            note(ctx, "user", `${conversation.id} asks again in a new message ${JSON.stringify(reask.id)}`);
            await sendMessage(ctx, reask, spawn, primary);
          }
        }
      }),
    );
    // Redeliveries a stalled worker caused may still be running.
    for (let waited = 0; waited < background.length; ) {
      const n = background.length;
      await Promise.all(background);
      waited = n;
    }
    for (const w of workers) w.retire();
    const violations = await checkOracle(ctx, world.payments.effects({ account }), world.provider.transcript, world.provider.responses());
    return { violations, timeline: renderTimeline(ctx, world, workers.length), stats: { ...caseStats(ctx, Date.now() - ctx.started), ...world.provider.caseStats?.() } };
  } finally {
    for (const w of workers) w.retire();
    // The oracle has read them: a store over a server holds connections until it is closed.
    for (const { store } of stores.values()) await store.close().catch(() => {});
    await fixture.destroy().catch(() => {});
  }
}

/**
 * The deploy a message plans (scenario.ts `deploy`), once it is left unanswered: every worker its
 * conversation starts from now on runs the new release (world.ts DEPLOYED_PAYMENT). Once per
 * conversation: a later deploy of the same kind changes nothing. Not while a live worker of the
 * old release is inside a send of the conversation (IDENT-10: a process of the old release that
 * can still claim for the turn is outside the guard); a later re-send's check lands it then.
 */
function deployIfPlanned(ctx: CaseContext, message: SentMessage): void {
  const kind = message.plan.deploy;
  if (kind === undefined || message.reaskOf !== undefined || ctx.deployed.has(message.conversationId)) return;
  if (!ctx.deploysApply) {
    ctx.diagnostics.deploys_not_applied = (ctx.diagnostics.deploys_not_applied ?? 0) + 1;
    return;
  }
  // IDENT-10's guard holds once no process of the old release can still claim for the turn (its
  // rationale): a live worker of the old release still inside a send (the other message of two
  // sent at once, queued behind this one and then bound at its failed index, TURN-12) would run
  // its calls under the old definition's keys after the new release's re-run paid under the new
  // one's, and pay again. The deploy waits until those sends settle (the next re-send's check).
  const draining = [...ctx.sending.keys()].filter((w) => w.conversationId === message.conversationId && !w.dead && w.release !== kind);
  if (draining.length > 0) {
    ctx.diagnostics.deploys_waiting = (ctx.diagnostics.deploys_waiting ?? 0) + 1;
    note(ctx, "deploy", `${message.conversationId}: the new release waits while ${draining.map((w) => w.name).join(", ")} of the old one ${draining.length === 1 ? "is" : "are"} inside a send`);
    return;
  }
  ctx.deployed.set(message.conversationId, kind);
  ctx.diagnostics.deploys = (ctx.diagnostics.deploys ?? 0) + 1;
  ctx.diagnostics[`deploys_${kind}`] = (ctx.diagnostics[`deploys_${kind}`] ?? 0) + 1;
  note(ctx, "deploy", `${message.conversationId}: a new release (${DEPLOY_WORDS[kind]}) replaces the workers while ${JSON.stringify(message.id)} is unanswered`);
}

const DEPLOY_WORDS: Record<NonNullable<MessagePlan["deploy"]>, string> = {
  identity: "send_payment's identity gains channel, default sepa",
  transform: "send_payment's payee is transformed to an acct: id",
  rename: "send_payment renamed pay, formerNames [send_payment]",
};

function register(ctx: CaseContext, conversationId: string, plan: MessagePlan, concurrent: boolean): SentMessage {
  const message: SentMessage = { conversationId, id: `${conversationId}:${plan.text}`, text: plan.text, plan, calls: plannedCalls(plan), concurrent };
  ctx.messages.push(message);
  return message;
}

const TIMEOUT = Symbol("timeout");

/** One send() by one worker, bounded in time (TURN-10); its outcome is recorded, never thrown. */
/** Numbers each send() for sendScope. */
let sendCount = 0;

async function sendOnce(ctx: CaseContext, w: Worker, conversationId: string, id: string, content: string): Promise<void> {
  const counts = sendsOf(ctx, conversationId, id);
  counts.started++;
  counts.inFlight++;
  try {
    await sendOnceCounted(ctx, w, conversationId, id, content);
  } finally {
    counts.inFlight--;
  }
}

/** How many sends of a message began, and how many are in flight (a reused id's send is judged by whether another overlapped it). */
function sendsOf(ctx: CaseContext, conversationId: string, id: string): { started: number; inFlight: number } {
  const key = `${conversationId}\n${id}`;
  let counts = ctx.sendsOf.get(key);
  if (counts === undefined) ctx.sendsOf.set(key, (counts = { started: 0, inFlight: 0 }));
  return counts;
}

/**
 * One send() by `w` as send number `send`, bounded by the case's send timeout: its result or error,
 * DIED when the worker's process died first, TIMEOUT when it had not settled in time.
 */
async function boundedSend(ctx: CaseContext, w: Worker, send: number, conversationId: string, id: string, content: string) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof TIMEOUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMEOUT), ctx.sendTimeoutMs);
  });
  ctx.sending.set(w, (ctx.sending.get(w) ?? 0) + 1);
  try {
    return await Promise.race([
      sendScope.run(send, () => w.runner.send(conversationId, { id, content })).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      ),
      w.died.catch(() => DIED),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
    const left = (ctx.sending.get(w) ?? 1) - 1;
    if (left > 0) ctx.sending.set(w, left);
    else ctx.sending.delete(w);
  }
}

/** What a send that raised ended as. */
function errorOutcome(error: unknown): SendOutcome {
  return isDispatchOnceError(error, "turn_failed") ? "failed" : isDispatchOnceError(error, "conversation_busy") ? "busy" : "error";
}

async function sendOnceCounted(ctx: CaseContext, w: Worker, conversationId: string, id: string, content: string): Promise<void> {
  const startedAt = Date.now() - ctx.started;
  const settled = await boundedSend(ctx, w, ++sendCount, conversationId, id, content);
  let outcome: SendOutcome;
  const record = { conversationId, messageId: id, worker: w.name, startedAt, endedAt: Date.now() - ctx.started };
  if (settled === TIMEOUT) {
    outcome = "timeout";
    ctx.liveness.push({ rule: "TURN-10", message: `send of ${JSON.stringify(id)} by ${w.name} had not settled after ${ctx.sendTimeoutMs} ms` });
    w.kill(`(stopped by the kit: its send did not settle within ${ctx.sendTimeoutMs} ms)`);
    ctx.sends.push({ ...record, outcome });
  } else if (typeof settled === "symbol") {
    ctx.sends.push({ ...record, outcome: "died" });
    return;
  } else if ("result" in settled) {
    outcome = "answered";
    ctx.sends.push({ ...record, outcome, result: settled.result });
    note(ctx, w.name, `${conversationId} send of ${JSON.stringify(id)} answered (${settled.result.fromStore ? "from the store" : `${settled.result.turns.length} turns`})`);
  } else {
    const { error } = settled;
    outcome = errorOutcome(error);
    ctx.sends.push({ ...record, outcome, error });
    note(ctx, w.name, `${conversationId} send of ${JSON.stringify(id)} ended ${outcome}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/**
 * Text of another request than `text`: the same words with another amount, which the user did not
 * ask for under this message (an id reused for a new message, TURN-20).
 */
export function reusedText(text: string): string {
  return `${text} (a new request under the same id: pay acme 999)`;
}

/**
 * One send() under a stored message's id with other content (TURN-20), bounded in time as
 * sendOnce; the stored message is read just before and after it. Kept in `ctx.reuses`, never
 * in `ctx.sends` (it is not a send of the message).
 */
async function reuseId(ctx: CaseContext, message: SentMessage, w: Worker): Promise<void> {
  const { conversationId, id } = message;
  const { store } = ctx.stores.get(conversationId)!;
  const content = contentOf(ctx.account, reusedText(message.text));
  const counts = sendsOf(ctx, conversationId, id);
  const started = counts.started;
  const alone = counts.inFlight === 0;
  const before = await store.message(conversationId, id);
  note(ctx, "user", `${conversationId} sends another request under the id ${JSON.stringify(id)} (its message is ${before?.state ?? "not stored"})`);
  const startedAt = Date.now() - ctx.started;
  const send = ++sendCount;
  const settled = await boundedSend(ctx, w, send, conversationId, id, content);
  const endedAt = Date.now() - ctx.started;
  const after = await store.message(conversationId, id);
  // No other send of the message ran beside it (a stalled worker's redelivery may): its state is then this send's doing.
  const overlapped = !alone || counts.inFlight > 0 || counts.started !== started;
  const record = { conversationId, messageId: id, worker: w.name, send, content, before, after, overlapped, startedAt, endedAt };
  if (settled === TIMEOUT) {
    w.kill(`(stopped by the kit: its send did not settle within ${ctx.sendTimeoutMs} ms)`);
    ctx.reuses.push({ ...record, outcome: "timeout" });
  } else if (typeof settled === "symbol") {
    ctx.reuses.push({ ...record, outcome: "died" });
  } else if ("result" in settled) {
    ctx.reuses.push({ ...record, outcome: "answered", result: settled.result });
  } else {
    ctx.reuses.push({ ...record, outcome: errorOutcome(settled.error), error: settled.error });
  }
  const last = ctx.reuses[ctx.reuses.length - 1]!;
  const told = last.error instanceof Error ? `: ${last.error.message}` : last.result !== undefined ? ` (${last.result.fromStore ? "from the store" : `${last.result.turns.length} turns`})` : "";
  note(ctx, w.name, `${conversationId} send of ${JSON.stringify(id)} with other content ended ${last.outcome}${told}`);
}

/**
 * Sends one message by its replay route, then behaves like a client (or a queue): re-sends it
 * while it is unanswered and a re-send can help. Returns the message's final state.
 */
async function sendMessage(
  ctx: CaseContext,
  message: SentMessage,
  spawn: (name: string, conversationId: string, attempts?: number) => Promise<Worker>,
  worker: Worker,
): Promise<StoredMessage["state"] | "absent"> {
  const { conversationId, id } = message;
  const content = contentOf(ctx.account, message.text);
  const { store } = ctx.stores.get(conversationId)!;
  let primary = worker;
  const send = (w: Worker) => sendOnce(ctx, w, conversationId, id, content);
  switch (message.plan.route) {
    case "automatic_retry":
      await send(primary);
      break;
    case "client_resend":
      // No automatic retry: the client's own re-send below is the replay route.
      primary = await spawn(`${primary.name}/1`, conversationId, 1);
      await send(primary);
      break;
    case "queue_redelivery":
      await Promise.all([send(primary), spawn(`${primary.name}'`, conversationId).then(send)]);
      break;
    case "double_send":
      await Promise.all([send(primary), new Promise((r) => setTimeout(r, 1)).then(() => send(primary))]);
      break;
  }
  // The client (or the queue) tries again while the message is unanswered: a dead worker's
  // message is redelivered to a fresh one, a failed turn that says a re-send can help is re-sent
  // (TURN-2, TURN-12); a failure that cannot be helped is shown to the user instead. Three
  // re-sends for failures a re-send can help, and one more after every death: a queue redelivers
  // a dead worker's message whatever came before, and a message whose holders all died would
  // otherwise stay in progress with its effects told nowhere (its own re-sends used up by
  // earlier failures; a later send under its id with other content is refused, TURN-20, and
  // resumes nothing). Deaths are planned a few to a message, so this ends.
  for (let resend = 0, budget = 3; resend < Math.min(budget, 10); resend++) {
    const stored = await store.message(conversationId, id);
    if (stored?.state === "answered") return "answered";
    // Left unanswered: a deploy planned for now lands before anything runs the message again.
    deployIfPlanned(ctx, message);
    if (stored?.state === "failed" && (stored.failure as FailedTurnRecord | undefined)?.retryable !== true) return "failed";
    if (primary.dead) {
      budget++;
      primary = await spawn(`${primary.name}+${resend}`, conversationId);
    } else if (primary.release !== ctx.deployed.get(conversationId)) {
      // The client's re-send reaches a process of the new release.
      primary = await spawn(`${primary.name}+${resend}`, conversationId);
    }
    note(ctx, primary.name, `${conversationId} re-sends ${JSON.stringify(id)} (${stored?.state ?? "never stored"})`);
    await send(primary);
  }
  return (await store.message(conversationId, id))?.state ?? "absent";
}

function renderTimeline(ctx: CaseContext, world: World, workers: number): string[] {
  const entries = [...ctx.timeline];
  for (const e of world.payments.effects({ account: ctx.account })) {
    entries.push({
      at: Date.parse(e.at) - ctx.started,
      who: "payments",
      what: `performed ${e.kind} ${e.resourceId} under key ${short(e.idempotencyKey ?? undefined)}`,
    });
  }
  const lines = entries.sort((a, b) => a.at - b.at).map((e) => `t=${String(e.at).padStart(4)}ms ${e.who.padEnd(8)} ${e.what}`);
  lines.push(`(${workers} workers; keys are shown by their first 8 hex digits)`);
  return lines;
}
