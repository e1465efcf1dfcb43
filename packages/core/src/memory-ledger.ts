import { InvalidLedgerInputError, ResolutionRefusedError, ResultNotStorableError, StaleClaimError, describeValue, type StoredError } from "./errors/index.js";
import { checkClaimRequest, checkExpiredInFlightOptions, checkLedgerKey, checkLedgerLeaseMs, checkStoredError } from "./internal/ledger-rows.js";
import { checkedClock, unknownOptionMessage, unknownOptionName, type OptionNames } from "./internal/options.js";
import {
  checkListQuery,
  checkResolveRequest,
  checkRetireRequest,
  decodeListCursor,
  encodeListCursor,
  rowSince,
} from "./ledger-ops.js";
import {
  type AuditEntry,
  type ListRowsPage,
  type ListRowsQuery,
  type ResolveRequest,
  type ResolvedRow,
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  type ClaimRequest,
  type ClaimResult,
  type InFlightRow,
  type Ledger,
  type LedgerCapabilities,
  type LedgerRow,
  type RowBase,
  type TerminalRow,
  type RetireOptions,
  type RetireResult,
  CLAIM_ID_PATTERN,
} from "./ledger.js";

export interface MemoryLedgerOptions {
  /**
   * Clock in milliseconds; injectable so tests can expire leases without sleeping.
   * @default Date.now
   * @example new MemoryLedger({ now: clock.now })
   */
  now?: () => number;
  /**
   * How long a finished row is kept after it finished (replayed until then, forgotten after),
   * and a retired claim id after it was retired (LEDGER-13, LEDGER-28).
   * @default 86400000 (24 h, DEFAULT_RETENTION_MS)
   * @example new MemoryLedger({ retentionMs: 7 * 24 * 60 * 60 * 1000 })
   */
  retentionMs?: number;
  /**
   * Largest result, in UTF-8 bytes of its JSON text, that complete() accepts (LEDGER-10); also
   * the ledger's `capabilities.maxResultBytes`.
   * @default 1048576 (1 MiB, DEFAULT_MAX_RESULT_BYTES)
   * @example new MemoryLedger({ maxResultBytes: 64 * 1024 })
   */
  maxResultBytes?: number;
}

const MEMORY_LEDGER_OPTION_NAMES: OptionNames<MemoryLedgerOptions> = { now: true, retentionMs: true, maxResultBytes: true };

/**
 * The reference ledger's options, checked as every adapter checks its own (ERR-1): a retention of
 * -1 or NaN was accepted and forgot finished rows at once (a replay ran the effect again) or
 * never; a misspelt option was ignored.
 */
function checkMemoryLedgerOptions(options: unknown): asserts options is MemoryLedgerOptions {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new InvalidLedgerInputError("options", "expected an options object { now?, retentionMs?, maxResultBytes? }");
  }
  const unknown = unknownOptionName(options, MEMORY_LEDGER_OPTION_NAMES);
  if (unknown !== undefined) throw new InvalidLedgerInputError(unknown, unknownOptionMessage("MemoryLedger", MEMORY_LEDGER_OPTION_NAMES));
  const { now, retentionMs, maxResultBytes } = options as MemoryLedgerOptions;
  if (now !== undefined && typeof now !== "function") throw new InvalidLedgerInputError("now", "expected a function returning milliseconds");
  for (const [field, value] of [["retentionMs", retentionMs], ["maxResultBytes", maxResultBytes]] as const) {
    if (value !== undefined && (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1)) {
      throw new InvalidLedgerInputError(field, `expected a positive integer, got ${describeValue(value)}`);
    }
  }
}

