// The trial's situations against real processes: mock-payments and mock-provider over loopback HTTP,
// PostgreSQL for the checkpoints and the ledger, a child process for the SIGKILL.
// Each situation is judged by mock-payments' effect log AND what the checkpoint committed AND what the
// user was told. PLANT=unguarded (keyed by tool_call id) or PLANT=random (no stable key) checks the oracle.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { Command } from "@langchain/langgraph";
import { RemoveMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { openApp, tellError, type Plant, type Told } from "./app.js";
import { ChatAnthropic } from "@langchain/anthropic";
import { ACCOUNT, paymentTools } from "./tools.js";
import { script } from "./model-script.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = process.env.TRIAL_SCHEMA ?? "h_trialgraph";
const PLANT = (process.env.PLANT ?? "none") as Plant;
const only = process.argv[2]?.split(",");

const admin = new pg.Client({ connectionString: DATABASE_URL });
await admin.connect();
await admin.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE; DROP SCHEMA IF EXISTS ${SCHEMA}_cp CASCADE`);
await admin.end();

// onEffect runs inside the payment's transaction, before the response is written: a SIGKILL sent from it
// lands after the payment and before the app can read the reply, record it in the ledger or checkpoint.
let onPayment: ((reference: string) => void) | undefined;
const payments = await startMockPayments({ requireIdempotencyKey: true, onEffect: (e) => onPayment?.(String((e.payload as { reference?: unknown }).reference)) });
const provider = await startMockProvider({ seed: "langgraph-trial", script, keepAliveTimeoutMs: 65_000 });
const common = { databaseUrl: DATABASE_URL, schema: SCHEMA, paymentsUrl: payments.url, providerUrl: provider.baseURL, plant: PLANT, leaseMs: 3_000, waitMs: 8_000, threadLeaseMs: 3_000, threadWaitMs: 20_000 };
const app = await openApp(common);

interface Judged { name: string; pass: boolean; lines: string[] }
const verdicts: Judged[] = [];
const thread = (name: string) => ({ configurable: { thread_id: `${name}-${PLANT}` } });

function effectsOf(reference: string) {
  return payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => (e.payload as { reference?: string }).reference === reference);
}

/** Payment ids the checkpoint's committed send_payment results hold. */
function committedPayments(messages: BaseMessage[]): string[] {
  const ids: string[] = [];
  for (const m of messages) {
    if (!ToolMessage.isInstance(m) || m.status === "error") continue;
    try {
      const body = JSON.parse(String(m.content)) as { id?: string };
      if (body.id?.startsWith("pay_")) ids.push(body.id);
    } catch {
      /* not JSON: an error text */
    }
  }
  return ids;
}

async function judge(name: string, reference: string, expected: number, told: Told[], config: object, extra: string[] = [], extraPass = true, committedExpected?: string[]) {
  const effects = effectsOf(reference);
  const effectIds = effects.map((e) => e.resourceId);
  const state = await app.graph.getState(config as never);
  const committed = committedPayments((state.values.messages ?? []) as BaseMessage[]);
  const toldHappened = told.filter((t) => t.status === "happened").map((t) => t.paymentId ?? "?");
  const toldNot = told.filter((t) => t.status === "did_not_happen");
  const checks: Array<[string, boolean]> = [
    [`effect log: ${effects.length} payment(s) for ${reference} (expected ${expected}) ${JSON.stringify(effectIds)}`, effects.length === expected],
    [`checkpoint committed ${JSON.stringify(committed)}`, sameSet(committed, committedExpected ?? effectIds)],
    [`told happened ${JSON.stringify(toldHappened)}; did not: ${toldNot.length}; may have: ${told.filter((t) => t.status === "may_have_happened").length}`,
      sameSet(toldHappened, effectIds) && (expected > 0 || toldNot.length > 0 || told.some((t) => t.status === "may_have_happened"))],
  ];
  const lines = [...checks.map(([text, ok]) => `  ${ok ? "ok  " : "FAIL"} ${text}`), ...extra.map((t) => `       ${t}`)];
  for (const t of told) lines.push(`       user told: ${t.status}: ${t.text}`);
  const pass = checks.every(([, ok]) => ok) && extraPass;
  verdicts.push({ name, pass, lines });
  console.log(`${pass ? "PASS" : "FAIL"} ${name}\n${lines.join("\n")}`);
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...new Set(a)].length === a.length && a.every((x) => b.includes(x));

async function ask(config: { configurable: Record<string, unknown> }, text: string | null, resume?: unknown) {
  const before = ((await app.graph.getState(config as never)).values.told ?? []).length as number;
  try {
    if (text !== null && resume === undefined) {
      // A user message, sent with the id the client minted for it (one per situation's message).
      const { thread_id: threadId, ...extra } = config.configurable;
      const r = await app.send(String(threadId), `m-${String(threadId)}`, text, extra);
      const interrupted = r.interrupted as Array<{ value?: { told?: Told[] } }> | undefined;
      return { told: r.told, interrupted, interruptTold: interrupted?.[0]?.value?.told ?? [] };
    }
    const input = resume !== undefined ? new Command({ resume }) : null;
    // Every run of a thread's graph holds its lock, a resume or a fork's run as a new message.
    const state = await app.withThread(String(config.configurable.thread_id), (graph) => graph.invoke(input as never, config as never));
    const interrupted = (state as { __interrupt__?: Array<{ value?: { told?: Told[] } }> }).__interrupt__;
    return { told: (state.told as Told[]).slice(before), interrupted, interruptTold: interrupted?.[0]?.value?.told ?? [] };
  } catch (error) {
    const e = tellError(error);
    return { told: [{ callId: "-", tool: "invoke", status: e.status === "unknown" ? "may_have_happened" : e.status, text: e.text } as Told], interrupted: undefined, interruptTold: [] as Told[] };
  }
}

const run = (name: string) => only === undefined || only.some((o) => name.startsWith(o));

// 1. interrupt() for approval. (a) before the payment in the paying node; (b) after it, in the same node.
if (run("1a")) {
  const config = { configurable: { ...thread("s1a").configurable, approval: "before" } };
  const first = await ask(config, "pay acme 1000 R1a");
  const paidAtInterrupt = effectsOf("R1a").length;
  const second = await ask(config, null, "yes");
  await judge("1a interrupt() before the payment, resumed with yes", "R1a", 1, [...first.told, ...second.told], config,
    [`interrupted: ${first.interrupted !== undefined}; payments while waiting for approval: ${paidAtInterrupt}`], paidAtInterrupt === 0);
}
if (run("1b")) {
  const config = { configurable: { ...thread("s1b").configurable, approval: "after" } };
  const first = await ask(config, "pay acme 1100 R1b");
  const paidAtInterrupt = effectsOf("R1b").length;
  const committedAtInterrupt = committedPayments((await app.graph.getState(config as never)).values.messages as BaseMessage[]);
  const second = await ask(config, null, "yes");
  const toldAtInterrupt = first.interruptTold.filter((t) => t.status === "happened").map((t) => t.paymentId);
  const ids = effectsOf("R1b").map((e) => e.resourceId);
  await judge("1b interrupt() after the payment in the same node (the node re-runs from its start on resume)", "R1b", 1, [...first.told, ...second.told], config,
    [`while the receipt question waited: ${paidAtInterrupt} payment(s) made, ${committedAtInterrupt.length} committed, told with the question: ${JSON.stringify(toldAtInterrupt)}`],
    sameSet(toldAtInterrupt as string[], ids));
}

// 2. A sibling call of the same AIMessage throws after the payment went through; the node's retry policy re-runs it.
if (run("2")) {
  payments.injectFault({ outcome: "fail_before_accept", operations: ["list_payments"] }, { times: 1 });
  const config = thread("s2");
  const r = await ask(config, "pay bob 2000 R2 and check balance");
  await judge("2 sibling read throws once after the payment; node retry policy re-runs the tools node", "R2", 1, r.told, config,
    [`payments API list_payments faults left: ${JSON.stringify(payments.faultState()).slice(0, 80)}`]);
}

// 2b. The user asks for the same payment twice; the model makes two identical calls in one response.
if (run("2b")) {
  const config = thread("s2b");
  const r = await ask(config, "pay bob 2100 R2b twice");
  await judge("2b two identical payment calls in one response (the user asked twice): two payments", "R2b", 2, r.told, config);
}

// 2c. The app trims the thread's history (RemoveMessage, as LangGraph's docs show for long threads), and the
// user then asks for the same payment again as a new message: a new payment, not the first one's answer.
if (run("2c")) {
  const config = thread("s2c");
  const first = await app.send(config.configurable.thread_id, "m-s2c-1", "pay ines 700 R2c");
  const messages = (await app.graph.getState(config as never)).values.messages as BaseMessage[];
  // The app's own write to the thread: under the thread's lock, as every run of its graph.
  await app.withThread(config.configurable.thread_id, (graph) => graph.updateState(config as never, { messages: messages.map((m) => new RemoveMessage({ id: m.id ?? "" })) } as never));
  const trimmed = ((await app.graph.getState(config as never)).values.messages as BaseMessage[]).length;
  const second = await app.send(config.configurable.thread_id, "m-s2c-2", "pay ines 700 R2c");
  const effects = effectsOf("R2c").map((e) => e.resourceId);
  const told = [...first.told, ...second.told];
  const secondIds = second.told.map((t) => t.paymentId);
  await judge("2c history trimmed, then the same payment asked again as a new message: a second payment", "R2c", 2, told, config,
    [`the trim left ${trimmed} message(s); after the second ask the thread holds ${((await app.graph.getState(config as never)).values.messages as BaseMessage[]).length}`,
      `the second ask was told ${JSON.stringify(secondIds)}, the first ${JSON.stringify(first.told.map((t) => t.paymentId))}`],
    secondIds.length === 1 && !first.told.some((t) => t.paymentId === secondIds[0]) && effects.length === 2,
    secondIds as string[]); // the trim removed the first turn's messages from the checkpoint
}

// 3. Model stream cuts and a regenerate.
if (run("3a")) {
  provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
  const config = thread("s3a");
  const r = await ask(config, "pay carol 3000 R3a");
  await judge("3a model stream reset after the tool_use block, before message_stop; the agent node retried", "R3a", 1, r.told, config,
    [`provider requests: ${provider.requests.filter((q) => JSON.stringify(q.body).includes("R3a")).map((q) => q.outcome).join(", ")}`]);
}
if (run("3b")) {
  provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 2 } });
  const config = thread("s3b");
  const r = await ask(config, "pay carol 3100 R3b");
  const amounts = payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => (e.payload as { payee?: string }).payee === "carol" && (e.payload as { reference?: string }).reference !== "R3a" && (e.payload as { reference?: string }).reference !== "R3c");
  await judge("3b model stream ends cleanly inside the call's arguments (no message_stop); the agent node retried", "R3b", 1, r.told, config,
    [`every carol payment besides R3a/R3c: ${JSON.stringify(amounts.map((e) => e.payload))}`], amounts.length === 1);
}
// 3d. What ChatAnthropic hands the graph when the stream ends inside a call's arguments, without the
// agent node's stop_reason check: a normal AIMessage whose call holds the JSON that arrived, parsed.
if (run("3d")) {
  const [sendPayment] = paymentTools(payments.url);
  const model = new ChatAnthropic({ model: "claude-sonnet-4-5", apiKey: "test", anthropicApiUrl: provider.baseURL, streaming: true, maxRetries: 0 })
    .bindTools([{ name: "send_payment", description: "pay", input_schema: { type: "object", properties: {} } }] as never);
  const asked = { payee: "gina", amount: 1234567, currency: "EUR", reference: "R3d" };
  let cut = 0;
  let flagged = 0;
  const accepted: string[] = [];
  const looser: string[] = [];
  for (let k = 1; k <= 60; k++) {
    provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 1 + (k % 20) } });
    const response = await model.invoke([{ role: "user", content: "pay gina 1234567 R3d" }]);
    const call = response.tool_calls?.[0];
    if (call === undefined) continue;
    cut++;
    if ((response.additional_kwargs as { stop_reason?: string }).stop_reason === undefined) flagged++;
    const args = call.args as { payee?: unknown; amount?: unknown };
    if (typeof args.payee === "string" && typeof args.amount === "number" && (args.payee !== asked.payee || args.amount !== asked.amount)) {
      looser.push(`${args.payee}/${args.amount}`); // a payee and an amount, but not the asked ones
    }
    const parsed = sendPayment.input.safeParse(call.args);
    if (parsed.success) {
      const { payee, amount, currency, reference } = parsed.data;
      if (JSON.stringify({ payee, amount, currency, reference }) !== JSON.stringify(asked)) accepted.push(JSON.stringify({ payee, amount, currency, reference }));
    }
  }
  const lines = [`${cut} cut responses came back as AIMessages with a tool call; ${flagged} without stop_reason (what the agent node refuses)`,
    `without that check our strict schema accepts ${accepted.length} cut call(s) that differ from the asked payment ${accepted.join(" ")}`,
    `${looser.length} cut call(s) held a payee and an amount other than the asked gina/1234567 (paid by a schema whose other fields are optional): ${looser.join(" ")}`];
  const pass = cut > 0 && flagged === cut;
  verdicts.push({ name: "3d a cut stream as ChatAnthropic returns it", pass, lines: lines.map((l) => `       ${l}`) });
  console.log(`${pass ? "PASS" : "FAIL"} 3d a cut stream as ChatAnthropic returns it (no payment made; the model called directly)\n${lines.map((l) => `       ${l}`).join("\n")}`);
}
if (run("3c")) {
  const config = thread("s3c");
  const first = await ask(config, "pay carol 3200 R3c");
  // Regenerate: fork from the checkpoint before the model call that made the payment.
  let fork: object | undefined;
  for await (const snap of app.graph.getStateHistory(config as never)) {
    if (snap.next.includes("agent") && (snap.values.messages as BaseMessage[]).length === 1) fork = snap.config;
  }
  const second = fork === undefined ? { told: [] as Told[] } : await ask(fork as { configurable: Record<string, unknown> }, null);
  const ids = provider.requests.filter((q) => JSON.stringify(q.body).includes("R3c")).flatMap((q) => q.toolUses.map((t) => t.id));
  await judge("3c regenerate: fork from the checkpoint before the model call; the call re-emitted under a new tool_call id", "R3c", 1, second.told, config,
    [`first answer told: ${first.told.map((t) => t.text).join(" | ")}`, `tool_use ids the model sent: ${ids.join(", ")}`], fork !== undefined);
}

// 4. SIGKILL after the payment, before the tools node's checkpoint; a new process, and the client sends
// the message again (the worker resumes a thread that has a step to run). LangGraph's durability decides
// which checkpoints exist at the kill: "async" (the default: written while the next step runs), "sync", "exit".
const worker = fileURLToPath(new URL("./worker.js", import.meta.url));
/** Runs one process of the app on a message; killOn: SIGKILL it inside the payment of that reference. */
async function runWorker(env: NodeJS.ProcessEnv, killOn?: string) {
  const started = startWorker(env);
  if (killOn !== undefined) onPayment = (reference) => void (reference === killOn && started.child.kill("SIGKILL"));
  const result = await started.done;
  onPayment = undefined;
  return result;
}
/** Starts one process of the app; `done` settles when it exits, with what it told its user. */
function startWorker(env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [worker], { env, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  return { child, done: workerDone(child, () => out) };
}
async function workerDone(child: ReturnType<typeof spawn>, output: () => string) {
  const code = await new Promise<number | null>((resolve) => child.on("exit", (c, signal) => resolve(signal === "SIGKILL" ? -9 : c)));
  const out = output();
  const line = out.trim().split("\n").at(-1);
  const parsed = line ? (JSON.parse(line) as { told: Told[]; answeredBefore?: boolean; error?: { status: string; text: string } }) : { told: [] as Told[] };
  const told = [...parsed.told];
  if (parsed.error) told.push({ callId: "-", tool: "invoke", status: parsed.error.status === "did_not_happen" ? "did_not_happen" : "may_have_happened", text: parsed.error.text });
  return { code, told, answeredBefore: parsed.answeredBefore ?? false };
}
const workerEnv = (threadId: string, text: string, more: Record<string, string> = {}) => ({
  ...process.env, DATABASE_URL, TRIAL_SCHEMA: SCHEMA, PAYMENTS_URL: payments.url, PROVIDER_URL: provider.baseURL, PLANT,
  THREAD: threadId, MESSAGE_ID: `m-${threadId}`, TEXT: text, ...more,
});

for (const [id, durability] of [["4a", "async"], ["4b", "sync"], ["4c", "exit"]] as const) {
  if (!run(id)) continue;
  const config = thread(`s${id}`);
  const reference = `R${id}`;
  const env = workerEnv(config.configurable.thread_id, `pay dave 4000 ${reference}`, { DURABILITY: durability });
  const first = await runWorker(env, reference);
  const afterKill = await app.graph.getState(config as never);
  const history: string[] = [];
  for await (const snap of app.graph.getStateHistory(config as never)) history.push(`${(snap.values.messages as BaseMessage[] | undefined)?.length ?? 0} msgs next=${snap.next.join("|") || "-"}`);
  const second = await runWorker(env);
  await judge(`${id} SIGKILL inside the payment (durability "${durability}"); a new process, the client sends the message again`, reference, 1, second.told, config,
    [`first process: ${first.code === -9 ? "killed (SIGKILL)" : `exited ${first.code}`}; checkpoints at the kill, newest first: ${history.join("; ") || "none"}`,
      `at the kill getState().next=${JSON.stringify(afterKill.next)}, last committed message: ${((afterKill.values.messages ?? []) as BaseMessage[]).at(-1)?.getType() ?? "none"}; the re-send ${second.answeredBefore ? "was answered from the checkpoint" : "ran the thread"}`], first.code === -9);
}

// 4d. The same kill with core's default lease (30 s) and wait (10 s): the restart comes inside the dead
// process's lease, so nobody can know yet whether the payment happened. Then the client sends the same
// message again after the lease, and once more after it was answered (its reply lost).
if (run("4d")) {
  const config = thread("s4d");
  const reference = "R4d";
  const env = workerEnv(config.configurable.thread_id, `pay dave 4100 ${reference}`, { DURABILITY: "sync", CORE_LEASES: "1" });
  const started = Date.now();
  const first = await runWorker(env, reference);
  const second = await runWorker(env);
  const secondAt = Date.now() - started;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, 31_000 - (Date.now() - started)))); // a client backing off
  const third = await runWorker(env);
  const fourth = await runWorker(env);
  const line = (r: { told: Told[] }) => r.told.map((t) => `${t.status}: ${t.text}`).join(" | ");
  await judge("4d SIGKILL inside the payment with core's default leases; re-sent inside the lease, after it, and once more", reference, 1, third.told, config,
    [`first process: ${first.code === -9 ? "killed (SIGKILL)" : `exited ${first.code}`}`,
      `re-send inside the lease answered ${Math.round(secondAt / 1000)} s after the start, told: ${line(second)}`,
      `re-send of the answered message told (answered from the checkpoint: ${fourth.answeredBefore}): ${line(fourth)}`],
    // Inside the lease the truth is "may have happened" (in_flight_elsewhere); the tools node's retry
    // policy (3 attempts x core's 10 s wait) may outlast the 30 s lease, take the claim over and answer.
    first.code === -9 && second.told.length > 0 && second.told.every((t) => t.status === "may_have_happened" || (t.status === "happened" && effectsOf(reference).some((e) => e.resourceId === t.paymentId))) && fourth.answeredBefore &&
      sameSet(fourth.told.map((t) => t.paymentId ?? "?"), third.told.map((t) => t.paymentId ?? "?")));
}

// 5. Two concurrent invokes on one thread (a double click), from two app instances (two workers).
if (run("5")) {
  const other = await openApp({ ...common, owner: "second-worker" });
  const config = thread("s5");
  // The same message id from both clicks: neither sees the other's message in the checkpoint yet.
  const send = (a: typeof app) => a.send(config.configurable.thread_id, "m-s5", "pay erin 5000 R5");
  const results = await Promise.allSettled([send(app), send(other)]);
  const told: Told[] = [];
  for (const r of results) {
    if (r.status === "fulfilled") told.push(...r.value.told);
    else told.push({ callId: "-", tool: "invoke", status: "may_have_happened", text: tellError(r.reason).text });
  }
  const distinct = [...new Set(told.filter((t) => t.status === "happened").map((t) => t.paymentId))];
  const effects = effectsOf("R5").map((e) => e.resourceId);
  // Both clicks are told; the judge compares the distinct ids told with the effect log.
  await judge("5 two concurrent invokes of one message on one thread (double click)", "R5", 1,
    distinct.map((id) => ({ callId: "-", tool: "send_payment", status: "happened", paymentId: id ?? "?", text: `told to ${told.filter((t) => t.paymentId === id).length} click(s)` })), config,
    told.map((t) => `click told: ${t.status}: ${t.text}`), sameSet(distinct as string[], effects));
  await other.close();
}

// 6. The payment API's lost response, and a refusal.
if (run("6a")) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const config = thread("s6a");
  const r = await ask(config, "pay frank 6000 R6a");
  await judge("6a payments API's response lost after it paid (drop_after_accept); node retry re-runs under the same key", "R6a", 1, r.told, config);
}
// 6c. The same lost response with a model that calls a tool again when its result was an error.
if (run("6c")) {
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const config = thread("s6c");
  const r = await ask(config, "pay kim 6200 R6c retrying");
  await judge("6c the same lost response, and a model that calls an errored tool again", "R6c", 1, r.told, config);
}
if (run("6b")) {
  const config = thread("s6b");
  const r = await ask(config, "pay frank 6100 R6b EUX");
  await judge("6b payments API refuses (400 invalid currency EUX)", "R6b", 0, r.told, config);
}

// 7. Two different messages at once on one thread. LangGraph OSS has no turn lease: both invokes read the
// same checkpoint. The overlap is forced: the first message's model response is held until the second
// send is either waiting for the thread's lock or done.
const hold = (text: string) => provider.setFaultRules([{ bodyContains: text, times: 1, fault: { kind: "hold", at: { event: 0 } } }]);
/** Sends waiting for the thread lock of this trial's checkpoint schema (pg_locks: an advisory lock not granted). */
async function lockWaiters(): Promise<number> {
  const r = await app.pool.query(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2 AND classid::bigint = (hashtext($1)::bigint & 4294967295)",
    [`${SCHEMA}_cp`]);
  return (r.rows[0] as { n: number }).n;
}
/** Resolves once `second` settled or a send waits for the lock (a synchronisation, not a timing assert). */
async function secondWaitsOrEnds(second: Promise<unknown>) {
  let settled = false;
  void second.finally(() => (settled = true)).catch(() => {});
  while (!settled && (await lockWaiters()) === 0) await new Promise((resolve) => setTimeout(resolve, 25));
  return settled ? "the second send ended while the first was held" : "the second send waited for the thread's lock";
}
const settledTold = (r: PromiseSettledResult<{ told: Told[] }>): Told[] =>
  r.status === "fulfilled" ? r.value.told : [{ callId: "-", tool: "invoke", status: "may_have_happened", text: tellError(r.reason).text }];
/** Leaves of the thread's checkpoint history: more than one is two branches, of which getState shows one. */
async function branches(config: object) {
  const ids: string[] = [];
  const parents = new Set<string>();
  for await (const snap of app.graph.getStateHistory(config as never)) {
    ids.push(String(snap.config.configurable?.checkpoint_id));
    if (snap.parentConfig) parents.add(String(snap.parentConfig.configurable?.checkpoint_id));
  }
  return { checkpoints: ids.length, leaves: ids.filter((id) => !parents.has(id)).length };
}
/**
 * Judges two clients' messages on one thread: the effect log holds `expected` payments of the references,
 * the thread's committed state (getState: the newest checkpoint's branch) holds both messages and exactly
 * those payments, and each client was told one payment, its own (distinct ids, together the effect log's).
 */
async function judgeTwo(name: string, references: string[], expected: number, clients: Array<{ label: string; messageId: string; told: Told[] }>, config: object, extra: string[] = [], extraPass = true) {
  const effectIds = [...new Set(references)].flatMap((r) => effectsOf(r).map((e) => e.resourceId));
  const state = await app.graph.getState(config as never);
  const messages = (state.values.messages ?? []) as BaseMessage[];
  const committed = committedPayments(messages);
  const toldIds = clients.map((c) => c.told.filter((t) => t.status === "happened").map((t) => t.paymentId ?? "?"));
  const missing = clients.filter((c) => !messages.some((m) => m.id === c.messageId)).map((c) => c.messageId);
  const { checkpoints, leaves } = await branches(config);
  const checks: Array<[string, boolean]> = [
    [`effect log: ${effectIds.length} payment(s) for ${[...new Set(references)].join(", ")} (expected ${expected}) ${JSON.stringify(effectIds)}`, effectIds.length === expected],
    [`checkpoint committed ${JSON.stringify(committed)}; messages of the thread missing from it: ${JSON.stringify(missing)} (history: ${checkpoints} checkpoints, ${leaves} branch(es))`, sameSet(committed, effectIds) && missing.length === 0],
    [`told ${clients.map((c, i) => `${c.label} ${JSON.stringify(toldIds[i])}`).join(", ")}`,
      toldIds.every((ids) => ids.length === 1) && sameSet(toldIds.flat(), effectIds)],
  ];
  const lines = [...checks.map(([text, ok]) => `  ${ok ? "ok  " : "FAIL"} ${text}`), ...extra.map((t) => `       ${t}`)];
  for (const c of clients) for (const t of c.told) lines.push(`       ${c.label} told: ${t.status}: ${t.text}`);
  const pass = checks.every(([, ok]) => ok) && extraPass;
  verdicts.push({ name, pass, lines });
  console.log(`${pass ? "PASS" : "FAIL"} ${name}\n${lines.join("\n")}`);
}

// 7a: two different payments; 7b: the same ask sent twice as two messages (two ids), which the runner,
// one message after the other, answers with two payments (two turn indexes). Two app instances.
for (const [id, first, second, references] of [
  ["7a", "pay bob 2100 R7a1", "pay carol 3300 R7a2", ["R7a1", "R7a2"]],
  ["7b", "pay dan 2200 R7b", "pay dan 2200 R7b", ["R7b"]],
] as const) {
  if (!run(id)) continue;
  const other = await openApp({ ...common, owner: "second-instance" });
  const config = thread(`s${id}`);
  const threadId = config.configurable.thread_id;
  hold(first);
  const a = app.send(threadId, `m-${id}-1`, first);
  await provider.waitForHold(undefined, { timeoutMs: 30_000 });
  const b = other.send(threadId, `m-${id}-2`, second);
  const overlap = await secondWaitsOrEnds(b);
  if (provider.held.length > 0) provider.release(); // without the lock the second send may have ended it
  provider.setFaultRules([]);
  const [ra, rb] = await Promise.allSettled([a, b]);
  await judgeTwo(id === "7a" ? "7a two different messages at once on one thread (two app instances): two payments" : "7b the same ask sent twice at once as two messages (two ids): two payments, as the runner makes them one after the other",
    [...references], 2, [{ label: "client 1", messageId: `m-${id}-1`, told: settledTold(ra) }, { label: "client 2", messageId: `m-${id}-2`, told: settledTold(rb) }], config, [overlap]);
  await other.close();
}

// 7c, 7d: the first message's process dies (SIGKILL) or stops (SIGSTOP) inside its payment while the
// second message waits for the thread. A dead holder's connection ends and the lock with it. A stopped
// holder's session idles past threadLeaseMs and the server ends it; when it runs again, nothing it writes
// may reach the checkpoint (its writes go over that session). Its client then sends its message again.
for (const [id, signal] of [["7c", "SIGKILL"], ["7d", "SIGSTOP"]] as const) {
  if (!run(id)) continue;
  const config = thread(`s${id}`);
  const threadId = config.configurable.thread_id;
  const firstText = `pay gus ${id === "7c" ? 7100 : 7300} R${id}1`;
  const aEnv = workerEnv(threadId, firstText, { MESSAGE_ID: `m-${id}-1`, DURABILITY: "sync" });
  hold(firstText);
  const a = startWorker(aEnv);
  await provider.waitForHold(undefined, { timeoutMs: 30_000 });
  let signalled = false;
  onPayment = (reference) => {
    if (reference !== `R${id}1` || signalled) return;
    signalled = true;
    a.child.kill(signal);
  };
  const b = app.send(threadId, `m-${id}-2`, `pay hal 7200 R${id}2`);
  const overlap = await secondWaitsOrEnds(b);
  if (provider.held.length > 0) provider.release(); // without the lock the second send may have ended it
  provider.setFaultRules([]);
  const rb = (await Promise.allSettled([b]))[0];
  onPayment = undefined;
  const extra = [overlap, `first process: ${signal} inside its payment (${signalled ? "sent" : "never sent: it made no payment"})`];
  let aTold: Told[] = [];
  let writtenAfterResume = 0;
  if (signal === "SIGSTOP") {
    const before = (await branches(config)).checkpoints;
    a.child.kill("SIGCONT");
    const resumed = await a.done;
    aTold = resumed.told;
    writtenAfterResume = (await branches(config)).checkpoints - before;
    extra.push(`the stopped process, run again once the second message was answered, exited ${resumed.code}; checkpoints it wrote after: ${writtenAfterResume}`);
    for (const t of resumed.told) extra.push(`client 1's first send told: ${t.status}: ${t.text}`);
  } else {
    const killed = await a.done;
    extra.push(`first process exited ${killed.code === -9 ? "killed (SIGKILL)" : killed.code}`);
  }
  // The first client never heard back (or was told to send again): it sends its message again.
  const resend = await runWorker(aEnv);
  extra.push(`client 1's re-send answered from the checkpoint: ${resend.answeredBefore}`);
  const effectIds = effectsOf(`R${id}1`).map((e) => e.resourceId);
  // What the stopped process told its own client must be true: nothing, "send again", or the payment made.
  const firstTrue = aTold.every((t) => t.status !== "happened" || effectIds.includes(t.paymentId ?? "?")) && aTold.every((t) => t.status !== "did_not_happen");
  await judgeTwo(`${id} the first message's process ${signal === "SIGKILL" ? "killed" : "stopped (SIGSTOP)"} inside its payment while a second message waits for the thread`,
    [`R${id}1`, `R${id}2`], 2, [{ label: "client 1 (re-send)", messageId: `m-${id}-1`, told: resend.told }, { label: "client 2", messageId: `m-${id}-2`, told: settledTold(rb) }], config,
    extra, signalled && writtenAfterResume === 0 && firstTrue);
}

