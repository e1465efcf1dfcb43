import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolError, defineTool, isDispatchOnceError } from "../src/index.js";
import { recordingLogger } from "./helpers.js";

/*
 * Application code the dispatcher calls, failing as application code does. The question each
 * time: is the effect performed at most once, does the row tell the truth, is the caller told it?
 */

const turn0 = { conversationId: "conv_hostile", turnIndex: 0 };

function world(result: () => unknown) {
  const payments: string[] = [];
  const pay = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int() }),
    async run(args) {
      payments.push(`${args.payee} ${args.amount}`);
      return result();
    },
  });
  const ledger = new MemoryLedger();
  const { logger } = recordingLogger();
  return { dispatcher: new Dispatcher({ tools: [pay], ledger, logger }), ledger, payments };
}

const call = (dispatcher: Dispatcher) =>
  dispatcher.dispatch({ name: "send_payment", input: { payee: "acme", amount: 5 } }, turn0).then(
    () => undefined,
    (error: unknown) => error,
  );

describe("DISPATCH-7 a result whose reading throws is a result that cannot be stored, wherever it throws", () => {
  const throwing = (): ProxyHandler<object> => ({
    getPrototypeOf() {
      throw new Error("trap");
    },
  });
  const results: [string, () => unknown][] = [
    // instanceof Map asks getPrototypeOf.
    ["a proxy whose getPrototypeOf trap throws", () => new Proxy({ paid: 5 }, throwing())],
    ["the same proxy nested in an array", () => ({ receipts: [new Proxy({ paid: 5 }, throwing())] })],
    [
      "a proxy over an array whose length cannot be read",
      () =>
        new Proxy([1], {
          get(target, name) {
            if (name === "length") throw new Error("trap");
            return Reflect.get(target, name) as unknown;
          },
        }),
    ],
    [
      "a proxy over an array that claims a length no array has (2^40)",
      () =>
        new Proxy([1], {
          get(target, name) {
            if (name === "length") return 2 ** 40;
            return Reflect.get(target, name) as unknown;
          },
        }),
    ],
    // A Map is refused, naming its class: reading the name throws.
    [
      "a proxy over a Map whose constructor cannot be read",
      () =>
        new Proxy(new Map(), {
          get(target, name) {
            if (name === "constructor") throw new Error("trap");
            return Reflect.get(target, name) as unknown;
          },
        }),
    ],
  ];
  for (const [name, result] of results) {
    it(`${name}: paid once, told result_not_storable (it happened), the row failed, never left in flight`, async () => {
      const w = world(result);
      const error = await call(w.dispatcher);
      expect(isDispatchOnceError(error, "result_not_storable"), String(error)).toBe(true);
      const { rows } = await w.ledger.listRows();
      expect(rows.map((row) => row.state)).toEqual(["failed"]);
      const again = await call(w.dispatcher);
      expect(isDispatchOnceError(again, "result_not_storable"), String(again)).toBe(true);
      expect(w.payments).toEqual(["acme 5"]);
    });
  }
});

describe("RECON-5 a probe's answer whose reading throws is the probe's failure, never the dispatch's error", () => {
  // The run threw a transport error (disposition unknown), so the dispatcher asks the tool's probe.
  const answers: [string, () => unknown, string, string][] = [
    ["its outcome getter throws", () => ({ get outcome(): string { throw new Error("getter"); } }), "claim_released", "released"],
    ["its reason getter throws (an unknown verdict)", () => ({ outcome: "unknown", get reason(): string { throw new Error("getter"); } }), "claim_released", "released"],
    ["its result getter throws (a performed verdict)", () => ({ outcome: "performed", get result(): unknown { throw new Error("getter"); } }), "result_not_storable", "failed"],
  ];
  for (const [name, answer, code, state] of answers) {
    it(`${name}: told ${code}, the row ${state}, never left in flight under a renewal`, async () => {
      const pay = defineTool({
        name: "send_payment",
        effect: "keyed_write",
        input: z.object({ payee: z.string() }),
        run: async () => {
          throw new ToolError("socket hang up", { disposition: "unknown" });
        },
        reconcile: async () => answer() as never,
      });
      const ledger = new MemoryLedger();
      const dispatcher = new Dispatcher({ tools: [pay], ledger, logger: recordingLogger().logger });
      const error = await dispatcher.dispatch({ name: "send_payment", input: { payee: "acme" } }, turn0).catch((e: unknown) => e);
      expect(isDispatchOnceError(error, code as "claim_released"), String(error)).toBe(true);
      const { rows } = await ledger.listRows();
      expect(rows.map((row) => row.state)).toEqual([state]);
    });
  }
});

describe("LEDGER-20 an application clock (MemoryLedger's and MemoryConversationStore's `now`) that answers no number is refused, never used", () => {
  // `now: () => new Date()` is the likely slip. Used, every lease had passed at once: a second
  // claimant took the live claim over (fence 2) while the first one's tool ran.
  const readings: [string, unknown][] = [
    ["a Date", new Date(0)],
    ["NaN", NaN],
    ["undefined", undefined],
  ];
  for (const [name, reading] of readings) {
    it(`${name}: the claim is refused with invalid_ledger_input (field now), no claim is taken over`, async () => {
      const ledger = new MemoryLedger({ now: () => reading as number });
      const request = { key: "k_clock", toolName: "send_payment", effect: "keyed_write" as const, owner: "a", leaseMs: 30_000, request: "{}" };
      const first = await ledger.claim(request).catch((e: unknown) => e);
      expect(isDispatchOnceError(first, "invalid_ledger_input"), JSON.stringify(first)).toBe(true);
      expect(first).toMatchObject({ field: "now" });
      const second = await ledger.claim({ ...request, owner: "b" }).catch((e: unknown) => e);
      expect(isDispatchOnceError(second, "invalid_ledger_input"), JSON.stringify(second)).toBe(true);
    });
    it(`${name}: the conversation store refuses its turn lease with invalid_store_input (field now)`, async () => {
      const store = new MemoryConversationStore({ now: () => reading as number });
      const error = await store.acquireLease("conv_clock", "runner-a", 30_000).catch((e: unknown) => e);
      expect(isDispatchOnceError(error, "invalid_store_input"), String(error)).toBe(true);
      expect(error).toMatchObject({ field: "now" });
    });
  }
});
