import { ToolDefinitionChangedError, type CommittedCallKey, type DispatchOutcome, type RowState, type ToolCall, type TurnContext } from "@dispatch-once/core";
import { MAX_ORDINAL_TRIED } from "@dispatch-once/core/internal";
import type { ResumedTurnRecord } from "./record.js";

/**
 * A call an earlier turn of a message left unanswered whose effect may have happened (a
 * committed turn's record lists it, RECORD-8): a later turn of the same message that makes the
 * same call is answered from its row (TURN-23).
 */
export interface CarriedCall {
  key: string;
  name: string;
  /** The turn index its key was made at. */
  turnIndex: number;
  /**
   * The request that ran under its key, as the record lists it (RECORD-10): matched under the
   * current definition when the key was made under an earlier one (IDENT-10).
   */
  input?: unknown;
  /** What the record says of its effect: a refusal in its name tells the model so (TURN-23). */
  effect?: "happened" | "may_have_happened";
  /** Its row's state when the record's runner listed it. */
  state?: RowState;
  /**
   * Set on a slot of a resumed turn (`PausedSlots`), not a listed call: its key is derived, and a
   * read-back cannot tell whether its row was there before the call (it reports no `carriedFromTurn`).
   */
  paused?: true;
}

/**
 * TURN-23 after a resumed turn (the spin model's finding 29): the earliest committed turn of the
 * message whose record says an earlier holder may have acted (`resumed`). Its listing cannot
 * exclude a holder paused before its claim, who claims later at that turn's index and pays: a
 * later turn's write call that no listed call answers is dispatched at that index, after the
 * identical calls the message's committed turns answered there, so that it meets such a claim.
 */
export interface PausedSlots {
  turnIndex: number;
  /** The keys the message's committed turns answered from that turn on: a slot under one is taken. */
  answered: ReadonlySet<string>;
  /** Tools of which a committed call could not be read back (no arguments): their slots cannot be counted. */
  blind?: ReadonlySet<string>;
}

/** What a message's committed turns carry into its next turn (TURN-23). */
export interface Carry {
  calls: readonly CarriedCall[];
  paused?: PausedSlots;
}

/** Nothing carried: the hot path (a message whose turns never left anything unanswered) shares it. */
export const NOTHING_CARRIED: Carry = Object.freeze({ calls: Object.freeze([]) as readonly CarriedCall[] });

/** The dispatcher members carrying needs: a `Dispatcher` has both; a custom CallDispatcher may not (then nothing is carried). */
export interface CarryingDispatcher {
  /** A `Dispatcher`'s ledger: whether it lists rows decides whether IDENT-10's guard can find a row an earlier definition keyed. */
  readonly ledger?: { capabilities?: { supports?: { listRows?: boolean } } };
  /** A `Dispatcher`'s registry: a listed call of a tool's former name (IDENT-11) is that tool's. */
  readonly registry?: { renamed(formerName: string): { name: string } | undefined };
  keyFor(call: ToolCall, context: TurnContext & { ordinal?: number }): string;
  dispatch(call: ToolCall, context: TurnContext & { ordinal?: number }): Promise<DispatchOutcome>;
}

/**
 * The highest ordinal tried when matching a call to a carried one: identical calls of one turn
 * count from 0. The same bound as IDENT-10's reading of a row (a key that no ordinal up to it gives
 * from the row's request was made under another definition): below it, the ninth of nine identical
 * payments would pass for a deploy's row and be answered from the first one's.
 */
export const MAX_CARRIED_ORDINAL = MAX_ORDINAL_TRIED;

export function carryingDispatcher(dispatcher: object): CarryingDispatcher | undefined {
  const d = dispatcher as Partial<CarryingDispatcher>;
  return typeof d.keyFor === "function" && typeof d.dispatch === "function" ? (d as CarryingDispatcher) : undefined;
}

/**
 * The carried calls after a committed turn's record: what was carried and still is, then each
 * call the record lists whose effect may have happened. A key already carried keeps the turn
 * index it was made at (a later turn's record lists it again when that turn adopted it in one
 * attempt and committed without it in another).
 */
export function withRecord(carry: readonly CarriedCall[], record: Pick<ResumedTurnRecord, "turnIndex" | "calls">): CarriedCall[] {
  const next = [...carry];
  const known = new Set(carry.map((c) => c.key));
  for (const call of record.calls) {
    if (call.effect === "not_happened" || call.effect === "none" || known.has(call.key)) continue;
    known.add(call.key);
    next.push({
      key: call.key,
      name: call.name,
      turnIndex: record.turnIndex,
      ...(call.input !== undefined ? { input: call.input } : {}),
      ...(call.effect === "happened" || call.effect === "may_have_happened" ? { effect: call.effect } : {}),
      ...(call.state !== undefined ? { state: call.state } : {}),
    });
  }
  return next;
}

