// The trial's situations against real processes: the mocks and the web tier run in this process,
// the workers are dist/worker.js processes (killed, paused and resumed at will) that pull BullMQ jobs
// from Redis. Oracle per situation: mock-payments' effect log, against what the PostgreSQL
// conversation store committed and what each HTTP reply told the client. All three must agree.
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import pg from "pg";
import { lastToolResults, lastUserText, say, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createRedisLedger } from "@dispatch-once/ledger-redis";
import type { Effect as PaymentEffect } from "@dispatch-once/mock-payments";
import type { Reply } from "./app.js";
import { startWeb } from "./web.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
// Every schema, queue and Redis key of a run starts with TRIAL_PREFIX (two runs on one machine apart).
const PREFIX = process.env.TRIAL_PREFIX ?? "h_trialqueue";
const SCHEMA = PREFIX;
const QUEUE = `${PREFIX}_messages`;
const BULL_PREFIX = `${PREFIX}_bull`;
const LEDGER_PREFIX = `${PREFIX}:ledger`;
const PLANT = process.env.PLANT;
const only = process.argv.slice(2);

// Claude, scripted: "pay <payee> <amount> ref <reference> [in <currency>]" makes one payment then
// checks the balance in the same response (the payment is dispatched at its content_block_stop,
// well before message_stop); an honest model reads the results before it answers.
const provider = await startMockProvider({
  seed: "trialqueue",
  keepAliveTimeoutMs: 65_000,
  script: (request) => {
    const results = lastToolResults(request);
    if (results.length > 0) return turn(say(results.some((r) => r.isError) ? "The payment did not go through." : "Done: the payment was sent."));
    const pay = /pay (\S+) (\d+) ref (\S+)(?: in (\S+))?/.exec(lastUserText(request));
    if (pay !== null) return turn(
      say("Paying."),
      toolUse("send_payment", { payee: pay[1], amount: Number(pay[2]), currency: pay[4] ?? "EUR", reference: pay[3], memo: "As asked" }, { reword: ["memo"] }),
      toolUse("check_balance", { currency: "EUR" }),
    );
    return turn(say("Hello! Ask me to pay someone."));
  },
});
// A situation can act at the moment the payments API accepts a payment (before its response is sent).
let onPayment: ((effect: PaymentEffect) => void) | undefined;
const payments = await startMockPayments({ requireIdempotencyKey: true, keepAliveTimeoutMs: 65_000, onEffect: (e) => onPayment?.(e) });
const web = await startWeb({ redisUrl: REDIS_URL, queue: QUEUE, prefix: BULL_PREFIX, waitMs: 45_000, ...(PLANT ? { plant: PLANT } : {}) });

// --- worker processes ----------------------------------------------------------------------------
interface W { child: ChildProcess; log: () => string; kill(sig?: NodeJS.Signals): Promise<void> }
const workers = new Set<W>();
async function startWorker(extra: Record<string, string> = {}): Promise<W> {
  const child = spawn(process.execPath, ["dist/worker.js"], {
    env: { ...process.env, ...extra, APP_SCHEMA: SCHEMA, QUEUE, BULL_PREFIX, LEDGER_PREFIX, PROVIDER_URL: provider.baseURL, PAYMENTS_URL: payments.url, REDIS_URL, DATABASE_URL },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => { err += d; if (process.env.VERBOSE) process.stderr.write(d); });
  await new Promise<void>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d) => { out += d; if (out.includes("ready")) resolve(); });
    child.on("exit", (code) => reject(new Error(`worker exited ${code}: ${err}`)));
  });
  const w: W = {
    child, log: () => err,
    async kill(sig = "SIGKILL") { if (child.exitCode === null && child.signalCode === null) { child.kill(sig); await once(child, "exit"); } workers.delete(w); },
  };
  workers.add(w);
  return w;
}
async function stopAll() {
  for (const w of [...workers]) {
    if (w.child.signalCode === null && w.child.exitCode === null) w.child.kill("SIGCONT");
    // A worker whose job waits on a held model stream (a situation that ended in an error) never
    // finishes closing: SIGKILL it after 10 s.
    const stuck = setTimeout(() => w.child.kill("SIGKILL"), 10_000);
    await w.kill("SIGTERM");
    clearTimeout(stuck);
  }
}

