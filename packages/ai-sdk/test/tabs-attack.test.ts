import { effectOf, isDispatchOnceError, LedgerUnavailableError, MemoryLedger, retryableOf, type ClaimRequest, type Ledger } from "@dispatch-once/core";
import { tool, type ModelMessage, type UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf } from "../src/index.js";

/*
 * An adversary's look at AISDK-17 (two tabs of one chat, each a new user message at one turn
 * index): races on the turn's record, a process that dies or a ledger that fails at the record's
 * claim, re-sends of the second tab's message, the listings (AISDK-12, AISDK-14) past the first
 * message's ordinals, requests that dispatch nothing or only reads, the app-numbered mode, and the
 * record's key space. Each payment asked happens once, and each tab is told its own.
 */
const CONV = "chat_attack";
const RECORD = "dispatch-once-turn";
type Run = { payee: string; key: string; ordinal: number };
const user = (id: string, text: string): UIMessage => ({ id, role: "user", parts: [{ type: "text", text }] });
const hello: UIMessage[] = [user("u1", "hello"), { id: "a1", role: "assistant", parts: [{ type: "text", text: "Hi." }] }];
const tab = (id: string, text = "pay acme 5") => [...hello, user(id, text)];

/** A ledger whose methods a test may intercept (`next` is the memory ledger's own). */
type Hooks = { [M in "claim" | "complete" | "lookup"]?: (args: unknown[], next: () => Promise<unknown>) => Promise<unknown> };
function faulty(inner: MemoryLedger, hooks: Hooks): Ledger {
  return new Proxy(inner, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== "function") return value;
      const hook = hooks[name as keyof Hooks];
      if (hook === undefined) return value.bind(target);
      return (...args: unknown[]) => hook(args, () => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args));
    },
  }) as Ledger;
}
/**
 * What a call whose request could not get its message's place at the turn (AISDK-17) is told: it was
 * not claimed in this request; an earlier request of the same message may have run it, so its effect
 * is "possibly" (never "yes": the record's own write is no effect of the call), a re-send of the same
 * message helps, and the error carries no key (the call's key depends on the place it could not get;
 * the record's key names no effect of the app's).
 */
const NOT_CLAIMED = { code: "ledger_unavailable", effect: "possibly", retryable: "same_message", key: undefined };
const toldOf = (error: unknown) => ({ code: (error as { code?: unknown }).code, effect: effectOf(error), retryable: retryableOf(error), key: (error as { key?: unknown }).key });
/** A claim of either of the wrapper's records of a message (the message's turn, then its place there). */
const isRecordClaim = (args: unknown[]) => [RECORD, "dispatch-once-message"].includes((args[0] as ClaimRequest).toolName);

function chat(options: { ledger?: Ledger; memory?: MemoryLedger; dispatcher?: Record<string, unknown> } = {}) {
  const runs: Run[] = [];
  const memory = options.memory ?? new MemoryLedger();
  const ledger = options.ledger ?? memory;
  const pay = tool({
    inputSchema: z.object({ payee: z.string(), amount: z.number() }),
    execute: async ({ payee }, o) => {
      const info = dispatchOnceOf(o)!;
      runs.push({ payee, key: info.idempotencyKey, ordinal: info.ordinal });
      return { paid: `${payee}#${runs.length}` };
    },
  });
  const balance = tool({ inputSchema: z.object({}), execute: async () => ({ balance: 100 }) });
  const approvedPay = { ...pay, needsApproval: true };
  const once = createOnceTools({
    tools: { pay, balance, approvedPay },
    effects: { pay: "keyed_write", balance: "read", approvedPay: "keyed_write" },
    ledger,
    dispatcher: { logger: { warn: () => {} }, claimRetryMs: 0, recordRetryMs: 0, pollMs: 1, maxPollMs: 2, ...options.dispatcher },
  });
  let n = 0;
  /** One request of a tab: `calls` run in parallel at its first step (the AI SDK executes a step's calls at once). */
  const request = async (messages: readonly UIMessage[] | ModelMessage[], payees: string[] = ["acme"], extra: { turnIndex?: number } = {}) => {
    // With turnIndex (the app numbers turns), `messages` are given as the turn's turnMessages.
    const turn = extra.turnIndex !== undefined ? once.forTurn({ conversationId: CONV, turnIndex: extra.turnIndex, turnMessages: messages }) : once.forTurn({ conversationId: CONV, messages });
    const ids = payees.map(() => `call_${++n}`);
    const settled = await Promise.allSettled(payees.map(async (payee, i) => turn.tools.pay.execute!({ payee, amount: 5 }, { toolCallId: ids[i]!, messages: [] })));
    return { settled, results: settled.map((s) => (s.status === "fulfilled" ? s.value : undefined)), outcomes: ids.map((id) => turn.outcomeOf(id)), turn };
  };
  const recordKey = (k: number, turnIndex = 2) => once.dispatcher.keyFor({ name: RECORD, input: {} }, { conversationId: CONV, turnIndex, ordinal: k });
  /** The turn's record: the message id at each slot, in order, until the first empty one. */
  const record = async (turnIndex = 2) => {
    const ids: unknown[] = [];
    for (let k = 0; ; k++) {
      const row = await memory.lookup(recordKey(k, turnIndex));
      if (row === undefined) return ids;
      ids.push(row.state === "completed" ? (JSON.parse(row.result) as { messageId: string }).messageId : row.state);
    }
  };
  return { runs, request, once, memory, record, recordKey };
}

