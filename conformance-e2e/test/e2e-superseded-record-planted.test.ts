import { MemoryConversationStore, type ConversationStore } from "@dispatch-once/core";
import type { CallRecord, SupersededAttemptRecord } from "@dispatch-once/runner";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd, type EndToEndOptions } from "../src/index.js";
import { memory, storeWith } from "./audit-mutants.js";
import { expectReadable } from "./readable.js";

/**
 * RECORD-10 in a superseded-attempt record (TURN-13): a call of the attempt answered from the
 * ledger under a re-worded re-run's arguments (IDENT-3) carries the request that ran under its key
 * as `storedRequest`. The plant keeps every superseded-attempt record with each such entry's
 * `storedRequest` rewritten, in place, to the call's own re-worded `input` (the runner reports the
 * object it keeps: RECORD-4 and TURN-13 see both alike). The entry then names a payment that never
 * ran; its `input` is still the same payment's signature, so only the oracle's whole comparison of
 * `storedRequest` with the effect log sees it (oracle.ts checkRecordInputs). Nothing else in the
 * kit reads that field of a superseded-attempt record (blind round O's O32 dropped the comparison
 * and no planted test failed).
 *
 * The paths: the first counterexample of a search with this plant, 60 runs at each side's CI seed
 * (20261129 Anthropic: run 10; 20261201 OpenAI: run 1), shrunk for 3 s; the tests replay them alone.
 */
const FOUND: Record<(typeof RUNNER_PROVIDERS)[number], { seed: number; path: string }> = {
  anthropic: { seed: 20261129, path: "9:2:0:0:0:0:0:1:0:0:0" },
  openai: { seed: 20261201, path: "0:0" },
};

/** How many entries the plant rewrote (the replay reached a superseded attempt with a stored request). */
const planted = { rewritten: 0 };

/** A store that keeps superseded-attempt records with each stored request told as the call's re-worded input. */
function rewordingStore({ now }: { now: () => number }): ConversationStore {
  const inner = new MemoryConversationStore({ now });
  return storeWith(inner, {
    addRecord: async (conversationId, record) => {
      const r = record as unknown as SupersededAttemptRecord;
      if (r?.kind === "superseded_attempt" && Array.isArray(r.calls)) {
        for (const x of r.calls as CallRecord[]) {
          if (x.storedRequest === undefined || x.input === undefined || JSON.stringify(x.storedRequest) === JSON.stringify(x.input)) continue;
          x.storedRequest = x.input;
          planted.rewritten++;
        }
      }
      return inner.addRecord(conversationId, record);
    },
  });
}

/**
 * A replay reaches the superseded attempt only when its lease race goes as it went in the search:
 * on a loaded host it may not (one replay in a sweep of blind round O missed it). A replay that
 * does not reach it says nothing either way, so each side replays up to REPLAYS times, and a verdict
 * is taken from the first that does; none reaching it fails the test.
 */
const REPLAYS = 3;

describe.each(RUNNER_PROVIDERS)("a superseded attempt's record names the request that ran under a re-worded call's key (RECORD-10, TURN-13; provider %s)", (provider) => {
  it("RECORD-10 a superseded-attempt record whose stored request is the re-run's re-wording is rejected; the real runner's record names the payment that ran", async () => {
    const { seed, path } = FOUND[provider];
    let error: unknown;
    for (let i = 0; i < REPLAYS; i++) {
      planted.rewritten = 0;
      error = await runEndToEnd(memory, { provider, runs: 60, seed, path, shrinkTimeLimitMs: 0, conversationStore: rewordingStore as NonNullable<EndToEndOptions["conversationStore"]> }).catch((e: unknown) => e);
      if (planted.rewritten > 0) break;
    }
    expect(planted.rewritten, `seed ${seed}, path ${path}: no replay of ${REPLAYS} reached a superseded attempt's stored request`).toBeGreaterThan(0);
    const message = expectReadable(error, seed);
    expect(message).toMatch(
      /breaks RECORD-10\): the superseded_attempt record of turn \d+ of conv-\d+ \(message "[^"]+", (reported by \w+|kept beside the conversation)\) says send_payment key \w+ happened with input .*, but the request that ran under the key is .*the payments API's payment_created/,
    );
    let seen: Record<string, number> = {};
    for (let i = 0; i < REPLAYS; i++) {
      await runEndToEnd(memory, { provider, runs: 60, seed, path, onStats: (stats) => (seen = stats) });
      expect(seen).toMatchObject({ property_cases: 1, replayed_passed: 1 });
      if ((seen.superseded ?? 0) > 0) break;
    }
    expect(seen.superseded ?? 0, "the real runner's replay has a superseded attempt").toBeGreaterThan(0);
    expect(seen.record_inputs_judged ?? 0).toBeGreaterThan(0);
  }, 120_000);
});
