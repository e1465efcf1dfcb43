// The agent team's side and the attacker's: real server processes (src/server.mjs), SIGKILLed and
// restarted; a TCP proxy in front of the server that drops a response; a TCP proxy in front of the
// ledger that goes dark. Each situation checks the mock payments API's effect log against what the
// client was told. Usage: node src/scenarios.mjs [name ...]   (LEDGER=redis for the Redis ledger)
import { spawn } from "node:child_process";
import { createServer, connect } from "node:net";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { Dispatcher, MemoryLedger, ToolError, defineTool } from "@dispatch-once/core";
import { z } from "zod";
import { ERROR_META, IDEMPOTENCY_KEY_META, IDENTITY_META, REPLAYED_META, STORED_ARGUMENTS_META, TURN_META, mcpTurn, withIdempotencyKey } from "@dispatch-once/mcp";

const LEDGER = process.env.LEDGER === "redis" ? "redis" : "postgres";
const RUN = `trialmcp_${process.pid}`;
const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const LEASE_MS = 3_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const serverFile = fileURLToPath(new URL("./server.mjs", import.meta.url));

const payments = await startMockPayments({});
let results = [];

// ---- plumbing ---------------------------------------------------------------------------------

/** A TCP proxy: `cutOn(pattern)` destroys the connection when an upstream chunk matches (a lost response); `dark(true)` drops every connection. */
async function tcpProxy(targetHost, targetPort) {
  let cut = null;
  let isDark = false;
  const sockets = new Set();
  const server = createServer((down) => {
    if (isDark) return down.destroy();
    const up = connect(targetPort, targetHost);
    sockets.add(down).add(up);
    const drop = () => { down.destroy(); up.destroy(); sockets.delete(down); sockets.delete(up); };
    up.on("data", (chunk) => {
      if (cut && cut.test(chunk.toString("latin1"))) { cut = null; return drop(); }
      down.write(chunk);
    });
    down.on("data", (chunk) => up.write(chunk));
    up.on("error", drop).on("close", drop);
    down.on("error", drop).on("close", drop);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: server.address().port,
    cutOn(pattern) { cut = pattern; },
    dark(on) { isDark = on; if (on) for (const s of sockets) s.destroy(); },
    close: () => { for (const s of sockets) s.destroy(); return new Promise((r) => server.close(r)); },
  };
}

const pgTarget = new URL(DATABASE_URL);
const redisTarget = new URL(REDIS_URL);
const ledgerProxy = LEDGER === "redis" ? await tcpProxy(redisTarget.hostname, Number(redisTarget.port || 6379)) : await tcpProxy(pgTarget.hostname, Number(pgTarget.port || 5432));
const ledgerUrl = LEDGER === "redis" ? `redis://127.0.0.1:${ledgerProxy.port}` : (() => { const u = new URL(DATABASE_URL); u.hostname = "127.0.0.1"; u.port = String(ledgerProxy.port); return u.href; })();

/** The billing server in its own process. */
async function startServer(extraEnv = {}, port = 0) {
  const child = spawn(process.execPath, [serverFile], {
    env: { ...process.env, PORT: String(port), PAYMENTS_URL: payments.url, LEDGER, PG_URL: ledgerUrl, REDIS_URL: ledgerUrl, PG_SCHEMA: RUN, REDIS_PREFIX: RUN, LEASE_MS: String(LEASE_MS), WAIT_MS: "1000", ...extraEnv },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const ready = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => { out += d; const m = /READY (\d+)/.exec(out); if (m) resolve(Number(m[1])); });
    child.on("exit", (code) => reject(new Error(`server exited ${code}`)));
  });
  return { child, port: ready, url: `http://127.0.0.1:${ready}/mcp`, kill: () => new Promise((r) => { child.once("exit", r); child.kill("SIGKILL"); }), stop: () => new Promise((r) => { child.once("exit", r); child.kill("SIGTERM"); }) };
}

async function connectClient(url, name = "agent", headers) {
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), headers ? { requestInit: { headers } } : undefined));
  return client;
}

