import { MemoryConversationStore, MemoryLedger, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { readingInputs } from "./reading-inputs.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * TURN-23 across a deploy the earlier attacks do not reach: the new definition refuses the listed
 * call's stored request (a new required field in the identity), or renames the tool (IDENT-11).
 * Turn 0 of m1 paid acme in attempt 1 and was cut; the retry paid bob and committed, its record
 * listing acme's payment as happened. Worker A dies as it begins turn 1; a holder of the new release
 * takes the message up and its model makes acme's payment again.
 */
const CONV = "conv-carry-deploy";

const payIn = (id: string, index: number, name: string, args: Record<string, string>): ToyEvent[] => [
  { t: "call", index, id, name },
  { t: "args", index, json: JSON.stringify(args) },
  { t: "done", index },
];
const text: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];

/** The deploy: a currency field, required and in the identity: turn 0's stored request {to, memo} is refused now. */
const currencyRequired = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string() }), identity: ["to", "currency"] };

function shared() {
  const ledger = new MemoryLedger();
  const base = new MemoryConversationStore();
  const performed: unknown[] = [];
  /** The store as seen by a worker whose process dies as it begins its n-th turn. */
  const dyingAt = (n: number): ConversationStore => {
    let begun = 0;
    return Object.assign(Object.create(base) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === n ? Promise.reject(new Error("the process died")) : base.beginTurn(...args)),
    });
  };
  return { ledger, base, performed, dyingAt };
}

/** Worker A (the definition before the deploy): turn 0 pays acme (attempt 1, cut), then bob; dies as it begins turn 1. Returns acme's key. */
async function turnZeroThenDie(s: ReturnType<typeof shared>): Promise<string> {
  const a = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [...payIn("c-bob", 0, "pay", { to: "bob", memo: "rent" }), { t: "end" }]), true, {
    store: s.dyingAt(2),
    ledger: s.ledger,
    performed: s.performed,
  });
  await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("the process died");
  expect(s.performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
  return a.events.flatMap((e) => (e.type === "call_resolved" && e.attempt === 1 && e.ok ? [e.key] : []))[0]!;
}

const to = (performed: unknown[]) => performed.map((p) => (p as { to: string }).to);

