// The game day: incidents against real worker processes (dist/worker.js), a redis-server of our own
// (incident 1 restarts it), the shared PostgreSQL under a schema of our own, mock-provider and
// mock-payments in this process. Each incident prints what the operator saw (CLI output), what
// was done, the payments' effect log and what the conversation store holds, and a verdict.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { startMockProvider, lastToolResults, lastUserText, say, toolUse, turn } from "@dispatch-once/mock-provider";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = `gameday_trialops_${process.pid}`;
const REDIS_PORT = 6391 + (process.pid % 100);
const REDIS_URL = `redis://127.0.0.1:${REDIS_PORT}`;
const PREFIX = `trialops-${process.pid}`;
const only = process.argv[2];

const provider = await startMockProvider({
  seed: "gameday",
  script: (request) => {
    if (lastToolResults(request).length > 0) return turn(say("Done: the payment was sent."));
    const m = /pay (\w+) (\d+) ref (\S+)/.exec(lastUserText(request));
    if (m === null) return turn(say("Hello! Ask me to pay someone."));
    return turn(say("Paying."), toolUse("send_payment", { payee: m[1], amount: Number(m[2]), currency: "EUR", reference: m[3], memo: "As asked" }, { reword: ["memo"] }));
  },
});
const payments = await startMockPayments({ requireIdempotencyKey: true });

