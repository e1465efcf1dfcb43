import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { SHRINKS, expectReadable } from "./readable.js";

/**
 * A proxy's splice on the AI SDK profile (AiSdkMessagePlan.splice, AISDK-16): after a call of the
 * tool step's response completed, the body carries the response to the same request again, with
 * its `response.created`, without it led by a sentence, or without it and without a lead.
 * `@ai-sdk/openai` takes it in as more of the first response and `streamText` executes the
 * spliced calls beside the first's: an identical call runs again under the next ordinal. The
 * kit's app wraps its model with `spliceGuard()`, as the README's route does (AiSdkAppOptions
 * `model`); the plant is the app without it. The profile drew no splice before, so its app needed
 * no guard to pass (it had none). Seeds whose first run splices each shape (8: with its start and
 * bare; 34: with its start and led by a sentence); the control runs the guarded app over the same runs.
 */
const memory = memoryLedgerSubject();
const SEARCH_BUDGET_MS = 120_000;
const unguarded: AiSdkAppOptions = { spliceGuard: false };

describe("splices on the ai-sdk profile: the end-to-end level rejects an app whose model has no spliceGuard()", () => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it.each([
      [8, ["restart", "headless_bare"]],
      [34, ["restart", "headless"]],
    ] as const)(`AISDK-16 seed %i: the unguarded app pays a spliced response's call again; the guarded app passes the same runs (${name})`, async (seed, shapes) => {
      const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: 3, seed, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs, aiSdk: unguarded }).catch((e: unknown) => e);
      const message = expectReadable(error, seed);
      expect(message).toMatch(/breaks CONF-2\): send_payment for chat-\d "c\d message \d" \(.*\): performed \d+ times for one intent/);
      expect(message).toMatch(/proxy +spliced into request \d of "c\d message \d", after its call \d completed, the response to the request sent again/);
      if (shrinkTimeLimitMs === 0) expect(message).toContain("after 1 runs");

      const runs = Number(/after (\d+) runs/.exec(message)![1]);
      expect((error as ConformanceFailure).counterexample!.seed).toBe(seed);
      let seen: Record<string, number> = {};
      await runEndToEnd(memory, { provider: "ai-sdk", runs, seed, onStats: (stats) => (seen = stats) });
      expect(seen).toMatchObject({ cases: runs });
      for (const shape of shapes) expect(seen[`splices_${shape}`] ?? 0, shape).toBeGreaterThan(0);
    }, 600_000);
  }
});