const paymentsOf = (reference) => payments.effects().filter((e) => e.kind === "payment_created" && e.payload?.reference === reference);
const invoicesOf = (customer) => payments.effects().filter((e) => e.kind === "invoice_created" && e.payload?.customer === customer);
const errorOf = (r) => r?._meta?.[ERROR_META];
const told = (r) => (r === undefined ? "nothing" : errorOf(r) ? `${errorOf(r).code} (retryable ${errorOf(r).retryable}, effect ${errorOf(r).effect})` : `${r.content?.[0]?.text}${r._meta?.[REPLAYED_META] ? " [replayed]" : ""}`);
const paymentIdIn = (r) => /pay_[0-9a-f]+/.exec(r?.content?.map((c) => c.text).join(" ") ?? "")?.[0];
async function waitFor(check, ms = 10_000) {
  const end = Date.now() + ms;
  while (Date.now() < end) { if (await check()) return true; await sleep(25); }
  return false;
}
/** Re-send until the guard answers something other than "in flight" (what a client should do on retryable same_message). */
async function resendUntilSettled(turn, params, log, limitMs = 15_000) {
  const end = Date.now() + limitMs;
  for (;;) {
    let r;
    try { r = await turn.resend(params); } catch (e) { log.push(`resend threw ${e.constructor.name}: ${e.message.slice(0, 120)}`); await sleep(200); if (Date.now() > end) return undefined; continue; }
    log.push(`resend told: ${told(r)}`);
    if (errorOf(r)?.retryable !== "same_message" || Date.now() > end) return r;
    await sleep(300);
  }
}

function verdict(name, situation, ok, lines) {
  results.push({ name, ok });
  console.log(`\n=== ${name}: ${situation}\n${lines.map((l) => `  ${l}`).join("\n")}\n  VERDICT: ${ok ? "PASS" : "FAIL"}`);
}

// ---- situations ---------------------------------------------------------------------------------

