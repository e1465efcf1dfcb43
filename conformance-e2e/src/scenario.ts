import fc from "fast-check";

/**
 * A random end-to-end scenario (issue 6 level 2, issue 12): conversations of tool calls run
 * through the real turn runner, SDK, mock provider and mock payments, with faults at every
 * position the spec names, every replay route, distinct messages sent together, re-asks after a
 * failed turn and results that cannot be stored. Everything here is data, so fast-check can
 * shrink it.
 */

export type ToolName = "send_payment" | "void_payment" | "create_invoice" | "search_payments";

export interface PlannedCall {
  tool: ToolName;
  args: Record<string, unknown>;
}

/** Where the provider cuts a response (spec STREAM-2 positions, plus raw event numbers). */
export type StreamCut =
  | { at: "event"; event: number; kind: CutKind }
  | { at: "arguments"; toolUse: number; afterFragment: number; kind: CutKind }
  | { at: "after_call"; toolUse: number; kind: CutKind }
  | { at: "before_message_stop"; kind: CutKind };

export type CutKind = "reset" | "clean_close" | "error_event";

/**
 * Where the downstream call fails (applied once, to the first execution of the call).
 * `drop_after_accept` is the lost response: the effect is committed, the caller hears nothing.
 */
export type DownstreamFault = "fail_before_accept" | "drop_after_accept";

/**
 * A worker process dying mid-dispatch (its claim and its turn lease stay held until they lapse),
 * or stalling there past its turn lease (a long pause): the queue redelivers the message to
 * another worker, which takes the conversation over; the stalled one wakes up, finishes its
 * call and finds its commit refused (TURN-13).
 *
 * `after_release`: the worker dies right after its dispatcher released the call's claim (its
 * payments response was lost, `drop_after_accept`: the payment happened and the row says
 * `released`), before it records anything. Drawn last (`releaseDeaths` in scenarioArbitrary), only
 * for a message without another death whose re-run the model answers without that call
 * (rerunDivergence): the take-over commits without answering the key, and only its resumed turn's
 * listing of the ledger rows, where the row is `released`, can tell of the payment (RECORD-8).
 */
export type WorkerDeath = {
  /** Call index: the first turn's calls, then the follow-up's (a death in a later turn of the tool loop). */
  call: number;
  when: "before_downstream" | "after_response_before_complete" | "stall_before_downstream" | "after_release";
};

/**
 * How the model answers a RE-RUN of a message's first turn differently from its first response
 * (a real model at temperature > 0 does not repeat itself): it `omit`s one call the first
 * response made (the cut attempt may already have run it: its payment happened and the committed
 * turn does not answer it), or `swap`s two different calls (their keys do not change: the
 * ordinal counts identical calls only, TURN-4). Indexes are taken modulo the first turn's calls
 * when the plan is applied (`divergedCalls`). A re-run is any later response to the same request
 * (a retry after a cut, a client re-send, a take-over after a death or a stall) and a re-ask's
 * first turn (TURN-12: the failed index again).
 */
export type RerunDivergence = { kind: "omit"; call: number } | { kind: "swap"; first: number; second: number };

export type ReplayRoute = "automatic_retry" | "client_resend" | "queue_redelivery" | "double_send";

/**
 * A proxy that sent the request again after its upstream died splices the new response (the
 * model's answer to the request sent again: a re-run, so `rerunDivergence` applies to it) into
 * the body, right after call `afterCall` of the response completed (taken modulo its calls: the
 * call was dispatched, the payment may be made). `restart`: the spliced response comes with its
 * own `message_start` / `response.created` (STREAM-8's shape); `headless`: without, led by a
 * sentence whose text block / message item lands on the position of the response's first item
 * (its thinking block or reasoning item: on both sides a response with calls opens with one;
 * STREAM-17's shape); `headless_bare`: without its start and without a lead, so its first item
 * lands on a held item of its own type (its thinking block on the held thinking block, on the
 * OpenAI side its reasoning item on the held reasoning item, then its first call on the first
 * call): only what the item names tells it apart (STREAM-10). `reorder`: the spliced response makes its first two different calls in the
 * other order (a model answering again need not keep its order), so that taken in, the call that
 * ran comes again at a new position, under the next ordinal. Falls on the message's first-turn
 * request of attempt `attempt` when no cut is planned for that attempt (`splices` in
 * scenarioArbitrary, drawn after every other field; `bareSplices`, drawn after it, makes half of
 * the headless ones `headless_bare`). The splice itself is the mocks' `splice` fault.
 *
 * `repeat` is no second response: a relay that renumbers what it re-sends delivers call
 * `afterCall` of the response (taken modulo its calls) again, whole (its id, name and arguments),
 * at the next free position, after the response's last item, and the response then finishes
 * (STREAM-10's whole repeat: the one call delivered again, which a stream side on the Messages API
 * and the Responses API must fail the stream at and never dispatch). Taken in, it runs again under
 * the next ordinal: one ask, two payments. Drawn last of all (`repeats` in scenarioArbitrary), into
 * a first-turn request of a message no other splice falls on, `reorder` false. The mocks'
 * `repeat_call` fault; not on Chat Completions, where STREAM-10 makes the check a MAY.
 */
export interface SplicePlan {
  attempt: 1 | 2;
  afterCall: number;
  shape: "restart" | "headless" | "headless_bare" | "repeat";
  reorder: boolean;
}

