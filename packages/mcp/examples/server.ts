import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { ToolError, type Ledger } from "@dispatch-once/core";
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
      // Never "paid" for a refusal: say what it means for the payment (core's ToolError).
      if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
      if (res.status >= 400 && res.status < 500 && res.status !== 409 && res.status !== 429) throw new ToolError(`payment refused (${res.status})`, { disposition: "definite" });
      if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" }); // 409 still in progress, 5xx: re-run with the key
      const payment = (await res.json()) as { id: string };
      return { content: [{ type: "text", text: `paid ${amount} to ${payee}: ${payment.id}` }] };
    },
  );
  return server;
}
