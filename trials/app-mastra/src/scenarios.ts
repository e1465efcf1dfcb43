// The trial's situations against real processes: mock-payments and mock-provider over loopback HTTP,
// PostgreSQL for the ledger, the app's tables and Mastra's memory, a child process for the SIGKILL.
// Each situation is judged by mock-payments' effect log AND what Mastra's memory holds of the thread (payment
// ids in its tool results; no user message twice, no call without its result) AND what the user was told.
// PLANT=... checks the oracle (plants.txt).
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { openApp, type Plant, type Told } from "./app.js";
import { ACCOUNT } from "./tools.js";
import { script } from "./model-script.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = process.env.TRIAL_SCHEMA ?? "h_mastra";
const PLANT = (process.env.PLANT ?? "none") as Plant;
const only = process.argv[2]?.split(",");

async function dropSchemas() {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE; DROP SCHEMA IF EXISTS ${SCHEMA}_app CASCADE; DROP SCHEMA IF EXISTS ${SCHEMA}_mastra CASCADE`);
  await admin.end();
}
await dropSchemas();

let onPayment: ((reference: string) => void) | undefined;
const payments = await startMockPayments({ requireIdempotencyKey: true, onEffect: (e) => onPayment?.(String((e.payload as { reference?: unknown }).reference)) });
const provider = await startMockProvider({ seed: "mastra-trial", script, keepAliveTimeoutMs: 65_000 });
const common = { databaseUrl: DATABASE_URL, schema: SCHEMA, paymentsUrl: payments.url, providerUrl: provider.baseURL, plant: PLANT, leaseMs: 3_000, waitMs: 8_000 };
const app = await openApp(common);

interface Judged { name: string; pass: boolean; lines: string[] }
const verdicts: Judged[] = [];
const thread = (name: string) => `${name}-${PLANT}`;

function effectsOf(reference: string) {
  return payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => (e.payload as { reference?: string }).reference === reference);
}

type Part = { type: string; text?: string; toolInvocation?: { state?: string; toolCallId?: string; toolName?: string; result?: unknown } };
/** What Mastra's memory holds of a thread: payment ids in tool results, user messages, calls without a result. */
async function memoryOf(threadId: string) {
  const messages = await app.memoryMessages(threadId);
  const paymentIds: string[] = [];
  const userTexts: string[] = [];
  const unanswered: string[] = [];
  for (const m of messages) {
    const parts = ((m.content as { parts?: Part[] })?.parts ?? []) as Part[];
    if (m.role === "user") userTexts.push(parts.filter((p) => p.type === "text").map((p) => p.text).join(""));
    for (const p of parts) {
      if (p.type !== "tool-invocation" || p.toolInvocation?.toolName !== "send_payment") continue;
      if (p.toolInvocation.state !== "result" && p.toolInvocation.state !== "output-error") unanswered.push(`${p.toolInvocation.toolCallId}:${p.toolInvocation.state}`);
      const id = /"id":"(pay_[0-9a-f]+)"/.exec(JSON.stringify(p.toolInvocation.result ?? null))?.[1];
      if (id) paymentIds.push(id);
    }
  }
  return { paymentIds, userTexts, unanswered, count: messages.length };
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...new Set(a)].length === a.length && a.every((x) => b.includes(x));

async function judge(name: string, reference: string, expected: number, told: Told[], threadId: string, userMessages: number, extra: string[] = [], extraPass = true) {
  const effectIds = effectsOf(reference).map((e) => e.resourceId);
  const mem = await memoryOf(threadId);
  const toldHappened = told.filter((t) => t.status === "happened").map((t) => t.paymentId ?? "?");
  const toldNot = told.filter((t) => t.status === "did_not_happen");
  const mayHave = told.filter((t) => t.status === "may_have_happened");
  // A payment that may have happened is never told "did not happen"; one the log shows is told or left open.
  const toldOk = expected > 0 && mayHave.length > 0 && toldHappened.length === 0 ? toldNot.length === 0 : sameSet(toldHappened, effectIds) && (expected > 0 || toldNot.length > 0 || mayHave.length > 0);
  const memOk = mayHave.length > 0 && toldHappened.length === 0 ? mem.paymentIds.length === 0 : sameSet(mem.paymentIds, effectIds);
  const checks: Array<[string, boolean]> = [
    [`effect log: ${effectIds.length} payment(s) for ${reference} (expected ${expected}) ${JSON.stringify(effectIds)}`, effectIds.length === expected],
    [`Mastra memory: payments ${JSON.stringify(mem.paymentIds)}, ${mem.userTexts.length} user message(s) (expected ${userMessages}), calls without a result ${JSON.stringify(mem.unanswered)}`,
      memOk && mem.userTexts.length === userMessages && mem.unanswered.length === 0],
    [`told happened ${JSON.stringify(toldHappened)}; did not: ${toldNot.length}; may have: ${mayHave.length}`, toldOk],
  ];
  const lines = [...checks.map(([text, ok]) => `  ${ok ? "ok  " : "FAIL"} ${text}`), ...extra.map((t) => `       ${t}`)];
  for (const t of told) lines.push(`       user told: ${t.status}: ${t.text}`);
  const pass = checks.every(([, ok]) => ok) && extraPass;
  verdicts.push({ name, pass, lines });
  console.log(`${pass ? "PASS" : "FAIL"} ${name}\n${lines.join("\n")}`);
}

const ask = (threadId: string, text: string, messageId = `m-${threadId}`) => app.send(threadId, messageId, text);
const outcomes = (reference: string) => provider.requests.filter((q) => JSON.stringify(q.body).includes(reference)).map((q) => q.outcome).join(", ");
const callIds = (reference: string) => provider.requests.filter((q) => JSON.stringify(q.body).includes(reference)).flatMap((q) => q.toolUses.map((t) => t.id));
const run = (name: string) => only === undefined || only.some((o) => name === o);

// 1. The stream cut after the call's arguments are complete (content_block_stop), before message_stop; the
// app runs the message again, the model re-emits the call under a new tool_use id.
if (run("1")) {
  provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
  const id = thread("s1");
  const r = await ask(id, "pay carol 1000 R1");
  await judge("1 stream reset after the call's arguments, before message_stop; the app runs the message again", "R1", 1, r.told, id, 1,
    [`provider requests: ${outcomes("R1")}; runs: ${r.attempts}`, `tool_use ids: ${callIds("R1").join(", ")}`,
      `the last model request's messages: ${JSON.stringify((provider.requests.at(-1)?.body as { messages?: Array<{ role: string; content: unknown }> })?.messages?.map((m) => `${m.role}: ${JSON.stringify(m.content).slice(0, 80)}`))}`]);
}
// 1b. The chapter's incident as Mastra meets it: the payment ran, the next response (after the tool result)
// is cut; the app runs the message again, the call comes back under a new id with its memo re-worded (4).
if (run("1b")) {
  let fired = false;
  provider.setFaultPlan((request) => {
    const body = JSON.stringify(request);
    if (fired || !body.includes("R1b") || !body.includes("tool_result")) return undefined;
    fired = true;
    return { kind: "reset", at: { event: 4 } };
  });
  const id = thread("s1b");
  const r = await ask(id, "pay acme 1100 R1b");
  provider.setFaultPlan(undefined);
  const memos = provider.requests.filter((q) => JSON.stringify(q.body).includes("R1b")).flatMap((q) => q.toolUses.map((t) => String((t.input as { memo?: string }).memo)));
  await judge("1b/4 the response after the payment is cut; the message is run again, the call re-worded (memo)", "R1b", 1, r.told, id, 1,
    [`provider requests: ${outcomes("R1b")}; runs: ${r.attempts}`, `memos the model sent: ${JSON.stringify([...new Set(memos)])}`]);
}
// 1c. The stream ends cleanly inside the call's arguments (no message_stop).
if (run("1c")) {
  provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 2 } });
  const id = thread("s1c");
  const r = await ask(id, "pay carol 1200 R1c");
  await judge("1c stream ends cleanly inside the call's arguments; the message run again", "R1c", 1, r.told, id, 1, [`provider requests: ${outcomes("R1c")}; runs: ${r.attempts}`]);
}

