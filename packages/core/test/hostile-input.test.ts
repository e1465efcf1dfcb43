// Hostile input to key derivation (issue 10): every refusal is a typed error with a stable code,
// never a RangeError, a TypeError, or the raw error of a getter or proxy; and nothing JSON would
// silently drop can make two different inputs share a key.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { MAX_CANONICAL_DEPTH } from "../src/canonical.js";
import {
  Dispatcher,
  MemoryLedger,
  canonicalize,
  defineTool,
  deriveKey,
  isDispatchOnceError,
  keyMaterial,
  type DispatchOnceErrorCode,
} from "../src/index.js";

const base = { conversationId: "conv_01", turnIndex: 3, name: "send_payment", ordinal: 0 };
const payment = { payee: "acct_991", amount: 4200, currency: "EUR", reference: "INV-2024-113" };

/** What `run` throws; fails the test if it returns. */
function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection, but it returned");
}

/** Asserts a typed Dispatch-Once error with `code` and the given details, and returns it. */
function expectTyped(error: unknown, code: DispatchOnceErrorCode, details: Record<string, unknown>): Error {
  expect(isDispatchOnceError(error, code), `expected ${code}, got ${String(error)}`).toBe(true);
  expect(error).toMatchObject(details);
  return error as Error;
}

function nestedArrays(levels: number): unknown {
  let value: unknown = [];
  for (let i = 1; i < levels; i++) value = [value];
  return value;
}

