/**
 * The chaos suite's scenarios (chaos.test.ts): a seed chooses every fault, runScenario plays it
 * over the crash suite's world (crash-harness.ts) and judges it with the crash suite's oracle and
 * the answers every process gave its client.
 */
import { mixedResponses, mulberry32 } from "@dispatch-once/conformance/ledger";
import * as openai from "@dispatch-once/mock-openai";
import { lastUserPromptIndex, lastUserText, say, toolUse, turn, type Fault as AnthropicFault } from "@dispatch-once/mock-provider";
import type { CallPoint, CrashPoint } from "./crash-protocol.js";
import { EVERY_POINT, INVOICE_ACME, LEASE_MS, PAY_ACME, PAY_BOB, judgeAnswers, makeWorld, plans, responsesPlans, type AskedResponse, type ClientAnswer, type Effect, type LedgerKind, type ModelHooks, type OwnProxies, type ProviderKind, type RunnerProcess } from "./crash-harness.js";
import type { StoreProxy } from "./stores.js";
import type { LedgerRow } from "@dispatch-once/core";

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
  /** The provider dimension (drawn last); absent in scenarios written before it (the model answers as planned, the API never fails). */
  model?: ModelDraw;
}

/**
 * What the model answers to a later response of a turn's first request (the first response is as
 * planned; the mocks vary member order, whitespace and argument fragments of every response, and
 * re-word the memo of every later one, anyway):
 * - `same`: as planned;
 * - `number_spelling`: the amount written `125000.0` or `1.25e+5` (the same number, KEY-5);
 * - `string_amount`: the amount written as a string (`"125000"`): refused by the tool's schema
 *   (DISPATCH-2, IDENT-8's table), an error result the model reads;
 * - `call_order`: the calls of a parallel turn in the other order (TURN-4);
 * - `extra_call`: the first call once more, identical (DISPATCH-6: both run, ordinals 0 and 1);
 * - `missing_call`: the last call left out (text only when there was one);
 * - `split_payment`: the first call's amount split into two calls (100 000 + 25 000, 5 000 + 4 900);
 * - `text_only`: no call, a sentence;
 * - `other_tool_first`: a read (`check_balance`) before the planned calls.
 */
export type Variation = "same" | "number_spelling" | "string_amount" | "call_order" | "extra_call" | "missing_call" | "split_payment" | "text_only" | "other_tool_first";
/**
 * What the API does to one request of a turn's first request: an HTTP status before any byte
 * (529 overloaded, 429 with retry-after, 500), an `error` event before the first call, inside its
 * arguments or after its completing event (`content_block_stop`, `output_item.done`), a clean
 * close before the finishing event (`message_stop`, `response.completed`) or right after the
 * first call completed, or a connection reset right after it.
 */
export type ProviderFault =
  | "none"
  | "status_529"
  | "status_429"
  | "status_500"
  | "error_before_call"
  | "error_in_arguments"
  | "error_after_call"
  | "close_before_finish"
  | "close_after_call"
  | "cut_after_call"
  /**
   * A proxy that sent the request again after its upstream died splices the new response (the
   * model's answer to the next attempt, its variation) into the body after the first call
   * completed (the payment made): `splice_restart` with its `message_start` / `response.created`
   * (STREAM-8), `splice_headless` without, led by a sentence whose text block / message item lands
   * on the call's position (STREAM-17). Never in PROVIDER_FAULTS: drawn apart, after everything else.
   */
  | "splice_restart"
  | "splice_headless";

export interface ModelDraw {
  /** Payments by `send_payment_noted`, whose identity holds the memo: a re-worded memo is another key (IDENT-8's "free text inside an identity"). */
  memoInIdentity: boolean;
  /** The 2nd, 3rd and every later response to one first request (counted per request body, as the mocks count attempts). */
  variations: Variation[];
  /** The 1st to 4th request of one first request (later ones: none). */
  faults: ProviderFault[];
  /** Which spelling `number_spelling` writes (0: `N.0`, 1: exponent form). */
  spelling: number;
  /** A splice on the `attempt`-th request (1..4) when `faults` leaves that request alone; drawn last of all, so absent from the seeds drawn before it. */
  splice?: { attempt: number; shape: "splice_restart" | "splice_headless" };
  /**
   * The runner sends a tool_choice that forces a call (STREAM-18: only with a message's first turn;
   * later turns `auto`). A forced response is a call: the text variations answer as planned. Drawn
   * after the splice; absent from the seeds drawn before it.
   */
  forceToolChoice?: boolean;
}