/**
 * The carried call this call is, if any: the first not yet taken whose key this call derives at
 * that call's turn index, at an ordinal from 0 to MAX_CARRIED_ORDINAL. Identity arguments decide,
 * as they decide a key (IDENT-1): a re-worded memo is the same call. A call the dispatcher refuses
 * to key (an unknown tool, invalid input) is none: its dispatch raises what it raises.
 *
 * A key made under an earlier definition of the tool (a deploy between the two turns changed its
 * identity or schema, IDENT-4) is derived by no call now: the carried call's recorded request then
 * decides, read under the current definition (the same key at ordinal 0 is the same identity).
 * Dispatched at that turn index with `resumed`, IDENT-10's guard finds the earlier row by the same
 * reading; without the request (a record from before RECORD-10), or on a ledger that does not
 * list rows, nothing matches, as before.
 */
export function matchCarried(
  dispatcher: CarryingDispatcher,
  conversationId: string,
  call: ToolCall,
  carry: readonly CarriedCall[],
  taken: ReadonlySet<string>,
): { carried: CarriedCall; ordinal: number } | undefined {
  for (const carried of carry) {
    if (toolNow(dispatcher, carried.name) !== call.name || taken.has(carried.key)) continue;
    for (let ordinal = 0; ordinal <= MAX_CARRIED_ORDINAL; ordinal++) {
      let key: string;
      try {
        key = dispatcher.keyFor(call, { conversationId, turnIndex: carried.turnIndex, ordinal });
      } catch {
        return undefined;
      }
      if (key === carried.key) return { carried, ordinal };
    }
    if (carried.input !== undefined && sameIdentityNow(dispatcher, conversationId, call, carried)) return { carried, ordinal: 0 };
  }
  return undefined;
}

/**
 * The slot of a resumed turn (`PausedSlots`) a write call no listed call answers is dispatched at:
 * the turn index of the resumed turn, at the ordinal after the highest one of the call's identity
 * the message's committed turns answered there (each such slot answers none once a committed turn
 * answered it), plus the call's place among the identical calls of this attempt (or stored turn)
 * dispatched this way (`seen`, counted here). A paused holder's same call, made with the same
 * committed turns before it, has that key: the two claims meet on one row. Undefined for a call
 * that cannot be keyed (its dispatch raises what it raises), a tool whose committed calls could not
 * be read back, or past MAX_CARRIED_ORDINAL (the call then runs under its own turn's key, as before).
 */
export function pausedSlot(
  dispatcher: CarryingDispatcher,
  conversationId: string,
  call: ToolCall,
  paused: PausedSlots,
  seen: Map<string, number>,
  listed: readonly CarriedCall[] = [],
): { carried: CarriedCall; ordinal: number; answered: readonly string[] } | undefined {
  if (paused.blind?.has(toolNow(dispatcher, call.name)) === true) return undefined;
  const at = (ordinal: number) => ({ conversationId, turnIndex: paused.turnIndex, ordinal });
  let identity: string;
  try {
    identity = dispatcher.keyFor(call, at(0));
  } catch {
    return undefined;
  }
  // The highest answered ordinal: identical calls a turn carried leave gaps below it that no holder claims.
  // A listed call of that turn (its own attempt's row) is past too: a listed call answers the first
  // identical call, and a slot under its key would answer a second call of one attempt with it.
  const taken = new Set(paused.answered);
  for (const c of listed) if (c.turnIndex === paused.turnIndex) taken.add(c.key);
  let next = 0;
  let found = 0;
  for (let ordinal = 0; ordinal <= MAX_CARRIED_ORDINAL && found < taken.size; ordinal++) {
    if (taken.has(ordinal === 0 ? identity : dispatcher.keyFor(call, at(ordinal)))) {
      next = ordinal + 1;
      found++;
    }
  }
  const ordinal = next + (seen.get(identity) ?? 0);
  if (ordinal > MAX_CARRIED_ORDINAL) return undefined;
  seen.set(identity, (seen.get(identity) ?? 0) + 1);
  const key = ordinal === 0 ? identity : dispatcher.keyFor(call, at(ordinal));
  // The rows it must never be answered from (IDENT-10's guard at that index, after a deploy): those
  // a committed turn answered or a listed call holds; any other row there (an attempt's a deploy left
  // behind, a paused holder's) may be the call's.
  return { carried: { key, name: call.name, turnIndex: paused.turnIndex, paused: true }, ordinal, answered: [...taken] };
}

/**
 * A record's listed calls, less those under a slot's key (a later turn's attempt claimed it and the
 * committed turn did not answer it): the slot stays the slot (no committed turn answered it), so a
 * later identical call meets it there; listed at the record's turn index it would be looked for
 * under keys of that turn, which never give it. `atSlot`: keys whose ledger rows stand at the
 * slot's turn index (a holder that takes the message up reads them from the rows): a slot's key
 * made under an earlier definition of its tool, which no derivation gives after a deploy.
 */
