import { MAX_CANONICAL_DEPTH, canonicalizeAndParse, flatMemberTexts, type JsonValue } from "./canonical.js";
import { CanonicalizationError } from "./errors/index.js";

/** Deepest nesting a result may have: the same bound as canonicalisation (KEY-6), never a stack overflow. */
export const MAX_RESULT_DEPTH = MAX_CANONICAL_DEPTH;

/**
 * What `JSON.stringify` would send for a tool's result, as plain JSON data, so that results
 * built by SDKs store and replay (DISPATCH-7): `toJSON` is honoured (a `Date` becomes its ISO
 * text, SDK objects their wire form), class instances contribute their own enumerable
 * string-keyed members, and members whose value is undefined, a function or a symbol are
 * dropped (inside arrays they become null), exactly as JSON.stringify does.
 *
 * Where JSON.stringify would silently lose or invent data, this refuses with
 * `not_canonicalizable` instead: NaN and ±Infinity (stringify writes null), bigint (stringify
 * throws), a Map, Set, WeakMap, typed array or ArrayBuffer (stringify writes {}), a cycle,
 * and nesting deeper than MAX_RESULT_DEPTH. The output is then given to `canonicalize`.
 */
export function toJsonData(value: unknown): unknown {
  // The walk's path and ancestor set, kept between calls (a Set and an array per call were most
  // of this walk's allocation for an ordinary result); a toJSON that calls back into this while
  // a walk runs gets its own.
  const own = scratch;
  if (own === undefined) return convert(value, "", [], 0, new Set(), undefined);
  scratch = undefined;
  try {
    return convert(value, "", own.path, 0, own.ancestors, undefined);
  } finally {
    // A walk that threw leaves its path behind; every walk takes its ancestors out as it leaves them.
    if (own.path.length !== 0) own.path.length = 0;
    scratch = own;
  }
}

/**
 * `canonicalizeAndParse(toJsonData(value))`, the same text and parse and the same errors, with the
 * same reads of `value` in the same order: when the object toJsonData makes of `value` has only
 * JSON scalars as members, its text and parse are made from the members the walk kept
 * (canonical.ts, flatMemberTexts), instead of listing and reading its copy again. A
 * dispatch's result is usually such an object.
 * @internal
 */
export function jsonDataTexts(value: unknown): { text: string; parsed: JsonValue | undefined } {
  const own = scratch;
  if (own === undefined) return canonicalizeAndParse(convert(value, "", [], 0, new Set(), undefined));
  scratch = undefined;
  let data: unknown;
  try {
    own.count = 0;
    own.flat = true;
    data = convert(value, "", own.path, 0, own.ancestors, own);
    if (own.flat && own.count <= FLAT_MEMBERS_LIMIT && typeof data === "object" && data !== null && !Array.isArray(data)) {
      const texts = flatMemberTexts(own.names, own.values, own.count);
      if (texts !== undefined) return texts;
    }
  } finally {
    if (own.path.length !== 0) own.path.length = 0;
    // Nothing of this result is kept past the call.
    for (let i = 0; i < own.count && i < FLAT_MEMBERS_LIMIT; i++) {
      own.names[i] = "";
      own.values[i] = undefined;
    }
    own.count = 0;
    scratch = own;
  }
  return canonicalizeAndParse(data);
}

/** What the walk of jsonDataTexts keeps of the root object's members: the first FLAT_MEMBERS_LIMIT names and values. */
interface RootMembers {
  /** Kept members of the root object (an undefined, function or symbol member is not kept). */
  count: number;
  /** Every kept member was a string, number, boolean or null, and the root was an object, not an array. */
  flat: boolean;
  names: string[];
  values: unknown[];
}

/** Members up to which jsonDataTexts writes the text from the kept members (flatMemberTexts sorts by insertion). */
const FLAT_MEMBERS_LIMIT = 16;

/** The path, ancestor set and root members toJsonData and jsonDataTexts lend their walk, when no walk holds them. */
let scratch: ({ path: (string | number)[]; ancestors: Set<object> } & RootMembers) | undefined = {
  path: [],
  ancestors: new Set(),
  count: 0,
  flat: true,
  names: new Array<string>(FLAT_MEMBERS_LIMIT).fill(""),
  values: new Array<unknown>(FLAT_MEMBERS_LIMIT).fill(undefined),
};

/**
 * `path` holds the member names and indices from the root to `value`; the JSON Pointer text is
 * built from it only when an error reports it (building one per member was most of this walk's
 * allocation for an ordinary result).
 */
