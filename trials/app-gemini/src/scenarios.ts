// The trial's situations, each against real processes: the mocks run in this process (as their
// READMEs embed them), the assistant is dist/server.js (killed and restarted at will) talking to the
// mock provider's Gemini route through @google/genai, PostgreSQL holds both stores. A 60-line SSE
// relay in front of the Gemini route does what the mock cannot: strip the calls' ids (older models,
// the API's optional `id`), move a call into the chunk that carries a finishReason other than STOP.
// Oracle per conversation: mock-payments' effect log, against what the conversation store committed
// and what each HTTP reply told the user.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import http from "node:http";
import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { lastToolResults, lastUserText, say, startMockProvider, toolUse, turn, type MessagesRequest, type RequestRecord } from "@dispatch-once/mock-provider";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import type { Reply } from "./app.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = `h_trialgemini_${process.pid}`;
const only = process.argv[2];
const PLANT = process.env.PLANT;

// Gemini, scripted: "pay <payee> <amount> ref <reference>" pays and checks the balance in the same
// response (the payment is dispatched at its functionCall chunk, before the finishReason chunk);
// "pay twice ..." makes two identical payments in one response; "pay both <a> <b> ..." two payments
// to two payees (parallel calls); "pay long ..." pays, then runs into its output limit inside a second
// payment's arguments (MAX_TOKENS); anything else is small talk. It reads the tool results before it answers.
const provider = await startMockProvider({
  seed: "gemini-trial",
  keepAliveTimeoutMs: 65_000,
  script: (request) => {
    const results = lastToolResults(request);
    if (results.length > 0) return turn(say(results.some((r) => r.isError) ? "The payment did not go through." : "Done: the payment was sent."));
    const said = lastUserText(request);
    const pay = (payee: string, amount: string, ref: string) => toolUse("send_payment", { payee, amount: Number(amount), currency: "EUR", reference: ref, memo: "As asked" }, { reword: ["memo"] });
    let m: RegExpExecArray | null;
    if ((m = /pay twice (\S+) (\d+) ref (\S+)/.exec(said))) return turn(say("Paying twice."), pay(m[1]!, m[2]!, m[3]!), pay(m[1]!, m[2]!, m[3]!));
    if ((m = /pay both (\S+) (\S+) (\d+) ref (\S+)/.exec(said))) return turn(pay(m[1]!, m[3]!, m[4]!), pay(m[2]!, m[3]!, m[4]!));
    if ((m = /pay long (\S+) (\d+) ref (\S+)/.exec(said))) return { ...turn(pay(m[1]!, m[2]!, m[3]!), pay(m[1]!, m[2]!, `${m[3]!}-second`)), stopReason: "max_tokens" as const };
    if ((m = /pay (\S+) (\d+) ref (\S+)/.exec(said))) return turn(say("Paying."), pay(m[1]!, m[2]!, m[3]!), toolUse("check_balance", { currency: "EUR" }));
    return turn(say("Hello! Ask me to pay someone."));
  },
});
const payments = await startMockPayments({ requireIdempotencyKey: true });

