import { MemoryConversationStore, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import type { CallRecord, FailedTurnRecord, SupersededAttemptRecord } from "@dispatch-once/runner";
import { describe, expect, it } from "vitest";
import { RUNNER_PROVIDERS, runEndToEnd } from "../src/index.js";
import { expectReadable } from "./readable.js";
import { memory, realDispatcher, storeWith } from "./audit-mutants.js";

/**
 * Two record writers that lie in a call entry the oracle of before did not read against the
 * effect log (RECORD-2: a call whose effect may have happened is not described as failed or not
 * run). Both leave the per-key summary as the runner wrote it (RECORD-5 reads the summary), and
 * both keep what the runner reported as reported (RECORD-4 compares the two):
 * - carried: a message that fails again after a re-send (or a take-over) gets a record that
 *   carries the entries of its earlier failed sends over ("every call of every attempt", across
 *   sends) and calls each carried write entry `not_happened` ("superseded by the re-send"),
 *   although the earlier send's attempt made the effect or an earlier run did. The oracle of
 *   before tied an entry to an attempt of the record's own send only, and judged one it could not
 *   tie (an earlier send's) against that send's attempt of the same number, whose time never saw
 *   the effect;
 * - kept copy: the store keeps each failed-turn record as given and, beside it, an audit copy
 *   whose write entries say `not_happened`, the per-key summary intact. The oracle of before read
 *   kept records only for their per-key summary.
 */
const SEARCH_BUDGET_MS = 240_000;

const WRITES = new Set(["send_payment", "void_payment", "create_invoice"]);
type AnyRecord = FailedTurnRecord | SupersededAttemptRecord;

/** How often each bug wrote a lie into a record (the search reached it). */
const planted = { carried: 0, keptCopy: 0 };

/**
 * The carrying writer: a message that fails again gets a record that takes over the entries of the
 * records its earlier failures were stored with (each an earlier send's, ended before the re-send
 * that reopened the message began), its write entries told `not_happened`.
 */
export function carryingStore({ now }: { now: () => number }): ConversationStore {
  const inner = new MemoryConversationStore({ now });
  /** Per conversation and message: the failed-turn records its earlier failures were stored with. */
  const failures = new Map<string, FailedTurnRecord[]>();
  /** Per conversation and fence: when the holder began the turn (every attempt of this send began later). */
  const begun = new Map<string, number>();
  return storeWith(inner, {
    beginTurn: async (conversationId, fence) => {
      const key = `${conversationId}\n${fence}`;
      if (!begun.has(key)) begun.set(key, Date.now());
      return inner.beginTurn(conversationId, fence);
    },
    failMessage: async (conversationId, fence, messageId, failure) => {
      const record = failure as unknown as FailedTurnRecord;
      const id = `${conversationId}\n${messageId}`;
      // Records written in an earlier millisecond than this holder began its turn: their effects
      // were made before any attempt of this send (the clock is the effect log's and the events').
      const beganAt = begun.get(`${conversationId}\n${fence}`) ?? 0;
      const earlier = (failures.get(id) ?? []).filter((r) => r.turnIndex === record?.turnIndex && Date.parse(r.at) < beganAt);
      if (record?.kind === "failed_turn" && Array.isArray(record.calls) && earlier.length > 0) {
        const own = new Set(record.calls.map((x) => x.callId));
        const carried: CallRecord[] = [];
        for (const x of earlier.flatMap((r) => r.calls)) {
          // Only the write calls the earlier attempt completed (ran, or was answered from the
          // ledger: its effect was made by then), each once: the carry adds only the denial.
          if (own.has(x.callId) || carried.some((y) => y.callId === x.callId)) continue;
          if (!WRITES.has(x.name) || x.key === undefined || x.status !== "completed") continue;
          planted.carried++;
          carried.push({ ...x, effect: "not_happened", summary: `${x.summary}; superseded by the re-send (planted)` });
        }
        // In place: the runner reports the same object it keeps (RECORD-4 sees both alike).
        record.calls.unshift(...carried);
      }
      await inner.failMessage(conversationId, fence, messageId, failure as JsonValue);
      failures.set(id, [...(failures.get(id) ?? []), structuredClone(record)]);
    },
  });
}

/** A failed-turn record whose write entries say not_happened; the per-key summary untouched. */
function deniedEntries(record: JsonValue): JsonValue | undefined {
  const copy = structuredClone(record) as unknown as AnyRecord;
  if (copy?.kind !== "failed_turn" || !Array.isArray(copy.calls)) return undefined;
  let denied = 0;
  for (const x of copy.calls) {
    if (!WRITES.has(x.name) || x.key === undefined || x.effect === "not_happened") continue;
    x.effect = "not_happened";
    x.summary = `${x.summary} (audit copy, planted)`;
    denied++;
  }
  if (denied === 0) return undefined;
  planted.keptCopy += denied;
  return copy as unknown as JsonValue;
}

/** The store keeps each failed-turn record as given, and beside it an audit copy whose write entries deny their effects. */
function auditCopyStore({ now }: { now: () => number }): ConversationStore {
  const inner = new MemoryConversationStore({ now });
  return storeWith(inner, {
    failMessage: async (conversationId, fence, messageId, record) => {
      await inner.failMessage(conversationId, fence, messageId, record);
      const copy = deniedEntries(record);
      if (copy !== undefined) await inner.addRecord(conversationId, copy);
    },
    addRecord: async (conversationId, record) => {
      await inner.addRecord(conversationId, record);
      const copy = deniedEntries(record);
      if (copy !== undefined) await inner.addRecord(conversationId, copy);
    },
  });
}

describe.each(RUNNER_PROVIDERS)("record entries of earlier sends and kept copies: the end-to-end oracle rejects a denied effect (provider %s)", (provider) => {
  it("RECORD-2 an earlier send's entry carried into a later send's record as not_happened", async () => {
    planted.carried = 0;
    const error = await runEndToEnd(memory, {
      provider,
      runs: 300,
      seed: 5,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: 0,
      conversationStore: carryingStore,
    }).catch((e: unknown) => e);
    expect(planted.carried).toBeGreaterThan(0);
    console.log(`ATTACK ${provider} carried: ${planted.carried} entries denied, verdict: ${error === undefined ? "passed all runs" : String(error).slice(0, 300)}`);
    const message = expectReadable(error, 5);
    expect(message).toMatch(/breaks RECORD-2\): /);
  }, 600_000);

  it("RECORD-2 a copy kept beside the conversation whose entries deny effects, the reported record intact", async () => {
    planted.keptCopy = 0;
    const error = await runEndToEnd(memory, {
      provider,
      runs: 300,
      seed: 5,
      timeLimitMs: SEARCH_BUDGET_MS,
      shrinkTimeLimitMs: 0,
      conversationStore: auditCopyStore,
    }).catch((e: unknown) => e);
    expect(planted.keptCopy).toBeGreaterThan(0);
    console.log(`ATTACK ${provider} kept copy: ${planted.keptCopy} entries denied, verdict: ${error === undefined ? "passed all runs" : String(error).slice(0, 300)}`);
    const message = expectReadable(error, 5);
    expect(message).toMatch(/breaks RECORD-2\): /);
  }, 600_000);

  it("the real dispatcher and store pass the same scenarios", async () => {
    await runEndToEnd(memory, { provider, runs: 20, seed: 5, dispatcher: realDispatcher });
  }, 600_000);
});
