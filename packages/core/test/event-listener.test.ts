import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, ToolError, defineTool, type DispatchEvent } from "../src/index.js";
import { recordingLogger } from "./helpers.js";

/*
 * OTEL-3: events are reports. An application's own onEvent (a metrics emitter, an audit log) that
 * throws, or returns a promise that rejects, must change nothing a dispatch does or tells: the
 * payment it reports on was made (or not) whatever the listener did, and the caller is told that.
 */

const turn0 = { conversationId: "conv_listener", turnIndex: 0 };

function world(throwOn: DispatchEvent["type"] | undefined, how: "throw" | "reject" = "throw", outcome: "pays" | "declines" = "pays") {
  const payments: string[] = [];
  const pay = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int() }),
    async run(args) {
      if (outcome === "declines") throw new ToolError("card declined", { disposition: "definite" });
      payments.push(`${args.payee} ${args.amount}`);
      return { paid: args.amount };
    },
  });
  const ledger = new MemoryLedger();
  const seen: string[] = [];
  const { logger, warnings } = recordingLogger();
  const dispatcher = new Dispatcher({
    tools: [pay],
    ledger,
    logger,
    onEvent: (event) => {
      seen.push(event.type);
      if (event.type !== throwOn) return;
      if (how === "reject") return Promise.reject(new Error("exporter down")) as unknown as void;
      throw new Error("exporter down");
    },
  });
  return { dispatcher, ledger, payments, seen, warnings };
}

const call = (dispatcher: Dispatcher) => dispatcher.dispatch({ name: "send_payment", input: { payee: "acme", amount: 5 } }, turn0);

describe("OTEL-3 an onEvent that throws changes nothing a dispatch does or tells", () => {
  for (const type of ["claimed", "run_started", "run_finished", "recorded"] as const) {
    for (const how of ["throw", "reject"] as const) {
      it(`a listener that ${how}s on '${type}': paid once, told it was paid, the row completed, a replay answered from it, the listener's error logged`, async () => {
        const w = world(type, how);
        const first = await call(w.dispatcher);
        expect(first.result).toEqual({ paid: 5 });
        expect(w.payments).toEqual(["acme 5"]);
        const again = await call(w.dispatcher);
        expect([again.replayed, again.result]).toEqual([true, { paid: 5 }]);
        expect(w.payments).toEqual(["acme 5"]);
        expect(w.seen).toContain(type);
        await new Promise((resolve) => setImmediate(resolve));
        expect(w.warnings.map((x) => [x.message, x.fields?.["type"]])).toContainEqual([expect.stringMatching(/onEvent/), type]);
      });
    }
  }

  it("a listener that throws on 'recorded' of a declined payment: told declined (tool_failed, nothing happened), not the listener's error", async () => {
    const w = world("recorded", "throw", "declines");
    const error = await call(w.dispatcher).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: "tool_failed" });
    expect(w.payments).toEqual([]);
  });

  it("a listener that throws on 'replayed': the replay still answers the stored result", async () => {
    const w = world("replayed");
    await call(w.dispatcher);
    const again = await call(w.dispatcher);
    expect([again.replayed, again.result]).toEqual([true, { paid: 5 }]);
    expect(w.payments).toEqual(["acme 5"]);
  });
});
