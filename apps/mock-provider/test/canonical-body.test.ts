import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalBodyText, stableStringify } from "../src/random.js";

// The form the provider used before the one-walk rewrite, kept here as the reference: a body's
// hash (attempt counts, ids, every rendered byte) depends on this text staying the same.
function referenceStable(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(referenceStable).join(",")}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${referenceStable(v)}`).join(",")}}`;
}
function referenceWithoutStream(body: unknown): unknown {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return body;
  const { stream: _stream, ...rest } = body as Record<string, unknown>;
  return rest;
}

// Any JSON, keys and strings over all of UTF-16 (lone surrogates, "__proto__", digits as keys).
const key = fc.oneof(fc.string({ unit: "binary", maxLength: 8 }), fc.constantFrom("__proto__", "stream", "0", "10", "2", "a", "B"));
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.jsonValue({ stringUnit: "binary", maxDepth: 1 }),
    fc.array(tie("value"), { maxLength: 5 }),
    fc.dictionary(key, tie("value"), { maxKeys: 6 }),
  ),
})).value;

describe("the canonical text of a request body", () => {
  it("is the reference form's text for any JSON value, parsed or built", () => {
    fc.assert(
      fc.property(json, (value) => {
        expect(stableStringify(value)).toBe(referenceStable(value));
        const parsed: unknown = JSON.parse(JSON.stringify(value));
        expect(stableStringify(parsed)).toBe(referenceStable(parsed));
      }),
      { numRuns: 500 },
    );
  });

  it("leaves out only the top-level stream, as the copy without it did", () => {
    fc.assert(
      fc.property(fc.dictionary(key, json, { maxKeys: 6 }), fc.option(fc.boolean()), json, (body, stream, nested) => {
        const withStream: Record<string, unknown> = { ...body, nested: { stream: nested, list: [{ stream }] } };
        if (stream !== null) withStream["stream"] = stream;
        expect(canonicalBodyText(withStream)).toBe(referenceStable(referenceWithoutStream(withStream)));
        expect(canonicalBodyText(withStream)).toContain('"stream"'); // the nested ones stay
      }),
      { numRuns: 300 },
    );
  });

  it("orders the keys of objects small and large as the reference does (a few are sorted in place, more by the default sort)", () => {
    fc.assert(
      fc.property(fc.dictionary(key, fc.integer(), { minKeys: 0, maxKeys: 40 }), (record) => {
        expect(stableStringify(record)).toBe(referenceStable(record));
        expect(stableStringify({ outer: record, list: [record] })).toBe(referenceStable({ outer: record, list: [record] }));
      }),
      { numRuns: 300 },
    );
    // Either side of the in-place sort's limit, in reverse UTF-16 order.
    for (const size of [15, 16, 17, 33]) {
      const record = Object.fromEntries(Array.from({ length: size }, (_, i) => [String.fromCharCode(0xffff - i * 997), i]));
      expect(stableStringify(record)).toBe(referenceStable(record));
    }
  });

  it("keeps the reference's answers for values JSON text cannot carry", () => {
    const sparse: unknown[] = [1];
    sparse[3] = 4;
    const cases: unknown[] = [
      undefined,
      [undefined, () => 1, Symbol("s")],
      { a: undefined, b: () => 1, c: [undefined] },
      sparse,
      new Date(0),
      { when: new Date(0), map: new Map([[1, 2]]) },
      -0,
      Number.NaN,
      "stream",
      ["stream", { stream: true }],
      Object.assign(Object.create({ inherited: 1 }) as object, { own: 2 }),
    ];
    for (const value of cases) {
      expect(stableStringify(value)).toBe(referenceStable(value));
      expect(canonicalBodyText(value)).toBe(referenceStable(referenceWithoutStream(value)));
    }
    expect(() => stableStringify({ n: 1n })).toThrow(TypeError);
  });
});
