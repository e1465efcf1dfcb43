import type { JsonValue } from "./canonical.js";
import { newClaimId } from "./ledger.js";

/**
 * The conversation-store contract (spec §4.1 and §4.2, TURN-1 … TURN-15). Provider-agnostic: messages
 * are stored as JSON values exactly as the stream side hands them over.
 *
 * The model-visible history (the *log*) changes ONLY through `commitTurn`, which is a
 * compare-and-append on the whole log (its version is the number of committed turns) and on
 * the conversation's turn lease. User messages wait in a per-conversation queue until a turn
 * answers them; the queue is answered strictly in arrival order, one message at a time, so two
 * different messages can never share a turn index, and the message a turn answers is a fact
 * the store fixes (binds) before the turn's first attempt starts.
 */

/** Where a user message is in its life (TURN-9). */
export type MessageState =
  /** Waiting behind earlier messages, or for a worker. */
  | "queued"
  /** Bound to a turn index; its turns are being produced. */
  | "in_progress"
  /** A turn that ended the model's answer (not a tool-use stop) was committed for it. */
  | "answered"
  /** Its turn failed and was recorded; see `failure`. */
  | "failed";

export interface StoredMessage {
  id: string;
  content: JsonValue;
  /** Arrival order within the conversation, from 1. */
  seq: number;
  state: MessageState;
  /** The turn index of its first turn, fixed when it was first bound (TURN-11); absent until then (a reopened message keeps it). */
  turnIndex?: number;
  /** The failed-turn record of its last failure, while `state` is "failed". */
  failure?: JsonValue;
  /**
   * When TURN-12's re-send window counts from, in store-clock milliseconds, while a message that
   * failed before is reopened ("queued" or "in_progress"): its first failure, kept across reopens;
   * else its last failure's time; 0 when no time is known (past every window). Given by a store
   * that declares `supports.reopenWindow`, and absent for a message that never failed, in any
   * other state, or from a store without the flag. A runner that resumes a reopened message's
   * retry (its holder died, TURN-15) checks the window with it before running any attempt: the
   * window was checked at the reopen, and the rows of the first attempts keep aging.
   */
  firstFailedAt?: number;
  /**
   * When the message was FIRST bound to its turn index (TURN-11), in store-clock milliseconds,
   * written in the same step as the binding and kept across take-overs, reopens and restarts;
   * absent until it is first bound. A message bound at the index of a failed message (TURN-12:
   * nothing was committed since, so its keys are that message's keys and its calls meet that
   * message's rows) carries that message's window start instead when it is earlier: the earlier
   * of its `boundAt` and its first failure. Given by a store that declares `supports.boundAt`,
   * and absent from one without it and for a row bound before the store kept it. A runner that
   * resumes the turn of a message that never failed (its holder died before the commit, TURN-15)
   * checks the re-send window from it before any attempt (TURN-12): nothing else dates such a
   * message, and the ledger may have swept the rows of the dead holder's calls. A failed
   * message's re-send window counts from it too where it is earlier than the first failure, as
   * it always is.
   */
  boundAt?: number;
}

export interface AppendResult {
  /** False when the id was already present: a re-send, a redelivery, a double click (TURN-2). */
  appended: boolean;
  /** The message as stored after this call (a re-send of a failed message may have reopened it). */
  message: StoredMessage;
  /** True when this call moved a failed message back to "queued" (TURN-12). */
  reopened: boolean;
  /**
   * True when the message is failed and this call would have reopened it (no other message was
   * bound since) but did not because its first failure (or its first binding, where the store
   * dates it and it is earlier) is at least `reopenWithinMs` old on the store's clock (TURN-12,
   * `supports.reopenWindow`). Absent otherwise, and from a store that does
   * not declare the flag.
   */
  pastReopenWindow?: boolean;
}

