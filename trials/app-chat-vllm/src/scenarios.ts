// The trial's situations, each against real processes: the mocks run in this process (as their
// READMEs embed them), the chat endpoint is dist/server.js (one or two processes, killed and
// restarted at will), PostgreSQL holds both stores. Oracle per conversation: mock-payments' effect
// log, against what the conversation store committed and what each HTTP reply told the user.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import http from "node:http";
import net from "node:net";
import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { call, lastUserText, respond, startMockOpenAI, text as textItem, type ResponsesRequest } from "@dispatch-once/mock-openai";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import type { Reply } from "./app.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const RUN = process.env.TRIAL_TAG ? `${process.env.TRIAL_TAG}_${process.pid}` : String(process.pid);
const SCHEMA = `chat_trial_${RUN}`;
const only = process.argv[2];

/** The request carries the outputs of this message's calls: its last input item is a call's output. */
const hasToolOutput = (req: ResponsesRequest) => Array.isArray(req.input) && (req.input.at(-1) as { type?: string } | undefined)?.type === "function_call_output";
const toolNames = (req: ResponsesRequest) => JSON.stringify(req.tools ?? []);
// The open-weights model, scripted: "pay <payee> <amount> [<currency>] ref <reference>" makes one
// payment; "split <a> <n> <b> <m> ref <r>" two payments and a balance check in one response
// (parallel tool calls); "balance" checks the balance; anything else is small talk.
const mock = await startMockOpenAI({
  seed: "chat-trial",
  timing: { beforeCompletedMs: 40 },
  script: (request) => {
    if (hasToolOutput(request)) {
      // An honest model: it reads the last tool outputs before it answers.
      const outs = (request.input as { type?: string; output?: string }[]).filter((i) => i.type === "function_call_output").slice(-3).map((i) => i.output ?? "");
      return respond(textItem(outs.some((o) => o.includes('"error"')) ? "The payment did not go through." : "Done: the payment was sent."));
    }
    const said = lastUserText(request) ?? "";
    const payName = toolNames(request).includes("make_payment") ? "make_payment" : "send_payment"; // after the rename
    // The model pays, then checks the balance: on Chat Completions a call is final (and dispatched)
    // at the next index's first fragment, so the payment runs before finish_reason; a lone call is
    // final only at finish_reason itself (openai README, first bullet of its Chat Completions map).
    const pay = /pay (\S+) (\d+)(?: ([A-Z]{3}))? ref (\S+)/.exec(said);
    if (pay !== null) return respond(
      call(payName, { payee: pay[1], amount: Number(pay[2]), currency: pay[3] ?? "EUR", reference: pay[4], memo: "As asked" }, { reword: ["memo"] }),
      call("check_balance", { currency: pay[3] ?? "EUR" }),
    );
    const split = /split (\S+) (\d+) (\S+) (\d+) ref (\S+)/.exec(said);
    if (split !== null) return respond(
      call(payName, { payee: split[1], amount: Number(split[2]), currency: "EUR", reference: `${split[5]}-a`, memo: "first half" }, { reword: ["memo"] }),
      call("check_balance", { currency: "EUR" }),
      call(payName, { payee: split[3], amount: Number(split[4]), currency: "EUR", reference: `${split[5]}-b`, memo: "second half" }, { reword: ["memo"] }),
    );
    if (said.includes("balance")) return respond(call("check_balance", { currency: "EUR" }));
    return respond(textItem("Hello! Ask me to pay someone."));
  },
});
const payments = await startMockPayments({ requireIdempotencyKey: true });

// --- the vLLM-ish servers the mock cannot be: canned chunk sequences (Azure, Gemini shapes) -----
type Canned = { first: object[]; cutFirstAfter?: number; followUp: object[] };
let canned: Canned | undefined;
const cannedRequests: { attempt: number; hadTool: boolean }[] = [];
const raw = http.createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const hadTool = body.includes('"role":"tool"');
    const attempt = cannedRequests.filter((r) => r.hadTool === hadTool).length + 1;
    cannedRequests.push({ attempt, hadTool });
    const seq = hadTool ? canned!.followUp : canned!.first;
    res.writeHead(200, { "content-type": "text/event-stream" });
    let n = 0;
    const chunks = seq;
    (async () => {
      for (const chunk of chunks) {
        if (!hadTool && attempt === 1 && canned!.cutFirstAfter !== undefined && n === canned!.cutFirstAfter) { res.socket?.destroy(); return; }
        res.write(`data: ${JSON.stringify(chunk).replace("MEMO", attempt === 1 ? "for lunch" : "lunch, as agreed").replace('\\"AMOUNT\\"', attempt === 1 ? "150" : '\\"150\\"')}\n\n`);
        n++;
        await sleep(5);
      }
      res.end("data: [DONE]\n\n");
    })();
  });
});
raw.listen(0, "127.0.0.1");
await once(raw, "listening");
const rawURL = `http://127.0.0.1:${(raw.address() as { port: number }).port}/v1`;

