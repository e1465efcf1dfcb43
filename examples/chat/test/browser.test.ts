import { tenantConversationId } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Browser } from "./chromium.js";
import { TENANT, startWorld, type World } from "./harness.js";

/**
 * The chat page in headless Chromium against the example backend, the mock provider and mock
 * payments. Every scenario is judged three ways: the mock payments effect log (what happened in
 * the world), the page (what the user saw), and the conversation store (what was committed).
 */
let world: World;
let browser: Browser;
const CONVERSATION = `browser-${process.pid}`;
const conversationId = tenantConversationId(TENANT, CONVERSATION);

/** Records, per assistant bubble, every text it showed and every attempt span removed from it. */
const RECORDER = `
  window.__seen = {};
  const seen = (id) => (window.__seen[id] ??= { texts: [], removed: [] });
  new MutationObserver((records) => {
    for (const r of records) {
      const bubble = (r.target.nodeType === 1 ? r.target : r.target.parentElement)?.closest(".assistant");
      if (!bubble) continue;
      for (const node of r.removedNodes) {
        if (node.nodeType === 1 && node.dataset.attempt !== undefined) {
          seen(bubble.dataset.messageId).removed.push({ turn: r.target.dataset.turn, attempt: node.dataset.attempt, text: node.textContent });
        }
      }
      const body = bubble.querySelector(".body");
      const s = seen(bubble.dataset.messageId);
      if (body && s.texts.at(-1)?.text !== body.textContent) s.texts.push({ state: bubble.dataset.state, text: body.textContent });
    }
  }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
  true`;

interface Bubble {
  id: string;
  state: string | undefined;
  text: string;
  status: string;
  fromStore: string | undefined;
  reconciled: string | undefined;
  discarded: string | undefined;
  problem: string | undefined;
  attempts: { turn: string; attempt: string; text: string }[];
  seen: { texts: { state: string; text: string }[]; removed: { turn: string; attempt: string; text: string }[] };
}

async function lastBubble(): Promise<Bubble> {
  return browser.evaluate<Bubble>(`(() => {
    const b = [...document.querySelectorAll(".assistant")].at(-1);
    return {
      id: b.dataset.messageId, state: b.dataset.state, text: b.querySelector(".body").textContent,
      status: b.querySelector(".status").textContent, fromStore: b.dataset.fromStore, reconciled: b.dataset.reconciled,
      discarded: b.dataset.discarded, problem: b.dataset.problem,
      attempts: [...b.querySelectorAll("[data-attempt]")].map((s) => ({ turn: s.parentElement.dataset.turn, attempt: s.dataset.attempt, text: s.textContent })),
      seen: window.__seen[b.dataset.messageId] ?? { texts: [], removed: [] },
    };
  })()`);
}

async function type(text: string): Promise<void> {
  await browser.evaluate(`(() => { document.getElementById("text").value = ${JSON.stringify(text)}; document.getElementById("send").click(); return true })()`);
}

const settled = `["answered", "failed"].includes([...document.querySelectorAll(".assistant")].at(-1)?.dataset.state)`;

beforeAll(async () => {
  world = await startWorld();
  browser = await Browser.launch();
  await browser.goto(`${world.url}/?c=${CONVERSATION}`);
  await browser.evaluate(RECORDER);
});

afterAll(async () => {
  await browser?.close();
  await world?.close();
});

