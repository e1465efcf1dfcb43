// A probe (not the app): does @dispatch-once/ai-sdk's createOnceTools fit under Mastra? Its per-turn tools
// (AI SDK 6 `tool()`s, wrapped) handed to a Mastra Agent as they are; the app gives the turn index (the
// thread's message count) and runs the message again on a failed run, with a new forTurn at the same index.
// Judged by mock-payments' effect log and what the runs reported. No memory: that part is the app's.
import pg from "pg";
import { z } from "zod";
import { tool } from "ai";
import { Agent } from "@mastra/core/agent";
import { noopLogger } from "@mastra/core/logger";
import { createAnthropic } from "@ai-sdk/anthropic";
import { ToolError } from "@dispatch-once/core";
import { createOnceTools, dispatchOnceOf } from "@dispatch-once/ai-sdk";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { script } from "./model-script.js";
import { ACCOUNT } from "./tools.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA = `${process.env.TRIAL_SCHEMA ?? "h_mastra"}_probe`;
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
const ledger = createPostgresLedger({ pool, schema: SCHEMA, table: "ledger" });
await ledger.migrate();
const payments = await startMockPayments({ requireIdempotencyKey: true });
const provider = await startMockProvider({ seed: "mastra-probe", script });
const model = createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5");

const sendPayment = tool({
  description: "Send a payment to a payee.",
  inputSchema: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string().default("EUR"), reference: z.string(), memo: z.string().optional() }),
  execute: async (input, options) => {
    const key = dispatchOnceOf(options)!.idempotencyKey;
    const res = await fetch(`${payments.url}/v1/payments`, {
      method: "POST",
      headers: { authorization: `Bearer ${ACCOUNT}`, "content-type": "application/json", "idempotency-key": key },
      body: JSON.stringify(input),
    });
    if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw new ToolError(`payment refused (${res.status})`, { disposition: "definite" });
    if (!res.ok) throw new ToolError(`payments API ${res.status}`, { disposition: "unknown" });
    return (await res.json()) as { id: string };
  },
});
const once = createOnceTools({ tools: { send_payment: sendPayment }, effects: { send_payment: "keyed_write" }, identity: { send_payment: ["payee", "amount", "currency", "reference"] }, ledger });

/** One message, up to 3 runs of a Mastra agent over the same turn index; what each run reported. */
async function message(conversationId: string, text: string) {
  const runs: string[] = [];
  for (let attempt = 1; attempt <= 3; attempt++) {
    const turn = once.forTurn({ conversationId, turnIndex: 0 });
    const agent = new Agent({ id: "probe", name: "probe", instructions: "Pay.", model, tools: turn.tools as never });
    agent.__setLogger(noopLogger);
    let error: unknown;
    const results: string[] = [];
    try {
      const output = await agent.stream(text, { maxSteps: 5, modelSettings: { maxRetries: 0 }, onError: ({ error: e }: { error: unknown }) => void (error ??= e) } as never);
      for await (const part of output.fullStream as AsyncIterable<{ type: string; payload?: { result?: unknown; error?: unknown } }>) {
        if (part.type === "error") error ??= part.payload?.error ?? "error part";
        if (part.type === "tool-result") results.push(JSON.stringify(part.payload?.result));
        if (part.type === "tool-error") results.push(`tool-error ${String((part.payload?.error as Error)?.message ?? part.payload?.error)}`);
      }
    } catch (e) {
      error ??= e;
    }
    runs.push(`run ${attempt}: ${error ? `failed (${String((error as Error)?.message ?? error).slice(0, 80)})` : "ended"}; tool results ${results.join(" | ") || "none"}`);
    if (!error) break;
  }
  return runs;
}

const effects = (reference: string) => payments.effects({ account: ACCOUNT, kind: "payment_created" }).filter((e) => (e.payload as { reference?: string }).reference === reference).length;
const report = (name: string, reference: string, expected: number, runs: string[]) =>
  console.log(`${effects(reference) === expected ? "as expected" : "NOT as expected"}: ${name}: ${effects(reference)} payment(s) (expected ${expected})\n  ${runs.join("\n  ")}`);

provider.faults.enqueue({ kind: "reset", at: { afterToolUseStop: 0 } });
report("P1 reset after the call's arguments (Mastra runs the call eagerly), then a re-run", "P1", 1, await message("p1", "pay carol 1000 P1"));

let fired = false;
provider.setFaultPlan((request) => {
  const body = JSON.stringify(request);
  if (fired || !body.includes("P2") || !body.includes("tool_result")) return undefined;
  fired = true;
  return { kind: "reset", at: { event: 4 } };
});
report("P2 the response after the payment cut; a re-run re-words the memo", "P2", 1, await message("p2", "pay acme 1100 P2"));
provider.setFaultPlan(undefined);

report("P3 two identical calls in one response", "P3", 2, await message("p3", "pay bob 1200 P3 twice"));

provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 2 } });
report("P4 stream ends cleanly inside the call's arguments", "P4", 1, await message("p4", "pay dora 1300 P4"));

await payments.close();
await provider.close();
await ledger.close();
await pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
await pool.end();
