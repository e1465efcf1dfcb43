import { MemoryLedger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { POSITIONS, runChaos } from "../src/chaos.js";
import { PROVIDER_API, runIncident } from "../src/incident.js";
import { DemoUsageError, parseArgs } from "../src/options.js";

/*
 * --provider openai-chat: the real `openai` SDK's client.chat.completions.create({ stream: true })
 * against the mock's POST /v1/chat/completions, through @dispatch-once/openai's
 * ChatCompletionsRunner, with the same payments API and the same two oracles as the other sides.
 * On this API a call is final only at the next index's first fragment or at finish_reason, so the
 * scripted model checks the balance beside the payment (call 1): the payment (call 0) is
 * dispatched at check_balance's first fragment, before finish_reason, which is the window.
 */
describe("--provider openai-chat", () => {
  it("the incident: the cut after the payment pays twice naive and once guarded, under one derived Idempotency-Key", async () => {
    const incident = await runIncident({ ledger: new MemoryLedger(), runId: "provchat", seed: "7", timeScale: 0.05, provider: "openai-chat" });
    expect(incident.provider).toBe("openai-chat");
    expect(incident.api).toBe(PROVIDER_API["openai-chat"]);
    expect(incident.events.finish).toBe("finish_reason");
    // The payments API's effect log: two payments naive, one guarded.
    expect([incident.naive.payments, incident.guarded.payments]).toEqual([2, 1]);
    expect(incident.naive.retryDispatch).toBe("ran_again");
    expect(incident.guarded.retryDispatch).toBe("replayed_from_ledger");
    for (const side of [incident.naive, incident.guarded]) {
      // STREAM-2's first matching row: check_balance (call 1) was still open at the cut, so the
      // runner says arguments_streaming although the payment (call 0) had resolved.
      expect(side.failurePosition).toBe("arguments_streaming");
      expect(side.callIds).toHaveLength(2);
      expect(side.callIds[0]).not.toBe(side.callIds[1]);
      for (const id of side.callIds) expect(id.startsWith("call_")).toBe(true);
      expect(side.timeline.filter((e) => e.kind === "turn_committed").map((e) => e.attempt)).toEqual([2]);
      const w = side.window!;
      expect(w.dispatchMs).toBeLessThanOrEqual(w.acceptedMs);
      expect(w.acceptedMs).toBeLessThanOrEqual(w.resolvedMs);
      expect(w.resolvedMs).toBeLessThanOrEqual(w.resetMs);
    }
    // Naive, each response's call_ id went downstream as the key; guarded, the one derived key, twice forwarded, once paid.
    expect(incident.naive.idempotencyKeys).toEqual(incident.naive.callIds);
    expect(incident.guarded.idempotencyKeys).toHaveLength(1);
    expect(incident.guarded.idempotencyKeys[0]).toMatch(/^[0-9a-f]{32}$/);
  });

  it("a small chaos run: every planned cut lands, naive repeats are counted, guarded shows 0 duplicates and 0 misreports on every route", async () => {
    const chaos = await runChaos({
      provider: "openai-chat",
      parallel: false,
      turns: 24,
      failureRate: 0.5,
      dropRate: 0.1,
      rewordRate: 0.5,
      seed: "29",
      timeScale: 0.005,
      concurrency: 6,
      redeliveries: 2,
      ledger: new MemoryLedger(),
      runId: `chat${process.pid}`,
    });
    expect(chaos.provider).toBe("openai-chat");
    expect(chaos.byPosition).toEqual(chaos.plannedByPosition);
    expect(chaos.naive.byPosition).toEqual(chaos.guarded.byPosition);
    for (const position of POSITIONS) expect(chaos.byPosition[position], `seed 29 plans a cut at ${position}`).toBeGreaterThan(0);
    const { naive, guarded, planned, failuresInWindow, turns, routes } = chaos;
    const repeats = failuresInWindow + planned.lostResponses - planned.lostResponsesInWindow;
    expect(planned.lostResponses).toBeGreaterThan(0);
    // Naive: the effect log's repeats and the oracle's misreports agree.
    expect(naive.duplicates).toBe(repeats);
    expect(naive.payments).toBe(turns + repeats);
    expect(naive.misreports).toBe(repeats);
    expect(naive.misreportReasons.two_payments).toBe(repeats);
    // Guarded: one payment per message, and what was committed and recorded says so.
    expect(guarded.payments).toBe(turns);
    expect(guarded.duplicates).toBe(0);
    expect(guarded.misreports).toBe(0);
    expect(guarded.failedTurns).toBe(0);
    expect(guarded.replayedFromLedger).toBe(failuresInWindow);
    for (const route of routes) {
      expect(route.guarded.duplicates, route.name).toBe(0);
      expect(route.guarded.misreports, route.name).toBe(0);
    }
    expect(routes.find((r) => r.name === "queue_redelivery")!.naive.duplicates).toBe(2);
    expect(chaos.anomalies).toEqual([]);
  }, 120_000);

  it("parses --provider openai-chat; the error for an unknown provider lists it", () => {
    expect(parseArgs(["--provider", "openai-chat"]).provider).toBe("openai-chat");
    expect(parseArgs(["--provider=openai-chat"]).provider).toBe("openai-chat");
    let error: unknown;
    try {
      parseArgs(["--provider", "openai-completions"]);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(DemoUsageError);
    expect((error as DemoUsageError).option).toBe("--provider");
    expect((error as DemoUsageError).message).toContain("openai-chat");
  });
});
