import { MemoryConversationStore, MemoryLedger, type CallDispatcher, type JsonValue, type Ledger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
// Imported from source: a devDependency on @dispatch-once/ledger-sqlite would close a package
// cycle (ledger-sqlite's conformance-e2e tests depend on anthropic, which depends on the runner).
import { SqliteLedger } from "../../ledger-sqlite/src/index.js";
import type { ResumedTurnRecord, RunnerEvent } from "../src/index.js";
import { world, type ToyEvent } from "./toy.js";

/**
 * RECORD-7's known gap (proposed RECORD-8): worker A pays inside a turn and dies before it
 * commits; worker B resumes the turn (TURN-15), the model answers the re-run differently, and B
 * commits. The payment is in no committed turn, so the runner must find its ledger row (LIST-3)
 * and keep a record of it beside the conversation.
 */
const CONV = "conv-resumed";

function sharedWorld(ledger: Ledger) {
  let now = 1_700_000_000_000;
  const store = new MemoryConversationStore({ now: () => now });
  const performed: unknown[] = [];
  return {
    store,
    performed,
    ledger,
    /** Lets A's turn lease lapse: A is dead (or paused past its lease). */
    expireLeases: () => {
      now += 60_000;
    },
    worker: (script: (request: number, input: JsonValue[]) => (ToyEvent | "cut")[]) =>
      world(script, false, { store, ledger, performed }),
  };
}

/** Worker A: holds the conversation, begins the turn, dispatches one pay call, and dies before any commit. */
async function workerAPaysAndDies(store: MemoryConversationStore, dispatcher: CallDispatcher, to = "acme"): Promise<{ key: string; turnIndex: number }> {
  await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
  const lease = await store.acquireLease(CONV, "worker-a", 1_000);
  if (!lease.acquired) throw new Error("worker A could not take the conversation");
  const snapshot = await store.beginTurn(CONV, lease.fence);
  if (snapshot === undefined) throw new Error("no turn to begin");
  const outcome = await dispatcher
    .turn({ conversationId: CONV, turnIndex: snapshot.turnIndex, resumed: snapshot.resumed })
    .dispatch({ name: "pay", input: { to, memo: "from A" }, callId: "call_a" });
  return { key: outcome.key, turnIndex: snapshot.turnIndex };
}

const textOnly = (): (ToyEvent | "cut")[] => [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }];

