import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { z } from "zod";
import { describe, expect, it } from "vitest";
import type { ResumedTurnRecord } from "../src/index.js";
import { readingInputs } from "./reading-inputs.js";
import { world, type ToyEvent } from "./toy.js";

/*
 * TURN-23 and a holder paused BEFORE its claim (the spin model's finding 29, carry-listed-only-pause):
 * W1 runs turn 0 of m1, its model pays acme, and W1 pauses past its lease before it claims the key.
 * W0 takes the message over (TURN-15), lists turn 0's rows (none), its re-run pays bob and commits:
 * the record says an earlier holder may have acted and names no call. W1 wakes, claims turn 0's key
 * and pays acme. Turn 1's model pays acme (the conversation never answered it): under turn 1's key
 * that paid acme twice. The fix (carry-pause): a write call of a turn after a resumed turn j that no
 * listed call answers is dispatched at turn j's index, after the identical calls turn j answered.
 */
const CONV = "conv-paused";

const payIn = (id: string, index: number, to: string, memo: string): ToyEvent[] => [
  { t: "call", index, id, name: "pay" },
  { t: "args", index, json: `{"to":"${to}","memo":"${memo}"}` },
  { t: "done", index },
];
const text: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];
const to = (performed: unknown[]) => performed.map((p) => (p as { to: string }).to);

function kept(records: JsonValue[]): ResumedTurnRecord[] {
  return (records as unknown as { kind: string }[]).filter((r) => r.kind === "resumed_turn") as unknown as ResumedTurnRecord[];
}

/**
 * W1 binds m1, begins turn 0 and pauses before its claim; its lease lapses. Returns the store, the
 * ledger, the effect log and W1's claim, made when the test wakes it (after W0 committed turn 0).
 */
async function pausedHolder() {
  let now = 1_700_000_000_000;
  const store = new MemoryConversationStore({ now: () => now });
  const ledger = new MemoryLedger();
  const performed: unknown[] = [];
  const w1 = world(() => [], false, { store, ledger, performed });
  await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
  const lease = await store.acquireLease(CONV, "worker-1", 1_000);
  if (!lease.acquired) throw new Error("W1 could not take the conversation");
  const snapshot = await store.beginTurn(CONV, lease.fence);
  // W1's model asked for acme's payment; W1 is paused before dispatching it (a GC pause, a stopped VM).
  const wake = () => w1.dispatcher.turn({ conversationId: CONV, turnIndex: snapshot!.turnIndex }).dispatch({ name: "pay", input: { to: "acme", memo: "from W1" }, callId: "w1" });
  now += 60_000; // W1's conversation lease lapses
  return { store, ledger, performed, wake, w1 };
}

/** Holds `open` of the runner's `n`-th request until `before` resolved (W1 wakes between W0's turns). */
function openAfter(provider: { open: (...a: never[]) => Promise<unknown>; requests: unknown[] }, n: number, before: () => Promise<unknown>): void {
  const open = provider.open.bind(provider) as (...a: never[]) => Promise<unknown>;
  provider.open = (async (...args: never[]) => {
    if (provider.requests.length === n - 1) await before();
    return open(...args);
  }) as typeof provider.open;
}

