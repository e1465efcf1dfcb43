import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalJson, fingerprint, formatIdempotencyKey, parseFaultHeader, parseIdempotencyKey } from "../src/index.js";

describe("parseIdempotencyKey", () => {
  it("round-trips every printable-ASCII key through the sf-string form", () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 255 }), (key) => {
        expect(parseIdempotencyKey(formatIdempotencyKey(key))).toEqual({ ok: true, key });
      }),
    );
  });

  it("reads a bare token and its quoted form as the same key", () => {
    const token = fc.string({ unit: fc.constantFrom(..."abcXYZ0189-_.:/=@+~"), minLength: 1, maxLength: 64 });
    fc.assert(
      fc.property(token, (key) => {
        expect(parseIdempotencyKey(key)).toEqual({ ok: true, key });
        expect(parseIdempotencyKey(`"${key}"`)).toEqual({ ok: true, key });
      }),
    );
  });

  it("rejects a quoted value containing a lone backslash or an unescaped quote", () => {
    expect(parseIdempotencyKey('"a\\b"').ok).toBe(false);
    expect(parseIdempotencyKey('"a"b"').ok).toBe(false);
    expect(parseIdempotencyKey('"abc\\"').ok).toBe(false);
  });
});

describe("canonical fingerprint", () => {
  it("ignores member order and undefined members, and distinguishes values", () => {
    expect(canonicalJson({ b: 1, a: { d: [1, "x"], c: null }, u: undefined })).toBe('{"a":{"c":null,"d":[1,"x"]},"b":1}');
    expect(fingerprint({ a: 1, b: 2 })).toBe(fingerprint({ b: 2, a: 1 }));
    expect(fingerprint({ a: 1 })).not.toBe(fingerprint({ a: "1" }));
  });
});

describe("parseFaultHeader", () => {
  it("accepts an outcome name or a JSON spec", () => {
    expect(parseFaultHeader("drop_after_accept")).toEqual({ ok: true, spec: { outcome: "drop_after_accept" } });
    expect(parseFaultHeader('{"latencyMs":820}')).toEqual({ ok: true, spec: { latencyMs: 820 } });
    expect(parseFaultHeader("820").ok).toBe(false);
  });
});
