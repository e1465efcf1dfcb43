// The tools, declared as packages/core/README.md "Adopting it" declares a keyed write and a read:
// send_payment carries the dispatcher's key as the payments API's Idempotency-Key.
import { z } from "zod";
import { ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";

const paymentsUrl = () => process.env.PAYMENTS_URL ?? "http://127.0.0.1:4010";
const AUTH = { authorization: "Bearer acct_trialqueue" };

export const sendPayment = defineTool({
  name: "send_payment",
  effect: "keyed_write",
  // The model re-words `memo` on every re-run: outside the identity, so it is the same payment.
  input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
  identity: ["payee", "amount", "currency", "reference"],
  async run(args, { idempotencyKey, signal }) {
    let res: Response;
    try {
      res = await fetch(`${paymentsUrl()}/v1/payments`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify(args),
        signal: AbortSignal.any([signal, AbortSignal.timeout(5000)]),
      });
    } catch (error) {
      // A refused connection sent nothing; a reset or a timeout may have been performed.
      const code = (error as { cause?: { code?: string } }).cause?.code;
      throw new ToolError(`payments API unreachable: ${(error as Error).message}`, { disposition: code === "ECONNREFUSED" ? "not_performed" : "unknown", cause: error });
    }
    if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
    if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw new ToolError(`payment refused (${res.status}): ${await res.text()}`, { disposition: "definite", code: `http_${res.status}` });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
    const body = (await res.json()) as { id: string; status: string; amount: number; payee: string };
    return { paymentId: body.id, status: body.status, amount: body.amount, payee: body.payee };
  },
});

export const checkBalance = defineTool({
  name: "check_balance",
  effect: "read",
  input: z.object({ currency: z.string() }),
  async run(args, { signal }) {
    const res = await fetch(`${paymentsUrl()}/v1/payments`, { headers: AUTH, signal });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "definite" });
    const { data } = (await res.json()) as { data: { amount: number; currency: string; status: string }[] };
    const spent = data.filter((p) => p.currency === args.currency && p.status === "succeeded").reduce((s, p) => s + p.amount, 0);
    return { currency: args.currency, balance: 1_000_000 - spent };
  },
});

export const tools = new ToolRegistry([sendPayment, checkBalance]);
export default tools;
