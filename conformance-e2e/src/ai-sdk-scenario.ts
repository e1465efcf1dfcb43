import fc from "fast-check";
import type { CutKind, DownstreamFault, PlannedCall, SplicePlan, StreamCut } from "./scenario.js";

/**
 * A random scenario for the Vercel AI SDK profile (spec §13.2): chats whose server route runs
 * real `streamText` with tools wrapped by `createOnceTools`, against the mock Responses API.
 * There is no runner here: the app keeps its messages, counts its turns from them (AISDK-1),
 * re-sends the same messages after a mid-stream failure (AISDK-6), continues turns across
 * requests (approvals, client-side tool results: AISDK-9) and regenerates turns. Everything is
 * data, so fast-check can shrink it.
 */

/**
 * Where a response of the turn is cut: in the tool step (the response that makes the calls:
 * inside a call's arguments, right after its tool-call part, before response.completed), in the
 * follow-up step of the same request (a message with `followUp`: the response to step 1's
 * results, which makes more calls), or in the confirmation the model streams after the last tool
 * step finished (the chapter's incident).
 */
export interface AiSdkCut {
  phase: "tool_step" | "follow_up" | "confirmation";
  /**
   * Besides the kinds both providers' runs draw, `incomplete_event`: the mock's
   * `response.incomplete` (the model's output limit), which a test may plan (AISDK-8).
   */
  cut: StreamCut | WithKind<StreamCut, "incomplete_event">;
}

/** A cut of `T`'s positions with another kind. */
type WithKind<T, K extends string> = T extends unknown ? Omit<T, "kind"> & { kind: K } : never;

/**
 * A turn that spans requests (AISDK-1, AISDK-9): the first response waits for the user, who
 * approves its calls (`needsApproval`) or answers a client-side tool's question (`ask_user`, a
 * tool without `execute`); the app sends the answer in a new request of the same turn, whose
 * response makes the calls in `repeat` once more. The user asked for each twice: a repeat is
 * identical (same tool, same identity) to its call of the first request and is a second intent
 * with the same signature, which must run (a new ordinal) and not be answered with the first's
 * result. Under `approval` every call of the message needs approval, the repeats too, so the
 * turn takes three requests.
 */
export interface AiSdkContinuation {
  kind: "approval" | "client_tool";
  /** Indexes into the message's `calls`. */
  repeat: number[];
}

/**
 * The chat route's server process dying on a tool loop's follow-up call (its first execution):
 * before it calls the payments API, or after the payments API accepted it and before the ledger
 * completed its row. The process's stream to the client is cut there, and nothing it would still
 * do happens: its claim stays in flight until its lease lapses. The client then does what the AI
 * SDK profile says a client does after a cut stream: it re-sends the same messages (AISDK-6) or
 * regenerates the turn, and another process answers, which must meet the dead call's key (a
 * take-over, under the same ordinal: it follows the same earlier calls of the turn) and make the
 * payment at most once.
 */
export interface AiSdkDeath {
  when: "before_downstream" | "after_effect";
  /**
   * `first_call`: on the first call of the turn's first request (step 1) instead of the follow-up's
   * (a message with or without a loop; drawn last, `firstCallDeaths` in aiSdkScenarioArbitrary):
   * the next process's step 1 meets the dead call's key and takes it over. In an approval turn
   * that call first runs once the user approved it, in the turn's second request.
   *
   * `approved_call`: in an approval turn, on an approved call's run, which the AI SDK makes from
   * the history of the request that carries the user's approval, before it asks the model again:
   * the turn's first call in the second request, or (`repeat`) the first approved repeat in the
   * third (drawn after `first_call`, `approvalDeaths`). The client re-sends that request, the
   * approval with it, or regenerates the turn (the user approves again); the next process runs
   * the approved call from the history under the key the approval gave it, meets the dead claim
   * and takes it over.
   */
  on?: "first_call" | "approved_call";
  /** With `approved_call`: the death is on the approved repeat's run (the turn's third request). */
  repeat?: boolean;
}

