import { InvalidStoreInputError, StoreCorruptError, canonicalize, isDispatchOnceError, type JsonValue } from "@dispatch-once/core";

/**
 * JSON text of a value the store must give back deep-equal. `canonicalize` refuses exactly
 * what JSON cannot carry (NaN and ±Infinity, lone surrogates, undefined in arrays, bigint,
 * Dates and other class instances, cycles, symbol keys, nesting past 512), so its check is
 * reused; the stored text is JSON.stringify's, which keeps the caller's member order.
 */
export function encodeJson(field: string, value: unknown): string {
  try {
    canonicalize(value);
  } catch (error) {
    if (isDispatchOnceError(error, "not_canonicalizable")) {
      throw new InvalidStoreInputError(field, `cannot be stored as JSON and read back equal: ${error.message}`);
    }
    throw error;
  }
  return JSON.stringify(value);
}

/** The value of stored JSON text; text that does not parse is corruption, never "absent". */
export function decodeJson(conversationId: string, what: string, text: unknown): JsonValue {
  if (typeof text !== "string") throw new StoreCorruptError(conversationId, `${what} is not JSON text (${text === null ? "null" : typeof text})`);
  try {
    return JSON.parse(text) as JsonValue;
  } catch (cause) {
    throw new StoreCorruptError(conversationId, `${what} is not valid JSON`, { cause });
  }
}