describe("AISDK-17 attacked: races on the turn's record", () => {
  it("tab B arrives while tab A's claim of the record's slot 0 is in flight: B waits, then takes slot 1; two payments, each told its own", async () => {
    let opened!: () => void;
    const gate = new Promise<void>((resolve) => (opened = resolve));
    let reached!: () => void;
    const atGate = new Promise<void>((resolve) => (reached = resolve));
    const memory = new MemoryLedger();
    let hold = true;
    let waited = 0;
    const ledger = faulty(memory, {
      // A's record completion is held until B has met the in-flight slot.
      complete: async (args, next) => {
        const row = await memory.lookup(args[0] as string);
        if (row?.toolName === RECORD && hold) {
          hold = false;
          reached();
          await gate;
        }
        return next();
      },
    });
    const { runs, request, record } = chat({ ledger, memory, dispatcher: { onEvent: (e: { type: string }) => void (e.type === "waiting" && waited++) } });
    const a = request(tab("uA"));
    await atGate;
    const b = request(tab("uB"));
    // B has met the live claim of slot 0 when it polls; let it poll a few times, then open.
    await new Promise((r) => setTimeout(r, 5));
    opened();
    const [ra, rb] = await Promise.all([a, b]);
    expect(waited).toBeGreaterThan(0);
    expect(runs.map((r) => r.ordinal), JSON.stringify({ ra: ra.results, rb: rb.results })).toEqual([0, 1_000_000]);
    expect(ra.results[0]).not.toEqual(rb.results[0]);
    expect(await record()).toEqual(["uA", "uB"]);
  });

  it("three tabs at once: three payments at bases 0, 1e6, 2e6; every re-send meets its own", async () => {
    const { runs, request, record } = chat();
    const first = await Promise.all(["uA", "uB", "uC"].map((id) => request(tab(id))));
    expect(runs.map((r) => r.ordinal).sort((x, y) => x - y)).toEqual([0, 1_000_000, 2_000_000]);
    expect(new Set(first.map((f) => JSON.stringify(f.results))).size).toBe(3);
    const again = await Promise.all(["uC", "uA", "uB"].map((id) => request(tab(id))));
    expect(runs).toHaveLength(3);
    expect(again.map((r) => r.results)).toEqual([first[2]!.results, first[0]!.results, first[1]!.results]);
    expect((await record()).slice().sort()).toEqual(["uA", "uB", "uC"]);
  });

  it("a request that dispatches two calls at once at its first step claims one slot, shared by both", async () => {
    const { runs, request, record } = chat();
    await request(tab("uA", "pay acme and bob"), ["acme", "bob"]);
    const b = await request(tab("uB", "pay acme and bob"), ["acme", "bob"]);
    expect(runs.map((r) => [r.payee, r.ordinal])).toEqual([
      ["acme", 0],
      ["bob", 0],
      ["acme", 1_000_000],
      ["bob", 1_000_000],
    ]);
    expect(b.outcomes.map((o) => o?.replayed)).toEqual([false, false]);
    expect(await record()).toEqual(["uA", "uB"]);
  });

  it('dispatchAt "tool-call": the early dispatch at the tool-call part takes the slot, and execute answers from it', async () => {
    const { runs, once, record } = chat();
    for (const id of ["uA", "uB"]) {
      const turn = once.forTurn({ conversationId: CONV, messages: tab(id), dispatchAt: "tool-call" });
      turn.onChunk({ chunk: { type: "tool-call", toolCallId: `tc_${id}`, toolName: "pay", input: { payee: "acme", amount: 5 } } as never });
      const result = await turn.tools.pay.execute!({ payee: "acme", amount: 5 }, { toolCallId: `tc_${id}`, messages: [] });
      expect(result).toEqual({ paid: `acme#${runs.length}` });
      expect(turn.outcomeOf(`tc_${id}`)?.replayed).toBe(false);
    }
    expect(runs.map((r) => r.ordinal)).toEqual([0, 1_000_000]);
    expect(await record()).toEqual(["uA", "uB"]);
  });
});

