// A support-agent backend on the Anthropic SDK's own tool loop, as packages/anthropic/README.md
// "The SDK's own tool runner" shows it: betaZodTools wrapped by createOnceToolRunner, the ledger on
// PostgreSQL (ledger-postgres README), the app's own history in a JSON file per conversation.
import { readFileSync, writeFileSync, mkdirSync, renameSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import pg from "pg";
import { z } from "zod";
import { boundedFetch, createOnceToolRunner, declaredToolError, dispatchOnceOf, rerunMessagesOf } from "@dispatch-once/anthropic";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";

type MessageParam = Anthropic.Beta.Messages.BetaMessageParam;
const paymentsUrl = process.env.PAYMENTS_URL ?? "http://127.0.0.1:4010";

async function post(path: string, key: string, body: unknown) {
  const res = await fetch(`${paymentsUrl}${path}`, {
    method: "POST",
    headers: { authorization: "Bearer acct_support", "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  // a 4xx other than 408/409/429 is a definite refusal: nothing was done (mock-payments' table)
  if (res.status >= 400 && res.status < 500 && ![408, 409, 429].includes(res.status)) throw declaredToolError(`refused (${res.status}): ${text}`, { disposition: "definite" });
  if (!res.ok) throw new Error(`payments API ${res.status}: ${text}`); // may have happened: "unknown"
  return JSON.parse(text) as { id: string; status: string; amount: number; payee: string };
}

const sendPayment = betaZodTool({
  name: "send_payment",
  description: "Send a payment to a payee",
  inputSchema: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
  run: async (args, context) => {
    const key = dispatchOnceOf(context)!.idempotencyKey; // the Idempotency-Key header
    const p = await post("/v1/payments", key, args);
    return JSON.stringify({ paymentId: p.id, status: p.status, amount: p.amount, payee: p.payee });
  },
});
const refundPayment = betaZodTool({
  name: "refund_payment",
  description: "Refund (void) a payment",
  inputSchema: z.object({ payment_id: z.string(), reason: z.string() }),
  run: async (args, context) => {
    const key = dispatchOnceOf(context)!.idempotencyKey;
    const p = await post(`/v1/payments/${args.payment_id}/void`, key, { reason: args.reason });
    return JSON.stringify({ paymentId: p.id, status: p.status });
  },
});

export async function openApp() {
  const pool = new pg.Pool({ connectionString: process.env.APP_DATABASE_URL, connectionTimeoutMillis: 2000 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = createPostgresLedger({ pool, schema: process.env.APP_SCHEMA ?? "trialatr", table: "tool_calls" });
  await ledger.probeDurability(); // the schema is migrated once by the deploy (scenarios.ts)
  const once = createOnceToolRunner({
    tools: [sendPayment, refundPayment],
    effects: { send_payment: "keyed_write", refund_payment: "keyed_write" },
    identity: { send_payment: ["payee", "amount", "currency", "reference"], refund_payment: ["payment_id"] },
    ledger,
    ...(process.env.APP_WAIT_MS ? { dispatcher: { waitMs: Number(process.env.APP_WAIT_MS), leaseMs: Number(process.env.APP_LEASE_MS ?? 30000) } } : {}),
  });
  const client = new Anthropic({ baseURL: process.env.ANTHROPIC_BASE_URL, apiKey: "test-key", fetch: boundedFetch({ idleMs: 10_000 }), maxRetries: Number(process.env.APP_SDK_RETRIES ?? 2) });
  return { once, client, close: () => pool.end() };
}
export type App = Awaited<ReturnType<typeof openApp>>;

// ---- the app's own history: state/<conversation>.json ----
export interface Stored { messages: MessageParam[]; answered: Record<string, Told>; pending?: string; notes?: string[] }
const dir = process.env.APP_STATE_DIR ?? "state";
export function load(conversationId: string): Stored {
  try { return JSON.parse(readFileSync(`${dir}/${conversationId}.json`, "utf8")) as Stored; } catch { return { messages: [], answered: {} }; }
}
export function save(conversationId: string, s: Stored) {
  mkdirSync(dir, { recursive: true });
  const tmp = `${dir}/${conversationId}.json.${process.pid}`;
  writeFileSync(tmp, JSON.stringify(s, null, 1));
  renameSync(tmp, `${dir}/${conversationId}.json`);
}

export interface ToldCall { toolUseId: string; toolName: string; key?: string; replayed?: boolean; result?: unknown; code?: string; effect?: string }
export interface Told {
  status: "answered" | "failed";
  text: string;
  calls: ToldCall[];
  unanswered: { listed: boolean; calls: { key: string; name: string; state: string; effect: string; input?: unknown; result?: unknown }[] };
  attempts: number;
  error?: string;
}

function textOf(m: Anthropic.Beta.Messages.BetaMessage) { return m.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join(""); }

/**
 * Answer one user message: README's `answer` (re-run the whole loop from the user's message when a
 * request fails, at most 3 times), telling the user the calls and the turn's unanswered effects.
 * HISTORY=step saves the runner's messages after each step (a redelivery re-runs from them, through
 * rerunMessagesOf); HISTORY=end saves only once the loop is done.
 */
export async function handle(app: App, conversationId: string, messageId: string, text: string): Promise<Told> {
  const stored = load(conversationId);
  const done = stored.answered[messageId];
  if (done) return done; // a redelivery of an answered message
  const step = process.env.HISTORY === "step";
  let base: MessageParam[];
  if (stored.pending === messageId) base = rerunMessagesOf(stored.messages); // a step-saved partial loop of this message
  else base = [...stored.messages, { role: "user", content: text }];
  const calls: ToldCall[] = [];
  let lastError: unknown;
  for (let attempt = 1; attempt <= 3; attempt++) {
    // APP_NOTE=system: the effects an answer did not tell (ATR-12) are given to the model of later messages.
    const notes = process.env.APP_NOTE === "system" ? (load(conversationId).notes ?? []) : [];
    const runner = app.once.toolRunner(app.client, { model: "claude-sonnet-5-5", max_tokens: 1024, messages: base, stream: process.env.APP_STREAM !== "false", ...(notes.length > 0 ? { system: `Effects already made in this conversation:\n${notes.join("\n")}` } : {}), ...(process.env.MAX_ITERATIONS ? { max_iterations: Number(process.env.MAX_ITERATIONS) } : {}) }, { conversationId });
    const collect = () => {
      for (const [id, c] of app.once.callsOf(runner)) {
        if (calls.some((x) => x.toolUseId === id)) continue;
        calls.push({ toolUseId: id, toolName: c.toolName, ...(c.outcome ? { key: c.outcome.key, replayed: c.outcome.replayed, result: parse(c.outcome.result) } : {}), ...(c.error ? { code: c.error.code, effect: String((c.error as { effect?: unknown }).effect ?? "") , key: (c.error as { key?: string }).key ?? "" } : {}) });
      }
    };
    try {
      let message: Anthropic.Beta.Messages.BetaMessage;
      if (step) {
        let last: Anthropic.Beta.Messages.BetaMessage | undefined;
        for await (const m of runner) {
          last = "finalMessage" in m ? await m.finalMessage() : (m as unknown as Anthropic.Beta.Messages.BetaMessage);
          save(conversationId, { ...load(conversationId), messages: [...runner.params.messages, { role: "assistant", content: last.content }], pending: messageId });
        }
        message = await runner.runUntilDone();
      } else {
        message = await runner.runUntilDone();
      }
      collect();
      if (process.env.APP_OLD_EXAMPLE !== "1" && attempt < 3 && [...app.once.callsOf(runner).values()].some((call) => call.error?.retryable === "same_message")) continue;
      const unanswered = await app.once.unansweredCallsOf(runner);
      const told: Told = { status: "answered", text: textOf(message), calls, unanswered: { listed: unanswered.listed, calls: unanswered.calls.map((c) => ({ key: c.key, name: c.name, state: String(c.state), effect: c.effect, ...("input" in c ? { input: c.input } : {}), ...(c.result !== undefined ? { result: parse(c.result) } : {}) })) }, attempts: attempt };
      const messages = [...runner.params.messages]; // the SDK appended the final reply (probe-final.txt)
      const now = load(conversationId);
      const notesNow = [...(now.notes ?? []), ...(process.env.APP_NOTE !== "system" ? [] : told.unanswered.calls).filter((c) => c.effect !== "not_happened").map((c) => `while answering message ${messageId}: ${c.name} ${c.effect}, result ${JSON.stringify(c.result ?? null)}`)];
      save(conversationId, { messages, answered: { ...now.answered, [messageId]: told }, ...(notesNow.length > 0 ? { notes: notesNow } : {}) });
      return told;
    } catch (error) {
      collect();
      lastError = error;
      if (step) base = rerunMessagesOf(runner);
      console.warn(`attempt ${attempt}:`, (error as Error).message);
    }
  }
  return { status: "failed", text: "Something went wrong; please try again.", calls, unanswered: { listed: false, calls: [] }, attempts: 3, error: String((lastError as Error)?.message ?? lastError) };
}

function parse(v: unknown): unknown {
  if (typeof v !== "string") return v;
  try { return JSON.parse(v); } catch { return v; }
}