export interface MessagePlan {
  /** The user's text; the scripted model maps it to `calls`. Unique within its conversation. */
  text: string;
  calls: PlannedCall[];
  /**
   * Calls of the tool loop's next turn (a real agent's search, then payment): once the first
   * turn's results are sent back, the scripted model's next response makes these, and only then
   * answers with text. Each is an intent of its own; one may repeat a first-turn call exactly
   * (the user asked for two identical payments in two steps: both must happen, each once).
   * Absent or empty: the model answers the first turn's results with text.
   */
  followUp?: PlannedCall[];
  /** Provider faults for the first responses to the follow-up turn's request (one per attempt). */
  followUpCuts?: StreamCut[];
  /** Provider faults for the first responses to this turn's request (one per attempt). */
  cuts: StreamCut[];
  /** Downstream faults by call index: the first turn's calls, then the follow-up's. */
  downstream: Partial<Record<number, DownstreamFault>>;
  death: WorkerDeath | undefined;
  /**
   * A downstream fault on the RE-RUN of the dead call (only with a death after its effect,
   * `after_response_before_complete`): the dead worker's payment happened and its row stayed in
   * flight; the take-over (or a re-ask at the failed index) runs the call again under the same
   * key, and that second execution meets this fault: a 5xx before the payments API accepts the
   * retry, or the retry's response lost. What is committed and recorded must still say the call
   * happened or may have (an earlier run acted): never failed, never not happened.
   */
  rerunFault?: DownstreamFault;
  /**
   * A provider outage that outlasts every retry and re-send: from the second request for this
   * message's turn on, every response is cut here. With a death after a call's effect and a cut
   * before that call, no later attempt reaches it: the dead worker's effect is known only to the
   * downstream and the ledger, and the message ends failed (issue 12: every effect of every
   * attempt must still be accounted for, RECORD-5, RECORD-6).
   */
  outage: StreamCut | undefined;
  /**
   * The outage hits the follow-up turn's requests instead (from its second request on): the first
   * turn commits, and a later turn whose holder died after an effect is reached by no re-run.
   */
  outageOnFollowUp?: boolean;
  /**
   * Call indexes whose result cannot be stored (LEDGER-10): the effect happens, the ledger row
   * fails closed with result_not_storable and the turn fails without a retry. Indexes count the
   * first turn's calls, then the follow-up's.
   */
  unstorable: number[];
  route: ReplayRoute;
  /**
   * Sent at the same moment as the previous message of the conversation, by another worker
   * (TURN-9: two distinct messages close together). Groups hold at most two messages.
   */
  concurrent: boolean;
  /**
   * When the message ends failed, the user asks again in a new message with the same request
   * (the model re-words the memo): TURN-12 gives it the failed turn's index, so it is answered
   * from the ledger and pays nothing new. Only for a message sent alone.
   *
   * A tool loop that failed in its follow-up turn committed its first turn: those calls are
   * answered in the log the model reads, and the failed turn's index is the follow-up's. The
   * re-ask then takes that index (TURN-12) and the model asks again for what did not finish, the
   * follow-up's calls (re-worded): the same tool, identity and ordinal at the same index are the
   * failed turn's keys, so what the dead or failed turn paid is answered from the ledger and paid
   * once, and what it never reached is paid now. A loop that failed in its first turn is asked
   * again whole: its first turn at the failed index, its follow-up at the next (which nothing
   * reached before). Either way each call the user asked for happens once (case.ts, oracle.ts).
   */
  reask: boolean;
  /**
   * The model answers a re-run of this message's first turn with other calls (see
   * RerunDivergence): absent, every re-run makes the same calls (only the memo re-worded).
   */
  rerunDivergence?: RerunDivergence;
  /**
   * Only with a death `after_release` on a call every re-run makes again (no divergence): the
   * worker that next runs the released row's key (the re-send's, which claims the released row)
   * dies too, before the payments API or after it answered (the payment already made: it replays
   * it) and before the ledger completed; a third worker takes that claim over once it lapsed and
   * finishes. Two deaths around one released row: one payment, told once.
   */
  releaseRerunDeath?: "before_downstream" | "after_response_before_complete";
  /**
   * The model answers a re-run of this message's follow-up turn (the tool loop's next request:
   * a retry after a cut there, a take-over after a death or a stall there) with other calls than
   * its first response to it (as rerunDivergence, indexes modulo the follow-up's calls; an only
   * call omitted leaves a text answer). Absent, every re-run of the follow-up makes its calls again.
   */
  followUpDivergence?: RerunDivergence;
  /**
   * A client reuses this message's id for another request (TURN-20): once the message's own sends
   * settled (answered, failed, or left in flight), a send under its id with other content (the
   * user's text with another amount). The runner must refuse it with `message_id_reused` before it
   * appends, reopens or drives anything: the stored message keeps its content and state, and the
   * send is told neither that message's answer nor its failure. Only for a message sent alone,
   * before any re-ask. Drawn last (`reuses` in scenarioArbitrary).
   */
  reusedId?: boolean;
  /** A proxy's splice into one of the first turn's responses (SplicePlan). Drawn last (`splices` in scenarioArbitrary). */
  splice?: SplicePlan;
  /**
   * A proxy's splice into one of the tool loop's follow-up responses (the request that sends the
   * first turn's results back; SplicePlan, its `attempt` counting that request's attempts and
   * `afterCall` the follow-up's calls; the spliced response is the model's answer to the follow-up
   * sent again, where `followUpDivergence` applies). Only on a message with a follow-up. Drawn after
   * the splices (`followUpSplices` in scenarioArbitrary).
   */
  followUpSplice?: SplicePlan;
  /**
   * A proxy's splice into the first-turn request of this message's RE-ASK (`reask`: the new
   * message with the same request after the message failed, TURN-12; its first turn is the whole
   * request asked again, or the follow-up's calls when the loop failed there). SplicePlan, its
   * `attempt` counting the re-ask's requests (drawn as 1: a re-ask's requests carry no planned
   * cut) and `afterCall` the re-ask's first-turn calls; the spliced response is the model's answer
   * to the re-ask sent again (its own calls: the re-ask's re-runs repeat it). Only on a message
   * that re-asks and is sent alone. Drawn after the follow-up's splices (`reaskSplices` in
   * scenarioArbitrary).
   */
  reaskSplice?: SplicePlan;
  /**
   * A call a re-run of the first turn leaves out that the model makes again in the message's next
   * turn (DeferredCall; TURN-23). Its follow-up (`followUp`) is made for it. Drawn after every
   * other field (`deferrals` in scenarioArbitrary).
   */
  deferred?: DeferredCall;
  /**
   * A deploy while this message is unanswered (IDENT-10, IDENT-11): once its first send (or
   * sends, by its replay route) settled without an answer (a worker died, the turn failed, a send
   * was cut short), every worker the case starts for its conversation from then on runs a new
   * release whose payment tool is defined otherwise (DeployKind): the take-over, the client's
   * re-sends and a re-ask run the turn again under it. Drawn after every other field (`deploys`
   * in scenarioArbitrary); only on a message with a payment.
   */
  deploy?: DeployKind;
}

/**
 * How the new release (MessagePlan `deploy`) defines the payment tool, each keying the same call
 * otherwise than the release before it (IDENT-4), each with the earlier request still valid:
 * - `identity`: a field with a default (`channel`, "sepa") added to the input and the identity;
 * - `transform`: the payee given as an account id (`acct:` prefixed) by a schema transform, so the
 *   key is taken over another value (the tool strips the prefix for the payments API);
 * - `rename`: the tool is renamed (`send_payment` to `pay`), listing the old name in `formerNames`
 *   (IDENT-11); the model is offered the new name only and calls it.
 * A re-run under the new release derives a new key for a call the earlier release claimed: only the
 * dispatcher's guard (a resumed turn's listing of its rows) finds the row and answers it.
 */
export type DeployKind = "identity" | "transform" | "rename";

