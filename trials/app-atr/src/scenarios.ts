// The trial's situations against real processes: the mocks run in this process, each delivery is
// a worker process (dist/worker.js), PostgreSQL sits behind a TCP proxy this script can cut.
// Oracle per conversation: mock-payments' effect log, what each delivery told the user, and what the
// app kept (state/<conversation>.json) must agree.
import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import { once } from "node:events";
import { readFileSync, rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { lastToolResults, lastUserText, say, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import type { Told } from "./app.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = `app_trialatr_${process.pid}`;
const STATE = `state/${process.pid}`;
const only = process.argv[2];

// ---- the scripted model ----
const askOnRerun = new Set<string>(); // references whose loop, run again, asks a question instead
const seen = new Map<string, number>();
const provider = await startMockProvider({
  seed: "trialatr",
  keepAliveTimeoutMs: 65_000,
  script: (request) => {
    const results = lastToolResults(request);
    if (results.length > 0) return turn(say(results.map((r) => (r.isError ? `I could not complete ${r.name}: ${r.content}` : `Done: ${r.name} ${r.content}`)).join("\n")));
    const text = lastUserText(request);
    const two = /pay (\w+) (\d+) and (\w+) (\d+) ref (\S+)/.exec(text);
    if (two) return turn(say("Paying both."), toolUse("send_payment", { payee: two[1], amount: Number(two[2]), currency: "EUR", reference: `${two[5]}-a`, memo: "Invoice" }, { reword: ["memo"] }), toolUse("send_payment", { payee: two[3], amount: Number(two[4]), currency: "EUR", reference: `${two[5]}-b`, memo: "Invoice" }, { reword: ["memo"] }));
    const m = /pay (\w+) (\d+) ref (\S+)/.exec(text);
    if (m) {
      const n = seen.get(m[3]!) ?? 0;
      seen.set(m[3]!, n + 1);
      // a model that sees this reference paid in its request (a tool result, or the app's note in system) does not pay again
      const everything = JSON.stringify({ system: (request as { system?: unknown }).system ?? null, messages: request.messages });
      if (everything.includes("paymentId") && everything.includes(m[3]!)) {
        const id = /pay_[0-9a-f]{8,}/.exec(everything)?.[0];
        return turn(say(`That invoice (${m[3]}) is already paid: ${id}. Nothing more to do.`));
      }
      if (askOnRerun.has(m[3]!) && n >= 1) return turn(say(`Before I pay ${m[1]}: which invoice is it, INV-1 or INV-2?`));
      return turn(toolUse("send_payment", { payee: m[1], amount: Number(m[2]), currency: "EUR", reference: m[3], memo: `Invoice ${m[3]}` }, { reword: ["memo"] }));
    }
    const r = /refund (\S+)/.exec(text);
    if (r) return turn(toolUse("refund_payment", { payment_id: r[1], reason: "customer asked" }));
    return turn(say("How can I help?"));
  },
});
type Plan = NonNullable<Parameters<typeof provider.setFaultPlan>[0]>;
const payments = await startMockPayments({ requireIdempotencyKey: true });

// ---- PostgreSQL through a proxy ----
const pgTarget = new URL(DATABASE_URL);
let pgUp = true;
const sockets = new Set<net.Socket>();
const proxy = net.createServer((client) => {
  if (!pgUp) return client.destroy();
  const server = net.connect(Number(pgTarget.port || 5432), pgTarget.hostname);
  sockets.add(client).add(server);
  const drop = () => { client.destroy(); server.destroy(); sockets.delete(client); sockets.delete(server); };
  client.on("error", drop).on("close", drop);
  server.on("error", drop).on("close", drop);
  client.pipe(server).pipe(client);
});
proxy.listen(0, "127.0.0.1");
await once(proxy, "listening");
const proxyUrl = new URL(DATABASE_URL);
proxyUrl.host = `127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
const pgDown = () => { pgUp = false; for (const s of sockets) s.destroy(); };

// the deploy migrates the ledger's schema once
const adminPool = new pg.Pool({ connectionString: DATABASE_URL });
await createPostgresLedger({ pool: adminPool, schema: SCHEMA, table: "tool_calls" }).migrate();

const baseEnv = { ...process.env, APP_DATABASE_URL: proxyUrl.toString(), APP_SCHEMA: SCHEMA, ANTHROPIC_BASE_URL: provider.baseURL, PAYMENTS_URL: payments.url, APP_STATE_DIR: STATE };
type Reply = Told & { exit: number | null; stderr: string; crashed?: boolean };
function worker(c: string, id: string, text: string, env: Record<string, string> = {}): { child: ChildProcess; reply: Promise<Reply> } {
  const child = spawn(process.execPath, ["dist/worker.js", c, id, text], { env: { ...baseEnv, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "", err = "";
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (err += d));
  const reply = new Promise<Reply>((resolve) => child.on("exit", (code) => {
    try { resolve({ ...(JSON.parse(out.trim().split("\n").pop() ?? "") as Told), exit: code, stderr: err.trim() }); }
    catch { resolve({ status: "failed", text: "", calls: [], unanswered: { listed: false, calls: [] }, attempts: 0, exit: code, stderr: err.trim(), crashed: true }); }
  }));
  return { child, reply };
}
const run = (c: string, id: string, text: string, env: Record<string, string> = {}) => worker(c, id, text, env).reply;

// ---- the oracle ----
const effectsOf = (ref: string) => payments.effects().filter((e) => e.kind === "payment_created" && String((e.payload as { reference?: string }).reference ?? "").startsWith(ref));
// What the app keeps for the model: its messages, and the notes it gives the model (APP_NOTE=system).
function kept(c: string): string {
  try { const s = JSON.parse(readFileSync(`${STATE}/${c}.json`, "utf8")) as { messages: unknown; notes?: unknown }; return JSON.stringify([s.messages, s.notes ?? []]); } catch { return ""; }
}
function told(replies: Reply[]) {
  const keys = new Set<string>(), ids = new Set<string>();
  for (const r of replies) {
    for (const call of r.calls) {
      if (call.key && (call.result !== undefined || (call.effect && call.effect !== "not_happened"))) keys.add(call.key);
      const id = (call.result as { paymentId?: string } | undefined)?.paymentId;
      if (id) ids.add(id);
    }
    for (const u of r.unanswered.calls) {
      if (u.effect !== "not_happened") keys.add(u.key);
      const id = (u.result as { paymentId?: string } | undefined)?.paymentId;
      if (id) ids.add(id);
    }
  }
  return { keys, ids };
}
const lines: string[] = [];
function log(s: string) { console.log(s); lines.push(s); }
function judge(name: string, c: string, replies: Reply[], expected = 1, extra: { ok?: boolean; note?: string } = {}) {
  const effects = effectsOf(c);
  const { keys, ids } = told(replies);
  const history = kept(c);
  const happenedOnce = effects.length === expected;
  const toldTruth = effects.every((e) => keys.has(e.idempotencyKey ?? "")) && [...ids].every((id) => effects.some((e) => e.resourceId === id));
  const keptAgrees = effects.every((e) => history.includes(e.resourceId ?? "\0"));
  const ok = happenedOnce && toldTruth && keptAgrees && (extra.ok ?? true);
  log(`${ok ? "PASS" : "FAIL"} ${name}: payments ${effects.length}/${expected} [${effects.map((e) => `${e.resourceId} key …${(e.idempotencyKey ?? "").slice(-24)}`).join(", ")}]; told the user: ${toldTruth ? "yes" : "NO"}; app's history holds each payment: ${keptAgrees ? "yes" : "NO"}${extra.note ? `; ${extra.note}` : ""}`);
  for (const r of replies) log(`    delivery: ${r.crashed ? `killed/crashed (exit ${r.exit})` : `${r.status} after ${r.attempts} attempt(s)`}; text ${JSON.stringify(r.text.slice(0, 160))}; calls ${JSON.stringify(r.calls.map((x) => ({ tool: x.toolName, replayed: x.replayed, id: (x.result as { paymentId?: string } | undefined)?.paymentId, code: x.code, effect: x.effect })))}; unanswered ${JSON.stringify(r.unanswered.listed ? r.unanswered.calls.map((u) => ({ name: u.name, input: u.input, state: u.state, effect: u.effect, id: (u.result as { paymentId?: string } | undefined)?.paymentId })) : "not listed")}${r.error ? `; error ${r.error.slice(0, 160)}` : ""}`);
  return ok;
}
const isIteration2 = (req: { messages: unknown[] }, ref: string) => JSON.stringify(req.messages).includes(ref) && lastToolResults(req as never).length > 0;
let plan: Plan = () => undefined;
provider.setFaultPlan((req, info) => plan(req, info));

// 1. The stream cut after the payment ran (iteration 2 reset), the app re-runs the whole loop.
async function s1(history: string) {
  const c = `c1${history}`;
  let cut = 0;
  plan = (req, info) => (info.stream && isIteration2(req as never, c) && cut++ === 0 ? { kind: "reset", at: { event: 2 } } : undefined);
  const r = await run(c, "m1", `pay acme 1200 ref ${c}`, { HISTORY: history });
  plan = () => undefined;
  const again = await run(c, "m1", `pay acme 1200 ref ${c}`, { HISTORY: history }); // the queue delivers it again
  judge(`1 cut after the payment, re-run (HISTORY=${history})`, c, [r, again], 1, { ok: r.attempts === 2 && again.status === "answered" });
}
// 2. The worker SIGKILLed after the payment, before the loop finished; redelivered to a new process.
async function s2(history: string) {
  const c = `c2${history}`;
  plan = (req, info) => (info.stream && isIteration2(req as never, c) && info.attempt === 1 ? { kind: "hold", at: { event: 0 } } : undefined);
  const w = worker(c, "m1", `pay acme 1200 ref ${c}`, { HISTORY: history });
  await provider.waitForHold();
  const paidBeforeKill = effectsOf(c).length;
  w.child.kill("SIGKILL");
  const dead = await w.reply;
  for (const h of provider.held) provider.cutNow(h.requestNumber);
  plan = () => undefined;
  const r = await run(c, "m1", `pay acme 1200 ref ${c}`, { HISTORY: history });
  judge(`2 SIGKILL after the payment, redelivered (HISTORY=${history})`, c, [dead, r], 1, { ok: paidBeforeKill === 1 && r.calls.some((x) => x.replayed === true) || r.unanswered.calls.length > 0, note: `paid before the kill: ${paidBeforeKill}` });
}
// 3. The re-run re-words the memo (same key: replayed); and a re-run whose model asks a question
// instead, then the user answers the question in the next message.
async function s3(variant: string, env: Record<string, string>) {
  const c = `c3reword${variant}`;
  let cut = 0;
  plan = (req, info) => (info.stream && isIteration2(req as never, c) && cut++ === 0 ? { kind: "reset", at: { event: 2 } } : undefined);
  const r = await run(c, "m1", `pay acme 1200 ref ${c}`, env);
  plan = () => undefined;
  judge(`3a re-run re-words the memo (${variant})`, c, [r], 1, { ok: r.attempts === 2 });
  const q = `c3ask${variant}`;
  askOnRerun.add(q);
  let cutq = 0;
  plan = (req, info) => (info.stream && isIteration2(req as never, q) && cutq++ === 0 ? { kind: "reset", at: { event: 2 } } : undefined);
  const r1 = await run(q, "m1", `pay acme 1200 ref ${q}`, env);
  plan = () => undefined;
  judge(`3b cut after the payment, re-run (${variant})`, q, [r1], 1, { note: `unanswered listed: ${r1.unanswered.calls.length}` });
  // The user answers the question: a model that has no trace of the payment pays again.
  askOnRerun.delete(q);
  const r2 = await run(q, "m2", `INV-1 please: pay acme 1200 ref ${q}`, env);
  judge(`3c the user answers in the next message (${variant})`, q, [r1, r2], 1);
}
// 4. Two workers running the same user message at once; then two messages of one conversation at once.
async function s4() {
  const c = "c4same";
  const [a, b] = await Promise.all([run(c, "m1", `pay acme 1200 ref ${c}`), run(c, "m1", `pay acme 1200 ref ${c}`)]);
  judge("4a two workers, the same message", c, [a, b], 1, { ok: a.status === "answered" && b.status === "answered" });
  const d = "c4two";
  const [x, y] = await Promise.all([run(d, "m1", `pay acme 1200 ref ${d}-x`), run(d, "m2", `pay bob 700 ref ${d}-y`)]);
  judge("4b two workers, two messages of one conversation", d, [x, y], 2);
}
// 6. The ledger unreachable at the claim; and after the payment, before its result is recorded.
async function s6() {
  const c = "c6claim";
  plan = (req, info) => (info.stream && JSON.stringify((req as { messages: unknown }).messages).includes(c) && info.attempt === 1 ? { kind: "hold", at: { event: 0 } } : undefined);
  const w = worker(c, "m1", `pay acme 1200 ref ${c}`, { APP_WAIT_MS: "2000", APP_LEASE_MS: "3000" });
  await provider.waitForHold();
  pgDown();
  plan = () => undefined;
  provider.release();
  const r = await w.reply;
  pgUp = true;
  const again = await run(c, "m1", `pay acme 1200 ref ${c}`, { APP_WAIT_MS: "2000", APP_LEASE_MS: "3000" });
  judge("6a ledger down at the claim, then the message re-sent", c, [r, again], 1);

  const d = "c6after";
  payments.injectFault({ latencyMs: 600_000 }, { times: 1 });
  const w2 = worker(d, "m1", `pay acme 1200 ref ${d}`, { APP_WAIT_MS: "2000", APP_LEASE_MS: "3000" });
  while (payments.inFlight().length === 0) await sleep(20);
  pgDown();
  payments.releaseLatency();
  const r2 = await w2.reply;
  pgUp = true;
  await sleep(3500); // the claim's lease runs out
  const again2 = await run(d, "m1", `pay acme 1200 ref ${d}`, { APP_WAIT_MS: "2000", APP_LEASE_MS: "3000" });
  judge("6b ledger down after the payment, before its record; then re-sent", d, [r2, again2], 1);
}
// 7. Two payments in one response, the stream of iteration 2 cut; a refund; max_iterations 1.
async function s7() {
  const c = "c7par";
  let cut = 0;
  plan = (req, info) => (info.stream && isIteration2(req as never, c) && cut++ === 0 ? { kind: "reset", at: { event: 2 } } : undefined);
  const r = await run(c, "m1", `pay acme 1200 and bob 300 ref ${c}`);
  plan = () => undefined;
  judge("7a two payments in one response, cut, re-run", c, [r], 2);
  const d = "c7max";
  const m = await run(d, "m1", `pay acme 1200 ref ${d}`, { MAX_ITERATIONS: "1" });
  judge("7b max_iterations: 1 (the loop stops after the payment's tool ran)", d, [m], 1, { note: `text ${JSON.stringify(m.text)}` });
  for (const [e, env] of [["c7failold", { APP_OLD_EXAMPLE: "1" }], ["c7lost", {}]] as const) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const f = await run(e, "m1", `pay acme 1200 ref ${e}`, { ...env, APP_WAIT_MS: "2000", APP_LEASE_MS: "3000" });
  const f2 = await run(e, "m2", `pay acme 1200 ref ${e}`, { ...env, APP_WAIT_MS: "2000", APP_LEASE_MS: "3000" });
  judge(`7c the payment's reply lost (drop_after_accept: the tool throws), then the user asks again in a new message (${"APP_OLD_EXAMPLE" in env ? "README example before the fix" : "README example after the fix: re-run on a retryable call error"})`, e, [f, f2], 1);
  }
}

