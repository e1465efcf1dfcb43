import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { MemoryConversationStore, MemoryLedger, StoreUnavailableError } from "@dispatch-once/core";
import { call, respond, say, scriptFromPlans, startMockOpenAI, text } from "@dispatch-once/mock-openai";
import { pausedAtCommit } from "@dispatch-once/test-processes";
import { createChatRunner, payFromChat, transfers } from "../examples/chat-completions.js";
import { isPaymentRequest } from "./fixtures.js";

const ACME = { payee: "acme", amount: 100, currency: "EUR", reference: "INV-7" };
const BOB = { payee: "bob", amount: 40, currency: "EUR", reference: "LOAN-3" };

describe("README: Adopting it on Chat Completions", () => {
  it("the example survives a cut while the second call streams (the first already paid), and tells a length stop as not retryable", async () => {
    const provider = await startMockOpenAI({
      script: scriptFromPlans({ "pay acme and bob": respond(text("Paying both."), call("send_payment", ACME), call("send_payment", BOB)) }, { after: "Both paid." }),
    });
    try {
      transfers.length = 0;
      // The first response dies after acme's call is final (bob's first fragment arrived) and dispatched.
      provider.setFaultPlan((request, info) => (info.attempt === 1 && isPaymentRequest(request) ? { kind: "reset", at: { call: 1, afterFragment: 2 } } : undefined));
      const runner = createChatRunner(new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      const answer = await payFromChat(runner, "conv-chat-readme", "m1", "pay acme and bob");
      expect(transfers.map((t) => t.payee)).toEqual(["acme", "bob"]);
      expect(answer).toBe('send_payment {"paymentId":"pay_1"}\nsend_payment {"paymentId":"pay_2"}\nBoth paid.');
      // The system prompt went with each request; the store did not keep it.
      expect(provider.requests.every((r) => (r.body as { messages: { role: string }[] }).messages[0]!.role === "system")).toBe(true);

      // The model stops at its output limit inside bob's arguments: acme ran, bob never did, nothing committed.
      transfers.length = 0;
      provider.setFaultPlan((request) => (isPaymentRequest(request) ? { kind: "incomplete_event", at: { call: 1, afterFragment: 1 } } : undefined));
      const stopped = await payFromChat(runner, "conv-chat-readme-2", "m1", "pay acme and bob");
      // The record tells the effect that happened; bob, cut by the limit, was never run and is no effect.
      // Each effect is told with the request that ran (RECORD-10): which payment happened.
      const [effect, advice] = stopped.split("\n");
      expect(effect!.startsWith("send_payment: happened ")).toBe(true);
      expect(JSON.parse(effect!.slice("send_payment: happened ".length))).toEqual(ACME);
      expect(advice).toBe("the model stopped; please rephrase");
      expect(transfers.map((t) => t.payee)).toEqual(["acme"]);
    } finally {
      await provider.close();
    }
  });

  it("RECORD-9 the Chat Completions example tells the user a payment that happened when the store fails at the turn's end", async () => {
    // The Chat Completions trial (trials/app-chat-vllm): the payment ran, then PostgreSQL could not
    // keep the turn's end. The runner raises store_unavailable with what each call did (RECORD-9);
    // the example rethrew it, so the user was answered with a 500 and not told the payment was made.
    const provider = await startMockOpenAI({
      script: scriptFromPlans({ "pay acme, store down": respond(call("send_payment", ACME)) }, { after: "Paid." }),
    });
    class FailingOnce extends MemoryConversationStore {
      failNext = true;
      override async commitTurn(...args: Parameters<MemoryConversationStore["commitTurn"]>) {
        if (this.failNext) {
          this.failNext = false;
          throw new StoreUnavailableError("commitTurn failed: Connection terminated unexpectedly");
        }
        return super.commitTurn(...args);
      }
    }
    try {
      transfers.length = 0;
      const runner = createChatRunner(new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }), new FailingOnce());
      const told = await payFromChat(runner, "conv-chat-store-down", "m1", "pay acme, store down");
      const suffix = "; its confirmation was not saved, send the same message again";
      expect(told.startsWith("send_payment: happened ") && told.endsWith(suffix)).toBe(true);
      expect(JSON.parse(told.slice("send_payment: happened ".length, -suffix.length))).toEqual(ACME);
      expect(transfers.map((t) => t.payee)).toEqual(["acme"]);
      // The re-send of the same message id completes the turn from the ledger: no second payment.
      expect(await payFromChat(runner, "conv-chat-store-down", "m1", "pay acme, store down")).toBe('send_payment {"paymentId":"pay_1"}\nPaid.');
      expect(transfers.map((t) => t.payee)).toEqual(["acme"]);
    } finally {
      await provider.close();
    }
  });

  it("RECORD-8 the Chat Completions example tells the user a payment an earlier holder of the turn made that the committed answer does not", async () => {
    // Worker A paid and paused before its commit, past its turn lease; worker B resumed the turn
    // (TURN-15) and its model answered with text only: the turn's record (RECORD-8) names the payment.
    let requests = 0;
    const provider = await startMockOpenAI({
      script: () => (++requests === 1 ? respond(call("send_payment", { ...BOB, payee: "resumed" })) : say("I could not confirm the payment.")),
    });
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const { store: paused, reached } = pausedAtCommit(store);
    try {
      transfers.length = 0;
      const client = new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      void payFromChat(createChatRunner(client, paused, ledger), "conv-chat-resumed", "m1", "pay resumed");
      await reached;
      expect(transfers.map((t) => t.payee)).toEqual(["resumed"]);
      now += 10 * 60_000; // A's turn lease lapses while it is paused
      const told = await payFromChat(createChatRunner(client, store, ledger), "conv-chat-resumed", "m1", "pay resumed");
      expect(told).toContain("I could not confirm the payment.");
      expect(told).toContain("send_payment: happened");
      expect(told).toContain('"payee":"resumed"');
      expect(transfers.map((t) => t.payee)).toEqual(["resumed"]);
    } finally {
      await provider.close();
    }
  });

  it("the Chat Completions example tells a request the model server refuses for good as a refusal, not as a stop to rephrase", async () => {
    // The Chat Completions trial: vLLM started without --enable-auto-tool-choice answers a request
    // with tools 400. The record is not retryable; "the model stopped; please rephrase" sent the user
    // rewording a message no wording gets through.
    const provider = await startMockOpenAI({ script: scriptFromPlans({ "pay acme, refused": respond(call("send_payment", ACME)) }) });
    provider.setFaultPlan(() => ({ kind: "status", status: 400 }));
    try {
      transfers.length = 0;
      const runner = createChatRunner(new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      const told = await payFromChat(runner, "conv-chat-refused", "m1", "pay acme, refused");
      expect(told).toBe("the turn failed and sending it again will not help (400 Invalid request)");
      expect(transfers).toEqual([]);
    } finally {
      await provider.close();
    }
  });
});
