/**
 * The chaos suite's scenarios (chaos.test.ts): a seed chooses every fault, runScenario plays it
 * over the crash suite's world (crash-harness.ts) and judges it with the crash suite's oracle and
 * the answers every process gave its client.
 */
import { mulberry32 } from "@dispatch-once/conformance/ledger";
import type { CallPoint, CrashPoint } from "./crash-protocol.js";
import { EVERY_POINT, LEASE_MS, judgeAnswers, makeWorld, type ClientAnswer, type LedgerKind, type ProviderKind, type RunnerProcess } from "./crash-harness.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Action = "kill" | "pause" | "freeze" | "cut" | "lose_reply";
/** What a second process does meanwhile: re-sends m1 (a client retry or a queue's redelivery), sends a new message m2, both at once (a third process), or nothing. */
type Rival = "resend" | "new_same_words" | "new_other_words" | "resend_and_new" | "none";

export interface Scenario {
  seed: number;
  provider: ProviderKind;
  ledger: LedgerKind;
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

export function scenarioOf(seed: number): Scenario {
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
  return { seed, provider, ledger, content, crashAt, occurrence, ...(call !== undefined ? { call } : {}), action, faultMs, rival, rivalDelayMs };
}

export const describeScenario = (s: Scenario) =>
  `seed ${s.seed}: ${s.provider}, ${s.ledger} ledger, "${s.content}", stopped ${s.crashAt === "at_call" ? `${s.call!.side === "commit" ? "on the COMMIT of" : s.call!.side} ${s.call!.method} #${s.call!.n}` : `${s.crashAt} #${s.occurrence}`}, ` +
  `${s.action}${s.action === "kill" || s.action === "lose_reply" ? "" : ` ${s.faultMs} ms`}, rival ${s.rival}${s.rival === "none" ? "" : ` after ${s.rivalDelayMs} ms`}`;

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
  const world = await makeWorld({ provider: s.provider, ledger: s.ledger, store: "postgres", storeProxy: true });
  const violations: string[] = [];
  const answers: Told[] = [];
  let first = "";
  try {
    const conversation = `chaos-${s.seed}`;
    const a = world.runner({ crashAt: s.crashAt, occurrence: s.occurrence, ...(s.call !== undefined ? { call: s.call } : {}) });
    const b = world.runner();
    const third = s.rival === "resend_and_new" ? world.runner() : undefined;
    await Promise.all([a.ready, b.ready, third?.ready]);
    lap("ready");
    const killed = new Set<RunnerProcess>();
    // A held last event waits for its client to go: only a kill ends it.
    if (s.crashAt === "after_complete" && s.action === "kill") world.holdBeforeFinish();
    a.send(conversation, "m1", s.content);
    const said = await within(a.next(), 20_000);
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
      switch (s.action) {
        case "kill":
          await a.kill();
          killed.add(a);
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