// --- the relay in front of the Gemini route -------------------------------------------------------
// Modes (set per situation): `stripIds` deletes every functionCall's id; `finishAs` makes the chunk
// that carries the finishReason carry this one instead and the response's calls with it (a call
// chunk is held back until the finish chunk, then sent inside it).
// `mergeCalls: n` holds call chunks until n of them arrived, then sends them as one chunk (Gemini's
// parallel calls, several functionCall parts in one chunk).
// `blockPrompt` answers the request with the one chunk Gemini sends for a prompt it blocks
// (`promptFeedback.blockReason`, no candidates).
const relay = { stripIds: false, finishAs: undefined as string | undefined, mergeCalls: 0, blockPrompt: undefined as string | undefined };
const upstream = new URL(provider.url);
type Chunk = { candidates?: { content?: { parts?: { functionCall?: { id?: string } }[] }; finishReason?: string; finishMessage?: string }[] };
const relayServer = http.createServer((req, res) => {
  const up = http.request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, (upRes) => {
    if (relay.blockPrompt !== undefined && upRes.statusCode === 200) {
      upRes.destroy();
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`data: ${JSON.stringify({ promptFeedback: { blockReason: relay.blockPrompt }, usageMetadata: { promptTokenCount: 12, totalTokenCount: 12 }, modelVersion: "gemini-2.5-flash", responseId: "blocked1" })}\r\n\r\n`);
      return;
    }
    res.writeHead(upRes.statusCode ?? 502, upRes.headers);
    let buf = "";
    let held: unknown[] = [];
    const send = (chunk: Chunk) => res.write(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
    upRes.setEncoding("utf8");
    upRes.on("data", (d: string) => {
      buf += d;
      let at: number;
      while ((at = buf.indexOf("\r\n\r\n")) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 4);
        if (!event.startsWith("data: ")) { res.write(`${event}\r\n\r\n`); continue; }
        const chunk = JSON.parse(event.slice(6)) as Chunk;
        const cand = chunk.candidates?.[0];
        if (relay.stripIds) for (const p of cand?.content?.parts ?? []) if (p.functionCall) delete p.functionCall.id;
        if (relay.mergeCalls > 0 && cand && cand.finishReason === undefined && (cand.content?.parts ?? []).some((p) => p.functionCall)) {
          held.push(...(cand.content?.parts ?? []));
          if (held.length < relay.mergeCalls) continue;
          cand.content!.parts = held as never[];
          held = [];
        }
        if (relay.finishAs !== undefined && cand) {
          const parts = cand.content?.parts ?? [];
          if (cand.finishReason === undefined && parts.some((p) => p.functionCall)) { held.push(...parts); continue; }
          if (cand.finishReason !== undefined) {
            cand.finishReason = relay.finishAs;
            if (relay.finishAs === "MALFORMED_FUNCTION_CALL") cand.finishMessage = "Malformed function call: send_payment";
            if (cand.content) cand.content.parts = [...(held as never[]), ...parts];
            held = [];
          }
        }
        send(chunk);
      }
    });
    upRes.on("end", () => res.end(buf));
    upRes.on("error", () => res.destroy());
    res.on("close", () => upRes.destroy());
  });
  up.on("error", () => res.destroy());
  req.pipe(up);
});
relayServer.listen(0, "127.0.0.1");
await once(relayServer, "listening");
const relayURL = `http://127.0.0.1:${(relayServer.address() as { port: number }).port}`;

