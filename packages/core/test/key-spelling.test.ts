import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, defineTool, deriveKey, isDispatchOnceError } from "../src/index.js";
import { recordingLogger } from "./helpers.js";

/**
 * How the key treats a call the model re-emits on a replay with another spelling (spec IDENT-7,
 * DISPATCH-3, §5.3): what the dispatcher absorbs, what it refuses, and what only the tool's
 * schema can absorb (the key is taken over the schema's output, so a schema that normalises a
 * field makes its spellings one key).
 */

const turn0 = { conversationId: "conv_spelling", turnIndex: 0 };

/** A keyed write over `input` that counts its runs; arguments are given as JSON text, as a provider sends them. */
function payTool<S extends z.ZodObject>(input: S, identity?: string[]) {
  const runs: unknown[] = [];
  const tool = defineTool({
    name: "pay",
    effect: "keyed_write",
    input,
    ...(identity !== undefined ? { identity: identity as never } : {}),
    run(args) {
      runs.push(args);
      return { paid: runs.length };
    },
  });
  const ledger = new MemoryLedger();
  const dispatcher = new Dispatcher({ tools: [tool], ledger, logger: recordingLogger().logger });
  const key = (json: string) => dispatcher.keyFor({ name: "pay", input: JSON.parse(json) }, turn0);
  const dispatch = (json: string) => dispatcher.turn(turn0).dispatch({ name: "pay", input: JSON.parse(json) });
  return { runs, ledger, dispatcher, key, dispatch };
}

async function rowCount(ledger: MemoryLedger): Promise<number> {
  return (await ledger.listRows({})).rows.length;
}

describe("IDENT-7 a number JSON text may have rounded is not a key argument", () => {
  it("IDENT-7 two account numbers beyond 2^53 that parse to one double are refused, not given one key", async () => {
    const { runs, ledger, dispatch } = payTool(z.object({ account: z.number(), amount: z.number() }));
    // Two different accounts: JSON.parse rounds both to 9007199254740992, so a key over the
    // parsed value would answer the second payment with the first's result.
    expect(JSON.parse('{"a":9007199254740993}').a).toBe(JSON.parse('{"a":9007199254740992}').a);
    for (const json of ['{"account":9007199254740993,"amount":5}', '{"account":9007199254740992,"amount":5}']) {
      const error = await dispatch(json).catch((e: unknown) => e);
      expect(isDispatchOnceError(error, "tool_input_invalid"), String(error)).toBe(true);
      expect((error as { issues: { path: unknown[]; message: string }[] }).issues[0]).toMatchObject({ path: ["account"] });
    }
    expect(runs).toEqual([]);
    expect(await rowCount(ledger)).toBe(0);
  });

  it("IDENT-7 the refusal covers every number the key is taken over: nested, in arrays, negative, exponent form", () => {
    const { key } = payTool(z.object({ to: z.object({ ids: z.array(z.number()) }), amount: z.number() }));
    const refused = (json: string) => {
      try {
        key(json);
        return undefined;
      } catch (error) {
        expect(isDispatchOnceError(error, "tool_input_invalid"), String(error)).toBe(true);
        return (error as { issues: { path: unknown[] }[] }).issues[0]!.path;
      }
    };
    expect(refused('{"to":{"ids":[1,12345678901234567890]},"amount":1}')).toEqual(["to", "ids", 1]);
    expect(refused('{"to":{"ids":[]},"amount":-9007199254740993}')).toEqual(["amount"]);
    expect(refused('{"to":{"ids":[]},"amount":1e300}')).toEqual(["amount"]);
    expect(refused('{"to":{"ids":[]},"amount":9007199254740992}')).toEqual(["amount"]);
    // The largest exact integers, fractions, and long digit runs inside strings stay keyable.
    expect(refused('{"to":{"ids":[9007199254740991,-9007199254740991]},"amount":0.1234567890123456}')).toBeUndefined();
  });

  it("IDENT-7 any double is refused exactly when its magnitude exceeds 2^53 - 1, on the flat path and the general one", () => {
    const flat = payTool(z.object({ amount: z.number() }));
    const nested = payTool(z.object({ amount: z.object({ value: z.number() }) }));
    const refused = (f: () => unknown) => {
      try {
        f();
        return false;
      } catch (error) {
        if (!isDispatchOnceError(error, "tool_input_invalid")) throw error;
        return true;
      }
    };
    fc.assert(
      fc.property(
        fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom(2 ** 53, 2 ** 53 - 1, -(2 ** 53), 1e21, 1e16, -0)),
        (amount) => {
          const unsafe = Math.abs(amount) > Number.MAX_SAFE_INTEGER;
          const text = JSON.stringify(amount);
          expect(refused(() => flat.key(`{"amount":${text}}`))).toBe(unsafe);
          expect(refused(() => nested.key(`{"amount":{"value":${text}}}`))).toBe(unsafe);
        },
      ),
      { numRuns: 500 },
    );
  });

  it("IDENT-7 a number outside the identity is not a key argument and is not refused", async () => {
    const { runs, dispatch } = payTool(z.object({ payee: z.string(), amount: z.number(), trace: z.number() }), ["payee", "amount"]);
    await dispatch('{"payee":"acme","amount":5,"trace":123456789012345678901}');
    expect(runs).toHaveLength(1);
  });

  it("IDENT-7 IDENT-6 for a tool that refuses differing requests every argument counts: two rounded numbers are not one request", async () => {
    // A client-assigned key (MCP-9): the identity is the key, and comparing the whole request
    // decides whether a call is the stored one. Two account ids that round to one double would
    // compare equal, and the second transfer would be answered with the first's result.
    const runs: unknown[] = [];
    const tool = defineTool({
      name: "transfer",
      effect: "keyed_write",
      input: z.object({ key: z.string(), account: z.number() }),
      identity: ["key"],
      onRequestDiffers: "refuse",
      run: (args) => void runs.push(args),
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger, logger: recordingLogger().logger });
    for (const json of ['{"key":"k1","account":1234567890123456789}', '{"key":"k1","account":1234567890123456788}']) {
      const error = await dispatcher.turn(turn0).dispatch({ name: "transfer", input: JSON.parse(json) }).catch((e: unknown) => e);
      expect(isDispatchOnceError(error, "tool_input_invalid"), String(error)).toBe(true);
      expect((error as { issues: { path: unknown[] }[] }).issues[0]!.path).toEqual(["account"]);
    }
    expect(runs).toEqual([]);
    expect(await rowCount(ledger)).toBe(0);
  });

  it("IDENT-7 only writes are refused: a read's key is for tracing and never claimed", async () => {
    const tool = defineTool({ name: "lookup", effect: "read", input: z.object({ id: z.number() }), run: (args) => args.id });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), logger: recordingLogger().logger });
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "lookup", input: JSON.parse('{"id":12345678901234567890}') });
    expect(outcome.result).toBe(12345678901234567000);
  });
});

