// A second, independent conversation store for the kit's self-tests: every conversation is one
// JSON text in a shared key-value map (the "server"), every method runs under that
// conversation's lock and yields to the event loop between its read and its write, so races
// are real. Each planted bug breaks one rule; without bugs it must conform.
import {
  type AppendOptions,
  ConversationLeaseLostError,
  CONVERSATION_ID_PATTERN,
  InvalidStoreInputError,
  LEASE_GRANT_RETENTION_MS,
  StoreUnavailableError,
  checkFailedTurnsQuery,
  checkStalledMessagesQuery,
  checkMessageId,
  encodeFailedTurnsCursor,
  isAfterPosition,
  type AppendResult,
  type ConversationStore,
  type ConversationStoreCapabilities,
  type FailedTurn,
  type FailedTurnsPage,
  type FailedTurnsQuery,
  type JsonValue,
  type LeaseResult,
  type StalledMessage,
  type StalledMessagesPage,
  type StalledMessagesQuery,
  type StoredMessage,
  type StoredTurn,
  type TurnCommit,
  type TurnSnapshot,
} from "@dispatch-once/core";
import { checkLeaseGrantId, checkLeaseOwner, checkReopenWithinMs, checkStoreJson, checkTurnLeaseMs } from "@dispatch-once/core/internal";
import type { ConversationStoreFixture, ConversationStoreSubject } from "../../src/index.js";

