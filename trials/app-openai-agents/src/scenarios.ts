// The trial's situations against real processes: mock-payments and mock-openai over loopback HTTP, PostgreSQL
// for the ledger and the app's thread table, child processes for the SIGKILL and the approvals. Each situation is
// judged by mock-payments' effect log AND what the app committed (payment ids in the function_call_result items
// of the thread's stored history) AND what the user was told. PLANT=... checks the oracle (plants.txt).
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockOpenAI } from "@dispatch-once/mock-openai";
import type { AgentInputItem } from "@openai/agents";
import { openApp, type Plant, type Told } from "./app.js";
import { ACCOUNT } from "./tools.js";
import { readFirst, script } from "./model-script.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = process.env.TRIAL_SCHEMA ?? "h_agents";
const PLANT = (process.env.PLANT ?? "none") as Plant;
const only = process.argv[2]?.split(",");

async function dropSchemas() {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE; DROP SCHEMA IF EXISTS ${SCHEMA}_app CASCADE`);
  await admin.end();
}
await dropSchemas();

// onEffect runs inside the payment's transaction, before the response is written: a SIGKILL sent from it
// lands after the payment and before the app can read the reply, record it in the ledger or commit.
let onPayment: ((reference: string) => void) | undefined;
const payments = await startMockPayments({ requireIdempotencyKey: true, onEffect: (e) => onPayment?.(String((e.payload as { reference?: unknown }).reference)) });
const model = await startMockOpenAI({ seed: "agents-trial", script, keepAliveTimeoutMs: 65_000 });
const common = { databaseUrl: DATABASE_URL, schema: SCHEMA, paymentsUrl: payments.url, modelUrl: model.baseURL, plant: PLANT, leaseMs: 3_000, waitMs: 8_000 };
const app = await openApp(common);

interface Judged { name: string; pass: boolean }
const verdicts: Judged[] = [];
const thread = (name: string) => `${name}-${PLANT}`;
const effectsOf = (reference: string) =>
  payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => (e.payload as { reference?: string }).reference === reference);

/** Payment ids in the function_call_result items of the thread's committed history. */
function committedPayments(history: AgentInputItem[], reference?: string): string[] {
  const calls = new Map<string, string>();
  for (const item of history) if (item.type === "function_call") calls.set(item.callId, item.arguments);
  const ids: string[] = [];
  for (const item of history) {
    if (item.type !== "function_call_result") continue;
    if (reference !== undefined && !(calls.get(item.callId) ?? "").includes(reference)) continue;
    const id = /pay_[0-9a-f]+/.exec(JSON.stringify(item.output))?.[0];
    if (id) ids.push(id);
  }
  return ids;
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...new Set(a)].length === a.length && a.every((x) => b.includes(x));

async function judge(name: string, reference: string, expected: number, told: Told[], threadId: string, extra: string[] = [], extraChecks: Array<[string, boolean]> = []) {
  const effectIds = effectsOf(reference).map((e) => e.resourceId);
  const committed = committedPayments(await app.committed(threadId), reference);
  const toldHappened = told.filter((t) => t.status === "happened").map((t) => t.paymentId ?? "?");
  const toldNot = told.filter((t) => t.status === "did_not_happen");
  const checks: Array<[string, boolean]> = [
    [`effect log: ${effectIds.length} payment(s) for ${reference} (expected ${expected}) ${JSON.stringify(effectIds)}`, effectIds.length === expected],
    [`app committed ${JSON.stringify(committed)}`, sameSet(committed, effectIds)],
    [`told happened ${JSON.stringify(toldHappened)}; did not: ${toldNot.length}; may have: ${told.filter((t) => t.status === "may_have_happened").length}`,
      sameSet(toldHappened, effectIds) && (expected > 0 || toldNot.length > 0 || told.some((t) => t.status === "may_have_happened"))],
    ...extraChecks,
  ];
  report(name, checks, [...extra, ...told.map((t) => `user told: ${t.status}: ${t.text}`)]);
}

function report(name: string, checks: Array<[string, boolean]>, lines: string[]) {
  const pass = checks.every(([, ok]) => ok);
  verdicts.push({ name, pass });
  console.log(`${pass ? "PASS" : "FAIL"} ${name}\n${[...checks.map(([t, ok]) => `  ${ok ? "ok  " : "FAIL"} ${t}`), ...lines.map((l) => `       ${l}`)].join("\n")}`);
}

const outcomes = (reference: string) => model.requests.filter((q) => JSON.stringify(q.body).includes(reference)).map((q) => q.outcome).join(", ");
const memos = (reference: string) =>
  model.requests.filter((q) => JSON.stringify(q.body).includes(reference)).flatMap((q) => q.calls.map((c) => String(c.arguments.memo ?? "")));
/** The request that asks for the payment (its input ends with the user's message, not a tool output). */
const paying = (request: { input: unknown }, reference: string) => {
  const input = Array.isArray(request.input) ? (request.input as Array<{ type?: string }>) : [];
  return JSON.stringify(request).includes(reference) && input[input.length - 1]?.type !== "function_call_output";
};
const run = (name: string) => only === undefined || only.some((o) => name.split(" ")[0] === o);
/** A fault plan for requests whose body mentions `reference` and whose input ends with a tool output (the answer after the payment). */
const afterPayment = (reference: string, times: number, fault: Parameters<typeof model.setFaultPlan>[0] extends infer P ? (P extends (...a: never[]) => infer F ? F : never) : never) => {
  let left = times;
  model.setFaultPlan((request) => {
    const input = Array.isArray(request.input) ? request.input : [];
    if (left <= 0 || !JSON.stringify(request).includes(reference) || input[input.length - 1]?.type !== "function_call_output") return undefined;
    left -= 1;
    return fault;
  });
};

function worker(env: Record<string, string>, onSpawn?: (pid: number) => void): Promise<{ code: number | null; signal: string | null; out: string; err: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [fileURLToPath(new URL("./worker.js", import.meta.url))], {
      env: { ...process.env, DATABASE_URL, TRIAL_SCHEMA: SCHEMA, PAYMENTS_URL: payments.url, MODEL_URL: model.baseURL, PLANT, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    onSpawn?.(child.pid ?? 0);
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("exit", (code, signal) => resolve({ code, signal, out, err }));
  });
}
const toldOf = (out: string): Told[] => (out.trim() ? (JSON.parse(out.trim().split("\n").pop()!) as { told: Told[] }).told : []);

// 1a. The chapter's window on the Responses side: the paying response's stream is cut after its call's
// arguments are complete (output_item.done), before response.completed. The SDK runs no call of it; the run
// throws; the app runs the message again.
if (run("1a")) {
  model.setFaultPlan((request, info) => (paying(request, "R1a") && info.attempt === 1 ? { kind: "reset", at: { beforeCompleted: true } } : undefined));
  const id = thread("s1a");
  const r = await app.send(id, "m1a", "pay acme 1000 R1a");
  model.setFaultPlan(undefined);
  await judge("1a paying response cut after the call's arguments, before response.completed; the app re-runs the message", "R1a", 1, r.told, id, [`model requests: ${outcomes("R1a")}; runs: ${r.attempts}`]);
}

// 1b. The same with a clean close (the body ends without response.completed: the SDK raises "Model did not
// produce a final response!").
if (run("1b")) {
  model.setFaultPlan((request, info) => (paying(request, "R1b") && info.attempt === 1 ? { kind: "clean_close", at: { beforeCompleted: true } } : undefined));
  const id = thread("s1b");
  const r = await app.send(id, "m1b", "pay acme 1100 R1b");
  model.setFaultPlan(undefined);
  await judge("1b paying response closed cleanly before response.completed; the app re-runs the message", "R1b", 1, r.told, id, [`model requests: ${outcomes("R1b")}; runs: ${r.attempts}`]);
}

// 1c. The incident as the SDK meets it: the payment ran, the NEXT response (the answer after the tool output)
// is cut; the app runs the message again, the model re-emits the call under a new call id.
if (run("1c")) {
  afterPayment("R1c", 1, { kind: "reset", at: { event: 4 } });
  const id = thread("s1c");
  const r = await app.send(id, "m1c", "pay acme 1200 R1c");
  model.setFaultPlan(undefined);
  await judge("1c the response after the payment is cut; the app re-runs the message", "R1c", 1, r.told, id, [`model requests: ${outcomes("R1c")}; runs: ${r.attempts}`]);
}

// 1d. The incident again, but the re-run's model reads the balance first and pays in its second response: the
// payment lands at another place in the run, under another turn index. The app records each write call before
// it dispatches it and dispatches the re-run's identical call where the failed run did (TURN-23).
if (run("1d")) {
  let left = 1;
  model.setFaultPlan((request) => {
    const input = Array.isArray(request.input) ? request.input : [];
    if (left <= 0 || !JSON.stringify(request).includes("R1d") || input[input.length - 1]?.type !== "function_call_output") return undefined;
    left -= 1;
    readFirst.add("R1d");
    return { kind: "reset", at: { event: 4 } };
  });
  const id = thread("s1d");
  const r = await app.send(id, "m1d", "pay acme 1300 R1d");
  model.setFaultPlan(undefined);
  await judge("1d the incident, and a re-run whose model reads the balance before it pays", "R1d", 1, r.told, id, [`model requests: ${outcomes("R1d")}; runs: ${r.attempts}`]);
}

// 2. Every run of the message fails after the payment (3 cut answers): the user is told to send again; the
// client re-sends the same message id (and then once more).
if (run("2")) {
  afterPayment("R2", 3, { kind: "reset", at: { event: 4 } });
  const id = thread("s2");
  const first = await app.send(id, "m2", "pay acme 2000 R2");
  model.setFaultPlan(undefined);
  const second = await app.send(id, "m2", "pay acme 2000 R2");
  const third = await app.send(id, "m2", "pay acme 2000 R2");
  await judge("2 a re-send of the same message id after a failed send (and once more)", "R2", 1, second.told, id,
    [`first send: runs ${first.attempts}, told ${first.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`, `third send answered from the app's table: ${third.answeredBefore}`],
    [[`the third send is told the same payment ${JSON.stringify(third.told.map((t) => t.paymentId).filter(Boolean))}`, third.answeredBefore && sameSet(third.told.flatMap((t) => (t.paymentId ? [t.paymentId] : [])), effectsOf("R2").map((e) => e.resourceId))]]);
}

