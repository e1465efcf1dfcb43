// The application: a payments assistant on Google's Gemini API through @google/genai, on
// @dispatch-once/runner with the Gemini stream side of ./gemini.ts, built from packages/runner's and
// core's READMEs, packages/conversation-postgres and packages/ledger-postgres READMEs.
import { GoogleGenAI } from "@google/genai";
import pg from "pg";
import { Dispatcher, StoreUnavailableError, UnguardedDispatcher, effectOf, isDispatchOnceError } from "@dispatch-once/core";
import { TurnRunner, TurnFailedError } from "@dispatch-once/runner";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { tools } from "./tools.js";
import { GeminiStream } from "./gemini.js";

export interface AppConfig {
  databaseUrl: string;
  schema: string;
  /** The Gemini API's origin (`httpOptions.baseUrl`); unset: the SDK's own. */
  geminiBaseURL?: string;
  owner: string;
  /** The SDK's own attempts (`httpOptions.retryOptions.attempts`, before the response's headers only). */
  sdkAttempts?: number;
  /** Ask for thoughts (`thinkingConfig.includeThoughts`). */
  thoughts?: boolean;
  /** PLANT=unguarded: core's UnguardedDispatcher, to check the oracle (never in production). */
  unguarded?: boolean;
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
  const client = new GoogleGenAI({
    apiKey: process.env.GEMINI_API_KEY ?? "AIzaTrial",
    httpOptions: {
      ...(config.geminiBaseURL !== undefined ? { baseUrl: config.geminiBaseURL } : {}),
      apiVersion: "v1beta",
      retryOptions: { attempts: config.sdkAttempts ?? 3, initialDelay: 0.05, maxDelay: 0.2 },
    },
  });
  const dispatcher = config.unguarded ? new UnguardedDispatcher(tools) : new Dispatcher({ tools, ledger, leaseMs: 3000 });
  // core's registry gives Anthropic-shaped schemas ({ name, input_schema }): Gemini takes the JSON Schema as `parametersJsonSchema`.
  const functionDeclarations = tools.providerSchemas().map((t) => ({ name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parametersJsonSchema: t.input_schema }));
  const runner = new TurnRunner(
    new GeminiStream({ client, model: "gemini-2.5-flash", functionDeclarations, system: "You are a payments assistant. Pay only when asked.", ...(config.thoughts ? { thoughts: true } : {}) }),
    {
      dispatcher,
      store,
      owner: config.owner,
      turnLeaseMs: 4000,
      busyWaitMs: 20_000,
      streamIdleTimeoutMs: 60_000,
      // What an operator's log keeps of each cut stream (the trial reads it to see which cut the runner met).
      onEvent: (e) => {
        if (e.type === "stream_failed") console.error(`stream_failed ${e.conversationId} attempt ${e.attempt} at ${JSON.stringify(e.position)}: ${e.error}`);
        if (e.type === "call_abandoned") console.error(`call_abandoned ${e.conversationId} attempt ${e.attempt} ${e.name}`);
      },
    },
  );

  async function handle(conversationId: string, messageId: string, text: string): Promise<Reply> {
    try {
      const sent = await runner.send(conversationId, { id: messageId, content: text });
      const { turns, records } = sent;
      if (process.env.DEBUG_SEND) console.error(`send ${JSON.stringify({ ...sent, turns: sent.turns.map((t) => ({ ...t, calls: t.calls.length })) })}`);
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
      return { status: "answered", text: turns.map((t) => t.text).join(""), calls, untold };
    } catch (error) {
      if (TurnFailedError.isInstance(error)) {
        const effects = error.record.effects.map(effectOfEntry);
        const advice = error.record.retryable
          ? "the answer did not complete; send the same message again"
          : `the turn failed and sending it again will not help (${error.record.error.code ?? error.record.error.name}: ${error.record.error.message})`;
        return { status: "failed", text: [...effects.map(say), advice].join("\n"), effects, retryable: error.record.retryable, cause: `${error.record.error.code ?? error.record.error.name}: ${error.record.error.message}` };
      }
      // The store failed at the turn's end after calls ran (RECORD-9).
      if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
        const effects = error.effects.map(effectOfEntry);
        return { status: "unsaved", text: effects.map((e) => `${say(e)}; its confirmation was not saved, send the same message again`).join("\n"), effects };
      }
      if (isDispatchOnceError(error)) {
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