export interface ConversationBugs {
  // ---- TURN-10 lease grant ids ----
  /** acquireLease keeps the grant id but never recognises it: a re-sent acquire meets its own grant as held. */
  grantIdIgnored?: boolean;
  /** acquireLease with any grant id is the live grant of the same owner string (recognised by owner). */
  grantByOwner?: boolean;
  /** The grant id outlives its grant: a grant without a grant id keeps the old one, and it is matched without its fence. */
  grantIdOutlivesGrant?: boolean;
  /** Only the latest grant id is kept: a late copy of an earlier grant's acquire takes a free lease as any acquire would. */
  forgetsEarlierGrants?: boolean;
  /** releaseLeaseGrant of a grant id no grant carries keeps nothing: a later copy of that acquire takes a free lease. */
  givenBackForgotten?: boolean;
  /** releaseLeaseGrant frees the lease whatever grant holds it. */
  releaseGrantIgnoresId?: boolean;
  /** Grant ids are not checked: any value is kept as the grant id. */
  grantIdUnchecked?: boolean;
  /** commitTurn does not check the fence. */
  commitIgnoresFence?: boolean;
  /** commitTurn checks the turn count only (neither fence nor message). */
  commitChecksCountOnly?: boolean;
  /** A re-send of a known id appends a second message. */
  appendNotIdempotent?: boolean;
  /** acquireLease grants the lease even while it is live. */
  acquireIgnoresExpiry?: boolean;
  /** The fence restarts at 1 whenever nobody holds the lease. */
  fenceRestartsOnRelease?: boolean;
  /** A re-send reopens any failed message, even after another one was bound. */
  reopensAfterOtherBound?: boolean;
  /** A reopen drops the message's failed-turn records (a runner can no longer date its first failure, TURN-12). */
  reopenDropsFailedRecords?: boolean;
  /** supports.reopenWindow declared, but reopenWithinMs is ignored: a re-send reopens at any age. */
  reopenWindowIgnored?: boolean;
  /** beginTurn binds the newest queued message. */
  lifo?: boolean;
  /** A new lease holder binds the newest queued message instead of continuing the bound one. */
  rebindsOnTakeover?: boolean;
  /** Records are also appended to the log. */
  recordsInLog?: boolean;
  /** Each instance keeps its own state: a restart forgets everything (declared durable all the same). */
  forgetsOnRestart?: boolean;
  /** The fence counter lives in the instance: a fresh instance starts again at 1. */
  fenceResetsOnRestart?: boolean;
  /** Text is stored as Latin-1: non-ASCII content comes back mangled. */
  latin1Content?: boolean;
  /** commitTurn reads, yields, then writes without holding the conversation's lock. */
  racyCommit?: boolean;
  /**
   * `resumed` only for a message found in progress under another fence: a reopened message,
   * or the next message at a failed index, is called fresh though an earlier grant began it.
   */
  resumedOnlyInProgress?: boolean;
  /** acquireLease and renewLease take any owner and leaseMs (a negative one grants an expired lease). */
  leaseArgumentsUnchecked?: boolean;
  /** Content, turns and records are not checked as JSON: a NaN is kept as null, a Date as its string. */
  dataUnchecked?: boolean;
  /** Conversation ids compared case-insensitively (a case-insensitive collation on the key column). */
  conversationIdsFoldCase?: boolean;
  /** Message ids compared case-insensitively. */
  messageIdsFoldCase?: boolean;
  /** Message ids cut to 64 characters (a VARCHAR(64) under MySQL's non-strict mode). */
  messageIdsTruncated?: boolean;
  // ---- audit mutants (not planted before) ----
  /** commitTurn checks the fence and the message but not the expected turn count (lost update). */
  commitIgnoresCount?: boolean;
  /** failMessage does not check the fence: a paused holder fails the message after a takeover. */
  failIgnoresFence?: boolean;
  /** renewLease does not check the fence: a stale holder extends whoever holds the lease now. */
  renewIgnoresFence?: boolean;
  /** releaseLease does not check the fence: a stale holder's release frees the new holder's lease. */
  releaseIgnoresFence?: boolean;
  /** beginTurn does not check the fence: a stale holder binds and begins turns. */
  beginIgnoresFence?: boolean;
  /** acquireLease is re-entrant for the same owner string while the lease is live. */
  reentrantSameOwner?: boolean;
  /** The fence that first began a turn index is kept per instance: a restart forgets it (resumed says false). */
  begunNotDurable?: boolean;
  /** A re-send of an answered message queues it again (as if new): it is answered a second time. */
  resendRequeuesAnswered?: boolean;
  /** The turn index is a counter of bindings: a new message after a failed turn takes the next index. */
  indexCountsBindings?: boolean;
  /** failMessage fails a message in any state (an answered one too). */
  failAnyState?: boolean;
  /**
   * listFailedTurns says `reopenable: true` for every failed message (as a store might that read
   * it off the record's `retryable`, written at the failure), also after another message was bound.
   */
  listsEveryFailedReopenable?: boolean;
  /** TURN-12's window is measured from the message's LAST failure (a retry that fails again restarts it). */
  reopenWindowFromLastFailure?: boolean;
  /** A reopened message's firstFailedAt is not shown (the column not read back): a resumed retry cannot check its window. */
  reopenedHidesFirstFailure?: boolean;
  /** A bound message's boundAt is not shown (the column not read back): a runner cannot date a message that never failed. */
  bindingHidesBoundAt?: boolean;
  /** listFailedTurns ignores reopenWithinMs: reopenable only says the message is the last bound. */
  listReopenableIgnoresWindow?: boolean;
  /** TURN-12's window (the reopen's and the listing's) counts from the first failure only, never from the earlier binding (boundAt still shown right). */
  reopenWindowIgnoresBinding?: boolean;
  /** A message bound at a failed message's index is dated by its own binding, not that message's window start: its calls meet rows older than its window says. */
  boundAtNotInherited?: boolean;
  /** beginTurn does not say which call bound the message (`bound` left out): a runner cannot tell a new message's first run from a take-over. */
  boundNotSaid?: boolean;
  /** listFailedTurns judges reopenWithinMs from the LAST failure (firstFailedAt still given right). */
  listWindowFromLastFailure?: boolean;
  /** commitTurn keeps a commit's record even when it refuses the commit (declaring recordsWithCommit). */
  commitRecordAlways?: boolean;
  /** commitTurn drops a commit's record (declaring recordsWithCommit all the same). */
  commitRecordDropped?: boolean;
  // ---- TURN-17 listFailedTurns mutants ----
  /** listFailedTurns reads an index of failures that a reopen does not remove from: reopened messages are listed. */
  listsReopened?: boolean;
  /** failMessage stamps failedAt with the process clock, not the store's. */
  failedAtProcessClock?: boolean;
  /** listFailedTurns orders by conversation id and message id only (failedAt ignored). */
  listOrderById?: boolean;
  /** listFailedTurns ignores the limit it is given: every page holds up to the default 100. */
  ignoresLimit?: boolean;
  /** listFailedTurns takes any limit: above 1000 is served, not refused. */
  limitUnchecked?: boolean;
  /** The cursor resumes AT the last listed turn, not after it: each page repeats the previous one's last. */
  cursorInclusive?: boolean;
  /** The cursor is an offset into the listing: a listed turn that leaves the list makes the next page skip one. */
  cursorIsOffset?: boolean;
  /** listFailedTurns ignores the conversationId filter. */
  ignoresConversationFilter?: boolean;
  /** olderThanMs is counted from the process clock, though failedAt is on the store's. */
  olderThanProcessClock?: boolean;
  /** listFailedTurns writes: it keeps a record of each listing beside the listed conversations. */
  listingRecordsItself?: boolean;
  /** A failed message without a kept failure time (a row from before failedAt) is listed as failed now. */
  unknownFailedAtIsNow?: boolean;
  /** olderThanMs skips failures whose time was not kept (as SQL's `NULL <= cutoff` does), though 0 is older than any age. */
  olderThanSkipsUnknown?: boolean;
  /** A cursor whose failedAt is 0 is taken for no cursor (a falsy test): the listing starts again. */
  cursorAtZeroRestarts?: boolean;
  /** Ties in failedAt listed, and paged, in UTF-16 code unit order of the ids (JavaScript's `<`), not code point order. */
  tiesByCodeUnit?: boolean;
  /** Listed in code point order, but the cursor resumes by UTF-16 code units: pages skip or repeat ties. */
  cursorByCodeUnit?: boolean;
  // ---- TURN-14 and TURN-1 mutants ----
  /** Only the last 64 committed turns are kept (a capped history); a counter still gives the next index. */
  prunesOldTurns?: boolean;
  /** A reopened message's turn is begun at the index it was first bound to, not at the committed count. */
  reopenedAtBoundIndex?: boolean;
  /** beginTurn takes the committed count from what this instance last saw, not from storage. */
  instanceCountCache?: boolean;
  // ---- Mutation round of 2026-12-03: planted without reading the list above first. ----
  /** A lease is still live at the millisecond it ends (`expiresAt >= now`) (TURN-10, the safe side: expected to conform). */
  leaseLiveAtExpiry?: boolean;
  /** Grant ids compared case-insensitively (a case-insensitive collation on the grant column) (breaks TURN-10). */
  grantIdFoldsCase?: boolean;
  /** An acquire re-sent with the live grant's id is answered, and stored, with a new fence (breaks TURN-10: the same grant). */
  grantReplayBumpsFence?: boolean;
  /** An acquire re-sent with the live grant's id answers the grant but does not restart the lease (breaks TURN-10). */
  grantReplayKeepsExpiry?: boolean;
  /** After its lease was released or ran out, an acquire re-sent with the grant's id takes the lease again under the old fence (breaks TURN-10). */
  grantRecognisedAfterEnd?: boolean;
  /** The listing cursor resumes strictly after its failedAt: later ids failed in the same millisecond are skipped (breaks TURN-17). */
  cursorSkipsTies?: boolean;
  /** A reopened message keeps its old failure (an UPDATE that sets state only) (breaks TURN-12/TURN-7). */
  reopenKeepsFailure?: boolean;
  /** An acquire over an expired lease keeps the old holder's owner string (breaks TURN-10's reported holder). */
  takeoverKeepsOwner?: boolean;
  /** renewLease extends from the lease's previous end, not from now (breaks TURN-10's lease length). */
  renewFromPreviousEnd?: boolean;
  /** Grant ids cut to 32 characters (a CHAR(32) column sized for a UUID without dashes) (breaks TURN-10). */
  grantIdTruncated?: boolean;
  /** acquireLease measures the lease on the process clock (Date.now()), not the store's (breaks TURN-10). */
  leaseOnProcessClock?: boolean;
  /** message() answers from this instance's cache of what it read first (breaks TURN-14: another instance's writes unseen). */
  messageReadCache?: boolean;
  // ---- Mutation round h-round: planted without reading the lists above first. ----
  /**
   * The holder's fence is compared as text to refuse older ones (a Lua `<` on HGET strings) and
   * numerically to refuse never-issued higher ones: fence 9 passes while fence 10 holds the lease (breaks TURN-10).
   */
  staleFenceAsText?: boolean;
  /** acquireLease's lease is now + leaseMs × 1000 (EXPIRE for PEXPIRE) (breaks TURN-10). */
  leaseMsAsSeconds?: boolean;
  /** renewLease's lease is now + leaseMs × 1000 (breaks TURN-10). */
  renewMsAsSeconds?: boolean;
  /** A re-send of a known message id overwrites its stored content (an UPSERT) (breaks TURN-2). */
  resendOverwritesContent?: boolean;
  /** commitTurn marks the message answered whatever `answers` says (breaks TURN-5/TURN-9). */
  answersIgnored?: boolean;
  /** records() lists newest first (ORDER BY id DESC) (breaks RECORD-4's order). */
  recordsNewestFirst?: boolean;
  /** records() returns the first 100 records only (a driver's default page, never followed) (breaks RECORD-4). */
  recordsFirstPageOnly?: boolean;
  // ---- TURN-22 listStalledMessages mutants ----
  /** listStalledMessages lists a message in progress whatever its lease, dated by its binding: a live runner's message too. */
  stalledIgnoresLiveLease?: boolean;
  /** listStalledMessages' cursor resumes at the last listed message (each page repeats it). */
  stalledCursorInclusive?: boolean;
  /** listFailedTurns gives a cursor when exactly limit turns were left (`<` for `<=`): a last page that is empty. */
  cursorOnExactPage?: boolean;
  /** A takeover (acquire over an expired lease) forgets which fence began the current turn index: resumed says false (breaks TURN-15). */
  takeoverForgetsBegun?: boolean;
  /** commitTurn keeps the assistant message but drops toolResults (a column added later, left out of the INSERT) (breaks TURN-7). */
  dropsToolResults?: boolean;
  /** TURN-12's window measured as Date.now() - firstFailedAt: the process clock against a failure time on the store's (breaks TURN-12). */
  reopenWindowOnProcessClock?: boolean;
  /** failMessage keeps its record on the message only, not in records() (breaks RECORD-4/TURN-12). */
  failRecordDropped?: boolean;
  // ---- Mutation round i (convmut): mechanisms not planted above. ----
  /** Each instance has its own lock table over the shared data: every method is atomic per process, not across instances (breaks TURN-5/TURN-10). */
  locksPerInstance?: boolean;
  /** commitTurn takes any message bound to the commit's index that is not answered (a failed one too), not only the one in progress (breaks TURN-5/TURN-11). */
  commitForBoundIndex?: boolean;
  /** commitTurn keeps the commit's record only when the turn answers (the record column written in the answer branch) (breaks TURN-5). */
  commitRecordOnlyWhenAnswers?: boolean;
  /** turnsOf and log are served from a per-instance cache filled on first read, refreshed only by this instance's own commits (breaks TURN-7/TURN-14). */
  turnsCachePerInstance?: boolean;
  /** turnsOf and log order turns by their index as text ("10" before "2") (breaks TURN-7/TURN-14). */
  turnsSortedAsText?: boolean;
  /** Stored JSON is parsed with a date reviver: an ISO 8601 timestamp string comes back re-spelt by Date#toISOString (breaks TURN-7). */
  isoDatesRevived?: boolean;
  /** Stored JSON is copied by a hand-rolled deep copy (`out[k] = v`): a "__proto__" member sets the prototype and is lost (breaks TURN-7). */
  protoKeyLost?: boolean;
  /** failMessage keeps the failed-turn record in the instance's memory only (records() merges it in): a fresh instance has lost it (breaks RECORD-4/TURN-14). */
  failureRecordVolatile?: boolean;
  /** A reopened instance "recovers" each conversation it first touches: messages in progress go back to queued (breaks TURN-11). */
  restartRequeuesInFlight?: boolean;
  /** commitTurn answers committed: true, appending nothing, to a commit of the last committed (message, index, fence) whatever its payload ("idempotent on a lost reply") (breaks TURN-5). */
  commitReplayAnsweredTrue?: boolean;
  /** A re-send is recognised only among the conversation's last 100 messages (a capped recent-id set): an older id is appended again (breaks TURN-2). */
  recentIdsDedup?: boolean;
  /** Message ids are unique across conversations (PRIMARY KEY (message_id)): m1 in a second conversation is taken for a re-send of the first's (breaks TURN-2). */
  messageIdsGlobal?: boolean;
  /** turnsOf selects turns whose message id starts with the one asked (LIKE 'm1%'): m1's answer includes m10's turns (breaks TURN-7). */
  turnsOfByPrefix?: boolean;
  /** records(c) returns the records of every conversation whose id starts with c (KEYS records:c*) (breaks RECORD-4). */
  recordsByPrefix?: boolean;
  /** The fence is the store clock in whole seconds (fence = floor(now / 1000)): two grants in one second share it (breaks TURN-10). */
  fenceIsEpochSeconds?: boolean;
  /** renewLease trusts this instance's cache of its own grant while it looks live, and writes the lease back without reading it (breaks TURN-10). */
  renewFromCache?: boolean;
  /** On an unreachable store, listFailedTurns answers an empty page and releaseLeaseGrant does nothing, instead of store_unavailable (breaks TURN-14). */
  unavailableListsNothing?: boolean;
  /** The conversation's last bound message is kept per instance; a fresh instance takes the first message (by arrival) at the highest bound index (breaks TURN-12). */
  lastBoundPerInstance?: boolean;
  /** beginTurn's input carries the user message only on the call that binds it: a take-over before the first commit sends the log without it (breaks TURN-11/TURN-9). */
  inputOmitsMessageUnlessBound?: boolean;
  /** The log is content-addressed: a user message whose content equals an earlier log entry is left out (breaks TURN-5/TURN-7). */
  logDedupsContent?: boolean;
  /** commitTurn honours answers only on a message's first turn: the answer after a tool loop leaves it in progress (breaks TURN-5/TURN-11). */
  answersOnlyFirstTurn?: boolean;
  /** beginTurn memoises its snapshot per instance by fence and log version, not by conversation: fence 1 of a second conversation gets the first's snapshot (breaks TURN-10/TURN-9). */
  beginCacheByFence?: boolean;
  /** acquireLease judges a lease live on the process clock (Date.now()) against an expiry on the store's (breaks TURN-10). */
  leaseLiveOnProcessClock?: boolean;
  /** turnsOf and log read one 1 MiB page of turns and never follow the next (a DynamoDB Query without LastEvaluatedKey) (breaks TURN-7/TURN-14). */
  turnsFirstMegabyte?: boolean;
  /** A stale fence raises a plain Error("lease lost"), not conversation_lease_lost (breaks TURN-10's typed error). */
  leaseLostAsGenericError?: boolean;
  /** failMessage under a stale fence does nothing and says nothing (an UPDATE ... WHERE fence = $1 whose row count is not read) (breaks TURN-10). */
  failMessageStaleNoop?: boolean;
  /** beginTurn under a stale fence answers undefined, as if no message waited (breaks TURN-10). */
  beginStaleUndefined?: boolean;
  /** A reopened message is re-inserted at the end of the queue (DELETE + INSERT), behind later arrivals (breaks TURN-12/TURN-9). */
  reopenMovesToEnd?: boolean;
  /** addRecord keeps records as a set (Redis SADD): a record equal to a kept one is dropped (breaks RECORD-4). */
  recordsAsSet?: boolean;
  /** The last bound message is one variable of the instance for every conversation (breaks TURN-12 with two conversations interleaved). */
  lastBoundGlobal?: boolean;
}