// 7e (branch h-langgraph): the first message's process stopped (SIGSTOP) while its model response is held,
// before any payment; the second send takes the thread once the stopped holder's session ends, resumes the
// first message (pays it) and answers its own; then the stopped process runs again: its model response
// arrives and its agent node commits, its tools node is answered from the ledger. Since the package's tools
// node throws a stale claim for a person (LANGGRAPH-6), 7d's stopped process writes nothing after it runs
// again even without the fence; here its agent node's write comes first, so only the fence stops it.
if (run("7e")) {
  const id = "7e";
  const config = thread(`s${id}`);
  const threadId = config.configurable.thread_id;
  const firstText = `pay ivy 7500 R${id}1`;
  const aEnv = workerEnv(threadId, firstText, { MESSAGE_ID: `m-${id}-1`, DURABILITY: "sync" });
  hold(firstText);
  const a = startWorker(aEnv);
  await provider.waitForHold(undefined, { timeoutMs: 30_000 });
  provider.setFaultRules([]);
  a.child.kill("SIGSTOP");
  const b = app.send(threadId, `m-${id}-2`, `pay hal 7600 R${id}2`);
  const overlap = await secondWaitsOrEnds(b);
  const rb = (await Promise.allSettled([b]))[0];
  const extra = [overlap, "first process: SIGSTOP while its model response was held (no payment made by it before)"];
  const before = (await branches(config)).checkpoints;
  if (provider.held.length > 0) provider.release();
  a.child.kill("SIGCONT");
  const resumed = await a.done;
  const writtenAfterResume = (await branches(config)).checkpoints - before;
  extra.push(`the stopped process, run again once the second message was answered, exited ${resumed.code}; checkpoints it wrote after: ${writtenAfterResume}`);
  for (const t of resumed.told) extra.push(`client 1's first send told: ${t.status}: ${t.text}`);
  const resend = await runWorker(aEnv);
  extra.push(`client 1's re-send answered from the checkpoint: ${resend.answeredBefore}`);
  const effectIds = effectsOf(`R${id}1`).map((e) => e.resourceId);
  const firstTrue = resumed.told.every((t) => t.status !== "happened" || effectIds.includes(t.paymentId ?? "?")) && resumed.told.every((t) => t.status !== "did_not_happen");
  await judgeTwo(`${id} the first message's process stopped (SIGSTOP) while its model response was held, before its payment, while a second message waits for the thread`,
    [`R${id}1`, `R${id}2`], 2, [{ label: "client 1 (re-send)", messageId: `m-${id}-1`, told: resend.told }, { label: "client 2", messageId: `m-${id}-2`, told: settledTold(rb) }], config,
    extra, writtenAfterResume === 0 && firstTrue);
}

await app.close();
await payments.close();
await provider.close();
const failed = verdicts.filter((v) => !v.pass);
console.log(`\n${verdicts.length - failed.length}/${verdicts.length} situations pass${PLANT === "none" ? "" : ` (PLANT=${PLANT})`}`);
if (PLANT === "none" && process.env.KEEP !== "1") {
  const drop = new pg.Client({ connectionString: DATABASE_URL });
  await drop.connect();
  await drop.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE; DROP SCHEMA IF EXISTS ${SCHEMA}_cp CASCADE`);
  await drop.end();
}
process.exit(failed.length === 0 ? 0 : 1);