// --- PostgreSQL through a proxy the script can cut: down() destroys every connection and refuses new ones.
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
const pgDown = () => { pgUp = false; for (const x of sockets) x.destroy(); };

// --- the chat endpoint's processes --------------------------------------------------------------
interface Server { child: ChildProcess; port: number; send(c: string, id: string, text: string): Promise<Reply & { http?: number }>; kill(): Promise<void>; stderr: () => string }
const servers = new Set<Server>();
async function startServer(extra: Record<string, string> = {}): Promise<Server> {
  const child = spawn(process.execPath, ["dist/server.js"], {
    env: { ...process.env, APP_DATABASE_URL: proxyUrl.toString(), APP_SCHEMA: SCHEMA, MODEL_BASE_URL: mock.baseURL, PAYMENTS_URL: payments.url, ...extra },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d) => { out += d; const m = /listening (\d+)/.exec(out); if (m) resolve(Number(m[1])); });
    child.on("exit", (code) => reject(new Error(`server exited ${code}: ${err}`)));
  });
  const server: Server = {
    child, port, stderr: () => err,
    async send(c, id, text) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/conversations/${encodeURIComponent(c)}/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ id, text }) });
        return { ...((await res.json()) as Reply), http: res.status };
      } catch (error) {
        return { status: "error", code: "connection_lost", effect: "unknown to the user", text: String((error as Error).message) } as Reply;
      }
    },
    async kill() { if (child.exitCode === null && child.signalCode === null) { child.kill("SIGKILL"); await once(child, "exit"); } servers.delete(server); },
  };
  servers.add(server);
  return server;
}
async function stop(s: Server) { if (s.child.exitCode === null && s.child.signalCode === null) { s.child.kill("SIGTERM"); await once(s.child, "exit"); } servers.delete(s); }