interface State {
  messages: StoredMessage[];
  turns: StoredTurn[];
  lastBound: string | null;
  /** The fence under which the in-progress message was bound (for the rebindsOnTakeover bug). */
  boundFence: number;
  /** The turn index begun last and the fence that first began it (TURN-15). */
  begun?: { turnIndex: number; fence: number } | null;
  lease: { fence: number; owner: string; expiresAt: number } | null;
  /** The latest grant's grant id and fence (TURN-10), kept after its lease ends. */
  grant?: { id: string; fence: number } | null;
  /** Earlier grants' ids (TURN-10): fence and when a later grant superseded them (backing's clock). */
  earlierGrants?: Record<string, { fence: number; supersededAt: number }>;
  fence: number;
  records: JsonValue[];
  /** When each failed message failed (the backing's clock), for listFailedTurns (TURN-17). */
  failedAt?: Record<string, number>;
  /** When each message first failed (store clock), kept across reopens: TURN-12's re-send window. */
  firstFailedAt?: Record<string, number>;
  /** Turns dropped from the front of `turns` (the prunesOldTurns bug). */
  pruned?: number;
  /** The last commit applied (the commitReplayAnsweredTrue bug). */
  lastCommit?: { fence: number; messageId: string; turnIndex: number };
}

/** The shared "server": conversation texts, per-conversation lock chains, one clock. */
export interface KvBacking {
  data: Map<string, string>;
  locks: Map<string, Promise<void>>;
  now: () => number;
}

/** How far the backing's clock runs ahead of the process clock. */
export const STORE_CLOCK_AHEAD_MS = 90 * 60 * 1000;

export function kvBacking(): KvBacking {
  let last = 0;
  // The store's clock runs ahead of the process clock (a database server's clock need not agree
  // with the application's), so a store that mixes the two up is caught (TURN-17's failedAt and olderThanMs).
  return { data: new Map(), locks: new Map(), now: () => (last = Math.max(last, Date.now() + STORE_CLOCK_AHEAD_MS)) };
}

/** Where a conversation's state lives: its id, unless a planted bug folds ids together. */
function conversationSlot(bugs: ConversationBugs, conversationId: string): string {
  return bugs.conversationIdsFoldCase ? conversationId.toLowerCase() : conversationId;
}

const yieldNow = () => new Promise<void>((resolve) => setImmediate(resolve));

export class KvConversationStore implements ConversationStore {
  readonly capabilities: ConversationStoreCapabilities = { durability: "durable", clock: "store", sharedAcrossProcesses: true, recordsWithCommit: true, supports: { leaseGrants: true, reopenWindow: true, boundAt: true } };
  private instanceFence = new Map<string, number>();
  private instanceBegun = new Map<string, { turnIndex: number; fence: number } | null>();
  private instanceCount = new Map<string, number>();
  /** Planted messageReadCache: the first read of each message, per instance. */
  private messageCache = new Map<string, StoredMessage>();
  /** Round i bugs' per-instance memory. */
  private turnsCache = new Map<string, State>();
  private volatileRecords = new Map<string, JsonValue[]>();
  private recovered = new Set<string>();
  private grantCache = new Map<string, { fence: number; owner: string; expiresAt: number }>();
  private instanceLastBound = new Map<string, string>();
  private beginCache = new Map<string, TurnSnapshot>();
  private globalLastBound: string | null = null;
  /** Set by the subject on instances made by reopen() (the restartRequeuesInFlight bug). */
  reopened = false;