const scenarios = {
  /** 1. The agent's stream cut after the MCP tool ran; the turn is retried with the same key; then a re-run whose model re-words the memo; then one whose model makes no call. */
  async retry(srv) {
    const ref = `${RUN}-retry`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 3 };
    const client = await connectClient(srv.url);
    const { tools } = await client.listTools();
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 1250, reference: ref, memo: "March rent" } };
    const first = await mcpTurn(client, ctx, { tools }).callTool(call); // the stream is cut: the agent never saw this
    const again = await mcpTurn(client, ctx, { tools }).callTool(call);
    const reworded = await mcpTurn(client, ctx, { tools }).callTool({ ...call, arguments: { ...call.arguments, memo: "rent for March" } });
    const silent = mcpTurn(client, ctx, { tools });
    const unanswered = await silent.unansweredCalls();
    await client.close();
    const effects = paymentsOf(ref);
    const ok = effects.length === 1 && [first, again, reworded].every((r) => paymentIdIn(r) === effects[0].resourceId) && again._meta?.[REPLAYED_META] === true
      && reworded._meta?.[STORED_ARGUMENTS_META]?.memo === "March rent" && unanswered.listed && unanswered.calls.length === 1 && unanswered.calls[0].effect === "happened";
    verdict("retry", "stream cut after the tool ran, turn retried (same key), re-worded regenerate, re-run without the call", ok, [
      `attempt 1 (lost): ${told(first)}`, `attempt 2: ${told(again)}`, `re-worded attempt: ${told(reworded)}, stored-arguments memo ${JSON.stringify(reworded._meta?.[STORED_ARGUMENTS_META]?.memo)}`,
      `attempt without the call, unansweredCalls: listed=${unanswered.listed} ${JSON.stringify(unanswered.calls.map((c) => [c.name, c.effect, c.arguments?.reference === ref]))}`,
      `effect log: ${effects.length} payment(s) ${effects.map((e) => e.resourceId).join(" ")}`,
    ]);
  },

  /** 2. SIGKILL after the payment, before the response; restart; the client re-sends (and a new attempt of the turn). */
  async kill(srv, ctl) {
    const ref = `${RUN}-kill`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 0 };
    const log = [];
    let client = await connectClient(srv.url);
    const { tools } = await client.listTools();
    let turn = mcpTurn(client, ctx, { tools });
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 990, reference: ref, memo: "slow:4000" } };
    // The SDK's default request timeout is 60 s: a response stream cut by the server's death is not
    // surfaced before it (FRICTION). The agent gives the call 8 s.
    const pending = turn.callTool(call, undefined, { timeout: 8_000 }).then((r) => ({ r }), (e) => ({ e }));
    await waitFor(() => paymentsOf(ref).length === 1);
    await srv.kill();
    const srv2 = await ctl.restart(srv);
    // While the dead process's claim still holds its lease: what is the client told?
    const early = await turn.resend(call);
    log.push(`re-send at once after the restart (claim of the dead process within its lease): ${told(early)}`);
    log.push(`  its text: ${early.content?.[0]?.text}`);
    const listing = await mcpTurn(client, ctx, { tools }).unansweredCalls();
    log.push(`unansweredCalls of a new attempt meanwhile: listed=${listing.listed} ${JSON.stringify(listing.calls.map((c) => [c.name, c.state, c.effect]))}`);
    const lost = await pending;
    log.push(`the call in flight when the server was killed: ${lost.e ? `rejected ${lost.e.constructor.name}: ${lost.e.message.slice(0, 100)}` : told(lost.r)}`);
    // Stateless server: the same client object keeps working against the restarted process.
    const settled = await resendUntilSettled(turn, call, log);
    // A fresh attempt of the turn (the agent re-ran it after the restart), new client.
    await client.close();
    client = await connectClient(srv2.url);
    const rerun = await mcpTurn(client, ctx, { tools }).callTool(call);
    log.push(`new attempt of the turn: ${told(rerun)}`);
    await client.close();
    const effects = paymentsOf(ref);
    log.push(`effect log: ${effects.length} payment(s) ${effects.map((e) => e.resourceId).join(" ")}`);
    const inflightTold = errorOf(early)?.code === "in_flight_elsewhere" && errorOf(early)?.retryable === "same_message" && errorOf(early)?.effect === "possibly" && listing.calls.some((c) => c.effect === "may_have_happened");
    const ok = effects.length === 1 && paymentIdIn(settled) === effects[0].resourceId && paymentIdIn(rerun) === effects[0].resourceId && inflightTold;
    verdict("kill", "server SIGKILLed after the payment, before its response; restarted; re-send and re-run", ok, log);
    return srv2;
  },

  /** 2b. The same with an unkeyed_write (invoices: no downstream key): after the lease, outcome_unknown, never re-run. PostgreSQL (durable) only. */
  async killUnkeyed(srv, ctl) {
    if (LEDGER !== "postgres") return srv;
    const customer = `slow-${RUN}`;
    const ctx = { conversationId: `c-${RUN}-inv`, turnIndex: 0 };
    const log = [];
    const client = await connectClient(srv.url);
    const turn = mcpTurn(client, ctx);
    const call = { name: "create_invoice", arguments: { customer, amount: 4200 } };
    const pending = turn.callTool(call, undefined, { timeout: 8_000 }).then((r) => ({ r }), (e) => ({ e }));
    await waitFor(() => invoicesOf(customer).length === 1);
    await srv.kill();
    await pending;
    const srv2 = await ctl.restart(srv);
    const settled = await resendUntilSettled(turn, call, log);
    await sleep(LEASE_MS + 500);
    const later = await turn.resend(call);
    log.push(`re-send after another lease: ${told(later)}`);
    await client.close();
    const effects = invoicesOf(customer);
    log.push(`effect log: ${effects.length} invoice(s)`);
    const ok = effects.length === 1 && errorOf(settled)?.code === "outcome_unknown" && errorOf(settled)?.effect === "possibly" && errorOf(later)?.code === "outcome_unknown";
    verdict("killUnkeyed", "unkeyed_write: server SIGKILLed after the invoice; re-sends", ok, log);
    return srv2;
  },

  /** 2c. The server keeps sessions in memory (SESSIONS=1): after the restart, what does the client's re-send do? */
  async killSession(srv, ctl) {
    const ref = `${RUN}-killsess`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 0 };
    const log = [];
    await srv.stop();
    let s = await startServer({ SESSIONS: "1" }, srv.port);
    const client = await connectClient(s.url);
    const turn = mcpTurn(client, ctx);
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 77, reference: ref, memo: "slow:3000" } };
    const pending = turn.callTool(call, undefined, { timeout: 8_000 }).then((r) => ({ r }), (e) => ({ e }));
    await waitFor(() => paymentsOf(ref).length === 1);
    await s.kill();
    await pending;
    s = await startServer({ SESSIONS: "1" }, srv.port);
    let settled;
    try { settled = await turn.resend(call); log.push(`re-send on the old session: ${told(settled)}`); } catch (e) { log.push(`re-send on the old session threw ${e.constructor.name} code=${e.code}: ${e.message.slice(0, 140)}`); }
    if (settled === undefined) {
      // Reconnect (new session); the turn's bookkeeping is per client, so a new mcpTurn for the same attempt.
      const fresh = await connectClient(s.url);
      // resend() only knows calls this McpTurn sent: the new attempt's first identical call carries ordinal 0, the same key.
      const again = mcpTurn(fresh, ctx);
      settled = await again.callTool(call);
      log.push(`the same call from a new mcpTurn on a new session: ${told(settled)}`);
      if (errorOf(settled)?.retryable === "same_message") settled = await resendUntilSettled(again, call, log);
      await fresh.close();
    }
    await client.close().catch(() => {});
    const effects = paymentsOf(ref);
    log.push(`effect log: ${effects.length} payment(s)`);
    const ok = effects.length === 1 && paymentIdIn(settled) === effects[0].resourceId;
    verdict("killSession", "stateful sessions: server SIGKILLed after the payment, restarted (sessions gone)", ok, log);
    await s.stop();
    return ctl.restart(srv);
  },

  /** 3. A proxy drops the response after the handler ran; the client re-sends; and the SDK's request timeout (notifications/cancelled mid-call). */
  async proxycut(srv) {
    const ref = `${RUN}-cut`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 1 };
    const log = [];
    const proxy = await tcpProxy("127.0.0.1", srv.port);
    const client = await connectClient(`http://127.0.0.1:${proxy.port}/mcp`);
    const turn = mcpTurn(client, ctx);
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 555, reference: ref } };
    proxy.cutOn(/"result"/);
    let first;
    try { first = await turn.callTool(call, undefined, { timeout: 8_000 }); log.push(`first call told: ${told(first)}`); } catch (e) { log.push(`first call threw ${e.constructor.name}: ${e.message.slice(0, 100)}`); }
    const settled = await resendUntilSettled(turn, call, log);
    // The SDK's request timeout: the client sends notifications/cancelled and stops waiting; progress notifications flow meanwhile.
    const ref2 = `${ref}-timeout`;
    const call2 = { name: "send_payment", arguments: { payee: "acme", amount: 556, reference: ref2, memo: "slow:1500" } };
    let progress = 0;
    try { await turn.callTool(call2, undefined, { timeout: 400, onprogress: () => { progress++; } }); } catch (e) { log.push(`timed-out call threw ${e.constructor.name} code=${e.code}: ${e.message.slice(0, 80)}; progress seen ${progress}`); }
    const settled2 = await resendUntilSettled(turn, call2, log);
    await client.close();
    await proxy.close();
    const e1 = paymentsOf(ref), e2 = paymentsOf(ref2);
    log.push(`effect log: ${e1.length} + ${e2.length} payment(s)`);
    const ok = e1.length === 1 && paymentIdIn(settled) === e1[0].resourceId && e2.length === 1 && paymentIdIn(settled2) === e2[0].resourceId;
    verdict("proxycut", "response dropped by a proxy after the handler ran; SDK timeout + cancel mid-call", ok, log);
  },

  /** 4. Two agent workers send the same key at once; a re-worded replay with a different amount under the key. */
  async race(srv) {
    const ref = `${RUN}-race`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 0 };
    const log = [];
    const [a, b] = await Promise.all([connectClient(srv.url, "worker-a"), connectClient(srv.url, "worker-b")]);
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 300, reference: ref, memo: "slow:300" } };
    const [ra, rb] = await Promise.all([mcpTurn(a, ctx).callTool(call), mcpTurn(b, ctx).callTool(call)]);
    log.push(`worker a told: ${told(ra)}`, `worker b told: ${told(rb)}`);
    const key = mcpTurn(a, ctx).peekKey(call);
    const other = await a.callTool(withIdempotencyKey({ name: "send_payment", arguments: { ...call.arguments, amount: 3000 } }, key));
    log.push(`same key, amount 3000: ${told(other)}; text: ${other.content?.[0]?.text?.slice(0, 160)}`);
    await a.close(); await b.close();
    const effects = paymentsOf(ref);
    log.push(`effect log: ${effects.length} payment(s)`);
    const ok = effects.length === 1 && paymentIdIn(ra) === effects[0].resourceId && paymentIdIn(rb) === effects[0].resourceId && errorOf(other)?.code === "idempotency_key_reused" && errorOf(other)?.effect === "no";
    verdict("race", "two workers, one key at once; same key with another amount", ok, log);
  },

  /** 5. A plain MCP client without the key: refused by default; run unguarded with unkeyedCalls "run". */
  async unkeyed(srv, ctl) {
    const ref = `${RUN}-plain`;
    const log = [];
    const client = await connectClient(srv.url, "ide");
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 10, reference: ref } };
    const refused = await client.callTool(call);
    log.push(`default (refuse): ${told(refused)}; text: ${refused.content?.[0]?.text}`);
    const read = await client.callTool({ name: "get_balance", arguments: { account: "a" } });
    log.push(`a read without a key: ${told(read)}`);
    await client.close();
    await srv.stop();
    const open = await startServer({ UNKEYED: "run" }, srv.port);
    const c2 = await connectClient(open.url, "ide");
    const ran1 = await c2.callTool(call);
    const ran2 = await c2.callTool(call);
    log.push(`unkeyedCalls "run", twice: ${told(ran1)} / ${told(ran2)}`);
    // The payments API refuses (amount 0): the handler throws core's ToolError (definite). What does an unguarded caller read?
    const failed = await c2.callTool({ ...call, arguments: { ...call.arguments, amount: 0 } });
    log.push(`unkeyedCalls "run", a refused payment: ${told(failed)}; text: ${failed.content?.[0]?.text}`);
    await c2.close();
    await open.stop();
    const effects = paymentsOf(ref);
    log.push(`effect log: ${effects.length} payment(s) (unguarded by design under "run")`);
    const ok = errorOf(refused)?.code === "idempotency_key_missing" && errorOf(refused)?.effect === "no" && !errorOf(read) && effects.length === 2
      && errorOf(failed)?.code === "unguarded_call_failed" && errorOf(failed)?.effect === "no";
    verdict("unkeyed", "calls without the key, refuse (default) and run", ok, log);
    return ctl.restart(srv);
  },

  /** 6. Forged or malformed keys, an identity mismatch, a bad turn member, an oversized result. */
  async malformed(srv) {
    const ref = `${RUN}-bad`;
    const log = [];
    const client = await connectClient(srv.url);
    const base = { name: "send_payment", arguments: { payee: "acme", amount: 20, reference: ref } };
    const cases = [
      ["a number", 12345678901234567890],
      ["too short", "abc"],
      ["201 chars", "k".repeat(201)],
      ["another alphabet", "ключ-ключ-ключ-ключ"],
      ["a space", "aaaaaaaa bbbbbbbbb"],
      ["null", null],
    ];
    let ok = true;
    for (const [label, key] of cases) {
      const r = await client.callTool({ ...base, _meta: { [IDEMPOTENCY_KEY_META]: key } });
      log.push(`key ${label}: ${told(r)}`);
      ok &&= errorOf(r)?.code === "idempotency_key_malformed";
    }
    const good = "trialmcp-key-000000000001";
    const mismatch = await client.callTool({ ...base, _meta: { [IDEMPOTENCY_KEY_META]: good, [IDENTITY_META]: ["payee"] } });
    log.push(`identity ["payee"]: ${told(mismatch)}`);
    const badTurn = await client.callTool({ ...base, _meta: { [IDEMPOTENCY_KEY_META]: good, [TURN_META]: { conversationId: "c 1", turnIndex: -1 } } });
    log.push(`turn member {conversationId:"c 1",turnIndex:-1}: ${told(badTurn)}`);
    ok &&= errorOf(mismatch)?.code === "tool_identity_mismatch" && errorOf(badTurn)?.code === "invalid_argument" && errorOf(badTurn)?.effect === "no";
    const big = { name: "export_statement", arguments: { account: ref, bytes: 2_000_000 } };
    const ctx = { conversationId: `c-${ref}`, turnIndex: 0 };
    const turn = mcpTurn(client, ctx);
    const r1 = await turn.callTool(big);
    const r2 = await turn.resend(big);
    log.push(`2 MB result: ${told(r1)}, its content ${r1.content?.length} part(s) (${r1.content?.[0]?.text?.length} chars first); re-send: ${told(r2)}`);
    await client.close();
    const effects = paymentsOf(ref);
    log.push(`effect log: ${effects.length} payment(s)`);
    ok &&= effects.length === 0 && errorOf(r1)?.code === "result_not_storable" && errorOf(r1)?.effect === "yes" && r1.content?.[0]?.text?.startsWith(`statement ${ref}`);
    verdict("malformed", "malformed keys, identity mismatch, bad turn member, oversized result", ok, log);
  },

  /** 7. The ledger unreachable at the claim, and at the record after the payment. */
  async ledgerdown(srv) {
    const ref = `${RUN}-ledger`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 0 };
    const log = [];
    const client = await connectClient(srv.url);
    const turn = mcpTurn(client, ctx);
    const claimCall = { name: "send_payment", arguments: { payee: "acme", amount: 40, reference: `${ref}-claim` } };
    ledgerProxy.dark(true);
    const atClaim = await turn.callTool(claimCall).catch((e) => ({ threw: e.message }));
    log.push(`ledger down at the claim: ${atClaim.threw ? `threw ${atClaim.threw}` : told(atClaim)}`);
    ledgerProxy.dark(false);
    const afterClaim = await resendUntilSettled(turn, claimCall, log);
    const recordCall = { name: "send_payment", arguments: { payee: "acme", amount: 41, reference: `${ref}-record`, memo: "slow:1000" } };
    const pending = turn.callTool(recordCall).then((r) => r, (e) => ({ threw: e.message }));
    await waitFor(() => paymentsOf(`${ref}-record`).length === 1);
    ledgerProxy.dark(true);
    const atRecord = await pending;
    log.push(`ledger down at the record (after the payment): ${atRecord.threw ? `threw ${atRecord.threw}` : told(atRecord)}`);
    ledgerProxy.dark(false);
    const afterRecord = await resendUntilSettled(turn, recordCall, log);
    await client.close();
    const e1 = paymentsOf(`${ref}-claim`), e2 = paymentsOf(`${ref}-record`);
    log.push(`effect log: claim case ${e1.length}, record case ${e2.length} payment(s)`);
    log.push(`  its text: ${atRecord.content?.map((c) => c.text).join(" | ")}`);
    const ok = errorOf(atClaim)?.code === "ledger_unavailable" && errorOf(atClaim)?.retryable === "same_message" && e1.length === 1 && paymentIdIn(afterClaim) === e1[0].resourceId
      && errorOf(atRecord)?.effect === "yes" && paymentIdIn(atRecord) === e2[0]?.resourceId && e2.length === 1 && paymentIdIn(afterRecord) === e2[0].resourceId;
    verdict("ledgerdown", "ledger unreachable at the claim and at the record", ok, log);
  },

  /** 8. The handler's own isError result is stored and replayed; a thrown non-Dispatch-Once error is released and re-run with the key. */
  async iserror(srv) {
    const ref = `${RUN}-422`;
    const ctx = { conversationId: `c-${ref}`, turnIndex: 0 };
    const log = [];
    const client = await connectClient(srv.url);
    const turn = mcpTurn(client, ctx);
    // amount 0: mock-payments answers 400, the handler throws a definite ToolError: tool_failed, replayed.
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 0, reference: ref } };
    const r1 = await turn.callTool(call);
    const r2 = await turn.resend(call);
    log.push(`refused payment: ${told(r1)}; re-send: ${told(r2)}`);
    await client.close();
    const ok = errorOf(r1)?.code === "tool_failed" && errorOf(r1)?.effect === "no" && errorOf(r2)?.code === "tool_failed" && paymentsOf(ref).length === 0;
    verdict("iserror", "a definite failure is recorded and replayed, never 'paid'", ok, log);
  },
};