const payThenText =
  (to: string) =>
  (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
    if ((input.at(-1) as { role?: string }).role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
    return [
      { t: "call", index: 0, id: "call_b", name: "pay" },
      { t: "args", index: 0, json: `{"to":"${to}","memo":"from B"}` },
      { t: "done", index: 0 },
      { t: "end" },
    ];
  };

/** A ledger that does not list rows (capabilities.supports.listRows false). */
function unlistedLedger(): Ledger {
  const base = new MemoryLedger();
  return Object.assign(Object.create(base) as Ledger, {
    capabilities: { ...base.capabilities, supports: { ...base.capabilities.supports, listRows: false } },
  });
}

/** Worker B of a resumed turn: its attempt 1 pays bob and is cut after the call resolved; attempt 2 answers with text. */
function workerBPaysBobThenCut(shared: ReturnType<typeof sharedWorld>) {
  const script = (n: number): (ToyEvent | "cut")[] =>
    n === 1 ? [{ t: "call", index: 0, id: "call_b", name: "pay" }, { t: "args", index: 0, json: `{"to":"bob","memo":"from B"}` }, { t: "done", index: 0 }, "cut"] : textOnly();
  return world(script, true, { store: shared.store, ledger: shared.ledger, performed: shared.performed });
}

function resumedRecords(records: JsonValue[]): ResumedTurnRecord[] {
  return (records as unknown as { kind: string }[]).filter((r) => r.kind === "resumed_turn") as unknown as ResumedTurnRecord[];
}

async function resumedCommitAnswersWithText(ledger: Ledger) {
  const shared = sharedWorld(ledger);
  const a = shared.worker(textOnly);
  const paid = await workerAPaysAndDies(shared.store, a.dispatcher);
  expect(shared.performed).toHaveLength(1);
  shared.expireLeases();

  const b = shared.worker(textOnly);
  const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
  expect(result.turns.map((t) => [t.turnIndex, t.text, t.calls.length])).toEqual([[paid.turnIndex, "Nothing to pay.", 0]]);
  expect(shared.performed).toHaveLength(1); // the payment happened once, by A
  const expected = {
    kind: "resumed_turn",
    conversationId: CONV,
    messageId: "m1",
    turnIndex: paid.turnIndex,
    resumed: true,
    listed: true,
    // The arguments the row's claim stored: the user is told which payment (RECORD-8).
    calls: [{ key: paid.key, name: "pay", state: "completed", effect: "happened", result: { n: 1 }, input: { to: "acme", memo: "from A" } }],
  };
  const stored = resumedRecords(await shared.store.records(CONV));
  expect(stored).toEqual([expect.objectContaining({ ...expected, calls: [expect.objectContaining(expected.calls[0])] })]);
  // The front end learns of it from the send's result and from the event stream.
  expect(result.records).toEqual(stored);
  expect(result.turns[0]!.record).toEqual(stored[0]);
  expect(b.events.filter((e) => e.type === "resumed_turn_recorded").map((e) => (e as Extract<RunnerEvent, { type: "resumed_turn_recorded" }>).record)).toEqual(stored);
  // A re-send reads the answer back from the store (TURN-7), record included.
  const again = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
  expect(again.fromStore).toBe(true);
  expect(again.records).toEqual(stored);
}

describe("a resumed turn that commits without the dead holder's call (proposed RECORD-8)", () => {
  it("RECORD-8 memory ledger: A paid and died, B's model answers with text and commits; the payment happened once and the record lists it as happened", async () => {
    await resumedCommitAnswersWithText(new MemoryLedger());
  });

  it("RECORD-8 SQLite ledger: the same through a real listRows", async () => {
    const ledger = new SqliteLedger({ path: ":memory:" });
    try {
      await resumedCommitAnswersWithText(ledger);
    } finally {
      await ledger.close();
    }
  });

  it("RECORD-8 B's model makes a different call: B's call is answered in the turn, A's payment is listed beside it, each paid once", async () => {
    const shared = sharedWorld(new MemoryLedger());
    const paid = await workerAPaysAndDies(shared.store, shared.worker(textOnly).dispatcher);
    shared.expireLeases();
    const b = shared.worker(payThenText("bob"));
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(shared.performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    const bobKey = result.turns[0]!.calls[0]!.key;
    expect(bobKey).toBeDefined();
    expect(bobKey).not.toBe(paid.key);
    const stored = resumedRecords(await shared.store.records(CONV));
    expect(stored).toHaveLength(1);
    expect(stored[0]!.calls.map((c) => [c.key, c.effect])).toEqual([[paid.key, "happened"]]);
    expect(result.records).toEqual(stored);
  });

  it("RECORD-8 B's model makes the same call: it is answered from the ledger in the committed turn, and the record lists nothing but says the turn was resumed", async () => {
    const shared = sharedWorld(new MemoryLedger());
    const paid = await workerAPaysAndDies(shared.store, shared.worker(textOnly).dispatcher);
    shared.expireLeases();
    const b = shared.worker(payThenText("acme"));
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(shared.performed).toHaveLength(1);
    expect(result.turns[0]!.calls[0]).toMatchObject({ key: paid.key, replayed: true });
    const stored = resumedRecords(await shared.store.records(CONV));
    expect(stored).toEqual([expect.objectContaining({ kind: "resumed_turn", resumed: true, listed: true, calls: [] })]);
    expect(result.records).toEqual(stored);
  });

  it("RECORD-8 a holder paused before its claim pays after the resumed turn listed the rows: the resumed turn's record, kept though it lists nothing, says the turn was resumed (the model's resume-omits-record)", async () => {
    const shared = sharedWorld(new MemoryLedger());
    // A binds the message and begins the turn, then freezes before it claims anything.
    await shared.store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
    const lease = await shared.store.acquireLease(CONV, "worker-a", 1_000);
    if (!lease.acquired) throw new Error("worker A could not take the conversation");
    const snapshot = await shared.store.beginTurn(CONV, lease.fence);
    if (snapshot === undefined) throw new Error("no turn to begin");
    shared.expireLeases();
    // B resumes: its listing finds no row, its model answers with text, it commits.
    const result = await shared.worker(textOnly).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(result.turns.map((t) => [t.turnIndex, t.calls.length])).toEqual([[snapshot.turnIndex, 0]]);
    const stored = resumedRecords(await shared.store.records(CONV));
    expect(stored).toEqual([expect.objectContaining({ kind: "resumed_turn", turnIndex: snapshot.turnIndex, resumed: true, listed: true, calls: [] })]);
    expect(result.records).toEqual(stored);
    // A wakes and pays (and may die before it records anything): the kept record is what covers it (RECORD-7).
    const a = shared.worker(textOnly);
    await a.dispatcher
      .turn({ conversationId: CONV, turnIndex: snapshot.turnIndex, resumed: snapshot.resumed })
      .dispatch({ name: "pay", input: { to: "acme", memo: "from A" }, callId: "call_a" });
    expect(shared.performed).toHaveLength(1);
    expect(resumedRecords(await shared.store.records(CONV))).toEqual(stored);
  });

  it("RECORD-8 what each row state says: completed happened, failed not_happened (but failed result_not_storable happened), in_flight/unknown/released may_have_happened", async () => {
    const ledger = new MemoryLedger();
    const shared = sharedWorld(ledger);
    const paid = await workerAPaysAndDies(shared.store, shared.worker(textOnly).dispatcher);
    const claim = async (key: string) => {
      const result = await ledger.claim({ key, toolName: "pay", effect: "keyed_write", owner: "worker-a", leaseMs: 600_000, request: "{}", conversationId: CONV, turnIndex: paid.turnIndex });
      if (result.outcome !== "claimed") throw new Error(`could not claim ${key}`);
      return result.fence;
    };
    await claim("k-in-flight");
    await ledger.fail("k-failed", await claim("k-failed"), { name: "CardDeclined", message: "declined" });
    // A failure to KEEP the result of an effect that happened (RECON-7): the effect happened.
    await ledger.fail("k-not-storable", await claim("k-not-storable"), { name: "ResultNotStorableError", code: "result_not_storable", message: "too large" });
    await ledger.markUnknown("k-unknown", await claim("k-unknown"), "tool_error");
    await ledger.release("k-released", await claim("k-released"));
    // A row of another turn index is not this turn's.
    await ledger.claim({ key: "k-other-turn", toolName: "pay", effect: "keyed_write", owner: "worker-a", leaseMs: 600_000, request: "{}", conversationId: CONV, turnIndex: paid.turnIndex + 1 });
    shared.expireLeases();
    const result = await shared.worker(textOnly).runner.send(CONV, { id: "m1", content: "pay acme" });
    const calls = result.records?.[0]?.calls ?? [];
    expect(Object.fromEntries(calls.map((c) => [c.key, [c.state, c.effect]]))).toEqual({
      [paid.key]: ["completed", "happened"],
      "k-in-flight": ["in_flight", "may_have_happened"],
      "k-failed": ["failed", "not_happened"],
      "k-not-storable": ["failed", "happened"],
      "k-unknown": ["unknown", "may_have_happened"],
      "k-released": ["released", "may_have_happened"],
    });
  });

  it("RECORD-8 on a ledger that does not list rows the record says the turn was resumed and is not listed (RECORD-6)", async () => {
    const shared = sharedWorld(unlistedLedger());
    await workerAPaysAndDies(shared.store, shared.worker(textOnly).dispatcher);
    shared.expireLeases();
    const result = await shared.worker(textOnly).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(result.records).toEqual([
      expect.objectContaining({ kind: "resumed_turn", resumed: true, listed: false, calls: [], unlistedReason: expect.stringContaining("listRows") }),
    ]);
    expect(shared.performed).toHaveLength(1);
  });

  it("RECORD-8 resumed and retried: B's attempt 1 pays bob and is cut, attempt 2 answers with text; one record lists A's row and B's own call once each", async () => {
    const shared = sharedWorld(new MemoryLedger());
    const paid = await workerAPaysAndDies(shared.store, shared.worker(textOnly).dispatcher);
    shared.expireLeases();
    const b = workerBPaysBobThenCut(shared);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(shared.performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    const bobKey = (b.events.find((e) => e.type === "call_resolved") as Extract<RunnerEvent, { type: "call_resolved" }>).key;
    const stored = resumedRecords(await shared.store.records(CONV));
    expect(stored).toHaveLength(1);
    expect(stored[0]).toMatchObject({ resumed: true, listed: true, attempts: 2 });
    expect(Object.fromEntries(stored[0]!.calls.map((c) => [c.key, [c.state, c.attempt, c.effect]]))).toEqual({
      [paid.key]: ["completed", undefined, "happened"],
      [bobKey!]: ["completed", 1, "happened"],
    });
    expect(stored[0]!.calls).toHaveLength(2);
    expect(result.records).toEqual(stored);
  });

  it("RECORD-8 resumed and retried on a ledger that does not list rows: the record is unlisted but still names this runner's own earlier payment", async () => {
    const shared = sharedWorld(unlistedLedger());
    await workerAPaysAndDies(shared.store, shared.worker(textOnly).dispatcher);
    shared.expireLeases();
    const b = workerBPaysBobThenCut(shared);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(result.records).toEqual([
      expect.objectContaining({ kind: "resumed_turn", resumed: true, listed: false, calls: [expect.objectContaining({ name: "pay", attempt: 1, effect: "happened" })] }),
    ]);
  });

  it("RECORD-8 a turn that was not resumed commits without a resumed-turn record", async () => {
    const shared = sharedWorld(new MemoryLedger());
    const result = await shared.worker(payThenText("acme")).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(shared.performed).toHaveLength(1);
    expect(result.records).toBeUndefined();
    expect(await shared.store.records(CONV)).toEqual([]);
  });
});
