import { MemoryConversationStore, MemoryLedger, type CallDispatcher, type JsonValue, type Ledger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
// Imported from source, as resumed-commit.test.ts does (a devDependency would close a package cycle).
import { SqliteLedger } from "../../ledger-sqlite/src/index.js";
import type { ResumedTurnRecord } from "../src/index.js";
import { world, type ToyEvent } from "./toy.js";

/**
 * IDENT-10, the operator's game day: a deploy changes the pay tool's identity (IDENT-4) while a
 * message that already paid is stalled (its holder died before the commit: a take-over, TURN-15)
 * or failed before its commit (a re-send at its bound index, TURN-12). The re-run of the turn
 * derives a new key for the same call; without the guard it meets no row and pays again.
 */
const CONV = "conv-deploy";

/** After the deploy: a currency field with a default, and in the identity. */
const withCurrency = {
  input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }),
  identity: ["to", "currency"],
};
/** After the deploy: a transform that rewrites a key field. */
const withAccountPrefix = {
  input: z.object({ to: z.string().transform((to) => (to.startsWith("acct:") ? to : `acct:${to}`)), memo: z.string() }),
  identity: ["to"],
};

const payAcme = (memo: string) => (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] =>
  (input.at(-1) as { role?: string }).role === "user"
    ? [{ t: "call", index: 0, id: `call_${memo}`, name: "pay" }, { t: "args", index: 0, json: `{"to":"acme","memo":"${memo}"}` }, { t: "done", index: 0 }, { t: "end" }]
    : [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];

function shared(ledger: Ledger) {
  let now = 1_700_000_000_000;
  const store = new MemoryConversationStore({ now: () => now });
  return { store, ledger, performed: [] as unknown[], expireLeases: () => void (now += 60_000) };
}

/** Worker A (the old definition): begins the turn, pays acme, and dies before any commit. */
async function workerAPaysAndDies(store: MemoryConversationStore, dispatcher: CallDispatcher): Promise<string> {
  await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
  const lease = await store.acquireLease(CONV, "worker-a", 1_000);
  if (!lease.acquired) throw new Error("worker A could not take the conversation");
  const snapshot = await store.beginTurn(CONV, lease.fence);
  if (snapshot === undefined) throw new Error("no turn to begin");
  const outcome = await dispatcher.turn({ conversationId: CONV, turnIndex: snapshot.turnIndex, resumed: snapshot.resumed }).dispatch({ name: "pay", input: { to: "acme", memo: "from A" } });
  return outcome.key;
}

async function takeOverAfterDeploy(ledger: Ledger, pay: { input: z.ZodObject; identity: string[] }) {
  const s = shared(ledger);
  const a = world(payAcme("from A"), false, { store: s.store, ledger, performed: s.performed });
  const paidKey = await workerAPaysAndDies(s.store, a.dispatcher);
  expect(s.performed).toHaveLength(1);
  s.expireLeases();
  // The deploy: worker B runs the new definition and takes the stalled message over.
  const b = world(payAcme("from B"), false, { store: s.store, ledger, performed: s.performed, pay });
  const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
  // One payment, and the committed turn answers the call with the row A's payment made.
  expect(s.performed).toHaveLength(1);
  // What the user is shown as done is the request that ran: A's (IDENT-3).
  expect(result.turns[0]!.calls.map((c) => [c.key, c.replayed, c.storedRequest])).toEqual([[paidKey, true, { to: "acme", memo: "from A" }]]);
  const records = (await s.store.records(CONV)) as unknown as ResumedTurnRecord[];
  expect(records.filter((r) => r.kind === "resumed_turn").flatMap((r) => r.calls)).toEqual([]);
}