Object.assign(scenarios, {
  /** 9. Two tenants (namespaces by authInfo, MCP-8) of one server paying from one account: each pays INV-1 of 100 to acme in its own conversation "support-1". */
  async tenants(srv, ctl) {
    const ref = `${RUN}-INV-1`;
    const log = [];
    await srv.stop();
    const s = await startServer({ TENANTS: "1" }, srv.port);
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 100, reference: ref } };
    const ctx = { conversationId: "support-1", turnIndex: 0 };
    const a = await connectClient(s.url, "team-a", { "x-tenant": "a" });
    const b = await connectClient(s.url, "team-b", { "x-tenant": "b" });
    const ra = await mcpTurn(a, ctx).callTool(call);
    const rb = await mcpTurn(b, ctx).callTool(call);
    log.push(`tenant a told: ${told(ra)}`, `tenant b told: ${told(rb)}`);
    // The same, tenant b asking another amount in its own turn that happens to share a's key space.
    const call2 = { name: "send_payment", arguments: { payee: "acme", amount: 100, reference: `${ref}-x` } };
    const ctx2 = { conversationId: "support-2", turnIndex: 0 };
    const la = await mcpTurn(a, ctx2).callTool(call2);
    const lb = await mcpTurn(b, ctx2).callTool({ ...call2, arguments: { ...call2.arguments, amount: 250 } });
    log.push(`tenant a (100): ${told(la)}`, `tenant b (250, another request): ${told(lb)}`);
    await a.close(); await b.close();
    const e1 = paymentsOf(ref), e2 = paymentsOf(`${ref}-x`);
    log.push(`effect log: INV-1 ${e1.length} payment(s) ${e1.map((e) => `${e.resourceId} key ${e.idempotencyKey}`).join(", ")}; second ${e2.length} payment(s) ${e2.map((e) => `${e.payload.amount}`).join(", ")}`);
    const ok = e1.length === 2 && paymentIdIn(ra) === e1[0].resourceId && paymentIdIn(rb) === e1[1].resourceId && e2.length === 2 && !errorOf(lb);
    verdict("tenants", "two tenants of one server, one downstream account, the same conversation id", ok, log);
    await s.stop();
    return ctl.restart(srv);
  },
});

