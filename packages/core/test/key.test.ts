import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalize, deriveKey, isDispatchOnceError, keyMaterial } from "../src/index.js";

const base = { conversationId: "conv_01", turnIndex: 3, name: "send_payment", ordinal: 0 };

/** The same JSON value with its object members in another order (what a retry's model output does). */
function reorder(value: unknown, rng: () => number): unknown {
  if (Array.isArray(value)) return value.map((v) => reorder(v, rng));
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value);
    for (let i = entries.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [entries[i], entries[j]] = [entries[j]!, entries[i]!];
    }
    return Object.fromEntries(entries.map(([k, v]) => [k, reorder(v, rng)]));
  }
  return value;
}

const jsonArgs = fc.jsonValue({ noUnicodeString: false }).filter((v) => !Object.is(v, -0));

describe("deriveKey", () => {
  it("KEY-1 is 32 lowercase hex digits of SHA-256 over the material", () => {
    const key = deriveKey({ ...base, args: { payee: "acme", amount: 100 } });
    expect(key).toMatch(/^[0-9a-f]{32}$/);
    expect(keyMaterial({ ...base, args: { payee: "acme", amount: 100 } })).toBe(
      'conv_01|3|send_payment|0|{"amount":100,"payee":"acme"}',
    );
  });

  it("KEY-5 is invariant under member order and serialisation of the arguments", () => {
    fc.assert(
      fc.property(jsonArgs, fc.integer({ min: 0, max: 2 ** 31 }), fc.integer({ min: 0, max: 8 }), (args, seed, indent) => {
        const rng = mulberry32(seed);
        // Serialised with whitespace and re-parsed, then reordered: the same logical arguments.
        const roundTripped = JSON.parse(JSON.stringify(args, null, indent));
        const shuffled = reorder(roundTripped, rng);
        expect(deriveKey({ ...base, args: shuffled })).toBe(deriveKey({ ...base, args }));
      }),
    );
  });

  it("KEY-1 differs when any component differs", () => {
    const args = { payee: "acme", amount: 100 };
    const key = deriveKey({ ...base, args });
    fc.assert(
      fc.property(
        fc.oneof(
          fc.record({ conversationId: fc.stringMatching(/^[A-Za-z0-9_.:~-]{1,40}$/) }),
          fc.record({ turnIndex: fc.nat() }),
          fc.record({ name: fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/) }),
          fc.record({ ordinal: fc.nat() }),
          fc.record({ args: jsonArgs }),
        ),
        (change) => {
          const changed = { ...base, args, ...change };
          fc.pre(canonicalize(changed.args) !== canonicalize(args) || Object.entries(change).some(([k, v]) => (base as any)[k] !== v));
          expect(deriveKey(changed)).not.toBe(key);
        },
      ),
    );
  });

  it("KEY-7 the material splits back into its components at the first four separators", () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[A-Za-z0-9_.:~-]{1,20}$/),
        fc.nat(),
        fc.stringMatching(/^[A-Za-z0-9_-]{1,20}$/),
        fc.nat(),
        jsonArgs,
        (conversationId, turnIndex, name, ordinal, args) => {
          const material = keyMaterial({ conversationId, turnIndex, name, ordinal, args });
          const parts = material.split("|");
          expect(parts.slice(0, 4)).toEqual([conversationId, String(turnIndex), name, String(ordinal)]);
          expect(parts.slice(4).join("|")).toBe(canonicalize(args));
        },
      ),
    );
  });

  it("KEY-2..KEY-4 reject components outside their alphabets with invalid_key_input", () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ conversationId: "a|b" }, "conversationId"],
      [{ conversationId: "" }, "conversationId"],
      [{ conversationId: "x".repeat(257) }, "conversationId"],
      [{ name: "send payment" }, "name"],
      [{ name: "x".repeat(65) }, "name"],
      [{ turnIndex: -1 }, "turnIndex"],
      [{ turnIndex: 1.5 }, "turnIndex"],
      [{ turnIndex: 2 ** 53 }, "turnIndex"],
      [{ ordinal: Number.NaN }, "ordinal"],
      [{ ordinal: "0" }, "ordinal"],
    ];
    for (const [change, field] of cases) {
      let caught: unknown;
      try {
        deriveKey({ ...base, args: {}, ...change } as never);
      } catch (error) {
        caught = error;
      }
      expect(isDispatchOnceError(caught, "invalid_key_input"), `${JSON.stringify(change)} must be refused`).toBe(true);
      expect(caught).toMatchObject({ field });
    }
  });

  it("KEY-9 the provider's call id has no way in: two responses' calls share a key", () => {
    // The key input has no call-id field at all; a call id smuggled into args would change it.
    expect(deriveKey({ ...base, args: { a: 1 } })).toBe(deriveKey({ ...base, args: { a: 1 } }));
    expect(deriveKey({ ...base, args: { a: 1, id: "toolu_1" } })).not.toBe(deriveKey({ ...base, args: { a: 1, id: "toolu_2" } }));
  });
});

describe("canonicalize", () => {
  it("KEY-6 rejects values with no JSON form, with a problem and a JSON Pointer", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const cases: [unknown, string, string][] = [
      [{ a: Number.NaN }, "non_finite_number", "/a"],
      [{ a: [1, Number.POSITIVE_INFINITY] }, "non_finite_number", "/a/1"],
      [{ s: "\ud800" }, "lone_surrogate", "/s"],
      [{ "\udc00": 1 }, "lone_surrogate", "/\udc00"],
      [[undefined], "unsupported_type", "/0"],
      [undefined, "unsupported_type", ""],
      [{ n: 10n }, "unsupported_type", "/n"],
      [{ d: new Date(0) }, "unsupported_type", "/d"],
      [{ m: new Map() }, "unsupported_type", "/m"],
      [{ f: () => 1 }, "unsupported_type", "/f"],
      [{ "a/b": { "c~d": Number.NaN } }, "non_finite_number", "/a~1b/c~0d"],
      [cyclic, "cycle", "/self"],
    ];
    for (const [value, problem, path] of cases) {
      let caught: unknown;
      try {
        canonicalize(value);
      } catch (error) {
        caught = error;
      }
      expect(isDispatchOnceError(caught, "not_canonicalizable"), `${problem} at ${path}`).toBe(true);
      expect(caught).toMatchObject({ problem, path });
    }
  });

  it("KEY-6 treats an undefined member as absent, and -0 as 0", () => {
    expect(canonicalize({ b: undefined, a: -0 })).toBe('{"a":0}');
  });

  it("KEY-5 agrees with JSON: the canonical text parses back to the value JSON.stringify keeps", () => {
    fc.assert(
      fc.property(jsonArgs, (value) => {
        // JSON has no -0: both serialisations turn a nested -0 into 0.
        expect(JSON.parse(canonicalize(value))).toEqual(JSON.parse(JSON.stringify(value)));
      }),
    );
  });

  it("KEY-5 is idempotent: canonicalising canonical text's value changes nothing", () => {
    fc.assert(
      fc.property(jsonArgs, (value) => {
        const once = canonicalize(value);
        expect(canonicalize(JSON.parse(once))).toBe(once);
      }),
    );
  });
});

/** A small seeded PRNG, so a failing shuffle is reproducible from fast-check's seed. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
