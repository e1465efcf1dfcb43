import { MessageIdReusedError, type CallRecord, type FailedTurnRecord, type ResumedTurnRecord, type SupersededAttemptRecord } from "@dispatch-once/runner";
import { canonicalize, type JsonValue, type StoredMessage, type StoredTurn } from "@dispatch-once/core";
import type { Effect } from "@dispatch-once/mock-payments";
import { mixedResponses } from "@dispatch-once/conformance/ledger";
import type { ModelResponse, TranscriptReader } from "./provider.js";
import { faultFree, type DeployKind, type PlannedCall } from "./scenario.js";
import { contentOf, expectedKey, identityText, keysUnderReleases, kitToolName, paymentBody, short, type CaseContext, type RecordedEvent, type SentMessage, type ToolRun } from "./world.js";

export interface OracleViolation {
  rule: string;
  message: string;
}

/** What the user asked for, as the downstream tells effects apart (a void by its payment's reference). */
export function plannedSignature(call: PlannedCall): string | undefined {
  const a = call.args;
  // A release's renamed payment tool (world.ts DEPLOYED_PAYMENT) asks for a payment all the same.
  switch (kitToolName(call.tool) as PlannedCall["tool"]) {
    case "send_payment":
      return `payment ${a.payee} ${a.amount} ${a.currency} ${a.reference}`;
    case "create_invoice":
      return `invoice ${a.customer} ${a.amount} ${a.currency} ${a.memo}`;
    case "void_payment":
      return `void ${a.reference}`;
    case "search_payments":
      return undefined;
  }
}

function effectSignature(effect: Effect, referenceOf: Map<string, string>): string | undefined {
  const p = effect.payload;
  switch (effect.kind) {
    case "payment_created":
      return `payment ${p.payee} ${p.amount} ${p.currency} ${p.reference}`;
    case "invoice_created":
      return `invoice ${p.customer} ${p.amount} ${p.currency} ${p.memo}`;
    case "payment_voided":
      return `void ${referenceOf.get(String(p.paymentId)) ?? `?${String(p.paymentId)}`}`;
    default:
      return undefined;
  }
}

function describeEffect(effect: Effect): string {
  return `${effect.kind} ${effect.resourceId} (seq ${effect.seq}, key ${short(effect.idempotencyKey ?? undefined)})`;
}

/** Two JSON values are the same data (a store may keep members in another order, TURN-18). */
function sameJson(a: unknown, b: unknown): boolean {
  const text = (v: unknown) => canonicalize(JSON.parse(JSON.stringify(v)) as JsonValue);
  try {
    return text(a) === text(b);
  } catch {
    return JSON.stringify(a) === JSON.stringify(b);
  }
}

const WRITES = new Set(["send_payment", "void_payment", "create_invoice", "pay"]);
/** Record effect words that say the effect may be out there. */
const SAYS_MAYBE = new Set(["happened", "may_have_happened"]);

/** Union-find over message ids: the messages one intent may have been answered through. */
class Intents {
  private readonly parent = new Map<string, string>();
  find(id: string): string {
    let root = id;
    while ((this.parent.get(root) ?? root) !== root) root = this.parent.get(root)!;
    this.parent.set(id, root);
    return root;
  }
  union(a: string, b: string): void {
    const ra = this.find(a);
    const rb = this.find(b);
    if (ra !== rb) this.parent.set(rb, ra);
  }
}

interface ConversationState {
  id: string;
  sent: SentMessage[];
  stored: Map<string, StoredMessage>;
  turns: StoredTurn[];
  log: JsonValue[];
  records: JsonValue[];
}

/**
 * The Jepsen-style oracle (issue 12): the downstream effect log, the tool runs and the stores
 * against what each user intent asked for and what every answer and record says.
 * - one effect per planned call per intent (a message and its re-asks), not only per key;
 * - a committed success had exactly one effect under its key and names it; a committed error had none;
 * - every failed-turn record lists every effect its attempts made, and never denies one;
 * - messages take turn indexes one at a time, in arrival order; a re-ask takes the failed index;
 * - every re-run of a key ran the first request; every answer for a key is the same bytes;
 * - a run with no fault injected has no failure, takeover or unknown outcome; every send settles.
 */
