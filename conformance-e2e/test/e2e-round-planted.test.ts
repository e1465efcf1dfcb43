import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { MUTANTS, memory } from "./audit-mutants.js";

/**
 * Mutation round of 2026-12-03, above the ledger: bugs the oracle already rejected, kept as regressions,
 * each with the rule it breaks and what the counterexample says. A store whose records deny the
 * effects they reported used to be told apart only as "not kept"; the message now names the keys
 * the stored copy denies. A store that keeps a denying copy beside the true record passed the
 * oracle, which judged only the records the runner reported; it now judges every kept record.
 */
/**
 * Each is found within a few runs, but a loaded host slows the search (it was interrupted after 0
 * runs at 15 s), so the search gets 60 s; shrinking has a small budget of its own (RECORD-5 shrank
 * for 43 s in CI).
 */
const SEARCH_BUDGET_MS = 60_000;
const mutant = (name: string) => MUTANTS.find((m) => m.name === name)!;

describe.each(RUNNER_PROVIDERS)("mutation round of 2026-12-03: the end-to-end oracle rejects bugs above the ledger (provider %s)", (provider) => {
  it("RECORD-3 a tool that reports a definite decline after its payment went through commits an error for a payment that happened", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 5, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("paidThenDeclined").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 5);
    expect(message).toMatch(/breaks RECORD-3/);
    expect(message).toMatch(/send_payment key [0-9a-f]{8} \(turn \d+ of conv-\d+, message "[^"]+"\) was committed as an error \(.*declined.*\) but its effect happened: payment_created/);
  }, 600_000);

  it("RECORD-4 a store that keeps every record with its effects rewritten to not_happened: the stored copy denies an effect the reported record lists", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 5, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("storedRecordsDeny").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 5);
    expect(message).toMatch(/breaks (RECORD-4|TURN-13|RECORD-8)/);
    expect(message).toMatch(/is not kept beside the conversation: the stored copy no longer says [0-9a-f]{8}(, [0-9a-f]{8})* may have happened/);
  }, 600_000);

  it("RECORD-5 a store that keeps each record and, beside it, a copy denying every effect: a kept failed-turn record sums up a key that happened as not_happened", async () => {
    // Passed 60 runs (seed 5) of the oracle before it judged stored records: every reported record was kept.
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 5, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, ...mutant("storedDenyingCopy").options() }).catch((e: unknown) => e);
    const message = expectReadable(error, 5);
    expect(message).toMatch(/breaks RECORD-5/);
    expect(message).toMatch(/a failed-turn record kept beside the conversation \(turn \d+, message "[^"]+", written [^)]+\) sums up \w+ key [0-9a-f]{8} as not_happened, but it happened before the record was written/);
  }, 600_000);
});
