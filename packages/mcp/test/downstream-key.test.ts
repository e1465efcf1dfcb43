import { MemoryLedger } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { McpToolGuard, idempotencyKeyFor, mcpTurn, type McpToolGuardOptions } from "../src/index.js";
import { connectedClient } from "./helpers.js";

// MCP-16: the key a guarded handler forwards downstream is scoped as its ledger row is. Two agent
// teams (principals, MCP-8) of one billing server pay from one payments account; each team's
// client chooses its own conversation ids, so both can have a "support-1" whose first turn pays
// INV-1 of 100 to acme. Their rows are apart (namespaces); their Idempotency-Keys must be too.
const call = { name: "send_payment", arguments: { payee: "acme", amount: 100, reference: "INV-1" } };
const context = { conversationId: "support-1", turnIndex: 0 };
const text = (result: unknown) => (result as CallToolResult).content.map((c) => (c.type === "text" ? c.text : "")).join("");

let payments: MockPaymentsServer;
let ledger: MemoryLedger;
/** The ledger's clock: a test moves it past a dead claimant's lease. */
let now = 1_000_000;
const closers: (() => Promise<void>)[] = [];

beforeEach(async () => {
  payments = await startMockPayments({ requireIdempotencyKey: true });
  now = 1_000_000;
  ledger = new MemoryLedger({ now: () => now });
});
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  await payments.close();
});

/** A billing server over the shared ledger and payments account, in `namespace`, with a client connected to it. */
async function billing(options: Omit<McpToolGuardOptions, "ledger">, identity?: readonly string[]) {
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_platform" });
  const seen: { idempotencyKey: string | undefined; clientKey: string | undefined }[] = [];
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger, ...options, dispatcher: { logger: { warn: () => {} } } });
  guard.registerTool(
    server,
    "send_payment",
    { inputSchema: { payee: z.string(), amount: z.number().int(), reference: z.string() }, effect: "keyed_write", ...(identity !== undefined ? { identity } : {}) },
    async (args, extra) => {
      seen.push({ idempotencyKey: extra.idempotencyKey, clientKey: extra.clientKey });
      const { body } = await api.createPayment({ ...args, currency: "EUR" }, { idempotencyKey: extra.idempotencyKey! });
      return { content: [{ type: "text", text: `paid ${body.amount} to ${body.payee}: ${body.id}` }] };
    },
  );
  const client = await connectedClient(server);
  closers.push(async () => {
    await client.close();
    await server.close();
  });
  return { guard, client, seen };
}