export function withoutSlots<R extends Pick<ResumedTurnRecord, "turnIndex" | "calls">>(
  dispatcher: CarryingDispatcher,
  conversationId: string,
  paused: PausedSlots | undefined,
  record: R,
  atSlot?: ReadonlySet<string>,
): Pick<ResumedTurnRecord, "turnIndex" | "calls"> {
  if (paused === undefined || record.turnIndex === paused.turnIndex) return record;
  const isSlot = (call: ResumedTurnRecord["calls"][number]): boolean => {
    if (atSlot?.has(call.key) === true) return true;
    if (call.input === undefined) return false;
    const asked: ToolCall = { name: toolNow(dispatcher, call.name), input: call.input };
    try {
      for (let ordinal = 0; ordinal <= MAX_CARRIED_ORDINAL; ordinal++) {
        if (dispatcher.keyFor(asked, { conversationId, turnIndex: paused.turnIndex, ordinal }) === call.key) return true;
      }
    } catch {
      return false;
    }
    return false;
  };
  return { turnIndex: record.turnIndex, calls: record.calls.filter((c) => !isSlot(c)) };
}

/**
 * The slots after a committed turn: the keys its calls answered added, or, when none were kept
 * and its record says it was resumed (a record without the field is taken to be), its own.
 * `keys`: the committed turn's calls' keys as reported; `unread`: tools of its calls whose
 * arguments could not be read back.
 */
export function pausedAfter(
  paused: PausedSlots | undefined,
  record: Pick<ResumedTurnRecord, "turnIndex" | "resumed"> | undefined,
  keys: readonly string[],
  unread: readonly string[] = [],
): PausedSlots | undefined {
  if (paused === undefined && (record === undefined || record.resumed === false)) return undefined;
  const answered = new Set(paused?.answered);
  for (const key of keys) answered.add(key);
  const blind = new Set(paused?.blind);
  for (const name of unread) blind.add(name);
  return { turnIndex: paused?.turnIndex ?? record!.turnIndex, answered, ...(blind.size > 0 ? { blind } : {}) };
}

/**
 * Whether the carried call's key was made under an earlier definition (its recorded request derives
 * it at no ordinal now) and the call has that request's identity under the current one.
 */
function sameIdentityNow(dispatcher: CarryingDispatcher, conversationId: string, call: ToolCall, carried: CarriedCall): boolean {
  // Without a listing the guard cannot find the earlier row: dispatched at the listed turn index the
  // call would run under a key of that turn, and a later turn's same call, a new ask, would replay it.
  if (dispatcher.ledger?.capabilities?.supports?.listRows !== true) return false;
  // Under the call's name: the listed call's tool, or the tool that lists it as a former name (IDENT-11).
  const recorded: ToolCall = { name: call.name, input: carried.input };
  const at = (ordinal: number) => ({ conversationId, turnIndex: carried.turnIndex, ordinal });
  try {
    for (let ordinal = 0; ordinal <= MAX_CARRIED_ORDINAL; ordinal++) if (dispatcher.keyFor(recorded, at(ordinal)) === carried.key) return false;
    return dispatcher.keyFor(call, at(0)) === dispatcher.keyFor(recorded, at(0));
  } catch {
    // The current definition refuses the recorded request (a new required field): it cannot tell.
    return false;
  }
}

/** The name a listed call's tool has now: a former name (IDENT-11) is the tool's that lists it. */
function toolNow(dispatcher: CarryingDispatcher, name: string): string {
  return dispatcher.registry?.renamed(name)?.name ?? name;
}

/**
 * TURN-23 across a deploy whose definition refuses a listed call's stored request (a new required
 * field in the identity): no key can be derived from that request to tell whether a call is the
 * listed one. A write call of that tool that no carried call answers is then refused, as IDENT-10
 * refuses it in a re-run turn: running it would make the listed call's effect a second time
 * whenever it is that call, and a second payment cannot be undone while a refusal loses nothing.
 * Undefined when no such carried call is unanswered, or when the call itself cannot be keyed (its
 * dispatch raises what it raises). `ordinal`: identical calls before it in the attempt (TURN-4), for
 * the key the error carries (nothing is claimed under it).
 */