export async function checkOracle(ctx: CaseContext, effects: Effect[], transcript: TranscriptReader, responses: ModelResponse[] = []): Promise<OracleViolation[]> {
  const violations: OracleViolation[] = [...ctx.liveness];
  const add = (rule: string, message: string) => violations.push({ rule, message });

  const conversations: ConversationState[] = [];
  for (const conversation of ctx.scenario.conversations) {
    const { store } = ctx.stores.get(conversation.id)!;
    const sent = ctx.messages.filter((m) => m.conversationId === conversation.id);
    const stored = new Map<string, StoredMessage>();
    const turns: StoredTurn[] = [];
    for (const m of sent) {
      const s = await store.message(conversation.id, m.id);
      if (s !== undefined) stored.set(m.id, s);
      turns.push(...(await store.turnsOf(conversation.id, m.id)));
    }
    turns.sort((a, b) => a.turnIndex - b.turnIndex);
    conversations.push({ id: conversation.id, sent, stored, turns, log: await store.log(conversation.id), records: await store.records(conversation.id) });
  }

  const referenceOf = new Map<string, string>();
  for (const e of effects) if (e.kind === "payment_created") referenceOf.set(e.resourceId, String(e.payload.reference));
  const effectsByKey = new Map<string, Effect[]>();
  for (const e of effects) {
    if (e.idempotencyKey === null) continue;
    effectsByKey.set(e.idempotencyKey, [...(effectsByKey.get(e.idempotencyKey) ?? []), e]);
  }
  const runsByKey = new Map<string, ToolRun[]>();
  for (const run of ctx.runs) runsByKey.set(run.key, [...(runsByKey.get(run.key) ?? []), run]);

  // ---- TURN-5, RECORD-1: the committed log is well formed ----
  for (const c of conversations) {
    c.turns.forEach((t, i) => {
      if (t.turnIndex !== i) add("TURN-5", `${c.id}: committed turn indexes are ${JSON.stringify(c.turns.map((x) => x.turnIndex))}, not 0..${c.turns.length - 1}`);
    });
    const assistants = c.log.filter((m) => transcript.isAssistant(m)).length;
    if (assistants !== c.turns.length) add("TURN-5", `${c.id}: the log holds ${assistants} assistant messages but ${c.turns.length} turns are committed`);
    for (let i = 0; i < c.log.length; i++) {
      if (!transcript.isAssistant(c.log[i])) continue;
      const uses = transcript.calls(c.log[i]).map((b) => b.id);
      const results = transcript.results(c.log[i + 1]).map((b) => b.id);
      if (uses.length > 0 && JSON.stringify(uses) !== JSON.stringify(results)) {
        add("RECORD-1", `${c.id} log entry ${i}: call ids ${JSON.stringify(uses)} but result ids ${JSON.stringify(results)}`);
      }
    }
  }

  // ---- TURN-9, TURN-11, TURN-12: one message per turn index, in arrival order ----
  for (const c of conversations) {
    // The runner's view: which message each attempt at an index answered, and when.
    const byIndex = new Map<number, { messageId: string; at: number }[]>();
    for (const e of ctx.events) {
      if (e.type !== "attempt_started" || e.conversationId !== c.id) continue;
      const list = byIndex.get(e.turnIndex) ?? [];
      if (!list.some((x) => x.messageId === e.messageId)) list.push({ messageId: e.messageId, at: e.at });
      byIndex.set(e.turnIndex, list);
    }
    for (const [turnIndex, list] of byIndex) {
      for (let i = 1; i < list.length; i++) {
        const earlier = list[i - 1]!;
        const later = list[i]!;
        const failedFirst = ctx.events.some(
          (e) => e.type === "turn_failed" && e.conversationId === c.id && e.turnIndex === turnIndex && e.record.messageId === earlier.messageId && e.at <= later.at,
        );
        // The store's word as well, in case the failing worker died before it could tell.
        const failedInStore =
          c.stored.get(earlier.messageId)?.state === "failed" && !c.turns.some((t) => t.turnIndex === turnIndex && t.messageId === earlier.messageId);
        if (!failedFirst && !failedInStore) {
          add(
            "TURN-11",
            `${c.id}: turn ${turnIndex} was attempted for message ${JSON.stringify(earlier.messageId)} and then for ${JSON.stringify(later.messageId)}, ` +
              `although the first had not failed: two messages share one turn index, and their keys`,
          );
        }
      }
    }
    // The store's view: bound indexes follow arrival order; equal only after a failure (TURN-12).
    const bound = [...c.stored.values()].filter((m) => m.turnIndex !== undefined).sort((a, b) => a.seq - b.seq);
    for (let i = 1; i < bound.length; i++) {
      const a = bound[i - 1]!;
      const b = bound[i]!;
      if (b.turnIndex! < a.turnIndex! || (b.turnIndex === a.turnIndex && a.state !== "failed")) {
        add(
          "TURN-9",
          `${c.id}: message ${JSON.stringify(a.id)} (arrived ${a.seq}, ${a.state}) is bound to turn ${a.turnIndex} and ` +
            `${JSON.stringify(b.id)} (arrived ${b.seq}, ${b.state}) to turn ${b.turnIndex}`,
        );
      }
    }
    for (const m of c.sent) {
      const s = c.stored.get(m.id);
      const own = c.turns.filter((t) => t.messageId === m.id).map((t) => t.turnIndex);
      if (s?.state === "answered" && own.length > 0 && (own[0] !== s.turnIndex || own.some((t, i) => t !== own[0]! + i))) {
        add("TURN-11", `${c.id}: message ${JSON.stringify(m.id)} is bound to turn ${s.turnIndex} but its committed turns are ${JSON.stringify(own)}`);
      }
      if (m.reaskOf !== undefined) {
        const original = c.stored.get(m.reaskOf);
        // The failed turn: after the turns of its tool loop it committed (a follow-up that failed).
        const failedAt = original?.turnIndex === undefined ? undefined : original.turnIndex + c.turns.filter((t) => t.messageId === m.reaskOf).length;
        if (s?.turnIndex !== undefined && failedAt !== undefined && s.turnIndex !== failedAt) {
          add(
            "TURN-12",
            `${c.id}: the re-ask ${JSON.stringify(m.id)} of failed message ${JSON.stringify(m.reaskOf)} took turn ${s.turnIndex}, ` +
              `not the failed turn's index ${failedAt}: its calls got new keys`,
          );
        }
      }
    }
  }

  // ---- LEDGER-21: every run of a key sends the first claim's request ----
  for (const [key, runs] of runsByKey) {
    const first = runs[0]!;
    const other = runs.find((r) => r.request !== first.request);
    if (other !== undefined) {
      add("LEDGER-21", `${first.tool} key ${short(key)} ran with ${first.request} (${first.worker}) and later with ${other.request} (${other.worker}): a re-run must send the stored request`);
    }
  }

  // ---- CONF-2: every effect traces back to a run, and one key performs at most once ----
  for (const e of effects) {
    if (!["payment_created", "payment_voided", "invoice_created"].includes(e.kind)) continue;
    if (e.idempotencyKey === null) add("CONF-2", `${describeEffect(e)} was performed without an Idempotency-Key`);
    else if (!runsByKey.has(e.idempotencyKey)) add("CONF-2", `${describeEffect(e)} carries a key no tool run of this case was given`);
  }
  for (const [key, list] of effectsByKey) {
    if (list.length > 1) {
      add("CONF-2", `key ${short(key)} was performed ${list.length} times downstream (a duplicate): ${list.map(describeEffect).join(", ")}`);
    }
  }

  // ---- CONF-2 at the level of intents: a message and its re-asks are one intent ----
  // A slot is (conversation, turn index): every message attempted or bound there shares its keys.
  const intents = new Intents();
  const atSlot = new Map<string, Set<string>>();
  const slotOf = (conversationId: string, turnIndex: number) => `${conversationId}#${turnIndex}`;
  const bindAt = (slot: string, messageId: string) => atSlot.set(slot, (atSlot.get(slot) ?? new Set()).add(messageId));
  for (const e of ctx.events) if (e.type === "attempt_started") bindAt(slotOf(e.conversationId, e.turnIndex), e.messageId);
  for (const c of conversations) for (const [id, s] of c.stored) if (s.turnIndex !== undefined) bindAt(slotOf(c.id, s.turnIndex), id);
  for (const ids of atSlot.values()) {
    const [first, ...rest] = [...ids];
    for (const id of rest) intents.union(first!, id);
  }
  for (const m of ctx.messages) if (m.reaskOf !== undefined) intents.union(m.reaskOf, m.id);
  const members = new Map<string, SentMessage[]>();
  for (const m of ctx.messages) members.set(intents.find(m.id), [...(members.get(intents.find(m.id)) ?? []), m]);

  // Per intent, per signature, per slot (the turn index whose key the effect carries): the effects.
  const performed = new Map<string, Map<string, Map<string, Effect[]>>>();
  for (const e of effects) {
    const signature = effectSignature(e, referenceOf);
    const run = e.idempotencyKey === null ? undefined : runsByKey.get(e.idempotencyKey)?.[0];
    if (signature === undefined || run === undefined) continue;
    const slot = slotOf(run.conversationId, run.turnIndex);
    const messages = atSlot.get(slot);
    if (messages === undefined || messages.size === 0) {
      add("CONF-2", `${describeEffect(e)} was made at turn ${run.turnIndex} of ${run.conversationId}, which answers no message`);
      continue;
    }
    const root = intents.find([...messages][0]!);
    const bySignature = performed.get(root) ?? new Map<string, Map<string, Effect[]>>();
    const bySlot = bySignature.get(signature) ?? new Map<string, Effect[]>();
    bySlot.set(slot, [...(bySlot.get(slot) ?? []), e]);
    bySignature.set(signature, bySlot);
    performed.set(root, bySignature);
  }
  // Where each message's calls are keyed: its first turn's at its bound index, a follow-up's at the next.
  const boundOf = new Map<string, number>();
  for (const c of conversations) for (const [id, s] of c.stored) if (s.turnIndex !== undefined) boundOf.set(id, s.turnIndex);
  /**
   * How often an intent's messages may have performed one signature at one turn index (a slot).
   * Keys carry the turn index and the ordinal among identical calls of one attempt (TURN-4), so
   * at a slot a signature has at most as many keys as the most calls of it any one message asked
   * for there: its first turn's calls at its bound index, its follow-up's at the next (a re-ask
   * takes the failed turn's index and asks its own plan there, TURN-12: the whole request at the
   * first turn's index, or the follow-up's calls at the follow-up's; a take-over or a re-send is
   * the same message at the same index). A re-run the model answered differently (rerunDivergence,
   * followUpDivergence, a divergent re-ask) omits or swaps calls of its turn: never more of a
   * signature than asked there. Not a sum over indexes: a payment asked for once in each of two
   * turns is one key at each, so an extra identical payment at the first turn is not excused by the
   * follow-up's, which a failed message may never reach. A message not bound to an index (none
   * should make calls) counts with all its calls at every slot.
   */
  // TURN-23 after a resumed turn (finding 29): a message whose first turn was resumed keys its
  // follow-up's write calls at that turn's index, after the calls it answered there.
  const resumedFirst = new Set<string>();
  for (const c of conversations) {
    for (const r of c.records as { kind?: unknown; messageId?: unknown; turnIndex?: unknown; resumed?: unknown }[]) {
      if (r?.kind === "resumed_turn" && r.resumed !== false && typeof r.messageId === "string" && c.stored.get(r.messageId)?.turnIndex === r.turnIndex) resumedFirst.add(r.messageId);
    }
  }
  const allowedAt = (group: SentMessage[], signature: string, slot: string): number => {
    const count = (calls: PlannedCall[]) => calls.filter((c) => plannedSignature(c) === signature).length;
    let allowed = 0;
    for (const m of group) {
      const bound = boundOf.get(m.id);
      if (bound === undefined) {
        allowed = Math.max(allowed, count(m.calls));
        continue;
      }
      const followUp = m.plan.followUp ?? [];
      const steps: [number, PlannedCall[]][] = [
        [bound, m.calls.slice(0, m.calls.length - followUp.length)],
        [bound + 1, followUp],
      ];
      for (const [index, calls] of steps) if (slotOf(m.conversationId, index) === slot) allowed = Math.max(allowed, count(calls));
      if (resumedFirst.has(m.id) && slotOf(m.conversationId, bound) === slot) allowed = Math.max(allowed, count(m.calls));
    }
    return allowed;
  };
  for (const [root, bySignature] of performed) {
    const group = members.get(root) ?? [];
    for (const [signature, bySlot] of bySignature) {
      for (const [slot, list] of bySlot) {
        const allowed = allowedAt(group, signature, slot);
        if (list.length > allowed) {
          const index = slot.slice(slot.lastIndexOf("#") + 1);
          add(
            "CONF-2",
            `${signature}: performed ${list.length} times for one intent at turn ${index} (messages ${group.map((m) => JSON.stringify(m.id)).join(", ")}), ` +
              `which asked for it at most ${allowed} times at that turn index: ${list.map(describeEffect).join(", ")}`,
          );
        }
      }
    }
  }

  // ---- CONF-2 across a message's turns: a deferred call is the ask it defers (TURN-23) ----
  // Per turn index the count above cannot tell a payment asked in a message's first turn, made by
  // an attempt whose re-run answered without it, from the same payment made again in the message's
  // next turn under that turn's key: one ask, paid at each index once (scenario.ts `deferred`).
  for (const c of conversations) {
    for (const m of c.sent) {
      const deferred = m.plan.deferred;
      const bound = boundOf.get(m.id);
      if (deferred === undefined || bound === undefined || m.reaskOf !== undefined) continue;
      const signature = plannedSignature(m.plan.calls[deferred.call]!);
      if (signature === undefined) continue;
      const firstTurn = c.turns.find((t) => t.messageId === m.id && t.turnIndex === bound);
      // A message whose first turn never committed under it (it failed there, and the next message
      // was bound at the failed index, TURN-12) has no next turn of its own; nor has one whose
      // first turn ended it, when the next message is bound at the index after: the turns there
      // are that message's, and its payments its own asks (counted per index above).
      if (firstTurn === undefined) continue;
      const nextIsAnother = c.sent.some((o) => o.id !== m.id && boundOf.get(o.id) === bound + 1);
      const allowance = deferredAllowance(m.plan, signature, firstTurn, transcript);
      if (allowance.answeredFirst) ctx.diagnostics.deferred_calls_answered_first = (ctx.diagnostics.deferred_calls_answered_first ?? 0) + 1;
      const slots = new Set(nextIsAnother ? [slotOf(c.id, bound)] : [slotOf(c.id, bound), slotOf(c.id, bound + 1)]);
      const made = effects.filter((e) => {
        const run = e.idempotencyKey === null ? undefined : runsByKey.get(e.idempotencyKey)?.[0];
        return run !== undefined && slots.has(slotOf(run.conversationId, run.turnIndex)) && effectSignature(e, referenceOf) === signature;
      });
      // Another message bound at the same index (one that failed there before this one was bound,
      // TURN-12) keyed its calls there too, and this message's calls meet its rows: the effects at
      // the index may be as many as that message asked for there (found by a hunt, seed 449695202:
      // two identical asks of a failed message, each answered to this one's one ask at turn 0 and
      // its repeat at turn 1, were counted against this one's ask alone).
      const others = c.sent.filter((o) => o.id !== m.id && boundOf.get(o.id) === bound);
      const allowed = Math.max(allowance.allowed, allowedAt(others, signature, slotOf(c.id, bound)));
      if (made.length <= allowed) continue;
      const turns = [...new Set(made.map((e) => runsByKey.get(e.idempotencyKey!)![0]!.turnIndex))].sort((a, b) => a - b);
      add(
        "CONF-2",
        `${signature}: performed ${made.length} times for message ${JSON.stringify(m.id)} over its turns ${turns.join(" and ")}, which asked for it ${allowed === 1 ? "once" : `${allowed} times`}${allowed > allowance.allowed ? " (with another message bound at its index)" : ""}: ` +
          `its first turn left a call of it unanswered (a re-run answered without it) and the next turn's call is that ask made again, ` +
          `to be answered from the first turn's row (TURN-23), not paid under the next turn's key: ${made.map(describeEffect).join(", ")}`,
      );
    }
  }

  // ---- committed calls: a success names its one effect, an error had none (RECORD-3, EFFECT-6, DISPATCH-5) ----
  const keyOfCall = new Map<string, string>();
  /** Every key a call id was dispatched under (its call_resolved events: attempts of one turn may repeat an id). */
  const dispatchedKeys = new Map<string, Set<string>>();
  for (const e of ctx.events) {
    if (e.type !== "call_resolved" || e.key === undefined) continue;
    keyOfCall.set(e.callId, e.key);
    const keys = dispatchedKeys.get(e.callId) ?? new Set<string>();
    keys.add(e.key);
    dispatchedKeys.set(e.callId, keys);
  }
  for (const send of ctx.sends) {
    for (const t of send.result?.turns ?? []) {
      for (const x of t.calls) {
        if (x.key === undefined) continue;
        const dispatched = dispatchedKeys.get(x.callId);
        if (dispatched !== undefined && !dispatched.has(x.key)) {
          // TURN-24: a store that keeps a committed turn's keys (supports.callKeys) lets a read-back
          // report the key the call ran under, whatever the definition is now: any other key is one no
          // call ran under (an operator looking it up downstream finds nothing).
          if (ctx.stores.get(t.conversationId)?.store.capabilities?.supports?.callKeys === true) {
            add(
              "TURN-24",
              `${t.conversationId}: call ${x.callId} (turn ${t.turnIndex}) was dispatched under key ${[...dispatched].map((k) => short(k)).join(" / ")}, and a send reported it with key ${short(x.key)}${ctx.deployed.has(t.conversationId) ? " after a deploy" : ""}: ` +
                `a committed turn reads back with the keys its calls ran under, which the store keeps`,
            );
            continue;
          }
          // A store without the flag: after a deploy (scenario.ts `deploy`) a read-back derives the keys
          // under the new release's definition (TURN-24's residual): the key the call was dispatched
          // under is the one judged, and the difference counted.
          if (ctx.deployed.has(t.conversationId)) {
            ctx.diagnostics.deploy_readback_keys_rederived = (ctx.diagnostics.deploy_readback_keys_rederived ?? 0) + 1;
            continue;
          }
        }
        keyOfCall.set(x.callId, x.key);
      }
    }
  }
  for (const e of ctx.events) if (e.type === "turn_failed" || e.type === "attempt_superseded") for (const x of e.record.calls) if (x.key !== undefined) keyOfCall.set(x.callId, x.key);
  // TURN-23: the turn index a call was answered from, as each send reported it (produced or read back).
  const carriedOf = new Map<string, number | undefined>();
  const reportsOf = new Map<string, string>();
  for (const send of ctx.sends) {
    for (const t of send.result?.turns ?? []) {
      for (const x of t.calls) {
        if (x.key === undefined) continue;
        carriedOf.set(x.callId, x.carriedFromTurn);
        const report = `key ${short(x.key)}${x.carriedFromTurn === undefined ? "" : `, carried from turn ${x.carriedFromTurn}`}`;
        const earlier = reportsOf.get(x.callId);
        // Judged where a report says the call was carried (a runner's own keys read back are TURN-7's).
        if (earlier !== undefined && earlier !== report && (x.carriedFromTurn !== undefined || earlier.includes("carried from"))) {
          add("TURN-23", `${t.conversationId}: call ${x.callId} (turn ${t.turnIndex}) was reported with ${earlier} and, by a later send (a read-back), with ${report}: a committed turn reads back as it was dispatched`);
        }
        reportsOf.set(x.callId, report);
      }
    }
  }
  const namedBy = new Map<string, Set<string>>();
  const answersByKey = new Map<string, string>();
  /** Per conversation and key: the committed turn whose write call first answered with a success under it. */
  const successTurnOfKey = new Map<string, { turnIndex: number; where: string }>();
  /** Keys of write calls the committed conversation answers (as a success or an error). */
  const committedKeys = new Set<string>();
  for (const c of conversations) {
    for (const t of c.turns) {
      const uses = transcript.calls(t.assistant);
      const results = new Map(transcript.results(t.toolResults).map((b) => [b.id, b]));
      const seen = new Map<string, number>();
      /** Keys of this turn's committed write calls, by the call id that first used each. */
      const keysInTurn = new Map<string, string>();
      for (const use of uses) {
        const name = use.name ?? "";
        const identity = identityText(name, use.input);
        // The key the call was dispatched under, as the runner reported it; the spec's key when it did not.
        const reported = keyOfCall.get(use.id ?? "");
        // TURN-23: answered from a call an earlier turn of its message left unanswered, under that
        // turn's key (spec §3's key there, at an ordinal from 0 to 64); it still counts among its own
        // turn's identical calls (TURN-4), so an identical call after it takes the next ordinal.
        const carriedFrom = reported === undefined || (identity === undefined && kitToolName(name) === name) ? undefined : carriedTurnOf(c, t, name, use.input, reported, ctx.deployed.get(c.id));
        const claimed = carriedOf.get(use.id ?? "");
        if (WRITES.has(name) && reported !== undefined && claimed !== carriedFrom && !(claimed === undefined && carriedFrom !== undefined)) {
          add(
            "TURN-23",
            `${name} call ${use.id} (turn ${t.turnIndex} of ${c.id}, message ${JSON.stringify(t.messageId)}) was reported carried from turn ${String(claimed)}, ` +
              `but its key ${short(reported)} is ${carriedFrom === undefined ? "no earlier turn's key of this call" : `turn ${carriedFrom}'s key of this call`}`,
          );
        }
        if (carriedFrom !== undefined && WRITES.has(name)) ctx.diagnostics.deferred_calls_carried = (ctx.diagnostics.deferred_calls_carried ?? 0) + 1;
        const ordinal = identity === undefined ? 0 : (seen.get(`${name}|${identity}`) ?? 0);
        if (identity !== undefined) seen.set(`${name}|${identity}`, ordinal + 1);
        const specKey = expectedKey(c.id, t.turnIndex, name, use.input, ordinal);
        const key = reported ?? specKey;
        const block = results.get(use.id);
        if (WRITES.has(name) && block !== undefined && !block.isError && reported !== undefined) {
          const where = `${name} call ${use.id} (turn ${t.turnIndex} of ${c.id}, message ${JSON.stringify(t.messageId)})`;
          // DISPATCH-6: two calls of one committed response are two logical calls, two keys: one
          // key for both answers the second with the first's result and performs it once.
          const other = keysInTurn.get(reported);
          if (other !== undefined) {
            add(
              "DISPATCH-6",
              `${where} was dispatched under key ${short(reported)}, the key of call ${other} of the same committed response: ` +
                `two calls answered by one run (identical calls of one attempt take ordinals 0, 1, ...)`,
            );
          } else if (carriedFrom === undefined && specKey !== undefined && reported !== specKey && !ctx.adoptedKeys.has(reported)) {
            // (A row an earlier release claimed, adopted by a re-run's guard after a deploy, is the
            // call's by its stored request: of identical calls, not necessarily its own ordinal's, IDENT-10.)
            // TURN-4, TURN-6: the committed call's key is spec §3's for another ordinal (a count
            // that did not restart with the attempt, or counted other calls). Keys derived some
            // other way altogether are judged by their effects (CONF-2 above).
            const shifted = [...Array(8).keys()].find((o) => o !== ordinal && expectedKey(c.id, t.turnIndex, name, use.input, o) === reported);
            if (shifted !== undefined) {
              add(
                "TURN-4",
                `${where} was dispatched under key ${short(reported)}, the key of ordinal ${shifted}; ${ordinal} identical calls precede it in its ` +
                  `response, so its ordinal is ${ordinal} (key ${short(specKey)}): the ordinal counts identical calls of one attempt, from 0 in every attempt`,
              );
            }
          }
          keysInTurn.set(reported, use.id);
        }
        if (key !== undefined && block !== undefined && WRITES.has(name)) committedKeys.add(key);
        if (key === undefined || block === undefined || !WRITES.has(name)) continue;
        const { text } = block;
        const where = `${name} key ${short(key)} (turn ${t.turnIndex} of ${c.id}, message ${JSON.stringify(t.messageId)})`;
        const underKey = effectsByKey.get(key) ?? [];
        if (block.isError) {
          const code = (() => {
            try {
              return (JSON.parse(text) as { error?: { code?: string } }).error?.code;
            } catch {
              return undefined;
            }
          })();
          if (underKey.length > 0) {
            add(
              code === "idempotency_key_reused" ? "EFFECT-6" : "RECORD-3",
              `${where} was committed as an error (${text.slice(0, 160)}) but its effect happened: ${underKey.map(describeEffect).join(", ")}`,
            );
          }
          continue;
        }
        const previous = answersByKey.get(key);
        if (previous !== undefined && previous !== text) add("DISPATCH-5", `key ${short(key)} was committed with ${previous} and with ${text}`);
        answersByKey.set(key, text);
        // Committed turns have distinct indexes, so their calls have distinct keys: a success of
        // a later turn (a tool loop's next step) under an earlier turn's key was told that call's
        // result, and the effect it asked for, identical to the earlier one, was never made.
        const earlier = successTurnOfKey.get(`${c.id}\n${key}`);
        if (earlier === undefined) successTurnOfKey.set(`${c.id}\n${key}`, { turnIndex: t.turnIndex, where });
        else if (earlier.turnIndex !== t.turnIndex) {
          add(
            "CONF-2",
            `key ${short(key)} is the committed answer of calls of turns ${earlier.turnIndex} and ${t.turnIndex} of ${c.id}: ${where} was told the result of ` +
              `${earlier.where}, and the effect it asked for was never made (a later turn's calls take that turn's index in their keys, not the message's first turn's)`,
          );
        }
        if (underKey.length === 0) {
          add("CONF-2", `${where} was committed as a success (${text}) but nothing was performed under its key (a swallowed effect)`);
          continue;
        }
        let named: string | undefined;
        try {
          const result = JSON.parse(text) as { paymentId?: string; invoiceId?: string };
          named = name === "create_invoice" ? result.invoiceId : result.paymentId;
        } catch {
          named = undefined;
        }
        const effect = underKey[0]!;
        if (named !== effect.resourceId) {
          add("DISPATCH-5", `${where} was committed with ${text}, but the effect under its key is ${describeEffect(effect)}`);
        }
        const call: PlannedCall = { tool: name as PlannedCall["tool"], args: use.input as Record<string, unknown> };
        if (plannedSignature(call) !== effectSignature(effect, referenceOf)) {
          add("CONF-2", `${where} asked for "${plannedSignature(call)}" but the effect under its key is "${effectSignature(effect, referenceOf)}"`);
        }
        const root = intents.find(t.messageId);
        namedBy.set(effect.resourceId + effect.kind, (namedBy.get(effect.resourceId + effect.kind) ?? new Set()).add(root));
      }
    }
  }
  for (const [effect, roots] of namedBy) {
    if (roots.size > 1) {
      add("CONF-2", `one effect (${effect}) is the committed answer of ${roots.size} different intents (${[...roots].map((r) => JSON.stringify(r)).join(", ")}): one of them was swallowed`);
    }
  }

  // ---- STREAM-1, STREAM-8: an answered message's turns make every call its user asked for ----
  // The scripted model makes every planned call of the first turn in its first response to the
  // message, and a follow-up's in its next response (m.calls holds both). A turn
  // committed with calls its stream did not establish (a clean close taken for the end, a call
  // dispatched before its arguments were final) answers the message with those calls silently
  // gone or made with other arguments: nothing asked for was performed, and the user is told the
  // request was done. No other check sees it: no effect to
  // count, no record to read, and the committed log is well formed.
  //
  // A message whose first turn or follow-up turn the model answered differently on a re-run
  // (rerunDivergence, followUpDivergence: a call omitted, two swapped) may have committed either
  // response of each: its turns must then make every call of one of them per turn (the calls the
  // model dropped are not the library's to make; what an earlier attempt made of them is judged
  // below, by the records). A first turn answered with text alone has no follow-up.
  const tally = (calls: PlannedCall[]) => {
    const asked = new Map<string, number>();
    for (const call of calls) {
      const signature = plannedSignature(call);
      if (signature !== undefined) asked.set(signature, (asked.get(signature) ?? 0) + 1);
    }
    return asked;
  };
  for (const c of conversations) {
    for (const m of c.sent) {
      if (c.stored.get(m.id)?.state !== "answered") continue;
      const asked = tally(m.calls);
      const rerun = ctx.divergedTexts.get(contentOf(ctx.account, m.text)) ?? [];
      const followUp = m.plan.followUp ?? [];
      // The first turn's and the follow-up's calls as asked (m.calls: the first turn's, then the follow-up's).
      const askedFirst = m.calls.slice(0, m.calls.length - followUp.length);
      const askedLoop = m.calls.slice(m.calls.length - followUp.length);
      const firsts = rerun[0] !== undefined ? [askedFirst, rerun[0]] : [askedFirst];
      const loops = rerun[1] !== undefined ? [askedLoop, rerun[1]] : [askedLoop];
      // Every combination of the responses the model gave, but the one the user asked for.
      const alternatives = firsts.flatMap((first) => (first.length === 0 ? [first] : loops.map((loop) => [...first, ...loop]))).slice(1);
      const made = new Map<string, number>();
      for (const t of c.turns) {
        if (t.messageId !== m.id) continue;
        for (const use of transcript.calls(t.assistant)) {
          const signature = plannedSignature({ tool: (use.name ?? "") as PlannedCall["tool"], args: (use.input ?? {}) as Record<string, unknown> });
          if (signature !== undefined) made.set(signature, (made.get(signature) ?? 0) + 1);
        }
      }
      const makes = (calls: PlannedCall[]) => [...tally(calls)].every(([signature, count]) => (made.get(signature) ?? 0) >= count);
      if (!makes(m.calls) && alternatives.some(makes)) {
        ctx.diagnostics.answered_by_divergent_rerun = (ctx.diagnostics.answered_by_divergent_rerun ?? 0) + 1;
        continue;
      }
      for (const [signature, count] of asked) {
        const committed = made.get(signature) ?? 0;
        if (committed < count) {
          add(
            "STREAM-8",
            `${c.id}: message ${JSON.stringify(m.id)} was answered, but its committed turns make ${committed} of the ${count} "${signature}" calls it asked for: ` +
              `a turn committed with calls its stream did not establish (before their arguments were final, or without the finishing event) answers the message with the call silently gone`,
          );
        }
      }
    }
  }

  // ---- STREAM-8, STREAM-10, STREAM-17: a committed turn is one response's ----
  // Its calls are, in order and with their arguments, those of one response the model gave to its
  // message's words (the mock's log: every response it rendered, and each one a proxy spliced into
  // another's body). A turn that took a spliced response in (its second message_start or
  // response.created, STREAM-8; its first item on a position of another type, STREAM-17; its items
  // on held ones of their own type that name other items, STREAM-10) mixes two:
  // the call that ran beside the other response's calls, or its place taken by the other's text,
  // the ran call's arguments beside the other's re-worded memo. The shared judge of the chaos
  // suite (mixedResponses). The counts above see the extra payment; this sees the mixed turn.
  for (const c of conversations) {
    for (const t of c.turns) {
      const committed = transcript.calls(t.assistant).map((u) => ({ name: u.name, input: u.input }));
      const m = c.sent.find((x) => x.id === t.messageId);
      if (committed.length === 0 || m === undefined) continue;
      const text = contentOf(ctx.account, m.text);
      const asked = responses.filter((r) => r.text === text);
      const mixed = mixedResponses(committed, asked.map((r) => r.calls));
      if (mixed === undefined) continue;
      const shapes = new Set(asked.flatMap((r) => (r.spliced === undefined ? [] : [r.spliced])));
      // The rule whose check the splice needed: STREAM-8 for a second start, STREAM-17 for a
      // sentence on a call's position, STREAM-10 for items that land on held ones of their type.
      // STREAM-10 too for a call a relay delivered again whole at another position (SplicePlan `repeat`).
      const repeated = asked.some((r) => r.repeatedCall !== undefined);
      const rule = shapes.has("restart") ? "STREAM-8" : shapes.has("headless") ? "STREAM-17" : shapes.has("headless_bare") || repeated ? "STREAM-10" : "STREAM-8";
      add(
        rule,
        `${c.id}: turn ${t.turnIndex} (message ${JSON.stringify(t.messageId)}) committed the calls [${mixed.committed}], which are no one response's: ` +
          `the model's responses to its words made ${mixed.responses.map((r, i) => `[${r}]${asked[i]!.spliced !== undefined ? ` (spliced into another's body, ${asked[i]!.spliced === "restart" ? "with its own start" : asked[i]!.spliced === "headless" ? "without its start" : "without its start or a lead"})` : ""}${asked[i]!.repeatedCall !== undefined ? ` (its call ${asked[i]!.repeatedCall} delivered again whole by a relay, at another position)` : ""}`).join(", ")}`,
      );
    }
  }

  // ---- STREAM-15: a committed turn keeps its response's reasoning, as delivered, in place ----
  // The response whose calls a turn committed (call ids are minted per response) opened with a
  // thinking block / reasoning item, which the turn's next request must carry back: the turn keeps
  // that one, as its stream delivered it (text and signature; id, summary and encrypted content)
  // and at its position, and no other response's (a cut attempt's reasoned afresh; its item vouches
  // for nothing committed). The mocks refuse a request whose reasoning is dropped or altered (the
  // Messages API's signature, the Responses API's pairing and encrypted content), but not one whose
  // reasoning is a cut attempt's, well formed, and a refused request fails a turn the level accepts
  // in a run with faults: this judges each committed turn, the last of a conversation too.
  for (const r of responses) if (r.cutInReasoning === true) ctx.diagnostics.cuts_inside_reasoning = (ctx.diagnostics.cuts_inside_reasoning ?? 0) + 1;
  /** What names a reasoning item: a reasoning item's id, a thinking block's signature, a redacted one's data. */
  const nameOf = (item: unknown): string => {
    const i = item as { id?: unknown; signature?: unknown; data?: unknown };
    return typeof i.id === "string" ? i.id : typeof i.signature === "string" ? i.signature : String(i.data);
  };
  const labelOf = (item: unknown): string => {
    const i = item as { type?: unknown; id?: unknown };
    return typeof i.id === "string" ? `reasoning item ${i.id}` : `${String(i.type).replace("_", " ")} block ${nameOf(item).slice(0, 12)}…`;
  };
  for (const c of conversations) {
    for (const t of c.turns) {
      const items = transcript.items?.(t.assistant);
      const ids = transcript.calls(t.assistant).map((u) => u.id);
      if (items === undefined || ids.length === 0) continue;
      const own = responses.find((r) => r.spliced === undefined && r.reasoning !== undefined && ids.every((id) => r.callIds.includes(id)));
      if (own?.reasoning === undefined) continue;
      const turn = `${c.id}: turn ${t.turnIndex} (message ${JSON.stringify(t.messageId)})`;
      const whose = (item: unknown) => responses.find((r) => r !== own && [...(r.reasoning ?? []).map((x) => x.item), ...(r.reasoningCut ?? [])].some((x) => nameOf(x) === nameOf(item)));
      const expected = new Set(own.reasoning.map((x) => nameOf(x.item)));
      const byId = (item: unknown) => items.find((x) => x.reasoning && (x.item as { id?: unknown }).id !== undefined && (x.item as { id?: unknown }).id === (item as { id?: unknown }).id);
      for (const { index, item } of own.reasoning) {
        const at = items.find((x) => x.index === index);
        // Kept: the same item (by what names it), or one with its id (a reasoning item altered).
        const kept = items.find((x) => x.reasoning && nameOf(x.item) === nameOf(item)) ?? byId(item);
        if (kept === undefined && (at?.reasoning !== true || expected.has(nameOf(at.item)))) {
          add("STREAM-15", `${turn} committed without the ${labelOf(item)} that opened the response it committed (request ${own.request?.number}, attempt ${own.request?.attempt}): its next request does not carry the model's reasoning back`);
        } else if (kept !== undefined && kept.index !== index) {
          add("STREAM-15", `${turn} committed the ${labelOf(item)} at position ${kept.index}, not at position ${index} where its response delivered it`);
        } else if (kept !== undefined && !sameJson(kept.item, item)) {
          const a = kept.item as Record<string, unknown>;
          const b = item as Record<string, unknown>;
          const differ = [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => !sameJson(a[k], b[k]));
          add("STREAM-15", `${turn}: its ${labelOf(item)} at position ${index} is not as the stream delivered it: ${differ.map((k) => JSON.stringify(k)).join(", ")} differ`);
        } else if (kept !== undefined) {
          // Counted, so that a certification shows the check had items to judge.
          ctx.diagnostics.committed_reasoning_items = (ctx.diagnostics.committed_reasoning_items ?? 0) + 1;
        }
      }
      for (const x of items) {
        if (!x.reasoning || expected.has(nameOf(x.item)) || own.reasoning.some((o) => byId(o.item) === x)) continue;
        const other = whose(x.item);
        const cutShort = other?.reasoningCut?.some((r) => nameOf(r) === nameOf(x.item)) === true ? ", cut before it stopped" : "";
        const from = other === undefined ? "one no response of the model delivered" : `another response's (request ${other.request?.number}, attempt ${other.request?.attempt}${other.spliced !== undefined ? ", spliced into another's body" : ""}${cutShort})`;
        add("STREAM-15", `${turn}: its ${labelOf(x.item)} at position ${x.index} is ${from}, not the one the response it committed delivered (${own.reasoning.map((o) => labelOf(o.item)).join(", ")}, request ${own.request?.number})`);
      }
    }
  }

  // Beside a reasoning item the Responses API pairs it with the item after it by that item's id, and
  // refuses an id-less message there: a message a turn commits beside its response's reasoning item
  // is the message item that response delivered, as delivered (id, status, parts). A reasoning model
  // reasons on every response, so this judges text answers too (turns without calls, which the
  // check above leaves out); a refused next request would only fail a turn, which a run with faults may do.
  for (const c of conversations) {
    for (const t of c.turns) {
      const items = transcript.items?.(t.assistant);
      if (items === undefined) continue;
      const kept = items.filter((x) => x.reasoning);
      const own = responses.find((r) => r.spliced === undefined && r.messages !== undefined && kept.some((x) => r.reasoning?.some((o) => nameOf(o.item) === nameOf(x.item))));
      if (own === undefined) continue;
      const turn = `${c.id}: turn ${t.turnIndex} (message ${JSON.stringify(t.messageId)})`;
      for (const x of items) {
        if ((x.item as { type?: unknown }).type !== "message") continue;
        const delivered = own.messages!.find((m) => m.index === x.index)?.item as Record<string, unknown> | undefined;
        if (delivered !== undefined && sameJson(delivered, x.item)) {
          ctx.diagnostics.committed_reasoned_messages = (ctx.diagnostics.committed_reasoned_messages ?? 0) + 1;
          continue;
        }
        const beside = `beside ${own.reasoning!.map((o) => labelOf(o.item)).join(", ")} (request ${own.request?.number}, attempt ${own.request?.attempt})`;
        if (delivered === undefined) {
          add("STREAM-15", `${turn}: its message at position ${x.index}, ${beside}, is no message item its response delivered there`);
          continue;
        }
        const a = x.item as Record<string, unknown>;
        const differ = [...new Set([...Object.keys(a), ...Object.keys(delivered)])].filter((k) => !sameJson(a[k], delivered[k]));
        add("STREAM-15", `${turn}: its message at position ${x.index}, ${beside}, is not the message item ${String(delivered.id)} as the stream delivered it: ${differ.map((k) => JSON.stringify(k)).join(", ")} differ (the API refuses a reasoning item whose following item it cannot pair by its id)`);
      }
    }
  }

  // ---- STREAM-8, STREAM-10, STREAM-17: no call of a spliced response reaches the dispatcher ----
  // The attempt ends, failed, at the first event of the spliced response the stream side can tell
  // (its start; its first item, on a position of another type or naming another item of its type),
  // and nothing after that event belongs to it: every call an attempt dispatches is its body's own
  // response's. The mocks mint call ids per response, so a dispatched id that only a spliced
  // response carried was taken from it. The judges above see such a call only by its harm, and
  // only when there is one to count: the turn committed (a mixed turn, a result for a call the turn
  // lost) or the payments exceed what the user asked for. A stream side that lets a spliced
  // response's sentence replace the call that ran, and then dispatches the spliced response's
  // calls, passed every run where that attempt failed on another fault (a lost payments response,
  // an earlier unknown outcome) and where each spliced call was one its message asked for again
  // (a call the model re-ran identically under the ordinal a later call of the message takes).
  const ownCallIds = new Set(responses.flatMap((r) => (r.spliced === undefined ? r.callIds : [])));
  const splicedCall = new Map<string, ModelResponse>();
  for (const r of responses) if (r.spliced !== undefined) for (const id of r.callIds) if (!ownCallIds.has(id)) splicedCall.set(id, r);
  for (const e of ctx.events) {
    if (e.type !== "call_complete") continue;
    const r = splicedCall.get(e.callId);
    if (r === undefined) continue;
    const [rule, how] =
      r.spliced === "restart"
        ? ["STREAM-8", "with its own start"]
        : r.spliced === "headless"
          ? ["STREAM-17", "without its start, led by a sentence on a call's position"]
          : ["STREAM-10", "without its start or a lead, its items on held ones of their type"];
    add(
      rule,
      `${e.conversationId}: turn ${e.turnIndex} attempt ${e.attempt} (${e.worker}) dispatched ${e.name} (${e.callId}) at position ${e.index}, a call of the response a proxy spliced into another's body ` +
        `(${how}; its calls [${r.calls.map((c) => c.name).join(", ")}]): the attempt took the spliced response in instead of ending, failed, at its first event it could tell`,
    );
  }

  // ---- RECORD-8: a committed turn's record of earlier runs is kept beside the conversation ----
  for (const e of ctx.events) {
    if (e.type !== "resumed_turn_recorded") continue;
    const c = conversations.find((x) => x.id === e.conversationId);
    if (!(c?.records.some((r) => sameJson(r, e.record)) ?? false)) {
      add("RECORD-8", `the record of committed turn ${e.turnIndex} of ${e.conversationId} (message ${JSON.stringify(e.record.messageId)}, ${e.worker}) was reported but is not kept beside the conversation${describeStoredCopy(c?.records ?? [], e.record)}`);
    }
  }

  // ---- records: every effect listed, none denied (RECORD-2, RECORD-4, RECORD-5, TURN-13) ----
  const bySeq = new Map(effects.map((e) => [e.seq, e]));
  /** The call entries found denying an effect, by record and entry: a kept copy's same lie is not reported again. */
  const deniedEntries = new Set<string>();
  const entryId = (r: FailedTurnRecord | SupersededAttemptRecord, x: CallRecord) =>
    JSON.stringify([r.kind, r.conversationId, r.messageId, r.turnIndex, x.callId, x.attempt, x.key]);
  for (const e of ctx.events) {
    if (e.type !== "turn_failed" && e.type !== "attempt_superseded") continue;
    const record: FailedTurnRecord | SupersededAttemptRecord = e.record;
    const rule = record.kind === "failed_turn" ? "RECORD-5" : "TURN-13";
    const what = `the ${record.kind === "failed_turn" ? "failed-turn record" : "superseded-attempt record"} of turn ${record.turnIndex} (message ${JSON.stringify(record.messageId)}, ${e.worker})`;
    const seen = [...(e.effectsSeen ?? [])].map((s) => bySeq.get(s)).filter((x): x is Effect => x !== undefined);
    const seenUnder = (key: string) => seen.filter((x) => x.idempotencyKey === key);
    // RECORD-4, TURN-13: what the runner reported is what the user can read beside the conversation.
    const c = conversations.find((x) => x.id === record.conversationId);
    const kept = c?.records.some((r) => sameJson(r, record)) ?? false;
    if (!kept) add(record.kind === "failed_turn" ? "RECORD-4" : "TURN-13", `${what} is not kept beside the conversation${describeStoredCopy(c?.records ?? [], record)}`);
    if (record.kind === "failed_turn") {
      if (record.retryable && record.calls.some((x) => x.status === "outcome_unknown" || x.status === "result_not_storable")) {
        add("RECORD-5", `${what} says a re-send can help although an effect is left unknown or unstorable`);
      }
    }
    // The calls this worker's attempts of this turn ran (a dead worker writes no record).
    const started = ctx.events
      .filter(
        (x) =>
          x.type === "attempt_started" &&
          x.worker === e.worker &&
          x.send === e.send &&
          x.conversationId === record.conversationId &&
          x.turnIndex === record.turnIndex &&
          x.messageId === record.messageId &&
          x.attempt === (record.kind === "failed_turn" ? 1 : record.attempt) &&
          x.at <= e.at,
      )
      .at(-1);
    const from = (started?.at ?? e.at) - ctx.started;
    const to = e.at - ctx.started;
    const ran = ctx.runs.filter(
      (r) => r.worker === e.worker && r.send === e.send && r.conversationId === record.conversationId && r.turnIndex === record.turnIndex && r.startedAt >= from && r.endedAt !== undefined && r.endedAt <= to,
    );
    const listed = (key: string): CallRecord[] => record.calls.filter((x) => x.key === key);
    for (const r of ran) {
      const made = seenUnder(r.key);
      if (made.length === 0) continue;
      const calls = listed(r.key);
      const summary = record.kind === "failed_turn" ? record.effects.find((x) => x.key === r.key) : undefined;
      if (!calls.some((x) => SAYS_MAYBE.has(x.effect)) || (record.kind === "failed_turn" && (summary === undefined || !SAYS_MAYBE.has(summary.effect)))) {
        add(
          rule,
          `${what} ${calls.length === 0 ? "omits" : `says ${calls.map((x) => `${x.status}/${x.effect}`).join(", ")} for`} ${r.tool} key ${short(r.key)}, ` +
            `whose effect happened in one of its attempts: ${made.map(describeEffect).join(", ")}`,
        );
      }
    }
    // Each call entry speaks for its own attempt: "not_happened" is a lie when that attempt's
    // time saw the effect made, or when any run under its key made it before that attempt began
    // (RECORD-2: a call whose effect may have happened is not described as failed or not run;
    // RECORD-6 in a resumed turn: an earlier holder's effect). The per-key summary speaks for the
    // whole turn. The attempt is identified from the events, not by its number alone: attempt
    // numbers restart with every send, and a record may carry the attempts of earlier sends
    // (RECORD-5). An entry is tied to the call_resolved event logged for its call id and key with
    // its attempt number (this worker and send's first, else an earlier send's: then it is judged
    // against that send's attempt), and through it to the attempt_started that began it.
    const scope: RecordScope = { worker: e.worker, send: e.send, until: ctx.events.indexOf(e), at: e.at - ctx.started };
    for (const x of record.calls) {
      if (x.key === undefined || x.effect !== "not_happened") continue;
      const attempt = attemptOfEntry(ctx, scope, record, x);
      if (attempt === undefined) {
        // Tied to no attempt (a call no logged attempt resolved): judged by what the events can
        // say, against every attempt of that number the turn had before the record.
        ctx.diagnostics.record_entry_attempt_unidentified = (ctx.diagnostics.record_entry_attempt_unidentified ?? 0) + 1;
        const denied = deniedUnresolvedEntry(ctx, scope, record, x, seenUnder(x.key), effectsByKey.get(x.key) ?? [], record.kind === "failed_turn" && record.resumed === true);
        if (denied !== undefined) {
          deniedEntries.add(entryId(record, x));
          add("RECORD-2", `${what} ${denied}`);
        }
        continue;
      }
      ctx.diagnostics[attempt.carried ? "record_entry_attempt_of_earlier_send" : "record_entry_attempt_identified"] =
        (ctx.diagnostics[attempt.carried ? "record_entry_attempt_of_earlier_send" : "record_entry_attempt_identified"] ?? 0) + 1;
      const denied = deniedEffectOf(ctx, attempt, x, seenUnder(x.key), effectsByKey.get(x.key) ?? [], record.kind === "failed_turn" && record.resumed === true);
      if (denied !== undefined) {
        deniedEntries.add(entryId(record, x));
        add("RECORD-2", `${what} ${denied}`);
      }
    }
    if (record.kind === "failed_turn") {
      for (const x of record.effects) {
        const made = x.effect === "not_happened" ? seenUnder(x.key) : [];
        if (made.length > 0) add("RECORD-5", `${what} sums up ${x.name} key ${short(x.key)} as not_happened, but it happened: ${made.map(describeEffect).join(", ")}`);
      }
    }
    for (const x of record.calls) {
      if (x.key === undefined || x.effect !== "happened") continue;
      if (seenUnder(x.key).length === 0) add("RECORD-2", `${what} says ${x.name} key ${short(x.key)} happened (${x.status}), but nothing was performed under that key`);
    }
  }
  // RECORD-5 on what the user reads, not only on what the runner reported: every failed-turn record
  // kept beside a conversation (a store may keep more than it was given, or rewrite a copy) never
  // sums up a key as not_happened when an effect under it was made before the record was written
  // (strictly before its millisecond: the record's own clock and the effect log's are this host's).
  // A kept copy that differs from the record a worker reported (same message, turn and time) is read
  // with that report's send too, as RECORD-2's check below does: an effect the worker had seen when it
  // reported, and that its own record does not sum up as not_happened, was made before either was
  // written, also when both fall in one millisecond.
  // The records workers reported, and for a kept record that is none of them the report it is a copy
  // of (same kind, message, turn, attempt and time), if any: read in that report's send.
  const reported = ctx.events.filter((x) => x.type === "turn_failed" || x.type === "attempt_superseded");
  const isReported = (stored: FailedTurnRecord | SupersededAttemptRecord) => reported.some((x) => sameJson(x.record, stored));
  const copyOf = (stored: FailedTurnRecord | SupersededAttemptRecord) =>
    reported.find(
      (x) =>
        x.record.kind === stored.kind &&
        x.record.conversationId === stored.conversationId &&
        x.record.messageId === stored.messageId &&
        x.record.turnIndex === stored.turnIndex &&
        x.record.at === stored.at &&
        (stored.kind !== "superseded_attempt" || (x.record as SupersededAttemptRecord).attempt === stored.attempt),
    );
  for (const c of conversations) {
    for (const stored of c.records as unknown as FailedTurnRecord[]) {
      if (stored === null || typeof stored !== "object" || stored.kind !== "failed_turn" || !Array.isArray(stored.effects)) continue;
      const writtenAt = Date.parse(stored.at);
      if (!Number.isFinite(writtenAt)) continue;
      const of = isReported(stored) ? undefined : copyOf(stored);
      for (const x of stored.effects) {
        if (x.effect !== "not_happened") continue;
        const seenByReport =
          of !== undefined && !(of.record as FailedTurnRecord).effects.some((y) => y.key === x.key && y.effect === "not_happened") ? of.effectsSeen : undefined;
        const made = (effectsByKey.get(x.key) ?? []).filter((e) => Date.parse(e.at) < writtenAt || (seenByReport?.has(e.seq) ?? false));
        if (made.length > 0) {
          add(
            "RECORD-5",
            `${c.id}: a failed-turn record kept beside the conversation (turn ${stored.turnIndex}, message ${JSON.stringify(stored.messageId)}, written ${stored.at}) ` +
              `sums up ${x.name} key ${short(x.key)} as not_happened, but it happened before the record was written: ${made.map(describeEffect).join(", ")}`,
          );
        }
      }
    }
  }
  // RECORD-2 on what the user reads: the call entries of every failed-turn and superseded-attempt
  // record kept beside a conversation, judged as the reported ones above (a store may keep a second
  // copy or rewrite one; a failed-turn record written after its holder lost the lease is kept and
  // not reported). A kept record identical to a reported one was judged above, and a lie found
  // above is not reported again; the counterexample says which copy lies. A copy of a reported
  // record (same kind, message, turn, attempt and time) is read in that report's send; one no
  // worker reported, in no send of its own (its entries tied to whichever send resolved them),
  // against the effects made before its time.
  for (const c of conversations) {
    for (const stored of c.records as unknown as (FailedTurnRecord | SupersededAttemptRecord)[]) {
      if (stored === null || typeof stored !== "object" || (stored.kind !== "failed_turn" && stored.kind !== "superseded_attempt") || !Array.isArray(stored.calls)) continue;
      if (isReported(stored)) continue;
      const writtenAt = Date.parse(stored.at) - ctx.started;
      if (!Number.isFinite(writtenAt)) continue;
      const of = copyOf(stored);
      const until = of !== undefined ? ctx.events.indexOf(of) : ctx.events.findIndex((x) => x.at - ctx.started > writtenAt);
      const scope: RecordScope = of !== undefined ? { worker: of.worker, send: of.send, until, at: of.at - ctx.started } : { until: until < 0 ? ctx.events.length : until, at: writtenAt };
      const seen = (key: string) =>
        (effectsByKey.get(key) ?? []).filter((y) => (of !== undefined ? (of.effectsSeen?.has(y.seq) ?? false) : Date.parse(y.at) - ctx.started < writtenAt));
      const kind = stored.kind === "failed_turn" ? "failed-turn record" : `superseded-attempt record (attempt ${stored.attempt})`;
      const which =
        of !== undefined
          ? `a copy of the one ${of.worker} reported, which it does not match`
          : "a record no worker reported";
      for (const x of stored.calls) {
        if (x === null || typeof x !== "object" || x.key === undefined || x.effect !== "not_happened") continue;
        if (deniedEntries.has(entryId(stored, x))) continue;
        const attempt = attemptOfEntry(ctx, scope, stored, x);
        if (attempt === undefined) ctx.diagnostics.kept_record_entry_attempt_unidentified = (ctx.diagnostics.kept_record_entry_attempt_unidentified ?? 0) + 1;
        else ctx.diagnostics.kept_record_entry_judged = (ctx.diagnostics.kept_record_entry_judged ?? 0) + 1;
        const denied =
          attempt === undefined
            ? deniedUnresolvedEntry(ctx, scope, stored, x, seen(x.key), effectsByKey.get(x.key) ?? [], stored.resumed === true)
            : deniedEffectOf(ctx, attempt, x, seen(x.key), effectsByKey.get(x.key) ?? [], stored.resumed === true);
        if (denied === undefined) continue;
        deniedEntries.add(entryId(stored, x));
        add(
          "RECORD-2",
          `${c.id}: the ${kind} of turn ${stored.turnIndex} (message ${JSON.stringify(stored.messageId)}, written ${stored.at}) kept beside the conversation (${which}) ${denied}`,
        );
      }
    }
  }
  // Across workers: a message that ended failed must have every effect its turn made listed in
  // one of its records, whichever live worker made it (RECORD-5). A dead worker writes no record
  // and nobody else learns its keys unless a later attempt reaches the same call: such an effect
  // is judged by checkEveryEffectAccounted below (RECORD-6: the resumed turn's record must say
  // that an earlier holder's attempts may have had effects it does not list).
  const deadWorkers = new Set(ctx.timeline.filter((t) => t.what.startsWith("DIES")).map((t) => t.who));
  for (const c of conversations) {
    for (const [id, s] of c.stored) {
      if (s.state !== "failed" || s.turnIndex === undefined) continue;
      // The turn that failed: after the turns of its tool loop it committed (a follow-up turn
      // fails after its first turn committed; the first turn's calls are answered in the log).
      const failedAt = s.turnIndex + c.turns.filter((t) => t.messageId === id).length;
      const records = c.records.filter(
        (r) => (r as { messageId?: string }).messageId === id && (r as { turnIndex?: number }).turnIndex === failedAt,
      ) as unknown as (FailedTurnRecord | SupersededAttemptRecord)[];
      const listed = new Set(records.flatMap((r) => r.calls.filter((x) => x.key !== undefined && SAYS_MAYBE.has(x.effect)).map((x) => x.key!)));
      // Its own runs: from its first attempt to its last record. Others at this index belong to
      // the messages before or after it (TURN-12).
      const until = Math.max(...records.map((r) => Date.parse(r.at) - ctx.started));
      const first = ctx.events.find((e) => e.type === "attempt_started" && e.conversationId === c.id && e.messageId === id && e.turnIndex === failedAt);
      const since = first === undefined ? until : first.at - ctx.started;
      // A run belongs to the message whose attempt its worker was in when it ran: several
      // messages can share a turn index (a re-ask after a failure, TURN-12), and a stalled
      // worker's late record must not pull another message's runs into this one's window.
      const messageOfRun = (x: (typeof ctx.runs)[number]): string | undefined =>
        ctx.events
          .filter(
            (e) =>
              e.type === "attempt_started" &&
              e.worker === x.worker &&
              e.conversationId === x.conversationId &&
              e.turnIndex === x.turnIndex &&
              e.at - ctx.started <= x.startedAt,
          )
          .map((e) => (e as { messageId?: string }).messageId)
          .at(-1);
      for (const r of ctx.runs.filter(
        (x) => x.conversationId === c.id && x.turnIndex === failedAt && x.startedAt >= since && x.startedAt <= until && messageOfRun(x) === id,
      )) {
        const madeBefore = (effectsByKey.get(r.key) ?? []).filter((x) => Date.parse(x.at) - ctx.started <= until);
        if (madeBefore.length === 0 || listed.has(r.key)) continue;
        listed.add(r.key);
        if (deadWorkers.has(r.worker)) {
          ctx.diagnostics.unlisted_effect_of_dead_worker = (ctx.diagnostics.unlisted_effect_of_dead_worker ?? 0) + 1;
          continue;
        }
        add(
          "RECORD-5",
          `${c.id}: message ${JSON.stringify(id)} ended failed, and none of its ${records.length} records lists ${r.tool} key ${short(r.key)}, ` +
            `whose effect ${r.worker} made at its turn ${failedAt}: ${madeBefore.map(describeEffect).join(", ")}`,
        );
      }
    }
  }
  // What the committed-call checks read, counted: a transcript reader that found no call would pass them all.
  ctx.diagnostics.committed_write_calls = (ctx.diagnostics.committed_write_calls ?? 0) + committedKeys.size;
  checkEveryEffectAccounted(ctx, conversations, effects, committedKeys, deadWorkers, add);
  for (const c of conversations) {
    for (const [id, s] of c.stored) {
      if (s.state !== "failed") continue;
      const failure = s.failure as { kind?: string; messageId?: string } | undefined;
      if (failure?.kind !== "failed_turn" || failure.messageId !== id) add("RECORD-4", `${c.id}: failed message ${JSON.stringify(id)} has no failed-turn record of its own`);
    }
  }

  // ---- DISPATCH-5: every answer the senders got for one key is the same bytes, naming a real effect ----
  const createdIds = new Set(effects.filter((e) => e.kind === "payment_created").map((e) => e.resourceId));
  for (const send of ctx.sends) {
    for (const t of send.result?.turns ?? []) {
      for (const call of t.calls) {
        if (call.key === undefined || call.result === undefined || call.name === "search_payments") continue;
        const text = JSON.stringify(call.result);
        const previous = answersByKey.get(`sent:${call.key}`);
        if (previous !== undefined && previous !== text) add("DISPATCH-5", `key ${short(call.key)} answered ${previous} and later ${text}`);
        answersByKey.set(`sent:${call.key}`, text);
        const id = (call.result as { paymentId?: string }).paymentId;
        if (kitToolName(call.name) === "send_payment" && id !== undefined && !createdIds.has(id)) {
          add("DISPATCH-5", `send_payment answered with ${id}, which the payments API never created`);
        }
      }
    }
  }

  // ---- STREAM-3: an abandoned call is never dispatched in the attempt that abandoned it ----
  const completed = new Set(ctx.events.filter((e) => e.type === "call_complete").map((e) => (e as { callId: string }).callId));
  for (const e of ctx.events) {
    if (e.type === "call_abandoned" && completed.has(e.callId)) add("STREAM-3", `call ${e.callId} was abandoned but also dispatched`);
  }

  checkDefinitionChanged(ctx, conversations, transcript, keyOfCall, effectsByKey, runsByKey, add);
  checkRecordInputs(ctx, conversations, effectsByKey, runsByKey, add);

  // ---- a calm run is boring: no failure, no takeover, no unknown outcome, every message answered ----
  checkReusedIds(ctx, conversations, add);
  if (faultFree(ctx.scenario)) checkCalm(ctx, conversations, add);

  return violations;
}

