// The trial's situations, each against real processes: the mocks run in this process (as their
// READMEs embed them), the assistant is dist/server.js (one or two processes, killed and restarted
// at will) talking to the mock provider's Bedrock route through @anthropic-ai/bedrock-sdk,
// PostgreSQL holds both stores. Oracle per conversation: mock-payments' effect log, against what
// the conversation store committed and what each HTTP reply told the user.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import http from "node:http";
import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { lastToolResults, lastUserText, say, startMockProvider, toolUse, turn, type MessagesRequest } from "@dispatch-once/mock-provider";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import type { Reply } from "./app.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const RUN = process.env.TRIAL_TAG ? `${process.env.TRIAL_TAG}_${process.pid}` : String(process.pid);
const SCHEMA = `bedrock_trial_${RUN}`;
const only = process.argv[2];
const PLANT = process.env.PLANT;

const hasToolResults = (req: MessagesRequest) => lastToolResults(req).length > 0;
// Claude, scripted: "pay <payee> <amount> ref <reference>" makes one payment and then checks the
// balance in the same response (so the payment is dispatched at its content_block_stop, well before
// message_stop); "balance" checks the balance; anything else is small talk. An honest model: it reads
// the tool results before it answers.
const provider = await startMockProvider({
  seed: "bedrock-trial",
  keepAliveTimeoutMs: 65_000,
  script: (request) => {
    const results = lastToolResults(request);
    if (results.length > 0) return turn(say(results.some((r) => r.isError) ? "The payment did not go through." : "Done: the payment was sent."));
    const said = lastUserText(request);
    const pay = /pay (\S+) (\d+) ref (\S+)/.exec(said);
    if (pay !== null) return turn(
      say("Paying."),
      toolUse("send_payment", { payee: pay[1], amount: Number(pay[2]), currency: "EUR", reference: pay[3], memo: "As asked" }, { reword: ["memo"] }),
      toolUse("check_balance", { currency: "EUR" }),
    );
    if (said.includes("balance")) return turn(toolUse("check_balance", { currency: "EUR" }));
    return turn(say("Hello! Ask me to pay someone."));
  },
});
const payments = await startMockPayments({ requireIdempotencyKey: true });

// --- a pass-through in front of the Bedrock route that can end the body inside an event-stream
// message (the mock cuts only between whole messages): `truncateNext` makes it send half of the next
// message and end the response cleanly.
let truncateNext = false;
const target = new URL(provider.bedrockBaseURL);
const passThrough = http.createServer((req, res) => {
  const up = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (upRes) => {
    res.writeHead(upRes.statusCode ?? 502, upRes.headers);
    let buf = Buffer.alloc(0);
    upRes.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 4 && buf.length >= buf.readUInt32BE(0)) {
        const len = buf.readUInt32BE(0);
        const frame = buf.subarray(0, len);
        buf = buf.subarray(len);
        if (truncateNext) { truncateNext = false; res.end(frame.subarray(0, Math.floor(len / 2))); upRes.destroy(); return; }
        res.write(frame);
      }
    });
    upRes.on("end", () => res.end(buf));
    upRes.on("error", () => res.destroy());
  });
  up.on("error", () => res.destroy());
  req.pipe(up);
});
passThrough.listen(0, "127.0.0.1");
await once(passThrough, "listening");
const passURL = `http://127.0.0.1:${(passThrough.address() as { port: number }).port}`;

