import Anthropic from "@anthropic-ai/sdk";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool, type CallDispatcher } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ConversationRunner } from "../src/index.js";
import { PAY_ACME, PAY_BOB, paymentsDownstream } from "./fixtures.js";

/*
 * TURN-23 over the real SDK, and its read-back (TURN-7): attempt 1 pays acme and its stream is cut
 * before message_stop; the retry's model pays bob instead and the turn commits; the next turn of
 * the message pays acme, re-worded. It is answered from turn 0's payment, and a re-send of the
 * answered message reads it back under that key.
 */
const use = (payee: string, memo: string) => ({ type: "tool_use" as const, name: "send_payment", input: { payee, amount: 42, currency: "EUR", memo } });

/**
 * The three tests' world: request 1 pays acme (its stream cut before message_stop), request 2 (the
 * retry) pays bob, request 3 (turn 1) makes `turn1`'s calls, then text. `paid` is the effect log.
 */
async function deferredWorld(turn1: ReturnType<typeof use>[]) {
  let requests = 0;
  const provider = await startMockProvider({
    script: () => {
      requests += 1;
      if (requests === 1) return { content: [use("acme", "first")] };
      if (requests === 2) return { content: [use("bob", "rent")] };
      if (requests === 3) return { content: turn1 };
      return { content: [{ type: "text" as const, text: "Done." }], stopReason: "end_turn" };
    },
  });
  provider.faults.enqueue({ kind: "reset", at: { beforeMessageStop: true } }); // the first response only
  const paid: string[] = [];
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number(), currency: z.string(), memo: z.string() }),
      identity: ["payee", "amount", "currency"],
      run: async (args) => {
        paid.push(args.payee);
        return { paymentId: `pay_${paid.length}` };
      },
    }),
  ]);
  const store = new MemoryConversationStore();
  const dispatcher = new Dispatcher({ tools, ledger: new MemoryLedger() });
  const runnerWith = (d: CallDispatcher = dispatcher) =>
    new ConversationRunner({
      client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
      dispatcher: d,
      store,
      model: "claude-sonnet-5-5",
      tools: tools.providerSchemas(),
      retry: { backoffMs: () => 1 },
    });
  return { provider, paid, dispatcher, runnerWith };
}

describe("a call a re-run left unanswered, made again in the next turn (TURN-23, over the SDK)", () => {
  it("TURN-23 acme is paid once; turn 1's call carries turn 0's key, as sent and as read back", async () => {
    const { provider, paid, runnerWith } = await deferredWorld([use("acme", "as asked")]);
    try {
      const runner = runnerWith();
      const result = await runner.send("conv-deferred", { id: "m1", content: "pay acme and bob" });
      expect(paid).toEqual(["acme", "bob"]);
      const acmeKey = result.records?.[0]?.calls[0]?.key;
      expect(result.records?.map((r) => [r.turnIndex, r.calls.map((c) => [c.name, c.effect])])).toEqual([[0, [["send_payment", "happened"]]]]);
      const turn1 = result.turns.find((t) => t.turnIndex === 1);
      expect(turn1?.calls).toEqual([expect.objectContaining({ key: acmeKey, replayed: true, result: { paymentId: "pay_1" }, carriedFromTurn: 0 })]);
      // A re-send of the answered message reads the same back from the store.
      const again = await runner.send("conv-deferred", { id: "m1", content: "pay acme and bob" });
      expect(again.fromStore).toBe(true);
      expect(again.turns.find((t) => t.turnIndex === 1)?.calls).toEqual([expect.objectContaining({ key: acmeKey, ordinal: 0, carriedFromTurn: 0 })]);
      expect(again.turns.find((t) => t.turnIndex === 0)?.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: "pay_2" } })]);
      expect(paid).toEqual(["acme", "bob"]);
    } finally {
      await provider.close();
    }
  });

  it("TURN-23 read back, turn 1's carried call and an identical new call after it keep the keys they were dispatched under (the new call's row is not taken for a release that carried nothing)", async () => {
    // The deferred acme, then acme once more on purpose: one carried, one new.
    const { provider, paid, runnerWith } = await deferredWorld([use("acme", "as asked"), use("acme", "and once more")]);
    try {
      const runner = runnerWith();
      const result = await runner.send("conv-deferred-2", { id: "m1", content: "pay acme and bob, then acme twice" });
      expect(paid).toEqual(["acme", "bob", "acme"]);
      const reported = (turns: typeof result.turns) => turns.map((t) => t.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn]));
      // The carried call still counts among turn 1's identical calls (TURN-4): the new one is ordinal 1.
      expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.ordinal, c.carriedFromTurn])).toEqual([
        [0, 0],
        [1, undefined],
      ]);
      const again = await runner.send("conv-deferred-2", { id: "m1", content: "pay acme and bob, then acme twice" });
      expect(again.fromStore).toBe(true);
      expect(reported(again.turns)).toEqual(reported(result.turns));
    } finally {
      await provider.close();
    }
  });

  it("TURN-23 read back, a turn an earlier release committed (both identical calls of turn 1 under their own turn's keys) reads as it dispatched them", async () => {
    const { provider, paid, dispatcher, runnerWith } = await deferredWorld([use("acme", "as asked"), use("acme", "and once more")]);
    try {
      // The release before TURN-23: a dispatcher the runner cannot carry calls with (no dispatch of its own).
      const before = runnerWith({ turn: (c) => dispatcher.turn(c), effectClassOf: (n) => dispatcher.effectClassOf(n), keyFor: dispatcher.keyFor.bind(dispatcher) } as CallDispatcher);
      const result = await before.send("conv-deferred-3", { id: "m1", content: "pay acme and bob, then acme twice" });
      expect(paid).toEqual(["acme", "bob", "acme", "acme"]);
      const turn1 = result.turns.find((t) => t.turnIndex === 1)!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn]);
      expect(turn1.map(([, ordinal, carried]) => [ordinal, carried])).toEqual([
        [0, undefined],
        [1, undefined],
      ]);
      const again = await runnerWith().send("conv-deferred-3", { id: "m1", content: "pay acme and bob, then acme twice" });
      expect(again.fromStore).toBe(true);
      expect(again.turns.find((t) => t.turnIndex === 1)!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn])).toEqual(turn1);
    } finally {
      await provider.close();
    }
  });
});

