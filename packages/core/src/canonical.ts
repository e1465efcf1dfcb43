import { CanonicalizationError, type CanonicalizationProblem } from "./errors/index.js";

/** A value that has a canonical JSON form. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * Deepest nesting of arrays and objects that `canonicalize` accepts (spec KEY-6): `[]` and `{}`
 * are at depth 1, and a value with more than this many containers around it is refused with
 * problem `too_deep`, never a stack overflow.
 *
 * Why 512: it is far beyond any tool schema (they nest a handful of levels), and well below the
 * depth at which the JSON peers that read the same arguments stop by default, so whatever this
 * accepts they can parse too, even inside a few levels of envelope (a vector file, a log record,
 * a stored request): Python's json module (the reference implementation and the chapter's
 * language) fails from 996 levels at its default recursion limit, Jackson at 1000. PHP's
 * json_decode default is 512 itself. Peers with a lower default (System.Text.Json 64,
 * serde_json 128) must raise it to implement KEY-6.
 */
export const MAX_CANONICAL_DEPTH = 512;

/**
 * RFC 8785 (JSON Canonicalization Scheme) serialisation.
 *
 * - Object members are sorted by their names' UTF-16 code units (RFC 8785 §3.2.3),
 *   which is what Array.prototype.sort does for strings.
 * - Numbers use ECMAScript's Number-to-String (RFC 8785 §3.2.2.3); -0 becomes 0.
 * - Strings are escaped as JSON.stringify escapes well-formed strings (§3.2.2.2).
 *
 * Rejected with CanonicalizationError (spec KEY-6), with a JSON Pointer to the value:
 * - `non_finite_number`: NaN and ±Infinity;
 * - `lone_surrogate`: a string or member name with an unpaired surrogate;
 * - `unsupported_type`: undefined at the root or in an array (a hole in a sparse array too),
 *   bigint, symbol, function, and any object that is not a plain object or array (Date, Map,
 *   class instances);
 * - `cycle`: a value that contains itself;
 * - `too_deep`: more than MAX_CANONICAL_DEPTH nested arrays and objects;
 * - `hidden_member`: a member JSON.stringify would silently drop, so that two different values
 *   would share a text: a symbol-keyed or non-enumerable own member of an object, or a named
 *   (non-index) property of an array. For a symbol key the path is the object's own;
 * - `unreadable`: reading the value threw (a throwing getter, a revoked proxy).
 * An object member whose value is undefined is absent, as JSON.stringify and TypeScript
 * optional properties treat it. Objects with a null prototype are plain objects.
 *
 * The walk is iterative (an explicit stack, so no input can overflow the call stack) and builds
 * a JSON Pointer only when it reports an error.
 */
export function canonicalize(value: unknown): string {
  // Most values canonicalized on the dispatch path are one flat object of scalars (a tool's
  // arguments, its result): written directly, without the walk's stacks. Anything else goes
  // to the walk, which also raises every error; an object whose members were already read
  // goes as a copy of what was read, so that no getter is read twice.
  if (typeof value === "object" && value !== null) {
    const flat = flatObjectText(value, false);
    if (typeof flat === "string") return flat;
    if (flat !== undefined) return walk(flat.copy, value);
  }
  return walk(value, undefined);
}

/**
 * `canonicalize(value)` as `text`, and as `parsed` what `JSON.parse(text)` gives when the value
 * is a flat object of scalars, made from the members already read (undefined otherwise: parse
 * the text). The dispatcher hands a result back as the parse of its stored text (DISPATCH-5),
 * and parsing it again was a measurable share of its CPU.
 * @internal
 */
export function canonicalizeAndParse(value: unknown): { text: string; parsed: JsonValue | undefined } {
  if (typeof value === "object" && value !== null) {
    parsedFlat = undefined;
    const flat = flatObjectText(value, true);
    if (typeof flat === "string") {
      const parsed = parsedFlat;
      parsedFlat = undefined;
      return { text: flat, parsed };
    }
    if (flat !== undefined) return { text: walk(flat.copy, value), parsed: undefined };
  }
  return { text: walk(value, undefined), parsed: undefined };
}