/** Options of `appendUserMessage`. */
export interface AppendOptions {
  /**
   * Only to a store that declares `supports.reopenWindow` (TURN-12): a re-send of a failed message
   * reopens it only while its first failure (kept across reopens) is less than this many
   * milliseconds old on the store's clock, and its first binding too where the store dates it
   * (`supports.boundAt`), decided in the same atomic step as the reopen; at or
   * past it the message stays failed and the result says `pastReopenWindow`. A runner passes its
   * re-send window, set below the ledger's retention (LEDGER-13).
   * @default none (no time bound: the store reopens as TURN-12 says without it)
   * @example await store.appendUserMessage("conv-1", { id: "m1", content }, { reopenWithinMs: 23 * 60 * 60 * 1000 })
   */
  reopenWithinMs?: number;
}

/**
 * The key one call of a committed turn was dispatched under (TURN-24): dispatcher metadata kept
 * beside the turn, never in the log the model sees. A key is derived from the tool's definition
 * (IDENT-1), so after a deploy that changed the tool's identity (IDENT-10) the same call derives
 * another key: only the stored one names the row the call ran under, which the runner reports on
 * read-back and never lets a later call of the message be answered from (TURN-23's slots).
 */
export interface CommittedCallKey {
  /** The provider's id of the call (`toolu_…`, `call_…`), as the turn's assistant message gives it. */
  callId: string;
  /** The key the call was claimed (or found) under: its `Idempotency-Key` downstream. */
  key: string;
  /** Its ordinal among the identical calls it was counted with (TURN-4); absent for a call answered with an error. */
  ordinal?: number;
  /** Set when it was answered from a call an earlier turn of the message left unanswered (TURN-23): that turn's index. */
  carriedFromTurn?: number;
}

/** One committed turn as stored. */
export interface StoredTurn {
  turnIndex: number;
  messageId: string;
  assistant: JsonValue;
  /** The message carrying the tool results, when the turn stopped for tool use. */
  toolResults?: JsonValue;
  stopReason: string | null;
  /**
   * The keys the turn's calls were dispatched under, exactly as committed (TURN-24), in the
   * turn's call order: one per call that had a key. Given by a store that declares
   * `supports.callKeys` for a turn committed with them; absent for a turn committed without them
   * (by an earlier release, or by a runner that did not pass them) and from a store without the flag.
   */
  callKeys?: CommittedCallKey[];
}

export type LeaseResult =
  | { acquired: true; fence: number; leaseExpiresAt: number }
  | { acquired: false; owner: string; leaseExpiresAt: number };

/** What the next turn of a conversation is, read under the turn lease by `beginTurn`. */
export interface TurnSnapshot {
  conversationId: string;
  /** The next turn's index: the number of committed turns (TURN-1). Also the log's version. */
  turnIndex: number;
  /** The message this turn answers; bound to the conversation from now on (TURN-11). */
  message: StoredMessage;
  /**
   * Exactly what the next request sends: the committed log, then the message's own content
   * when none of its turns is committed yet.
   */
  input: JsonValue[];
  /**
   * True when a turn at this `turnIndex` was begun before under an earlier turn-lease grant (a
   * lower fence), for any message: the same message taken over after its holder's lease
   * expired, a failed message reopened (TURN-12), or the next message bound at the index where
   * a failed one stopped. That holder's runs may still be alive (a paused process never learns
   * it lost the lease, and no check can close that window) and dispatch calls whose keys share
   * this turn index; they may claim a key after this holder released it. So a runner of a
   * resumed turn says `may_have_happened` for every call it cannot show settled, never
   * `not_happened` (TURN-15). False when this index was first begun under `fence`: every earlier
   * attempt at it was this holder's own, and over. It is a fact about the index, kept by the
   * store, so it is the same after a restart.
   */
  resumed: boolean;
  /**
   * True when this call bound the message (TURN-11): it was queued, new or reopened, and is in
   * progress from this call on; false when it was already in progress (a later turn of its
   * tool-use loop, or a take-over after its holder died or lost the lease). Given by a store that
   * declares `supports.boundAt`. A runner skips TURN-12's check of a message that never failed
   * on its binding's own call: nothing of it has run, and its `boundAt` may be inherited from a
   * failed message at the same index (so past the window while the message is new).
   */
  bound?: boolean;
}