  constructor(
    private readonly backing: KvBacking,
    private readonly bugs: ConversationBugs = {},
  ) {}

  /** Whether two message ids name one message: the same string, unless a planted bug folds them. */
  private sameMessage(a: string, b: string): boolean {
    if (this.bugs.messageIdsFoldCase) return a.toLowerCase() === b.toLowerCase();
    if (this.bugs.messageIdsTruncated) return a.slice(0, 64) === b.slice(0, 64);
    return a === b;
  }

  async appendUserMessage(conversationId: string, message: { id: string; content: JsonValue }, options?: AppendOptions): Promise<AppendResult> {
    checkMessageId(message?.id);
    this.checkData("content", message.content);
    const within = checkReopenWithinMs(options);
    if (this.bugs.messageIdsGlobal) {
      for (const [slot, text] of this.backing.data) {
        if (slot === conversationSlot(this.bugs, conversationId)) continue;
        const other = (JSON.parse(text) as State).messages.find((m) => m.id === message.id);
        if (other !== undefined) return { appended: false, message: structuredClone(other), reopened: false };
      }
    }
    return this.locked(conversationId, (s) => {
      const recent = this.bugs.recentIdsDedup ? s.messages.slice(-100) : s.messages;
      const known = recent.find((m) => this.sameMessage(m.id, message.id));
      if (known !== undefined && this.bugs.resendRequeuesAnswered && known.state === "answered") {
        known.state = "queued";
        delete known.turnIndex;
        return { appended: false, message: this.shown(s, known), reopened: false };
      }
      if (known !== undefined && this.bugs.resendOverwritesContent) known.content = this.text(message.content);
      if (known !== undefined && !this.bugs.appendNotIdempotent) {
        const reopenable = this.bugs.reopensAfterOtherBound || this.lastBoundOf(conversationId, s) === known.id;
        if (known.state === "failed" && reopenable) {
          const firstFailed = (this.bugs.reopenWindowFromLastFailure ? undefined : s.firstFailedAt?.[known.id]) ?? s.failedAt?.[known.id] ?? 0;
          // From the binding where it is earlier (TURN-12); a store that counts from a failure only does not.
          const fromFailure = this.bugs.reopenWindowFromLastFailure || this.bugs.reopenWindowIgnoresBinding;
          const start = fromFailure ? firstFailed : Math.min(known.boundAt ?? Infinity, firstFailed);
          const clock = this.bugs.reopenWindowOnProcessClock ? Date.now() : this.backing.now();
          if (within !== undefined && !this.bugs.reopenWindowIgnored && clock - start >= within) {
            return { appended: false, message: this.shown(s, known), reopened: false, pastReopenWindow: true };
          }
          known.state = "queued";
          if (this.bugs.reopenMovesToEnd) {
            s.messages = [...s.messages.filter((m) => m !== known), known];
            s.messages.forEach((m, i) => (m.seq = i + 1));
          }
          if (!this.bugs.reopenKeepsFailure) delete known.failure;
          if (this.bugs.reopenDropsFailedRecords) {
            s.records = s.records.filter((r) => !(typeof r === "object" && r !== null && !Array.isArray(r) && r.kind === "failed_turn" && r.messageId === known.id));
          }
          // Kept as the first failure from now on (a row from before it was kept: its last, else 0).
          (s.firstFailedAt ??= {})[known.id] ??= s.failedAt?.[known.id] ?? 0;
          if (s.failedAt !== undefined && !this.bugs.listsReopened) delete s.failedAt[known.id];
          return { appended: false, message: this.shown(s, known), reopened: true };
        }
        return { appended: false, message: this.shown(s, known), reopened: false };
      }
      const stored: StoredMessage = { id: message.id, content: this.text(message.content), seq: s.messages.length + 1, state: "queued" };
      s.messages.push(stored);
      return { appended: true, message: structuredClone(stored), reopened: false };
    });
  }

  /** A message as the store answers it: a reopened one shows its first failure (TURN-12). */
  private shown(s: State, message: StoredMessage): StoredMessage {
    const copy = structuredClone(message);
    const first = s.firstFailedAt?.[message.id];
    if (first !== undefined && !this.bugs.reopenedHidesFirstFailure && (message.state === "queued" || message.state === "in_progress")) copy.firstFailedAt = first;
    if (this.bugs.bindingHidesBoundAt) delete copy.boundAt;
    return copy;
  }

  async message(conversationId: string, messageId: string): Promise<StoredMessage | undefined> {
    const cacheKey = `${conversationId}\u0000${messageId}`;
    if (this.bugs.messageReadCache && this.messageCache.has(cacheKey)) return structuredClone(this.messageCache.get(cacheKey));
    return this.locked(conversationId, (s) => {
      const stored = s.messages.find((m) => this.sameMessage(m.id, messageId));
      const found = stored === undefined ? undefined : this.shown(s, stored);
      if (this.bugs.messageReadCache && found !== undefined) this.messageCache.set(cacheKey, structuredClone(found));
      return found;
    });
  }

  async turnsOf(conversationId: string, messageId: string): Promise<StoredTurn[]> {
    return this.locked(conversationId, (s) => {
      const from = this.readTurnsFrom(conversationId, s);
      const mine = (t: StoredTurn) => (this.bugs.turnsOfByPrefix ? t.messageId.startsWith(messageId) : this.sameMessage(t.messageId, messageId));
      return structuredClone(this.turnsRead(from).filter(mine));
    });
  }

  async log(conversationId: string): Promise<JsonValue[]> {
    return this.locked(conversationId, (s) => this.logOf(this.readTurnsFrom(conversationId, s)));
  }

  /** The state turns are read from: storage, or this instance's first read of it (the turnsCachePerInstance bug). */
  private readTurnsFrom(conversationId: string, s: State): State {
    if (!this.bugs.turnsCachePerInstance) return s;
    if (!this.turnsCache.has(conversationId)) this.turnsCache.set(conversationId, structuredClone(s));
    return this.turnsCache.get(conversationId)!;
  }

  /** The turns in the order (and page) a read gives them: index order, unless a planted bug says otherwise. */
  private turnsRead(s: State): StoredTurn[] {
    let turns = s.turns;
    if (this.bugs.turnsSortedAsText) turns = [...turns].sort((a, b) => (String(a.turnIndex) < String(b.turnIndex) ? -1 : String(a.turnIndex) > String(b.turnIndex) ? 1 : 0));
    if (this.bugs.turnsFirstMegabyte) {
      let bytes = 0;
      const page: StoredTurn[] = [];
      for (const t of turns) {
        bytes += Buffer.byteLength(JSON.stringify(t));
        if (bytes > 1024 * 1024) break;
        page.push(t);
      }
      turns = page;
    }
    return turns;
  }

  /** The conversation's most recently bound message: stored, or this instance's memory of it (the lastBoundPerInstance bug). */
  private lastBoundOf(conversationId: string, s: State): string | null {
    if (this.bugs.lastBoundGlobal) return this.globalLastBound;
    if (!this.bugs.lastBoundPerInstance) return s.lastBound;
    const mine = this.instanceLastBound.get(conversationId);
    if (mine !== undefined) return mine;
    const bound = s.messages.filter((m) => m.turnIndex !== undefined);
    const top = Math.max(-1, ...bound.map((m) => m.turnIndex!));
    return bound.find((m) => m.turnIndex === top)?.id ?? null;
  }

