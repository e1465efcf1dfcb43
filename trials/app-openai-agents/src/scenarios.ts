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
import { openApp, type Plant, type Told, type Turns } from "./app.js";
import { ACCOUNT, refuseOnce } from "./tools.js";
import { readFirst, script, together } from "./model-script.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = process.env.TRIAL_SCHEMA ?? "h_agents";
const PLANT = (process.env.PLANT ?? "none") as Plant;
const TURNS = (process.env.TURNS ?? "per-message") as Turns;
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
const common = { databaseUrl: DATABASE_URL, schema: SCHEMA, paymentsUrl: payments.url, modelUrl: model.baseURL, plant: PLANT, turns: TURNS, leaseMs: 3_000, waitMs: 8_000 };
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

/**
 * A fault plan that cuts, `times` times, the answer after a payment's output for `reference` (its input ends with
 * an output naming a payment), once the message's input holds `paid` such outputs.
 */
const afterPaid = (reference: string, times: number, also?: () => void, paid = 1) => {
  let left = times;
  model.setFaultPlan((request) => {
    const input = Array.isArray(request.input) ? request.input : [];
    const last = input[input.length - 1] as { type?: string; output?: unknown } | undefined;
    const outputs = input.filter((i) => i.type === "function_call_output" && /pay_[0-9a-f]+/.test(JSON.stringify((i as { output?: unknown }).output))).length;
    if (left <= 0 || !JSON.stringify(request).includes(reference) || last?.type !== "function_call_output" || !/pay_[0-9a-f]+/.test(JSON.stringify(last.output)) || outputs < paid) return undefined;
    left -= 1;
    also?.();
    return { kind: "reset", at: { event: 4 } };
  });
};
const paymentIds = (told: Told[]) => told.flatMap((t) => (t.paymentId ? [t.paymentId] : []));

// 9b. The user asks the same payment twice in one message; the failed run makes the two in two responses (the
// answer after the second is cut), the re-run's model makes both in its first response. Two payments.
if (run("9b")) {
  afterPaid("R9b", 1, () => together.add("R9b"), 2);
  const id = thread("s9b");
  const r = await app.send(id, "m9b", "pay apart acme 1910 R9b");
  model.setFaultPlan(undefined);
  await judge("9b two asks of one payment: two responses in the failed run, one response in the re-run", "R9b", 2, r.told, id, [`model requests: ${outcomes("R9b")}; runs: ${r.attempts}`]);
}

// 9f. The same two asks, nothing cut: the second ask, in the run's second response, is a second payment.
if (run("9f")) {
  const id = thread("s9f");
  const r = await app.send(id, "m9f", "pay apart acme 1920 R9f");
  await judge("9f two asks of one payment in two responses of one run: two payments", "R9f", 2, r.told, id, [`model requests: ${outcomes("R9f")}; runs: ${r.attempts}`]);
}

// 9c. A definite refusal; the model calls the payment again and it is paid; the answer after it is cut. The
// re-run's model meets the refusal again (replayed from the ledger) and calls again: one payment.
if (run("9c")) {
  refuseOnce.add("R9c");
  afterPaid("R9c", 1);
  const id = thread("s9c");
  const r = await app.send(id, "m9c", "pay acme 1930 R9c retry-errors");
  model.setFaultPlan(undefined);
  await judge("9c a definite refusal, the model's retry pays, the answer is cut; the re-run", "R9c", 1, r.told, id, [`model requests: ${outcomes("R9c")}; runs: ${r.attempts}`],
    [[`told the refusal (did not happen) and the payment`, r.told.some((t) => t.status === "did_not_happen")]]);
}

// 9d. Approvals, two asks of one payment in two responses: the first approval (another process) pays and the run
// stops again for the second call; the second approval, in a third process, resumes the stored RunState. Two
// payments; a third click is answered from the app's table.
if (run("9d")) {
  const approver = await openApp({ ...common, approvals: true, owner: "approver-9d" });
  const id = thread("s9d");
  const asked = await approver.send(id, "m9d", "pay apart acme 1950 R9d");
  await approver.close();
  const env = { THREAD: id, MESSAGE_ID: "m9d", MODE: "approve", APPROVALS: "1" };
  const first = await worker(env);
  const paidBetween = effectsOf("R9d").map((e) => e.resourceId);
  const second = await worker(env);
  const third = await worker(env);
  const firstOut = first.out.trim() ? (JSON.parse(first.out.trim().split("\n").pop()!) as { pending: boolean; told: Told[] }) : { pending: false, told: [] };
  await judge("9d two approvals in one run: the second resumed in another process after the first response paid", "R9d", 2, toldOf(second.out), id,
    [`asked: ${asked.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`, `first approval told: ${firstOut.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`,
     `model requests: ${outcomes("R9d")}; stderr: ${(first.err + second.err).trim().slice(0, 300) || "-"}`],
    [[`the first approval paid one (${JSON.stringify(paidBetween)}), stopped again, and told it`, paidBetween.length === 1 && firstOut.pending && sameSet(paymentIds(firstOut.told), paidBetween)],
     [`the third click is told the same payments`, third.out.includes('"answeredBefore":true') && sameSet(paymentIds(toldOf(third.out)), effectsOf("R9d").map((e) => e.resourceId))]]);
}

