import { createHash } from "node:crypto";

/**
 * Canonical JSON with object members sorted by name and no whitespace, so that two requests
 * carrying the same values fingerprint identically however the client ordered its keys.
 * Members whose value is undefined are absent (as in JSON.stringify). The inputs here are
 * zod-validated request bodies, so only plain JSON data reaches this function.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") {
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError(`value of type ${typeof value} has no JSON form`);
    return text;
  }
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v ?? null)).join(",")}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
}

/** sha256 (hex) of the canonical JSON: what the server compares to tell "same payload" from "different". */
export function fingerprint(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value)).digest("hex");
}