describe("TURN-23 after a resumed turn: a holder paused before its claim (finding 29)", () => {
  it("TURN-23 W1 pays acme at turn 0's key after W0 committed turn 0 without it; turn 1's acme is answered from W1's row: acme paid once", async () => {
    const { store, ledger, performed, wake, w1 } = await pausedHolder();
    const w0 = world((n) => (n === 1 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 2 ? [...payIn("c-acme", 0, "acme", "from W0"), { t: "end" }] : text), false, { store, ledger, performed });
    readingInputs(w0.provider);
    let w1Outcome: Awaited<ReturnType<typeof wake>> | undefined;
    openAfter(w0.provider, 2, async () => (w1Outcome = await wake()));
    const result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    // W1 paid acme under turn 0's key at ordinal 0; W0's turn 1 is answered from that row.
    expect(to(performed)).toEqual(["bob", "acme"]);
    const w1Key = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(w1Outcome?.key).toBe(w1Key);
    expect(result.turns.map((t) => t.turnIndex)).toEqual([0, 1, 2]);
    expect(result.turns[1]!.calls).toEqual([expect.objectContaining({ name: "pay", key: w1Key, ordinal: 0, replayed: true, result: { n: 2 } })]);
    // Answered from W1's row (replayed, turn 0's key); not `carriedFromTurn`, which a read-back could not repeat.
    expect(result.turns[1]!.calls[0]!.carriedFromTurn).toBeUndefined();
    // Turn 0's record: resumed, listed, names no call (W1 claimed after the listing).
    expect(kept(await store.records(CONV)).map((r) => [r.turnIndex, r.resumed, r.calls.length])).toEqual([[0, true, 0]]);
    // A re-send reads the same key back.
    const again = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.fromStore).toBe(true);
    expect(again.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn])).toEqual([[w1Key, 0, undefined]]);
    expect(performed).toHaveLength(2);
  });

  it("TURN-23 no paused holder: turn 1's acme runs once, under turn 0's key, reported as a run (not carried); read back with the same key", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    const w0 = world((n) => (n === 1 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 2 ? [...payIn("c-acme", 0, "acme", "from W0"), { t: "end" }] : text), false, { store, ledger, performed });
    readingInputs(w0.provider);
    const result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(to(performed)).toEqual(["bob", "acme"]);
    const key = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(result.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.replayed, c.carriedFromTurn])).toEqual([[key, 0, false, undefined]]);
    const again = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns[1]!.calls.map((c) => [c.key, c.ordinal])).toEqual([[key, 0]]);
  });

  it("TURN-23 turn 0 answered an identical acme: turn 1's acme is a second ask, dispatched at turn 0's next ordinal, and runs; the paused W1's acme meets turn 0's row", async () => {
    const { store, ledger, performed, wake, w1 } = await pausedHolder();
    const w0 = world((n) => (n === 1 ? [...payIn("c-a0", 0, "acme", "first"), { t: "end" }] : n === 2 ? [...payIn("c-a1", 0, "acme", "second"), { t: "end" }] : text), false, { store, ledger, performed });
    readingInputs(w0.provider);
    let w1Outcome: Awaited<ReturnType<typeof wake>> | undefined;
    openAfter(w0.provider, 2, async () => (w1Outcome = await wake()));
    const result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(to(performed)).toEqual(["acme", "acme"]);
    const at = (ordinal: number) => w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal });
    // W1's claim met W0's turn-0 row (answered from it, not paid again).
    expect(w1Outcome).toEqual(expect.objectContaining({ key: at(0), replayed: true }));
    expect(result.turns.map((t) => t.calls.map((c) => [c.key, c.ordinal, c.replayed, c.carriedFromTurn]))).toEqual([[[at(0), 0, false, undefined]], [[at(1), 1, false, undefined]], []]);
    const again = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns.map((t) => t.calls.map((c) => [c.key, c.ordinal]))).toEqual([[[at(0), 0]], [[at(1), 1]], []]);
  });

  it("TURN-23 a holder that takes the message up between turn 0 and turn 1 (W0 died) dispatches turn 1's acme at turn 0's key: W1's payment answers it", async () => {
    const { store, ledger, performed, wake, w1 } = await pausedHolder();
    let begun = 0;
    const dying = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
    });
    const w0 = world(() => [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }], false, { store: dying, ledger, performed });
    readingInputs(w0.provider);
    await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
    const w1Outcome = await wake();
    expect(w1Outcome.replayed).toBe(false);
    const w2 = world((n) => (n === 1 ? [...payIn("c-acme", 0, "acme", "from W2"), { t: "end" }] : text), false, { store, ledger, performed });
    readingInputs(w2.provider);
    const result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(to(performed)).toEqual(["bob", "acme"]);
    const key = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.ordinal, c.replayed, c.carriedFromTurn])).toEqual([[key, 0, true, undefined]]);
    const again = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.ordinal])).toEqual([[key, 0]]);
    expect(performed).toHaveLength(2);
  });

  it("TURN-23 a holder that takes the message up and cannot read turn 0's call back (no arguments) keeps no slot for its tool: turn 1's acme, a second ask after turn 0 paid acme, runs under turn 1's own key, never answered from turn 0's row", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    let begun = 0;
    const dying = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
    });
    // W0 takes turn 0 over (resumed) and pays acme: turn 0 answers it. W0 dies before turn 1.
    const w0 = world(() => [...payIn("c-a0", 0, "acme", "first"), { t: "end" }], false, { store: dying, ledger, performed });
    readingInputs(w0.provider);
    await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
    // W2's provider reads no arguments back: which acme turn 0 answered it cannot tell.
    const w2 = world((n) => (n === 1 ? [...payIn("c-a1", 0, "acme", "second"), { t: "end" }] : text), false, { store, ledger, performed });
    const result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    const own = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 1, ordinal: 0 });
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.replayed])).toEqual([[own, false]]);
    expect(to(performed)).toEqual(["acme", "acme"]);
  });

  it("TURN-23 a resumed turn's record kept without `resumed` (a release before the field) is taken as resumed: a holder that takes the message up keeps its slot, and turn 1's acme is answered from the paused W1's row", async () => {
    const { store, ledger, performed, wake, w1 } = await pausedHolder();
    let begun = 0;
    const dying = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
    });
    const w0 = world(() => [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }], false, { store: dying, ledger, performed });
    readingInputs(w0.provider);
    await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
    expect((await wake()).replayed).toBe(false);
    // The records as an earlier release kept them: no `resumed` field.
    const older = Object.assign(Object.create(store) as ConversationStore, {
      records: async (conversationId: string) =>
        (await store.records(conversationId)).map((r) => {
          if ((r as { kind?: unknown }).kind !== "resumed_turn") return r;
          const { resumed: _, ...rest } = r as Record<string, JsonValue>;
          return rest as JsonValue;
        }),
    });
    const w2 = world((n) => (n === 1 ? [...payIn("c-acme", 0, "acme", "from W2"), { t: "end" }] : text), false, { store: older, ledger, performed });
    readingInputs(w2.provider);
    const result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    const key = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.replayed])).toEqual([[key, true]]);
    expect(to(performed)).toEqual(["bob", "acme"]);
  });

  it("TURN-23 a read call of a turn after a resumed turn takes no slot (a slot is a write call's): it runs under its own turn's key, and a re-send reads the same keys back", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    const look = defineTool({ name: "look", effect: "read", input: z.object({ to: z.string() }), run: async ({ to }: { to: string }) => ({ balance: to.length }) });
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 2 ? [{ t: "call", index: 0, id: "c-look", name: "look" }, { t: "args", index: 0, json: `{"to":"acme"}` }, { t: "done", index: 0 }, ...payIn("c-acme", 1, "acme", "x"), { t: "end" }] : text;
    const tools = world(() => [], false, { store, ledger, performed }).dispatcher.registry.list();
    const dispatcher = new Dispatcher({ tools: new ToolRegistry([...tools, look]), ledger });
    const w0 = world(script, false, { store, ledger, performed, runner: { dispatcher } });
    readingInputs(w0.provider);
    const result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    const own = dispatcher.keyFor({ name: "look", input: { to: "acme" } }, { conversationId: CONV, turnIndex: 1, ordinal: 0 });
    const slot = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(result.turns[1]!.calls.map((c) => [c.name, c.key])).toEqual([
      ["look", own],
      ["pay", slot],
    ]);
    const again = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns[1]!.calls.map((c) => [c.name, c.key])).toEqual(result.turns[1]!.calls.map((c) => [c.name, c.key]));
    expect(to(performed)).toEqual(["bob", "acme"]);
  });

  it("TURN-23 two identical write calls of one attempt after a resumed turn take two slots (a slot answers at most one call of each attempt): both run, at turn 0's ordinals 0 and 1, and read back alike", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 2 ? [...payIn("c-a1", 0, "acme", "one"), ...payIn("c-a2", 1, "acme", "two"), { t: "end" }] : text;
    const w0 = world(script, false, { store, ledger, performed });
    readingInputs(w0.provider);
    const result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    const at = (ordinal: number) => w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal });
    expect(result.turns[1]!.calls.map((c) => [c.key, c.replayed])).toEqual([
      [at(0), false],
      [at(1), false],
    ]);
    expect(to(performed)).toEqual(["bob", "acme", "acme"]);
    const again = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns[1]!.calls.map((c) => c.key)).toEqual([at(0), at(1)]);
  });

  it("TURN-23 a call refused for a listed call whose stored request the new schema refuses takes no slot: after the listed call is answered in the same attempt, an identical call takes the slot's first free ordinal, and a re-send reads the same keys back", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    let begun = 0;
    const dying = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
    });
    // W0 takes turn 0 over (resumed): attempt 1 pays acme and is cut, the retry pays bob; the record lists acme. W0 dies before turn 1.
    const w0 = world((n) => (n === 1 ? [...payIn("c-a", 0, "acme", "first"), "cut"] : [...payIn("c-bob", 0, "bob", "rent-paid"), { t: "end" }]), true, { store: dying, ledger, performed });
    readingInputs(w0.provider);
    await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
    // The new release wants memos of 6 characters or more (the identity, `to`, keeps its keys): turn 0's stored
    // acme request (memo "first") is refused now, its bob request (memo "rent-paid") is not.
    const pay = { input: z.object({ to: z.string(), memo: z.string().min(6) }), identity: ["to"] };
    const w2 = world((n) => (n === 1 ? [...payIn("c1", 0, "bob", "again!"), ...payIn("c2", 1, "acme", "again!"), ...payIn("c3", 2, "bob", "again!"), { t: "end" }] : text), false, {
      store,
      ledger,
      performed,
      pay,
    });
    readingInputs(w2.provider);
    const result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    const at = (payee: string, ordinal: number) => w1.dispatcher.keyFor({ name: "pay", input: { to: payee, memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal });
    const turn1 = result.turns.find((t) => t.turnIndex === 1)!;
    // bob refused (acme still listed), acme answered from turn 0's listed row, then bob at the slot after turn 0's answered bob.
    expect(turn1.calls.map((c) => [c.error?.code, c.key === at("acme", 0), c.replayed])).toEqual([
      ["tool_definition_changed", false, undefined],
      [undefined, true, true],
      [undefined, false, false],
    ]);
    expect(turn1.calls[2]!.key).toBe(at("bob", 1));
    const again = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns.find((t) => t.turnIndex === 1)!.calls.map((c) => c.key)).toEqual(turn1.calls.map((c) => c.key));
    expect(to(performed)).toEqual(["acme", "bob", "bob"]);
  });

  it("TURN-23 a holder of a new release that takes the message up and whose schema refuses the stored request of a call turn 0 answered (its identity unchanged) never answers turn 1's same call, a second ask, from turn 0's row: it runs", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    let begun = 0;
    const dying = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
    });
    // W0 takes turn 0 over (resumed) and pays bob, memo "rent": turn 0 answers it. W0 dies before turn 1.
    const w0 = world(() => [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }], false, { store: dying, ledger, performed });
    readingInputs(w0.provider);
    await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
    // The new release wants memos of 6 characters or more; the identity (`to`) and so the keys are unchanged.
    const pay = { input: z.object({ to: z.string(), memo: z.string().min(6) }), identity: ["to"] };
    const w2 = world((n) => (n === 1 ? [...payIn("c-bob2", 0, "bob", "again!"), { t: "end" }] : text), false, { store, ledger, performed, pay });
    readingInputs(w2.provider);
    const result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    const answered = w1.dispatcher.keyFor({ name: "pay", input: { to: "bob", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    const turn1 = result.turns.find((t) => t.turnIndex === 1)!;
    expect(turn1.calls.map((c) => [c.key === answered, c.replayed])).toEqual([[false, false]]);
    expect(to(performed)).toEqual(["bob", "bob"]);
  });

  it("TURN-23 a listed call of the resumed turn and a slot in one attempt never share a key: turn 1's first acme is answered from turn 0's listed row, its second runs at the next ordinal", async () => {
    const { store, ledger, performed, wake, w1 } = await pausedHolder();
    // W0's attempt 1 of turn 0 pays acme and is cut; its retry pays bob: the record lists acme.
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...payIn("c-a", 0, "acme", "first"), "cut"] : n === 2 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 3 ? [...payIn("c3a", 0, "acme", "x"), ...payIn("c3b", 1, "acme", "y"), { t: "end" }] : text;
    const w0 = world(script, true, { store, ledger, performed });
    readingInputs(w0.provider);
    const result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    const at = (ordinal: number) => w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal });
    expect(to(performed)).toEqual(["acme", "bob", "acme"]);
    expect(result.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.replayed, c.carriedFromTurn])).toEqual([
      [at(0), 0, true, 0],
      [at(1), 1, false, undefined],
    ]);
    // W1 wakes: its acme meets W0's attempt-1 row.
    expect(await wake()).toEqual(expect.objectContaining({ key: at(0), replayed: true }));
    const again = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.turns[1]!.calls.map((c) => [c.key, c.ordinal])).toEqual([
      [at(0), 0],
      [at(1), 1],
    ]);
    expect(performed).toHaveLength(3);
  });

  it("TURN-23 a slot a later turn's attempt paid and its retry left unanswered stays the slot: turn 2's acme is answered from it (live and after a take-up)", async () => {
    for (const takeUp of [false, true]) {
      const { store, ledger, performed, w1 } = await pausedHolder();
      // Turn 0 (resumed): bob. Turn 1: attempt 1 pays acme (a slot of turn 0) and is cut; the retry pays carol. Turn 2: acme.
      const script = (n: number): (ToyEvent | "cut")[] =>
        n === 1 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 2 ? [...payIn("c-a", 0, "acme", "first"), "cut"] : n === 3 ? [...payIn("c-carol", 0, "carol", "x"), { t: "end" }] : n === 4 ? [...payIn("c-a2", 0, "acme", "again"), { t: "end" }] : text;
      let begun = 0;
      const dying = Object.assign(Object.create(store) as ConversationStore, {
        beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 3 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
      });
      const w0 = world(script, true, { store: takeUp ? dying : store, ledger, performed });
      readingInputs(w0.provider);
      let result;
      if (takeUp) {
        await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
        const w2 = world((n) => (n === 1 ? [...payIn("c-a2", 0, "acme", "again"), { t: "end" }] : text), false, { store, ledger, performed });
        readingInputs(w2.provider);
        result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
      } else {
        result = await w0.runner.send(CONV, { id: "m1", content: "pay acme" });
      }
      const key = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
      expect(to(performed), `takeUp: ${takeUp}`).toEqual(["bob", "acme", "carol"]);
      expect(result.turns.find((t) => t.turnIndex === 2)?.calls.map((c) => [c.key, c.ordinal, c.replayed, c.carriedFromTurn]), `takeUp: ${takeUp}`).toEqual([[key, 0, true, undefined]]);
    }
  });

  it("TURN-23 with TURN-24: the slot a later turn's attempt paid and its retry left unanswered stays the slot across a deploy: a holder of a new release (currency defaulted, in the identity) takes m1 up and turn 2's acme is answered from that slot's row, never run", async () => {
    const { store, ledger, performed, w1 } = await pausedHolder();
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 2 ? [...payIn("c-a", 0, "acme", "first"), "cut"] : n === 3 ? [...payIn("c-carol", 0, "carol", "x"), { t: "end" }] : text;
    let begun = 0;
    const dying = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 3 ? Promise.reject(new Error("W0's process died")) : store.beginTurn(...args)),
    });
    const w0 = world(script, true, { store: dying, ledger, performed });
    readingInputs(w0.provider);
    await expect(w0.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("W0's process died");
    expect(to(performed)).toEqual(["bob", "acme", "carol"]);
    const slotKey = w1.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect((await ledger.lookup(slotKey))?.state).toBe("completed");
    // The deploy: a defaulted currency joins the identity, so no key of the earlier release derives now.
    const pay = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
    const w2 = world((n) => (n === 1 ? [...payIn("c-a2", 0, "acme", "again"), { t: "end" }] : text), false, { store, ledger, performed, pay });
    readingInputs(w2.provider);
    const result = await w2.runner.send(CONV, { id: "m1", content: "pay acme" });
    // The effect log: acme paid once, for one ask (turn 1 never answered it).
    expect(to(performed)).toEqual(["bob", "acme", "carol"]);
    // What was reported and committed: turn 2's acme answered from the slot's row.
    const call = result.turns.find((t) => t.turnIndex === 2)!.calls[0]!;
    expect([call.key, call.replayed, call.carriedFromTurn]).toEqual([slotKey, true, undefined]);
    const stored = await store.turnsOf(CONV, "m1");
    expect(stored[2]!.callKeys?.map((k) => k.key)).toEqual([slotKey]);
  });
});
