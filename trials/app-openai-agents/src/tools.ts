// The two tools, declared once with their effect class (core's README, "Adopting it").
import { z } from "zod";
import { ToolError, defineTool } from "@dispatch-once/core";

export const ACCOUNT = "acct_openai_agents";

/** References the payments side refuses once, definitely (a situation's refusal that the model's retry gets past). */
export const refuseOnce = new Set<string>();

export function paymentTools(paymentsUrl: string, paymentTimeoutMs = 2_000) {
  const sendPayment = defineTool({
    name: "send_payment",
    description: "Send a payment to a payee.",
    effect: "keyed_write", // mock-payments deduplicates on Idempotency-Key
    input: z.strictObject({
      payee: z.string().trim().normalize("NFC"),
      amount: z.int().positive(),
      currency: z.string().toUpperCase().default("EUR"),
      reference: z.string(),
      memo: z.string().optional(),
    }),
    identity: ["payee", "amount", "currency", "reference"], // the model re-words the memo on a re-run
    async run(args, { idempotencyKey, signal }) {
      if (refuseOnce.delete(args.reference)) throw new ToolError("payment refused: the payee is blocked for a minute", { disposition: "definite", code: "payee_blocked" });
      let res: Response;
      try {
        res = await fetch(`${paymentsUrl}/v1/payments`, {
          method: "POST",
          headers: { authorization: `Bearer ${ACCOUNT}`, "content-type": "application/json", "idempotency-key": idempotencyKey },
          body: JSON.stringify(args),
          // A payments API slower than this is an outcome we do not know (the request may be performing).
          signal: AbortSignal.any([signal, AbortSignal.timeout(paymentTimeoutMs)]),
        });
      } catch (error) {
        // The request may have reached the API (a lost response): re-run with the same key.
        throw new ToolError(`payments API unreachable: ${(error as Error).message}`, { disposition: "unknown" });
      }
      if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
      if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) {
        const problem = (await res.json().catch(() => ({}))) as { code?: string; detail?: string };
        throw new ToolError(`payment refused (${res.status} ${problem.code ?? ""}): ${problem.detail ?? ""}`, { disposition: "definite", code: problem.code ?? "refused" });
      }
      if (res.status === 503) throw new ToolError("payments API unavailable before accepting", { disposition: "not_performed" });
      if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
      return (await res.json()) as { id: string; amount: number; payee: string; currency: string; reference: string };
    },
  });

  // A read: never claimed, runs on every attempt. It lists the account's payments.
  const checkBalance = defineTool({
    name: "check_balance",
    description: "List what the account has paid so far.",
    effect: "read",
    input: z.strictObject({}),
    async run(_args, { signal }) {
      const res = await fetch(`${paymentsUrl}/v1/payments`, { headers: { authorization: `Bearer ${ACCOUNT}` }, signal });
      if (!res.ok) throw new Error(`payments API ${res.status} on a read`);
      const list = (await res.json()) as { data: Array<{ amount: number }> };
      return { payments: list.data.length, paid: list.data.reduce((sum, p) => sum + p.amount, 0) };
    },
  });
  return [sendPayment, checkBalance] as const;
}
