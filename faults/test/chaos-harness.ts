/**
 * The chaos suite's scenarios (chaos.test.ts): a seed chooses every fault, runScenario plays it
 * over the crash suite's world (crash-harness.ts) and judges it with the crash suite's oracle and
 * the answers every process gave its client.
 */
import { mulberry32 } from "@dispatch-once/conformance/ledger";
import type { CallPoint, CrashPoint } from "./crash-protocol.js";
import { EVERY_POINT, LEASE_MS, judgeAnswers, makeWorld, type ClientAnswer, type LedgerKind, type OwnProxies, type ProviderKind, type RunnerProcess } from "./crash-harness.js";
import type { StoreProxy } from "./stores.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * What happens where the first runner stops. The whole server's faults (freeze, cut, lose_reply)
 * go through the world's proxy; the partitions through the first runner's own proxies only
 * (`partition`: its store and ledger connections frozen, statements delivered late at the heal;
 * `partition_store`, `partition_ledger`: one of them; `isolate`: its connections cut and refused;
 * `lose_ledger_reply`: its ledger's replies dropped, then its connection killed, after the script
 * or statement ran); `redis_pause` (CLIENT PAUSE ALL) and `redis_sleep` (DEBUG SLEEP) stop the
 * private Redis ledger for everyone; `lock_ledger` and `lock_store`: another process holds the
 * SQLite file's write lock; `hang`: the first runner stopped for good (a frozen container), never
 * woken (between two tasks of its event loop when a SQLite file is involved: a holder of SQLite's
 * lock stopped for good stops every writer for good, which no library can help).
 */
type Action =
  | "kill"
  | "pause"
  | "freeze"
  | "cut"
  | "lose_reply"
  | "partition"
  | "partition_store"
  | "partition_ledger"
  | "isolate"
  | "lose_ledger_reply"
  | "redis_pause"
  | "redis_sleep"
  | "lock_ledger"
  | "lock_store"
  | "hang";
/** What a second process does meanwhile: re-sends m1 (a client retry or a queue's redelivery), sends a new message m2, both at once (a third process), or nothing. */
type Rival = "resend" | "new_same_words" | "new_other_words" | "resend_and_new" | "none";

export interface Scenario {
  seed: number;
  /** "server": the PostgreSQL conversation store's faults (the CI seeds); "host": a SQLite conversation store, partitions of one runner, faulted SQLite and Redis ledgers. */
  family: Family;
  provider: ProviderKind;
  ledger: LedgerKind;
  store: "postgres" | "sqlite";
  content: string;
  crashAt: CrashPoint;
  occurrence: number;
  call?: CallPoint;
  action: Action;
  /** How long the pause, freeze or outage lasts. */
  faultMs: number;
  rival: Rival;
  /** When the rival's message is sent, after the first runner stopped. */
  rivalDelayMs: number;
}

const CONTENTS = ["pay acme", "pay acme", "pay acme and bob", "invoice acme"];
/** How many effects each request asks for. */
const ASKED: Record<string, number> = { "pay acme": 1, "invoice acme": 1, "pay acme and bob": 2 };
const OTHER_WORDS: Record<string, string> = { "pay acme": "invoice acme", "invoice acme": "pay acme", "pay acme and bob": "pay acme" };
/** Write calls a paying message passes (twice for a turn's begin and commit, a call's claim and complete); failMessage and addRecord only on a fault's path. */
const CALLS: CallPoint["method"][] = ["appendUserMessage", "acquireLease", "beginTurn", "beginTurn", "commitTurn", "commitTurn", "commitTurn", "releaseLease", "claim", "complete", "complete", "failMessage", "addRecord"];

/** The PostgreSQL conversation store's methods that run a transaction (a COMMIT to park on). */
const TRANSACTIONS = ["appendUserMessage", "acquireLease", "beginTurn", "commitTurn", "failMessage", "addRecord"];

export type Family = "server" | "host";