export interface AiSdkMessagePlan {
  /** The user's text; the scripted model maps it to `calls`. Unique within its chat. */
  text: string;
  /** Distinct calls (their references or memos differ): each is one intent. */
  calls: PlannedCall[];
  /**
   * A tool loop inside the request (AISDK-1): once step 1's results are sent back, the model's
   * step 2 of the same `streamText` makes these calls, and only step 3 answers with text. Each is
   * an intent of its own; half the time it is one of `calls` exactly (the user asked for the same
   * payment twice, in two steps: a second intent with the same signature, whose ordinal follows
   * step 1's, so it must run, and a re-send of the request must give it the same key again).
   * Absent: the model answers step 1's results with text. With a `continuation`, the loop is in
   * the turn's last request: after the continuation's repeats ran (a client-side tool's turn:
   * step 1 of that request makes the repeats, step 2 the follow-up, which may repeat a call of
   * the turn's first request a third time; an approval turn: the approved repeats run, and the
   * model's next response makes a fresh call that needs no approval).
   */
  followUp?: PlannedCall[] | undefined;
  /** A death of the chat route's process on the follow-up's call (only with `followUp`), on step 1's first call (`on: "first_call"`), or on an approved call's run (`on: "approved_call"`). */
  death?: AiSdkDeath | undefined;
  /** The cut of each request attempt of this turn, in order (attempt n meets cuts[n - 1]). */
  cuts: AiSdkCut[];
  /** Downstream faults by call index (`calls`, then `followUp`), applied to the first execution of the call's signature. */
  downstream: Partial<Record<number, DownstreamFault>>;
  /** How often the app re-sends the same messages after a failed attempt (AISDK-6). */
  resends: number;
  /** After the turn settled, the user presses regenerate: the same user messages once more. */
  regenerate: boolean;
  /** Whether the turn goes on in a continuation request; undefined: answered in one request. */
  continuation?: AiSdkContinuation | undefined;
  /**
   * The model answers the turn differently once a request of it failed (a cut, a death, a failed
   * re-send): every later response to the turn's first step (the re-sends, the regenerate) omits
   * one of `calls` (an only call leaves a text answer, and no tool loop follows) or swaps the two
   * (no key changes: ordinals count identical calls only). A real model at temperature > 0 does
   * not repeat itself. The cut request may already have run the omitted call, and then the answer
   * the app keeps holds no trace of it: only `turn.unansweredCalls()` can tell (AISDK-14). Drawn
   * last (`rerunDivergence` in aiSdkScenarioArbitrary); only on turns without a continuation.
   */
  rerunDivergence?: AiSdkRerunDivergence | undefined;
  /**
   * A proxy's splice into the turn's request `attempt` (1-based over the turn's requests, as its
   * cuts count them) when no cut falls on it: after call `afterCall` (modulo the response's calls)
   * of the tool step's response completed, the body carries the response to the same request
   * again, with its own `response.created`, without it led by a sentence, or without it and without
   * a lead (SplicePlan's shapes). The AI SDK's provider takes it in as more of the first response;
   * the app's `spliceGuard()` (AISDK-16) must end the step failed there, and the app re-sends. Only
   * on turns without a continuation or a death. Drawn last (`splices` in aiSdkScenarioArbitrary).
   */
  splice?: AiSdkSplice | undefined;
  /**
   * A proxy's splice into the REGENERATE's request `attempt` (1-based over the regenerate's
   * requests; drawn as 1: its first), the user's re-ask of the settled turn, when no cut and no
   * `splice` falls on it: as `splice`, the response to the same request sent again spliced in
   * after call `afterCall` of the tool step's response completed. Only with `regenerate`, on turns
   * without a continuation or a death. Drawn after `splices` (`regenerateSplices` in
   * aiSdkScenarioArbitrary).
   */
  regenerateSplice?: AiSdkSplice | undefined;
  /**
   * This message repeats a call of an earlier message of its chat exactly (same tool and args, so
   * the same signature): "pay acme 42" ... later "pay acme 42 again". Two intents at two turn
   * indexes, which must both run (the turn index is in the key, AISDK-1), and neither may be
   * answered with the other's effect. `calls[call]` (and a tool loop's follow-up that was identical
   * to it) is now the earlier message's `calls[of.call]`; `drawn` keeps what the message asked for
   * before, so the draws' tests can compare the scenarios of before. Drawn after every other field
   * (`crossTurnRepeats` in aiSdkScenarioArbitrary); only between two messages neither of which has
   * an approval turn (an approval mark is in a call's identity).
   */
  repeatsEarlier?: AiSdkCrossTurnRepeat | undefined;
}

/** A later message's call identical to an earlier message's (AiSdkMessagePlan.repeatsEarlier). */
export interface AiSdkCrossTurnRepeat {
  /** The index of this message's call that repeats the earlier one. */
  call: number;
  /** The earlier message of the chat (its index in `messages`) and its call repeated. */
  of: { message: number; call: number };
  /** The message's calls and follow-up as drawn before the repeat replaced one. */
  drawn: { calls: PlannedCall[]; followUp?: PlannedCall[] | undefined };
}

