import { LedgerUnavailableError, MemoryLedger, ToolDefinitionChangedError, type Ledger } from "@dispatch-once/core";
import type { UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { hello, quiet, release, user, v1, type Run } from "./deploy-releases.js";

/*
 * IDENT-10 in the AI SDK wrapper (AISDK-18): a message that dispatched at its turn before (its
 * AISDK-17 record is there: a regenerate, a resubmit, a re-sent approval) re-runs the turn, so its
 * calls are dispatched as resumed; a deploy between its requests that changed a write tool's
 * identity then finds the row the first request made instead of paying again. A message's first
 * request lists nothing.
 */
/** A ledger that counts each method's calls. */
function counted(): { ledger: Ledger; calls: Map<string, number> } {
  const base = new MemoryLedger();
  const calls = new Map<string, number>();
  const ledger = new Proxy(base, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== "function" || typeof name !== "string") return value;
      return (...args: unknown[]) => {
        calls.set(name, (calls.get(name) ?? 0) + 1);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { ledger, calls };
}


/** One request of `messages` whose model calls pay(payee, 5) once; the AI SDK applied the release's schema (its defaults). */
async function request(once: ReturnType<typeof release>, messages: UIMessage[], input: Record<string, unknown>, toolCallId: string) {
  const turn = once.forTurn({ conversationId: "chat_deploy", messages });
  const result = await turn.tools.pay.execute!(input as never, { toolCallId, messages: [] });
  return { result, outcome: turn.outcomeOf(toolCallId)! };
}

describe("AISDK-18 a re-sent message after a deploy that changed a write tool's identity (IDENT-10)", () => {
  it("AISDK-18 a regenerate after the deploy is answered from the first request's row: one payment, the regenerate told its result; the first request listed nothing", async () => {
    const { ledger, calls } = counted();
    const runs: Run[] = [];
    const messages = [...hello, user("uA", "pay acme 5")];
    const first = await request(release(ledger, runs, "v1"), messages, { payee: "acme", amount: 5, memo: "rent" }, "call_1");
    expect(calls.get("listRows") ?? 0).toBe(0);
    const again = await request(release(ledger, runs, "v2"), messages, { payee: "acme", amount: 5, currency: "EUR", memo: "rent, again" }, "call_2");
    expect(runs, JSON.stringify(runs)).toHaveLength(1);
    expect([again.result, again.outcome.key, again.outcome.replayed]).toEqual([first.result, first.outcome.key, true]);
  });

  it("AISDK-18 a message's first request makes no ledger call for the guard, whatever its calls (two writes: no listing, no extra lookup)", async () => {
    const { ledger, calls } = counted();
    const runs: Run[] = [];
    const once = release(ledger, runs, "v2");
    const turn = once.forTurn({ conversationId: "chat_deploy", messages: [...hello, user("uA", "pay acme and bob")] });
    await turn.tools.pay.execute!({ payee: "acme", amount: 5, currency: "EUR" } as never, { toolCallId: "c1", messages: [] });
    await turn.tools.pay.execute!({ payee: "bob", amount: 5, currency: "EUR" } as never, { toolCallId: "c2", messages: [] });
    expect([calls.get("listRows") ?? 0, calls.get("lookup") ?? 0, runs.length]).toEqual([0, 0, 2]);
  });

  it("AISDK-18 another message at the same turn index (another tab) is a first request too: its own payment, nothing listed", async () => {
    const { ledger, calls } = counted();
    const runs: Run[] = [];
    await request(release(ledger, runs, "v1"), [...hello, user("uA", "pay acme 5")], { payee: "acme", amount: 5 }, "call_1");
    const b = await request(release(ledger, runs, "v2"), [...hello, user("uB", "pay acme 5")], { payee: "acme", amount: 5, currency: "EUR" }, "call_2");
    expect([runs.length, b.outcome.replayed, calls.get("listRows") ?? 0]).toEqual([2, false, 0]);
  });

  it("AISDK-18 another tab's message placed after a re-send checked it was alone: its rows (ordinals from 1 000 000, the same definition) never answer the re-send's calls", async () => {
    // Found by the end-to-end level (seed 20261201): the guard took the other tab's row, keyed at
    // its message's ordinals, for a row of another definition, and told this tab that payment.
    const { ledger } = counted();
    const runs: Run[] = [];
    const once = release(ledger, runs, "v1");
    const uA = [...hello, user("uA", "pay acme 5")];
    await request(once, uA, { payee: "acme", amount: 5 }, "a1");
    const again = once.forTurn({ conversationId: "chat_deploy", messages: uA });
    await again.tools.pay.execute!({ payee: "acme", amount: 5 } as never, { toolCallId: "a2", messages: [] }); // placed: alone
    const b = await request(once, [...hello, user("uB", "pay acme 5")], { payee: "acme", amount: 5 }, "b1");
    const second = await again.tools.pay.execute!({ payee: "acme", amount: 5 } as never, { toolCallId: "a3", messages: [] }); // the same payment once more: ordinal 1
    expect(second, JSON.stringify(runs)).not.toEqual(b.result);
    expect(runs.map((r) => r.payee)).toEqual(["acme", "acme", "acme"]);
  });

  it("AISDK-18 a re-send whose check of the turn's second place cannot reach the ledger runs nothing: ledger_unavailable without a key (AISDK-17's answer), then the re-send is answered", async () => {
    const base = new MemoryLedger();
    const runs: Run[] = [];
    let down = false;
    let secondPlace = "";
    const ledger = new Proxy(base, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (name !== "lookup" || typeof value !== "function") return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        return async (key: string) => {
          if (down && key === secondPlace) throw new LedgerUnavailableError("connection terminated", { key });
          return (value as (k: string) => unknown).call(target, key);
        };
      },
    });
    const once = release(ledger, runs, "v1");
    secondPlace = once.dispatcher.keyFor({ name: "dispatch-once-turn", input: {} }, { conversationId: "chat_deploy", turnIndex: 2, ordinal: 1 });
    const uA = [...hello, user("uA", "pay acme 5")];
    const first = await request(once, uA, { payee: "acme", amount: 5 }, "a1");
    down = true;
    const error = await request(once, uA, { payee: "acme", amount: 5 }, "a2").catch((e: unknown) => e);
    expect(LedgerUnavailableError.isInstance(error) && [error.key, runs.length]).toEqual([undefined, 1]);
    // The same for the lookup of the message's own place (AISDK-17's slot read on a re-send).
    secondPlace = once.dispatcher.keyFor({ name: "dispatch-once-turn", input: {} }, { conversationId: "chat_deploy", turnIndex: 2, ordinal: 0 });
    const own = await request(once, uA, { payee: "acme", amount: 5 }, "a2b").catch((e: unknown) => e);
    expect(LedgerUnavailableError.isInstance(own) && [own.key, runs.length]).toEqual([undefined, 1]);
    down = false;
    const again = await request(once, uA, { payee: "acme", amount: 5 }, "a3");
    expect([again.result, runs.length]).toEqual([first.result, 1]);
  });

  it("AISDK-18 a turn index that holds two messages is guarded as shared (a row of one message could answer the other's call): uB's regenerate that asks acme now is not answered with uA's payment, and is refused rather than run (it may be uA's ask: deploy-tabs.test.ts)", async () => {
    const { ledger } = counted();
    const runs: Run[] = [];
    const old = release(ledger, runs, "v1");
    await request(old, [...hello, user("uA", "pay acme 5")], { payee: "acme", amount: 5 }, "call_1");
    await request(old, [...hello, user("uB", "pay bob 5")], { payee: "bob", amount: 5 }, "call_2");
    // uB's regenerate asks acme's payment now: uA's row must not be its answer.
    const b = await request(release(ledger, runs, "v2"), [...hello, user("uB", "pay bob 5")], { payee: "acme", amount: 5, currency: "EUR" }, "call_3").catch((e: unknown) => e);
    expect(b).not.toMatchObject({ result: { paid: "acme#1" } });
    expect(ToolDefinitionChangedError.isInstance(b) && b.reason).toBe("ambiguous");
    expect(runs.map((r) => r.payee)).toEqual(["acme", "bob"]);
  });
});