// --- the oracle ---------------------------------------------------------------------------------
const results: { scenario: string; ok: boolean; detail: unknown }[] = [];
const readStore = new PostgresConversationStore({ connectionString: DATABASE_URL, schema: SCHEMA });
/** What the store committed: every `tool` message's parsed content (payment ids, errors). */
async function committed(c: string): Promise<{ paymentIds: string[]; errors: string[] }> {
  const log = (await readStore.log(c).catch((e: unknown) => { console.warn("log:", (e as Error).message); return []; })).flat() as { role?: string; content?: unknown }[];
  const outs = log.filter((i) => i.role === "tool").map((i) => JSON.parse(String(i.content)) as { paymentId?: string; error?: unknown });
  return { paymentIds: outs.flatMap((o) => (o.paymentId ? [o.paymentId] : [])), errors: outs.flatMap((o) => (o.error !== undefined ? [JSON.stringify(o.error)] : [])) };
}
const effectsFor = (refPrefix: string) => payments.effects().filter((e) => String((e.payload as { reference?: string }).reference ?? "").startsWith(refPrefix));
function told(replies: Reply[]) {
  const keys = new Set<string>();
  const ids = new Set<string>();
  for (const r of replies) {
    if (r.status === "answered") {
      for (const c of r.calls) { if (c.key && c.error === undefined) keys.add(c.key); const id = (c.result as { paymentId?: string } | undefined)?.paymentId; if (id) ids.add(id); }
      for (const e of r.untold) if (e.effect !== "not_happened") keys.add(e.key);
    }
    if (r.status === "failed" || r.status === "unsaved") for (const e of r.effects) if (e.key && e.effect !== "not_happened") keys.add(e.key);
  }
  return { keys, ids };
}
/** `expect` payments with references starting with `c`; all committed; every one told; nothing told that did not happen. */
async function judge(scenario: string, c: string, replies: Reply[], opts: { expect?: number; extra?: Record<string, unknown>; ok?: unknown } = {}) {
  const expect = opts.expect ?? 1;
  const { keys, ids } = told(replies);
  const effects = effectsFor(c);
  const effectIds = effects.map((e) => e.resourceId);
  const store = await committed(c);
  const checks = {
    payments: effects.length === expect,
    committedEachOnce: store.paymentIds.length === expect && effectIds.every((id) => store.paymentIds.includes(id)),
    toldOnlyReal: [...ids].every((id) => effectIds.includes(id)),
    everyPaymentTold: effects.every((e) => keys.has(e.idempotencyKey ?? "")),
    situation: (opts.ok ?? true) === true,
  };
  const ok = Object.values(checks).every(Boolean);
  results.push({ scenario, ok, detail: { checks, effects: effects.map((e) => ({ key: e.idempotencyKey, id: e.resourceId, ref: (e.payload as { reference: string }).reference })), committed: store, told: { keys: [...keys], ids: [...ids] }, replies: replies.map(brief), ...(opts.ok !== undefined && opts.ok !== true ? { situationDetail: opts.ok } : {}), ...opts.extra } });
  console.log(`${ok ? "PASS" : "FAIL"} ${scenario}${ok ? "" : ` ${JSON.stringify(checks)}`}`);
}
function brief(r: Reply & { http?: number }) {
  return { status: r.status, text: r.text, ...(r.status === "answered" ? { calls: r.calls.map((c) => ({ name: c.name, key: c.key, ...(c.error ? { error: c.error } : { result: c.result }) })), untold: r.untold } : {}), ...(r.status === "error" ? { code: r.code, effect: r.effect } : {}), ...(r.status === "failed" || r.status === "unsaved" ? { effects: r.effects } : {}), ...(r.status === "failed" ? { cause: r.cause, retryable: r.retryable } : {}) };
}
const waitFor = async (what: () => boolean, ms = 10_000) => { for (let t = 0; t < ms && !what(); t += 25) await sleep(25); return what(); };
const cli = (...args: string[]) => {
  try { return { code: 0, out: execFileSync("node_modules/.bin/dispatch-once", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PAYMENTS_URL: payments.url } }) }; }
  catch (e) { const x = e as { status: number; stdout: string; stderr: string }; return { code: x.status, out: `${x.stdout}${x.stderr}` }; }
};
const L = ["-l", DATABASE_URL, "--schema", SCHEMA, "--table", "tool_calls"];
const S = ["--store", DATABASE_URL, "--schema", SCHEMA];
const show = (title: string, r: { code: number; out: string }) => console.log(`$ ${title}   (exit ${r.code})\n${r.out.trimEnd() || "(nothing)"}`);
/** Holds the first request of `c`'s message at its finish_reason chunk (attempt `attempt`), once its payment is in the effect log. */
async function holdAfterPayment(c: string, attempt = 1, fault?: (info: { attempt: number }) => object | undefined) {
  mock.setFaultPlan((req, info) => (!firstRequestOf(c)(req) ? undefined : info.attempt === attempt ? { kind: "hold", at: { beforeCompleted: true } } : (fault?.(info) as never)));
  const held = await mock.waitForHold(undefined, { timeoutMs: 15_000 });
  if (!(await waitFor(() => effectsFor(c).length > 0))) throw new Error(`${c}: no payment in the effect log while the stream is held before finish_reason`);
  mock.setFaultPlan(undefined);
  return held.requestNumber;
}
const firstRequestOf = (c: string) => (req: ResponsesRequest) => (lastUserText(req) ?? "").includes(c) && !hasToolOutput(req);

let app: Server;

// 1. A cut after the payment ran, before finish_reason (cut by hand once the payment is in the effect log).
async function cuts() {
  for (const kind of ["reset", "clean_close", "error_event"] as const) {
    const c = `c-cut-${kind}`;
    const p = app.send(c, "m1", `pay acme 1250 ref ${c}`);
    const n = await holdAfterPayment(c);
    mock.cutNow(n, kind);
    const r = await p;
    await judge(`1 ${kind} after the payment, before finish_reason: the runner retries`, c, [r], { ok: r.status === "answered" || r });
  }
  // The SDK's own retry: a 503 before the stream (attempt 1, retried by the SDK), then a cut after the payment (attempt 2, by the runner).
  const c = "c-cut-sdk";
  const p = app.send(c, "m1", `pay bert 990 ref ${c}`);
  const n = await holdAfterPayment(c, 2, (info) => (info.attempt === 1 ? { kind: "status", status: 503 } : undefined));
  mock.cutNow(n, "reset");
  const r = await p;
  const outcomes = mock.requests.filter((q) => JSON.stringify(q).includes(c)).map((q) => (q as unknown as { outcome: string }).outcome);
  await judge("1 a 503 the SDK retries, then a cut the runner retries", c, [r], { ok: (r.status === "answered" && outcomes[0] === "status") || { r, outcomes }, extra: { outcomes } });
}

