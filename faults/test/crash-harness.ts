/**
 * The crash suite's parent side: runner processes (crash-worker.ts, forked), the mock provider (the
 * Anthropic Messages API, or apps/mock-openai: the Responses API or Chat Completions) and mock payments they talk to, durable stores they share, and the oracle that reads the truth from
 * the payments API's effect log, the ledger rows and what the conversation store holds.
 */
import { fork, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import type { ConversationStore, JsonValue, Ledger, LedgerRow } from "@dispatch-once/core";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { SqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import { PostgresLedger } from "@dispatch-once/ledger-postgres";
import { RedisLedger } from "@dispatch-once/ledger-redis";
import { SqliteLedger } from "@dispatch-once/ledger-sqlite";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import * as openai from "@dispatch-once/mock-openai";
import { lastUserText, say, scriptFromPlans, startMockProvider, toolUse, turn, type FaultPlan, type MessagesRequest, type MockProvider, type Script } from "@dispatch-once/mock-provider";
import type { CallPoint, ConversationStoreConfig, CrashPoint, CrashWorkerConfig, FromWorker, LedgerConfig, ProviderKind, RecordLike, RecordWriteFailed, ToWorker } from "./crash-protocol.js";
import { DATABASE_URL, StoreProxy, redisStore, type StoreUnderTest } from "./stores.js";
import { compiledEntry } from "@dispatch-once/test-processes";

const WORKER = fileURLToPath(new URL("./crash-worker.ts", import.meta.url));
/** The dispatcher's lease and the turn lease of every runner process: short, so a dead holder's run out soon. */
export const LEASE_MS = 800;

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };
export const INVOICE_ACME = { customer: "acme", amount: 9_900, currency: "EUR" };
export const PAY_BOB = { payee: "bob", amount: 4_000, currency: "EUR", reference: "LOAN-3", memo: "Loan repayment" };

/**
 * The scripted model: "pay acme" pays (its memo re-worded on a replay), "invoice acme" invoices,
 * "pay acme and bob" makes both payments as parallel calls of one response; then "Done."
 */
export const plans = scriptFromPlans({
  "pay acme": turn(toolUse("send_payment", PAY_ACME, { reword: ["memo"] })),
  "invoice acme": turn(toolUse("create_invoice", INVOICE_ACME)),
  "pay acme and bob": turn(toolUse("send_payment", PAY_ACME, { reword: ["memo"] }), toolUse("send_payment", PAY_BOB, { reword: ["memo"] })),
});
/** The same model over the Responses API. */
export const responsesPlans = openai.scriptFromPlans(
  {
    "pay acme": openai.respond(openai.call("send_payment", PAY_ACME, { reword: ["memo"] })),
    "invoice acme": openai.respond(openai.call("create_invoice", INVOICE_ACME)),
    "pay acme and bob": openai.respond(openai.call("send_payment", PAY_ACME, { reword: ["memo"] }), openai.call("send_payment", PAY_BOB, { reword: ["memo"] })),
  },
  { after: "Done." },
);

/** What the scripted model answers to one request, in terms both providers' scripts are written from. */
export type Reply = { call: string; input: Record<string, unknown> } | { text: string };

function scriptFor(provider: ProviderKind, reply: () => Reply): Script | openai.Script {
  // Chat Completions is served by the same mock, from the same script (the chat request as the Responses request it amounts to).
  if (provider !== "anthropic") {
    return () => {
      const r = reply();
      return "call" in r ? openai.respond(openai.call(r.call, r.input)) : openai.say(r.text);
    };
  }
  return () => {
    const r = reply();
    return "call" in r ? turn(toolUse(r.call, r.input)) : turn(say(r.text));
  };
}

export type { ProviderKind };
export type LedgerKind = LedgerConfig["kind"];
export type StoreKind = ConversationStoreConfig["kind"];

/** One runner process. */
export class RunnerProcess {
  readonly child: ChildProcess;
  readonly ready: Promise<void>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The record writes its ledger refused, with what the dispatch then told the runner (DISPATCH-10): the oracle's facts about this owner. */
  readonly recordFailures: RecordWriteFailed[] = [];
  /** Every answer and refusal it gave its clients, in order. */
  readonly told: ClientAnswer[] = [];
  private readonly inbox: FromWorker[] = [];
  private waiter: (() => void) | undefined;

  constructor(config: CrashWorkerConfig, plants?: readonly string[]) {
    const env = plants === undefined ? process.env : { ...process.env, FAULT_PLANT: plants.join(",") };
    this.child = fork(compiledEntry(WORKER), [JSON.stringify(config)], { execArgv: [], env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
    this.exited = new Promise((resolve) => this.child.once("exit", (code, signal) => resolve({ code, signal })));
    this.child.on("message", (message: FromWorker) => {
      // Reports go beside the conversation with the parent, never in the way of what it waits for.
      if (message.type === "record_failed") return void this.recordFailures.push(message);
      if (message.type === "answered" || message.type === "refused") this.told.push(message);
      this.inbox.push(message);
      this.waiter?.();
    });
    this.exited.then(() => this.waiter?.());
    this.ready = this.next().then((m) => {
      if (m.type !== "ready") throw new Error(`runner ${this.child.pid}: expected ready, got ${JSON.stringify(m)}`);
    });
  }

  private post(message: ToWorker): void {
    this.child.send(message);
  }

  send(conversationId: string, id: string, content: string): void {
    this.post({ type: "send", conversationId, message: { id, content } });
  }

  /** The next thing the process says; rejects when it exits first. */
  async next(): Promise<FromWorker> {
    for (;;) {
      const message = this.inbox.shift();
      if (message !== undefined) return message;
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        throw new Error(`runner ${this.child.pid} exited (${this.child.exitCode ?? this.child.signalCode}) before answering`);
      }
      await new Promise<void>((resolve) => (this.waiter = resolve));
      this.waiter = undefined;
    }
  }

  /** Waits until the process parks at `point`. */
  async reached(point: CrashPoint): Promise<void> {
    const message = await this.next();
    if (message.type !== "reached" || message.point !== point) throw new Error(`expected the runner to reach ${point}, got ${JSON.stringify(message)}`);
  }

  /** The answer to the message it was sent (answered or refused). */
  async outcome(): Promise<Extract<FromWorker, { type: "answered" | "refused" }>> {
    const message = await this.next();
    if (message.type !== "answered" && message.type !== "refused") throw new Error(`expected an answer, got ${JSON.stringify(message)}`);
    return message;
  }

  /** SIGKILL, and wait for the process to be gone. */
  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
    const { signal } = await this.exited;
    if (signal !== "SIGKILL") throw new Error(`runner ${this.child.pid} ended with ${String(signal)}, not the suite's SIGKILL`);
  }

  /** SIGSTOP from outside: it may land anywhere, inside a SQLite write transaction too (then it holds the file's write lock). */
  stop(): void {
    this.child.kill("SIGSTOP");
  }

  /** Stopped between two tasks of its event loop, so outside every SQLite transaction: it holds no file lock while stopped. */
  async pauseBetweenTransactions(): Promise<void> {
    this.post({ type: "stop" });
    await this.stoppedItself();
  }

  /** Resolves once the process is stopped (state T: it SIGSTOPped itself inside a SQLite transaction); never while it runs. */
  async stoppedItself(): Promise<void> {
    while (this.child.exitCode === null && this.child.signalCode === null) {
      const stat = await readFile(`/proc/${this.child.pid}/stat`, "utf8").catch(() => "");
      // The state is the field after the command's closing parenthesis.
      if (/\)\s+T\b/.test(stat)) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await new Promise(() => {});
  }

  resume(): void {
    this.child.kill("SIGCONT");
    this.post({ type: "continue" });
  }

  /** The owner its dispatcher writes into the rows it claims (crash-worker.ts). */
  get owner(): string {
    return `crash-worker-${this.child.pid}`;
  }

  /** Whether it can still act: not exited, and not stopped (a hung runner, SIGSTOPped for good, writes nothing). */
  async alive(): Promise<boolean> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return false;
    const stat = await readFile(`/proc/${this.child.pid}/stat`, "utf8").catch(() => "");
    return stat !== "" && !/\)\s+[TtZX]\b/.test(stat);
  }
}

