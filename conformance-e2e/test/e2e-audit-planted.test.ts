import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { MUTANTS, memory } from "./audit-mutants.js";

/**
 * Planted bugs the end-to-end oracle passed before the audit (each survived 40 to 150 runs):
 * a dispatcher whose ordinal is counted per call, and records reported to the caller but not
 * kept beside the conversation. Each must now be rejected with the rule it breaks and a
 * readable counterexample (timeline, seed and path).
 */
// Each seed below fails within its first few runs (TURN-13's seed 11 at run 3 on both sides); the
// search stops there, so its generous budget costs nothing and a loaded CI host cannot cut it.
// Shrinking has a small budget of its own.
const SEARCH_BUDGET_MS = 60_000;
const mutant = (name: string) => MUTANTS.find((m) => m.name === name)!;

describe.each(RUNNER_PROVIDERS)("the end-to-end oracle rejects the audit's planted bugs (provider %s)", (provider) => {
  it("DISPATCH-6 a dispatcher that counts each call's ordinal alone answers the second of two identical calls with the first's payment", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 6, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("ordinalPerCall").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 6);
    expect(message).toMatch(/breaks DISPATCH-6/);
    expect(message).toMatch(/send_payment call \S+ \(turn \d+ of conv-\d+, message "[^"]+"\) was dispatched under key [0-9a-f]{8}, the key of call \S+ of the same committed response/);
  }, 600_000);

  it("TURN-4 a dispatcher whose ordinal count does not restart with the attempt (TURN-6) keys a retried call as another call", async () => {
    // Caught before the audit by its duplicate payment (CONF-2); now by the key itself, on the smallest scenario.
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 4, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("ordinalAcrossAttempts").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 4);
    expect(message).toMatch(/breaks (TURN-4|CONF-2)/);
    expect(message).toMatch(/was dispatched under key [0-9a-f]{8}, the key of ordinal [1-9]\d*; 0 identical calls precede it/);
  }, 600_000);

  it("TURN-13 a store that drops superseded-attempt records keeps no word of the superseded attempt's calls beside the conversation", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 11, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("supersededRecordsNotKept").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 11);
    expect(message).toMatch(/breaks TURN-13/);
    expect(message).toMatch(/the superseded-attempt record of turn \d+ \(message "[^"]+", \S+\) is not kept beside the conversation/);
  }, 600_000);

  it("RECORD-8 a store whose addRecord keeps nothing (nor a commit's record) loses the record of a turn committed after a retry", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 8, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("addRecordNoop").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 8);
    expect(message).toMatch(/breaks (RECORD-8|TURN-13)/);
    expect(message).toMatch(/is not kept beside the conversation/);
  }, 600_000);
});