// 7d. The SDK's own retries: a 529 on iteration 2 (after the payment), which the SDK retries itself.
// 7e. The non-streaming runner (stream: false): iteration 2's connection reset, the loop re-run.
async function s7more() {
  const c = "c7sdkretry";
  let hit = 0;
  plan = (req, info) => (isIteration2(req as never, c) && hit++ === 0 ? { kind: "status", status: 529, retryAfterMs: 10 } : undefined);
  const r = await run(c, "m1", `pay acme 1200 ref ${c}`);
  plan = () => undefined;
  judge("7d a 529 on iteration 2, retried by the SDK itself", c, [r], 1, { ok: r.attempts === 1, note: `loop attempts ${r.attempts}` });
  const d = "c7nostream";
  let cut = 0;
  plan = (req, info) => (!info.stream && isIteration2(req as never, d) && cut++ === 0 ? { kind: "reset", at: { event: 0 } } : undefined);
  const n = await run(d, "m1", `pay acme 1200 ref ${d}`, { APP_STREAM: "false", APP_SDK_RETRIES: "0" });
  plan = () => undefined;
  judge("7e non-streaming runner, iteration 2's connection reset, loop re-run", d, [n], 1, { ok: n.attempts === 2, note: `loop attempts ${n.attempts}` });
}

const all: Record<string, () => Promise<void>> = {
  s1: async () => { await s1("end"); await s1("step"); },
  s2: async () => { await s2("end"); await s2("step"); },
  s3: async () => { await s3("end", { HISTORY: "end" }); await s3("step", { HISTORY: "step" }); await s3("endnote", { HISTORY: "end", APP_NOTE: "system" }); },
  s4, s6, s7, s7more,
};
try {
  for (const [name, fn] of Object.entries(all)) if (!only || only === name) await fn().catch((e: unknown) => log(`FAIL ${name}: threw ${(e as Error).stack}`));
} finally {
  await provider.close();
  await payments.close();
  proxy.close();
  for (const s of sockets) s.destroy();
  if (!process.env.KEEP) { await adminPool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`); rmSync(STATE, { recursive: true, force: true }); }
  await adminPool.end();
}