describe("DISPATCH-3 the key is taken over the schema's output: a spelling the schema folds is one key", () => {
  /** Whether two JSON texts of one call get one key under `input` (and `identity`). */
  const oneKey = (input: z.ZodObject, a: string, b: string, identity?: string[]) => {
    const { key } = payTool(input, identity);
    return key(a) === key(b);
  };

  it("DISPATCH-3 KEY-5 Unicode is not normalised: NFC and NFD are two keys until the schema normalises", async () => {
    const nfc = '{"payee":"Caf\\u00e9","amount":5}';
    const nfd = '{"payee":"Cafe\\u0301","amount":5}';
    expect(oneKey(z.object({ payee: z.string(), amount: z.number() }), nfc, nfd)).toBe(false);
    const normalised = payTool(z.object({ payee: z.string().normalize("NFC"), amount: z.number() }));
    const first = await normalised.dispatch(nfd);
    const replay = await normalised.dispatch(nfc);
    expect(replay).toMatchObject({ key: first.key, replayed: true });
    // The stored request, and what the tool ran with, is the schema's output: composed.
    expect(normalised.runs).toEqual([{ payee: "Caf\u00e9", amount: 5 }]);
    expect((await normalised.ledger.lookup(first.key))?.request).toBe('{"payee":"Caf\u00e9","amount":5}');
  });

  it("IDENT-8 key arguments with text not in NFC are warned about once per tool, since an NFC spelling is another key", async () => {
    const make = (input: z.ZodObject) => {
      const { logger, warnings } = recordingLogger();
      const tool = defineTool({ name: "pay", effect: "keyed_write", input, run: () => ({ ok: true }) });
      const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), logger });
      const dispatch = (json: string) => dispatcher.turn(turn0).dispatch({ name: "pay", input: JSON.parse(json) });
      return { dispatch, nfcWarnings: () => warnings.filter((w) => w.message.includes("NFC")) };
    };
    const plain = make(z.object({ payee: z.string(), amount: z.number() }));
    await plain.dispatch('{"payee":"Caf\u00e9","amount":1}');
    await plain.dispatch('{"payee":"\u00c5ngstr\u00f6m","amount":2}');
    expect(plain.nfcWarnings()).toEqual([]);
    await plain.dispatch('{"payee":"Cafe\u0301","amount":3}');
    await plain.dispatch('{"payee":"Cafe\u0301","amount":4}');
    expect(plain.nfcWarnings()).toHaveLength(1);
    expect(plain.nfcWarnings()[0]!.fields).toMatchObject({ tool: "pay" });
    const normalised = make(z.object({ payee: z.string().normalize("NFC"), amount: z.number() }));
    await normalised.dispatch('{"payee":"Cafe\u0301","amount":3}');
    expect(normalised.nfcWarnings()).toEqual([]);
  });

  it("DISPATCH-3 an omitted field is its given default only when the schema declares the default", () => {
    const omitted = '{"payee":"acme","amount":5}';
    const given = '{"payee":"acme","amount":5,"currency":"EUR"}';
    expect(oneKey(z.object({ payee: z.string(), amount: z.number(), currency: z.string().default("EUR") }), omitted, given)).toBe(true);
    expect(oneKey(z.object({ payee: z.string(), amount: z.number(), currency: z.string().optional() }), omitted, given)).toBe(false);
  });

  it("DISPATCH-3 IDENT-1 null and absent are two keys until the schema maps one to the other", () => {
    const absent = '{"payee":"acme"}';
    const nul = '{"payee":"acme","reference":null}';
    expect(oneKey(z.object({ payee: z.string(), reference: z.string().nullish() }), absent, nul)).toBe(false);
    const folded = z.object({ payee: z.string(), reference: z.string().nullish().transform((v) => v ?? undefined) });
    expect(oneKey(folded, absent, nul)).toBe(true);
  });

  it("DISPATCH-3 an array's order is part of the key unless the schema sorts it", () => {
    const ab = '{"tags":["a","b"]}';
    const ba = '{"tags":["b","a"]}';
    expect(oneKey(z.object({ tags: z.array(z.string()) }), ab, ba)).toBe(false);
    expect(oneKey(z.object({ tags: z.array(z.string()).transform((t) => [...t].sort()) }), ab, ba)).toBe(true);
  });

  it("DISPATCH-3 trims, case folds and coercions apply before the key, and the stored request is their output", async () => {
    const folded = payTool(z.object({ currency: z.string().trim().toUpperCase(), amount: z.coerce.number() }));
    const first = await folded.dispatch('{"currency":" eur ","amount":"1000"}');
    const replay = await folded.dispatch('{"currency":"EUR","amount":1e3}');
    expect(replay).toMatchObject({ key: first.key, replayed: true });
    expect((await folded.ledger.lookup(first.key))?.request).toBe('{"currency":"EUR","amount":1000}');
  });

  it("KEY-5 member order, nesting order and number spelling never change the key (the library folds them)", () => {
    const input = z.object({ to: z.object({ iban: z.string(), bic: z.string() }), amount: z.number() });
    expect(oneKey(input, '{"to":{"iban":"X","bic":"Y"},"amount":1000}', '{"amount":1e3,"to":{"bic":"Y","iban":"X"}}')).toBe(true);
    expect(oneKey(input, '{"to":{"iban":"X","bic":"Y"},"amount":1000.0}', '{"to":{"iban":"X","bic":"Y"},"amount":10000e-1}')).toBe(true);
    expect(oneKey(input, '{"to":{"iban":"X","bic":"Y"},"amount":-0}', '{"to":{"iban":"X","bic":"Y"},"amount":0}')).toBe(true);
    expect(oneKey(input, '{"to":{"iban":"X","bic":"Y"},"amount":1}', '{"to":{"iban":"\\u0058","bic":"Y"},"amount":1}')).toBe(true);
  });

  it("DISPATCH-3 IDENT-1 an unknown member: stripped, it changes nothing; passed through without an identity, it changes the key", async () => {
    const plain = '{"payee":"acme","memo":"x"}';
    const extra = '{"payee":"acme","memo":"x","note":"added on the replay"}';
    expect(oneKey(z.object({ payee: z.string(), memo: z.string() }), plain, extra)).toBe(true);
    expect(oneKey(z.looseObject({ payee: z.string(), memo: z.string() }), plain, extra)).toBe(false);
    expect(oneKey(z.looseObject({ payee: z.string(), memo: z.string() }), plain, extra, ["payee"])).toBe(true);
    const strict = payTool(z.strictObject({ payee: z.string(), memo: z.string() }));
    await expect(strict.dispatch(extra)).rejects.toMatchObject({ code: "tool_input_invalid" });
    expect(await rowCount(strict.ledger)).toBe(0);
  });
});

