import type { CallDispatcher } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory, realDispatcher } from "./audit-mutants.js";

/**
 * TURN-12 with TURN-23, an oracle false alarm: two messages sent at once; the first taken up
 * ("c0 message 1") paid the same payment twice at turn 0 (two identical asks, ordinals 0 and 1),
 * then failed for good. The other ("c0 message 0") was bound at the failed turn's index, as TURN-12
 * says, and so met that message's rows: its first turn was answered from ordinal 0's row, its re-run
 * omitted the call, and its next turn's repeat was carried to turn 0 and answered from ordinal 1's
 * row. Two payments for the two asks made at that index, none under turn 1's key; the deferred-call
 * check counted both against the one ask of the message bound second and reported "performed 2
 * times for message \"conv-0:c0 message 0\" over its turns 0, which asked for it once" (seed
 * 449695202, 1,000 runs, found by a hunt of 2026-12-06). The shrunk scenario must pass, and
 * the allowance must not excuse a third payment: a runner that does not carry the repeat (TURN-23
 * disabled, as e2e-deferred-call-planted.test.ts plants it) pays it under turn 1's key and is rejected.
 */
const PATH = "267:48:0:0:0:0:0:0:1:0:2:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1";

describe("CONF-2 TURN-12 TURN-23 a deferred call at a failed message's index", () => {
  it("CONF-2 TURN-23 the deferred-call count allows the asks of another message bound at the same index (seed 449695202, the shrunk path)", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "anthropic", runs: 1, seed: 449695202, path: PATH, onStats: (s) => Object.assign(seen, s) });
    expect({ concurrent: (seen.concurrent_messages ?? 0) > 0, replayed: seen.replayed_passed }).toEqual({ concurrent: true, replayed: 1 });
  }, 120_000);

  it("CONF-2 TURN-23 a runner that does not carry the repeat pays it a third time there and is rejected (the same path)", async () => {
    const withoutCarrying = (...[tools, ledger, defaults]: Parameters<typeof realDispatcher>): CallDispatcher => {
      const inner = realDispatcher(tools, ledger, defaults);
      return { turn: (context) => inner.turn(context), effectClassOf: (name) => inner.effectClassOf(name), keyFor: inner.keyFor.bind(inner) } as CallDispatcher;
    };
    const error = await runEndToEnd(memory, { provider: "anthropic", runs: 1, seed: 449695202, path: PATH, dispatcher: withoutCarrying }).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/performed 3 times for message "conv-0:c0 message 0" over its turns 0 and 1, which asked for it 2 times \(with another message bound at its index\)/);
  }, 120_000);
});
