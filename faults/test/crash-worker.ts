/**
 * A worker process of the crash suite (crash.test.ts): the real runner (the Anthropic stream side
 * over the mock provider, the OpenAI one over the mock Responses API, or ChatCompletionsRunner over
 * the same mock's /v1/chat/completions), the real dispatcher, a
 * durable ledger and a durable conversation store, calling mock payments. The parent sends it one message to answer over IPC ("go"). When the
 * configured crash point is reached the worker says so ("reached") and parks there, its timers
 * still running, until the parent SIGKILLs it (a crash), or SIGSTOPs it and later sends "continue"
 * (a pause). A point inside a synchronous SQLite transaction cannot wait for the parent: there the
 * worker SIGKILLs itself. Nothing the worker says is trusted by the oracle except as "what this
 * worker told its client": the effect log, the ledger rows and the stores are read by the parent.
 *
 * argv[2]: JSON CrashWorkerConfig.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import pg from "pg";
import { ConversationRunner as AnthropicRunner, TurnAccumulator, TurnFailedError } from "@dispatch-once/anthropic";
import { ChatCompletionsRunner, ConversationRunner as OpenAIRunner, ResponsesTurnAccumulator } from "@dispatch-once/openai";
import { Dispatcher, MemoryLedger, StoreUnavailableError, ToolError, ToolRegistry, defineTool, isDispatchOnceError, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { z } from "zod";
import type { CrashPoint, CrashWorkerConfig, FailedRecord, FromWorker, RecordWriteFailed, SentResult, ToWorker } from "./crash-protocol.js";

const config = JSON.parse(process.argv[2]!) as CrashWorkerConfig;
/**
 * FAULT_PLANT (comma-separated) plants a bug the suite must catch, never a default (README):
 * "volatile-ledger" gives every process a ledger of its own in memory (a ledger that loses its rows
 * with the process); "no-key" sends no Idempotency-Key downstream; "lazy-commit" reaches
 * after_commit before the commit is written (a store that acknowledges a commit it has not made
 * durable yet); "record-after-commit" hides the store's recordsWithCommit, so the runner writes a
 * committed turn's record after the commit (RECORD-8 before the crash suite found the gap);
 * "unguarded-store" drops the PostgreSQL conversation store's 'error' listener on the clients it
 * checks out (the chaos suite's lost COMMIT replies then kill the process); "global-ordinal" counts
 * every call of an attempt for its ordinal, not only identical ones (TURN-4 broken: a replay that
 * calls a read first, or the calls in another order, gets new keys); "drop-commit-record" commits a
 * turn without the record the runner gives it (RECORD-8 broken: an earlier attempt's payment that
 * the committed turn does not answer is told nowhere); "ordinal-zero" dispatches every call at
 * ordinal 0 (DISPATCH-6 broken: a response's second identical call is answered with the first's result);
 * "no-position-type" takes the position-type check out of both accumulators (STREAM-17 broken: a
 * spliced response's text lands on a call that ran and its own call runs again); "no-second-start"
 * takes out the check of a second message_start / response.created in one body (STREAM-8 broken);
 * "force-every-turn" keeps a forcing tool_choice on every turn of a message (STREAM-18 broken: the
 * runner told followUp is ignored, as resetToolChoice false does); "drop-complete" answers every
 * ledger complete without writing it (a record lost without a word: the row stays in flight under
 * its live owner, the user told "done").
 */
const plants = new Set((process.env.FAULT_PLANT ?? "").split(",").filter((p) => p !== ""));
const say = (message: FromWorker) => process.send?.(message);

/** How many times each point has been passed; the crash fires on the configured occurrence. */
const passed = new Map<CrashPoint, number>();
let resume: (() => void) | undefined;

/** Park at `point` when it is the configured crash point (and occurrence): the parent decides what happens next. */
async function point(at: CrashPoint): Promise<void> {
  const n = (passed.get(at) ?? 0) + 1;
  passed.set(at, n);
  if (config.crashAt !== at || (config.occurrence ?? 1) !== n) return;
  await park(at);
}

