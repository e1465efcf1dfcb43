// What a run span tells the operator about the effect (OTEL-5): for every way a claimed run can
// end, `dispatch_once.effect` says what the payments log says, in the failed-turn record's words
// (RECORD-2). Before it, a payment made whose result could not be stored ended as outcome
// `failed` with status ERROR, the same span as a card declined.
import { SpanStatusCode } from "@opentelemetry/api";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, LedgerCorruptError, LedgerUnavailableError, MemoryLedger, ToolError, defineTool, effectOf, type Ledger, type Resolution } from "@dispatch-once/core";
import { ATTR, METRIC } from "../src/index.js";
import { sdk } from "./otel-sdk.js";

const EFFECT = "dispatch_once.effect";
const turn0 = { conversationId: "conv-effect", turnIndex: 0 };

function durable(ledger: MemoryLedger): Ledger {
  return Object.assign(Object.create(ledger), { capabilities: { ...ledger.capabilities, durability: "durable" as const } }) as Ledger;
}

let cleanup: (() => Promise<unknown>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

type Ending = "result" | "too_large" | "declined" | "refused_before_acceptance" | "hang_up";
interface Case {
  name: string;
  effect: "keyed_write" | "unkeyed_write";
  ending: Ending;
  /** How the ledger answers the run's last write. */
  ledger?: "complete_down" | "fail_down" | "resolved_meanwhile" | "complete_corrupt" | "complete_foreign" | "fail_corrupt";
  outcome: string;
  said: "happened" | "not_happened" | "may_have_happened";
  status: "error" | "unset";
}

const cases: Case[] = [
  { name: "completed", effect: "unkeyed_write", ending: "result", outcome: "completed", said: "happened", status: "unset" },
  { name: "result_not_storable: failed closed", effect: "unkeyed_write", ending: "too_large", outcome: "failed", said: "happened", status: "error" },
  { name: "a definite failure", effect: "unkeyed_write", ending: "declined", outcome: "failed", said: "not_happened", status: "error" },
  { name: "not performed, first durable claim", effect: "unkeyed_write", ending: "refused_before_acceptance", outcome: "released", said: "not_happened", status: "unset" },
  { name: "a lost response (keyed): released", effect: "keyed_write", ending: "hang_up", outcome: "released", said: "may_have_happened", status: "unset" },
  { name: "a lost response (unkeyed): unknown", effect: "unkeyed_write", ending: "hang_up", outcome: "unknown", said: "may_have_happened", status: "error" },
  { name: "the complete write out of reach (ERR-4, DISPATCH-10)", effect: "unkeyed_write", ending: "result", ledger: "complete_down", outcome: "not_recorded", said: "happened", status: "error" },
  { name: "result_not_storable whose fail write is out of reach", effect: "unkeyed_write", ending: "too_large", ledger: "fail_down", outcome: "not_recorded", said: "happened", status: "error" },
  // Its fail never landed: the row stays in flight, to be taken over or turned unknown, and the dispatch raised ledger_unavailable ("possibly").
  { name: "a definite failure whose fail write is out of reach", effect: "unkeyed_write", ending: "declined", ledger: "fail_down", outcome: "not_recorded", said: "may_have_happened", status: "error" },
  // The store answers with a row this version cannot read, or an adapter's bug throws: the run still knows (DISPATCH-10).
  { name: "the complete write meets ledger_corrupt", effect: "unkeyed_write", ending: "result", ledger: "complete_corrupt", outcome: "not_recorded", said: "happened", status: "error" },
  { name: "the complete write meets a foreign error", effect: "unkeyed_write", ending: "result", ledger: "complete_foreign", outcome: "not_recorded", said: "happened", status: "error" },
  { name: "result_not_storable whose fail write meets ledger_corrupt", effect: "unkeyed_write", ending: "too_large", ledger: "fail_corrupt", outcome: "not_recorded", said: "happened", status: "error" },
  { name: "the claim lost to an operator's resolution before the complete (DISPATCH-8)", effect: "unkeyed_write", ending: "result", ledger: "resolved_meanwhile", outcome: "not_recorded", said: "happened", status: "error" },
];

describe("OTEL-5 a run span says whether its effect happened, as the effect log does", () => {
  it.each(cases)("$name: outcome $outcome, effect $said", async (c) => {
    const s = sdk();
    cleanup = s.shutdown;
    let now = 1_000_000;
    const memory = new MemoryLedger({ now: () => now, maxResultBytes: 64 });
    const base = durable(memory);
    const ledger: Ledger =
      c.ledger === "complete_down"
        ? Object.assign(Object.create(base) as Ledger, { complete: () => Promise.reject(new LedgerUnavailableError("connection reset")) })
        : c.ledger === "fail_down"
          ? Object.assign(Object.create(base) as Ledger, { fail: () => Promise.reject(new LedgerUnavailableError("connection reset")) })
          : c.ledger === "complete_corrupt"
            ? Object.assign(Object.create(base) as Ledger, { complete: (key: string) => Promise.reject(new LedgerCorruptError(key, "unknown row format version 2")) })
            : c.ledger === "fail_corrupt"
              ? Object.assign(Object.create(base) as Ledger, { fail: (key: string) => Promise.reject(new LedgerCorruptError(key, "unknown row format version 2")) })
              : c.ledger === "complete_foreign"
                ? Object.assign(Object.create(base) as Ledger, { complete: () => Promise.reject(new TypeError("Cannot read properties of undefined (reading 'rowCount')")) })
                : base;
    const payments: string[] = [];
    const tool = defineTool({
      name: "send_payment",
      effect: c.effect,
      input: z.object({ amount: z.number() }),
      run: async (args, ctx) => {
        if (c.ending === "declined") throw new ToolError("card declined", { disposition: "definite" });
        if (c.ending === "refused_before_acceptance") throw new ToolError("503 before acceptance", { disposition: "not_performed" });
        payments.push(`pay ${args.amount}`);
        if (c.ending === "hang_up") throw new Error("socket hang up");
        if (c.ledger === "resolved_meanwhile") {
          now += 120_000;
          const resolution: Resolution = { outcome: "not_performed" };
          await memory.resolve!({ key: ctx.idempotencyKey, resolution, actor: "ops", reason: "nothing in the console yet" });
        }
        return c.ending === "too_large" ? { receipt: "x".repeat(200) } : { id: "pay_1" };
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, recordRetryMs: 5, leaseMs: 30_000, onEvent: s.telemetry.onDispatchEvent, logger: { warn: () => {} } });
    const thrown = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 5 } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    const happened = payments.length === 1 ? "happened" : "not_happened";
    const [run] = s.spans.getFinishedSpans();
    console.log(`${c.name}: payments ${payments.length}; error ${(thrown as { code?: string } | undefined)?.code ?? "none"}; span`, run?.attributes[ATTR.OUTCOME], run?.attributes[EFFECT], run?.status.code);
    expect(run?.attributes[ATTR.OUTCOME]).toBe(c.outcome);
    // The span never says less than the log knows, nor more: may_have_happened only where the run cannot tell.
    if (c.said !== "may_have_happened") expect(c.said).toBe(happened);
    expect(run?.attributes[EFFECT]).toBe(c.said);
    // The caller's error tells the same story as the span (ERR-4, DISPATCH-10).
    if (thrown !== undefined) expect(effectOf(thrown)).toBe(c.said === "happened" ? "yes" : c.said === "not_happened" ? "no" : "possibly");
    expect(run?.status.code).toBe(c.status === "error" ? SpanStatusCode.ERROR : SpanStatusCode.UNSET);
    // Bounded, so dashboards can count "failed, but the payment went through" (OTEL-2).
    expect(await s.metric(METRIC.OUTCOMES, { [ATTR.OUTCOME]: c.outcome, [EFFECT]: c.said })).toBe(1);
  });

  it("OTEL-5 a run span ended unrecorded at shutdown says its effect may have happened", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    let release!: () => void;
    const tool = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => new Promise<{ id: string }>((r) => (release = () => r({ id: "pay_1" }))) });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), onEvent: s.telemetry.onDispatchEvent });
    const pending = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 5 } });
    while (release === undefined) await new Promise((r) => setTimeout(r, 1));
    s.telemetry.endAll();
    release();
    await pending;
    const [run] = s.spans.getFinishedSpans();
    expect(run?.attributes).toMatchObject({ [ATTR.OUTCOME]: "not_recorded", [EFFECT]: "may_have_happened" });
  });
});

describe("OTEL-5 a replay is counted with what its row says of the effect", () => {
  it("OTEL-5 a replayed result_not_storable row counts as replay.state failed, effect happened; a replayed decline as not_happened", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const payments: string[] = [];
    const tool = defineTool({
      name: "send_payment",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: (args) => {
        if (args.amount < 0) throw new ToolError("card declined", { disposition: "definite" });
        payments.push(`pay ${args.amount}`);
        return { receipt: "x".repeat(200) };
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: durable(new MemoryLedger({ maxResultBytes: 64 })), onEvent: s.telemetry.onDispatchEvent });
    for (const amount of [5, 5, -1, -1]) await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount } }).catch(() => undefined);
    expect(payments).toHaveLength(1);
    expect(await s.metric(METRIC.REPLAYS, { [ATTR.REPLAY_STATE]: "failed", [EFFECT]: "happened" })).toBe(1);
    expect(await s.metric(METRIC.REPLAYS, { [ATTR.REPLAY_STATE]: "failed", [EFFECT]: "not_happened" })).toBe(1);
  });
});
