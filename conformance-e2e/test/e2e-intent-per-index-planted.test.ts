import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";
import { noTypeCheck } from "./splice-plants.js";

/**
 * CONF-2's intent count is judged per turn index (oracle.ts `allowedAt`). The count of before
 * summed, over the turn indexes an intent's messages make calls at, the most any one message asked
 * for at each, so an extra identical payment made in a message's first turn was excused by the same
 * payment asked for in its follow-up turn, which the message, failed for good, never reached.
 *
 * The plant is a stream side without STREAM-17's type check alone (test/splice-plants.ts
 * `noTypeCheck`): a proxy's splice led by a sentence after the response's first call has the
 * spliced response's calls dispatched beside the one that ran. Seed 9's fifteenth run (path "14",
 * OpenAI side): message 1 asks for the payment twice in its first turn (and an invoice) and once more
 * in its follow-up; the spliced response makes the payment twice again, dispatched under ordinals 1
 * and 2 after the first call's 0, so three payments are made at turn 2; the invoice's payments
 * response is lost (unknown, not re-run), the message fails for good, and the follow-up is never
 * asked. Summed over turns 2 and 3 the message asked for three, and the count of before accepted
 * them: with the judge of dispatched spliced calls left out, seed 9 passed all 30 runs of the
 * OpenAI search (test/e2e-splice-typecheck-planted.test.ts); with the count per index, that search
 * fails at this run. The dispatched-spliced-call judge (STREAM-17) sees the same run; this test
 * holds the count to its own verdict. The control: the real runner over the same run passes.
 */
const SEED = 9;
const PATH = "14";

describe("CONF-2 per turn index: the end-to-end oracle counts an intent's effects at the turn index their keys carry (provider openai)", () => {
  it("CONF-2 three identical payments at a failed first turn that asked for two are rejected, though the message's follow-up asked for a third; the real runner passes the same run", async () => {
    const error = await runEndToEnd(memory, { deploys: false, provider: "openai", runs: 1, seed: SEED, path: PATH, shrinkTimeLimitMs: 0, runner: noTypeCheck }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(
      /CONF-2: payment globex 18230 USD c0-m0-r1: performed 3 times for one intent at turn 2 \(messages "conv-0:c0 message 1", "conv-0:c0 message 2"\), which asked for it at most 2 times at that turn index: payment_created \S+ \(seq \d+, key [0-9a-f]{8}\), payment_created \S+ \(seq \d+, key [0-9a-f]{8}\), payment_created \S+ \(seq \d+, key [0-9a-f]{8}\)/,
    );
    // The scenario the sum excused: the message failed for good at turn 2, its follow-up never asked.
    expect(message).toMatch(/turn 2 of "conv-0:c0 message 1" failed \(call_unresolved\); record: send_payment \w+ happened, send_payment \w+ happened, send_payment \w+ happened/);
    expect(message).not.toMatch(/turn 3 attempt \d+ for message "conv-0:c0 message 1"/);

    // The control: the real runner over the same run passes, and meets the shape.
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { deploys: false, provider: "openai", runs: 1, seed: SEED, path: PATH, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
    expect(seen.splices_headless ?? 0).toBeGreaterThan(0);
  }, 120_000);
});
