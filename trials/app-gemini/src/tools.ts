// The tools, as packages/core/README.md "Adopting it" declares a write and as packages/cli/README.md
// "The tools module" exports them (`dispatch-once audit` / `reconcile --tools` import this module).
import { z } from "zod";
import { ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";

export const paymentsUrl = process.env.PAYMENTS_URL ?? "http://127.0.0.1:4010";
const AUTH = { authorization: "Bearer acct_trial" };
/** How long a payment request may take before the tool stops waiting (its outcome then unknown). */
const paymentTimeoutMs = Number(process.env.PAYMENT_TIMEOUT_MS ?? 10_000);
export const version = 1;

const payee = z.string();

const paymentTool = {
  effect: "keyed_write" as const, // mock-payments deduplicates on Idempotency-Key
  // The model re-words `memo` on every re-run: outside the identity, so it is the same payment.
  input: z.object({ payee, amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
  identity: ["payee", "amount", "currency", "reference"] as const,
  async run(args: { payee: string; amount: number; currency: string; reference: string; memo: string }, { idempotencyKey, signal }: { idempotencyKey: string; signal: AbortSignal }) {
    let res: Response;
    try {
      res = await fetch(`${paymentsUrl}/v1/payments`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify(args),
        signal: AbortSignal.any([signal, AbortSignal.timeout(paymentTimeoutMs)]),
      });
    } catch (error) {
      // A refused connection sent nothing; a reset, timeout or abort may have been performed
      // (the cli README's tools module reads fetch's failures so).
      const cause = (error as { cause?: { code?: string } }).cause;
      const disposition = cause?.code === "ECONNREFUSED" ? "not_performed" : "unknown";
      throw new ToolError(`payments API unreachable: ${(error as Error).message}`, { disposition, cause: error });
    }
    if (res.status === 402) throw new ToolError("card declined", { disposition: "definite", code: "card_declined" });
    if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
    if (res.status === 503) throw new ToolError("payments API unavailable (503, nothing accepted)", { disposition: "not_performed" });
    if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw new ToolError(`payment refused (${res.status}): ${await res.text()}`, { disposition: "definite", code: `http_${res.status}` });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
    const body = (await res.json()) as { id: string; status: string; amount: number; payee: string };
    return { paymentId: body.id, status: body.status, amount: body.amount, payee: body.payee };
  },
  // RECON-1: did the payment under this key happen? mock-payments replays a key's stored answer,
  // so the probe is the same request under the same key, answered without a second payment... but
  // a probe must not perform the effect. Search the account's payments for the reference instead.
  async reconcile(args: { reference: string; amount: number }, context: { signal: AbortSignal }) {
    const res = await fetch(`${paymentsUrl}/v1/payments`, { headers: AUTH, signal: context.signal });
    if (!res.ok) return { outcome: "unknown" as const, reason: `payments API answered ${res.status}` };
    const { data } = (await res.json()) as { data: { id: string; reference: string; amount: number; payee: string; status: string }[] };
    const found = data.find((p) => p.reference === args.reference && p.amount === args.amount);
    return found === undefined
      ? { outcome: "unknown" as const, reason: "no payment carries the reference" }
      : { outcome: "performed" as const, result: { paymentId: found.id, status: found.status, amount: found.amount, payee: found.payee } };
  },
};

export const sendPayment = defineTool({ name: "send_payment", ...paymentTool });

export const checkBalance = defineTool({
  name: "check_balance",
  effect: "read",
  input: z.object({ currency: z.string() }),
  async run(args, { signal }) {
    const res = await fetch(`${paymentsUrl}/v1/payments`, { headers: AUTH, signal });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "definite" });
    const { data } = (await res.json()) as { data: { amount: number; currency: string; status: string }[] };
    const spent = data.filter((p) => p.currency === args.currency && p.status === "succeeded").reduce((s, p) => s + p.amount, 0);
    return { currency: args.currency, balance: 1_000_000 - spent };
  },
});

export const tools = new ToolRegistry([sendPayment, checkBalance]);
export default tools;