/**
 * Where flatObjectText leaves the parse of the text it returns, when asked to. Written after
 * every member was read (no getter runs after it), and read by the caller at once.
 */
let parsedFlat: { [key: string]: JsonValue } | undefined;

/** What JSON.parse makes of flatText(sortedNames, values): the members in that order, -0 as 0. */
function parseOfFlat(sortedNames: readonly string[], values: readonly unknown[]): { [key: string]: JsonValue } {
  const out: { [key: string]: JsonValue } = {};
  for (let i = 0; i < sortedNames.length; i++) {
    const member = values[i];
    if (member === undefined) continue;
    const value = (member === 0 ? 0 : member) as JsonValue;
    const name = sortedNames[i]!;
    // defineProperty for "__proto__": JSON.parse makes it an own member; assigning it would set a prototype.
    if (name === "__proto__") Object.defineProperty(out, name, { value, enumerable: true, writable: true, configurable: true });
    else out[name] = value;
  }
  return out;
}

/**
 * The JCS walk. `root`, when given, is the object whose copy `value` is: meeting it below the
 * copy is a cycle at the copy, exactly as meeting `value` itself would be.
 */
function walk(value: unknown, root: object | undefined): string {
  // The open containers, outermost first: the container, its sorted member names (undefined for
  // an array), the index of the child being written (so that a path can be rebuilt on error),
  // and a count: for an array its length (read once, when it was checked), for an object how many
  // members have been written (a comma precedes every one after the first).
  const containers: object[] = [];
  const names: (string[] | undefined)[] = [];
  const current: number[] = [];
  const counts: number[] = [];
  // Ancestor lookup is a scan of `containers` while the nesting is shallow (every real payload);
  // past ANCESTOR_SCAN_LIMIT a Set keeps a deep and wide value linear.
  let ancestors: Set<object> | undefined;
  // The text so far: `out`, after the flat `chunks`. Appending to one string builds a rope of
  // millions of nodes for a large value, which the garbage collector then traces again and
  // again; moving it to `chunks` now and then keeps large values linear.
  const chunks: string[] = [];
  let out = "";
  let next: unknown = value;
  for (;;) {
    // 1. Write `next`: a scalar in full, or a container's opening bracket.
    if (next === null) {
      out += "null";
    } else {
      switch (typeof next) {
        case "string":
          if (!next.isWellFormed()) {
            throw fail("lone_surrogate", containers, names, current, "a string with a lone surrogate is not valid Unicode");
          }
          out += JSON.stringify(next);
          break;
        case "number":
          if (!Number.isFinite(next)) {
            throw fail("non_finite_number", containers, names, current, `${String(next)} has no JSON form`);
          }
          out += next === 0 ? "0" : String(next); // -0 === 0: both are written 0
          break;
        case "boolean":
          out += next ? "true" : "false";
          break;
        case "object": {
          const obj = next;
          let isArray: boolean;
          let proto: unknown;
          try {
            isArray = Array.isArray(obj);
            proto = isArray ? null : Object.getPrototypeOf(obj);
          } catch (cause) {
            throw fail("unreadable", containers, names, current, `reading it threw: ${describeError(cause)}`, cause);
          }
          if (proto !== null && proto !== Object.prototype) {
            throw fail("unsupported_type", containers, names, current, `a ${kindOf(obj)} is not plain JSON data`);
          }
          if ((ancestors !== undefined ? ancestors.has(obj) : containers.includes(obj)) || (obj === root && containers.length > 0)) {
            throw fail("cycle", containers, names, current, "the value contains a cycle");
          }
          if (containers.length >= MAX_CANONICAL_DEPTH) {
            throw fail(
              "too_deep",
              containers,
              names,
              current,
              `arrays and objects are nested deeper than ${MAX_CANONICAL_DEPTH} levels`,
            );
          }
          let memberNames: string[] | undefined;
          let mark: number;
          if (isArray) {
            mark = arrayLength(obj as unknown[], containers, names, current);
            out += "[";
          } else {
            memberNames = objectMemberNames(obj, containers, names, current);
            out += "{";
            mark = 0;
          }
          containers.push(obj);
          names.push(memberNames);
          current.push(-1);
          counts.push(mark);
          if (ancestors !== undefined) ancestors.add(obj);
          else if (containers.length > ANCESTOR_SCAN_LIMIT) ancestors = new Set(containers);
          break;
        }
        default:
          throw fail("unsupported_type", containers, names, current, `a ${typeof next} is not JSON`);
      }
    }

    if (out.length > CHUNK_LENGTH) {
      chunks.push(flat(out));
      out = "";
    }

    // 2. Find the next value to write, closing every container that has no child left.
    for (;;) {
      const top = containers.length - 1;
      if (top < 0) return chunks.length === 0 ? out : chunks.join("") + out;
      const container = containers[top]!;
      const members = names[top];
      let index = current[top]! + 1;
      if (members === undefined) {
        if (index < counts[top]!) {
          current[top] = index;
          if (index > 0) out += ",";
          next = readMember(container, index, containers, names, current);
          if (next === undefined) {
            throw fail("unsupported_type", containers, names, current, "undefined in an array is not JSON");
          }
          break;
        }
        out += "]";
      } else {
        let found = false;
        for (; index < members.length; index++) {
          current[top] = index;
          const member = readMember(container, members[index]!, containers, names, current);
          if (member === undefined) continue; // an undefined member is absent (KEY-6)
          const name = members[index]!;
          if (!name.isWellFormed()) {
            throw fail("lone_surrogate", containers, names, current, "a member name with a lone surrogate is not valid Unicode");
          }
          if (counts[top]!++ !== 0) out += ",";
          out += JSON.stringify(name);
          out += ":";
          next = member;
          found = true;
          break;
        }
        if (found) break;
        out += "}";
      }
      containers.pop();
      names.pop();
      current.pop();
      counts.pop();
      if (ancestors !== undefined) ancestors.delete(container);
    }
  }
}

