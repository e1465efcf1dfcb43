import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, defineTool, isDispatchOnceError } from "../src/index.js";
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