  async acquireLease(conversationId: string, owner: string, leaseMs: number, grantId?: string): Promise<LeaseResult> {
    if (!this.bugs.leaseArgumentsUnchecked) {
      checkLeaseOwner(owner);
      leaseMs = checkTurnLeaseMs(leaseMs);
    }
    const id = this.bugs.grantIdUnchecked ? grantId : checkLeaseGrantId(grantId);
    return this.locked(conversationId, (s) => {
      const now = this.bugs.leaseOnProcessClock ? Date.now() : this.backing.now();
      const liveNow = this.bugs.leaseLiveOnProcessClock ? Date.now() : now;
      const live = s.lease !== null && (this.bugs.leaseLiveAtExpiry ? s.lease.expiresAt >= liveNow : s.lease.expiresAt > liveNow);
      const latest = s.grant ?? null;
      if (id !== undefined && !this.bugs.grantIdIgnored) {
        const sameId =
          latest !== null &&
          (this.bugs.grantIdFoldsCase ? latest.id.toLowerCase() === id.toLowerCase() : this.bugs.grantIdTruncated ? latest.id.slice(0, 32) === id.slice(0, 32) : latest.id === id);
        const ours = this.bugs.grantIdOutlivesGrant ? sameId : sameId && latest!.fence === s.fence;
        const byOwner = this.bugs.grantByOwner && live && s.lease!.owner === owner;
        if (ours || byOwner) {
          if (live) {
            if (!this.bugs.grantReplayKeepsExpiry) s.lease!.expiresAt = now + leaseMs;
            if (this.bugs.grantReplayBumpsFence) {
              s.fence += 1;
              s.lease!.fence = s.fence;
              s.grant = { id: latest!.id, fence: s.fence };
            }
            return { acquired: true, fence: s.lease!.fence, leaseExpiresAt: s.lease!.expiresAt };
          }
          if (this.bugs.grantRecognisedAfterEnd && !byOwner) {
            s.lease = { fence: s.fence, owner, expiresAt: now + leaseMs };
            return { acquired: true, fence: s.fence, leaseExpiresAt: s.lease.expiresAt };
          }
          if (!byOwner) throw new ConversationLeaseLostError(conversationId, latest!.fence);
        }
        const earlier = s.earlierGrants?.[id];
        if (earlier !== undefined && now - earlier.supersededAt < LEASE_GRANT_RETENTION_MS) throw new ConversationLeaseLostError(conversationId, earlier.fence);
      }
      const reentrant = this.bugs.reentrantSameOwner && s.lease?.owner === owner;
      if (s.lease !== null && live && !this.bugs.acquireIgnoresExpiry && !reentrant) {
        return { acquired: false, owner: s.lease.owner, leaseExpiresAt: s.lease.expiresAt };
      }
      let fence: number;
      if (this.bugs.fenceResetsOnRestart) {
        fence = (this.instanceFence.get(conversationId) ?? 0) + 1;
        this.instanceFence.set(conversationId, fence);
      } else {
        fence = this.bugs.fenceRestartsOnRelease && s.lease === null ? 1 : s.fence + 1;
      }
      if (this.bugs.fenceIsEpochSeconds) fence = Math.floor(now / 1000);
      s.fence = fence;
      if (this.bugs.takeoverForgetsBegun && s.lease !== null) s.begun = null;
      s.lease = { fence, owner: this.bugs.takeoverKeepsOwner && s.lease !== null ? s.lease.owner : owner, expiresAt: now + (this.bugs.leaseMsAsSeconds ? leaseMs * 1000 : leaseMs) };
      if (latest !== null && !this.bugs.forgetsEarlierGrants && !(this.bugs.grantIdOutlivesGrant && id === undefined)) {
        const kept = Object.entries(s.earlierGrants ?? {}).filter(([, e]) => now - e.supersededAt < LEASE_GRANT_RETENTION_MS);
        s.earlierGrants = Object.fromEntries([...kept, [latest.id, { fence: latest.fence, supersededAt: now }]]);
      }
      if (id !== undefined) s.grant = { id, fence };
      else if (!this.bugs.grantIdOutlivesGrant) s.grant = null;
      this.grantCache.set(conversationId, { ...s.lease });
      return { acquired: true, fence, leaseExpiresAt: s.lease.expiresAt };
    });
  }

  async releaseLeaseGrant(conversationId: string, grantId: string): Promise<void> {
    const id = this.bugs.grantIdUnchecked ? grantId : checkLeaseGrantId(grantId, { required: true })!;
    return this.locked(conversationId, (s) => {
      const latest = s.grant ?? null;
      const now = this.backing.now();
      const earlier = s.earlierGrants?.[id];
      const known = latest?.id === id || (earlier !== undefined && now - earlier.supersededAt < LEASE_GRANT_RETENTION_MS);
      if (!known && !this.bugs.givenBackForgotten) {
        // TURN-10: no grant carries it (its acquire has not applied): kept as given back, fence 0.
        const kept = Object.entries(s.earlierGrants ?? {}).filter(([, e]) => now - e.supersededAt < LEASE_GRANT_RETENTION_MS);
        s.earlierGrants = Object.fromEntries([...kept, [id, { fence: 0, supersededAt: now }]]);
      }
      if (s.lease === null) return;
      if (this.bugs.releaseGrantIgnoresId || (latest !== null && latest.id === id && latest.fence === s.lease.fence)) s.lease = null;
    });
  }

  async renewLease(conversationId: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    if (!this.bugs.leaseArgumentsUnchecked) leaseMs = checkTurnLeaseMs(leaseMs);
    return this.locked(conversationId, (s) => {
      const cached = this.grantCache.get(conversationId);
      if (this.bugs.renewFromCache && cached !== undefined && cached.fence === fence && cached.expiresAt > this.backing.now()) {
        // "Still ours, no need to read": the lease is written back from the cache.
        cached.expiresAt = this.backing.now() + leaseMs;
        s.lease = { ...cached };
        return { leaseExpiresAt: cached.expiresAt };
      }
      const lease = this.bugs.renewIgnoresFence && s.lease !== null ? s.lease : held(conversationId, s, fence, this.bugs);
      lease.expiresAt = (this.bugs.renewFromPreviousEnd ? lease.expiresAt : this.backing.now()) + (this.bugs.renewMsAsSeconds ? leaseMs * 1000 : leaseMs);
      this.grantCache.set(conversationId, { ...lease });
      return { leaseExpiresAt: lease.expiresAt };
    });
  }

  async releaseLease(conversationId: string, fence: number): Promise<void> {
    return this.locked(conversationId, (s) => {
      const mine = this.bugs.staleFenceAsText ? s.lease !== null && !(String(fence) < String(s.lease.fence)) && !(fence > s.lease.fence) : s.lease?.fence === fence;
      if (mine || this.bugs.releaseIgnoresFence) s.lease = null;
    });
  }