/** The attempt a record's call entry was tied to: its time (from the case's start) and the send that ran it. */
interface EntryAttempt {
  begin: number;
  end: number;
  worker: string;
  send: number | undefined;
  /** True when the attempt is of another send than the one that reported the record (an entry carried over). */
  carried: boolean;
}

/**
 * Where a record is read from: the worker and send that reported it (none for a record only kept
 * beside the conversation), the events logged before it (`until`, an index into ctx.events) and
 * its time from the case's start.
 */
interface RecordScope {
  worker?: string;
  send?: number;
  until: number;
  at: number;
}

/**
 * The attempt a record's call entry belongs to, identified from the events the kit logged rather
 * than from its attempt number alone (numbers restart with every send, and a record may carry the
 * attempts of earlier sends): the last call_resolved logged before the record for the entry's
 * call id (and key, which the event carries only for a call that resolved with a result), turn and
 * attempt number — the record's own worker and send first, then any other's (an entry carried
 * over from an earlier send, a re-send's or an earlier holder's: call ids are minted per response,
 * so the call id names the send) — and the last attempt_started of that worker, send,
 * conversation, message, turn index and attempt number before it. Begin is that attempt's start;
 * end the next attempt's start of the same send and turn, else the record's time for its own
 * send, or that send's last event before the record for another. Undefined when the events do not
 * say (a call no attempt resolved).
 */