describe("AISDK-17 attacked: a process that dies, a ledger that fails, at the record's claim", () => {
  /** A ledger on a clock the test moves, and a "process" whose record completion never lands (it died there). */
  function dying() {
    let now = 1_000_000;
    const memory = new MemoryLedger({ now: () => now });
    let dead = true;
    const ledger = faulty(memory, {
      complete: async (args, next) => {
        const row = await memory.lookup(args[0] as string);
        if (dead && row?.toolName === RECORD) return new Promise(() => {}); // the process is gone
        return next();
      },
    });
    const crashed = chat({ ledger, memory, dispatcher: { leaseMs: 1_000 } });
    const revive = () => {
      dead = false;
      now += 60_000; // the dead claim's lease has expired
      return chat({ memory, dispatcher: { leaseMs: 1_000 } });
    };
    return { crashed, revive };
  }

  it("dead after claiming slot 0 for A (nothing paid): B takes the slot over and is told its own; A re-sent later gets slot 1 and pays once", async () => {
    const { crashed, revive } = dying();
    void crashed.request(tab("uA")); // never settles
    await new Promise((r) => setTimeout(r, 0));
    expect(await crashed.record()).toEqual(["in_flight"]);
    expect(crashed.runs).toEqual([]);
    const next = revive();
    const b = await next.request(tab("uB"));
    const a = await next.request(tab("uA"));
    expect(next.runs.map((r) => r.ordinal)).toEqual([0, 1_000_000]);
    expect(a.results[0]).not.toEqual(b.results[0]);
    expect(await next.record()).toEqual(["uB", "uA"]);
    // And each re-sent again meets its own.
    expect((await next.request(tab("uA"))).results).toEqual(a.results);
    expect((await next.request(tab("uB"))).results).toEqual(b.results);
    expect(next.runs).toHaveLength(2);
  });

  it("dead after claiming slot 0 for A: A itself re-sent takes its slot over (base 0, the keys it always had)", async () => {
    const { crashed, revive } = dying();
    void crashed.request(tab("uA"));
    await new Promise((r) => setTimeout(r, 0));
    const next = revive();
    const a = await next.request(tab("uA"));
    expect(a.outcomes[0]?.key).toBe(next.once.dispatcher.keyFor({ name: "pay", input: { payee: "acme", amount: 5 } }, { conversationId: CONV, turnIndex: 2, ordinal: 0 }));
    expect(await next.record()).toEqual(["uA"]);
  });

  it("the ledger unreachable at the record's claim: the payment did not run, its error says possibly (never the record's key), a re-send helps and pays once", async () => {
    const memory = new MemoryLedger();
    let down = true;
    const ledger = faulty(memory, {
      claim: async (args, next) => {
        if (down && isRecordClaim(args)) throw new LedgerUnavailableError("connection refused");
        return next();
      },
    });
    const { runs, request, record } = chat({ ledger, memory });
    const failed = await request(tab("uA"));
    expect(runs).toEqual([]);
    const error = (failed.settled[0] as PromiseRejectedResult).reason as Error & { key?: string };
    expect(isDispatchOnceError(error), String(error)).toBe(true);
    expect(toldOf(error), String(error)).toEqual(NOT_CLAIMED);
    down = false;
    const again = await request(tab("uA"));
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(again.outcomes[0]?.replayed).toBe(false);
    expect(await record()).toEqual(["uA"]);
  });

  it("a lost reply on the record's claim (the row written, the answer lost): the payment did not run, told as not claimed; the re-send pays once, at base 0", async () => {
    const memory = new MemoryLedger();
    let lose = true;
    const ledger = faulty(memory, {
      claim: async (args, next) => {
        const result = await next();
        if (lose && isRecordClaim(args)) throw new LedgerUnavailableError("reply lost");
        return result;
      },
    });
    const { runs, request, record } = chat({ ledger, memory });
    const failed = await request(tab("uA"));
    expect(runs).toEqual([]);
    const error = (failed.settled[0] as PromiseRejectedResult).reason as Error;
    expect(toldOf(error), String(error)).toEqual(NOT_CLAIMED);
    lose = false;
    await request(tab("uA"));
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(await record()).toEqual(["uA"]);
  });

  it("the ledger failing while a re-sent message reads its slot: told as not claimed, and the next re-send meets its payment", async () => {
    const memory = new MemoryLedger();
    let down = false;
    const ledger = faulty(memory, {
      lookup: async (args, next) => {
        if (down && (await memory.lookup(args[0] as string))?.toolName === RECORD) throw new LedgerUnavailableError("connection reset");
        return next();
      },
    });
    const { runs, request } = chat({ ledger, memory });
    const first = await request(tab("uA"));
    down = true;
    const failed = await request(tab("uA"));
    expect(toldOf((failed.settled[0] as PromiseRejectedResult).reason), String((failed.settled[0] as PromiseRejectedResult).reason)).toEqual(NOT_CLAIMED);
    down = false;
    expect((await request(tab("uA"))).results).toEqual(first.results);
    expect(runs).toHaveLength(1);
  });

  it("the record's completion cannot be written: the payment did not run, and its error must not say it happened (nor that a re-send cannot help); the re-send pays once", async () => {
    let now = 1_000_000;
    const memory = new MemoryLedger({ now: () => now });
    let down: Hooks["complete"] = async (args, next) => {
      const row = await memory.lookup(args[0] as string);
      if (row?.toolName === RECORD) throw new LedgerUnavailableError("connection reset");
      return next();
    };
    const { runs, request, record } = chat({ ledger: faulty(memory, { complete: async (args, next) => (down ? down(args, next) : next()) }), memory, dispatcher: { leaseMs: 1_000, waitMs: 0 } });
    const failed = await request(tab("uA"));
    expect(runs).toEqual([]);
    const error = (failed.settled[0] as PromiseRejectedResult).reason as Error;
    expect(toldOf(error), String(error)).toEqual(NOT_CLAIMED);
    // The ledger is back; the record's slot 0 is still claimed, its lease live: a re-send waits and is told the same.
    down = undefined;
    const waiting = await request(tab("uA"));
    expect(toldOf((waiting.settled[0] as PromiseRejectedResult).reason)).toEqual({ ...NOT_CLAIMED });
    expect(runs).toEqual([]);
    now += 60_000; // the lease expires: the re-send takes slot 0 over for itself and pays once
    await request(tab("uA"));
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(await record()).toEqual(["uA"]);
  });
});