// 2. A run that fails for good (every attempt cut), then the client re-sends the same message id.
if (run("2")) {
  let cuts = 0;
  provider.setFaultPlan((request) => {
    const body = JSON.stringify(request);
    if (cuts >= 3 || !body.includes("R2") || !body.includes("tool_result")) return undefined;
    cuts++;
    return { kind: "reset", at: { event: 4 } };
  });
  const id = thread("s2");
  const first = await ask(id, "pay bob 2000 R2");
  const afterFailure = await memoryOf(id);
  provider.setFaultPlan(undefined);
  const second = await ask(id, "pay bob 2000 R2");
  await judge("2 a message whose runs all failed, then the client re-sends it (same id)", "R2", 1, second.told, id, 1,
    [`first send: ${first.attempts} runs, told ${first.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`,
      `Mastra memory after the failed send: ${afterFailure.count} message(s), user ${JSON.stringify(afterFailure.userTexts)}, payments ${JSON.stringify(afterFailure.paymentIds)}`,
      `provider requests: ${outcomes("R2")}`],
    !first.told.some((t) => t.status === "did_not_happen") && afterFailure.count === 0);
}

// 3. SIGKILL after the payment (inside mock-payments' transaction); another process, the client re-sends;
// then once more (answered from the app's table).
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
async function runWorker(env: NodeJS.ProcessEnv, killOn?: string) {
  const child = spawn(process.execPath, [here("./worker.js")], { env, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  if (killOn !== undefined) onPayment = (reference) => void (reference === killOn && child.kill("SIGKILL"));
  const code = await new Promise<number | null>((resolve) => child.on("exit", (c, signal) => resolve(signal === "SIGKILL" ? -9 : c)));
  onPayment = undefined;
  const line = out.trim().split("\n").at(-1);
  const parsed = line ? (JSON.parse(line) as { told: Told[]; answeredBefore?: boolean }) : { told: [] as Told[] };
  return { code, told: parsed.told, answeredBefore: parsed.answeredBefore ?? false };
}
if (run("3")) {
  const id = thread("s3");
  const env = { ...process.env, DATABASE_URL, TRIAL_SCHEMA: SCHEMA, PAYMENTS_URL: payments.url, PROVIDER_URL: provider.baseURL, PLANT, THREAD: id, MESSAGE_ID: `m-${id}`, TEXT: "pay dave 3000 R3" };
  const first = await runWorker(env, "R3");
  const afterKill = await memoryOf(id);
  const second = await runWorker(env);
  const third = await runWorker(env);
  await judge("3 SIGKILL inside the payment; another process, the client re-sends (and once more)", "R3", 1, second.told, id, 1,
    [`first process: ${first.code === -9 ? "killed (SIGKILL)" : `exited ${first.code}`}; Mastra memory after the kill: ${afterKill.count} message(s), user ${JSON.stringify(afterKill.userTexts)}`,
      `third send answered from the app's table: ${third.answeredBefore}, told ${JSON.stringify(third.told.map((t) => t.paymentId))}`],
    first.code === -9 && third.answeredBefore && sameSet(third.told.map((t) => t.paymentId ?? "?"), second.told.map((t) => t.paymentId ?? "?")));
}

// 5. The payments API is slow (4 s, the app waits 1.5 s): the outcome is unknown; told "may have happened".
if (run("5")) {
  payments.injectFault({ latencyMs: 4_000 }, { times: 6 });
  const id = thread("s5");
  const r = await ask(id, "pay erin 5000 R5");
  payments.clearFaults();
  await new Promise((resolve) => setTimeout(resolve, 4_500)); // the slow payment lands
  await judge("5 payments API slow: the outcome is unknown, told as may have happened, never as failed", "R5", 1, r.told, id, 0,
    [`runs: ${r.attempts}`], r.told.some((t) => t.status === "may_have_happened") && !r.told.some((t) => t.status === "did_not_happen"));
}

// 6. Two different messages at once on one thread, the same ask in both: two asks, two payments.
if (run("6")) {
  const other = await openApp({ ...common, owner: "second-instance" });
  const id = thread("s6");
  const [a, b] = await Promise.all([app.send(id, "m-s6-a", "pay ivy 6000 R6"), other.send(id, "m-s6-b", "pay ivy 6000 R6")]);
  await judge("6 two different messages at once on one thread (the same ask): two payments, in order", "R6", 2, [...a.told, ...b.told], id, 2,
    [`a told ${JSON.stringify(a.told.map((t) => t.paymentId))}, b told ${JSON.stringify(b.told.map((t) => t.paymentId))}`]);
  await other.close();
}

// 7. What Mastra does on its own: a tool's error goes to the model, which calls again (payments API's
// response lost after it paid, then a model that retries an errored tool).
if (run("7")) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const id = thread("s7");
  const r = await ask(id, "pay kim 7000 R7 retrying");
  await judge("7 payments API's response lost after it paid, and a model that calls an errored tool again", "R7", 1, r.told, id, 1, [`runs: ${r.attempts}; provider requests: ${outcomes("R7")}`]);
}
// 7b. Two identical calls in one response (the user asked twice): two payments.
if (run("7b")) {
  const id = thread("s7b");
  const r = await ask(id, "pay bob 7100 R7b twice");
  await judge("7b two identical payment calls in one response: two payments", "R7b", 2, r.told, id, 1);
}
// 7c. A refusal from the payments API (400, currency EUX): told it did not happen.
if (run("7c")) {
  const id = thread("s7c");
  const r = await ask(id, "pay frank 7200 R7c EUX");
  await judge("7c payments API refuses (400 EUX): nothing paid, told it did not happen", "R7c", 0, r.told, id, 1);
}

// 7d. Mastra's own model retry: the message's first model call is refused (529 overloaded), then the
// response after the payment is cut; the app runs the message again.
if (run("7d")) {
  let first = true;
  let cut = false;
  provider.setFaultPlan((request) => {
    const body = JSON.stringify(request);
    if (!body.includes("R7d")) return undefined;
    if (first) {
      first = false;
      return { kind: "status", status: 529, retryAfterMs: 10 };
    }
    if (cut || !body.includes("tool_result")) return undefined;
    cut = true;
    return { kind: "reset", at: { event: 4 } };
  });
  const id = thread("s7d");
  const r = await ask(id, "pay lena 7300 R7d");
  provider.setFaultPlan(undefined);
  await judge("7d a model call refused once (529), then the response after the payment cut; the message run again", "R7d", 1, r.told, id, 1,
    [`runs: ${r.attempts}; provider requests: ${outcomes("R7d")}`]);
}

await app.close();
await payments.close();
await provider.close();
const failed = verdicts.filter((v) => !v.pass);
console.log(`\n${verdicts.length - failed.length}/${verdicts.length} situations pass${PLANT === "none" ? "" : ` (PLANT=${PLANT})`}`);
if (process.env.KEEP !== "1") await dropSchemas();
process.exit(failed.length === 0 ? 0 : 1);
