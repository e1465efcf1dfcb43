import { InvalidStoreInputError } from "./errors/index.js";
import { DEFAULT_FAILED_TURNS_LIMIT, MAX_FAILED_TURNS_LIMIT, type FailedTurnsQuery, type StalledMessagesQuery } from "./conversation.js";
import { unknownOptionName, type OptionNames } from "./internal/options.js";

/** Every member of a FailedTurnsQuery: a misspelt one (`limt`, `olderThan`) was ignored, and the listing said something else. */
const QUERY_NAMES: OptionNames<FailedTurnsQuery> = { conversationId: true, olderThanMs: true, reopenWithinMs: true, limit: true, cursor: true };

/**
 * Checks and the cursor shared by every conversation store's listFailedTurns, so that the stores
 * refuse the same inputs and page with the same cursor format (TURN-17).
 */

/** The position after a failed turn in the listing order (failedAt, conversation id, message id). */
export interface FailedTurnPosition {
  failedAt: number;
  conversationId: string;
  messageId: string;
}

/** A checked query: its page size and, when paging, the position after the previous page's last turn. */
export function checkFailedTurnsQuery(query: FailedTurnsQuery = {}): { limit: number; after: FailedTurnPosition | undefined } {
  if (typeof query !== "object" || query === null) throw new InvalidStoreInputError("query", "must be an object");
  const unknown = unknownOptionName(query, QUERY_NAMES);
  if (unknown !== undefined) throw new InvalidStoreInputError(`query.${unknown}`, `is not a member of a failed-turns query (its members: ${Object.keys(QUERY_NAMES).join(", ")})`);
  if (query.conversationId !== undefined && (typeof query.conversationId !== "string" || query.conversationId.length === 0)) {
    throw new InvalidStoreInputError("conversationId", "must be a non-empty string");
  }
  if (query.olderThanMs !== undefined && (!Number.isSafeInteger(query.olderThanMs) || query.olderThanMs < 0)) {
    throw new InvalidStoreInputError("olderThanMs", "must be a non-negative integer");
  }
  if (query.reopenWithinMs !== undefined && (typeof query.reopenWithinMs !== "number" || !Number.isFinite(query.reopenWithinMs) || query.reopenWithinMs < 0)) {
    throw new InvalidStoreInputError("reopenWithinMs", "must be a finite number of milliseconds, 0 or more");
  }
  const limit = query.limit ?? DEFAULT_FAILED_TURNS_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_FAILED_TURNS_LIMIT) {
    throw new InvalidStoreInputError("limit", `must be an integer from 1 to ${MAX_FAILED_TURNS_LIMIT}`);
  }
  return { limit, after: query.cursor === undefined ? undefined : decodeFailedTurnsCursor(query.cursor) };
}

/** `<failedAt>.<conversation id>.<message id>`, the ids in base64url: keyset paging, stable under writes. */
export function encodeFailedTurnsCursor(position: FailedTurnPosition): string {
  const b64 = (text: string) => Buffer.from(text, "utf8").toString("base64url");
  return `${position.failedAt}.${b64(position.conversationId)}.${b64(position.messageId)}`;
}

export function decodeFailedTurnsCursor(cursor: string): FailedTurnPosition {
  const match = typeof cursor === "string" ? /^(\d{1,16})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(cursor) : null;
  const failedAt = match === null ? NaN : Number(match[1]);
  if (match === null || !Number.isSafeInteger(failedAt)) {
    throw new InvalidStoreInputError("cursor", "is not a cursor returned by listFailedTurns");
  }
  const text = (b64: string) => Buffer.from(b64, "base64url").toString("utf8");
  return { failedAt, conversationId: text(match[2] as string), messageId: text(match[3] as string) };
}

/**
 * Two ids in Unicode code point order, which is the order of their UTF-8 bytes: what SQLite's
 * BINARY and PostgreSQL's "C" collation compare, so every store lists ties alike (TURN-17).
 * JavaScript's `<` compares UTF-16 code units, which puts U+E000..U+FFFF after the characters
 * above U+FFFF (their lead surrogates are U+D800..U+DBFF): at the first unit that differs,
 * surrogates are moved above U+FFFF. Negative, 0 or positive, as `Array.prototype.sort` takes.
 */
export function compareStoreIds(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

function codePointRank(unit: number): number {
  if (unit >= 0xd800 && unit <= 0xdfff) return unit + 0x2000;
  return unit >= 0xe000 ? unit - 0x800 : unit;
}

/** Whether a turn sorts after the position (the listing order: failedAt, conversation id, message id). */
export function isAfterPosition(turn: FailedTurnPosition, after: FailedTurnPosition): boolean {
  if (turn.failedAt !== after.failedAt) return turn.failedAt > after.failedAt;
  const byConversation = compareStoreIds(turn.conversationId, after.conversationId);
  if (byConversation !== 0) return byConversation > 0;
  return compareStoreIds(turn.messageId, after.messageId) > 0;
}

/** Every member of a StalledMessagesQuery (a misspelt one was ignored, and the listing said something else). */
const STALLED_QUERY_NAMES: OptionNames<StalledMessagesQuery> = { conversationId: true, olderThanMs: true, limit: true, cursor: true };

/**
 * The checks and cursor of every store's listStalledMessages (TURN-22): listFailedTurns' own,
 * with `stalledSince` in the position's time slot, so that the stores refuse the same inputs.
 */
export function checkStalledMessagesQuery(query: StalledMessagesQuery = {}): { limit: number; after: FailedTurnPosition | undefined } {
  if (typeof query !== "object" || query === null) throw new InvalidStoreInputError("query", "must be an object");
  const unknown = unknownOptionName(query, STALLED_QUERY_NAMES);
  if (unknown !== undefined) throw new InvalidStoreInputError(`query.${unknown}`, `is not a member of a stalled-messages query (its members: ${Object.keys(STALLED_QUERY_NAMES).join(", ")})`);
  return checkFailedTurnsQuery(query);
}