describe("AISDK-17 attacked: re-sends of the second tab's message", () => {
  it("after A's regenerate: B's regenerate, B's edit (same id), B sent again under AISDK-10 each meet B's payment; a third tab C is a new one", async () => {
    const { runs, request } = chat();
    const a = await request(tab("uA"));
    const b = await request(tab("uB"));
    await request(tab("uA"));
    const regenerated = await request(tab("uB"));
    const edited = await request(tab("uB", "pay acme 5 now"));
    // AISDK-10: a server that appends the client's last message to the chat it saved re-sends it after its answer.
    const resent = await request([...tab("uB"), { id: "aB", role: "assistant", parts: [{ type: "text", text: "Paid." }] }, user("uB", "pay acme 5")]);
    expect(resent.turn.turnIndex).toBe(2);
    for (const r of [regenerated, edited, resent]) {
      expect(r.results).toEqual(b.results);
      expect(r.outcomes[0]?.replayed).toBe(true);
    }
    const c = await request(tab("uC"));
    expect(runs.map((r) => r.ordinal)).toEqual([0, 1_000_000, 2_000_000]);
    expect(new Set([a, b, c].map((x) => JSON.stringify(x.results))).size).toBe(3);
  });

  it("B's approval re-sent runs B's approved call once at B's base, never A's", async () => {
    const { runs, once } = chat();
    const approval = (id: string, toolCallId: string, approved = true): UIMessage[] => [
      ...tab(id),
      { id: `a_${id}`, role: "assistant", parts: [{ type: "tool-approvedPay", toolCallId, state: "approval-responded", input: { payee: "acme", amount: 5 }, approval: { id: `ap_${toolCallId}`, approved } }] as UIMessage["parts"] },
    ];
    const send = async (messages: UIMessage[], toolCallId: string) => {
      const turn = once.forTurn({ conversationId: CONV, messages });
      return { turn, result: await turn.tools.approvedPay.execute!({ payee: "acme", amount: 5 }, { toolCallId, messages: [] }) };
    };
    const a = await send(approval("uA", "ca"), "ca");
    const b = await send(approval("uB", "cb"), "cb");
    const b2 = await send(approval("uB", "cb"), "cb");
    expect(runs.map((r) => r.ordinal)).toEqual([0, 1_000_000]);
    expect(b2.result).toEqual(b.result);
    expect(b.result).not.toEqual(a.result);
    // AISDK-12: B's message now denies the call B approved and ran: claimedDenials finds B's row, not A's.
    const denied = await once.forTurn({ conversationId: CONV, messages: approval("uB", "cb", false) }).claimedDenials();
    expect(denied.map((d) => [d.toolCallId, d.key, d.row.state])).toEqual([["cb", runs[1]!.key, "completed"]]);
    // A tab C that never dispatched denies the same call: its would-be key was never claimed.
    expect(await once.forTurn({ conversationId: CONV, messages: approval("uC", "cc", false) }).claimedDenials()).toEqual([]);
  });
  it("a history that holds both tabs' messages one after the other (a store that keeps both, reloaded) counts B's as the next turn: B's regenerate from it still meets B's payment, and its listing is of B's turn", async () => {
    const { runs, request, record } = chat();
    const a = await request(tab("uA"));
    const b = await request(tab("uB"));
    // A store that keeps every message by id, reloaded into one history; the user regenerates B's answer.
    const merged: UIMessage[] = [...tab("uA"), { id: "aA", role: "assistant", parts: [{ type: "text", text: "Paid." }] }, user("uB", "pay acme 5")];
    const regenerated = await request(merged);
    expect(regenerated.turn.turnIndex).toBe(3);
    expect(regenerated.results).toEqual(b.results);
    expect(regenerated.outcomes[0]?.replayed).toBe(true);
    expect(runs.map((r) => r.ordinal)).toEqual([0, 1_000_000]);
    expect(await record(3)).toEqual([]);
    // The listing is of the turn B's calls are keyed at: A's payment, and B's own (this request executed it).
    expect((await regenerated.turn.unansweredCalls()).calls.map((c) => c.key)).toEqual([runs[0]!.key]);
    // A's regenerate from the same store meets A's.
    expect((await request([...tab("uA")])).results).toEqual(a.results);
    // A new message after the merged history is a new turn.
    const next = await request([...merged, { id: "aB", role: "assistant", parts: [{ type: "text", text: "Paid." }] }, user("u4", "pay acme 5")]);
    expect(next.turn.turnIndex).toBe(4);
    expect(runs).toHaveLength(3);
    expect(next.outcomes[0]?.key).toBe(runs[2]!.key);
  });
});

