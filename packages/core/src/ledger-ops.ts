import { InvalidLedgerInputError } from "./errors/index.js";
import { checkLedgerKey } from "./internal/ledger-rows.js";
import { unknownOptionMessage, unknownOptionName, type OptionNames } from "./internal/options.js";
import {
  CLAIM_ID_PATTERN,
  DEFAULT_LIST_LIMIT,
  MAX_LIST_LIMIT,
  type LedgerRow,
  type ListRowsQuery,
  type ResolveRequest,
  type RetireOptions,
  type RowState,
} from "./ledger.js";

/**
 * Checks and encodings shared by every ledger's listRows/resolve, so that the adapters refuse
 * the same inputs and page with the same cursor format (LIST-4, LIST-5, RESOLVE-1).
 */

const ROW_STATES: readonly RowState[] = ["in_flight", "completed", "failed", "unknown", "released"];

/** Longest conversation id a row stores; longer is refused rather than truncated. */
const MAX_CONVERSATION_ID_LENGTH = 512;

/**
 * The time of a row's last transition, on the ledger's clock: `finishedAt` of a finished row,
 * `claimedAt` of an in-flight one. Rows list in this order, ties broken by key (LIST-2).
 */
export function rowSince(row: LedgerRow): number {
  return row.state === "in_flight" ? row.claimedAt : row.finishedAt;
}

/** The claim's optional conversation and turn, checked (LIST-3). */
export function checkClaimOrigin(request: { conversationId?: unknown; turnIndex?: unknown }): void {
  const { conversationId, turnIndex } = request;
  if (conversationId !== undefined && (typeof conversationId !== "string" || conversationId.length === 0 || conversationId.length > MAX_CONVERSATION_ID_LENGTH)) {
    throw new InvalidLedgerInputError("conversationId", `must be a non-empty string of at most ${MAX_CONVERSATION_ID_LENGTH} characters`);
  }
  if (turnIndex !== undefined && (typeof turnIndex !== "number" || !Number.isSafeInteger(turnIndex) || turnIndex < 0)) {
    throw new InvalidLedgerInputError("turnIndex", "must be a non-negative integer");
  }
}

const LIST_QUERY_MEMBERS: OptionNames<ListRowsQuery> = { state: true, toolName: true, conversationId: true, olderThanMs: true, limit: true, cursor: true };

/** A checked query: its states as a list (undefined: any) and its page size (LIST-4). */
export function checkListQuery(query: ListRowsQuery): { states: RowState[] | undefined; limit: number } {
  if (typeof query !== "object" || query === null) throw new InvalidLedgerInputError("query", "must be an object");
  // A misspelt member (states, limt) would list as if it were absent: every row, or the default page.
  const unknown = unknownOptionName(query, LIST_QUERY_MEMBERS);
  if (unknown !== undefined) throw new InvalidLedgerInputError(unknown, unknownOptionMessage("listRows", LIST_QUERY_MEMBERS));
  const states = query.state === undefined ? undefined : Array.isArray(query.state) ? query.state : [query.state];
  if (states !== undefined) {
    if (states.length === 0) throw new InvalidLedgerInputError("state", "must name at least one state");
    for (const state of states) {
      if (!ROW_STATES.includes(state)) throw new InvalidLedgerInputError("state", `must be one of ${ROW_STATES.join(", ")}`);
    }
  }
  for (const field of ["toolName", "conversationId"] as const) {
    const value = query[field];
    if (value !== undefined && (typeof value !== "string" || value.length === 0)) {
      throw new InvalidLedgerInputError(field, "must be a non-empty string");
    }
  }
  if (query.olderThanMs !== undefined && (!Number.isSafeInteger(query.olderThanMs) || query.olderThanMs < 0)) {
    throw new InvalidLedgerInputError("olderThanMs", "must be a non-negative integer");
  }
  const limit = query.limit ?? DEFAULT_LIST_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw new InvalidLedgerInputError("limit", `must be an integer from 1 to ${MAX_LIST_LIMIT}`);
  }
  if (query.cursor !== undefined) decodeListCursor(query.cursor);
  return { states: states === undefined ? undefined : [...new Set(states)], limit };
}

/**
 * The position after a row, `<since>.<key in base64url>`: keyset paging, so a row that stays put
 * is listed exactly once however many rows are written meanwhile (LIST-5).
 */
export function encodeListCursor(since: number, key: string): string {
  return `${since}.${Buffer.from(key, "utf8").toString("base64url")}`;
}

export function decodeListCursor(cursor: string): { since: number; key: string } {
  const match = typeof cursor === "string" ? /^(\d{1,16})\.([A-Za-z0-9_-]+)$/.exec(cursor) : null;
  const since = match === null ? NaN : Number(match[1]);
  if (match === null || !Number.isSafeInteger(since)) {
    throw new InvalidLedgerInputError("cursor", "is not a cursor returned by listRows");
  }
  return { since, key: Buffer.from(match[2]!, "base64url").toString("utf8") };
}

