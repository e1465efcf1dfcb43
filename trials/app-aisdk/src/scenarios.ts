// Plays useChat-style clients (the AI SDK's own AbstractChat + DefaultChatTransport, in Node) against
// dist/server.js processes. Mocks embedded: mock-provider (Anthropic Messages API) scripted by the
// user's text ("call send_payment {json}"), mock-payments with requireIdempotencyKey. Redis reached
// through a TCP proxy the script can cut. Usage: node dist/scenarios.js [name...]
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, connect, type Socket, type Server } from "node:net";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, type ChatState, type ChatStatus, type UIMessage } from "ai";
import { defaultScript, say, startMockProvider, turn, lastUserText, type Fault, type MockProvider } from "@dispatch-once/mock-provider";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Redis } from "ioredis";
import { createRedisLedger } from "@dispatch-once/ledger-redis";

const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
// TRIAL_TAG (optional) goes into the key prefix, so a run on a shared Redis is told apart.
const PREFIX = process.env.TRIAL_TAG ? `trialai-${process.env.TRIAL_TAG}-${process.pid}` : `trialai-${process.pid}`;

// ---- a Redis proxy that can be cut -----------------------------------------------------------
class Proxy {
  server!: Server;
  port = 0;
  down = false;
  sockets = new Set<Socket>();
  async start() {
    const target = new URL(REDIS_URL);
    this.server = createServer((client) => {
      if (this.down) return void client.destroy();
      const upstream = connect(Number(target.port || 6379), target.hostname);
      this.sockets.add(client).add(upstream);
      const drop = () => { client.destroy(); upstream.destroy(); this.sockets.delete(client); this.sockets.delete(upstream); };
      client.on("error", drop).on("close", drop);
      upstream.on("error", drop).on("close", drop);
      client.pipe(upstream).pipe(client);
    });
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    this.port = (this.server.address() as { port: number }).port;
  }
  cut() { this.down = true; for (const s of this.sockets) s.destroy(); this.sockets.clear(); }
  restore() { this.down = false; }
}

// ---- the chat backend as a real process --------------------------------------------------------
class Backend {
  child?: ChildProcess;
  port = 0;
  log: string[] = [];
  constructor(private env: Record<string, string>) {}
  async start() {
    const child = spawn(process.execPath, [new URL("./server.js", import.meta.url).pathname], { env: { ...process.env, ...this.env, PORT: String(this.port) }, stdio: ["ignore", "pipe", "pipe"] });
    this.child = child;
    child.stderr!.on("data", (d) => this.log.push(String(d)));
    const lines = createInterface({ input: child.stdout! });
    const port = await new Promise<number>((resolve, reject) => {
      lines.on("line", (line) => { const m = /^listening (\d+)/.exec(line); if (m) resolve(Number(m[1])); else this.log.push(line); });
      child.on("exit", (code) => reject(new Error(`server exited ${code}: ${this.log.join("")}`)));
    });
    this.port = port;
  }
  get url() { return `http://127.0.0.1:${this.port}/api/chat`; }
  async kill() { const c = this.child!; c.kill("SIGKILL"); if (c.exitCode === null && c.signalCode === null) await once(c, "exit"); }
  async stop() { const c = this.child; if (c && c.exitCode === null && c.signalCode === null) { c.kill("SIGTERM"); await once(c, "exit"); } }
}

// ---- a browser tab: the AI SDK's chat, with an in-memory state as useChat keeps it --------------
class TabState implements ChatState<UIMessage> {
  status: ChatStatus = "ready";
  error: Error | undefined = undefined;
  constructor(public messages: UIMessage[]) {}
  pushMessage = (m: UIMessage) => { this.messages = [...this.messages, m]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i: number, m: UIMessage) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = <T,>(x: T): T => structuredClone(x);
}
class Tab extends AbstractChat<UIMessage> {
  errors: string[] = [];
  constructor(chatId: string, backend: Backend, messages: UIMessage[] = [], auto = false) {
    super({
      id: chatId,
      transport: new DefaultChatTransport({ api: backend.url, fetch: (input, init) => fetch(backend.url, init) }),
      state: new TabState(structuredClone(messages)),
      onError: (e) => this.errors.push(e.message),
      ...(auto ? { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses } : {}),
    });
  }
}

