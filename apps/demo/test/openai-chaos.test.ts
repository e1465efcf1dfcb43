import { MemoryLedger } from "@dispatch-once/core";
import { beforeAll, describe, expect, it } from "vitest";
import { POSITIONS, runChaos, type ChaosResult } from "../src/chaos.js";
import { DEFAULT_OPTIONS, parseArgs } from "../src/options.js";
import { runDemo } from "../src/run.js";

/*
 * The chaos run on the OpenAI Responses API: the real `openai` SDK against the mock Responses
 * API, through @dispatch-once/openai's runner, with the same plan, the same payments API and the
 * same two oracles (the effect log, and what was committed and recorded against it) as on the
 * Anthropic side. Small, like demo.test.ts's run; every expected count comes from the seed's plan.
 */

/**
 * A run that makes no progress (no turn done, no phase begun) for this long is hung, and fails.
 * The runs are CPU-bound: their wall time follows the host's load (the chaos run below took 8 s on a
 * quiet host and 142 s beside four busy loops), so no bound on the whole run tells a hang from a slow
 * host; a run that goes on making progress is not hung, and the hook's bound only backs this up.
 */
const STALL_MS = 60_000;
/** Backstop for a run that keeps reporting progress but never ends (about 4 times the slowest run seen). */
const RUN_BOUND_MS = 600_000;

async function watched<T>(what: string, run: (progressed: () => void) => Promise<T>): Promise<T> {
  let last = performance.now();
  let timer: ReturnType<typeof setInterval> | undefined;
  const stalled = new Promise<never>((_resolve, reject) => {
    timer = setInterval(
      // Judged after the poll phase: progress that arrived during a stall of this process counts.
      () =>
        setImmediate(() => {
          if (performance.now() - last > STALL_MS) reject(new Error(`${what} made no progress for ${STALL_MS} ms: it is hung`));
        }),
      1_000,
    );
  });
  try {
    return await Promise.race([run(() => (last = performance.now())), stalled]);
  } finally {
    clearInterval(timer);
  }
}

let chaos: ChaosResult;
// One run for the first three tests, made once here (a test that timed out made another beside it).
beforeAll(async () => {
  chaos = await watched("the chaos run", (progressed) =>
    runChaos({
      provider: "openai",
      parallel: false,
      turns: 120,
      failureRate: 0.3,
      dropRate: 0.1,
      rewordRate: 0.5,
      seed: "7",
      timeScale: 0.005,
      concurrency: 8,
      redeliveries: 4,
      ledger: new MemoryLedger(),
      runId: `oai${process.pid}`,
      onProgress: progressed,
    }),
  );
}, RUN_BOUND_MS);
const run = async () => chaos;

describe("the chaos run on --provider openai", () => {
  it("STREAM-2: stream failures land where they were planned, at every position, on the Responses stream", async () => {
    const { byPosition, plannedByPosition, naive, guarded, provider } = await run();
    expect(provider).toBe("openai");
    expect(byPosition).toEqual(plannedByPosition);
    expect(naive.byPosition).toEqual(guarded.byPosition);
    for (const position of POSITIONS) expect(byPosition[position], position).toBeGreaterThan(0);
  });

  it("the naive side pays again after every cut inside the window and every lost response, and the oracle calls each a misreport", async () => {
    const { naive, planned, failuresInWindow, turns, routes } = await run();
    const repeats = failuresInWindow + planned.lostResponses - planned.lostResponsesInWindow;
    expect(failuresInWindow).toBeGreaterThan(0);
    expect(planned.lostResponses).toBeGreaterThan(0);
    expect(naive.duplicates).toBe(repeats);
    expect(naive.payments).toBe(turns + repeats);
    expect(naive.misreports).toBe(repeats);
    expect(naive.misreportReasons.two_payments).toBe(repeats);
    expect(routes.find((r) => r.name === "client_resend")!.naive.duplicates).toBe(repeats);
    const redelivery = routes.find((r) => r.name === "queue_redelivery")!;
    expect(redelivery.naive.duplicates).toBe(redelivery.replays);
  });

  it("the guarded side makes no duplicate and misreports no effect on any route (effect log and committed turns agree)", async () => {
    const { guarded, naive, planned, failuresInWindow, turns, routes, anomalies } = await run();
    expect(guarded.duplicates).toBe(0);
    expect(guarded.misreports).toBe(0);
    expect(guarded.payments).toBe(turns);
    expect(guarded.failedTurns).toBe(0);
    expect(guarded.lostResponses).toBe(planned.lostResponses);
    expect(guarded.reconciled).toBe(guarded.lostResponses);
    expect(naive.reconciled).toBe(0);
    expect(guarded.posts).toBe(turns);
    // Every call re-emitted after a cut inside the window (a new call_id each time) was answered from the ledger.
    expect(guarded.replayedFromLedger).toBe(failuresInWindow);
    // Re-worded memos reached the dispatcher and were sent as first asked (LEDGER-21).
    expect(guarded.rewordedResponses).toBeGreaterThan(0);
    expect(guarded.requestDiffers).toBeGreaterThan(0);
    for (const route of routes) {
      expect(route.guarded.duplicates, route.name).toBe(0);
      expect(route.guarded.misreports, route.name).toBe(0);
    }
    expect(anomalies).toEqual([]);
  });

  it("pnpm demo --provider openai runs the incident and the chaos run on the Responses API", async () => {
    const options = { ...parseArgs(["--provider", "openai"]), turns: 24, failureRate: 0.5, redeliveries: 2, timeScale: 0.005, incidentTimeScale: 0.05, progress: false };
    expect(options.provider).toBe("openai");
    const result = await watched("pnpm demo --provider openai", (progressed) => runDemo({ ...DEFAULT_OPTIONS, ...options }, { onPhase: progressed, onProgress: progressed }));
    expect(result.incident.provider).toBe("openai");
    expect(result.chaos.provider).toBe("openai");
    expect([result.incident.naive.payments, result.incident.guarded.payments]).toEqual([2, 1]);
    expect(result.chaos.guarded.duplicates + result.chaos.guarded.misreports).toBe(0);
    expect(result.chaos.anomalies).toEqual([]);
  }, RUN_BOUND_MS);
});