function convert(
  value: unknown,
  holderKey: string,
  path: (string | number)[],
  depth: number,
  ancestors: Set<object>,
  /** The root's walk of jsonDataTexts: where the root object's kept members go. */
  root: RootMembers | undefined,
): unknown {
  let current: unknown = value;
  if (typeof current === "object" && current !== null) {
    const toJSON = read(current, "toJSON", path);
    if (typeof toJSON === "function") {
      try {
        current = (toJSON as (key: string) => unknown).call(current, holderKey);
      } catch (cause) {
        throw new CanonicalizationError("unreadable", pointer(path), `toJSON() threw: ${describe(cause)}`);
      }
    }
  }
  switch (typeof current) {
    case "string":
    case "boolean":
      return current;
    case "number":
      if (!Number.isFinite(current)) {
        throw new CanonicalizationError("non_finite_number", pointer(path), `${String(current)} has no JSON form`);
      }
      return current;
    case "bigint":
      throw new CanonicalizationError("unsupported_type", pointer(path), "a bigint is not JSON");
    case "undefined":
    case "function":
    case "symbol":
      return undefined; // the caller drops it (object member) or writes null (array element)
    case "object":
      break;
  }
  if (current === null) return null;
  const obj = current as object;
  if (depth >= MAX_RESULT_DEPTH) {
    throw new CanonicalizationError("too_deep", pointer(path), `nested deeper than ${MAX_RESULT_DEPTH} levels`);
  }
  // A Proxy's traps answer these (getPrototypeOf for instanceof; isArray throws for a revoked one):
  // one that throws is an unreadable value, as a throwing getter is, never a foreign error that would
  // leave a run that happened unrecorded.
  let unsupported: string | undefined;
  let isArray: boolean;
  try {
    if (
      obj instanceof Map ||
      obj instanceof Set ||
      obj instanceof WeakMap ||
      obj instanceof WeakSet ||
      ArrayBuffer.isView(obj) ||
      obj instanceof ArrayBuffer
    ) {
      unsupported = kindOf(obj);
    }
    isArray = Array.isArray(obj);
  } catch (cause) {
    throw new CanonicalizationError("unreadable", pointer(path), `its type cannot be read: ${describe(cause)}`);
  }
  if (unsupported !== undefined) {
    throw new CanonicalizationError("unsupported_type", pointer(path), `a ${unsupported} has no JSON form (JSON.stringify writes {})`);
  }
  if (ancestors.has(obj)) throw new CanonicalizationError("cycle", pointer(path), "the value contains a cycle");
  ancestors.add(obj);
  try {
    if (isArray) {
      if (root !== undefined) root.flat = false;
      // Read once, as any member is: a proxy's get trap answers it too.
      const length = read(obj, "length", path);
      // An array's length is at most 2^32 - 1; a proxy that claims more would make `new Array` throw.
      if (typeof length !== "number" || !Number.isInteger(length) || length < 0 || length > 0xffff_ffff) {
        throw new CanonicalizationError("unreadable", pointer(path), `its length reads ${describe(length)}`);
      }
      const out: unknown[] = new Array(length);
      for (let i = 0; i < length; i++) {
        const element = read(obj, String(i), path);
        path.push(i);
        const item = convert(element, String(i), path, depth + 1, ancestors, undefined);
        path.pop();
        out[i] = item === undefined ? null : item;
      }
      return out;
    }
    const out: Record<string, unknown> = {};
    let names: string[];
    try {
      names = Object.keys(obj);
    } catch (cause) {
      throw new CanonicalizationError("unreadable", pointer(path), `its members cannot be listed: ${describe(cause)}`);
    }
    for (const name of names) {
      path.push(name);
      const member = convert(read(obj, name, path), name, path, depth + 1, ancestors, undefined);
      path.pop();
      if (member === undefined) continue;
      if (root !== undefined) {
        if (typeof member === "object" && member !== null) root.flat = false;
        else if (root.count < FLAT_MEMBERS_LIMIT) {
          root.names[root.count] = name;
          root.values[root.count] = member;
        }
        root.count++;
      }
      // defineProperty for "__proto__": an own member (JSON.parse makes one, JSON.stringify writes
      // it); assigning it would set the copy's prototype instead and lose it.
      if (name === "__proto__") Object.defineProperty(out, name, { value: member, enumerable: true, writable: true, configurable: true });
      else out[name] = member;
    }
    return out;
  } finally {
    ancestors.delete(obj);
  }
}

/** A class instance's constructor name, for a message; never throws (a proxy's get trap may). */
function kindOf(obj: object): string {
  try {
    return (obj as { constructor?: { name?: string } }).constructor?.name ?? "object";
  } catch {
    return "object";
  }
}

/** RFC 6901 JSON Pointer of a path: "~" is written "~0" and "/" is written "~1". */
function pointer(path: readonly (string | number)[]): string {
  let text = "";
  for (const token of path) text += `/${typeof token === "number" ? String(token) : token.replace(/~/g, "~0").replace(/\//g, "~1")}`;
  return text;
}

function read(obj: object, name: string, path: readonly (string | number)[]): unknown {
  try {
    return (obj as Record<string, unknown>)[name];
  } catch (cause) {
    throw new CanonicalizationError("unreadable", pointer(path), `reading it threw: ${describe(cause)}`);
  }
}

function describe(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "an unprintable value";
  }
}
