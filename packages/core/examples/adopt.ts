import { z } from "zod";
import { Dispatcher, MemoryLedger, ToolError, defineTool } from "@dispatch-once/core";

// 1. Declare each tool once, with its effect class next to its schema.
const sendPayment = defineTool({
  name: "send_payment",
  effect: "keyed_write", // the payments API deduplicates on Idempotency-Key
  input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
  identity: ["payee", "amount", "currency", "reference"], // a re-worded memo is the same payment
  async run(args, { idempotencyKey, signal }) {
    const res = await fetch(`${paymentsUrl}/v1/payments`, {
      method: "POST",
      headers: { authorization: "Bearer acct_demo", "content-type": "application/json", "idempotency-key": idempotencyKey },
      body: JSON.stringify(args),
      signal, // aborted past runTimeoutMs or when the claim's lease is lost (DISPATCH-11, DISPATCH-18)
    });
    // Never a result for a refusal: say what each status means for the payment (LEDGER-8, EFFECT-6).
    if (res.status === 402) throw new ToolError("card declined", { disposition: "definite", code: "card_declined" });
    if (res.status === 422) throw new ToolError("the key holds another payment", { disposition: "request_mismatch" });
    if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw new ToolError(`payment refused (${res.status})`, { disposition: "definite" });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" }); // 408, 409 in progress, 429, 5xx: re-run with the key
    return res.json();
  },
});

// 2. Choose a ledger (MemoryLedger for one process; SQLite, PostgreSQL or Redis in production).
const dispatcher = new Dispatcher({ tools: [sendPayment], ledger: new MemoryLedger() });

// 3. One dispatch context per attempt of a turn: it numbers identical calls (ordinals, TURN-4), so two
//    identical calls in one response are two payments, and a retried attempt's calls meet the first's.
//    Dispatch each call as its content_block_stop arrives (a framework that hands over whole responses:
//    only calls of a response that ended with a stop reason; a cut stream's last call may be partial).
export function onTurnAttempt(conversationId: string, turnIndex: number) {
  const turn = dispatcher.turn({ conversationId, turnIndex });
  return async function onToolCall(name: string, input: unknown) {
    try {
      return await turn.dispatch({ name, input });
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === "in_flight_elsewhere") return "another attempt is still paying; try again shortly";
      if (code === "outcome_unknown") return "unknown whether it ran; a human must check";
      throw error;
    }
  };
}

export let paymentsUrl = "http://127.0.0.1:4010";
export const setPaymentsUrl = (url: string) => void (paymentsUrl = url);