// --- our own redis-server (never the shared one)
let redis: ChildProcess | undefined;
const redisDir = new URL("../.redis/", import.meta.url).pathname;
mkdirSync(redisDir, { recursive: true });
async function redisStart() {
  redis = spawn("redis-server", ["--port", String(REDIS_PORT), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", redisDir, "--maxmemory-policy", "noeviction"], { stdio: "ignore" });
  for (let i = 0; i < 100; i++) { try { execFileSync("redis-cli", ["-p", String(REDIS_PORT), "ping"], { stdio: "ignore" }); return; } catch { await sleep(50); } }
  throw new Error("redis-server did not start");
}
async function redisRestart() {
  const old = redis!;
  old.kill("SIGKILL"); // a crash: no snapshot, nothing persisted
  await new Promise((r) => old.once("exit", r));
  await redisStart();
}

type Reply = { status: string; text: string; exit: number | null; stderr: string; effects?: { name: string; key: string; effect: string }[]; calls?: unknown[]; code?: string };
function worker(ledger: "redis" | "postgres", c: string, m: string, text: string, extra: Record<string, string> = {}) {
  const env = { ...process.env, LEDGER: ledger, APP_SCHEMA: SCHEMA, APP_REDIS_URL: REDIS_URL, APP_REDIS_PREFIX: PREFIX, PROVIDER_URL: provider.baseURL, PAYMENTS_URL: payments.url, DATABASE_URL, ...extra };
  const child = spawn(process.execPath, ["dist/worker.js", c, m, text], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = ""; let err = "";
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (err += d));
  const reply = new Promise<Reply>((resolve) => child.on("exit", (code, signal) => {
    let parsed: Partial<Reply> = { status: `killed(${signal})`, text: "" };
    try { parsed = JSON.parse(out.trim().split("\n").pop() ?? ""); } catch { /* killed */ }
    resolve({ ...(parsed as Reply), exit: code, stderr: err.trim().split("\n").filter((l) => !l.includes("ExperimentalWarning")).join("\n").slice(0, 1500) });
  }));
  return { child, reply };
}
// Asynchronous: mock-payments lives in this process, and a reconcile probe must reach it meanwhile.
async function cli(ledger: "redis" | "postgres" | "none", ...args: string[]) {
  const l = ledger === "redis" ? ["-l", REDIS_URL, "--prefix", PREFIX] : ledger === "postgres" ? ["-l", DATABASE_URL, "--schema", SCHEMA, "--table", "tool_calls"] : [];
  const argv = [...args.slice(0, 1), ...(args[0] === "turns" || args[0] === "audit" ? [] : l), ...args.slice(1)];
  const child = spawn("node_modules/.bin/dispatch-once", argv, { env: { ...process.env, PAYMENTS_URL: payments.url, DISPATCH_ONCE_RETENTION: "24h" } });
  let stdout = ""; let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const code = await new Promise<number>((r) => child.on("close", (c) => r(c ?? -1)));
  const out = stdout + (stderr ? `[stderr] ${stderr}` : "");
  const shown = argv.map((a) => (a === DATABASE_URL ? "$PG" : a === REDIS_URL ? "$REDIS" : a)).join(" ");
  log(`$ dispatch-once ${shown}   # exit ${code}\n${out.trimEnd()}`);
  return { code, out };
}
const lines: string[] = [];
function log(s: string) { lines.push(s); console.log(s); }
const paidFor = (ref: string) => payments.effects().filter((e) => (e.payload as { reference?: string }).reference === ref && e.kind === "payment_created");
const readStore = new PostgresConversationStore({ connectionString: DATABASE_URL, schema: SCHEMA });
async function committed(c: string) {
  const turns = await readStore.log(c).catch(() => []);
  return JSON.stringify(turns).match(/pay_[0-9a-f]+/g) ?? [];
}
async function waitFor(cond: () => boolean, ms = 15000) { for (let t = 0; t < ms && !cond(); t += 25) await sleep(25); if (!cond()) throw new Error("timed out waiting"); }
const holdAfterCall = (c: string) => provider.setFaultPlan((req) => (lastUserText(req).includes(c) && lastToolResults(req).length === 0 ? { kind: "hold", at: { afterToolUseStop: 0 } } : undefined));
const verdicts: { incident: string; verdict: string; payments: number; committed: string[] }[] = [];
async function verdict(incident: string, ref: string, verdict: string) {
  const paid = paidFor(ref);
  const com = await committed(ref);
  log(`effect log for ${ref}: ${JSON.stringify(paid.map((e) => ({ key: e.idempotencyKey, id: e.resourceId, memo: (e.payload as { memo?: string }).memo })))}\ncommitted payment ids: ${JSON.stringify(com)}\nVERDICT ${incident}: ${verdict}`);
  verdicts.push({ incident, verdict, payments: paid.length, committed: com });
}
const rowsOf = (out: string) => out.trim().split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as { key: string; fence: number; state: string });

// 1. Redis (the ledger) crashes and restarts, losing every row, while payments are in flight and after some completed.
async function incident1() {
  log("\n=== 1. Redis ledger restarted (rows gone) ===");
  // 1a: paid, worker killed before message_stop, Redis restarts, the queue redelivers.
  const a = "i1a";
  holdAfterCall(a);
  const w = worker("redis", a, "m1", `pay acme 1200 ref ${a}`);
  await waitFor(() => paidFor(a).length > 0);
  await sleep(300); // the row completes
  await cli("redis", "list", "--conversation", a);
  w.child.kill("SIGKILL"); await w.reply;
  provider.setFaultPlan(undefined);
  await redisRestart();
  log("(redis-server killed and restarted: every ledger row is gone)");
  await cli("redis", "list", "--conversation", a);
  await sleep(4500); // the turn lease (4 s) lapses
  await cli("postgres", "turns", "--stalled", "--store", DATABASE_URL, "--schema", SCHEMA, "--ledger", REDIS_URL, "--ledger-prefix", PREFIX);
  const r = await worker("redis", a, "m1", `pay acme 1200 ref ${a}`).reply;
  log(`re-send told the user: ${JSON.stringify({ status: r.status, text: r.text, effects: r.effects, calls: r.calls })}\nits stderr: ${r.stderr}`);
  const list = await cli("redis", "list", "--conversation", a, "--json");
  const row = rowsOf(list.out)[0];
  if (row && row.state === "unknown") {
    await cli("redis", "inspect", row.key);
    await cli("redis", "reconcile", row.key, "--tools", "dist/tools.js");
    const r2 = await worker("redis", a, "m1", `pay acme 1200 ref ${a}`).reply;
    log(`second re-send told the user: ${JSON.stringify({ status: r2.status, text: r2.text })}`);
  }
  await verdict("1a redis restart after payment, re-send", a, paidFor(a).length === 1 ? "one payment" : `${paidFor(a).length} payments`);

  // 1b: the payment in flight at the downstream when Redis restarts.
  const b = "i1b";
  payments.injectFault({ latencyMs: 600_000 }, { times: 1 });
  const wb = worker("redis", b, "m1", `pay bob 700 ref ${b}`);
  await waitFor(() => payments.inFlight().length > 0);
  await redisRestart();
  log("(redis-server restarted while the payment was in flight downstream)");
  payments.releaseLatency();
  const rb = await wb.reply;
  log(`the in-flight worker told the user: ${JSON.stringify({ status: rb.status, text: rb.text, code: rb.code, effects: rb.effects })}\nits stderr: ${rb.stderr}`);
  await cli("redis", "list", "--conversation", b);
  await cli("postgres", "turns", "--failed", "--store", DATABASE_URL, "--schema", SCHEMA, "--conversation", b);
  const rb2 = await worker("redis", b, "m1", `pay bob 700 ref ${b}`).reply;
  log(`re-send told the user: ${JSON.stringify({ status: rb2.status, text: rb2.text, effects: rb2.effects, calls: rb2.calls })}`);
  await cli("redis", "list", "--conversation", b);
  await verdict("1b redis restart while the payment was in flight", b, paidFor(b).length === 1 ? "one payment" : `${paidFor(b).length} payments`);
}

// 2. A zombie: SIGSTOP mid-payment past its lease, a re-send takes over, then SIGCONT.
async function incident2() {
  log("\n=== 2. worker SIGSTOPped mid-payment past its leases (zombie) ===");
  const c = "i2";
  payments.injectFault({ latencyMs: 1500 }, { times: 1 });
  const z = worker("postgres", c, "m1", `pay carol 900 ref ${c}`);
  await waitFor(() => payments.inFlight().length > 0);
  z.child.kill("SIGSTOP");
  log(`(worker ${z.child.pid} SIGSTOPped with its payment in flight downstream)`);
  await sleep(5000); // claim lease 3 s, turn lease 4 s
  const stuck = rowsOf((await cli("postgres", "list", "--conversation", c, "--json")).out)[0];
  await cli("postgres", "list", "--conversation", c);
  await cli("postgres", "turns", "--stalled", "--store", DATABASE_URL, "--schema", SCHEMA, "--ledger", DATABASE_URL, "--ledger-schema", SCHEMA, "--ledger-table", "tool_calls");
  // The tempting wrong move: "the worker is dead, nothing happened". It is a keyed write: allowed, no grace.
  if (stuck) await cli("postgres", "resolve", stuck.key, "--not-performed", "--reason", "worker looks dead", "--expected-fence", String(stuck.fence), "--actor", "oncall");
  const r = await worker("postgres", c, "m1", `pay carol 900 ref ${c}`).reply;
  log(`re-send (another worker) told the user: ${JSON.stringify({ status: r.status, text: r.text })}`);
  z.child.kill("SIGCONT");
  const rz = await z.reply;
  log(`the zombie, woken, told the user: ${JSON.stringify({ status: rz.status, text: rz.text, code: rz.code, effects: rz.effects })}\nits stderr: ${rz.stderr}`);
  const rows = rowsOf((await cli("postgres", "list", "--conversation", c, "--json")).out);
  if (rows[0]) await cli("postgres", "inspect", rows[0].key);
  await verdict("2 zombie worker", c, paidFor(c).length === 1 && (await committed(c)).length === 1 ? "one payment, committed once" : "CHECK");
}

// 3. A deploy changes the tool's identity (memo joins it) while a message is stalled after its payment.
async function incident3() {
  log("\n=== 3. deploy changes send_payment's identity while a paid message is stalled ===");
  const c = "i3";
  holdAfterCall(c);
  const w = worker("postgres", c, "m1", `pay dan 450 ref ${c}`);
  await waitFor(() => paidFor(c).length > 0);
  await sleep(300);
  w.child.kill("SIGKILL"); await w.reply;
  await cli("none", "audit", "dist/tools.js", "--ledger", DATABASE_URL, "--schema", SCHEMA, "--table", "tool_calls");
  provider.setFaultPlan(undefined);
  log("(worker killed after the payment; the deploy of TOOLS_VERSION=2 rolls out: identity now includes memo)");
  execFileSync(process.execPath, ["-e", ""]);
  // Before the rollout: the new release's module against the production ledger (the runbook step).
  process.env.TOOLS_VERSION = "2";
  await cli("none", "audit", "dist/tools.js", "--ledger", DATABASE_URL, "--schema", SCHEMA, "--table", "tool_calls", "--strict");
  delete process.env.TOOLS_VERSION;
  await sleep(4500);
  const r = await worker("postgres", c, "m1", `pay dan 450 ref ${c}`, { TOOLS_VERSION: "2" }).reply;
  log(`re-send on the new deploy told the user: ${JSON.stringify({ status: r.status, text: r.text })}`);
  await cli("postgres", "list", "--conversation", c);
  await verdict("3 identity change mid-flight", c, paidFor(c).length === 1 ? "one payment" : `${paidFor(c).length} PAYMENTS (double payment)`);
}

// 4. Downstream outage leaves unknown rows; reconcile; resolve; wrong resolutions.
async function incident4() {
  log("\n=== 4. unknown rows after a downstream outage ===");
  const a = "i4a"; // the payment was made, the answer lost
  payments.setGlobalFault({ outcome: "drop_after_accept" });
  const ra = await worker("postgres", a, "m1", `pay erin 300 ref ${a}`).reply;
  payments.setGlobalFault(null);
  log(`user told: ${JSON.stringify({ status: ra.status, text: ra.text })}`);
  const b = "i4b"; // 503: nothing made, but the tool cannot know
  payments.setGlobalFault({ outcome: "fail_before_accept" });
  const rb = await worker("postgres", b, "m1", `pay fay 400 ref ${b}`).reply;
  payments.setGlobalFault(null);
  log(`user told: ${JSON.stringify({ status: rb.status, text: rb.text })}`);
  const unknown = rowsOf((await cli("postgres", "list", "--state", "unknown", "--json")).out);
  await cli("postgres", "list", "--state", "unknown");
  await cli("postgres", "turns", "--failed", "--store", DATABASE_URL, "--schema", SCHEMA);
  const rowA = unknown.find((r) => r.key && paidFor(a).some((e) => e.idempotencyKey === r.key));
  const rowB = unknown.find((r) => r !== rowA);
  if (rowA) {
    await cli("postgres", "resolve", rowA.key, "--not-performed", "--reason", "wrong fence on purpose", "--expected-fence", String(rowA.fence + 1), "--actor", "oncall");
    await cli("postgres", "reconcile", rowA.key, "--tools", "dist/tools.js");
    await cli("postgres", "resolve", rowA.key, "--not-performed", "--reason", "after reconcile, on purpose", "--current-fence", "--actor", "oncall");
  }
  if (rowB) {
    await cli("postgres", "reconcile", rowB.key, "--tools", "dist/tools.js");
    await cli("postgres", "resolve", rowB.key, "--failed", "nothing at the bank", "--reason", "no payment with ref i4b", "--expected-fence", String(rowB.fence), "--actor", "oncall");
    await cli("postgres", "resolve", rowB.key, "--not-performed", "--reason", "no payment with ref i4b in GET /v1/payments", "--expected-fence", String(rowB.fence), "--actor", "oncall");
  }
  await cli("postgres", "turns", "--failed", "--store", DATABASE_URL, "--schema", SCHEMA);
  const ra2 = await worker("postgres", a, "m1", `pay erin 300 ref ${a}`).reply;
  const rb2 = await worker("postgres", b, "m1", `pay fay 400 ref ${b}`).reply;
  log(`re-sends told: ${JSON.stringify([{ status: ra2.status, text: ra2.text }, { status: rb2.status, text: rb2.text }])}`);
  await verdict("4a unknown (made), reconciled", a, paidFor(a).length === 1 ? "one payment" : `${paidFor(a).length} payments`);
  await verdict("4b unknown (not made), resolved not performed", b, paidFor(b).length === 1 ? "one payment" : `${paidFor(b).length} payments`);

  // 4c: an unknown row for real: a keyed payment whose row Redis lost, re-sent by a release without
  // the probe: the re-worded memo meets the stored key downstream (422, request_mismatch).
  const c = "i4c";
  holdAfterCall(c);
  const w = worker("redis", c, "m1", `pay hana 650 ref ${c}`, { TOOLS_NO_PROBE: "1" });
  await waitFor(() => paidFor(c).length > 0);
  await sleep(300);
  w.child.kill("SIGKILL"); await w.reply;
  provider.setFaultPlan(undefined);
  await redisRestart();
  await sleep(4500);
  const rc = await worker("redis", c, "m1", `pay hana 650 ref ${c}`, { TOOLS_NO_PROBE: "1" }).reply;
  log(`user told: ${JSON.stringify({ status: rc.status, text: rc.text, effects: rc.effects })}\nits stderr: ${rc.stderr}`);
  const row = rowsOf((await cli("redis", "list", "--state", "unknown", "--json")).out)[0];
  await cli("redis", "list", "--state", "unknown");
  await cli("postgres", "turns", "--failed", "--store", DATABASE_URL, "--schema", SCHEMA, "--conversation", c);
  if (row) {
    await cli("redis", "inspect", row.key);
    // Wrong resolutions first: a stale fence, a --failed within the grace, a --completed on a wrong guess is not checked (shown, not run).
    await cli("redis", "resolve", row.key, "--not-performed", "--reason", "stale look", "--expected-fence", String(row.fence - 1 || 7), "--actor", "oncall");
    await cli("redis", "resolve", row.key, "--failed", "nothing at the bank", "--reason", "guess", "--expected-fence", String(row.fence), "--actor", "oncall");
    await cli("redis", "reconcile", row.key, "--tools", "dist/tools.js");
    await cli("redis", "resolve", row.key, "--not-performed", "--reason", "after the probe settled it", "--current-fence", "--actor", "oncall");
    await cli("redis", "inspect", row.key);
  }
  const rc2 = await worker("redis", c, "m1", `pay hana 650 ref ${c}`).reply;
  log(`re-send told: ${JSON.stringify({ status: rc2.status, text: rc2.text })}`);
  await verdict("4c unknown row (request_mismatch after a Redis restart), reconciled", c, paidFor(c).length === 1 && (await committed(c)).length === 1 ? "one payment, committed once" : "CHECK");
}

// 5. Stalled message; failed turn; sweep during the re-send window.
async function incident5() {
  log("\n=== 5. stalled message, sweep in its re-send window ===");
  const c = "i5";
  holdAfterCall(c);
  const w = worker("postgres", c, "m1", `pay gus 250 ref ${c}`);
  await waitFor(() => paidFor(c).length > 0);
  await sleep(300);
  w.child.kill("SIGKILL"); await w.reply;
  provider.setFaultPlan(undefined);
  await sleep(4500);
  await cli("postgres", "turns", "--stalled", "--store", DATABASE_URL, "--schema", SCHEMA, "--ledger", DATABASE_URL, "--ledger-schema", SCHEMA, "--ledger-table", "tool_calls");
  await cli("postgres", "turns", "--failed", "--store", DATABASE_URL, "--schema", SCHEMA, "--conversation", c);
  await cli("postgres", "sweep", "--retention", "1h");
  await cli("redis", "sweep", "--retention", "1h");
  const r = await worker("postgres", c, "m1", `pay gus 250 ref ${c}`).reply;
  log(`re-send told: ${JSON.stringify({ status: r.status, text: r.text })}`);
  await cli("postgres", "turns", "--stalled", "--store", DATABASE_URL, "--schema", SCHEMA);
  await verdict("5 stalled message re-sent after sweep", c, paidFor(c).length === 1 && (await committed(c)).length === 1 ? "one payment, committed once" : "CHECK");
}

const incidents: Record<string, () => Promise<void>> = { incident1, incident2, incident3, incident4, incident5 };
try {
  await redisStart();
  for (const [name, run] of Object.entries(incidents)) {
    if (only !== undefined && only !== name) continue;
    try { await run(); } catch (error) { log(`INCIDENT ${name} threw: ${(error as Error).stack}`); }
  }
} finally {
  writeFileSync(new URL(`../.verdicts-${only ?? "all"}.json`, import.meta.url), JSON.stringify(verdicts, null, 1));
  await readStore.close();
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await admin.end();
  redis?.kill("SIGKILL");
  await provider.close();
  await payments.close();
}
process.exit(0);