// 2. The same message id re-sent: after a success, and after a turn that failed on cuts.
async function resend() {
  let c = "c-resend-ok";
  const a = await app.send(c, "m1", `pay cleo 700 ref ${c}`);
  const b = await app.send(c, "m1", `pay cleo 700 ref ${c}`);
  const reused = await app.send(c, "m1", `pay cleo 7000 ref ${c}`);
  await judge("2 the same message re-sent after a success (and its id reused for another text)", c, [a, b, reused], { ok: (JSON.stringify(brief(a)) === JSON.stringify(brief(b)) && reused.status === "error" && reused.code === "message_id_reused") || { a, b, reused } });
  c = "c-resend-cut";
  let cutting = true;
  mock.setFaultPlan((req) => (cutting && firstRequestOf(c)(req) ? { kind: "reset", at: { beforeCompleted: true } } : undefined));
  const f = await app.send(c, "m1", `pay dora 450 ref ${c}`);
  cutting = false;
  const g = await app.send(c, "m1", `pay dora 450 ref ${c}`);
  mock.setFaultPlan(undefined);
  await judge("2 the same message re-sent after its turn failed on cuts (retries ran out)", c, [f, g], { ok: (f.status === "failed" && g.status === "answered") || { f, g } });
}

// 2. The model stops at its output limit (finish_reason "length") after the payment ran: the turn
// fails for good, nothing committed; a re-send returns that failure; the user asks again in a new message.
async function lengthStop() {
  const c = "c-length";
  mock.setFaultPlan((req) => (firstRequestOf(c)(req) ? { kind: "incomplete_event", reason: "length", at: { beforeCompleted: true } } : undefined));
  const f = await app.send(c, "m1", `pay hank 330 ref ${c}`);
  const again = await app.send(c, "m1", `pay hank 330 ref ${c}`);
  mock.setFaultPlan(undefined);
  const committedAfterStop = await committed(c);
  const m2 = await app.send(c, "m2", `pay hank 330 ref ${c}`);
  const m2call = m2.status === "answered" ? m2.calls.find((x) => x.name === "send_payment") : undefined;
  await judge("2 finish_reason length after the payment; re-sent; then asked again in a new message", c, [f, again, m2], {
    ok: (f.status === "failed" && !f.retryable && again.status === "failed" && committedAfterStop.paymentIds.length === 0 && m2.status === "answered") || { f, again, m2 },
    extra: { committedAfterStop, m2Replayed: m2call },
  });
}

// 2. The model server refuses the request for good (vLLM started without --enable-auto-tool-choice
// answers a request with tools 400): what the user is told, and what an operator sees.
async function serverRefuses() {
  const c = "c-server-400";
  mock.setFaultPlan((req) => (firstRequestOf(c)(req) ? { kind: "status", status: 400 } : undefined));
  const r = await app.send(c, "m1", `pay ines 120 ref ${c}`);
  mock.setFaultPlan(undefined);
  const failedTurns = cli("turns", "--failed", ...S, "--conversation", c);
  show("turns --failed --conversation c-server-400", failedTurns);
  const store = await committed(c);
  const ok = r.status === "failed" && !r.retryable && effectsFor(c).length === 0 && store.paymentIds.length === 0;
  results.push({ scenario: "2 the model server answers 400 (not retryable)", ok, detail: { reply: brief(r), committed: store, payments: effectsFor(c).length } });
  console.log(`${ok ? "PASS" : "FAIL"} 2 the model server answers 400 (not retryable)`);
}

// 3. Two messages for one conversation racing: in one process, then across two.
async function race() {
  let c = "c-race-one";
  mock.setFaultPlan((req) => ((lastUserText(req) ?? "").includes(c) ? { kind: "hold", at: { beforeCompleted: true }, timing: { beforeCompletedMs: 0 } } : undefined));
  const p1 = app.send(c, "m1", `pay emil 320 ref ${c}`);
  const p2 = app.send(c, "m2", "what is my balance");
  const h = await mock.waitForHold(undefined, { timeoutMs: 10_000 });
  mock.setFaultPlan(undefined);
  mock.release(h.requestNumber);
  const [r1, r2] = await Promise.all([p1, p2]);
  await judge("3 two messages at once, one process", c, [r1, r2], { ok: (r1.status === "answered" && r2.status === "answered") || { r1, r2 } });
  c = "c-race-two";
  const other = await startServer();
  const q = await Promise.all([app.send(c, "m1", `pay fred 210 ref ${c}`), other.send(c, "m1", `pay fred 210 ref ${c}`), other.send(c, "m2", "hello"), app.send(c, "m3", "what is my balance")]);
  await stop(other);
  const log = ((await readStore.log(c)).flat() as { role?: string; content?: unknown }[]).filter((i) => i.role === "user").map((i) => i.content);
  await judge("3 two processes: m1 on both, m2 and m3 at once", c, q, { ok: (q.every((r) => r.status === "answered") && JSON.stringify(brief(q[0])) === JSON.stringify(brief(q[1]))) || q, extra: { userMessagesInOrder: log } });
}