function revokedProxy(): object {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

const throwingGetter = (message = "boom") =>
  Object.defineProperty({} as Record<string, unknown>, "amount", {
    enumerable: true,
    get() {
      throw new Error(message);
    },
  });

describe("KEY-6 nesting depth", () => {
  it("KEY-6 MAX_CANONICAL_DEPTH is 512: exactly that deep is accepted, one more is too_deep with a pointer", () => {
    expect(MAX_CANONICAL_DEPTH).toBe(512);
    expect(canonicalize(nestedArrays(MAX_CANONICAL_DEPTH))).toBe("[".repeat(512) + "]".repeat(512));
    const error = thrownBy(() => canonicalize({ tree: nestedArrays(MAX_CANONICAL_DEPTH) }));
    expectTyped(error, "not_canonicalizable", { problem: "too_deep", path: `/tree${"/0".repeat(511)}` });
  });

  it("KEY-6 20 KB of deeply nested model JSON is too_deep, never a stack overflow (RangeError)", () => {
    // What a model can put in any z.any() or z.record() field: JSON.parse itself is iterative.
    for (const levels of [3_000, 10_000, 100_000]) {
      const args = JSON.parse(`{"payload":${"[".repeat(levels)}${"]".repeat(levels)}}`);
      const error = thrownBy(() => deriveKey({ ...base, args }));
      expect(error).not.toBeInstanceOf(RangeError);
      expectTyped(error, "not_canonicalizable", { problem: "too_deep", path: `/payload${"/0".repeat(511)}` });
    }
  });

  it("KEY-6 deep objects count like deep arrays", () => {
    let value: Record<string, unknown> = {};
    for (let i = 0; i < 5_000; i++) value = { "a/b": value };
    const error = thrownBy(() => canonicalize(value));
    expectTyped(error, "not_canonicalizable", { problem: "too_deep", path: "/a~1b".repeat(512) });
  });

  it("KEY-6 a deep tool argument is refused by the dispatcher before anything is claimed", async () => {
    const ledger = new MemoryLedger();
    let runs = 0;
    const tool = defineTool({
      name: "store_blob",
      effect: "keyed_write",
      input: z.object({ payload: z.any() }),
      async run() {
        runs++;
        return { ok: true };
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger });
    const input = JSON.parse(`{"payload":${"[".repeat(10_000)}${"]".repeat(10_000)}}`);
    const error = await dispatcher
      .turn({ conversationId: "conv_deep", turnIndex: 0 })
      .dispatch({ name: "store_blob", input })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expectTyped(error, "not_canonicalizable", { problem: "too_deep" });
    expect(runs).toBe(0);
  });

  it("KEY-6 wide objects and long arrays are linear, not recursive", () => {
    const wide: Record<string, number> = {};
    for (let i = 0; i < 100_000; i++) wide[`k${i}`] = i;
    const text = canonicalize(wide);
    const sorted = `{${Object.keys(wide)
      .sort()
      .map((k) => `"${k}":${wide[k]}`)
      .join(",")}}`;
    expect(text === sorted).toBe(true);
    expect(text.startsWith('{"k0":0,"k1":1,"k10":10,')).toBe(true);
    // Members already in sorted order, so JSON.stringify writes the canonical text too.
    // (Compared as a boolean: a failing diff of megabytes helps nobody.)
    const long = Array.from({ length: 1_000_000 }, (_, i) => i % 7);
    expect(canonicalize(long) === JSON.stringify(long)).toBe(true);
    const rows = Array.from({ length: 50_000 }, (_, i) => ({ i, n: null, s: "x" }));
    expect(canonicalize(rows) === JSON.stringify(rows)).toBe(true);
  });

  it("KEY-6 a shared (not cyclic) value is accepted at any depth; a long cycle is still a cycle", () => {
    // Deeper than the depth at which ancestors move from a scan to a Set: both must agree.
    const shared = { leaf: [1, 2] };
    let deep: unknown = { left: shared, right: shared };
    for (let i = 0; i < 100; i++) deep = [deep, shared];
    expect(JSON.parse(canonicalize(deep))).toEqual(JSON.parse(JSON.stringify(deep)));

    const first: Record<string, unknown> = {};
    let last = first;
    for (let i = 0; i < 100; i++) {
      const next: Record<string, unknown> = {};
      last.next = next;
      last = next;
    }
    last.next = first;
    const error = thrownBy(() => canonicalize({ list: first }));
    expectTyped(error, "not_canonicalizable", { problem: "cycle", path: `/list${"/next".repeat(101)}` });
  });
});

describe("KEY-6 members JSON would silently drop are refused (hidden_member)", () => {
  it("KEY-6 a symbol-keyed member: distinct inputs must not share a key", () => {
    const tagged = { ...payment, [Symbol("tenant")]: "other" };
    const error = thrownBy(() => deriveKey({ ...base, args: tagged }));
    expectTyped(error, "not_canonicalizable", { problem: "hidden_member", path: "" });
    expect((error as Error).message).toContain("Symbol(tenant)");
    const nested = thrownBy(() => canonicalize({ outer: { [Symbol.iterator]: 1, a: 1 } }));
    expectTyped(nested, "not_canonicalizable", { problem: "hidden_member", path: "/outer" });
  });

  it("KEY-6 a non-enumerable own member", () => {
    const args = Object.defineProperty({ ...payment }, "amount_override", { value: 1, enumerable: false });
    const error = thrownBy(() => deriveKey({ ...base, args }));
    expectTyped(error, "not_canonicalizable", { problem: "hidden_member", path: "/amount_override" });
  });

  it("KEY-6 a named (non-index) property on an array, enumerable or not, and a symbol on an array", () => {
    const list: unknown[] & { note?: string } = [1, 2];
    list.note = "dropped by JSON";
    expectTyped(thrownBy(() => canonicalize({ "a/list": list })), "not_canonicalizable", {
      problem: "hidden_member",
      path: "/a~1list/note",
    });
    const quiet = Object.defineProperty([1, 2], "unit", { value: "EUR", enumerable: false });
    expectTyped(thrownBy(() => canonicalize({ amounts: quiet })), "not_canonicalizable", {
      problem: "hidden_member",
      path: "/amounts/unit",
    });
    const tagged = Object.assign([1], { [Symbol("x")]: 1 });
    expectTyped(thrownBy(() => canonicalize([tagged])), "not_canonicalizable", { problem: "hidden_member", path: "/0" });
  });

  it("KEY-6 a hole in a sparse array is unsupported_type, even when Array.prototype fills it", () => {
    // eslint-disable-next-line no-sparse-arrays
    expectTyped(thrownBy(() => canonicalize({ list: [1, , 3] })), "not_canonicalizable", {
      problem: "unsupported_type",
      path: "/list/1",
    });
    const huge: unknown[] = [];
    huge[2 ** 32 - 2] = 1; // length 2^32 - 1, one element: refused at once, not walked
    expectTyped(thrownBy(() => canonicalize(huge)), "not_canonicalizable", { problem: "unsupported_type", path: "/0" });
    const proto = Array.prototype as unknown as Record<number, unknown>;
    proto[1] = 2;
    try {
      // eslint-disable-next-line no-sparse-arrays
      expectTyped(thrownBy(() => canonicalize([1, , 3])), "not_canonicalizable", {
        problem: "unsupported_type",
        path: "/1",
      });
    } finally {
      delete proto[1];
    }
  });

  it("KEY-6 keeps: an undefined member is absent, a null-prototype object is a plain object, a getter is read once", () => {
    expect(canonicalize({ b: undefined, a: 1 })).toBe('{"a":1}');
    expect(canonicalize({ a: undefined })).toBe("{}");
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { b: 2, a: [Object.create(null)] });
    expect(canonicalize(bare)).toBe('{"a":[{}],"b":2}');
    let reads = 0;
    const lazy = Object.defineProperty({}, "v", {
      enumerable: true,
      get: () => {
        reads++;
        return reads;
      },
    });
    expect(canonicalize(lazy)).toBe('{"v":1}');
    expect(reads).toBe(1);
  });

  it("KEY-6 a getter beside a nested member is read once too, and a cycle below it is reported where it closes", () => {
    let reads = 0;
    const mixed = Object.defineProperty({ nested: { x: [1] } } as Record<string, unknown>, "v", {
      enumerable: true,
      get: () => ++reads,
    });
    expect(canonicalize(mixed)).toBe('{"nested":{"x":[1]},"v":1}');
    expect(reads).toBe(1);
    const loop: Record<string, unknown> = { a: 1 };
    loop["inner"] = { back: loop };
    expectTyped(thrownBy(() => canonicalize(loop)), "not_canonicalizable", { problem: "cycle", path: "/inner/back" });
    const self: Record<string, unknown> = { z: 1 };
    self["self"] = self;
    expectTyped(thrownBy(() => canonicalize(self)), "not_canonicalizable", { problem: "cycle", path: "/self" });
  });

  it('KEY-6 a member named "__proto__" is an ordinary member, beside scalars and nested values alike', () => {
    // JSON.parse makes "__proto__" an own member; a copy made by assignment would turn it into
    // the copy's prototype and lose it (found by the KEY-7 property, seed 964321532).
    expect(canonicalize(JSON.parse('{"__proto__":[]}'))).toBe('{"__proto__":[]}');
    expect(canonicalize(JSON.parse('{"a":1,"__proto__":{"b":[2]}}'))).toBe('{"__proto__":{"b":[2]},"a":1}');
    expect(canonicalize(JSON.parse('{"__proto__":1,"z":"x"}'))).toBe('{"__proto__":1,"z":"x"}');
  });
});

describe("KEY-6 values whose reading throws are unreadable, with the thrown error as the cause", () => {
  it("KEY-6 a throwing getter in the arguments", () => {
    const error = expectTyped(thrownBy(() => deriveKey({ ...base, args: throwingGetter() })), "not_canonicalizable", {
      problem: "unreadable",
      path: "/amount",
    });
    expect(error.message).toContain("boom");
    expect((error.cause as Error).message).toBe("boom");
  });

  it("KEY-6 a throwing index getter in an array", () => {
    const list = Object.defineProperty([0, 1], 1, {
      enumerable: true,
      get() {
        throw new TypeError("no");
      },
    });
    expectTyped(thrownBy(() => canonicalize({ list })), "not_canonicalizable", { problem: "unreadable", path: "/list/1" });
  });

  it("KEY-6 revoked proxies and throwing proxy traps", () => {
    expectTyped(thrownBy(() => canonicalize(revokedProxy())), "not_canonicalizable", { problem: "unreadable", path: "" });
    expectTyped(thrownBy(() => canonicalize({ a: [revokedProxy()] })), "not_canonicalizable", {
      problem: "unreadable",
      path: "/a/0",
    });
    const traps: ProxyHandler<object>[] = [
      { ownKeys: () => { throw new Error("ownKeys"); } },
      { getPrototypeOf: () => { throw new Error("getPrototypeOf"); } },
      { get: () => { throw new Error("get"); } },
      { getOwnPropertyDescriptor: () => { throw new Error("descriptor"); } },
    ];
    for (const handler of traps) {
      const error = thrownBy(() => canonicalize({ p: new Proxy({ x: 1 }, handler) }));
      expectTyped(error, "not_canonicalizable", { problem: "unreadable" });
      expect((error as { path: string }).path).toMatch(/^\/p(\/x)?$/);
    }
  });

  it("KEY-6 whatever is thrown (a bigint, a revoked proxy, an error with a throwing message) gives a message", () => {
    const hostileError = Object.defineProperty(new Error(), "message", {
      get() {
        throw new Error("no message");
      },
    });
    for (const thrown of [10n, revokedProxy(), hostileError, undefined, Symbol("s")]) {
      const args = Object.defineProperty({}, "x", {
        enumerable: true,
        get() {
          throw thrown;
        },
      });
      const error = expectTyped(thrownBy(() => canonicalize(args)), "not_canonicalizable", { problem: "unreadable", path: "/x" });
      expect(typeof error.message).toBe("string");
    }
  });

  it("KEY-6 an unsupported class whose constructor cannot be read is still unsupported_type", () => {
    const date = new Proxy(new Date(0), {
      get() {
        throw new Error("trap");
      },
    });
    expectTyped(thrownBy(() => canonicalize({ when: date })), "not_canonicalizable", { problem: "unsupported_type", path: "/when" });
  });
});

describe("KEY-2..KEY-4 hostile key components are invalid_key_input, never a TypeError", () => {
  it("KEY-2..KEY-4 bigint, cyclic, symbol, revoked-proxy and unprintable components", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const unprintable = {
      toString() {
        throw new Error("no");
      },
    };
    const values: unknown[] = [10n, cyclic, Symbol("s"), revokedProxy(), unprintable, () => 1];
    for (const field of ["conversationId", "name", "turnIndex", "ordinal"] as const) {
      for (const value of values) {
        const error = thrownBy(() => deriveKey({ ...base, args: payment, [field]: value } as never));
        expectTyped(error, "invalid_key_input", { field });
      }
    }
  });

  it("KEY-2..KEY-4 a component whose reading throws is invalid_key_input for that field, with the cause", () => {
    for (const field of ["conversationId", "name", "turnIndex", "ordinal"] as const) {
      const input = Object.defineProperty({ ...base, args: payment }, field, {
        enumerable: true,
        get() {
          throw new Error(`cannot read ${field}`);
        },
      });
      const error = expectTyped(thrownBy(() => keyMaterial(input)), "invalid_key_input", { field });
      expect((error.cause as Error).message).toBe(`cannot read ${field}`);
    }
    // The whole input a revoked proxy: its first component cannot be read.
    expectTyped(thrownBy(() => deriveKey(revokedProxy() as never)), "invalid_key_input", { field: "conversationId" });
    // Reading `args` itself throws: the arguments are unreadable at their root (KEY-6).
    const input = Object.defineProperty({ ...base }, "args", {
      enumerable: true,
      get() {
        throw new Error("args");
      },
    });
    expectTyped(thrownBy(() => deriveKey(input as never)), "not_canonicalizable", { problem: "unreadable", path: "" });
  });
});

