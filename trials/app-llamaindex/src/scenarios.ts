// The trial's situations against real processes: mock-payments and mock-provider over loopback HTTP,
// PostgreSQL for the ledger and the app's thread table, child processes for the SIGKILL and the crash probe.
// Each situation is judged by mock-payments' effect log AND what the app committed (payment ids in the
// thread's stored memory) AND what the user was told. PLANT=... checks the oracle (plants.txt).
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { Anthropic, AnthropicSession } from "@llamaindex/anthropic";
import { agent } from "@llamaindex/workflow";
import { tool } from "llamaindex";
import type { ChatMessage } from "@llamaindex/core/llms";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { openApp, type Plant, type Told, type Turns } from "./app.js";
import { ACCOUNT, paymentTools } from "./tools.js";
import { readFirst, script } from "./model-script.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = process.env.TRIAL_SCHEMA ?? "h_triallama";
const PLANT = (process.env.PLANT ?? "none") as Plant;
const TURNS = (process.env.TURNS ?? "carry") as Turns;
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
const provider = await startMockProvider({ seed: "llamaindex-trial", script, keepAliveTimeoutMs: 65_000 });
const common = { databaseUrl: DATABASE_URL, schema: SCHEMA, paymentsUrl: payments.url, providerUrl: provider.baseURL, plant: PLANT, turns: TURNS, leaseMs: 3_000, waitMs: 8_000 };
const app = await openApp(common);

interface Judged { name: string; pass: boolean; lines: string[] }
const verdicts: Judged[] = [];
const thread = (name: string) => `${name}-${PLANT}`;

function effectsOf(reference: string) {
  return payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => (e.payload as { reference?: string }).reference === reference);
}

/** Payment ids in the send_payment results the thread's committed memory holds. */
function committedPayments(messages: ChatMessage[]): string[] {
  const ids: string[] = [];
  for (const m of messages) {
    const result = (m.options as { toolResult?: { result?: unknown; isError?: boolean } } | undefined)?.toolResult;
    if (result === undefined || result.isError) continue;
    // LlamaIndex stores a tool's output with every double quote removed (stringifyJSONToMessageContent).
    const id = /\bid\\?:\\?(pay_[0-9a-f]+)/.exec(String(result.result))?.[1];
    if (id) ids.push(id);
  }
  return ids;
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...new Set(a)].length === a.length && a.every((x) => b.includes(x));

async function judge(name: string, reference: string, expected: number, told: Told[], threadId: string, extra: string[] = [], extraPass = true) {
  const effectIds = effectsOf(reference).map((e) => e.resourceId);
  const committed = committedPayments(await app.committed(threadId));
  const toldHappened = told.filter((t) => t.status === "happened").map((t) => t.paymentId ?? "?");
  const toldNot = told.filter((t) => t.status === "did_not_happen");
  const checks: Array<[string, boolean]> = [
    [`effect log: ${effectIds.length} payment(s) for ${reference} (expected ${expected}) ${JSON.stringify(effectIds)}`, effectIds.length === expected],
    [`app committed ${JSON.stringify(committed)}`, sameSet(committed, effectIds)],
    [`told happened ${JSON.stringify(toldHappened)}; did not: ${toldNot.length}; may have: ${told.filter((t) => t.status === "may_have_happened").length}`,
      sameSet(toldHappened, effectIds) && (expected > 0 || toldNot.length > 0 || told.some((t) => t.status === "may_have_happened"))],
  ];
  const lines = [...checks.map(([text, ok]) => `  ${ok ? "ok  " : "FAIL"} ${text}`), ...extra.map((t) => `       ${t}`)];
  for (const t of told) lines.push(`       user told: ${t.status}: ${t.text}`);
  const pass = checks.every(([, ok]) => ok) && extraPass;
  verdicts.push({ name, pass, lines });
  console.log(`${pass ? "PASS" : "FAIL"} ${name}\n${lines.join("\n")}`);
}

function probe(name: string, pass: boolean, lines: string[]) {
  verdicts.push({ name, pass, lines });
  console.log(`${pass ? "PASS" : "FAIL"} ${name}\n${lines.map((l) => `       ${l}`).join("\n")}`);
}