const VARIATIONS: Variation[] = ["same", "same", "same", "number_spelling", "string_amount", "call_order", "extra_call", "missing_call", "split_payment", "text_only", "other_tool_first"];
const PROVIDER_FAULTS: ProviderFault[] = ["none", "none", "none", "none", "none", "status_529", "status_429", "status_500", "error_before_call", "error_in_arguments", "error_after_call", "close_before_finish", "close_after_call", "cut_after_call"];

/** The provider dimension, drawn after everything else so every earlier draw of a seed stays what it was; a quarter of the scenarios run without it. */
function drawModel(random: () => number): ModelDraw | undefined {
  const on = random() < 0.75;
  const memoInIdentity = random() < 0.2;
  const variations = [0, 1, 2].map(() => VARIATIONS[Math.floor(random() * VARIATIONS.length)]!);
  const faults = [0, 1, 2, 3].map(() => PROVIDER_FAULTS[Math.floor(random() * PROVIDER_FAULTS.length)]!);
  const spelling = Math.floor(random() * 2);
  // Drawn after every earlier choice, so they stay what they were for every seed.
  const spliceOn = random() < 0.5;
  const spliceAttempt = 1 + Math.floor(random() * 4);
  const shape = random() < 0.5 ? "splice_restart" : "splice_headless";
  const splice = spliceOn && faults[spliceAttempt - 1] === "none" ? { splice: { attempt: spliceAttempt, shape } as const } : {};
  const force = random() < 0.25 ? { forceToolChoice: true } : {};
  return on ? { memoInIdentity, variations, faults, spelling, ...splice, ...force } : undefined;
}

const describeModel = (m: ModelDraw | undefined) =>
  m === undefined
    ? ""
    : `; model${m.memoInIdentity ? " (memo in the identity)" : ""}${m.forceToolChoice === true ? " (tool_choice forcing a call)" : ""}: later responses ${m.variations.join(", ")}; requests ${m.faults.map((f, i) => (m.splice?.attempt === i + 1 ? m.splice.shape : f)).join(", ")}`;

/** A call as the scripted model writes it. */
interface PlannedCall {
  name: string;
  input: Record<string, unknown>;
  reword?: string[];
  spell?: Record<string, string>;
}

/** What the model answers to the first request of a turn whose user said `content`, in this variation: its calls, or a sentence. */
export function answerOf(content: string, draw: ModelDraw, variation: Variation): PlannedCall[] | string {
  const pay = draw.memoInIdentity ? "send_payment_noted" : "send_payment";
  const planned: PlannedCall[] =
    content === "invoice acme"
      ? [{ name: "create_invoice", input: INVOICE_ACME }]
      : content === "pay acme and bob"
        ? [
            { name: pay, input: PAY_ACME, reword: ["memo"] },
            { name: pay, input: PAY_BOB, reword: ["memo"] },
          ]
        : [{ name: pay, input: PAY_ACME, reword: ["memo"] }];
  const [first, ...rest] = planned as [PlannedCall, ...PlannedCall[]];
  const amount = first.input.amount as number;
  switch (variation) {
    case "same":
      return planned;
    case "number_spelling":
      return [{ ...first, spell: { amount: draw.spelling === 0 ? `${amount}.0` : amount.toExponential() } }, ...rest];
    case "string_amount":
      return [{ ...first, input: { ...first.input, amount: String(amount) } }, ...rest];
    case "call_order":
      return [...planned].reverse();
    case "extra_call":
      return [...planned, first];
    case "missing_call":
      return planned.length > 1 ? planned.slice(0, -1) : "I could not find that invoice.";
    case "split_payment": {
      const part = first.name === "create_invoice" ? 5_000 : 100_000;
      return [{ ...first, input: { ...first.input, amount: part } }, { ...first, input: { ...first.input, amount: amount - part } }, ...rest];
    }
    case "text_only":
      return "Done.";
    case "other_tool_first":
      return [{ name: "check_balance", input: { account: "main" } }, ...planned];
  }
}