describe("TURN-23 across a deploy", () => {
  it("TURN-23 with IDENT-10: the new schema refuses turn 0's listed acme request; turn 1's acme (and bob) are refused with tool_definition_changed (request_refused) and the model is told the payment happened; turn 2's acme is refused again, by the holder that goes on and by one that takes the message up; the next message pays", async () => {
    for (const takeUp of [false, true]) {
      const s = shared();
      const acmeKey = await turnZeroThenDie(s);
      const eur = (id: string, payee = "acme") => payIn(id, 0, "pay", { to: payee, memo: "as asked", currency: "EUR" });
      const turns = (n: number): (ToyEvent | "cut")[] =>
        n === 1 ? [...eur("c3"), ...payIn("c3-bob", 1, "pay", { to: "bob", memo: "tip", currency: "EUR" }), { t: "end" }] : n === 2 ? [...eur("c4"), { t: "end" }] : text;
      const b = world(turns, false, { store: takeUp ? s.dyingAt(2) : s.base, ledger: s.ledger, performed: s.performed, pay: currencyRequired });
      readingInputs(b.provider);
      let result;
      if (takeUp) {
        await expect(b.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("the process died");
        const c = world((n) => (n === 1 ? [...eur("c4c"), { t: "end" }] : text), false, { store: s.base, ledger: s.ledger, performed: s.performed, pay: currencyRequired });
        readingInputs(c.provider);
        result = await c.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      } else {
        result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      }
      // The effect log: acme paid once for one ask.
      expect(to(s.performed), `takeUp: ${takeUp}`).toEqual(["acme", "bob"]);
      const turn1 = result.turns.find((t) => t.turnIndex === 1)!;
      expect(turn1.calls.map((c) => [c.name, c.error?.code]), `takeUp: ${takeUp}`).toEqual([
        ["pay", "tool_definition_changed"],
        ["pay", "tool_definition_changed"],
      ]);
      expect(result.turns.find((t) => t.turnIndex === 2)?.calls.map((c) => c.error?.code), `takeUp: ${takeUp}`).toEqual(["tool_definition_changed"]);
      // What was committed: the refusal names turn 0's row and says its payment happened, never that nothing was paid.
      const stored = await s.base.turnsOf(CONV, "m1");
      const told = (stored.find((t) => t.turnIndex === 1)!.toolResults as { error?: string }[])[0]!.error!;
      const error = (JSON.parse(told) as { error: { code: string; message: string } }).error;
      expect(error.code).toBe("tool_definition_changed");
      expect(error.message).toContain(`turn 0 of this message made a call to pay under another definition whose effect happened`);
      expect(error.message).toContain(`row ${acmeKey}, completed`);
      // The refusal's key is turn 1's own (nothing claimed under it); turn 0's record still lists acme as happened.
      expect(turn1.calls[0]!.key).toBe(b.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x", currency: "EUR" } }, { conversationId: CONV, turnIndex: 1, ordinal: 0 }));
      expect(result.records?.filter((r) => r.turnIndex === 0).map((r) => r.calls.map((c) => [c.key, c.effect]))).toEqual([[[acmeKey, "happened"]]]);
      // Read back by the release that refused: the same calls, keys and codes as sent.
      const reader = takeUp ? world(() => text, false, { store: s.base, ledger: s.ledger, performed: s.performed, pay: currencyRequired }) : b;
      if (takeUp) readingInputs(reader.provider);
      const readBack = await reader.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      expect(readBack.fromStore).toBe(true);
      const view = (r: typeof result) => r.turns.filter((t) => t.turnIndex > 0).map((t) => t.calls.map((c) => [c.key, c.error?.code, c.carriedFromTurn]));
      expect(view(readBack), `takeUp: ${takeUp}`).toEqual(view(result));
      // The next message is a new ask: it runs.
      const d = world((n) => (n === 1 ? [...eur("c5"), { t: "end" }] : text), false, { store: s.base, ledger: s.ledger, performed: s.performed, pay: currencyRequired });
      readingInputs(d.provider);
      const next = await d.runner.send(CONV, { id: "m2", content: "pay acme once more" });
      expect(to(s.performed), `takeUp: ${takeUp}`).toEqual(["acme", "bob", "acme"]);
      expect(next.turns[0]!.calls.map((c) => [c.error?.code, c.carriedFromTurn])).toEqual([[undefined, undefined]]);
    }
  });

  it("TURN-23 with IDENT-11: a deploy renames pay to send_payment (formerNames: ['pay']); turn 1's send_payment to acme is answered from turn 0's row", async () => {
    for (const pay of [{ name: "send_payment", formerNames: ["pay"] }, { name: "send_payment", formerNames: ["pay"], input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] }]) {
      const s = shared();
      const acmeKey = await turnZeroThenDie(s);
      const b = world((n) => (n === 1 ? [...payIn("c3", 0, "send_payment", { to: "acme", memo: "as asked" }), { t: "end" }] : text), false, { store: s.base, ledger: s.ledger, performed: s.performed, pay });
      readingInputs(b.provider);
      const result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      expect(to(s.performed), JSON.stringify(pay.identity)).toEqual(["acme", "bob"]);
      expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.replayed, c.carriedFromTurn])).toEqual([[acmeKey, true, 0]]);
      // Read back by the same release: as it was sent.
      const again = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      expect(again.fromStore).toBe(true);
      expect(again.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.carriedFromTurn])).toEqual([[acmeKey, 0]]);
    }
  });
});