/** A proxy's splice on the AI SDK profile (AiSdkMessagePlan.splice). */
export interface AiSdkSplice {
  attempt: 1 | 2;
  afterCall: number;
  shape: SplicePlan["shape"];
}

/** How the model answers a re-run of a turn (AiSdkMessagePlan.rerunDivergence). */
export type AiSdkRerunDivergence = { kind: "omit"; call: number } | { kind: "swap" };

/** The turn's responses (stepsOf) as the model answers a re-run: the first step's calls diverged; none left, a text answer. */
export function divergedStepsOf(message: AiSdkMessagePlan): { tool: string; args: Record<string, unknown> }[][] {
  const steps = stepsOf(message);
  const d = message.rerunDivergence;
  if (d === undefined || message.continuation !== undefined) return steps;
  const first = d.kind === "omit" ? message.calls.filter((_, i) => i !== d.call) : [...message.calls].reverse();
  return first.length === 0 ? [] : [first, ...steps.slice(1)];
}

/** What marks a call as needing approval: in its identity, so a re-worded memo does not change it. */
export const APPROVAL_MARK = "approve";

/** The model's responses of a turn, in order: each (but the last, text) makes calls. */
export function stepsOf(message: AiSdkMessagePlan): { tool: string; args: Record<string, unknown> }[][] {
  const first: { tool: string; args: Record<string, unknown> }[] = [...message.calls];
  const loop = message.followUp !== undefined && message.followUp.length > 0 ? [[...message.followUp]] : [];
  if (message.continuation === undefined) return [first, ...loop];
  if (message.continuation.kind === "client_tool") first.push({ tool: "ask_user", args: { question: "Pay the same again?" } });
  return [first, message.continuation.repeat.map((i) => message.calls[i]!), ...loop];
}

/** Which of the turn's scripted responses (stepsOf) is the tool loop's follow-up; undefined without one. */
export function followUpStepOf(message: AiSdkMessagePlan): number | undefined {
  return message.followUp !== undefined && message.followUp.length > 0 ? stepsOf(message).length - 1 : undefined;
}

/**
 * How many calls identical to the follow-up's first call the user asked for before it in the
 * turn (step 1's and a continuation's repeats): the follow-up is the next one, and a death
 * planned on it lands on the execution under the next distinct key of that call.
 */
export function callsBeforeFollowUp(message: AiSdkMessagePlan, same: (a: PlannedCall, b: PlannedCall) => boolean): number {
  const target = message.followUp?.[0];
  if (target === undefined) return 0;
  const before = [...message.calls, ...(message.continuation?.repeat ?? []).map((i) => message.calls[i]!)];
  return before.filter((c) => same(c, target)).length;
}

export interface AiSdkChatPlan {
  id: string;
  /** Where the wrapped tools run: when the step finishes (the AI SDK's way) or at the tool-call part (AISDK-4). */
  dispatchAt: "step" | "tool-call";
  messages: AiSdkMessagePlan[];
  /**
   * Other tabs of the chat (AISDK-17): each sends a new user message, under an id of its own, on the
   * history before `messages[at]`, so its request counts the same turn index as that message's.
   * Only a chat with tabs gives its user messages ids (as `useChat` does); the others send model
   * messages, which carry none. Drawn after every other field (`tabs` in aiSdkScenarioArbitrary).
   */
  tabs?: AiSdkTabs | undefined;
}

/**
 * Two or three tabs of one chat asking at the same turn index (AiSdkChatPlan.tabs): the chat's
 * message `at` is the first tab's ask, each of `others` another tab's. Each message's asks are its
 * own: the same payment asked in two tabs is two payments, and a regenerate of one (the same id)
 * is none more.
 */
export interface AiSdkTabs {
  /** The chat's message whose history the other tabs hold (its index in `messages`). */
  at: number;
  others: AiSdkTab[];
  /**
   * Once everything of the chat settled, the server's store, which kept every message it was sent,
   * is reloaded into one history (the first tab's messages, then each other tab's, one after the
   * other) and the user regenerates the last tab's message from it: the history counts that
   * message at a later index, and its calls must meet the keys of the turn at which it first
   * dispatched (AISDK-17: a message keeps its turn).
   */
  reload: boolean;
}

/** Another tab's message (AiSdkTabs.others). */
export interface AiSdkTab {
  /** Its plan: one request per attempt (no continuation, tool loop, death, splice or divergence). */
  message: AiSdkMessagePlan;
  /**
   * When the tab sends: `together` with the first tab's first request (before its stream is cut),
   * `after_first_request` once that request ended (after a cut, before its re-send), `later` once
   * the first tab's chat went on to its end (a stale tab).
   */
  when: "together" | "after_first_request" | "later";
  /** The tab's call `call` is the first tab's call `of`, exactly (the same payment asked in both), with what was drawn before. */
  same?: { call: number; of: number; drawn: PlannedCall } | undefined;
}