/** UTF-8 byte length of a string, without allocating a Buffer. */
export function utf8ByteLength(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

/** Shared check for complete(): results above the limit are refused, the claim is held (LEDGER-10). */
export function assertStorableResult(key: string, result: string, maxResultBytes: number): void {
  const size = utf8ByteLength(result);
  if (size > maxResultBytes) {
    throw new ResultNotStorableError(key, `${size} bytes exceeds the ledger's limit of ${maxResultBytes}`);
  }
}

/** A claim id, when given, must look like one (LEDGER-26); shared by the adapters. */
export function assertClaimId(claimId: unknown): void {
  if (claimId !== undefined && (typeof claimId !== "string" || !CLAIM_ID_PATTERN.test(claimId))) {
    throw new InvalidLedgerInputError("claimId", `must match ${CLAIM_ID_PATTERN.source} (see newClaimId)`);
  }
}

/** A stored row as callers see it: without the bookkeeping (retention deadline, claim id). */
/**
 * The answer to a claim whose claim id is the one a released row was released under (LEDGER-27):
 * that claim is over, and a copy of it (sent before the release, applied after) is stale. Every
 * ledger answers it with this error, so callers can tell it from a stale fence by its message only.
 */
export function releasedClaimError(key: string, fence: number): StaleClaimError {
  return new StaleClaimError(key, fence, "this claim id was released; a copy of its claim cannot take the row again");
}

/**
 * The answer to a claim carrying a retired claim id (LEDGER-28): its dispatch gave up on it, and
 * this is a copy that reached the store late. `fence` is the key's row's, or 0 without a row.
 */
export function retiredClaimError(key: string, fence: number): StaleClaimError {
  return new StaleClaimError(key, fence, "this claim id was retired; a late copy of its claim cannot take the row");
}

function visibleRow(row: StoredRow): LedgerRow {
  const { expiresAt: _expires, claimId: _claim, ...visible } = row;
  return structuredClone(visible) as LedgerRow;
}

/**
 * The reference ledger: a Map, one process, volatile. It follows the spec exactly and is
 * what the conformance kit's model is checked against; use a real adapter in production.
 */
export class MemoryLedger implements Ledger {
  readonly capabilities: LedgerCapabilities;
  private readonly rows = new Map<string, StoredRow>();
  /** Retired claim ids per key, each with the time it may be forgotten (LEDGER-28); kept apart from rows. */
  private readonly retired = new Map<string, Map<string, number>>();
  /** Audit entries per key; dropped with the row (sweep, or a claim over a forgotten row). */
  private readonly audits = new Map<string, AuditEntry[]>();
  private readonly now: () => number;
  /** How long finished and released rows are kept, in ms (LEDGER-13). */
  readonly retentionMs: number;

  constructor(options: MemoryLedgerOptions = {}) {
    checkMemoryLedgerOptions(options);
    this.now = options.now === undefined ? Date.now : checkedClock(options.now, (reason) => new InvalidLedgerInputError("now", reason));
    this.retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
    this.capabilities = {
      durability: "volatile",
      clock: "process",
      sharedAcrossProcesses: false,
      maxResultBytes: options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES,
      supports: { listRows: true, resolve: true, auditTrail: true, listExpiredInFlight: true, retire: true },
    };
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    // Leases are whole milliseconds, rounded up, in every ledger.
    const leaseMs = checkClaimRequest(request);
    if (leaseMs !== request.leaseMs) request = { ...request, leaseMs };
    const now = this.now();
    const row = this.rows.get(request.key);
    // A late copy of a claim its dispatch gave up on takes nothing, whatever the row (LEDGER-28).
    if (request.claimId !== undefined && this.isRetired(request.key, request.claimId, now)) {
      throw retiredClaimError(request.key, row === undefined || this.retentionPassed(row, now) ? 0 : row.fence);
    }
    if (row === undefined || this.retentionPassed(row, now)) {
      // A forgotten row behaves as one never claimed (LEDGER-19), but the fence keeps rising.
      this.audits.delete(request.key);
      return this.takeClaim(request, (row?.fence ?? 0) + 1, now, false, request.request, request);
    }
    if (row.state === "released") {
      // A copy of the claim that was released, arriving late (its reply was lost, and it was
      // released by its claim id): it must not take the row again, or nobody would hold it (LEDGER-27).
      if (request.claimId !== undefined && row.claimId === request.claimId) throw releasedClaimError(request.key, row.fence);
      // A re-claim keeps the first claim's request: the re-run sends what the first run sent (LEDGER-21).
      return this.takeClaim(request, row.fence + 1, now, false, row.request, row);
    }
    if (row.state !== "in_flight") return { outcome: "existing", row: structuredClone(row) };
    // The same claim sent again (its reply was lost): it holds the row, live or expired (LEDGER-26).
    if (request.claimId !== undefined && row.claimId === request.claimId) {
      row.leaseExpiresAt = now + request.leaseMs;
      return { outcome: "claimed", fence: row.fence, leaseExpiresAt: row.leaseExpiresAt, takeover: false, request: row.request };
    }
    if (row.leaseExpiresAt > now) return { outcome: "existing", row: visibleRow(row) as InFlightRow };
    // The owner's lease ran out: it died, hung, or lost the store (LEDGER-7).
    if (row.effect === "keyed_write") return this.takeClaim(request, row.fence + 1, now, true, row.request, row);
    const unknown = finishedRow(row, row.fence, { state: "unknown", reason: "lease_expired" }, now, now + this.retentionMs);
    this.rows.set(row.key, unknown);
    this.audit(row.key, { at: now, actor: request.owner, action: "lease_expired", fromState: "in_flight", toState: "unknown", fence: row.fence, reason: "lease_expired" });
    return { outcome: "existing", row: visibleRow(unknown) as TerminalRow };
  }

  async renew(key: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    // An expired lease that nobody has acted on yet is still this owner's: the fence,
    // not the clock, decides ownership (LEDGER-5).
    const lease = checkLedgerLeaseMs(leaseMs);
    const row = this.owned(key, fence);
    const now = this.now();
    row.leaseExpiresAt = now + lease;
    return { leaseExpiresAt: row.leaseExpiresAt };
  }

  async complete(key: string, fence: number, result: string): Promise<void> {
    const row = this.owned(key, fence);
    assertStorableResult(key, result, this.capabilities.maxResultBytes);
    const now = this.now();
    this.rows.set(key, finishedRow(row, fence, { state: "completed", result }, now, now + this.retentionMs));
  }

  async fail(key: string, fence: number, error: StoredError): Promise<void> {
    checkStoredError(error);
    const row = this.owned(key, fence);
    const now = this.now();
    this.rows.set(key, finishedRow(row, fence, { state: "failed", error: structuredClone(error) }, now, now + this.retentionMs));
  }

  async markUnknown(key: string, fence: number, reason: string): Promise<void> {
    const row = this.owned(key, fence);
    const now = this.now();
    this.rows.set(key, finishedRow(row, fence, { state: "unknown", reason }, now, now + this.retentionMs));
    this.audit(key, { at: now, actor: row.owner, action: "marked_unknown", fromState: "in_flight", toState: "unknown", fence, reason });
  }

  async release(key: string, fence: number): Promise<void> {
    const row = this.owned(key, fence);
    this.setReleased(row, this.now());
  }

  async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const release = checkRetireRequest(key, claimId, options);
    const now = this.now();
    let ids = this.retired.get(key);
    if (ids === undefined) this.retired.set(key, (ids = new Map()));
    // Kept for the retention from now: a late copy is refused as long as a row would be replayed.
    ids.set(claimId, now + this.retentionMs);
    const row = this.rows.get(key);
    if (!release || row === undefined || row.state !== "in_flight" || row.claimId !== claimId) return { released: false };
    // The claim landed but its dispatch never took it: nobody ran the tool under it (LEDGER-8 release).
    this.setReleased(row, now);
    return { released: true };
  }

  async lookup(key: string): Promise<LedgerRow | undefined> {
    checkLedgerKey(key);
    const row = this.rows.get(key);
    if (row === undefined || this.retentionPassed(row, this.now())) return undefined;
    return visibleRow(row);
  }

  async sweep(): Promise<number> {
    const now = this.now();
    let removed = 0;
    for (const [key, ids] of this.retired) {
      for (const [id, until] of ids) if (until <= now) ids.delete(id);
      if (ids.size === 0) this.retired.delete(key);
    }
    for (const [key, row] of this.rows) {
      if (this.retentionPassed(row, now)) {
        this.rows.delete(key);
        this.audits.delete(key);
        removed++;
      }
    }
    return removed;
  }

  async listExpiredInFlight(options: { olderThanMs?: number; limit?: number } = {}): Promise<InFlightRow[]> {
    checkExpiredInFlightOptions(options);
    const olderThanMs = options.olderThanMs ?? 0;
    const limit = options.limit ?? 100;
    if (!Number.isSafeInteger(olderThanMs) || olderThanMs < 0) throw new InvalidLedgerInputError("olderThanMs", "must be a non-negative integer");
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000) throw new InvalidLedgerInputError("limit", "must be an integer from 1 to 10000");
    const cutoff = this.now() - olderThanMs;
    const expired: InFlightRow[] = [];
    for (const row of this.rows.values()) {
      if (row.state === "in_flight" && row.leaseExpiresAt <= cutoff) expired.push(visibleRow(row) as InFlightRow);
    }
    return expired.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt).slice(0, limit);
  }

  async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const { states, limit } = checkListQuery(query);
    const after = query.cursor === undefined ? undefined : decodeListCursor(query.cursor);
    const now = this.now();
    const cutoff = query.olderThanMs === undefined ? undefined : now - query.olderThanMs;
    const matching: LedgerRow[] = [];
    // A scan is fine for the reference ledger; the adapters serve this from indexes (LIST-6).
    for (const row of this.rows.values()) {
      if (this.retentionPassed(row, now)) continue;
      if (states !== undefined && !states.includes(row.state)) continue;
      if (query.toolName !== undefined && row.toolName !== query.toolName) continue;
      if (query.conversationId !== undefined && row.conversationId !== query.conversationId) continue;
      const since = rowSince(row);
      if (cutoff !== undefined && since > cutoff) continue;
      if (after !== undefined && (since < after.since || (since === after.since && row.key <= after.key))) continue;
      matching.push(row);
    }
    matching.sort((a, b) => rowSince(a) - rowSince(b) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    const page = matching.slice(0, limit).map((row) => visibleRow(row));
    const last = page[page.length - 1];
    return matching.length > limit && last !== undefined ? { rows: page, cursor: encodeListCursor(rowSince(last), last.key) } : { rows: page };
  }

  async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    checkResolveRequest(request);
    const { key, resolution } = request;
    // A result this ledger can never store is the request's fault, found without reading the row,
    // as every adapter finds it (RESOLVE-3).
    if (resolution.outcome === "completed") assertStorableResult(key, resolution.result, this.capabilities.maxResultBytes);
    const now = this.now();
    const row = this.rows.get(key);
    if (row === undefined || this.retentionPassed(row, now)) throw new ResolutionRefusedError(key, "absent");
    if (request.expectedFence !== undefined && row.fence !== request.expectedFence) {
      throw new StaleClaimError(key, request.expectedFence, `the row's fence is ${row.fence}, not the expected one`);
    }
    const open = row.state === "unknown" || (row.state === "in_flight" && row.leaseExpiresAt <= now);
    if (!open) throw new ResolutionRefusedError(key, row.state);
    // A new fence: the former owner's late complete/fail/markUnknown is refused as stale (RESOLVE-5).
    const fence = row.fence + 1;
    const base = { ...claimRow(row, fence), finishedAt: now, expiresAt: now + this.retentionMs };
    const written =
      resolution.outcome === "completed"
        ? { ...base, state: "completed" as const, result: resolution.result }
        : resolution.outcome === "failed"
          ? { ...base, state: "failed" as const, error: structuredClone(resolution.error) }
          : { ...base, state: "released" as const };
    // Releasing an in-flight row keeps its claim id, as the owner's release does: a late copy of the
    // dead owner's claim is then refused, not handed the row an operator just settled (LEDGER-27).
    // A row that turned unknown holds none (LEDGER-26).
    if (written.state === "released" && row.state === "in_flight" && row.claimId !== undefined) (written as StoredRow).claimId = row.claimId;
    this.rows.set(key, written);
    this.audit(key, {
      at: now,
      actor: request.actor,
      action: request.action ?? "resolved",
      fromState: row.state,
      toState: written.state,
      fence,
      reason: request.reason,
      outcome: resolution.outcome,
    });
    return visibleRow(written) as ResolvedRow;
  }

  async auditTrail(key: string): Promise<AuditEntry[]> {
    if (typeof key !== "string" || key.length === 0) throw new InvalidLedgerInputError("key", "must be a non-empty string");
    return structuredClone(this.audits.get(key) ?? []);
  }

  async close(): Promise<void> {}

  /** Number of rows held, for tests and diagnostics. */
  get size(): number {
    return this.rows.size;
  }

  private isRetired(key: string, claimId: string, now: number): boolean {
    const until = this.retired.get(key)?.get(claimId);
    return until !== undefined && until > now;
  }

  private retentionPassed(row: { state: string; expiresAt?: number }, now: number): boolean {
    return row.state !== "in_flight" && row.expiresAt !== undefined && row.expiresAt <= now;
  }

  private takeClaim(
    request: ClaimRequest,
    fence: number,
    now: number,
    takeover: boolean,
    stored: string,
    // Where the conversation and turn come from: the row's first claim, like the request (LIST-3).
    origin: { conversationId?: string; turnIndex?: number },
  ): ClaimResult {
    // Members assigned in order, not spread in (see finishedRow).
    const row = {
      key: request.key,
      toolName: request.toolName,
      effect: request.effect,
      fence,
      claimedAt: now,
      request: stored,
    } as Record<string, unknown>;
    if (origin.conversationId !== undefined) row.conversationId = origin.conversationId;
    if (origin.turnIndex !== undefined) row.turnIndex = origin.turnIndex;
    row.state = "in_flight";
    row.owner = request.owner;
    row.leaseExpiresAt = now + request.leaseMs;
    if (request.claimId !== undefined) row.claimId = request.claimId;
    this.rows.set(request.key, row as unknown as StoredRow);
    return { outcome: "claimed", fence, leaseExpiresAt: now + request.leaseMs, takeover, request: stored };
  }

  /** Release an in-flight row; the released row keeps the claim id it was released under (LEDGER-27). */
  private setReleased(row: InFlightRow & { claimId?: string }, now: number): void {
    this.rows.set(row.key, finishedRow(row, row.fence, { state: "released", claimId: row.claimId }, now, now + this.retentionMs));
  }

  private owned(key: string, fence: number): InFlightRow {
    const row = this.rows.get(key);
    if (row === undefined || row.state !== "in_flight" || row.fence !== fence) {
      throw new StaleClaimError(key, fence);
    }
    return row;
  }

  private audit(key: string, entry: AuditEntry): void {
    const entries = this.audits.get(key);
    if (entries === undefined) this.audits.set(key, [entry]);
    else entries.push(entry);
  }
}