// --- the assistant's processes ------------------------------------------------------------------
interface Server { child: ChildProcess; port: number; send(c: string, id: string, text: string): Promise<Reply & { http?: number }>; kill(): Promise<void>; stderr: () => string }
const servers = new Set<Server>();
async function startServer(extra: Record<string, string> = {}): Promise<Server> {
  const child = spawn(process.execPath, ["dist/server.js"], {
    env: { ...process.env, APP_SCHEMA: SCHEMA, GEMINI_BASE_URL: relayURL, PAYMENTS_URL: payments.url, PAYMENT_TIMEOUT_MS: "1000", ...(PLANT ? { PLANT } : {}), ...extra },
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
type Part = { text?: string; functionCall?: { id?: string; name?: string; args?: unknown }; functionResponse?: { id?: string; name?: string; response?: { output?: { paymentId?: string }; error?: unknown } } };
/** What the store committed: every functionResponse's payment id and error, and the committed model parts. */
async function committed(c: string): Promise<{ paymentIds: string[]; errors: unknown[]; calls: Part["functionCall"][]; responses: Part["functionResponse"][] }> {
  const log = (await readStore.log(c).catch((e: unknown) => { console.warn("log:", (e as Error).message); return []; })).flat() as { role?: string; parts?: Part[] }[];
  const responses = log.filter((m) => m.role === "user").flatMap((m) => m.parts ?? []).flatMap((p) => (p.functionResponse ? [p.functionResponse] : []));
  const calls = log.filter((m) => m.role === "model").flatMap((m) => m.parts ?? []).flatMap((p) => (p.functionCall ? [p.functionCall] : []));
  return {
    paymentIds: responses.filter((r) => r.name === "send_payment" && r.response?.output?.paymentId).map((r) => r.response!.output!.paymentId!),
    errors: responses.filter((r) => r.response?.error !== undefined).map((r) => r.response!.error),
    calls,
    responses,
  };
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
/**
 * `expect` payments whose reference starts with `c`; `committed` of them (default: all) in the
 * store's functionResponses, each once; every payment told to the user; nothing told that did not happen.
 */
async function judge(scenario: string, c: string, replies: Reply[], opts: { expect?: number; committed?: number; extra?: Record<string, unknown>; ok?: unknown } = {}) {
  const expect = opts.expect ?? 1;
  const { keys, ids } = told(replies);
  const effects = effectsFor(c);
  const effectIds = effects.map((e) => e.resourceId);
  const store = await committed(c);
  const committedExpect = opts.committed ?? expect;
  const checks = {
    payments: effects.length === expect,
    committedEachOnce: store.paymentIds.length === committedExpect && new Set(store.paymentIds).size === committedExpect && store.paymentIds.every((id) => effectIds.includes(id)),
    toldOnlyReal: [...ids].every((id) => effectIds.includes(id)),
    everyPaymentTold: effects.every((e) => keys.has(e.idempotencyKey ?? "")),
    answersSaySomething: replies.every((r) => r.status !== "answered" || r.text.trim() !== ""),
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
const hasToolResults = (req: MessagesRequest) => lastToolResults(req).length > 0;
const firstRequestOf = (c: string) => (req: MessagesRequest) => lastUserText(req).includes(c) && !hasToolResults(req);
// The log keeps each request's body as sent (Gemini's shape): its first request of `c` is the one without a functionResponse.
const sent = (q: RequestRecord) => JSON.stringify(q.body);
const requestsOf = (c: string): RequestRecord[] => provider.requests.filter((q) => sent(q).includes(c) && !sent(q).includes("functionResponse"));
/** Holds `c`'s first request (its attempt `attempt`) after call `call`'s chunk, until `payments` payments are in the effect log. */
async function holdAfterPayment(c: string, opts: { attempt?: number; call?: number; payments?: number; before?: (info: { attempt: number }) => object | undefined } = {}) {
  const attempt = opts.attempt ?? 1;
  provider.setFaultPlan((req, info) => (!firstRequestOf(c)(req) ? undefined : info.attempt === attempt ? { kind: "hold", at: { afterToolUseStop: opts.call ?? 0 } } : (opts.before?.(info) as never)));
  const held = await provider.waitForHold(undefined, { timeoutMs: 15_000 });
  if (!(await waitFor(() => effectsFor(c).length >= (opts.payments ?? 1)))) throw new Error(`${c}: no payment in the effect log while the stream is held after its call`);
  provider.setFaultPlan(undefined);
  return held.requestNumber;
}

let app: Server;
/** The stream failures the app's onEvent logged for conversation `c`. */
const failuresOf = (s: Server, c: string) => s.stderr().split("\n").filter((l) => l.startsWith(`stream_failed ${c} `));
const answered = (r: Reply) => r.status === "answered";
/** JSON with object keys sorted: a reply read back from PostgreSQL's jsonb has its results' keys in jsonb's order. */
const canon = (v: unknown): string => JSON.stringify(v, (_k, x: unknown) => (x !== null && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : 1))) : x));

// 1. The chapter's incident on Gemini: the payment ran at its functionCall chunk, the stream is cut
// before the finishReason chunk. Each cut's error as the runner logged it is checked.
async function cuts() {
  const expected = { reset: "terminated", clean_close: "StreamIncompleteError", error_event: "UNAVAILABLE", truncate: "Incomplete JSON segment" } as const;
  for (const kind of ["reset", "clean_close", "error_event", "truncate"] as const) {
    const c = `c-cut-${kind}`;
    const p = app.send(c, "m1", `pay acme 1250 ref ${c}`);
    const n = await holdAfterPayment(c);
    if (kind === "error_event") provider.cutNow(n, kind, { type: "overloaded_error", message: "The model is overloaded." });
    else provider.cutNow(n, kind);
    const r = await p;
    const seen = failuresOf(app, c);
    console.log(`    the runner saw: ${seen.join(" | ")}`);
    const label = kind === "error_event" ? "Google's error envelope on the 200 (503 UNAVAILABLE)" : kind === "truncate" ? "an SSE event cut in half" : kind;
    await judge(`1 ${label} after the payment, before the finishReason chunk: retried, paid once, told`, c, [r], { ok: (answered(r) && seen.length === 1 && seen[0]!.includes(expected[kind])) || { r, seen }, extra: { seen } });
  }
  // A stream that closes cleanly after the response's last call, without any finishReason.
  {
    const c = "c-no-finish";
    provider.setFaultPlan((req, info) => (firstRequestOf(c)(req) && info.attempt === 1 ? { kind: "clean_close", at: { afterToolUseStop: 1 } } : undefined));
    const r = await app.send(c, "m1", `pay acme 1250 ref ${c}`);
    provider.setFaultPlan(undefined);
    const seen = failuresOf(app, c);
    await judge("6 a stream that closes cleanly after its last call, without finishReason: a failed stream, retried", c, [r], { ok: (answered(r) && seen.length === 1) || { r, seen } });
  }
  // The SDK's own retry (retryOptions): a 503 before the headers (attempt 1), then a cut after the payment (attempt 2).
  {
    const c = "c-cut-sdk-503";
    const p = app.send(c, "m1", `pay bert 990 ref ${c}`);
    const n = await holdAfterPayment(c, { attempt: 2, before: (info) => (info.attempt === 1 ? { kind: "status", status: 503 } : undefined) });
    provider.cutNow(n, "reset");
    const r = await p;
    const outcomes = requestsOf(c).map((q) => `${q.outcome}${q.status ? `:${q.status}` : ""}`);
    console.log(`    requests: ${outcomes.join(", ")}`);
    await judge("1 a 503 before the headers the SDK retries, then a cut the runner retries", c, [r], { ok: (answered(r) && outcomes[0] === "status:503") || { r, outcomes }, extra: { outcomes } });
  }
}

// 2. The retry's model re-words the memo: the same payment (memo is outside the identity), the
// user told the payment as it ran (its stored request), the memo the first attempt sent.
async function reword() {
  const c = "c-reword";
  const p = app.send(c, "m1", `pay dora 880 ref ${c}`);
  const n = await holdAfterPayment(c);
  provider.cutNow(n, "reset");
  const r = await p;
  const memos = requestsOf(c).map((q) => (q.toolUses.find((t) => t.name === "send_payment")?.input as { memo?: string } | undefined)?.memo);
  const paid = (effectsFor(c)[0]?.payload as { memo?: string } | undefined)?.memo;
  const ran = r.status === "answered" ? (r.calls.find((x) => x.name === "send_payment")?.ran as { memo?: string } | undefined)?.memo : undefined;
  console.log(`    memos per attempt: ${JSON.stringify(memos)}; paid with ${JSON.stringify(paid)}; the reply's stored request: ${JSON.stringify(ran)}`);
  await judge("2 the retry's model re-words the memo: one payment, told as it ran", c, [r], { ok: (answered(r) && memos.length === 2 && memos[0] !== memos[1] && paid === memos[0] && ran === memos[0]) || { r, memos, paid, ran } });
}

// 3. Two identical calls in one response: two payments, also across a cut after the second.
async function twice() {
  const c = "c-twice";
  const p = app.send(c, "m1", `pay twice erik 300 ref ${c}`);
  const n = await holdAfterPayment(c, { call: 1, payments: 2 });
  provider.cutNow(n, "reset");
  const r = await p;
  await judge("3 two identical calls in one response, cut after both ran: two payments, retried without a third", c, [r], { expect: 2, ok: answered(r) || r });
}

// 4a. Function calls without ids (the relay strips them): cut after the payment, retried; the
// committed functionResponse has no id either, and the next message of the conversation is accepted.
async function noIds() {
  relay.stripIds = true;
  try {
    const c = "c-no-ids";
    const p = app.send(c, "m1", `pay fred 410 ref ${c}`);
    const n = await holdAfterPayment(c);
    provider.cutNow(n, "reset");
    const r = await p;
    const next = await app.send(c, "m2", "hello");
    const store = await committed(c);
    const noId = store.calls.every((x) => x?.id === undefined) && store.responses.every((x) => x?.id === undefined);
    await judge("4 calls without ids, cut after the payment: retried, paid once; committed without ids; the next message accepted", c, [r, next], { ok: (answered(r) && answered(next) && noId) || { r, next, store } });
    const c2 = "c-no-ids-twice";
    const q = app.send(c2, "m1", `pay twice gus 120 ref ${c2}`);
    const n2 = await holdAfterPayment(c2, { call: 1, payments: 2 });
    provider.cutNow(n2, "reset");
    const r2 = await q;
    await judge("4 two identical calls without ids, cut after both: two payments", c2, [r2], { expect: 2, ok: answered(r2) || r2 });
  } finally {
    relay.stripIds = false;
  }
}

// 4b. A finishReason other than STOP. MAX_TOKENS inside a second payment's arguments (the mock
// sends no part for the cut call): the first, whole, was paid; the turn fails for good, not retried.
// The relay's MAX_TOKENS / SAFETY / MALFORMED_FUNCTION_CALL chunk carrying the call: never dispatched.
async function finishReasons() {
  {
    const c = "c-max-tokens";
    const r = await app.send(c, "m1", `pay long hana 510 ref ${c}`);
    const n = requestsOf(c).length;
    console.log(`    told: ${JSON.stringify(r.text)}; ${n} request(s)`);
    await judge("4 MAX_TOKENS inside a second call's arguments: the whole first call paid and told, the turn failed for good (one request), nothing committed", c, [r], { expect: 1, committed: 0, ok: (r.status === "failed" && !r.retryable && n === 1 && r.effects.some((e) => e.effect === "happened")) || { r, n } });
    // The user asks again in a new message (a new id): it takes the failed turn's index (TURN-12), and its payment meets the row.
    const again = await app.send(c, "m2", `pay hana 510 ref ${c}`);
    const call = again.status === "answered" ? again.calls.find((x) => x.name === "send_payment") : undefined;
    console.log(`    asked again as m2: ${JSON.stringify(again.text)}; its payment ${JSON.stringify(call?.result)}`);
    await judge("5 after that failure the user asks again in a new message: answered with the payment that happened, not a second one", c, [r, again], { expect: 1, ok: answered(again) || again });
  }
  // Calls in the very chunk that says STOP (Gemini often sends the last call with the finish): dispatched, committed.
  relay.finishAs = "STOP";
  try {
    const c = "c-finish-stop-with-calls";
    const r = await app.send(c, "m1", `pay olga 150 ref ${c}`);
    await judge("6 the calls in the chunk that says finishReason STOP: dispatched there, committed", c, [r], { ok: answered(r) || r });
  } finally {
    relay.finishAs = undefined;
  }
  // A prompt Gemini blocks: one chunk of promptFeedback.blockReason, no candidate. The same request is blocked again.
  relay.blockPrompt = "PROHIBITED_CONTENT";
  try {
    const c = "c-prompt-blocked";
    const r = await app.send(c, "m1", `pay pete 90 ref ${c}`);
    const n = requestsOf(c).length;
    console.log(`    blocked prompt: told ${JSON.stringify(r.text)}; ${n} request(s)`);
    await judge("6 a blocked prompt (promptFeedback.blockReason, no candidate): nothing ran, one request, told a re-send will not help", c, [r], { expect: 0, ok: (r.status === "failed" && !r.retryable && n === 1 && r.text.includes("PROHIBITED_CONTENT")) || { r, n } });
  } finally {
    relay.blockPrompt = undefined;
  }
  for (const reason of ["MAX_TOKENS", "SAFETY", "MALFORMED_FUNCTION_CALL"]) {
    relay.finishAs = reason;
    try {
      const c = `c-finish-${reason.toLowerCase()}`;
      const r = await app.send(c, "m1", `pay ivan 120 ref ${c}`);
      const n = requestsOf(c).length;
      const abandoned = app.stderr().split("\n").filter((l) => l.startsWith(`call_abandoned ${c} `)).length;
      console.log(`    ${reason}: told ${JSON.stringify(r.text)}; ${n} request(s); ${abandoned} call(s) abandoned`);
      await judge(`4 finishReason ${reason} in the chunk carrying the calls: nothing dispatched, not retried, told a re-send will not help`, c, [r], { expect: 0, ok: (r.status === "failed" && !r.retryable && n === 1 && abandoned === 2 && r.text.includes(reason)) || { r, n, abandoned } });
    } finally {
      relay.finishAs = undefined;
    }
  }
}

// 5a. The user re-sends after a failure: Google's error envelope after the payment on every attempt;
// told the payment happened and to re-send; the re-send (the API healthy again) answered from the ledger.
async function exhausted() {
  const c = "c-exhausted";
  let failing = true;
  provider.setFaultPlan((req) => (failing && firstRequestOf(c)(req) ? { kind: "error_event", at: { afterToolUseStop: 1 }, error: { type: "rate_limit_error", message: "Resource has been exhausted (e.g. check quota)." } } : undefined));
  const f = await app.send(c, "m1", `pay hugo 450 ref ${c}`);
  failing = false;
  provider.setFaultPlan(undefined);
  const g = await app.send(c, "m1", `pay hugo 450 ref ${c}`);
  if (process.env.DEBUG_SEND) for (const q of provider.requests.filter((q) => sent(q).includes(c))) console.log(q.requestNumber, q.outcome, JSON.stringify(q.events.map((e) => [e.type, (e.data as { delta?: unknown }).delta])).slice(0, 600));
  console.log(`    told after the retries ran out: ${JSON.stringify(f.text)} (${f.status === "failed" ? f.cause : ""}); the re-send: ${JSON.stringify(g.text)}`);
  const toldHappened = f.status === "failed" && f.retryable && f.effects.some((e) => e.name === "send_payment" && e.effect === "happened");
  await judge("5 a 429 envelope after the payment on every attempt; the user re-sends: one payment", c, [f, g], { ok: (toldHappened && answered(g)) || { f, g } });
}

// 5b. SIGKILL after the payment; the operator looks; restart; the client re-sends.
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
  app = await startServer();
  const r2 = await app.send(c, "m1", `pay gina 610 ref ${c}`);
  await judge("5 SIGKILL after the payment, restart, the same message re-sent: the turn taken over, paid once", c, [r1, r2], { ok: answered(r2) || { r2 } });
  // The same, but the next send to the conversation is ANOTHER message: the dead one is resumed first
  // (TURN-15), the new one answered after it; its sender re-sends and is answered from the store.
  const d = "c-killed-next";
  const q = app.send(d, "m1", `pay quinn 620 ref ${d}`);
  await holdAfterPayment(d);
  await app.kill();
  const s1 = await q;
  await sleep(4500);
  app = await startServer();
  const s2 = await app.send(d, "m2", "hello");
  const s3 = await app.send(d, "m1", `pay quinn 620 ref ${d}`);
  console.log(`    m2 answered: ${JSON.stringify(s2.text)}; m1 re-sent: ${JSON.stringify(s3.text)} (${s3.status === "answered" ? s3.calls.map((x) => x.name).join(", ") : s3.status})`);
  await judge("5 SIGKILL after the payment, restart, another message sent first: the dead one resumed before it, paid once, told on its re-send", d, [s1, s2, s3], { ok: (answered(s2) && answered(s3) && s3.calls.some((x) => x.name === "send_payment" && x.error === undefined)) || { s2, s3 } });
}

// 6a. Parallel calls: two payments to two payees in one response, cut after both.
async function parallel() {
  const c = "c-parallel";
  const p = app.send(c, "m1", `pay both jon kim 700 ref ${c}`);
  const n = await holdAfterPayment(c, { call: 1, payments: 2 });
  provider.cutNow(n, "reset");
  const r = await p;
  await judge("6 two calls in one response (two payees), cut after both: each paid once", c, [r], { expect: 2, ok: answered(r) || r });
  relay.mergeCalls = 2;
  try {
    const c2 = "c-parallel-one-chunk";
    const q = app.send(c2, "m1", `pay both ola pia 330 ref ${c2}`);
    const n2 = await holdAfterPayment(c2, { call: 1, payments: 2 });
    provider.cutNow(n2, "reset");
    const r2 = await q;
    await judge("6 two calls in ONE chunk (Gemini's parallel function calls), cut after it: each paid once", c2, [r2], { expect: 2, ok: answered(r2) || r2 });
  } finally {
    relay.mergeCalls = 0;
  }
}

// 6b. thoughtSignature parts: thoughts on; a cut after the payment, retried; the committed turn keeps
// the thought parts and their signature as sent, so the next message's request (which carries them) is accepted.
async function thoughts() {
  const thinker = await startServer({ THOUGHTS: "1" });
  try {
    const c = "c-thoughts";
    const p = thinker.send(c, "m1", `pay lena 380 ref ${c}`);
    const n = await holdAfterPayment(c);
    provider.cutNow(n, "reset");
    const r = await p;
    const next = await thinker.send(c, "m2", "hello");
    const log = (await readStore.log(c)).flat() as { role?: string; parts?: { thought?: boolean; thoughtSignature?: string }[] }[];
    const signed = log.filter((m) => m.role === "model").flatMap((m) => m.parts ?? []).filter((x) => x.thoughtSignature !== undefined).length;
    const invalid = provider.requests.filter((q) => q.outcome === "invalid_request" && sent(q).includes(c)).map((q) => q.error);
    console.log(`    committed parts with a thoughtSignature: ${signed}; requests refused: ${JSON.stringify(invalid)}`);
    await judge("6 thoughts and thoughtSignature, cut after the payment: retried, paid once; the signed turn committed as sent and the next message accepted", c, [r, next], { ok: (answered(r) && answered(next) && signed >= 2 && invalid.length === 0) || { r, next, invalid } });
  } finally {
    await stop(thinker);
  }
}

// 6c. A relay that sent the request again and spliced the new response into the body (its own responseId).
async function splice() {
  const c = "c-splice";
  provider.setFaultPlan((req, info) => (firstRequestOf(c)(req) && info.attempt === 1 ? { kind: "splice", at: { afterToolUseStop: 0 }, messageStart: true } : undefined));
  const r = await app.send(c, "m1", `pay mia 240 ref ${c}`);
  provider.setFaultPlan(undefined);
  const seen = failuresOf(app, c);
  console.log(`    the runner saw: ${seen.join(" | ")}`);
  await judge("6 a second response spliced into the body (another responseId) after the payment: a failed stream, paid once", c, [r], { ok: (answered(r) && seen.length === 1 && seen[0]!.includes("spliced")) || { r, seen } });
}

// 6d. A re-send of an answered message, and two processes sending one message at once.
async function resend() {
  const c = "c-resend";
  const a = await app.send(c, "m1", `pay nils 700 ref ${c}`);
  const other = await startServer();
  const [b, b2] = await Promise.all([app.send(c, "m1", `pay nils 700 ref ${c}`), other.send(c, "m1", `pay nils 700 ref ${c}`)]);
  await stop(other);
  const reused = await app.send(c, "m1", `pay nils 7000 ref ${c}`);
  await judge("6 the same message re-sent after its answer, twice at once on two processes (and its id reused for another text)", c, [a, b, b2], { ok: (canon(brief(a)) === canon(brief(b)) && canon(brief(a)) === canon(brief(b2)) && reused.status === "error" && reused.code === "message_id_reused") || { a, b, b2, reused } });
}

async function operator() {
  console.log("--- operator: what the whole trial left");
  show("list --state in_flight,unknown", cli("list", ...L, "--state", "in_flight,unknown"));
  show("turns --failed", cli("turns", "--failed", ...S));
  show("turns --stalled", cli("turns", "--stalled", ...S));
}

const scenarios: Record<string, () => Promise<void>> = { cuts, reword, twice, noIds, finishReasons, exhausted, killed, parallel, thoughts, splice, resend, operator };
try {
  app = await startServer();
  for (const [name, run] of Object.entries(scenarios)) {
    if (only !== undefined && !only.split(",").includes(name)) continue;
    try { await run(); } catch (error) { results.push({ scenario: name, ok: false, detail: String((error as Error).stack) }); console.log(`FAIL ${name} threw: ${(error as Error).message}`); provider.setFaultPlan(undefined); }
  }
} finally {
  if (process.env.VERBOSE || results.some((r) => !r.ok)) console.log(JSON.stringify(results.filter((r) => process.env.VERBOSE || !r.ok), null, 1));
  for (const s of [...servers]) { if (s.stderr().trim()) console.log(`--- server ${s.child.pid} stderr\n${s.stderr().trim()}`); await stop(s); }
  await readStore.close();
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  if (!process.env.KEEP) await admin.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await admin.end();
  relayServer.close();
  await provider.close();
  await payments.close();
}
console.log(`${results.filter((r) => r.ok).length}/${results.length} passed${PLANT ? ` (PLANT=${PLANT})` : ""}`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
