// The dispatch path's fast paths (issue 14) against the general way they stand in for: each
// must give exactly what the general way gives, or step aside (undefined) and leave it to it.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { canonicalizeAndParse, flatArgumentTexts, sortNames } from "../src/canonical.js";
import { Dispatcher, MemoryLedger, canonicalize, defineTool, deriveKey, newClaimId, toJsonData } from "../src/index.js";
import { jsonDataTexts } from "../src/json-data.js";
import { deriveKeyFromParts } from "../src/key.js";
import { base64url16 } from "../src/ledger.js";

/** The dispatcher's projection of arguments on identity fields, as it was written before the fast path. */
function project(args: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) if (args[field] !== undefined) out[field] = args[field];
  return out;
}

/** RFC 8785 for flat objects, independent of the package (Array.prototype.sort, JSON.stringify). */
function referenceJcs(record: Record<string, unknown>): string {
  return `{${Object.keys(record)
    .sort()
    .filter((name) => record[name] !== undefined)
    .map((name) => `${JSON.stringify(name)}:${typeof record[name] === "number" && record[name] === 0 ? "0" : JSON.stringify(record[name])}`)
    .join(",")}}`;
}

// Names that have tripped JSON code before: prototype members, integer-like names (which objects
// list first), quotes, control characters, astral characters and a lone surrogate.
const trickyName = fc.constantFrom("__proto__", "toJSON", "constructor", "toString", "0", "1", "10", "01", "-1", 'a"b', "a\\b", "\n", "\u2028", "é", "😀", "\ud800", "");
const name = fc.oneof(fc.string({ maxLength: 6 }), trickyName);
const flatScalar = fc.oneof(
  fc.string({ unit: "binary", maxLength: 8 }),
  fc.double(),
  fc.constantFrom(0, -0, 1e21, 5e-324, -1.5, 2 ** 53),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
);
// Now and then a member the fast path must leave to the general way.
const member = fc.oneof({ weight: 8, arbitrary: flatScalar }, fc.constant({}), fc.constant([1]), fc.constant(1n), fc.constant(() => 1));
const args = fc
  .tuple(fc.array(fc.tuple(name, member), { maxLength: 20 }), fc.boolean())
  .map(([entries, nullProto]) => {
    const record: Record<string, unknown> = nullProto ? Object.create(null) : {};
    // defineProperty: a member named "__proto__" is an own member, as JSON.parse makes it.
    for (const [key, value] of entries) Object.defineProperty(record, key, { value, enumerable: true, writable: true, configurable: true });
    return record;
  });
const fields = fc.array(fc.oneof(name, fc.constantFrom("absent", "toString", "__proto__")), { maxLength: 5 }).map((names) => [...new Set(names)]);

/** Whether every member is one the fast path takes: a flat scalar (well-formed strings, finite numbers). */
function allFlat(record: Record<string, unknown>): boolean {
  return Object.keys(record).every((key) => {
    const value = record[key];
    if (!key.isWellFormed()) return false;
    if (typeof value === "string") return value.isWellFormed();
    if (typeof value === "number") return Number.isFinite(value);
    return value === undefined || value === null || typeof value === "boolean";
  });
}