export interface AiSdkScenario {
  chats: AiSdkChatPlan[];
}

const PAYEES = ["acme", "globex", "initech"];
const CURRENCIES = ["EUR", "USD"];

function callArbitrary(chat: number, message: number | string, index: number, approval: boolean): fc.Arbitrary<PlannedCall> {
  const mark = approval ? `-${APPROVAL_MARK}` : "";
  const payment = fc.record({
    payee: fc.constantFrom(...PAYEES),
    amount: fc.integer({ min: 1, max: 99_999 }),
    currency: fc.constantFrom(...CURRENCIES),
    // Unique per call: an intent is one planned call, and its effects are found by it.
    reference: fc.constant(`c${chat}-m${message}-r${index}${mark}`),
    memo: fc.constantFrom("Invoice", "Monthly fee", "Refund"),
  });
  const invoice = fc.record({
    customer: fc.constantFrom(...PAYEES),
    amount: fc.integer({ min: 1, max: 99_999 }),
    currency: fc.constantFrom(...CURRENCIES),
    memo: fc.constant(`Services c${chat}m${message}i${index}${mark}`),
  });
  return fc.oneof(
    { weight: 3, arbitrary: payment.map((args): PlannedCall => ({ tool: "send_payment", args })) },
    { weight: 1, arbitrary: invoice.map((args): PlannedCall => ({ tool: "create_invoice", args })) },
  );
}

const cutKind = fc.constantFrom<CutKind>("reset", "reset", "clean_close", "error_event");

/** A cut of a response that makes `calls` calls. */
function toolStepCut(calls: number): fc.Arbitrary<StreamCut> {
  const call = fc.integer({ min: 0, max: calls - 1 });
  return fc.oneof(
    fc.record({ at: fc.constant("arguments" as const), toolUse: call, afterFragment: fc.integer({ min: 0, max: 2 }), kind: cutKind }),
    { weight: 2, arbitrary: fc.record({ at: fc.constant("after_call" as const), toolUse: call, kind: cutKind }) },
    fc.record({ at: fc.constant("before_message_stop" as const), kind: cutKind }),
    fc.record({ at: fc.constant("event" as const), event: fc.integer({ min: 0, max: 3 + calls * 5 }), kind: cutKind }),
  );
}

function cutArbitrary(calls: number, followUp: number): fc.Arbitrary<AiSdkCut> {
  const toolStep = toolStepCut(calls);
  // The confirmation has no calls: cut it while its text streams, or where response.completed goes.
  const confirmation = fc.oneof(
    { weight: 2, arbitrary: fc.record({ at: fc.constant("before_message_stop" as const), kind: cutKind }) },
    fc.record({ at: fc.constant("event" as const), event: fc.integer({ min: 2, max: 6 }), kind: cutKind }),
  );
  return fc.oneof(
    { weight: 3, arbitrary: toolStep.map((cut): AiSdkCut => ({ phase: "tool_step", cut })) },
    { weight: 2, arbitrary: confirmation.map((cut): AiSdkCut => ({ phase: "confirmation", cut })) },
    // Step 2 of a tool loop: the re-send replays step 1 from the ledger and makes step 2's calls again.
    ...(followUp > 0 ? [{ weight: 3, arbitrary: toolStepCut(followUp).map((cut): AiSdkCut => ({ phase: "follow_up", cut })) }] : []),
  );
}

/**
 * Mostly none (about one message in ten has one; each is a model request more, and CI runs this
 * on every push): step 2 of a tool loop inside the request. Half the time it repeats one of
 * step 1's calls exactly (both tools here are writes), else one fresh call.
 */
function followUpArbitrary(chat: number, message: number, calls: PlannedCall[], kind: AiSdkContinuation["kind"] | undefined): fc.Arbitrary<PlannedCall[] | undefined> {
  const fresh = callArbitrary(chat, message, calls.length, false).map((c) => [c]);
  // An approval turn's calls all need approval, so a repeat of one would wait for the user again
  // (a request more, not a step): after an approval turn's repeats, the follow-up is fresh.
  const loop = kind === "approval" ? fresh : fc.oneof(fc.constantFrom(...calls).map((c) => [c]), fresh);
  // With a continuation the loop comes in its last request: rarer still (each is two requests more).
  return fc.oneof({ weight: kind === undefined ? 6 : 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: loop });
}

