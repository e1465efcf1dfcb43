import { createHash, hash as oneShotHash } from "node:crypto";
import { canonicalize, describeError, withCause } from "./canonical.js";
import { CanonicalizationError, InvalidArgumentError, InvalidKeyInputError, describeValue } from "./errors/index.js";

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

/**
 * The exact string that is hashed (spec KEY-1).
 *
 * Hostile input is refused with a typed error, never a TypeError or a RangeError: an input that
 * is not an object with `invalid_argument` (field "input"); a component that is out of its
 * alphabet or range, or whose reading throws (a getter, a revoked proxy), with
 * `invalid_key_input` and its field; arguments without a JCS form, or whose reading throws,
 * with `not_canonicalizable` (KEY-6). Components are read once each, in the order they are
 * checked, so the error names the first bad one.
 */
export function keyMaterial(input: KeyInput): string {
  const prefix = materialPrefix(input);
  let args: unknown;
  try {
    args = input.args;
  } catch (cause) {
    // The arguments themselves cannot be read: KEY-6's "unreadable" at the root of the arguments.
    throw withCause(new CanonicalizationError("unreadable", "", `reading the arguments threw: ${describeError(cause)}`), cause);
  }
  return `${prefix}${canonicalize(args)}`;
}

/** The key material up to the canonical arguments: the four checked components, each followed by "|". */
function materialPrefix(input: Omit<KeyInput, "args">): string {
  if (typeof input !== "object" || input === null) {
    throw new InvalidArgumentError(
      "input",
      `must be an object with conversationId, turnIndex, name and args, got ${describeValue(input)}`,
    );
  }
  const conversationId = readComponent(input, "conversationId");
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
    throw new InvalidKeyInputError(
      "conversationId",
      `must match ${CONVERSATION_ID_PATTERN.source}, got ${describeValue(conversationId)}`,
    );
  }
  const name = readComponent(input, "name");
  if (typeof name !== "string" || !TOOL_NAME_PATTERN.test(name)) {
    throw new InvalidKeyInputError("name", `must match ${TOOL_NAME_PATTERN.source}, got ${describeValue(name)}`);
  }
  const turnIndex = checkIndex("turnIndex", readComponent(input, "turnIndex"));
  // Only an absent ordinal defaults to 0; null is a caller bug, not "the first".
  const given = readComponent(input, "ordinal");
  const ordinal = checkIndex("ordinal", given === undefined ? 0 : given);
  return `${conversationId}|${turnIndex}|${name}|${ordinal}|`;
}

/**
 * deriveKey for arguments already in canonical text (the dispatcher has made it once for the
 * call's identity, and making it again was a fifth of the dispatch path's CPU), from components
 * the caller has read already (its turn context's and tool's): the components are checked
 * exactly as keyMaterial checks them, in the same order, with the same errors, without an input
 * object to read them from again. `canonicalArgs` MUST be `canonicalize(args)`.
 * @internal
 */
export function deriveKeyFromParts(conversationId: unknown, turnIndex: unknown, name: unknown, ordinal: unknown, canonicalArgs: string): string {
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(conversationId)) {
    throw new InvalidKeyInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}, got ${describeValue(conversationId)}`);
  }
  if (typeof name !== "string" || !TOOL_NAME_PATTERN.test(name)) {
    throw new InvalidKeyInputError("name", `must match ${TOOL_NAME_PATTERN.source}, got ${describeValue(name)}`);
  }
  checkIndex("turnIndex", turnIndex);
  // Only an absent ordinal defaults to 0; null is a caller bug, not "the first".
  checkIndex("ordinal", ordinal === undefined ? 0 : ordinal);
  return sha256Hex(`${conversationId}|${turnIndex as number}|${name}|${ordinal === undefined ? 0 : (ordinal as number)}|${canonicalArgs}`).slice(0, KEY_HEX_LENGTH);
}

/** One-shot crypto.hash where Node has it (20.12+: about twice as fast for a short text as createHash). */
function sha256Hex(text: string): string {
  return typeof oneShotHash === "function" ? oneShotHash("sha256", text, "hex") : createHash("sha256").update(text, "utf8").digest("hex");
}

/**
 * The idempotency key of a logical tool call: the first 32 hex digits of the SHA-256 of
 * its UTF-8 key material (spec KEY-1). Byte-identical to the chapter's Python reference
 * wherever Python's sorted compact json.dumps and RFC 8785 agree (spec KEY-8).
 */
export function deriveKey(input: KeyInput): string {
  return sha256Hex(keyMaterial(input)).slice(0, KEY_HEX_LENGTH);
}

function checkIndex(field: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidKeyInputError(field, `must be a non-negative safe integer, got ${describeValue(value)}`);
  }
  return value;
}

function readComponent(input: object, field: "conversationId" | "name" | "turnIndex" | "ordinal"): unknown {
  try {
    return (input as Record<string, unknown>)[field];
  } catch (cause) {
    throw withCause(new InvalidKeyInputError(field, `reading it threw: ${describeError(cause)}`), cause);
  }
}
