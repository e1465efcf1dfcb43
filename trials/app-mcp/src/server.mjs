// The platform team's billing MCP server: Streamable HTTP, tools guarded by McpToolGuard over a
// PostgreSQL or Redis ledger, payments made at @dispatch-once/mock-payments. Built from
// packages/mcp/README.md (its "Server: guard the tools" example), core's README and the ledgers'.
// One process; the trial SIGKILLs and restarts it. Configuration from the environment:
//   PORT, PAYMENTS_URL, LEDGER (postgres|redis), PG_SCHEMA, REDIS_PREFIX, LEASE_MS, WAIT_MS,
//   UNKEYED (refuse|run), SESSIONS (0: stateless, one McpServer per request; 1: sessions in memory)
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { ToolError } from "@dispatch-once/core";
import { McpToolGuard } from "@dispatch-once/mcp";
import { z } from "zod";

const env = process.env;
const paymentsUrl = env.PAYMENTS_URL;
const port = Number(env.PORT ?? 0);
const log = (...a) => process.stderr.write(`[server ${process.pid}] ${a.join(" ")}\n`);

async function openLedger() {
  if (env.LEDGER === "redis") {
    const { createRedisLedger } = await import("@dispatch-once/ledger-redis");
    return { ledger: await createRedisLedger({ url: env.REDIS_URL, prefix: env.REDIS_PREFIX }), close: async () => {} };
  }
  const pg = (await import("pg")).default;
  const { createPostgresLedger } = await import("@dispatch-once/ledger-postgres");
  const pool = new pg.Pool({ connectionString: env.PG_URL ?? env.DATABASE_URL, max: 4 });
  pool.on("error", (e) => log("pool error", e.message));
  const ledger = createPostgresLedger({ pool, schema: env.PG_SCHEMA });
  await ledger.migrate();
  return { ledger, close: () => pool.end() };
}

const { ledger } = await openLedger();
const guard = new McpToolGuard({
  ledger,
  unkeyedCalls: env.UNKEYED === "run" ? "run" : "refuse",
  // One billing account downstream, several agent teams (tenants) upstream: each tenant's rows in its own
  // namespace (MCP-8, "put the authenticated one in it (extra.authInfo)"). The toy auth: x-tenant.
  ...(env.TENANTS === "1" ? { namespace: (extra) => `tenant-${extra.authInfo?.clientId ?? "anonymous"}` } : {}),
  dispatcher: { leaseMs: Number(env.LEASE_MS ?? 30_000), waitMs: Number(env.WAIT_MS ?? 2_000) },
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A payment, as the README's example makes it; `memo: "slow:<ms>"` holds the answer that long after paying (post-processing). */
async function pay({ payee, amount, reference, memo }, { idempotencyKey, signal, sendNotification, _meta }) {
  const res = await fetch(`${paymentsUrl}/v1/payments`, {
    method: "POST",
    // PLANT=nokey: the oracle's check, a handler that drops the key (the trial must then FAIL).
    headers: { authorization: "Bearer acct_trialmcp", "content-type": "application/json", ...(idempotencyKey && env.PLANT !== "nokey" ? { "idempotency-key": `"${idempotencyKey}"` } : {}) },
    body: JSON.stringify({ payee, amount, currency: "EUR", reference, ...(memo ? { memo } : {}) }),
    signal,
  });
  if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
  if (res.status >= 400 && res.status < 500 && res.status !== 409 && res.status !== 429) throw new ToolError(`payment refused (${res.status})`, { disposition: "definite" });
  if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
  const payment = await res.json();
  log("paid", payment.id, "key", idempotencyKey);
  const slow = /^slow:(\d+)$/.exec(memo ?? "");
  if (slow) {
    // Progress while post-processing, as a long tool would (MCP progress notifications).
    const token = _meta?.progressToken;
    for (let i = 0; i < Number(slow[1]) / 100; i++) {
      await sleep(100);
      if (token !== undefined) await sendNotification({ method: "notifications/progress", params: { progressToken: token, progress: i + 1 } });
    }
  }
  return { content: [{ type: "text", text: `paid ${amount} to ${payee}: ${payment.id}` }], structuredContent: { paymentId: payment.id } };
}

function build() {
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  guard.registerTool(
    server,
    "send_payment",
    {
      description: "Pay a payee",
      inputSchema: { payee: z.string(), amount: z.number().int(), reference: z.string(), memo: z.string().optional() },
      outputSchema: { paymentId: z.string() },
      effect: "keyed_write",
      identity: ["payee", "amount", "reference"],
    },
    pay,
  );
  // The internal invoices API deduplicates nothing: the ledger is its only guard.
  if (ledger.capabilities.durability === "durable") {
    guard.registerTool(
      server,
      "create_invoice",
      { description: "Invoice a customer", inputSchema: { customer: z.string(), amount: z.number().int() }, effect: "unkeyed_write" },
      async ({ customer, amount }, { idempotencyKey }) => {
        const res = await fetch(`${paymentsUrl}/v1/invoices`, {
          method: "POST",
          headers: { authorization: "Bearer acct_trialmcp", "content-type": "application/json" },
          body: JSON.stringify({ customer, amount, currency: "EUR" }),
        });
        if (!res.ok) throw new ToolError(`invoices API ${res.status}`, { disposition: res.status >= 500 ? "unknown" : "definite" });
        const invoice = await res.json();
        log("invoiced", invoice.id, "key", idempotencyKey);
        if (customer.startsWith("slow")) await sleep(5_000);
        return { content: [{ type: "text", text: `invoiced ${amount} to ${customer}: ${invoice.id}` }] };
      },
    );
  }
  // A statement export whose text is as large as asked: for the oversized-result situation.
  guard.registerTool(
    server,
    "export_statement",
    { description: "Export a statement", inputSchema: { account: z.string(), bytes: z.number().int() }, effect: "keyed_write" },
    async ({ account, bytes }) => ({ content: [{ type: "text", text: `statement ${account}: ${"x".repeat(bytes)}` }] }),
  );
  guard.registerTool(server, "get_balance", { description: "Balance", inputSchema: { account: z.string() }, effect: "read" }, async ({ account }) => ({
    content: [{ type: "text", text: `balance of ${account}: 0` }],
  }));
  return server;
}

const sessions = new Map();
const http = createServer(async (req, res) => {
  try {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const tenant = req.headers["x-tenant"];
    if (typeof tenant === "string") req.auth = { token: `t-${tenant}`, clientId: tenant, scopes: [] };
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : undefined;
    if (env.SESSIONS === "1") {
      const sid = req.headers["mcp-session-id"];
      let transport = sid ? sessions.get(sid) : undefined;
      if (!transport) {
        if (sid) {
          res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
          return;
        }
        transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => sessions.set(id, transport) });
        await build().connect(transport);
      }
      await transport.handleRequest(req, res, body);
      return;
    }
    const server = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: env.JSON === "1" });
    res.on("close", () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  } catch (error) {
    log("request failed", error?.stack ?? error);
    if (!res.headersSent) res.writeHead(500).end();
  }
});
http.listen(port, "127.0.0.1", () => {
  log(`billing MCP server listening on http://127.0.0.1:${http.address().port}/mcp ledger=${env.LEDGER ?? "postgres"} durability=${ledger.capabilities.durability}`);
  process.stdout.write(`READY ${http.address().port}\n`);
});
