import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { call, respond, scriptFromPlans, startMockOpenAI, text } from "@dispatch-once/mock-openai";
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
      expect(stopped).toBe("send_payment: happened\nthe model stopped; please rephrase");
      expect(transfers.map((t) => t.payee)).toEqual(["acme"]);
    } finally {
      await provider.close();
    }
  });
});
