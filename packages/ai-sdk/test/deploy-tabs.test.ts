import { InvalidArgumentError, MemoryLedger, ToolDefinitionChangedError } from "@dispatch-once/core";
import type { ModelMessage, UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { hello, release, user, type Run } from "./deploy-releases.js";

/*
 * AISDK-18 x AISDK-17: a deploy between the requests of two tabs' messages at one turn index. A
 * row does not say which message made it, so a turn index holding several messages was left
 * unguarded: a re-sent message's call after a deploy that changed the payment's identity derived a
 * new key, met no row, and paid again for one ask. Guarded as a shared turn, a call that a row of
 * the earlier definition matches may be either message's: refused, never paid again, never answered
 * with the other tab's payment.
 */
const tabA = [...hello, user("uA", "pay acme 5")];
const tabB = [...hello, user("uB", "pay bob 5")];

let n = 0;
/** One request of a tab: its model calls pay once; the AI SDK applied the release's schema (its defaults). */
async function request(once: ReturnType<typeof release>, messages: UIMessage[] | ModelMessage[], input: Record<string, unknown>, resumed?: boolean) {
  const turn = once.forTurn({ conversationId: "chat_deploy_tabs", messages, ...(resumed !== undefined ? { resumed } : {}) });
  const toolCallId = `call_${++n}`;
  try {
    return { result: await turn.tools.pay.execute!(input as never, { toolCallId, messages: [] }), outcome: turn.outcomeOf(toolCallId) };
  } catch (error) {
    return { error };
  }
}
const acmeV2 = { payee: "acme", amount: 5, currency: "EUR", memo: "again" };

describe("AISDK-18 a deploy between the requests of two tabs' messages at one turn index", () => {
  it("AISDK-18 tab A paid acme and tab B paid bob before the deploy; A's regenerate after it is refused (tool_definition_changed, ambiguous), not paid again; B's is too", async () => {
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const old = release(ledger, runs, "v1");
    await request(old, tabA, { payee: "acme", amount: 5 });
    await request(old, tabB, { payee: "bob", amount: 5 });
    const now = release(ledger, runs, "v2");
    const a = await request(now, tabA, acmeV2);
    expect(runs.map((r) => r.payee), JSON.stringify(a)).toEqual(["acme", "bob"]);
    expect(ToolDefinitionChangedError.isInstance(a.error) && [a.error.reason, a.error.rowState]).toEqual(["ambiguous", "completed"]);
    // B's regenerate that asks acme now (A's payment): neither answered with A's payment nor paid.
    const b = await request(now, tabB, acmeV2);
    expect(ToolDefinitionChangedError.isInstance(b.error) && b.error.reason).toBe("ambiguous");
    // B's regenerate that asks bob: its own row, the only one the call matches, may still be A's (a row does not say): refused too.
    const bob = await request(now, tabB, { payee: "bob", amount: 5, currency: "EUR" });
    expect(ToolDefinitionChangedError.isInstance(bob.error)).toBe(true);
    // A call no row of the earlier definition matches is no earlier call: it runs.
    const carol = await request(now, tabA, { payee: "carol", amount: 5, currency: "EUR" });
    expect([carol.outcome?.replayed, runs.map((r) => r.payee)]).toEqual([false, ["acme", "bob", "carol"]]);
  });

  it("AISDK-18 tab A paid acme before the deploy, tab B after it (another ask: paid); A's regenerate is refused, B's is answered from its own row", async () => {
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    await request(release(ledger, runs, "v1"), tabA, { payee: "acme", amount: 5 });
    const now = release(ledger, runs, "v2");
    const b = await request(now, tabB, acmeV2);
    expect([b.outcome?.replayed, runs.map((r) => r.payee)]).toEqual([false, ["acme", "acme"]]);
    const a = await request(now, tabA, acmeV2);
    expect(runs.map((r) => r.payee), JSON.stringify(a)).toEqual(["acme", "acme"]);
    expect(ToolDefinitionChangedError.isInstance(a.error) && a.error.reason).toBe("ambiguous");
    const bAgain = await request(now, tabB, acmeV2);
    expect([bAgain.result, bAgain.outcome?.key, bAgain.outcome?.replayed]).toEqual([b.result, b.outcome?.key, true]);
  });
});

describe("AISDK-18 requests whose user message carries no id (model messages): the app says when it re-runs a turn", () => {
  const modelMessages: ModelMessage[] = [{ role: "user", content: "hello" }, { role: "assistant", content: "Hi." }, { role: "user", content: "pay acme 5" }];

  it("AISDK-18 a regenerate of model messages after the deploy, said resumed, is answered from the first request's row; not said so, it pays again (nothing in the request tells)", async () => {
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const first = await request(release(ledger, runs, "v1"), modelMessages, { payee: "acme", amount: 5 });
    const now = release(ledger, runs, "v2");
    const again = await request(now, modelMessages, acmeV2, true);
    expect(runs.map((r) => r.payee), JSON.stringify(again)).toEqual(["acme"]);
    expect([again.result, again.outcome?.key, again.outcome?.replayed]).toEqual([first.result, first.outcome?.key, true]);
    const unsaid = await request(now, modelMessages, acmeV2);
    expect([unsaid.outcome?.replayed, runs.map((r) => r.payee)]).toEqual([false, ["acme", "acme"]]);
  });

  it("ERR-1 resumed that is not a boolean, or given for a turn whose user message carries an id (the wrapper tells a re-send itself there), is refused with invalid_argument", () => {
    const once = release(new MemoryLedger(), [], "v2");
    const refused = (input: Record<string, unknown>) => {
      try {
        once.forTurn({ conversationId: "chat_deploy_tabs", ...input } as never);
        return undefined;
      } catch (error) {
        return InvalidArgumentError.isInstance(error) ? error.field : error;
      }
    };
    expect(refused({ messages: modelMessages, resumed: "yes" })).toBe("input.resumed");
    expect(refused({ messages: tabA, resumed: true })).toBe("input.resumed");
    expect(refused({ turnIndex: 2, resumed: true })).toBeUndefined();
    expect(refused({ messages: tabA, resumed: false })).toBeUndefined();
  });
});
