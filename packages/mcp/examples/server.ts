import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { Ledger } from "@dispatch-once/core";
import { McpToolGuard } from "@dispatch-once/mcp";
import { z } from "zod";

export function billingServer(ledger: Ledger, paymentsUrl: string): McpServer {
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger }); // unkeyedCalls: "refuse" by default
  guard.registerTool(
    server,
    "send_payment",
    {
      description: "Pay a payee",
      inputSchema: { payee: z.string(), amount: z.number().int() },
      effect: "keyed_write", // the payments API deduplicates on Idempotency-Key
    },
    // Runs once per key: a repeated key is answered from the ledger without calling this.
    async ({ payee, amount }, { idempotencyKey }) => {
      const res = await fetch(`${paymentsUrl}/v1/payments`, {
        method: "POST",
        headers: { authorization: "Bearer acct_demo", "content-type": "application/json", "idempotency-key": `"${idempotencyKey}"` },
        body: JSON.stringify({ payee, amount, currency: "EUR", reference: "agent" }),
      });
      const payment = (await res.json()) as { id: string };
      return { content: [{ type: "text", text: `paid ${amount} to ${payee}: ${payment.id}` }] };
    },
  );
  return server;
}
