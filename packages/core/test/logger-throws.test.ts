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
      // The run lasts until a renewal after a failed one has come (or 5 s, so a renewal loop that
      // stopped at its failed warning fails the count below rather than hanging): a fixed latency
      // saw one renewal only when a loaded host delayed the renewal timer.
      let renewals = 0;
      const { tool, effects } = fakePayments({
        until: async () => {
          const deadline = Date.now() + 5_000;
          while (renewals < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
        },
      });
      const memory = new MemoryLedger();
      // Every other renewal fails with a transient error: the dispatcher warns and keeps renewing.
      const ledger = Object.assign(Object.create(memory), {
        renew: (key: string, fence: number, leaseMs: number) => {
          renewals += 1;
          return renewals % 2 === 1 ? Promise.reject(new Error("connection reset")) : memory.renew(key, fence, leaseMs);
        },
      }) as MemoryLedger;
      // A lease long enough that a renewal timer a loaded host delays still fires inside it (at
      // 60 ms, a first renewal sent late failed past the lease's confirmed end: the claim was
      // rightly given up, and the test saw one renewal). Renewals every 300 ms: about 0.9 s.
      const dispatcher = new Dispatcher({ tools: [tool], ledger, logger, leaseMs: 900 });
      const before = calls[counter];
      const unhandled = await unhandledDuring(async () => {
        const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
        expect(outcome.result).toEqual({ paymentId: "pay_1", status: "accepted" });
      });
      // Failed, then succeeded, then failed again: renewals went on after each rejected warning.
      expect(renewals).toBeGreaterThanOrEqual(3);
      expect(calls[counter]).toBeGreaterThan(before);
      expect(effects).toHaveLength(1);
      expect(unhandled).toEqual([]);
      expect((await memory.lookup(effects[0]!.key))?.state).toBe("completed");
    });
  }
});
