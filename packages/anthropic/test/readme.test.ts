import { readFileSync } from "node:fs";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { describe, expect, it } from "vitest";
import { createRunner, handleUserMessage, payments } from "../examples/adopt.js";

describe("README", () => {
  it("shows examples/adopt.ts verbatim", () => {
    const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");
    expect(readme).toContain(readFileSync(join(__dirname, "..", "examples", "adopt.ts"), "utf8").trim());
  });

  it("the adoption example survives a cut stream and a failed turn without paying twice", async () => {
    const pay = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay acme": turn(toolUse("send_payment", pay, { reword: ["memo"] })) }),
    });
    try {
      // Every response to the payment request dies after the payment and before message_stop.
      provider.setFaultRules([{ bodyContains: '"pay acme"}]', times: 3, fault: { kind: "reset", at: { beforeMessageStop: true } } }]);
      const runner = createRunner(new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      const failed = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      expect(failed).toBe("send_payment: happened");
      expect(payments).toHaveLength(1);

      // The user re-sends the same message: the turn now completes from the ledger.
      const answer = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      expect(answer).toContain("pay_1");
      expect(payments).toHaveLength(1);
    } finally {
      await provider.close();
    }
  });
});
