import { createHash } from "node:crypto";

/** Deterministic PRNG (sfc32) seeded from any strings: same parts, same sequence. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(...parts: Array<string | number>) {
    const digest = createHash("sha256").update(parts.map(String).join("\u0000")).digest();
    this.a = digest.readUInt32LE(0);
    this.b = digest.readUInt32LE(4);
    this.c = digest.readUInt32LE(8);
    this.d = digest.readUInt32LE(12);
    for (let i = 0; i < 12; i++) this.nextUint32();
  }

  nextUint32(): number {
    this.a >>>= 0;
    this.b >>>= 0;
    this.c >>>= 0;
    this.d >>>= 0;
    let t = (this.a + this.b) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.d = (this.d + 1) | 0;
    t = (t + this.d) | 0;
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform float in [0, 1). */
  next(): number {
    return this.nextUint32() / 4294967296;
  }

  /** Uniform integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError("pick from an empty list");
    return items[this.int(0, items.length - 1)] as T;
  }

  shuffle<T>(items: readonly T[]): T[] {
    const out = items.slice();
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      const tmp = out[i] as T;
      out[i] = out[j] as T;
      out[j] = tmp;
    }
    return out;
  }
}

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

const ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** An id shaped like the API's (`toolu_01…`, `msg_01…`, `req_011C…`): prefix + 22 base62 characters. */
export function mintId(prefix: string, rng: Rng): string {
  let out = prefix;
  for (let i = 0; i < 22; i++) out += ID_ALPHABET[rng.int(0, ID_ALPHABET.length - 1)];
  return out;
}

/** JSON with object keys sorted recursively: the hash of a body must not depend on its key order. */
export function stableStringify(value: unknown): string {
  return stableText(value, undefined);
}

/**
 * The canonical text of a request body: `stableStringify` of the body without its top-level
 * `stream` (a streamed and a whole request for one conversation count as one body's attempts).
 * Built without a copy of the body.
 */
export function canonicalBodyText(body: unknown): string {
  return stableText(body, "stream");
}

/**
 * One walk, appending to one string: the body of every request is hashed, and the earlier
 * entries/sort/map/join form allocated several arrays per object (a tenth of the provider
 * thread's allocations in the demo). The text is the same: keys in UTF-16 order (the default
 * sort, as `<`), `undefined` members left out, an array's `undefined` as `null`, a hole as
 * nothing (as `map` + `join` gave).
 */
function stableText(value: unknown, omitKey: string | undefined): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ",";
      if (i in value) out += stableText(value[i], undefined);
    }
    return out + "]";
  }
  const record = value as Record<string, unknown>;
  const keys = sortedKeys(record);
  let out = "{";
  let first = true;
  for (const key of keys) {
    if (key === omitKey) continue;
    const member = record[key];
    if (member === undefined) continue;
    if (!first) out += ",";
    first = false;
    out += JSON.stringify(key) + ":" + stableText(member, undefined);
  }
  return out + "}";
}

/**
 * An object's keys in UTF-16 order, as `Object.keys(record).sort()` gives them. A body's objects
 * have a few keys each, and the default sort allocated its work arrays for every one of them
 * (about 4 % of what a demo side thread allocated): a few keys are sorted in place instead.
 */
function sortedKeys(record: Record<string, unknown>): string[] {
  const keys = Object.keys(record);
  if (keys.length > INSERTION_SORT_MAX) return keys.sort();
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i]!;
    let j = i - 1;
    while (j >= 0 && keys[j]! > key) {
      keys[j + 1] = keys[j]!;
      j--;
    }
    keys[j + 1] = key;
  }
  return keys;
}

/** Longest key list sorted by insertion (quadratic: a larger one goes to the default sort). */
const INSERTION_SORT_MAX = 16;