describe("an IDENT-10 refusal in a resumed turn, then the same call in the message's next turn (TURN-23)", () => {
  /** Worker A (the definition before the deploy) begins m1's turn 0, pays acme (once per memo), and dies before any commit. */
  async function workerAPaysAndDies(store: MemoryConversationStore, ledger: MemoryLedger, performed: unknown[], memos: string[]): Promise<string[]> {
    const a = world(() => [], false, { store, ledger, performed });
    await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
    const lease = await store.acquireLease(CONV, "worker-a", 1_000);
    if (!lease.acquired) throw new Error("worker A could not take the conversation");
    const snapshot = await store.beginTurn(CONV, lease.fence);
    if (snapshot === undefined) throw new Error("no turn to begin");
    const turn = a.dispatcher.turn({ conversationId: CONV, turnIndex: snapshot.turnIndex, resumed: snapshot.resumed });
    const keys: string[] = [];
    for (const memo of memos) keys.push((await turn.dispatch({ name: "pay", input: { to: "acme", memo } })).key);
    return keys;
  }

  const cases: { what: string; memos: string[]; pay: { input: z.ZodObject; identity: string[]; name?: string; formerNames?: string[] }; name: string; args: Record<string, string> }[] = [
    { what: "request_refused (a required currency now)", memos: ["from A"], pay: currencyRequired, name: "pay", args: { to: "acme", memo: "from B", currency: "EUR" } },
    { what: "ambiguous (two acme rows, currency defaulted, re-worded)", memos: ["one", "two"], pay: { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] }, name: "pay", args: { to: "acme", memo: "from B" } },
    { what: "request_refused of a former name (renamed to send_payment, formerNames)", memos: ["from A"], pay: { ...currencyRequired, name: "send_payment", formerNames: ["pay"] }, name: "send_payment", args: { to: "acme", memo: "from B", currency: "EUR" } },
  ];

  it.each(cases)("TURN-23 with IDENT-10, $what: turn 0's call is refused; turn 1's same call is refused again, by the holder that goes on and by one that takes the message up after turn 0", async ({ memos, pay, name, args }) => {
    for (const takeUp of [false, true]) {
      let now = 1_700_000_000_000;
      const base = new MemoryConversationStore({ now: () => now });
      const ledger = new MemoryLedger();
      const performed: unknown[] = [];
      await workerAPaysAndDies(base, ledger, performed, memos);
      expect(performed).toHaveLength(memos.length);
      now += 60_000; // A's lease lapses
      const again = (id: string, memo: string) => [...payIn(id, 0, name, { ...args, memo }), { t: "end" } as ToyEvent];
      let begun = 0;
      const store = takeUp
        ? Object.assign(Object.create(base) as ConversationStore, {
            beginTurn: (...a: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("the process died")) : base.beginTurn(...a)),
          })
        : base;
      const b = world((n) => (n === 1 ? again("b0", "from B") : n === 2 ? again("b1", "as asked, again") : text), false, { store, ledger, performed, pay });
      readingInputs(b.provider);
      let result;
      if (takeUp) {
        await expect(b.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("the process died");
        const c = world((n) => (n === 1 ? again("c1", "as asked, again") : text), false, { store: base, ledger, performed, pay });
        readingInputs(c.provider);
        result = await c.runner.send(CONV, { id: "m1", content: "pay acme" });
      } else {
        result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
      }
      expect(performed, `takeUp: ${takeUp}`).toHaveLength(memos.length);
      expect(result.turns.slice(0, 2).map((t) => t.calls.map((c) => c.error?.code)), `takeUp: ${takeUp}`).toEqual([["tool_definition_changed"], ["tool_definition_changed"]]);
    }
  });
});

describe("TURN-23 across a deploy: two listed calls of one identity", () => {
  it("TURN-23 with IDENT-10: acme 'one' and acme 'two' listed, a deploy (currency defaulted, in the identity); turn 1 pays acme 'one' twice: each listed row answers one call (A then B), as without the deploy, never A twice", async () => {
    const s = shared();
    const warnings: string[] = [];
    const a = world((n) => (n === 1 ? [...payCall("c1a", "one"), ...payIn("c1b", 1, "pay", { to: "acme", memo: "two" }), "cut"] : [...payIn("c-bob", 0, "pay", { to: "bob", memo: "rent" }), { t: "end" }]), true, {
      store: s.dyingAt(2),
      ledger: s.ledger,
      performed: s.performed,
    });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme twice and bob" })).rejects.toThrow("the process died");
    expect(to(s.performed)).toEqual(["acme", "acme", "bob"]);
    const [keyA, keyB] = [0, 1].map((ordinal) => a.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal }));
    const pay = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
    const b = world((n) => (n === 1 ? [...payIn("c3a", 0, "pay", { to: "acme", memo: "one" }), ...payIn("c3b", 1, "pay", { to: "acme", memo: "one" }), { t: "end" }] : text), false, {
      store: s.base,
      ledger: s.ledger,
      performed: s.performed,
      pay,
      runner: { logger: { warn: (message: string) => void warnings.push(message), info: () => {}, error: () => {}, debug: () => {} } as never },
      dispatcher: { logger: { warn: () => {} } },
    });
    readingInputs(b.provider);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme twice and bob" });
    expect(to(s.performed)).toEqual(["acme", "acme", "bob"]);
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.replayed, c.carriedFromTurn])).toEqual([
      [keyA, true, 0],
      [keyB, true, 0],
    ]);
    expect(warnings.filter((w) => w.includes("TURN-23"))).toEqual([]);
  });
});

