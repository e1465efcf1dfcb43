// An operator settles a row while its owner is paused past its lease (RESOLVE-2, RESOLVE-5): fencing
// decides (the owner's late complete is refused), and what the owner's caller is told must be the
// truth about the effect its run performed (DISPATCH-8).
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, StaleClaimError, defineTool, effectOf, type Ledger, type Resolution } from "../src/index.js";

function durable(ledger: MemoryLedger): Ledger {
  return Object.assign(Object.create(ledger), { capabilities: { ...ledger.capabilities, durability: "durable" as const } }) as Ledger;
}

describe("an operator's resolution while the owner is paused past its lease", () => {
  const resolutions: [string, Resolution][] = [
    ["not_performed", { outcome: "not_performed" }],
    ["failed", { outcome: "failed", error: { name: "OperatorResolvedFailure", message: "no booking found" } }],
    ["completed", { outcome: "completed", result: '{"by":"hand"}' }],
  ];
  it.each(resolutions)("DISPATCH-8 RESOLVE-5 resolved %s: the owner's late complete is refused, the row is the operator's, and the owner's caller is told the effect happened", async (_name, resolution) => {
    let now = 1_000_000;
    const ledger = durable(new MemoryLedger({ now: () => now }));
    const bookings: string[] = [];
    const tool = defineTool({
      name: "book_table",
      effect: "unkeyed_write",
      input: z.object({ n: z.number() }),
      run: async (args, ctx) => {
        // The owner pauses past its lease (a GC pause, a frozen VM); meanwhile the operator, who
        // found nothing downstream yet, settles the row. Then the owner's request lands.
        now += 120_000;
        await ledger.resolve!({ key: ctx.idempotencyKey, resolution, actor: "ops", reason: "checked the console" });
        bookings.push(`table for ${args.n}`);
        return { booked: true };
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 30_000, logger: { warn: () => {} } });
    const call = { name: "book_table", input: { n: 4 } };
    const turn = { conversationId: "conv-op", turnIndex: 0 };
    const key = dispatcher.keyFor(call, turn);
    const error = await dispatcher.dispatch(call, turn).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(bookings).toHaveLength(1);
    // Fencing decided: the row is the operator's, at the fence the resolution gave it.
    expect(await ledger.lookup(key)).toMatchObject({ fence: 2, state: resolution.outcome === "not_performed" ? "released" : resolution.outcome });
    expect(error).toBeInstanceOf(StaleClaimError);
    // The run performed the booking: its caller (and the runner's record) must not hear "possibly".
    expect(effectOf(error)).toBe("yes");
    expect((error as StaleClaimError).effectHappened).toBe(true);
  });

  it("DISPATCH-8 a claim lost before the tool returned stays 'possibly'", async () => {
    const error = new StaleClaimError("k".repeat(32), 3);
    expect(effectOf(error)).toBe("possibly");
    expect(error.effectHappened).toBeUndefined();
  });
});