const anthropicFault = (f: ProviderFault): AnthropicFault | undefined => {
  switch (f) {
    case "none":
      return undefined;
    case "status_529":
      return { kind: "status", status: 529 };
    case "status_429":
      return { kind: "status", status: 429, retryAfterMs: 200 };
    case "status_500":
      return { kind: "status", status: 500 };
    case "error_before_call":
      return { kind: "error_event", at: { event: 1 } };
    case "error_in_arguments":
      return { kind: "error_event", at: { event: 3 } };
    case "error_after_call":
      return { kind: "error_event", at: { afterBlockStop: 0 } };
    case "close_before_finish":
      return { kind: "clean_close", at: { beforeMessageStop: true } };
    case "close_after_call":
      return { kind: "clean_close", at: { afterBlockStop: 0 } };
    case "cut_after_call":
      return { kind: "reset", at: { afterBlockStop: 0 } };
    case "splice_restart":
      return { kind: "splice", at: { afterBlockStop: 0 }, messageStart: true };
    case "splice_headless":
      return { kind: "splice", at: { afterBlockStop: 0 }, messageStart: false, lead: SPLICE_LEAD };
  }
};

/** The sentence a spliced response without its start begins with: on the call's position, another type (STREAM-17). */
const SPLICE_LEAD = "Paying now.";

const openaiFault = (f: ProviderFault, hasCall: boolean): openai.Fault | undefined => {
  // A response without a call has no call to complete: its "after the call" is before response.completed.
  const afterCall: openai.FaultPosition = hasCall ? { afterCallDone: 0 } : { beforeCompleted: true };
  switch (f) {
    case "none":
      return undefined;
    case "status_529":
      return { kind: "status", status: 529 };
    case "status_429":
      return { kind: "status", status: 429 };
    case "status_500":
      return { kind: "status", status: 500 };
    case "error_before_call":
      return { kind: "error_event", at: { event: 1 } };
    case "error_in_arguments":
      return { kind: "error_event", at: { event: 3 } };
    case "error_after_call":
      return { kind: "error_event", at: afterCall };
    case "close_before_finish":
      return { kind: "clean_close", at: { beforeCompleted: true } };
    case "close_after_call":
      return { kind: "clean_close", at: afterCall };
    case "cut_after_call":
      return { kind: "reset", at: afterCall };
    case "splice_restart":
      return { kind: "splice", at: afterCall, responseCreated: true };
    case "splice_headless":
      return { kind: "splice", at: afterCall, responseCreated: false, lead: SPLICE_LEAD };
  }
};

/**
 * The mock's script and fault plan for a scenario's model. The fault plan runs first for each
 * request and sees the mock's attempt count (requests with the same body); it decides the
 * variation of that request's response, which the script (handed the same request object) then
 * plays. Continuations after tool results are the planned ones ("Done. ...").
 */