/**
 * The canonical text of a plain object whose members are all strings, finite numbers, booleans,
 * null or undefined (absent), with nothing JSON.stringify would drop; undefined for anything
 * else (the caller then walks the value, and reports what is wrong with it). Never throws: a
 * getter or proxy that throws sends the value to the walk too.
 */
function flatObjectText(obj: object, parse: boolean): string | { copy: object } | undefined {
  let keys: string[];
  let proto: unknown;
  try {
    if (Array.isArray(obj)) return undefined;
    proto = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) return undefined;
    keys = Object.keys(obj);
    if (keys.length > FLAT_MAX_MEMBERS) return undefined;
    if (Object.getOwnPropertyNames(obj).length !== keys.length || Object.getOwnPropertySymbols(obj).length !== 0) return undefined;
  } catch {
    return undefined; // nothing was read yet: the walk reports it
  }
  sortNames(keys);
  // From here every member is read exactly once, in the walk's order; if the object is not flat
  // after all, the walk gets a copy holding what was read (a read that threw throws again there).
  const values: unknown[] = new Array(keys.length);
  let threw: (true | undefined)[] | undefined;
  let flat = true;
  for (let i = 0; i < keys.length; i++) {
    try {
      const member = (obj as Record<string, unknown>)[keys[i]!];
      values[i] = member;
      if (flat && !isFlatScalar(member, keys[i]!)) flat = false;
    } catch (cause) {
      values[i] = cause;
      (threw ??= [])[i] = true;
      flat = false;
    }
  }
  if (!flat) {
    const copy: Record<string, unknown> = proto === null ? (Object.create(null) as Record<string, unknown>) : {};
    for (let i = 0; i < keys.length; i++) {
      if (threw?.[i] === true) {
        const cause = values[i];
        Object.defineProperty(copy, keys[i]!, {
          enumerable: true,
          configurable: true,
          get() {
            throw cause;
          },
        });
      } else {
        // defineProperty, not assignment: a member named "__proto__" must stay an own member
        // (assigning it would set the copy's prototype instead).
        Object.defineProperty(copy, keys[i]!, { value: values[i], enumerable: true, writable: true, configurable: true });
      }
    }
    return { copy };
  }
  if (parse) parsedFlat = parseOfFlat(keys, values);
  return flatText(keys, values);
}

