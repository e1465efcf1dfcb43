import { createHash } from "node:crypto";
import { canonicalize } from "./canonical.js";
import { InvalidKeyInputError } from "./errors.js";

/**
 * Alphabets that keep the key material unambiguous (spec KEY-2, KEY-3): none of the first
 * four components can contain "|", so the first four "|" in the material are always the
 * separators and everything after the fourth is the canonical arguments.
 */
export const CONVERSATION_ID_PATTERN = /^[A-Za-z0-9_.:~-]{1,256}$/;
/** The tool-name alphabet of the Anthropic Messages API. */
export const TOOL_NAME_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export interface KeyInput {
  conversationId: string;
  /** Position of the turn in the conversation: identical across every replay of it (spec §4). */
  turnIndex: number;
  name: string;
  /** The call's arguments, or the tool's identity projection of them (spec §5.2). */
  args: unknown;
  /** Among identical calls in one turn, which one this is; 0 for the first (spec TURN-4). */
  ordinal?: number;
}

/** Length of a key in hex digits: 128 bits of SHA-256. */
export const KEY_HEX_LENGTH = 32;

/** The exact string that is hashed (spec KEY-1). */
export function keyMaterial(input: KeyInput): string {
  const { conversationId, turnIndex, name, args } = input;
  // Only an absent ordinal defaults to 0; null is a caller bug, not "the first".
  const ordinal = input.ordinal === undefined ? 0 : input.ordinal;
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
    throw new InvalidKeyInputError(
      "conversationId",
      `must match ${CONVERSATION_ID_PATTERN.source}, got ${JSON.stringify(conversationId)}`,
    );
  }
  if (typeof name !== "string" || !TOOL_NAME_PATTERN.test(name)) {
    throw new InvalidKeyInputError("name", `must match ${TOOL_NAME_PATTERN.source}, got ${JSON.stringify(name)}`);
  }
  checkIndex("turnIndex", turnIndex);
  checkIndex("ordinal", ordinal);
  return `${conversationId}|${turnIndex}|${name}|${ordinal}|${canonicalize(args)}`;
}

/**
 * The idempotency key of a logical tool call: the first 32 hex digits of the SHA-256 of
 * its UTF-8 key material (spec KEY-1). Byte-identical to the chapter's Python reference
 * wherever Python's sorted compact json.dumps and RFC 8785 agree (spec KEY-8).
 */
export function deriveKey(input: KeyInput): string {
  return createHash("sha256").update(keyMaterial(input), "utf8").digest("hex").slice(0, KEY_HEX_LENGTH);
}

function checkIndex(field: string, value: unknown): void {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidKeyInputError(field, `must be a non-negative safe integer, got ${String(value)}`);
  }
}
