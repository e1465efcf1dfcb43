import { MemoryConversationStore, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";

/**
 * TURN-24: a committed turn read back reports the keys its calls were dispatched under. Once a
 * message is left unanswered, a deploy (scenario.ts `deploy`) gives the workers a release whose
 * payment tool keys the same call otherwise; a later send that reads the committed turn back (a
 * re-ask, a double send) derived its calls' keys under the new definition before the stores kept
 * them. The scenario is the one the kit's search found with a store that declares `callKeys` and
 * forgets them (30 runs at seed 2, Anthropic side, shrunk); the real store passes it, and a store
 * without the flag (an earlier one) passes it with the difference counted.
 */
const FOUND = { seed: 2, path: "3:2:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:67:1:1:1:2:2:2:2:1:1:0:0:0:0:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1" };

/** Declares callKeys and forgets them on read: the runner reads its turns back by derivation. */
const forgetting = ({ now }: { now: () => number }): ConversationStore => {
  const store = new MemoryConversationStore({ now });
  const turnsOf = store.turnsOf.bind(store);
  store.turnsOf = async (c, m) => (await turnsOf(c, m)).map(({ callKeys: _kept, ...turn }) => turn);
  return store;
};

/** A store of before TURN-24: no `supports.callKeys`, so the runner commits no keys. */
const earlier = ({ now }: { now: () => number }): ConversationStore => {
  const store = new MemoryConversationStore({ now });
  const { callKeys: _none, ...supports } = store.capabilities.supports!;
  Object.defineProperty(store, "capabilities", { value: { ...store.capabilities, supports } });
  return store;
};

async function replay(conversationStore?: (options: { now: () => number }) => ConversationStore): Promise<Record<string, number>> {
  let seen: Record<string, number> = {};
  await runEndToEnd(memory, { provider: "anthropic", runs: 30, ...FOUND, shrinkTimeLimitMs: 0, ...(conversationStore !== undefined ? { conversationStore } : {}), onStats: (stats) => (seen = stats) });
  return seen;
}

describe("a read-back after a deploy reports the keys the calls ran under (TURN-24)", () => {
  it("TURN-24 a store that declares callKeys and forgets them is rejected (the read-back derived a key no call ran under); the real store passes, and a store without the flag passes with the difference counted", async () => {
    const error = await runEndToEnd(memory, { provider: "anthropic", runs: 30, ...FOUND, shrinkTimeLimitMs: 0, conversationStore: forgetting }).catch((e: unknown) => e);
    expect(expectReadable(error, FOUND.seed)).toMatch(/breaks TURN-24\): conv-\d: call \S+ \(turn \d+\) was dispatched under key \w+, and a send reported it with key \w+ after a deploy/);
    const real = await replay();
    expect(real).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(real.deploys).toBeGreaterThan(0);
    expect(real.deploy_readback_keys_rederived).toBeUndefined();
    const before = await replay(earlier);
    expect(before).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(before.deploy_readback_keys_rederived).toBeGreaterThan(0);
  }, 120_000);
});
