import type { JsonValue } from "./canonical.js";
import { LEASE_GRANT_RETENTION_MS } from "./conversation.js";
import type {
  AppendOptions,
  AppendResult,
  ConversationStore,
  FailedTurn,
  FailedTurnsPage,
  FailedTurnsQuery,
  StalledMessage,
  StalledMessagesPage,
  StalledMessagesQuery,
  ConversationStoreCapabilities,
  LeaseResult,
  StoredMessage,
  StoredTurn,
  TurnCommit,
  TurnSnapshot,
} from "./conversation.js";
import { ConversationLeaseLostError, InvalidStoreInputError, describeValue } from "./errors/index.js";
import { CONVERSATION_ID_PATTERN } from "./key.js";
import { checkedClock } from "./internal/options.js";
import { checkFailedTurnsQuery, checkStalledMessagesQuery, encodeFailedTurnsCursor, isAfterPosition } from "./failed-turns.js";
import { checkCallKeys, checkLeaseGrantId, checkLeaseOwner, checkReopenWithinMs, checkStoreJson, checkUserMessage, checkTurnLeaseMs } from "./internal/store-rows.js";

interface Conversation {
  messages: Map<string, StoredMessage>;
  /** Messages in arrival order. */
  order: StoredMessage[];
  turns: StoredTurn[];
  log: JsonValue[];
  /** The message bound most recently (TURN-12 decides re-opening by it). */
  lastBound: string | undefined;
  /**
   * The turn index begun last and the fence under which it was FIRST begun (TURN-15): a later
   * grant beginning the same index resumes it.
   */
  begun: { turnIndex: number; fence: number } | undefined;
  lease: { fence: number; owner: string; expiresAt: number } | undefined;
  /**
   * The grant id of the latest grant and its fence (TURN-10), kept after that lease is released
   * or expires so that a late copy of its acquire is refused; replaced by the next grant.
   */
  grant: { id: string; fence: number } | undefined;
  /**
   * The grant ids of the conversation's earlier grants (TURN-10): each with its fence and when a
   * later grant superseded it, kept LEASE_GRANT_RETENTION_MS from then so that a late copy of its
   * acquire is refused. Pruned at every grant, so it holds only the grants of the last retention.
   */
  earlierGrants: Map<string, { fence: number; supersededAt: number }>;
  /** Highest fence ever issued; kept when the lease is released so fences only rise. */
  fence: number;
  records: JsonValue[];
  /** When each failed message failed (process clock), for listFailedTurns; dropped on reopen. */
  failedAt: Map<string, number>;
  /**
   * When each message FIRST failed (process clock), kept across reopens: the re-send window is
   * measured from it (TURN-12), so a retry that fails again does not restart it while the rows
   * of the first attempts age towards the ledger's retention.
   */
  firstFailedAt: Map<string, number>;
}

export interface MemoryConversationStoreOptions {
  /**
   * Clock in milliseconds; injectable so tests can expire leases without sleeping.
   * @default Date.now
   * @example new MemoryConversationStore({ now: clock.now })
   */
  now?: () => number;
}

/**
 * The reference conversation store: one process, volatile. Every method is atomic because it
 * never awaits. Use a durable store (SQLite, PostgreSQL) beside a durable ledger (TURN-14).
 */