export interface World {
  providerKind: ProviderKind;
  /** The APIs the provider mock was asked on, in the order first asked (apps/mock-openai's `responses` or `chat.completions`; `messages` for the Anthropic mock). */
  apis(): string[];
  /** The next response stops before its last event (message_stop, response.completed) until its client goes. */
  holdBeforeFinish(): void;
  /** The next response's connection is reset where its last event (message_stop, response.completed) would be. */
  cutBeforeFinish(): void;
  payments: MockPaymentsServer;
  account: string;
  ledgerKind: LedgerKind;
  storeKind: StoreKind;
  /** Starts a runner process over the world's stores (not yet sent anything). */
  runner(options?: RunnerOptions): RunnerProcess;
  /**
   * A runner process whose connections to the server stores (the PostgreSQL conversation store,
   * a PostgreSQL or Redis ledger) pass through proxies of its own: freezing or cutting them
   * partitions this one process while the others still reach the stores.
   */
  partitionable(options?: RunnerOptions): Promise<RunnerProcess & { own: OwnProxies }>;
  /** The files of a SQLite ledger and a SQLite conversation store, for a process that holds their write lock. */
  files: { ledger?: string; store?: string };
  /** The private redis-server's URL, with a Redis ledger (for CLIENT PAUSE and DEBUG SLEEP). */
  redisUrl?: string;
  /** With `storeProxy`: the TCP proxy between the runner processes and the PostgreSQL conversation store, and the PostgreSQL ledger if it is one (the parent reads past it). */
  proxy?: StoreProxy;
  /** Readers of the same stores (the parent's own connections). */
  ledger: Ledger;
  store: ConversationStore;
  /** Everything the oracle knows about one conversation, and what it finds wrong. */
  audit(conversationId: string): Promise<Audit>;
  /** Every response the mock rendered to a turn's first request (the user's words last): what the model asked for, per response. */
  asked(): AskedResponse[];
  close(): Promise<void>;
}