// 3. The worker is SIGKILLed inside the payment (after it was made, before its answer is stored); the client
// re-sends in another process (and once more).
if (run("3")) {
  const id = thread("s3");
  let victim = 0;
  onPayment = (reference) => {
    if (reference === "R3" && victim !== 0) {
      process.kill(victim, "SIGKILL");
      victim = 0;
    }
  };
  const env = { THREAD: id, MESSAGE_ID: "m3", TEXT: "pay acme 3000 R3" };
  const first = await worker(env, (pid) => (victim = pid));
  onPayment = undefined;
  const second = await worker(env);
  const third = await worker(env);
  await judge("3 SIGKILL after the payment, before its answer is stored; a re-send in another process (and once more)", "R3", 1, toldOf(second.out), id,
    [`first process: ${first.signal ?? `exit ${first.code}`}`, `second process stderr: ${second.err.trim().slice(0, 200) || "-"}`],
    [[`first process killed, the third send answered from the app's table`, first.signal === "SIGKILL" && third.out.includes('"answeredBefore":true')]]);
}

// 4. A re-worded replay: the re-run's model re-words the memo (identity: payee, amount, currency, reference).
if (run("4")) {
  afterPayment("R4", 1, { kind: "reset", at: { event: 4 } });
  const id = thread("s4");
  const r = await app.send(id, "m4", "pay acme 4000 R4");
  model.setFaultPlan(undefined);
  const said = memos("R4");
  await judge("4 a re-worded replay (memo differs, identity same)", "R4", 1, r.told, id, [`memos the model sent: ${JSON.stringify(said)}`],
    [[`the model re-worded the memo (${new Set(said).size} different)`, new Set(said).size > 1]]);
}