/**
 * The canonical text of an object whose members, named by `sortedNames` in JCS order, have
 * the flat scalar values `values` (isFlatScalar holds for each; undefined is absent).
 */
function flatText(sortedNames: readonly string[], values: readonly unknown[]): string {
  let out = "{";
  for (let i = 0; i < sortedNames.length; i++) {
    const member = values[i];
    if (member === undefined) continue; // an undefined member is absent (KEY-6)
    out += `${out.length === 1 ? "" : ","}${quotedName(sortedNames[i]!)}:${scalarText(member)}`;
  }
  // Flat, not a rope of every piece: a ledger may keep the text (a stored request or result).
  return flat(out + "}");
}

/** A flat scalar's JCS text (isFlatScalar holds, and it is not undefined). */
function scalarText(member: unknown): string {
  if (typeof member === "string") return quoted(member);
  if (typeof member === "number") return member === 0 ? "0" : String(member); // -0 === 0: both are written 0
  if (typeof member === "boolean") return member ? "true" : "false";
  return "null";
}

/**
 * JSON.stringify of a well-formed string: the string in quotes when nothing in it is escaped
 * (no control character, quote or backslash; a well-formed string has no lone surrogate), which
 * is most strings and several times cheaper than the call.
 */
function quoted(text: string): string {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c) return JSON.stringify(text);
  }
  return `"${text}"`;
}

/**
 * quoted() of a member name, remembered: the same few names (a schema's) come back on every
 * call. Bounded in count and in name length, so that a stream of distinct or long names (a
 * hostile input's) cannot make it hold much: at most about 1 MB of names.
 */
function quotedName(name: string): string {
  if (name.length > QUOTED_NAME_MAX_LENGTH) return quoted(name);
  let text = quotedNames.get(name);
  if (text === undefined) {
    text = quoted(name);
    if (quotedNames.size < QUOTED_NAMES_LIMIT) quotedNames.set(name, text);
  }
  return text;
}

const quotedNames = new Map<string, string>();
const QUOTED_NAMES_LIMIT = 4096;
const QUOTED_NAME_MAX_LENGTH = 64;

/**
 * Sorts member names in place by UTF-16 code units, as `Array.prototype.sort` with no comparator
 * does (RFC 8785 §3.2.3). An insertion sort for the handful of names an object usually has:
 * the built-in sort allocates a work array on every call, which was the largest single
 * allocation on the dispatch path.
 * @internal
 */
export function sortNames(names: string[]): string[] {
  if (names.length > INSERTION_SORT_LIMIT) return names.sort();
  for (let i = 1; i < names.length; i++) {
    const name = names[i]!;
    let j = i - 1;
    while (j >= 0 && names[j]! > name) {
      names[j + 1] = names[j]!;
      j--;
    }
    names[j + 1] = name;
  }
  return names;
}

/**
 * sortNames for names that are no more than INSERTION_SORT_LIMIT, moving `values[i]` with
 * `names[i]`; only the first `count` (all by default) are sorted.
 */
function sortNamesWithValues(names: string[], values: unknown[], count: number = names.length): void {
  for (let i = 1; i < count; i++) {
    const name = names[i]!;
    const value = values[i];
    let j = i - 1;
    while (j >= 0 && names[j]! > name) {
      names[j + 1] = names[j]!;
      values[j + 1] = values[j];
      j--;
    }
    names[j + 1] = name;
    values[j + 1] = value;
  }
}

/**
 * `canonicalizeAndParse` of a plain object whose own enumerable members, all data, no symbol,
 * are the first `count` of `names` and `values` (in any order; sorted here, in place), each
 * value a string, a finite number, a boolean or null: the text and the parse, or undefined when
 * they are not all flat scalars (isFlatScalar) or more than INSERTION_SORT_LIMIT (the caller
 * then canonicalizes the object). json-data.ts's jsonDataTexts hands it the members its walk
 * kept of the object it made.
 * @internal
 */
