import { MemoryLedger, ToolError } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  EFFECT_META,
  ERROR_META,
  IDENTITY_META,
  McpToolGuard,
  REPLAYED_META,
  STORED_ARGUMENTS_META,
  ToolIdentityMismatchError,
  idempotencyKeyFor,
  mcpTurn,
  withIdempotencyKey,
  type GuardErrorMeta,
} from "../src/index.js";

// A regenerate over MCP: the model asks for the same payment again with its memo re-worded.
const IDENTITY = ["payee", "amount", "currency", "reference"] as const;
const context = { conversationId: "c_ident", turnIndex: 2 };
const pay = (memo: string, amount = 12_500) => ({ name: "send_payment", arguments: { payee: "acme", amount, currency: "EUR", reference: "INV-1042", memo } });
const text = (result: unknown) => (result as CallToolResult).content.map((c) => (c.type === "text" ? c.text : "")).join("");

let payments: MockPaymentsServer;
let ledger: MemoryLedger;
let client: Client;
let server: McpServer;

/** A billing server whose send_payment has `identity`, over the shared ledger and payments API, and a client connected to it. */
async function billing(identity: readonly string[]): Promise<{ server: McpServer; client: Client }> {
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_mcp_ident" });
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger, dispatcher: { logger: { warn: () => {} } } });
  guard.registerTool(
    server,
    "send_payment",
    {
      // The server's schema folds spellings that are one payment to the payments API (IDENT-8).
      inputSchema: { payee: z.string().normalize("NFC"), amount: z.number().int(), currency: z.string().default("EUR"), reference: z.string(), memo: z.string() },
      effect: "keyed_write",
      identity,
    },
    async (args, { idempotencyKey }) => {
      if (args.amount > 1_000_000) throw new ToolError("over the payment limit", { disposition: "definite" });
      const { body } = await api.createPayment(args, { idempotencyKey: idempotencyKey! });
      return { content: [{ type: "text", text: `payment ${body.id}: ${body.memo}` }] };
    },
  );
  const client = new Client({ name: "agent", version: "1.0.0" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  return { server, client };
}

beforeEach(async () => {
  payments = await startMockPayments();
  ledger = new MemoryLedger();
  ({ server, client } = await billing(IDENTITY));
});
afterEach(async () => {
  await client.close();
  await server.close();
  await payments.close();
});

describe("MCP-10: a tool's identity on both sides of MCP", () => {
  it("a regenerate that re-words the memo carries the first call's key and is answered with the first payment, which the payments API performed once", async () => {
    const first = await mcpTurn(client, context, { identity: { send_payment: IDENTITY } }).callTool(pay("Invoice 1042"));
    const again = await mcpTurn(client, context, { identity: { send_payment: IDENTITY } }).callTool(pay("Paying INV-1042 as asked"));
    expect(payments.effects().length).toBe(1);
    expect(text(again)).toBe(text(first));
    expect((again as CallToolResult)._meta?.[REPLAYED_META]).toBe(true);
    // What ran is the first request (IDENT-3): the replay says so, not the re-worded memo.
    expect(((again as CallToolResult)._meta?.[STORED_ARGUMENTS_META] as { memo: string }).memo).toBe("Invoice 1042");
  });

  it("a regenerate that re-words the memo of a payment that failed definitely is told which request failed: the stored arguments ride on the replayed error too", async () => {
    const options = { identity: { send_payment: IDENTITY } };
    await mcpTurn(client, context, options).callTool(pay("Invoice 1042", 2_000_000));
    const again = (await mcpTurn(client, context, options).callTool(pay("Paying INV-1042 as asked", 2_000_000))) as CallToolResult;
    expect((again._meta?.[ERROR_META] as GuardErrorMeta).code).toBe("tool_failed");
    expect((again._meta?.[STORED_ARGUMENTS_META] as { memo?: string } | undefined)?.memo).toBe("Invoice 1042");
  });

  it("MCP-11 the server advertises the identity in tools/list, and a client given the listed tools keys by it: a re-worded regenerate pays once", async () => {
    const { tools } = await client.listTools();
    expect(tools[0]!._meta).toMatchObject({ [IDENTITY_META]: IDENTITY, [EFFECT_META]: "keyed_write" });
    await mcpTurn(client, context, { tools }).callTool(pay("Invoice 1042"));
    const again = (await mcpTurn(client, context, { tools }).callTool(pay("Paying INV-1042 as asked"))) as CallToolResult;
    expect(payments.effects().length).toBe(1);
    expect(again._meta?.[REPLAYED_META]).toBe(true);
  });

  it("MCP-11 a declared identity that contradicts the listed one is refused (tool_identity_mismatch); a malformed advertisement is invalid_tool_definition, never keyed over every argument", async () => {
    const { tools } = await client.listTools();
    const refused = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        return (error as { code?: string }).code;
      }
      return "accepted";
    };
    expect(refused(() => mcpTurn(client, context, { tools, identity: { send_payment: ["payee", "amount"] } }))).toBe("tool_identity_mismatch");
    expect(refused(() => mcpTurn(client, context, { tools, identity: { send_payment: [...IDENTITY].reverse() } }))).toBe("accepted");
    const listed = (identity: unknown) => [{ ...tools[0]!, _meta: { [IDENTITY_META]: identity } }];
    for (const bad of ["payee", ["payee", "payer"], ["payee", "payee"], [], [1]]) {
      expect(refused(() => mcpTurn(client, context, { tools: listed(bad) })), JSON.stringify(bad)).toBe("invalid_tool_definition");
    }
  });

  it("MCP-11 a server whose identity changed between list and call refuses the call with tool_identity_mismatch, and nothing is paid", async () => {
    const { tools } = await client.listTools();
    const narrower = await billing(["payee", "amount"]);
    try {
      const result = (await mcpTurn(narrower.client, context, { tools }).callTool(pay("Invoice 1042"))) as CallToolResult;
      expect(result._meta?.[ERROR_META]).toMatchObject({ code: "tool_identity_mismatch", retryable: "no", effect: "no" });
      expect(ToolIdentityMismatchError.code).toBe("tool_identity_mismatch");
      expect(payments.effects().length).toBe(0);
    } finally {
      await narrower.client.close();
      await narrower.server.close();
    }
  });

  it("MCP-10 RECORD-10 a regenerate that re-words the memo of a re-run still in flight past runTimeoutMs is told which request may happen: the stored arguments ride on in_flight_elsewhere", async () => {
    const invoices = new McpServer({ name: "invoicing", version: "1.0.0" });
    const guard = new McpToolGuard({ ledger, dispatcher: { logger: { warn: () => {} }, runTimeoutMs: 50 } });
    let open!: () => void;
    const downstream = new Promise<void>((resolve) => (open = resolve));
    const posted: string[] = []; // the invoicing API's effect log
    let runs = 0;
    guard.registerTool(
      invoices,
      "post_invoice",
      { inputSchema: { payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }, effect: "keyed_write", identity: IDENTITY },
      async ({ memo }) => {
        runs++;
        // The first run is refused before acceptance (released: its request is kept, LEDGER-21); the re-run hangs.
        if (runs === 1) throw new ToolError("503 before acceptance", { disposition: "not_performed" });
        await downstream;
        posted.push(memo);
        return { content: [{ type: "text", text: "posted" }] };
      },
    );
    const agent = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([invoices.connect(serverSide), agent.connect(clientSide)]);
    try {
      const options = { identity: { post_invoice: IDENTITY } };
      const invoice = (memo: string) => ({ ...pay(memo), name: "post_invoice" });
      const first = (await mcpTurn(agent, context, options).callTool(invoice("Invoice 1042"))) as CallToolResult;
      expect((first._meta?.[ERROR_META] as GuardErrorMeta).code).toBe("claim_released");
      const again = (await mcpTurn(agent, context, options).callTool(invoice("Paying INV-1042 as asked"))) as CallToolResult;
      expect(again._meta?.[ERROR_META]).toMatchObject({ code: "in_flight_elsewhere", effect: "possibly" });
      expect((again._meta?.[STORED_ARGUMENTS_META] as { memo?: string } | undefined)?.memo).toBe("Invoice 1042");
      // The run goes on and posts the stored request's memo, once.
      open();
      for (let i = 0; i < 2_000 && posted.length === 0; i++) await new Promise((r) => setTimeout(r, 5));
      expect(posted).toEqual(["Invoice 1042"]);
      expect(runs).toBe(2);
    } finally {
      open();
      await agent.close();
      await invoices.close();
    }
  });

  it("a regenerate that re-words the memo of an invoice whose outcome is unknown is told which request may have happened: the stored arguments ride on the replayed outcome_unknown", async () => {
    const invoices = new McpServer({ name: "invoicing", version: "1.0.0" });
    const guard = new McpToolGuard({ ledger, dispatcher: { logger: { warn: () => {} }, allowVolatileLedgerForUnkeyedWrites: true } });
    let runs = 0;
    guard.registerTool(
      invoices,
      "post_invoice",
      { inputSchema: { payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }, effect: "unkeyed_write", identity: IDENTITY },
      async () => {
        runs++;
        throw new Error("socket hang up"); // unclassified, from a tool no key protects: unknown
      },
    );
    const agent = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([invoices.connect(serverSide), agent.connect(clientSide)]);
    try {
      const options = { identity: { post_invoice: IDENTITY } };
      const invoice = (memo: string) => ({ ...pay(memo), name: "post_invoice" });
      const first = (await mcpTurn(agent, context, options).callTool(invoice("Invoice 1042"))) as CallToolResult;
      expect((first._meta?.[ERROR_META] as GuardErrorMeta).code).toBe("outcome_unknown");
      expect(first._meta).not.toHaveProperty(STORED_ARGUMENTS_META);
      const again = (await mcpTurn(agent, context, options).callTool(invoice("Paying INV-1042 as asked"))) as CallToolResult;
      expect((again._meta?.[ERROR_META] as GuardErrorMeta).code).toBe("outcome_unknown");
      expect((again._meta?.[STORED_ARGUMENTS_META] as { memo?: string } | undefined)?.memo).toBe("Invoice 1042");
      expect(runs).toBe(1);
    } finally {
      await agent.close();
      await invoices.close();
    }
  });

  it("identityKey: idempotencyKeyFor with an identity is the key of the projection; the memo does not count, the amount does", () => {
    const key = (memo: string, amount?: number) => idempotencyKeyFor(context, pay(memo, amount), { identity: IDENTITY });
    expect(key("a")).toBe(key("b"));
    expect(key("a")).not.toBe(key("a", 12_600));
    const { memo: _memo, ...projected } = pay("a").arguments;
    expect(key("a")).toBe(idempotencyKeyFor(context, { name: "send_payment", arguments: projected }));
  });

  it("MCP-9 still holds inside the identity: the same key with another amount is refused, nothing runs", async () => {
    const key = idempotencyKeyFor(context, pay("x"), { identity: IDENTITY });
    await client.callTool(withIdempotencyKey(pay("x"), key));
    const refused = await client.callTool(withIdempotencyKey(pay("x", 99), key));
    expect((refused as CallToolResult).isError).toBe(true);
    expect(((refused as CallToolResult)._meta?.[ERROR_META] as GuardErrorMeta).code).toBe("idempotency_key_reused");
    expect(payments.effects().length).toBe(1);
  });

  it("a regenerate that spells the call another way the server's schema folds (NFD payee, a default written out) carries the first key when the client keys over that schema", async () => {
    const schema = z.object({ payee: z.string().normalize("NFC"), amount: z.number().int(), currency: z.string().default("EUR"), reference: z.string() });
    const options = { identity: { send_payment: IDENTITY }, schemas: { send_payment: schema } };
    const call = (payee: string, currency?: string) => ({ ...pay("m"), arguments: { ...pay("m").arguments, payee, currency } });
    await mcpTurn(client, context, options).callTool(call("Cafe\u0301"));
    const again = await mcpTurn(client, context, options).callTool(call("Café", "EUR"));
    expect(payments.effects().length).toBe(1);
    expect((again as CallToolResult)._meta?.[REPLAYED_META]).toBe(true);
  });

  it("MCP-12 a client given only the listed tools keys a regenerate that writes out a field's listed default as the first call: the payment is made once and the replay says so", async () => {
    const { tools } = await client.listTools();
    const { currency: _currency, ...omitted } = pay("Invoice 1042").arguments;
    const first = (await mcpTurn(client, context, { tools }).callTool({ name: "send_payment", arguments: omitted })) as CallToolResult;
    const again = (await mcpTurn(client, context, { tools }).callTool(pay("Invoice 1042"))) as CallToolResult;
    expect(payments.effects().map((e) => e.payload.currency)).toEqual(["EUR"]);
    expect(text(again)).toBe(text(first));
    expect(again._meta?.[REPLAYED_META]).toBe(true);
  });

  it("an identity naming a field the input schema lacks, or given to a read or a tool without a schema, is refused where it is declared", () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    const s = new McpServer({ name: "x", version: "1.0.0" });
    const run = async () => ({ content: [] });
    expect(() => guard.registerTool(s, "p", { inputSchema: { payee: z.string() }, effect: "keyed_write", identity: ["payer"] }, run)).toThrow(/identity.*payer/);
    expect(() => guard.registerTool(s, "r", { inputSchema: { payee: z.string() }, effect: "read", identity: ["payee"] }, run)).toThrow(/read/);
    expect(() => guard.registerTool(s, "n", { effect: "keyed_write", identity: ["payee"] }, run)).toThrow(/inputSchema/);
    expect(() => mcpTurn(client, context, { identity: { send_payment: [] } })).toThrow(/identity/);
    expect(() => mcpTurn(client, context, { identities: {} } as never)).toThrow(/identities/);
    expect(() => mcpTurn(client, context, { schemas: { send_payment: {} as never } })).toThrow(/schemas.send_payment/);
  });
});
