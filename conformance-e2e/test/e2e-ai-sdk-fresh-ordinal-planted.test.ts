import { createHash } from "node:crypto";
import { createOnceTools, dispatchOnceOf } from "@dispatch-once/ai-sdk";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import type { Tool, ToolExecutionOptions, ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { memory, observeClaims } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";

/**
 * A fresh ordinal for the re-run after a death in a tool loop's step 2 (ai-sdk-scenario.ts:
 * `death` on a message's follow-up call). The chat route's process dies on step 2's call after
 * the payments API accepted the payment, its claim left in flight; the client re-sends or
 * regenerates to a new process, whose step 2 meets the dead call's key and takes the expired claim
 * over. The planted bug: the wrapper gives that re-run the next ordinal ("the slot is held, so this
 * is another call of the same identity"), so the payments API is handed a new key and pays again,
 * while the ledger row of the dead call is completed with the second payment. Planted in the
 * wrapper (`aiSdk.wrap`): the execute options a taken-over call's tool receives carry the key of
 * ordinal + 1, as a wrapper that re-counted would hand it.
 */
const SEARCH_BUDGET_MS = 180_000;
const SEED = 3;

/** How often the bug handed a take-over's re-run a fresh ordinal (the search reached it). */
const planted = { count: 0 };

function freshOrdinalOnTakeover(): AiSdkAppOptions {
  return {
    wrap: (tools, ledger, o) => {
      // The keys this process's claims took over (a dead process's expired claim).
      const takenOver = new Set<string>();
      const observed = observeClaims(ledger, (key, claim) => {
        if (claim.outcome === "claimed" && claim.takeover === true) takenOver.add(key);
      });
      const recounted: Record<string, Tool> = {};
      for (const [name, t] of Object.entries(tools as ToolSet)) {
        const execute = t.execute;
        recounted[name] =
          execute === undefined
            ? t
            : ({
                ...t,
                execute: (input: unknown, options: ToolExecutionOptions) => {
                  const info = dispatchOnceOf(options);
                  if (info === undefined || !takenOver.has(info.idempotencyKey)) return execute(input, options);
                  planted.count++;
                  // The key of the next ordinal (a new key: the payments API cannot tell it is the same call).
                  const idempotencyKey = createHash("sha256").update(`${info.idempotencyKey}:ordinal ${info.ordinal + 1}`).digest("hex").slice(0, info.idempotencyKey.length);
                  return execute(input, { ...options, dispatchOnce: { ...info, ordinal: info.ordinal + 1, idempotencyKey } } as ToolExecutionOptions);
                },
              } as Tool);
      }
      const once = createOnceTools({ tools: recounted as ToolSet, effects: o.effects, identity: o.identity, ledger: observed, dispatcher: o.dispatcher });
      return (request) => once.forTurn(request);
    },
  };
}

/**
 * Fully shrunk, the search costs about 50 s on a loaded host (the shrunk scenario keeps a lapsed
 * lease per candidate): CI runs the verdict with shrinking off, and CONFORMANCE_E2E_FULL_SHRINK=1
 * runs it fully shrunk too (it held there when the test was written).
 */

describe("the ai-sdk side: a fresh ordinal for the re-run after a step-2 death", () => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`CONF-2 a wrapper that gives the taken-over step-2 call the next ordinal pays the dead process's payment again (${name}); the real wrapper passes the same scenario`, async () => {
      planted.count = 0;
      const error = await runEndToEnd(memory, {
        provider: "ai-sdk",
        runs: 200,
        seed: SEED,
        timeLimitMs: SEARCH_BUDGET_MS,
        ...(shrinkTimeLimitMs !== undefined ? { shrinkTimeLimitMs } : {}),
        aiSdk: freshOrdinalOnTakeover(),
      }).catch((e: unknown) => e);
      expect(planted.count).toBeGreaterThan(0);
      const message = expectReadable(error, SEED);
      expect(message).toMatch(/breaks CONF-2\): send_payment for chat-\d "c\d message \d" \(.*\): performed 2 times for one intent: payment_created \S+ \(seq \d+, key [0-9a-f]{8}\), payment_created \S+ \(seq \d+, key [0-9a-f]{8}\)/);
      expect(message).toMatch(/DIES after the payments API accepted send_payment key \S+, before the ledger completed/);
      if (shrinkTimeLimitMs === undefined) expect(message).not.toMatch(/shrinking cut short/);
      const cx = (error as ConformanceFailure).counterexample!;
      let stats: Record<string, number> = {};
      await runEndToEnd(memory, { provider: "ai-sdk", runs: 200, seed: cx.seed, path: cx.path, onStats: (s) => (stats = s) });
      expect(stats).toMatchObject({ property_cases: 1, replayed_passed: 1 });
      expect(stats.takeovers).toBeGreaterThan(0);
    }, 300_000);
  }
});