describe("AISDK-18 the first message of a turn index that holds two", () => {
  it("AISDK-18 the first tab's regenerate (its message at the turn's first place) is guarded as shared when another tab's message followed it there: the other tab's row is never its answer, and the call is refused rather than run", async () => {
    // Blind round N's N29: with aloneAt's lookup of the turn's second place skipped, uA (placed
    // first) was taken for the turn's only message, its re-send was guarded, and its call was
    // answered with uB's payment: two asks, and uA's never made (AISDK-17's collision again).
    // Guarded as shared (sharedTurn), the row may be either ask's, so the call is refused.
    const { ledger } = counted();
    const runs: Run[] = [];
    const old = release(ledger, runs, "v1");
    await request(old, [...hello, user("uA", "pay acme 5")], { payee: "acme", amount: 5 }, "call_1");
    await request(old, [...hello, user("uB", "pay bob 5")], { payee: "bob", amount: 5 }, "call_2");
    const a = await request(release(ledger, runs, "v2"), [...hello, user("uA", "pay acme 5")], { payee: "bob", amount: 5, currency: "EUR" }, "call_3").catch((e: unknown) => e);
    expect(a).not.toMatchObject({ result: { paid: "bob#2" } });
    expect(ToolDefinitionChangedError.isInstance(a) && a.reason).toBe("ambiguous");
    expect(runs.map((r) => r.payee)).toEqual(["acme", "bob"]);
  });
});

