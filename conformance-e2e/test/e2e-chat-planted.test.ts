import { UnguardedDispatcher } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";
import { cleanCloseTakenForTheEnd } from "./stream-plants.js";

/**
 * The Chat Completions side (provider "openai-chat": ChatCompletionsRunner against apps/mock-openai's
 * /v1/chat/completions) with a planted bug must fail the oracle within a few runs, as the other
 * sides' planted suites require of them (those run on RUNNER_PROVIDERS, and four record suites on
 * this side too, chat-sides.ts WITH_CHAT; this side's certification is e2e.test.ts's). The search stops at the first failing scenario (run 1 and run 3 at these
 * seeds) and reports it unshrunk, as CI's budget wants: the message names the rule, the
 * timeline, and the seed and path that replay it.
 */
const SEARCH_BUDGET_MS = 60_000;

describe("the end-to-end oracle rejects a broken Chat Completions side (provider openai-chat)", () => {
  it("CONF-2 a ChatCompletionsRunner whose dispatcher is UnguardedDispatcher pays a cut turn's call again on its retry", async () => {
    const seed = 7;
    const error = await runEndToEnd(memory, {
      provider: "openai-chat",
      runs: 30,
      seed,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: 0,
      dispatcher: (tools) => new UnguardedDispatcher(tools),
    }).catch((e: unknown) => e);
    const message = expectReadable(error, seed);
    // Whichever shrinks smallest: a second payment for one intent, or an effect told as an error.
    expect(message).toMatch(/breaks (CONF-2|DISPATCH-5|RECORD-3)/);
  }, 300_000);

  it("STREAM-20 a ChatCompletionsRunner that commits a stream which ended without its finish_reason (as the SDK's iterator ends on a clean close) answers a message with its calls gone", async () => {
    const seed = 3;
    const error = await runEndToEnd(memory, {
      deploys: false,
      provider: "openai-chat",
      runs: 30,
      seed,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: 0,
      runner: cleanCloseTakenForTheEnd,
    }).catch((e: unknown) => e);
    const message = expectReadable(error, seed);
    expect(message).toMatch(/breaks STREAM-8/);
    expect(message).toMatch(/message "[^"]+" was answered, but its committed turns make (\d+) of the (\d+) "(payment|invoice|void) [^"]+" calls it asked for/);
  }, 300_000);

  // Found while the side was built (seed 101, 30 runs): a Chat Completions tool names itself in its
  // `function` (`function.name`), and the kit's model read only a Responses tool's `name`, so after a
  // deploy that renamed send_payment to pay (formerNames) it went on calling send_payment, which the
  // new release does not register: the call was committed as an unknown_tool error while its key's
  // payment had happened (RECORD-3). The kit's model calls what the request offers, as on the other sides.
  const RENAME_SEED = 101;
  const RENAME_PATH = "11:28:1:1:1:1:1:1:1:1:2:1:2:2:0:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:1:2:1";

  it("IDENT-11 after a deploy that renames the payment tool, the model calls it by the name the Chat Completions request offers (seed 101, the shrunk path)", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "openai-chat", runs: 1, seed: RENAME_SEED, path: RENAME_PATH, onStats: (s) => Object.assign(seen, s) });
    expect({ replayed: seen.replayed_passed, renames: seen.deploys_rename }).toEqual({ replayed: 1, renames: 1 });
  }, 120_000);
});