/**
 * A deploy on a message that makes a payment (MessagePlan `deploy`), one that defers a call to its
 * next turn (`deferred`, TURN-23 across a deploy) included; none elsewhere.
 */
function withDeploy(plan: MessagePlan, deploy: DeployKind | undefined): MessagePlan {
  if (deploy === undefined || !plannedCalls(plan).some((c) => c.tool === "send_payment")) return plan;
  return { ...plan, deploy };
}

/** A plan without its deploy: as drawn before `deploys`. */
export function withoutDeploy(plan: MessagePlan): MessagePlan {
  if (plan.deploy === undefined) return plan;
  const { deploy: _, ...rest } = plan;
  return rest;
}

/**
 * A call the model defers to a later turn of the same message (TURN-23): the message's first-turn
 * re-runs omit call `call` (rerunDivergence `omit`, a payment), and once the first turn's results
 * are back the model makes it in its next response (MessagePlan `followUp`, made for it):
 * - `same`: the same call, as first asked;
 * - `reworded`: the same call, its memo re-worded (outside the payment's identity, IDENT-1);
 * - `other_payee`: the same words to another payee: another payment, which must run;
 * - `twice`: the same call, then once more, re-worded (the user asks for it twice on purpose).
 * When the committed first turn answered the call (no re-run, or one that made it), the follow-up's
 * call is a second ask the model made having seen the first: both must run. When it left the call
 * unanswered after an attempt that ran it, the follow-up's call is the same ask made again: one
 * payment, answered from the first turn's row (carriedFromTurn). The oracle counts a message's
 * intents across its turns so (oracle.ts `deferredAllowance`).
 */
export interface DeferredCall {
  call: number;
  kind: "same" | "reworded" | "other_payee" | "twice";
}

/** The follow-up a deferral makes (DeferredCall): the omitted call again, as its kind says. */
export function deferredFollowUp(call: PlannedCall, kind: DeferredCall["kind"]): PlannedCall[] {
  const reworded: PlannedCall = { tool: call.tool, args: { ...call.args, memo: `${String(call.args.memo)} (as asked earlier)` } };
  switch (kind) {
    case "same":
      return [call];
    case "reworded":
      return [reworded];
    case "other_payee": {
      const payee = PAYEES[(PAYEES.indexOf(String(call.args.payee)) + 1) % PAYEES.length]!;
      return [{ tool: call.tool, args: { ...call.args, payee } }];
    }
    case "twice":
      return [call, reworded];
  }
}

/**
 * Where a message can defer a call (DeferredCall): its first-turn re-runs omit a payment of two or
 * more calls (an only call omitted would leave a text answer, and no follow-up), it has no tool loop
 * of its own, and it is not re-asked (a re-ask is another message: TURN-23 carries nothing into it,
 * and the oracle counts a message's intents across its own turns). Nothing else of the plan changes:
 * `withoutDeferral` gives the plan as drawn.
 */
export function withDeferral(plan: MessagePlan, kind: DeferredCall["kind"] | undefined): MessagePlan {
  const d = plan.rerunDivergence;
  if (kind === undefined || d?.kind !== "omit" || plan.calls.length < 2 || (plan.followUp ?? []).length > 0 || plan.reask) return plan;
  const call = d.call % plan.calls.length;
  const omitted = plan.calls[call]!;
  if (omitted.tool !== "send_payment") return plan;
  return { ...plan, followUp: deferredFollowUp(omitted, kind), deferred: { call, kind } };
}

/** A plan without its deferral (the follow-up made for it taken out): as drawn before `deferrals`. */
export function withoutDeferral(plan: MessagePlan): MessagePlan {
  if (plan.deferred === undefined) return plan;
  const { deferred: _, followUp: __, ...rest } = plan;
  return rest;
}

/**
 * The scenario without a proxy's splices (SplicePlan: into a message's first request, its tool
 * loop's follow-up request, a re-ask's), as for a stream side whose mock has none: apps/mock-openai
 * refuses `splice` on Chat Completions streams (provider `openai-chat`). Every other draw of the
 * seed stays what it was.
 */
export function withoutSplices(scenario: Scenario): Scenario {
  return {
    ...scenario,
    conversations: scenario.conversations.map((c) => ({
      ...c,
      messages: c.messages.map((m) => {
        if (m.splice === undefined && m.followUpSplice === undefined && m.reaskSplice === undefined) return m;
        const { splice: _, followUpSplice: __, reaskSplice: ___, ...rest } = m;
        return rest;
      }),
    })),
  };
}

/** The read a Chat Completions model makes after a response's writes (withClosingSearch). */
const CLOSING_SEARCH: PlannedCall = { tool: "search_payments", args: {} };

/** Whether a turn's calls pay (a write among them) and do not already end with a read. */
function endsOnWrite(calls: PlannedCall[]): boolean {
  return calls.some((c) => c.tool !== "search_payments") && calls[calls.length - 1]?.tool !== "search_payments";
}

/** A divergence resolved on `calls` (its indexes taken modulo their count), or undefined where it changes nothing there. */
function resolvedDivergence(calls: PlannedCall[], followUp: PlannedCall[] | undefined, d: RerunDivergence | undefined): RerunDivergence | undefined {
  if (d === undefined || divergedCalls({ calls, followUp, rerunDivergence: d }) === undefined) return undefined;
  return d.kind === "omit" ? { kind: "omit", call: d.call % calls.length } : { kind: "swap", first: d.first % calls.length, second: d.second % calls.length };
}

/**
 * The scenario as a Chat Completions model plays it (provider `openai-chat`): a turn whose calls pay
 * ends with a read, `search_payments` (as the demo's chat model checks the balance after a
 * payment), in its first turn and in its tool loop's next. On this API a call is dispatched at the
 * next call's first fragment or at `finish_reason`, which ends the response (STREAM-20): without a
 * call after it, a turn's last payment is dispatched only once its response has finished, and no
 * cut can fail the attempt that ran it; with one, a cut drawn after the payment (`after_call`), or
 * before the end of the response, falls between the two calls, as such a cut does on the other
 * sides (the attempt dispatched the payment and fails). The read has no effect and is no intent;
 * every index a plan names keeps naming the call it named (a fault or death on a follow-up call
 * moves up by one; a divergence is resolved on the turn's own calls, so it never omits or swaps
 * the read). Every draw of a seed stays what it was: only the scenario made of them changes.
 */