describe("IDENT-5 catches only what differs between two validations a moment apart (the documented limit)", () => {
  afterEach(() => void vi.useRealTimers());

  it("IDENT-5 a default read from the date passes both validations and changes the key when the date does", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const { key } = payTool(z.object({ payee: z.string(), on: z.string().default(() => new Date().toISOString().slice(0, 10)) }));
    vi.setSystemTime(new Date("2026-12-03T23:59:59.000Z"));
    const before = key('{"payee":"acme"}');
    vi.setSystemTime(new Date("2026-12-04T00:00:01.000Z"));
    // The replay two seconds later, after midnight: another key, so the payment would run again.
    // Only the tool can prevent it (spec section 5.3): no clock in key arguments.
    expect(key('{"payee":"acme"}')).not.toBe(before);
    // A default that differs a moment apart is what IDENT-5 refuses.
    let n = 0;
    const { key: impure } = payTool(z.object({ payee: z.string(), ref: z.string().default(() => `r${n++}`) }));
    expect(() => impure('{"payee":"acme"}')).toThrow(expect.objectContaining({ code: "invalid_tool_definition" }));
  });
});

describe("TURN-4 a replay that re-orders or repeats calls keeps each call's key", () => {
  it("TURN-4 two payments emitted in the other order keep their keys; a repeat of one gets ordinal 1", async () => {
    const { dispatcher, runs } = payTool(z.object({ payee: z.string(), amount: z.number() }));
    const original = dispatcher.turn(turn0);
    const a = await original.dispatch({ name: "pay", input: { payee: "alice", amount: 5 } });
    const b = await original.dispatch({ name: "pay", input: { payee: "bob", amount: 7 } });
    // The cut-off turn's replay: bob first, then alice twice (the model repeated it).
    const replay = dispatcher.turn(turn0);
    const b2 = await replay.dispatch({ name: "pay", input: { amount: 7, payee: "bob" } });
    const a2 = await replay.dispatch({ name: "pay", input: { payee: "alice", amount: 5 } });
    const a3 = await replay.dispatch({ name: "pay", input: { payee: "alice", amount: 5 } });
    expect([b2.key, a2.key]).toEqual([b.key, a.key]);
    expect([b2.replayed, a2.replayed]).toEqual([true, true]);
    // A second identical call in one attempt is another effect (DISPATCH-6): it runs.
    expect(a3).toMatchObject({ ordinal: 1, replayed: false });
    expect(runs).toHaveLength(3);
  });
});

