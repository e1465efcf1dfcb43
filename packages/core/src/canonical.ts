import { CanonicalizationError } from "./errors.js";

/** A value that has a canonical JSON form. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * RFC 8785 (JSON Canonicalization Scheme) serialisation.
 *
 * - Object members are sorted by their names' UTF-16 code units (RFC 8785 §3.2.3),
 *   which is what Array.prototype.sort does for strings.
 * - Numbers use ECMAScript's Number-to-String (RFC 8785 §3.2.2.3); -0 becomes 0.
 * - Strings are escaped as JSON.stringify escapes well-formed strings (§3.2.2.2).
 *
 * Rejected with CanonicalizationError (spec KEY-6): NaN and ±Infinity, strings or member
 * names with a lone surrogate, cycles, and anything that is not plain JSON data (undefined
 * at the root or in an array, bigint, symbol, function, Date, Map, class instances).
 * An object member whose value is undefined is treated as absent, as JSON.stringify and
 * TypeScript optional properties treat it.
 */
export function canonicalize(value: unknown): string {
  return serialize(value, "", new Set());
}

function serialize(value: unknown, path: string, ancestors: Set<object>): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) {
        throw new CanonicalizationError("non_finite_number", path, `${String(value)} has no JSON form`);
      }
      return Object.is(value, -0) ? "0" : String(value);
    case "string":
      return serializeString(value, path);
    case "object":
      break;
    default:
      throw new CanonicalizationError("unsupported_type", path, `a ${typeof value} is not JSON`);
  }
  const obj = value as object;
  if (ancestors.has(obj)) throw new CanonicalizationError("cycle", path, "the value contains a cycle");
  ancestors.add(obj);
  try {
    if (Array.isArray(obj)) {
      const parts: string[] = [];
      for (let i = 0; i < obj.length; i++) {
        const item: unknown = obj[i];
        if (item === undefined) {
          throw new CanonicalizationError("unsupported_type", `${path}/${i}`, "undefined is not JSON");
        }
        parts.push(serialize(item, `${path}/${i}`, ancestors));
      }
      return `[${parts.join(",")}]`;
    }
    const proto = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      const kind = (obj as { constructor?: { name?: string } }).constructor?.name ?? "object";
      throw new CanonicalizationError("unsupported_type", path, `a ${kind} is not plain JSON data`);
    }
    const record = obj as Record<string, unknown>;
    const names = Object.keys(record).sort();
    const members: string[] = [];
    for (const name of names) {
      const member = record[name];
      if (member === undefined) continue;
      const memberPath = `${path}/${name.replace(/~/g, "~0").replace(/\//g, "~1")}`;
      members.push(`${serializeString(name, memberPath)}:${serialize(member, memberPath, ancestors)}`);
    }
    return `{${members.join(",")}}`;
  } finally {
    ancestors.delete(obj);
  }
}

function serializeString(text: string, path: string): string {
  if (!text.isWellFormed()) {
    throw new CanonicalizationError("lone_surrogate", path, "a string with a lone surrogate is not valid Unicode");
  }
  return JSON.stringify(text);
}