export function withClosingSearch(scenario: Scenario): Scenario {
  return {
    ...scenario,
    conversations: scenario.conversations.map((c) => ({
      ...c,
      messages: c.messages.map((m) => {
        const followUp = m.followUp ?? [];
        const first = endsOnWrite(m.calls);
        const loop = followUp.length > 0 && endsOnWrite(followUp);
        if (!first && !loop) return m;
        const n = m.calls.length;
        const shift = (i: number) => (first && i >= n ? i + 1 : i);
        const plan: MessagePlan = {
          ...m,
          calls: first ? [...m.calls, CLOSING_SEARCH] : m.calls,
          downstream: Object.fromEntries(Object.entries(m.downstream).map(([i, f]) => [shift(Number(i)), f])),
          unstorable: m.unstorable.map(shift),
          death: m.death === undefined ? undefined : { ...m.death, call: shift(m.death.call) },
        };
        if (loop) plan.followUp = [...followUp, CLOSING_SEARCH];
        const d = resolvedDivergence(m.calls, m.followUp, m.rerunDivergence);
        if (d === undefined) delete plan.rerunDivergence;
        else plan.rerunDivergence = d;
        const f = followUp.length === 0 ? undefined : resolvedDivergence(followUp, undefined, m.followUpDivergence);
        if (f === undefined) delete plan.followUpDivergence;
        else plan.followUpDivergence = f;
        return plan;
      }),
    })),
  };
}

export interface ConversationPlan {
  id: string;
  messages: MessagePlan[];
}

export interface Scenario {
  conversations: ConversationPlan[];
  /** Seeds the mock provider's per-response variation (key order, whitespace, fragments, re-wording). */
  providerSeed: number;
}

/** Every call a message's user asked for, in the order the model makes them: the first turn's, then the follow-up's. */
export function plannedCalls(message: MessagePlan): PlannedCall[] {
  return [...message.calls, ...(message.followUp ?? [])];
}

/**
 * The calls the model makes in its response to a re-run of the message's first turn, or
 * undefined when it makes the first response's calls again. An omission may empty the turn only
 * when no follow-up turn depends on it (the model then answers the re-run with text alone).
 */
export function divergedCalls(message: Pick<MessagePlan, "calls" | "followUp" | "rerunDivergence">): PlannedCall[] | undefined {
  const d = message.rerunDivergence;
  const calls = message.calls;
  if (d === undefined || calls.length === 0) return undefined;
  if (d.kind === "omit") {
    if (calls.length === 1 && (message.followUp ?? []).length > 0) return undefined;
    const at = d.call % calls.length;
    return calls.filter((_, i) => i !== at);
  }
  const a = d.first % calls.length;
  const b = d.second % calls.length;
  // Identical calls swapped are the same response; a swap needs two different calls.
  if (a === b || JSON.stringify(calls[a]) === JSON.stringify(calls[b])) return undefined;
  const swapped = [...calls];
  swapped[a] = calls[b]!;
  swapped[b] = calls[a]!;
  return swapped;
}

/**
 * The calls the model makes in its response to a re-run of the message's follow-up turn, or
 * undefined when it makes the follow-up's calls again (no follow-up turn depends on it: an only
 * call omitted leaves a text answer).
 */
export function divergedFollowUp(message: Pick<MessagePlan, "followUp" | "followUpDivergence">): PlannedCall[] | undefined {
  const followUp = message.followUp ?? [];
  if (message.followUpDivergence === undefined || followUp.length === 0) return undefined;
  return divergedCalls({ calls: followUp, rerunDivergence: message.followUpDivergence });
}

/**
 * The calls of a spliced response (SplicePlan): the calls the model makes when it answers the
 * request again (`rerun`), with the first call and the first one different from it in the other
 * order when the splice reorders (a response of identical calls has no other order).
 */
export function splicedCalls(rerun: PlannedCall[], splice: Pick<SplicePlan, "reorder">): PlannedCall[] {
  if (!splice.reorder || rerun.length < 2) return rerun;
  const other = rerun.findIndex((c) => JSON.stringify(c) !== JSON.stringify(rerun[0]));
  if (other === -1) return rerun;
  const swapped = [...rerun];
  swapped[0] = rerun[other]!;
  swapped[other] = rerun[0]!;
  return swapped;
}

/**
 * A splice only where it leaves the message's other plans as they were drawn: not in a message
 * without a call to splice after, nor where every later response is cut anyway (an outage: the
 * failed attempt would end the message failed), nor on the release deaths, which need the first
 * attempt to reach the released call (a splice before it fails that attempt, and the re-run may
 * omit the call).
 */
function withSplice(plan: MessagePlan, splice: SplicePlan | undefined): MessagePlan {
  if (splice === undefined || plan.calls.length === 0 || plan.outage !== undefined) return plan;
  if (plan.death?.when === "after_release" || plan.releaseRerunDeath !== undefined) return plan;
  return { ...plan, splice };
}

/**
 * A splice into a follow-up response where it leaves the message's other plans as they were drawn,
 * as withSplice: only on a tool loop, not where an outage cuts every later response (of either
 * turn), nor on the release deaths.
 */
function withFollowUpSplice(plan: MessagePlan, splice: SplicePlan | undefined): MessagePlan {
  if (splice === undefined || (plan.followUp ?? []).length === 0 || plan.outage !== undefined) return plan;
  if (plan.death?.when === "after_release" || plan.releaseRerunDeath !== undefined) return plan;
  return { ...plan, followUpSplice: splice };
}

/**
 * A splice into a re-ask's first-turn request where it leaves the message's other plans as they
 * were drawn, as withSplice: only on a message that re-asks, not on the release deaths (whose
 * worker dies right after a release; a re-ask after them meets the released row).
 */
function withReaskSplice(plan: MessagePlan, splice: SplicePlan | undefined): MessagePlan {
  if (splice === undefined || !plan.reask || plan.calls.length === 0) return plan;
  if (plan.death?.when === "after_release" || plan.releaseRerunDeath !== undefined) return plan;
  return { ...plan, reaskSplice: splice };
}

/**
 * A SplicePlan drawn in one message slot in `1 + none` (`none` to 1 it is none), mostly right after
 * the first call: the shape of every splice draw below (one combinator tree, so each draw's values
 * for a seed are what they were when each was written out in full).
 */
function splicePlanArbitrary(none: number, attempt: fc.Arbitrary<SplicePlan["attempt"]>, shape: fc.Arbitrary<SplicePlan["shape"]>, reorder: fc.Arbitrary<boolean>): fc.Arbitrary<SplicePlan | undefined> {
  return fc.oneof(
    { weight: none, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.record({
        attempt,
        afterCall: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 2 }) }),
        shape,
        reorder,
      }),
    },
  );
}

/**
 * Half the message slots (a re-ask comes only after a message failed: 49 in CI's 200 reference
 * runs, 23 of them spliced): a proxy's splice into the re-ask's first request (MessagePlan
 * `reaskSplice`), of the three shapes alike, mostly right after the first call. Each costs one
 * failed attempt of the re-ask and its retry.
 */