describe("AISDK-17 attacked: the ledger's retention", () => {
  it("A's rows swept by the retention while B's are kept: B's regenerate still meets B's payment (its place is not taken again from a gap)", async () => {
    let now = 1_000_000;
    const hour = 3_600_000;
    const memory = new MemoryLedger({ now: () => now, retentionMs: 24 * hour });
    const { runs, request, once } = chat({ memory });
    await request(tab("uA"));
    now += 10 * hour; // a stale tab sends B ten hours later
    const b = await request(tab("uB"));
    now += 15 * hour; // A's rows are past the retention, B's are not
    const answered: UIMessage[] = [...tab("uB"), { id: "aB", role: "assistant", parts: [{ type: "tool-pay", toolCallId: "cb", state: "output-available", input: { payee: "acme", amount: 5 }, output: b.results[0] }] as UIMessage["parts"] }];
    const listed = await once.forTurn({ conversationId: CONV, messages: answered }).unansweredCalls();
    const again = await request(tab("uB"));
    expect(again.results, JSON.stringify(runs)).toEqual(b.results);
    expect(runs).toHaveLength(2);
    expect(listed.calls, "B's payment is told by its history at B's place").toEqual([]);
  });
});

describe("AISDK-17 attacked: a recorded repair (AISDK-11) in a merged history", () => {
  it("B's regenerate from a history that counts B one turn later gets B's recorded repair, not a new one (a repair that answers differently would pay again)", async () => {
    const { runs, once } = chat();
    const broken = { type: "tool-call", toolCallId: "x", toolName: "pay", input: '{"payee":"acme","amount":"5"}' };
    let payee = "acme";
    const repair = async () => ({ ...broken, input: JSON.stringify({ payee, amount: 5 }) });
    const send = async (messages: UIMessage[], toolCallId: string) => {
      const turn = once.forTurn({ conversationId: CONV, messages });
      const repaired = (await turn.repairToolCall(repair as never)({ toolCall: { ...broken, toolCallId } } as never)) as { input: string } | null;
      return turn.tools.pay.execute!(JSON.parse(repaired!.input) as { payee: string; amount: number }, { toolCallId, messages: [] });
    };
    await send(tab("uA"), "ca");
    const b = await send(tab("uB"), "cb");
    payee = "ACME"; // the repair, a model request, answers otherwise now
    const merged: UIMessage[] = [...tab("uA"), { id: "aA", role: "assistant", parts: [{ type: "text", text: "Paid." }] }, user("uB", "pay acme 5")];
    const again = await send(merged, "cb2");
    expect(again, JSON.stringify(runs)).toEqual(b);
    expect(runs.map((r) => r.payee)).toEqual(["acme", "acme"]);
  });
});