// ---- what the user saw --------------------------------------------------------------------------
type Told = { paid: string[]; errors: string[]; notices: { effect: string; id?: string; summary: string }[]; denied: unknown[]; approvals: string[] };
function toldBy(messages: UIMessage[]): Told {
  const told: Told = { paid: [], errors: [], notices: [], denied: [], approvals: [] };
  for (const m of messages) {
    if (m.role !== "assistant") continue;
    for (const p of m.parts as Array<Record<string, any>>) {
      if (typeof p.type === "string" && p.type.startsWith("tool-")) {
        if (p.state === "output-available") told.paid.push(`${p.output.id}:${p.output.payee}:${p.output.amount}`);
        if (p.state === "output-error") told.errors.push(String(p.errorText).slice(0, 120));
        if (p.state === "approval-requested") told.approvals.push(p.approval.id);
      }
      if (p.type === "data-unanswered") for (const c of p.data) told.notices.push({ effect: c.effect, id: c.result?.id, summary: c.summary });
      if (p.type === "data-denied-but-done") told.denied.push(...p.data);
      if (p.type === "data-ledger") told.errors.push(`ledger: ${p.data.error}`);
    }
  }
  return told;
}

// ---- world ----------------------------------------------------------------------------------------
let askInstead = false;
const provider: MockProvider = await startMockProvider({
  seed: "trialai",
  script: (request) => (askInstead && !/Done|tool_result/.test(JSON.stringify((request as { messages: unknown[] }).messages.at(-1))) ? turn(say("Which account should I pay from?")) : defaultScript(request)),
});
const payments: MockPaymentsServer = await startMockPayments({ requireIdempotencyKey: true });
const proxy = new Proxy();
await proxy.start();
const backend = new Backend({ PROVIDER_URL: provider.baseURL, PAYMENTS_URL: payments.url, REDIS_URL: `redis://127.0.0.1:${proxy.port}`, LEDGER_PREFIX: PREFIX });
await backend.start();