// 5a. Human approval: the run interrupts; its RunState is stored; a different process approves and resumes it;
// the resume's answer is cut, the app resumes again from the stored state; then a second approval click.
if (run("5a")) {
  const approver = await openApp({ ...common, approvals: true, owner: "approver-5a" });
  const id = thread("s5a");
  const asked = await approver.send(id, "m5a", "pay acme 5000 R5a");
  await approver.close();
  const paidBefore = effectsOf("R5a").length;
  afterPayment("R5a", 1, { kind: "reset", at: { event: 4 } });
  const resumed = await worker({ THREAD: id, MESSAGE_ID: "m5a", MODE: "approve", APPROVALS: "1" });
  model.setFaultPlan(undefined);
  const again = await worker({ THREAD: id, MESSAGE_ID: "m5a", MODE: "approve", APPROVALS: "1" });
  await judge("5a approval: interrupt, RunState stored, approved and resumed in another process, the resume cut and resumed again; a second approval", "R5a", 1, toldOf(resumed.out), id,
    [`asked: ${asked.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`, `model requests: ${outcomes("R5a")}`, `resume stderr: ${resumed.err.trim().slice(0, 300) || "-"}`],
    [[`nothing paid before the approval (${paidBefore}); the first ask is pending`, paidBefore === 0 && asked.pending === true],
     [`the second approval is told the same payment`, again.out.includes('"answeredBefore":true') && sameSet(toldOf(again.out).flatMap((t) => (t.paymentId ? [t.paymentId] : [])), effectsOf("R5a").map((e) => e.resourceId))]]);
}