describe("AISDK-17 attacked: listings past the first message (AISDK-14)", () => {
  it("B's payment, cut before its answer reached B, is listed to B's next request; once B's history shows it answered, only A's is listed; never a record row", async () => {
    const { runs, request, once } = chat();
    await request(tab("uA"));
    await request(tab("uB", "pay bob 5"), ["bob"]); // the stream is cut: B never sees the answer
    const regenerated = once.forTurn({ conversationId: CONV, messages: tab("uB", "pay bob 5") }); // the model answers without a call
    const listed = await regenerated.unansweredCalls();
    expect(listed.calls.map((c) => [c.name, c.key, c.effect]).sort()).toEqual(
      [
        ["pay", runs[0]!.key, "happened"],
        ["pay", runs[1]!.key, "happened"],
      ].sort(),
    );
    const told: UIMessage[] = [
      ...tab("uB", "pay bob 5"),
      { id: "aB", role: "assistant", parts: [{ type: "tool-pay", toolCallId: "cb", state: "output-available", input: { payee: "bob", amount: 5 }, output: { paid: "bob#2" } }] as UIMessage["parts"] },
    ];
    const after = await once.forTurn({ conversationId: CONV, messages: told }).unansweredCalls();
    expect(after.calls.map((c) => c.key)).toEqual([runs[0]!.key]);
  });
});

describe("AISDK-17 attacked: requests that dispatch reads, or nothing", () => {
  it("a read claims nothing (EFFECT-2) and takes no place: a read-only request writes no record, and works while the ledger is down", async () => {
    const memory = new MemoryLedger();
    let down = true;
    const ledger = faulty(memory, {
      claim: async (_args, next) => {
        if (down) throw new LedgerUnavailableError("connection refused");
        return next();
      },
    });
    const { runs, once, request, record } = chat({ ledger, memory });
    const reader = once.forTurn({ conversationId: CONV, messages: tab("uA", "what is my balance?") });
    const read = await Promise.resolve(reader.tools.balance.execute!({}, { toolCallId: "r1", messages: [] })).catch((e: unknown) => e);
    expect(read, String(read)).toEqual({ balance: 100 });
    expect(await record()).toEqual([]);
    down = false;
    // The next tab's payment is the turn's first claimed ask: base 0.
    await request(tab("uB"));
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(await record()).toEqual(["uB"]);
    expect((await reader.unansweredCalls()).calls.map((c) => c.name)).toEqual(["pay"]);
  });

  it("a call refused before it is keyed (a key argument beyond 2^53 - 1) claims no slot; the message's first keyed call does", async () => {
    const { runs, once, record } = chat();
    const turn = once.forTurn({ conversationId: CONV, messages: tab("uA") });
    const refused = await Promise.resolve(turn.tools.pay.execute!({ payee: "acme", amount: 2 ** 60 }, { toolCallId: "bad", messages: [] })).catch((e: unknown) => e);
    expect(isDispatchOnceError(refused, "tool_input_invalid"), String(refused)).toBe(true);
    expect(await record()).toEqual([]);
    await turn.tools.pay.execute!({ payee: "acme", amount: 5 }, { toolCallId: "ok", messages: [] });
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(await record()).toEqual(["uA"]);
  });
});