describe("KEY-5 Theorem 2: any other JSON text of the same value gives the same key", () => {
  /**
   * Another JSON text for `value`, as a replay's model might write it: members in another order,
   * whitespace, numbers in another notation (`1e3`, `1000.0`, 17 significant digits), and
   * characters written as `\u` escapes (a character outside the BMP as its escaped pair).
   */
  function respell(value: unknown, rng: () => number): string {
    const space = () => [" ", "", "\n", "\t", "  "][Math.floor(rng() * 5)]!;
    const str = (s: string) => {
      let out = '"';
      for (const ch of s) {
        const code = ch.codePointAt(0)!;
        if (rng() < 0.3 || code < 0x20 || ch === '"' || ch === "\\") {
          for (let i = 0; i < ch.length; i++) {
            const hex = ch.charCodeAt(i).toString(16).padStart(4, "0");
            out += `\\u${rng() < 0.5 ? hex : hex.toUpperCase()}`;
          }
        } else out += ch;
      }
      return `${out}"`;
    };
    const num = (n: number) => {
      switch (Math.floor(rng() * 4)) {
        case 0:
          return n.toExponential();
        case 1:
          return n.toPrecision(17);
        case 2:
          return Number.isInteger(n) && Math.abs(n) < 1e21 ? `${n}.0` : String(n);
        default:
          return String(n);
      }
    };
    if (value === null || typeof value === "boolean") return String(value);
    if (typeof value === "number") return num(value);
    if (typeof value === "string") return str(value);
    if (Array.isArray(value)) return `[${space()}${value.map((v) => respell(v, rng)).join(`${space()},${space()}`)}${space()}]`;
    const entries = Object.entries(value as Record<string, unknown>);
    for (let i = entries.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [entries[i], entries[j]] = [entries[j]!, entries[i]!];
    }
    return `{${space()}${entries.map(([k, v]) => `${str(k)}${space()}:${space()}${respell(v, rng)}`).join(",")}${space()}}`;
  }

  it("KEY-5 member order, whitespace, number notation and escapes never reach the key (fast-check prints seed and path)", () => {
    const base = { conversationId: "conv_spelling", turnIndex: 2, name: "pay", ordinal: 0 };
    fc.assert(
      fc.property(fc.jsonValue({ noUnicodeString: false }), fc.integer({ min: 1, max: 2 ** 31 }), (value, seed) => {
        const args = JSON.parse(JSON.stringify(value)) as unknown; // -0 as JSON carries it: 0
        let state = seed;
        const rng = () => {
          // mulberry32: a seeded generator, so a failure is reproduced by fast-check's seed alone.
          state = (state + 0x6d2b79f5) | 0;
          let t = Math.imul(state ^ (state >>> 15), 1 | state);
          t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
          return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
        };
        const text = respell(args, rng);
        expect(deriveKey({ ...base, args: JSON.parse(text) }), text).toBe(deriveKey({ ...base, args }));
      }),
      { numRuns: 300 },
    );
  });
});
