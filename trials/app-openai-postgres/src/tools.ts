// The payment tool, as packages/core/README.md "Adopting it" declares it, posting to mock-payments.
import { z } from "zod";
import { ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";

export const paymentsUrl = process.env.PAYMENTS_URL ?? "http://127.0.0.1:4010";

export const sendPayment = defineTool({
  name: "send_payment",
  effect: "keyed_write", // mock-payments deduplicates on Idempotency-Key
  // `reference` is required by mock-payments' POST /v1/payments (core's README snippet leaves it out:
  // z.object strips it and the API answers 400, which the snippet reads as a definite refusal).
  input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
  identity: ["payee", "amount", "currency", "reference"], // a re-worded memo is the same payment
  async run(args, { idempotencyKey, signal }) {
    const res = await fetch(`${paymentsUrl}/v1/payments`, {
      method: "POST",
      headers: { authorization: "Bearer acct_trial", "content-type": "application/json", "idempotency-key": idempotencyKey },
      body: JSON.stringify(args),
      signal,
    });
    if (res.status === 402) throw new ToolError("card declined", { disposition: "definite", code: "card_declined" });
    if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
    if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw new ToolError(`payment refused (${res.status}): ${await res.text()}`, { disposition: "definite" });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
    const body = (await res.json()) as { id: string; status: string; amount: number; payee: string };
    return { paymentId: body.id, status: body.status, amount: body.amount, payee: body.payee };
  },
});

export const tools = new ToolRegistry([sendPayment]);
export default tools; // for `dispatch-once audit` / `reconcile --tools`
