import { MemoryConversationStore, ToolFailedError, isDispatchOnceError, type CallDispatcher, type ConversationStore, type Ledger, type ToolDefinition } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import type { DispatcherDefaults } from "../src/world.js";
import { expectReadable } from "./readable.js";
import { memory, realDispatcher, wrapDispatcher } from "./audit-mutants.js";

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
/** The turns begun past their message's first turn (a tool loop's later turn), by conversation and turn index. */
const laterTurns = new Set<string>();

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
    if (snapshot.turnIndex > first) laterTurns.add(slot);
    else laterTurns.delete(slot);
    return snapshot;
  };
  return store;
}

/** The planted bug: the real dispatcher, handed the message's first turn index in a turn taken over mid-loop. */
function restartsAtFirstTurn(tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults): CallDispatcher {
  const real = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(real, (context) => real.turn({ ...context, turnIndex: restartIndexOf.get(`${context.conversationId}#${context.turnIndex}`) ?? context.turnIndex }));
}

/**
 * The second planted bug: a dispatcher that, in a tool loop's later turn, tells a result that
 * could not be stored (the effect happened, the row failed closed: LEDGER-10) as a definite
 * failure of the tool. The runner then commits the call as an error the model reads, and its
 * records say the payment did not happen. Unstorable results fell on first-turn calls only in
 * the kit of before.
 */
function unstorableAsFailedInLaterTurn(tools: ToolDefinition<any, any>[], ledger: Ledger, defaults: DispatcherDefaults): CallDispatcher {
  const real = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(real, (context) => {
    const turn = real.turn(context);
    if (!laterTurns.has(`${context.conversationId}#${context.turnIndex}`)) return turn;
    return {
      // The options too (TURN-23: a carried call is dispatched under an earlier turn's key).
      dispatch: (call, options) =>
        turn.dispatch(call, options).catch((error: unknown) => {
          if (!isDispatchOnceError(error, "result_not_storable")) throw error;
          throw new ToolFailedError((error as unknown as { key: string }).key, { name: "ToolError", message: "the payments API declined it", code: "declined" }, false);
        }),
    };
  });
}

describe.each(RUNNER_PROVIDERS)("faults in a tool loop's later turn: the end-to-end oracle rejects runners that mishandle them (provider %s)", (provider) => {
  const planted = (dispatcher: typeof restartsAtFirstTurn) =>
    runEndToEnd(memory, { deploys: false,
      provider,
      runs: 300,
      seed: 5,
      timeLimitMs: SEARCH_BUDGET_MS,
      // No shrinking: the first failing scenario carries the verdict and replays by its seed and
      // path (each verdict held with the 3 s budget of readable.ts too), at a third of the CPU.
      shrinkTimeLimitMs: 0,
      conversationStore: observedStore,
      dispatcher,
    }).catch((e: unknown) => e);

  /**
   * The control: the mutant's failing scenario, once, under the real dispatcher and the same hooks.
   * It passes and reached what the mutant breaks (`reached`, a stat the run counts), so the verdict
   * is the mutant's doing and not the scenario's. (It replaced 40 runs of seed 5 that covered both
   * mutants' scenarios, found at runs 12 and 26.)
   */
  const control = async (error: unknown, reached: string) => {
    const cx = (error as ConformanceFailure).counterexample!;
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: cx.seed, path: cx.path, conversationStore: observedStore, dispatcher: realDispatcher, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(seen[reached] ?? 0).toBeGreaterThan(0);
  };

  it("CONF-2 a take-over mid-loop that keys the follow-up call at the message's first turn index pays again; the real dispatcher passes that scenario", async () => {
    const error = await planted(restartsAtFirstTurn);
    const message = expectReadable(error, 5);
    // The dead holder's follow-up payment made again under the restarted key (seed 5: after 12 runs, on both sides).
    expect(message).toMatch(/breaks CONF-2/);
    // A worker died in a later turn of a tool loop.
    await control(error, "follow_up_deaths");
  }, 600_000);

  it("RECORD-3 a later turn's unstorable result told as a definite failure commits an error for a payment that happened; the real dispatcher passes that scenario", async () => {
    const error = await planted(unstorableAsFailedInLaterTurn);
    const message = expectReadable(error, 5);
    // Committed as an error the model reads while the payment went through (seed 5: after 26 runs, on both sides).
    expect(message).toMatch(/breaks RECORD-3/);
    expect(message).toMatch(/was committed as an error .* but its effect happened/);
    // A result that could not be stored, in a later turn of a tool loop.
    await control(error, "follow_up_unstorable");
  }, 600_000);
});