  async beginTurn(conversationId: string, fence: number): Promise<TurnSnapshot | undefined> {
    return this.locked(conversationId, (s) => {
      if (this.bugs.beginStaleUndefined && s.lease?.fence !== fence) return undefined;
      if (!this.bugs.beginIgnoresFence) held(conversationId, s, fence, this.bugs);
      const memo = this.beginCache.get(`${fence}:${committedCount(s)}`);
      if (this.bugs.beginCacheByFence && memo !== undefined) return structuredClone(memo);
      if (this.bugs.begunNotDurable) s.begun = this.instanceBegun.get(conversationId) ?? null;
      const queued = s.messages.filter((m) => m.state === "queued");
      let current = s.messages.find((m) => m.state === "in_progress");
      if (current !== undefined && this.bugs.rebindsOnTakeover && s.boundFence !== fence && queued.length > 0) {
        current.state = "queued";
        current = undefined;
      }
      current ??= this.bugs.lifo || this.bugs.rebindsOnTakeover ? queued.at(-1) : queued[0];
      if (current === undefined) return undefined;
      const wasReopened = current.state === "queued" && current.turnIndex !== undefined;
      const cached = this.bugs.instanceCountCache ? this.instanceCount.get(conversationId) : undefined;
      const turnIndex = this.bugs.reopenedAtBoundIndex && wasReopened ? current.turnIndex! : cached ?? committedCount(s);
      this.instanceCount.set(conversationId, turnIndex);
      let resumed = s.begun?.turnIndex === turnIndex && s.begun.fence !== fence;
      if (s.begun?.turnIndex !== turnIndex) s.begun = { turnIndex, fence };
      if (this.bugs.begunNotDurable) this.instanceBegun.set(conversationId, s.begun ?? null);
      if (this.bugs.resumedOnlyInProgress) resumed = current.state === "in_progress" && s.boundFence !== fence;
      const bound = current.state === "queued";
      if (bound) {
        current.state = "in_progress";
        current.turnIndex ??= this.bugs.indexCountsBindings
          ? Math.max(committedCount(s), ...s.messages.filter((m) => m.turnIndex !== undefined && m !== current).map((m) => m.turnIndex! + 1))
          : committedCount(s); // a reopened message keeps its first index (TURN-11)
        // The first binding's time, in the binding's write; where the last bound message failed
        // (nothing committed since), that message's window start when earlier (TURN-11, TURN-12).
        const last = s.messages.find((m) => m.id === s.lastBound);
        const inherited = !this.bugs.boundAtNotInherited && last !== undefined && last !== current && last.state === "failed" ? windowStartOf(s, last) : Infinity;
        current.boundAt ??= Math.min(this.backing.now(), inherited);
        s.lastBound = current.id;
        this.instanceLastBound.set(conversationId, current.id);
        this.globalLastBound = current.id;
        s.boundFence = fence;
      }
      const input = this.logOf(s);
      if (!s.turns.some((t) => t.messageId === current.id) && (bound || !this.bugs.inputOmitsMessageUnlessBound)) input.push(structuredClone(current.content));
      const snapshot: TurnSnapshot = { conversationId, turnIndex, message: this.shown(s, current), input, resumed, ...(this.bugs.boundNotSaid ? {} : { bound }) };
      if (this.bugs.beginCacheByFence) this.beginCache.set(`${fence}:${turnIndex}`, structuredClone(snapshot));
      return snapshot;
    });
  }

