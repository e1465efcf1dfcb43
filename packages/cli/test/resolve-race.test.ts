// `resolve --not-performed` of an unkeyed_write claim whose lease runs out between the CLI's grace
// check and its write (the CLI stalled, or the store's reply was slow): the grace (RESOLVE-6) must
// still hold. The oracle is a counting downstream plus the row: the paused owner wakes and sends,
// then the application replays the call.
import { Dispatcher, defineTool, isDispatchOnceError, ToolRegistry, type Ledger } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { resolveCommand } from "../src/commands/resolve.js";
import type { OpenedLedger } from "../src/target.js";
import { BACKENDS, type Backend } from "./helpers.js";

/** Waits until the ledger itself lists the claim as expired (its own clock, LEDGER-25). */
async function untilExpired(ledger: Ledger, key: string): Promise<void> {
  for (;;) {
    const expired = await ledger.listExpiredInFlight!({ olderThanMs: 0, limit: 1000 });
    if (expired.some((row) => row.key === key)) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/**
 * The real ledger, except that the time between the CLI's last read and its resolve() passes
 * until the claim's lease has run out: the owner's lease is cut to 1 ms by its last renewal,
 * which is where a paused owner's lease ends, and the write waits for the ledger to see it expired.
 */
function stallingBeforeResolve(ledger: Ledger, owner: { key: string; fence: number }): Ledger {
  return new Proxy(ledger, {
    get(target, property, receiver) {
      if (property !== "resolve") return Reflect.get(target, property, receiver) as unknown;
      return async (...args: Parameters<NonNullable<Ledger["resolve"]>>) => {
        await target.renew(owner.key, owner.fence, 1);
        await untilExpired(target, owner.key);
        return target.resolve!(...args);
      };
    },
  });
}

describe.each(BACKENDS)("resolve --not-performed racing a lease's end on %s", (_name, open) => {
  let backend: Backend;
  const bookings: string[] = [];
  const book = defineTool({
    name: "book_now",
    effect: "unkeyed_write",
    input: z.object({ n: z.int() }),
    run: () => {
      bookings.push("table for 7 (the replay)");
      return { booked: true };
    },
  });

  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("RESOLVE-6: a claim live at the grace check and expired at the write is not released: the paused owner's request lands, its complete stands, the replay pays nothing more", async () => {
    const dispatcher = new Dispatcher({
      tools: new ToolRegistry([book]),
      ledger: backend.ledger,
      logger: { warn: () => {} },
      allowVolatileLedgerForUnkeyedWrites: backend.ledger.capabilities.durability === "volatile",
    });
    const turn = { conversationId: `conv-lease-race-${backend.name}`, turnIndex: 0 };
    const call = { name: "book_now", input: { n: 7 } };
    const key = dispatcher.keyFor(call, turn);
    // The owner claimed and paused with its request unsent (a GC pause, a frozen VM); its lease is live.
    const claim = await backend.ledger.claim({ key, toolName: "book_now", effect: "unkeyed_write", owner: "paused", leaseMs: 600_000, request: '{"n":7}', ...turn });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    const opened: OpenedLedger = { ledger: stallingBeforeResolve(backend.ledger, { key, fence: claim.fence }), target: { kind: "sqlite", path: "unused" }, display: backend.name, retentionMs: 86_400_000 };
    let stdout = "";
    // The operator finds no booking downstream (the request has not been sent) and resolves, pinned to the fence read.
    const resolved = await resolveCommand
      .run({
        io: { stdout: (text) => void (stdout += text), stderr: () => {}, env: {}, cwd: process.cwd() },
        values: { "not-performed": true, reason: "no booking at the restaurant", actor: "alice", "expected-fence": String(claim.fence), retention: "24h" },
        positionals: [key],
        command: "resolve",
        ledger: () => Promise.resolve(opened),
      })
      .then(
        (code) => `exit ${code}: ${stdout}`,
        (error: unknown) => (isDispatchOnceError(error) || (error as { code?: string }).code !== undefined ? `refused: ${(error as { code: string }).code}` : String(error)),
      );
    // The owner wakes: its request lands, and it records the outcome under its fence.
    bookings.push("table for 7");
    const late = await backend.ledger.complete(key, claim.fence, '{"booked":true}').then(
      () => "recorded",
      (error: unknown) => (isDispatchOnceError(error, "stale_claim") ? "stale" : String(error)),
    );
    const replay = await dispatcher.dispatch(call, turn).catch((error: unknown) => error);
    expect(bookings).toEqual(["table for 7"]);
    expect(resolved).toBe("refused: resolution_refused");
    expect(late).toBe("recorded");
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", fence: claim.fence, result: '{"booked":true}' });
    expect(replay).toMatchObject({ replayed: true, result: { booked: true } });
  });
});
