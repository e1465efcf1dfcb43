// The service: an Anthropic Messages worker on Dispatch-Once (anthropic README "Adopting it"), a
// PostgreSQL conversation store, a Redis (LEDGER=redis) or PostgreSQL ledger, telemetry on.
import Anthropic from "@anthropic-ai/sdk";
import pg from "pg";
import { Dispatcher, StoreUnavailableError, effectOf, isDispatchOnceError } from "@dispatch-once/core";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/anthropic";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { createRedisLedger } from "@dispatch-once/ledger-redis";
import { dispatchTelemetry } from "@dispatch-once/opentelemetry";
import { tools } from "./tools.js";

export type Reply =
  | { status: "answered"; text: string; calls: { name: string; key: string | undefined; result?: unknown; error?: string }[] }
  | { status: "failed"; text: string; effects: { name: string; key: string; effect: string }[]; retryable: boolean }
  | { status: "unsaved"; text: string; effects: { name: string; key: string; effect: string }[] }
  | { status: "error"; code: string; effect: string; text: string };

export async function openApp(env: NodeJS.ProcessEnv) {
  const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 4, connectionTimeoutMillis: 2000 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const schema = env.APP_SCHEMA!;
  const ledger = env.LEDGER === "redis"
    ? await createRedisLedger({ url: env.APP_REDIS_URL!, prefix: env.APP_REDIS_PREFIX!, onUnsafeServer: "warn" })
    : createPostgresLedger({ pool, schema, table: "tool_calls" });
  if ("migrate" in ledger) await ledger.migrate();
  const store = new PostgresConversationStore({ pool, schema, timeoutMs: 3000 });
  await store.migrate();
  const telemetry = dispatchTelemetry();
  const client = new Anthropic({ baseURL: env.PROVIDER_URL!, apiKey: "test", maxRetries: 0 });
  const leaseMs = Number(env.LEASE_MS ?? 3000);
  const runner = new ConversationRunner({
    client,
    dispatcher: new Dispatcher({ tools, ledger, leaseMs, onEvent: telemetry.onDispatchEvent }),
    store,
    model: "claude-sonnet-5-5",
    tools: tools.providerSchemas(),
    owner: `worker-${process.pid}`,
    turnLeaseMs: 4000,
    busyWaitMs: 8000,
    onEvent: telemetry.onRunnerEvent,
  });
  async function handle(conversationId: string, messageId: string, text: string): Promise<Reply> {
    try {
      const { turns } = await runner.send(conversationId, { id: messageId, content: text });
      const calls = turns.flatMap((t) => t.calls.map((c) => (c.error !== undefined ? { name: c.name, key: c.key, error: c.error.message } : { name: c.name, key: c.key, result: c.result })));
      return { status: "answered", text: turns.at(-1)?.text ?? "", calls };
    } catch (error) {
      if (TurnFailedError.isInstance(error)) {
        const effects = error.record.effects.map((e) => ({ name: e.name, key: e.key, effect: e.effect }));
        return { status: "failed", text: effects.map((e) => `${e.name}: ${e.effect.replace(/_/g, " ")}`).join("\n") || `failed: ${error.record.error.message}`, effects, retryable: error.record.retryable };
      }
      if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
        const effects = error.effects.map((e) => ({ name: e.name, key: e.key, effect: e.effect }));
        return { status: "unsaved", text: effects.map((e) => `${e.name}: ${e.effect}; not saved, send again`).join("\n"), effects };
      }
      if (isDispatchOnceError(error)) return { status: "error", code: error.code, effect: String(effectOf(error)), text: error.message };
      throw error;
    }
  }
  async function close() { await store.close(); await ledger.close(); await pool.end(); }
  return { handle, close };
}