export class MemoryConversationStore implements ConversationStore {
  readonly capabilities: ConversationStoreCapabilities = {
    durability: "volatile",
    clock: "process",
    sharedAcrossProcesses: false,
    recordsWithCommit: true,
    supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true },
  };
  private readonly conversations = new Map<string, Conversation>();
  private readonly now: () => number;

  constructor(options: MemoryConversationStoreOptions = {}) {
    // Checked as the durable stores check theirs (ERR-1): a clock that is not a function failed
    // at the first lease, and a misspelt option was ignored.
    if (typeof options !== "object" || options === null) throw new InvalidStoreInputError("options", "expected an options object { now? }");
    const unknown = Object.keys(options).find((name) => name !== "now");
    if (unknown !== undefined) throw new InvalidStoreInputError(unknown, "is not an option of MemoryConversationStore (its options: now)");
    if (options.now !== undefined && typeof options.now !== "function") throw new InvalidStoreInputError("now", "expected a function returning milliseconds");
    this.now = options.now === undefined ? Date.now : checkedClock(options.now, (reason) => new InvalidStoreInputError("now", reason));
  }

  async appendUserMessage(conversationId: string, message: { id: string; content: JsonValue }, options?: AppendOptions): Promise<AppendResult> {
    checkUserMessage(message);
    checkMessageId(message.id);
    checkStoreJson("content", message.content);
    const within = checkReopenWithinMs(options);
    const conversation = this.get(conversationId);
    const known = conversation.messages.get(message.id);
    if (known !== undefined) {
      if (known.state === "failed" && reopenable(conversation, known)) {
        // TURN-12's window, on this store's clock, in the same step as the reopen (nothing awaits).
        if (within !== undefined && this.now() - windowStart(conversation, known) >= within) {
          return { appended: false, message: clone(known), reopened: false, pastReopenWindow: true };
        }
        known.state = "queued";
        delete known.failure;
        conversation.failedAt.delete(known.id);
        return { appended: false, message: shown(conversation, known), reopened: true };
      }
      return { appended: false, message: shown(conversation, known), reopened: false };
    }
    const stored: StoredMessage = {
      id: message.id,
      content: clone(message.content),
      seq: conversation.order.length + 1,
      state: "queued",
    };
    conversation.messages.set(stored.id, stored);
    conversation.order.push(stored);
    return { appended: true, message: clone(stored), reopened: false };
  }

  async message(conversationId: string, messageId: string): Promise<StoredMessage | undefined> {
    if (typeof messageId !== "string") throw new InvalidStoreInputError("messageId", "must be a string");
    const conversation = this.get(conversationId);
    const found = conversation.messages.get(messageId);
    return found === undefined ? undefined : shown(conversation, found);
  }

  async turnsOf(conversationId: string, messageId: string): Promise<StoredTurn[]> {
    return clone(this.get(conversationId).turns.filter((t) => t.messageId === messageId));
  }

  async log(conversationId: string): Promise<JsonValue[]> {
    return clone(this.get(conversationId).log);
  }

  async acquireLease(conversationId: string, owner: string, leaseMs: number, grantId?: string): Promise<LeaseResult> {
    checkLeaseOwner(owner);
    const ms = checkTurnLeaseMs(leaseMs);
    const id = checkLeaseGrantId(grantId);
    const conversation = this.get(conversationId);
    const now = this.now();
    const held = conversation.lease;
    const live = held !== undefined && held.expiresAt > now;
    // TURN-10: the latest grant's own id, or an earlier grant's (a grant id is fresh per
    // acquisition, so an earlier one can only be a late copy: it must not take a free lease and
    // hold the conversation for a whole lease with nobody working under it).
    const latest = conversation.grant;
    const earlier = id === undefined ? undefined : conversation.earlierGrants.get(id);
    if (earlier !== undefined && now - earlier.supersededAt < LEASE_GRANT_RETENTION_MS) {
      throw new ConversationLeaseLostError(conversationId, earlier.fence);
    }
    if (id !== undefined && latest?.id === id && latest.fence === conversation.fence) {
      if (live && held.fence === latest.fence) {
        // The same grant sent again (its reply was lost): same fence, the lease restarted.
        held.expiresAt = now + ms;
        return { acquired: true, fence: held.fence, leaseExpiresAt: held.expiresAt };
      }
      // Released or expired: that grant is over. A late copy must not take the lease again.
      throw new ConversationLeaseLostError(conversationId, latest.fence);
    }
    if (live) return { acquired: false, owner: held.owner, leaseExpiresAt: held.expiresAt };
    conversation.fence++;
    conversation.lease = { fence: conversation.fence, owner, expiresAt: now + ms };
    // The grant this one supersedes becomes an earlier grant, and what is past retention goes.
    for (const [kept, { supersededAt }] of conversation.earlierGrants) {
      if (now - supersededAt >= LEASE_GRANT_RETENTION_MS) conversation.earlierGrants.delete(kept);
    }
    if (latest !== undefined) conversation.earlierGrants.set(latest.id, { fence: latest.fence, supersededAt: now });
    conversation.grant = id === undefined ? undefined : { id, fence: conversation.fence };
    return { acquired: true, fence: conversation.fence, leaseExpiresAt: conversation.lease.expiresAt };
  }

  async renewLease(conversationId: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    // Checked before the fence: a bad length is refused the same whoever holds the lease, and
    // never written (it once set a NaN or past expiry on the held lease).
    const ms = checkTurnLeaseMs(leaseMs);
    const conversation = this.get(conversationId);
    const lease = this.held(conversationId, conversation, fence);
    lease.expiresAt = this.now() + ms;
    return { leaseExpiresAt: lease.expiresAt };
  }

  async releaseLease(conversationId: string, fence: number): Promise<void> {
    const conversation = this.get(conversationId);
    if (conversation.lease?.fence === fence) conversation.lease = undefined;
  }

  async releaseLeaseGrant(conversationId: string, grantId: string): Promise<void> {
    const id = checkLeaseGrantId(grantId, { required: true })!;
    const conversation = this.get(conversationId);
    const { grant, lease } = conversation;
    if (grant !== undefined && grant.id === id) {
      if (lease?.fence === grant.fence) conversation.lease = undefined;
      return;
    }
    if (conversation.earlierGrants.has(id)) return;
    // TURN-10: a grant id no grant carries: its acquire has not applied (yet), and its runner gave
    // it up. Kept as given back, like an earlier grant (fence 0: none was made under it), so that a
    // copy of that acquire landing later is refused rather than taking a free lease for nobody.
    const now = this.now();
    for (const [kept, { supersededAt }] of conversation.earlierGrants) {
      if (now - supersededAt >= LEASE_GRANT_RETENTION_MS) conversation.earlierGrants.delete(kept);
    }
    conversation.earlierGrants.set(id, { fence: 0, supersededAt: now });
  }

  /** How many earlier grant ids the conversation keeps (TURN-10); for tests of their bound. */
  keptGrantIds(conversationId: string): number {
    return this.conversations.get(conversationId)?.earlierGrants.size ?? 0;
  }

  async beginTurn(conversationId: string, fence: number): Promise<TurnSnapshot | undefined> {
    const conversation = this.get(conversationId);
    this.held(conversationId, conversation, fence);
    const current =
      conversation.order.find((m) => m.state === "in_progress") ?? conversation.order.find((m) => m.state === "queued");
    if (current === undefined) return undefined;
    const bound = current.state === "queued";
    if (bound) {
      current.state = "in_progress";
      // A reopened message keeps the index of its first turn (TURN-11, TURN-12).
      current.turnIndex ??= conversation.turns.length;
      // The first binding's time, in the binding's step; a reopen or a take-over keeps it (TURN-12).
      current.boundAt ??= inheritedBoundAt(conversation, current, this.now());
      conversation.lastBound = current.id;
    }
    const turnIndex = conversation.turns.length;
    const resumed = beginIndex(conversation, turnIndex, fence);
    const started = conversation.turns.some((t) => t.messageId === current.id);
    const input = clone(conversation.log);
    if (!started) input.push(clone(current.content));
    return { conversationId, turnIndex, message: shown(conversation, current), input, resumed, bound };
  }

  async commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }> {
    if (typeof commit !== "object" || commit === null) throw new InvalidStoreInputError("commit", "expected a turn commit object");
    checkStoreJson("assistant", commit.assistant);
    if (commit.toolResults !== undefined) checkStoreJson("toolResults", commit.toolResults);
    if (commit.record !== undefined) checkStoreJson("record", commit.record);
    // TURN-24: checked before anything is stored, kept beside the turn (never in the log).
    const callKeys = commit.callKeys !== undefined ? checkCallKeys(commit.callKeys) : undefined;
    const conversation = this.get(conversationId);
    const lease = conversation.lease;
    if (lease === undefined || lease.fence !== commit.fence) return { committed: false };
    if (conversation.turns.length !== commit.turnIndex) return { committed: false };
    const message = conversation.messages.get(commit.messageId);
    if (message === undefined || message.state !== "in_progress") return { committed: false };
    if (!conversation.turns.some((t) => t.messageId === message.id)) conversation.log.push(clone(message.content));
    conversation.log.push(clone(commit.assistant));
    if (commit.toolResults !== undefined) conversation.log.push(clone(commit.toolResults));
    const turn: StoredTurn = {
      turnIndex: commit.turnIndex,
      messageId: commit.messageId,
      assistant: clone(commit.assistant),
      stopReason: commit.stopReason,
    };
    if (commit.toolResults !== undefined) turn.toolResults = clone(commit.toolResults);
    if (callKeys !== undefined) turn.callKeys = callKeys;
    conversation.turns.push(turn);
    if (commit.answers) message.state = "answered";
    // RECORD-4: beside the conversation, never in the log; in the commit's own write (RECORD-8).
    if (commit.record !== undefined) conversation.records.push(clone(commit.record));
    return { committed: true };
  }

  async failMessage(conversationId: string, fence: number, messageId: string, record: JsonValue): Promise<void> {
    checkStoreJson("record", record);
    const conversation = this.get(conversationId);
    this.held(conversationId, conversation, fence);
    const message = conversation.messages.get(messageId);
    if (message === undefined || message.state !== "in_progress") {
      throw new InvalidStoreInputError("messageId", `message ${messageId} is not in progress`);
    }
    message.state = "failed";
    message.failure = clone(record);
    const now = this.now();
    conversation.failedAt.set(messageId, now);
    if (!conversation.firstFailedAt.has(messageId)) conversation.firstFailedAt.set(messageId, now);
    conversation.records.push(clone(record));
  }

  async addRecord(conversationId: string, record: JsonValue): Promise<void> {
    checkStoreJson("record", record);
    this.get(conversationId).records.push(clone(record));
  }

  async records(conversationId: string): Promise<JsonValue[]> {
    return clone(this.get(conversationId).records);
  }

  async listFailedTurns(query: FailedTurnsQuery = {}): Promise<FailedTurnsPage> {
    const { limit, after } = checkFailedTurnsQuery(query);
    // One reading of the clock for the whole listing: olderThanMs and the window alike.
    const now = this.now();
    const cutoff = query.olderThanMs === undefined ? undefined : now - query.olderThanMs;
    const within = query.reopenWithinMs;
    const all: FailedTurn[] = [];
    for (const [conversationId, conversation] of this.conversations) {
      if (query.conversationId !== undefined && conversationId !== query.conversationId) continue;
      for (const message of conversation.order) {
        if (message.state !== "failed") continue;
        const failedAt = conversation.failedAt.get(message.id) ?? 0;
        if (cutoff !== undefined && failedAt > cutoff) continue;
        const firstFailedAt = conversation.firstFailedAt.get(message.id) ?? 0;
        const turn: FailedTurn = { conversationId, messageId: message.id, failedAt, firstFailedAt, failure: clone(message.failure ?? null) };
        if (message.turnIndex !== undefined) turn.turnIndex = message.turnIndex;
        // What appendUserMessage decides a re-send by, not the record's `retryable` (TURN-12, TURN-17):
        // the last bound message, and with a window, its first failure younger than it.
        const last = reopenable(conversation, message);
        if (within === undefined) turn.reopenable = last;
        else {
          turn.pastReopenWindow = last && now - windowStart(conversation, message) >= within;
          turn.reopenable = last && !turn.pastReopenWindow;
        }
        if (after === undefined || isAfterPosition(turn, after)) all.push(turn);
      }
    }
    all.sort((a, b) => (isAfterPosition(a, b) ? 1 : isAfterPosition(b, a) ? -1 : 0));
    const turns = all.slice(0, limit);
    const last = turns.at(-1);
    return all.length > limit && last !== undefined ? { turns, cursor: encodeFailedTurnsCursor(last) } : { turns };
  }

  async listStalledMessages(query: StalledMessagesQuery = {}): Promise<StalledMessagesPage> {
    const { limit, after } = checkStalledMessagesQuery(query);
    const now = this.now();
    const cutoff = now - (query.olderThanMs ?? 0);
    const all: StalledMessage[] = [];
    for (const [conversationId, conversation] of this.conversations) {
      if (query.conversationId !== undefined && conversationId !== query.conversationId) continue;
      const message = conversation.order.find((m) => m.state === "in_progress");
      if (message === undefined || message.turnIndex === undefined) continue;
      const lease = conversation.lease;
      // A lease not yet expired is a live holder's (TURN-22): its message is never listed.
      if (lease !== undefined && lease.expiresAt > now) continue;
      const stalledSince = lease !== undefined ? lease.expiresAt : (message.boundAt ?? 0);
      if (stalledSince > cutoff) continue;
      const stalled: StalledMessage = { conversationId, messageId: message.id, turnIndex: message.turnIndex, stalledSince };
      if (lease !== undefined) stalled.leaseOwner = lease.owner;
      if (message.boundAt !== undefined) stalled.boundAt = message.boundAt;
      if (after === undefined || isAfterPosition(position(stalled), after)) all.push(stalled);
    }
    all.sort((a, b) => (isAfterPosition(position(a), position(b)) ? 1 : isAfterPosition(position(b), position(a)) ? -1 : 0));
    const messages = all.slice(0, limit);
    const last = messages.at(-1);
    return all.length > limit && last !== undefined ? { messages, cursor: encodeFailedTurnsCursor(position(last)) } : { messages };
  }

  async close(): Promise<void> {}

  private held(conversationId: string, conversation: Conversation, fence: number) {
    const lease = conversation.lease;
    // The fence decides, not the clock: an expired lease nobody took is still its holder's.
    if (lease === undefined || lease.fence !== fence) throw new ConversationLeaseLostError(conversationId, fence);
    return lease;
  }

  private get(conversationId: string): Conversation {
    if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
      throw new InvalidStoreInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
    }
    let conversation = this.conversations.get(conversationId);
    if (conversation === undefined) {
      conversation = {
        messages: new Map(),
        order: [],
        turns: [],
        log: [],
        lastBound: undefined,
        begun: undefined,
        lease: undefined,
        grant: undefined,
        earlierGrants: new Map(),
        fence: 0,
        records: [],
        failedAt: new Map(),
        firstFailedAt: new Map(),
      };
      this.conversations.set(conversationId, conversation);
    }
    return conversation;
  }
}

