import { MemoryConversationStore, type CallDispatcher, type ConversationStore, type Ledger, type ToolDefinition } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { DispatcherDefaults } from "../src/world.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { memory, realDispatcher, wrapDispatcher } from "./audit-mutants.js";

/**
 * Mutation round of 2026-12-04, above the stores: a survivor of the kit of before, kept as a
 * regression. A dispatcher (or runner) that takes the turn index from the message's FIRST turn
 * for every turn of the message: a later turn of a tool loop whose call repeats a first-turn call
 * (tool and identity) gets the first call's key, is answered from the first call's ledger row, and
 * the payment asked for a second time never happens while the user is told it did. The scripted
 * model made calls only in a message's first turn, so 60 runs passed it; a message's follow-up
 * turn (scenario.ts `followUp`) now reaches it.
 */
const SEARCH_BUDGET_MS = 90_000;

/**
 * The message's first turn (its bound index, TurnSnapshot.message.turnIndex) of each turn begun,
 * by conversation and turn index. Filled by an observing wrapper of the reference store: every
 * attempt begins its turn there before it dispatches, so the entry is this case's.
 */
const firstTurnOf = new Map<string, number>();

function observedStore({ now }: { now: () => number }): ConversationStore {
  const store = new MemoryConversationStore({ now });
  const begin = store.beginTurn.bind(store);
  store.beginTurn = async (conversationId, fence) => {
    const snapshot = await begin(conversationId, fence);
    if (snapshot !== undefined) firstTurnOf.set(`${conversationId}#${snapshot.turnIndex}`, snapshot.message.turnIndex ?? snapshot.turnIndex);
    return snapshot;
  };
  return store;
}

/** The planted bug: the real dispatcher, handed the message's first turn index for every turn of the message. */
function firstTurnIndex(tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults): CallDispatcher {
  const real = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(real, (context) => real.turn({ ...context, turnIndex: firstTurnOf.get(`${context.conversationId}#${context.turnIndex}`) ?? context.turnIndex }), { carry: false });
}

describe.each(RUNNER_PROVIDERS)("mutation round of 2026-12-04: the end-to-end oracle rejects a key of the message's first turn (provider %s)", (provider) => {
  it("CONF-2 keys that take the message's first turn index answer a later turn's repeated payment from the first turn's row; the real dispatcher passes that scenario", async () => {
    const error = await runEndToEnd(memory, { deploys: false,
      provider,
      runs: 300,
      seed: 5,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: SHRINK_BUDGET_MS,
      conversationStore: observedStore,
      dispatcher: firstTurnIndex,
    }).catch((e: unknown) => e);
    const message = expectReadable(error, 5);
    expect(message).toMatch(/breaks CONF-2/);
    expect(message).toMatch(/is the committed answer of calls of turns \d+ and \d+/);
    // The control: the mutant's counterexample, once, under the real dispatcher and the same hooks.
    // It passes and reached what the mutant breaks (a later turn repeating a first-turn call), so
    // the verdict is the mutant's doing. (It replaced 40 runs of seed 5.)
    const cx = (error as ConformanceFailure).counterexample!;
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: cx.seed, path: cx.path, conversationStore: observedStore, dispatcher: realDispatcher, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(seen.follow_up_repeats ?? 0).toBeGreaterThan(0);
  }, 600_000);
});