const reaskSpliceArbitrary: fc.Arbitrary<SplicePlan | undefined> = splicePlanArbitrary(1, fc.constant<SplicePlan["attempt"]>(1), fc.constantFrom<SplicePlan["shape"]>("restart", "headless", "headless_bare"), fc.boolean());

/**
 * Mostly none (one message slot in four): a proxy's splice (SplicePlan). Each costs one failed
 * attempt and its retry, no lease. Mostly right after the first call, where a reordered spliced
 * response brings the call that ran back at a new position.
 */
const spliceArbitrary: fc.Arbitrary<SplicePlan | undefined> = splicePlanArbitrary(3, fc.constantFrom<SplicePlan["attempt"]>(1, 2), fc.constantFrom<SplicePlan["shape"]>("restart", "headless"), fc.boolean());

/**
 * One message slot in eight: a relay's repeat of a completed call (SplicePlan `repeat`), mostly of
 * the first call. Each costs one failed attempt and its retry, no lease.
 */
const repeatArbitrary: fc.Arbitrary<SplicePlan | undefined> = splicePlanArbitrary(7, fc.constantFrom<SplicePlan["attempt"]>(1, 2), fc.constant<SplicePlan["shape"]>("repeat"), fc.constant(false));

/**
 * A relay's repeat (SplicePlan `repeat`) into a first-turn request where it leaves every other
 * draw as it was: only on a message no splice of its own falls on (withSplice's conditions too).
 */
function withRepeat(plan: MessagePlan, repeat: SplicePlan | undefined): MessagePlan {
  return plan.splice === undefined ? withSplice(plan, repeat) : plan;
}

/** The scenario's message plan without a relay's repeat (SplicePlan `repeat`): as drawn before `repeats`. */
export function withoutRepeat(plan: MessagePlan): MessagePlan {
  if (plan.splice?.shape !== "repeat") return plan;
  const { splice: _, ...rest } = plan;
  return rest;
}

/**
 * A cut planned for the first response, fitted to a re-run's response with fewer calls (an
 * omission): a position past its calls falls on its last call, or before its end when it makes none.
 */
export function fitCut(cut: StreamCut, calls: number): StreamCut {
  if (calls === 0) return cut.at === "event" && cut.event <= 6 ? cut : { at: "before_message_stop", kind: cut.kind };
  switch (cut.at) {
    case "event":
      return { ...cut, event: Math.min(cut.event, 6 + calls * 6) };
    case "arguments":
    case "after_call":
      return { ...cut, toolUse: Math.min(cut.toolUse, calls - 1) };
    case "before_message_stop":
      return cut;
  }
}

/** True when nothing in the scenario injects a fault: the run must then be boring (see the oracle). */
export function faultFree(scenario: Scenario): boolean {
  return scenario.conversations.every((c) =>
    c.messages.every(
      (m) =>
        m.cuts.length === 0 &&
        (m.followUpCuts ?? []).length === 0 &&
        Object.keys(m.downstream).length === 0 &&
        m.death === undefined &&
        m.rerunFault === undefined &&
        m.outage === undefined &&
        m.unstorable.length === 0 &&
        m.splice === undefined,
    ),
  );
}

/** Messages in the order they are sent: groups of one, or two sent together (`concurrent`). */
export function sendGroups(conversation: ConversationPlan): MessagePlan[][] {
  const groups: MessagePlan[][] = [];
  for (const message of conversation.messages) {
    const last = groups[groups.length - 1];
    if (message.concurrent && last !== undefined && last.length === 1) last.push(message);
    else groups.push([message]);
  }
  return groups;
}

const PAYEES = ["acme", "globex", "initech"];
const CURRENCIES = ["EUR", "USD"];

function callArbitrary(conversation: number, message: number): fc.Arbitrary<PlannedCall> {
  const reference = fc.integer({ min: 0, max: 2 }).map((r) => `c${conversation}-m${message}-r${r}`);
  const payment = fc.record({
    payee: fc.constantFrom(...PAYEES),
    amount: fc.integer({ min: 1, max: 99_999 }),
    currency: fc.constantFrom(...CURRENCIES),
    reference,
    memo: fc.constantFrom("Invoice", "Monthly fee", "Refund"),
  });
  return fc.oneof(
    { weight: 5, arbitrary: payment.map((args): PlannedCall => ({ tool: "send_payment", args })) },
    {
      weight: 2,
      arbitrary: fc
        .record({
          customer: fc.constantFrom(...PAYEES),
          amount: fc.integer({ min: 1, max: 99_999 }),
          currency: fc.constantFrom(...CURRENCIES),
          memo: fc.constant("Services"),
        })
        .map((args): PlannedCall => ({ tool: "create_invoice", args: { ...args, memo: `${args.memo} c${conversation}m${message}` } })),
    },
    { weight: 1, arbitrary: fc.constant<PlannedCall>({ tool: "search_payments", args: {} }) },
  );
}

const cutKind = fc.constantFrom<CutKind>("reset", "reset", "clean_close", "error_event");

function cutArbitrary(calls: number): fc.Arbitrary<StreamCut> {
  const toolUse = fc.integer({ min: 0, max: Math.max(0, calls - 1) });
  return fc.oneof(
    fc.record({ at: fc.constant("event" as const), event: fc.integer({ min: 0, max: 6 + calls * 6 }), kind: cutKind }),
    fc.record({ at: fc.constant("arguments" as const), toolUse, afterFragment: fc.integer({ min: 0, max: 4 }), kind: cutKind }),
    fc.record({ at: fc.constant("after_call" as const), toolUse, kind: cutKind }),
    fc.record({ at: fc.constant("before_message_stop" as const), kind: cutKind }),
  );
}

