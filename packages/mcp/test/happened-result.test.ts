import { LedgerUnavailableError, MemoryLedger, type Ledger } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, McpToolGuard, mcpTurn, type GuardErrorMeta } from "../src/index.js";
import { connectedClient } from "./helpers.js";

// MCP-6: an error that says the effect happened, raised after this server's run returned its
// result, carries that result's content. Told only "it happened; do not call it again", the user
// never learns which payment was made: the ledger lacks the result, and the re-send is refused.
let payments: MockPaymentsServer;
beforeEach(async () => {
  payments = await startMockPayments({ requireIdempotencyKey: true });
});
afterEach(async () => {
  await payments.close();
});

async function billing(ledger: Ledger) {
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_happened" });
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger, dispatcher: { recordRetryMs: 0, logger: { warn: () => {} } } });
  guard.registerTool(
    server,
    "send_payment",
    { inputSchema: { payee: z.string(), amount: z.number().int(), memo: z.string() }, outputSchema: { paymentId: z.string() }, effect: "keyed_write" },
    async ({ payee, amount, memo }, { idempotencyKey }) => {
      const { body } = await api.createPayment({ payee, amount, currency: "EUR", reference: "R-1", memo }, { idempotencyKey: idempotencyKey! });
      // A memo "receipt" adds the processor's receipt: a result beyond a small ledger's limit.
      const receipt = memo === "receipt" ? [{ type: "text" as const, text: `receipt ${"r".repeat(400)}` }] : [];
      return { content: [{ type: "text", text: `paid ${amount} to ${payee}: ${body.id}` }, ...receipt], structuredContent: { paymentId: body.id } };
    },
  );
  return connectedClient(server);
}
const text = (r: CallToolResult) => r.content.map((c) => (c.type === "text" ? c.text : "")).join("\n");
const meta = (r: CallToolResult) => r._meta?.[ERROR_META] as GuardErrorMeta | undefined;

describe("MCP-6: an effect told as happened carries the run's result", () => {
  it("the ledger unreachable at the record after the payment: ledger_unavailable, effect yes, and the payment id", async () => {
    const memory = new MemoryLedger();
    const ledger = new Proxy(memory, {
      get(target, property) {
        if (property === "complete") return async () => { throw new LedgerUnavailableError("connection reset while recording"); };
        const value = Reflect.get(target, property, target) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const client = await billing(ledger);
    try {
      const result = (await mcpTurn(client, { conversationId: "c_rec", turnIndex: 0 }).callTool({ name: "send_payment", arguments: { payee: "acme", amount: 4100, memo: "m" } })) as CallToolResult;
      const [payment] = payments.effects();
      expect(meta(result)).toMatchObject({ code: "ledger_unavailable", effect: "yes", retryable: "no" });
      expect(text(result)).toContain(`paid 4100 to acme: ${payment!.resourceId}`);
      expect(result.structuredContent).toBeUndefined();
    } finally {
      await client.close();
    }
  });

  it("a result beyond the ledger's limit: result_not_storable, effect yes, and the payment id on this answer", async () => {
    const client = await billing(new MemoryLedger({ maxResultBytes: 300 }));
    try {
      const result = (await mcpTurn(client, { conversationId: "c_big", turnIndex: 0 }).callTool({ name: "send_payment", arguments: { payee: "acme", amount: 4200, memo: "receipt" } })) as CallToolResult;
      const [payment] = payments.effects();
      expect(meta(result)).toMatchObject({ code: "result_not_storable", effect: "yes" });
      expect(text(result)).toContain(`paid 4200 to acme: ${payment!.resourceId}`);
    } finally {
      await client.close();
    }
  });
});