export function modelHooks(provider: ProviderKind, draw: ModelDraw): ModelHooks {
  const decided = new WeakMap<object, Variation>();
  const variationOf = (attempt: number) => (attempt <= 1 ? "same" : draw.variations[Math.min(attempt - 2, draw.variations.length - 1)]!);
  const faultOf = (attempt: number): ProviderFault => (draw.splice?.attempt === attempt ? draw.splice.shape : draw.faults[attempt - 1] ?? "none");
  // The mock asks the script again for a splice's response to the same request object: the model's answer to the next attempt.
  const answered = new WeakSet<object>();
  const splicedVariation = new WeakMap<object, Variation>();
  const chosenFor = (request: object) => {
    if (!answered.has(request)) {
      answered.add(request);
      return decided.get(request) ?? "same";
    }
    return splicedVariation.get(request) ?? "same";
  };
  // A forced response is a call: a variation that answers with text answers as planned instead.
  const textual = new Set<Variation>(["text_only", "missing_call"]);
  const variationFor = (request: object): Variation => {
    const v = chosenFor(request);
    return draw.forceToolChoice === true && textual.has(v) ? "same" : v;
  };
  if (provider === "openai") {
    const first = (request: openai.ResponsesRequest) => {
      const input = request.input;
      const last = Array.isArray(input) ? (input[input.length - 1] as { role?: string } | undefined) : undefined;
      return typeof input === "string" || last?.role === "user";
    };
    return {
      kind: "openai",
      faultPlan: (request, info) => {
        if (!first(request)) return undefined;
        const variation = variationOf(info.attempt);
        decided.set(request, variation);
        splicedVariation.set(request, variationOf(info.attempt + 1));
        const answer = answerOf(openai.lastUserText(request) ?? "", draw, variation);
        return openaiFault(faultOf(info.attempt), typeof answer !== "string");
      },
      script: (request) => {
        if (!first(request)) return responsesPlans(request);
        const answer = answerOf(openai.lastUserText(request) ?? "", draw, variationFor(request));
        if (typeof answer === "string") return openai.say(answer);
        return openai.respond(...answer.map((c) => openai.call(c.name, c.input, { ...(c.reword !== undefined ? { reword: c.reword } : {}), ...(c.spell !== undefined ? { spell: c.spell } : {}) })));
      },
    };
  }
  const first = (request: Parameters<typeof lastUserText>[0]) => lastUserPromptIndex(request) === request.messages.length - 1;
  return {
    kind: "anthropic",
    faultPlan: (request, info) => {
      if (!first(request)) return undefined;
      decided.set(request, variationOf(info.attempt));
      splicedVariation.set(request, variationOf(info.attempt + 1));
      return anthropicFault(faultOf(info.attempt));
    },
    script: (request) => {
      if (!first(request)) return plans(request);
      const answer = answerOf(lastUserText(request), draw, variationFor(request));
      if (typeof answer === "string") return turn(say(answer));
      return turn(...answer.map((c) => toolUse(c.name, c.input, { ...(c.reword !== undefined ? { reword: c.reword } : {}), ...(c.spell !== undefined ? { spell: c.spell } : {}) })));
    },
  };
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
  const model = drawModel(random);
  return { seed, family, provider, ledger, store: "postgres", content, crashAt, occurrence, ...(call !== undefined ? { call } : {}), action, faultMs, rival, rivalDelayMs, ...(model !== undefined ? { model } : {}) };
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
  const model = drawModel(random);
  return { seed, family: "host", provider, ledger, store, content, crashAt, occurrence, ...(call !== undefined ? { call } : {}), action, faultMs, rival, rivalDelayMs, ...(model !== undefined ? { model } : {}) };
}

/**
 * The oracle of the provider dimension. What the spec allows for each variation of a later
 * response (the first is as planned):
 *
 * | variation | effects allowed | what must be told |
 * | --- | --- | --- |
 * | same, number_spelling, call_order, other_tool_first | one per thing asked: the same keys (KEY-5 and Theorem 2: the number's value counts; TURN-4: only identical calls are counted, so order and a read between change no key) | as always |
 * | memo re-worded outside the identity (send_payment) | one: the identity leaves the memo out (IDENT-1, IDENT-3) | as always |
 * | memo re-worded inside the identity (send_payment_noted) | one per wording any response asked for: another key (IDENT-8's table, "free text inside an identity") | every one: answered, or listed by a record (RECORD-7, RECORD-8) |
 * | string_amount | no new one: refused before any claim (DISPATCH-2), an error result the model reads (RECORD-3) | an earlier attempt's payment, by a record (RECORD-8) |
 * | extra_call | one more: two identical calls in one response both run (DISPATCH-6) | both: the committed turn names two effects, not one twice |
 * | missing_call, text_only | none for what it left out | what an earlier attempt made, by a record (RECORD-8; its rationale names "another call, other arguments, plain text") |
 * | split_payment | one per part: new arguments, new keys (IDENT-8's table, "one payment split into two") | every part and every earlier effect (RECORD-7) |
 *
 * Whatever the API does (a status before any byte, an `error` event, a clean close before the
 * finishing event, a reset after a call completed) is a failed stream (STREAM-1, STREAM-8), retried
 * (STREAM-5, RECORD-5's `retryable`) and judged by the same table. Everything else (no key with two
 * effects, nothing untold, no not_happened of an effect that happened) is the crash suite's oracle.
 */
const WRITES = new Set(["send_payment", "send_payment_noted", "create_invoice"]);

