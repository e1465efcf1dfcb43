import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { MemoryConversationStore, MemoryLedger, StoreUnavailableError } from "@dispatch-once/core";
import { call, respond, say, scriptFromPlans, startMockOpenAI } from "@dispatch-once/mock-openai";
import { createRunner, handleUserMessage, payments } from "../examples/adopt.js";
import { pausedAtCommit } from "@dispatch-once/test-processes";
import { isPaymentRequest } from "./fixtures.js";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");

  it("shows every file of examples/ verbatim", () => {
    const files = readdirSync(join(__dirname, "..", "examples")).filter((f) => f.endsWith(".ts"));
    expect(files).toContain("adopt.ts");
    for (const file of files) {
      expect(readme, file).toContain(readFileSync(join(__dirname, "..", "examples", file), "utf8").trim());
    }
  });

  it("the adoption example survives a cut stream without paying twice, and never reports a refused payment as made", async () => {
    const pay = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockOpenAI({
      // The scripted model says "Payment sent." whatever the output says: what the user is told must not rest on it.
      script: scriptFromPlans(
        { "pay acme": respond(call("send_payment", pay, { reword: ["memo"] })), "pay acme a lot": respond(call("send_payment", { ...pay, amount: 5_000_000 })) },
        { after: "Payment sent." },
      ),
    });
    try {
      // Every response to the first payment request dies after the call, before response.completed.
      let cuts = 0;
      provider.setFaultPlan((request) => (isPaymentRequest(request) && JSON.stringify(request.input).includes('"pay acme"') && ++cuts <= 3 ? { kind: "reset", at: { beforeCompleted: true } } : undefined));
      const runner = createRunner(new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      const failed = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      // Which payment, with the arguments that ran (the first attempt's memo, not a replay's re-wording).
      expect(failed.split("\n")[0]).toBe('send_payment: happened {"payee":"acme","currency":"EUR","amount":100,"memo":"May"}');
      // RECORD-5 and what to do: the record is retryable, so the user is told the re-send completes it.
      expect(failed).toContain("send the same message again");
      expect(payments).toHaveLength(1);

      // The user re-sends the same message: the turn now completes from the ledger.
      const answer = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      expect(answer).toContain("pay_1");
      expect(payments).toHaveLength(1);

      const refused = await handleUserMessage(runner, "conv-1", "msg-2", "pay acme a lot");
      expect(refused).toContain("send_payment failed: amount over the account's limit");
      expect(payments).toHaveLength(1);
    } finally {
      await provider.close();
    }
  });

  it("RECORD-5 the adoption example tells the user to re-send only a failed turn the record says a re-send can help (a permanent 400 is not a lost connection)", async () => {
    const provider = await startMockOpenAI({ script: scriptFromPlans({ "pay bad": say("no"), "pay later": say("no") }) });
    try {
      const runner = createRunner(new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      provider.setFaultPlan((request) => (JSON.stringify(request.input).includes('"pay bad"') ? { kind: "status", status: 400 } : JSON.stringify(request.input).includes('"pay later"') ? { kind: "status", status: 429 } : undefined));
      const refused = await handleUserMessage(runner, "conv-400", "msg-1", "pay bad");
      expect(refused).not.toMatch(/retry|connection lost/);
      expect(refused).toContain("sending it again will not help");
      expect(refused).toContain("400");
      // Throttled on every attempt: nothing ran, and the same message can be sent again.
      const throttled = await handleUserMessage(runner, "conv-429", "msg-1", "pay later");
      expect(throttled).toMatch(/send the same message again/);
      expect(throttled).not.toContain("will not help");
    } finally {
      await provider.close();
    }
  });

  it("RECORD-8 the adoption example tells the user a payment an earlier holder of the turn made that the committed answer does not", async () => {
    // Worker A paid and paused before its commit, past its turn lease; worker B resumed the turn
    // (TURN-15) and its model answered with text only: the turn's record (RECORD-8) names the payment.
    let requests = 0;
    const provider = await startMockOpenAI({
      script: () => (++requests === 1 ? respond(call("send_payment", { payee: "resumed", amount: 70, currency: "EUR", memo: "x" })) : say("I could not confirm the payment.")),
    });
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const { store: paused, reached } = pausedAtCommit(store);
    try {
      const client = new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      const before = payments.length;
      void handleUserMessage(createRunner(client, paused, ledger), "conv-resumed", "msg-1", "pay resumed");
      await reached;
      expect(payments).toHaveLength(before + 1);
      now += 10 * 60_000; // A's turn lease lapses while it is paused
      const told = await handleUserMessage(createRunner(client, store, ledger), "conv-resumed", "msg-1", "pay resumed");
      expect(told).toContain("I could not confirm the payment.");
      expect(told).toContain("send_payment: happened");
      expect(told).toContain('"payee":"resumed"');
      expect(payments).toHaveLength(before + 1);
    } finally {
      await provider.close();
    }
  });

  it("RECORD-9 the adoption example tells the user a payment that happened when the store fails at the turn's end", async () => {
    // The adoption trial's PostgreSQL outage: the payment ran, then the store could not keep the
    // turn's end. The runner raises store_unavailable with what each call did; the example must
    // say so, not rethrow it as a bare 500 (the user would re-pay by hand).
    const provider = await startMockOpenAI({
      script: scriptFromPlans({ "pay acme from the trial": respond(call("send_payment", { payee: "trial", amount: 300, currency: "EUR", memo: "x" })) }, { after: "Payment sent." }),
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
      const runner = createRunner(new OpenAI({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }), new FailingOnce());
      const before = payments.length;
      const told = await handleUserMessage(runner, "conv-store-down", "msg-1", "pay acme from the trial");
      expect(told).toBe('send_payment: happened {"amount":300,"payee":"trial","currency":"EUR","memo":"x"}; its confirmation was not saved, send the same message again');
      expect(payments).toHaveLength(before + 1);
      // The re-send of the same message id completes the turn from the ledger: no second payment.
      expect(await handleUserMessage(runner, "conv-store-down", "msg-1", "pay acme from the trial")).toContain(`pay_${before + 1}`);
      expect(payments).toHaveLength(before + 1);
    } finally {
      await provider.close();
    }
  });
});