const ask = (threadId: string, text: string, messageId = `m-${threadId}`) => app.send(threadId, messageId, text);
const outcomes = (reference: string) => provider.requests.filter((q) => JSON.stringify(q.body).includes(reference)).map((q) => q.outcome).join(", ");
const run = (name: string) => only === undefined || only.some((o) => name.startsWith(o));

// 1. The chapter's incident as LlamaIndex meets it: its agent runs a response's calls after the response
// ended, so the cut that follows a payment is in the NEXT response (the answer after the tool result).
// LlamaIndex keeps nothing of the run, so the app runs the message again; the model re-emits the call
// under a new tool_use id, its memo re-worded.
if (run("1")) {
  let fired = false;
  provider.setFaultPlan((request) => {
    const body = JSON.stringify(request);
    if (fired || !body.includes("R1") || !body.includes("tool_result")) return undefined;
    fired = true;
    return { kind: "reset", at: { event: 4 } };
  });
  const id = thread("s1");
  const r = await ask(id, "pay acme 1000 R1");
  provider.setFaultPlan(undefined);
  const ids = provider.requests.filter((q) => JSON.stringify(q.body).includes("R1")).flatMap((q) => q.toolUses.map((t) => t.id));
  await judge("1 the response after the payment is cut mid-stream; the message is run again", "R1", 1, r.told, id,
    [`provider requests: ${outcomes("R1")}; runs: ${r.attempts}`, `tool_use ids the model sent: ${ids.join(", ")}`]);
}

// 7. The incident again, but the re-run's model reads the balance first and pays in its second response:
// the payment lands at another place in the run, under another turn index. The app records each write call
// before it dispatches it and dispatches the re-run's identical call where the failed run did (TURN-23).
if (run("7")) {
  let fired = false;
  provider.setFaultPlan((request) => {
    const body = JSON.stringify(request);
    if (fired || !body.includes("R7") || !body.includes("tool_result")) return undefined;
    fired = true;
    readFirst.add("R7");
    return { kind: "reset", at: { event: 4 } };
  });
  const id = thread("s7");
  const r = await ask(id, "pay lena 7000 R7 divergent");
  provider.setFaultPlan(undefined);
  await judge("7 the incident, and a re-run whose model reads the balance before it pays", "R7", 1, r.told, id,
    [`provider requests: ${outcomes("R7")}; runs: ${r.attempts}`]);
}

// 2b. The user asks for the same payment twice; the model makes two identical calls in one response.
if (run("2b")) {
  const id = thread("s2b");
  const r = await ask(id, "pay bob 2100 R2b twice");
  await judge("2b two identical payment calls in one response (the user asked twice): two payments", "R2b", 2, r.told, id);
}

// 2c. The same payment asked again in a later message of the thread: a new ask, a second payment.
if (run("2c")) {
  const id = thread("s2c");
  const first = await ask(id, "pay ines 2200 R2c", "m-s2c-1");
  const second = await ask(id, "pay ines 2200 R2c", "m-s2c-2");
  await judge("2c the same payment asked again in a second message: a second payment", "R2c", 2, [...first.told, ...second.told], id,
    [`first told ${JSON.stringify(first.told.map((t) => t.paymentId))}, second ${JSON.stringify(second.told.map((t) => t.paymentId))}`]);
}

// 2d. A model that calls a tool again when its result was an error, and no fault: one payment.
if (run("2d")) {
  const id = thread("s2d");
  const r = await ask(id, "pay ines 2300 R2d retrying");
  await judge("2d a payment whose result holds a JSON null, and a model that calls an errored tool again", "R2d", 1, r.told, id, [`provider requests: ${outcomes("R2d")}`]);
}

