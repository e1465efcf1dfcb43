import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, ToolError, defineTool, effectOf, type DispatchEvent } from "../src/index.js";

const context = (conversationId: string) => ({ conversationId, turnIndex: 0 });
const call = { name: "pay", input: { to: "acme" } };

/** The dispatch's answer, or "pending" when it has none within `boundMs` (generous: no timing is asserted). */
async function answerWithin(p: Promise<unknown>, boundMs: number): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const pending = new Promise((r) => (timer = setTimeout(() => r("pending"), boundMs)));
  try {
    return await Promise.race([p.catch((e: unknown) => e), pending]);
  } finally {
    clearTimeout(timer);
  }
}

describe("DISPATCH-18 the bound covers the probe a throw asks (RECON-2)", () => {
  for (const effect of ["keyed_write", "unkeyed_write"] as const) {
    it(`DISPATCH-18 a ${effect} run throws an unknown-disposition error and its probe never answers: the dispatch is answered at the bound, the probe's signal aborted, the row settled as may-have-happened`, async () => {
      let probeSignal: AbortSignal | undefined;
      const tool = defineTool({
        name: "pay",
        effect,
        input: z.object({ to: z.string() }),
        run: async () => {
          throw new ToolError("socket hang up", { disposition: "unknown" });
        },
        reconcile: (_args, ctx) => {
          probeSignal = ctx.signal;
          return new Promise(() => {}); // a downstream's status endpoint that never answers
        },
      });
      const ledger = new MemoryLedger();
      const events: DispatchEvent[] = [];
      const d = new Dispatcher({ tools: [tool], ledger, leaseMs: 200, runTimeoutMs: 300, allowVolatileLedgerForUnkeyedWrites: true, onEvent: (e) => events.push(e) });
      const answer = await answerWithin(d.turn(context(`c-probe-${effect}`)).dispatch(call), 10_000);
      expect(answer).not.toBe("pending");
      expect(effectOf(answer)).toBe("possibly");
      expect(probeSignal?.aborted).toBe(true);
      const key = d.keyFor(call, context(`c-probe-${effect}`));
      // The lease is no longer renewed: the row is settled (released or unknown), never left held.
      const row = await ledger.lookup(key);
      expect(row?.state).toBe(effect === "keyed_write" ? "released" : "unknown");
    });
  }

  it("DISPATCH-18 RECON-7 a run whose result cannot be stored, its probe never answering: the dispatch is answered (result_not_storable, the effect happened) within a bound, the row failed closed", async () => {
    let probeSignal: AbortSignal | undefined;
    const tool = defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string() }),
      run: async () => ({ receipt: "x".repeat(200) }),
      reconcile: (_args, ctx) => {
        probeSignal = ctx.signal;
        return new Promise(() => {});
      },
    });
    const ledger = new MemoryLedger({ maxResultBytes: 64 });
    const d = new Dispatcher({ tools: [tool], ledger, runTimeoutMs: 300 });
    const answer = await answerWithin(d.turn(context("c-unstorable")).dispatch(call), 10_000);
    expect(answer).toMatchObject({ code: "result_not_storable" });
    expect(effectOf(answer)).toBe("yes");
    expect(probeSignal?.aborted).toBe(true);
    expect(await ledger.lookup(d.keyFor(call, context("c-unstorable")))).toMatchObject({ state: "failed", error: { code: "result_not_storable" } });
  });
});