describe("a deploy that changes a write tool's identity while a paid turn is stalled or failed (IDENT-10)", () => {
  it("IDENT-10 take-over, memory ledger: A paid under identity [to] and died; B (identity [to, currency], currency defaulted) re-runs the turn: one payment, under A's key", async () => {
    await takeOverAfterDeploy(new MemoryLedger(), withCurrency);
  });

  it("IDENT-10 take-over, SQLite ledger, a transform of a key field: one payment", async () => {
    const ledger = new SqliteLedger({ path: ":memory:" });
    try {
      await takeOverAfterDeploy(ledger, withAccountPrefix);
    } finally {
      await ledger.close();
    }
  });

  it.each([
    ["the re-send of the message", "m1"],
    ["a new message at the failed turn's index", "m2"],
  ])("IDENT-10 TURN-12: the turn paid and failed before its commit; after the deploy %s pays nothing again", async (_what, messageId) => {
    const s = shared(new MemoryLedger());
    // A's stream is cut after the payment resolved, every attempt: the turn fails, retryable.
    const cutAfterPay = (_n: number): (ToyEvent | "cut")[] => [{ t: "call", index: 0, id: "call_a", name: "pay" }, { t: "args", index: 0, json: `{"to":"acme","memo":"from A"}` }, { t: "done", index: 0 }, "cut"];
    const a = world(cutAfterPay, true, { store: s.store, ledger: s.ledger, performed: s.performed, runner: { retry: { attempts: 1, backoffMs: () => 1 } } });
    const failed = await a.runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e as { code: string; record: { retryable: boolean; effects: { key: string }[] } });
    expect(failed).toMatchObject({ code: "turn_failed", record: { retryable: true } });
    const paidKey = (failed as { record: { effects: { key: string }[] } }).record.effects[0]!.key;
    expect(s.performed).toHaveLength(1);

    const b = world(payAcme("from B"), false, { store: s.store, ledger: s.ledger, performed: s.performed, pay: withCurrency });
    const result = await b.runner.send(CONV, { id: messageId, content: "pay acme" });
    expect(s.performed).toHaveLength(1);
    expect(result.turns[0]!.turnIndex).toBe(0);
    expect(result.turns[0]!.calls.map((c) => [c.key, c.replayed, c.storedRequest])).toEqual([[paidKey, true, { to: "acme", memo: "from A" }]]);
  });

  it("IDENT-10 bare dispatcher: turn({ conversationId, turnIndex, resumed: true }) of the new definition answers the old row", async () => {
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const a = world(payAcme("x"), false, { ledger, performed });
    const first = await a.dispatcher.turn({ conversationId: CONV, turnIndex: 0 }).dispatch({ name: "pay", input: { to: "acme", memo: "from A" } });
    const b = world(payAcme("x"), false, { ledger, performed, pay: withCurrency });
    const again = await b.dispatcher.turn({ conversationId: CONV, turnIndex: 0, resumed: true }).dispatch({ name: "pay", input: { to: "acme", memo: "from B" } });
    expect(performed).toHaveLength(1);
    expect([again.key, again.replayed, again.result]).toEqual([first.key, true, { n: 1 }]);
  });

  it("IDENT-10 the new schema refuses the paid row's request: the call is answered tool_definition_changed (not run), the turn commits, and its record lists A's payment (RECORD-8)", async () => {
    const s = shared(new MemoryLedger());
    const a = world(payAcme("from A"), false, { store: s.store, ledger: s.ledger, performed: s.performed });
    const paidKey = await workerAPaysAndDies(s.store, a.dispatcher);
    s.expireLeases();
    const strict = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string() }), identity: ["to", "currency"] };
    const call = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] =>
      (input.at(-1) as { role?: string }).role === "user"
        ? [{ t: "call", index: 0, id: "call_b", name: "pay" }, { t: "args", index: 0, json: `{"to":"acme","memo":"from B","currency":"EUR"}` }, { t: "done", index: 0 }, { t: "end" }]
        : [{ t: "text", index: 0, text: "Could not pay." }, { t: "end" }];
    const b = world(call, false, { store: s.store, ledger: s.ledger, performed: s.performed, pay: strict });
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(s.performed).toHaveLength(1);
    expect(result.turns[0]!.calls.map((c) => [c.replayed, c.error?.code])).toEqual([[undefined, "tool_definition_changed"]]);
    const records = (await s.store.records(CONV)) as unknown as ResumedTurnRecord[];
    expect(records.filter((r) => r.kind === "resumed_turn").flatMap((r) => r.calls.map((c) => [c.key, c.state, c.effect]))).toEqual([[paidKey, "completed", "happened"]]);
  });
});
