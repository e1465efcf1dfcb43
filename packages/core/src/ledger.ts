import { randomFillSync } from "node:crypto";
import type { StoredError } from "./errors/index.js";

/**
 * How a tool's side effect must be guarded (spec §5, EFFECT-1..EFFECT-4).
 * - read: no effect; never claimed.
 * - keyed_write: the downstream API deduplicates on the forwarded Idempotency-Key,
 *   so a re-run with the same key is safe.
 * - unkeyed_write: the downstream does no deduplication; the ledger is the only guard.
 */
export type EffectClass = "read" | "keyed_write" | "unkeyed_write";

/** The effect classes that the ledger records. */
export type LedgerEffect = Exclude<EffectClass, "read">;

/** Row states (spec §6, LEDGER-3). `released` is a claimable tombstone that keeps the fence. */
export type RowState = "in_flight" | "completed" | "failed" | "unknown" | "released";

export interface RowBase {
  key: string;
  toolName: string;
  effect: LedgerEffect;
  /** Fencing token of the most recent claim; strictly increases with every claim of the key. */
  fence: number;
  /** Store-clock milliseconds when the current fence was claimed. */
  claimedAt: number;
  /**
   * What the effect was asked to do: the JSON text of the validated arguments of the FIRST
   * claim of the key (opaque to the ledger), kept byte for byte by every later claim (re-claim after release,
   * takeover) until the row is forgotten. Every run of the tool uses it (LEDGER-21).
   */
  request: string;
  /**
   * The conversation and turn the call belongs to, when the claimant said (ClaimRequest). Stored
   * by the claim that creates the row and kept by later claims, like `request`; for listing and
   * for an operator's inspection only, never for ownership (LIST-3).
   */
  conversationId?: string;
  turnIndex?: number;
}

export interface InFlightRow extends RowBase {
  state: "in_flight";
  owner: string;
  /** Store-clock milliseconds after which another attempt may act on the row (LEDGER-6). */
  leaseExpiresAt: number;
}

export interface CompletedRow extends RowBase {
  state: "completed";
  /** The result as JSON text, exactly as stored: replays return these bytes (LEDGER-8). */
  result: string;
  finishedAt: number;
}

export interface FailedRow extends RowBase {
  state: "failed";
  error: StoredError;
  finishedAt: number;
}

export interface UnknownRow extends RowBase {
  state: "unknown";
  /** Why the outcome is unknown, e.g. "lease_expired" or "tool_error". */
  reason: string;
  finishedAt: number;
}

export interface ReleasedRow extends RowBase {
  state: "released";
  finishedAt: number;
}

export type LedgerRow = InFlightRow | CompletedRow | FailedRow | UnknownRow | ReleasedRow;

/** A row that ends a call: its content is what every replay receives. */
export type TerminalRow = CompletedRow | FailedRow | UnknownRow;

export interface ClaimRequest {
  key: string;
  toolName: string;
  effect: LedgerEffect;
  /** Who is claiming (process and attempt), for diagnostics; not used for ownership. */
  owner: string;
  /** Lease length in milliseconds, measured on the ledger's clock. */
  leaseMs: number;
  /**
   * The JSON text of this call's validated arguments (opaque to the ledger). Stored only when the claim creates the
   * row (no row, or a row past retention); a claim of a released or expired row keeps the
   * stored request and returns it, so the re-run sends the first request (LEDGER-21).
   */
  request: string;
  /**
   * OPTIONAL claim id (LEDGER-26): random and unique per claim attempt (see newClaimId), matching
   * CLAIM_ID_PATTERN. The ledger stores it with the in-flight row it writes. A claim that meets an
   * in-flight row holding its own claim id is the same claim, sent again because its reply was
   * lost (a timeout, a dropped connection, a paused store that applied it later): the ledger
   * answers `claimed` with the row's fence (not a takeover, not `existing`, not `unknown`), and
   * restarts the lease from now. Without a claim id a claim is never recognised: the owner string
   * does not identify a claim (LEDGER-16).
   */
  claimId?: string;
  /**
   * OPTIONAL: the conversation and turn of the call (the dispatcher passes its TurnContext's), stored
   * with the row so that an operator can list a conversation's rows (LIST-3). Not part of
   * ownership or of the key's identity; a claim of an existing row keeps the stored values.
   */
  conversationId?: string;
  turnIndex?: number;
}

/** What a claim id looks like: URL-safe characters, long enough to be unguessable (LEDGER-26). */
export const CLAIM_ID_PATTERN = /^[A-Za-z0-9_-]{16,64}$/;

