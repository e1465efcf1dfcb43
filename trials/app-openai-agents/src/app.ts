// An OpenAI Agents SDK (`@openai/agents`) agent whose tool effects go through @dispatch-once/core's Dispatcher,
// with a PostgreSQL ledger. The SDK's run() owns the loop: it streams each model response, runs the response's
// function calls (all at once) once the response completed, and loops until the model answers in text.
//
// What the app adds around run():
// - a thread table of its own: the SDK's history (`result.history`) and the turn counter, committed with
//   the message's answer in one transaction, once per client message id;
// - a wrapper around the SDK's Model that numbers each model response of a run (turn index = the thread's
//   counter + the response's place in the run) and records the response's calls, in its order, in the run's
//   context (which RunState serialises: an approval resumed in another process keeps the numbering);
// - send_payment as an SDK tool() that dispatches its call at its response's turn index, at an ordinal counted
//   from the response's order (the SDK runs a response's calls concurrently, so call order is not arrival order);
// - an advisory lock per thread around each message (the SDK has no turn lease).
import pg from "pg";
import OpenAI from "openai";
import { z } from "zod";
import {
  Agent,
  OpenAIResponsesModel,
  RunState,
  run,
  setTracingDisabled,
  tool,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type RunContext,
  type StreamEvent,
} from "@openai/agents";
import {
  Dispatcher,
  ToolRegistry,
  UnguardedDispatcher,
  canonicalize,
  catalogueEntry,
  effectOf,
  isDispatchOnceError,
  retryableOf,
  type DispatchOutcome,
} from "@dispatch-once/core";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { paymentTools } from "./tools.js";

// The SDK exports traces to api.openai.com by default, with the client's key (FRICTION 7).
setTracingDisabled(true);

/** What the user is told about one effect (a write call), or about the message. */
export interface Told {
  callId: string;
  tool: string;
  status: "happened" | "did_not_happen" | "may_have_happened" | "awaiting_approval";
  paymentId?: string;
  key?: string;
  text: string;
}

/**
 * The oracle's checks (plants.txt): "unguarded" core's UnguardedDispatcher keyed by the call id, "random" a fresh
 * key per run, "per-call" every call at ordinal 0 (a dispatch context per call: two identical calls of one
 * response are one), "to-model" the SDK's default tool errorFunction (every error told to the model), "no-base"
 * the turn index without the thread's counter, "no-message-id" every send a new message, "no-thread-lock" no
 * advisory lock per thread, "sdk-timeout" the SDK's own tool timeout (`timeoutMs`, whose default behaviour
 * tells the model the call timed out while the payment goes on), "no-carry" a re-run's write call dispatched at
 * its own place only (not where an earlier run of the same message dispatched it). Under "per-message": "per-response"
 * response k at `turns + k` without the carry, "response-ordinal" the ordinal counted in the response only (not
 * across the run's earlier responses), "no-resume-count" a run resumed from a stored RunState not counting the
 * calls its earlier responses made. "no-bound-index" (either recipe): a failed message re-sent after another message
 * was answered runs again at the thread's new counter; "no-approval-hold" (either recipe): a message runs while another
 * message of the thread awaits an approval.
 */
export type Plant =
  | "none" | "unguarded" | "random" | "per-call" | "to-model" | "no-base" | "no-message-id" | "no-thread-lock" | "sdk-timeout" | "no-carry"
  | "per-response" | "response-ordinal" | "no-resume-count" | "no-bound-index" | "no-approval-hold";

/**
 * How a run's responses get turn indexes. "per-message" (the default): every response of the run has the thread's
 * counter (TURN-1 as AISDK-1 and ATR-2 apply it where the application owns the loop), and an ordinal counts the
 * identical calls of the whole run (AISDK-9, ATR-3), so the n-th identical write call of the message has one key
 * whichever response makes it; nothing else is kept. "carry": response k at `turns + k`, each write call's place
 * recorded, and a re-run's identical call dispatched where an earlier run of the message put it (TURN-23).
 */