// 9e. Every run of a message fails after its model read the balance and paid in its second response; the user
// sends the payment again as a NEW message (another id), whose model pays in its first response. TURN-12: a new
// message after a failed one takes its index and meets its rows ("that failed, try again"): one payment.
if (run("9e")) {
  readFirst.add("R9e");
  afterPaid("R9e", 3);
  const id = thread("s9e");
  const failed = await app.send(id, "m9e1", "pay acme 1940 R9e");
  model.setFaultPlan(undefined);
  readFirst.delete("R9e");
  const again = await app.send(id, "m9e2", "pay acme 1940 R9e");
  await judge("9e a new message after a failed one that paid in its second response (TURN-12)", "R9e", 1, again.told, id,
    [`failed send: runs ${failed.attempts}, told ${failed.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`, `model requests: ${outcomes("R9e")}`],
    [[`the failed send told the payment it made`, sameSet(paymentIds(failed.told), effectsOf("R9e").slice(0, 1).map((e) => e.resourceId))]]);
}

// 9g. A message fails after its payment (every run's answer cut); the user sends ANOTHER message, which is
// answered and committed; then the client re-sends the failed message's id. TURN-12: a re-send after another
// message was bound since is answered with the stored failure, not run (run at the thread's new counter, its
// payment would meet no row). One payment for R9g, and the re-send is told it.
if (run("9g")) {
  afterPaid("R9g", 3);
  const id = thread("s9g");
  const failed = await app.send(id, "m9g1", "pay acme 1970 R9g");
  model.setFaultPlan(undefined);
  const other = await app.send(id, "m9g2", "pay bob 1975 Q9g");
  const resent = await app.send(id, "m9g1", "pay acme 1970 R9g");
  const effectIds = effectsOf("R9g").map((e) => e.resourceId);
  const committed = committedPayments(await app.committed(id), "R9g");
  report("9g a failed message re-sent after another message was answered (TURN-12)", [
    [`effect log: ${effectIds.length} payment(s) for R9g (expected 1) ${JSON.stringify(effectIds)}`, effectIds.length === 1],
    [`the re-send is told ${JSON.stringify(paymentIds(resent.told))}`, sameSet(paymentIds(resent.told), effectIds) && !resent.told.some((t) => t.status === "did_not_happen")],
    [`app committed ${JSON.stringify(committed)} (the failed message's payment, or nothing: it stands as its failure told it)`, committed.every((c) => effectIds.includes(c)) && committed.length <= 1],
    [`the other message paid once and committed it`, effectsOf("Q9g").length === 1 && sameSet(committedPayments(await app.committed(id), "Q9g"), effectsOf("Q9g").map((e) => e.resourceId))],
  ], [`failed send told: ${failed.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`, `other message told: ${other.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`,
      ...resent.told.map((t) => `re-send told: ${t.status}: ${t.text}`)]);
}

// 9h. A message stops for an approval; before the person answers, the user sends another message on the thread
// (another payment, which stops for its approval too); the first is approved, then the other (sent again first if
// it was not run). Both payments once, both in the thread, each told its own.
if (run("9h")) {
  const approver = await openApp({ ...common, approvals: true, owner: "approver-9h" });
  const id = thread("s9h");
  const asked = await approver.send(id, "m9h1", "pay acme 1980 R9h");
  const other = await approver.send(id, "m9h2", "pay bob 1985 Q9h");
  const approved = await approver.approve(id, "m9h1");
  // The other message: approved if it stopped for its approval, else sent again (then approved).
  let again = other.pending ? await approver.approve(id, "m9h2").catch(() => approver.send(id, "m9h2", "pay bob 1985 Q9h")) : await approver.send(id, "m9h2", "pay bob 1985 Q9h");
  if (again.pending) again = await approver.approve(id, "m9h2");
  await approver.close();
  const history = await app.committed(id);
  const ids = (reference: string) => effectsOf(reference).map((e) => e.resourceId);
  report("9h another message while one awaits approval; both approved, one after the other", [
    [`effect log: ${ids("R9h").length} payment(s) for R9h, ${ids("Q9h").length} for Q9h (expected 1 and 1)`, ids("R9h").length === 1 && ids("Q9h").length === 1],
    [`thread committed R9h ${JSON.stringify(committedPayments(history, "R9h"))}, Q9h ${JSON.stringify(committedPayments(history, "Q9h"))}`,
      sameSet(committedPayments(history, "R9h"), ids("R9h")) && sameSet(committedPayments(history, "Q9h"), ids("Q9h"))],
    [`the approval told ${JSON.stringify(paymentIds(approved.told))}, the re-sent message ${JSON.stringify(paymentIds(again.told))}`,
      sameSet(paymentIds(approved.told), ids("R9h")) && sameSet(paymentIds(again.told), ids("Q9h"))],
  ], [`asked: ${asked.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`, `other message told: ${other.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`,
      `user messages in the committed history: ${history.filter((i) => i.type === "message" && i.role === "user").length}`]);
}

await app.close();
await model.close();
await payments.close();
if (process.env.KEEP !== "1") await dropSchemas();
const passed = verdicts.filter((v) => v.pass).length;
console.log(`\n${passed}/${verdicts.length} situations pass (TURNS=${TURNS}${PLANT === "none" ? "" : `, PLANT=${PLANT}`})`);
process.exitCode = passed === verdicts.length ? 0 : 1;
console.log(`exit ${process.exitCode}`);