/**
 * TURN-12: a failed message may be retried only while no other message has been bound since
 * it: then every turn committed since its binding is its own, and its retry runs at the failed
 * turn's index with the same keys.
 */
/**
 * A copy of a message as the store answers it: a reopened one (queued or in progress after a
 * failure) shows the first failure its re-send window counts from (TURN-12), so that a holder
 * resuming its retry can check the window; kept beside the message, not in it.
 */
function shown(conversation: Conversation, message: StoredMessage): StoredMessage {
  const copy = clone(message);
  const first = conversation.firstFailedAt.get(message.id);
  if (first !== undefined && (message.state === "queued" || message.state === "in_progress")) copy.firstFailedAt = first;
  return copy;
}

function reopenable(conversation: Conversation, message: StoredMessage): boolean {
  return conversation.lastBound === message.id;
}

/**
 * TURN-15: whether `turnIndex` was begun before under another (earlier) grant. The first fence
 * to begin an index is kept until a turn is committed there, so that index is never begun again.
 */
function beginIndex(conversation: Conversation, turnIndex: number, fence: number): boolean {
  const begun = conversation.begun;
  if (begun !== undefined && begun.turnIndex === turnIndex) return begun.fence !== fence;
  conversation.begun = { turnIndex, fence };
  return false;
}