describe("flatArgumentTexts: the three argument texts from one read (issue 14)", () => {
  it("KEY-5 DISPATCH-14 IDENT-1 gives canonicalize(args), JSON.stringify(args) and the identity projection's canonical text, or steps aside", () => {
    fc.assert(
      fc.property(args, fields, fc.boolean(), (record, identity, withIdentity) => {
        const given = withIdentity ? identity : undefined;
        const texts = flatArgumentTexts(record, given);
        const fieldsReadUndefined = (given ?? []).every((f) => f !== "__proto__" && (Object.keys(record).includes(f) || record[f] === undefined));
        const takes = allFlat(record) && Object.keys(record).length <= 16 && fieldsReadUndefined;
        // It takes exactly the flat objects (so this test cannot pass by always stepping aside).
        expect(texts !== undefined).toBe(takes);
        if (texts === undefined) return;
        expect(texts.canonical).toBe(referenceJcs(record));
        expect(texts.canonical).toBe(canonicalize(record));
        expect(texts.ordered).toBe(JSON.stringify(record));
        expect(texts.identity).toBe(canonicalize(given === undefined ? record : project(record, given)));
      }),
      { numRuns: 1000 },
    );
  });

  it("IDENT-7 says whether a member, and a member of the identity, is a number beyond 2^53 - 1", () => {
    const inexact = (value: unknown) => typeof value === "number" && Math.abs(value) > Number.MAX_SAFE_INTEGER;
    let seen = 0;
    fc.assert(
      fc.property(args, fields, fc.boolean(), (record, identity, withIdentity) => {
        const given = withIdentity ? identity : undefined;
        const texts = flatArgumentTexts(record, given);
        if (texts === undefined) return;
        const all = Object.keys(record).some((key) => inexact(record[key]));
        if (all) seen++;
        expect(texts.inexact).toBe(all);
        const projected = given === undefined ? record : project(record, given);
        expect(texts.inexactIdentity).toBe(Object.keys(projected).some((key) => inexact(projected[key])));
      }),
      { numRuns: 1000 },
    );
    expect(seen).toBeGreaterThan(0);
  });

  it("steps aside when JSON.stringify would call an inherited toJSON", () => {
    const record = { b: 1, a: "x" };
    expect(flatArgumentTexts(record, undefined)?.ordered).toBe('{"b":1,"a":"x"}');
    Object.defineProperty(Object.prototype, "toJSON", { value: () => "polluted", configurable: true, writable: true });
    try {
      expect(JSON.stringify(record)).toBe('"polluted"');
      expect(flatArgumentTexts(record, undefined)).toBeUndefined();
    } finally {
      delete (Object.prototype as { toJSON?: unknown }).toJSON;
    }
  });
});

describe("canonicalizeAndParse: the result's text and its parse from one read (issue 14)", () => {
  /** The same JSON value, member order and -0 included (toEqual would not tell 0 from -0 or see the order). */
  function expectIdentical(actual: unknown, expected: unknown): void {
    if (typeof expected !== "object" || expected === null) {
      expect(Object.is(actual, expected)).toBe(true);
      return;
    }
    expect(Object.getPrototypeOf(actual)).toBe(Object.getPrototypeOf(expected));
    expect(Reflect.ownKeys(actual as object)).toEqual(Reflect.ownKeys(expected));
    for (const key of Reflect.ownKeys(expected)) {
      expectIdentical((actual as Record<PropertyKey, unknown>)[key], (expected as Record<PropertyKey, unknown>)[key]);
    }
  }

  it("DISPATCH-5 gives canonicalize's text, and exactly JSON.parse of it when it gives a parse", () => {
    fc.assert(
      fc.property(fc.oneof({ weight: 4, arbitrary: args }, flatScalar), (value) => {
        let text: string;
        try {
          text = canonicalize(value);
        } catch (error) {
          expect(() => canonicalizeAndParse(value)).toThrow((error as Error).message);
          return;
        }
        const answer = canonicalizeAndParse(value);
        expect(answer.text).toBe(text);
        const flat = typeof value === "object" && value !== null && allFlat(value as Record<string, unknown>) && Object.keys(value).length <= 64;
        expect(answer.parsed !== undefined).toBe(flat);
        if (answer.parsed !== undefined) expectIdentical(answer.parsed, JSON.parse(text));
      }),
      { numRuns: 1000 },
    );
  });
});

