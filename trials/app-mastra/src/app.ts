// A Mastra Agent (createTool, Memory on PostgreSQL via @mastra/pg, agent.stream with maxSteps) whose tool
// effects go through @dispatch-once/core's Dispatcher, with a PostgreSQL ledger.
//
// Mastra owns the loop: it calls the model, runs the tools (by default as soon as a call's tool-call part
// streams, before the step ended: `eagerToolExecution`), hands a tool's thrown error to the model, and saves
// the thread's messages in its storage. The app keeps, beside Mastra's memory, its own table: the thread's
// committed turn counter and message ids, and what each client message id was told.
import pg from "pg";
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { RequestContext } from "@mastra/core/request-context";
import { noopLogger } from "@mastra/core/logger";
import { Memory } from "@mastra/memory";
import { PostgresStore } from "@mastra/pg";
import { createAnthropic } from "@ai-sdk/anthropic";
import type { LanguageModelV3, LanguageModelV3StreamPart } from "@ai-sdk/provider";
import {
  Dispatcher,
  ToolRegistry,
  UnguardedDispatcher,
  catalogueEntry,
  effectOf,
  isDispatchOnceError,
  retryableOf,
  type CallDispatcher,
  type DispatchOutcome,
} from "@dispatch-once/core";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { paymentTools } from "./tools.js";

/** What the user is told about one effect (a write call). */
export interface Told {
  callId: string;
  tool: string;
  status: "happened" | "did_not_happen" | "may_have_happened";
  paymentId?: string;
  key?: string;
  text: string;
}

/**
 * The oracle's checks: "unguarded" core's UnguardedDispatcher (keyed by the tool call id), "random" a fresh
 * key per call, "eager" the model's tool calls handed to Mastra as they stream (its default: run before the
 * step ended), "to-model" every dispatch error handed to the model (Mastra's default for a tool that
 * throws), "no-cleanup" a failed run's messages left in Mastra's memory, "no-message-id" every send a new
 * message, "no-lock" no per-thread lock (two messages at once read the same turn counter).
 */
export type Plant = "none" | "unguarded" | "random" | "eager" | "to-model" | "no-cleanup" | "no-message-id" | "no-lock";

export interface AppOptions {
  databaseUrl: string;
  schema: string;
  paymentsUrl: string;
  providerUrl: string;
  plant?: Plant;
  owner?: string;
  leaseMs?: number;
  waitMs?: number;
  attempts?: number;
}

/** The model's stream did not end with a finish part carrying the provider's stop reason (STREAM-1). */
export class StreamIncomplete extends Error {}
/** The response ended for good (refusal, or max_tokens): never re-run with the same request (STREAM-13). */
export class ResponseEndedForGood extends Error {}
/** A dispatch a re-run of the whole message settles (a claim released after a lost response, ...). */
export class RunNeedsRerun extends Error {}
/** A call may have had its effect and will not be re-run: stop for a person, never ask the model. */
export class EffectNeedsAPerson extends Error {}

/** One run of the agent for one message. */
interface RunState {
  threadId: string;
  base: number;
  step: number;
  turn: ReturnType<CallDispatcher["turn"]> | undefined;
  told: Told[];
  stop: Error | undefined;
  abort: AbortController;
}