// 5b. Two approvals clicked at once, in two processes.
if (run("5b")) {
  const approver = await openApp({ ...common, approvals: true, owner: "approver-5b" });
  const id = thread("s5b");
  await approver.send(id, "m5b", "pay acme 5100 R5b");
  await approver.close();
  const [a, b] = await Promise.all([1, 2].map(() => worker({ THREAD: id, MESSAGE_ID: "m5b", MODE: "approve", APPROVALS: "1" })));
  const ids = (out: string) => toldOf(out).flatMap((t) => (t.paymentId ? [t.paymentId] : []));
  await judge("5b two approvals clicked at once (two processes resume one RunState)", "R5b", 1, toldOf(a!.out), id, [`click 2 told: ${JSON.stringify(ids(b!.out))}; stderr: ${(a!.err + b!.err).trim().slice(0, 200) || "-"}`],
    [[`both clicks told the same payment`, sameSet(ids(b!.out), effectsOf("R5b").map((e) => e.resourceId))]]);
}

// 6. The payments API is slower than the tool's timeout: the outcome is unknown. The user must be told "may have
// happened", never "failed"; then the held payment completes (it did happen).
if (run("6")) {
  payments.injectFault({ latencyMs: 600_000 }, { times: 1 });
  const id = thread("s6");
  const r = await app.send(id, "m6", "pay acme 6000 R6");
  const paidWhileUnknown = effectsOf("R6").length;
  payments.releaseLatency();
  await new Promise((resolve) => setTimeout(resolve, 300));
  const effectIds = effectsOf("R6").map((e) => e.resourceId);
  const committed = committedPayments(await app.committed(id), "R6");
  report("6 payments API times out: told 'may have happened', never 'did not happen'", [
    [`effect log: ${effectIds.length} payment(s) for R6 after the held request was released (${paidWhileUnknown} while the user was told)`, effectIds.length <= 1],
    [`app committed ${JSON.stringify(committed)} (nothing: the message is not answered)`, committed.length === 0],
    [`told: may have ${r.told.filter((t) => t.status === "may_have_happened").length}, did not ${r.told.filter((t) => t.status === "did_not_happen").length}, happened ${r.told.filter((t) => t.status === "happened").length}`,
      r.told.some((t) => t.status === "may_have_happened") && !r.told.some((t) => t.status === "did_not_happen" || t.status === "happened")],
  ], [`runs: ${r.attempts}`, ...r.told.map((t) => `user told: ${t.status}: ${t.text}`)]);
}