function park(at: CrashPoint, detail?: string): Promise<void> {
  return new Promise<void>((resolve) => {
    resume = resolve;
    say({ type: "reached", point: at, ...(detail !== undefined ? { detail } : {}) });
  });
}

/** How many times each store or ledger write method has been called (the chaos suite's "at_call" points). */
const calls = new Map<string, number>();
/** Set while the chosen call runs, when its point is its COMMIT: the PostgreSQL store's COMMIT parks on it. */
let commitOf: string | undefined;

/**
 * Wraps `methods` of `target` so that the configured "at_call" point parks right before or right
 * after its n-th call. The call's outcome (a value or an error) is kept while parked after it.
 */
function watchCalls<T extends object>(target: T, methods: readonly string[]): void {
  const chosen = config.crashAt === "at_call" ? config.call : undefined;
  if (chosen === undefined) return;
  for (const method of methods) {
    const original = (target as Record<string, unknown>)[method];
    if (typeof original !== "function") continue;
    const bound = (original as (...args: unknown[]) => Promise<unknown>).bind(target);
    (target as Record<string, unknown>)[method] = async (...args: unknown[]) => {
      const n = (calls.get(method) ?? 0) + 1;
      calls.set(method, n);
      const here = chosen.method === method && chosen.n === n;
      if (here && chosen.side === "before") await park("at_call", `before ${method} #${n}`);
      if (here && chosen.side === "commit") {
        commitOf = `the COMMIT of ${method} #${n}`;
        try {
          return await bound(...args);
        } finally {
          commitOf = undefined;
        }
      }
      if (!(here && chosen.side === "after")) return bound(...args);
      const settled = await bound(...args).then(
        (value) => ({ ok: true as const, value }),
        (error: unknown) => ({ ok: false as const, error }),
      );
      await park("at_call", `after ${method} #${n} (${settled.ok ? "answered" : "failed"})`);
      if (!settled.ok) throw settled.error;
      return settled.value;
    };
  }
}

async function openLedger(): Promise<Ledger> {
  const l = config.ledger;
  switch (l.kind) {
    case "sqlite": {
      const { SqliteLedger } = await import("@dispatch-once/ledger-sqlite");
      return new SqliteLedger({ path: l.path });
    }
    case "postgres": {
      const { PostgresLedger } = await import("@dispatch-once/ledger-postgres");
      return new PostgresLedger({ connectionString: l.url, schema: l.schema, durability: "durable", ...(l.timeoutMs !== undefined ? { timeoutMs: l.timeoutMs } : {}) });
    }
    case "redis": {
      const { RedisLedger } = await import("@dispatch-once/ledger-redis");
      return new RedisLedger({ url: l.url, prefix: l.prefix, durability: "durable", ...(l.timeoutMs !== undefined ? { commandTimeoutMs: l.timeoutMs } : {}) });
    }
  }
}

