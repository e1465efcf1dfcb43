import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { runChaos, type ChaosResult } from "../src/chaos.js";
import type { StreamSide } from "../src/streams.js";
import type { LostResponseDisposition } from "../src/world.js";

/*
 * Negative controls for the misreport oracle: the chaos run with a tool that lies about a lost
 * payments response. Dispatch-Once can only be as truthful as the dispositions its tools give
 * (LEDGER-8); when a tool says "failed" or "not performed" for a payment that went out, the
 * guarded side must show misreports, or the oracle that reports 0 for the honest tool proves nothing.
 * (The honest tool is the demo's own: demo.test.ts and openai-chaos.test.ts check its 0 misreports
 * with lost responses.) The oracle reads each provider's committed shapes, so the control runs on each.
 */

async function chaosWith(lostResponseAs: Exclude<LostResponseDisposition, "unknown">, provider: StreamSide): Promise<ChaosResult> {
  return runChaos({
    provider,
    parallel: false,
    turns: 16,
    failureRate: 0,
    dropRate: 0.5,
    rewordRate: 0.5,
    lostResponseAs,
    seed: "control",
    timeScale: 0.002,
    concurrency: 6,
    redeliveries: 0,
    // Declared durable: on a volatile ledger (or after a re-claim) the dispatcher no longer believes a
    // "not performed" about a call an earlier run may have made, so only a first claim on a ledger
    // that cannot forget lets the lie through, which is what this control needs.
    ledger: durableMemoryLedger(),
    runId: `ctl${process.pid}${provider}${lostResponseAs.slice(0, 3)}`,
  });
}

function durableMemoryLedger(): Ledger {
  const base = new MemoryLedger();
  return Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" as const } });
}

const route = (chaos: ChaosResult, name: string) => chaos.routes.find((r) => r.name === name)!;

describe.each(["anthropic", "openai", "openai-chat"] as const)("the misreport oracle catches a tool that lies about a lost response (%s)", (provider) => {
  it("RECORD-3: 'definite' commits an error result for a payment that exists, on every lost response", async () => {
    const chaos = await chaosWith("definite", provider);
    expect(chaos.guarded.lostResponses).toBeGreaterThan(0);
    expect(chaos.guarded.duplicates).toBe(0);
    expect(chaos.guarded.misreports).toBe(chaos.guarded.lostResponses);
    expect(chaos.guarded.misreportReasons.committed_error_for_payment).toBe(chaos.guarded.lostResponses);
    expect(route(chaos, "client_resend").guarded.misreports).toBe(chaos.guarded.lostResponses);
  });

  it("RECORD-2: 'not_performed' writes a record saying not_happened for a payment that exists", async () => {
    const chaos = await chaosWith("not_performed", provider);
    expect(chaos.guarded.lostResponses).toBeGreaterThan(0);
    // With the automatic retry the re-run is answered by the payments API's key: nothing false is left.
    expect(route(chaos, "automatic_retry").guarded.misreports).toBe(0);
    // Without it, the failed turn's record denies the payment before the re-send makes it right.
    expect(route(chaos, "client_resend").guarded.misreports).toBe(chaos.guarded.lostResponses);
    expect(route(chaos, "client_resend").guarded.duplicates).toBe(0);
  });
});