describe("AISDK-17 attacked: modes without message ids are unchanged", () => {
  it("turnIndex (+ turnMessages): two requests at one index share their keys and write no record", async () => {
    const { runs, request, record } = chat();
    // The turn's messages from the app's store, each tab's user message with its own id: not read for an id.
    const a = await request([user("uA", "pay acme 5")], ["acme"], { turnIndex: 2 });
    const b = await request([user("uB", "pay acme 5")], ["acme"], { turnIndex: 2 });
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(b.outcomes[0]?.replayed).toBe(true);
    expect(b.results).toEqual(a.results);
    expect(await record()).toEqual([]);
  });

  it("model messages: no record written, keys at ordinal 0", async () => {
    const { runs, request, record } = chat();
    await request([{ role: "user", content: "hello" }, { role: "assistant", content: "Hi." }, { role: "user", content: "pay acme 5" }]);
    expect(runs.map((r) => r.ordinal)).toEqual([0]);
    expect(await record()).toEqual([]);
  });
});

describe("AISDK-17 attacked: a turn under way across the upgrade (documented, not told apart)", () => {
  it("a turn whose first message paid under a wrapper without the record: another message reaching the new one first takes place 0 and meets that payment", async () => {
    const { runs, request } = chat();
    // The old wrapper keyed uA's payment at ordinal 0 and recorded nothing (as a request without a message id does).
    const old = await request([], ["acme"], { turnIndex: 2 });
    const b = await request(tab("uB"));
    expect(b.outcomes[0]?.replayed).toBe(true);
    expect(b.results).toEqual(old.results);
    expect(runs).toHaveLength(1);
  });
});

describe("AISDK-17 attacked: the record's key space", () => {
  it("the records' names cannot be an app's tool, nor named by its identity config", () => {
    const t = tool({ inputSchema: z.object({}), execute: async () => ({}) });
    for (const name of [RECORD, "dispatch-once-message"]) {
      expect(() => createOnceTools({ tools: { [name]: t }, effects: { [name]: "read" }, ledger: new MemoryLedger() })).toThrow(new RegExp(`options.tools.${name}`));
      expect(() => createOnceTools({ tools: { t }, effects: { t: "read" }, identity: { [name]: [] } as never, ledger: new MemoryLedger() })).toThrow(new RegExp(`options.identity.${name}`));
    }
  });

  it("the 100th message of a turn pays at ordinal 99 000 000 (a safe integer); the 101st is refused with invalid_argument, effect no, nothing run", async () => {
    const memory = new MemoryLedger();
    // 99 earlier messages' record rows, written as the wrapper writes them (ordinals 0..98).
    const { runs, request, recordKey } = chat({ memory });
    for (let k = 0; k < 99; k++) {
      const claim = await memory.claim({ key: recordKey(k), toolName: RECORD, effect: "keyed_write", owner: "t", leaseMs: 60_000, request: "{}", conversationId: CONV, turnIndex: 2 });
      await memory.complete(recordKey(k), (claim as { fence: number }).fence, JSON.stringify({ messageId: `old${k}` }));
    }
    await request(tab("u99"));
    expect(runs.map((r) => r.ordinal)).toEqual([99_000_000]);
    const refused = await request(tab("u100"));
    const error = (refused.settled[0] as PromiseRejectedResult).reason;
    expect(isDispatchOnceError(error, "invalid_argument"), String(error)).toBe(true);
    expect(effectOf(error)).toBe("no");
    expect(runs).toHaveLength(1);
  });
});