async function openStore(): Promise<ConversationStore> {
  const s = config.store;
  if (s.kind === "sqlite") {
    const { SqliteConversationStore } = await import("@dispatch-once/conversation-sqlite");
    const store = new SqliteConversationStore({ path: s.path });
    if (config.crashAt === "during_commit") {
      // Inside commitTurn's write transaction, right after the turn's row is inserted and before
      // the message is marked answered and the transaction commits: a real SIGKILL, mid-transaction.
      store.database.function("crash_suite_kill", () => process.kill(process.pid, "SIGKILL"));
      store.database.exec(`CREATE TEMP TRIGGER crash_suite_during_commit AFTER INSERT ON main."${store.tables.turns}" BEGIN SELECT crash_suite_kill(); END`);
    }
    return store;
  }
  const { PostgresConversationStore } = await import("@dispatch-once/conversation-postgres");
  const pool = new pg.Pool({ connectionString: s.url });
  pool.on("error", () => {});
  if (plants.has("unguarded-store")) {
    // The store's own 'error' listener on a checked-out client is dropped: a connection that dies
    // under a transaction (a COMMIT's reply lost) is then an uncaught error that kills the process.
    const connect = pool.connect.bind(pool) as (...args: unknown[]) => Promise<pg.PoolClient>;
    (pool as unknown as { connect: (...args: unknown[]) => unknown }).connect = (...args: unknown[]) =>
      args.length > 0
        ? connect(...args)
        : connect().then((client) => {
            const on = client.on.bind(client) as (event: string, listener: (...a: unknown[]) => void) => pg.PoolClient;
            (client as unknown as { on: unknown }).on = (event: string, listener: (...a: unknown[]) => void) => (event === "error" ? client : on(event, listener));
            return client;
          });
  }
  if (config.crashAt === "during_commit" || config.call?.side === "commit") {
    // Park on commitTurn's COMMIT, after its INSERT ran inside the open transaction: the parent
    // SIGKILLs the process there, and the server sees the connection die mid-transaction.
    const watched = new WeakSet<pg.PoolClient>();
    const watch = (client: pg.PoolClient): pg.PoolClient => {
      if (watched.has(client)) return client; // the pool hands the same clients out again
      watched.add(client);
      let inserted = false;
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
      (client as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = async (...args: unknown[]) => {
        const [first] = args;
        const name = typeof first === "object" && first !== null ? (first as { name?: string }).name : undefined;
        if (typeof name === "string" && name.endsWith("_insert_turn")) inserted = true;
        if (first === "COMMIT" && inserted) await point("during_commit");
        if (first === "COMMIT" && commitOf !== undefined) {
          const at = commitOf;
          commitOf = undefined;
          await park("at_call", at);
        }
        if (first === "COMMIT" || first === "ROLLBACK") inserted = false;
        return query(...args);
      };
      return client;
    };
    const connect = pool.connect.bind(pool) as (...args: unknown[]) => Promise<pg.PoolClient>;
    // pool.query() connects with a callback: only the store's transactions (connect()) are watched.
    (pool as unknown as { connect: (...args: unknown[]) => unknown }).connect = (...args: unknown[]) =>
      args.length > 0 ? connect(...args) : connect().then(watch);
  }
  return new PostgresConversationStore({ pool, schema: s.schema });
}

/** A POST to mock payments with the call's Idempotency-Key, its answers told as the payments client maps them. */
async function post(path: string, body: Record<string, unknown>, key: string, signal: AbortSignal): Promise<{ id: string }> {
  const response = await fetch(`${config.paymentsUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${config.account}`, "content-type": "application/json", ...(plants.has("no-key") ? {} : { "idempotency-key": `"${key}"` }) },
    body: JSON.stringify(body),
    signal: AbortSignal.any([signal, AbortSignal.timeout(5_000)]),
  });
  const text = await response.text();
  if (!response.ok) {
    const message = `${response.status} from ${path}: ${text.slice(0, 200)}`;
    if (response.status === 422) throw new ToolError(message, { disposition: "request_mismatch" });
    if (response.status >= 400 && response.status < 500 && response.status !== 409) throw new ToolError(message, { disposition: "definite" });
    throw new Error(message);
  }
  return JSON.parse(text) as { id: string };
}