export async function openApp(options: AppOptions) {
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 8 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = createPostgresLedger({ pool, schema: options.schema, table: "ledger" });
  await ledger.migrate();
  const appSchema = `${options.schema}_app`;
  await pool.query(`CREATE SCHEMA IF NOT EXISTS ${appSchema};
    CREATE TABLE IF NOT EXISTS ${appSchema}.threads (thread_id text PRIMARY KEY, turns int NOT NULL, message_ids jsonb NOT NULL);
    CREATE TABLE IF NOT EXISTS ${appSchema}.answers (thread_id text NOT NULL, message_id text NOT NULL, told jsonb NOT NULL, PRIMARY KEY (thread_id, message_id))`);

  const storage = new PostgresStore({ id: "trial", connectionString: options.databaseUrl, schemaName: `${options.schema}_mastra` });
  const memory = new Memory({ storage, options: { lastMessages: 40, semanticRecall: false, generateTitle: false } as never });

  const registry = new ToolRegistry([...paymentTools(options.paymentsUrl)]);
  const plant = options.plant ?? "none";
  const dispatcher: CallDispatcher =
    plant !== "unguarded" && plant !== "random"
      ? new Dispatcher({
          tools: registry,
          ledger,
          owner: options.owner ?? `mastra-${process.pid}`,
          ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
          ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }),
          logger: { warn: () => {} },
        })
      : new UnguardedDispatcher(registry);

  const anthropic = createAnthropic({ baseURL: `${options.providerUrl}/v1`, apiKey: "test" });
  const base = anthropic("claude-sonnet-4-5") as unknown as LanguageModelV3;

  /**
   * The model Mastra calls, per run. Each doStream is one model response: its own turn index (base + step)
   * and dispatch context. Its tool calls are held back until the response ended with message_stop and a
   * usable stop reason: Mastra (eagerToolExecution, its default) would otherwise run a call the moment its
   * tool-call part streams, before the stream could still be cut, and the @ai-sdk/anthropic provider ends
   * a stream closed without message_stop with a `finish` part of its own (unified "other").
   */
  function checkedModel(run: RunState): LanguageModelV3 {
    return {
      specificationVersion: "v3",
      provider: base.provider,
      modelId: base.modelId,
      supportedUrls: base.supportedUrls,
      doGenerate: () => Promise.reject(new Error("the trial streams")),
      async doStream(params) {
        if (run.stop) throw run.stop;
        run.step += 1;
        run.turn = dispatcher.turn({ conversationId: run.threadId, turnIndex: run.base + run.step });
        const result = await base.doStream({ ...params, includeRawChunks: true });
        const held: LanguageModelV3StreamPart[] = [];
        let messageStop = false;
        let finished = false;
        const stream = result.stream.pipeThrough(
          new TransformStream<LanguageModelV3StreamPart, LanguageModelV3StreamPart>({
            transform(part, controller) {
              if (part.type === "raw") {
                if ((part.rawValue as { type?: string })?.type === "message_stop") messageStop = true;
                if (params.includeRawChunks) controller.enqueue(part);
                return;
              }
              if (part.type === "error") {
                run.stop = new StreamIncomplete(`model stream failed: ${String((part.error as Error)?.message ?? part.error)}`);
                controller.error(run.stop);
                return;
              }
              if (plant !== "eager" && (part.type === "tool-call" || part.type.startsWith("tool-input"))) {
                held.push(part);
                return;
              }
              if (part.type === "finish") {
                finished = true;
                if (plant !== "eager") {
                  const reason = part.finishReason.raw;
                  if (!messageStop || reason === undefined) run.stop = new StreamIncomplete("model stream ended without message_stop or a stop reason");
                  else if (reason === "refusal" || (reason === "max_tokens" && held.length > 0)) run.stop = new ResponseEndedForGood(`model response ended with stop_reason ${reason}; not retried`);
                  if (run.stop) {
                    controller.error(run.stop);
                    return;
                  }
                  for (const h of held) controller.enqueue(h);
                }
              }
              controller.enqueue(part);
            },
            flush(controller) {
              if (!finished && plant !== "eager") {
                run.stop ??= new StreamIncomplete("model stream ended without a finish part");
                controller.error(run.stop);
              }
            },
          }),
        );
        return { ...result, stream };
      },
    };
  }

  /** The Mastra tools: each dispatches its call in the current response's dispatch context. */
  const tools = Object.fromEntries(
    registry.providerSchemas().map((schema) => {
      const definition = registry.get(schema.name);
      return [
        schema.name,
        createTool({
          id: schema.name,
          description: schema.description ?? schema.name,
          inputSchema: definition.input as never,
          execute: async (input: unknown, context) => {
            const run = context.requestContext?.get("run") as RunState;
            if (run.stop) throw run.stop;
            const callId = context.agent?.toolCallId ?? "?";
            const turn = run.turn ?? dispatcher.turn({ conversationId: run.threadId, turnIndex: run.base + run.step });
            const request = plant === "random" ? { name: schema.name, input } : { name: schema.name, input, callId };
            try {
              const outcome: DispatchOutcome = await turn.dispatch(request);
              if (outcome.effect !== "read") run.told.push(tellOutcome(callId, outcome));
              return outcome.result as never;
            } catch (error) {
              if (!isDispatchOnceError(error)) throw error; // a failed read: the model reads it
              const effect = effectOf(error);
              const code = catalogueEntry(error)?.code ?? "internal_error";
              if (plant !== "to-model") {
                // Told to the model, it asks again in its next response, under the next turn index.
                if (retryableOf(error) === "same_message") run.stop = new RunNeedsRerun(`${code}: ${error.message}`, { cause: error });
                else if (effect !== "no") {
                  run.stop = new EffectNeedsAPerson(`${schema.name} may have happened (${code}); a person must check`, { cause: error });
                  run.told.push({ callId, tool: schema.name, status: "may_have_happened", text: run.stop.message });
                }
                if (run.stop) {
                  run.abort.abort(run.stop); // end Mastra's run: no further model call reads this
                  throw run.stop;
                }
              }
              run.told.push({ callId, tool: schema.name, status: effect === "no" ? "did_not_happen" : "may_have_happened", text: `${schema.name} ${effect === "no" ? "did not happen" : "may have happened"} (${code})` });
              throw new Error(`error ${code}: ${error.message}`);
            }
          },
        }),
      ];
    }),
  );

  const agent = new Agent({
    id: "payer",
    name: "payer",
    instructions: "You pay invoices with send_payment.",
    model: ({ requestContext }) => checkedModel(requestContext.get("run") as RunState),
    tools,
    memory,
  });
  // Mastra logs each failed model stream with the whole request; the app tells the user itself.
  if (process.env.MASTRA_LOGS !== "1") agent.__setLogger(noopLogger);

  /** Mastra memory's messages of a thread (all of them), oldest first. */
  async function memoryMessages(threadId: string) {
    try {
      const { messages } = await memory.recall({ threadId, perPage: false } as never);
      return messages;
    } catch (error) {
      if (/not found/i.test((error as Error).message)) return [];
      throw error;
    }
  }

  /** One run of the agent over Mastra's memory of the thread. */
  async function runOnce(threadId: string, text: string, base: number) {
    const run: RunState = { threadId, base, step: -1, turn: undefined, told: [], stop: undefined, abort: new AbortController() };
    const requestContext = new RequestContext();
    requestContext.set("run", run);
    let streamError: unknown;
    try {
      const output = await agent.stream(text, {
        memory: { thread: threadId, resource: "user" },
        maxSteps: 5,
        requestContext,
        abortSignal: run.abort.signal,
        // Mastra retries a failed model call itself (2 times by default); each retry is a new doStream here,
        // the next turn index, so a later re-run of the message would number that response differently.
        modelSettings: { maxRetries: 0 },
        onError: ({ error }: { error: unknown }) => void (streamError ??= error),
      } as never);
      for await (const _ of output.fullStream) {
        // drain
      }
      await output.getFullOutput?.().catch((e: unknown) => void (streamError ??= e));
    } catch (error) {
      streamError ??= error;
    }
    return { run, error: run.stop ?? streamError };
  }

  /** Delete the thread's messages in Mastra's memory that no committed message of the app's table holds. */
  async function dropUncommitted(threadId: string, committedIds: Set<string>) {
    const leftOver = (await memoryMessages(threadId)).filter((m) => !committedIds.has(m.id)).map((m) => m.id);
    if (leftOver.length > 0) await memory.deleteMessages(leftOver);
  }

  async function withThreadLock<T>(threadId: string, fn: () => Promise<T>): Promise<T> {
    if (plant === "no-lock") return fn();
    const client = await pool.connect();
    try {
      await client.query("SELECT pg_advisory_lock(hashtext($1))", [`${appSchema}:${threadId}`]);
      try {
        return await fn();
      } finally {
        await client.query("SELECT pg_advisory_unlock(hashtext($1))", [`${appSchema}:${threadId}`]).catch(() => {});
      }
    } finally {
      client.release();
    }
  }

  /**
   * Send a user message, idempotent on its client id. Messages of a thread run one at a time (a session
   * advisory lock held for the whole run). Before each run, whatever a failed run left in Mastra's memory
   * (the user message, assistant and tool messages saved before the failure) is deleted: the model must
   * not read a half-told turn, and the re-run adds the user message again.
   */
  async function send(threadId: string, messageId: string, text: string): Promise<{ told: Told[]; answeredBefore: boolean; attempts: number; error?: unknown }> {
    if (plant === "no-message-id") messageId = `${messageId}-${Math.random()}`;
    return withThreadLock(threadId, async () => {
      const answered = await pool.query(`SELECT told FROM ${appSchema}.answers WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
      if (answered.rowCount) return { told: answered.rows[0].told as Told[], answeredBefore: true, attempts: 0 };
      const thread = await pool.query(`SELECT turns, message_ids FROM ${appSchema}.threads WHERE thread_id = $1`, [threadId]);
      const base = (thread.rows[0]?.turns as number | undefined) ?? 0;
      const committedIds = new Set((thread.rows[0]?.message_ids as string[] | undefined) ?? []);
      const attempts = options.attempts ?? 3;
      let lastError: unknown;
      let lastTold: Told[] = [];
      let ran = 0;
      for (let attempt = 1; attempt <= attempts; attempt++) {
        ran = attempt;
        // A killed process's run, or this message's earlier attempt, left its messages in Mastra's memory.
        if (plant !== "no-cleanup") await dropUncommitted(threadId, committedIds);
        const { run, error } = await runOnce(threadId, text, base);
        if (error !== undefined) {
          lastError = error;
          lastTold = run.told;
          if (error instanceof EffectNeedsAPerson || error instanceof ResponseEndedForGood) break;
          continue;
        }
        const ids = (await memoryMessages(threadId)).map((m) => m.id);
        const client = await pool.connect();
        try {
          await client.query("BEGIN");
          await client.query(`INSERT INTO ${appSchema}.answers VALUES ($1, $2, $3)`, [threadId, messageId, JSON.stringify(run.told)]);
          await client.query(
            `INSERT INTO ${appSchema}.threads VALUES ($1, $2, $3) ON CONFLICT (thread_id) DO UPDATE SET turns = excluded.turns, message_ids = excluded.message_ids`,
            [threadId, base + run.step + 1, JSON.stringify(ids)],
          );
          await client.query("COMMIT");
        } catch (error) {
          await client.query("ROLLBACK").catch(() => {});
          throw error;
        } finally {
          client.release();
        }
        return { told: run.told, answeredBefore: false, attempts: attempt };
      }
      // Mastra saved the failed run's user message and steps (FRICTION 2): take them out now, so that the
      // thread's next message does not read a turn that was never answered.
      if (plant !== "no-cleanup") await dropUncommitted(threadId, committedIds);
      const told = lastTold.some((t) => t.status === "may_have_happened") ? lastTold : [...lastTold, tellError(lastError)];
      return { told, answeredBefore: false, attempts: ran, error: lastError };
    });
  }

  /** What Mastra's memory holds of the thread, and what the app committed of it. */
  async function committed(threadId: string) {
    const thread = await pool.query(`SELECT message_ids FROM ${appSchema}.threads WHERE thread_id = $1`, [threadId]);
    const ids = new Set((thread.rows[0]?.message_ids as string[] | undefined) ?? []);
    const messages = await memoryMessages(threadId);
    return { messages, committedIds: ids };
  }

  return {
    send,
    committed,
    memoryMessages,
    ledger,
    pool,
    async close() {
      await ledger.close();
      await pool.end();
      await (storage as unknown as { close?: () => Promise<void> }).close?.();
    },
  };
}

function tellOutcome(callId: string, outcome: DispatchOutcome): Told {
  const result = outcome.result as { id?: string };
  return {
    callId,
    tool: outcome.toolName,
    status: "happened",
    ...(result.id ? { paymentId: result.id } : {}),
    key: outcome.key,
    text: `${outcome.toolName} happened: ${result.id ?? "?"}${outcome.replayed ? " (answered from the ledger)" : ""}`,
  };
}

/** What the user is told when a message's runs all failed. */
export function tellError(error: unknown): Told {
  const cause = (error as { cause?: unknown })?.cause;
  if (error instanceof EffectNeedsAPerson) return { callId: "-", tool: "run", status: "may_have_happened", text: error.message };
  if (error instanceof ResponseEndedForGood) return { callId: "-", tool: "run", status: "did_not_happen", text: `${error.message}; nothing of it ran` };
  const entry = catalogueEntry(cause ?? error);
  const name = (error as Error)?.constructor?.name ?? "Error";
  return { callId: "-", tool: "run", status: "may_have_happened", text: `not completed (${entry?.code ?? name}: ${(error as Error)?.message ?? String(error)}); send again to retry` };
}
