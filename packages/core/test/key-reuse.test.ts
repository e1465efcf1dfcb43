import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  IdempotencyKeyReusedError,
  InFlightElsewhereError,
  MemoryLedger,
  ToolError,
  ToolRegistry,
  catalogueEntry,
  defineTool,
  effectOf,
  isDispatchOnceError,
  type DispatchEvent,
} from "../src/index.js";
import { faulty, manualClock, recordingLogger } from "./helpers.js";

/**
 * A tool keyed by a key its client assigned (an MCP client's `_meta` key, a UUID per user
 * action): the identity is the key, the arguments ride along. Under IDENT-6 a call whose key is
 * stored with other arguments is another request, refused, never answered with the first one's
 * result. `gate` holds a run open until released.
 */
function clientKeyedPayments(options: { onRequestDiffers?: "use_first" | "refuse" } = {}) {
  const effects: { key: string; args: { payee: string; amount: number } }[] = [];
  let gate: Promise<void> | undefined;
  let failNext: ToolError | undefined;
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ key: z.string(), args: z.object({ payee: z.string(), amount: z.number().int() }) }),
    identity: ["key"],
    ...(options.onRequestDiffers !== undefined ? { onRequestDiffers: options.onRequestDiffers } : {}),
    async run(envelope, ctx) {
      if (gate !== undefined) await gate;
      if (failNext !== undefined) {
        const error = failNext;
        failNext = undefined;
        throw error;
      }
      effects.push({ key: ctx.idempotencyKey, args: envelope.args });
      return { paid: envelope.args.amount, to: envelope.args.payee, n: effects.length };
    },
  });
  return {
    tool,
    effects,
    hold() {
      let open!: () => void;
      gate = new Promise((resolve) => (open = resolve));
      return () => {
        gate = undefined;
        open();
      };
    },
    failNextWith(error: ToolError) {
      failNext = error;
    },
  };
}

/** Warnings are asserted through events here; the logger keeps the test output readable. */
const quiet = recordingLogger().logger;
const turn = { conversationId: "mcp", turnIndex: 0 };
const call = (key: string, payee: string, amount: number) => ({ name: "send_payment", input: { key, args: { payee, amount } } });