describe("the chat page in headless Chromium", () => {
  it("streams the assistant's text as it arrives, then shows the committed answer", async () => {
    world.provider.setTiming({ betweenEventsMs: 30 });
    try {
      await type("pay acme 12.00 EUR for INV-stream");
      await browser.waitFor(settled);
    } finally {
      world.provider.setTiming({ betweenEventsMs: 0 });
    }
    const bubble = await lastBubble();
    const [payment] = world.paymentsFor("INV-stream");
    expect(world.paymentsFor("INV-stream")).toHaveLength(1);
    expect(bubble).toMatchObject({ state: "answered", fromStore: "false" });
    expect(bubble.reconciled).toBeUndefined(); // what streamed was the answer: nothing replaced
    expect(bubble.text).toBe(`Sending 12.00 EUR to acme. Done: payment ${payment!.resourceId} was sent.`);
    // Streamed: the page showed growing partial text before the answer arrived.
    const partial = bubble.seen.texts.filter((t) => t.state === "streaming" && t.text.length > 0 && t.text.length < bubble.text.length);
    expect(partial.length).toBeGreaterThan(2);
    for (const t of partial) expect(bubble.text.startsWith(t.text)).toBe(true);
    // The store committed what the page shows.
    const turns = await world.backend.store.turnsOf(conversationId, bubble.id);
    expect(turns.map((t) => t.stopReason)).toEqual(["tool_use", "end_turn"]);
    expect(JSON.stringify(turns[1]!.assistant)).toContain(payment!.resourceId);
  });

  it("a stream cut after the payment ran and before message_stop is retried: one payment, the void attempt's text removed, the answer shown", async () => {
    // The first response to the next request pauses before message_stop; the test cuts it once
    // the payment is in the effect log.
    world.provider.faults.enqueue({ kind: "hold", at: { beforeMessageStop: true } });
    const requestsBefore = world.provider.requests.length;
    await type("pay acme 125.00 EUR for INV-cut");
    const held = await world.provider.waitForHold(undefined, { timeoutMs: 20_000 });
    await browser.waitFor(`[...document.querySelectorAll(".assistant")].at(-1).querySelector('[data-turn] [data-attempt="1"]')?.textContent.length > 0`);
    for (let i = 0; world.paymentsFor("INV-cut").length === 0; i++) {
      if (i > 400) throw new Error("the payment never reached mock payments");
      await new Promise((r) => setTimeout(r, 25));
    }
    const during = await lastBubble();
    expect(during.text).toBe("Sending 125.00 EUR to acme. ");
    world.provider.cutNow(held.requestNumber, "reset");
    await browser.waitFor(settled);

    const bubble = await lastBubble();
    const effects = world.paymentsFor("INV-cut");
    expect(effects).toHaveLength(1); // exactly one payment in the world
    const paymentId = effects[0]!.resourceId;
    // The page: the discarded attempt's text went, the retry's text and the answer are shown, once.
    expect(bubble).toMatchObject({ state: "answered", fromStore: "false", discarded: "1" });
    expect(bubble.reconciled).toBeUndefined(); // the discard alone made the page right
    expect(bubble.text).toBe(`Sending 125.00 EUR to acme. Done: payment ${paymentId} was sent.`);
    const t0 = Number(bubble.attempts[0]!.turn);
    expect(bubble.seen.removed).toEqual([{ turn: String(t0), attempt: "1", text: "Sending 125.00 EUR to acme. " }]);
    expect(bubble.attempts.map((a) => [a.turn, a.attempt])).toEqual([[String(t0), "2"], [String(t0 + 1), "1"]]);
    // The model was asked three times: the cut attempt, its retry, the closing turn.
    expect(world.provider.requests.length - requestsBefore).toBe(3);
    // The store: the turn committed once, with the one payment's result; no failure recorded.
    const turns = await world.backend.store.turnsOf(conversationId, bubble.id);
    expect(turns.map((t) => t.turnIndex)).toEqual([t0, t0 + 1]);
    expect(JSON.stringify(turns[0]!.toolResults)).toContain(paymentId);
    expect((await world.backend.store.message(conversationId, bubble.id))?.state).toBe("answered");
    const records = (await world.backend.store.records(conversationId)) as { messageId?: string }[];
    expect(records.filter((r) => r.messageId === bubble.id)).toEqual([]);
  });

  it("a failed turn tells the page to re-send the same id; the re-send is answered and pays once in total", async () => {
    // Every attempt of the next turn dies before message_stop (the payment runs in the first).
    world.provider.setFaultRules([{ bodyContains: "INV-fail", times: 3, fault: { kind: "reset", at: { beforeMessageStop: true } } }]);
    await type("pay acme 80.00 EUR for INV-fail");
    await browser.waitFor(settled);
    const failed = await lastBubble();
    expect(world.paymentsFor("INV-fail")).toHaveLength(1);
    // Nothing the stream did not establish is shown: every attempt's text was discarded.
    expect(failed).toMatchObject({ state: "failed", problem: "turn_failed", text: "", discarded: "3" });
    expect(failed.status).toContain("send_payment: happened");
    expect(await browser.evaluate<string>(`[...document.querySelectorAll(".assistant")].at(-1).querySelector("button.resend")?.textContent ?? ""`)).toBe("Re-send");
    const message = await world.backend.store.message(conversationId, failed.id);
    expect(message?.state).toBe("failed");
    expect(await world.backend.store.turnsOf(conversationId, failed.id)).toEqual([]);

    world.provider.setFaultRules([]);
    await browser.evaluate(`[...document.querySelectorAll(".assistant")].at(-1).querySelector("button.resend").click(), true`);
    await browser.waitFor(`[...document.querySelectorAll(".assistant")].at(-1).dataset.state === "answered"`);
    const answered = await lastBubble();
    const effects = world.paymentsFor("INV-fail");
    expect(effects).toHaveLength(1); // the re-send was answered from the ledger, not paid again
    expect(answered.id).toBe(failed.id);
    expect(answered.text).toBe(`Sending 80.00 EUR to acme. Done: payment ${effects[0]!.resourceId} was sent.`);
    const turns = await world.backend.store.turnsOf(conversationId, failed.id);
    expect(turns.map((t) => t.turnIndex)).toEqual([message!.turnIndex, message!.turnIndex! + 1]); // the failed turn's index (TURN-12)
    expect(JSON.stringify(turns[0]!.toolResults)).toContain(effects[0]!.resourceId);
  });

  it("re-sending an answered message returns the stored answer: no model call, no payment", async () => {
    const before = await lastBubble();
    expect(before.state).toBe("answered");
    const requests = world.provider.requests.length;
    const payments = world.payments.effects({ kind: "payment_created" }).length;
    const turns = await world.backend.store.turnsOf(conversationId, before.id);
    await browser.evaluate(`[...document.querySelectorAll(".assistant")].at(-1).querySelector("button.resend").click(), true`);
    await browser.waitFor(`[...document.querySelectorAll(".assistant")].at(-1).dataset.fromStore === "true"`);
    const after = await lastBubble();
    expect(after).toMatchObject({ id: before.id, state: "answered", fromStore: "true", text: before.text });
    expect(world.provider.requests.length).toBe(requests);
    expect(world.payments.effects({ kind: "payment_created" })).toHaveLength(payments);
    expect(await world.backend.store.turnsOf(conversationId, before.id)).toEqual(turns);
  });
});