/** A fresh claim id: 128 random bits, base64url (LEDGER-26). */
export function newClaimId(): string {
  // Drawn from a pool of CSPRNG bytes refilled 4 KiB at a time, as randomUUID does: one
  // randomBytes(16) per dispatch was an eighth of the dispatcher's CPU. Each slice is used once.
  if (claimIdPoolOffset + CLAIM_ID_BYTES > claimIdPool.length) {
    randomFillSync(claimIdPool);
    claimIdPoolOffset = 0;
  }
  const start = claimIdPoolOffset;
  claimIdPoolOffset += CLAIM_ID_BYTES;
  return base64url16(claimIdPool, start);
}

/**
 * `bytes.toString("base64url", start, start + 16)`: 16 bytes as 22 base64url characters, no
 * padding. Written here: Buffer's toString (a native call through a few JS frames) was about
 * twice as slow for so few bytes.
 * @internal
 */
export function base64url16(bytes: Uint8Array, start: number): string {
  const c = BASE64URL_CODES;
  const b0 = bytes[start]!, b1 = bytes[start + 1]!, b2 = bytes[start + 2]!, b3 = bytes[start + 3]!;
  const b4 = bytes[start + 4]!, b5 = bytes[start + 5]!, b6 = bytes[start + 6]!, b7 = bytes[start + 7]!;
  const b8 = bytes[start + 8]!, b9 = bytes[start + 9]!, b10 = bytes[start + 10]!, b11 = bytes[start + 11]!;
  const b12 = bytes[start + 12]!, b13 = bytes[start + 13]!, b14 = bytes[start + 14]!, b15 = bytes[start + 15]!;
  // One call, one flat string: four characters for each three bytes, two for the last byte.
  return String.fromCharCode(
    c[b0 >> 2]!, c[((b0 & 3) << 4) | (b1 >> 4)]!, c[((b1 & 15) << 2) | (b2 >> 6)]!, c[b2 & 63]!,
    c[b3 >> 2]!, c[((b3 & 3) << 4) | (b4 >> 4)]!, c[((b4 & 15) << 2) | (b5 >> 6)]!, c[b5 & 63]!,
    c[b6 >> 2]!, c[((b6 & 3) << 4) | (b7 >> 4)]!, c[((b7 & 15) << 2) | (b8 >> 6)]!, c[b8 & 63]!,
    c[b9 >> 2]!, c[((b9 & 3) << 4) | (b10 >> 4)]!, c[((b10 & 15) << 2) | (b11 >> 6)]!, c[b11 & 63]!,
    c[b12 >> 2]!, c[((b12 & 3) << 4) | (b13 >> 4)]!, c[((b13 & 15) << 2) | (b14 >> 6)]!, c[b14 & 63]!,
    c[b15 >> 2]!, c[(b15 & 3) << 4]!,
  );
}

const BASE64URL_CODES = Uint8Array.from("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", (ch) => ch.charCodeAt(0));

const CLAIM_ID_BYTES = 16;
const claimIdPool = Buffer.allocUnsafeSlow(CLAIM_ID_BYTES * 256);
/** Past the end: the first call fills the pool. */
let claimIdPoolOffset = claimIdPool.length;

export type ClaimResult =
  /** The caller owns the key and must run the tool, then complete, fail, mark unknown or release. */
  | {
      outcome: "claimed";
      fence: number;
      leaseExpiresAt: number;
      /** False when the claim was recognised by its claim id (it is the same claim, LEDGER-26). */
      takeover: boolean;
      /** The row's stored request: the claimant MUST run the tool with it, not with its own (LEDGER-21). */
      request: string;
    }
  /**
   * The key is held: a live in-flight row of another attempt, or a terminal row.
   * An expired unkeyed_write claim is returned here already moved to `unknown` (LEDGER-7).
   */
  | { outcome: "existing"; row: InFlightRow | TerminalRow };

export interface LedgerCapabilities {
  /**
   * durable: an acknowledged write survives a crash of the store (fsync'd WAL, replicated, ...).
   * volatile: acknowledged rows can be lost (Redis without persistence, the in-memory ledger).
   * The dispatcher refuses unkeyed_write tools on a volatile ledger (LEDGER-14).
   */
  durability: "durable" | "volatile";
  /** Whose clock leases are measured on: the store's own, or each process's. */
  clock: "store" | "process";
  /** Whether several processes can share the ledger and still get one winner per key. */
  sharedAcrossProcesses: boolean;
  /** Largest result, in UTF-8 bytes of its JSON text, that complete() accepts. */
  maxResultBytes: number;
  /**
   * Which OPTIONAL methods the ledger provides (abstract-level style: a flag per feature). A
   * missing flag, or a missing `supports`, means the method is absent; callers and the
   * conformance kit check the flag, never call an absent method.
   */
  supports?: LedgerSupports;
}

