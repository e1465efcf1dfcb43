import { z } from "zod";
import { LedgerUnavailableError, MemoryLedger, defineTool, type DispatchLogger, type Ledger } from "../src/index.js";

/** A fake downstream that counts effects by the key it was given, like a payments API would. */
export function fakePayments(options: { latencyMs?: number; until?: () => Promise<void> } = {}) {
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
      // A run that lasts until something happened (not for a time, which a loaded host stretches).
      if (options.until) await options.until();
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

/** The error a ledger raises when its store cannot be reached. */
export const unavailable = () => new LedgerUnavailableError("connection terminated due to connection timeout");

/**
 * A memory ledger whose `write` meets the given faults in order, one per call, then works:
 * "down" rejects without writing; "lost" writes, then rejects (the reply was lost). `faults` is
 * read at each call, so a test may add to it or empty it as it goes.
 */
export function faulty(write: "complete" | "fail" | "markUnknown" | "release", faults: ("down" | "lost")[], options: { now?: () => number } = {}) {
  const base = new MemoryLedger(options);
  const calls: string[] = [];
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
    capabilities: base.capabilities,
    [write]: async (...args: unknown[]) => {
      const fault = faults.shift();
      calls.push(fault ?? "ok");
      if (fault === "down") throw unavailable();
      const result = await (base[write] as (...a: unknown[]) => Promise<unknown>).apply(base, args);
      if (fault === "lost") throw unavailable();
      return result;
    },
  });
  return { ledger, base, calls };
}
