import type { Ledger } from "@dispatch-once/core";
import { tool, type UIMessage } from "ai";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf } from "../src/index.js";

/*
 * Two releases of one payment tool, for the deploy tests of AISDK-18 (deploy-rerun, deploy-tabs):
 * v1 keys (payee, amount); v2 adds a currency with a default to the input and the identity (IDENT-4).
 */
export type Run = { payee: string; currency?: string; key: string };

export const v1 = (runs: Run[]) =>
  tool({
    inputSchema: z.object({ payee: z.string(), amount: z.number(), memo: z.string().optional() }),
    execute: async ({ payee }, options) => {
      runs.push({ payee, key: dispatchOnceOf(options)!.idempotencyKey });
      return { paid: `${payee}#${runs.length}` };
    },
  });
/** The deploy: a currency with a default, in the identity. */
export const v2 = (runs: Run[]) =>
  tool({
    inputSchema: z.object({ payee: z.string(), amount: z.number(), currency: z.string().default("EUR"), memo: z.string().optional() }),
    execute: async ({ payee, currency }, options) => {
      runs.push({ payee, currency, key: dispatchOnceOf(options)!.idempotencyKey });
      return { paid: `${payee}#${runs.length}` };
    },
  });

export const quiet = { logger: { warn: () => {} } };

export function release(ledger: Ledger, runs: Run[], version: "v1" | "v2") {
  return version === "v1"
    ? createOnceTools({ tools: { pay: v1(runs) }, effects: { pay: "keyed_write" }, identity: { pay: ["payee", "amount"] }, ledger, dispatcher: quiet })
    : createOnceTools({ tools: { pay: v2(runs) }, effects: { pay: "keyed_write" }, identity: { pay: ["payee", "amount", "currency"] }, ledger, dispatcher: quiet });
}

export const user = (id: string, text: string): UIMessage => ({ id, role: "user", parts: [{ type: "text", text }] });
export const hello: UIMessage[] = [user("u1", "hello"), { id: "a1", role: "assistant", parts: [{ type: "text", text: "Hi." }] }];
