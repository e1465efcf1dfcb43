import { z } from "zod";
import { describe, expect, it } from "vitest";
import { Dispatcher, InvalidArgumentError, MemoryLedger, ToolDefinitionChangedError, ToolRegistry, defineTool } from "../src/index.js";

/**
 * IDENT-10 in a shared turn (`sharedTurn`: a turn index several asks dispatch at, AISDK-17): a row
 * of another definition that the call matches may be another ask's, so it never answers the call.
 */
const before = z.object({ payee: z.string(), amount: z.number().int() });
const withCurrency = z.object({ payee: z.string(), amount: z.number().int(), currency: z.string().default("EUR") });

function dispatcher(ledger: MemoryLedger, performed: string[], input: z.ZodObject, identity: string[]) {
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input,
    identity,
    run: async (args: Record<string, unknown>) => {
      performed.push(String(args.payee));
      return { paymentId: `pay_${performed.length}` };
    },
  });
  return new Dispatcher({ tools: new ToolRegistry([tool]), ledger, logger: { warn: () => {} } });
}

const at = { conversationId: "conv-shared", turnIndex: 2 };
const acme = { name: "send_payment", input: { payee: "acme", amount: 5 } };

describe("IDENT-10 with sharedTurn", () => {
  it("IDENT-10 a re-run of a shared turn after a deploy: the one row the call matches is not adopted (tool_definition_changed, ambiguous), nothing claimed or run; without sharedTurn it is adopted; a call no row matches runs", async () => {
    const ledger = new MemoryLedger();
    const performed: string[] = [];
    const first = await dispatcher(ledger, performed, before, ["payee", "amount"]).dispatch(acme, { ...at, ordinal: 0 });
    const now = dispatcher(ledger, performed, withCurrency, ["payee", "amount", "currency"]);
    const error = await now.dispatch(acme, { ...at, ordinal: 0, resumed: true, sharedTurn: true }).catch((e: unknown) => e);
    expect(ToolDefinitionChangedError.isInstance(error) && [error.reason, error.rowKey, error.key]).toEqual(["ambiguous", first.key, now.keyFor(acme, { ...at, ordinal: 0 })]);
    expect(await ledger.lookup(now.keyFor(acme, { ...at, ordinal: 0 }))).toBeUndefined();
    // The same through turn(): its context takes sharedTurn too.
    const viaTurn = await now.turn({ ...at, resumed: true, sharedTurn: true }).dispatch(acme).catch((e: unknown) => e);
    expect(ToolDefinitionChangedError.isInstance(viaTurn)).toBe(true);
    expect(performed).toEqual(["acme"]);
    const adopted = await now.dispatch(acme, { ...at, ordinal: 0, resumed: true });
    expect([adopted.key, adopted.replayed]).toEqual([first.key, true]);
    const bob = await now.dispatch({ name: "send_payment", input: { payee: "bob", amount: 5 } }, { ...at, ordinal: 0, resumed: true, sharedTurn: true });
    expect([bob.replayed, performed]).toEqual([false, ["acme", "bob"]]);
  });

  it("ERR-1 sharedTurn that is not a boolean is refused (invalid_argument), nothing claimed", async () => {
    const now = dispatcher(new MemoryLedger(), [], withCurrency, ["payee", "amount", "currency"]);
    const error = await now.dispatch(acme, { ...at, ordinal: 0, resumed: true, sharedTurn: "yes" as unknown as boolean }).catch((e: unknown) => e);
    expect(InvalidArgumentError.isInstance(error) && error.field).toBe("context.sharedTurn");
    expect(() => now.turn({ ...at, sharedTurn: 1 as unknown as boolean })).toThrow(/context\.sharedTurn/);
  });
});