export interface TurnCommit {
  /** The turn lease under which the turn was produced. */
  fence: number;
  messageId: string;
  turnIndex: number;
  assistant: JsonValue;
  toolResults?: JsonValue;
  stopReason: string | null;
  /** True when this turn ends the answer (the model did not stop for tool use). */
  answers: boolean;
  /**
   * A record to keep beside the conversation (RECORD-4) in the same atomic write as the turn,
   * kept exactly when the turn is appended: the committed turn's record (RECORD-8), which no
   * crash between the commit and a later `addRecord` can then lose. A runner gives it only to a
   * store whose capabilities declare `recordsWithCommit`.
   */
  record?: JsonValue;
  /**
   * The keys the turn's calls were dispatched under (TURN-24), kept with the turn in the same
   * write, exactly when it is appended, and given back by `turnsOf` as `StoredTurn.callKeys`.
   * Never part of the log. Only to a store that declares `supports.callKeys`; such a store refuses
   * a malformed value with `invalid_store_input` naming `callKeys`, storing nothing.
   */
  callKeys?: CommittedCallKey[];
}

export interface ConversationStoreCapabilities {
  /**
   * durable: every acknowledged write survives a crash or restart of the store and its host.
   * volatile: it can forget (an in-process map). A volatile store beside a durable ledger is
   * refused by the runner unless explicitly allowed (TURN-14).
   */
  durability: "durable" | "volatile";
  /** Whose clock turn leases are measured on. */
  clock: "store" | "process";
  sharedAcrossProcesses: boolean;
  /**
   * True when `commitTurn` keeps `commit.record` in the same atomic write as the turn, exactly
   * when it appends the turn (TURN-5). A runner gives a store without it the committed turn's
   * record with `addRecord` after the commit, where a process that dies between the two loses it
   * (RECORD-8).
   */
  recordsWithCommit?: boolean;
  /**
   * Which OPTIONAL parts of the contract the store implements (a flag per feature, as a ledger's
   * `supports`). A missing flag, or a missing `supports`, means the part is absent: callers
   * check the flag, never pass what the store does not declare.
   */
  supports?: ConversationStoreSupports;
}

/** Feature flags of a conversation store's OPTIONAL parts. */
export interface ConversationStoreSupports {
  /**
   * Lease grant ids (TURN-10): `acquireLease` takes a `grantId` and recognises an acquire sent
   * again with the grant id of the live grant as that same grant, refuses a late copy of an
   * earlier grant's acquire (kept LEASE_GRANT_RETENTION_MS after a later grant was made), and
   * `releaseLeaseGrant` gives a grant back by its grant id. A runner without it acquires as before: a grant whose
   * reply was lost then holds the conversation until its lease expires.
   */
  leaseGrants?: boolean;
  /**
   * The re-send window (TURN-12): `appendUserMessage` takes `{ reopenWithinMs }` and refuses, in
   * the same atomic step, to reopen a failed message whose first failure (or first binding, where
   * the store also declares `boundAt` and it is earlier) is at least that old on the store's clock,
   * answering `pastReopenWindow`. A runner without it checks the age itself
   * before the append (`listFailedTurns({ olderThanMs })`), a step apart from the reopen. A store
   * that declares it and offers `listFailedTurns` lists each turn's `firstFailedAt` and takes
   * `reopenWithinMs` there too (TURN-17), so that a listing tells what a re-send would do.
   */
  reopenWindow?: boolean;
  /**
   * The binding's time (TURN-11, TURN-12): every bound message shows `boundAt`, the store-clock
   * time it was first bound, written in the same step as the binding and kept across take-overs,
   * reopens and restarts, so that a runner can refuse to resume, past its re-send window, the
   * turn of a message that never failed, and so that the re-send window of a failed message counts
   * from the binding where that is earlier than its first failure (its calls' rows age from before
   * the failure). A message bound at a failed message's index inherits that message's window
   * start when earlier (its calls meet that message's rows), and `beginTurn` says which call bound
   * a message (`TurnSnapshot.bound`), so that a message's first run is never refused for an
   * inherited date. A runner without it cannot date such a message and resumes it whenever it is
   * driven again.
   */
  boundAt?: boolean;
  /**
   * Committed calls' keys (TURN-24): `commitTurn` takes `commit.callKeys` and keeps it with the
   * turn, exactly as given, in the commit's own write; `turnsOf` gives it back as
   * `StoredTurn.callKeys` (absent for a turn committed without it). A runner without it derives a
   * committed call's key again on read-back, which after a deploy that changed the tool's
   * identity is not the key the call ran under.
   */
  callKeys?: boolean;
}

