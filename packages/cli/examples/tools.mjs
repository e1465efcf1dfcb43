// tools.mjs: the module `dispatch-once reconcile --tools` and `dispatch-once audit` import.
// Export the SAME registry your dispatcher uses, as `tools` (or as the default export).
import { ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";
import { z } from "zod";

const BILLING = process.env.BILLING_URL ?? "http://127.0.0.1:4010"; // e.g. @dispatch-once/mock-payments
// Every /v1 request needs `Authorization: Bearer <token>` (for mock-payments the token names the account).
const AUTH = { authorization: `Bearer ${process.env.BILLING_TOKEN ?? "acct_demo"}` };

const createInvoice = defineTool({
  name: "create_invoice",
  effect: "unkeyed_write", // the billing API takes no Idempotency-Key
  input: z.object({ customer: z.string(), amount: z.int().positive(), currency: z.string() }),
  async run(args, context) {
    let response;
    try {
      // The key travels as a reference in the memo, so a probe can search for it later.
      response = await fetch(`${BILLING}/v1/invoices`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: JSON.stringify({ ...args, memo: `[dispatch-once ${context.idempotencyKey}]` }),
        signal: context.signal,
      });
    } catch (error) {
      // A refused connection sent nothing; a reset, timeout or abort may have been performed.
      const disposition = error?.cause?.code === "ECONNREFUSED" ? "not_performed" : "unknown";
      throw new ToolError(`billing unreachable: ${error.message}`, { disposition, cause: error });
    }
    if (!response.ok) {
      // What the answer says about the effect (core's ToolError dispositions):
      // 4xx: refused, no invoice, the same request fails again: "definite" (recorded, replayed).
      // 503: this API answers it before accepting anything: "not_performed" (the claim is released).
      // Any other 5xx: the invoice may exist: "unknown" (a human or `reconcile` settles it).
      const disposition = response.status < 500 ? "definite" : response.status === 503 ? "not_performed" : "unknown";
      throw new ToolError(`billing answered ${response.status}: ${await response.text()}`, { disposition, code: `http_${response.status}` });
    }
    const invoice = await response.json();
    return { invoiceId: invoice.id };
  },
  // RECON-1: did the effect happen? Search the downstream for the reference.
  async reconcile(_args, context) {
    const response = await fetch(`${BILLING}/v1/invoices`, { headers: AUTH, signal: context.signal });
    if (!response.ok) return { outcome: "unknown", reason: `billing answered ${response.status}` };
    const { data } = await response.json();
    const found = data.find((invoice) => invoice.memo === `[dispatch-once ${context.idempotencyKey}]`);
    return found === undefined ? { outcome: "unknown", reason: "no invoice carries the reference yet" } : { outcome: "performed", result: { invoiceId: found.id } };
  },
});

export const tools = new ToolRegistry([createInvoice]);
