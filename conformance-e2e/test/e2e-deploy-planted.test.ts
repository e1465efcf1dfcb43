import type { CallDispatcher } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd, type EndToEndOptions } from "../src/index.js";
import { memory, realDispatcher, wrapDispatcher } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";

/**
 * A deploy between two runs of one turn (scenario.ts `deploy`, IDENT-10, IDENT-11): once a message
 * is left unanswered (its worker died after paying, its turn failed), the workers that take it
 * over, re-send it or re-ask it run a new release whose payment tool keys the same call otherwise
 * (an identity field with a default, a transform of the payee, a rename with `formerNames`). Only
 * the dispatcher's guard, in a `resumed` turn, finds the earlier row and answers the call from it.
 *
 * Each plant's counterexample was found by CI's search (30 runs at CI's seeds: 20261129 on the
 * Anthropic side, 20261201 on the OpenAI side), where the kit of before (no deploy drawn; no
 * RECORD-10 check) passed it; the tests replay its scenario alone (the printed path), and the real
 * dispatcher passes the same scenario.
 */
type Plant = NonNullable<EndToEndOptions["dispatcher"]>;

/** The real dispatcher behind a wrapper whose turns never say `resumed` (TURN-15): no guard listing, no adopted row. */
const withoutGuard: Plant = (tools, ledger, defaults) => {
  const inner = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(inner, (context) => inner.turn({ ...context, resumed: false }));
};

/** The real dispatcher behind a wrapper that drops the stored request an outcome or error names (IDENT-3): records then tell the re-run's re-wording. */
const withoutStoredRequest: Plant = (tools, ledger, defaults) => {
  const inner = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(inner, (context) => {
    const turn = inner.turn(context);
    return {
      dispatch: async (call, options) => {
        try {
          const outcome = await turn.dispatch(call, options);
          delete outcome.storedRequest;
          return outcome;
        } catch (error) {
          if (typeof error === "object" && error !== null) delete (error as { storedRequest?: unknown }).storedRequest;
          throw error;
        }
      },
    };
  });
};

/** The real dispatcher behind a wrapper that refuses under the earlier row's key (the row it could not match), not the call's own. */
const refusingUnderRowKey: Plant = (tools, ledger, defaults) => {
  const inner = realDispatcher(tools, ledger, defaults);
  return wrapDispatcher(inner, (context) => {
    const turn = inner.turn(context);
    return {
      dispatch: async (call, options) => {
        try {
          return await turn.dispatch(call, options);
        } catch (error) {
          const e = error as { code?: string; rowKey?: string };
          if (e.code === "tool_definition_changed" && e.rowKey !== undefined) Object.defineProperty(e, "key", { value: e.rowKey });
          throw error;
        }
      },
    };
  });
};

interface Found {
  seed: number;
  path: string;
}

/** Per provider, the counterexample CI's search found for each plant (shrunk where it says). */
const FOUND: Record<(typeof RUNNER_PROVIDERS)[number], { guard: Found; record: Found; refusal: Found }> = {
  // Search: run 8 (guard, refusal), run 13 (record); guard and record shrunk.
  anthropic: {
    guard: { seed: 20261129, path: "7:39:1:1:1:1:1:1:1:1:2:0:2:3:3:4:4:5:4:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5:5" },
    record: { seed: 20261129, path: "12:34:4:0:0:0:1:0:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1" },
    refusal: { seed: 20261129, path: "7" },
  },
  // Search: run 1 (guard, record), run 11 (refusal); guard and record shrunk.
  openai: {
    guard: { seed: 20261201, path: "0:3:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:3:1:1:1:1:1:1:0:0:0:0:0:0:0:40:0:0:0" },
    record: { seed: 20261201, path: "0:0:2:0:0:0:35:1:2:2:2:2:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3:3" },
    refusal: { seed: 20261201, path: "10" },
  },
};

/** The plant fails the replayed scenario with `verdict`; the real dispatcher passes it, having exercised what each of `stats` counts. */
async function rejectedThenPassed(provider: (typeof RUNNER_PROVIDERS)[number], found: Found, plant: Plant, verdict: RegExp, stats: string[]): Promise<string> {
  const error = await runEndToEnd(memory, { provider, runs: 30, seed: found.seed, path: found.path, shrinkTimeLimitMs: 0, dispatcher: plant as (...args: Parameters<Plant>) => CallDispatcher }).catch((e: unknown) => e);
  const message = expectReadable(error, found.seed);
  expect(message).toMatch(verdict);
  let seen: Record<string, number> = {};
  await runEndToEnd(memory, { provider, runs: 30, seed: found.seed, path: found.path, onStats: (stats) => (seen = stats) });
  expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
  for (const stat of stats) expect(seen[stat] ?? 0, stat).toBeGreaterThan(0);
  return message;
}

describe.each(RUNNER_PROVIDERS)("a deploy between two runs of a turn (IDENT-10, IDENT-11, RECORD-10; provider %s)", (provider) => {
  it("CONF-2 a dispatcher whose re-run turns are not `resumed` (no IDENT-10 guard) pays a payment again under the new release's key and is rejected; the real dispatcher answers it from the earlier row", async () => {
    await rejectedThenPassed(provider, FOUND[provider].guard, withoutGuard, /breaks CONF-2\): (CONF-2: )?payment \w+ \d+ \w+ c\d-m\d-r\d: performed \d+ times for one intent at turn \d+/, ["deploys", "deploy_rows_adopted"]);
  }, 120_000);

  it("RECORD-10 records that tell a re-worded re-run's arguments as the request that ran (the stored request dropped) are rejected; the real runner's records name the payment that ran", async () => {
    const message = await rejectedThenPassed(provider, FOUND[provider].record, withoutStoredRequest, /breaks RECORD-10\): the failed_turn record of turn \d+ of conv-\d .* says send_payment key \w+ happened with input .*, but the request that ran under the key is /, ["record_inputs_judged"]);
    expect(message).toContain("the payments API's payment_created");
  }, 120_000);

  it("IDENT-10 a refusal (tool_definition_changed) told under the earlier row's key, whose payment happened, is rejected; the real dispatcher passes the same scenario", async () => {
    const message = await rejectedThenPassed(provider, FOUND[provider].refusal, refusingUnderRowKey, /breaks (RECORD-3|RECORD-2|IDENT-10)\)/, ["deploys"]);
    expect(message).toMatch(/IDENT-10: .*refused with tool_definition_changed.* is under that key|IDENT-10: .*refused with tool_definition_changed \(nothing claimed, nothing run\) under key \w+, but \d+ tool run/);
  }, 120_000);
});

describe("the kit's deploys option (CaseOptions `deploys`)", () => {
  it("IDENT-10 `deploys: false` holds a drawn deploy, so a planted test of another rule replays its scenario as found: the guard plant's own counterexample, replayed so, lands no deploy and passes the plant", async () => {
    const found = FOUND.anthropic.guard;
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "anthropic", runs: 30, seed: found.seed, path: found.path, deploys: false, dispatcher: withoutGuard as (...args: Parameters<Plant>) => CallDispatcher, onStats: (stats) => (seen = stats) });
    expect([seen.deploys ?? 0, (seen.deploys_not_applied ?? 0) > 0], `seed ${found.seed}, path ${found.path}`).toEqual([0, true]);
  }, 120_000);
});