describe("IDENT-6 a tool that refuses a different request under its key", () => {
  it("IDENT-6 a completed key called with other arguments is refused: no run, no replay of the first result", async () => {
    const pay = clientKeyedPayments({ onRequestDiffers: "refuse" });
    const ledger = new MemoryLedger();
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, onEvent: (e) => events.push(e), logger: quiet });
    const first = await dispatcher.dispatch(call("k-0001-aaaa-bbbb", "acme", 100), turn);
    const second = dispatcher.dispatch(call("k-0001-aaaa-bbbb", "acme", 250), turn);
    await expect(second).rejects.toSatisfy((e) => isDispatchOnceError(e, "idempotency_key_reused"));
    const error = await second.catch((e: unknown) => e);
    expect(IdempotencyKeyReusedError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ key: first.key, toolName: "send_payment" });
    // The user's second request did not happen, and it is not reported as having happened.
    expect(effectOf(error)).toBe("no");
    expect(catalogueEntry(error)?.retryable).toBe("no");
    expect(pay.effects).toEqual([{ key: first.key, args: { payee: "acme", amount: 100 } }]);
    // The first request's row is as it was.
    expect(await ledger.lookup(first.key)).toMatchObject({ state: "completed", fence: 1, request: JSON.stringify(call("k-0001-aaaa-bbbb", "acme", 100).input) });
    expect(events.filter((e) => e.type === "request_differs")).toHaveLength(1);
  });

  it("IDENT-6 the same arguments in another member order or number spelling are the same request: replayed", async () => {
    const pay = clientKeyedPayments({ onRequestDiffers: "refuse" });
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger: new MemoryLedger(), logger: quiet });
    const first = await dispatcher.dispatch(call("k-0002-aaaa-bbbb", "acme", 100), turn);
    const again = await dispatcher.dispatch({ name: "send_payment", input: { args: { amount: 1e2, payee: "acme" }, key: "k-0002-aaaa-bbbb" } }, turn);
    expect(again).toMatchObject({ replayed: true, key: first.key, result: first.result });
    expect(pay.effects).toHaveLength(1);
  });

  it("IDENT-6 a live claim of another request is refused at once, not waited on; the first run finishes and is recorded", async () => {
    const pay = clientKeyedPayments({ onRequestDiffers: "refuse" });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, waitMs: 60_000, logger: quiet });
    const open = pay.hold();
    const first = dispatcher.dispatch(call("k-0003-aaaa-bbbb", "acme", 100), turn);
    await new Promise((r) => setTimeout(r, 10));
    // With waitMs 60 s, a waiting dispatch would outlive the test: it must answer now.
    await expect(dispatcher.dispatch(call("k-0003-aaaa-bbbb", "other", 100), turn)).rejects.toSatisfy((e) =>
      isDispatchOnceError(e, "idempotency_key_reused"),
    );
    open();
    const done = await first;
    expect(done.result).toEqual({ paid: 100, to: "acme", n: 1 });
    expect(await ledger.lookup(done.key)).toMatchObject({ state: "completed", fence: 1 });
    expect(pay.effects).toHaveLength(1);
  });

  it("IDENT-6 a released row is not re-run with the first request for another request: the claim is released again, the request kept", async () => {
    const pay = clientKeyedPayments({ onRequestDiffers: "refuse" });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, logger: quiet });
    pay.failNextWith(new ToolError("card network down before sending", { disposition: "not_performed" }));
    const first = dispatcher.dispatch(call("k-0004-aaaa-bbbb", "acme", 100), turn);
    await expect(first).rejects.toMatchObject({ code: "claim_released" });
    const key = dispatcher.keyFor(call("k-0004-aaaa-bbbb", "acme", 100), turn);
    expect(await ledger.lookup(key)).toMatchObject({ state: "released", fence: 1 });

    await expect(dispatcher.dispatch(call("k-0004-aaaa-bbbb", "acme", 999), turn)).rejects.toSatisfy((e) =>
      isDispatchOnceError(e, "idempotency_key_reused"),
    );
    expect(pay.effects).toEqual([]);
    const row = await ledger.lookup(key);
    expect(row).toMatchObject({ state: "released", request: JSON.stringify(call("k-0004-aaaa-bbbb", "acme", 100).input) });
    // The refused claim took fence 2 and gave it back: the rightful re-send runs at fence 3.
    expect(row!.fence).toBe(2);
    const rightful = await dispatcher.dispatch(call("k-0004-aaaa-bbbb", "acme", 100), turn);
    expect(rightful.result).toEqual({ paid: 100, to: "acme", n: 1 });
    expect(await ledger.lookup(key)).toMatchObject({ state: "completed", fence: 3 });
    expect(pay.effects).toEqual([{ key, args: { payee: "acme", amount: 100 } }]);
  });

  it("IDENT-6 a takeover of an expired claim for another request releases it without running; the paused owner's record is then stale", async () => {
    const pay = clientKeyedPayments({ onRequestDiffers: "refuse" });
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const { logger } = recordingLogger();
    const owner = new Dispatcher({ tools: [pay.tool], ledger, leaseMs: 1_000, logger });
    const other = new Dispatcher({ tools: [pay.tool], ledger, leaseMs: 1_000, logger });
    const open = pay.hold();
    const first = owner.dispatch(call("k-0005-aaaa-bbbb", "acme", 100), turn);
    await new Promise((r) => setTimeout(r, 10));
    clock.advance(5_000); // the owner is paused past its lease
    await expect(other.dispatch(call("k-0005-aaaa-bbbb", "acme", 300), turn)).rejects.toSatisfy((e) =>
      isDispatchOnceError(e, "idempotency_key_reused"),
    );
    const key = owner.keyFor(call("k-0005-aaaa-bbbb", "acme", 100), turn);
    expect(await ledger.lookup(key)).toMatchObject({ state: "released", fence: 2, request: JSON.stringify(call("k-0005-aaaa-bbbb", "acme", 100).input) });
    open();
    // The owner's tool ran (one effect); its complete under fence 1 is stale, and it says so.
    await expect(first).rejects.toSatisfy((e) => isDispatchOnceError(e, "stale_claim"));
    expect(pay.effects).toEqual([{ key, args: { payee: "acme", amount: 100 } }]);
  });

  it("IDENT-6 a release of a taken row that meets ledger_unavailable, re-sent for recordRetryMs: ledger_unavailable, no run, the row in flight until its lease runs out", async () => {
    const pay = clientKeyedPayments({ onRequestDiffers: "refuse" });
    const clock = manualClock();
    const releases: ("down" | "lost")[] = [];
    const { ledger, base, calls } = faulty("release", releases, { now: clock.now });
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, leaseMs: 1_000, waitMs: 0, pollMs: 1, recordRetryMs: 40, logger: quiet, onEvent: (e) => events.push(e) });
    const stored = JSON.stringify(call("k-0007-aaaa-bbbb", "acme", 100).input);
    pay.failNextWith(new ToolError("card network down before sending", { disposition: "not_performed" }));
    await expect(dispatcher.dispatch(call("k-0007-aaaa-bbbb", "acme", 100), turn)).rejects.toMatchObject({ code: "claim_released" });
    const key = dispatcher.keyFor(call("k-0007-aaaa-bbbb", "acme", 100), turn);
    expect(await base.lookup(key)).toMatchObject({ state: "released", fence: 1, request: stored });

    // Another request under the key re-claims the released row (fence 2); its release cannot reach the store.
    releases.push(...Array.from({ length: 1_000 }, () => "down" as const));
    const recordedBefore = events.filter((e) => e.type === "recorded").length;
    const refused = await dispatcher.dispatch(call("k-0007-aaaa-bbbb", "acme", 999), turn).catch((e: unknown) => e);
    expect(isDispatchOnceError(refused, "ledger_unavailable")).toBe(true);
    expect(calls.length).toBeGreaterThan(2); // the first release, then the refused claim's, sent again
    expect(events.filter((e) => e.type === "record_retry")).toContainEqual(expect.objectContaining({ key, write: "release", attempt: 1 }));
    expect(events.filter((e) => e.type === "recorded")).toHaveLength(recordedBefore);
    expect(pay.effects).toEqual([]);
    // The row is the refused claim's, in flight, with the first request kept (LEDGER-21).
    expect(await base.lookup(key)).toMatchObject({ state: "in_flight", fence: 2, request: stored, leaseExpiresAt: clock.now() + 1_000 });
    releases.length = 0;

    // While its lease lasts nobody acts on it: the rightful re-send meets a live claim and does not run.
    await expect(dispatcher.dispatch(call("k-0007-aaaa-bbbb", "acme", 100), turn)).rejects.toSatisfy((e) => isDispatchOnceError(e, "in_flight_elsewhere"));
    expect(pay.effects).toEqual([]);
    expect(await base.lookup(key)).toMatchObject({ state: "in_flight", fence: 2 });

    // Once it has run out, a later claim takes the row over: the rightful re-send runs the first request, once.
    clock.advance(1_001);
    const rightful = await dispatcher.dispatch(call("k-0007-aaaa-bbbb", "acme", 100), turn);
    expect(rightful.result).toEqual({ paid: 100, to: "acme", n: 1 });
    expect(pay.effects).toEqual([{ key, args: { payee: "acme", amount: 100 } }]);
    expect(await base.lookup(key)).toMatchObject({ state: "completed", fence: 3, request: stored });
  });

  it("IDENT-3 without the option a different request under one key is still the first request's replay (the identity's meaning)", async () => {
    const pay = clientKeyedPayments();
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger: new MemoryLedger(), logger: quiet });
    const first = await dispatcher.dispatch(call("k-0006-aaaa-bbbb", "acme", 100), turn);
    const again = await dispatcher.dispatch(call("k-0006-aaaa-bbbb", "acme", 250), turn);
    expect(again).toMatchObject({ replayed: true, result: first.result });
    expect(pay.effects).toHaveLength(1);
  });

  it("IDENT-6 the registry refuses a bad onRequestDiffers, and one on a read tool", () => {
    const input = z.object({ a: z.number() });
    const run = () => 1;
    expect(() => new ToolRegistry([{ name: "w", effect: "keyed_write", input, run, onRequestDiffers: "reject" as never }])).toThrow(
      expect.objectContaining({ code: "invalid_tool_definition", message: expect.stringContaining("onRequestDiffers") }),
    );
    expect(() => new ToolRegistry([{ name: "r", effect: "read", input, run, onRequestDiffers: "refuse" }])).toThrow(
      expect.objectContaining({ code: "invalid_tool_definition", message: expect.stringContaining("read") }),
    );
    expect(() => new ToolRegistry([{ name: "w", effect: "unkeyed_write", input, run, onRequestDiffers: "use_first" }])).not.toThrow();
  });

  it("IDENT-9 with comparedFields only they refuse: a re-worded memo is the stored request, answered or re-run as it was", async () => {
    const ran: string[] = [];
    let failFirst = true;
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ key: z.string(), amount: z.number().int(), memo: z.string() }),
      identity: ["key"],
      onRequestDiffers: "refuse",
      comparedFields: ["key", "amount"],
      run(args) {
        if (failFirst) {
          failFirst = false;
          throw new ToolError("network down before sending", { disposition: "not_performed" });
        }
        ran.push(args.memo);
        return { paid: args.amount };
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), logger: quiet });
    const pay = (amount: number, memo: string) => dispatcher.dispatch({ name: "send_payment", input: { key: "k-0009-aaaa-bbbb", amount, memo } }, turn);
    await expect(pay(100, "first")).rejects.toMatchObject({ code: "claim_released" });
    // The released row is re-claimed by a re-worded call: the stored request runs (LEDGER-21).
    expect(await pay(100, "re-worded")).toMatchObject({ replayed: false, storedRequest: { memo: "first" } });
    expect(await pay(100, "again")).toMatchObject({ replayed: true, storedRequest: { memo: "first" } });
    await expect(pay(250, "first")).rejects.toSatisfy((e) => isDispatchOnceError(e, "idempotency_key_reused"));
    expect(ran).toEqual(["first"]);
  });

  it("IDENT-9 the registry refuses comparedFields without refuse, naming no field of the schema, or empty", () => {
    const input = z.object({ key: z.string(), a: z.number() });
    const base = { name: "w", effect: "keyed_write" as const, input, run: () => 1, identity: ["key"] as const };
    const refused = (tool: object, text: string) =>
      expect(() => new ToolRegistry([tool as never])).toThrow(expect.objectContaining({ code: "invalid_tool_definition", message: expect.stringContaining(text) }));
    refused({ ...base, comparedFields: ["a"] }, 'onRequestDiffers: "refuse"');
    refused({ ...base, onRequestDiffers: "refuse", comparedFields: ["b"] }, "comparedFields field");
    refused({ ...base, onRequestDiffers: "refuse", comparedFields: [] }, "empty comparedFields");
    expect(() => new ToolRegistry([{ ...base, onRequestDiffers: "refuse", comparedFields: ["key", "a"] }])).not.toThrow();
  });

  it("IDENT-6 the error carries what a caller needs and crosses package copies by its brand", () => {
    const error = new IdempotencyKeyReusedError("0123456789abcdef0123456789abcdef", "send_payment");
    expect(error).toMatchObject({ code: "idempotency_key_reused", key: "0123456789abcdef0123456789abcdef", toolName: "send_payment" });
    expect(error.message).toContain("send_payment");
    // Recognised by brand and code (another copy of the package), and only with its own code.
    const copy = Object.defineProperty({ code: "idempotency_key_reused" }, Symbol.for("dispatch-once.error"), { value: true });
    expect(IdempotencyKeyReusedError.isInstance(copy)).toBe(true);
    expect(IdempotencyKeyReusedError.isInstance(new InFlightElsewhereError("k", 1))).toBe(false);
  });
});
