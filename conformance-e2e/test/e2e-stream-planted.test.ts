import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { cleanCloseTakenForTheEnd } from "./stream-plants.js";
import { SHRINK_BUDGET_MS, expectReadable } from "./readable.js";
import { memory } from "./audit-mutants.js";

/**
 * Mutation round of 2026-12-04, above the stores (dispatcher, runner, stream sides): a survivor of
 * the oracle of before, kept as a regression. The runner committed a response whose body closed
 * cleanly before its finishing event. On the Anthropic side an open tool_use block then reached
 * the log without its tool_result (RECORD-1); on the OpenAI side the unfinished function_call is
 * left out of the committed output, so the message was answered with the call silently gone:
 * 40 runs passed, as nothing was performed, nothing recorded and the log was well formed.
 */
/** The search stops at the first failure (a budget it does not reach costs nothing); shrinking has its own, small. */
const SEARCH_BUDGET_MS = 60_000;
describe.each(RUNNER_PROVIDERS)("mutation round of 2026-12-04: the end-to-end oracle rejects bugs in the stream side (provider %s)", (provider) => {
  it("STREAM-8 a runner that commits a response whose body closed cleanly before its finishing event answers a message with its call gone", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider, runs: 300, seed: 3, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: SHRINK_BUDGET_MS, runner: cleanCloseTakenForTheEnd }).catch((e: unknown) => e);
    const message = expectReadable(error, 3);
    // The Anthropic side's committed log may show the open call without its result first (RECORD-1).
    expect(message).toMatch(provider === "openai" ? /breaks STREAM-8/ : /breaks (STREAM-8|RECORD-1)/);
    if (/breaks STREAM-8/.test(message)) {
      expect(message).toMatch(/message "[^"]+" was answered, but its committed turns make (\d+) of the (\d+) "(payment|invoice|void) [^"]+" calls it asked for/);
    }
  }, 600_000);
});