// 4. The app SIGKILLed mid-turn after the payment; restarted; the message re-sent. 8: what the operator sees meanwhile.
async function killed() {
  const c = "c-killed";
  const p = app.send(c, "m1", `pay gina 610 ref ${c}`);
  await holdAfterPayment(c);
  await app.kill();
  const r1 = await p;
  await sleep(4500); // the turn lease (4 s) lapses
  console.log("--- 8 operator: the killed app's message, before anyone re-sends it");
  show("turns --stalled --ledger", cli("turns", "--stalled", ...S, "--ledger", DATABASE_URL, "--ledger-schema", SCHEMA, "--ledger-table", "tool_calls"));
  show("turns --failed", cli("turns", "--failed", ...S));
  show("list --conversation c-killed", cli("list", ...L, "--conversation", c));
  app = await startServer();
  const r2 = await app.send(c, "m1", `pay gina 610 ref ${c}`);
  await judge("4 SIGKILL after the payment, restart, the same message re-sent", c, [r1, r2], { ok: r2.status === "answered" || r2 });
}

// 5. A deploy between attempts: the schema folds the payee's case (identity change), then a rename.
async function deploy() {
  for (const [c, next, payee] of [["c-deploy-identity", "2", "Ivan"], ["c-deploy-rename", "3", "Jana"]] as const) {
    const p = app.send(c, "m1", `pay ${payee} 530 ref ${c}`);
    await holdAfterPayment(c);
    await app.kill();
    const r1 = await p;
    const audit = execAudit(next);
    show(`TOOLS_VERSION=${next} dispatch-once audit dist/tools.js --ledger ... --strict`, audit);
    app = await startServer({ TOOLS_VERSION: next });
    await sleep(4500);
    const r2 = await app.send(c, "m1", `pay ${payee} 530 ref ${c}`);
    await judge(`5 deploy (TOOLS_VERSION ${next}: ${next === "2" ? "payee case folded" : "renamed make_payment"}) between a killed attempt and the re-send`, c, [r1, r2], { ok: r2.status === "answered" || r2, extra: { auditExit: audit.code } });
    await app.kill();
    app = await startServer();
  }
}
function execAudit(version: string) {
  try { return { code: 0, out: execFileSync("node_modules/.bin/dispatch-once", ["audit", "dist/tools.js", "--ledger", DATABASE_URL, "--schema", SCHEMA, "--table", "tool_calls", "--strict"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, TOOLS_VERSION: version } }) }; }
  catch (e) { const x = e as { status: number; stdout: string; stderr: string }; return { code: x.status, out: `${x.stdout}${x.stderr}` }; }
}

// 6b. PostgreSQL goes away after the payment ran, before the commit; back; the message re-sent.
async function pgOutage() {
  const c = "c-pg-outage";
  const p = app.send(c, "m1", `pay olga 420 ref ${c}`);
  const n = await holdAfterPayment(c);
  await sleep(200); // the payment's completion reaches the ledger
  pgDown();
  mock.release(n);
  const r1 = await p;
  await sleep(500);
  pgUp = true;
  const r2 = await app.send(c, "m1", `pay olga 420 ref ${c}`);
  const toldFirst = r1.status === "unsaved" && r1.effects.some((e) => e.name === "send_payment" && e.effect === "happened");
  await judge("6 PostgreSQL down after the payment, before the commit; back; the same message re-sent", c, [r1, r2], { ok: (toldFirst && r2.status === "answered") || { r1, r2 } });
}

// 6. The payments API failing: definitely (400), and unknowably (response lost after it accepted; a timeout).
async function paymentsFail() {
  let c = "c-refused";
  const a = await app.send(c, "m1", `pay kurt 400 EUX ref ${c}`); // EUX: mock-payments answers 400
  const store = await committed(c);
  results.push({ scenario: "6 the payments API refuses (400)", ok: effectsFor(c).length === 0 && store.errors.length === 1 && a.status === "answered" && a.calls.some((x) => x.error !== undefined), detail: { effects: effectsFor(c).length, committed: store, reply: brief(a) } });
  console.log(`${results.at(-1)!.ok ? "PASS" : "FAIL"} 6 the payments API refuses (400)`);
  c = "c-dropped";
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const b = await app.send(c, "m1", `pay lena 380 ref ${c}`);
  await judge("6 the response lost after the payment was accepted (connection reset)", c, [b], { ok: b.status === "answered" || b });
  c = "c-timeout";
  payments.injectFault({ latencyMs: 2500 }, { times: 1 });
  const t = await app.send(c, "m1", `pay mona 260 ref ${c}`); // the tool gives up at PAYMENT_TIMEOUT_MS (1 s)
  await waitFor(() => effectsFor(c).length > 0, 5000);
  console.log("--- 8 operator: after the payment that timed out");
  show("list --conversation c-timeout --json", cli("list", ...L, "--conversation", c, "--json"));
  const key = effectsFor(c)[0]?.idempotencyKey ?? "";
  show("inspect <key>", cli("inspect", key, ...L));
  const recon = cli("reconcile", key, ...L, "--retention", "24h", "--tools", "dist/tools.js", "--actor", "trial-operator");
  show("reconcile <key> --tools dist/tools.js", recon);
  show("turns --failed", cli("turns", "--failed", ...S));
  const t2 = await app.send(c, "m1", `pay mona 260 ref ${c}`);
  await judge("6 the payment timed out at the tool (it landed later): re-run under the same key; the operator looks; re-send", c, [t, t2], { ok: t2.status === "answered" || { t, t2 } });
}

