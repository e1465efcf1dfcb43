// The application: a chat endpoint over an open-weights model behind a vLLM-style OpenAI-compatible
// server (Chat Completions only), built from packages/openai's README "Adopting it on Chat
// Completions", packages/conversation-postgres and packages/ledger-postgres READMEs.
import OpenAI from "openai";
import pg from "pg";
import { Dispatcher, StoreUnavailableError, effectOf, isDispatchOnceError } from "@dispatch-once/core";
import { ChatCompletionsRunner, TurnFailedError } from "@dispatch-once/openai";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { tools } from "./tools.js";

export interface AppConfig {
  databaseUrl: string;
  schema: string;
  /** The vLLM server's OpenAI-compatible base URL (`http://host:8000/v1`). */
  modelBaseURL: string;
  owner: string;
  /** The SDK's own retries (before the response's headers only, per mock-openai's README). */
  sdkMaxRetries?: number;
}

export interface Effect { name: string; key: string; effect: string; input?: unknown }
export type Reply =
  | { status: "answered"; text: string; calls: { name: string; key: string | undefined; result?: unknown; error?: string; ran?: unknown }[]; untold: Effect[] }
  | { status: "failed"; text: string; effects: Effect[]; retryable: boolean; cause: string }
  | { status: "unsaved"; text: string; effects: Effect[] }
  | { status: "error"; code: string; effect: string; text: string };

const effectOfEntry = (e: { name: string; key: string; effect: string; input?: unknown }): Effect => ({ name: e.name, key: e.key, effect: e.effect, ...(e.input !== undefined ? { input: e.input } : {}) });
const say = (e: Effect) => `${e.name}: ${e.effect.replace(/_/g, " ")}${e.input !== undefined ? ` ${JSON.stringify(e.input)}` : ""}`;

export async function openApp(config: AppConfig) {
  const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 4, connectionTimeoutMillis: 2000 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = createPostgresLedger({ pool, schema: config.schema, table: "tool_calls" });
  await ledger.migrate();
  const store = new PostgresConversationStore({ pool, schema: config.schema, timeoutMs: 3000 });
  await store.migrate();
  const client = new OpenAI({ baseURL: config.modelBaseURL, apiKey: "EMPTY", maxRetries: config.sdkMaxRetries ?? 2 }); // vLLM takes any key
  const runner = new ChatCompletionsRunner({
    client,
    dispatcher: new Dispatcher({ tools, ledger, leaseMs: 3000 }),
    store,
    model: "Qwen/Qwen3-32B",
    tools: tools.providerSchemas(),
    instructions: "You are a payments assistant. Pay only when asked.",
    params: { temperature: 0, parallel_tool_calls: true },
    owner: config.owner,
    turnLeaseMs: 4000,
    busyWaitMs: 20_000,
    streamIdleTimeoutMs: 60_000,
  });

  async function handle(conversationId: string, messageId: string, text: string): Promise<Reply> {
    try {
      const { turns, records } = await runner.send(conversationId, { id: messageId, content: text });
      const calls = turns.flatMap((t) =>
        t.calls.map((c) => ({
          name: c.name,
          key: c.key,
          ...(c.error !== undefined ? { error: c.error.message } : { result: c.result }),
          ...(c.storedRequest !== undefined ? { ran: c.storedRequest } : {}),
        })),
      );
      // Effects of a resumed or retried turn that its committed answer does not mention (RECORD-8).
      const untold = (records ?? []).flatMap((r) => r.calls).map(effectOfEntry);
      return { status: "answered", text: turns.at(-1)?.text ?? "", calls, untold };
    } catch (error) {
      if (TurnFailedError.isInstance(error)) {
        const effects = error.record.effects.map(effectOfEntry);
        const nothing = error.record.retryable
          ? "the answer was cut off before anything was done; send the same message again"
          : `the turn failed and sending it again will not help (${error.record.error.code ?? error.record.error.name}: ${error.record.error.message})`;
        return { status: "failed", text: effects.map(say).join("\n") || nothing, effects, retryable: error.record.retryable, cause: `${error.record.error.code ?? error.record.error.name}: ${error.record.error.message}` };
      }
      // The store failed at the turn's end after calls ran (RECORD-9), as the Responses snippet handles it.
      if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
        const effects = error.effects.map(effectOfEntry);
        return { status: "unsaved", text: effects.map((e) => `${say(e)}; its confirmation was not saved, send the same message again`).join("\n"), effects };
      }
      if (isDispatchOnceError(error)) {
        // conversation_busy, message_id_reused, ...: the catalogue says whether an effect may have happened.
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