function attemptOfEntry(ctx: CaseContext, scope: RecordScope, record: FailedTurnRecord | SupersededAttemptRecord, entry: CallRecord): EntryAttempt | undefined {
  const inTurn = (x: RecordedEvent) => x.conversationId === record.conversationId && x.turnIndex === record.turnIndex;
  const resolves = (x: RecordedEvent) =>
    x.type === "call_resolved" && inTurn(x) && x.attempt === entry.attempt && x.callId === entry.callId && (x.key ?? entry.key) === entry.key;
  // Positions in the event log, which is in the order the events happened (ties of the clock included).
  const lastBefore = (match: (x: RecordedEvent) => boolean, from: number): number => {
    for (let i = from - 1; i >= 0; i--) if (match(ctx.events[i]!)) return i;
    return -1;
  };
  let resolvedAt = scope.worker === undefined ? -1 : lastBefore((x) => resolves(x) && x.worker === scope.worker && x.send === scope.send, scope.until);
  if (resolvedAt < 0) resolvedAt = lastBefore(resolves, scope.until);
  if (resolvedAt < 0) return undefined;
  const resolved = ctx.events[resolvedAt]!;
  const sameSend = (x: RecordedEvent) => x.worker === resolved.worker && x.send === resolved.send && inTurn(x);
  const startAt = lastBefore((x) => x.type === "attempt_started" && sameSend(x) && x.messageId === record.messageId, resolvedAt);
  const start = startAt < 0 ? undefined : ctx.events[startAt]!;
  if (start?.type !== "attempt_started" || start.attempt !== entry.attempt) return undefined;
  const own = resolved.worker === scope.worker && resolved.send === scope.send;
  const next = ctx.events.slice(startAt + 1, scope.until).find((x) => x.type === "attempt_started" && sameSend(x) && x.messageId === record.messageId);
  const lastOfSend = own ? undefined : ctx.events[lastBefore((x) => x.worker === resolved.worker && x.send === resolved.send, scope.until)];
  const end = next !== undefined ? next.at - ctx.started : lastOfSend !== undefined ? lastOfSend.at - ctx.started : scope.at;
  return { begin: start.at - ctx.started, end, worker: resolved.worker, send: resolved.send, carried: !own && scope.worker !== undefined };
}