Object.assign(scenarios, {
  /**
   * 10. The agent team's own dispatcher (core's, as the runners use it) whose keyed_write tool's
   * run is the MCP call, with the run's key in _meta (the mcp README's "When the MCP call is itself
   * the run of a tool dispatched by core's Dispatcher"); the server SIGKILLed mid-payment; the turn
   * re-dispatched until it settles.
   */
  async agentTool(srv, ctl) {
    const ref = `${RUN}-agent`;
    const log = [];
    let client = await connectClient(srv.url);
    const payViaMcp = defineTool({
      name: "send_payment",
      effect: "keyed_write", // the MCP server's guard deduplicates on the key we send
      input: z.object({ payee: z.string(), amount: z.number().int(), reference: z.string(), memo: z.string().optional() }),
      async run(args, { idempotencyKey }) {
        let r;
        try {
          r = await client.callTool(withIdempotencyKey({ name: "send_payment", arguments: args }, idempotencyKey), undefined, { timeout: 4_000 });
        } catch (e) {
          throw new ToolError(`MCP call: ${e.message}`, { disposition: "unknown" }); // lost response: re-run with the key
        }
        const err = errorOf(r);
        if (err === undefined) return { text: r.content[0].text };
        if (err.effect === "yes") return { text: r.content.map((c) => c.text).join(" ") }; // it happened: tell it
        if (err.effect === "no" && err.retryable === "no") throw new ToolError(err.message, { disposition: "definite" });
        throw new ToolError(err.message, { disposition: "unknown" }); // in flight, released, unknown: re-run with the key
      },
    });
    const dispatcher = new Dispatcher({ tools: [payViaMcp], ledger: new MemoryLedger(), logger: { warn: () => {} } });
    const ctx = { conversationId: `c-${ref}`, turnIndex: 5 };
    const call = { name: "send_payment", input: { payee: "acme", amount: 321, reference: ref, memo: "slow:3000" } };
    const first = dispatcher.turn(ctx).dispatch(call).then((o) => ({ o }), (e) => ({ e }));
    await waitFor(() => paymentsOf(ref).length === 1);
    await srv.kill();
    const srv2 = await ctl.restart(srv);
    await client.close().catch(() => {});
    client = await connectClient(srv2.url);
    const lost = await first;
    log.push(`attempt 1 (server killed): ${lost.e ? `${lost.e.code}: ${lost.e.message.slice(0, 110)}` : JSON.stringify(lost.o.result)}`);
    let outcome;
    for (let attempt = 2; attempt < 30 && outcome === undefined; attempt++) {
      try {
        outcome = await dispatcher.turn(ctx).dispatch(call);
        log.push(`attempt ${attempt}: ${JSON.stringify(outcome.result)}`);
      } catch (e) {
        log.push(`attempt ${attempt}: ${e.code} (effect ${e.effectMayHaveHappened === false ? "no" : "possibly"})`);
        await sleep(500);
      }
    }
    const replay = await dispatcher.turn(ctx).dispatch(call);
    log.push(`the turn replayed once more: ${JSON.stringify(replay.result)} replayed=${replay.replayed}`);
    await client.close();
    const effects = paymentsOf(ref);
    log.push(`effect log: ${effects.length} payment(s) ${effects.map((e) => e.resourceId).join(" ")}`);
    const ok = effects.length === 1 && paymentIdIn({ content: [{ text: outcome?.result?.text }] }) === effects[0].resourceId && replay.replayed === true;
    verdict("agentTool", "the agent's own dispatcher runs the MCP call with its key; server SIGKILLed mid-payment", ok, log);
    return srv2;
  },
});