function messageArbitrary(conversation: number, message: number, previous: PlannedCall[]): fc.Arbitrary<MessagePlan> {
  // A legitimate repeat of an earlier message's payment, and identical calls inside one turn.
  const repeat = previous.filter((c) => c.tool === "send_payment");
  const fresh = callArbitrary(conversation, message);
  const call = repeat.length > 0 ? fc.oneof({ weight: 4, arbitrary: fresh }, { weight: 1, arbitrary: fc.constantFrom(...repeat) }) : fresh;
  return fc
    .array(call, { minLength: 1, maxLength: 3 })
    .chain((calls) => {
      // A void of a payment this conversation made in an earlier message. With two open
      // payments under one reference (a repeat, or a duplicated call), a re-run after a lost
      // response finds the other one: the payments API answers 422 idempotency-key-reused.
      const voidable = previous.filter((c) => c.tool === "send_payment");
      const withVoid = voidable.length > 0
        ? fc.option(fc.constantFrom(...voidable), { freq: 3 }).map((v) =>
            v === null ? calls : [...calls, { tool: "void_payment" as const, args: { reference: v.args.reference } }],
          )
        : fc.constant(calls);
      const duplicated = withVoid.chain((list) =>
        fc.boolean().map((dup) => (dup && list[0]!.tool === "send_payment" ? [list[0]!, ...list] : list)),
      );
      return duplicated;
    })
    .chain((calls) => followUpArbitrary(conversation, message, calls).map((followUp) => ({ calls, followUp })))
    .chain(({ calls, followUp }) => {
      // A fault may land on a follow-up call too (indexes after the first turn's).
      const anyCall = fc.integer({ min: 0, max: calls.length + followUp.length - 1 });
      // A message with a tool loop is rare (one in twelve), and a fault in its later turn is
      // what it exists for: there, deaths and unstorable results favour the follow-up's calls.
      const index =
        followUp.length > 0
          ? fc.oneof({ weight: 1, arbitrary: anyCall }, { weight: 2, arbitrary: fc.integer({ min: calls.length, max: calls.length + followUp.length - 1 }) })
          : anyCall;
      const deathWeight = followUp.length > 0 ? 3 : 1;
      return fc.record({
        text: fc.constant(`c${conversation} message ${message}`),
        calls: fc.constant(calls),
        ...(followUp.length > 0
          ? { followUp: fc.constant(followUp), followUpCuts: fc.array(cutArbitrary(followUp.length), { maxLength: 1 }) }
          : {}),
        cuts: fc.array(cutArbitrary(calls.length), { maxLength: 2 }),
        downstream: fc.oneof(
          { weight: 2, arbitrary: fc.constant({}) },
          {
            weight: 2,
            arbitrary: fc
              .tuple(anyCall, fc.constantFrom<DownstreamFault>("fail_before_accept", "drop_after_accept", "drop_after_accept"))
              .map(([i, fault]) => ({ [i]: fault })),
          },
          // A lost response on the last call: where a void sits, so its re-run meets the 422.
          { weight: 1, arbitrary: fc.constant({ [calls.length - 1]: "drop_after_accept" as const }) },
        ) as fc.Arbitrary<Partial<Record<number, DownstreamFault>>>,
        // Deaths are rarer: each costs a claim lease before the call can move on.
        death: fc.oneof(
          { weight: 6, arbitrary: fc.constant(undefined) },
          {
            weight: deathWeight,
            arbitrary: fc.record({
              call: index,
              when: fc.constantFrom<WorkerDeath["when"]>("before_downstream", "after_response_before_complete", "stall_before_downstream"),
            }),
          },
        ),
        unstorable: fc.oneof({ weight: 8, arbitrary: fc.constant<number[]>([]) }, { weight: deathWeight, arbitrary: index.map((i) => [i]) }),
        route: fc.constantFrom<ReplayRoute>("automatic_retry", "client_resend", "queue_redelivery", "double_send"),
        concurrent: message === 0 ? fc.constant(false) : fc.boolean().chain((b) => (b ? fc.boolean() : fc.constant(false))),
        // A re-ask asks again at the failed turn's index (TURN-12): the whole request when the
        // first turn failed, the follow-up's calls when the loop's later turn did (reask above).
        reask: fc.boolean(),
      }).chain((plan) =>
        fc
          .tuple(outageArbitrary(plan), rerunFaultArbitrary(plan.death))
          .map(([{ outage, onFollowUp }, rerunFault]): MessagePlan => ({
            ...plan,
            outage,
            ...(onFollowUp ? { outageOnFollowUp: true } : {}),
            ...(rerunFault !== undefined ? { rerunFault } : {}),
          })),
      );
    });
}

/**
 * Mostly none (about one message in twelve has one, so the default property's cost barely
 * grows): a later turn of the message's tool loop. Half the time it repeats one of the first
 * turn's writes exactly (the user asked for the same payment twice, in two steps; keys of a later
 * turn that collided with the first turn's would answer it from the first call's row), else one
 * or two fresh calls.
 */
function followUpArbitrary(conversation: number, message: number, calls: PlannedCall[]): fc.Arbitrary<PlannedCall[]> {
  const writes = calls.filter((c) => c.tool === "send_payment" || c.tool === "create_invoice");
  const fresh = fc.array(callArbitrary(conversation, message), { minLength: 1, maxLength: 2 });
  const loop = writes.length > 0 ? fc.oneof(fc.constantFrom(...writes).map((c) => [c]), fresh) : fresh;
  return fc.oneof({ weight: 11, arbitrary: fc.constant<PlannedCall[]>([]) }, { weight: 1, arbitrary: loop });
}

/**
 * Only with a death after a call's effect, half the time: a downstream fault on that call's
 * re-run (the take-over's, or a re-ask's). It costs no lease of its own (the death already
 * waits one out), so the default property's cost stays about the same.
 */
function rerunFaultArbitrary(death: WorkerDeath | undefined): fc.Arbitrary<DownstreamFault | undefined> {
  if (death?.when !== "after_response_before_complete") return fc.constant(undefined);
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant(undefined) },
    { weight: 1, arbitrary: fc.constant<DownstreamFault>("fail_before_accept") },
    { weight: 1, arbitrary: fc.constant<DownstreamFault>("drop_after_accept") },
  );
}

/**
 * Mostly none. With a death after a call's effect, often a cut inside that call's arguments or
 * before it: the case where the dead worker's effect is reached by no later attempt. A death on a
 * follow-up call gets its outage on the follow-up turn's requests (the first turn committed).
 */
function outageArbitrary(plan: Omit<MessagePlan, "outage">): fc.Arbitrary<{ outage: StreamCut | undefined; onFollowUp: boolean }> {
  const followUp = plan.followUp ?? [];
  const first = (cut: fc.Arbitrary<StreamCut | undefined>) => cut.map((outage) => ({ outage, onFollowUp: false }));
  const loop = (cut: fc.Arbitrary<StreamCut | undefined>) => cut.map((outage) => ({ outage, onFollowUp: outage !== undefined }));
  const none = fc.constant(undefined);
  const death = plan.death;
  if (death === undefined || death.when !== "after_response_before_complete") {
    const anywhere = followUp.length > 0 ? fc.oneof(first(cutArbitrary(plan.calls.length)), loop(cutArbitrary(followUp.length))) : first(cutArbitrary(plan.calls.length));
    return fc.oneof({ weight: 12, arbitrary: first(none) }, { weight: 1, arbitrary: anywhere });
  }
  const inLoop = death.call >= plan.calls.length;
  const beforeTheCall = fc.record({
    at: fc.constant("arguments" as const),
    toolUse: fc.constant(inLoop ? death.call - plan.calls.length : death.call),
    afterFragment: fc.integer({ min: 0, max: 2 }),
    kind: cutKind,
  });
  const same = inLoop ? loop : first;
  return fc.oneof(
    { weight: 1, arbitrary: first(none) },
    { weight: 2, arbitrary: same(beforeTheCall) },
    { weight: 1, arbitrary: same(cutArbitrary(inLoop ? followUp.length : plan.calls.length)) },
  );
}