/** `plants`: this process's FAULT_PLANT (crash-worker.ts), in place of the suite's. */
export type RunnerOptions = { crashAt?: CrashPoint; occurrence?: number; call?: CallPoint; inTransaction?: "kill" | "stop"; plants?: string[] };

/** One runner's own proxies (partitionable): to the conversation store, and to the ledger when it is a server. */
export interface OwnProxies {
  store?: StoreProxy;
  ledger?: StoreProxy;
}

export interface Effect {
  kind: string;
  key: string;
  resourceId: string;
  /** The request body the payments API performed (its identity fields tell which payment it is). */
  payload?: Record<string, unknown>;
  /** When the payments API performed it (epoch ms, the parent's clock: the mock runs in the parent). */
  at?: number;
}

/** One response the model gave to a turn's first request: the user's words, and its calls (arguments as streamed, re-worded). */
export interface AskedResponse {
  userText: string;
  calls: { name: string; input: Record<string, unknown> }[];
  /** How the response ended at the mock (complete, reset, clean_close, error_event, status, ...). */
  outcome: string;
}

export interface Audit {
  effects: Effect[];
  rows: LedgerRow[];
  /** The committed log's JSON text (what the model reads from now on). */
  log: string;
  records: RecordLike[];
  messages: Record<string, string>;
  violations: string[];
  /** When the oracle judged (epoch ms, the parent's clock; the stores share the host's). */
  at: number;
  /** How long it waited for live leases of effects' rows to run out before reading again (leaseWaitMs). */
  waitedMs: number;
}

const RESOURCE_ID = /\b(?:pay|inv)_[0-9a-f]{24}\b/g;

/**
 * The oracle. Exactly once: no key has two effects. Truthful: every effect is either answered in
 * the committed conversation (its resource id is there) or listed by a record beside it as
 * happened / may have happened; nothing committed names a resource that does not exist; no record
 * says not_happened of a key whose effect happened, nor happened of one without effect; a ledger
 * row that says completed holds the effect's own resource id, and every effect's row says what
 * became of it (completed; or unknown, or in flight with its owner's lease run out, for a
 * reconciler or a person to settle).
 */