/**
 * A death on a tool loop's follow-up call, in a third of the loops, mostly after its effect (the
 * payment made, its row left in flight). The client recovers as the profile says: the plan
 * re-sends or regenerates (a message with a death and neither gets a regenerate).
 */
const deathArbitrary: fc.Arbitrary<AiSdkDeath | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constantFrom<AiSdkDeath["when"]>("after_effect", "after_effect", "before_downstream").map((when) => ({ when })) },
);

// A quarter of the turns: each continuation is one or two requests more, and CI runs this on every push.
const continuationKind = fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constantFrom<AiSdkContinuation["kind"]>("approval", "client_tool") },
);

function messageArbitrary(chat: number, message: number): fc.Arbitrary<AiSdkMessagePlan> {
  return fc.tuple(fc.integer({ min: 1, max: 2 }), continuationKind).chain(([count, kind]) =>
    fc
      .tuple(...Array.from({ length: count }, (_, i) => callArbitrary(chat, message, i, kind === "approval")))
      .chain((calls) => followUpArbitrary(chat, message, calls as PlannedCall[], kind).map((followUp) => ({ calls: calls as PlannedCall[], followUp })))
      .chain(({ calls, followUp }) =>
      fc.record({
        text: fc.constant(`c${chat} message ${message}`),
        calls: fc.constant(calls),
        ...(followUp !== undefined ? { followUp: fc.constant(followUp), death: deathArbitrary } : {}),
        cuts: fc.array(cutArbitrary(calls.length, followUp?.length ?? 0), { maxLength: 3 }),
        downstream: fc.oneof(
          { weight: 2, arbitrary: fc.constant({}) },
          {
            weight: 1,
            arbitrary: fc
              .tuple(fc.integer({ min: 0, max: calls.length + (followUp?.length ?? 0) - 1 }), fc.constantFrom<DownstreamFault>("fail_before_accept", "drop_after_accept", "drop_after_accept"))
              .map(([i, fault]) => ({ [i]: fault })),
          },
        ) as fc.Arbitrary<Partial<Record<number, DownstreamFault>>>,
        resends: fc.integer({ min: 0, max: 2 }),
        regenerate: fc.boolean(),
        continuation:
          kind === undefined
            ? fc.constant(undefined)
            : fc
                .subarray(
                  calls.map((_, i) => i),
                  { minLength: 1 },
                )
                .map((repeat): AiSdkContinuation => ({ kind, repeat })),
      }),
    )
    // A client whose stream was cut by a death recovers: it re-sends, or else regenerates.
    .map((m): AiSdkMessagePlan => {
      const plan = m as AiSdkMessagePlan;
      if (plan.death === undefined) {
        const { death: _none, ...rest } = plan;
        return rest;
      }
      return plan.resends === 0 && !plan.regenerate ? { ...plan, regenerate: true } : plan;
    }),
  );
}

function chatArbitrary(chat: number): fc.Arbitrary<AiSdkChatPlan> {
  return fc.record({
    id: fc.constant(`chat-${chat}`),
    dispatchAt: fc.constantFrom<AiSdkChatPlan["dispatchAt"]>("step", "tool-call"),
    // Two messages reach the next turn's keys; more only cost time (CI runs this on every push).
    messages: fc.integer({ min: 1, max: 2 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, m) => messageArbitrary(chat, m)))),
  });
}

/** The most messages a scenario has (two chats of two): one draw of a step-1 death each. */
const MAX_MESSAGES = 4;

/**
 * Drawn after the chats, one per message slot, so every earlier draw of a seed (and the kit's
 * planted tests' scenarios) stays what it was: a death on step 1's first call, in about one
 * message in eight that has no other death, mostly after its effect. The client recovers as
 * after any death (a plan that neither re-sends nor regenerates gets a regenerate).
 */
const firstCallDeathArbitrary: fc.Arbitrary<AiSdkDeath["when"] | undefined> = fc.oneof(
  { weight: 7, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constantFrom<AiSdkDeath["when"]>("after_effect", "after_effect", "before_downstream") },
);

/**
 * Drawn after the step-1 deaths, one per message slot, for the same reason: a death on an approved
 * call's run in a third of the approval turns that have no other death (about one message in
 * twenty-five), mostly after its effect; half of them on the approved repeat (the third request).
 */
const approvalDeathArbitrary: fc.Arbitrary<{ when: AiSdkDeath["when"]; repeat: boolean } | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.record({ when: fc.constantFrom<AiSdkDeath["when"]>("after_effect", "after_effect", "before_downstream"), repeat: fc.boolean() }) },
);

