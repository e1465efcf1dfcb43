import { z } from "zod";
import { describe, expect, it } from "vitest";
import {
  Dispatcher,
  ERROR_CATALOGUE,
  InFlightElsewhereError,
  LedgerCorruptError,
  LedgerUnavailableError,
  MemoryLedger,
  ToolDefinitionChangedError,
  ToolRegistry,
  defineTool,
  tenantConversationId,
  type Ledger,
} from "../src/index.js";
import { manualClock, recordingLogger } from "./helpers.js";

/**
 * IDENT-10: a re-run of a turn (resumed, TURN-15) after a deploy that changed a write tool's
 * identity or schema (IDENT-4) dispatches a call that an earlier definition already claimed under
 * the key of that run's row; it refuses where nothing can tell; a first run lists nothing.
 */
type Effect = { key: string; payee: string; amount: number; currency?: string; memo?: string };

const before = z.object({ payee: z.string(), amount: z.number().int(), memo: z.string().optional() });
/** The deploy: a currency with a default, in the identity. */
const withCurrency = z.object({ payee: z.string(), amount: z.number().int(), currency: z.string().default("EUR"), memo: z.string().optional() });

function payTool(effects: Effect[], input: z.ZodObject = before, identity: string[] = ["payee", "amount"]) {
  return defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input,
    identity,
    async run(args: Record<string, unknown>, ctx) {
      effects.push({ key: ctx.idempotencyKey, ...(args as Omit<Effect, "key">) });
      return { paymentId: `pay_${effects.length}` };
    },
  });
}

/** A ledger that counts its listRows calls, and fails them while `down`. */
function counted(base: MemoryLedger = new MemoryLedger()) {
  const state = { listings: 0, down: false, corrupt: false };
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
    capabilities: base.capabilities,
    listRows: async (...args: Parameters<MemoryLedger["listRows"]>) => {
      state.listings += 1;
      if (state.down) throw new LedgerUnavailableError("connection terminated");
      if (state.corrupt) throw new LedgerCorruptError("0123456789abcdef0123456789abcdef", "its stored request is not text");
      return base.listRows(...args);
    },
  });
  return { ledger, base, state };
}

const CONV = "conv-deploy";
const at = { conversationId: CONV, turnIndex: 3 };
const pay = (memo = "rent", payee = "acme", amount = 100) => ({ name: "send_payment", input: { payee, amount, memo } });

function dispatchers(ledger: Ledger, effects: Effect[], after: { input?: z.ZodObject; identity?: string[] } = {}, options: { logger?: ReturnType<typeof recordingLogger>["logger"]; waitMs?: number } = {}) {
  const old = new Dispatcher({ tools: new ToolRegistry([payTool(effects)]), ledger, logger: { warn: () => {} } });
  const next = new Dispatcher({
    tools: new ToolRegistry([payTool(effects, after.input ?? withCurrency, after.identity ?? ["payee", "amount", "currency"])]),
    ledger,
    logger: options.logger ?? { warn: () => {} },
    ...(options.waitMs !== undefined ? { waitMs: options.waitMs, pollMs: 5 } : {}),
  });
  return { old, next };
}