/** What a lease grant id looks like (TURN-10): LEDGER-26's claim id form, URL-safe and unguessable. */
export const LEASE_GRANT_ID_PATTERN = /^[A-Za-z0-9_-]{16,64}$/;

/**
 * How long a store that declares `supports.leaseGrants` keeps an earlier grant's id once a later
 * grant of the conversation was made (TURN-10), on its own clock: one hour. A copy of an acquire
 * is sent within the runner's re-send bound (at most 10 s, never longer than the lease) and is
 * then delayed only by the network or a server that runs it after its client left (TCP gives up
 * after about 15 minutes by default; a statement waits for a lock held by short transactions);
 * an hour covers both with room. A copy later than that takes the lease as any acquire would.
 */
export const LEASE_GRANT_RETENTION_MS = 60 * 60 * 1000;

/** A fresh lease grant id: 128 random bits, base64url (TURN-10). One per acquisition, never reused. */
export function newLeaseGrantId(): string {
  return newClaimId();
}

/** Default page size of `listFailedTurns` (TURN-17). */
export const DEFAULT_FAILED_TURNS_LIMIT = 100;
/** Largest page `listFailedTurns` accepts; larger is refused with InvalidStoreInputError. */
export const MAX_FAILED_TURNS_LIMIT = 1000;

/** A filter over failed turns (every given field narrows the result). */
export interface FailedTurnsQuery {
  /** Only this conversation's failed turns. */
  conversationId?: string;
  /** Only turns that failed at least this many milliseconds ago (the store's clock). */
  olderThanMs?: number;
  /**
   * The re-send window to judge `reopenable` by (TURN-12, TURN-17): the `reopenWithinMs` a runner
   * passes `appendUserMessage` (its `resendWindowMs`). Only to a store that declares
   * `supports.reopenWindow`. With it, each listed turn says `reopenable` exactly when a re-send
   * with `{ reopenWithinMs }` would reopen it now (its conversation's last bound message AND its
   * first failure, or its first binding where the store dates it and it is earlier, less than
   * this old on the store's clock), and `pastReopenWindow` when such a
   * re-send would instead answer `pastReopenWindow`. Without it, `reopenable` has no time bound
   * (a re-send without the option). Not a finite number, 0 or more: `invalid_store_input`.
   * @default undefined (no window: reopenable says only whether no other message was bound since)
   * @example await store.listFailedTurns({ reopenWithinMs: 23 * 60 * 60 * 1000 })
   */
  reopenWithinMs?: number;
  /**
   * Page size.
   * @default 100
   * Larger than 1000 is refused with InvalidStoreInputError.
   */
  limit?: number;
  /** The `cursor` of the previous page, opaque; absent for the first page. */
  cursor?: string;
}

