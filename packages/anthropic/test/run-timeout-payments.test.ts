import { Dispatcher, MemoryLedger, effectOf, type DispatchEvent } from "@dispatch-once/core";
import { afterAll, describe, expect, it } from "vitest";
import { PAY_ACME, closeDownstreams, paymentsDownstream } from "./fixtures.js";

afterAll(closeDownstreams);

describe("DISPATCH-18 over the mock payments API: a payment whose request hangs", () => {
  it("DISPATCH-18 answered at the bound (possibly), the take-over meets 409 in progress (released, possibly), the hung request lands, the next re-send gets it: one payment in the effect log, and no answer ever said it did not happen", async () => {
    const down = await paymentsDownstream(0);
    try {
      // The first create_payment waits (all but) for ever before its effect; the key is held in progress meanwhile.
      down.server.injectFault({ latencyMs: 600_000, operations: ["create_payment"] }, { times: 1 });
      const ledger = new MemoryLedger();
      const events: DispatchEvent[] = [];
      const dispatcher = new Dispatcher({ tools: down.tools, ledger, runTimeoutMs: 300, waitMs: 20_000, pollMs: 10, onEvent: (e) => events.push(e), logger: { warn: () => {} } });
      const context = { conversationId: "c-pay-hang", turnIndex: 0 };
      const call = { name: "send_payment", input: PAY_ACME };
      const key = dispatcher.keyFor(call, context);

      const first = await dispatcher.turn(context).dispatch(call).catch((e: unknown) => e);
      expect(first).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 300 });
      expect(effectOf(first)).toBe("possibly");
      // The run's signal aborted its HTTP request; that late failure is recorded under fence 1 (a keyed_write released, may have happened).
      const until = Date.now() + 20_000;
      while ((await ledger.lookup(key))?.state !== "released" && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      expect(events.find((e) => e.type === "recorded" && e.state === "released")).toMatchObject({ effectMayHaveHappened: true });

      // The re-send re-runs under the same key: the API still holds it in progress (409).
      const second = await dispatcher.turn(context).dispatch(call).catch((e: unknown) => e);
      expect(second).toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
      expect(effectOf(second)).toBe("possibly");
      expect(down.effects()).toEqual([]);

      // The hung request goes on and lands; the next re-send gets the API's stored answer under the same key.
      expect(down.server.releaseLatency()).toBe(1);
      let third: unknown;
      for (let i = 0; i < 100; i++) {
        third = await dispatcher.turn(context).dispatch(call).catch((e: unknown) => e);
        if (!(third as { code?: string }).code) break;
        expect(effectOf(third)).toBe("possibly");
        await new Promise((r) => setTimeout(r, 20));
      }
      const effects = down.effects();
      expect(effects).toHaveLength(1);
      expect(effects[0]!.idempotencyKey).toBe(key);
      expect(third).toMatchObject({ replayed: false, result: { paymentId: effects[0]!.paymentId } });
      expect(await ledger.lookup(key)).toMatchObject({ state: "completed" });
    } finally {
      await down.server.close();
    }
  }, 60_000);
});