  async commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }> {
    this.checkData("assistant", commit.assistant);
    if (commit.toolResults !== undefined) this.checkData("toolResults", commit.toolResults);
    if (commit.record !== undefined) this.checkData("record", commit.record);
    const apply = (s: State): { committed: boolean } => {
      const result = this.applyCommit(conversationId, s, commit);
      const recordKept = !this.bugs.commitRecordOnlyWhenAnswers || commit.answers;
      if (commit.record !== undefined && recordKept && !this.bugs.commitRecordDropped && (result.committed || this.bugs.commitRecordAlways)) s.records.push(this.text(commit.record));
      if (result.committed && this.bugs.turnsCachePerInstance) this.turnsCache.set(conversationId, structuredClone(s));
      return result;
    };
    if (!this.bugs.racyCommit) return this.locked(conversationId, apply);
    const s = this.load(conversationId);
    await yieldNow();
    const result = apply(s);
    this.save(conversationId, s);
    return result;
  }

  private applyCommit(conversationId: string, s: State, commit: TurnCommit): { committed: boolean } {
    const replay = s.lastCommit;
    if (this.bugs.commitReplayAnsweredTrue && replay !== undefined && replay.fence === commit.fence && replay.messageId === commit.messageId && replay.turnIndex === commit.turnIndex) return { committed: true };
    const loose = this.bugs.commitChecksCountOnly;
    const fenceOk = this.bugs.staleFenceAsText ? s.lease != null && !(String(commit.fence) < String(s.lease.fence)) && !(commit.fence > s.lease.fence) : s.lease?.fence === commit.fence;
    if (!loose && !this.bugs.commitIgnoresFence && !fenceOk) return { committed: false };
    if (committedCount(s) !== commit.turnIndex && !this.bugs.commitIgnoresCount) return { committed: false };
    const message = s.messages.find((m) => this.sameMessage(m.id, commit.messageId));
    const takes = (m: StoredMessage) => m.state === "in_progress" || (this.bugs.commitForBoundIndex === true && m.state === "failed" && m.turnIndex === commit.turnIndex);
    if (!loose && (message === undefined || !takes(message))) return { committed: false };
    const firstTurnOfMessage = !s.turns.some((t) => t.messageId === commit.messageId);
    const turn: StoredTurn = { turnIndex: commit.turnIndex, messageId: commit.messageId, assistant: this.text(commit.assistant), stopReason: commit.stopReason };
    if (commit.toolResults !== undefined && !this.bugs.dropsToolResults) turn.toolResults = this.text(commit.toolResults);
    s.turns.push(turn);
    this.instanceCount.set(conversationId, committedCount(s));
    if (this.bugs.prunesOldTurns && s.turns.length > 64) {
      s.turns.shift();
      s.pruned = (s.pruned ?? 0) + 1;
    }
    if ((commit.answers || this.bugs.answersIgnored) && message !== undefined && (firstTurnOfMessage || !this.bugs.answersOnlyFirstTurn)) message.state = "answered";
    s.lastCommit = { fence: commit.fence, messageId: commit.messageId, turnIndex: commit.turnIndex };
    return { committed: true };
  }

  async failMessage(conversationId: string, fence: number, messageId: string, record: JsonValue): Promise<void> {
    this.checkData("record", record);
    return this.locked(conversationId, (s) => {
      if (this.bugs.failMessageStaleNoop && s.lease?.fence !== fence) return;
      if (!this.bugs.failIgnoresFence) held(conversationId, s, fence, this.bugs);
      const message = s.messages.find((m) => this.sameMessage(m.id, messageId));
      if (message === undefined || (message.state !== "in_progress" && !this.bugs.failAnyState)) throw new InvalidStoreInputError("messageId", `message ${messageId} is not in progress`);
      message.state = "failed";
      message.failure = this.text(record);
      (s.failedAt ??= {})[message.id] = this.bugs.failedAtProcessClock ? Date.now() : this.backing.now();
      (s.firstFailedAt ??= {})[message.id] ??= this.backing.now();
      if (this.bugs.failureRecordVolatile) this.volatileRecords.set(conversationId, [...(this.volatileRecords.get(conversationId) ?? []), this.text(record)]);
      else if (!this.bugs.failRecordDropped) s.records.push(this.text(record));
    });
  }

  /** TURN-17: read-only, over every conversation's text as it is now. */
  async listFailedTurns(query: FailedTurnsQuery = {}): Promise<FailedTurnsPage> {
    const bugs = this.bugs;
    // cursorIsOffset: "o<n>" is the position in the listing, not a key.
    const offset = bugs.cursorIsOffset && typeof query.cursor === "string" && query.cursor.startsWith("o") ? Number(query.cursor.slice(1)) : 0;
    const unchecked = bugs.limitUnchecked && typeof query.limit === "number" && query.limit > 1000;
    const checked = { ...query };
    if (offset > 0) delete checked.cursor;
    if (unchecked) delete checked.limit;
    const { limit: checkedLimit, after: position } = checkFailedTurnsQuery(checked);
    const after = bugs.cursorAtZeroRestarts && !position?.failedAt ? undefined : position;
    const limit = bugs.ignoresLimit ? 100 : unchecked ? query.limit! : checkedLimit;
    const clock = bugs.olderThanProcessClock ? Date.now() : this.backing.now();
    const cutoff = query.olderThanMs === undefined ? undefined : clock - query.olderThanMs;
    const all: FailedTurn[] = [];
    for (const [conversationId, text] of this.backing.data) {
      if (query.conversationId !== undefined && !bugs.ignoresConversationFilter && conversationId !== conversationSlot(bugs, query.conversationId)) continue;
      const s = JSON.parse(text) as State;
      for (const m of s.messages) {
        const listed = m.state === "failed" || (bugs.listsReopened && s.failedAt?.[m.id] !== undefined);
        if (!listed) continue;
        const failedAt = s.failedAt?.[m.id] ?? (bugs.unknownFailedAtIsNow ? this.backing.now() : 0);
        if (cutoff !== undefined && (failedAt > cutoff || (bugs.olderThanSkipsUnknown && s.failedAt?.[m.id] === undefined))) continue;
        const firstFailedAt = s.firstFailedAt?.[m.id] ?? failedAt;
        const turn: FailedTurn = { conversationId, messageId: m.id, failedAt, firstFailedAt, failure: structuredClone(m.failure ?? null), reopenable: bugs.listsEveryFailedReopenable || s.lastBound === m.id };
        if (m.turnIndex !== undefined) turn.turnIndex = m.turnIndex;
        // TURN-12's window, as appendUserMessage judges it (on the backing's clock).
        if (query.reopenWithinMs !== undefined) {
          const from = bugs.listWindowFromLastFailure ? failedAt : bugs.reopenWindowIgnoresBinding ? firstFailedAt : Math.min(m.boundAt ?? Infinity, firstFailedAt);
          turn.pastReopenWindow = !bugs.listReopenableIgnoresWindow && turn.reopenable === true && this.backing.now() - from >= query.reopenWithinMs;
          turn.reopenable = turn.reopenable === true && !turn.pastReopenWindow;
        }
        const at = { ...turn, messageId: turn.messageId + (bugs.cursorInclusive ? "\u0000" : "") };
        const afterCursor = bugs.cursorSkipsTies && after !== undefined ? failedAt > after.failedAt : after === undefined || (bugs.tiesByCodeUnit || bugs.cursorByCodeUnit ? isAfterByCodeUnit : isAfterPosition)(at, after);
        if (afterCursor) all.push(turn);
      }
    }
    const byId = (a: FailedTurn, b: FailedTurn) => (a.conversationId !== b.conversationId ? (a.conversationId < b.conversationId ? -1 : 1) : a.messageId < b.messageId ? -1 : a.messageId > b.messageId ? 1 : 0);
    const afterOf = bugs.tiesByCodeUnit ? isAfterByCodeUnit : isAfterPosition;
    all.sort(bugs.listOrderById ? byId : (a, b) => (afterOf(a, b) ? 1 : afterOf(b, a) ? -1 : 0));
    const rest = all.slice(offset);
    const turns = rest.slice(0, limit);
    const last = turns.at(-1);
    if (bugs.listingRecordsItself) {
      for (const t of turns) {
        const s = JSON.parse(this.backing.data.get(t.conversationId)!) as State;
        s.records.push({ listed: t.messageId });
        this.backing.data.set(t.conversationId, JSON.stringify(s));
      }
    }
    if ((this.bugs.cursorOnExactPage ? rest.length < limit : rest.length <= limit) || last === undefined) return { turns };
    return { turns, cursor: bugs.cursorIsOffset ? `o${offset + limit}` : encodeFailedTurnsCursor(last) };
  }

  async listStalledMessages(query: StalledMessagesQuery = {}): Promise<StalledMessagesPage> {
    const bugs = this.bugs;
    const { limit, after } = checkStalledMessagesQuery(query);
    const now = this.backing.now();
    const cutoff = now - (query.olderThanMs ?? 0);
    const all: StalledMessage[] = [];
    for (const [conversationId, text] of this.backing.data) {
      if (query.conversationId !== undefined && conversationId !== conversationSlot(bugs, query.conversationId)) continue;
      const s = JSON.parse(text) as State;
      const m = s.messages.find((x) => x.state === "in_progress");
      if (m === undefined || m.turnIndex === undefined) continue;
      const lease = s.lease;
      if (!bugs.stalledIgnoresLiveLease && lease !== null && lease.expiresAt > now) continue;
      const stalledSince = lease !== null && !bugs.stalledIgnoresLiveLease ? lease.expiresAt : (m.boundAt ?? 0);
      if (stalledSince > cutoff) continue;
      const stalled: StalledMessage = { conversationId, messageId: m.id, turnIndex: m.turnIndex, stalledSince };
      if (lease !== null) stalled.leaseOwner = lease.owner;
      if (m.boundAt !== undefined) stalled.boundAt = m.boundAt;
      const at = { failedAt: stalledSince, conversationId, messageId: m.id + (bugs.stalledCursorInclusive ? "\u0000" : "") };
      if (after === undefined || isAfterPosition(at, after)) all.push(stalled);
    }
    const pos = (x: StalledMessage) => ({ failedAt: x.stalledSince, conversationId: x.conversationId, messageId: x.messageId });
    all.sort((a, b) => (isAfterPosition(pos(a), pos(b)) ? 1 : isAfterPosition(pos(b), pos(a)) ? -1 : 0));
    const messages = all.slice(0, limit);
    const last = messages.at(-1);
    return all.length > limit && last !== undefined ? { messages, cursor: encodeFailedTurnsCursor(pos(last)) } : { messages };
  }

  async addRecord(conversationId: string, record: JsonValue): Promise<void> {
    this.checkData("record", record);
    return this.locked(conversationId, (s) => {
      if (this.bugs.recordsAsSet && s.records.some((r) => JSON.stringify(r) === JSON.stringify(record))) return;
      s.records.push(this.text(record));
    });
  }

  async records(conversationId: string): Promise<JsonValue[]> {
    return this.locked(conversationId, (s) => {
      let out = structuredClone(s.records);
      if (this.bugs.failureRecordVolatile) out.push(...structuredClone(this.volatileRecords.get(conversationId) ?? []));
      if (this.bugs.recordsByPrefix) {
        for (const [slot, text] of this.backing.data) {
          if (slot !== conversationSlot(this.bugs, conversationId) && slot.startsWith(conversationId)) out.push(...(JSON.parse(text) as State).records);
        }
      }
      if (this.bugs.recordsNewestFirst) out = out.reverse();
      if (this.bugs.recordsFirstPageOnly) out = out.slice(0, 100);
      return out;
    });
  }

  async close(): Promise<void> {}

  /** The log, derived from the turns (a message's content before its first turn). */
  private logOf(s: State): JsonValue[] {
    const out: JsonValue[] = [];
    const started = new Set<string>();
    for (const t of this.turnsRead(s)) {
      if (!started.has(t.messageId)) {
        started.add(t.messageId);
        const content = s.messages.find((m) => this.sameMessage(m.id, t.messageId))?.content;
        const seen = this.bugs.logDedupsContent && content !== undefined && out.some((e) => JSON.stringify(e) === JSON.stringify(content));
        if (content !== undefined && !seen) out.push(structuredClone(content));
      }
      out.push(structuredClone(t.assistant));
      if (t.toolResults !== undefined) out.push(structuredClone(t.toolResults));
    }
    if (this.bugs.recordsInLog) out.push(...structuredClone(s.records));
    return out;
  }

  /** TURN-18, as every store checks it (core's toolkit), before anything is stored. */
  private checkData(field: string, value: unknown): void {
    if (!this.bugs.dataUnchecked) checkStoreJson(field, value);
  }

  private text(value: JsonValue): JsonValue {
    const json = JSON.stringify(value);
    if (this.bugs.isoDatesRevived) {
      const iso = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
      return JSON.parse(json, (_k, v: unknown) => (typeof v === "string" && iso.test(v) ? new Date(v).toISOString() : v)) as JsonValue;
    }
    if (this.bugs.protoKeyLost) return handRolledCopy(JSON.parse(json) as JsonValue);
    return JSON.parse(this.bugs.latin1Content ? json.replace(/[^\x00-\x7f]/g, "?") : json) as JsonValue;
  }

  private load(conversationId: string): State {
    if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
      throw new InvalidStoreInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
    }
    const text = this.backing.data.get(conversationSlot(this.bugs, conversationId));
    return text === undefined
      ? { messages: [], turns: [], lastBound: null, boundFence: 0, lease: null, fence: 0, records: [] }
      : (JSON.parse(text) as State);
  }

  private save(conversationId: string, s: State): void {
    this.backing.data.set(conversationSlot(this.bugs, conversationId), JSON.stringify(s));
  }

  /** Runs `fn` on the conversation's state under its lock, yielding between read and write. */
  private async locked<T>(conversationId: string, fn: (s: State) => T): Promise<T> {
    const slot = conversationSlot(this.bugs, conversationId);
    const previous = this.backing.locks.get(slot) ?? Promise.resolve();
    let release: () => void = () => {};
    const mine = new Promise<void>((resolve) => (release = resolve));
    const chain = previous.then(() => mine);
    this.backing.locks.set(slot, chain);
    await previous;
    try {
      const s = this.load(conversationId);
      if (this.bugs.restartRequeuesInFlight && this.reopened && !this.recovered.has(conversationId)) {
        // "Recovery" of a process that starts: whatever was in progress belonged to a dead one.
        this.recovered.add(conversationId);
        for (const m of s.messages) if (m.state === "in_progress") m.state = "queued";
      }
      await yieldNow();
      const result = fn(s);
      this.save(conversationId, s);
      return result;
    } finally {
      release();
      if (this.backing.locks.get(slot) === chain) this.backing.locks.delete(slot);
    }
  }
}