/**
 * What is untrue in a call entry's `not_happened`, judged against the attempt it was tied to
 * (RECORD-2; RECORD-6 in a resumed turn): an effect under its key made in that attempt's time and
 * seen when the record was written (`seen`), or one any run made before the attempt began
 * (`underKey`). Undefined when neither: the entry may be true of its attempt.
 */
function deniedEffectOf(ctx: CaseContext, attempt: EntryAttempt, entry: CallRecord, seen: Effect[], underKey: Effect[], resumed: boolean): string | undefined {
  const madeAt = (x: Effect) => Date.parse(x.at) - ctx.started;
  const send = `${attempt.worker}, send ${attempt.send ?? "?"}${attempt.carried ? ", an entry carried over from that earlier send" : ""}`;
  const within = seen.filter((y) => madeAt(y) >= attempt.begin && madeAt(y) <= attempt.end);
  if (within.length > 0) {
    return (
      `says ${entry.name} key ${short(entry.key)} did not happen in attempt ${entry.attempt} (${entry.status}${attempt.carried ? `; ${send}` : ""}), ` +
      `but that attempt made it: ${within.map(describeEffect).join(", ")}`
    );
  }
  const before = underKey.filter((y) => madeAt(y) < attempt.begin);
  if (before.length === 0) return undefined;
  return (
    `says ${entry.name} key ${short(entry.key)} did not happen in attempt ${entry.attempt} (${entry.status}; ${send}), ` +
    `but a run under that key made it before that attempt began (t=${Math.round(attempt.begin)}ms)` +
    `${resumed ? " in a resumed turn (RECORD-6)" : ""}: ${before.map(describeEffect).join(", ")}`
  );
}

