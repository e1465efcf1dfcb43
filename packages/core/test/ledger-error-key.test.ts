import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, InvalidLedgerInputError, LedgerUnavailableError, MemoryLedger, defineTool, type Ledger } from "../src/index.js";
import { faulty, unavailable } from "./helpers.js";

// RECORD-2: a failed turn's record lists each dispatched call with its key, and the runner reads
// the key from the error the dispatch raised. A ledger_unavailable raised after the tool ran
// (DISPATCH-10) had none: the record said "send_payment may have happened" under no key, its
// `effects` listed nothing, and the payment was told nowhere a reconciler or a user could match
// (the fault suite's "untold", with the row left in flight for reconciliation).

const turn0 = { conversationId: "conv_ledger_error_key", turnIndex: 0 };
const call = { name: "send_payment", input: { payee: "acme", amount: 125_000, currency: "EUR" } };

function payments() {
  const effects: string[] = [];
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string() }),
    async run(_args, ctx) {
      effects.push(ctx.idempotencyKey);
      return { paymentId: `pay_${effects.length}` };
    },
  });
  return { tool, effects };
}

function refusing(write: "claim" | "complete", error: () => Error): Ledger {
  const base = new MemoryLedger();
  return Object.assign(Object.create(base) as Ledger, { capabilities: base.capabilities, [write]: () => Promise.reject(error()) });
}

describe("RECORD-2: a ledger_unavailable a write's dispatch raises names the call's key", () => {
  it("DISPATCH-10 the complete out of reach past recordRetryMs: the tool ran, the error carries its key", async () => {
    const down = payments();
    const { ledger } = faulty("complete", ["down"]);
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, recordRetryMs: 0 });
    const failure = await dispatcher.turn(turn0).dispatch(call).catch((e: unknown) => e);
    expect(LedgerUnavailableError.isInstance(failure)).toBe(true);
    // The run returned its result: the error says the effect happened (ERR-4) and keeps the store's words.
    expect(failure).toMatchObject({ code: "ledger_unavailable", key: down.effects[0], effectHappened: true });
    expect((failure as Error).message).toContain("connection terminated due to connection timeout");
    // The store's own error stays reachable.
    expect((failure as Error).cause).toBeDefined();
  });

  it("DISPATCH-10 a refusal of the complete raised as ledger_unavailable (ERR-4) carries the key too", async () => {
    const down = payments();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: refusing("complete", () => new InvalidLedgerInputError("pool", "the connection is inside a transaction")), recordRetryMs: 0 });
    const failure = await dispatcher.turn(turn0).dispatch(call).catch((e: unknown) => e);
    expect(failure).toMatchObject({ code: "ledger_unavailable", key: down.effects[0] });
  });

  it("DISPATCH-10 a claim out of reach past claimRetryMs: nothing ran, the error carries the key it would have run under", async () => {
    const down = payments();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: refusing("claim", unavailable), claimRetryMs: 0 });
    const failure = await dispatcher.turn(turn0).dispatch(call).catch((e: unknown) => e);
    expect(down.effects).toEqual([]);
    expect(failure).toMatchObject({ code: "ledger_unavailable", key: dispatcher.keyFor(call, turn0) });
  });
});
