import { MemoryLedger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { runIncident } from "../src/incident.js";
import { DemoUsageError, parseArgs } from "../src/options.js";

/*
 * The incident through each real SDK against its mock, with the payments API's effect log as the
 * oracle. anthropic and openai: our runner, the cut inside the window, the runner's retry.
 * ai-sdk: the `ai` package's streamText over @ai-sdk/openai; the AI SDK runs the tool when the step
 * finishes, so the cut is in the model's confirmation, and the app re-sends the turn; naive tools
 * as written, guarded ones wrapped with createOnceTools.
 */
describe("--provider: the incident on each stream side", () => {
  for (const provider of ["anthropic", "openai", "ai-sdk"] as const) {
    it(`${provider}: the cut after the payment pays twice naive and once guarded; the retry's call has a new id and is answered from the ledger`, async () => {
      const incident = await runIncident({ ledger: new MemoryLedger(), runId: `prov${provider}`, seed: "7", timeScale: 0.05, provider });
      expect(incident.provider).toBe(provider);
      expect(incident.naive.payments).toBe(2);
      expect(incident.guarded.payments).toBe(1);
      expect(incident.naive.retryDispatch).toBe("ran_again");
      expect(incident.guarded.retryDispatch).toBe("replayed_from_ledger");
      for (const side of [incident.naive, incident.guarded]) {
        // The cut is placed after the payment was accepted, by construction on both providers.
        expect(side.failurePosition).toBe("after_dispatch_before_stop");
        expect(side.callIds).toHaveLength(2);
        expect(side.callIds[0]).not.toBe(side.callIds[1]);
        for (const id of side.callIds) expect(id.startsWith(incident.events.callIdPrefix)).toBe(true);
        expect(side.timeline.filter((e) => e.kind === "turn_committed").map((e) => e.attempt)).toEqual([2]);
        if (provider === "ai-sdk") continue;
        // Inside the window by causal order: the mock held the response until the payment was in.
        const w = side.window!;
        expect(w.dispatchMs).toBeLessThanOrEqual(w.acceptedMs);
        expect(w.acceptedMs).toBeLessThanOrEqual(w.resolvedMs);
        expect(w.resolvedMs).toBeLessThanOrEqual(w.resetMs);
      }
      // Naive, the payments API saw each call id as its key; guarded, the one derived key.
      expect(incident.naive.idempotencyKeys).toEqual(incident.naive.callIds);
      expect(incident.guarded.idempotencyKeys).toHaveLength(1);
      expect(incident.guarded.idempotencyKeys[0]).toMatch(/^[0-9a-f]{32}$/);
    });
  }

  it("parses --provider and refuses anything else", () => {
    expect(parseArgs([]).provider).toBe("anthropic");
    expect(parseArgs(["--provider", "openai"]).provider).toBe("openai");
    expect(parseArgs(["--provider", "ai-sdk"]).provider).toBe("ai-sdk");
    expect(() => parseArgs(["--provider", "vertex"])).toThrow(DemoUsageError);
  });
});
