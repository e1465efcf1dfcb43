import { MemoryConversationStore, type ConversationStore, type ToolCall } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd, type EndToEndOptions } from "../src/index.js";
import { memory, realDispatcher, wrapDispatcher } from "./audit-mutants.js";
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

/**
 * The other side of the flag's residual: on a store without `supports.callKeys`, only a deploy
 * excuses a read-back key that differs from the one the call was dispatched under. Without one, the
 * key the read-back reports is the one judged. The plant: a runner whose read-back (a send answered
 * from the store, `fromStore`) derives every call at ordinal 0, so the second of two identical calls
 * is reported under the first's key (planted through the kit's `runner` hook, with the keys derived
 * by the worker's own dispatcher from the call as it was dispatched). Blind round O's O35 excused any
 * such difference, deploy or not, and passed it. Found by a search with the plant (60 runs at each
 * side's CI seed, shrunk for 5 s: Anthropic 20261129, run 1; OpenAI 20261201, run 1); replayed.
 * With O35 applied the Anthropic path's plant passes; the OpenAI path's passed too, or (one run of
 * three) was rejected by DISPATCH-5 (its key answered two payments): not the verdict asserted.
 */
const ORDINAL_BLIND: Record<(typeof RUNNER_PROVIDERS)[number], { seed: number; path: string }> = {
  anthropic: { seed: 20261129, path: "0:1:0:0:0:0:0:0:0:0" },
  openai: { seed: 20261201, path: "0:0" },
};

/** The calls each worker's dispatcher was handed, by call id, and a keyFor to derive their keys (deploys are off: one release). */
const dispatched = new Map<string, ToolCall>();
let keyFor: ((call: ToolCall, context: { conversationId: string; turnIndex: number; ordinal: number }) => string) | undefined;
const readBack = { rekeyed: 0 };

const recording: NonNullable<EndToEndOptions["dispatcher"]> = (tools, ledger, defaults) => {
  const inner = realDispatcher(tools, ledger, defaults);
  keyFor = inner.keyFor.bind(inner) as typeof keyFor;
  return wrapDispatcher(inner, (context) => {
    const turn = inner.turn(context);
    return {
      dispatch: (call, options) => {
        if (call.callId !== undefined) dispatched.set(call.callId, call);
        return turn.dispatch(call, options);
      },
    };
  });
};

/** A read-back that derives each call's key at ordinal 0: identical calls of a turn share the first one's key. */
const ordinalBlindReadBack: NonNullable<EndToEndOptions["runner"]> = (runner) => ({
  send: async (conversationId, message) => {
    const result = await runner.send(conversationId, message);
    if (!result.fromStore) return result;
    for (const turn of result.turns) {
      for (const x of turn.calls) {
        const call = dispatched.get(x.callId);
        if (x.key === undefined || (x.ordinal ?? 0) === 0 || call === undefined || keyFor === undefined) continue;
        x.key = keyFor(call, { conversationId, turnIndex: turn.turnIndex, ordinal: 0 });
        readBack.rekeyed++;
      }
    }
    return result;
  },
});

describe.each(RUNNER_PROVIDERS)("a read-back without a deploy on a store without callKeys reports the keys the calls ran under (TURN-24, TURN-4; provider %s)", (provider) => {
  it("TURN-4 a read-back that derives identical calls at ordinal 0 reports the second under the first's key, on a store without the flag and no deploy, and is rejected; the real runner passes the scenario", async () => {
    const { seed, path } = ORDINAL_BLIND[provider];
    const options = { deploys: false, provider, runs: 60, seed, path, shrinkTimeLimitMs: 0, conversationStore: earlier };
    let planted: Record<string, number> = {};
    let error: unknown;
    // A replay whose races go otherwise on a loaded host may read no identical calls back: it says
    // nothing, so up to 3 replays, the verdict taken from the first that reaches the read-back.
    for (let i = 0; i < 3; i++) {
      readBack.rekeyed = 0;
      error = await runEndToEnd(memory, { ...options, dispatcher: recording as never, runner: ordinalBlindReadBack, onStats: (stats) => (planted = stats) }).catch((e: unknown) => e);
      if (readBack.rekeyed > 0) break;
    }
    expect(readBack.rekeyed, `seed ${seed}, path ${path}: no replay of 3 read identical calls back`).toBeGreaterThan(0);
    expect(expectReadable(error, seed)).toMatch(/breaks (TURN-4|DISPATCH-6)\): send_payment call \S+ \(turn \d+ of conv-\d+, message "[^"]+"\) was dispatched under key \w+, the key of /);
    expect(planted.deploy_readback_keys_rederived).toBeUndefined();
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { ...options, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
  }, 120_000);
});
