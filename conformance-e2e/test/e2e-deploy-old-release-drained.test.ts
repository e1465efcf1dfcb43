import { describe, expect, it } from "vitest";
import { runEndToEnd, type EndToEndOptions } from "../src/index.js";
import { memory, realDispatcher, wrapDispatcher } from "./audit-mutants.js";

/**
 * IDENT-10's guard across a deploy holds once no process of the old release can still claim for
 * the turn (its rationale; the model's `deploy-pause`). An oracle false alarm of the kit's world
 * (seed 274107145, OpenAI side, 30 runs, a fresh-clone CI of 2026-12-06 on ledger-sqlite): "c0
 * message 0" and "c0 message 1" were sent at once, each by its own worker of the first release.
 * Message 0's first turn failed and its deploy ("transform") landed while message 1's worker was
 * still inside its send, queued behind message 0. A new-release worker re-ran message 0 at turn 0
 * and paid globex 6 EUR under the new definition's key (payee `acct:globex`); message 1, bound at
 * that failed index (TURN-12), then ran on its first-release worker, whose definition keys that
 * row again as another payee's, and paid again under the first release's key. Two workers of two
 * releases claiming for one turn is the case the spec leaves to the operator, so the kit's deploy
 * now lands only once no live worker of the old release is inside a send of the conversation.
 * On the same path the deploy then lands later (message 1's, "identity") and the guard adopts the
 * first release's rows: a dispatcher without the guard (its turns never `resumed`, as
 * e2e-deploy-planted.test.ts plants it) still pays twice there and is rejected.
 */
/** A dispatcher without IDENT-10's guard: its turns never say `resumed` (as e2e-deploy-planted.test.ts plants it). */
const withoutGuard: NonNullable<EndToEndOptions["dispatcher"]> = (tools, ledger, defaults) => {
  const inner = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(inner, (context) => inner.turn({ ...context, resumed: false }));
};

const SEED = 274107145;
const PATH = "6:96:0:3:3:3:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:1:0:2:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:2";

describe("CONF-2 IDENT-10 a deploy lands once the old release's workers are out of their sends", () => {
  it("CONF-2 IDENT-10 two messages sent at once, a deploy on the first: no worker of the old release claims after it (seed 274107145, the shrunk path)", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "openai", runs: 1, seed: SEED, path: PATH, onStats: (s) => Object.assign(seen, s) });
    expect({ concurrent: seen.concurrent_messages, replayed: seen.replayed_passed, waited: (seen.deploys_waiting ?? 0) > 0, deploys: seen.deploys, adopted: (seen.deploy_rows_adopted ?? 0) > 0 }).toEqual({
      concurrent: 2,
      replayed: 1,
      waited: true,
      deploys: 1,
      adopted: true,
    });
  }, 120_000);

  it("CONF-2 IDENT-10 a dispatcher without the guard is still rejected on that path (the deploy that lands later)", async () => {
    const error = await runEndToEnd(memory, { provider: "openai", runs: 1, seed: SEED, path: PATH, dispatcher: withoutGuard }).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/payment globex 6 EUR c0-m0-r0: performed 2 times for one intent at turn 0/);
  }, 120_000);

  // The same class, found by a hunt at new seeds the same day (Anthropic side, 50 runs each; seeds
  // 1165103001 and 1012481355 alike): the deploy a rename (`send_payment` -> `pay`, formerNames),
  // and the old release's worker of the other message still waiting for the conversation's turn.
  const HUNT_SEED = 242362793;
  const HUNT_PATH = "33:1:0:0:0:0:0:0:0:121:0:0:2:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:4:3:3";

  it("CONF-2 IDENT-11 a rename's deploy waits for the first release's worker still waiting for the turn (seed 242362793, the shrunk path)", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "anthropic", runs: 1, seed: HUNT_SEED, path: HUNT_PATH, onStats: (s) => Object.assign(seen, s) });
    expect({ replayed: seen.replayed_passed, waited: (seen.deploys_waiting ?? 0) > 0, deploys: seen.deploys }).toEqual({ replayed: 1, waited: true, deploys: 1 });
  }, 120_000);

  it("CONF-2 IDENT-11 on that path a dispatcher without the guard is still rejected", async () => {
    const error = await runEndToEnd(memory, { provider: "anthropic", runs: 1, seed: HUNT_SEED, path: HUNT_PATH, dispatcher: withoutGuard }).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/performed 2 times for one intent/);
  }, 120_000);
});