/** Feature flags of a ledger's OPTIONAL methods. */
export interface LedgerSupports {
  /** `listRows` (LIST-1..LIST-6). */
  listRows?: boolean;
  /** `resolve` (RESOLVE-1..RESOLVE-8). */
  resolve?: boolean;
  /** `auditTrail` (RESOLVE-7). */
  auditTrail?: boolean;
  /** `listExpiredInFlight` (LEDGER-25). */
  listExpiredInFlight?: boolean;
  /** `retire` (LEDGER-28); a dispatcher without it falls back to releasing by claim id (DISPATCH-16). */
  retire?: boolean;
}

/** Options of retire() (LEDGER-28). */
export interface RetireOptions {
  /**
   * Also release the key's row if it is in flight under this claim id: the dispatch never
   * received `claimed` for it, so its tool never ran under it (the claim landed, its reply was
   * lost). Never set it for a claim id under which the dispatch ran its tool.
   * @default false
   * @example { release: true }
   */
  release?: boolean;
}

/** What retire() did (LEDGER-28). */
export interface RetireResult {
  /** The row was in flight under the claim id, `release` was asked, and it is now released. */
  released: boolean;
}

/** Default page size of `listRows` (LIST-4). */
export const DEFAULT_LIST_LIMIT = 100;
/** Largest page `listRows` accepts; a larger `limit` is refused with InvalidLedgerInputError (LIST-4). */
export const MAX_LIST_LIMIT = 1000;

/**
 * A filter over ledger rows (LIST-1). Every given field narrows the result (AND). Order: oldest
 * `since` first (`since` = `finishedAt` of a finished row, `claimedAt` of an in-flight one, the
 * time of the row's last transition), ties broken by key.
 */
export interface ListRowsQuery {
  /** One state or any of several. Absent: every state. */
  state?: RowState | RowState[];
  toolName?: string;
  conversationId?: string;
  /**
   * Only rows whose last transition (`finishedAt`, or `claimedAt` while in flight) is at least
   * this many milliseconds old on the ledger's clock: stuck in-flight rows, old unknowns.
   */
  olderThanMs?: number;
  /**
   * Page size.
   * @default 100
   * Larger than 1000 is refused with InvalidLedgerInputError (LIST-4).
   */
  limit?: number;
  /** The `cursor` of the previous page, opaque; absent for the first page. */
  cursor?: string;
}

export interface ListRowsPage {
  rows: LedgerRow[];
  /** Present when more rows may follow: pass it back as `cursor` for the next page (LIST-5). */
  cursor?: string;
}

/** What an operator (or a reconcile probe) establishes about a call whose outcome was open (RESOLVE-3). */
export type Resolution =
  /** The effect happened; `result` is its JSON text, stored byte for byte (maxResultBytes applies). */
  | { outcome: "completed"; result: string }
  /** The effect definitely failed; replays answer this error. */
  | { outcome: "failed"; error: StoredError }
  /** The effect did not happen: the row becomes `released`, claimable again; a replay re-runs the stored request. */
  | { outcome: "not_performed" };

/** What an audit entry records (RESOLVE-7). */
export type AuditAction =
  /** An operator's resolve(). */
  | "resolved"
  /** A reconcile probe's verdict written through resolve() by the dispatcher. */
  | "reconciled"
  /** The row's owner recorded that the outcome cannot be known (markUnknown). */
  | "marked_unknown"
  /** A claim met an expired unkeyed_write claim and moved it to `unknown` (LEDGER-7). */
  | "lease_expired";

export interface ResolveRequest {
  key: string;
  resolution: Resolution;
  /** Who resolves: a person's or a process's name ("dispatch-once:reconcile" for the dispatcher). Non-empty. */
  actor: string;
  /** Why, for the audit trail: what was checked downstream. Non-empty. */
  reason: string;
  /** The fence the operator looked at: resolve is refused with StaleClaimError if the row's fence differs (RESOLVE-4). */
  expectedFence?: number;
  /**
   * The audit action recorded.
   * @default "resolved"
   */
  action?: "resolved" | "reconciled";
}

/** The row resolve() wrote: completed, failed or released, with the fence it bumped to (RESOLVE-5). */
export type ResolvedRow = CompletedRow | FailedRow | ReleasedRow;

