import { ConversationBusyError, MemoryConversationStore, MemoryLedger, StoreUnavailableError, effectOf, type Ledger, type LedgerCapabilities, type ListRowsPage } from "@dispatch-once/core";
import { afterEach, describe, expect, it } from "vitest";
import { world, type ToyEvent } from "./toy.js";

const CONTENT = "pay bob 21.00 for rent, and carol 5.00 for lunch";

/** A pay call at `index` of a response. */
const pay = (index: number, id: string, to: string, memo: string): ToyEvent[] => [
  { t: "call", index, id, name: "pay" },
  { t: "args", index, json: `{"to":"${to}","memo":"${memo}"}` },
  { t: "done", index },
];

/** A promise with its resolver: lets a test hold a payment mid-run and let it go, without timing. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

async function until(condition: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((r) => setTimeout(r, 2));
}

/** m-acme's every attempt is cut after its payment (it fails, its record tells of it); m-bolt pays bolt and ends. */
const acmeThenBolt: Parameters<typeof world>[0] = (_n, input) => {
  const last = JSON.stringify(input.at(-1));
  if (last.includes("acme")) return [...pay(0, "toolu_a", "acme", "s8a"), "cut"];
  return last.includes("bolt") ? [...pay(0, "toolu_b", "bolt", "s8b"), { t: "end" }] : [{ t: "text", index: 0, text: "done" }, { t: "end" }];
};

const held: (() => void)[] = [];
afterEach(() => {
  for (const open of held.splice(0)) open();
});

/**
 * Worker A sends the message and holds the conversation's turn lease while its payment to carol is
 * held in the tool (in flight); worker B, re-sent the same message (a queue's redelivery, a client's
 * retry), waits `busyWaitMs` and meets conversation_busy. B shares A's store and ledger.
 */
function twoWorkers(script: Parameters<typeof world>[0], options: { ledger?: Ledger; ledgerOfB?: Ledger; holdTo?: string; store?: MemoryConversationStore } = {}) {
  const store = options.store ?? new MemoryConversationStore();
  const ledger = options.ledger ?? new MemoryLedger();
  const performed: { to: string; memo: string }[] = [];
  const hold = gate();
  held.push(hold.open);
  let reached = false;
  const a = world(script, false, {
    store,
    ledger,
    performed,
    beforePay: async (args) => {
      if ((args as { to: string }).to !== (options.holdTo ?? "carol")) return;
      reached = true;
      await hold.promise;
    },
  });
  const b = world(() => [{ t: "end" }], false, { store, ledger: options.ledgerOfB ?? ledger, runner: { busyWaitMs: 20 } });
  return { a, b, store, ledger, performed, hold, heldPaymentReached: () => reached };
}

async function busyOf(send: Promise<unknown>): Promise<ConversationBusyError> {
  const error = await send.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(ConversationBusyError.isInstance(error), String(error)).toBe(true);
  return error as ConversationBusyError;
}