export type Turns = "per-message" | "carry";

export interface AppOptions {
  databaseUrl: string;
  schema: string;
  paymentsUrl: string;
  modelUrl: string;
  plant?: Plant;
  turns?: Turns;
  owner?: string;
  leaseMs?: number;
  waitMs?: number;
  attempts?: number;
  /** send_payment needs a person's approval (the SDK's needsApproval): the run interrupts. */
  approvals?: boolean;
  paymentTimeoutMs?: number;
}

/**
 * One run's record, kept as the SDK run's context (`run(agent, input, { context })`): RunState.toString()
 * serialises it, so a run resumed from a stored state in another process keeps its turn numbering.
 */
export interface Book {
  threadId: string;
  messageId: string;
  /** Model responses committed on the thread before this message. */
  base: number;
  /** The run's responses so far, minus one: response k has turn index base + k. */
  step: number;
  /** Each completed response's function calls in its order, with the response's turn index. */
  responses: Array<{ turnIndex: number; calls: Array<{ callId: string; name: string; args: string }> }>;
  told: Told[];
  /** Write calls earlier runs of this message dispatched, each met at most once by this run (TURN-23; "carry" only). */
  earlier: Array<{ turnIndex: number; ordinal: number; name: string; identity: string; met: boolean }>;
  /** The number of responses the run had recorded when it was stored for an approval and resumed. */
  resumedAt?: number;
}

/** A dispatch a re-run of the message settles (a claim released after a lost response, another attempt paying). */
export class RunNeedsRerun extends Error {}
/** A call may have had its effect and will not be re-run: stop for a person, never ask the model. */
export class EffectNeedsAPerson extends Error {}