describe("jsonDataTexts: a result's text and parse from the members its walk kept (issue 14)", () => {
  // Results: flat records and anything else, now and then behind a toJSON or a class, with
  // members JSON semantics drop (undefined, functions, symbols) or refuse (NaN, bigint).
  class Payment {
    constructor(readonly id: string, readonly amount: unknown) {}
  }
  const dropped = fc.constantFrom(undefined, () => 1, Symbol("s"));
  const refused = fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, 1n, new Map());
  const resultMember = fc.oneof({ weight: 10, arbitrary: flatScalar }, { weight: 2, arbitrary: dropped }, refused, fc.constant({ n: 1 }), fc.constant([2]), fc.constant(new Date(0)));
  const record = fc.array(fc.tuple(name, resultMember), { maxLength: 20 }).map((entries) => {
    const out: Record<string, unknown> = {};
    for (const [key, value] of entries) Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
    return out;
  });
  const result = fc.oneof(
    { weight: 6, arbitrary: record },
    record.map((r) => ({ toJSON: () => r })),
    record.map((r) => new Payment("pay_1", r)),
    fc.array(flatScalar, { maxLength: 3 }),
    flatScalar,
  );

  it("DISPATCH-5 DISPATCH-7 gives exactly canonicalizeAndParse(toJsonData(value)): its text, its parse (or none), its error", () => {
    fc.assert(
      fc.property(result, (value) => {
        let expected: { text: string; parsed: unknown };
        try {
          expected = canonicalizeAndParse(toJsonData(value));
        } catch (error) {
          expect(() => jsonDataTexts(value)).toThrow((error as Error).message);
          return;
        }
        const answer = jsonDataTexts(value);
        expect(answer.text).toBe(expected.text);
        // Where the general way gives no parse the caller parses the text: either way, JSON.parse of it.
        const parsed = answer.parsed === undefined ? JSON.parse(answer.text) : answer.parsed;
        const reference = JSON.parse(expected.text);
        expect(Reflect.ownKeys(Object(parsed))).toEqual(Reflect.ownKeys(Object(reference)));
        expect(parsed).toEqual(reference);
        if (typeof parsed === "object" && parsed !== null) expect(Object.getPrototypeOf(parsed)).toBe(Object.getPrototypeOf(reference));
      }),
      { numRuns: 2000 },
    );
  });

  it("DISPATCH-7 reads each member once, toJSON first, as toJsonData does", () => {
    const reads: string[] = [];
    const value = {
      get toJSON() {
        reads.push("toJSON");
        return undefined;
      },
      get b() {
        reads.push("b");
        return 2;
      },
      get a() {
        reads.push("a");
        return "x";
      },
    };
    expect(jsonDataTexts(value)).toEqual({ text: '{"a":"x","b":2}', parsed: { a: "x", b: 2 } });
    const general: string[] = reads.splice(0);
    toJsonData(value);
    expect(reads).toEqual(general);
    // toJSON first, then every listed member (toJSON among them) once each, in listing order.
    expect(general).toEqual(["toJSON", "toJSON", "b", "a"]);
  });
});

describe("toJsonData's walk state, lent from one call to the next (issue 14)", () => {
  it("DISPATCH-7 KEY-6 a toJSON that converts inside a walk, a walk that threw, and cycles after them convert as alone", () => {
    const inner = { b: [1, { c: "x" }], d: undefined };
    const reentrant = { a: { toJSON: () => toJsonData(inner) }, e: [inner, inner] };
    expect(toJsonData(reentrant)).toEqual({ a: { b: [1, { c: "x" }] }, e: [{ b: [1, { c: "x" }] }, { b: [1, { c: "x" }] }] });
    // A walk that throws deep inside, then walks that must start clean: same errors, same paths.
    const deep = { a: { b: [0, { c: Number.NaN }] } };
    for (let i = 0; i < 3; i++) {
      expect(() => toJsonData(deep)).toThrow(expect.objectContaining({ code: "not_canonicalizable", problem: "non_finite_number", path: "/a/b/1/c" }));
      expect(toJsonData({ a: { b: [0, { c: 1 }] } })).toEqual({ a: { b: [0, { c: 1 }] } });
    }
    const cyclic: Record<string, unknown> = { x: 1 };
    cyclic.self = { back: cyclic };
    expect(() => toJsonData(cyclic)).toThrow(expect.objectContaining({ problem: "cycle", path: "/self/back" }));
    // The same object twice, not nested in itself, is no cycle, before and after one.
    const shared = { s: 1 };
    expect(toJsonData({ p: shared, q: [shared] })).toEqual({ p: { s: 1 }, q: [{ s: 1 }] });
    const throwsInside = { a: { toJSON: () => toJsonData({ n: Number.POSITIVE_INFINITY }) } };
    expect(() => toJsonData(throwsInside)).toThrow(expect.objectContaining({ problem: "unreadable", path: "/a", message: "toJSON() threw: Infinity has no JSON form at /n at /a" }));
    expect(toJsonData({ k: [true, null, "v"] })).toEqual({ k: [true, null, "v"] });
  });
});

describe("deriveKeyFromParts: the key from components read once (issue 14)", () => {
  it("KEY-1 KEY-2 KEY-3 KEY-4 gives deriveKey's key, or its error, for any components", () => {
    const component = fc.oneof(fc.constantFrom("conv_1", "c-2.x:y~z", "", "a|b", "é", 0, 1, -1, 1.5, 2 ** 53, null, undefined), fc.string({ maxLength: 5 }), fc.nat());
    fc.assert(
      fc.property(component, component, component, component, args, (conversationId, turnIndex, name, ordinal, value) => {
        let expected: string;
        try {
          expected = deriveKey({ conversationId, turnIndex, name, ordinal, args: value } as never);
        } catch (error) {
          let text: string | undefined;
          try {
            text = canonicalize(value);
          } catch {
            return; // deriveKey's error may be the arguments', which the dispatcher raises before
          }
          expect(() => deriveKeyFromParts(conversationId, turnIndex, name, ordinal, text!)).toThrow((error as Error).message);
          return;
        }
        expect(deriveKeyFromParts(conversationId, turnIndex, name, ordinal, canonicalize(value))).toBe(expected);
      }),
      { numRuns: 1000 },
    );
  });
});

