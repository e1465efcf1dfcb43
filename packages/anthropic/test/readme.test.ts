import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { describe, expect, it, vi } from "vitest";
import { createRunner, handleUserMessage, payments } from "../examples/adopt.js";

describe("README", () => {
  it("shows examples/adopt.ts verbatim", () => {
    const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");
    expect(readme).toContain(readFileSync(join(__dirname, "..", "examples", "adopt.ts"), "utf8").trim());
  });

  it("names only models the SDK knows and does not deprecate (it warns on every request otherwise)", () => {
    // The SDK's main entry is index.js at its root (its exports do not list package.json).
    const sdk = dirname(createRequire(import.meta.url).resolve("@anthropic-ai/sdk"));
    const union = /export type Model = ([^;]+);/.exec(readFileSync(join(sdk, "resources", "messages", "messages.d.ts"), "utf8"))?.[1] ?? "";
    const known = new Set([...union.matchAll(/'([^']+)'/g)].map((m) => m[1]));
    const deprecated = new Set([...readFileSync(join(sdk, "internal", "data", "deprecated-models.js"), "utf8").matchAll(/'(claude-[^']+)':/g)].map((m) => m[1]));
    expect(known.size).toBeGreaterThan(5);
    expect(deprecated.size).toBeGreaterThan(0);
    const texts = [readFileSync(join(__dirname, "..", "README.md"), "utf8"), readFileSync(join(__dirname, "..", "examples", "adopt.ts"), "utf8")];
    const named = texts.flatMap((t) => [...t.matchAll(/"(claude-[a-z0-9.-]+)"/g)].map((m) => m[1]));
    expect(named.length).toBeGreaterThan(0);
    for (const model of named) {
      expect(known.has(model), `${model} is in the SDK's Model union`).toBe(true);
      expect(deprecated.has(model), `${model} is not deprecated`).toBe(false);
    }
  });

  it("the adoption example survives a cut stream and a failed turn without paying twice", async () => {
    const pay = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay acme": turn(toolUse("send_payment", pay, { reword: ["memo"] })) }),
    });
    try {
      // Every response to the payment request dies after the payment and before message_stop.
      provider.setFaultRules([{ bodyContains: '"pay acme"}]', times: 3, fault: { kind: "reset", at: { beforeMessageStop: true } } }]);
      const warn = vi.spyOn(console, "warn");
      const runner = createRunner(new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      const failed = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      expect(failed).toBe("send_payment: happened");
      expect(payments).toHaveLength(1);

      // The user re-sends the same message: the turn now completes from the ledger.
      const answer = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      expect(answer).toContain("pay_1");
      expect(payments).toHaveLength(1);
      // The SDK warns on every request naming a deprecated model.
      expect(warn.mock.calls.filter((c) => String(c[0]).includes("deprecated"))).toEqual([]);
      warn.mockRestore();
    } finally {
      await provider.close();
    }
  });
});