type Told = Reply & { http: number; receivedAt: number };
async function send(c: string, id: string, text: string): Promise<Told> {
  const res = await fetch(`${web.url}/conversations/${encodeURIComponent(c)}/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ id, text }), signal: AbortSignal.timeout(60_000) });
  return { ...((await res.json()) as Reply), http: res.status, receivedAt: Date.now() };
}

// --- the oracle ----------------------------------------------------------------------------------
const readStore = new PostgresConversationStore({ connectionString: DATABASE_URL, schema: SCHEMA });
async function committed(c: string): Promise<{ paymentIds: string[]; errors: string[]; turns: number }> {
  const log = (await readStore.log(c).catch(() => [])).flat() as { role?: string; content?: unknown }[];
  // A turn starts with the user's own message (text, not tool results).
  const turns = log.filter((m) => m.role === "user" && (typeof m.content === "string" || (Array.isArray(m.content) && !m.content.some((b: { type?: string }) => b.type === "tool_result"))));
  const blocks = log.filter((m) => m.role === "user" && Array.isArray(m.content)).flatMap((m) => m.content as { type?: string; content?: unknown; is_error?: boolean }[]).filter((b) => b.type === "tool_result");
  const text = (b: { content?: unknown }) => (typeof b.content === "string" ? b.content : JSON.stringify(b.content));
  return { paymentIds: blocks.filter((b) => !b.is_error).flatMap((b) => [...text(b).matchAll(/"paymentId":"([^"]+)"/g)].map((m) => m[1]!)), errors: blocks.filter((b) => b.is_error).map(text), turns: turns.length };
}
/** Keys the client was told had (or may have) taken effect, and payment ids it was shown. */
function told(replies: Reply[]) {
  const keys = new Set<string>();
  const ids = new Set<string>();
  // A busy reply's "may have happened" is a possibility, not a claim: it counts as told, never as false.
  const possibly = new Set<string>();
  for (const r of replies) {
    if (r.status === "answered") {
      for (const c of r.calls) { if (c.key && c.error === undefined && c.name === "send_payment") keys.add(c.key); const id = (c.result as { paymentId?: string } | undefined)?.paymentId; if (id) ids.add(id); }
      for (const e of r.untold) if (e.effect !== "not_happened" && e.name === "send_payment") keys.add(e.key);
    }
    if (r.status === "failed" || r.status === "unsaved") for (const e of r.effects) if (e.name === "send_payment" && e.effect !== "not_happened") keys.add(e.key);
    if (r.status === "busy") for (const c of r.calls ?? []) if (c.name === "send_payment") { if (c.told === "happened") { keys.add(c.key); if (c.paymentId) ids.add(c.paymentId); } else if (c.told === "may_have_happened") possibly.add(c.key); }
  }
  return { keys, ids, possibly };
}
const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
/**
 * What busy replies told, against the payments log (TURN-25): every payment told "happened" is in the
 * log under its key with the payment id and the arguments it was told with; none told "did not go
 * through" is in the log; every payment the log holds from before the reply reached the client is in
 * the reply (a reply that could not list its calls, `effectsUnknown`, mentions none).
 */
function busyChecks(replies: Told[], effects: PaymentEffect[]): Record<string, boolean> {
  const busy = replies.filter((r): r is Told & Extract<Reply, { status: "busy" }> => r.status === "busy" && r.inProgress);
  if (busy.length === 0) return {};
  const calls = busy.flatMap((r) => (r.calls ?? []).filter((c) => c.name === "send_payment"));
  return {
    busyHappenedTrue: calls.filter((c) => c.told === "happened").every((c) => effects.some((e) => e.idempotencyKey === c.key && e.resourceId === c.paymentId && typeof c.input === "object" && c.input !== null && Object.entries(c.input).every(([k, v]) => same(e.payload[k], v)))),
    busyNotHappenedTrue: calls.filter((c) => c.told === "did_not_happen").every((c) => !effects.some((e) => e.idempotencyKey === c.key)),
    busyToldEveryEarlierPayment: busy.every((r) => effects.filter((e) => Date.parse(e.at) <= r.receivedAt).every((e) => (r.calls ?? []).some((c) => c.key === e.idempotencyKey && c.told !== "did_not_happen"))),
  };
}
/**
 * What a reply's text tells the client of one message (judged on the words, not the app's fields):
 * a line naming a payment of another message (its reference in `earlier`) tells it as that earlier
 * message's ("from your earlier message <id>, which failed: ..."), and no line tells it as this
 * message's; a line naming this message's own payment (`own`) does not call it an earlier one's; the
 * own payment is told on a line (`ownLine`; an answer tells it in its calls instead).
 */
function toldOwnPaymentsOnly(text: string, own: string, earlier: Record<string, string>, ownLine = true): boolean {
  const lines = text.split("\n");
  const ref = (l: string) => /"reference":"([^"]+)"/.exec(l)?.[1];
  const ownTold = lines.some((l) => ref(l) === own && !/earlier message/.test(l));
  return (ownTold || !ownLine) && lines.every((l) => {
    const r = ref(l);
    if (r === undefined || r === own) return !/earlier message/.test(l);
    return earlier[r] !== undefined && l.startsWith(`from your earlier message ${earlier[r]}, which failed: `);
  });
}
const results: { situation: string; ok: boolean; detail: unknown }[] = [];
/** `expect` payments whose reference starts with `ref`; each committed once in `c`; each told; nothing told that did not happen. */
async function judge(situation: string, c: string, ref: string, replies: Told[], opts: { expect?: number; committed?: number; extra?: Record<string, boolean> } = {}) {
  const expect = opts.expect ?? 1;
  const effects = payments.effects().filter((e) => String((e.payload as { reference?: string }).reference ?? "").startsWith(ref));
  const store = await committed(c);
  const { keys, ids, possibly } = told(replies);
  const effectKeys = effects.map((e) => e.idempotencyKey!);
  const checks = {
    payments: effects.length === expect,
    committedEachOnce: store.paymentIds.length === (opts.committed ?? expect) && store.paymentIds.every((id) => effects.some((e) => e.resourceId === id)),
    everyEffectTold: effectKeys.every((k) => keys.has(k) || possibly.has(k)) && effects.every((e) => ids.size === 0 || ids.has(e.resourceId) || keys.has(e.idempotencyKey!)),
    nothingFalseTold: [...keys].every((k) => effectKeys.includes(k)) && replies.every((r) => !(r.status === "answered" && effects.length > 0 && /did not go through/.test(r.text) && r.untold.length === 0 && r.calls.every((c) => c.error !== undefined))),
    ...busyChecks(replies, effects),
    ...(opts.extra ?? {}),
  };
  const ok = Object.values(checks).every(Boolean);
  results.push({ situation, ok, detail: { checks, payments: effects.map((e) => `${e.resourceId} key=${e.idempotencyKey}`), committed: store, replies: replies.map((r) => ({ status: r.status, text: r.text, ...(r.status === "answered" ? { fromStore: r.fromStore } : {}) })) } });
  console.log(`${ok ? "PASS" : "FAIL"} ${situation} ${JSON.stringify(checks)}`);
  if (!ok || process.env.VERBOSE) console.log(JSON.stringify(results.at(-1)!.detail, null, 1));
}
// The ledger as the workers see it, read only to stage a situation (a row completed before a pause).
const ledger = await createRedisLedger({ url: REDIS_URL, prefix: LEDGER_PREFIX });
async function waitForRow(c: string, state: string, count = 1) {
  for (let i = 0; i < 400; i++) { if ((await ledger.listRows!({ conversationId: c })).rows.filter((r) => r.toolName === "send_payment" && r.state === state).length >= count) return; await sleep(25); }
  throw new Error(`no ${state} send_payment row in ${c}`);
}
async function waitForCommit(c: string) {
  for (let i = 0; i < 600; i++) { if ((await committed(c)).paymentIds.length > 0) return; await sleep(50); }
  throw new Error(`nothing committed in ${c}`);
}
const busyText = (r: Told) => (r.status === "busy" ? r.text : `(${r.status}) ${r.text}`);
async function waitForPayment(ref: string) {
  for (let i = 0; i < 400; i++) { if (payments.effects().some((e) => String((e.payload as { reference?: string }).reference ?? "").startsWith(ref))) return; await sleep(25); }
  throw new Error(`no payment ${ref}`);
}

const situations: Record<string, () => Promise<void>> = {
  async s1_cut() {
    const [a, b] = [await startWorker(), await startWorker()];
    provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
    const r = await send("c1", "m1", "pay acme 1000 ref s1");
    await judge("1 stream cut after the payment, before message_stop", "c1", "s1", [r]);
    await a.kill("SIGTERM"); await b.kill("SIGTERM");
  },
  async s2_sigkill() {
    const a = await startWorker();
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const pending = send("c2", "m2", "pay acme 2000 ref s2");
    await waitForPayment("s2"); await provider.waitForHold();
    const b = await startWorker();
    const t0 = Date.now();
    await a.kill("SIGKILL");
    try { provider.cutNow(); } catch { /* the dead worker's socket closed; the hold ended with it */ }
    const r = await pending;
    console.log(`  s2: answered ${Date.now() - t0} ms after SIGKILL; b's log: ${b.log().trim().split("\n").join(" | ")}`);
    await judge("2 SIGKILL after the payment, stalled job redelivered", "c2", "s2", [r]);
    await b.kill("SIGTERM");
  },
  async s2b_lease_outlives_lock() {
    // The turn lease (30 s) outlives BullMQ's lock (2 s) and the runner's busy wait (1.5 s): the
    // redelivered job meets a conversation still held by the dead worker.
    const slow = { TURN_LEASE_MS: "30000", BUSY_WAIT_MS: "1500" };
    const a = await startWorker(slow);
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const pending = send("c2b", "m2b", "pay acme 2500 ref s2b");
    await waitForPayment("s2b"); await provider.waitForHold();
    const b = await startWorker(slow);
    await a.kill("SIGKILL");
    try { provider.cutNow(); } catch { /* closed with the process */ }
    const r = await pending;
    console.log(`  s2b: first reply ${JSON.stringify(r.text)}; b's log: ${b.log().trim().split("\n").filter((l) => / job /.test(l)).join(" | ")}`);
    await sleep(31_000); // the dead worker's turn lease runs out; the client re-sends the same message id
    const again = await send("c2b", "m2b", "pay acme 2500 ref s2b");
    console.log(`  s2b: told first: ${JSON.stringify(busyText(r))}`);
    await judge("2b turn lease outlives BullMQ's lock (attempts exhausted), then a re-send", "c2b", "s2b", [r, again], { extra: { firstReplyHonest: r.status === "busy" && r.inProgress } });
    await b.kill("SIGTERM");
  },
  async s2c_killed_at_acceptance() {
    // As 2b, but the worker dies the moment the payments API accepts the payment, before its response
    // arrives: the ledger's row stays in flight; the busy reply must say the payment may have happened.
    const slow = { TURN_LEASE_MS: "30000", BUSY_WAIT_MS: "1500" };
    const a = await startWorker(slow);
    onPayment = (e) => { if (String(e.payload.reference).startsWith("s2c")) { a.child.kill("SIGKILL"); onPayment = undefined; } };
    const pending = send("c2c", "m2c", "pay acme 2600 ref s2c");
    await waitForPayment("s2c");
    const b = await startWorker(slow);
    const r = await pending;
    console.log(`  s2c: told first: ${JSON.stringify(busyText(r))}`);
    await sleep(31_000); // the dead worker's turn lease runs out; the client re-sends the same message id
    const again = await send("c2c", "m2c", "pay acme 2600 ref s2c");
    const underWay = r.status === "busy" && (r.calls ?? []).some((c) => c.name === "send_payment" && c.told === "may_have_happened" && c.state === "in_flight");
    await judge("2c the worker killed as the payments API accepts (row in flight), lease outlives the busy wait, then a re-send", "c2c", "s2c", [r, again], { extra: { firstReplyUnderWay: underWay } });
    await a.kill(); await b.kill("SIGTERM");
  },
  async s3_sigstop() {

    const a = await startWorker();
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const pending = send("c3", "m3", "pay acme 3000 ref s3");
    await waitForPayment("s3"); await provider.waitForHold();
    a.child.kill("SIGSTOP");
    provider.release(); // the rest of the stream waits in the paused worker's socket
    const b = await startWorker();
    const r = await pending;
    a.child.kill("SIGCONT");
    await sleep(6000); // the first worker finishes its stale copy of the turn
    console.log(`  s3: a's log: ${a.log().trim().split("\n").join(" | ")}`);
    console.log(`  s3: b's log: ${b.log().trim().split("\n").join(" | ")}`);
    const again = await send("c3", "m3", "pay acme 3000 ref s3"); // the client re-sends: the stored answer
    await judge("3 SIGSTOP past the lock: two workers on one message, then SIGCONT", "c3", "s3", [r, again], { extra: { resendFromStore: again.status === "answered" && again.fromStore } });
    await a.kill("SIGTERM"); await b.kill("SIGTERM");
  },
  async s3b_sigstop_busy() {
    // The holder is paused after its payment completed in the ledger, before it commits, for longer
    // than the busy wait (turn lease 30 s > busy wait 1.5 s): every BullMQ attempt on the second
    // worker is busy, and the client's reply must name the payment that happened. Then SIGCONT: the
    // holder commits; the client's re-send is answered from the store.
    const slow = { TURN_LEASE_MS: "30000", BUSY_WAIT_MS: "1500" };
    const a = await startWorker(slow);
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const pending = send("c3b", "m3b", "pay acme 3500 ref s3b");
    await waitForPayment("s3b"); await provider.waitForHold(); await waitForRow("c3b", "completed");
    a.child.kill("SIGSTOP");
    provider.release();
    const b = await startWorker(slow);
    const r = await pending;
    console.log(`  s3b: told first: ${JSON.stringify(busyText(r))}`);
    a.child.kill("SIGCONT");
    await waitForCommit("c3b");
    const again = await send("c3b", "m3b", "pay acme 3500 ref s3b");
    const happened = r.status === "busy" && (r.calls ?? []).some((c) => c.name === "send_payment" && c.told === "happened" && c.paymentId !== undefined);
    await judge("3b SIGSTOP after the payment completed, past the busy wait: busy names the payment, then SIGCONT and a re-send", "c3b", "s3b", [r, again], { extra: { firstReplyHappened: happened, resendFromStore: again.status === "answered" && again.fromStore } });
    await a.kill("SIGTERM"); await b.kill("SIGTERM");
  },
  async s8_busy_after_failed_message() {
    // Message A fails for good (every stream attempt of all 3 job attempts cut after its payment): the
    // client is told A's payment happened and the turn failed. The client then sends a NEW message B;
    // B takes A's turn index (TURN-12). B's holder pays, is paused past the busy wait, and B's busy
    // reply is judged: does it tell B's client only B's payment?
    const slow = { TURN_LEASE_MS: "30000", BUSY_WAIT_MS: "1500" };
    const a = await startWorker(slow);
    provider.setFaultRules([{ bodyContains: "ref s8a", times: 6, fault: { kind: "reset", at: { afterToolUseStop: 0 } } }]);
    const rA = await send("c8", "m8a", "pay acme 8100 ref s8a");
    provider.setFaultRules([]);
    provider.faults.enqueue({ kind: "hold", at: { afterToolUseStop: 0 } });
    const pending = send("c8", "m8b", "pay bolt 8200 ref s8b");
    await waitForPayment("s8b"); await provider.waitForHold(); await waitForRow("c8", "completed", 2);
    a.child.kill("SIGSTOP");
    provider.release();
    const b = await startWorker(slow);
    const rB = await pending;
    console.log(`  s8: A told: ${JSON.stringify(rA.text)}`);
    console.log(`  s8: B's busy reply: ${JSON.stringify(busyText(rB))}`);
    a.child.kill("SIGCONT");
    await waitForCommit("c8");
    const againB = await send("c8", "m8b", "pay bolt 8200 ref s8b");
    console.log(`  s8: B's re-send told: ${JSON.stringify(againB.text)}`);
    await judge("8 a new message after a failed one (same turn index), its holder paused past the busy wait", "c8", "s8", [rA, rB, againB], {
      expect: 2, committed: 1,
      extra: {
        aFailedToldHappened: rA.status === "failed" && rA.effects.some((e) => e.effect === "happened"),
        busyToldOwnPaymentsOnly: rB.status === "busy" && toldOwnPaymentsOnly(rB.text, "s8b", { s8a: "m8a" }),
        answerToldOwnPaymentsOnly: againB.status === "answered" && toldOwnPaymentsOnly(againB.text, "s8b", { s8a: "m8a" }, false),
      },
    });
    await a.kill("SIGTERM"); await b.kill("SIGTERM");
  },
  async s4_attempts() {
    const a = await startWorker();
    // Every stream attempt of the runner (2) is cut after the payment: the first job attempt's turn fails.
    provider.setFaultRules([{ bodyContains: "ref s4", times: 2, fault: { kind: "reset", at: { afterToolUseStop: 0 } } }]);
    const r = await send("c4", "m4", "pay acme 4000 ref s4");
    provider.setFaultRules([]);
    console.log(`  s4: ${a.log().trim().split("\n").filter((l) => / job /.test(l)).join(" | ")}`);
    await judge("4 attempts: 3 after a failure after the payment", "c4", "s4", [r]);
    await a.kill("SIGTERM");
  },
  async s5_late_resend() {
    const a = await startWorker();
    const r1 = await send("c5", "m5", "pay acme 5000 ref s5");
    const removed = (await web.job(PLANT === "randomjobid" ? "none" : "c5.m5")) === undefined;
    const r2 = await send("c5", "m5", "pay acme 5000 ref s5");
    await judge("5 late re-send after the job was removed", "c5", "s5", [r1, r2], { extra: { jobRemoved: removed, resendFromStore: r2.status === "answered" && r2.fromStore } });
    await a.kill("SIGTERM");
  },
  async s6_two_messages() {
    const [a, b] = [await startWorker(), await startWorker()];
    const [r1, r2] = await Promise.all([send("c6", "m6a", "pay acme 6100 ref s6a"), send("c6", "m6b", "pay bolt 6200 ref s6b")]);
    const store = await committed("c6");
    // Each reply tells its own message's payment (not the other message's turn).
    const payee = (r: Reply) => (r.status === "answered" ? r.calls.filter((c) => c.name === "send_payment").map((c) => (c.result as { payee?: string } | undefined)?.payee).join() : "");
    await judge("6 two messages of one conversation, two workers", "c6", "s6", [r1, r2], { expect: 2, extra: { twoTurnsCommitted: store.turns === 2, eachReplyItsOwn: payee(r1) === "acme" && payee(r2) === "bolt" } });
    await a.kill("SIGTERM"); await b.kill("SIGTERM");
  },
  async s7_lost_response() {
    const a = await startWorker();
    payments.injectFault({ outcome: "drop_after_accept", operations: ["create_payment"] });
    const r = await send("c7", "m7", "pay acme 7000 ref s7");
    await judge("7a payments API's lost response", "c7", "s7", [r]);
    await a.kill("SIGTERM");
  },
  async s7_refusal() {
    const a = await startWorker();
    const r = await send("c7r", "m7r", "pay acme 7100 ref s7r in EUX"); // EUX: a 400 from the payments API
    await judge("7b a refusal (4xx)", "c7r", "s7r", [r], { expect: 0, committed: 0, extra: { toldRefused: /did not go through/.test(r.text) } });
    await a.kill("SIGTERM");
  },
};

// Clean state: the schema, the ledger's keys, the queue's keys.
const redis = new Redis(REDIS_URL);
async function clean() {
  const pool = new pg.Pool({ connectionString: DATABASE_URL });
  await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  await pool.end();
  for (const pattern of [`${LEDGER_PREFIX}*`, `${BULL_PREFIX}*`, `${PREFIX}*`]) {
    const keys = await redis.keys(pattern);
    if (keys.length > 0) await redis.del(...keys);
  }
}
await clean();
await readStore.migrate();
try {
  for (const [name, run] of Object.entries(situations)) {
    if (only.length > 0 && !only.some((o) => name.startsWith(o))) continue;
    try { await run(); } catch (error) { results.push({ situation: name, ok: false, detail: String((error as Error).stack) }); console.log(`ERROR ${name}: ${(error as Error).stack}`); }
    await stopAll();
  }
} finally {
  await stopAll();
  await web.close();
  await readStore.close();
  await ledger.close();
  if (!process.env.KEEP) await clean();
  redis.disconnect();
  await provider.close();
  await payments.close();
}
console.log(`${results.filter((r) => r.ok).length}/${results.length} situations pass${PLANT ? ` (PLANT=${PLANT})` : ""}`);
process.exit(0);
