import { MemoryConversationStore, MemoryLedger, ToolError, type ConversationStore, type Ledger, type TurnCommit } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import type { CallRecord, SupersededAttemptRecord } from "../src/index.js";
import { payCall, world } from "./toy.js";

/**
 * TURN-13: a superseded attempt's record MUST NOT call an effect `not_happened` on the attempt's
 * own word: the holder that took the turn over runs the same keys. Attempt 1 of the turn released
 * its payment as not performed and was cut; attempt 2 answered with text; right before attempt 2's
 * commit another holder took the lease over and left the payment's row in one of the states
 * below. Whatever that row says is what the superseded record must say of the key. (Blind round
 * L's mutant L13, a record written without reading the ledger, escaped every earlier check: the
 * existing superseded cases all had calls that said `happened` on their own.)
 */
const CONV = "conv-superseded-as-of-takeover";

type RowMaker = (ledger: Ledger, key: string) => Promise<void>;
const claimed = async (ledger: Ledger, key: string) => {
  const claim = await ledger.claim({ key, toolName: "pay", effect: "keyed_write", owner: "worker-b", leaseMs: 60_000, request: '{"to":"acme","memo":"first"}' });
  if (claim.outcome !== "claimed") throw new Error(`worker-b could not claim ${key}: ${claim.outcome}`);
  return claim.fence;
};
const ROWS: Record<string, { make: RowMaker; effect: CallRecord["effect"] }> = {
  "completed by the holder that took over": { make: async (l, k) => l.complete(k, await claimed(l, k), '{"n":1}'), effect: "happened" },
  "failed with result_not_storable (performed)": { make: async (l, k) => l.fail(k, await claimed(l, k), { name: "ResultNotStorableError", message: "too big", code: "result_not_storable" }), effect: "happened" },
  "failed definitely": { make: async (l, k) => l.fail(k, await claimed(l, k), { name: "ToolFailed", message: "payee unknown", code: "payee_unknown" }), effect: "not_happened" },
  "in flight under the holder that took over": { make: async (l, k) => void (await claimed(l, k)), effect: "may_have_happened" },
  "unknown": { make: async (l, k) => l.markUnknown(k, await claimed(l, k), "lease_expired"), effect: "may_have_happened" },
  "still released (the other holder has not reached it yet)": { make: async () => undefined, effect: "may_have_happened" },
};

function setup(make: RowMaker) {
  const store = new MemoryConversationStore();
  // Durable, as a SQLite or PostgreSQL ledger is: a release as not performed then says not_happened
  // on the attempt's own word (on a volatile ledger it says may_have_happened already, LEDGER-8).
  const base = new MemoryLedger();
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" as const } });
  let key: string | undefined;
  const view = Object.assign(Object.create(store) as ConversationStore, {
    commitTurn: async (conversationId: string, commit: TurnCommit) => {
      await store.releaseLease(conversationId, commit.fence);
      await store.acquireLease(conversationId, "worker-b", 60_000);
      await make(ledger, key!);
      return store.commitTurn(conversationId, commit);
    },
  });
  let runs = 0;
  const toy = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }]), true, {
    store: view,
    ledger,
    runner: { busyWaitMs: 0 },
    beforePay: () => {
      runs++;
      throw new ToolError("the bank refused the connection before the request", { disposition: "not_performed" });
    },
  });
  return { store, toy, setKey: (k: string) => (key = k), runs: () => runs };
}

describe("TURN-13 a superseded attempt's record reads each not_happened key in the ledger first", () => {
  it.each(Object.keys(ROWS))("TURN-13 the row %s: the record says what the row says", async (name) => {
    const { make, effect } = ROWS[name]!;
    const s = setup(async (ledger, key) => make(ledger, key));
    // The key the runner's dispatcher derives for attempt 1's call, known before the send.
    s.setKey(s.toy.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "first" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 }));
    await s.toy.runner.send(CONV, { id: "m1", content: "pay acme" }).catch(() => undefined);
    expect(s.runs(), "attempt 1 ran the tool once and released it").toBe(1);
    const superseded = ((await s.store.records(CONV)) as unknown as { kind: string }[]).filter((r) => r.kind === "superseded_attempt") as unknown as SupersededAttemptRecord[];
    expect(superseded).toHaveLength(1);
    expect(superseded[0]!.calls.map((c) => [c.attempt, c.status, c.effect])).toEqual([[1, "released", effect]]);
    // The same word in the record's summary of the key (what a UI shows first).
    expect(superseded[0]!.calls[0]!.summary).toMatch(effect === "not_happened" ? /^not performed/ : /holder that took the turn over/);
  });
});