describe("ERR-2 an input that is not an object is invalid_argument (field input)", () => {
  it("ERR-2 deriveKey(null), keyMaterial(undefined) and non-objects", () => {
    for (const input of [null, undefined, "conv_01|3|x|0|{}", 42, true, 10n, Symbol("s"), () => base]) {
      expectTyped(thrownBy(() => deriveKey(input as never)), "invalid_argument", { field: "input" });
      expectTyped(thrownBy(() => keyMaterial(input as never)), "invalid_argument", { field: "input" });
    }
  });
});

describe("KEY-5 the iterative canonicalize agrees with a recursive reading of RFC 8785", () => {
  /** The straightforward recursive JCS of a JSON value (members with undefined values absent). */
  function recursiveJcs(value: unknown): string {
    if (value === null || typeof value === "boolean") return String(value);
    if (typeof value === "number") return value === 0 ? "0" : String(value);
    if (typeof value === "string") return JSON.stringify(value);
    if (Array.isArray(value)) return `[${value.map(recursiveJcs).join(",")}]`;
    const record = value as Record<string, unknown>;
    return `{${Object.keys(record)
      .sort()
      .filter((name) => record[name] !== undefined)
      .map((name) => `${JSON.stringify(name)}:${recursiveJcs(record[name])}`)
      .join(",")}}`;
  }

  const { value } = fc.letrec<{ value: unknown }>((tie) => ({
    value: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      fc.constant(null),
      fc.boolean(),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      fc.string({ unit: "binary" }),
      fc.array(tie("value")),
      // Undefined members in any position exercise the comma logic.
      fc.dictionary(fc.string({ unit: "binary" }), fc.option(tie("value"), { nil: undefined, freq: 3 })),
    ),
  }));

  it("KEY-5 on arbitrary JSON values, undefined members included", () => {
    fc.assert(
      fc.property(value, (v) => {
        expect(canonicalize(v)).toBe(recursiveJcs(v));
      }),
      { numRuns: 500 },
    );
  });
});