// 7. Parallel tool calls in one response (with a cut), and the servers' shapes the openai README lists.
async function parallelAndShapes() {
  let c = "c-split";
  mock.setFaultPlan((req, info) => (firstRequestOf(c)(req) && info.attempt === 1 ? { kind: "reset", at: { beforeCompleted: true } } : undefined));
  const r = await app.send(c, "m1", `split nina 100 otto 200 ref ${c}`);
  mock.setFaultPlan(undefined);
  await judge("7 parallel calls (two payments, a balance) in one response, cut before finish_reason", c, [r], { expect: 2, ok: r.status === "answered" || r });
  const shaped = await startServer({ MODEL_BASE_URL: rawURL, SDK_MAX_RETRIES: "0" });
  const base = { object: "chat.completion.chunk", created: 1, model: "m" };
  const args = (payee: string, ref: string) => JSON.stringify({ payee, amount: 150, currency: "EUR", reference: ref, memo: "MEMO" });
  const doneText: object[] = [
    { id: "d1", ...base, choices: [{ index: 0, delta: { role: "assistant", content: "Done." }, finish_reason: null }] },
    { id: "d1", ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] },
  ];
  // Azure: a prompt-filter chunk with no choices first, filter annotations on chunks without delta.
  c = "c-azure";
  const a1 = args("pia", `${c}-a`);
  canned = {
    cutFirstAfter: 6,
    first: [
      { id: "", object: "", created: 0, model: "", choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] },
      { id: "az1", ...base, choices: [{ index: 0, delta: { role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_az_a", type: "function", function: { name: "send_payment", arguments: "" } }] }, finish_reason: null }] },
      { id: "az1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: a1.slice(0, 20) } }] }, finish_reason: null }] },
      { id: "az1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: a1.slice(20) } }] }, finish_reason: null }] },
      { id: "az1", ...base, choices: [{ index: 0, content_filter_results: { hate: { filtered: false, severity: "safe" } } }] },
      { id: "az1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 1, id: "call_az_b", type: "function", function: { name: "send_payment", arguments: args("quin", `${c}-b`) } }] }, finish_reason: null }] },
      { id: "az1", ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
      { id: "az1", ...base, choices: [{ index: 0, content_filter_results: { hate: { filtered: false, severity: "safe" } } }] },
    ],
    followUp: [{ id: "", object: "", created: 0, model: "", choices: [], prompt_filter_results: [] }, ...doneText],
  };
  cannedRequests.length = 0;
  const az = await shaped.send(c, "m1", "pay pia and quin");
  await judge("7 Azure shapes (no-choice and delta-less filter chunks), cut after both calls, before finish_reason", c, [az], { expect: 2, ok: az.status === "answered" || az, extra: { requests: [...cannedRequests] } });
  // Gemini: fragments without index, each call whole in one fragment, finish_reason "stop" beside calls.
  c = "c-gemini";
  canned = {
    cutFirstAfter: 2,
    first: [
      { id: "g1", ...base, choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ id: "call_g_a", type: "function", function: { name: "send_payment", arguments: args("rosa", `${c}-a`) } }] }, finish_reason: null }] },
      { id: "g1", ...base, choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ id: "call_g_b", type: "function", function: { name: "send_payment", arguments: args("sven", `${c}-b`) } }] }, finish_reason: null }] },
      { id: "g1", ...base, choices: [{ index: 0, delta: { role: "assistant" }, finish_reason: "stop" }] },
    ],
    followUp: doneText,
  };
  cannedRequests.length = 0;
  const ge = await shaped.send(c, "m1", "pay rosa and sven");
  await judge("7 Gemini shapes (indexless fragments, stop beside calls), cut before finish_reason", c, [ge], { expect: 2, ok: ge.status === "answered" || ge, extra: { requests: [...cannedRequests] } });
  // Servers that send the unset members of a continuation fragment as null (id, type, function.name),
  // and ones that repeat the call's id and name on every fragment.
  for (const [label, cont] of [
    ["continuation fragments with id, type and function.name null", (_id: string, _name: string) => ({ id: null, type: null, function: { name: null } })],
    ["continuation fragments repeating id, type and name", (id: string, name: string) => ({ id, type: "function", function: { name } })],
    ["continuation fragments with id \"\" and name \"\"", (_id: string, _name: string) => ({ id: "", function: { name: "" } })],
  ] as const) {
    c = `c-shape-${label.split(" ").slice(-3).join("-").replace(/[^a-z-]/g, "")}`;
    const a = args("uwe", `${c}-a`);
    const frag = (index: number, id: string, name: string, piece: string) => ({ index, ...cont(id, name), function: { ...cont(id, name).function, arguments: piece } });
    canned = {
      cutFirstAfter: 5,
      first: [
        { id: "v1", ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] },
        { id: "v1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_v_a", type: "function", function: { name: "send_payment", arguments: "" } }] }, finish_reason: null }] },
        { id: "v1", ...base, choices: [{ index: 0, delta: { tool_calls: [frag(0, "call_v_a", "send_payment", a.slice(0, 25))] }, finish_reason: null }] },
        { id: "v1", ...base, choices: [{ index: 0, delta: { tool_calls: [frag(0, "call_v_a", "send_payment", a.slice(25))] }, finish_reason: null }] },
        { id: "v1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 1, id: "call_v_b", type: "function", function: { name: "check_balance", arguments: "" } }] }, finish_reason: null }] },
        { id: "v1", ...base, choices: [{ index: 0, delta: { tool_calls: [frag(1, "call_v_b", "check_balance", '{"currency":"EUR"}')] }, finish_reason: null }] },
        { id: "v1", ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
      ],
      followUp: doneText,
    };
    cannedRequests.length = 0;
    const got = await shaped.send(c, "m1", "pay uwe");
    await judge(`7 ${label}, cut after the payment`, c, [got], { ok: got.status === "answered" || got, extra: { requests: [...cannedRequests] } });
  }
  // vLLM (hermes / qwen tool parsers): a call's first fragment carries id, type and name without
  // `arguments` (its DeltaFunctionCall dumped with exclude_none), and the rest of the last call's
  // arguments comes in the chunk that carries finish_reason.
  c = "c-vllm";
  const v = args("vera", `${c}-a`);
  canned = {
    cutFirstAfter: 4,
    first: [
      { id: "chatcmpl-1", ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] },
      { id: "chatcmpl-1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ id: "chatcmpl-tool-a", type: "function", index: 0, function: { name: "send_payment" } }] }, logprobs: null, finish_reason: null }] },
      { id: "chatcmpl-1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: v } }] }, logprobs: null, finish_reason: null }] },
      { id: "chatcmpl-1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ id: "chatcmpl-tool-b", type: "function", index: 1, function: { name: "check_balance" } }] }, logprobs: null, finish_reason: null }] },
      { id: "chatcmpl-1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 1, function: { arguments: '{"currency": ' } }] }, logprobs: null, finish_reason: null }] },
      { id: "chatcmpl-1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 1, function: { arguments: '"EUR"}' } }] }, logprobs: null, finish_reason: "tool_calls", stop_reason: null }] },
    ],
    followUp: doneText,
  };
  cannedRequests.length = 0;
  const vl = await shaped.send(c, "m1", "pay vera");
  await judge("7 vLLM shapes (first fragment without arguments, last arguments beside finish_reason), cut after the payment", c, [vl], { ok: (vl.status === "answered" && vl.calls.length === 2) || vl, extra: { requests: [...cannedRequests] } });
  // The retried response spells the amount as a string ("150"): the schema refuses it, nothing is
  // claimed, the model is told, and the turn commits without the payment attempt 1 made. Only the
  // turn's record (RECORD-8, a retried turn) can tell the user that payment.
  c = "c-reworded-amount";
  const ra = JSON.stringify({ payee: "wim", amount: "AMOUNT", currency: "EUR", reference: `${c}-a`, memo: "MEMO" });
  canned = {
    cutFirstAfter: 3,
    first: [
      { id: "r1", ...base, choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "call_r_a", type: "function", function: { name: "send_payment", arguments: ra } }] }, finish_reason: null }] },
      { id: "r1", ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 1, id: "call_r_b", type: "function", function: { name: "check_balance", arguments: '{"currency":"EUR"}' } }] }, finish_reason: null }] },
      { id: "r1", ...base, choices: [{ index: 0, delta: { content: "" }, finish_reason: null }] },
      { id: "r1", ...base, choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
    ],
    followUp: doneText,
  };
  cannedRequests.length = 0;
  const rw = await shaped.send(c, "m1", "pay wim");
  const paid = effectsFor(c);
  const store = await committed(c);
  const toldPaid = rw.status === "answered" && rw.untold.some((e) => e.key === paid[0]?.idempotencyKey && e.effect === "happened");
  const okRw = paid.length === 1 && store.paymentIds.length === 0 && toldPaid;
  results.push({ scenario: "7 the retried response re-words the amount as a string: the first attempt's payment told from the turn's record (RECORD-8)", ok: okRw, detail: { payments: paid.map((e) => e.idempotencyKey), committed: store, reply: brief(rw), requests: [...cannedRequests] } });
  console.log(`${okRw ? "PASS" : "FAIL"} 7 the retried response re-words the amount as a string: the first attempt's payment told from the turn's record (RECORD-8)`);
  await stop(shaped);
}