/** A message whose turn failed and was recorded (state "failed"), as an operator lists it. */
export interface FailedTurn {
  conversationId: string;
  messageId: string;
  /** The turn index the message was bound to (a re-send retries it there while `reopenable`, TURN-12). */
  turnIndex?: number;
  /**
   * When the failure was recorded, in store-clock milliseconds; 0 for a failure recorded by a
   * version of the store that did not keep the time (listed first, as the oldest). A failure
   * written by a process that does not write the time (an earlier version still running during
   * an upgrade) carries the store's own time of it, or 0 if it came before the store could see it.
   */
  failedAt: number;
  /**
   * When TURN-12's re-send window counts from, in store-clock milliseconds: the message's FIRST
   * failure, kept across reopens (a retry that fails again moves `failedAt`, not this); the last
   * failure's time for a failure whose first the store did not keep (a row from before it kept
   * one); 0 when no time is known (past every window). Absent from a store that does not keep it
   * (one without `supports.reopenWindow`): its window then counts from `failedAt`.
   */
  firstFailedAt?: number;
  /**
   * The failed-turn record (RECORD-1), as `failMessage` stored it: written at the failure and never
   * updated, so its `retryable` says whether a re-send could help *then* (RECORD-5). Whether one
   * can help now is `reopenable`.
   */
  failure: JsonValue;
  /**
   * Whether a re-send of this message id now would reopen it (TURN-12): true exactly when it is
   * its conversation's most recently bound message, so its retry would run at `turnIndex` with
   * the same keys. False once another message has been bound since (typically a new message,
   * bound at this failed turn's index): a re-send then only returns the stored failure and runs
   * nothing, whatever the record's `retryable` says. Read in the same query as the listing.
   *
   * Optional so that a store written before it still satisfies the contract; absent means the
   * store does not say (not "false"). Every store in this repository sets it (TURN-17).
   */
  reopenable?: boolean;
  /**
   * Present exactly when the query gave `reopenWithinMs`: true when a re-send with that window
   * would answer `pastReopenWindow` (the message is its conversation's last bound, but its first
   * failure is at least that old on the store's clock: the ledger may have swept its calls' rows),
   * false otherwise. Read in the same query as `reopenable`, which is then false.
   */
  pastReopenWindow?: boolean;
}

export interface FailedTurnsPage {
  /** Oldest failure first, ties broken by conversation id, then message id. */
  turns: FailedTurn[];
  /** Present when more turns may follow: pass it back as `cursor` for the next page. */
  cursor?: string;
}

/** A filter over stalled messages (every given field narrows the result). */
export interface StalledMessagesQuery {
  /** Only this conversation's stalled message. */
  conversationId?: string;
  /**
   * Only messages stalled at least this many milliseconds (the store's clock): `stalledSince` at
   * or before now minus this. 0 lists every message no live lease holds.
   */
  olderThanMs?: number;
  /**
   * Page size.
   * @default 100
   * Larger than 1000 is refused with InvalidStoreInputError.
   */
  limit?: number;
  /** The `cursor` of the previous page, opaque; absent for the first page. */
  cursor?: string;
}

/**
 * A message in progress (bound to its turn index, neither committed nor failed) that no live turn
 * lease holds (TURN-22): its holder died or gave up, and nothing answers it until the same
 * message id is re-sent or its conversation is driven again (TURN-15 resumes it there).
 */
export interface StalledMessage {
  conversationId: string;
  messageId: string;
  /** The turn index it is bound to: its calls' keys carry it, and so will its resumed turn's. */
  turnIndex: number;
  /**
   * Since when no holder works on it, in store-clock milliseconds: the expiry of the lease its
   * holder let lapse; when the lease was released (the store keeps no release time), its binding
   * (`boundAt`), the latest time the store can name; 0 when the store dates neither.
   */
  stalledSince: number;
  /** The owner of the lapsed lease (TURN-10's `owner`); absent when the lease was released. */
  leaseOwner?: string;
  /** When it was first bound (store clock), where the store dates bindings (`supports.boundAt`). */
  boundAt?: number;
}

