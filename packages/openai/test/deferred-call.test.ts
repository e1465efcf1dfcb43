import { call, respond, say, startMockOpenAI } from "@dispatch-once/mock-openai";
import { afterEach, describe, expect, it } from "vitest";
import { PAY_ACME, PAY_BOB, closeDownstreams, setup } from "./fixtures.js";

afterEach(closeDownstreams);

/*
 * TURN-23 over the Responses API (its readTurn gives each call's arguments, parsed from the
 * committed function_call item): attempt 1 of turn 0 pays acme and is cut before
 * response.completed; the retry's model pays bob and the turn commits; turn 1 pays acme again,
 * re-worded. One acme payment in the effect log, and a re-send reads turn 1 back under turn 0's key.
 */
describe("a call a re-run left unanswered, made again in the next turn (TURN-23, over the Responses API)", () => {
  it("TURN-23 acme is paid once; turn 1's call carries turn 0's key, as sent and as read back from the store", async () => {
    let requests = 0;
    const provider = await startMockOpenAI({
      seed: "openai-deferred",
      script: () => {
        requests += 1;
        if (requests === 1) return respond(call("send_payment", PAY_ACME));
        if (requests === 2) return respond(call("send_payment", PAY_BOB));
        if (requests === 3) return respond(call("send_payment", { ...PAY_ACME, memo: "as asked" }));
        return say("Done.");
      },
    });
    try {
      // The first response only: cut before response.completed, after the payment ran.
      provider.queueFault({ kind: "reset", at: { beforeCompleted: true }, timing: { beforeCompletedMs: 300 } });
      const { runner, effects } = await setup(provider, { guarded: true, latencyMs: 20 });
      const result = await runner.send("conv-deferred", { id: "m1", content: "pay acme and bob" });
      const acmeKey = result.records?.[0]?.calls[0]?.key;
      expect(result.records?.map((r) => [r.turnIndex, r.calls.map((c) => [c.name, c.effect])])).toEqual([[0, [["send_payment", "happened"]]]]);
      expect(effects().map((e) => e.idempotencyKey)).toEqual([acmeKey, expect.any(String)]);
      const turn1 = result.turns.find((t) => t.turnIndex === 1);
      expect(turn1?.calls).toEqual([expect.objectContaining({ key: acmeKey, ordinal: 0, replayed: true, carriedFromTurn: 0, result: { paymentId: effects()[0]!.paymentId, status: "accepted" } })]);
      const again = await runner.send("conv-deferred", { id: "m1", content: "pay acme and bob" });
      expect(again.fromStore).toBe(true);
      expect(again.turns.map((t) => t.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn]))).toEqual(result.turns.map((t) => t.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn])));
      expect(effects()).toHaveLength(2);
    } finally {
      await provider.close();
    }
  });
});