// 8. The operator: the app killed while the payment request is in flight (1.5 s at mock-payments),
// the claim abandoned; then everything the trial left, as an operator would look at it.
async function operator() {
  const c = "c-operator";
  payments.injectFault({ latencyMs: 1500 }, { times: 1 });
  const p = app.send(c, "m1", `pay pete 880 ref ${c}`);
  if (!(await waitFor(() => payments.inFlight().length > 0))) throw new Error("no payment in flight");
  await app.kill();
  const r1 = await p;
  await sleep(4500); // the claim's lease (3 s) and the turn lease (4 s) run out; the payment landed meanwhile
  console.log("--- 8 operator: the app died with a payment in flight");
  show("list --state in_flight", cli("list", ...L, "--state", "in_flight"));
  const row = JSON.parse(cli("list", ...L, "--state", "in_flight", "--json").out.trim().split("\n")[0] || "{}") as { key?: string };
  show("inspect <key>", cli("inspect", row.key ?? "", ...L));
  show("reconcile <key> --tools dist/tools.js", cli("reconcile", row.key ?? "", ...L, "--retention", "24h", "--tools", "dist/tools.js", "--actor", "trial-operator"));
  show("turns --stalled --ledger", cli("turns", "--stalled", ...S, "--ledger", DATABASE_URL, "--ledger-schema", SCHEMA, "--ledger-table", "tool_calls"));
  app = await startServer({ PAYMENT_TIMEOUT_MS: "1000" });
  const r2 = await app.send(c, "m1", `pay pete 880 ref ${c}`); // what turns --stalled says to do: re-send the same id
  await judge("8 the app died with a payment in flight; the operator finds it; the message re-sent", c, [r1, r2], { ok: (r2.status === "answered" && row.key !== undefined) || { r2, row } });
  console.log("--- 8 operator: what the whole trial left");
  show("list --state in_flight,unknown", cli("list", ...L, "--state", "in_flight,unknown"));
  show("list (all rows)", cli("list", ...L, "--limit", "0"));
  show("turns --failed", cli("turns", "--failed", ...S));
  show("turns --stalled", cli("turns", "--stalled", ...S));
  show("audit dist/tools.js --ledger --strict (the running release)", cli("audit", "dist/tools.js", "--ledger", DATABASE_URL, "--schema", SCHEMA, "--table", "tool_calls", "--strict"));
}

const scenarios: Record<string, () => Promise<void>> = { cuts, resend, lengthStop, serverRefuses, race, killed, deploy, pgOutage, paymentsFail, parallelAndShapes, operator };
try {
  app = await startServer({ PAYMENT_TIMEOUT_MS: "1000" });
  for (const [name, run] of Object.entries(scenarios)) {
    if (only !== undefined && !only.split(",").includes(name)) continue;
    try { await run(); } catch (error) { results.push({ scenario: name, ok: false, detail: String((error as Error).stack) }); console.log(`FAIL ${name} threw: ${(error as Error).message}`); }
  }
} finally {
  console.log(JSON.stringify(results, null, 1));
  for (const s of [...servers]) { if (s.stderr().trim()) console.log(`--- server ${s.child.pid} stderr\n${s.stderr().trim()}`); await stop(s); }
  await readStore.close();
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  if (!process.env.KEEP) await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await admin.end();
  raw.close();
  proxy.close();
  for (const x of sockets) x.destroy();
  await mock.close();
  await payments.close();
}
process.exit(results.every((r) => r.ok) ? 0 : 1);