describe("MCP-16: the downstream key is scoped by the namespace and the tool, as the row is", () => {
  it("two principals' identical calls under one client key make two payments, and each is told its own", async () => {
    const a = await billing({ namespace: "tenant-a" });
    const b = await billing({ namespace: "tenant-b" });
    const told = [await mcpTurn(a.client, context).callTool(call), await mcpTurn(b.client, context).callTool(call)].map(text);
    const effects = payments.effects().filter((e) => e.kind === "payment_created");
    // Each team asked for one payment: two happened, and each was told of its own.
    expect(effects.map((e) => e.idempotencyKey)).toHaveLength(2);
    expect(told[0]).toContain(effects[0]!.resourceId);
    expect(told[1]).toContain(effects[1]!.resourceId);
    expect(told[0]).not.toBe(told[1]);
  });

  it("MCP-16 a tool that declares an identity forwards the row's key too, and its stored request keeps the mark: two principals' identical calls under one client key make two payments", async () => {
    // The stored request of such a tool carries its identity arguments beside the arguments
    // (MCP-10); the mark goes with them, or its runs forward the client's key.
    const identity = ["payee", "amount", "reference"] as const;
    const a = await billing({ namespace: "tenant-a" }, identity);
    const b = await billing({ namespace: "tenant-b" }, identity);
    const clientKey = idempotencyKeyFor(context, call);
    const told = [await mcpTurn(a.client, context).callTool(call), await mcpTurn(b.client, context).callTool(call)].map(text);
    expect(a.seen).toEqual([{ idempotencyKey: a.guard.ledgerKeyFor("send_payment", clientKey), clientKey }]);
    expect(b.seen).toEqual([{ idempotencyKey: b.guard.ledgerKeyFor("send_payment", clientKey), clientKey }]);
    const effects = payments.effects().filter((e) => e.kind === "payment_created");
    expect(effects).toHaveLength(2);
    expect(told[0]).toContain(effects[0]!.resourceId);
    expect(told[1]).toContain(effects[1]!.resourceId);
    const row = await ledger.lookup(a.guard.ledgerKeyFor("send_payment", clientKey));
    expect(JSON.parse(row!.request)).toMatchObject({ key: clientKey, identityArgs: call.arguments, downstream: "scoped" });
  });

  it("the handler forwards the row's key (guard.ledgerKeyFor) and sees the client's key as clientKey; a replay re-sends nothing", async () => {
    const a = await billing({ namespace: "tenant-a" });
    const clientKey = idempotencyKeyFor(context, call);
    await mcpTurn(a.client, context).callTool(call);
    await mcpTurn(a.client, context).callTool(call);
    expect(a.seen).toEqual([{ idempotencyKey: a.guard.ledgerKeyFor("send_payment", clientKey), clientKey }]);
    expect(payments.effects()[0]!.idempotencyKey).toBe(a.guard.ledgerKeyFor("send_payment", clientKey));
  });

  it('downstreamKey: "client" forwards the client\'s key as before (a deploy over rows a previous version claimed)', async () => {
    const a = await billing({ namespace: "tenant-a", downstreamKey: "client" });
    await mcpTurn(a.client, context).callTool(call);
    const clientKey = idempotencyKeyFor(context, call);
    expect(a.seen).toEqual([{ idempotencyKey: clientKey, clientKey }]);
    expect(() => new McpToolGuard({ ledger, downstreamKey: "tenant" as never })).toThrow(/downstreamKey/);
  });

  it("a row a guard before MCP-16 claimed (its envelope has no scoped mark) is re-run with the key its first run forwarded: the client's", async () => {
    // A 0.1.0 guard claimed the row, forwarded the client's key, the payment went through, and its
    // process died before recording it. After the deploy, the client's retry takes the row over
    // once its lease ran out; the re-run must send the first request, under the first key, so the
    // payments API answers it with the payment it made instead of making a second one.
    const a = await billing({ namespace: "tenant-a" });
    const clientKey = idempotencyKeyFor(context, call);
    const rowKey = a.guard.ledgerKeyFor("send_payment", clientKey);
    const claimed = await ledger.claim({ key: rowKey, toolName: "send_payment", effect: "keyed_write", owner: "billing@0.1.0", leaseMs: 30_000, request: JSON.stringify({ key: clientKey, args: call.arguments }) });
    expect(claimed.outcome).toBe("claimed");
    const api = createPaymentsClient({ baseURL: payments.url, token: "acct_platform" });
    await api.createPayment({ ...call.arguments, currency: "EUR" }, { idempotencyKey: clientKey });
    now += 60_000;
    const told = text(await mcpTurn(a.client, context).callTool(call));
    expect(a.seen).toEqual([{ idempotencyKey: clientKey, clientKey }]);
    const effects = payments.effects().filter((e) => e.kind === "payment_created");
    expect(effects).toHaveLength(1);
    expect(told).toContain(effects[0]!.resourceId);
  });

  it("a row this guard claimed keeps the row's key on a re-run, also under downstreamKey: \"client\" after a restart (the stored request decides)", async () => {
    const a = await billing({ namespace: "tenant-a" });
    const clientKey = idempotencyKeyFor(context, call);
    const rowKey = a.guard.ledgerKeyFor("send_payment", clientKey);
    // The scoped guard's claim, as its dispatcher stores it; its process dies after the payment.
    await ledger.claim({ key: rowKey, toolName: "send_payment", effect: "keyed_write", owner: "billing@scoped", leaseMs: 30_000, request: JSON.stringify({ key: clientKey, args: call.arguments, downstream: "scoped" }) });
    const api = createPaymentsClient({ baseURL: payments.url, token: "acct_platform" });
    await api.createPayment({ ...call.arguments, currency: "EUR" }, { idempotencyKey: rowKey });
    now += 60_000;
    const b = await billing({ namespace: "tenant-a", downstreamKey: "client" });
    await mcpTurn(b.client, context).callTool(call);
    expect(b.seen).toEqual([{ idempotencyKey: rowKey, clientKey }]);
    expect(payments.effects().filter((e) => e.kind === "payment_created")).toHaveLength(1);
  });
});