const tools = new ToolRegistry([
  defineTool({
    name: "send_payment",
    description: "Send a payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string(), reference: z.string(), memo: z.string().optional() }),
    identity: ["payee", "amount", "currency", "reference"],
    async run(args, ctx) {
      const payment = await post("/v1/payments", args, ctx.idempotencyKey, ctx.signal);
      // The payments API accepted it; the ledger does not know yet.
      await point("after_accept");
      return { paymentId: payment.id };
    },
  }),
  // The chaos suite's provider dimension: the same payment with its memo inside the identity (a
  // re-worded memo is then another key, IDENT-8's "free text inside an identity"), and a read the
  // model may call first.
  defineTool({
    name: "send_payment_noted",
    description: "Send a payment whose memo is part of what identifies it",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string(), reference: z.string(), memo: z.string() }),
    identity: ["payee", "amount", "currency", "reference", "memo"],
    async run(args, ctx) {
      const payment = await post("/v1/payments", args, ctx.idempotencyKey, ctx.signal);
      await point("after_accept");
      return { paymentId: payment.id };
    },
  }),
  defineTool({
    name: "check_balance",
    description: "Read the account's balance",
    effect: "read",
    input: z.object({ account: z.string() }),
    run: () => ({ balance: 1_000_000, currency: "EUR" }),
  }),
  defineTool({
    name: "create_invoice",
    description: "Create an invoice (the API deduplicates nothing)",
    effect: "unkeyed_write",
    input: z.object({ customer: z.string(), amount: z.number().int().positive(), currency: z.string() }),
    async run(args, ctx) {
      const invoice = await post("/v1/invoices", args, ctx.idempotencyKey, ctx.signal);
      await point("after_accept");
      return { invoiceId: invoice.id };
    },
  }),
]);

const ledger = plants.has("volatile-ledger") ? new MemoryLedger() : await openLedger();
// drop-complete: a record write lost without a word (a dispatcher that forgot its complete, a
// wrapper that swallowed its failure): the row stays in flight under its live owner, the user told "done".
const complete = plants.has("drop-complete") ? async () => {} : ledger.complete.bind(ledger);
ledger.complete = async (...args) => {
  const done = await complete(...args);
  await point("after_complete");
  return done;
};
const store = await openStore();
/**
 * A SQLite file's "commit" point: a trigger on every table of the file fires inside the chosen
 * call's write transaction (BEGIN IMMEDIATE: the file's write lock is held), and there the process
 * stops or kills itself; better-sqlite3 is synchronous, so nothing can wait for the parent there.
 */
