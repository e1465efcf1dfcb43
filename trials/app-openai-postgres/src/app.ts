// The application: an OpenAI Responses API worker with durable PostgreSQL stores, built from
// packages/openai, packages/conversation-postgres and packages/ledger-postgres READMEs.
import OpenAI from "openai";
import pg from "pg";
import { Dispatcher, StoreUnavailableError, effectOf, isDispatchOnceError } from "@dispatch-once/core";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/openai";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { createRedisLedger } from "@dispatch-once/ledger-redis";
import { tools } from "./tools.js";

export interface AppConfig {
  databaseUrl: string;
  schema: string;
  openaiBaseURL: string;
  owner: string;
  /** The ledger on Redis instead (ledger-redis README): its URL and key prefix. */
  redis?: { url: string; prefix: string };
}

export type Reply =
  | { status: "answered"; text: string; calls: { name: string; key: string | undefined; result?: unknown; error?: string }[] }
  | { status: "failed"; text: string; effects: { name: string; key: string; effect: string }[]; retryable: boolean }
  | { status: "unsaved"; text: string; effects: { name: string; key: string; effect: string }[] }
  | { status: "error"; code: string; effect: string; text: string };

export async function openApp(config: AppConfig) {
  const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 4, connectionTimeoutMillis: 2000 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = config.redis !== undefined
    ? await createRedisLedger({ url: config.redis.url, prefix: config.redis.prefix })
    : createPostgresLedger({ pool, schema: config.schema, table: "tool_calls" });
  if ("migrate" in ledger) await ledger.migrate();
  const store = new PostgresConversationStore({ pool, schema: config.schema, timeoutMs: 3000 });
  await store.migrate();
  const client = new OpenAI({ baseURL: config.openaiBaseURL, apiKey: "sk-trial", maxRetries: 0 });
  const runner = new ConversationRunner({
    client,
    dispatcher: new Dispatcher({ tools, ledger, leaseMs: 3000 }),
    store,
    model: "gpt-5",
    tools: tools.providerSchemas(),
    instructions: "You are a payments assistant.",
    params: { reasoning: { effort: "low", summary: "auto" }, include: ["reasoning.encrypted_content"], store: false },
    owner: config.owner,
    turnLeaseMs: 4000,
    busyWaitMs: 15_000,
    streamIdleTimeoutMs: 120_000,
  });

  async function handle(conversationId: string, messageId: string, text: string): Promise<Reply> {
    try {
      const { turns } = await runner.send(conversationId, { id: messageId, content: text });
      const calls = turns.flatMap((t) =>
        t.calls.map((c) => (c.error !== undefined ? { name: c.name, key: c.key, error: c.error.message } : { name: c.name, key: c.key, result: c.result })),
      );
      return { status: "answered", text: turns.at(-1)?.text ?? "", calls };
    } catch (error) {
      if (TurnFailedError.isInstance(error)) {
        const effects = error.record.effects.map((e) => ({ name: e.name, key: e.key, effect: e.effect }));
        // Without effects: "please retry" only when the record says a re-send can help (a request the
        // API refused, 400, is not retryable: it is told as the refusal, never as a lost connection).
        const nothing = error.record.retryable
          ? "the answer was cut off before anything was done; send the same message again"
          : `the turn failed and sending it again will not help (${error.record.error.code ?? error.record.error.name}: ${error.record.error.message})`;
        return { status: "failed", text: effects.map((e) => `${e.name}: ${e.effect.replace(/_/g, " ")}`).join("\n") || nothing, effects, retryable: error.record.retryable };
      }
      // The store failed at the turn's end after calls ran (RECORD-9): say what each did; the same
      // message id completes the turn (openai README, "Adopting it", after the trial's fix).
      if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
        const effects = error.effects.map((e) => ({ name: e.name, key: e.key, effect: e.effect }));
        return { status: "unsaved", text: effects.map((e) => `${e.name}: ${e.effect.replace(/_/g, " ")}; its confirmation was not saved, send the same message again`).join("\n"), effects };
      }
      if (isDispatchOnceError(error)) {
        // conversation_busy, store_unavailable, ...: the catalogue says whether an effect may have happened.
        return { status: "error", code: error.code, effect: String(effectOf(error)), text: error.message };
      }
      throw error;
    }
  }

  async function close() {
    await store.close();
    await ledger.close();
    await pool.end();
  }
  return { handle, close, store, ledger, runner, pool };
}
