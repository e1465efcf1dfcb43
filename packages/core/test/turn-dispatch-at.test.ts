import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, InvalidArgumentError, MemoryLedger, ToolError, ToolRegistry, defineTool } from "../src/index.js";

/*
 * TurnDispatch.dispatch(call, { at }) (a runner's TURN-23): a call an earlier turn's re-run left
 * unanswered, made again in a later turn of the same message, is dispatched under the key that
 * earlier turn gave it, and still counts among its own turn's identical calls (TURN-4).
 */
function setup() {
  const paid: string[] = [];
  const dispatcher = new Dispatcher({
    tools: new ToolRegistry([
      defineTool({
        name: "pay",
        effect: "keyed_write",
        input: z.object({ to: z.string(), memo: z.string() }),
        identity: ["to"],
        run: async ({ to }) => {
          paid.push(to);
          return { n: paid.length };
        },
      }),
    ]),
    ledger: new MemoryLedger(),
    logger: { warn: () => {} },
  });
  return { dispatcher, paid };
}

/**
 * Two releases of pay over one ledger, recording each payment as "to memo": `next` adds a currency
 * to the identity (a deploy, IDENT-4), defaulted, or with `currency: "required"` required (the old
 * rows' stored requests are then refused by it).
 */
function deployed(options: { currency?: "defaulted" | "required" } = {}) {
  const paid: string[] = [];
  const ledger = new MemoryLedger();
  const tool = (input: z.ZodObject, identity: string[]) =>
    defineTool({
      name: "pay",
      effect: "keyed_write",
      input,
      identity,
      run: async ({ to, memo }: { to: string; memo: string }) => {
        paid.push(`${to} ${memo}`);
        return { n: paid.length };
      },
    });
  const old = new Dispatcher({ tools: new ToolRegistry([tool(z.object({ to: z.string(), memo: z.string() }), ["to"])]), ledger, logger: { warn: () => {} } });
  const currency = options.currency === "required" ? z.string() : z.string().default("EUR");
  const next = new Dispatcher({ tools: new ToolRegistry([tool(z.object({ to: z.string(), memo: z.string(), currency }), ["to", "currency"])]), ledger, logger: { warn: () => {} } });
  return { old, next, paid };
}