// 7. Two different messages at once on one thread (two app instances).
if (run("7")) {
  const other = await openApp({ ...common, owner: "other-7" });
  const id = thread("s7");
  const [a, b] = await Promise.all([app.send(id, "m7a", "pay acme 700 R7a"), other.send(id, "m7b", "pay bob 800 R7b")]);
  await other.close();
  const history = await app.committed(id);
  const all = [...effectsOf("R7a"), ...effectsOf("R7b")].map((e) => e.resourceId);
  const committed = committedPayments(history);
  report("7 two different messages at once on one thread", [
    [`effect log: ${all.length} payment(s) for R7a, R7b (expected 2)`, all.length === 2],
    [`thread committed ${JSON.stringify(committed)}`, sameSet(committed, all)],
    [`each told its own payment: a ${JSON.stringify(a.told.map((t) => t.paymentId))}, b ${JSON.stringify(b.told.map((t) => t.paymentId))}`,
      sameSet(a.told.flatMap((t) => (t.paymentId ? [t.paymentId] : [])), effectsOf("R7a").map((e) => e.resourceId)) && sameSet(b.told.flatMap((t) => (t.paymentId ? [t.paymentId] : [])), effectsOf("R7b").map((e) => e.resourceId))],
  ], [`user messages in the committed history: ${history.filter((i) => i.type === "message" && i.role === "user").length}`]);
}

// 8a. The SDK runs a response's calls concurrently: two identical calls of one response (the user asked twice).
if (run("8a")) {
  const id = thread("s8a");
  const r = await app.send(id, "m8a", "pay twice acme 810 R8a");
  await judge("8a two identical calls in one response, run concurrently by the SDK: two payments", "R8a", 2, r.told, id);
}

// 8b. The payments API's response is lost after it paid (drop_after_accept), and the model calls an errored
// tool again: the SDK's default errorFunction would tell the model "An error occurred ... Please try again.".
if (run("8b")) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const id = thread("s8b");
  const r = await app.send(id, "m8b", "pay acme 820 R8b retry-errors");
  await judge("8b lost payments response, and a model that calls an errored tool again", "R8b", 1, r.told, id, [`model requests: ${outcomes("R8b")}; runs: ${r.attempts}`]);
}

// 8d. The payments API takes 1.5 s (within the payment request's own 2 s timeout), and the model calls a
// failed or timed-out tool again: one payment (the SDK's tool timeoutMs would tell the model it timed out).
if (run("8d")) {
  payments.injectFault({ latencyMs: 1_500 }, { times: 1 });
  const id = thread("s8d");
  const r = await app.send(id, "m8d", "pay acme 840 R8d retry-errors");
  await new Promise((resolve) => setTimeout(resolve, 1_000)); // a payment the SDK abandoned lands meanwhile
  await judge("8d a slow payments API (1.5 s), and a model that calls a failed or timed-out tool again", "R8d", 1, r.told, id, [`model requests: ${outcomes("R8d")}; runs: ${r.attempts}`]);
}

// 8c. The second message on the thread asks the same payment again: a second payment (the turn counter).
if (run("8c")) {
  const id = thread("s8c");
  const a = await app.send(id, "m8c1", "pay acme 830 R8c");
  const b = await app.send(id, "m8c2", "pay acme 830 R8c");
  await judge("8c the same payment asked again in a second message: a second payment", "R8c", 2, [...a.told, ...b.told], id);
}

await app.close();
await model.close();
await payments.close();
if (process.env.KEEP !== "1") await dropSchemas();
const passed = verdicts.filter((v) => v.pass).length;
console.log(`\n${passed}/${verdicts.length} situations pass${PLANT === "none" ? "" : ` (PLANT=${PLANT})`}`);
process.exitCode = passed === verdicts.length ? 0 : 1;
console.log(`exit ${process.exitCode}`);