function conversationArbitrary(conversation: number): fc.Arbitrary<ConversationPlan> {
  const messages = (count: number, index: number, previous: PlannedCall[]): fc.Arbitrary<MessagePlan[]> =>
    index >= count
      ? fc.constant([])
      : messageArbitrary(conversation, index, previous).chain((m) =>
          messages(count, index + 1, [...previous, ...plannedCalls(m)]).map((rest) => [m, ...rest]),
        );
  return fc.integer({ min: 1, max: 3 }).chain((count) => messages(count, 0, [])).map((m) => ({ id: `conv-${conversation}`, messages: m }));
}

/** A calm run has no re-run for a divergence to answer: none is shown. */
function withoutDivergence(m: MessagePlan): MessagePlan {
  const plan = { ...m };
  delete plan.rerunDivergence;
  return plan;
}

/** No cut, no outage, no downstream fault, no death, no unstorable result: the calm runs. */
function calm(conversation: ConversationPlan): ConversationPlan {
  return {
    id: conversation.id,
    messages: conversation.messages.map((m) => withoutDivergence({
      ...m,
      cuts: [],
      ...(m.followUpCuts !== undefined ? { followUpCuts: [] } : {}),
      downstream: {},
      death: undefined,
      rerunFault: undefined,
      outage: undefined,
      unstorable: [],
    })).map((m) => {
      const plan = { ...m };
      delete plan.releaseRerunDeath;
      delete plan.followUpDivergence;
      delete plan.splice;
      delete plan.followUpSplice;
      delete plan.reaskSplice;
      delete plan.deploy;
      return plan;
    }),
  };
}

/** The most messages a scenario has (three conversations of three): one divergence draw each. */
const MAX_MESSAGES = 9;

/**
 * Mostly none (two messages in five diverge): an omission three times as often as a swap (a
 * swap changes no key; an omission leaves an earlier attempt's effect unanswered).
 */
const divergenceArbitrary: fc.Arbitrary<RerunDivergence | undefined> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("omit" as const), call: fc.integer({ min: 0, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("swap" as const), first: fc.integer({ min: 0, max: 3 }), second: fc.integer({ min: 0, max: 3 }) }) },
);

/**
 * Where a message may die right after a release (WorkerDeath `after_release`): it has no other
 * death, a lost payments response on a first-turn keyed write (the payment happened; the
 * dispatcher releases its row for a re-run under the same key), and the model answers the
 * message's re-runs without that call (an omission, rerunDivergence). The worker that released
 * the row writes nothing; the take-over's committed turn does not answer its key, and its
 * resumed turn's record can name it only from the ledger's listing of the turn's rows, where the
 * row is `released` (RECORD-8). Without such a death the releasing worker itself tells of the
 * call in its own record, and a listing that hides released rows hides nothing untold.
 */
function releaseDeathOf(plan: MessagePlan): WorkerDeath | undefined {
  if (plan.death !== undefined || plan.rerunDivergence?.kind !== "omit") return undefined;
  return releasableCall(plan, plan.rerunDivergence.call % plan.calls.length);
}

/**
 * Where a message may die twice around one released row (MessagePlan `releaseRerunDeath`): as
 * releaseDeathOf, but the model answers every re-run with the same calls (no divergence), so the
 * re-send runs the released call again under its key; that worker dies too, and a third finishes.
 * The call is the first of the turn's keyed writes whose payments response is lost.
 */
function releaseRerunDeathOf(plan: MessagePlan): WorkerDeath | undefined {
  if (plan.death !== undefined || plan.rerunDivergence !== undefined) return undefined;
  for (let i = 0; i < plan.calls.length; i++) {
    const death = releasableCall(plan, i);
    if (death !== undefined) return death;
  }
  return undefined;
}

/** A death right after the release of call `omitted` of the first turn, when its fault makes one (releaseDeathOf). */
function releasableCall(plan: MessagePlan, omitted: number): WorkerDeath | undefined {
  const call = plan.calls[omitted];
  if (call === undefined || (call.tool !== "send_payment" && call.tool !== "void_payment")) return undefined;
  if (plan.downstream[omitted] !== "drop_after_accept") return undefined;
  // The fault and the death are planned by the call's signature: an identical call elsewhere in
  // the turn could take them, and the divergence omits one position only.
  const same = plan.calls.filter((c) => JSON.stringify(c) === JSON.stringify(call)).length;
  if (same > 1) return undefined;
  return { call: omitted, when: "after_release" };
}

