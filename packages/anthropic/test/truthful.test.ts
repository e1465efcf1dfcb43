import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { MemoryLedger } from "@dispatch-once/core";
import { ConversationRunner, TurnFailedError, type RunnerEvent } from "../src/index.js";
import { PAY_ACME, providerPerTest, setup } from "./fixtures.js";

/**
 * Issue 10 through the real SDK, the mock provider and the mock payments API: the payments
 * effect log AND what the conversation committed or the record says must agree.
 */
const provider = providerPerTest();

type ToolResult = { type: string; tool_use_id: string; content: string; is_error?: boolean };
const toolResultsOf = (log: unknown[]) =>
  log.flatMap((m) => {
    const content = (m as { content: unknown }).content;
    return Array.isArray(content) ? (content as ToolResult[]).filter((b) => b.type === "tool_result") : [];
  });

describe("re-runs send the first request (LEDGER-21, EFFECT-6)", () => {
  it("LEDGER-21 a lost response, then a retry that re-words the memo: one payment, committed as paid", async () => {
    const { runner, effects, server, store } = await setup(provider(), { guarded: true });
    // The payments API performs the first POST and the response is lost on the way back.
    server.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
    const result = await runner.send("conv-lost", { id: "m1", content: "pay acme" });
    const memos = provider().requests.slice(0, 2).map((r) => r.toolUses[0]!.input.memo);
    expect(memos[0]).not.toBe(memos[1]); // the retried model re-worded it
    expect(effects()).toHaveLength(1);
    const [payment] = effects();
    expect(result.turns[0]).toMatchObject({ attempts: 2 });
    expect(result.turns[0]!.calls[0]).toMatchObject({ result: { paymentId: payment!.paymentId, status: "accepted" } });
    // The conversation says "paid", with the payment that exists, and no error.
    const results = toolResultsOf(await store.log("conv-lost"));
    expect(results).toHaveLength(1);
    expect(results[0]!.is_error).toBeUndefined();
    expect(JSON.parse(results[0]!.content)).toEqual({ paymentId: payment!.paymentId, status: "accepted" });
    // And a new request in a later turn is a new payment, not "already paid" nor a second of the first.
    await runner.send("conv-lost", { id: "m2", content: "pay acme" });
    expect(effects()).toHaveLength(2);
  });

  it("EFFECT-6 a wiped ledger meets a re-worded memo: the 422 is told as 'may have happened', never as a failure", async () => {
    const ledger = new MemoryLedger();
    const rows = (ledger as unknown as { rows: Map<string, unknown> }).rows;
    const events: RunnerEvent[] = [];
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects, store } = await setup(provider(), {
      guarded: true,
      ledger,
      runner: {
        onEvent: (e) => {
          events.push(e);
          // A volatile ledger restarts between the attempts and forgets the claim.
          if (e.type === "retry_scheduled") rows.clear();
        },
      },
    });
    const error = (await runner.send("conv-wiped", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(effects()).toHaveLength(1);
    // Nothing committed: the conversation does not say "failed" (nor "paid").
    expect(await store.log("conv-wiped")).toEqual([]);
    const { record } = error;
    expect(record.calls.map((c) => [c.attempt, c.status, c.effect])).toEqual([
      [1, "completed", "happened"],
      [2, "outcome_unknown", "may_have_happened"],
    ]);
    expect(record.effects).toEqual([{ key: record.calls[0]!.key, name: "send_payment", effect: "happened", input: expect.objectContaining({ payee: "acme", amount: 125000 }) }]);
    expect(record.retryable).toBe(false);
    expect(record.calls.some((c) => c.status === "failed")).toBe(false);
  });
});

describe("truthful results and records (DISPATCH-7, LEDGER-10, RECORD-5)", () => {
  it("DISPATCH-7 a payment result holding a Date is committed as a result, not as an error", async () => {
    const { runner, effects, store } = await setup(provider(), {
      guarded: true,
      result: (paymentId) => ({ paymentId, createdAt: new Date(Date.UTC(2026, 10, 30)) }),
    });
    const result = await runner.send("conv-date", { id: "m1", content: "pay acme" });
    expect(effects()).toHaveLength(1);
    expect(result.turns[0]!.calls[0]!.result).toEqual({ paymentId: effects()[0]!.paymentId, createdAt: "2026-11-30T00:00:00.000Z" });
    expect(toolResultsOf(await store.log("conv-date")).every((r) => r.is_error === undefined)).toBe(true);
  });

  it("LEDGER-10 a performed payment whose result cannot be stored fails the turn with 'happened', never an error result", async () => {
    const { runner, effects, store } = await setup(provider(), {
      guarded: true,
      result: (paymentId) => ({ paymentId, cents: BigInt(12_500) }),
    });
    const error = (await runner.send("conv-bigint", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(effects()).toHaveLength(1);
    expect(await store.log("conv-bigint")).toEqual([]);
    expect(error.record.attempts).toBe(1); // asking again cannot make it storable
    expect(error.record.calls[0]).toMatchObject({ status: "result_not_storable", effect: "happened" });
    expect(error.record.calls[0]!.key).toMatch(/^[0-9a-f]{32}$/);
    // A re-send replays the same truth and pays nothing more.
    const again = (await runner.send("conv-bigint", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(again.record.calls[0]).toMatchObject({ status: "result_not_storable", effect: "happened" });
    expect(effects()).toHaveLength(1);
  });

  it("RECORD-5 attempt 1 pays then dies, attempts 2 and 3 die before any call: the record still lists the payment", async () => {
    provider().setFaultPlan((_r, info) =>
      info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : { kind: "reset", at: { event: 1 } },
    );
    const { runner, effects } = await setup(provider(), { guarded: true });
    const error = (await runner.send("conv-forget", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record.position).toBe("before_any_call");
    expect(error.record.attempts).toBe(3);
    expect(effects()).toHaveLength(1);
    expect(error.record.calls).toEqual([expect.objectContaining({ attempt: 1, status: "completed", effect: "happened" })]);
    expect(error.record.effects).toEqual([{ key: error.record.calls[0]!.key, name: "send_payment", effect: "happened", input: expect.objectContaining({ payee: "acme", amount: 125000 }) }]);
    expect(error.record.retryable).toBe(true);
  });

  it("RECORD-2 a lost response on the last attempt is recorded as 'may have happened' with its key", async () => {
    const { runner, effects, server } = await setup(provider(), { guarded: true, runner: { retry: { attempts: 1 } } });
    server.injectFault({ outcome: "drop_after_accept" }, { times: 1 });
    const error = (await runner.send("conv-maybe", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(effects()).toHaveLength(1);
    expect(error.record.calls).toEqual([
      expect.objectContaining({ status: "released", effect: "may_have_happened", key: expect.stringMatching(/^[0-9a-f]{32}$/) }),
    ]);
    // Re-sending the same message settles it from the downstream under the same key and body.
    const settled = await runner.send("conv-maybe", { id: "m1", content: "pay acme" });
    expect(settled.turns[0]!.calls[0]).toMatchObject({ result: { paymentId: effects()[0]!.paymentId } });
    expect(effects()).toHaveLength(1);
    expect(PAY_ACME.payee).toBe("acme");
  });
});

describe("the rest of issue 10's findings through the SDK (LEDGER-8, ERR-3, IDENT-5, KEY-6)", () => {
  it("LEDGER-8 a tool that throws a ToolError without a disposition after paying is not committed as a failed payment", async () => {
    const { Dispatcher, MemoryLedger, ToolError, ToolRegistry, defineTool } = await import("@dispatch-once/core");
    const { createPaymentsClient } = await import("@dispatch-once/mock-payments");
    const { runner: base, server, effects, client, store } = await setup(provider(), { guarded: true });
    const payments = createPaymentsClient({ baseURL: server.url, token: "acct_test" });
    let calls = 0;
    const careless = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number(), currency: z.string(), reference: z.string(), memo: z.string() }),
      identity: ["payee", "amount", "currency", "reference"],
      async run(args, ctx) {
        const paid = await payments.createPayment(args, { idempotencyKey: ctx.idempotencyKey });
        // The old default read this as "definite": the payment was made and reported as failed.
        if (++calls === 1) throw new ToolError("timed out waiting for the receipt", {} as never);
        return { paymentId: paid.body.id };
      },
    });
    const runner = new ConversationRunner({
      client,
      store,
      dispatcher: new Dispatcher({ tools: new ToolRegistry([careless]), ledger: new MemoryLedger() }),
      model: "claude-test",
      tools: [{ name: "send_payment", input_schema: { type: "object" } }],
      retry: { backoffMs: () => 5 },
    });
    void base;
    const result = await runner.send("conv-careless", { id: "m1", content: "pay acme" });
    expect(effects()).toHaveLength(1);
    expect(result.turns[0]!.calls[0]).toMatchObject({ result: { paymentId: effects()[0]!.paymentId } });
    expect(result.turns[0]!.calls[0]!.error).toBeUndefined();
  });

  it("ERR-3 a ledger from another copy of core (CJS beside ESM) still fails closed on an unstorable result", async () => {
    const require = createRequire(import.meta.url);
    const cjs = require(require.resolve("@dispatch-once/core").replace(/index\.js$/, "index.cjs")) as typeof import("@dispatch-once/core");
    const other = new cjs.MemoryLedger();
    const ledger = Object.assign(Object.create(other), {
      capabilities: other.capabilities,
      complete: (key: string) => Promise.reject(new cjs.ResultNotStorableError(key, "too large for this store")),
    });
    const { runner, effects } = await setup(provider(), { guarded: true, ledger });
    const error = (await runner.send("conv-copies", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(effects()).toHaveLength(1);
    expect(error.record.calls[0]).toMatchObject({ status: "result_not_storable", effect: "happened" });
    expect(error.record.attempts).toBe(1);
  });

  it("IDENT-5 an impure default in the identity is refused before any payment, not a new key per replay", async () => {
    const { Dispatcher, MemoryLedger, ToolRegistry, defineTool } = await import("@dispatch-once/core");
    const { createPaymentsClient } = await import("@dispatch-once/mock-payments");
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    const { server, effects, client, store } = await setup(provider(), { guarded: true });
    const payments = createPaymentsClient({ baseURL: server.url, token: "acct_test" });
    let tick = 0;
    const impure = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({
        payee: z.string(),
        amount: z.number(),
        currency: z.string(),
        reference: z.string(),
        memo: z.string(),
        requestedAt: z.string().default(() => `2026-11-30T10:00:${String(++tick).padStart(2, "0")}Z`),
      }),
      identity: ["payee", "amount", "currency", "reference", "requestedAt"],
      async run(args, ctx) {
        const paid = await payments.createPayment({ ...args, memo: args.memo }, { idempotencyKey: ctx.idempotencyKey });
        return { paymentId: paid.body.id };
      },
    });
    const runner = new ConversationRunner({
      client,
      store,
      dispatcher: new Dispatcher({ tools: new ToolRegistry([impure]), ledger: new MemoryLedger() }),
      model: "claude-test",
      tools: [{ name: "send_payment", input_schema: { type: "object" } }],
      retry: { backoffMs: () => 5 },
    });
    const result = await runner.send("conv-impure", { id: "m1", content: "pay acme" });
    // Old code: a new key on each attempt, and the cut stream's retry paid a second time.
    expect(effects()).toHaveLength(0);
    expect(result.turns[0]!.calls[0]!.error).toMatchObject({ code: "invalid_tool_definition" });
  });

  // 1,000 levels: beyond KEY-6's 512, within what the mock provider's own JSON handling survives in a
  // test worker (the old recursive canonicaliser overflowed at about 3,000 on the main thread; core's
  // hostile-input tests cover that depth directly).
  it("KEY-6 a 1,000-deep JSON argument is a typed refusal reported to the model, not a crash that kills the turn", async () => {
    const { Dispatcher, MemoryLedger, ToolRegistry, defineTool } = await import("@dispatch-once/core");
    const { scriptFromPlans, startMockProvider, toolUse, turn } = await import("@dispatch-once/mock-provider");
    let deep: unknown = "bottom";
    for (let i = 0; i < 1_000; i++) deep = [deep];
    const deepProvider = await startMockProvider({ script: scriptFromPlans({ "save it": turn(toolUse("save_note", { data: deep })) }) });
    try {
      let runs = 0;
      const note = defineTool({
        name: "save_note",
        effect: "keyed_write",
        input: z.object({ data: z.any() }),
        run: () => ++runs,
      });
      const { client: _c, store } = await setup(provider(), { guarded: true });
      void _c;
      const Anthropic = (await import("@anthropic-ai/sdk")).default;
      const runner = new ConversationRunner({
        client: new Anthropic({ baseURL: deepProvider.baseURL, apiKey: "test", maxRetries: 0 }),
        store,
        dispatcher: new Dispatcher({ tools: new ToolRegistry([note]), ledger: new MemoryLedger() }),
        model: "claude-test",
        tools: [{ name: "save_note", input_schema: { type: "object" } }],
      });
      const error = (await runner.send("conv-deep", { id: "m1", content: "save it" }).catch((e: unknown) => e)) as TurnFailedError;
      expect(runs).toBe(0);
      // The dispatcher refused the call with a typed error; the store cannot keep the model's own
      // output either, so the turn fails with a record that says nothing ran, and is not retried.
      expect(error).toBeInstanceOf(TurnFailedError);
      expect(error.record).toMatchObject({ position: "commit_refused", attempts: 1, retryable: false, effects: [] });
      expect(error.record.calls[0]).toMatchObject({ status: "rejected", effect: "not_happened", error: { code: "not_canonicalizable" } });
      expect(await store.message("conv-deep", "m1")).toMatchObject({ state: "failed" });
    } finally {
      await deepProvider.close();
    }
  });
});