function judge(effects: Effect[], rows: LedgerRow[], log: string, records: RecordLike[], now: number, owners: ReadonlyMap<string, OwnerFacts>): string[] {
  const violations: string[] = [];
  const byKey = new Map<string, Effect[]>();
  for (const e of effects) byKey.set(e.key, [...(byKey.get(e.key) ?? []), e]);
  for (const [key, list] of byKey) if (list.length > 1) violations.push(`duplicate: ${list.length} effects under key ${key} (${list.map((e) => e.resourceId).join(", ")})`);
  const existing = new Set(effects.map((e) => e.resourceId));
  const said = new Map<string, Set<string>>();
  for (const r of records) {
    for (const entry of [...(r.effects ?? []), ...(r.calls ?? [])]) {
      if (entry.key === undefined) continue;
      said.set(entry.key, (said.get(entry.key) ?? new Set()).add(entry.effect));
    }
  }
  for (const e of effects) {
    const words = said.get(e.key) ?? new Set();
    if (!log.includes(e.resourceId) && !words.has("happened") && !words.has("may_have_happened")) {
      violations.push(`untold: effect ${e.resourceId} (key ${e.key}) is neither in the conversation nor in any record beside it`);
    }
    if (words.has("not_happened")) violations.push(`false: a record says not_happened of key ${e.key}, whose effect ${e.resourceId} happened`);
  }
  for (const id of log.match(RESOURCE_ID) ?? []) if (!existing.has(id)) violations.push(`false: the conversation names ${id}, which the payments API never created`);
  for (const [key, words] of said) if (words.has("happened") && !byKey.has(key)) violations.push(`false: a record says happened of key ${key}, which has no effect`);
  const rowOf = new Map(rows.map((r) => [r.key, r]));
  for (const e of effects) {
    const row = rowOf.get(e.key);
    if (row === undefined) violations.push(`ledger: no row for key ${e.key}, whose effect ${e.resourceId} happened`);
    else if (row.state === "completed" && !row.result.includes(e.resourceId)) violations.push(`ledger: row ${e.key} completed with ${row.result}, not ${e.resourceId}`);
    else if (row.state === "in_flight") {
      const wrong = judgeInFlight(row, e, now, owners);
      if (wrong !== undefined) violations.push(wrong);
    } else if (row.state !== "completed" && row.state !== "unknown") violations.push(`ledger: row ${e.key} is ${row.state} although its effect ${e.resourceId} happened`);
  }
  for (const row of rows) if (row.state === "completed" && !byKey.has(row.key)) violations.push(`ledger: row ${row.key} completed without an effect`);
  return violations;
}

/** What the oracle knows of a row's owner, a runner process (RunnerProcess): whether it can still act, and what it reported and told. */
export interface OwnerFacts {
  /** Not exited, not stopped: it could still write its record. */
  live: boolean;
  /** The record writes its ledger refused, each with what the dispatch then told the runner. */
  recordFailures: readonly RecordWriteFailed[];
  /** Every answer and refusal it gave its clients. */
  told: readonly ClientAnswer[];
}

/**
 * What an owner told its clients of one key: `done` for a call its answer reports (a result or an
 * error: a committed call is settled as far as the user knows), else the record's words
 * (happened, not_happened, may_have_happened; a failed-turn record, a committed turn's record, or
 * a store_unavailable's effects, RECORD-9).
 */
function toldOf(answers: readonly ClientAnswer[], key: string): string[] {
  const words: string[] = [];
  const of = (entries: readonly { key?: string; effect: string }[] | undefined) => {
    for (const entry of entries ?? []) if (entry.key === key) words.push(entry.effect);
  };
  for (const answer of answers) {
    if (answer.type === "refused") {
      of(answer.record?.effects);
      of(answer.record?.calls);
      of(answer.effects);
      continue;
    }
    for (const t of answer.result.turns) for (const call of t.calls) if (call.key === key) words.push("done");
    for (const r of answer.result.records ?? []) {
      of(r.effects);
      of(r.calls);
    }
  }
  return words;
}

/**
 * The oracle's rules for an effect's row still in flight when it is judged (all of them, here):
 * - its lease live, after the audit waited out every lease a dispatcher grants (leaseWaitMs):
 *   something holds it after every process answered;
 * - its lease run out, its owner dead (SIGKILLed, or stopped for good): the outcome nobody could
 *   record, left for a reconciler or a person (LEDGER-7, LEDGER-16, LEDGER-25);
 * - its lease run out, its owner alive: only DISPATCH-10's case, where the owner's record write of
 *   this very claim (its key and fence) failed, the dispatch raised that to its runner, and every
 *   word the owner told its clients of the key is happened or may_have_happened (and there is one;
 *   happened where the run knew its effect, DISPATCH-10's effectHappened, ERR-4). Anything
 *   else is a record never written or a failure swallowed: a live process that says nothing of
 *   why the ledger does not hold what it did, or told its user "done" or "not happened".
 * An owner the world never started is judged as a live one that reported nothing.
 */