/**
 * A call entry that says `not_happened` and that no logged attempt resolved (attemptOfEntry found
 * no call_resolved for its call id, key and attempt number): which attempt it speaks for is not
 * known, and its number alone does not say (numbers restart with every send, and a record carries
 * earlier sends' entries). Every attempt of that number the turn had before the record, by any
 * worker and send, is a candidate, each ended by its send's next attempt of the turn (or that
 * send's last event before the record, or the record's time for the record's own send). The entry
 * is untrue only when it is untrue of every candidate (deniedEffectOf): then no reading of it is
 * true. When the turn had no attempt of that number, the entry speaks for no attempt, and
 * `not_happened` is untrue of the effects under its key made before the record was written.
 * Undefined when some reading is true.
 */
function deniedUnresolvedEntry(
  ctx: CaseContext,
  scope: RecordScope,
  record: FailedTurnRecord | SupersededAttemptRecord,
  entry: CallRecord,
  seen: Effect[],
  underKey: Effect[],
  resumed: boolean,
): string | undefined {
  const inTurn = (x: RecordedEvent) =>
    x.type === "attempt_started" && x.conversationId === record.conversationId && x.turnIndex === record.turnIndex && x.messageId === record.messageId;
  const events = ctx.events.slice(0, scope.until);
  const candidates: EntryAttempt[] = [];
  events.forEach((start, i) => {
    if (!inTurn(start) || start.attempt !== entry.attempt) return;
    const sameSend = (x: RecordedEvent) => x.worker === start.worker && x.send === start.send;
    const own = scope.worker !== undefined && start.worker === scope.worker && start.send === scope.send;
    const next = events.slice(i + 1).find((x) => sameSend(x) && inTurn(x));
    const last = own ? undefined : events.filter(sameSend).at(-1);
    let end = next !== undefined ? next.at - ctx.started : last !== undefined ? last.at - ctx.started : scope.at;
    // A worker that died logs nothing more, but the tool runs it started in the attempt went on:
    // the attempt lasted at least as long as they did (one that never ended, up to the record).
    const begin = start.at - ctx.started;
    for (const r of ctx.runs) {
      if (r.worker !== start.worker || r.send !== start.send || r.conversationId !== record.conversationId || r.turnIndex !== record.turnIndex) continue;
      if (r.startedAt < begin || (next !== undefined && r.startedAt >= next.at - ctx.started) || r.startedAt > scope.at) continue;
      end = Math.max(end, Math.min(r.endedAt ?? scope.at, scope.at));
    }
    candidates.push({ begin, end, worker: start.worker, send: start.send, carried: !own && scope.worker !== undefined });
  });
  const of = `${entry.status}; a call no logged attempt resolved`;
  if (candidates.length === 0) {
    if (seen.length === 0) return undefined;
    return `says ${entry.name} key ${short(entry.key)} did not happen in attempt ${entry.attempt} (${of}, and the turn had no attempt ${entry.attempt} before the record), but a run under that key made it before the record was written: ${seen.map(describeEffect).join(", ")}`;
  }
  const denials = candidates.map((c) => deniedEffectOf(ctx, c, entry, seen, underKey, resumed));
  if (denials.some((d) => d === undefined)) return undefined;
  const madeAt = (x: Effect) => Date.parse(x.at) - ctx.started;
  const earliest = Math.min(...candidates.map((c) => c.begin));
  const before = underKey.filter((y) => madeAt(y) < earliest);
  if (before.length > 0) {
    return (
      `says ${entry.name} key ${short(entry.key)} did not happen in attempt ${entry.attempt} (${of}; judged against the turn's ${candidates.length} attempt(s) of that number), ` +
      `but a run under that key made it before any of them began (t=${Math.round(earliest)}ms)${resumed ? " in a resumed turn (RECORD-6)" : ""}: ${before.map(describeEffect).join(", ")}`
    );
  }
  return `says ${entry.name} key ${short(entry.key)} did not happen in attempt ${entry.attempt} (${of}; untrue of each of the turn's ${candidates.length} attempt(s) of that number): ${denials.join("; ")}`;
}

/** Keys a record says may have an effect (its calls, and a failed-turn record's per-key summary). */
function keysSaidMaybe(record: FailedTurnRecord | SupersededAttemptRecord | ResumedTurnRecord): Set<string> {
  const keys = new Set<string>();
  for (const x of record.calls ?? []) if (x.key !== undefined && SAYS_MAYBE.has(x.effect)) keys.add(x.key);
  if (record.kind === "failed_turn") for (const x of record.effects ?? []) if (SAYS_MAYBE.has(x.effect)) keys.add(x.key);
  return keys;
}

/**
 * When a reported record is not kept as reported, what the store kept in its place: the stored
 * record of the same kind, message, turn (and attempt), and the keys it no longer says may have
 * happened — a stored copy that denies an effect is what a user re-sending on its word pays twice for.
 */