/** The identity of a write the model asked for, as text (a read: undefined). */
function identityOfCall(name: string, input: Record<string, unknown>): string | undefined {
  if (!WRITES.has(name)) return undefined;
  const fields = name === "create_invoice" ? ["customer", "amount", "currency"] : name === "send_payment_noted" ? ["payee", "amount", "currency", "reference", "memo"] : ["payee", "amount", "currency", "reference"];
  return `${name === "create_invoice" ? "invoice" : "payment"} ${JSON.stringify(fields.map((f) => input[f]))}`;
}

/** The identity of an effect, in the same words (the payments API keeps the body it performed). */
function identityOfEffect(e: Effect, draw: ModelDraw): string {
  const payload = e.payload ?? {};
  return e.kind === "invoice_created" ? identityOfCall("create_invoice", payload)! : identityOfCall(draw.memoInIdentity ? "send_payment_noted" : "send_payment", payload)!;
}

/** Whether every response the model gave to `content`'s first request asked for the planned writes (whatever their spelling). */
function askedAsPlanned(asked: AskedResponse[], content: string, draw: ModelDraw): boolean {
  const planned = answerOf(content, draw, "same") as PlannedCall[];
  const want = planned.map((c) => identityOfCall(c.name, c.input)).sort().join("|");
  return asked
    .filter((r) => r.userText === content && r.outcome !== "status")
    .every((r) => r.calls.flatMap((c) => identityOfCall(c.name, c.input) ?? []).sort().join("|") === want);
}

/**
 * Not more effects than asked for: of each identity, at most as many effects as the responses to
 * the messages asked for it (per message, the most any one response asked: a later response asking
 * again is a replay, the same keys; two identical calls in one response are two, DISPATCH-6).
 */
function judgeAsked(effects: Effect[], asked: AskedResponse[], messages: { id: string; content: string }[], draw: ModelDraw): string[] {
  const allowed = new Map<string, number>();
  for (const m of messages) {
    const most = new Map<string, number>();
    for (const r of asked.filter((r) => r.userText === m.content)) {
      const counts = new Map<string, number>();
      for (const c of r.calls) {
        const id = identityOfCall(c.name, c.input);
        if (id !== undefined) counts.set(id, (counts.get(id) ?? 0) + 1);
      }
      for (const [id, n] of counts) most.set(id, Math.max(most.get(id) ?? 0, n));
    }
    for (const [id, n] of most) allowed.set(id, (allowed.get(id) ?? 0) + n);
  }
  const made = new Map<string, Effect[]>();
  for (const e of effects) made.set(identityOfEffect(e, draw), [...(made.get(identityOfEffect(e, draw)) ?? []), e]);
  const violations: string[] = [];
  for (const [id, list] of made) {
    const limit = allowed.get(id) ?? 0;
    if (list.length > limit) violations.push(`more than asked: ${list.length} effects of ${id} (${list.map((e) => e.resourceId).join(", ")}), the model asked for it ${limit} time(s) per message`);
  }
  return violations;
}

/** The calls of a stored turn (either provider's shape) and the result text of each, by call id. */
function committedCalls(turns: unknown[]): { name: string; input: Record<string, unknown>; result: string | undefined; isError: boolean }[] {
  const calls: { id: string; name: string; input: Record<string, unknown> }[] = [];
  const results = new Map<string, { text: string; isError: boolean }>();
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) return v.forEach(walk);
    if (v === null || typeof v !== "object") return;
    const o = v as Record<string, unknown>;
    if (o.type === "tool_use") calls.push({ id: String(o.id), name: String(o.name), input: o.input as Record<string, unknown> });
    else if (o.type === "function_call") calls.push({ id: String(o.call_id), name: String(o.name), input: JSON.parse(String(o.arguments)) as Record<string, unknown> });
    else if (o.type === "tool_result") results.set(String(o.tool_use_id), { text: JSON.stringify(o.content), isError: o.is_error === true });
    else if (o.type === "function_call_output") results.set(String(o.call_id), { text: JSON.stringify(o.output), isError: /error/i.test(JSON.stringify(o.output)) && !/(?:pay|inv)_[0-9a-f]{24}/.test(JSON.stringify(o.output)) });
    else Object.values(o).forEach(walk);
  };
  walk(turns);
  return calls.map((c) => ({ name: c.name, input: c.input, result: results.get(c.id)?.text, isError: results.get(c.id)?.isError ?? false }));
}