describe("TurnDispatch.dispatch(call, { at }) (TURN-23, TURN-4)", () => {
  it("TURN-23 the call takes the earlier turn's key and is answered from its row; TURN-4 a later identical call of the turn is ordinal 1 there", async () => {
    const { dispatcher, paid } = setup();
    const first = await dispatcher.turn({ conversationId: "c", turnIndex: 0 }).dispatch({ name: "pay", input: { to: "acme", memo: "a" } });
    const turn1 = dispatcher.turn({ conversationId: "c", turnIndex: 1 });
    const carried = await turn1.dispatch({ name: "pay", input: { to: "acme", memo: "b" } }, { at: { turnIndex: 0, ordinal: 0 } });
    const again = await turn1.dispatch({ name: "pay", input: { to: "acme", memo: "c" } });
    expect(carried).toMatchObject({ key: first.key, replayed: true, result: { n: 1 }, ordinal: 0 });
    expect(again.ordinal).toBe(1);
    expect(again.key).toBe(dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "c" } }, { conversationId: "c", turnIndex: 1, ordinal: 1 }));
    expect(paid).toEqual(["acme", "acme"]);
  });

  it("IDENT-10 two calls carried across a deploy, both dispatched with { at } in one turn: the second never adopts the row the first did (one guard per earlier turn, as a resumed turn's)", async () => {
    // Turn 0 (the old definition, identity `to`) paid acme twice, "first" and "second"; a deploy put
    // `currency` in the identity, so neither row's key is derived now. Turn 1 makes both again, the
    // second with the first's very request (or re-worded): each is answered by a row of its own.
    // Each { at } dispatch had a guard of its own, whose adopted set was empty: both calls adopted
    // the "first" row (two calls answered by one run, DISPATCH-6), or the re-worded one was refused
    // as ambiguous although only the "second" row was left for it.
    for (const second of ["first", "again"]) {
      const { old, next, paid } = deployed();
      const turn0 = old.turn({ conversationId: "c", turnIndex: 0 });
      const rows = await Promise.all([turn0.dispatch({ name: "pay", input: { to: "acme", memo: "first" } }), turn0.dispatch({ name: "pay", input: { to: "acme", memo: "second" } })]);
      const turn1 = next.turn({ conversationId: "c", turnIndex: 1 });
      const again = await Promise.allSettled([
        turn1.dispatch({ name: "pay", input: { to: "acme", memo: "first" } }, { at: { turnIndex: 0, ordinal: 0 } }),
        turn1.dispatch({ name: "pay", input: { to: "acme", memo: second } }, { at: { turnIndex: 0, ordinal: 0 } }),
      ]);
      expect(
        again.map((r) => (r.status === "fulfilled" ? [r.value.key, r.value.replayed] : (r.reason as { code?: string }).code)),
        `second call's memo: ${second}`,
      ).toEqual(rows.map((o) => [o.key, true]));
      expect(paid).toEqual(["acme first", "acme second"]);
    }
  });

  it("IDENT-10 TURN-23 { at: { answered } }: the guard at that index never answers the call from a row a committed turn answered, and still matches any other row of an earlier definition there", async () => {
    const { old, next, paid } = deployed();
    const row = await old.turn({ conversationId: "c", turnIndex: 0 }).dispatch({ name: "pay", input: { to: "acme", memo: "first" } });
    const call = { name: "pay", input: { to: "acme", memo: "again" } };
    // Not answered by a committed turn: the old row is the call's (an attempt's row a deploy left behind).
    const matched = await next.turn({ conversationId: "c", turnIndex: 1 }).dispatch(call, { at: { turnIndex: 0, ordinal: 1 } });
    expect([matched.key, matched.replayed]).toEqual([row.key, true]);
    // Answered by a committed turn: never the call's; it runs under the key the current definition derives.
    const slot = await next.turn({ conversationId: "c", turnIndex: 1 }).dispatch(call, { at: { turnIndex: 0, ordinal: 1, answered: [row.key] } });
    expect([slot.key, slot.replayed]).toEqual([next.keyFor(call, { conversationId: "c", turnIndex: 0, ordinal: 1 }), false]);
    expect(paid).toEqual(["acme first", "acme again"]);
  });

  it("TURN-23 IDENT-10 an outcome dispatched at { at } says so (dispatchedAt), also when the guard there answered it under an earlier definition's row, whose key is not the one derived there; an outcome dispatched at its own turn has none", async () => {
    const { old, next, paid } = deployed();
    const row = await old.turn({ conversationId: "c", turnIndex: 0 }).dispatch({ name: "pay", input: { to: "acme", memo: "first" } });
    expect(row.dispatchedAt).toBeUndefined();
    const call = { name: "pay", input: { to: "acme", memo: "again" } };
    const matched = await next.turn({ conversationId: "c", turnIndex: 1 }).dispatch(call, { at: { turnIndex: 0, ordinal: 0 } });
    expect([matched.key, matched.replayed, matched.dispatchedAt]).toEqual([row.key, true, 0]);
    expect(matched.key).not.toBe(next.keyFor(call, { conversationId: "c", turnIndex: 0, ordinal: 0 }));
    const own = await next.turn({ conversationId: "c", turnIndex: 1 }).dispatch({ name: "pay", input: { to: "bob", memo: "rent" } });
    expect(own.dispatchedAt).toBeUndefined();
    expect(paid).toEqual(["acme first", "bob rent"]);
  });

  it("IDENT-10 TURN-23 the rows one call's { at: { answered } } excludes are that call's alone: a later call of the turn at the same index still matches its own row (a slot before a carried call, after a deploy)", async () => {
    const { old, next, paid } = deployed();
    const turn0 = old.turn({ conversationId: "c", turnIndex: 0 });
    const bob = await turn0.dispatch({ name: "pay", input: { to: "bob", memo: "rent" } });
    const acme = await turn0.dispatch({ name: "pay", input: { to: "acme", memo: "first" } });
    const turn1 = next.turn({ conversationId: "c", turnIndex: 1 });
    // A slot call (carol) that must never take bob's (answered) or acme's (listed) rows...
    const carol = await turn1.dispatch({ name: "pay", input: { to: "carol", memo: "x" } }, { at: { turnIndex: 0, ordinal: 0, answered: [bob.key, acme.key] } });
    // ...then acme's carried call: answered from acme's row, not paid again under the new key.
    const carried = await turn1.dispatch({ name: "pay", input: { to: "acme", memo: "again" } }, { at: { turnIndex: 0, ordinal: 0 } });
    expect([carol.replayed, carried.key, carried.replayed]).toEqual([false, acme.key, true]);
    expect(paid).toEqual(["bob rent", "acme first", "carol x"]);
  });

  it("IDENT-10 TURN-23 { at: { answered } } after a deploy whose schema refuses the row's stored request: a row a committed turn answered is no candidate at all, so the slot call runs rather than being refused for it", async () => {
    // The new release requires a currency in the identity: the old row's stored request is refused now.
    const { old, next, paid } = deployed({ currency: "required" });
    const row = await old.turn({ conversationId: "c", turnIndex: 0 }).dispatch({ name: "pay", input: { to: "acme", memo: "first" } });
    const call = { name: "pay", input: { to: "acme", memo: "again", currency: "EUR" } };
    // Not excluded, the row refuses the call (IDENT-10: nothing can tell whether it is the row's call).
    await expect(next.turn({ conversationId: "c", turnIndex: 1 }).dispatch(call, { at: { turnIndex: 0, ordinal: 1 } })).rejects.toMatchObject({ code: "tool_definition_changed", reason: "request_refused" });
    // Answered by a committed turn, it is another ask's: the slot call runs under its own key there.
    const slot = await next.turn({ conversationId: "c", turnIndex: 1 }).dispatch(call, { at: { turnIndex: 0, ordinal: 1, answered: [row.key] } });
    expect([slot.key, slot.replayed]).toEqual([next.keyFor(call, { conversationId: "c", turnIndex: 0, ordinal: 1 }), false]);
    expect(paid).toEqual(["acme first", "acme again"]);
  });

  it("IDENT-10 TURN-23 calls of one turn carried from two earlier turns, after a deploy: each index's guard lists its own rows, and each call is answered from its row there (one guard per earlier turn index, not one for all)", async () => {
    const { old, next, paid } = deployed();
    const acme = await old.turn({ conversationId: "c", turnIndex: 0 }).dispatch({ name: "pay", input: { to: "acme", memo: "first" } });
    const bob = await old.turn({ conversationId: "c", turnIndex: 1 }).dispatch({ name: "pay", input: { to: "bob", memo: "rent" } });
    const turn2 = next.turn({ conversationId: "c", turnIndex: 2 });
    const fromTurn0 = await turn2.dispatch({ name: "pay", input: { to: "acme", memo: "again" } }, { at: { turnIndex: 0, ordinal: 0 } });
    const fromTurn1 = await turn2.dispatch({ name: "pay", input: { to: "bob", memo: "again" } }, { at: { turnIndex: 1, ordinal: 0 } });
    expect([fromTurn0.key, fromTurn0.replayed, fromTurn1.key, fromTurn1.replayed]).toEqual([acme.key, true, bob.key, true]);
    expect(paid).toEqual(["acme first", "bob rent"]);
  });

  it("TURN-15 a call dispatched at an earlier turn is dispatched as that turn run again: a first claim refused before acceptance says 'may have happened', even from a turn that was not resumed", async () => {
    // Blind round N's N16: the position without `resumed` made a durable ledger's first claim's
    // "not performed" a fact, while the earlier turn's holder (a paused process) may still claim the
    // key and pay; and a row of the earlier turn swept meanwhile had run the effect already.
    const base = new MemoryLedger();
    const ledger = Object.assign(Object.create(base) as MemoryLedger, { capabilities: { ...base.capabilities, durability: "durable" as const } });
    const dispatcher = new Dispatcher({
      tools: new ToolRegistry([
        defineTool({
          name: "pay",
          effect: "keyed_write",
          input: z.object({ to: z.string(), memo: z.string() }),
          identity: ["to"],
          run: () => {
            throw new ToolError("503 before acceptance", { disposition: "not_performed" });
          },
        }),
      ]),
      ledger,
      logger: { warn: () => {} },
    });
    const call = { name: "pay", input: { to: "acme", memo: "x" } };
    await expect(dispatcher.turn({ conversationId: "c", turnIndex: 1 }).dispatch(call, { at: { turnIndex: 0, ordinal: 0 } })).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
    // The same call at its own position, in a turn this holder began: its own first claim, believed.
    await expect(dispatcher.turn({ conversationId: "c", turnIndex: 2 }).dispatch(call)).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: false });
  });

  it.each([
    ["an options value that is not an object", 5, "options"],
    ["an unknown option", { ta: { turnIndex: 0, ordinal: 0 } }, "options.ta"],
    ["an at that is not an object", { at: [0, 0] }, "options.at"],
    ["an unknown member of at", { at: { turnIndex: 0, ordinal: 0, key: "x" } }, "options.at.key"],
    ["an at without its ordinal", { at: { turnIndex: 0 } }, "options.at.ordinal"],
    ["answered keys that are not an array of strings", { at: { turnIndex: 0, ordinal: 0, answered: "k" } }, "options.at.answered"],
    ["the turn's own index", { at: { turnIndex: 1, ordinal: 0 } }, "options.at.turnIndex"],
    ["a later index", { at: { turnIndex: 2, ordinal: 0 } }, "options.at.turnIndex"],
  ])("ERR-1 %s is refused with invalid_argument naming it, before anything is claimed", async (_what, options, field) => {
    const { dispatcher, paid } = setup();
    const error = await dispatcher
      .turn({ conversationId: "c", turnIndex: 1 })
      .dispatch({ name: "pay", input: { to: "acme", memo: "x" } }, options as never)
      .catch((e: unknown) => e);
    expect(InvalidArgumentError.isInstance(error), String(error)).toBe(true);
    expect((error as InvalidArgumentError).field).toBe(field);
    expect(paid).toEqual([]);
  });

  it("KEY-4 an at whose ordinal is not a valid ordinal is refused where the key is derived, nothing run", async () => {
    const { dispatcher, paid } = setup();
    const error = await dispatcher
      .turn({ conversationId: "c", turnIndex: 1 })
      .dispatch({ name: "pay", input: { to: "acme", memo: "x" } }, { at: { turnIndex: 0, ordinal: -1 } })
      .catch((e: unknown) => e);
    expect((error as { code?: string }).code).toMatch(/invalid/);
    expect(paid).toEqual([]);
  });
});