/**
 * Drawn after every other field, one per message slot, so each seed's earlier draws (and the kit's
 * planted tests' scenarios) stay what they were: in about half the turns without a continuation,
 * the model answers a re-run without one of the first step's calls (two in three of them) or with
 * its two calls swapped. It shows only where a request of the turn failed and the turn was asked
 * again.
 */
const rerunDivergenceArbitrary: fc.Arbitrary<{ kind: "omit" | "swap"; call: number } | undefined> = fc.oneof(
  { weight: 1, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom<"omit" | "swap">("omit", "omit", "swap"), call: fc.integer({ min: 0, max: 1 }) }) },
);

function withDivergence(m: AiSdkMessagePlan, drawn: { kind: "omit" | "swap"; call: number } | undefined): AiSdkMessagePlan {
  if (drawn === undefined || m.continuation !== undefined) return m;
  // A swap needs two calls; with one, it omits it.
  if (drawn.kind === "swap" && m.calls.length === 2) return { ...m, rerunDivergence: { kind: "swap" } };
  return { ...m, rerunDivergence: { kind: "omit", call: Math.min(drawn.call, m.calls.length - 1) } };
}

/** A plan with a death recovers: one that neither re-sends nor regenerates gets a regenerate. */
function withDeath(m: AiSdkMessagePlan, death: AiSdkDeath): AiSdkMessagePlan {
  const plan: AiSdkMessagePlan = { ...m, death };
  return plan.resends === 0 && !plan.regenerate ? { ...plan, regenerate: true } : plan;
}

function withDeaths(m: AiSdkMessagePlan, when: AiSdkDeath["when"] | undefined, approved: { when: AiSdkDeath["when"]; repeat: boolean } | undefined): AiSdkMessagePlan {
  if (m.death !== undefined) return m;
  if (when !== undefined) return withDeath(m, { when, on: "first_call" });
  if (approved === undefined || m.continuation?.kind !== "approval") return m;
  return withDeath(m, { when: approved.when, on: "approved_call", ...(approved.repeat ? { repeat: true } : {}) });
}

/**
 * Drawn after every other field, one per message slot, for the same reason: a proxy's splice
 * (AiSdkMessagePlan.splice) in one slot in four, of the three shapes alike, mostly right after the
 * first call. Each costs one failed request and its re-send.
 */
const spliceArbitrary: fc.Arbitrary<AiSdkSplice | undefined> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  {
    weight: 1,
    arbitrary: fc.record({
      attempt: fc.constantFrom<AiSdkSplice["attempt"]>(1, 2),
      afterCall: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constant(1) }),
      shape: fc.constantFrom<AiSdkSplice["shape"]>("restart", "headless", "headless_bare"),
    }),
  },
);

/** A splice only on a turn of one request (no continuation) without a death: it fails one request, which the app re-sends. */
function withSplice(m: AiSdkMessagePlan, splice: AiSdkSplice | undefined): AiSdkMessagePlan {
  if (splice === undefined || m.continuation !== undefined || m.death !== undefined) return m;
  return { ...m, splice };
}

/**
 * Drawn after the splices, one per message slot: a splice into the regenerate's first request
 * (AiSdkMessagePlan.regenerateSplice) in half the slots, of the three shapes alike, mostly right
 * after the first call. Only a turn the user regenerates has one (about one in two).
 */
const regenerateSpliceArbitrary: fc.Arbitrary<AiSdkSplice | undefined> = fc.oneof(
  { weight: 1, arbitrary: fc.constant(undefined) },
  {
    weight: 1,
    arbitrary: fc.record({
      attempt: fc.constant<AiSdkSplice["attempt"]>(1),
      afterCall: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constant(1) }),
      shape: fc.constantFrom<AiSdkSplice["shape"]>("restart", "headless", "headless_bare"),
    }),
  },
);

/** A splice into a regenerate only on a turn the user regenerates, of one request (no continuation), without a death. */
function withRegenerateSplice(m: AiSdkMessagePlan, splice: AiSdkSplice | undefined): AiSdkMessagePlan {
  if (splice === undefined || !m.regenerate || m.continuation !== undefined || m.death !== undefined) return m;
  return { ...m, regenerateSplice: splice };
}

/** The most chats a scenario has: one draw of a cross-turn repeat each. */
const MAX_CHATS = 2;

/**
 * Drawn after every other field, one per chat slot, so each seed's earlier draws (and the kit's
 * planted tests' scenarios) stay what they were: in half the chats whose two messages have no
 * approval turn, the second message's call `call` (modulo its calls) is the first message's call
 * `of` (modulo its calls), exactly.
 */