function describeStoredCopy(stored: JsonValue[], record: FailedTurnRecord | SupersededAttemptRecord | ResumedTurnRecord): string {
  const copy = (stored as unknown as (FailedTurnRecord | SupersededAttemptRecord | ResumedTurnRecord)[]).find(
    (r) =>
      r !== null &&
      typeof r === "object" &&
      r.kind === record.kind &&
      r.messageId === record.messageId &&
      r.turnIndex === record.turnIndex &&
      (record.kind !== "superseded_attempt" || (r as SupersededAttemptRecord).attempt === record.attempt),
  );
  if (copy === undefined) return "";
  const said = keysSaidMaybe(copy);
  const denied = [...keysSaidMaybe(record)].filter((key) => !said.has(key));
  return denied.length > 0
    ? `: the stored copy no longer says ${denied.map(short).join(", ")} may have happened, as the reported record does (it denies an effect)`
    : ": the stored copy differs from it";
}

/**
 * TURN-20: a send under a stored message's id with other content (MessagePlan `reusedId`) is
 * refused with `message_id_reused` (typed: `MessageIdReusedError.isInstance`), before anything is
 * appended, reopened or driven for it: no event and no tool run carries its send, the stored
 * message keeps its content (read before the send, after it, and at the end of the case) and its
 * state (unless another send of the message overlapped it), and the send is told neither the
 * message's answer nor its failure.
 */
function checkReusedIds(ctx: CaseContext, conversations: ConversationState[], add: (rule: string, message: string) => void): void {
  for (const r of ctx.reuses) {
    const what = `${r.conversationId}: the send of ${JSON.stringify(r.messageId)} with other content by ${r.worker} (the message was ${r.before?.state ?? "not stored"})`;
    if (r.outcome === "answered") {
      add("TURN-20", `${what} was answered${r.result?.fromStore === true ? " from the store" : ""}: told another message's answer (its turns ${r.result?.turns.map((t) => t.turnIndex).join(", ")}), not refused with message_id_reused`);
    } else if (r.outcome === "failed") {
      add("TURN-20", `${what} was told the message's failure (${r.error instanceof Error ? r.error.message : String(r.error)}), not refused with message_id_reused`);
    } else if (!MessageIdReusedError.isInstance(r.error)) {
      const error = r.error instanceof Error ? `${r.error.name}: ${r.error.message}` : String(r.error);
      add("TURN-20", `${what} ended ${r.outcome}${r.outcome === "error" || r.outcome === "busy" ? ` (${error})` : ""}, not refused with message_id_reused`);
    }
    const events = ctx.events.filter((e) => e.send === r.send);
    if (events.length > 0) add("TURN-20", `${what} drove the conversation: ${[...new Set(events.map((e) => e.type))].join(", ")} (${events.length} events)`);
    const runs = ctx.runs.filter((x) => x.send === r.send);
    if (runs.length > 0) add("TURN-20", `${what} ran ${runs.map((x) => `${x.tool} key ${short(x.key)}`).join(", ")}`);
    const stored = conversations.find((c) => c.id === r.conversationId)?.stored.get(r.messageId);
    const kept = r.before?.content;
    if (kept !== undefined) {
      for (const [when, m] of [["right after the send", r.after], ["at the end of the case", stored]] as const) {
        if (m === undefined) add("TURN-20", `${what}: the message is gone ${when}`);
        else if (!sameJson(m.content, kept)) add("TURN-20", `${what}: the stored message's content changed ${when}, to ${JSON.stringify(m.content)}`);
      }
    } else if (r.after !== undefined) {
      add("TURN-20", `${what}: a message was appended under the id by the send with other content`);
    }
    if (!r.overlapped && r.before !== undefined && r.after !== undefined && r.after.state !== r.before.state) {
      add("TURN-20", `${what}: the message went from ${r.before.state} to ${r.after.state} (${r.after.state === "queued" || r.after.state === "in_progress" ? "reopened for a retry nobody asked for" : "driven"})`);
    }
  }
}

function checkCalm(ctx: CaseContext, conversations: ConversationState[], add: (rule: string, message: string) => void): void {
  const calm = "in a run with no fault injected";
  for (const e of ctx.dispatchEvents) {
    if (e.type === "claimed" && e.takeover) add("LEDGER-6", `${e.worker} took over the claim of ${e.toolName} key ${short(e.key)} ${calm}: a live owner's lease lapsed`);
  }
  const unknown = (event: RecordedEvent): string | undefined =>
    event.type === "call_resolved" && !event.ok && /outcome_unknown|OutcomeUnknown|is unknown/.test(event.error ?? "") ? event.error : undefined;
  for (const e of ctx.events) {
    const error = unknown(e);
    if (error !== undefined) add(/request_mismatch/.test(error) ? "EFFECT-6" : "LEDGER-8", `${e.worker}: an outcome_unknown ${calm}: ${error}`);
    if (e.type === "attempt_superseded") add("TURN-10", `${e.worker}: turn ${e.turnIndex} attempt ${e.attempt} was superseded ${calm}: a live worker lost the turn lease`);
    if (e.type === "turn_failed") add("CONF-2", `${e.worker}: turn ${e.turnIndex} of ${JSON.stringify(e.record.messageId)} failed (${e.record.position}) ${calm}`);
  }
  for (const s of ctx.sends) {
    if (s.outcome === "busy" || s.outcome === "error") {
      add("TURN-10", `send of ${JSON.stringify(s.messageId)} by ${s.worker} ended ${s.outcome} ${calm}: ${s.error instanceof Error ? s.error.message : String(s.error)}`);
    }
  }
  for (const c of conversations) {
    for (const m of c.sent) {
      const state = c.stored.get(m.id)?.state ?? "never stored";
      if (state !== "answered") add("TURN-9", `${c.id}: message ${JSON.stringify(m.id)} ended ${state} ${calm}`);
    }
  }
}

/**
 * Every effect of every attempt is accounted for (issue 12; RECORD-5, RECORD-6, TURN-13, proposed
 * RECORD-7): what the user can read — the committed conversation, the records kept beside it —
 * covers each effect the downstream performed. An effect is accounted for when its key is
 * answered in a committed turn, or listed as `happened` / `may_have_happened` by a record (a
 * failed-turn or superseded-attempt record, or a failed-turn record's per-key summary), or, when
 * it was made by a worker that died (which writes nothing), covered by a later failed-turn
 * record of its turn that says `resumed: true` (RECORD-6: the earlier holder's attempts, which it
 * does not list, may have had effects). The kit knows every key (it ran every tool), so it needs
 * nothing from the ledger's rows. A message nobody resolved (neither answered nor failed: its
 * client gave up while it was in flight) was told nothing yet: counted, not failed.
 */
function checkEveryEffectAccounted(
  ctx: CaseContext,
  conversations: ConversationState[],
  effects: Effect[],
  committedKeys: Set<string>,
  deadWorkers: Set<string>,
  add: (rule: string, message: string) => void,
): void {
  const count = (name: string) => (ctx.diagnostics[name] = (ctx.diagnostics[name] ?? 0) + 1);
  type AnyRecord = FailedTurnRecord | SupersededAttemptRecord;
  const records: AnyRecord[] = [];
  for (const e of ctx.events) if (e.type === "turn_failed" || e.type === "attempt_superseded") records.push(e.record);
  for (const c of conversations) for (const r of c.records) records.push(r as unknown as AnyRecord);
  const listed = new Set<string>();
  for (const r of records) {
    for (const x of r.calls ?? []) if (x.key !== undefined && SAYS_MAYBE.has(x.effect)) listed.add(x.key);
    if (r.kind === "failed_turn") for (const x of r.effects ?? []) if (SAYS_MAYBE.has(x.effect)) listed.add(x.key);
  }
  const runsByKey = new Map<string, ToolRun[]>();
  for (const run of ctx.runs) runsByKey.set(run.key, [...(runsByKey.get(run.key) ?? []), run]);
  // Keys a live worker's attempt reached (dispatched, or found in the ledger): a record or a commit speaks for them.
  const reached = new Set<string>();
  for (const e of ctx.events) if (e.type === "call_resolved" && e.key !== undefined) reached.add(e.key);
  for (const e of effects) {
    if (!["payment_created", "payment_voided", "invoice_created"].includes(e.kind) || e.idempotencyKey === null) continue;
    const key = e.idempotencyKey;
    const runs = runsByKey.get(key) ?? [];
    const run = runs[0];
    if (run === undefined) continue; // CONF-2 above: an effect no run was given the key of
    const byDead = runs.some((r) => deadWorkers.has(r.worker));
    if (byDead) count("dead_worker_effects");
    if (byDead && !reached.has(key)) count("dead_worker_effect_unreached");
    if (committedKeys.has(key)) continue;
    // An effect a committed turn of its index leaves unanswered (a re-run the model answered
    // without the call): the case the divergent re-runs exist for, counted when a record tells it.
    const leftByCommit = conversations.find((x) => x.id === run.conversationId)?.turns.some((t) => t.turnIndex === run.turnIndex) === true;
    if (listed.has(key)) {
      if (leftByCommit) {
        count("omitted_after_effect");
        // Told by the committed turn's own record (RECORD-8), not only by an earlier failure's.
        const told = records.flatMap((r) =>
          (r as unknown as ResumedTurnRecord).kind === "resumed_turn" ? (r as unknown as ResumedTurnRecord).calls.filter((x) => x.key === key && SAYS_MAYBE.has(x.effect)) : [],
        );
        if (told.length > 0) {
          count(byDead ? "omitted_dead_worker_effect_told_by_committed_turn_record" : "omitted_after_effect_told_by_committed_turn_record");
          // A dead worker's effect whose row the listing found released (it died after its
          // release, before recording anything): only that listing names it (WorkerDeath after_release).
          if (byDead && told.some((x) => x.state === "released")) count("omitted_dead_worker_released_row_told_by_committed_turn_record");
        }
      }
      continue;
    }
    const madeAt = Date.parse(e.at) - ctx.started;
    // The failed-turn records of its turn written after it was made.
    const later = records.filter(
      (r): r is FailedTurnRecord =>
        r.kind === "failed_turn" && r.conversationId === run.conversationId && r.turnIndex === run.turnIndex && Date.parse(r.at) - ctx.started >= madeAt,
    );
    if (byDead && later.some((r) => r.resumed === true)) {
      if (!reached.has(key)) count("dead_worker_effect_unreached_reported_by_resumed_record");
      continue;
    }
    // The committed turn of its index, when one commits there: it does not answer the key (a model
    // that answered a re-run without the call). RECORD-8: its record lists the key, or, for a dead
    // holder's effect on a ledger whose rows the runner could not list, says that the turn was
    // resumed and its rows were not listed (an earlier holder's attempts may have had effects).
    const committedAt = conversations.find((x) => x.id === run.conversationId)?.turns.find((t) => t.turnIndex === run.turnIndex);
    const resumedUnlisted = records.some(
      (r) =>
        (r as unknown as ResumedTurnRecord).kind === "resumed_turn" &&
        r.conversationId === run.conversationId &&
        r.turnIndex === run.turnIndex &&
        (r as unknown as ResumedTurnRecord).resumed &&
        !(r as unknown as ResumedTurnRecord).listed &&
        Date.parse(r.at) - ctx.started >= madeAt,
    );
    if (byDead && committedAt !== undefined && resumedUnlisted) {
      count("dead_worker_effect_reported_by_unlisted_resumed_turn");
      continue;
    }
    const c = conversations.find((x) => x.id === run.conversationId);
    // The messages whose turns reach this index: bound there, or a tool loop's later turn
    // (bound earlier; committed there, or failed there after the turns it committed).
    const atSlot = [...(c?.stored.entries() ?? [])]
      .filter(([id, m]) => {
        if (m.turnIndex === undefined || run.turnIndex < m.turnIndex) return false;
        const committed = c!.turns.filter((t) => t.messageId === id).length;
        return run.turnIndex < m.turnIndex + committed || (m.state !== "answered" && run.turnIndex === m.turnIndex + committed);
      })
      .map(([, m]) => m);
    if (later.length === 0 && !atSlot.some((m) => m.state === "answered" || m.state === "failed")) {
      count("effect_of_unresolved_message");
      continue;
    }
    const who = byDead ? `${run.worker}, which died before it could record it,` : run.worker;
    if (committedAt !== undefined) {
      // A dead holder's effect only the committed turn's record can name (RECORD-8, from the
      // ledger's rows); a live worker's, its own records too (TURN-13, RECORD-5): RECORD-7.
      add(
        byDead ? "RECORD-8" : "RECORD-7",
        `${describeEffect(e)}, made by ${who} (${run.tool} at turn ${run.turnIndex} of ${run.conversationId}), is accounted for nowhere: ` +
          `turn ${run.turnIndex} committed (message ${JSON.stringify(committedAt.messageId)}) without answering its key, and no record kept beside the conversation ` +
          `lists it as happened or may have happened (` +
          (byDead ? "the committed turn's record of the rows it does not answer" : "the worker's own failed-turn or superseded-attempt record, or the committed turn's record") +
          `): the user is never told it happened`,
      );
      continue;
    }
    add(
      later.length > 0 ? (byDead ? "RECORD-6" : "RECORD-5") : "RECORD-7",
      `${describeEffect(e)}, made by ${who} (${run.tool} at turn ${run.turnIndex} of ${run.conversationId}), is accounted for nowhere: ` +
        `no committed turn answers its key, no record lists it` +
        (later.length > 0
          ? `, and the ${later.length} failed-turn record(s) of that turn written after it do not say the turn was resumed (an earlier holder's attempts may have had effects)`
          : ", and no failed-turn record of that turn was written after it") +
        `: the user is never told it happened`,
    );
  }
}