const RESOLVE_REQUEST_MEMBERS: OptionNames<ResolveRequest> = { key: true, resolution: true, actor: true, reason: true, expectedFence: true, action: true };
/** The members each outcome's resolution has (RESOLVE-1). */
const RESOLUTION_MEMBERS: Readonly<Record<string, Readonly<Record<string, true>>>> = {
  completed: { outcome: true, result: true },
  failed: { outcome: true, error: true },
  not_performed: { outcome: true },
};

/** A resolve request with the shape RESOLVE-1 asks for. */
export function checkResolveRequest(request: ResolveRequest): void {
  if (typeof request !== "object" || request === null) throw new InvalidLedgerInputError("request", "must be an object");
  // A misspelt expectedFence read as absent would settle whatever claim holds the row now, a
  // replay's takeover included (RESOLVE-4): refused, naming it, like every member not in the shape.
  const unknown = unknownOptionName(request, RESOLVE_REQUEST_MEMBERS);
  if (unknown !== undefined) throw new InvalidLedgerInputError(unknown, `is not a member of a resolve request (its members: ${Object.keys(RESOLVE_REQUEST_MEMBERS).join(", ")})`);
  if (typeof request.key !== "string" || request.key.length === 0) throw new InvalidLedgerInputError("key", "must be a non-empty string");
  if (typeof request.actor !== "string" || request.actor.trim().length === 0) throw new InvalidLedgerInputError("actor", "must name who resolves");
  if (typeof request.reason !== "string" || request.reason.trim().length === 0) throw new InvalidLedgerInputError("reason", "must say why");
  if (request.expectedFence !== undefined && (!Number.isSafeInteger(request.expectedFence) || request.expectedFence < 1)) {
    throw new InvalidLedgerInputError("expectedFence", "must be a positive integer");
  }
  if (request.action !== undefined && request.action !== "resolved" && request.action !== "reconciled") {
    throw new InvalidLedgerInputError("action", "must be resolved or reconciled");
  }
  const resolution = request.resolution as { outcome?: unknown; result?: unknown; error?: unknown } | null;
  if (typeof resolution !== "object" || resolution === null) throw new InvalidLedgerInputError("resolution", "must be an object");
  const members = typeof resolution.outcome === "string" && Object.hasOwn(RESOLUTION_MEMBERS, resolution.outcome) ? RESOLUTION_MEMBERS[resolution.outcome] : undefined;
  const stray = members === undefined ? undefined : unknownOptionName(resolution, members);
  if (stray !== undefined) throw new InvalidLedgerInputError(`resolution.${stray}`, `is not a member of a ${String(resolution.outcome)} resolution (its members: ${Object.keys(members!).join(", ")})`);
  switch (resolution.outcome) {
    case "completed":
      if (typeof resolution.result !== "string") throw new InvalidLedgerInputError("resolution.result", "must be JSON text");
      try {
        JSON.parse(resolution.result);
      } catch {
        throw new InvalidLedgerInputError("resolution.result", "must be JSON text");
      }
      return;
    case "failed": {
      const error = resolution.error as { name?: unknown; message?: unknown } | null;
      if (typeof error !== "object" || error === null || typeof error.name !== "string" || typeof error.message !== "string") {
        throw new InvalidLedgerInputError("resolution.error", "must be a StoredError { name, message }");
      }
      return;
    }
    case "not_performed":
      return;
    default:
      throw new InvalidLedgerInputError("resolution.outcome", "must be completed, failed or not_performed");
  }
}

const RETIRE_OPTION_MEMBERS: OptionNames<RetireOptions> = { release: true };

/**
 * retire()'s arguments, checked once for every adapter (LEDGER-28): a key (as checkLedgerKey
 * checks a claim's, without a store's limits), a claim id (required here: there is nothing to
 * retire without one) and an optional boolean `release`. Returns whether to release.
 */
export function checkRetireRequest(key: unknown, claimId: unknown, options: unknown): boolean {
  checkLedgerKey(key);
  if (typeof claimId !== "string" || !CLAIM_ID_PATTERN.test(claimId)) {
    throw new InvalidLedgerInputError("claimId", `must match ${CLAIM_ID_PATTERN.source} (see newClaimId)`);
  }
  if (options === undefined) return false;
  if (options === null || typeof options !== "object") throw new InvalidLedgerInputError("options", "must be an object");
  // A misspelt release read as absent leaves the claim in flight, to turn unknown at its lease.
  const unknown = unknownOptionName(options, RETIRE_OPTION_MEMBERS);
  if (unknown !== undefined) throw new InvalidLedgerInputError(unknown, unknownOptionMessage("retire", RETIRE_OPTION_MEMBERS));
  const release = (options as RetireOptions).release;
  if (release !== undefined && typeof release !== "boolean") throw new InvalidLedgerInputError("release", "must be a boolean");
  return release === true;
}
