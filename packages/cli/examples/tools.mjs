// tools.mjs: the module `dispatch-once reconcile --tools` and `dispatch-once audit` import.
// Export the SAME registry your dispatcher uses, as `tools` (or as the default export).
import { ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";
import { z } from "zod";

const BILLING = process.env.BILLING_URL ?? "http://127.0.0.1:4010";

const createInvoice = defineTool({
  name: "create_invoice",
  effect: "unkeyed_write", // the billing API takes no Idempotency-Key
  input: z.object({ customer: z.string(), amount: z.int().positive(), currency: z.string() }),
  async run(args, context) {
    // The key travels as a reference in the memo, so a probe can search for it later.
    const response = await fetch(`${BILLING}/v1/invoices`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...args, memo: `[dispatch-once ${context.idempotencyKey}]` }),
      signal: context.signal,
    });
    if (!response.ok) throw new ToolError(`billing answered ${response.status}`, { disposition: "unknown" });
    const invoice = await response.json();
    return { invoiceId: invoice.id };
  },
  // RECON-1: did the effect happen? Search the downstream for the reference.
  async reconcile(_args, context) {
    const response = await fetch(`${BILLING}/v1/invoices`, { signal: context.signal });
    if (!response.ok) return { outcome: "unknown", reason: `billing answered ${response.status}` };
    const { data } = await response.json();
    const found = data.find((invoice) => invoice.memo === `[dispatch-once ${context.idempotencyKey}]`);
    return found === undefined ? { outcome: "unknown", reason: "no invoice carries the reference yet" } : { outcome: "performed", result: { invoiceId: found.id } };
  },
});

export const tools = new ToolRegistry([createInvoice]);