// --- the assistant's processes ------------------------------------------------------------------
interface Server { child: ChildProcess; port: number; send(c: string, id: string, text: string): Promise<Reply & { http?: number }>; kill(): Promise<void>; stderr: () => string }
const servers = new Set<Server>();
async function startServer(extra: Record<string, string> = {}): Promise<Server> {
  const child = spawn(process.execPath, ["dist/server.js"], {
    env: { ...process.env, APP_SCHEMA: SCHEMA, BEDROCK_BASE_URL: provider.bedrockBaseURL, PAYMENTS_URL: payments.url, PAYMENT_TIMEOUT_MS: "1000", ...(PLANT ? { PLANT } : {}), ...extra },
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
/** What the store committed: every tool_result block's parsed content (payment ids, errors). */
async function committed(c: string): Promise<{ paymentIds: string[]; errors: string[] }> {
  const log = (await readStore.log(c).catch((e: unknown) => { console.warn("log:", (e as Error).message); return []; })).flat() as { role?: string; content?: unknown }[];
  const blocks = log.filter((m) => m.role === "user" && Array.isArray(m.content)).flatMap((m) => m.content as { type?: string; content?: unknown; is_error?: boolean }[]).filter((b) => b.type === "tool_result");
  const text = (b: { content?: unknown }) => (typeof b.content === "string" ? b.content : JSON.stringify(b.content));
  const ids = blocks.filter((b) => !b.is_error).flatMap((b) => [...text(b).matchAll(/"paymentId":"([^"]+)"/g)].map((m) => m[1]!));
  return { paymentIds: ids, errors: blocks.filter((b) => b.is_error).map(text) };
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
/** `expect` payments whose reference starts with `c`; each committed once; every one told; nothing told that did not happen. */
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
  results.push({ scenario, ok, detail: { checks, effects: effects.map((e) => ({ key: e.idempotencyKey, id: e.resourceId })), committed: store, told: { keys: [...keys], ids: [...ids] }, replies: replies.map(brief), ...(opts.ok !== undefined && opts.ok !== true ? { situationDetail: opts.ok } : {}), ...opts.extra } });
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
const firstRequestOf = (c: string) => (req: MessagesRequest) => lastUserText(req).includes(c) && !hasToolResults(req);
/** Holds `c`'s first request (its attempt `attempt`) after the payment's content_block_stop, until the payment is in the effect log. */
async function holdAfterPayment(c: string, attempt = 1, before?: (info: { attempt: number }) => object | undefined) {
  provider.setFaultPlan((req, info) => (!firstRequestOf(c)(req) ? undefined : info.attempt === attempt ? { kind: "hold", at: { afterToolUseStop: 0 } } : (before?.(info) as never)));
  const held = await provider.waitForHold(undefined, { timeoutMs: 15_000 });
  if (!(await waitFor(() => effectsFor(c).length > 0))) throw new Error(`${c}: no payment in the effect log while the stream is held after its block`);
  provider.setFaultPlan(undefined);
  return held.requestNumber;
}

let app: Server;
/** The stream failures the app's onEvent logged for conversation `c`. */
const failuresOf = (s: Server, c: string) => s.stderr().split("\n").filter((l) => l.startsWith(`stream_failed ${c} `));
const expectedFailure = { reset: "terminated", clean_close: "StreamIncompleteError", error_event: "modelStreamErrorException" } as const;

// 1. The chapter's incident on Bedrock: the payment ran, the stream is cut before message_stop.
async function cuts() {
  for (const kind of ["reset", "clean_close", "error_event"] as const) {
    const c = `c-cut-${kind}`;
    const p = app.send(c, "m1", `pay acme 1250 ref ${c}`);
    const n = await holdAfterPayment(c);
    if (kind === "error_event") provider.cutNow(n, kind, { type: "modelStreamErrorException", message: "The model stream failed" });
    else provider.cutNow(n, kind);
    const r = await p;
    const seen = failuresOf(app, c);
    await judge(`1 ${kind === "error_event" ? "exception frame (modelStreamErrorException)" : kind} after the payment, before message_stop: the runner retries`, c, [r], { ok: (r.status === "answered" && seen.length === 1 && seen[0]!.includes(expectedFailure[kind])) || { r, seen }, extra: { seen } });
    console.log(`    the runner saw: ${seen.join(" | ")}`);
  }
  // Bedrock's event stream ending inside a message, after the payment.
  const c = "c-cut-truncated";
  const shaped = await startServer({ BEDROCK_BASE_URL: passURL });
  const p = shaped.send(c, "m1", `pay acme 1250 ref ${c}`);
  const n = await holdAfterPayment(c);
  truncateNext = true;
  provider.release(n);
  const r = await p;
  const seen = failuresOf(shaped, c);
  console.log(`    the runner saw: ${seen.join(" | ")}`);
  await stop(shaped);
  await judge("1 event stream truncated inside a message after the payment: the runner retries", c, [r], { ok: (r.status === "answered" && seen.length === 1 && seen[0]!.includes("Truncated event message received")) || { r, seen } });
  // The same with the mock's own `truncate` cut (added on this branch, FRICTION 2).
  {
    const c = "c-cut-truncate-fault";
    const p = app.send(c, "m1", `pay acme 1250 ref ${c}`);
    const n = await holdAfterPayment(c);
    provider.cutNow(n, "truncate");
    const r = await p;
    const seen = failuresOf(app, c);
    console.log(`    the runner saw: ${seen.join(" | ")}`);
    await judge("1 the mock's truncate cut after the payment: the runner retries", c, [r], { ok: (r.status === "answered" && seen.length === 1 && seen[0]!.includes("Truncated event message received")) || { r, seen } });
  }
  // The SDK's own retry: a 429 / 503 before the headers (attempt 1), then a cut after the payment (attempt 2).
  for (const status of [429, 503]) {
    const c = `c-cut-sdk-${status}`;
    const p = app.send(c, "m1", `pay bert 990 ref ${c}`);
    const n = await holdAfterPayment(c, 2, (info) => (info.attempt === 1 ? { kind: "status", status, retryAfterMs: 20 } : undefined));
    provider.cutNow(n, "reset");
    const r = await p;
    const outcomes = provider.requests.filter((q) => lastUserText(q.body as MessagesRequest).includes(c)).map((q) => `${q.api}:${q.outcome}${q.status ? `:${q.status}` : ""}`);
    await judge(`1 a ${status} before the headers the SDK retries, then a cut the runner retries`, c, [r], { ok: (r.status === "answered" && outcomes[0] === `bedrock:status:${status}`) || { r, outcomes }, extra: { outcomes } });
  }
}

// 1b. An exception frame after the payment on every attempt: the retries run out; the user is told
// the payment happened and to re-send; the re-send (Bedrock healthy again) is answered from the ledger.
async function exhausted() {
  const c = "c-exhausted";
  let failing = true;
  provider.setFaultPlan((req) => (failing && firstRequestOf(c)(req) ? { kind: "error_event", at: { beforeMessageStop: true }, error: { type: "throttlingException", message: "Too many requests, please wait before trying again." } } : undefined));
  const f = await app.send(c, "m1", `pay hugo 450 ref ${c}`);
  failing = false;
  provider.setFaultPlan(undefined);
  const g = await app.send(c, "m1", `pay hugo 450 ref ${c}`);
  console.log(`    told after the retries ran out: ${JSON.stringify(f.text)} (${f.status === "failed" ? f.cause : ""})`);
  const toldHappened = f.status === "failed" && f.retryable && f.effects.some((e) => e.name === "send_payment" && e.effect === "happened");
  await judge("1 an exception frame (throttlingException) after the payment on every attempt; re-sent", c, [f, g], { ok: (toldHappened && g.status === "answered") || { f, g } });
}

// 1c. Bedrock refusing the request: throttled on every request (the SDK's retries and the runner's
// run out), then a 400 ValidationException (permanent). Nothing ran; what is the user told?
async function refused() {
  for (const [status, label] of [[429, "ThrottlingException on every request"], [400, "ValidationException"]] as const) {
    const c = `c-refused-${status}`;
    provider.setFaultPlan((req) => (firstRequestOf(c)(req) ? { kind: "status", status, retryAfterMs: 20 } : undefined));
    const f = await app.send(c, "m1", `pay ivan 120 ref ${c}`);
    provider.setFaultPlan(undefined);
    const n = provider.requests.filter((q) => lastUserText(q.body as MessagesRequest).includes(c)).length;
    console.log(`    ${status}: ${n} requests; told ${JSON.stringify(f.text)} (${f.status === "failed" ? `retryable ${f.retryable}; ${f.cause}` : f.status})`);
    show(`turns --failed --conversation ${c}`, cli("turns", "--failed", ...S, "--conversation", c));
    const ok = f.status === "failed" && f.retryable === (status === 429) && effectsFor(c).length === 0;
    results.push({ scenario: `1 Bedrock answers ${status} ${label}: nothing ran, the user told whether a re-send helps`, ok, detail: { reply: brief(f), requests: n } });
    console.log(`${ok ? "PASS" : "FAIL"} 1 Bedrock answers ${status} ${label}: nothing ran, the user told whether a re-send helps`);
  }
}

// 2. The same message id re-sent after an answer (and its id reused for another text).
async function resend() {
  const c = "c-resend-ok";
  const a = await app.send(c, "m1", `pay cleo 700 ref ${c}`);
  const b = await app.send(c, "m1", `pay cleo 700 ref ${c}`);
  const reused = await app.send(c, "m1", `pay cleo 7000 ref ${c}`);
  await judge("2 the same message re-sent after its answer (and its id reused for another text)", c, [a, b, reused], { ok: (JSON.stringify(brief(a)) === JSON.stringify(brief(b)) && reused.status === "error" && reused.code === "message_id_reused") || { a, b, reused } });
}

// 3. Two concurrent sends of one message id, on two processes.
async function race() {
  const c = "c-race";
  const other = await startServer();
  const q = await Promise.all([app.send(c, "m1", `pay fred 210 ref ${c}`), other.send(c, "m1", `pay fred 210 ref ${c}`)]);
  await stop(other);
  await judge("3 two processes send m1 at once", c, q, { ok: (q.every((r) => r.status === "answered") && JSON.stringify(brief(q[0]!)) === JSON.stringify(brief(q[1]!))) || q });
}

// 4. SIGKILL after the payment; the operator looks; restart; the client re-sends.
async function killed() {
  const c = "c-killed";
  const p = app.send(c, "m1", `pay gina 610 ref ${c}`);
  await holdAfterPayment(c);
  await app.kill();
  const r1 = await p;
  await sleep(4500); // the turn lease (4 s) lapses
  console.log("--- operator: the killed app's message, before anyone re-sends it");
  show("turns --stalled --ledger", cli("turns", "--stalled", ...S, "--ledger", DATABASE_URL, "--ledger-schema", SCHEMA, "--ledger-table", "tool_calls"));
  show("list --conversation c-killed", cli("list", ...L, "--conversation", c));
  const row = JSON.parse(cli("list", ...L, "--conversation", c, "--json").out.trim().split("\n")[0] || "{}") as { key?: string };
  show("inspect <key>", cli("inspect", row.key ?? "", ...L));
  app = await startServer();
  const r2 = await app.send(c, "m1", `pay gina 610 ref ${c}`);
  await judge("4 SIGKILL after the payment, restart, the same message re-sent", c, [r1, r2], { ok: (r2.status === "answered" && row.key !== undefined) || { r2, row } });
}

// 5. The payments API's lost response (accepted, then the connection dropped).
async function lostResponse() {
  const c = "c-dropped";
  payments.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
  const b = await app.send(c, "m1", `pay lena 380 ref ${c}`);
  await judge("5 the payments API's response lost after it accepted", c, [b], { ok: b.status === "answered" || b });
}

// 6. The API version: every Bedrock request carried the pinned anthropic_version.
async function version() {
  const seen = [...new Set(provider.requests.filter((q) => q.api === "bedrock").map((q) => String((q.body as { anthropic_version?: unknown }).anthropic_version)))];
  const ok = seen.length === 1 && seen[0] === "bedrock-2023-05-31";
  results.push({ scenario: "6 anthropic_version pinned on every request", ok, detail: { seen } });
  console.log(`${ok ? "PASS" : "FAIL"} 6 anthropic_version pinned on every request ${JSON.stringify(seen)}`);
}

async function operator() {
  console.log("--- operator: what the whole trial left");
  show("list --state in_flight,unknown", cli("list", ...L, "--state", "in_flight,unknown"));
  show("list", cli("list", ...L, "--limit", "0"));
  show("turns --failed", cli("turns", "--failed", ...S));
  show("turns --stalled", cli("turns", "--stalled", ...S));
}

const scenarios: Record<string, () => Promise<void>> = { cuts, exhausted, refused, resend, race, killed, lostResponse, version, operator };
try {
  app = await startServer();
  for (const [name, run] of Object.entries(scenarios)) {
    if (only !== undefined && !only.split(",").includes(name)) continue;
    try { await run(); } catch (error) { results.push({ scenario: name, ok: false, detail: String((error as Error).stack) }); console.log(`FAIL ${name} threw: ${(error as Error).message}`); }
  }
} finally {
  if (process.env.VERBOSE || results.some((r) => !r.ok)) console.log(JSON.stringify(results.filter((r) => process.env.VERBOSE || !r.ok), null, 1));
  for (const s of [...servers]) { if (s.stderr().trim()) console.log(`--- server ${s.child.pid} stderr\n${s.stderr().trim()}`); await stop(s); }
  await readStore.close();
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  if (!process.env.KEEP) await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await admin.end();
  passThrough.close();
  await provider.close();
  await payments.close();
}
console.log(`${results.filter((r) => r.ok).length}/${results.length} passed${PLANT ? ` (PLANT=${PLANT})` : ""}`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
