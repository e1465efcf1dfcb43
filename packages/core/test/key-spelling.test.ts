import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, defineTool, isDispatchOnceError } from "../src/index.js";
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

  it("IDENT-7 only writes are refused: a read's key is for tracing and never claimed", async () => {
    const tool = defineTool({ name: "lookup", effect: "read", input: z.object({ id: z.number() }), run: (args) => args.id });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), logger: recordingLogger().logger });
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "lookup", input: JSON.parse('{"id":12345678901234567890}') });
    expect(outcome.result).toBe(12345678901234567000);
  });
});