export function refusedForCarried(
  dispatcher: CarryingDispatcher,
  context: { conversationId: string; turnIndex: number; ordinal: number },
  call: ToolCall,
  carry: readonly CarriedCall[],
  taken: ReadonlySet<string>,
): ToolDefinitionChangedError | undefined {
  let key: string;
  try {
    key = dispatcher.keyFor(call, context);
  } catch {
    return undefined;
  }
  for (const carried of carry) {
    // Taken: an earlier call of the attempt derived its key (an identity the deploy left alone) and is answered from it.
    if (carried.input === undefined || taken.has(carried.key) || toolNow(dispatcher, carried.name) !== call.name) continue;
    try {
      dispatcher.keyFor({ name: call.name, input: carried.input }, { conversationId: context.conversationId, turnIndex: carried.turnIndex, ordinal: 0 });
    } catch (error) {
      const why = `its stored request is refused by the definition now: ${error instanceof Error ? error.message : String(error)}`;
      // The record's state of the row when listed; else what its effect says (a call that resolved with a result completed).
      const state: RowState = carried.state ?? (carried.effect === "happened" ? "completed" : "unknown");
      return new ToolDefinitionChangedError(key, call.name, { key: carried.key, state }, "request_refused", why, {
        turnIndex: carried.turnIndex,
        effect: carried.effect ?? "may_have_happened",
      });
    }
  }
  return undefined;
}

/**
 * The carried calls still unanswered after a committed turn's calls, in their order: each call
 * that matches a carried one answered it (as the turn's dispatch adopted it). A call whose
 * arguments the stored turn does not give (a provider that cannot read them back) may have
 * answered any carried call of its tool: those are no longer carried, so that a later call is
 * never answered with an effect it may not be (the reverse error, a payment asked for and not made).
 * A call whose arguments were not JSON (answered invalid_arguments_json) was never dispatched: it
 * answered nothing, whatever the provider reads back of it.
 * A call answered with tool_definition_changed (IDENT-10 could not tell which earlier row it is)
 * was refused before anything was claimed under the carried key: it answered nothing, as the
 * holder that dispatched it found (its report's key is not the carried call's), and the carried
 * call stays carried, so a later turn's same call is refused again rather than run.
 *
 * A turn committed with its calls' keys (`stored`, TURN-24) says it exactly, whatever the tool's
 * definition is now: a listed call was answered by the call committed under its key (as the holder
 * that committed the turn found, `carriedAfter`), and by no other. Derived again after a deploy that
 * changed the tool's identity or name, the match can take a call that ran under its own key for
 * the listed one (a later identical call, the listed call's own ask, would then run again) or miss
 * the call that answered it (a second ask would be told the first payment).
 */
export function afterTurn(
  dispatcher: CarryingDispatcher,
  conversationId: string,
  carry: readonly CarriedCall[],
  calls: readonly { callId?: string; name: string; input?: unknown; error?: { code?: string } }[],
  stored?: readonly CommittedCallKey[],
): { carry: CarriedCall[]; matches: ({ carried: CarriedCall; ordinal: number } | undefined)[] } {
  if (stored !== undefined) return afterStoredTurn(carry, calls, stored);
  const taken = new Set<string>();
  const dropped = new Set<string>();
  const refused = new Set<string>();
  const matches = calls.map((call) => {
    // Arguments that were not JSON: never dispatched (no key), so it answered nothing.
    if (call.error?.code === "invalid_arguments_json") return undefined;
    if (call.input === undefined) {
      dropped.add(toolNow(dispatcher, call.name));
      return undefined;
    }
    const match = matchCarried(dispatcher, conversationId, { name: call.name, input: call.input }, carry, taken);
    if (match !== undefined) taken.add(match.carried.key);
    if (match !== undefined && call.error?.code === "tool_definition_changed") refused.add(match.carried.key);
    return match;
  });
  return { carry: carry.filter((c) => (!taken.has(c.key) || refused.has(c.key)) && !dropped.has(toolNow(dispatcher, c.name))), matches };
}

/**
 * `afterTurn` for a turn committed with its calls' keys (TURN-24): each call's entry is found by
 * call id, in order (as a read-back reports it); the listed call under an entry's key is the one
 * that call answered. A call without an entry had no key (it answered nothing); a call refused
 * with tool_definition_changed was committed under its own key, never the listed call's.
 */
function afterStoredTurn(
  carry: readonly CarriedCall[],
  calls: readonly { callId?: string; name: string; error?: { code?: string } }[],
  stored: readonly CommittedCallKey[],
): { carry: CarriedCall[]; matches: ({ carried: CarriedCall; ordinal: number } | undefined)[] } {
  const used = new Set<number>();
  const taken = new Set<string>();
  const matches = calls.map((call) => {
    const at = stored.findIndex((entry, i) => !used.has(i) && entry.callId === call.callId);
    if (at < 0) return undefined;
    used.add(at);
    const entry = stored[at]!;
    const carried = carry.find((c) => c.key === entry.key && !taken.has(c.key));
    if (carried === undefined) return undefined;
    taken.add(carried.key);
    return { carried, ordinal: entry.ordinal ?? 0 };
  });
  return { carry: carry.filter((c) => !taken.has(c.key)), matches };
}