export function flatMemberTexts(names: string[], values: unknown[], count: number): { text: string; parsed: JsonValue } | undefined {
  if (count > INSERTION_SORT_LIMIT) return undefined;
  for (let i = 0; i < count; i++) if (!isFlatScalar(values[i], names[i]!)) return undefined;
  sortNamesWithValues(names, values, count);
  let text = "{";
  const parsed: { [key: string]: JsonValue } = {};
  for (let i = 0; i < count; i++) {
    const name = names[i]!;
    const member = values[i];
    text += `${i === 0 ? "" : ","}${quotedName(name)}:${scalarText(member)}`;
    // As parseOfFlat: -0 parses as 0, and "__proto__" is an own member.
    const value = (member === 0 ? 0 : member) as JsonValue;
    if (name === "__proto__") Object.defineProperty(parsed, name, { value, enumerable: true, writable: true, configurable: true });
    else parsed[name] = value;
  }
  return { text: flat(text + "}"), parsed };
}

/** The texts a write's validated arguments are stored and keyed by (see flatArgumentTexts). */
export interface ArgumentTexts {
  /** `canonicalize(args)`. */
  canonical: string;
  /** `canonicalize` of the projection of args on the identity fields (every member when there are none). */
  identity: string;
  /** `JSON.stringify(args)`: the members in their own order. */
  ordered: string;
  /** A member is a number beyond 2^53 - 1 either way (IDENT-7: the dispatcher then walks the arguments to say which). */
  inexact: boolean;
  /** A member of the identity projection is such a number (`inexact` when there are no identity fields). */
  inexactIdentity: boolean;
}

/**
 * The three texts the dispatcher makes of a call's validated arguments, from one read of each
 * member, when the arguments are a plain object of at most INSERTION_SORT_LIMIT flat scalars
 * (isFlatScalar) with nothing hidden and no `toJSON` that JSON.stringify would call; undefined
 * for anything else, and the caller then makes each text the general way. Each text is exactly
 * what the general way makes: a member absent or undefined is left out of all three, an identity
 * field that is not an own member must read as undefined (else undefined is returned, as it is
 * for an identity field named "__proto__"), and
 * JSON.stringify writes a flat scalar as JCS does (strings alike, `-0` as `0`).
 * @internal
 */
export function flatArgumentTexts(args: object, fields: readonly string[] | undefined): ArgumentTexts | undefined {
  let keys: string[];
  let values: unknown[];
  let inexact = false;
  let inexactIdentity = false;
  try {
    if (Array.isArray(args)) return undefined;
    const proto = Object.getPrototypeOf(args) as unknown;
    if (proto !== Object.prototype && proto !== null) return undefined;
    if (proto !== null && "toJSON" in Object.prototype) return undefined;
    keys = Object.keys(args);
    if (keys.length > INSERTION_SORT_LIMIT) return undefined;
    if (Object.getOwnPropertyNames(args).length !== keys.length || Object.getOwnPropertySymbols(args).length !== 0) return undefined;
    values = new Array(keys.length);
    for (let i = 0; i < keys.length; i++) {
      const member = (args as Record<string, unknown>)[keys[i]!];
      if (!isFlatScalar(member, keys[i]!)) return undefined;
      values[i] = member;
      if (typeof member === "number" && (member > Number.MAX_SAFE_INTEGER || member < -Number.MAX_SAFE_INTEGER)) {
        inexact = true;
        if (fields === undefined || fields.includes(keys[i]!)) inexactIdentity = true;
      }
    }
    if (fields !== undefined) {
      for (const field of fields) {
        // The general way assigns the projection's members, and assigning "__proto__" sets a
        // prototype instead: that name is left to it, so that both ways always agree.
        if (field === "__proto__") return undefined;
        if (!keys.includes(field) && (args as Record<string, unknown>)[field] !== undefined) return undefined;
      }
    }
  } catch {
    return undefined; // the general way reports it
  }
  // Each member's text once (`"name":value`, or undefined when absent), then the three joins.
  for (let i = 0; i < keys.length; i++) {
    const member = values[i];
    values[i] = member === undefined ? undefined : `${quotedName(keys[i]!)}:${scalarText(member)}`;
  }
  const ordered = joinMembers(values as (string | undefined)[]);
  sortNamesWithValues(keys, values);
  const canonical = joinMembers(values as (string | undefined)[]);
  if (fields === undefined) return { canonical, identity: canonical, ordered, inexact, inexactIdentity };
  let all = true;
  for (let i = 0; i < keys.length; i++) {
    if (values[i] !== undefined && !fields.includes(keys[i]!)) {
      values[i] = undefined;
      all = false;
    }
  }
  return { canonical, identity: all ? canonical : joinMembers(values as (string | undefined)[]), ordered, inexact, inexactIdentity };
}