/** Message ids are opaque to the store but must be usable as keys everywhere: non-empty, at most 256 characters. */
export function checkMessageId(id: unknown): asserts id is string {
  if (typeof id !== "string" || id.length === 0 || id.length > 256 || !id.isWellFormed()) {
    // What it got, as the content's error says it: a client sending a number for its id sees why.
    const got = typeof id === "string" && id.length > 256 ? `${id.length} characters` : describeValue(id);
    throw new InvalidStoreInputError("messageId", `must be a non-empty, well-formed string of at most 256 characters, got ${got}`);
  }
}

/**
 * A copy of stored JSON data as a durable store gives it back (TURN-18): every value the store
 * keeps was checked as JSON on the way in, so only plain objects, arrays and scalars occur; an
 * object member whose value is undefined is absent and -0 is 0, as in the stored text of SQLite
 * and PostgreSQL. A walk, not structuredClone: this store copies on every read and write, and the
 * serializer's fixed cost made it a measurable share of a runner's CPU.
 */
function clone<T>(value: T): T {
  // -0 is written "0" in JSON text and read back as 0.
  if (typeof value !== "object" || value === null) return (value === 0 ? 0 : value) as T;
  if (Array.isArray(value)) {
    const out: unknown[] = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = clone(value[i]);
    return out as T;
  }
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(value)) {
    const member = (value as Record<string, unknown>)[name];
    if (member === undefined) continue;
    // A member named "__proto__" must stay an own member (assignment would set the prototype).
    if (name === "__proto__") Object.defineProperty(out, name, { value: clone(member), enumerable: true, writable: true, configurable: true });
    else out[name] = clone(member);
  }
  return out as T;
}