describe("TURN-23 after a resumed turn across a deploy: a slot never takes a row a committed turn answered", () => {
  it("TURN-23 with IDENT-10: m1 fails at turn 0 after paying acme; a deploy (currency defaulted, in the identity); the re-send answers turn 0's acme from the old row; turn 1's acme, a second ask after turn 0 answered the first, runs", async () => {
    // Found by the end-to-end kit (seed 20261129): the slot of the resumed turn 0 (finding 29) was
    // dispatched through IDENT-10's guard at turn 0's index, which matched the old row turn 0's own
    // call had answered (its key is not the current definition's at any ordinal), so turn 1's second
    // ask was told the first payment and never made.
    const ledger = new MemoryLedger();
    const store = new MemoryConversationStore();
    const performed: unknown[] = [];
    const a = world(() => [...payCall("c-a", "first"), "cut"], true, { store, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow();
    expect(to(performed)).toEqual(["acme"]);
    const b = world(
      (n) => (n === 1 ? [...payIn("c-b1", 0, "pay", { to: "acme", memo: "first" }), { t: "end" }] : n === 2 ? [...payIn("c-b2", 0, "pay", { to: "acme", memo: "again" }), { t: "end" }] : text),
      false,
      { store, ledger, performed, pay: { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] } },
    );
    readingInputs(b.provider);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(to(performed)).toEqual(["acme", "acme"]);
    const [first, second] = [result.turns[0]!.calls[0]!, result.turns[1]!.calls[0]!];
    expect([first.replayed, second.replayed]).toEqual([true, false]);
    expect(second.key).not.toBe(first.key);
  });
});

describe("TURN-23 a slot after a resumed turn, with a deploy inside the later turn", () => {
  it("TURN-23 with IDENT-10: A's turn 1 pays acme at the slot of the resumed turn 0 and dies before the commit; B, of a release whose identity adds a defaulted currency, takes turn 1 over: its acme is answered from A's row through the guard at the slot (not run under the new key), reported under that row's key and read back alike, and bob's row, which turn 0 answered, is never its answer; no warning that the dispatcher dropped { at }", async () => {
    // Found by the end-to-end kit with deploys on deferral messages (OpenAI side, seed 20261201):
    // with the slot dispatched without the guard, the take-over derived the new key at the slot and
    // paid again; the guard excluding only the rows a committed turn answered matches A's row.
    let now = 1_700_000_000_000;
    const base = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    let commits = 0;
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      commitTurn: (...args: Parameters<ConversationStore["commitTurn"]>) => (++commits === 2 ? Promise.reject(new Error("the process died")) : base.commitTurn(...args)),
    });
    const a = world(
      (n) => (n <= 3 ? [{ t: "text", index: 0, text: "Let me" }, "cut"] : n === 4 ? [...payIn("c-bob", 0, "pay", { to: "bob", memo: "rent" }), { t: "end" }] : [...payIn("c-acme", 0, "pay", { to: "acme", memo: "first" }), { t: "end" }]),
      false,
      { store: dying, ledger, performed },
    );
    readingInputs(a.provider);
    await expect(a.runner.send(CONV, { id: "m1", content: "pay bob, then acme" })).rejects.toThrow();
    await expect(a.runner.send(CONV, { id: "m1", content: "pay bob, then acme" })).rejects.toThrow("the process died");
    expect(to(performed)).toEqual(["bob", "acme"]);
    // The key A's acme ran under: what the payments API saw as its Idempotency-Key.
    const rowKey = a.events.flatMap((e) => (e.type === "call_resolved" && e.turnIndex === 1 && e.ok ? [e.key] : []))[0]!;
    expect(rowKey).toBeDefined();
    now += 600_000; // A's turn lease lapses
    const warnings: string[] = [];
    const b = world((n) => (n === 1 ? [...payIn("c-b", 0, "pay", { to: "acme", memo: "again" }), { t: "end" }] : text), false, {
      store: base,
      ledger,
      performed,
      pay: { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] },
      runner: { logger: { warn: (message: string) => void warnings.push(message) } },
    });
    readingInputs(b.provider);
    const slotKey = b.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "again" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(slotKey).not.toBe(rowKey); // the deploy changed the derivation: the guard, not the derivation, found A's row
    const result = await b.runner.send(CONV, { id: "m1", content: "pay bob, then acme" });
    expect(to(performed)).toEqual(["bob", "acme"]);
    const acme = result.turns.find((t) => t.turnIndex === 1)!.calls[0]!;
    // Answered from A's row, under its key; a slot, so no carriedFromTurn (a read-back cannot tell a slot's row was there before).
    expect([acme.key, acme.replayed, acme.carriedFromTurn]).toEqual([rowKey, true, undefined]);
    // The dispatcher honoured { at } (the outcome's dispatchedAt): no false alarm blaming a wrapper
    // for dropping it (the kit's OpenAI side, seed 20261201, logged one: carriedKey 6a56ce4c..., key 3c9175ac...).
    const dropped = () => warnings.filter((m) => m.includes("does not pass TurnDispatch.dispatch's options"));
    expect(dropped()).toEqual([]);
    // A re-send reads the same report back (TURN-24), and pays nothing.
    const again = await b.runner.send(CONV, { id: "m1", content: "pay bob, then acme" });
    const back = again.turns.find((t) => t.turnIndex === 1)!.calls[0]!;
    expect([back.key, back.carriedFromTurn]).toEqual([rowKey, undefined]);
    expect(to(performed)).toEqual(["bob", "acme"]);
    expect(dropped()).toEqual([]);
  });
});
