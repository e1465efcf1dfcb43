// A LlamaIndex.TS agent (the `agent()` workflow of @llamaindex/workflow, Anthropic streaming) whose tool
// effects go through @dispatch-once/core's Dispatcher, with a PostgreSQL ledger.
//
// LlamaIndex's agent keeps the conversation in a Memory that lives only while a run lasts; it persists
// nothing between its steps. The app keeps the thread in its own table: the Memory's snapshot (LlamaIndex's
// documented way, `memory.snapshot()` / `loadMemory()`), the turn counter, and each answered message.
import pg from "pg";
import { Anthropic, AnthropicSession } from "@llamaindex/anthropic";
import { agent } from "@llamaindex/workflow";
import { tool } from "llamaindex";
import { loadMemory, createMemory } from "@llamaindex/core/memory";
import type { ChatMessage, ChatResponseChunk } from "@llamaindex/core/llms";
import {
  Dispatcher,
  ToolRegistry,
  UnguardedDispatcher,
  canonicalize,
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
 * The oracle's checks: "unguarded" is core's UnguardedDispatcher (keyed by the tool_use id), "random" the
 * same without the id (a fresh key per run), "per-call" a dispatch context per tool call (identical calls of
 * one response share ordinal 0), "to-model" every dispatch error handed to the model as LlamaIndex's agent
 * does by default (no stop, no re-run), "no-stop-check" the model's stream taken as LlamaIndex hands it over
 * (no check that the response ended with message_stop and a usable stop reason), "object-result" the tool
 * returning the dispatch's result object (LlamaIndex refuses one holding a JSON null, after the payment),
 * "no-base" the turn index taken as the response's place in the run only, without the thread's counter,
 * "no-message-id" every send taken as a new message (no lookup of the client's message id), "no-carry" a
 * re-run's write call dispatched at its own place in the run only (not at the place an earlier run of the
 * same message dispatched it).
 */
export type Plant = "none" | "unguarded" | "random" | "per-call" | "to-model" | "no-stop-check" | "object-result" | "no-base" | "no-message-id" | "no-carry";

/**
 * How a run's responses get turn indexes. "carry" (the default here): response k at `turns + k`, each write call's
 * place recorded, a re-run's identical call dispatched where an earlier run of the message put it (TURN-23).
 * "per-message" (TURNS=per-message): every response at the thread's counter and ONE dispatch context for the run,
 * so identical calls take ordinals across all its responses (AISDK-1, AISDK-9, ATR-2, ATR-3) and the n-th
 * identical call of the message has one key whichever response makes it; no table.
 */
export type Turns = "per-message" | "carry";

export interface AppOptions {
  databaseUrl: string;
  schema: string;
  paymentsUrl: string;
  providerUrl: string;
  plant?: Plant;
  turns?: Turns;
  owner?: string;
  leaseMs?: number;
  waitMs?: number;
  /** Runs of the agent per message when an attempt fails in a way a re-run can settle. */
  attempts?: number;
}

/** The model's stream did not end with message_stop and a stop reason: its calls are not the model's (STREAM-1). */
export class StreamIncomplete extends Error {}
/** The response ended for good (refusal, or max_tokens inside a call): never re-run with the same request (STREAM-13). */
export class ResponseEndedForGood extends Error {
  constructor(readonly stopReason: string) {
    super(`model response ended with stop_reason ${stopReason}; not retried`);
  }
}
/** A dispatch a re-run of the whole agent run settles (claim released after a lost response, another attempt paying). */
export class RunNeedsRerun extends Error {}
/** A call may have had its effect and will not be re-run: stop for a person, never ask the model. */
export class EffectNeedsAPerson extends Error {}

/** One run of the agent for one message: the turn index of each model response, and what was told. */
interface RunState {
  /** Model responses committed on the thread before this message (the counter in the app's table). */
  base: number;
  /** Responses of this run so far, minus one: the response k of the run has turn index base + k. */
  step: number;
  /** The dispatch context of the current response (one per model response, TURN-4). */
  turn: ReturnType<CallDispatcher["turn"]> | undefined;
  /** The current response's calls, in its order, as the stream delivered them; `taken` once a tool ran it. */
  calls: Array<{ id: string; name: string; taken: boolean }>;
  told: Told[];
  stop: Error | undefined;
  /** Write calls earlier runs of this message dispatched, each met at most once by this run (TURN-23). */
  earlier: Array<{ turnIndex: number; name: string; identity: string; met: boolean }>;
  /** This run's contexts at the turn indexes of earlier runs' calls it meets elsewhere. */
  carriedTurns: Map<number, ReturnType<CallDispatcher["turn"]>>;
  /** How many identical write calls this run dispatched at a turn index: the occurrence of the next. */
  occurrences: Map<string, number>;
  messageId: string;
}

export async function openApp(options: AppOptions) {
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 8 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = createPostgresLedger({ pool, schema: options.schema, table: "ledger" });
  await ledger.migrate();
  const appSchema = `${options.schema}_app`;
  await pool.query(`CREATE SCHEMA IF NOT EXISTS ${appSchema};
    CREATE TABLE IF NOT EXISTS ${appSchema}.threads (thread_id text PRIMARY KEY, turns int NOT NULL, memory text NOT NULL);
    CREATE TABLE IF NOT EXISTS ${appSchema}.answers (thread_id text NOT NULL, message_id text NOT NULL, told jsonb NOT NULL, PRIMARY KEY (thread_id, message_id));
    CREATE TABLE IF NOT EXISTS ${appSchema}.dispatched (thread_id text NOT NULL, message_id text NOT NULL, turn_index int NOT NULL, name text NOT NULL,
      identity text NOT NULL, occurrence int NOT NULL, PRIMARY KEY (thread_id, message_id, turn_index, name, identity, occurrence))`);

  const registry = new ToolRegistry([...paymentTools(options.paymentsUrl)]);
  const plant = options.plant ?? "none";
  const perMessage = options.turns === "per-message";
  const dispatcher: CallDispatcher =
    plant !== "unguarded" && plant !== "random"
      ? new Dispatcher({
          tools: registry,
          ledger,
          owner: options.owner ?? `llamaindex-${process.pid}`,
          ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
          ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }),
          logger: { warn: () => {} },
        })
      : new UnguardedDispatcher(registry);

  /**
   * LlamaIndex's Anthropic LLM streams with `messages.create({ stream: true })` and reads only text, thinking
   * and tool_use events: message_delta (the stop reason) and message_stop never reach the agent, and a call
   * whose arguments were cut is handed over with the JSON that arrived. And an error thrown in an agent step
   * (a cut stream, a refusal we raise) is never delivered to `run()`: workflow-core leaves the step's promise
   * rejected with no handler, and Node ends the process (FRICTION 1). So this subclass, under its
   * streamChat (a protected method in the .d.ts), passes text through as it streams, holds the calls back
   * until the response ended with message_stop and a usable stop reason, and on any failure ends the stream
   * without them, recording why in `run.stop`: no call of that response runs, and the app re-runs or stops.
   */
  class CheckedAnthropic extends Anthropic {
    constructor(private readonly run: RunState, init: ConstructorParameters<typeof Anthropic>[0]) {
      super(init);
    }
    protected override streamChat(client: Parameters<Anthropic["streamChat"]>[0], params: Parameters<Anthropic["streamChat"]>[1]) {
      const run = this.run;
      if (run.stop) return (async function* () {})(); // the run is over: the agent finalizes, the app decides
      // A new model response: its own turn index and dispatch context, so identical calls get ordinals 0, 1, ...
      run.step += 1;
      run.calls = [];
      // Per message, the run's first response opens its one context (the agent runs calls one at a time, in order).
      if (perMessage) run.turn ??= plant === "per-call" ? undefined : dispatcher.turn({ conversationId: threadOf(run), turnIndex: run.base });
      else run.turn = plant === "per-call" ? undefined : dispatcher.turn({ conversationId: threadOf(run), turnIndex: run.base + run.step });
      const seen = { stopReason: null as string | null, messageStop: false, cutCall: false };
      let open = "";
      const watched = {
        messages: {
          create: async (p: never) => {
            const stream = (await client.messages.create(p)) as unknown as AsyncIterable<{ type: string; delta?: { type?: string; stop_reason?: string; partial_json?: string }; content_block?: { type: string; id: string; name: string } }>;
            return (async function* () {
              for await (const part of stream) {
                if (part.type === "content_block_start" && part.content_block?.type === "tool_use") {
                  run.calls.push({ id: part.content_block.id, name: part.content_block.name, taken: false });
                  open = "";
                }
                if (part.type === "content_block_delta" && part.delta?.type === "input_json_delta") open += part.delta.partial_json ?? "";
                if (part.type === "content_block_stop" && run.calls.length > 0) {
                  try {
                    if (open !== "") JSON.parse(open);
                  } catch {
                    seen.cutCall = true; // the block was closed on arguments that are not JSON (an output limit)
                  }
                  open = "";
                }
                if (part.type === "message_delta") seen.stopReason = part.delta?.stop_reason ?? null;
                if (part.type === "message_stop") seen.messageStop = true;
                yield part;
              }
            })();
          },
        },
      };
      const inner = super.streamChat(watched as never, params);
      return (async function* () {
        const held: ChatResponseChunk[] = [];
        try {
          for await (const chunk of inner) {
            const calls = (chunk.options as { toolCall?: unknown[] } | undefined)?.toolCall;
            if (calls !== undefined && plant !== "no-stop-check") held.push(chunk);
            else yield chunk;
          }
        } catch (error) {
          run.stop = new StreamIncomplete(`model stream failed: ${(error as Error).message}`, { cause: error });
          return;
        }
        if (plant !== "no-stop-check") {
          if (!seen.messageStop || seen.stopReason === null) run.stop = new StreamIncomplete("model stream ended without message_stop or a stop reason");
          else if (seen.stopReason === "refusal" || (seen.stopReason === "max_tokens" && seen.cutCall)) run.stop = new ResponseEndedForGood(seen.stopReason);
        }
        if (run.stop) return;
        yield* held;
      })();
    }
  }

  const threadIds = new WeakMap<RunState, string>();
  const threadOf = (run: RunState) => threadIds.get(run) ?? "";

  /** The LlamaIndex tools of one run: each dispatches its call in the current response's dispatch context. */
  function toolsFor(run: RunState) {
    return registry.providerSchemas().map((schema) =>
      tool(
        async (input: unknown) => {
          if (run.stop) throw run.stop;
          // LlamaIndex calls a tool with its input only. The agent runs a response's calls one at a time, in
          // the response's order, so this call is the first not yet taken of this name.
          const call = run.calls.find((c) => !c.taken && c.name === schema.name);
          if (call === undefined) throw new Error(`no call of ${schema.name} left in this response`);
          call.taken = true;
          let turnIndex = perMessage ? run.base : run.base + run.step;
          let context = run.turn ?? dispatcher.turn({ conversationId: threadOf(run), turnIndex });
          const definition = registry.get(schema.name);
          const identity = definition.effect === "read" ? undefined : identityOf(definition, input);
          if (identity !== undefined && !perMessage) {
            // A failed run of this message may have dispatched this call at another place in its run (its
            // model took another path on the re-run): dispatch it where that run did, so it meets that row.
            const same = (e: RunState["earlier"][number]) => !e.met && e.name === schema.name && e.identity === identity;
            const here = run.earlier.find((e) => same(e) && e.turnIndex === turnIndex);
            const elsewhere = here ?? (plant === "no-carry" ? undefined : run.earlier.find(same));
            if (elsewhere) elsewhere.met = true;
            if (elsewhere && elsewhere.turnIndex !== turnIndex) {
              turnIndex = elsewhere.turnIndex;
              context = run.carriedTurns.get(turnIndex) ?? dispatcher.turn({ conversationId: threadOf(run), turnIndex });
              run.carriedTurns.set(turnIndex, context);
            }
            // Recorded before the effect: a process killed inside the payment leaves this row for the re-run.
            const slot = `${turnIndex}|${schema.name}|${identity}`;
            const occurrence = run.occurrences.get(slot) ?? 0;
            run.occurrences.set(slot, occurrence + 1);
            await pool.query(`INSERT INTO ${appSchema}.dispatched VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, [threadOf(run), run.messageId, turnIndex, schema.name, identity, occurrence]);
          }
          const request = plant === "random" ? { name: schema.name, input } : { name: schema.name, input, callId: call.id };
          try {
            const outcome: DispatchOutcome = await context.dispatch(request);
            if (outcome.effect !== "read") run.told.push(tellOutcome(call.id, outcome));
            // The stored result text, not the parsed object: LlamaIndex (core 0.6.22) refuses a tool output
            // holding a JSON null (`assertIsJSONValue`) after the tool ran, and tells the model the call
            // failed (FRICTION). PLANT=object-result returns the object, as its docs' examples do.
            return (plant === "object-result" ? outcome.result : outcome.resultJson) as never;
          } catch (error) {
            if (!isDispatchOnceError(error)) throw error; // a read that failed: the model reads it
            const effect = effectOf(error);
            const code = catalogueEntry(error)?.code ?? "internal_error";
            if (plant !== "to-model") {
              // A re-run of the run settles it: the ledger answers what ran. Told to the model, it would ask
              // again in its next response, under the next turn index, and pay again.
              if (retryableOf(error) === "same_message") run.stop = new RunNeedsRerun(`${code}: ${error.message}`, { cause: error });
              else if (effect !== "no") run.stop = new EffectNeedsAPerson(`${schema.name} may have happened (${code}); a person must check`, { cause: error });
              if (run.stop) {
                if (run.stop instanceof EffectNeedsAPerson) run.told.push({ callId: call.id, tool: schema.name, status: "may_have_happened", text: run.stop.message });
                throw run.stop; // LlamaIndex hands this to the model, but the run's next model call is empty
              }
            }
            run.told.push({ callId: call.id, tool: schema.name, status: effect === "no" ? "did_not_happen" : "may_have_happened", text: `${schema.name} ${effect === "no" ? "did not happen" : "may have happened"} (${code})` });
            throw new Error(`error ${code}: ${error.message}`);
          }
        },
        { name: schema.name, description: schema.description ?? schema.name, parameters: schema.input_schema as never },
      ),
    );
  }

  /** One run of LlamaIndex's agent over the thread's memory. */
  async function runOnce(threadId: string, messageId: string, text: string, base: number, memorySnapshot: string | undefined) {
    const earlier = await pool.query(`SELECT turn_index, name, identity FROM ${appSchema}.dispatched WHERE thread_id = $1 AND message_id = $2 ORDER BY turn_index, occurrence`, [threadId, messageId]);
    const run: RunState = {
      base: plant === "no-base" ? 0 : base, step: -1, turn: undefined, calls: [], told: [], stop: undefined, messageId,
      earlier: earlier.rows.map((r) => ({ turnIndex: r.turn_index as number, name: r.name as string, identity: r.identity as string, met: false })),
      carriedTurns: new Map(), occurrences: new Map(),
    };
    threadIds.set(run, threadId);
    // Anthropic's init has no baseURL: a session of our own carries it (and the SDK's retries: LlamaIndex's
    // default is 10; the app re-runs the agent instead).
    const session = new AnthropicSession({ apiKey: "test", baseURL: options.providerUrl, maxRetries: 0 });
    const llm = new CheckedAnthropic(run, { model: "claude-sonnet-4-5", apiKey: "test", maxRetries: 0, session });
    const memory = memorySnapshot ? loadMemory(memorySnapshot) : createMemory();
    const workflow = agent({ llm, tools: toolsFor(run), memory, timeout: 60 });
    try {
      await workflow.run(text);
      return { run, memory, error: run.stop as unknown };
    } catch (error) {
      // The workflow's own errors (its timeout, a step that threw synchronously).
      return { run, memory, error: run.stop ?? error };
    }
  }

  /**
   * Send a user message, idempotent on its id (minted by the client, sent again unchanged on a retry).
   * LlamaIndex commits nothing while a run goes on, so a run that failed (a cut stream, a re-sendable
   * dispatch error, a killed process) is run again from the message: each response gets the turn index of
   * its place in the run again, and the ledger answers the calls that ran.
   */
  async function send(threadId: string, messageId: string, text: string): Promise<{ told: Told[]; answeredBefore: boolean; attempts: number; error?: unknown }> {
    if (plant === "no-message-id") messageId = `${messageId}-${Math.random()}`;
    const answered = await pool.query(`SELECT told FROM ${appSchema}.answers WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
    if (answered.rowCount) return { told: answered.rows[0].told as Told[], answeredBefore: true, attempts: 0 };
    const thread = await pool.query(`SELECT turns, memory FROM ${appSchema}.threads WHERE thread_id = $1`, [threadId]);
    const base = (thread.rows[0]?.turns as number | undefined) ?? 0;
    const snapshot = thread.rows[0]?.memory as string | undefined;
    const attempts = options.attempts ?? 3;
    let lastError: unknown;
    let lastTold: Told[] = [];
    let ran = 0;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      ran = attempt;
      const { run, memory, error } = await runOnce(threadId, messageId, text, base, snapshot);
      if (error !== undefined) {
        lastError = error;
        lastTold = run.told;
        // A person must check, or the model's response ended for good: never run again with the same request.
        if (error instanceof EffectNeedsAPerson || error instanceof ResponseEndedForGood) break;
        continue;
      }
      const turns = perMessage ? base + 1 : base + run.step + 1;
      // Commit the thread and the message's answer together, once: a second click that ran beside this one
      // finds the answer committed and returns it.
      const client = await pool.connect();
      try {
        await client.query("BEGIN");
        const inserted = await client.query(`INSERT INTO ${appSchema}.answers VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [threadId, messageId, JSON.stringify(run.told)]);
        if (inserted.rowCount === 1) {
          await client.query(
            `INSERT INTO ${appSchema}.threads VALUES ($1, $2, $3) ON CONFLICT (thread_id) DO UPDATE SET turns = excluded.turns, memory = excluded.memory`,
            [threadId, turns, memory.snapshot()],
          );
        }
        await client.query("COMMIT");
        if (inserted.rowCount === 0) {
          const theirs = await client.query(`SELECT told FROM ${appSchema}.answers WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
          return { told: theirs.rows[0].told as Told[], answeredBefore: true, attempts: attempt };
        }
      } catch (error) {
        await client.query("ROLLBACK").catch(() => {});
        throw error;
      } finally {
        client.release();
      }
      return { told: run.told, answeredBefore: false, attempts: attempt };
    }
    // Not answered: what the last attempt's calls did, and why it stopped. Nothing is committed, so a re-send
    // runs the message again at the same turn indexes (and the ledger answers the calls that ran).
    const told = lastTold.some((t) => t.status === "may_have_happened") ? lastTold : [...lastTold, tellError(lastError)];
    return { told, answeredBefore: false, attempts: ran, error: lastError };
  }

  async function committed(threadId: string): Promise<ChatMessage[]> {
    const thread = await pool.query(`SELECT memory FROM ${appSchema}.threads WHERE thread_id = $1`, [threadId]);
    if (!thread.rowCount) return [];
    return (await loadMemory(thread.rows[0].memory as string).get()) as ChatMessage[];
  }

  return {
    send,
    committed,
    ledger,
    pool,
    async close() {
      await ledger.close();
      await pool.end();
    },
  };
}

/** The call's identity as its tool declares it (the identity fields, or every field), canonical JSON. */
function identityOf(definition: { input: { safeParse(v: unknown): { success: boolean; data?: unknown } }; identity?: readonly string[] }, input: unknown): string | undefined {
  const parsed = definition.input.safeParse(input);
  if (!parsed.success) return undefined; // refused before any effect: nothing to carry
  const data = parsed.data as Record<string, unknown>;
  const fields = definition.identity ?? Object.keys(data);
  return canonicalize(Object.fromEntries(fields.map((f) => [f, data[f] ?? null])));
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