/** An object's text from its members' texts (`"name":value`), in order; undefined ones are absent. */
function joinMembers(members: readonly (string | undefined)[]): string {
  let out = "{";
  for (let i = 0; i < members.length; i++) {
    const member = members[i];
    if (member !== undefined) out += out.length === 1 ? member : `,${member}`;
  }
  return flat(out + "}"); // as in flatText
}

/** Names up to which sortNames sorts by insertion (quadratic, so only for small objects). */
const INSERTION_SORT_LIMIT = 16;

/** A member the flat path writes itself: a well-formed string (and name), a finite number, a boolean, null, or undefined (absent). */
function isFlatScalar(member: unknown, name: string): boolean {
  if (!name.isWellFormed()) return false;
  switch (typeof member) {
    case "undefined":
    case "boolean":
      return true;
    case "string":
      return member.isWellFormed();
    case "number":
      return Number.isFinite(member);
    case "object":
      return member === null;
    default:
      return false;
  }
}

/** Members up to which the flat path is tried (a tool's arguments have a handful). */
const FLAT_MAX_MEMBERS = 64;

/** Output length at which `out` moves to `chunks` (a few times a typical payload's size). */
const CHUNK_LENGTH = 8192;

/**
 * Flattens a rope string in place, so that its nodes can be collected: ToNumber reads the
 * characters, and V8 flattens a rope to read it (measured: a 100,000-object array is about 6 times
 * slower without it).
 */
function flat(text: string): string {
  void ((text as unknown as number) | 0);
  return text;
}

/** Nesting up to which a linear scan of the open containers finds a cycle faster than a Set. */
const ANCESTOR_SCAN_LIMIT = 32;

/** The sorted names of an object's members; refuses a member JSON.stringify would drop. */
function objectMemberNames(obj: object, containers: object[], names: (string[] | undefined)[], current: number[]): string[] {
  let keys: string[];
  let hidden: boolean;
  try {
    keys = Object.keys(obj);
    // Object.keys is the enumerable subset of the string-keyed own members: equal counts and no
    // symbol mean nothing is hidden, the only case worth being fast for. (These two are several
    // times cheaper than one Reflect.ownKeys in V8.)
    hidden = Object.getOwnPropertyNames(obj).length !== keys.length || Object.getOwnPropertySymbols(obj).length !== 0;
  } catch (cause) {
    throw fail("unreadable", containers, names, current, `listing its members threw: ${describeError(cause)}`, cause);
  }
  if (hidden) {
    let own: (string | symbol)[];
    try {
      own = Reflect.ownKeys(obj);
    } catch (cause) {
      throw fail("unreadable", containers, names, current, `listing its members threw: ${describeError(cause)}`, cause);
    }
    for (const key of own) {
      if (typeof key === "symbol") {
        throw fail("hidden_member", containers, names, current, `a member keyed by ${describeSymbol(key)} has no JSON form`);
      }
      let enumerable: boolean;
      try {
        enumerable = Object.prototype.propertyIsEnumerable.call(obj, key);
      } catch (cause) {
        throw fail("unreadable", containers, names, current, `listing its members threw: ${describeError(cause)}`, cause);
      }
      if (!enumerable) {
        throw fail("hidden_member", containers, names, current, "a non-enumerable member has no JSON form", undefined, key);
      }
    }
  }
  return sortNames(keys);
}

/**
 * An array's length; refuses an array with a member JSON.stringify would drop (a named
 * property, a symbol key) or a hole. A dense array without extras has exactly its indices, in
 * order, then "length".
 */