/**
 * An answered message's committed calls are the calls of one response the model gave to its words,
 * in its order (STREAM-8, STREAM-10, STREAM-17): a turn that mixes two responses (a proxy's splice
 * taken in) commits calls nobody asked for together, even when each of them was asked for by one.
 */
function judgeOneResponse(messageId: string, content: string, turns: unknown[], asked: AskedResponse[]): string[] {
  // The kit's judge (@dispatch-once/conformance's mixedResponses), which the end-to-end level's oracle runs too.
  const mixed = mixedResponses(committedCalls(turns), asked.filter((r) => r.userText === content).map((r) => r.calls));
  if (mixed === undefined) return [];
  return [`mixed: ${messageId}'s committed calls [${mixed.committed}] are no one response's; the responses to "${content}" asked for ${mixed.responses.map((r) => `[${r}]`).join(", ")}`];
}

/**
 * An answered message whose model asked for something else: each committed write call with a
 * result names an effect of its own (two identical calls, two effects: DISPATCH-6), made with the
 * arguments the call asked for (the user reads "paid acme 100 000" only if that payment is it).
 */
function judgeCommitted(messageId: string, turns: unknown[], effects: Effect[], draw: ModelDraw): string[] {
  const violations: string[] = [];
  const byId = new Map(effects.map((e) => [e.resourceId, e]));
  const seen = new Map<string, string>();
  for (const c of committedCalls(turns)) {
    if (!WRITES.has(c.name) || c.result === undefined || c.isError) continue;
    const named = c.result.match(/\b(?:pay|inv)_[0-9a-f]{24}\b/g) ?? [];
    if (named.length !== 1) {
      violations.push(`not told: ${messageId}'s committed ${c.name} ${JSON.stringify(c.input)} has a result naming ${named.length} effects: ${c.result}`);
      continue;
    }
    const id = named[0]!;
    const effect = byId.get(id);
    const want = identityOfCall(c.name, c.input);
    if (effect !== undefined && identityOfEffect(effect, draw) !== want) violations.push(`false answer: ${messageId}'s committed ${c.name} asked for ${want} and is answered with ${id}, which is ${identityOfEffect(effect, draw)}`);
    if (seen.has(id)) violations.push(`not done: ${messageId}'s committed calls ${seen.get(id)} and ${c.name} ${JSON.stringify(c.input)} both name ${id} (DISPATCH-6: two calls, two effects)`);
    seen.set(id, `${c.name} ${JSON.stringify(c.input)}`);
  }
  return violations;
}

/**
 * Every answer tells its message's effects (RECORD-7, RECORD-8: the committed-turn record goes to
 * the caller with the answer, also when the answer is read back from the store): an effect made
 * under a turn index the answer's turns carry, before the answer was given, is named by a call's
 * result in those turns or listed by a record the answer carries as happened or may have happened
 * (or the answer carries a record of that turn saying it was resumed: an earlier holder's attempts
 * may have had effects it does not name, RECORD-8).
 */
function judgeToldInAnswers(effects: Effect[], rows: LedgerRow[], answers: Told[]): string[] {
  const violations: string[] = [];
  const turnOf = new Map(rows.map((r) => [r.key, r.turnIndex]));
  for (const { who, messageId, answer, at } of answers) {
    if (answer.type !== "answered" || at === undefined) continue;
    const indexes = new Set(answer.result.turns.map((t) => t.turnIndex));
    const text = JSON.stringify(answer.result.turns);
    const records = answer.result.records ?? [];
    for (const e of effects) {
      const turnIndex = turnOf.get(e.key);
      if (turnIndex === undefined || !indexes.has(turnIndex) || (e.at ?? 0) > at) continue;
      if (text.includes(e.resourceId)) continue;
      const own = records.filter((r) => r.turnIndex === turnIndex);
      if (own.some((r) => r.resumed === true)) continue;
      if (own.some((r) => [...(r.effects ?? []), ...(r.calls ?? [])].some((c) => c.key === e.key && (c.effect === "happened" || c.effect === "may_have_happened")))) continue;
      violations.push(`untold answer: ${who} answered ${messageId} with turn ${turnIndex} and no word of ${e.resourceId} (key ${e.key}), made before the answer`);
    }
  }
  return violations;
}