const crossTurnRepeatArbitrary: fc.Arbitrary<{ call: number; of: number } | undefined> = fc.oneof(
  { weight: 1, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.record({ call: fc.integer({ min: 0, max: 1 }), of: fc.integer({ min: 0, max: 1 }) }) },
);

const sameCall = (a: PlannedCall, b: PlannedCall) => a.tool === b.tool && JSON.stringify(a.args) === JSON.stringify(b.args);

/** The chat's second message repeats a call of its first (AiSdkMessagePlan.repeatsEarlier), where the draw and the turns allow it. */
function withCrossTurnRepeat(chat: AiSdkChatPlan, drawn: { call: number; of: number } | undefined): AiSdkChatPlan {
  const [first, second] = chat.messages;
  if (drawn === undefined || first === undefined || second === undefined) return chat;
  // An approval turn's calls carry the approval mark in their identity: a repeat of one (or one in
  // an approval turn) would need an approval its turn does not plan.
  if (first.continuation?.kind === "approval" || second.continuation?.kind === "approval") return chat;
  const call = drawn.call % second.calls.length;
  const of = drawn.of % first.calls.length;
  const earlier = first.calls[of]!;
  const replaced = second.calls[call]!;
  const calls = second.calls.map((c, i) => (i === call ? earlier : c));
  // A tool loop's follow-up that repeated the replaced call exactly repeats it still.
  const followUp = second.followUp?.map((c) => (sameCall(c, replaced) ? earlier : c));
  const repeatsEarlier: AiSdkCrossTurnRepeat = { call, of: { message: 0, call: of }, drawn: { calls: second.calls, ...(second.followUp !== undefined ? { followUp: second.followUp } : {}) } };
  return { ...chat, messages: [first, { ...second, calls, ...(followUp !== undefined ? { followUp } : {}), repeatsEarlier }] };
}

/** The scenario as drawn before its cross-turn repeats (the draws' tests compare it with the scenarios of before). */
export function withoutCrossTurnRepeats(scenario: AiSdkScenario): AiSdkScenario {
  return {
    ...scenario,
    chats: scenario.chats.map((chat) => ({
      ...chat,
      messages: chat.messages.map(({ repeatsEarlier, ...m }) => (repeatsEarlier === undefined ? m : { ...m, calls: repeatsEarlier.drawn.calls, ...(repeatsEarlier.drawn.followUp !== undefined ? { followUp: repeatsEarlier.drawn.followUp } : {}) })),
    })),
  };
}

/**
 * Drawn after every other field, one per chat slot, so each seed's earlier draws (and the kit's
 * planted tests' scenarios) stay what they were: in one chat in four, one other tab (three in four
 * of them) or two, each with one or two calls of its own, the first of which is the first tab's
 * call exactly in two tabs in three (the same payment asked in both); each may be cut, re-sent
 * and regenerated; in half of them a reload of the store regenerates the last tab's message.
 */
function tabsArbitrary(chat: number): fc.Arbitrary<{ at: number; others: AiSdkTab[]; reload: boolean } | undefined> {
  const tab = (k: number) =>
    fc.integer({ min: 1, max: 2 }).chain((count) =>
      fc
        .tuple(...Array.from({ length: count }, (_, i) => callArbitrary(chat, `t${k}`, i, false)))
        .chain((calls) =>
          fc.record({
            message: fc.record({
              text: fc.constant(`c${chat} tab ${k}`),
              calls: fc.constant(calls as PlannedCall[]),
              cuts: fc.array(cutArbitrary(calls.length, 0), { maxLength: 2 }),
              downstream: fc.oneof(
                { weight: 3, arbitrary: fc.constant({}) },
                {
                  weight: 1,
                  arbitrary: fc
                    .tuple(fc.integer({ min: 0, max: calls.length - 1 }), fc.constantFrom<DownstreamFault>("fail_before_accept", "drop_after_accept"))
                    .map(([i, fault]) => ({ [i]: fault })),
                },
              ) as fc.Arbitrary<Partial<Record<number, DownstreamFault>>>,
              resends: fc.integer({ min: 0, max: 2 }),
              regenerate: fc.boolean(),
            }),
            when: fc.constantFrom<AiSdkTab["when"]>("together", "after_first_request", "later"),
            same: fc.oneof({ weight: 1, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: fc.record({ call: fc.integer({ min: 0, max: 1 }), of: fc.integer({ min: 0, max: 1 }) }) }),
          }),
        ),
    );
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.record({
        at: fc.integer({ min: 0, max: 1 }),
        others: fc.oneof({ weight: 3, arbitrary: fc.tuple(tab(2)) }, { weight: 1, arbitrary: fc.tuple(tab(2), tab(3)) }),
        reload: fc.boolean(),
      }),
    },
  ) as fc.Arbitrary<{ at: number; others: AiSdkTab[]; reload: boolean } | undefined>;
}

