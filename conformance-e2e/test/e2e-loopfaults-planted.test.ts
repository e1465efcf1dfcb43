import { Dispatcher, MemoryConversationStore, ToolRegistry, type CallDispatcher, type ConversationStore, type Ledger, type ToolDefinition } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { DispatcherDefaults } from "../src/world.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { memory } from "./audit-mutants.js";

/**
 * Faults in a later turn of a tool loop (scenario.ts: a death, an unstorable result or the outage
 * on a follow-up call). The planted bug: a runner that takes over a message in the middle of its
 * tool loop (its holder died after the first turn committed, TURN-15: resumed, not bound by this
 * call, never failed) restarts the keys from the message's first turn index. The dead holder's
 * follow-up call then has another key in the re-run: a payment it made is made again, or the
 * committed call's key is not the one spec §3 gives it. Deaths landed on first-turn calls only in
 * the kit of before, so a take-over mid-loop never happened and the bug passed every run.
 */
const SEARCH_BUDGET_MS = 120_000;

/** The snapshot of each turn begun, by conversation and turn index (an observing wrapper of the reference store). */
const restartIndexOf = new Map<string, number>();

function observedStore({ now }: { now: () => number }): ConversationStore {
  const store = new MemoryConversationStore({ now });
  const begin = store.beginTurn.bind(store);
  store.beginTurn = async (conversationId, fence) => {
    const snapshot = await begin(conversationId, fence);
    if (snapshot === undefined) return snapshot;
    const slot = `${conversationId}#${snapshot.turnIndex}`;
    const first = snapshot.message.turnIndex ?? snapshot.turnIndex;
    // A take-over mid-loop: resumed, not bound by this call, never failed, past the message's first turn.
    const midLoopTakeover = snapshot.resumed && snapshot.bound === false && snapshot.message.firstFailedAt === undefined && snapshot.turnIndex > first;
    if (midLoopTakeover) restartIndexOf.set(slot, first);
    else restartIndexOf.delete(slot);
    return snapshot;
  };
  return store;
}

/** The planted bug: the real dispatcher, handed the message's first turn index in a turn taken over mid-loop. */
function restartsAtFirstTurn(tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults): CallDispatcher {
  const real = new Dispatcher({ ...defaults, ledger, tools: new ToolRegistry(tools) });
  return {
    turn: (context) => real.turn({ ...context, turnIndex: restartIndexOf.get(`${context.conversationId}#${context.turnIndex}`) ?? context.turnIndex }),
    effectClassOf: (name) => real.effectClassOf(name),
  };
}

describe.each(RUNNER_PROVIDERS)("faults in a tool loop's later turn: the end-to-end oracle rejects a take-over that restarts the keys (provider %s)", (provider) => {
  it("CONF-2 a take-over mid-loop that keys the follow-up call at the message's first turn index pays again or commits a key spec §3 does not give", async () => {
    const error = await runEndToEnd(memory, {
      provider,
      runs: 300,
      seed: 5,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: SHRINK_BUDGET_MS,
      conversationStore: observedStore,
      dispatcher: restartsAtFirstTurn,
    }).catch((e: unknown) => e);
    const message = expectReadable(error, 5);
    // The dead holder's follow-up payment made again under the restarted key (CONF-2), in the seeds searched.
    expect(message).toMatch(/breaks CONF-2/);
  }, 600_000);

  it("the real dispatcher under the same hooks passes the same scenarios", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, {
      provider,
      runs: 40,
      seed: 5,
      conversationStore: observedStore,
      dispatcher: (tools, ledger, defaults) => new Dispatcher({ ...defaults, ledger, tools: new ToolRegistry(tools) }),
      onStats: (stats) => Object.assign(seen, stats),
    });
    // The runs reached what the mutant breaks: a worker dying in a later turn of a tool loop.
    expect(seen.follow_up_deaths).toBeGreaterThan(0);
  }, 600_000);
});
