import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { afterAll, beforeAll } from "vitest";
import { PAY_ZOE } from "./byte-cut-cases.js";
import { startByteProxy, type ByteProxy } from "./byte-proxy.js";

/** What the user asks in every mock-provider byte-cut file: the model answers with one `send_payment` of PAY_ZOE. */
export const PROMPT = "pay Zoë";

/** A mock-provider file's servers: the provider, the byte proxy in front of one of its routes, and mock-payments. */
export interface ByteCutWorld {
  provider: MockProvider;
  proxy: ByteProxy;
  payments: MockPaymentsServer;
}

/**
 * Starts a file's servers before its tests and closes them after: mock-provider scripted with
 * `seed` (the model pays PAY_ZOE at PROMPT), the byte proxy in front of the route `route` picks
 * (the Messages API, Bedrock's, Gemini's...), and mock-payments. The members are there once the
 * file's `beforeAll` ran: read them in tests, not at module load.
 */
export function byteCutWorld(seed: string, route: (provider: MockProvider) => string): ByteCutWorld {
  const world = {} as ByteCutWorld;
  beforeAll(async () => {
    world.provider = await startMockProvider({ seed, script: scriptFromPlans({ [PROMPT]: turn(toolUse("send_payment", PAY_ZOE)) }) });
    world.proxy = await startByteProxy(route(world.provider));
    world.payments = await startMockPayments({ latencyMs: 0 });
  });
  afterAll(async () => {
    await world.proxy?.close();
    await world.provider?.close();
    await world.payments?.close();
  });
  return world;
}
