import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { call, respond, scriptFromPlans, startMockOpenAI } from "@dispatch-once/mock-openai";
import { createRunner, handleUserMessage, payments } from "../examples/adopt.js";
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
      expect(failed).toBe("send_payment: happened");
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
});