export const describeScenario = (s: Scenario) =>
  `${s.family === "host" ? "host " : ""}seed ${s.seed}: ${s.provider}, ${s.ledger} ledger, ${s.store === "sqlite" ? "SQLite conversations, " : ""}"${s.content}", stopped ${s.crashAt === "at_call" ? `${s.call!.side === "commit" ? (inSqlite(s) ? "inside the transaction of" : "on the COMMIT of") : s.call!.side} ${s.call!.method} #${s.call!.n}` : `${s.crashAt} #${s.occurrence}`}, ` +
  `${s.action}${s.action === "kill" || s.action === "lose_reply" ? "" : ` ${s.faultMs} ms`}, rival ${s.rival}${s.rival === "none" ? "" : ` after ${s.rivalDelayMs} ms`}${describeModel(s.model)}`;

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
  /** When the parent received it (epoch ms). */
  at?: number;
}

/**
 * Counts the mock's calls of the drawn fault plan. None while first requests were served means the
 * provider dimension never ran: mock-openai once ignored `faultPlan`, and a build of it older
 * than that fix (dist/ is not rebuilt by tsx or vitest) still does, silently (every response "same").
 */
function counted(hooks: ModelHooks): { hooks: ModelHooks; consults: () => number } {
  let n = 0;
  const plan = hooks.faultPlan as (...args: unknown[]) => unknown;
  const faultPlan = (...args: unknown[]) => {
    n++;
    return plan(...args);
  };
  return { hooks: { ...hooks, faultPlan } as ModelHooks, consults: () => n };
}