/** A deep copy by member assignment, as hand-rolled copies do: `out["__proto__"] = v` sets the prototype (the protoKeyLost bug). */
function handRolledCopy(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(handRolledCopy);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, JsonValue> = {};
  for (const [k, v] of Object.entries(value)) out[k] = handRolledCopy(v);
  return out;
}

/** The listing order with ids compared by JavaScript's `<` (UTF-16 code units): the tiesByCodeUnit bug. */
function isAfterByCodeUnit(turn: FailedTurn, after: Pick<FailedTurn, "failedAt" | "conversationId" | "messageId">): boolean {
  if (turn.failedAt !== after.failedAt) return turn.failedAt > after.failedAt;
  if (turn.conversationId !== after.conversationId) return turn.conversationId > after.conversationId;
  return turn.messageId > after.messageId;
}

/** Turns committed so far: the next turn index (TURN-1). */
function committedCount(s: State): number {
  return s.turns.length + (s.pruned ?? 0);
}

function held(conversationId: string, s: State, fence: number, bugs: ConversationBugs = {}): { fence: number; owner: string; expiresAt: number } {
  // Planted staleFenceAsText: "older" judged on the fences' text, "never issued" on their numbers.
  const ok = s.lease !== null && (bugs.staleFenceAsText ? !(String(fence) < String(s.lease.fence)) && !(fence > s.lease.fence) : s.lease.fence === fence);
  if (!ok) throw bugs.leaseLostAsGenericError ? new Error(`lease lost: ${conversationId}`) : new ConversationLeaseLostError(conversationId, fence);
  return s.lease!;
}

/**
 * The KV store as a subject declaring every capability except corruption and unavailability:
 * restart, sharing and the model's restart steps all run against it.
 */
export function kvConversationSubject(name: string, bugs: ConversationBugs = {}): ConversationStoreSubject {
  return {
    name,
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: false, unavailability: true, listFailedTurns: true, listStalledMessages: true, recordsWithCommit: true, legacyFailedRows: true, leaseGrants: true, reopenWindow: true, boundAt: true },
    async create(): Promise<ConversationStoreFixture> {
      const backing = kvBacking();
      // forgetsOnRestart: every instance gets a private map, but the hooks read the first one.
      const open = () =>
        new KvConversationStore(bugs.forgetsOnRestart ? { ...backing, data: new Map(), locks: new Map() } : bugs.locksPerInstance ? { ...backing, locks: new Map() } : backing, bugs);
      const store = open();
      const dataOf = (conversationId: string): State | undefined => {
        const source = bugs.forgetsOnRestart ? (store as unknown as { backing: KvBacking }).backing.data : backing.data;
        const text = source.get(conversationSlot(bugs, conversationId));
        return text === undefined ? undefined : (JSON.parse(text) as State);
      };
      return {
        store,
        reopen: async () => {
          const again = open();
          again.reopened = true;
          return again;
        },
        raw: {
          async lease(conversationId) {
            const s = dataOf(conversationId);
            if (s === undefined) return undefined;
            return s.lease === null ? { fence: s.fence } : { fence: s.fence, owner: s.lease.owner, expiresAt: s.lease.expiresAt };
          },
          async messages(conversationId) {
            return (dataOf(conversationId)?.messages ?? []) as never;
          },
          async turns(conversationId) {
            return dataOf(conversationId)?.turns ?? [];
          },
          async records(conversationId) {
            return dataOf(conversationId)?.records ?? [];
          },
          async expireLease(conversationId) {
            const source = bugs.forgetsOnRestart ? (store as unknown as { backing: KvBacking }).backing.data : backing.data;
            const s = dataOf(conversationId);
            if (s?.lease == null) return;
            s.lease.expiresAt = backing.now() - 1;
            source.set(conversationSlot(bugs, conversationId), JSON.stringify(s));
          },
          async disconnected() {
            return unreachableStore(bugs);
          },
          async forgetFailedAt(conversationId, messageId) {
            const s = dataOf(conversationId);
            if (s?.failedAt === undefined) return;
            delete s.failedAt[messageId];
            backing.data.set(conversationSlot(bugs, conversationId), JSON.stringify(s));
          },
        },
        async destroy() {},
      };
    },
  };
}

/** Where TURN-12's window of a failed message counts from: the earlier of its binding and its first failure (else its last, else 0). */
function windowStartOf(s: State, m: StoredMessage): number {
  return Math.min(m.boundAt ?? Infinity, s.firstFailedAt?.[m.id] ?? s.failedAt?.[m.id] ?? 0);
}

/**
 * A store whose storage cannot be reached: every method raises store_unavailable (TURN-14), but
 * for the unavailableListsNothing bug, whose listing answers an empty page and whose give-back
 * does nothing (an error swallowed as "nothing there").
 */
function unreachableStore(bugs: ConversationBugs): ConversationStore {
  const down = async (): Promise<never> => {
    throw new StoreUnavailableError("kv backing unreachable", { cause: new Error("ECONNREFUSED") });
  };
  const inner = new KvConversationStore(kvBacking(), bugs);
  return {
    capabilities: inner.capabilities,
    appendUserMessage: down,
    message: down,
    turnsOf: down,
    log: down,
    acquireLease: down,
    renewLease: down,
    releaseLease: down,
    releaseLeaseGrant: bugs.unavailableListsNothing ? async () => {} : down,
    beginTurn: down,
    commitTurn: down,
    failMessage: down,
    addRecord: down,
    records: down,
    listFailedTurns: bugs.unavailableListsNothing ? async () => ({ turns: [] }) : down,
    listStalledMessages: down,
    close: async () => {},
  };
}
