import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { createAnthropic } from "@ai-sdk/anthropic";
import { MemoryLedger, isDispatchOnceError } from "@dispatch-once/core";
import { say, scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { wrapLanguageModel, type UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { chatRoute } from "../examples/route.js";
import { providerToolsGuard, spliceGuard, type UnansweredCallRecord } from "../src/index.js";
import { drain, outputsOf, settled } from "./helpers.js";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");

  it("shows every file of examples/ verbatim", () => {
    const files = readdirSync(join(__dirname, "..", "examples")).filter((f) => f.endsWith(".ts"));
    expect(files).toEqual(["route.ts"]);
    for (const file of files) expect(readme, file).toContain(readFileSync(join(__dirname, "..", "examples", file), "utf8").trim());
  });

  it("the route pays once across a regenerate of the turn, and again in the next turn", async () => {
    const payments = await startMockPayments({ requireIdempotencyKey: true });
    const provider = await startMockProvider({ seed: "readme", script: scriptFromPlans({ "pay acme": turn(toolUse("send_payment", { payee: "acme", amount: 12_500 })) }) });
    try {
      // As the README says: the model the route gets is guarded (AISDK-15, AISDK-16).
      const model = wrapLanguageModel({ model: createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5"), middleware: [providerToolsGuard(), spliceGuard()] });
      const route = chatRoute(model, new MemoryLedger(), payments.url, () => {});
      const ask: UIMessage = { id: "m1", role: "user", parts: [{ type: "text", text: "pay acme" }] };
      const first = outputsOf(await drain((await route("chat_readme", [ask])).fullStream));
      const regenerated = outputsOf(await drain((await route("chat_readme", [ask])).fullStream));
      expect(payments.effects().length).toBe(1);
      expect(first).toHaveLength(1);
      expect(regenerated).toEqual(first);
      const answer: UIMessage = { id: "m2", role: "assistant", parts: [{ type: "text", text: "Paid." }] };
      await drain((await route("chat_readme", [ask, answer, { ...ask, id: "m3" }])).fullStream);
      expect(payments.effects().length).toBe(2);
    } finally {
      await provider.close();
      await payments.close();
    }
  });

  it("a payment the payments API refused is not a result: the tool fails with its code, and the regenerate pays, once", async () => {
    const payments = await startMockPayments({ requireIdempotencyKey: true });
    const provider = await startMockProvider({ seed: "readme", script: scriptFromPlans({ "pay acme": turn(toolUse("send_payment", { payee: "acme", amount: 12_500 })) }) });
    try {
      const route = chatRoute(createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5"), new MemoryLedger(), payments.url, () => {});
      const ask: UIMessage = { id: "m1", role: "user", parts: [{ type: "text", text: "pay acme" }] };
      payments.injectFault({ outcome: "fail_before_accept" }, { times: 1 }); // 503: nothing performed
      const refused = await drain((await route("chat_refused", [ask])).fullStream);
      expect(outputsOf(refused)).toEqual([]);
      const error = (refused.find((p) => p.type === "tool-error") as { error?: unknown } | undefined)?.error;
      expect(isDispatchOnceError(error, "claim_released")).toBe(true);
      const regenerated = outputsOf(await drain((await route("chat_refused", [ask])).fullStream));
      expect(payments.effects().length).toBe(1);
      expect(regenerated).toMatchObject([{ id: payments.effects()[0]!.resourceId, amount: 12_500 }]);
    } finally {
      await provider.close();
      await payments.close();
    }
  });

  it("a regenerate after a cut whose model asks a question instead is told of the payment the cut request made (AISDK-14)", async () => {
    const payments = await startMockPayments({ requireIdempotencyKey: true });
    let requests = 0;
    const provider = await startMockProvider({
      seed: "readme",
      // The first request pays and is cut after the call; its regenerate's model asks a question instead.
      script: () => (requests++ === 0 ? turn(toolUse("send_payment", { payee: "acme", amount: 12_500 })) : turn(say("Which account should I pay from?"))),
      faultPlan: (_request, info) => (info.requestNumber === 1 ? { kind: "reset", at: { afterToolUseStop: 0 } } : undefined),
    });
    try {
      const told: UnansweredCallRecord[][] = [];
      const ledger = new MemoryLedger();
      const route = chatRoute(createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5"), ledger, payments.url, (_chat, calls) => told.push(calls));
      const ask: UIMessage = { id: "m1", role: "user", parts: [{ type: "text", text: "pay acme" }] };
      const cut = await drain((await route("chat_told", [ask])).fullStream);
      expect(cut.some((p) => p.type === "error")).toBe(true);
      // The call ran from its tool-call part and goes on after the cut: let it finish, so its row says what happened.
      await settled(ledger, "chat_told");
      const regenerated = await drain((await route("chat_told", [ask])).fullStream);
      expect(outputsOf(regenerated)).toEqual([]);
      expect(payments.effects().length).toBe(1);
      expect(told).toEqual([[expect.objectContaining({ name: "send_payment", effect: "happened", result: expect.objectContaining({ id: payments.effects()[0]!.resourceId }) })]]);
    } finally {
      await provider.close();
      await payments.close();
    }
  });

  it("the route's guarded model fails a request whose stream carries a spliced response; its re-send pays each payee once (AISDK-16)", async () => {
    const payments = await startMockPayments({ requireIdempotencyKey: true });
    const provider = await startMockProvider({
      seed: "readme",
      script: scriptFromPlans({ "pay acme and bob": turn(toolUse("send_payment", { payee: "acme", amount: 5 }), toolUse("send_payment", { payee: "bob", amount: 7 })) }),
      // A proxy splices a re-sent request's response into the first body, headless, after acme's tool_use.
      faultPlan: (_request, info) => (info.requestNumber === 1 ? { kind: "splice", at: { afterToolUseStop: 0 }, messageStart: false } : undefined),
    });
    try {
      const ledger = new MemoryLedger();
      const model = wrapLanguageModel({ model: createAnthropic({ baseURL: `${provider.baseURL}/v1`, apiKey: "test" })("claude-sonnet-4-5"), middleware: [providerToolsGuard(), spliceGuard()] });
      const route = chatRoute(model, ledger, payments.url, () => {});
      const ask: UIMessage = { id: "m1", role: "user", parts: [{ type: "text", text: "pay acme and bob" }] };
      const spliced = await drain((await route("chat_spliced", [ask])).fullStream);
      expect(spliced.some((p) => p.type === "error" && isDispatchOnceError(p.error, "stream_incomplete"))).toBe(true);
      await settled(ledger, "chat_spliced");
      await drain((await route("chat_spliced", [ask])).fullStream);
      await settled(ledger, "chat_spliced");
      expect(payments.effects().map((e) => e.payload["payee"]).sort()).toEqual(["acme", "bob"]);
    } finally {
      await provider.close();
      await payments.close();
    }
  });
});