/** The chat's other tabs (AiSdkChatPlan.tabs), where drawn: forked at message `at` (modulo its messages), their copies of its call made. */
function withTabs(chat: AiSdkChatPlan, drawn: { at: number; others: { message: AiSdkMessagePlan; when: AiSdkTab["when"]; same?: { call: number; of: number } | undefined }[]; reload: boolean } | undefined): AiSdkChatPlan {
  if (drawn === undefined) return chat;
  const at = drawn.at % chat.messages.length;
  const fork = chat.messages[at]!;
  const others = drawn.others.map((tab): AiSdkTab => {
    const text = `c${chat.id.slice("chat-".length)} message ${at} ${tab.message.text.split(" ").slice(1).join(" ")}`;
    const message = { ...tab.message, text };
    // An approval turn's calls carry the approval mark in their identity: a copy would need an approval the tab does not plan.
    if (tab.same === undefined || fork.continuation?.kind === "approval") return { message, when: tab.when };
    const call = tab.same.call % message.calls.length;
    const of = tab.same.of % fork.calls.length;
    const calls = message.calls.map((c, i) => (i === call ? fork.calls[of]! : c));
    return { message: { ...message, calls }, when: tab.when, same: { call, of, drawn: message.calls[call]! } };
  });
  return { ...chat, tabs: { at, others, reload: drawn.reload } };
}

/** The scenario as drawn before the tabs (the draws' tests compare it with the scenarios of before). */
export function withoutTabs(scenario: AiSdkScenario): AiSdkScenario {
  return { ...scenario, chats: scenario.chats.map(({ tabs: _tabs, ...chat }) => chat) };
}

/** The scenario without a proxy's splices (AiSdkMessagePlan.splice, .regenerateSplice): the mock has none on Chat Completions. */
export function withoutAiSdkSplices(scenario: AiSdkScenario): AiSdkScenario {
  const plain = ({ splice: _splice, regenerateSplice: _again, ...message }: AiSdkMessagePlan): AiSdkMessagePlan => message;
  return {
    ...scenario,
    chats: scenario.chats.map((chat) => ({
      ...chat,
      messages: chat.messages.map(plain),
      ...(chat.tabs === undefined ? {} : { tabs: { ...chat.tabs, others: chat.tabs.others.map((t) => ({ ...t, message: plain(t.message) })) } }),
    })),
  };
}

/** A chat's messages and its other tabs' (AiSdkChatPlan.tabs): every message whose asks are the chat's. */
export function messagesOf(chat: AiSdkChatPlan): AiSdkMessagePlan[] {
  return [...chat.messages, ...(chat.tabs?.others ?? []).map((t) => t.message)];
}

export function aiSdkScenarioArbitrary(): fc.Arbitrary<AiSdkScenario> {
  return fc
    .tuple(
      fc.integer({ min: 1, max: 2 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, c) => chatArbitrary(c)))),
      fc.array(firstCallDeathArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      fc.array(approvalDeathArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      fc.array(rerunDivergenceArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // Last, so every earlier draw of a seed stays (the splices of the runner profile's scenarios likewise).
      fc.array(spliceArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After the splices, for the same reason: a splice into the regenerate, the user's re-ask.
      fc.array(regenerateSpliceArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After those, for the same reason: a later message asks for an earlier message's call again.
      fc.array(crossTurnRepeatArbitrary, { minLength: MAX_CHATS, maxLength: MAX_CHATS }),
      // After those, for the same reason: other tabs of the chat ask at one of its turns (AISDK-17).
      fc.tuple(...Array.from({ length: MAX_CHATS }, (_, c) => tabsArbitrary(c))),
    )
    .map(([chats, firstCallDeaths, approvalDeaths, divergences, splices, regenerateSplices, crossTurnRepeats, tabs]) => {
      let slot = 0;
      return {
        chats: chats.map((chat, c) => withTabs(withCrossTurnRepeat({
          ...chat,
          messages: chat.messages.map((m): AiSdkMessagePlan => {
            const when = firstCallDeaths[slot];
            const approved = approvalDeaths[slot];
            const splice = splices[slot];
            const regenerateSplice = regenerateSplices[slot];
            const diverged = divergences[slot++];
            return withRegenerateSplice(withSplice(withDivergence(withDeaths(m, when, approved), diverged), splice), regenerateSplice);
          }),
        }, crossTurnRepeats[c]), tabs[c])),
      };
    });
}
