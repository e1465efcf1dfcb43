import { z } from "zod";
import { defineTool, type DispatchLogger } from "../src/index.js";

/** A fake downstream that counts effects by the key it was given, like a payments API would. */
export function fakePayments(options: { latencyMs?: number } = {}) {
  const effects: { key: string; payee: string; amount: number }[] = [];
  let next = 1;
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({
      payee: z.string(),
      amount: z.number().int().positive(),
      currency: z.string().length(3),
      memo: z.string().optional(),
    }),
    identity: ["payee", "amount", "currency"],
    async run(args, ctx) {
      if (options.latencyMs) await new Promise((r) => setTimeout(r, options.latencyMs));
      effects.push({ key: ctx.idempotencyKey, payee: args.payee, amount: args.amount });
      return { paymentId: `pay_${next++}`, status: "accepted" };
    },
  });
  return { tool, effects };
}

export function recordingLogger() {
  const warnings: { message: string; fields?: Record<string, unknown> }[] = [];
  const logger: DispatchLogger = { warn: (message, fields) => warnings.push({ message, fields }) };
  return { logger, warnings };
}

/** A controllable clock for the in-memory ledger. */
export function manualClock(start = 1_700_000_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => void (now += ms) };
}