function stopInsideTransactions(db: { function(name: string, fn: () => number): unknown; prepare(sql: string): { all(): unknown[] }; exec(sql: string): unknown }, label: string): void {
  if (config.call?.side !== "commit") return;
  db.function("chaos_in_transaction", () => {
    if (commitOf === undefined) return 0;
    commitOf = undefined;
    process.kill(process.pid, config.inTransaction === "stop" ? "SIGSTOP" : "SIGKILL");
    return 1;
  });
  const tables = db.prepare(`SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).all() as { name: string }[];
  tables.forEach(({ name }, i) => {
    for (const op of ["INSERT", "UPDATE", "DELETE"]) db.exec(`CREATE TEMP TRIGGER chaos_${label}_${i}_${op} AFTER ${op} ON main."${name}" BEGIN SELECT chaos_in_transaction(); END`);
  });
}
if (config.store.kind === "sqlite") stopInsideTransactions((store as unknown as { database: Parameters<typeof stopInsideTransactions>[0] }).database, "store");
if (config.ledger.kind === "sqlite" && !plants.has("volatile-ledger")) stopInsideTransactions((ledger as unknown as { database: Parameters<typeof stopInsideTransactions>[0] }).database, "ledger");
// The write methods a turn calls in order (renewLease runs on a timer and is not counted: its count is not deterministic).
watchCalls(store, ["appendUserMessage", "acquireLease", "beginTurn", "commitTurn", "failMessage", "addRecord", "releaseLease", "releaseLeaseGrant"]);
watchCalls(ledger, ["claim", "complete", "fail", "markUnknown", "release"]);
/**
 * The record writes the ledger refused, reported to the parent with what the dispatch that sent
 * them told the runner (RecordWriteFailed): the oracle's only excuse for a live owner's expired
 * in-flight row (DISPATCH-10). Wrapped last, so it sees what the dispatcher sees (after the
 * plants and the points). One store for the process: a dispatch's writes run in its async context.
 */
type RefusedWrite = Omit<RecordWriteFailed, "type" | "answered" | "raised">;
const dispatching = new AsyncLocalStorage<{ refused: RefusedWrite[]; answered?: "returned" | "raised" }>();
for (const write of ["complete", "fail", "markUnknown", "release"] as const) {
  const original = (ledger[write] as (...args: unknown[]) => Promise<unknown>).bind(ledger);
  (ledger as unknown as Record<string, unknown>)[write] = async (...args: unknown[]) => {
    try {
      return await original(...args);
    } catch (error) {
      const refused: RefusedWrite = { key: String(args[0]), fence: Number(args[1]), write, error: error instanceof Error ? error.message : String(error) };
      const context = dispatching.getStore();
      // A write after its dispatch answered (a run past its bound) told its caller nothing of it.
      if (context === undefined || context.answered !== undefined) say({ type: "record_failed", ...refused, answered: "earlier" });
      else context.refused.push(refused);
      throw error;
    }
  };
}
if (plants.has("record-after-commit")) Object.assign(store, { capabilities: { ...store.capabilities, recordsWithCommit: false } });
const commitTurn = store.commitTurn.bind(store);
store.commitTurn = async (conversationId, commit) => {
  await point("before_commit");
  if (plants.has("lazy-commit")) {
    // Acknowledged first, written after: a crash at after_commit loses it.
    await point("after_commit");
    return commitTurn(conversationId, commit);
  }
  const committed = await commitTurn(conversationId, commit);
  if (committed.committed) await point("after_commit");
  return committed;
};

const dispatcher = new Dispatcher({
  tools,
  ledger,
  // long-lease: a dispatcher lease far past the suite's (a dead claimant's row live for a minute),
  // which the oracle's wait for leases must not hide (leaseWaitMs).
  leaseMs: plants.has("long-lease") ? 60_000 : config.leaseMs,
  waitMs: 15_000,
  pollMs: 20,
  owner: `crash-worker-${process.pid}`,
  ...(plants.has("volatile-ledger") ? { allowVolatileLedgerForUnkeyedWrites: true } : {}),
});
if (plants.has("global-ordinal")) {
  dispatcher.turn = (context) => {
    let next = 0;
    return { dispatch: (call) => dispatcher.dispatch(call, { conversationId: context.conversationId, turnIndex: context.turnIndex, ordinal: next++ }) };
  };
}
if (plants.has("ordinal-zero")) {
  dispatcher.turn = (context) => ({ dispatch: (call) => dispatcher.dispatch(call, { conversationId: context.conversationId, turnIndex: context.turnIndex, ordinal: 0 }) });
}
{
  // Each dispatch in an async context of its own, whose refused record writes are reported once it answers.
  const turnOf = dispatcher.turn;
  dispatcher.turn = (context) => {
    const turn = turnOf.call(dispatcher, context);
    return {
      dispatch: (call) => {
        const own: { refused: RefusedWrite[]; answered?: "returned" | "raised" } = { refused: [] };
        const report = (answered: "returned" | "raised", error?: unknown) => {
          own.answered = answered;
          const raised = error === undefined ? undefined : { code: isDispatchOnceError(error) ? error.code : "thrown", message: error instanceof Error ? error.message : String(error) };
          for (const refused of own.refused) say({ type: "record_failed", ...refused, answered, ...(raised !== undefined ? { raised } : {}) });
        };
        return dispatching.run(own, () => turn.dispatch(call)).then(
          (outcome) => {
            report("returned");
            return outcome;
          },
          (error: unknown) => {
            report("raised", error);
            throw error;
          },
        );
      },
    };
  };
}
// The accumulators' checks are planted out from outside: each forgets what it needs to notice the splice.
// Also what STREAM-10 compares (each position's announcement, the blocks stopped): kept, it would see the splice in their place.
type Forgetful = {
  blockTypes?: Map<number, string>;
  itemTypes?: Map<number, string>;
  messageId?: string;
  responseId?: string;
  announced?: Map<number, unknown>;
  stoppedBlocks?: Set<number>;
  itemNames?: Map<number, unknown>;
};
function forgetBefore(proto: { apply(event: never): unknown }, forget: (self: Forgetful, event: { type: string; index?: number; output_index?: number }) => void) {
  const apply = proto.apply;
  proto.apply = function (this: Forgetful, event: never) {
    forget(this, event);
    return apply.call(this, event);
  };
}
if (plants.has("no-position-type")) {
  forgetBefore(TurnAccumulator.prototype, (self, e) => {
    if (e.type !== "content_block_start") return;
    self.blockTypes?.delete(e.index!);
    self.announced?.delete(e.index!);
    self.stoppedBlocks?.delete(e.index!);
  });
  forgetBefore(ResponsesTurnAccumulator.prototype, (self, e) => {
    if (!e.type.startsWith("response.output_item.")) return;
    self.itemTypes?.delete(e.output_index!);
    self.itemNames?.delete(e.output_index!);
  });
}
if (plants.has("no-second-start")) {
  forgetBefore(TurnAccumulator.prototype, (self, e) => {
    if (e.type !== "message_start") return;
    delete self.messageId;
    self.announced?.clear();
    self.stoppedBlocks?.clear();
  });
  forgetBefore(ResponsesTurnAccumulator.prototype, (self, e) => {
    if (e.type !== "response.created") return;
    delete self.responseId;
    self.itemNames?.clear();
  });
}
if (plants.has("drop-commit-record")) {
  const commit = store.commitTurn.bind(store);
  store.commitTurn = (conversationId, turnCommit) => commit(conversationId, { ...turnCommit, record: undefined });
}
// Everything but the stream side is the same in both: the runner's rules are shared (@dispatch-once/runner).
const shared = {
  dispatcher,
  store,
  tools: tools.providerSchemas(),
  retry: { backoffMs: () => 10 },
  turnLeaseMs: config.leaseMs,
  busyWaitMs: 15_000,
  pollMs: 20,
  owner: `crash-worker-${process.pid}`,
};
// A forcing tool choice, reset after the message's first turn (STREAM-18) unless planted out.
const forcing = config.forceToolChoice === true ? (plants.has("force-every-turn") ? { resetToolChoice: false } : {}) : undefined;
const runner =
  config.provider === "openai-chat"
    ? new ChatCompletionsRunner({ ...shared, client: new OpenAI({ baseURL: config.providerUrl, apiKey: "test", maxRetries: 0 }), model: "gpt-test", ...(forcing !== undefined ? { params: { tool_choice: "required" as const }, ...forcing } : {}) })
    : config.provider === "openai"
    ? new OpenAIRunner({ ...shared, client: new OpenAI({ baseURL: config.providerUrl, apiKey: "test", maxRetries: 0 }), model: "gpt-test", ...(forcing !== undefined ? { params: { tool_choice: "required" as const }, ...forcing } : {}) })
    : new AnthropicRunner({ ...shared, client: new Anthropic({ baseURL: config.providerUrl, apiKey: "test", maxRetries: 0 }), model: "claude-test", ...(forcing !== undefined ? { params: { tool_choice: { type: "any" as const } }, ...forcing } : {}) });

process.on("message", (message: ToWorker) => {
  if (message.type === "stop") {
    process.kill(process.pid, "SIGSTOP");
    return;
  }
  if (message.type !== "send") {
    resume?.();
    return;
  }
  runner.send(message.conversationId, message.message).then(
    (result) => say({ type: "answered", result: JSON.parse(JSON.stringify(result)) as SentResult }),
    (error: unknown) =>
      say({
        type: "refused",
        code: isDispatchOnceError(error) ? error.code : "thrown",
        message: error instanceof Error ? error.message : String(error),
        ...(TurnFailedError.isInstance(error) ? { record: JSON.parse(JSON.stringify(error.record)) as FailedRecord } : {}),
        // RECORD-9: what a store_unavailable says of each effect the turn's calls had.
        ...(StoreUnavailableError.isInstance(error) && error.effects !== undefined ? { effects: JSON.parse(JSON.stringify(error.effects)) as { key: string; name: string; effect: string }[] } : {}),
      }),
  );
});

say({ type: "ready" });