describe("TURN-25 a busy answer for a message in progress says which of its calls may have had effects", () => {
  it("a payment the holder made is told as happened with its arguments and result, one it is still making as may_have_happened; the effect log agrees", async () => {
    const w = twoWorkers((n) => (n === 1 ? [...pay(0, "toolu_1", "bob", "rent"), ...pay(1, "toolu_2", "carol", "lunch"), { t: "end" }] : [{ t: "text", index: 0, text: "done" }, { t: "end" }]));
    const sent = w.a.runner.send("conv-busy-effects", { id: "m1", content: CONTENT });
    await until(w.heldPaymentReached);

    const busy = await busyOf(w.b.runner.send("conv-busy-effects", { id: "m1", content: CONTENT }));
    expect(busy.inProgress).toBe(true);
    expect(effectOf(busy)).toBe("possibly");
    const keyOf = (to: string, memo: string) => w.a.dispatcher.keyFor({ name: "pay", input: { to, memo } }, { conversationId: "conv-busy-effects", turnIndex: 0, ordinal: 0 });
    expect(busy.effectsUnknown).toBeUndefined();
    expect(busy.effects).toEqual([
      { key: keyOf("bob", "rent"), name: "pay", turnIndex: 0, ordinal: 0, state: "completed", effect: "happened", input: { to: "bob", memo: "rent" }, result: { n: 1 } },
      { key: keyOf("carol", "lunch"), name: "pay", turnIndex: 0, ordinal: 0, state: "in_flight", effect: "may_have_happened", input: { to: "carol", memo: "lunch" } },
    ]);
    expect(busy.message).toMatch(/the ledger lists pay happened, pay may have happened/);
    // The payments API's log: bob was paid, carol not yet; what the error calls happened is exactly what was paid.
    expect(w.performed).toEqual([{ to: "bob", memo: "rent" }]);
    expect(busy.effects!.filter((e) => e.effect === "happened").map((e) => e.input)).toEqual(w.performed);

    // The held payment goes through: the re-send after it is answered, and nothing was paid twice.
    w.hold.open();
    expect((await sent).status).toBe("answered");
    expect(w.performed).toEqual([
      { to: "bob", memo: "rent" },
      { to: "carol", memo: "lunch" },
    ]);
  });

  it("two identical payments of one turn, the first made and the second under way, are listed in the order they were claimed, with their ordinals", async () => {
    // The first payment is held until the second is under way, so the second row's last transition
    // (its claim) is older than the first's (its completion): the ledger lists them the other way round (LIST-2).
    const secondUnderWay = gate();
    held.push(secondUnderWay.open);
    const store = new MemoryConversationStore();
    // A clock that never gives two transitions the same millisecond: with Date.now the second's claim
    // and the first's completion often share one, and LIST-2 then lists the tie by key, not by order.
    let last = 0;
    const ledger = new MemoryLedger({ now: () => (last = Math.max(Date.now(), last + 1)) });
    const hold = gate();
    held.push(hold.open);
    const performed: unknown[] = [];
    const a = world((n) => (n === 1 ? [...pay(0, "toolu_1", "bob", "first"), ...pay(1, "toolu_2", "bob", "second"), { t: "end" }] : [{ t: "end" }]), false, {
      store,
      ledger,
      performed,
      beforePay: async (args) => {
        if ((args as { memo: string }).memo === "first") return secondUnderWay.promise;
        secondUnderWay.open();
        return hold.promise;
      },
    });
    const b = world(() => [{ t: "end" }], false, { store, ledger, runner: { busyWaitMs: 20 } });
    const sent = a.runner.send("conv-busy-ordinals", { id: "m1", content: CONTENT });
    const first = a.dispatcher.keyFor({ name: "pay", input: { to: "bob", memo: "first" } }, { conversationId: "conv-busy-ordinals", turnIndex: 0, ordinal: 0 });
    const second = a.dispatcher.keyFor({ name: "pay", input: { to: "bob", memo: "second" } }, { conversationId: "conv-busy-ordinals", turnIndex: 0, ordinal: 1 });
    await until(async () => (await ledger.lookup(first))?.state === "completed" && (await ledger.lookup(second))?.state === "in_flight");
    expect((await ledger.listRows({ conversationId: "conv-busy-ordinals" })).rows.map((r) => r.key)).toEqual([second, first]);

    const busy = await busyOf(b.runner.send("conv-busy-ordinals", { id: "m1", content: CONTENT }));
    expect(busy.effects?.map(({ key, ordinal, state, effect }) => ({ key, ordinal, state, effect }))).toEqual([
      { key: first, ordinal: 0, state: "completed", effect: "happened" },
      { key: second, ordinal: 1, state: "in_flight", effect: "may_have_happened" },
    ]);
    expect(performed).toEqual([{ to: "bob", memo: "first" }]);
    hold.open();
    expect((await sent).status).toBe("answered");
  });

  it("two identical payments of one turn claimed in one millisecond of the ledger's clock are listed by ordinal, not by key", async () => {
    // A clock that never moves: both claims share one millisecond, and only the ordinal says which
    // call of the message came first (blind round R, R27: the ordinals compared the other way round).
    const ledger = new MemoryLedger({ now: () => 1_700_000_000_000 });
    // Whether the key alone would have listed the second call first, per memo pair: at least one must.
    const keyOrderDisagrees: boolean[] = [];
    for (const [memo1, memo2] of [
      ["first", "second"],
      ["rent", "tea"],
      ["fee", "lunch"],
    ] as const) {
      const conv = `conv-busy-ordinal-tie-${memo1}`;
      const store = new MemoryConversationStore();
      const hold = gate();
      held.push(hold.open);
      const performed: unknown[] = [];
      let reached = false;
      const a = world((n) => (n === 1 ? [...pay(0, "toolu_1", "bob", memo1), ...pay(1, "toolu_2", "bob", memo2), { t: "end" }] : [{ t: "end" }]), false, {
        store,
        ledger,
        performed,
        beforePay: async (args) => {
          if ((args as { memo: string }).memo !== memo2) return;
          reached = true;
          await hold.promise;
        },
      });
      const b = world(() => [{ t: "end" }], false, { store, ledger, runner: { busyWaitMs: 20 } });
      const sent = a.runner.send(conv, { id: "m1", content: CONTENT });
      await until(() => reached);
      const busy = await busyOf(b.runner.send(conv, { id: "m1", content: CONTENT }));
      expect(busy.effects?.map(({ ordinal, state, input }) => ({ ordinal, state, input }))).toEqual([
        { ordinal: 0, state: "completed", input: { to: "bob", memo: memo1 } },
        { ordinal: 1, state: "in_flight", input: { to: "bob", memo: memo2 } },
      ]);
      expect(performed).toEqual([{ to: "bob", memo: memo1 }]);
      const [earlier, later] = busy.effects!.map((e) => e.key);
      keyOrderDisagrees.push(earlier! > later!);
      hold.open();
      expect((await sent).status).toBe("answered");
      expect(performed).toEqual([{ to: "bob", memo: memo1 }, { to: "bob", memo: memo2 }]);
    }
    expect(keyOrderDisagrees).toContain(true);
  });

  it("a message in its second turn: the payment its committed first turn made is listed with the one its second turn is making", async () => {
    const w = twoWorkers((n) => (n === 1 ? [...pay(0, "toolu_1", "bob", "rent"), { t: "end" }] : n === 2 ? [...pay(0, "toolu_2", "carol", "lunch"), { t: "end" }] : [{ t: "end" }]));
    const sent = w.a.runner.send("conv-busy-turns", { id: "m1", content: CONTENT });
    await until(w.heldPaymentReached);
    const busy = await busyOf(w.b.runner.send("conv-busy-turns", { id: "m1", content: CONTENT }));
    expect(busy.effects?.map(({ turnIndex, state, effect, input }) => ({ turnIndex, state, effect, input }))).toEqual([
      { turnIndex: 0, state: "completed", effect: "happened", input: { to: "bob", memo: "rent" } },
      { turnIndex: 1, state: "in_flight", effect: "may_have_happened", input: { to: "carol", memo: "lunch" } },
    ]);
    expect(w.performed).toEqual([{ to: "bob", memo: "rent" }]);
    w.hold.open();
    await sent;
  });

  it("rows of two turns claimed in one millisecond of the ledger's clock are listed in the order of their turns, not by key", async () => {
    // A ledger whose clock never moves: every claim shares one millisecond, as a fast turn's and the
    // next turn's claims may. The turn index, not the key, says which was claimed first.
    const ledger = new MemoryLedger({ now: () => 1_700_000_000_000 });
    const memos = ["rent", "lunch", "tea", "fee"];
    // Whether the key alone would have listed the later turn first, per payee order: at least one
    // must, or the test would not tell a turn tiebreak from a key tiebreak.
    const keyOrderDisagrees: boolean[] = [];
    for (const [first, second] of [
      ["bob", "carol"],
      ["carol", "bob"],
    ] as const) {
      const conv = `conv-busy-tie-${first}`;
      const w = twoWorkers((n) => (n === 1 ? [...pay(0, `toolu_${first}`, first, memos[0]!), { t: "end" }] : n === 2 ? [...pay(0, `toolu_${second}`, second, memos[1]!), { t: "end" }] : [{ t: "end" }]), { ledger, holdTo: second });
      const sent = w.a.runner.send(conv, { id: "m1", content: CONTENT });
      await until(w.heldPaymentReached);
      const busy = await busyOf(w.b.runner.send(conv, { id: "m1", content: CONTENT }));
      expect(busy.effects?.map(({ turnIndex, state, input }) => ({ turnIndex, state, input }))).toEqual([
        { turnIndex: 0, state: "completed", input: { to: first, memo: memos[0] } },
        { turnIndex: 1, state: "in_flight", input: { to: second, memo: memos[1] } },
      ]);
      // The payments API's log says the same: the first turn's payment made, the second's held in the tool.
      expect(w.performed).toEqual([{ to: first, memo: memos[0] }]);
      const [earlier, later] = busy.effects!.map((e) => e.key);
      keyOrderDisagrees.push(earlier! > later!);
      w.hold.open();
      expect((await sent).status).toBe("answered");
      expect(w.performed).toEqual([{ to: first, memo: memos[0] }, { to: second, memo: memos[1] }]);
    }
    expect(keyOrderDisagrees).toContain(true);
  });

  it("a queued message (another message holds the lease) carries neither effects nor effectsUnknown: it ran nothing", async () => {
    const w = twoWorkers((n) => (n === 1 ? [...pay(0, "toolu_1", "carol", "lunch"), { t: "end" }] : [{ t: "end" }]));
    const sent = w.a.runner.send("conv-busy-queued", { id: "m1", content: CONTENT });
    await until(w.heldPaymentReached);
    const queued = await busyOf(w.b.runner.send("conv-busy-queued", { id: "m2", content: "and pay dan" }));
    expect(queued.inProgress).toBe(false);
    expect("effects" in queued).toBe(false);
    expect("effectsUnknown" in queued).toBe(false);
    expect(queued.message).not.toMatch(/ledger/);
    w.hold.open();
    await sent;
  });

  it("a ledger that does not list rows: the reason is given, never an empty list that reads as nothing happened", async () => {
    class UnlistingLedger extends MemoryLedger {
      override readonly capabilities: LedgerCapabilities = { ...new MemoryLedger().capabilities, supports: { ...new MemoryLedger().capabilities.supports, listRows: false } };
    }
    const w = twoWorkers((n) => (n === 1 ? [...pay(0, "toolu_1", "bob", "rent"), ...pay(1, "toolu_2", "carol", "lunch"), { t: "end" }] : [{ t: "end" }]), { ledger: new UnlistingLedger() });
    const sent = w.a.runner.send("conv-busy-unlisted", { id: "m1", content: CONTENT });
    await until(w.heldPaymentReached);
    const busy = await busyOf(w.b.runner.send("conv-busy-unlisted", { id: "m1", content: CONTENT }));
    expect(busy.inProgress).toBe(true);
    expect(busy.effects).toBeUndefined();
    expect(busy.effectsUnknown).toMatch(/does not list rows/);
    expect(busy.message).toMatch(/which calls it made is unknown: .*does not list rows/);
    expect(w.performed).toEqual([{ to: "bob", memo: "rent" }]);
    w.hold.open();
    await sent;
  });

  it("a listing that fails, or does not answer within its bound, leaves the busy error a busy error that says so", async () => {
    const shared = new MemoryLedger();
    const failing = Object.assign(Object.create(shared) as MemoryLedger, {
      listRows: async (): Promise<ListRowsPage> => {
        throw new Error("connection reset");
      },
    });
    const w = twoWorkers((n) => (n === 1 ? [...pay(0, "toolu_1", "carol", "lunch"), { t: "end" }] : [{ t: "end" }]), { ledger: shared, ledgerOfB: failing });
    const sent = w.a.runner.send("conv-busy-failing", { id: "m1", content: CONTENT });
    await until(w.heldPaymentReached);
    const busy = await busyOf(w.b.runner.send("conv-busy-failing", { id: "m1", content: CONTENT }));
    expect(busy.effects).toBeUndefined();
    expect(busy.effectsUnknown).toMatch(/listing the message's ledger rows failed: .*connection reset/);

    const silent = Object.assign(Object.create(shared) as MemoryLedger, { listRows: () => new Promise<ListRowsPage>(() => {}) });
    const c = world(() => [{ t: "end" }], false, { store: w.store, ledger: silent, runner: { busyWaitMs: 20 } });
    const unanswered = await busyOf(c.runner.send("conv-busy-failing", { id: "m1", content: CONTENT }));
    expect(unanswered.effects).toBeUndefined();
    expect(unanswered.effectsUnknown).toMatch(/did not answer within 1000 ms/);
    w.hold.open();
    await sent;
  });
  it("a new message bound where a failed one stopped (TURN-12): the failed message's payment is listed under that message's id, the new message's own without one; the effect log agrees", async () => {
    const CONV = "conv-busy-inherited";
    // m-acme's every attempt is cut after its payment: it fails, its record tells of the payment.
    const w = twoWorkers(
      acmeThenBolt,
      { holdTo: "bolt" },
    );
    const failed = await w.a.runner.send(CONV, { id: "m-acme", content: "pay acme" }).catch((e: unknown) => e);
    expect(failed).toMatchObject({ code: "turn_failed" });
    // m-bolt takes m-acme's turn index, pays bolt and is held there; a re-send of m-bolt is busy.
    const sent = w.a.runner.send(CONV, { id: "m-bolt", content: "pay bolt" });
    await until(w.heldPaymentReached);
    const busy = await busyOf(w.b.runner.send(CONV, { id: "m-bolt", content: "pay bolt" }));
    expect(w.performed).toEqual([{ to: "acme", memo: "s8a" }]);
    expect(busy.effects?.map(({ name, input, effect, messageId }) => ({ name, input, effect, ...(messageId !== undefined ? { messageId } : {}) }))).toEqual([
      { name: "pay", input: { to: "acme", memo: "s8a" }, effect: "happened", messageId: "m-acme" },
      { name: "pay", input: { to: "bolt", memo: "s8b" }, effect: "may_have_happened" },
    ]);
    w.hold.open();
    const answered = await sent;
    expect(w.performed).toEqual([{ to: "acme", memo: "s8a" }, { to: "bolt", memo: "s8b" }]);
    // The committed turn's record (RECORD-8) lists m-acme's payment, unanswered by m-bolt's turn, under m-acme's id too.
    const resumedCalls = (answered.records ?? []).flatMap((r) => ((r as { kind?: string }).kind === "resumed_turn" ? (r as { calls: { input?: unknown; messageId?: string }[] }).calls : []));
    expect(resumedCalls.map(({ input, messageId }) => ({ input, messageId }))).toEqual([{ input: { to: "acme", memo: "s8a" }, messageId: "m-acme" }]);
  });

  it("a failed message's payment and the new message's own claimed in one millisecond of the ledger's clock are listed failed message first, not by key", async () => {
    // A ledger whose clock never moves: m-acme's claim and m-bolt's share one millisecond, as they may
    // when m-acme fails at once. m-acme failed before m-bolt was bound (TURN-12): its rows were claimed first.
    const CONV = "conv-busy-inherited";
    const w = twoWorkers(
      acmeThenBolt,
      { holdTo: "bolt", ledger: new MemoryLedger({ now: () => 1_700_000_000_000 }) },
    );
    await expect(w.a.runner.send(CONV, { id: "m-acme", content: "pay acme" })).rejects.toMatchObject({ code: "turn_failed" });
    const sent = w.a.runner.send(CONV, { id: "m-bolt", content: "pay bolt" });
    await until(w.heldPaymentReached);
    const busy = await busyOf(w.b.runner.send(CONV, { id: "m-bolt", content: "pay bolt" }));
    // In this conversation bolt's key sorts before acme's: a tie broken by key lists bolt first.
    const keyOf = (to: string, memo: string) => w.a.dispatcher.keyFor({ name: "pay", input: { to, memo } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(keyOf("bolt", "s8b") < keyOf("acme", "s8a")).toBe(true);
    expect(busy.effects?.map(({ input, effect, messageId }) => ({ input, effect, ...(messageId !== undefined ? { messageId } : {}) }))).toEqual([
      { input: { to: "acme", memo: "s8a" }, effect: "happened", messageId: "m-acme" },
      { input: { to: "bolt", memo: "s8b" }, effect: "may_have_happened" },
    ]);
    expect(w.performed).toEqual([{ to: "acme", memo: "s8a" }]);
    w.hold.open();
    expect((await sent).status).toBe("answered");
    expect(w.performed).toEqual([{ to: "acme", memo: "s8a" }, { to: "bolt", memo: "s8b" }]);
  });
});

/** A store whose reads of the conversation's records fail while `failing` is set (its writes work), as an adapter says it. */
class RecordsReadFailing extends MemoryConversationStore {
  failing = false;
  override async records(conversationId: string) {
    if (this.failing) throw new StoreUnavailableError("records read timed out");
    return super.records(conversationId);
  }
}

describe("RECORD-8 the message a listed row was made for is told when it can be read, and its read never fails the commit", () => {
  it("a resumed turn whose store cannot read the failed message's record at commit still commits once, listing the row without a messageId; the effect log agrees", async () => {
    const CONV = "conv-records-read-fails";
    const store = new RecordsReadFailing();
    const w = twoWorkers(
      acmeThenBolt,
      { holdTo: "bolt", store },
    );
    await expect(w.a.runner.send(CONV, { id: "m-acme", content: "pay acme" })).rejects.toMatchObject({ code: "turn_failed" });
    const sent = w.a.runner.send(CONV, { id: "m-bolt", content: "pay bolt" });
    await until(w.heldPaymentReached);
    // From here until the commit, the records cannot be read: only the record's messageId (a SHOULD) depends on them.
    store.failing = true;
    w.hold.open();
    const answered = await sent.finally(() => (store.failing = false));
    expect(w.performed).toEqual([{ to: "acme", memo: "s8a" }, { to: "bolt", memo: "s8b" }]);
    const resumedCalls = (answered.records ?? []).flatMap((r) => ((r as { kind?: string }).kind === "resumed_turn" ? (r as { calls: { input?: unknown; messageId?: string; effect: string }[] }).calls : []));
    expect(resumedCalls).toEqual([expect.objectContaining({ input: { to: "acme", memo: "s8a" }, effect: "happened" })]);
    expect(resumedCalls[0]).not.toHaveProperty("messageId");
    // Committed, once: a re-send is answered from the conversation and pays nothing more.
    await w.a.runner.send(CONV, { id: "m-bolt", content: "pay bolt" });
    expect(w.performed).toHaveLength(2);
  });
});
