// The payment tool as core's README "Adopting it" declares it, posting to mock-payments with the
// Idempotency-Key, plus a reconcile probe on the payments API's lookup (GET /v1/payments).
// TOOLS_VERSION=2 is "the deploy" of incident 3: memo joins the identity (an IDENT-4 change).
import { z } from "zod";
import { ToolError, ToolRegistry, defineTool } from "@dispatch-once/core";

const PAYMENTS = process.env.PAYMENTS_URL ?? "http://127.0.0.1:4010";
const AUTH = { authorization: "Bearer acct_gameday" };
const v2 = process.env.TOOLS_VERSION === "2";

const withProbe = defineTool({
  name: "send_payment",
  effect: "keyed_write",
  input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
  identity: v2 ? ["payee", "amount", "currency", "reference", "memo"] : ["payee", "amount", "currency", "reference"],
  async run(args, { idempotencyKey, signal }) {
    let res: Response;
    console.error(`app log: POST /v1/payments key=${idempotencyKey} body=${JSON.stringify(args)}`);
    try {
      res = await fetch(`${PAYMENTS}/v1/payments`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify(args),
        signal,
      });
    } catch (error) {
      const refused = (error as { cause?: { code?: string } }).cause?.code === "ECONNREFUSED";
      throw new ToolError(`payments unreachable: ${(error as Error).message}`, { disposition: refused ? "not_performed" : "unknown", cause: error });
    }
    if (res.status === 402) throw new ToolError("card declined", { disposition: "definite", code: "card_declined" });
    if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
    if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw new ToolError(`payment refused (${res.status}): ${await res.text()}`, { disposition: "definite" });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown", code: `http_${res.status}` });
    const body = (await res.json()) as { id: string; status: string; amount: number; payee: string };
    console.error(`app log: ${res.status} ${body.id}${res.headers.get("idempotent-replayed") ? " (replayed)" : ""}`);
    return { paymentId: body.id, status: body.status, amount: body.amount, payee: body.payee };
  },
  // RECON-1: the payments API's lookup. A payment with this reference, payee and amount is this call's.
  // TOOLS_NO_PROBE=1: a worker of a release without the probe (incident 4c), so a row stays unknown.
  async reconcile(args, { signal }) {
    const res = await fetch(`${PAYMENTS}/v1/payments`, { headers: AUTH, signal });
    if (!res.ok) return { outcome: "unknown", reason: `payments answered ${res.status}` };
    const { data } = (await res.json()) as { data: { id: string; status: string; amount: number; payee: string; reference: string }[] };
    const found = data.filter((p) => p.reference === args.reference && p.payee === args.payee && p.amount === args.amount);
    if (found.length === 1) return { outcome: "performed", result: { paymentId: found[0]!.id, status: found[0]!.status, amount: found[0]!.amount, payee: found[0]!.payee } };
    if (found.length > 1) return { outcome: "unknown", reason: `${found.length} payments carry reference ${args.reference}` };
    return { outcome: "unknown", reason: "no payment carries the reference" };
  },
});

const { reconcile: _probe, ...withoutProbe } = withProbe;
export const sendPayment = process.env.TOOLS_NO_PROBE ? withoutProbe : withProbe;
export const tools = new ToolRegistry([sendPayment]);
export default tools;
