/**
 * Parsing of the Idempotency-Key request header.
 *
 * draft-ietf-httpapi-idempotency-key-header makes the field an RFC 8941 sf-string
 * (`"abc"`, with `\"` and `\\` the only escapes). Most deployed clients (Stripe's among them)
 * send a bare value instead, so both are accepted and mean the same key:
 * `Idempotency-Key: abc` and `Idempotency-Key: "abc"` name one key.
 *
 * A bare value is 1..255 characters from the RFC 9110 tchar set plus ":", "/", "=", "@"
 * (enough for UUIDs, hex, base64 and base64url). Anything else is malformed: an empty value,
 * whitespace other than the space or tab around the value (a 0xA0 byte is not stripped, so
 * `k\xa0` cannot stand for `k`), a comma, a quoted string that is
 * unterminated, has a bad escape, a non-printable character or trailing text, or a decoded
 * key longer than 255 characters. Two header lines are malformed too; the server counts them in
 * the raw headers because Node joins them with ", " (`"a` and `b"` would read as the key `a, b`).
 */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

export type ParsedIdempotencyKey = { ok: true; key: string } | { ok: false; reason: string };

const BARE_KEY = /^[!#$%&'*+\-.^_`|~0-9A-Za-z:/=@]+$/;

/** RFC 9110 OWS is space and tab only; `String.prototype.trim` would also strip U+00A0 (a 0xA0 byte). */
const OWS_AROUND = /^[ \t]+|[ \t]+$/g;

export function parseIdempotencyKey(raw: string): ParsedIdempotencyKey {
  const value = raw.replace(OWS_AROUND, "");
  if (value.length === 0) return { ok: false, reason: "the header is empty" };
  let key: string;
  if (value.startsWith('"')) {
    const parsed = parseSfString(value);
    if (!parsed.ok) return parsed;
    key = parsed.key;
  } else {
    if (!BARE_KEY.test(value)) {
      return {
        ok: false,
        reason: "a bare key may contain only token characters (letters, digits, !#$%&'*+-.^_`|~:/=@); quote it as an sf-string otherwise",
      };
    }
    key = value;
  }
  if (key.length === 0) return { ok: false, reason: "the key is empty" };
  if (key.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
    return { ok: false, reason: `the key is longer than ${MAX_IDEMPOTENCY_KEY_LENGTH} characters` };
  }
  return { ok: true, key };
}

/** RFC 8941 §4.2.5 parsing of a String, requiring that nothing follows it. */
function parseSfString(value: string): ParsedIdempotencyKey {
  let out = "";
  for (let i = 1; i < value.length; i++) {
    const ch = value[i]!;
    const code = ch.charCodeAt(0);
    if (ch === "\\") {
      const next = value[i + 1];
      if (next !== '"' && next !== "\\") return { ok: false, reason: "an sf-string may only escape \" and \\" };
      out += next;
      i++;
    } else if (ch === '"') {
      if (i !== value.length - 1) return { ok: false, reason: "text follows the closing quote" };
      return { ok: true, key: out };
    } else if (code < 0x20 || code > 0x7e) {
      return { ok: false, reason: "an sf-string may only contain printable ASCII" };
    } else {
      out += ch;
    }
  }
  return { ok: false, reason: "the sf-string is not terminated" };
}

/** Serialise a key as an RFC 8941 sf-string, the form the IETF draft specifies. */
export function formatIdempotencyKey(key: string): string {
  return `"${key.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
}
