import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner } from "@dispatch-once/anthropic";
import { Dispatcher, MemoryLedger, defineTool, type ConversationStore } from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProviderOptions } from "@dispatch-once/mock-provider";
import { z } from "zod";

export const HOUR = 60 * 60 * 1000;

/**
 * A "pay acme" world over a durable store, shared by the TURN-12 scenarios of the SQLite and
 * PostgreSQL suites: the real SDK against the mock provider, a memory ledger on a test clock (the
 * caller moves it, and the store's where it reads the same clock), and the payment as the test's
 * own counter. `runnerOver(store)` is one process's runner over the store given.
 */
export async function payAcmeWorld(options: { faultRules?: MockProviderOptions["faultRules"]; attempts?: number } = {}) {
  let now = 1_000_000;
  const ledger = new MemoryLedger({ now: () => now });
  const paid: unknown[] = [];
  const provider = await startMockProvider({
    script: scriptFromPlans({ "pay acme": turn(toolUse("pay", { to: "acme" })) }),
    ...(options.faultRules !== undefined ? { faultRules: options.faultRules } : {}),
  });
  const runnerOver = (store: ConversationStore) => {
    const pay = defineTool({ name: "pay", effect: "keyed_write", input: z.object({ to: z.string() }), identity: ["to"], run: async (args) => ({ n: paid.push(args) }) });
    return new ConversationRunner({
      client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
      dispatcher: new Dispatcher({ tools: [pay], ledger }),
      store,
      model: "claude-test",
      tools: [{ name: "pay", input_schema: { type: "object" } }],
      retry: { ...(options.attempts !== undefined ? { attempts: options.attempts } : {}), backoffMs: () => 5 },
      turnLeaseMs: 1_000,
    });
  };
  return {
    ledger,
    paid,
    runnerOver,
    /** How many requests the mock provider has seen. */
    requestCount: () => provider.requests.length,
    clock: () => now,
    advance: (ms: number) => void (now += ms),
    close: () => provider.close(),
  };
}