/** One audited transition of a row (RESOLVE-7). Retained at least as long as the row. */
export interface AuditEntry {
  /** Ledger-clock milliseconds. */
  at: number;
  actor: string;
  action: AuditAction;
  fromState: RowState;
  toState: RowState;
  /** The row's fence after the transition. */
  fence: number;
  reason: string;
  /** For resolved/reconciled: the resolution's outcome. */
  outcome?: Resolution["outcome"];
}

/**
 * The ledger contract (spec §6). Every method is atomic on one key. Every method
 * that cannot reach or trust the store rejects with LedgerUnavailableError, and never
 * reports a claim that did not happen. Rows that cannot be decoded raise LedgerCorruptError.
 */
export interface Ledger {
  readonly capabilities: LedgerCapabilities;

  /** Claim before run (LEDGER-1, LEDGER-2). Exactly one concurrent claimant of a key wins. */
  claim(request: ClaimRequest): Promise<ClaimResult>;

  /** Extend a held lease (LEDGER-9). Rejects with StaleClaimError if `fence` no longer owns the row. */
  renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }>;

  /**
   * Record the result (JSON text, stored and returned byte-for-byte). Rejects with
   * StaleClaimError on a fence mismatch and ResultNotStorableError above maxResultBytes.
   */
  complete(key: string, fence: number, result: string): Promise<void>;

  /** Record a definite failure that replays identically (LEDGER-8). */
  fail(key: string, fence: number, error: StoredError): Promise<void>;

  /** Record that the outcome cannot be known (LEDGER-7); the call is never re-run. */
  markUnknown(key: string, fence: number, reason: string): Promise<void>;

  /** Give the claim back because the effect did not happen, or a re-run is safe (LEDGER-8). */
  release(key: string, fence: number): Promise<void>;

  /** Read a row without changing it. */
  lookup(key: string): Promise<LedgerRow | undefined>;

  /**
   * OPTIONAL (LEDGER-25): in-flight rows whose lease expired at least `olderThanMs` ago (ledger
   * clock), oldest expiry first, at most `limit` (default 100). Read-only. An expired claim that
   * nobody claims again is otherwise invisible.
   */
  listExpiredInFlight?(options?: { olderThanMs?: number; limit?: number }): Promise<InFlightRow[]>;

  /**
   * OPTIONAL (LIST-1..LIST-6, `supports.listRows`): rows matching the query, oldest first, one
   * page at a time. Read-only. Served from indexes, never a scan of every row.
   */
  listRows?(query?: ListRowsQuery): Promise<ListRowsPage>;

  /**
   * OPTIONAL (RESOLVE-1..RESOLVE-8, `supports.resolve`): an operator's fenced, audited
   * transition of a row whose outcome is open (`unknown`, or `in_flight` with an expired lease)
   * to completed, failed or released. Bumps the fence, so the former owner's late writes are
   * refused as stale. Refuses any other row with ResolutionRefusedError, a fence other than
   * `expectedFence` with StaleClaimError, an oversized result with ResultNotStorableError.
   */
  resolve?(request: ResolveRequest): Promise<ResolvedRow>;

  /** OPTIONAL (RESOLVE-7, `supports.auditTrail`): the key's audit entries, oldest first; empty when none. */
  auditTrail?(key: string): Promise<AuditEntry[]>;

  /**
   * OPTIONAL (LEDGER-28, `supports.retire`): retire a claim id of the key, atomically: from now
   * until the ledger's retention has passed, every claim carrying it is refused with
   * StaleClaimError and changes nothing, whether the key has a row or not. With `release`, a row
   * in flight under that claim id is released in the same step (fence and request kept). A
   * dispatcher retires every claim id of which a copy may still be on its way to the store (one
   * of its claims met ledger_unavailable), so that a late copy never takes a row nobody holds.
   * Idempotent: retiring a retired id again changes nothing more.
   */
  retire?(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult>;

  /**
   * OPTIONAL: how long this ledger keeps finished and released rows, in ms (LEDGER-13). A turn
   * runner derives its re-send window from it (TURN-12: 23/24 of it by default) and refuses a
   * longer one; a ledger that leaves it out gets the default window, 23 h.
   */
  readonly retentionMs?: number;

  /** Delete terminal and released rows whose retention has passed; returns how many went. */
  sweep(): Promise<number>;

  close(): Promise<void>;
}

/** Default retention of finished rows: at least as long as any route can replay a turn (LEDGER-13). */
export const DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000;

/** Default largest storable result (LEDGER-10). */
export const DEFAULT_MAX_RESULT_BYTES = 1024 * 1024;

/** Row format version stored with every row; a reader that meets another refuses it (LEDGER-11). */
export const ROW_FORMAT_VERSION = 1;