export function scenarioOf(seed: number, family: Family = "server"): Scenario {
  if (family === "host") return hostScenarioOf(seed);
  const random = mulberry32(seed);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!;
  const provider = pick<ProviderKind>(["anthropic", "anthropic", "openai"]);
  const ledger = pick<LedgerKind>(["sqlite", "redis", "postgres"]);
  const content = pick(CONTENTS);
  let crashAt: CrashPoint;
  let occurrence = 1;
  let call: CallPoint | undefined;
  if (random() < 0.5) {
    [crashAt, occurrence] = pick(EVERY_POINT);
  } else {
    crashAt = "at_call";
    const method = pick(CALLS);
    const twice = ["beginTurn", "commitTurn", "claim", "complete"].includes(method);
    call = { method, n: twice && random() < 0.4 ? 2 : 1, side: random() < 0.5 ? "before" : "after" };
  }
  const actions: Action[] = ["kill", "pause", "freeze", "cut"];
  if (crashAt === "during_commit") actions.push("lose_reply", "lose_reply");
  // Sometimes a store transaction's COMMIT, whose reply is then lost after it applied.
  if (call !== undefined && TRANSACTIONS.includes(call.method) && random() < 0.3) {
    call.side = "commit";
    actions.splice(0, actions.length, "lose_reply", "lose_reply", "kill", "freeze");
  }
  const action = pick(actions);
  // Past the turn lease (LEASE_MS) most of the time: the point is another process taking over.
  let faultMs = action === "cut" ? 100 + Math.floor(random() * 600) : LEASE_MS + 100 + Math.floor(random() * 900);
  let rival = pick<Rival>(["resend", "resend", "new_same_words", "new_other_words", "none"]);
  const rivalDelayMs = Math.floor(random() * LEASE_MS * 1.5);
  if (rival === "resend" && random() < 0.4) rival = "resend_and_new";
  // Sometimes past the PostgreSQL ledger's operation bound (timeoutMs, 5 s): claims and completes
  // sent into the freeze fail ledger_unavailable and their copies run late.
  if (action === "freeze" && ledger === "postgres" && random() < 0.4) faultMs = 5_300 + Math.floor(random() * 1_000);
  return { seed, family, provider, ledger, store: "postgres", content, crashAt, occurrence, ...(call !== undefined ? { call } : {}), action, faultMs, rival, rivalDelayMs };
}

/**
 * The "host" family: what the server family never does. A SQLite conversation store shared by
 * every process on one file half the time (a runner stopped or killed inside a write transaction,
 * holding the file's lock; another process holding it past the busy timeout; SIGKILLs leaving the
 * WAL behind); otherwise PostgreSQL with one runner partitioned from the store, the ledger or both
 * while the others reach them; and the SQLite and Redis ledgers faulted.
 */