export function scenarioArbitrary(): fc.Arbitrary<Scenario> {
  return fc
    .record({
      conversations: fc.integer({ min: 1, max: 3 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => conversationArbitrary(i)))),
      providerSeed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
      // A fifth of the runs inject no fault at all: nothing may then fail, be taken over or be unknown.
      calm: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
      // Drawn last, one per message slot, so that every earlier draw of a seed (and the scenarios
      // the kit's planted tests find at their seeds and paths) stays what it was before the field.
      divergences: fc.array(divergenceArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After the divergences, for the same reason: a death right after a lost response's release
      // (WorkerDeath `after_release`), where the message's re-run omits that call (releaseDeathOf).
      releaseDeaths: fc.array(fc.boolean(), { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After those, for the same reason: two deaths around one released row (releaseRerunDeathOf),
      // where no divergence drops the call (one message in six that can have them: each costs two
      // deaths, one lapsed claim lease and two re-sends).
      releaseRerunDeaths: fc.array(
        fc.oneof(
          { weight: 10, arbitrary: fc.constant(undefined) },
          { weight: 1, arbitrary: fc.constant("before_downstream" as const) },
          { weight: 1, arbitrary: fc.constant("after_response_before_complete" as const) },
        ),
        { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES },
      ),
      // After those, for the same reason: how the model answers a re-run of a message's follow-up
      // turn (a message with a tool loop is rare: most of theirs diverge).
      followUpDivergences: fc.array(
        fc.oneof(
          { weight: 1, arbitrary: fc.constant(undefined) },
          { weight: 2, arbitrary: fc.record({ kind: fc.constant("omit" as const), call: fc.integer({ min: 0, max: 1 }) }) },
          { weight: 1, arbitrary: fc.record({ kind: fc.constant("swap" as const), first: fc.constant(0), second: fc.constant(1) }) },
        ),
        { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES },
      ),
      // After those, for the same reason: a client that reuses a message's id with other content
      // (TURN-20; MessagePlan `reusedId`), one message slot in eight: one extra send() a message,
      // refused from one store read, so the default property's cost barely grows.
      reuses: fc.array(
        fc.oneof({ weight: 7, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
        { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES },
      ),
      // After those, for the same reason: a proxy's splice into a first-turn response (SplicePlan).
      splices: fc.array(spliceArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After the splices, for the same reason (every splice drawn before stays, its shape aside):
      // half the headless splices come without their lead (SplicePlan `headless_bare`), so that
      // the spliced response's first item lands on a held item of its own type (STREAM-10).
      bareSplices: fc.array(fc.boolean(), { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After those, for the same reason: a splice into a tool loop's follow-up response (MessagePlan
      // `followUpSplice`; a message with a follow-up is rare, so these are drawn as often as the
      // first turn's, of the three shapes).
      followUpSplices: fc.array(
        fc.oneof(
          { weight: 3, arbitrary: fc.constant(undefined) },
          {
            weight: 1,
            arbitrary: fc.record({
              attempt: fc.constantFrom<SplicePlan["attempt"]>(1, 2),
              afterCall: fc.constant(0),
              shape: fc.constantFrom<SplicePlan["shape"]>("restart", "headless", "headless_bare"),
              reorder: fc.boolean(),
            }),
          },
        ),
        { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES },
      ),
      // After those, for the same reason: a splice into a re-ask's first request (MessagePlan
      // `reaskSplice`): the splices above fall on a message's own requests only.
      reaskSplices: fc.array(reaskSpliceArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
      // After those, for the same reason: a call a re-run omits, made again in the message's next
      // turn (MessagePlan `deferred`, TURN-23). Few slots can take one (withDeferral): most that can, do.
      deferrals: fc.array(
        fc.oneof(
          { weight: 1, arbitrary: fc.constant(undefined) },
          { weight: 3, arbitrary: fc.constantFrom<DeferredCall["kind"]>("same", "same", "reworded", "other_payee", "twice") },
        ),
        { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES },
      ),
      // After those, for the same reason: a deploy while the message is unanswered (MessagePlan
      // `deploy`, IDENT-10, IDENT-11), on half the message slots with a payment. It changes nothing
      // until a send of the message settles unanswered (a worker that starts after that runs it).
      deploys: fc.array(
        fc.oneof(
          { weight: 2, arbitrary: fc.constant(undefined) },
          { weight: 2, arbitrary: fc.constantFrom<DeployKind>("identity", "transform", "rename") },
        ),
        { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES },
      ),
      // After those, for the same reason: a relay's repeat of a completed call at the next free
      // position (SplicePlan `repeat`, STREAM-10's whole repeat), on a message no splice falls on.
      repeats: fc.array(repeatArbitrary, { minLength: MAX_MESSAGES, maxLength: MAX_MESSAGES }),
    })
    .map(({ conversations, providerSeed, calm: quiet, divergences, releaseDeaths, releaseRerunDeaths, followUpDivergences, reuses, splices: drawnSplices, bareSplices, followUpSplices, reaskSplices, deferrals, deploys, repeats }) => {
      const splices = drawnSplices.map((s, i): SplicePlan | undefined => (s !== undefined && s.shape === "headless" && bareSplices[i] === true ? { ...s, shape: "headless_bare" } : s));
      let slot = 0;
      const diverging = conversations.map((c) => ({
        ...c,
        messages: c.messages.map((m) => {
          const d = divergences[slot];
          const releaseDeath = releaseDeaths[slot] === true;
          const rerunDeath = releaseRerunDeaths[slot];
          const reused = reuses[slot] === true;
          const splice = splices[slot];
          const loopSplice = followUpSplices[slot];
          const reaskSplice = reaskSplices[slot];
          const deferral = deferrals[slot];
          const deploy = deploys[slot];
          const repeat = repeats[slot];
          const drawn = followUpDivergences[slot++];
          // An omission falls on the follow-up call a worker dies on, when one does: the take-over's
          // re-run then leaves the dead worker's row unanswered (the case it exists for, RECORD-8).
          const onDeath = m.death !== undefined && m.death.call >= m.calls.length ? m.death.call - m.calls.length : undefined;
          const f = drawn?.kind === "omit" && onDeath !== undefined ? { kind: "omit" as const, call: onDeath } : drawn;
          const plan: MessagePlan = d === undefined ? { ...m } : { ...m, rerunDivergence: d };
          if (reused) plan.reusedId = true;
          // Only one that changes the follow-up's response is kept; none where a fault waits for the
          // re-run of the dead call (rerunFault): that re-run must make the call.
          if (f !== undefined && m.rerunFault === undefined && divergedFollowUp({ followUp: m.followUp, followUpDivergence: f }) !== undefined) {
            plan.followUpDivergence = f;
            // Omitting the dead call, the follow-up's re-runs must be answered for the committed
            // follow-up to leave its row unanswered: an outage on them would only fail the message.
            if (f.kind === "omit" && onDeath !== undefined && plan.outageOnFollowUp === true) {
              plan.outage = undefined;
              delete plan.outageOnFollowUp;
            }
          }
          // Only a divergence that changes the response is kept (a shrunk scenario shows no inert one).
          if (d !== undefined && divergedCalls(plan) === undefined) delete plan.rerunDivergence;
          const death = releaseDeath ? releaseDeathOf(plan) : undefined;
          if (death !== undefined) return withRepeat(withDeploy(withDeferral(withReaskSplice(withFollowUpSplice(withSplice({ ...plan, death }, splice), loopSplice), reaskSplice), deferral), deploy), repeat);
          const twice = rerunDeath !== undefined ? releaseRerunDeathOf(plan) : undefined;
          return withRepeat(withDeploy(withDeferral(withReaskSplice(withFollowUpSplice(withSplice(twice === undefined ? plan : { ...plan, death: twice, releaseRerunDeath: rerunDeath }, splice), loopSplice), reaskSplice), deferral), deploy), repeat);
        }),
      }));
      // A reused id only on a message sent alone (a group of two sends at once, TURN-9); a re-ask
      // too (case.ts asks again only for a message sent alone), so no re-ask splice on the others.
      for (const c of diverging) {
        for (const group of sendGroups(c)) {
          if (group.length > 1) {
            for (const m of group) {
              delete m.reusedId;
              delete m.reaskSplice;
            }
          }
        }
      }
      return {
        conversations: quiet ? diverging.map(calm) : diverging,
        providerSeed,
      };
    });
}