export function judgeInFlight(row: Extract<LedgerRow, { state: "in_flight" }>, effect: Effect, now: number, owners: ReadonlyMap<string, OwnerFacts>): string | undefined {
  const what = `ledger: row ${row.key} is in_flight although its effect ${effect.resourceId} happened`;
  if (row.leaseExpiresAt > now) return `${what} (its lease runs ${row.leaseExpiresAt - now} ms more, past the oracle's wait)`;
  const owner = owners.get(row.owner);
  if (owner !== undefined && !owner.live) return undefined;
  const who = `${owner === undefined ? "an owner no runner of this world is" : "its live owner"} ${row.owner}`;
  const failed = owner?.recordFailures.find((f) => f.key === row.key && f.fence === row.fence && f.answered === "raised");
  if (failed === undefined) {
    const other = owner?.recordFailures.filter((f) => f.key === row.key).map((f) => `${f.write} of fence ${f.fence}, ${f.answered}`) ?? [];
    return `${what}: ${who} reported no failed record write of fence ${row.fence} raised to its runner (DISPATCH-10)${other.length > 0 ? ` (it reported ${other.join("; ")})` : ""}: a record never written, or its failure swallowed`;
  }
  const words = toldOf(owner!.told, row.key);
  if (words.length === 0 || words.some((w) => w !== "may_have_happened" && w !== "happened")) {
    return `${what}: ${who} reported its ${failed.write} of fence ${row.fence} failed (${failed.raised?.code ?? "?"}: ${failed.error}), but told its clients ${words.length === 0 ? "nothing of it" : `[${[...new Set(words)].join(", ")}]`}, not happened or may_have_happened`;
  }
  return undefined;
}

/** How far the parent's clock and the ledger's (the same host's) may disagree when reading a lease. */
const CLOCK_SLACK_MS = 50;

/**
 * How long the oracle waits before it judges the rows: until the last live lease of an effect's
 * in-flight row has run out, when that is within `leaseMs` (the longest lease a dispatcher grants).
 * A holder that died after the effect (SIGKILL at after_accept) still owns its row, in flight,
 * until its lease runs out and a claim acts on it (LEDGER-7, LEDGER-16): the settler can commit a
 * resumed turn that lists the row as may_have_happened (RECORD-8) within that lease (seed 6028:
 * read 9 ms before the lease ended), and reading the rows then judges the timing, not the rule.
 * A lease longer than `leaseMs` is not waited for: the judge reports it.
 */
export function leaseWaitMs(effects: readonly Effect[], rows: readonly LedgerRow[], now: number, leaseMs: number): number {
  const keys = new Set(effects.map((e) => e.key));
  let wait = 0;
  for (const row of rows) {
    if (row.state !== "in_flight" || !keys.has(row.key)) continue;
    const left = row.leaseExpiresAt - now;
    if (left > 0 && left <= leaseMs + CLOCK_SLACK_MS) wait = Math.max(wait, left + CLOCK_SLACK_MS);
  }
  return wait;
}

export { judge as judgeLedger };

/** Every named point, with the passage that stops the runner (after_commit #1: the turn that paid; #2: the last). */
export const EVERY_POINT: [CrashPoint, number][] = [
  ["after_accept", 1],
  ["after_complete", 1],
  ["before_commit", 1],
  ["during_commit", 1],
  ["after_commit", 1],
  ["after_commit", 2],
];

/** What a runner process told its client: an answer or a refusal (with its failed-turn record, if any). */
export type ClientAnswer = Extract<FromWorker, { type: "answered" | "refused" }>;

/**
 * Every client answer true: each call an answer reports with a result names the effect made under
 * its own key (and that effect exists); no record a client was given says not_happened of a key
 * whose effect happened, nor happened of a key without effect.
 */
export function judgeAnswers(effects: Effect[], answers: readonly { who: string; answer: ClientAnswer }[]): string[] {
  const violations: string[] = [];
  const byKey = new Map<string, Effect[]>();
  for (const e of effects) byKey.set(e.key, [...(byKey.get(e.key) ?? []), e]);
  const told = (who: string, entries: readonly { key?: string; effect: string }[]) => {
    for (const entry of entries) {
      if (entry.key === undefined) continue;
      if (entry.effect === "not_happened" && byKey.has(entry.key)) violations.push(`false answer: ${who} was told not_happened of key ${entry.key}, whose effect happened`);
      if (entry.effect === "happened" && !byKey.has(entry.key)) violations.push(`false answer: ${who} was told happened of key ${entry.key}, which has no effect`);
    }
  };
  for (const { who, answer } of answers) {
    if (answer.type === "refused") {
      if (answer.record !== undefined) told(who, [...answer.record.effects, ...answer.record.calls]);
      if (answer.effects !== undefined) told(who, answer.effects);
      continue;
    }
    for (const t of answer.result.turns) {
      for (const call of t.calls) {
        if (call.key === undefined || call.result === undefined) continue;
        const named = JSON.stringify(call.result).match(RESOURCE_ID) ?? [];
        const made = (byKey.get(call.key) ?? []).map((e) => e.resourceId);
        for (const id of named) if (!made.includes(id)) violations.push(`false answer: ${who} was told ${call.name} made ${id} under key ${call.key}, which made ${made.join(", ") || "nothing"}`);
      }
    }
    for (const r of answer.result.records ?? []) told(who, [...(r.effects ?? []), ...(r.calls ?? [])]);
  }
  return violations;
}