/*
 * TURN-23 attacked over the payments API: the carried call's row is one a dead holder left in
 * flight. Worker A began turn 0, claimed acme's payment, paid it and died before completing the
 * row. Worker B takes turn 0 over (resumed): its model pays bob and the turn commits, its record
 * listing acme's row as may have happened. In turn 1 the model pays acme, re-worded: the call is
 * dispatched under turn 0's key, whose lapsed claim B takes over, and the re-run sends A's stored
 * request under A's Idempotency-Key, which the API collapses (LEDGER-21).
 */
describe("a carried call whose row a dead holder left in flight (TURN-23, LEDGER-21, over the payments API)", () => {
  it("TURN-23 the take-over of the carried row re-sends A's request under A's key: one acme payment in the effect log, and turn 1 reports it carried", async () => {
    const down = await paymentsDownstream(0);
    let requests = 0;
    const provider = await startMockProvider({
      script: () => {
        requests += 1;
        if (requests === 1) return { content: [{ type: "tool_use" as const, name: "send_payment", input: PAY_BOB }] };
        if (requests === 2) return { content: [{ type: "tool_use" as const, name: "send_payment", input: { ...PAY_ACME, memo: "as asked, again" } }] };
        return { content: [{ type: "text" as const, text: "Done." }], stopReason: "end_turn" };
      },
    });
    try {
      let now = 1_700_000_000_000;
      const store = new MemoryConversationStore({ now: () => now });
      const ledger = new MemoryLedger();
      // Worker A: its process dies after the payment, before any write that follows it arrives.
      const never = () => new Promise<never>(() => {});
      const deadAfterClaim = Object.assign(Object.create(ledger) as MemoryLedger, { renew: never, complete: never, fail: never, markUnknown: never, release: never });
      const a = new Dispatcher({ tools: down.tools, ledger: deadAfterClaim, leaseMs: 300 });
      await store.appendUserMessage("conv-dead", { id: "m1", content: { role: "user", content: "pay acme and bob" } });
      const lease = await store.acquireLease("conv-dead", "worker-a", 1_000);
      if (!lease.acquired) throw new Error("worker A could not take the conversation");
      const snapshot = await store.beginTurn("conv-dead", lease.fence);
      const acme = { name: "send_payment", input: PAY_ACME };
      const acmeKey = a.keyFor(acme, { conversationId: "conv-dead", turnIndex: snapshot!.turnIndex, ordinal: 0 });
      void a.turn({ conversationId: "conv-dead", turnIndex: snapshot!.turnIndex }).dispatch(acme);
      for (let i = 0; i < 200 && down.effects().length === 0; i++) await new Promise((r) => setTimeout(r, 5));
      expect(down.effects().map((e) => e.idempotencyKey)).toEqual([acmeKey]);
      now += 60_000; // A's conversation lease lapses; its ledger claim lapses 300 ms after it was made
      const runner = new ConversationRunner({
        client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
        dispatcher: new Dispatcher({ tools: down.tools, ledger, waitMs: 10_000, pollMs: 10 }),
        store,
        model: "claude-sonnet-5-5",
        tools: down.tools.providerSchemas(),
        retry: { backoffMs: () => 1 },
      });
      const result = await runner.send("conv-dead", { id: "m1", content: "pay acme and bob" });
      // The effect log and what was committed agree: acme once (A's key), bob once.
      const effects = down.effects();
      expect(effects).toHaveLength(2);
      expect(effects[0]!.idempotencyKey).toBe(acmeKey);
      expect(result.records?.map((r) => [r.turnIndex, r.resumed, r.calls.map((c) => [c.key, c.effect])])).toEqual([[0, true, [[acmeKey, "may_have_happened"]]]]);
      const turn1 = result.turns.find((t) => t.turnIndex === 1);
      expect(turn1?.calls).toEqual([expect.objectContaining({ key: acmeKey, carriedFromTurn: 0, result: { paymentId: effects[0]!.paymentId, status: "accepted" }, storedRequest: PAY_ACME })]);
      expect(await ledger.lookup(acmeKey)).toMatchObject({ state: "completed" });
    } finally {
      await provider.close();
      await down.server.close();
    }
  }, 30_000);
});
