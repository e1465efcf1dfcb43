import { MemoryLedger } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, McpToolGuard, REPLAYED_META, mcpTurn, type GuardErrorMeta } from "../src/index.js";

/**
 * A guarded tool with an outputSchema whose handler paid and returned structured content that
 * does not match it (the payments API gave the amount as a string). McpServer checks the result
 * after the handler ran and answers its own "Output validation error", which says nothing of the
 * effect: a model told that calls the tool again, under a new key, and pays again.
 */
let payments: MockPaymentsServer;
let client: Client;
let server: McpServer;
const text = (result: CallToolResult) => result.content.map((c) => (c.type === "text" ? c.text : "")).join("\n");

beforeEach(async () => {
  payments = await startMockPayments();
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_mcp_output" });
  server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger: new MemoryLedger(), dispatcher: { logger: { warn: () => {} } } });
  const outputs = { shape: { paymentId: z.string(), amount: z.number() }, schema: z.object({ paymentId: z.string(), amount: z.number() }) };
  for (const [form, outputSchema] of Object.entries(outputs)) {
    guard.registerTool(
      server,
      `send_payment_${form}`,
      { inputSchema: { payee: z.string(), amount: z.number().int() }, outputSchema, effect: "keyed_write" },
      async ({ payee, amount }, { idempotencyKey }) => {
        const { body } = await api.createPayment({ payee, amount, currency: "EUR", reference: "R-1" }, { idempotencyKey: idempotencyKey! });
        const structuredContent = payee === "bob" ? { paymentId: body.id, amount } : { paymentId: body.id, amount: String(amount) };
        return { content: [{ type: "text", text: `payment ${body.id}` }], structuredContent } as CallToolResult as never;
      },
    );
  }
  client = new Client({ name: "agent", version: "1.0.0" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  await client.listTools();
});
afterEach(async () => {
  await client.close();
  await server.close();
  await payments.close();
});

describe("MCP-13 a result that fails the tool's outputSchema after the effect happened", () => {
  it.each(["shape", "schema"])("MCP-13 (outputSchema as a %s) is answered as an error that says the effect happened and not to call it again, with the tool's own content; its re-send says the same from the ledger", async (form) => {
    const name = `send_payment_${form}`;
    const turn = mcpTurn(client, { conversationId: `c_output_${form}`, turnIndex: 0 });
    const first = (await turn.callTool({ name, arguments: { payee: "acme", amount: 100 } })) as CallToolResult;
    const again = (await turn.resend({ name, arguments: { payee: "acme", amount: 100 } })) as CallToolResult;
    const paid = payments.effects().filter((e) => e.kind === "payment_created");
    expect(paid).toHaveLength(1);
    for (const result of [first, again]) {
      expect(result.isError).toBe(true);
      expect(result._meta?.[ERROR_META]).toMatchObject({ code: "tool_result_invalid", effect: "yes", retryable: "no" } satisfies Partial<GuardErrorMeta>);
      expect(text(result)).toContain(`payment ${paid[0]!.resourceId}`);
      expect(text(result)).toMatch(/Effect: it happened; do not call it again/);
      expect(result).not.toHaveProperty("structuredContent");
    }
    expect(again._meta?.[REPLAYED_META]).toBe(true);
  });

  it("MCP-13 an unkeyed call run unguarded (unkeyedCalls: \"run\") is answered the same way, without a key", async () => {
    const unguarded = new McpServer({ name: "legacy", version: "1.0.0" });
    let runs = 0;
    new McpToolGuard({ ledger: new MemoryLedger(), unkeyedCalls: "run" }).registerTool(
      unguarded,
      "send_payment",
      { inputSchema: { payee: z.string() }, outputSchema: { paymentId: z.string() }, effect: "keyed_write" },
      async () => {
        runs++;
        return { content: [{ type: "text", text: "payment pay_1" }], structuredContent: { paymentId: 1 } } as never;
      },
    );
    const legacy = new Client({ name: "legacy-agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([unguarded.connect(serverSide), legacy.connect(clientSide)]);
    try {
      const result = (await legacy.callTool({ name: "send_payment", arguments: { payee: "acme" } })) as CallToolResult;
      expect(runs).toBe(1);
      expect(result._meta?.[ERROR_META]).toEqual(expect.objectContaining({ code: "tool_result_invalid", effect: "yes", retryable: "no" }));
      expect(result._meta?.[ERROR_META]).not.toHaveProperty("key");
    } finally {
      await legacy.close();
      await unguarded.close();
    }
  });

  it("MCP-13 control: a result that matches the outputSchema is answered as the tool gave it", async () => {
    const result = (await mcpTurn(client, { conversationId: "c_output_ok", turnIndex: 0 }).callTool({ name: "send_payment_shape", arguments: { payee: "bob", amount: 100 } })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ amount: 100 });
  });
});