/**
 * The earlier turn of the committed turn's message whose key (spec §3's, at an ordinal from 0 to 64, as the runner matches)
 * the call was reported under, if any: the call was answered from a call that turn left
 * unanswered (TURN-23).
 */
function carriedTurnOf(c: ConversationState, turn: StoredTurn, name: string, input: unknown, key: string, release?: DeployKind): number | undefined {
  for (const earlier of c.turns) {
    if (earlier.messageId !== turn.messageId || earlier.turnIndex >= turn.turnIndex) continue;
    // Under either release's definition after a deploy (scenario.ts `deploy`): the row carried may be the earlier one's.
    for (let ordinal = 0; ordinal <= 64; ordinal++) if (keysUnderReleases(c.id, earlier.turnIndex, name, input, ordinal, release).includes(key)) return earlier.turnIndex;
  }
  return undefined;
}

/**
 * How many effects of a deferred call's signature a message may have made over its first turn
 * and its next (scenario.ts DeferredCall): every call of it the user asked for in either, but the
 * follow-up's first copy (of a `same`, `reworded` or `twice` deferral) is the first turn's ask made
 * again when the committed first turn answered fewer calls of it than asked (a re-run answered
 * without it): one ask then, not two. When the first turn answered every call of it (no re-run,
 * or a re-run that made it: `answeredFirst`), the follow-up's call is a second ask, made having
 * seen the first, and both run. A first turn never committed asked nothing of the follow-up.
 */
export function deferredAllowance(
  plan: Pick<SentMessage["plan"], "calls" | "followUp" | "deferred">,
  signature: string,
  firstTurn: StoredTurn | undefined,
  transcript: TranscriptReader,
): { allowed: number; answeredFirst: boolean } {
  const count = (calls: PlannedCall[]) => calls.filter((c) => plannedSignature(c) === signature).length;
  const askedFirst = count(plan.calls);
  const askedLater = count(plan.followUp ?? []);
  const committed =
    firstTurn === undefined
      ? 0
      : transcript.calls(firstTurn.assistant).filter((u) => plannedSignature({ tool: (u.name ?? "") as PlannedCall["tool"], args: (u.input ?? {}) as Record<string, unknown> }) === signature).length;
  const again = plan.deferred?.kind === "other_payee" ? 0 : Math.min(askedLater, 1);
  const unanswered = Math.max(0, askedFirst - committed);
  return { allowed: askedFirst + askedLater - Math.min(again, unanswered), answeredFirst: firstTurn !== undefined && unanswered === 0 };
}

/** The `error` of a committed tool result, when it is one (its code). */
function committedError(text: string): { code?: string } | undefined {
  try {
    const parsed = JSON.parse(text) as { error?: { code?: string } };
    return parsed.error;
  } catch {
    return undefined;
  }
}

/**
 * IDENT-10, IDENT-11 (a deploy between two runs of a turn, scenario.ts `deploy`): a call refused with
 * `tool_definition_changed` was not run. Nothing may have run under its own key (no tool run, no
 * effect), and every report of the call (the committed result, each record entry) says it did not
 * run under its own key only: a refusal under the key of a row an earlier run made (whose payment
 * may have happened) would deny that payment. A refused call's earlier row is told by the committed
 * turn's record (RECORD-8, judged with every effect below in checkEveryEffectAccounted).
 */
function checkDefinitionChanged(
  ctx: CaseContext,
  conversations: ConversationState[],
  transcript: TranscriptReader,
  keyOfCall: Map<string, string>,
  effectsByKey: Map<string, Effect[]>,
  runsByKey: Map<string, ToolRun[]>,
  add: (rule: string, message: string) => void,
): void {
  const refused = (key: string | undefined, where: string) => {
    ctx.diagnostics.definition_changed_refusals = (ctx.diagnostics.definition_changed_refusals ?? 0) + 1;
    if (key === undefined) return;
    const ran = runsByKey.get(key) ?? [];
    const made = effectsByKey.get(key) ?? [];
    if (ran.length > 0 || made.length > 0) {
      add(
        "IDENT-10",
        `${where} was refused with tool_definition_changed (nothing claimed, nothing run) under key ${short(key)}, but ${ran.length} tool run(s) and ${made.length} effect(s) are under that key` +
          `${made.length > 0 ? `: ${made.map(describeEffect).join(", ")}` : ""}: a refusal that denies what happened`,
      );
    }
  };
  for (const c of conversations) {
    for (const t of c.turns) {
      const results = new Map(transcript.results(t.toolResults).map((b) => [b.id, b]));
      for (const use of transcript.calls(t.assistant)) {
        const block = results.get(use.id);
        if (block === undefined || !block.isError) continue;
        if (committedError(block.text)?.code !== "tool_definition_changed") continue;
        // The key the runner reported for the call (its call_resolved, or its send's report).
        refused(keyOfCall.get(use.id ?? ""), `${use.name} call ${use.id} (turn ${t.turnIndex} of ${c.id}, message ${JSON.stringify(t.messageId)})`);
      }
    }
  }
  const records: (FailedTurnRecord | SupersededAttemptRecord)[] = [];
  for (const e of ctx.events) if (e.type === "turn_failed" || e.type === "attempt_superseded") records.push(e.record);
  for (const r of records) {
    for (const call of r.calls) {
      if (call.error?.code !== "tool_definition_changed" || call.key === undefined) continue;
      const made = effectsByKey.get(call.key) ?? [];
      if (call.effect === "not_happened" && made.length > 0) {
        add("IDENT-10", `the ${r.kind} record of turn ${r.turnIndex} of ${r.conversationId} says ${call.name} key ${short(call.key)}, refused with tool_definition_changed, did not happen, but ${made.map(describeEffect).join(", ")} is under that key`);
      }
    }
  }
}

/** A request as the payments API is sent it (world.ts paymentBody for a payment of any release), JCS text. */
function downstreamText(name: string, input: unknown): string | undefined {
  try {
    const value = kitToolName(name) === "send_payment" && typeof input === "object" && input !== null ? paymentBody(input as Record<string, unknown>) : input;
    return canonicalize(JSON.parse(JSON.stringify(value)) as JsonValue);
  } catch {
    return undefined;
  }
}

/**
 * RECORD-10: a record that says an effect happened or may have happened says which: its `input` is
 * the request that ran, or would run, under the key (the stored request when a replay re-worded it,
 * IDENT-3; a listed row's stored request), never a re-run's re-wording. Judged, as the payments API
 * is sent it (a new release's `acct:` payee or defaulted `channel` read back, world.ts paymentBody),
 * against the effect the payments API logged under the key (a payment's or an invoice's payload),
 * else against the first tool run under it (what the dispatcher handed the run, LEDGER-21). Entries
 * of a failed-turn record's `effects`, of a committed turn's record's `calls` (RECORD-8) and of
 * `store_unavailable`'s effects (RECORD-9); a dispatched call's entry carries the stream's own
 * arguments as `input` (a re-wording is allowed there), so only its `storedRequest` is held to the
 * key's request, and its `input` to the same payment (the identity the effect log shows).
 * RECORD-10 is a SHOULD: an entry without `input` is counted (`record_entries_without_input`), not
 * failed; the certification test requires the runner of this repository to leave out none.
 */
function checkRecordInputs(
  ctx: CaseContext,
  conversations: ConversationState[],
  effectsByKey: Map<string, Effect[]>,
  runsByKey: Map<string, ToolRun[]>,
  add: (rule: string, message: string) => void,
): void {
  const referenceOf = new Map<string, string>();
  for (const list of effectsByKey.values()) for (const e of list) if (e.kind === "payment_created") referenceOf.set(e.resourceId, String(e.payload.reference));
  /** The request the payments API was sent (or would be) under a key, as JCS text, and where it is read. */
  const ranUnder = (name: string, key: string): { text: string; from: string } | undefined => {
    const effect = (effectsByKey.get(key) ?? []).find((e) => e.kind === "payment_created" || e.kind === "invoice_created");
    if (effect !== undefined) return { text: canonicalize(JSON.parse(JSON.stringify(effect.payload)) as JsonValue), from: `the payments API's ${describeEffect(effect)}` };
    const run = runsByKey.get(key)?.[0];
    if (run === undefined) return undefined;
    const text = downstreamText(name, JSON.parse(run.request));
    return text === undefined ? undefined : { text, from: `the first run under the key (${run.worker})` };
  };
  const seen = new Set<string>();
  const judge = (what: string, entry: { key?: string; name: string; effect: string; input?: unknown }, whole: boolean) => {
    if (entry.key === undefined || !SAYS_MAYBE.has(entry.effect) || !WRITES.has(entry.name)) return;
    if (entry.input === undefined) {
      ctx.diagnostics.record_entries_without_input = (ctx.diagnostics.record_entries_without_input ?? 0) + 1;
      return;
    }
    const ran = ranUnder(entry.name, entry.key);
    if (ran === undefined) return;
    const told = downstreamText(entry.name, entry.input);
    const id = `${what}\n${entry.key}\n${told}`;
    if (seen.has(id)) return;
    seen.add(id);
    ctx.diagnostics.record_inputs_judged = (ctx.diagnostics.record_inputs_judged ?? 0) + 1;
    const same = whole
      ? told === ran.text
      : plannedSignature({ tool: kitToolName(entry.name) as PlannedCall["tool"], args: JSON.parse(told ?? "{}") as Record<string, unknown> }) ===
        plannedSignature({ tool: kitToolName(entry.name) as PlannedCall["tool"], args: JSON.parse(ran.text) as Record<string, unknown> });
    if (!same) {
      add(
        "RECORD-10",
        `${what} says ${entry.name} key ${short(entry.key)} ${entry.effect} with input ${told ?? JSON.stringify(entry.input)}, but the request that ran under the key is ${ran.text} (${ran.from}): ` +
          `a record that says which payment happened must name the one that ran (the stored request, not a re-run's re-wording)`,
      );
    }
  };
  type AnyRecord = FailedTurnRecord | SupersededAttemptRecord | ResumedTurnRecord;
  const records: { record: AnyRecord; where: string }[] = [];
  for (const e of ctx.events) if (e.type === "turn_failed" || e.type === "attempt_superseded") records.push({ record: e.record, where: `reported by ${e.worker}` });
  for (const c of conversations) for (const r of c.records) records.push({ record: r as unknown as AnyRecord, where: "kept beside the conversation" });
  for (const { record, where } of records) {
    const what = `the ${record.kind} record of turn ${record.turnIndex} of ${record.conversationId} (message ${JSON.stringify(record.messageId)}, ${where})`;
    if (record.kind === "failed_turn") for (const e of record.effects ?? []) judge(what, e, true);
    if (record.kind === "resumed_turn") for (const call of record.calls) judge(what, call, true);
    if (record.kind !== "resumed_turn") {
      for (const call of record.calls) {
        if (call.storedRequest !== undefined) judge(what, { ...call, input: call.storedRequest }, true);
        else judge(what, call, false);
      }
    }
  }
  for (const send of ctx.sends) {
    const effects = (send.error as { code?: string; effects?: readonly { key: string; name: string; effect: string; input?: unknown }[] } | undefined)?.effects;
    if ((send.error as { code?: string } | undefined)?.code !== "store_unavailable" || effects === undefined) continue;
    for (const e of effects) judge(`the store_unavailable error ${send.worker}'s send of ${JSON.stringify(send.messageId)} raised`, e, true);
  }
}