describe("AISDK-18 a renamed tool (formerNames, core's IDENT-11)", () => {
  it("AISDK-18 a regenerate after a deploy that renamed pay to send_payment is answered from the row pay made: one payment", async () => {
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const messages = [...hello, user("uA", "pay acme 5")];
    const old = createOnceTools({ tools: { pay: v1(runs) }, effects: { pay: "keyed_write" }, identity: { pay: ["payee", "amount"] }, ledger, dispatcher: quiet });
    const first = old.forTurn({ conversationId: "chat_deploy", messages });
    const paid = await first.tools.pay.execute!({ payee: "acme", amount: 5 } as never, { toolCallId: "c1", messages: [] });
    const renamed = createOnceTools({
      tools: { send_payment: v1(runs) },
      effects: { send_payment: "keyed_write" },
      identity: { send_payment: ["payee", "amount"] },
      formerNames: { send_payment: ["pay"] },
      ledger,
      dispatcher: quiet,
    });
    const again = renamed.forTurn({ conversationId: "chat_deploy", messages });
    const result = await again.tools.send_payment.execute!({ payee: "acme", amount: 5 } as never, { toolCallId: "c2", messages: [] });
    expect(runs, JSON.stringify(runs)).toHaveLength(1);
    expect([result, again.outcomeOf("c2")?.replayed]).toEqual([paid, true]);
  });

  it("AISDK-18 formerNames must name a tool with execute and hold names (invalid_argument); a former name that is a tool's is refused (invalid_tool_definition)", () => {
    const runs: Run[] = [];
    const ledger = new MemoryLedger();
    const make = (formerNames: unknown, tools: Record<string, ReturnType<typeof v1>> = { send_payment: v1(runs) }) =>
      createOnceTools({ tools, effects: Object.fromEntries(Object.keys(tools).map((n) => [n, "keyed_write" as const])), formerNames: formerNames as never, ledger, dispatcher: quiet });
    expect(() => make({ pay: ["x"] })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.formerNames.pay" }));
    expect(() => make({ send_payment: "pay" })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.formerNames.send_payment" }));
    expect(() => make({ send_payment: ["pay"] }, { send_payment: v1(runs), pay: v1(runs) })).toThrow(expect.objectContaining({ code: "invalid_tool_definition" }));
    expect(() => make({ send_payment: ["dispatch-once-turn"] })).toThrow(expect.objectContaining({ code: "invalid_tool_definition" }));
  });
});