export interface StalledMessagesPage {
  /** Longest stalled first (`stalledSince`), ties by conversation id, then message id. */
  messages: StalledMessage[];
  /** Present when more messages may follow: pass it back as `cursor` for the next page. */
  cursor?: string;
}

/**
 * Where conversations live. Every method is atomic per conversation: a method that writes reads
 * what it decides on under the same lock as its write (an append read in one statement and
 * written in another races with a concurrent send of the same or the next message). Stores that
 * cannot reach or trust their storage raise `store_unavailable` / `store_corrupt`, never "absent".
 *
 * Ids: a conversation id matches CONVERSATION_ID_PATTERN (KEY-2); a message id is a non-empty,
 * well-formed string of at most 256 UTF-16 code units. Anything else is refused with
 * `invalid_store_input` naming `conversationId` or `messageId` before storage is touched, and ids
 * are compared exactly (TURN-19: no case folding, no PAD SPACE collation, no truncation).
 *
 * A fence holds the lease while it is the conversation's latest grant and was not released:
 * expiry alone only lets another holder take it, so an expired lease nobody took still holds for
 * renewLease, beginTurn, commitTurn and failMessage.
 */
export interface ConversationStore {
  readonly capabilities: ConversationStoreCapabilities;

  /**
   * Queue a user message, idempotent on its id (TURN-2). A re-send of a `failed` message
   * reopens it (back to "queued") only while it is the conversation's most recently bound
   * message (no other message was bound since), so its retry runs at the failed turn's index
   * with the same keys (TURN-12); otherwise it stays failed. `options.reopenWithinMs` only to a
   * store that declares `supports.reopenWindow`: see AppendOptions.
   */
  appendUserMessage(conversationId: string, message: { id: string; content: JsonValue }, options?: AppendOptions): Promise<AppendResult>;

  /** One message as stored, or undefined. */
  message(conversationId: string, messageId: string): Promise<StoredMessage | undefined>;

  /** The committed turns that answered a message, in order (TURN-7). */
  turnsOf(conversationId: string, messageId: string): Promise<StoredTurn[]>;

  /** The committed log: what a request made now would send before any pending message. */
  log(conversationId: string): Promise<JsonValue[]>;

  /**
   * Take the conversation's turn lease (TURN-10). Succeeds when nobody holds it or the
   * holder's lease expired (store clock); every success returns a fence higher than any fence
   * issued before for this conversation (the reference stores add one).
   *
   * `grantId` (only to a store that declares `supports.leaseGrants`; matching
   * LEASE_GRANT_ID_PATTERN, see newLeaseGrantId): fresh per acquisition, and sent again, the
   * same, when an acquire's reply was lost. The store keeps it with the grant. An acquire that
   * carries the grant id of the live grant (same fence, not released, not expired) is that same
   * grant: `acquired` with its fence, the lease restarted at now + `leaseMs`. One that carries the
   * grant id of the conversation's latest grant once that grant is over (released, or expired)
   * is refused with `conversation_lease_lost` naming its fence, changing nothing; so is one that
   * carries the grant id of an earlier grant of the conversation (a later grant was made since,
   * less than LEASE_GRANT_RETENTION_MS ago on the store's clock), naming that grant's fence, and
   * one that carries a grant id given back before any grant carried it (see releaseLeaseGrant),
   * naming fence 0. Any other grant id meets the lease as any acquire does.
   */
  acquireLease(conversationId: string, owner: string, leaseMs: number, grantId?: string): Promise<LeaseResult>;

  /** Extend a held lease; `conversation_lease_lost` if `fence` no longer holds it. */
  renewLease(conversationId: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }>;

  /** Give the lease back; a stale fence is ignored (nothing to give back). */
  releaseLease(conversationId: string, fence: number): Promise<void>;