function hostScenarioOf(seed: number): Scenario {
  const random = mulberry32(seed * 7919 + 17);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)]!;
  const provider = pick<ProviderKind>(["anthropic", "anthropic", "openai"]);
  const store = pick<Scenario["store"]>(["sqlite", "postgres"]);
  const ledger = pick<LedgerKind>(["sqlite", "redis", "postgres"]);
  const content = pick(CONTENTS);
  let crashAt: CrashPoint;
  let occurrence = 1;
  let call: CallPoint | undefined;
  const sqliteMethods = [...(store === "sqlite" ? TRANSACTIONS : []), ...(ledger === "sqlite" ? ["claim", "complete"] : [])];
  const r = random();
  if (r < 0.35) {
    [crashAt, occurrence] = pick(EVERY_POINT);
  } else {
    crashAt = "at_call";
    // Inside a SQLite write transaction a third of the time, when there is a SQLite file.
    if (sqliteMethods.length > 0 && random() < 0.5) call = { method: pick(sqliteMethods), n: 1, side: "commit" };
    // On PostgreSQL, parked on a store transaction's COMMIT (its row lock held) now and then: then hung, killed or partitioned.
    else if (store === "postgres" && random() < 0.25) call = { method: pick(TRANSACTIONS), n: 1, side: "commit" };
    else {
      const method = pick(CALLS);
      const twice = ["beginTurn", "commitTurn", "claim", "complete"].includes(method);
      call = { method, n: twice && random() < 0.4 ? 2 : 1, side: random() < 0.5 ? "before" : "after" };
    }
  }
  const actions: Action[] = ["kill", "pause"];
  // A SQLite store's during_commit is a SIGKILL the runner gives itself (crash-worker.ts).
  if (store === "sqlite" && crashAt === "during_commit") actions.splice(1);
  else if (call?.side !== "commit") {
    if (store === "postgres") actions.push("partition", "partition", "partition_store", "isolate");
    if (ledger !== "sqlite") actions.push("partition_ledger", "partition_ledger", "lose_ledger_reply");
    if (ledger === "redis") actions.push("redis_pause", "redis_sleep");
    if (ledger === "sqlite") actions.push("lock_ledger");
    if (store === "sqlite") actions.push("lock_store");
  }
  if (call?.side === "commit" && !inSqlite({ call, ledger, store } as Scenario)) actions.push("partition_store");
  // Stopped for good: on PostgreSQL also while parked on a COMMIT, its transaction open and its row locks held.
  if (!inSqlite({ call, ledger, store } as Scenario) && !(store === "sqlite" && crashAt === "during_commit")) actions.push("hang");
  const action = pick(actions);
  let faultMs = LEASE_MS + 100 + Math.floor(random() * 900);
  // Past the SQLite busy timeout (5 s) sometimes: a stopped lock holder or another process's lock.
  if ((call?.side === "commit" && action === "pause") || action === "lock_ledger" || action === "lock_store") {
    if (random() < 0.4) faultMs = 5_300 + Math.floor(random() * 1_000);
  }
  // Past the PostgreSQL ledger's bound (5 s) sometimes: a partitioned claim's copy runs late.
  if ((action === "partition" || action === "partition_ledger") && ledger === "postgres" && random() < 0.3) faultMs = 5_300 + Math.floor(random() * 1_000);
  let rival = pick<Rival>(["resend", "resend", "new_same_words", "new_other_words", "none"]);
  const rivalDelayMs = Math.floor(random() * LEASE_MS * 1.5);
  if (rival === "resend" && random() < 0.4) rival = "resend_and_new";
  return { seed, family: "host", provider, ledger, store, content, crashAt, occurrence, ...(call !== undefined ? { call } : {}), action, faultMs, rival, rivalDelayMs };
}

export const describeScenario = (s: Scenario) =>
  `${s.family === "host" ? "host " : ""}seed ${s.seed}: ${s.provider}, ${s.ledger} ledger, ${s.store === "sqlite" ? "SQLite conversations, " : ""}"${s.content}", stopped ${s.crashAt === "at_call" ? `${s.call!.side === "commit" ? (inSqlite(s) ? "inside the transaction of" : "on the COMMIT of") : s.call!.side} ${s.call!.method} #${s.call!.n}` : `${s.crashAt} #${s.occurrence}`}, ` +
  `${s.action}${s.action === "kill" || s.action === "lose_reply" ? "" : ` ${s.faultMs} ms`}, rival ${s.rival}${s.rival === "none" ? "" : ` after ${s.rivalDelayMs} ms`}`;

/** A "commit" point on a SQLite file: the runner stops or kills itself inside the transaction. */
const inSqlite = (s: Scenario) => s.call?.side === "commit" && (["claim", "complete"].includes(s.call.method) ? s.ledger === "sqlite" : s.store === "sqlite");

const redisOf = async (url: string) => {
  const { Redis } = await import("ioredis");
  const admin = new Redis(url, { maxRetriesPerRequest: 1 });
  admin.on("error", () => {});
  return admin;
};