const ask = (payee: string, amount: number, tool = "send_payment") => `call ${tool} ${JSON.stringify({ payee, amount })}`;
const effectsOf = (payee: string) => payments.effects().filter((e) => e.kind === "payment_created" && (e.payload as { payee?: string }).payee === payee).map((e) => `${e.resourceId}:${payee}:${(e.payload as { amount: number }).amount}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, check: () => boolean, ms = 15_000) { const end = Date.now() + ms; while (!check()) { if (Date.now() > end) throw new Error(`timed out waiting for ${what}`); await sleep(20); } }
let faultFor: ((n: number) => Fault | undefined) | undefined;
provider.setFaultPlan((_req, info) => faultFor?.(info.requestNumber));

type Verdict = { name: string; pass: boolean; detail: Record<string, unknown> };
const verdicts: Verdict[] = [];
/** Every effect of these payees is told to the user somewhere (a tool output or a "happened" notice), and the count is what the user asked. */
function judge(name: string, payees: string[], expected: number, tabs: Tab[], extra: Record<string, unknown> = {}, ok = true) {
  const effects = payees.flatMap(effectsOf);
  const told = tabs.map((t) => toldBy(t.messages));
  const toldIds = new Set(told.flatMap((t) => [...t.paid.map((p) => p.split(":")[0]), ...t.notices.filter((n) => n.effect === "happened").map((n) => n.id)]));
  const untold = effects.filter((e) => !toldIds.has(e.split(":")[0]!));
  const falseIds = [...toldIds].filter((id) => id && !effects.some((e) => e.startsWith(`${id}:`)));
  const pass = ok && effects.length === expected && untold.length === 0 && falseIds.length === 0;
  verdicts.push({ name, pass, detail: { expected, effects, untold, falseIds, told, tabErrors: tabs.map((t) => t.errors), ...extra } });
  console.log(`${pass ? "PASS" : "GAP "} ${name}\n${JSON.stringify(verdicts.at(-1)!.detail, null, 1).replace(/\n\s*/g, " ")}`);
}
const chat = (n: string) => `trialai_${process.pid}_${n}`;
// The ledger as the server sees it (straight to Redis, not through the proxy): a payment row's state.
const observer = await createRedisLedger({ url: REDIS_URL, prefix: PREFIX });
const paymentRows = async (conversationId: string) => (await observer.listRows!({ conversationId, toolName: "send_payment" })).rows.map((r) => r.state);

const scenarios: Record<string, () => Promise<void>> = {
  // 1. regenerate after a cut stream that happened after the payment
  async regenerate() {
    for (const askQuestion of [false, true]) {
      const payee = askQuestion ? "r1q" : "r1";
      const tab = new Tab(chat(`regen${askQuestion ? "q" : ""}`), backend);
      const first = provider.requests.length + 1;
      faultFor = (n) => (n === first ? { kind: "reset", at: { afterToolUseStop: 0 } } : undefined);
      await tab.sendMessage({ text: ask(payee, 5) });
      await until("the cut payment", () => effectsOf(payee).length === 1);
      const afterCut = toldBy(tab.messages);
      askInstead = askQuestion;
      await tab.regenerate();
      askInstead = false;
      judge(`1 regenerate after a cut after the payment (model ${askQuestion ? "asks a question" : "pays again"})`, [payee], 1, [tab], { afterCut, status: tab.status });
    }
  },
  // 2. the same history twice at once
  async race() {
    const u: UIMessage = { id: "u-race", role: "user", parts: [{ type: "text", text: ask("r2", 7) }] };
    const a = new Tab(chat("race"), backend, [u]);
    const b = new Tab(chat("race"), backend, [u]);
    await Promise.all([a.regenerate(), b.regenerate()]);
    judge("2 the same history resubmitted twice at once", ["r2"], 1, [a, b]);
  },
  // 3. two tabs, two different new user messages on the same history
  async tabs() {
    const base = new Tab(chat("tabs"), backend);
    await base.sendMessage({ text: "say hello" });
    const a = new Tab(chat("tabs"), backend, base.messages);
    const b = new Tab(chat("tabs"), backend, base.messages);
    await Promise.all([a.sendMessage({ text: ask("t3a", 5) }), b.sendMessage({ text: ask("t3b", 7) })]);
    judge("3a two tabs, two new messages at once, different payees", ["t3a", "t3b"], 2, [a, b]);
    const c = new Tab(chat("tabs2"), backend);
    await c.sendMessage({ text: "say hello" });
    const d = new Tab(chat("tabs2"), backend, c.messages);
    const e = new Tab(chat("tabs2"), backend, c.messages);
    await Promise.all([d.sendMessage({ text: ask("t3c", 5) }), e.sendMessage({ text: ask("t3c", 5) })]);
    judge("3b two tabs, two new messages at once, same payee and amount (two asks)", ["t3c"], 2, [d, e]);
    // 3c: not at once: tab f pays, tab g (stale, never saw f's turn) asks the same payment later
    const f0 = new Tab(chat("tabs3"), backend);
    await f0.sendMessage({ text: "say hello" });
    const f = new Tab(chat("tabs3"), backend, f0.messages);
    const g = new Tab(chat("tabs3"), backend, f0.messages);
    await f.sendMessage({ text: ask("t3d", 5) });
    await g.sendMessage({ text: ask("t3d", 5) });
    judge("3c a stale tab asks the same payment later (two asks)", ["t3d"], 2, [f, g]);
  },
  // 4. edit-and-resend of the last user message after its payment happened
  async edit() {
    const tab = new Tab(chat("edit"), backend);
    await tab.sendMessage({ text: ask("e4", 5) });
    const id = tab.messages.find((m) => m.role === "user")!.id;
    await tab.sendMessage({ text: ask("e4", 5), messageId: id });
    judge("4a edit-and-resend, the same ask", ["e4"], 1, [tab]);
    await tab.sendMessage({ text: ask("e4", 9), messageId: id });
    judge("4b edit-and-resend, amount changed 5 -> 9 (the 5 happened; the 9 is asked)", ["e4"], 2, [tab]);
  },
  // 5. tool approvals: double click, and an approval after the server restarted
  async approval() {
    const tab = new Tab(chat("appr"), backend);
    await tab.sendMessage({ text: ask("a5", 11, "send_large_payment") });
    const approvalId = toldBy(tab.messages).approvals[0]!;
    const twin = new Tab(chat("appr"), backend, tab.messages);
    tab.addToolApprovalResponse({ id: approvalId, approved: true });
    twin.addToolApprovalResponse({ id: approvalId, approved: true });
    await Promise.all([tab.sendMessage(), twin.sendMessage()]);
    judge("5a an approval sent twice at once (double click)", ["a5"], 1, [tab, twin]);
    const t2 = new Tab(chat("appr2"), backend);
    await t2.sendMessage({ text: ask("a5b", 12, "send_large_payment") });
    await backend.kill();
    await backend.start();
    t2.addToolApprovalResponse({ id: toldBy(t2.messages).approvals[0]!, approved: true });
    await t2.sendMessage();
    const again = new Tab(chat("appr2"), backend, t2.messages.slice(0, -0 || undefined));
    judge("5b an approval arriving after the server restarted", ["a5b"], 1, [t2], { againMessages: again.messages.length });
    // 5c: the approval re-sent after it ran (the client appends it again) and a denial of an approval that ran
    const t3 = new Tab(chat("appr3"), backend);
    await t3.sendMessage({ text: ask("a5c", 13, "send_large_payment") });
    const before = structuredClone(t3.messages);
    const aid = toldBy(t3.messages).approvals[0]!;
    t3.addToolApprovalResponse({ id: aid, approved: true });
    await t3.sendMessage();
    const other = new Tab(chat("appr3"), backend, before);
    other.addToolApprovalResponse({ id: aid, approved: false });
    await other.sendMessage();
    const otherTold = toldBy(other.messages);
    judge("5c a second tab denies the approval that already ran", ["a5c"], 1, [t3, other], { denied: otherTold.denied }, otherTold.denied.length === 1);
  },
  // 6. the server SIGKILLed after the payment, before the stream's end; the client resubmits
  async kill() {
    const tab = new Tab(chat("kill"), backend);
    const first = provider.requests.length + 1;
    faultFor = (n) => (n === first ? { kind: "hold", at: { beforeMessageStop: true } } : undefined);
    const sending = tab.sendMessage({ text: ask("k6", 6) });
    await until("the payment", () => effectsOf("k6").length === 1);
    // The situation is "after the payment": its ledger row completed. Killed in the window between
    // the payment and its record (a race the first re-run lost with core's default leases), the
    // row is in flight, which is 6b's situation (FRICTION 12).
    for (let end = Date.now() + 15_000; !(await paymentRows(chat("kill"))).includes("completed"); await sleep(20)) if (Date.now() > end) throw new Error("timed out waiting for the payment's record");
    await provider.waitForHold(first);
    await backend.kill();
    const rowAtKill = await paymentRows(chat("kill")); // "completed": the kill came after the payment's record
    if (provider.held.some((h) => h.requestNumber === first)) provider.cutNow(first);
    await sending;
    const afterKill = toldBy(tab.messages);
    await backend.start();
    await tab.regenerate();
    judge("6 server SIGKILLed after the payment; the client regenerates", ["k6"], 1, [tab], { afterKill, rowAtKill });
    // 6b: killed while the payments API is still making the payment (its claim stays in flight for its lease)
    const t2 = new Tab(chat("kill2"), backend);
    payments.injectFault({ latencyMs: 1500 }, { times: 1 });
    const sending2 = t2.sendMessage({ text: ask("k6b", 6) });
    await until("the payment in flight", () => payments.inFlight().length > 0);
    await backend.kill();
    await sending2;
    await backend.start();
    await t2.regenerate(); // at once: the dead process's claim is still leased
    const atOnce = toldBy(t2.messages);
    const leaseMs = process.env.DEFAULT_LEASES === "1" ? 30_000 : 3_000;
    await sleep(leaseMs + 500);
    await t2.regenerate();
    judge("6b server SIGKILLed while the payment is in flight; regenerate at once, then after the lease", ["k6b"], 1, [t2], { atOnce }, atOnce.paid.length > 0 || atOnce.errors.some((e) => /in_flight_elsewhere|outcome_unknown/.test(e)));
  },
  // 7. the ledger unreachable at the claim, and at the record after the payment
  async ledger() {
    const tab = new Tab(chat("ledger"), backend);
    proxy.cut();
    await tab.sendMessage({ text: ask("l7", 8) });
    const atClaim = toldBy(tab.messages);
    proxy.restore();
    await sleep(2500); // ioredis reconnects
    const claimNoEffect = effectsOf("l7").length === 0;
    await tab.regenerate();
    judge("7a ledger down at the claim (told not paid), then regenerate", ["l7"], 1, [tab], { atClaim }, claimNoEffect);
    const t2 = new Tab(chat("ledger2"), backend);
    payments.setFaultPlan(null);
    const off = setInterval(() => { if (effectsOf("l7b").length > 0) { proxy.cut(); clearInterval(off); } }, 1);
    await t2.sendMessage({ text: ask("l7b", 9) });
    clearInterval(off);
    const atRecord = toldBy(t2.messages);
    proxy.restore();
    await sleep(4000); // reconnect; the claim's lease (3 s) runs out
    await t2.regenerate();
    judge("7b ledger down right after the payment (at the record), then regenerate", ["l7b"], 1, [t2], { atRecord });
  },
  // 8. history parts rewritten / dropped; a new chat id for the same conversation
  async history() {
    // 8a: the client drops the tool part of the paid turn and regenerates (e.g. a client that strips tool parts)
    const tab = new Tab(chat("hist"), backend);
    await tab.sendMessage({ text: ask("h8", 4) });
    const user = tab.messages.find((m) => m.role === "user")!;
    const stripped = new Tab(chat("hist"), backend, [user]);
    await stripped.regenerate();
    judge("8a history stripped of the turn's answer, regenerated", ["h8"], 1, [tab, stripped]);
    // 8b: the same user message id reused for a new ask (a client with a fixed id generator)
    const c = new Tab(chat("hist2"), backend);
    await c.sendMessage({ id: "same", role: "user", parts: [{ type: "text", text: ask("h8b", 3) }] } as never);
    await c.sendMessage({ id: "same", role: "user", parts: [{ type: "text", text: ask("h8b", 3) }] } as never);
    judge("8b a client reuses a user message id for its second ask of the same payment", ["h8b"], 2, [c], { userIds: c.messages.filter((m) => m.role === "user").map((m) => m.id) });
    // 8c: the same conversation under a new chat id (a client that mints the id per page load) regenerates a cut turn
    const d = new Tab(chat("hist3"), backend);
    const first = provider.requests.length + 1;
    faultFor = (n) => (n === first ? { kind: "reset", at: { afterToolUseStop: 0 } } : undefined);
    await d.sendMessage({ text: ask("h8c", 2) });
    await until("the cut payment", () => effectsOf("h8c").length === 1);
    const reloaded = new Tab(chat("hist3-reloaded"), backend, d.messages);
    await reloaded.regenerate();
    judge("8c a cut turn regenerated under a new chat id (the page reload minted one)", ["h8c"], 1, [d, reloaded]);
  },
};

const picked = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(scenarios);
try {
  for (const name of picked) {
    try { await scenarios[name]!(); } catch (error) { verdicts.push({ name, pass: false, detail: { crashed: String((error as Error).stack) } }); console.log(`CRASH ${name}: ${(error as Error).stack}`); }
  }
} finally {
  await backend.stop();
  await provider.close();
  await payments.close();
  proxy.server.close();
  const redis = new Redis(REDIS_URL);
  const keys = await redis.keys(`${PREFIX}:*`);
  if (keys.length) await redis.del(...keys);
  await redis.quit();
  await observer.close();
  console.log(`\n${verdicts.filter((v) => v.pass).length}/${verdicts.length} pass; server log:\n${backend.log.join("").slice(-3000)}`);
}
process.exit(0);