/** Runs one scenario in a world of its own and judges it. */
export async function runScenario(s: Scenario): Promise<Verdict> {
  const t0 = Date.now();
  const lap = (what: string) => process.env.CHAOS_TRACE && console.log(`[chaos ${s.seed}] ${Date.now() - t0} ms ${what}`);
  const hooks = s.model !== undefined ? counted(modelHooks(s.provider, s.model)) : undefined;
  const world = await makeWorld({ provider: s.provider, ledger: s.ledger, store: s.store, storeProxy: s.store === "postgres", ...(s.model !== undefined && hooks !== undefined ? { model: hooks.hooks, ...(s.model.forceToolChoice === true ? { forceToolChoice: true } : {}) } : {}) });
  const violations: string[] = [];
  const answers: Told[] = [];
  let first = "";
  /** What the model answered to each first request, in order (for the summary line). */
  let responses: string[] = [];
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
      answers.push({ who: "runner A", messageId: "m1", answer: said, at: Date.now() });
    } else if (said.type === "reached") {
      first = `reached ${said.point}${said.detail !== undefined ? ` (${said.detail})` : ""}`;
      const proxy = world.proxy!;
      let fault: Promise<void> = Promise.resolve();
      const own = a.own;
      const both = (fault: (p: StoreProxy) => Promise<void>) => Promise.all([own.store, own.ledger].map((p) => (p === undefined ? undefined : fault(p)))).then(() => {});
      switch (s.action) {
        case "kill":
          await a.kill();
          lap(`killed runner A (pid ${a.child.pid})`);
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
      else answers.push({ who, messageId, answer, at: Date.now() });
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
        answers.push({ who: `settler (${m.id}, try ${tries})`, messageId: m.id, answer, at: Date.now() });
        lap(`settler ${m.id} try ${tries}: ${answer.type}`);
        // A turn failed by what the provider did says a re-send can help (RECORD-5's retryable): the user re-sends it (TURN-12).
        const again = answer.type === "refused" && (TRANSIENT.has(answer.code) || (s.model !== undefined && answer.code === "turn_failed" && answer.record?.retryable === true));
        if (!again || tries >= 5) {
          if (answer.type === "refused" && TRANSIENT.has(answer.code)) violations.push(`unsettled: ${m.id} still ${answer.code} after ${tries} re-sends: ${answer.message}`);
          break;
        }
        await sleep(LEASE_MS);
      }
    }
    // The parent's own reads can time out on a loaded machine (a reply beyond the reader's 5 s): read again.
    const audit = await auditAgain(() => world.audit(conversation));
    lap(`audited${audit.waitedMs > 0 ? ` after waiting ${audit.waitedMs} ms for a live lease` : ""}; in-flight leases end ${audit.rows.flatMap((r) => (r.state === "in_flight" ? [`${r.leaseExpiresAt - audit.at} ms`] : [])).join(", ") || "(none)"} from the judging`);
    violations.push(...audit.violations, ...judgeAnswers(audit.effects, answers));
    // TURN-7: an answer is the message's whole answer: every turn committed for it, whoever committed it.
    for (const { who, messageId, answer } of answers) {
      if (answer.type !== "answered") continue;
      const stored = (await world.store.turnsOf(conversation, messageId)).map((t) => t.turnIndex);
      const given = answer.result.turns.map((t) => t.turnIndex);
      if (JSON.stringify(given) !== JSON.stringify(stored)) violations.push(`partial answer: ${who} answered ${messageId} with turns [${given.join(", ")}], the store holds [${stored.join(", ")}]`);
    }
    // Each thing asked for happened once: an answered message's turns name one effect per thing it asked for, each made once.
    // With the provider dimension the model may ask for something else on a later response; then
    // judgeModel says what the spec allows (the strict count holds while every response asked as planned).
    const asked = world.asked();
    responses = asked.map((r) => `${r.outcome}${r.calls.length > 0 ? `(${r.calls.map((c) => `${c.name.replace("send_payment", "pay").replace("create_invoice", "inv").replace("check_balance", "read")} ${JSON.stringify(c.input.amount ?? "")}`.replace(/ ""$/, "")).join(", ")})` : r.outcome === "status" ? "" : "(text)"}`);
    for (const m of messages) {
      if (audit.messages[m.id] !== "answered") continue;
      const turns = await world.store.turnsOf(conversation, m.id);
      const named = new Set(JSON.stringify(turns).match(/\b(?:pay|inv)_[0-9a-f]{24}\b/g) ?? []);
      if (s.model !== undefined) violations.push(...judgeOneResponse(m.id, m.content, turns, asked));
      if (s.model !== undefined && !askedAsPlanned(asked, m.content, s.model)) {
        violations.push(...judgeCommitted(m.id, turns, audit.effects, s.model));
        continue;
      }
      if (named.size !== ASKED[m.content]) violations.push(`not done once: ${m.id} ("${m.content}") was answered naming ${named.size} effects (${[...named].join(", ")}), not ${ASKED[m.content]}`);
    }
    if (s.model !== undefined) violations.push(...judgeAsked(audit.effects, asked, messages, s.model));
    // A held first response (after_complete, kill) takes the queued hold instead of the plan.
    const served = asked.filter((r) => r.outcome !== "spliced").length;
    const held = s.crashAt === "after_complete" && s.action === "kill" ? 1 : 0;
    if (hooks !== undefined && hooks.consults() === 0 && served > held) {
      violations.push(`harness: the ${s.provider} mock served ${served} first request(s) and never consulted the drawn fault plan: the provider dimension did not run (a stale build of the mock? pnpm turbo run build --filter @dispatch-once/mock-${s.provider === "openai" ? "openai" : "provider"})`);
    }
    violations.push(...judgeToldInAnswers(audit.effects, audit.rows, answers));
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
      violations.push(`effects: ${JSON.stringify(audit.effects)}`, `rows: ${JSON.stringify(audit.rows.map((r) => [r.key, r.state, ...(r.state === "in_flight" ? [`fence ${r.fence}`, r.owner, `claimed ${r.claimedAt - t0} ms`, `lease ends ${r.leaseExpiresAt - t0} ms`] : [])]))} (judged at ${audit.at - t0} ms, after waiting ${audit.waitedMs} ms for leases)`, `messages: ${JSON.stringify(audit.messages)}`);
      violations.push(`records: ${JSON.stringify(audit.records)}`, `answers: ${JSON.stringify(answers)}`);
    }
  } finally {
    lap("closing");
    await world.close();
    lap("closed");
  }
  const told = answers.map(({ who, answer }) => `${who}: ${answer.type === "answered" ? "answered" : `refused ${answer.code}`}`).join("; ");
  return { scenario: describeScenario(s), violations, first: `${first}; told ${told}${s.model !== undefined ? `; model answered ${responses.join(" ")}` : ""}`, answers };
}