/** Another process's hold on a SQLite file's write lock for `ms` (a backup, a migration, a stopped tool). */
async function holdWriteLock(path: string, ms: number): Promise<void> {
  const { default: Database } = await import("better-sqlite3");
  const db = new Database(path, { timeout: 5_000 });
  try {
    db.exec("BEGIN IMMEDIATE");
    await sleep(ms);
    db.exec("COMMIT");
  } finally {
    db.close();
  }
}

/** Waits for what a process says next, or for `ms` (undefined). */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function auditAgain<T>(read: () => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await read();
    } catch (error) {
      if (tries >= 3 || !/unavailable/i.test(String((error as { code?: unknown }).code ?? ""))) throw error;
      await sleep(1_000);
    }
  }
}

/** Codes a client may get that say "try again": the re-send is what the protocol asks of it. */
const TRANSIENT = new Set(["store_unavailable", "ledger_unavailable", "conversation_busy"]);

export interface Verdict {
  scenario: string;
  violations: string[];
  /** What the first runner did: "reached <point>", or its answer when the point never came. */
  first: string;
  answers: Told[];
}

/** One answer a process gave its client, and the message it answered. */
interface Told {
  who: string;
  messageId: string;
  answer: ClientAnswer;
}

/** Runs one scenario in a world of its own and judges it. */
export async function runScenario(s: Scenario): Promise<Verdict> {
  const t0 = Date.now();
  const lap = (what: string) => process.env.CHAOS_TRACE && console.log(`[chaos ${s.seed}] ${Date.now() - t0} ms ${what}`);
  const world = await makeWorld({ provider: s.provider, ledger: s.ledger, store: s.store, storeProxy: s.store === "postgres" });
  const violations: string[] = [];
  const answers: Told[] = [];
  let first = "";
  try {
    const conversation = `chaos-${s.seed}`;
    const stops = { crashAt: s.crashAt, occurrence: s.occurrence, ...(s.call !== undefined ? { call: s.call } : {}), ...(inSqlite(s) ? { inTransaction: s.action === "kill" ? ("kill" as const) : ("stop" as const) } : {}) };
    // The host family partitions the first runner alone: its connections pass through proxies of its own.
    const a = s.family === "host" ? await world.partitionable(stops) : Object.assign(world.runner(stops), { own: {} as OwnProxies });
    const b = world.runner();
    const third = s.rival === "resend_and_new" ? world.runner() : undefined;
    await Promise.all([a.ready, b.ready, third?.ready]);
    lap("ready");
    const killed = new Set<RunnerProcess>();
    // A held last event waits for its client to go: only a kill ends it.
    if (s.crashAt === "after_complete" && s.action === "kill") world.holdBeforeFinish();
    a.send(conversation, "m1", s.content);
    // Inside a SQLite transaction the runner cannot say so: it stops itself (the parent sees state T) or dies there.
    const inside = { type: "reached" as const, point: "at_call" as const, detail: s.call !== undefined ? `inside the transaction of ${s.call.method} #${s.call.n}` : "inside the transaction of the commit" };
    const said = await within(
      inSqlite(s) || (s.crashAt === "during_commit" && s.store === "sqlite")
        ? Promise.race([a.next().catch((error: unknown) => (a.child.signalCode === "SIGKILL" ? inside : Promise.reject(error))), a.stoppedItself().then(() => inside)])
        : a.next(),
      20_000,
    );
    const messages: { id: string; content: string }[] = [{ id: "m1", content: s.content }];
    const pending: { who: string; messageId: string; process: RunnerProcess }[] = [];
    if (said === undefined) {
      violations.push("stuck: the first runner neither reached its point nor answered within 20 s");
    } else if (said.type === "answered" || said.type === "refused") {
      first = `never reached its point; ${said.type}${said.type === "refused" ? ` ${said.code}` : ""}`;
      answers.push({ who: "runner A", messageId: "m1", answer: said });
    } else if (said.type === "reached") {
      first = `reached ${said.point}${said.detail !== undefined ? ` (${said.detail})` : ""}`;
      const proxy = world.proxy!;
      let fault: Promise<void> = Promise.resolve();
      const own = a.own;
      const both = (fault: (p: StoreProxy) => Promise<void>) => Promise.all([own.store, own.ledger].map((p) => (p === undefined ? undefined : fault(p)))).then(() => {});
      switch (s.action) {
        case "kill":
          await a.kill();
          killed.add(a);
          break;
        case "partition":
        case "partition_store":
        case "partition_ledger":
        case "isolate":
        case "lose_ledger_reply": {
          // The first runner's own proxies only: the others still reach the stores.
          const partitions = {
            partition: () => both((p) => p.freeze(s.faultMs)),
            partition_store: () => own.store!.freeze(s.faultMs),
            partition_ledger: () => own.ledger!.freeze(s.faultMs),
            isolate: () => both((p) => p.cut(s.faultMs)),
            // The script or statement runs; its reply is dropped and the connection killed.
            lose_ledger_reply: () => own.ledger!.loseReplies(300, 200),
          };
          fault = partitions[s.action]();
          a.resume();
          break;
        }
        case "redis_pause":
        case "redis_sleep": {
          const admin = await redisOf(world.redisUrl!);
          fault = (s.action === "redis_pause" ? admin.call("CLIENT", "PAUSE", String(s.faultMs), "ALL").then(() => sleep(s.faultMs)) : admin.call("DEBUG", "SLEEP", String(s.faultMs / 1000)))
            .then(() => undefined)
            .finally(() => admin.disconnect());
          a.resume();
          break;
        }
        case "hang":
          if (s.store === "sqlite" || s.ledger === "sqlite") {
            a.resume();
            await a.pauseBetweenTransactions();
          } else {
            a.stop(); // parked where it stopped, for good (on a COMMIT: its transaction open)
          }
          killed.add(a); // never answers: its answer is not waited for
          break;
        case "lock_ledger":
        case "lock_store":
          fault = holdWriteLock(s.action === "lock_ledger" ? world.files.ledger! : world.files.store!, s.faultMs);
          a.resume();
          break;
        case "pause":
          a.stop();
          fault = sleep(s.faultMs).then(() => a.resume());
          break;
        case "freeze":
          fault = proxy.freeze(s.faultMs);
          a.resume();
          break;
        case "cut":
          fault = proxy.cut(s.faultMs);
          a.resume();
          break;
        case "lose_reply":
          // Parked on the COMMIT: it is sent while replies are dropped, applies, and its reply never comes.
          fault = proxy.loseReplies(300, 200);
          a.resume();
          break;
      }
      if (!killed.has(a)) pending.push({ who: "runner A", messageId: "m1", process: a });
      if (s.rival !== "none") {
        await sleep(s.rivalDelayMs);
        const rival = s.rival === "resend" || s.rival === "resend_and_new" ? { id: "m1", content: s.content } : { id: "m2", content: s.rival === "new_same_words" ? s.content : OTHER_WORDS[s.content]! };
        if (rival.id !== "m1") messages.push(rival);
        b.send(conversation, rival.id, rival.content);
        pending.push({ who: `runner B (${rival.id})`, messageId: rival.id, process: b });
        if (third !== undefined) {
          // A re-send racing a new message: the new one waits its turn (TURN-9) and must not take m1's turn index.
          const other = { id: "m2", content: OTHER_WORDS[s.content]! };
          messages.push(other);
          third.send(conversation, other.id, other.content);
          pending.push({ who: "runner C (m2)", messageId: other.id, process: third });
        }
      }
      await fault;
    } else {
      violations.push(`unexpected: ${JSON.stringify(said)}`);
    }
    lap(`acted: ${first}`);
    for (const { who, messageId, process } of pending) {
      const answer = await within(process.outcome().catch((error: unknown) => ({ error })), 30_000);
      if (answer === undefined) violations.push(`stuck: ${who} gave no answer within 30 s`);
      else if ("error" in answer) violations.push(`crashed: ${who}: ${String(answer.error)}`);
      else answers.push({ who, messageId, answer });
      lap(`${who} answered`);
    }
    // Settle: a healthy process (B, when it answered) re-sends every message (in order) until it is answered or fails for good.
    const settler = violations.length === 0 ? b : world.runner();
    await settler.ready;
    for (const m of messages) {
      for (let tries = 1; ; tries++) {
        settler.send(conversation, m.id, m.content);
        const answer = await within(settler.outcome(), 30_000);
        if (answer === undefined) {
          violations.push(`stuck: the settling re-send of ${m.id} gave no answer within 30 s`);
          break;
        }
        answers.push({ who: `settler (${m.id}, try ${tries})`, messageId: m.id, answer });
        lap(`settler ${m.id} try ${tries}: ${answer.type}`);
        if (answer.type === "answered" || !TRANSIENT.has(answer.code) || tries >= 5) {
          if (answer.type === "refused" && TRANSIENT.has(answer.code)) violations.push(`unsettled: ${m.id} still ${answer.code} after ${tries} re-sends: ${answer.message}`);
          break;
        }
        await sleep(LEASE_MS);
      }
    }
    // The parent's own reads can time out on a loaded machine (a reply beyond the reader's 5 s): read again.
    const audit = await auditAgain(() => world.audit(conversation));
    violations.push(...audit.violations, ...judgeAnswers(audit.effects, answers));
    // TURN-7: an answer is the message's whole answer: every turn committed for it, whoever committed it.
    for (const { who, messageId, answer } of answers) {
      if (answer.type !== "answered") continue;
      const stored = (await world.store.turnsOf(conversation, messageId)).map((t) => t.turnIndex);
      const given = answer.result.turns.map((t) => t.turnIndex);
      if (JSON.stringify(given) !== JSON.stringify(stored)) violations.push(`partial answer: ${who} answered ${messageId} with turns [${given.join(", ")}], the store holds [${stored.join(", ")}]`);
    }
    // Each thing asked for happened once: an answered message's turns name one effect per thing it asked for, each made once.
    for (const m of messages) {
      if (audit.messages[m.id] !== "answered") continue;
      const named = new Set(JSON.stringify(await world.store.turnsOf(conversation, m.id)).match(/\b(?:pay|inv)_[0-9a-f]{24}\b/g) ?? []);
      if (named.size !== ASKED[m.content]) violations.push(`not done once: ${m.id} ("${m.content}") was answered naming ${named.size} effects (${[...named].join(", ")}), not ${ASKED[m.content]}`);
    }
    for (const m of messages) {
      const state = audit.messages[m.id];
      if (state !== "answered" && state !== "failed") violations.push(`unsettled: message ${m.id} is ${String(state)} after the settling re-sends`);
    }
    // Each thing asked for happened at most once per key; a message answered names its effects (the oracle's "untold" and "duplicate").
    for (const p of new Set([a, b, settler, ...(third !== undefined ? [third] : [])])) {
      if (killed.has(p)) continue;
      if (p.child.exitCode !== null || p.child.signalCode !== null) violations.push(`stray crash: runner ${p.child.pid} exited (${p.child.exitCode ?? p.child.signalCode})`);
    }
    if (violations.length > 0) {
      violations.push(`effects: ${JSON.stringify(audit.effects)}`, `rows: ${JSON.stringify(audit.rows.map((r) => [r.key, r.state]))}`, `messages: ${JSON.stringify(audit.messages)}`);
      violations.push(`records: ${JSON.stringify(audit.records)}`, `answers: ${JSON.stringify(answers)}`);
    }
  } finally {
    lap("closing");
    await world.close();
    lap("closed");
  }
  const told = answers.map(({ who, answer }) => `${who}: ${answer.type === "answered" ? "answered" : `refused ${answer.code}`}`).join("; ");
  return { scenario: describeScenario(s), violations, first: `${first}; told ${told}`, answers };
}