describe("base64url16: a claim id's characters (issue 14)", () => {
  it("LEDGER-26 gives Buffer's base64url of the 16 bytes from any start, and claim ids keep their pattern", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 16, maxLength: 40 }), fc.nat(), (bytes, at) => {
        const start = at % (bytes.length - 15);
        expect(base64url16(bytes, start)).toBe(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url", start, start + 16));
      }),
      { numRuns: 2000 },
    );
    for (const edge of [new Uint8Array(16), new Uint8Array(16).fill(255), Uint8Array.from({ length: 16 }, (_, i) => i * 17)]) {
      expect(base64url16(edge, 0)).toBe(Buffer.from(edge).toString("base64url"));
    }
    const ids = new Set(Array.from({ length: 600 }, () => newClaimId()));
    expect(ids.size).toBe(600);
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/);
  });
});

describe("sortNames", () => {
  it("KEY-5 orders names as Array.prototype.sort does (UTF-16 code units), at every length", () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.string({ unit: "binary", maxLength: 4 }), { maxLength: 40 }), (names) => {
        expect(sortNames([...names])).toEqual([...names].sort());
      }),
      { numRuns: 500 },
    );
  });
});

describe("the dispatcher's fast path for flat arguments, end to end", () => {
  const scalar = z.union([z.string(), z.number(), z.boolean(), z.null()]);
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number(), memo: z.string().optional(), urgent: z.boolean().optional() }).catchall(scalar),
    identity: ["payee", "amount", "urgent"],
    run: () => ({ ok: true }),
  });
  const input = fc
    .record({
      payee: fc.string({ maxLength: 6 }),
      // Within 2^53 - 1: a larger amount is refused (IDENT-7, test/key-spelling.test.ts).
      amount: fc.double({ noNaN: true, noDefaultInfinity: true, min: -Number.MAX_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }),
      memo: fc.option(fc.string({ maxLength: 6 }), { nil: undefined }),
      urgent: fc.option(fc.boolean(), { nil: undefined }),
      extra: fc.dictionary(fc.string({ maxLength: 3 }), fc.oneof(fc.string({ maxLength: 4 }), fc.integer(), fc.constant(null)), { maxKeys: 6 }),
    })
    .map(({ extra, ...known }) => ({ ...extra, ...known }));

  it("KEY-1 IDENT-1 LEDGER-21 the key is the one of the projected arguments, and the stored request is JSON.stringify of the validated ones", async () => {
    await fc.assert(
      fc.asyncProperty(input, async (call) => {
        const ledger = new MemoryLedger();
        const dispatcher = new Dispatcher({ tools: [tool], ledger });
        const context = { conversationId: "conv_fast", turnIndex: 1 };
        const validated = tool.input.parse(call) as Record<string, unknown>;
        const expected = deriveKey({ ...context, name: "send_payment", ordinal: 0, args: project(validated, tool.identity!) });
        const outcome = await dispatcher.turn(context).dispatch({ name: "send_payment", input: call });
        expect(outcome.key).toBe(expected);
        expect((await ledger.lookup(outcome.key))?.request).toBe(JSON.stringify(validated));
      }),
      { numRuns: 300 },
    );
  });

  it("DISPATCH-5 the outcome's members come in the order they always had", async () => {
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger() });
    const first = await dispatcher.turn({ conversationId: "conv_order", turnIndex: 0 }).dispatch({ name: "send_payment", input: { payee: "a", amount: 1 } });
    const replay = await dispatcher.turn({ conversationId: "conv_order", turnIndex: 0 }).dispatch({ name: "send_payment", input: { payee: "a", amount: 1 } });
    for (const outcome of [first, replay]) {
      expect(Object.keys(outcome)).toEqual(["key", "toolName", "effect", "ordinal", "result", "resultJson", "replayed"]);
    }
    expect(replay).toEqual({ ...first, replayed: true });
  });

  it("DISPATCH-4 DISPATCH-11 the run context is a plain object with an own, enumerable signal getter and nothing else to see", async () => {
    const seen: Record<string, unknown>[] = [];
    const probe = defineTool({
      name: "probe_context",
      effect: "keyed_write",
      input: z.object({ n: z.number() }),
      run: (_args, ctx) => {
        seen.push(ctx as unknown as Record<string, unknown>);
        return null;
      },
    });
    const read = defineTool({ name: "probe_read", effect: "read", input: z.object({ n: z.number() }), run: (_args, ctx) => void seen.push(ctx as unknown as Record<string, unknown>) });
    const dispatcher = new Dispatcher({ tools: [probe, read], ledger: new MemoryLedger() });
    await dispatcher.turn({ conversationId: "conv_ctx", turnIndex: 2 }).dispatch({ name: "probe_context", input: { n: 1 } });
    await dispatcher.turn({ conversationId: "conv_ctx", turnIndex: 3 }).dispatch({ name: "probe_context", input: { n: 2 } });
    await dispatcher.turn({ conversationId: "conv_ctx", turnIndex: 4 }).dispatch({ name: "probe_read", input: { n: 3 } });
    expect(seen).toHaveLength(3);
    for (const ctx of seen) {
      expect(Object.getPrototypeOf(ctx)).toBe(Object.prototype);
      expect(Reflect.ownKeys(ctx)).toEqual(["idempotencyKey", "conversationId", "turnIndex", "ordinal", "toolName", "signal"]);
      const descriptor = Object.getOwnPropertyDescriptor(ctx, "signal")!;
      expect(descriptor).toMatchObject({ enumerable: true, configurable: true, set: undefined });
      expect(typeof descriptor.get).toBe("function");
      const signal = ctx.signal as AbortSignal;
      expect(signal).toBeInstanceOf(AbortSignal);
      expect(signal.aborted).toBe(false);
      // The same signal on every read, and a spread or structuredClone keeps it as a member.
      expect(ctx.signal).toBe(signal);
      expect({ ...ctx }.signal).toBe(signal);
      const { signal: _signal, ...rest } = ctx;
      expect(Reflect.ownKeys(structuredClone(rest))).toEqual(["idempotencyKey", "conversationId", "turnIndex", "ordinal", "toolName"]);
    }
    // Read through an object that inherits from a context, the getter finds that context's signal.
    expect((Object.create(seen[0]!) as { signal: AbortSignal }).signal).toBe(seen[0]!.signal);
    // Each call has its own signal.
    expect(seen[0]!.signal).not.toBe(seen[1]!.signal);
    expect(seen.map((ctx) => ctx.turnIndex)).toEqual([2, 3, 4]);
  });

  it("TURN-4 ordinals count each identity in dispatch order; a refused call takes none", async () => {
    const read = defineTool({ name: "lookup", effect: "read", input: z.object({ q: z.string(), page: z.number().optional() }), run: () => null });
    const dispatcher = new Dispatcher({ tools: [read], ledger: new MemoryLedger(), logger: { warn: () => {} } });
    const call = fc.oneof(
      fc.record({ q: fc.constantFrom("a", "b", "c"), page: fc.option(fc.constantFrom(1, 2), { nil: undefined }) }),
      fc.constant({ q: 7 }), // refused by the schema
    );
    await fc.assert(
      fc.asyncProperty(fc.array(call, { maxLength: 12 }), async (calls) => {
        const turn = dispatcher.turn({ conversationId: "conv_ordinals", turnIndex: 0 });
        const counts = new Map<string, number>();
        for (const input of calls) {
          const dispatched = turn.dispatch({ name: "lookup", input, callId: "toolu_x" });
          if (typeof input.q !== "string") {
            await expect(dispatched).rejects.toThrow();
            continue;
          }
          const identity = canonicalize(input);
          const expected = counts.get(identity) ?? 0;
          counts.set(identity, expected + 1);
          expect((await dispatched).ordinal).toBe(expected);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("MemoryLedger rows written member by member (issue 14)", () => {
  // The rows as they were written before, with spreads: the general way the member-by-member
  // writes stand in for. Same members, same values, same order.
  const turnOf = (source: { conversationId?: string; turnIndex?: number }) => ({
    ...(source.conversationId !== undefined ? { conversationId: source.conversationId } : {}),
    ...(source.turnIndex !== undefined ? { turnIndex: source.turnIndex } : {}),
  });
  const base = (row: Record<string, unknown> & { conversationId?: string; turnIndex?: number }) => ({
    key: row.key,
    toolName: row.toolName,
    effect: row.effect,
    fence: row.fence,
    claimedAt: row.claimedAt,
    request: row.request,
    ...turnOf(row),
  });
  const end = fc.oneof(
    fc.record({ kind: fc.constant("complete" as const), result: fc.json() }),
    fc.record({ kind: fc.constant("fail" as const), message: fc.string({ maxLength: 6 }), code: fc.option(fc.string({ maxLength: 4 }), { nil: undefined }) }),
    fc.record({ kind: fc.constant("markUnknown" as const), reason: fc.string({ minLength: 1, maxLength: 6 }) }),
    fc.record({ kind: fc.constantFrom("release" as const, "retire" as const, "expire" as const) }),
  );
  const claim = fc.record({
    effect: fc.constantFrom("keyed_write" as const, "unkeyed_write" as const),
    conversationId: fc.option(fc.constantFrom("conv_a", "c.1"), { nil: undefined }),
    turnIndex: fc.option(fc.nat(5), { nil: undefined }),
    request: fc.json(),
    claimed: fc.nat(3),
  });

  it("LEDGER-8 LEDGER-27 LIST-3 every row a claim writes and ends with is the one the spreads wrote", async () => {
    await fc.assert(
      fc.asyncProperty(claim, end, async (c, e) => {
        let now = 1_000;
        const ledger = new MemoryLedger({ now: () => now });
        // A row claimed more than once (a released claim id claims no more, LEDGER-27): its fence and claimedAt are the latest claim's.
        let fence = 0;
        let claimId = "";
        for (let i = 0; i <= c.claimed; i++) {
          claimId = newClaimId();
          const claimed = await ledger.claim({ key: "k", toolName: "t", effect: c.effect, owner: "o", leaseMs: 100, request: c.request, claimId, ...turnOf(c) });
          if (claimed.outcome !== "claimed") throw new Error("not claimed");
          fence = claimed.fence;
          if (i < c.claimed) await ledger.release("k", fence);
          now += 10;
        }
        const inFlight = (await ledger.lookup("k")) as unknown as Record<string, unknown>;
        expect(JSON.stringify(inFlight)).toBe(
          JSON.stringify({ ...base({ ...inFlight, claimedAt: now - 10 }), state: "in_flight", owner: "o", leaseExpiresAt: now - 10 + 100 }),
        );
        now += 5;
        let expected: Record<string, unknown>;
        switch (e.kind) {
          case "complete":
            await ledger.complete("k", fence, e.result);
            expected = { ...base(inFlight), state: "completed", result: e.result, finishedAt: now };
            break;
          case "fail": {
            const error = { name: "E", message: e.message, ...(e.code !== undefined ? { code: e.code } : {}) };
            await ledger.fail("k", fence, error);
            expected = { ...base(inFlight), state: "failed", error, finishedAt: now };
            break;
          }
          case "markUnknown":
            await ledger.markUnknown("k", fence, e.reason);
            expected = { ...base(inFlight), state: "unknown", reason: e.reason, finishedAt: now };
            break;
          case "release":
            await ledger.release("k", fence);
            expected = { ...base(inFlight), state: "released", finishedAt: now };
            break;
          case "retire":
            expect(await ledger.retire("k", claimId, { release: true })).toEqual({ released: true });
            expected = { ...base(inFlight), state: "released", finishedAt: now };
            break;
          case "expire": {
            // The lease runs out; another claim finds it (LEDGER-7): a keyed_write is taken over, an unkeyed_write left unknown.
            now += 200;
            const other = await ledger.claim({ key: "k", toolName: "t", effect: c.effect, owner: "p", leaseMs: 100, request: "{}" });
            if (c.effect === "keyed_write") {
              expect(other.outcome).toBe("claimed");
              expected = { ...base({ ...inFlight, fence: fence + 1, claimedAt: now }), state: "in_flight", owner: "p", leaseExpiresAt: now + 100 };
            } else {
              expected = { ...base(inFlight), state: "unknown", reason: "lease_expired", finishedAt: now };
              expect(other).toEqual({ outcome: "existing", row: expected });
            }
            break;
          }
        }
        expect(JSON.stringify(await ledger.lookup("k"))).toBe(JSON.stringify(expected));
      }),
      { numRuns: 300 },
    );
  });
});