// ---- main ---------------------------------------------------------------------------------------

const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(scenarios);
const ctl = { restart: (old) => startServer({}, old.port) };
let srv = await startServer();
console.log(`trial ${RUN}: ledger ${LEDGER}, server pid ${srv.child.pid}, lease ${LEASE_MS} ms`);
try {
  for (const name of names) {
    try {
      const next = await scenarios[name](srv, ctl);
      if (next) srv = next;
    } catch (error) {
      verdict(name, "(crashed)", false, [String(error?.stack ?? error)]);
    }
  }
} finally {
  await srv.stop().catch(() => {});
  await ledgerProxy.close();
  await payments.close();
  if (LEDGER === "postgres" && !process.env.KEEP) {
    const pg = (await import("pg")).default;
    const c = new pg.Client({ connectionString: DATABASE_URL });
    await c.connect(); await c.query(`DROP SCHEMA IF EXISTS "${RUN}" CASCADE`); await c.end();
  }
  if (LEDGER === "redis" && !process.env.KEEP) {
    const { Redis } = await import("ioredis");
    const r = new Redis(REDIS_URL);
    let cursor = "0", n = 0;
    do { const [next, keys] = await r.scan(cursor, "MATCH", `${RUN}:*`, "COUNT", 500); cursor = next; if (keys.length) n += await r.del(...keys); } while (cursor !== "0");
    await r.quit();
  }
}
console.log(`\n${results.filter((r) => r.ok).length}/${results.length} PASS: ${results.map((r) => `${r.name}=${r.ok ? "pass" : "FAIL"}`).join(" ")}`);
process.exit(0);
