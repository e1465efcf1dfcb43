import type { CallDispatcher } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { memory, realDispatcher } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";

/**
 * TURN-23 at the end-to-end level: a re-run of a message's first turn answers without a payment
 * the cut attempt made (rerunDivergence), the turn commits with a record listing it (RECORD-8),
 * and the model makes the same payment in the message's next turn (scenario.ts `deferred`). The
 * runner must answer it from the first turn's row, not pay again under the next turn's key.
 *
 * The plant: the real dispatcher behind a CallDispatcher that keys calls (`keyFor`) but has no
 * `dispatch` of its own, so the runner carries nothing (carry.ts carryingDispatcher): the runner as
 * it was before TURN-23. Every key runs once and every record tells the truth, so only a count of
 * the message's intents across its turns sees the second payment (oracle.ts `deferredAllowance`).
 */
/**
 * Seed 1's 24th run (path "23") on both sides, shrunk (85 steps, Anthropic side) to one
 * conversation: its message 2 asks for a payment and an invoice; attempt 1 pays and is cut, its
 * re-runs omit the payment, and the next turn makes it again and once more on purpose (a `twice`
 * deferral): 3 payments for 2 asks. The search from run 1 reaches the run in about 10 s per side;
 * the test replays the shrunk scenario alone. Before the draw, 60 runs at seed 1 passed the plant.
 */
const SEED = 1;
const PATH = "23:2:0:0:0:0:0:0:0:0:21:1:1:1:1:1:1:1:1:1:1:0:0:0:0:0:0:0:0:2:0:1:1:1:1:1:1:1:2:1:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2:2";
const RUNS = 60;

/** How often the plant's runner met a turn whose calls it might have carried (the search reached it). */
const planted = { turns: 0 };

function withoutCarrying(tools: Parameters<typeof realDispatcher>[0], ledger: Parameters<typeof realDispatcher>[1], defaults: Parameters<typeof realDispatcher>[2]): CallDispatcher {
  const inner = realDispatcher(tools, ledger, defaults);
  return {
    turn: (context) => {
      if (context.turnIndex > 0) planted.turns++;
      return inner.turn(context);
    },
    effectClassOf: (name) => inner.effectClassOf(name),
    keyFor: inner.keyFor.bind(inner),
  } as CallDispatcher;
}

describe.each(RUNNER_PROVIDERS)("a call deferred to a later turn of the same message: the end-to-end oracle counts the message's intents across its turns (provider %s)", (provider) => {
  it("CONF-2 a runner that does not carry an unanswered call (TURN-23 disabled) pays it again in the next turn and is rejected, seed and path printed; the real runner passes that scenario", async () => {
    // The path replays a cut whose race with the payment can go otherwise on a loaded host (CI once
    // saw it pass the plant): up to 3 replays, the verdict taken from the first that rejects it.
    let error: unknown;
    for (let i = 0; i < 3 && error === undefined; i++) {
      error = await runEndToEnd(memory, { deploys: false, provider, runs: RUNS, seed: SEED, path: PATH, shrinkTimeLimitMs: 0, dispatcher: withoutCarrying }).then(
        () => undefined,
        (e: unknown) => e,
      );
    }
    expect(planted.turns).toBeGreaterThan(0);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(/breaks CONF-2\): (CONF-2: )?payment \w+ \d+ \w+ c\d-m\d-r\d: performed (\d+) times for message "[^"]+" over its turns \d+ and \d+, which asked for it (once|\d+ times): its first turn left a call of it unanswered \(a re-run answered without it\) and the next turn's call is that ask made again/);
    const cx = (error as { counterexample?: { seed: number; path: string } }).counterexample!;
    // The real runner on the same path: it passes every replay; the same race can go otherwise on a
    // loaded host (no call left unanswered, so none to carry: a CI run of 18 minutes saw it), so the
    // carry is looked for over up to 3 replays, as the plant's rejection is above.
    let seen: Record<string, number> = {};
    for (let i = 0; i < 3 && !((seen.deferred_calls_carried ?? 0) > 0); i++) {
      await runEndToEnd(memory, { deploys: false, provider, runs: RUNS, seed: cx.seed, path: cx.path, onStats: (stats) => (seen = stats) });
      expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    }
    expect(seen.deferred_calls_carried ?? 0).toBeGreaterThan(0);
  }, 300_000);
});

/**
 * TURN-23 across a deploy (scenario.ts `deploy` on a deferral message): the message's first send
 * is left unanswered, the new release lands before its first turn commits, and the re-send runs
 * that turn under the new release; the next turn makes the left-out payment again and the runner
 * carries it under the key the new release derives at the first turn's index. A correct runner, so
 * the oracle must take a key of either release there (oracle.ts carriedTurnOf, keysUnderReleases):
 * a stricter reading of the kit's own definition only (blind round O's O34) rejects it with "is no
 * earlier turn's key of this call". Found by a search with that reading, 150 runs from seed 2 on
 * each side (run 112 on both), shrunk for 5 s; the test replays it alone.
 */
const DEPLOYED: Record<(typeof RUNNER_PROVIDERS)[number], string> = {
  anthropic: "111:3:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0",
  openai: "111:3:0:0:0:0:0:0:0:0:0:0:0",
};

describe.each(RUNNER_PROVIDERS)("a call deferred across a deploy that landed before the message's first turn committed (TURN-23, IDENT-10; provider %s)", (provider) => {
  it("TURN-23 the real runner carries the call under the new release's key at the first turn's index, and the oracle passes it", async () => {
    let seen: Record<string, number> = {};
    // A replay whose races go otherwise on a loaded host may land no deploy or carry nothing: it
    // says nothing, so up to 3 replays (each must pass), the reach judged on the last.
    for (let i = 0; i < 3; i++) {
      await runEndToEnd(memory, { provider, runs: 150, seed: 2, path: DEPLOYED[provider], onStats: (stats) => (seen = stats) });
      expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
      if ((seen.deploys ?? 0) > 0 && (seen.deferred_calls_carried ?? 0) > 0) break;
    }
    expect([seen.deploys ?? 0, seen.deferred_calls_carried ?? 0].every((n) => n > 0), `seed 2, path ${DEPLOYED[provider]}: ${JSON.stringify(seen)}`).toBe(true);
  }, 120_000);
});