export async function openApp(options: AppOptions) {
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 8 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = createPostgresLedger({ pool, schema: options.schema, table: "ledger" });
  await ledger.migrate();
  const appSchema = `${options.schema}_app`;
  await pool.query(`CREATE SCHEMA IF NOT EXISTS ${appSchema};
    CREATE TABLE IF NOT EXISTS ${appSchema}.threads (thread_id text PRIMARY KEY, turns int NOT NULL, history jsonb NOT NULL);
    CREATE TABLE IF NOT EXISTS ${appSchema}.answers (thread_id text NOT NULL, message_id text NOT NULL, told jsonb NOT NULL, PRIMARY KEY (thread_id, message_id));
    CREATE TABLE IF NOT EXISTS ${appSchema}.pending (thread_id text NOT NULL, message_id text NOT NULL, state text NOT NULL, told jsonb NOT NULL, PRIMARY KEY (thread_id, message_id));
    CREATE TABLE IF NOT EXISTS ${appSchema}.failed (thread_id text NOT NULL, message_id text NOT NULL, turn_index int NOT NULL, told jsonb NOT NULL, PRIMARY KEY (thread_id, message_id));
    CREATE TABLE IF NOT EXISTS ${appSchema}.dispatched (thread_id text NOT NULL, message_id text NOT NULL, turn_index int NOT NULL, ordinal int NOT NULL,
      name text NOT NULL, identity text NOT NULL, PRIMARY KEY (thread_id, message_id, turn_index, ordinal, name, identity))`);

  const registry = new ToolRegistry([...paymentTools(options.paymentsUrl, options.paymentTimeoutMs)]);
  const plant = options.plant ?? "none";
  // The per-response plant is the carry recipe without its table; the other plants keep the recipe asked for.
  const turns: Turns | "per-response" = plant === "per-response" ? "per-response" : (options.turns ?? "per-message");
  const guarded = plant !== "unguarded" && plant !== "random";
  const dispatcher = new Dispatcher({
    tools: registry,
    ledger,
    owner: options.owner ?? `agents-${process.pid}`,
    ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
    ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }),
    logger: { warn: () => {} },
  });
  const unguarded = new UnguardedDispatcher(registry);
  const client = new OpenAI({ baseURL: options.modelUrl, apiKey: "test" });

  /**
   * The SDK's Responses model, with each response numbered and its calls recorded in the run's book before the
   * SDK runs them. The SDK itself runs no call of a response that did not end with response.completed (a cut
   * stream throws, a clean close is "Model did not produce a final response!"), so nothing is held back here.
   */
  class NumberedModel implements Model {
    constructor(private readonly inner: Model, private readonly book: () => Book) {}
    getResponse(_request: ModelRequest): Promise<ModelResponse> {
      throw new Error("this app streams");
    }
    async *getStreamedResponse(request: ModelRequest): AsyncIterable<StreamEvent> {
      const book = this.book();
      book.step += 1;
      const turnIndex = turns === "per-message" ? book.base : book.base + book.step;
      for await (const event of this.inner.getStreamedResponse(request)) {
        if (event.type === "response_done") {
          const calls = event.response.output.flatMap((item) =>
            item.type === "function_call" ? [{ callId: item.callId, name: item.name, args: item.arguments }] : [],
          );
          book.responses.push({ turnIndex, calls });
        }
        yield event;
      }
    }
  }

  // The SDK's strict mode requires every field: memo is nullable here, absent in the registry's schema.
  const sendPaymentParameters = z.object({
    payee: z.string(),
    amount: z.number().int(),
    currency: z.string(),
    reference: z.string(),
    memo: z.string().nullable(),
  });

  function agentFor(book: () => Book) {
    const sendPayment = tool({
      name: "send_payment",
      description: "Send a payment to a payee.",
      parameters: sendPaymentParameters,
      needsApproval: options.approvals === true,
      // No SDK timeoutMs: its default (error_as_result) races the call, tells the model "timed out" and leaves
      // the payment running; the model asks again under the next turn's key (FRICTION 4). The payments
      // request has its own timeout, and a timed-out payment is an unknown outcome.
      ...(plant === "sdk-timeout" ? { timeoutMs: 1_000 } : {}),
      // The SDK's default tells the model "An error occurred while running the tool. Please try again." for
      // every error, and the model asks again under the next turn's key (FRICTION 2). Only a refusal goes to
      // the model; a re-run or a person's check ends the run (a thrown errorFunction fails run()).
      ...(plant === "to-model"
        ? {}
        : {
            errorFunction: (_context: RunContext, error: unknown) => {
              if (error instanceof RunNeedsRerun || error instanceof EffectNeedsAPerson) throw error;
              return error instanceof Error ? error.message : String(error);
            },
          }),
      async execute(_input, context, details) {
        const run = (context?.context as Book | undefined) ?? book();
        const toolCall = details?.toolCall;
        if (toolCall === undefined) throw new Error("the SDK gave no tool call");
        return dispatchCall(run, toolCall.callId, "send_payment", toolCall.arguments);
      },
    });
    const model = new NumberedModel(new OpenAIResponsesModel(client as never, "gpt-5"), book);
    const checkBalance = tool({
      name: "check_balance",
      description: "List what the account has paid so far.",
      parameters: z.object({}),
      async execute(_input, context, details) {
        const run = (context?.context as Book | undefined) ?? book();
        const toolCall = details?.toolCall;
        if (toolCall === undefined) throw new Error("the SDK gave no tool call");
        return dispatchCall(run, toolCall.callId, "check_balance", toolCall.arguments);
      },
    });
    return new Agent({ name: "payments", instructions: "You send payments the user asks for.", model, tools: [sendPayment, checkBalance] });
  }

  /** Dispatch one call at its response's turn index and ordinal; the stored result text goes to the model. */
  async function dispatchCall(book: Book, callId: string, name: string, argumentsJson: string): Promise<string> {
    const response = book.responses.find((r) => r.calls.some((c) => c.callId === callId));
    if (response === undefined) throw new Error(`call ${callId} is not in any response this run recorded`);
    const position = response.calls.findIndex((c) => c.callId === callId);
    const input = withoutNulls(JSON.parse(argumentsJson) as Record<string, unknown>);
    const definition = registry.get(name);
    const identity = identityOf(definition, input);
    // TURN-4: the k-th identical call of a response is ordinal k, counted in the response's order. The SDK
    // starts a response's calls together (Promise.all), so the order they reach here is not the ask's.
    const identical = (c: { name: string; args: string }) => c.name === name && identityOf(definition, withoutNulls(JSON.parse(c.args))) === identity;
    const before = response.calls.slice(0, position);
    // Per message, the ordinal also counts the identical calls of the run's earlier responses (AISDK-9, ATR-3):
    // the n-th identical call of the message has one key, whether the run makes it in its first response or its
    // third. The book is the run's context, so a run resumed after an approval counts the responses it recorded
    // before it was stored.
    const index = book.responses.indexOf(response);
    const counted = plant === "no-resume-count" && book.resumedAt !== undefined ? Math.max(0, book.resumedAt - 1) : 0;
    const earlierResponses = turns === "per-message" && plant !== "response-ordinal" ? book.responses.slice(counted, index) : [];
    const ownOrdinal =
      plant === "per-call" ? 0 : earlierResponses.reduce((n, r) => n + r.calls.filter(identical).length, 0) + before.filter(identical).length;
    const conversationId = book.threadId;
    let turnIndex = plant === "no-base" ? response.turnIndex - book.base : response.turnIndex;
    let ordinal = ownOrdinal;
    if (definition.effect !== "read" && turns === "carry") {
      // TURN-23: a failed run of this message may have dispatched this call at another place in its run (the
      // re-run's model read the balance first): dispatch it where that run did, so it meets that row. Matched
      // before any await: the SDK runs a response's calls concurrently.
      const same = (e: Book["earlier"][number]) => !e.met && e.name === name && e.identity === identity;
      const here = book.earlier.find((e) => same(e) && e.turnIndex === turnIndex && e.ordinal === ordinal);
      const elsewhere = here ?? (plant === "no-carry" ? undefined : book.earlier.find(same));
      if (elsewhere) {
        elsewhere.met = true;
        turnIndex = elsewhere.turnIndex;
        ordinal = elsewhere.ordinal;
      }
      // Recorded before the effect: a process killed inside the payment leaves this row for the re-run.
      await pool.query(`INSERT INTO ${appSchema}.dispatched VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, [book.threadId, book.messageId, turnIndex, ordinal, name, identity]);
    }
    try {
      const outcome: DispatchOutcome = guarded
        ? await dispatcher.dispatch({ name, input, callId }, { conversationId, turnIndex, ordinal })
        : await unguarded.turn({ conversationId, turnIndex }).dispatch(plant === "random" ? { name, input } : { name, input, callId });
      if (outcome.effect !== "read") book.told.push(tellOutcome(callId, outcome));
      return outcome.resultJson;
    } catch (error) {
      if (!isDispatchOnceError(error)) throw error;
      const effect = effectOf(error);
      const code = catalogueEntry(error)?.code ?? "internal_error";
      if (plant !== "to-model") {
        // A re-run of the message settles it (the ledger answers what ran). Told to the model, it would ask
        // again in its next response, under the next turn index, and pay again.
        if (retryableOf(error) === "same_message") throw new RunNeedsRerun(`${code}: ${error.message}`, { cause: error });
        if (effect !== "no") {
          book.told.push({ callId, tool: name, status: "may_have_happened", text: `${name} may have happened (${code}); a person must check` });
          throw new EffectNeedsAPerson(`${name} may have happened (${code}); a person must check`, { cause: error });
        }
      }
      book.told.push({ callId, tool: name, status: effect === "no" ? "did_not_happen" : "may_have_happened", text: `${name} ${effect === "no" ? "did not happen" : "may have happened"} (${code})` });
      throw new Error(`error ${code}: ${error.message}`);
    }
  }

  /** The SDK has no turn lease: one message of a thread at a time, on a connection of its own. */
  async function withThread<T>(threadId: string, body: (db: pg.PoolClient) => Promise<T>): Promise<T> {
    const db = await pool.connect();
    try {
      if (plant !== "no-thread-lock") {
        await db.query("SET lock_timeout = '30s'");
        await db.query("SELECT pg_advisory_lock(hashtext($1))", [`agents:${threadId}`]);
      }
      try {
        return await body(db);
      } finally {
        if (plant !== "no-thread-lock") await db.query("SELECT pg_advisory_unlock(hashtext($1))", [`agents:${threadId}`]);
      }
    } finally {
      db.release();
    }
  }

  async function answeredBefore(db: pg.PoolClient, threadId: string, messageId: string): Promise<Told[] | undefined> {
    const r = await db.query(`SELECT told FROM ${appSchema}.answers WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
    return r.rowCount ? (r.rows[0].told as Told[]) : undefined;
  }

  /** Commit the thread and the message's answer together, once per message id. */
  async function commit(db: pg.PoolClient, book: Book, history: AgentInputItem[]): Promise<Told[]> {
    await db.query("BEGIN");
    try {
      const inserted = await db.query(`INSERT INTO ${appSchema}.answers VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [book.threadId, book.messageId, JSON.stringify(book.told)]);
      if (inserted.rowCount === 1) {
        await db.query(
          `INSERT INTO ${appSchema}.threads VALUES ($1, $2, $3) ON CONFLICT (thread_id) DO UPDATE SET turns = excluded.turns, history = excluded.history`,
          // Per message the counter moves by one: the next message's responses are all at base + 1.
          [book.threadId, turns === "per-message" ? book.base + 1 : book.base + book.step + 1, JSON.stringify(history)],
        );
      }
      await db.query(`DELETE FROM ${appSchema}.pending WHERE thread_id = $1 AND message_id = $2`, [book.threadId, book.messageId]);
      await db.query("COMMIT");
      // A copy: a call the SDK abandoned (its tool timeout) may still append to the run's list.
      return inserted.rowCount === 1 ? [...book.told] : ((await answeredBefore(db, book.threadId, book.messageId)) ?? [...book.told]);
    } catch (error) {
      await db.query("ROLLBACK").catch(() => {});
      throw error;
    }
  }

  type Outcome = { told: Told[]; answeredBefore: boolean; attempts: number; pending?: boolean; error?: unknown; modelRequests?: number };

  /** One streamed run to its end; the run's state when it stopped for an approval. */
  async function runToEnd(agent: Agent, input: AgentInputItem[] | RunState<Book, Agent>, book: Book) {
    const result = await run(agent, input as AgentInputItem[], { stream: true, context: book });
    for await (const _event of result) {
      // the text would stream to the user here
    }
    await result.completed;
    if (result.error !== undefined && result.error !== null) throw result.error;
    return result;
  }

  /**
   * Send a user message, idempotent on its id. The SDK keeps nothing of a failed run that the app could resume
   * (a ModelBehaviorError's state holds the cut response's partial items), so a failed run is run again from
   * the message: each response gets its place in the run again, and the ledger answers the calls that ran.
   */
  async function send(threadId: string, messageId: string, text: string): Promise<Outcome> {
    if (plant === "no-message-id") messageId = `${messageId}-${Math.random()}`;
    return withThread(threadId, async (db) => {
      const before = await answeredBefore(db, threadId, messageId);
      if (before) return { told: before, answeredBefore: true, attempts: 0 };
      const waiting = await db.query(`SELECT told FROM ${appSchema}.pending WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
      if (waiting.rowCount) return { told: waiting.rows[0].told as Told[], answeredBefore: true, attempts: 0, pending: true };
      // A message stopped for an approval still holds the thread (core's rule 1): it resumes at the index and on the
      // history it was stopped with, so a message run meanwhile would take the same index and its commit would be
      // overwritten by the resumed run's (its payment gone from the thread), or meet the stopped message's keys.
      const held = await db.query(`SELECT message_id FROM ${appSchema}.pending WHERE thread_id = $1 AND message_id <> $2 LIMIT 1`, [threadId, messageId]);
      if (held.rowCount && plant !== "no-approval-hold") {
        return { told: [{ callId: "-", tool: "run", status: "did_not_happen", text: `not run: message ${held.rows[0].message_id} awaits your approval; answer it, then send this again` }], answeredBefore: false, attempts: 0 };
      }
      const thread = await db.query(`SELECT turns, history FROM ${appSchema}.threads WHERE thread_id = $1`, [threadId]);
      const base = (thread.rows[0]?.turns as number | undefined) ?? 0;
      const history = (thread.rows[0]?.history as AgentInputItem[] | undefined) ?? [];
      // TURN-12: a failed message is bound to the index it ran at. Re-sent after another message was answered (the
      // counter moved on), it would run at the new index, where its payment meets no row, and pay again: answer
      // it with what its failure told, and run nothing.
      const failed = await db.query(`SELECT turn_index, told FROM ${appSchema}.failed WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
      if (failed.rowCount && (failed.rows[0].turn_index as number) !== base && plant !== "no-bound-index") {
        const told = [...(failed.rows[0].told as Told[]), { callId: "-", tool: "run", status: "may_have_happened" as const, text: "not run again: a later message of the thread was answered since; what it did is above" }];
        return { told, answeredBefore: true, attempts: 0 };
      }
      const input: AgentInputItem[] = [...history, { type: "message", role: "user", content: text }];
      const earlier = async () =>
        (await db.query(`SELECT turn_index, ordinal, name, identity FROM ${appSchema}.dispatched WHERE thread_id = $1 AND message_id = $2 ORDER BY turn_index, ordinal`, [threadId, messageId])).rows.map(
          (r) => ({ turnIndex: r.turn_index as number, ordinal: r.ordinal as number, name: r.name as string, identity: r.identity as string, met: false }),
        );
      const outcome = await runAttempts(db, () => ({ threadId, messageId, base, step: -1, responses: [], told: [], earlier: [] }), async (book) => {
        if (turns === "carry") book.earlier = await earlier();
        const agent = agentFor(() => book);
        return { result: await runToEnd(agent, input, book), book };
      });
      if (outcome.error !== undefined) {
        await db.query(`INSERT INTO ${appSchema}.failed VALUES ($1, $2, $3, $4) ON CONFLICT (thread_id, message_id) DO UPDATE SET told = excluded.told`, [threadId, messageId, base, JSON.stringify(outcome.told)]);
      }
      return outcome;
    });
  }

  /**
   * A person approved the message's payment: resume its stored RunState (possibly in another process). A resume
   * that fails is resumed again from the same stored state; a second approval finds the answer committed.
   */
  async function approve(threadId: string, messageId: string): Promise<Outcome> {
    return withThread(threadId, async (db) => {
      const before = await answeredBefore(db, threadId, messageId);
      if (before) return { told: before, answeredBefore: true, attempts: 0 };
      const waiting = await db.query(`SELECT state FROM ${appSchema}.pending WHERE thread_id = $1 AND message_id = $2`, [threadId, messageId]);
      if (!waiting.rowCount) throw new Error(`no approval is pending for ${messageId}`);
      const stored = waiting.rows[0].state as string;
      let current: Book | undefined;
      return runAttempts(db, () => current as Book, async () => {
        const agent = agentFor(() => current as Book);
        const state = await RunState.fromString<Book, Agent>(agent, stored);
        current = state._context.context;
        // Where this resume starts (the no-resume-count plant forgets the responses before it).
        current.resumedAt = current.responses.length;
        for (const item of state.getInterruptions()) state.approve(item);
        return { result: await runToEnd(agent, state, current), book: current };
      });
    });
  }

  async function runAttempts(
    db: pg.PoolClient,
    freshBook: () => Book,
    once: (book: Book) => Promise<{ result: Awaited<ReturnType<typeof runToEnd>>; book: Book }>,
  ): Promise<Outcome> {
    const attempts = options.attempts ?? 3;
    let lastError: unknown;
    let lastTold: Told[] = [];
    for (let attempt = 1; attempt <= attempts; attempt++) {
      let book = freshBook();
      try {
        const done = await once(book);
        book = done.book;
        const interruptions = done.result.interruptions;
        if (interruptions.length > 0) {
          // What the run's earlier calls did, then what waits (core's rule 5: the outcomes in the question).
          const told: Told[] = [
            ...book.told,
            ...interruptions.map((i): Told => ({ callId: (i.rawItem as { callId?: string }).callId ?? "-", tool: i.name ?? "?", status: "awaiting_approval", text: `${i.name} ${i.arguments} awaits your approval` })),
          ];
          // A resumed run that stops for a second approval replaces the stored state: kept, the first one would
          // be resumed again, and each approval would stop at the same second call.
          await db.query(`INSERT INTO ${appSchema}.pending VALUES ($1, $2, $3, $4) ON CONFLICT (thread_id, message_id) DO UPDATE SET state = excluded.state, told = excluded.told`, [
            book.threadId, book.messageId, done.result.state.toString(), JSON.stringify(told)]);
          return { told, answeredBefore: false, attempts: attempt, pending: true };
        }
        const told = await commit(db, book, done.result.history);
        return { told, answeredBefore: false, attempts: attempt };
      } catch (error) {
        lastError = error;
        lastTold = [...(book?.told ?? [])];
        if (error instanceof EffectNeedsAPerson || (error as { cause?: unknown })?.cause instanceof EffectNeedsAPerson) break;
      }
    }
    // Not answered: what the last attempt's calls did, and why it stopped. Nothing is committed, so a re-send
    // runs the message again at the same turn indexes (and the ledger answers the calls that ran).
    const told = lastTold.some((t) => t.status === "may_have_happened") ? lastTold : [...lastTold, tellError(lastError)];
    return { told, answeredBefore: false, attempts, error: lastError };
  }

  async function committed(threadId: string): Promise<AgentInputItem[]> {
    const r = await pool.query(`SELECT history FROM ${appSchema}.threads WHERE thread_id = $1`, [threadId]);
    return r.rowCount ? (r.rows[0].history as AgentInputItem[]) : [];
  }

  return {
    send,
    approve,
    committed,
    pool,
    async close() {
      await ledger.close();
      await pool.end();
    },
  };
}

function withoutNulls(input: Record<string, unknown>) {
  return Object.fromEntries(Object.entries(input).filter(([, v]) => v !== null));
}

/** The call's identity as its tool declares it (the identity fields, or every field), canonical JSON. */
function identityOf(definition: { input: { safeParse(v: unknown): { success: boolean; data?: unknown } }; identity?: readonly string[] }, input: unknown): string {
  const parsed = definition.input.safeParse(input);
  if (!parsed.success) return canonicalize(input as never);
  const data = parsed.data as Record<string, unknown>;
  const fields = definition.identity ?? Object.keys(data);
  return canonicalize(Object.fromEntries(fields.map((f) => [f, data[f] ?? null])) as never);
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
  const entry = catalogueEntry(cause ?? error);
  const name = (error as Error)?.constructor?.name ?? "Error";
  return { callId: "-", tool: "run", status: "may_have_happened", text: `not completed (${entry?.code ?? name}: ${(error as Error)?.message ?? String(error)}); send again to retry` };
}