function arrayLength(array: unknown[], containers: object[], names: (string[] | undefined)[], current: number[]): number {
  let length: number;
  let own: (string | symbol)[];
  try {
    length = array.length;
    // One call: for an array (its keys are mostly indices) it is cheaper than the two the
    // object check makes. Still one string per index: an exact check has no cheaper way.
    own = Reflect.ownKeys(array);
  } catch (cause) {
    throw fail("unreadable", containers, names, current, `listing its members threw: ${describeError(cause)}`, cause);
  }
  if (own.length === length + 1 && own[length] === "length") return length;
  for (const key of own) {
    if (typeof key === "symbol") {
      throw fail("hidden_member", containers, names, current, `a member keyed by ${describeSymbol(key)} has no JSON form`);
    }
    if (key === "length") continue;
    const index = Number(key);
    if (String(index) === key && Number.isInteger(index) && index >= 0 && index < length) continue;
    throw fail("hidden_member", containers, names, current, "a named property of an array has no JSON form", undefined, key);
  }
  // Every own key is an index or "length", yet there are too few: the array has holes. The
  // element walk would meet the first one as undefined, unless Array.prototype supplies a
  // value for it, so it is refused here.
  for (let i = 0; i < length; i++) {
    let present: boolean;
    try {
      present = Object.prototype.hasOwnProperty.call(array, i);
    } catch (cause) {
      throw fail("unreadable", containers, names, current, `listing its members threw: ${describeError(cause)}`, cause);
    }
    if (!present) {
      throw fail("unsupported_type", containers, names, current, "a hole in an array is not JSON", undefined, String(i));
    }
  }
  return length;
}

function readMember(
  container: object,
  name: string | number,
  containers: object[],
  names: (string[] | undefined)[],
  current: number[],
): unknown {
  try {
    return (container as Record<string | number, unknown>)[name];
  } catch (cause) {
    throw fail("unreadable", containers, names, current, `reading it threw: ${describeError(cause)}`, cause);
  }
}

/**
 * The error for the value being written: its path is rebuilt from the open containers (and
 * `member`, a member of the value itself, when given).
 */
function fail(
  problem: CanonicalizationProblem,
  containers: object[],
  names: (string[] | undefined)[],
  current: number[],
  message: string,
  cause?: unknown,
  member?: string,
): CanonicalizationError {
  let path = "";
  for (let level = 0; level < containers.length; level++) {
    const members = names[level];
    path += `/${members === undefined ? String(current[level]) : pointerToken(members[current[level]!]!)}`;
  }
  if (member !== undefined) path += `/${pointerToken(member)}`;
  const error = new CanonicalizationError(problem, path, message);
  return cause === undefined ? error : withCause(error, cause);
}

/**
 * Keeps what a getter or proxy threw on the typed error, for whoever debugs it, the way
 * `new Error(message, { cause })` keeps it.
 * @internal
 */
export function withCause<E extends Error>(error: E, cause: unknown): E {
  Object.defineProperty(error, "cause", { value: cause, writable: true, configurable: true, enumerable: false });
  return error;
}

/** RFC 6901: "~" is written "~0" and "/" is written "~1". */
function pointerToken(name: string): string {
  return name.replace(/~/g, "~0").replace(/\//g, "~1");
}

/** A class instance's constructor name, for a message; never throws. */
function kindOf(obj: object): string {
  try {
    const name = (obj as { constructor?: { name?: unknown } }).constructor?.name;
    return typeof name === "string" && name !== "" ? name.slice(0, 80) : "object";
  } catch {
    return "object";
  }
}

function describeSymbol(symbol: symbol): string {
  try {
    const description = symbol.description;
    return typeof description === "string" ? `Symbol(${description.slice(0, 80)})` : "a symbol";
  } catch {
    return "a symbol";
  }
}

/**
 * The message of something a getter or proxy threw; never throws itself.
 * @internal
 */
export function describeError(error: unknown): string {
  try {
    if (error instanceof Error) {
      const message = error.message;
      return typeof message === "string" ? message.slice(0, 200) : "an error";
    }
    switch (typeof error) {
      case "string":
        return error.slice(0, 200);
      case "number":
      case "boolean":
      case "bigint":
        return String(error);
      default:
        return `a thrown ${error === null ? "null" : typeof error}`;
    }
  } catch {
    return "an unprintable value";
  }
}