  /**
   * OPTIONAL (TURN-10, `supports.leaseGrants`): give back the grant `grantId` made, live or
   * expired, when it still holds the lease (nobody took it since, nobody released it), as
   * `releaseLease` with its fence would; otherwise change nothing. For a runner that never
   * learnt the fence: its acquire's reply was lost. Afterwards the grant is over: a late copy of
   * that acquire is refused (the store keeps the grant id of the conversation's latest grant). A
   * grant id that no grant carries (its acquire has not applied) is kept as given back, for
   * LEASE_GRANT_RETENTION_MS as an earlier grant's id, so that a copy of that acquire landing
   * later is refused (`conversation_lease_lost`, fence 0) instead of taking a free lease for nobody.
   */
  releaseLeaseGrant?(conversationId: string, grantId: string): Promise<void>;

  /**
   * Under the lease: the next turn to produce, or undefined when no message waits. Picks the
   * `in_progress` message if there is one, else the oldest `queued` one, and binds it
   * (state "in_progress", `turnIndex` = committed turn count) if it was queued. Keeps the fence
   * under which each turn index was first begun, durably with the binding, to answer `resumed`
   * (TURN-15).
   * `conversation_lease_lost` if `fence` does not hold the lease.
   */
  beginTurn(conversationId: string, fence: number): Promise<TurnSnapshot | undefined>;

  /**
   * Compare-and-append (TURN-5): appends the turn iff `fence` holds the lease, exactly
   * `commit.turnIndex` turns are committed, and `commit.messageId` is the in-progress message.
   * The first commit of a message also appends its content to the log, in the same write.
   * With `answers`, the message becomes "answered". With `record` (a store that declares
   * `recordsWithCommit`), the record is kept beside the conversation in the same write, only if
   * the turn is appended. Returns whether it appended.
   */
  commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }>;

  /**
   * Under the lease: the in-progress message `messageId` failed; store the failed-turn record
   * beside the conversation (never in the log, RECORD-4) and set the message to "failed".
   * `conversation_lease_lost` if `fence` does not hold the lease; `invalid_store_input` naming
   * `messageId` if the message is not the one in progress (queued, failed, answered or unknown),
   * with nothing stored.
   */
  failMessage(conversationId: string, fence: number, messageId: string, record: JsonValue): Promise<void>;

  /**
   * Keep a record beside the conversation without changing any message: a superseded
   * attempt's effects (TURN-13). Needs no lease: the writer may be the one that lost it.
   */
  addRecord(conversationId: string, record: JsonValue): Promise<void>;

  /** Every record kept beside the conversation (failed turns and superseded attempts), oldest first. */
  records(conversationId: string): Promise<JsonValue[]>;

  /**
   * OPTIONAL (TURN-17): the messages whose turn failed and that no re-send has reopened,
   * across conversations (or in one), oldest failure first, ties by conversation id and then
   * message id in code point order (UTF-8 byte order: `compareStoreIds`), a page at a time. Read-only. Served
   * from an index over failed messages, never a scan of every message. A reopened message leaves
   * the list; failing again puts it back with the new time. Each turn SHOULD carry `reopenable`
   * (whether a re-send would reopen it now, TURN-12), read with the listing, not per turn. A store
   * that declares `supports.reopenWindow` gives `firstFailedAt` and takes `query.reopenWithinMs`,
   * judging `reopenable` and `pastReopenWindow` by the window as its `appendUserMessage` would.
   */
  listFailedTurns?(query?: FailedTurnsQuery): Promise<FailedTurnsPage>;

  /**
   * OPTIONAL (TURN-22): the messages in progress (bound, neither committed nor failed) whose
   * conversation's turn lease is released, or expired at least `olderThanMs` ago on the store's
   * clock, across conversations (or in one), longest stalled first, ties by conversation id and
   * then message id in code point order (`compareStoreIds`), a page at a time. Read-only; the
   * lease and the message are read in one statement, so a message a live lease holds is never
   * listed. The same argument checks and page sizes as `listFailedTurns`.
   */
  listStalledMessages?(query?: StalledMessagesQuery): Promise<StalledMessagesPage>;

  close(): Promise<void>;
}