/**
 * A model of the chaos suite's provider dimension (chaos-harness.ts): its own script and fault
 * plan for the provider the world runs (the one matching `provider`).
 */
export type ModelHooks = { kind: "anthropic"; script: Script; faultPlan: FaultPlan } | { kind: "openai"; script: openai.Script; faultPlan: openai.FaultPlan };

/**
 * Runs `test` in a world of its own (providers, payments API, stores, runner processes), closed
 * whatever the test does. A test that does not settle within `boundMs` fails here, naming the
 * bound, and its world is closed then: vitest's own timeout abandons a test's promise, so a
 * hung test's `finally` never ran and its runner processes (renewing their leases, some parked
 * or stopped) and mocks lived on beside every later test of the suite. Keep `boundMs` under the
 * test's timeout, so that this bound, not vitest's, ends a hung test.
 */
export async function inWorld(options: Parameters<typeof makeWorld>[0], boundMs: number, test: (world: World) => Promise<void>): Promise<void> {
  const world = await makeWorld(options);
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the test did not settle within ${boundMs} ms: its world (runner processes, mock servers, stores) is closed now`)), boundMs);
  });
  try {
    await Promise.race([test(world), bound]);
  } finally {
    clearTimeout(timer);
    await world.close();
  }
}

export async function makeWorld(options: {
  provider?: ProviderKind;
  ledger: LedgerKind;
  store: StoreKind;
  script?: () => Reply;
  storeProxy?: boolean;
  model?: ModelHooks;
  forceToolChoice?: boolean;
  /** The server ledgers' bound (timeoutMs, commandTimeoutMs), the runner processes' and the suite's reader's, for suites whose ledger is never partitioned; the ledger's default when absent. */
  ledgerTimeoutMs?: number;
}): Promise<World> {
  const providerKind = options.provider ?? "anthropic";
  if (options.model !== undefined && options.model.kind !== providerKind) throw new Error(`model hooks for ${options.model.kind}, provider ${providerKind}`);
  const hooks = options.model;
  const provider: MockProvider | openai.MockOpenAI =
    providerKind !== "anthropic"
      ? await openai.startMockOpenAI({
          script: hooks?.kind === "openai" ? hooks.script : options.script ? (scriptFor(providerKind, options.script) as openai.Script) : responsesPlans,
          ...(hooks?.kind === "openai" ? { faultPlan: hooks.faultPlan } : {}),
          keepAliveTimeoutMs: 60_000,
        })
      : await startMockProvider({
          script: hooks?.kind === "anthropic" ? hooks.script : options.script ? (scriptFor(providerKind, options.script) as Script) : plans,
          ...(hooks?.kind === "anthropic" ? { faultPlan: hooks.faultPlan } : {}),
          keepAliveTimeoutMs: 60_000,
        });
  const fault = (kind: "hold" | "reset") => {
    if ("queueFault" in provider) provider.queueFault({ kind, at: { beforeCompleted: true } });
    else provider.faults.enqueue({ kind, at: { beforeMessageStop: true } });
  };
  const payments = await startMockPayments({ latencyMs: 5 });
  const account = `acct_${randomBytes(6).toString("hex")}`;
  const dir = await mkdtemp(join(tmpdir(), "crash-suite-"));
  const schema = `crash_suite_${randomBytes(5).toString("hex")}`;
  const cleanups: (() => Promise<unknown>)[] = [];
  let admin: pg.Pool | undefined;
  const adminPool = () => {
    if (admin === undefined) {
      admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
      admin.on("error", () => {});
      const pool = admin;
      cleanups.push(async () => {
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await pool.end();
      });
    }
    return admin;
  };

  let ledgerConfig: LedgerConfig;
  let ledger: Ledger;
  let redisUrl: string | undefined;
  switch (options.ledger) {
    case "sqlite": {
      const path = join(dir, "ledger.db");
      ledgerConfig = { kind: "sqlite", path };
      ledger = new SqliteLedger({ path });
      break;
    }
    case "postgres": {
      ledgerConfig = { kind: "postgres", url: DATABASE_URL, schema, ...(options.ledgerTimeoutMs !== undefined ? { timeoutMs: options.ledgerTimeoutMs } : {}) };
      const reader = new PostgresLedger({ pool: adminPool(), schema, durability: "durable", ...(options.ledgerTimeoutMs !== undefined ? { timeoutMs: options.ledgerTimeoutMs } : {}) });
      await reader.migrate();
      ledger = reader;
      break;
    }
    case "redis": {
      // A private redis-server with AOF and fsync always: durable, and nobody else's data.
      const server: StoreUnderTest = await redisStore(0, 0);
      const { url, prefix } = server.worker as { url: string; prefix: string };
      ledgerConfig = { kind: "redis", url, prefix, ...(options.ledgerTimeoutMs !== undefined ? { timeoutMs: options.ledgerTimeoutMs } : {}) };
      redisUrl = url;
      ledger = new RedisLedger({ url, prefix, durability: "durable", ...(options.ledgerTimeoutMs !== undefined ? { commandTimeoutMs: options.ledgerTimeoutMs } : {}) });
      cleanups.push(() => server.close());
      break;
    }
  }
  let storeConfig: ConversationStoreConfig;
  let store: ConversationStore;
  if (options.store === "sqlite") {
    const path = join(dir, "conversations.db");
    storeConfig = { kind: "sqlite", path };
    store = new SqliteConversationStore({ path });
  } else {
    storeConfig = { kind: "postgres", url: DATABASE_URL, schema };
    const reader = new PostgresConversationStore({ pool: adminPool(), schema });
    await reader.migrate();
    store = reader;
  }
  let proxy: StoreProxy | undefined;
  if (options.storeProxy === true) {
    if (storeConfig.kind !== "postgres") throw new Error("storeProxy: only a PostgreSQL conversation store has a server to put a proxy before");
    const target = new URL(DATABASE_URL);
    const started = await StoreProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
    proxy = started;
    const url = new URL(DATABASE_URL);
    url.hostname = "127.0.0.1";
    url.port = String(started.port);
    storeConfig = { ...storeConfig, url: url.toString() };
    // A PostgreSQL ledger is on the same server: its faults are the ledger's too.
    if (ledgerConfig.kind === "postgres") ledgerConfig = { ...ledgerConfig, url: url.toString() };
    // Closed before the schema is dropped (cleanups run last to first).
    cleanups.push(() => started.close());
  }
  /** What the oracle reads: the effect log, the conversation's rows, its log, records and messages. */
  const readAudit = async (conversationId: string) => {
    const effects = payments
      .effects()
      .filter((e) => e.account === account)
      .map((e) => ({ kind: e.kind, key: e.idempotencyKey ?? "", resourceId: e.resourceId, payload: e.payload, at: Date.parse(e.at) }));
    const rows: LedgerRow[] = [];
    let cursor: string | undefined;
    do {
      const page = await ledger.listRows!({ conversationId, ...(cursor !== undefined ? { cursor } : {}) });
      rows.push(...page.rows);
      cursor = page.cursor;
    } while (cursor !== undefined);
    const log = JSON.stringify(await store.log(conversationId));
    const records = (await store.records(conversationId)) as unknown as RecordLike[];
    const messages: Record<string, string> = {};
    for (const id of ["m1", "m2", "m3"]) {
      const m = await store.message(conversationId, id);
      if (m !== undefined) messages[id] = m.state;
    }
    return { effects, rows, log, records, messages };
  };
  const started: RunnerProcess[] = [];
  const spawnRunner = ({ plants, ...crash }: RunnerOptions, ledgerOf: LedgerConfig, storeOf: ConversationStoreConfig) => {
    const process = new RunnerProcess({
      provider: providerKind,
      providerUrl: provider.baseURL,
      paymentsUrl: payments.url,
      account,
      ledger: ledgerOf,
      store: storeOf,
      leaseMs: LEASE_MS,
      ...(options.forceToolChoice === true ? { forceToolChoice: true } : {}),
      ...crash,
    }, plants);
    started.push(process);
    return process;
  };
  /** A proxy of one runner's own before `url` (a server store's address); closed with the world. */
  const ownProxy = async (url: string): Promise<[StoreProxy, string]> => {
    const target = new URL(url);
    const own = await StoreProxy.start({ host: target.hostname, port: Number(target.port || (target.protocol === "redis:" ? 6379 : 5432)) });
    cleanups.push(() => own.close());
    target.hostname = "127.0.0.1";
    target.port = String(own.port);
    return [own, target.toString()];
  };

  return {
    providerKind,
    apis: () => ("queueFault" in provider ? [...new Set(provider.requests.map((r) => r.api))] : provider.requests.length > 0 ? ["messages"] : []),
    holdBeforeFinish: () => fault("hold"),
    cutBeforeFinish: () => fault("reset"),
    payments,
    account,
    ledgerKind: options.ledger,
    storeKind: options.store,
    ledger,
    store,
    ...(proxy !== undefined ? { proxy } : {}),
    runner: (crash = {}) => spawnRunner(crash, ledgerConfig, storeConfig),
    partitionable: async (crash = {}) => {
      const own: OwnProxies = {};
      let storeOf = storeConfig;
      let ledgerOf = ledgerConfig;
      if (storeOf.kind === "postgres") [own.store, storeOf] = await ownProxy(storeOf.url).then(([p, url]) => [p, { ...storeConfig, url }] as [StoreProxy, ConversationStoreConfig]);
      if (ledgerOf.kind !== "sqlite") [own.ledger, ledgerOf] = await ownProxy(ledgerOf.url).then(([p, url]) => [p, { ...ledgerConfig, url } as LedgerConfig] as [StoreProxy, LedgerConfig]);
      return Object.assign(spawnRunner(crash, ledgerOf, storeOf), { own });
    },
    files: { ...(ledgerConfig.kind === "sqlite" ? { ledger: ledgerConfig.path } : {}), ...(storeConfig.kind === "sqlite" ? { store: storeConfig.path } : {}) },
    ...(redisUrl !== undefined ? { redisUrl } : {}),
    audit: async (conversationId) => {
      let read = await readAudit(conversationId);
      const wait = leaseWaitMs(read.effects, read.rows, Date.now(), LEASE_MS);
      if (wait > 0) {
        await new Promise((resolve) => setTimeout(resolve, wait));
        read = await readAudit(conversationId);
      }
      const { effects, rows, log, records } = read;
      const at = Date.now();
      const owners = new Map<string, OwnerFacts>();
      for (const p of started) owners.set(p.owner, { live: await p.alive(), recordFailures: p.recordFailures, told: p.told });
      return { ...read, violations: judge(effects, rows, log, records, at, owners), at, waitedMs: wait };
    },
    asked: () => {
      const out: AskedResponse[] = [];
      if ("queueFault" in provider) {
        for (const r of provider.requests) {
          const input = (r.body as { input?: unknown }).input;
          const last = Array.isArray(input) ? (input[input.length - 1] as { type?: string; role?: string } | undefined) : undefined;
          if (last === undefined || last.role !== "user") continue;
          out.push({ userText: openai.lastUserText(r.body as openai.ResponsesRequest) ?? "", calls: r.calls.map((c) => ({ name: c.name, input: c.arguments })), outcome: r.outcome });
          // A splice's response is another response to the same request (the model answered twice).
          if (r.splicedCalls !== undefined) out.push({ userText: openai.lastUserText(r.body as openai.ResponsesRequest) ?? "", calls: r.splicedCalls.map((c) => ({ name: c.name, input: c.arguments })), outcome: "spliced" });
        }
      } else {
        for (const r of provider.requests) {
          const messages = (r.body as { messages?: { role: string; content: unknown }[] }).messages ?? [];
          const last = messages[messages.length - 1];
          if (last === undefined || last.role !== "user" || (Array.isArray(last.content) && last.content.some((b: { type?: string }) => b.type === "tool_result"))) continue;
          out.push({ userText: lastUserText(r.body as MessagesRequest), calls: r.toolUses.map((c) => ({ name: c.name, input: c.input })), outcome: r.outcome });
          if (r.splicedToolUses !== undefined) out.push({ userText: lastUserText(r.body as MessagesRequest), calls: r.splicedToolUses.map((c) => ({ name: c.name, input: c.input })), outcome: "spliced" });
        }
      }
      return out;
    },
    close: async () => {
      for (const p of started) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
      await Promise.all(started.map((p) => p.exited));
      await provider.close();
      await payments.close();
      await store.close();
      await ledger.close();
      for (const cleanup of cleanups.reverse()) await cleanup();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The stored turns of a message, as JSON text (for assertions on what the conversation says). */
export async function turnsText(store: ConversationStore, conversationId: string, messageId: string): Promise<string> {
  return JSON.stringify((await store.turnsOf(conversationId, messageId)) as unknown as JsonValue);
}