/**
 * A first binding's `boundAt` (TURN-11): `now`, or, where the message is bound at the index of a
 * failed one (the last bound message failed, and nothing was committed since, TURN-12), that
 * message's window start when earlier. Keys come from the turn index, not the message, so this
 * message's calls meet the failed one's rows, which age from that message's binding.
 */
function inheritedBoundAt(conversation: Conversation, message: StoredMessage, now: number): number {
  const last = conversation.lastBound === undefined ? undefined : conversation.messages.get(conversation.lastBound);
  if (last === undefined || last === message || last.state !== "failed") return now;
  return Math.min(now, windowStart(conversation, last));
}

/**
 * Where TURN-12's re-send window of a failed message counts from: the earlier of its binding
 * (`boundAt`) and its first failure. A message is bound before its first attempt, so the binding
 * is the earlier; the rows of its calls age from its first attempt's calls, which may be hours
 * before the first failure (a holder that paid and died, then a take-over that failed). A
 * failure whose time was not kept counts as 0, past every window.
 */
function windowStart(conversation: Conversation, message: StoredMessage): number {
  return Math.min(message.boundAt ?? Infinity, conversation.firstFailedAt.get(message.id) ?? 0);
}

/** A stalled message's place in the listing order (TURN-22): listFailedTurns' order, by `stalledSince`. */
function position(message: StalledMessage): { failedAt: number; conversationId: string; messageId: string } {
  return { failedAt: message.stalledSince, conversationId: message.conversationId, messageId: message.messageId };
}