describe("IDENT-10 a re-run turn after a deploy that changed a write tool's identity", () => {
  it("IDENT-10 a first run lists nothing (no extra ledger call on the hot path); a re-run lists once for all its writes", async () => {
    const { ledger, state } = counted();
    const effects: Effect[] = [];
    const { next } = dispatchers(ledger, effects);
    const first = next.turn(at);
    await Promise.all([first.dispatch(pay("a", "acme")), first.dispatch(pay("b", "bob"))]);
    expect(state.listings).toBe(0);
    const again = next.turn({ ...at, resumed: true });
    await Promise.all([again.dispatch(pay("a", "acme")), again.dispatch(pay("b", "bob"))]);
    expect(state.listings).toBe(1);
    expect(effects).toHaveLength(2);
  });

  it("IDENT-10 a definition that derives the same keys (identity re-ordered) changes nothing: the same key, replayed, no warning, one listing", async () => {
    const { ledger, state } = counted();
    const effects: Effect[] = [];
    const { logger, warnings } = recordingLogger();
    const { old, next } = dispatchers(ledger, effects, { input: before, identity: ["amount", "payee"] }, { logger });
    const first = await old.turn(at).dispatch(pay());
    const again = await next.turn({ ...at, resumed: true }).dispatch(pay("re-worded"));
    expect([again.key, again.replayed]).toEqual([first.key, true]);
    expect(effects).toHaveLength(1);
    expect(state.listings).toBe(1);
    expect(warnings.filter((w) => w.message.includes("IDENT-10"))).toEqual([]);
  });

  it("IDENT-10 a completed row of the earlier definition answers the call under its key; the downstream saw one payment, under that key", async () => {
    const effects: Effect[] = [];
    const { logger, warnings } = recordingLogger();
    const { old, next } = dispatchers(new MemoryLedger(), effects, {}, { logger });
    const first = await old.turn(at).dispatch(pay());
    const again = await next.turn({ ...at, resumed: true }).dispatch(pay("rent, again"));
    expect([again.key, again.replayed, again.result]).toEqual([first.key, true, { paymentId: "pay_1" }]);
    expect(effects.map((e) => e.key)).toEqual([first.key]);
    expect(warnings.filter((w) => w.message.includes("IDENT-10")).map((w) => w.fields?.derivedKey)).toEqual([next.keyFor(pay("rent, again"), { ...at, ordinal: 0 })]);
  });

  it("IDENT-10 a released row re-runs its stored request under its old key (the Idempotency-Key the downstream saw), never under the new one", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const { old, next } = dispatchers(ledger, effects);
    const key = old.keyFor(pay(), { ...at, ordinal: 0 });
    const claim = await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "a", leaseMs: 30_000, request: JSON.stringify(pay().input), ...at });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await ledger.release(key, claim.fence);
    const again = await next.turn({ ...at, resumed: true }).dispatch(pay("memo B"));
    expect(again.key).toBe(key);
    expect(effects).toEqual([{ key, payee: "acme", amount: 100, memo: "rent" }]);
    expect((await ledger.lookup(key))?.state).toBe("completed");
  });

  it("IDENT-10 an in-flight row whose holder is alive is not run again: the call waits on it, under its key, and ends in_flight_elsewhere", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const { old, next } = dispatchers(ledger, effects, {}, { waitMs: 30 });
    const key = old.keyFor(pay(), { ...at, ordinal: 0 });
    await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "alive", leaseMs: 60_000, request: JSON.stringify(pay().input), ...at });
    const error = await next.turn({ ...at, resumed: true }).dispatch(pay()).catch((e: unknown) => e);
    expect(InFlightElsewhereError.isInstance(error) && error.key).toBe(key);
    expect(effects).toEqual([]);
  });

  it("IDENT-10 a stored request the new schema refuses: tool_definition_changed with the row's key and state; nothing claimed, nothing run, not retryable", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const strict = z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string().optional() });
    const { old, next } = dispatchers(ledger, effects, { input: strict });
    const first = await old.turn(at).dispatch(pay());
    const call = { name: "send_payment", input: { ...pay().input, currency: "EUR" } };
    const error = await next.turn({ ...at, resumed: true }).dispatch(call).catch((e: unknown) => e);
    expect(ToolDefinitionChangedError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ code: "tool_definition_changed", key: next.keyFor(call, { ...at, ordinal: 0 }), rowKey: first.key, rowState: "completed", toolName: "send_payment", reason: "request_refused" });
    expect(ERROR_CATALOGUE.find((e) => e.code === "tool_definition_changed")).toMatchObject({ effect: "no", retryable: "no" });
    expect(effects).toHaveLength(1);
    expect((await ledger.listRows({ conversationId: CONV })).rows.map((r) => r.key)).toEqual([first.key]);
  });

  it("IDENT-10 two calls of the tool at ordinals 0 and 1, both re-keyed: each answered by its own row (the whole request tells them apart)", async () => {
    const effects: Effect[] = [];
    const { old, next } = dispatchers(new MemoryLedger(), effects);
    const a = old.turn(at);
    const firsts = await Promise.all([a.dispatch(pay("first")), a.dispatch(pay("second"))]);
    const b = next.turn({ ...at, resumed: true });
    const agains = await Promise.all([b.dispatch(pay("first")), b.dispatch(pay("second"))]);
    expect(agains.map((o) => [o.key, o.replayed])).toEqual(firsts.map((o) => [o.key, true]));
    expect(effects).toHaveLength(2);
  });

  it("IDENT-10 two calls of the re-run, both with the first row's very request: the first adopts that row, the second the row left (never the one already adopted: two calls answered by one run, DISPATCH-6)", async () => {
    // Blind round N's N21: without the adopted set both calls took the "first" row by its whole
    // request, and the "second" payment, made by the turn's first run, was answered nowhere.
    for (const second of ["first", "re-worded"]) {
      const effects: Effect[] = [];
      const { old, next } = dispatchers(new MemoryLedger(), effects);
      const a = old.turn(at);
      const firsts = await Promise.all([a.dispatch(pay("first")), a.dispatch(pay("second"))]);
      const b = next.turn({ ...at, resumed: true });
      const agains = await Promise.allSettled([b.dispatch(pay("first")), b.dispatch(pay(second))]);
      expect(
        agains.map((r) => (r.status === "fulfilled" ? [r.value.key, r.value.replayed] : (r.reason as { code?: string }).code)),
        `the second call's memo: ${second}`,
      ).toEqual(firsts.map((o) => [o.key, true]));
      expect(effects).toHaveLength(2);
    }
  });

  it("IDENT-10 two identical calls at ordinals 0 and 1, both re-keyed: nothing tells which row is which, so both are refused (ambiguous), none paid again", async () => {
    const effects: Effect[] = [];
    const { old, next } = dispatchers(new MemoryLedger(), effects);
    const a = old.turn(at);
    await Promise.all([a.dispatch(pay()), a.dispatch(pay())]);
    const b = next.turn({ ...at, resumed: true });
    const results = await Promise.allSettled([b.dispatch(pay()), b.dispatch(pay())]);
    expect(results.map((r) => r.status === "rejected" && (r.reason as { code?: string; reason?: string }).reason)).toEqual(["ambiguous", "ambiguous"]);
    expect(effects).toHaveLength(2);
  });

  it("IDENT-10 two calls of one identity at ordinals 0 and 1, both re-keyed and re-worded (memos outside the identity): neither whole request tells the rows apart, so both are refused (ambiguous), none paid again", async () => {
    const effects: Effect[] = [];
    const { old, next } = dispatchers(new MemoryLedger(), effects);
    const a = old.turn(at);
    await Promise.all([a.dispatch(pay("first")), a.dispatch(pay("second"))]);
    const b = next.turn({ ...at, resumed: true });
    const results = await Promise.allSettled([b.dispatch(pay("first, re-worded")), b.dispatch(pay("second, re-worded"))]);
    expect(effects).toHaveLength(2);
    expect(results.map((r) => r.status === "rejected" && (r.reason as { code?: string; reason?: string }).reason)).toEqual(["ambiguous", "ambiguous"]);
  });

  it("IDENT-10 KEY-11: another tenant's row at the same conversation and turn, and a row under a key a caller chose, are never adopted", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const { old, next } = dispatchers(ledger, effects);
    const theirs = { conversationId: tenantConversationId("tenant-b", CONV), turnIndex: 3 };
    const ours = { conversationId: tenantConversationId("tenant-a", CONV), turnIndex: 3 };
    await old.turn(theirs).dispatch(pay());
    await ledger.claim({ key: "chosen-by-a-caller", toolName: "send_payment", effect: "keyed_write", owner: "x", leaseMs: 1, request: JSON.stringify(pay().input), ...ours });
    const mine = await next.turn({ ...ours, resumed: true }).dispatch(pay());
    expect([mine.key, mine.replayed]).toEqual([next.keyFor(pay(), { ...ours, ordinal: 0 }), false]);
    expect(effects).toHaveLength(2); // tenant A never paid before: its payment is its own
  });

  it("IDENT-10 a call that is another call under the new definition (another payee) runs as today", async () => {
    const effects: Effect[] = [];
    const { old, next } = dispatchers(new MemoryLedger(), effects);
    await old.turn(at).dispatch(pay());
    const other = await next.turn({ ...at, resumed: true }).dispatch(pay("rent", "bob"));
    expect(other.replayed).toBe(false);
    expect(effects.map((e) => e.payee)).toEqual(["acme", "bob"]);
  });

  it("IDENT-10 a listing that fails: ledger_unavailable under the call's key, nothing claimed or run; the re-send lists again and is answered by the row", async () => {
    const { ledger, base, state } = counted();
    const effects: Effect[] = [];
    const { old, next } = dispatchers(ledger, effects);
    const first = await old.turn(at).dispatch(pay());
    state.down = true;
    const error = await next.turn({ ...at, resumed: true }).dispatch(pay()).catch((e: unknown) => e);
    expect(LedgerUnavailableError.isInstance(error) && error.key).toBe(next.keyFor(pay(), { ...at, ordinal: 0 }));
    expect((await base.listRows({ conversationId: CONV })).rows).toHaveLength(1);
    state.down = false;
    state.corrupt = true;
    // A row that cannot be read back stays ledger_corrupt (the operator's, not retryable), nothing run.
    const corrupt = await next.turn({ ...at, resumed: true }).dispatch(pay()).catch((e: unknown) => e);
    expect(LedgerCorruptError.isInstance(corrupt)).toBe(true);
    state.corrupt = false;
    const again = await next.turn({ ...at, resumed: true }).dispatch(pay());
    expect([again.key, effects.length]).toEqual([first.key, 1]);
  });

  it("IDENT-10 documented limits: a ledger that does not list rows is warned of once and runs as today; a row swept by retention has nothing to adopt", async () => {
    const base = new MemoryLedger();
    const unlisted: Ledger = Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, supports: { ...base.capabilities.supports, listRows: false } } });
    const effects: Effect[] = [];
    const { logger, warnings } = recordingLogger();
    const { old, next } = dispatchers(unlisted, effects, {}, { logger });
    await old.turn(at).dispatch(pay());
    await next.turn({ ...at, resumed: true }).dispatch(pay());
    await next.turn({ ...at, resumed: true }).dispatch(pay("again"));
    expect(warnings.filter((w) => w.message.includes("IDENT-10"))).toHaveLength(1);
    expect(effects).toHaveLength(2);

    const clock = manualClock();
    const swept = new MemoryLedger({ now: clock.now, retentionMs: 1_000 });
    const sweptEffects: Effect[] = [];
    const pair = dispatchers(swept, sweptEffects);
    await pair.old.turn(at).dispatch(pay());
    clock.advance(2_000);
    await swept.sweep();
    await pair.next.turn({ ...at, resumed: true }).dispatch(pay());
    expect(sweptEffects).toHaveLength(2); // TURN-12's re-send window (below retention) is what covers this
  });

  it("IDENT-10 a rollback is the same case turned round: the new definition paid in the turn's first run, the old one re-runs it and answers from that row", async () => {
    const effects: Effect[] = [];
    const { old, next } = dispatchers(new MemoryLedger(), effects);
    const first = await next.turn(at).dispatch(pay());
    const again = await old.turn({ ...at, resumed: true }).dispatch(pay("after the rollback"));
    expect([again.key, again.replayed, effects.length]).toEqual([first.key, true, 1]);
  });

  it("IDENT-10 a row of the same definition at another user message's ordinals (AISDK-17: from 1 000 000) is that message's, never adopted by this one's call", async () => {
    const effects: Effect[] = [];
    const { next } = dispatchers(new MemoryLedger(), effects);
    const otherTab = await next.dispatch(pay(), { ...at, ordinal: 1_000_000 });
    const mine = await next.dispatch(pay(), { ...at, ordinal: 1, resumed: true });
    expect([mine.key === otherTab.key, mine.replayed, effects.length]).toEqual([false, false, 2]);
  });

  it("IDENT-10 dispatch() with an explicit ordinal and resumed lists for its one call and answers from the row", async () => {
    const { ledger, state } = counted();
    const effects: Effect[] = [];
    const { old, next } = dispatchers(ledger, effects);
    const first = await old.dispatch(pay(), { ...at, ordinal: 0 });
    const again = await next.dispatch(pay(), { ...at, ordinal: 0, resumed: true });
    expect([again.key, again.replayed, effects.length, state.listings]).toEqual([first.key, true, 1, 1]);
  });

  it("IDENT-10 IDENT-6: a tool that refuses differing requests (client-assigned keys) is left out: nothing listed, dispatched as before", async () => {
    const { ledger, state } = counted();
    const effects: Effect[] = [];
    const refusing = defineTool({ ...payTool(effects), onRequestDiffers: "refuse" });
    const dispatcher = new Dispatcher({ tools: new ToolRegistry([refusing]), ledger, logger: { warn: () => {} } });
    await dispatcher.turn({ ...at, resumed: true }).dispatch(pay());
    expect([state.listings, effects.length]).toEqual([0, 1]);
  });
});