/** A row as this ledger keeps it: with its retention deadline and the claim id it was claimed (or released) under. */
type StoredRow = LedgerRow & { expiresAt?: number; claimId?: string };

/** How a claim's row ends: its state and what that state carries. */
type RowEnd =
  | { state: "completed"; result: string }
  | { state: "failed"; error: StoredError }
  | { state: "unknown"; reason: string }
  /** A released row keeps the claim id it was released under (LEDGER-27). */
  | { state: "released"; claimId?: string };

/** What every row of `row`'s claim carries, at `fence`: the optional conversation fields only when present (rows carry no `undefined` members). */
function claimRow(row: RowBase, fence: number): RowBase {
  const out: RowBase = { key: row.key, toolName: row.toolName, effect: row.effect, fence, claimedAt: row.claimedAt, request: row.request };
  if (row.conversationId !== undefined) out.conversationId = row.conversationId;
  if (row.turnIndex !== undefined) out.turnIndex = row.turnIndex;
  return out;
}

/**
 * The row a claim leaves when it ends (`row` is the claim's, `fence` the one written), its
 * members assigned one by one, in the order the spread `{ ...base, state, ... }` gave them. Not the spread: V8 builds a spread followed by more
 * members on a slow path, about 7 µs a row in a micro-benchmark, a third of this ledger's CPU.
 */
function finishedRow(row: LedgerRow, fence: number, end: RowEnd, now: number, expiresAt: number): StoredRow {
  // Members added to the claim's own (typed as a record while it is being built).
  const out = claimRow(row, fence) as RowBase & Record<string, unknown>;
  out.state = end.state;
  switch (end.state) {
    case "completed":
      out.result = end.result;
      break;
    case "failed":
      out.error = end.error;
      break;
    case "unknown":
      out.reason = end.reason;
      break;
  }
  out.finishedAt = now;
  out.expiresAt = expiresAt;
  if (end.state === "released" && end.claimId !== undefined) out.claimId = end.claimId;
  return out as unknown as StoredRow;
}
