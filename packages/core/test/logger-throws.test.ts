// A user's logger is a dependency like any other: it can throw (a full disk, a closed transport) or
// return a promise that rejects (an async logger). What it does must never change what a dispatch
// does or tells, nor become an unhandled rejection in a background handler (a renewal's warning).
import { afterEach, describe, expect, it, vi } from "vitest";
import { Dispatcher, MemoryLedger, type DispatchLogger } from "../src/index.js";
import { fakePayments } from "./helpers.js";

const turn0 = { conversationId: "conv-logger", turnIndex: 0 };
const pay = { payee: "acme", amount: 12_500, currency: "EUR" };

/** Loggers that fail the way real ones do, each counting the warnings it was handed. */
function failingLoggers() {
  const calls = { throwing: 0, rejecting: 0 };
  const throwing: DispatchLogger = {
    warn: () => {
      calls.throwing += 1;
      throw new Error("ENOSPC: no space left on device, write");
    },
  };
  const rejecting = {
    warn: () => {
      calls.rejecting += 1;
      return Promise.reject(new Error("log transport closed"));
    },
  } as unknown as DispatchLogger;
  return { calls, loggers: [["throws", throwing, "throwing"], ["rejects", rejecting, "rejecting"]] as const };
}

/** Unhandled rejections seen while `body` runs and a few ticks after. */
async function unhandledDuring(body: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const onRejection = (reason: unknown) => seen.push(reason);
  process.on("unhandledRejection", onRejection);
  try {
    await body();
    await new Promise((r) => setTimeout(r, 50));
  } finally {
    process.off("unhandledRejection", onRejection);
  }
  return seen;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("a logger that fails never changes a dispatch (DISPATCH-6, LEDGER-9)", () => {
  const { calls, loggers } = failingLoggers();

  for (const [how, logger, counter] of loggers) {
    it(`DISPATCH-6 a logger that ${how} on the warning of a repeated call in one turn: both calls still run, each told its own result`, async () => {
      const errors = vi.spyOn(console, "error").mockImplementation(() => {});
      const { tool, effects } = fakePayments();
      const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), logger });
      const before = calls[counter];
      const unhandled = await unhandledDuring(async () => {
        const turn = dispatcher.turn(turn0);
        const first = await turn.dispatch({ name: "send_payment", input: pay });
        const second = await turn.dispatch({ name: "send_payment", input: pay });
        expect(first.result).toEqual({ paymentId: "pay_1", status: "accepted" });
        expect(second.result).toEqual({ paymentId: "pay_2", status: "accepted" });
        expect(second.key).not.toBe(first.key);
      });
      expect(calls[counter]).toBe(before + 1);
      expect(effects).toHaveLength(2);
      expect(unhandled).toEqual([]);
      // The warning is not lost: it goes to the console with why the logger could not take it.
      expect(errors.mock.calls.map((c) => c.join(" ")).join("\n")).toMatch(/the same call appears more than once in one turn.*logger (threw|rejected).*(ENOSPC|transport closed)/s);
    });

    it(`LEDGER-9 a logger that ${how} on a failed renewal's warning: no unhandled rejection, renewals go on, the run completes once`, async () => {
      vi.spyOn(console, "error").mockImplementation(() => {});
      const { tool, effects } = fakePayments({ latencyMs: 200 });
      const memory = new MemoryLedger();
      let renewals = 0;
      // Every other renewal fails with a transient error: the dispatcher warns and keeps renewing.
      const ledger = Object.assign(Object.create(memory), {
        renew: (key: string, fence: number, leaseMs: number) => {
          renewals += 1;
          return renewals % 2 === 1 ? Promise.reject(new Error("connection reset")) : memory.renew(key, fence, leaseMs);
        },
      }) as MemoryLedger;
      const dispatcher = new Dispatcher({ tools: [tool], ledger, logger, leaseMs: 60 });
      const before = calls[counter];
      const unhandled = await unhandledDuring(async () => {
        const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
        expect(outcome.result).toEqual({ paymentId: "pay_1", status: "accepted" });
      });
      expect(renewals).toBeGreaterThanOrEqual(2);
      expect(calls[counter]).toBeGreaterThan(before);
      expect(effects).toHaveLength(1);
      expect(unhandled).toEqual([]);
      expect((await memory.lookup(effects[0]!.key))?.state).toBe("completed");
    });
  }
});