// 3. Model stream cuts.
if (run("3a")) {
  provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
  const id = thread("s3a");
  const r = await ask(id, "pay carol 3000 R3a");
  await judge("3a model stream reset after the tool_use block, before message_stop; the message run again", "R3a", 1, r.told, id,
    [`provider requests: ${outcomes("R3a")}; runs: ${r.attempts}`]);
}
if (run("3b")) {
  provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 2 } });
  const id = thread("s3b");
  const r = await ask(id, "pay carol 3100 R3b");
  await judge("3b model stream ends cleanly inside the call's arguments (no message_stop); the message run again", "R3b", 1, r.told, id,
    [`provider requests: ${outcomes("R3b")}; runs: ${r.attempts}`]);
}
// 3d. What LlamaIndex's agent, as shipped, hands a tool when the stream ends inside a call's arguments.
if (run("3d")) {
  const [sendPayment] = paymentTools(payments.url);
  const session = new AnthropicSession({ apiKey: "test", baseURL: provider.baseURL, maxRetries: 0 });
  const llm = new Anthropic({ model: "claude-sonnet-4-5", apiKey: "test", maxRetries: 0, session });
  let handed = 0;
  let raw = 0;
  const parsedOk: string[] = [];
  const received: unknown[] = [];
  const recorder = tool((input: unknown) => (received.push(input), "ok"), { name: "send_payment", description: "pay", parameters: { type: "object", properties: {} } as never });
  const reader = tool(() => "ok", { name: "check_balance", description: "read", parameters: { type: "object", properties: {} } as never });
  const runs = 20;
  for (let k = 1; k <= runs; k++) {
    provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 1 + (k % 10) } });
    received.length = 0;
    await agent({ llm, tools: [recorder, reader], timeout: 20 }).run("pay gina 1234567 R3d");
    const input = received[0] as Record<string, unknown> | undefined;
    if (input === undefined) continue;
    handed++;
    if ("rawInput" in input) raw++;
    if (sendPayment.input.safeParse(input).success) parsedOk.push(JSON.stringify(input));
  }
  probe("3d a cut stream as LlamaIndex's agent hands it to a tool (a probe; no payment made)", handed > 0, [
    `${handed} of ${runs} cut responses ran their cut call: ${raw} with {rawInput: "<the JSON that arrived>"}, ${handed - raw} parsed`,
    `our strict schema accepts ${parsedOk.length} of them ${parsedOk.join(" ")}`,
    `no error reached the agent or the app: the cut is silent`]);
}
// 3e. A model refusal (a classifier stopped the response inside the call's arguments; stop_reason "refusal").
if (run("3e")) {
  const id = thread("s3e");
  const r = await ask(id, "pay hal 3300 R3e refused");
  await judge("3e model refusal inside the call's arguments: not run, not retried (STREAM-13)", "R3e", 0, r.told, id,
    [`provider requests: ${outcomes("R3e")}; runs: ${r.attempts}`], outcomes("R3e").split(", ").length <= 2);
}
// 3f. What LlamaIndex's agent, as shipped, does when the model's stream is reset: a child process.
const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
if (run("3f")) {
  const child = spawn(process.execPath, [here("./probe-crash.js")], { env: { ...process.env, PROVIDER_URL: provider.baseURL }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("exit", (c) => resolve(c)));
  const firstError = err.split("\n").find((l) => /Error|terminated/.test(l)) ?? "";
  // Passes while LlamaIndex behaves as FRICTION 1 says (the process ends, run() never settles).
  probe("3f a model stream reset under LlamaIndex's agent as shipped (a probe, in a child process)", code !== 0 && !out.includes("settled"), [
    `child exit code ${code}; run() ${out.includes("settled") ? out.trim() : "never settled"}`,
    `stderr: ${firstError.trim().slice(0, 160)}`]);
}

// 4. SIGKILL after the payment (inside mock-payments' transaction), before the app knows; a new process,
// and the client sends the message again under the same id.
const worker = here("./worker.js");
async function runWorker(env: NodeJS.ProcessEnv, killOn?: string) {
  const child = spawn(process.execPath, [worker], { env, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  if (killOn !== undefined) onPayment = (reference) => void (reference === killOn && child.kill("SIGKILL"));
  const code = await new Promise<number | null>((resolve) => child.on("exit", (c, signal) => resolve(signal === "SIGKILL" ? -9 : c)));
  onPayment = undefined;
  const line = out.trim().split("\n").at(-1);
  const parsed = line ? (JSON.parse(line) as { told: Told[]; answeredBefore?: boolean }) : { told: [] as Told[] };
  return { code, told: parsed.told, answeredBefore: parsed.answeredBefore ?? false };
}
const workerEnv = (threadId: string, text: string) => ({
  ...process.env, DATABASE_URL, TRIAL_SCHEMA: SCHEMA, PAYMENTS_URL: payments.url, PROVIDER_URL: provider.baseURL, PLANT,
  THREAD: threadId, MESSAGE_ID: `m-${threadId}`, TEXT: text,
});
if (run("4")) {
  const id = thread("s4");
  const env = workerEnv(id, "pay dave 4000 R4");
  const first = await runWorker(env, "R4");
  const second = await runWorker(env);
  const third = await runWorker(env); // the reply was lost: the client sends it once more
  await judge("4 SIGKILL inside the payment; a new process, the client sends the message again (and once more)", "R4", 1, second.told, id,
    [`first process: ${first.code === -9 ? "killed (SIGKILL)" : `exited ${first.code}`}`,
      `the third send was answered from the app's table: ${third.answeredBefore}, told ${JSON.stringify(third.told.map((t) => t.paymentId))}`],
    first.code === -9 && third.answeredBefore && sameSet(third.told.map((t) => t.paymentId ?? "?"), second.told.map((t) => t.paymentId ?? "?")));
}

// 5. A double click: the same message, twice at once, on two app instances.
if (run("5")) {
  const other = await openApp({ ...common, owner: "second-instance" });
  const id = thread("s5");
  const results = await Promise.all([app.send(id, "m-s5", "pay erin 5000 R5"), other.send(id, "m-s5", "pay erin 5000 R5")]);
  const told = results.flatMap((r) => r.told);
  const distinct = [...new Set(told.filter((t) => t.status === "happened").map((t) => t.paymentId ?? "?"))];
  await judge("5 the same message twice at once on two instances (double click)", "R5", 1,
    distinct.map((p) => ({ callId: "-", tool: "send_payment", status: "happened" as const, paymentId: p, text: `told to ${told.filter((t) => t.paymentId === p).length} click(s)` })), id,
    results.map((r, i) => `click ${i + 1}: runs ${r.attempts}, answered from the app's table after its run: ${r.answeredBefore}; told ${r.told.map((t) => `${t.status}: ${t.text}`).join(" | ")}`),
    told.every((t) => t.status === "happened"));
  await other.close();
}

// 6. The payments API's lost response, a model that calls an errored tool again, and a refusal.
if (run("6a")) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const id = thread("s6a");
  const r = await ask(id, "pay frank 6000 R6a");
  await judge("6a payments API's response lost after it paid (drop_after_accept)", "R6a", 1, r.told, id, [`runs: ${r.attempts}`]);
}
if (run("6c")) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const id = thread("s6c");
  const r = await ask(id, "pay kim 6200 R6c retrying");
  await judge("6c the same lost response, and a model that calls an errored tool again", "R6c", 1, r.told, id, [`runs: ${r.attempts}`]);
}
if (run("6b")) {
  const id = thread("s6b");
  const r = await ask(id, "pay frank 6100 R6b EUX");
  await judge("6b payments API refuses (400 invalid currency EUX)", "R6b", 0, r.told, id);
}
if (run("6d")) {
  // A refusal fed back to a model that calls again: the second call is a new ask and is refused too.
  const id = thread("s6d");
  const r = await ask(id, "pay frank 6300 R6d EUX retrying");
  await judge("6d payments API refuses, and the model calls the errored tool again", "R6d", 0, r.told, id, [`provider requests: ${outcomes("R6d")}`]);
}

await app.close();
await payments.close();
await provider.close();
const failed = verdicts.filter((v) => !v.pass);
console.log(`\n${verdicts.length - failed.length}/${verdicts.length} situations pass (TURNS=${TURNS}${PLANT === "none" ? "" : `, PLANT=${PLANT}`})`);
if (process.env.KEEP !== "1") await dropSchemas();
process.exit(failed.length === 0 ? 0 : 1);
