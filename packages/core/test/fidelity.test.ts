import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  MemoryLedger,
  ToolError,
  canonicalize,
  defineTool,
  isDispatchOnceError,
  type DispatchEvent,
  type Ledger,
} from "../src/index.js";
import { manualClock, recordingLogger } from "./helpers.js";

const turn0 = { conversationId: "conv_fidelity", turnIndex: 0 };
const pay = { payee: "acme", amount: 125_000, currency: "EUR", memo: "Invoice 1042" };
const reworded = { ...pay, memo: "Paying invoice no. 1042" };

/**
 * A keyed downstream with the IETF draft's semantics: the first request under a key is
 * performed; a repeat with the same body is answered with the stored response; a repeat with
 * another body is refused (422) without being performed. `lose` drops the response of the next
 * accepted request (performed, but the caller never hears).
 */
function keyedDownstream() {
  const byKey = new Map<string, { body: string; id: string }>();
  const effects: { key: string; body: Record<string, unknown> }[] = [];
  let loseNext = 0;
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string() }),
    identity: ["payee", "amount", "currency"],
    async run(args, ctx) {
      const body = JSON.stringify(args);
      const held = byKey.get(ctx.idempotencyKey);
      if (held !== undefined) {
        if (held.body !== body) {
          throw new ToolError("422 key reused with a different request", { disposition: "request_mismatch" });
        }
        return { paymentId: held.id, replayed: true };
      }
      const id = `pay_${effects.length + 1}`;
      byKey.set(ctx.idempotencyKey, { body, id });
      effects.push({ key: ctx.idempotencyKey, body: args });
      if (loseNext > 0) {
        loseNext--;
        throw new Error("socket hang up after the request was sent");
      }
      return { paymentId: id, replayed: false };
    },
  });
  return { tool, effects, byKey, lose: () => void loseNext++ };
}

describe("re-run fidelity (LEDGER-21, IDENT-3)", () => {
  it("LEDGER-21 a re-run after a lost response sends the first request, so a re-worded memo is not a 422", async () => {
    const down = keyedDownstream();
    const { logger, warnings } = recordingLogger();
    const events: DispatchEvent[] = [];
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, logger, onEvent: (e) => events.push(e) });
    down.lose();
    const first = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    await expect(first).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
    // The retried model re-words the memo; same identity, same key.
    const retry = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    expect(retry.result).toEqual({ paymentId: "pay_1", replayed: true });
    expect(down.effects).toHaveLength(1);
    expect(down.effects[0]!.body.memo).toBe("Invoice 1042");
    const row = await ledger.lookup(retry.key);
    expect(row).toMatchObject({ state: "completed", request: JSON.stringify(pay) });
    expect(events.filter((e) => e.type === "request_differs")).toEqual([
      expect.objectContaining({ key: retry.key, stored: JSON.stringify(pay), replay: JSON.stringify(reworded) }),
    ]);
    expect(warnings.some((w) => w.message.includes("differ"))).toBe(true);
  });

  it("IDENT-3 the warning of a re-worded replay names the fields that differ, never the arguments' values (a log is no place for a payee or a memo); the event carries both requests", async () => {
    const down = keyedDownstream();
    const { logger, warnings } = recordingLogger();
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: new MemoryLedger(), logger, onEvent: (e) => events.push(e) });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    const differs = warnings.filter((w) => w.message.includes("differ"));
    expect(differs).toHaveLength(1);
    const logged = JSON.stringify(differs[0]);
    for (const value of ["acme", "Invoice 1042", "Paying invoice no. 1042", "125000"]) expect(logged).not.toContain(value);
    expect(differs[0]!.fields).toMatchObject({ tool: "send_payment", differingFields: ["memo"] });
    expect(events.filter((e) => e.type === "request_differs")).toEqual([expect.objectContaining({ stored: JSON.stringify(pay), replay: JSON.stringify(reworded) })]);
  });

  it("LEDGER-21 a takeover re-runs the first owner's request, not the replay's", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const down = keyedDownstream();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, leaseMs: 1_000 });
    const key = dispatcher.keyFor({ name: "send_payment", input: pay }, turn0);
    // A worker claimed with the original memo, performed nothing we know of, and died.
    await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "dead", leaseMs: 1_000, request: JSON.stringify(pay) });
    clock.advance(1_001);
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    expect(outcome.replayed).toBe(false);
    expect(down.effects.map((e) => e.body.memo)).toEqual(["Invoice 1042"]);
  });

  it("IDENT-3 a replay answered from a completed row logs the re-worded arguments and runs nothing", async () => {
    const down = keyedDownstream();
    const { logger, warnings } = recordingLogger();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: new MemoryLedger(), logger });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    const again = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    expect(again.replayed).toBe(true);
    expect(down.effects).toHaveLength(1);
    expect(warnings.filter((w) => w.message.includes("differ"))).toHaveLength(1);
  });
});

describe("which request an outcome belongs to (IDENT-3: storedRequest)", () => {
  it("IDENT-3 a replay answered from a completed row names the stored request, whose memo the payment carried", async () => {
    const down = keyedDownstream();
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, logger: recordingLogger().logger });
    const first = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    expect(first).not.toHaveProperty("storedRequest");
    const again = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    expect(again).toMatchObject({ replayed: true, storedRequest: pay });
    // What the outcome says ran is what the downstream performed and the ledger holds.
    expect(down.effects.map((e) => e.body)).toEqual([pay]);
    expect(JSON.parse((await ledger.lookup(again.key))!.request)).toEqual(again.storedRequest);
  });

  it("IDENT-3 a re-run after release runs the stored request and says so: the result is not the re-worded call's", async () => {
    const down = keyedDownstream();
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, logger: recordingLogger().logger });
    down.lose();
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "claim_released" });
    const retry = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    expect(retry).toMatchObject({ replayed: false, storedRequest: pay });
    expect(down.effects.map((e) => e.body.memo)).toEqual(["Invoice 1042"]);
  });

  it("IDENT-3 a takeover of a dead owner's claim runs its request and names it", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const down = keyedDownstream();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, leaseMs: 1_000, logger: recordingLogger().logger });
    const key = dispatcher.keyFor({ name: "send_payment", input: pay }, turn0);
    await ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "dead", leaseMs: 1_000, request: JSON.stringify(pay) });
    clock.advance(1_001);
    const outcome = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    expect(outcome).toMatchObject({ replayed: false, storedRequest: pay });
    expect(down.effects.map((e) => e.body)).toEqual([pay]);
  });

  it("IDENT-3 a re-worded call that meets a stored unknown outcome is told which request's outcome is unknown (OutcomeUnknownError.storedRequest)", async () => {
    const ledger = new MemoryLedger();
    const tool = defineTool({
      name: "post_invoice",
      effect: "unkeyed_write",
      identity: ["payee", "amount", "currency"],
      input: z.object({ payee: z.string(), amount: z.number(), currency: z.string(), memo: z.string() }),
      run: () => {
        throw new Error("socket hang up"); // unclassified: for an unkeyed write, unknown
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, allowVolatileLedgerForUnkeyedWrites: true, logger: recordingLogger().logger });
    const first = await dispatcher.turn(turn0).dispatch({ name: "post_invoice", input: pay }).catch((e: unknown) => e);
    expect(isDispatchOnceError(first, "outcome_unknown")).toBe(true);
    expect(first).not.toHaveProperty("storedRequest");
    const again = await dispatcher.turn(turn0).dispatch({ name: "post_invoice", input: reworded }).catch((e: unknown) => e);
    expect(isDispatchOnceError(again, "outcome_unknown")).toBe(true);
    expect(again).toMatchObject({ storedRequest: pay });
  });

  it("IDENT-3 the same request in another member order or number spelling is not a different request: no storedRequest", async () => {
    const down = keyedDownstream();
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger, logger: recordingLogger().logger });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay });
    const reordered = { memo: pay.memo, currency: pay.currency, amount: 1.25e5, payee: pay.payee };
    const again = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reordered });
    expect(again.replayed).toBe(true);
    expect(again).not.toHaveProperty("storedRequest");
  });
});

describe("truthful outcomes (EFFECT-6, LEDGER-8, DISPATCH-7)", () => {
  it("EFFECT-6 a downstream 'key reused with a different request' is an unknown outcome, never a definite failure", async () => {
    const down = keyedDownstream();
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger });
    const key = dispatcher.keyFor({ name: "send_payment", input: pay }, turn0);
    // The ledger forgot the claim (a wiped volatile store); the downstream still holds the key.
    down.byKey.set(key, { body: JSON.stringify(pay), id: "pay_0" });
    const first = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded });
    await expect(first).rejects.toMatchObject({ code: "outcome_unknown" });
    expect((await ledger.lookup(key))?.state).toBe("unknown");
    // Never re-run, never reported as "did not happen".
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({
      code: "outcome_unknown",
    });
  });

  it("LEDGER-8 a ToolError without a disposition is unknown, not definite", async () => {
    let runs = 0;
    const unkeyed = defineTool({
      name: "create_ticket",
      effect: "unkeyed_write",
      input: z.object({ title: z.string() }),
      run: () => {
        runs++;
        throw new ToolError("upstream timeout", {} as never);
      },
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [unkeyed], ledger, allowVolatileLedgerForUnkeyedWrites: true, logger: recordingLogger().logger });
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_ticket", input: { title: "x" } })).rejects.toMatchObject({
      code: "outcome_unknown",
    });
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_ticket", input: { title: "x" } })).rejects.toMatchObject({
      code: "outcome_unknown",
    });
    expect(runs).toBe(1);
    expect(new ToolError("x", { disposition: "definte" as never }).disposition).toBe("unknown");
  });

  it("DISPATCH-7 results follow JSON semantics: Dates, toJSON and class instances store and replay", async () => {
    class Payment {
      constructor(
        readonly id: string,
        readonly createdAt: Date,
      ) {}
      secret() {
        return "not data";
      }
    }
    const sdkLike = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => ({ payment: new Payment("pay_1", new Date(0)), money: { toJSON: () => "12.50 EUR" }, skipped: undefined }),
    });
    const dispatcher = new Dispatcher({ tools: [sdkLike], ledger: new MemoryLedger() });
    const first = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    expect(first.result).toEqual({ payment: { id: "pay_1", createdAt: "1970-01-01T00:00:00.000Z" }, money: "12.50 EUR" });
    const again = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    expect(again.resultJson).toBe(first.resultJson);
  });

  it('DISPATCH-7 a result member named "__proto__" (as JSON.parse makes it) is stored as JSON.stringify sends it, at any depth', async () => {
    // The JSON-semantics copy assigned members, and assigning "__proto__" set the copy's prototype:
    // a scalar member was lost, and an object member made an effect that happened fail as
    // result_not_storable.
    for (const text of ['{"__proto__":1,"b":2}', '{"__proto__":{"x":[1]},"b":2}', '{"wrap":{"__proto__":null}}', '[{"__proto__":"s"}]']) {
      const tool = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({}), run: () => JSON.parse(text) as unknown });
      const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger() });
      const first = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: {} });
      expect(JSON.parse(first.resultJson)).toEqual(JSON.parse(text));
      expect(first.resultJson).toBe(canonicalize(JSON.parse(text)));
      expect(JSON.stringify(first.result)).toBe(JSON.stringify(JSON.parse(first.resultJson)));
      const read = defineTool({ name: "lookup", effect: "read", input: z.object({}), run: () => JSON.parse(text) as unknown });
      const reader = new Dispatcher({ tools: [read], ledger: new MemoryLedger() });
      expect((await reader.turn(turn0).dispatch({ name: "lookup", input: {} })).resultJson).toBe(first.resultJson);
    }
  });

  it("LEDGER-10 a result JSON.stringify would corrupt (bigint, NaN) fails closed and replays as result_not_storable", async () => {
    for (const bad of [{ amount: 10n }, { ratio: Number.NaN }]) {
      let runs = 0;
      const tool = defineTool({
        name: "send_payment",
        effect: "keyed_write",
        input: z.object({}),
        run: () => {
          runs++;
          return bad;
        },
      });
      const ledger = new MemoryLedger();
      const dispatcher = new Dispatcher({ tools: [tool], ledger });
      await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: {} })).rejects.toMatchObject({ code: "result_not_storable" });
      await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: {} })).rejects.toMatchObject({ code: "result_not_storable" });
      expect(runs).toBe(1);
    }
  });
});

describe("impure schemas (IDENT-5)", () => {
  it("IDENT-5 a default that is not pure on an identity field is refused before anything is claimed", async () => {
    let tick = 0;
    const tool = defineTool({
      name: "schedule_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), executeOn: z.string().default(() => `2026-12-${String(++tick).padStart(2, "0")}`) }),
      identity: ["payee", "executeOn"],
      run: () => ({ ok: true }),
    });
    const ledger = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger });
    await expect(dispatcher.turn(turn0).dispatch({ name: "schedule_payment", input: { payee: "acme" } })).rejects.toMatchObject({
      code: "invalid_tool_definition",
    });
    expect(ledger.size).toBe(0);
  });

  it("IDENT-5 a pure default is accepted and an impure one outside the identity is stored with the first request", async () => {
    let tick = 0;
    const seen: string[] = [];
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), currency: z.string().default("EUR"), note: z.string().default(() => `n${++tick}`) }),
      identity: ["payee", "currency"],
      run: (args) => {
        seen.push(args.note);
        throw new ToolError("lost", { disposition: "unknown" });
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger() });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { payee: "acme" } })).rejects.toMatchObject({ code: "claim_released" });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { payee: "acme" } })).rejects.toMatchObject({ code: "claim_released" });
    // The re-run ran with the first request's note, not a freshly defaulted one.
    expect(seen).toHaveLength(2);
    expect(seen[1]).toBe(seen[0]);
  });
});

describe("hostile arguments to the dispatcher", () => {
  const dispatcher = new Dispatcher({ tools: [keyedDownstream().tool], ledger: new MemoryLedger() });

  it("ERR-1 dispatch(null), turn(null) and a non-object context are typed errors", async () => {
    await expect(dispatcher.turn(turn0).dispatch(null as never)).rejects.toMatchObject({ code: "invalid_argument", field: "call" });
    expect(() => dispatcher.turn(null as never)).toThrow(expect.objectContaining({ code: "invalid_argument" }));
    await expect(dispatcher.dispatch({ name: "send_payment", input: pay }, null as never)).rejects.toMatchObject({ code: "invalid_argument" });
  });

  it("ERR-1 an array is not a call or a context: invalid_argument naming it, not a later error about its parts", async () => {
    await expect(dispatcher.turn(turn0).dispatch(["send_payment", pay] as never)).rejects.toMatchObject({ code: "invalid_argument", field: "call" });
    expect(() => dispatcher.turn(["conv_fidelity", 0] as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "context" }));
    await expect(dispatcher.dispatch({ name: "send_payment", input: pay }, ["conv_fidelity", 0] as never)).rejects.toMatchObject({ code: "invalid_argument", field: "context" });
  });

  it("ERR-1 a context member the dispatcher does not know (a misspelt ordinal, resumed) is refused naming it, before anything is claimed", async () => {
    const { tool, effects } = keyedDownstream();
    const ledger = new MemoryLedger();
    const paying = new Dispatcher({ tools: [tool], ledger });
    const call = { name: "send_payment", input: pay };
    // The second of two identical payments, its ordinal misspelt: read as ordinal 0, it would take
    // the first's key and replay its result, and the second payment the user asked for never happens.
    await paying.dispatch(call, { ...turn0, ordinal: 0 });
    const second = await paying.dispatch(call, { ...turn0, ordnial: 1 } as never).then(
      (outcome) => `replayed=${String(outcome.replayed)}`,
      (error: unknown) => error,
    );
    expect(second).toMatchObject({ code: "invalid_argument", field: "context.ordnial" });
    expect(effects).toHaveLength(1);
    expect(() => paying.keyFor(call, { ...turn0, resume: true } as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "context.resume" }));
    // turn() counts ordinals itself: an ordinal given to it would be ignored, so it is refused too.
    expect(() => paying.turn({ ...turn0, ordinal: 1 } as never)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "context.ordinal" }));
    // Every member a context has is accepted, undefined optional ones included.
    expect(() => paying.turn({ ...turn0, resumed: undefined })).not.toThrow();
    expect(paying.keyFor(call, { ...turn0, resumed: false, ordinal: undefined })).toBe(paying.keyFor(call, turn0));
  });

  it("ERR-1 a call member the dispatcher does not know (the ordinal put in the call, a misspelt callId) is refused naming it, before anything is claimed", async () => {
    const { tool, effects } = keyedDownstream();
    const paying = new Dispatcher({ tools: [tool], ledger: new MemoryLedger() });
    // The adoption trial: the second of two identical payments with its ordinal in the call, where
    // the dispatcher never reads it: ordinal 0, the first's key, its result replayed, and the
    // second payment the user asked for never happens while the answer says it was paid.
    await paying.dispatch({ name: "send_payment", input: pay }, turn0);
    const second = await paying.dispatch({ name: "send_payment", input: pay, ordinal: 1 } as never, turn0).then(
      (outcome) => `replayed=${String(outcome.replayed)}`,
      (error: unknown) => error,
    );
    expect(second).toMatchObject({ code: "invalid_argument", field: "call.ordinal" });
    expect(String((second as Error).message)).toContain("context");
    expect(effects).toHaveLength(1);
    await expect(paying.turn(turn0).dispatch({ name: "send_payment", input: pay, callID: "toolu_1" } as never)).rejects.toMatchObject({ code: "invalid_argument", field: "call.callID" });
    expect(() => paying.keyFor({ name: "send_payment", arguments: pay } as never, turn0)).toThrow(expect.objectContaining({ code: "invalid_argument", field: "call.arguments" }));
    // Every member a call has is accepted, an undefined callId included.
    await expect(paying.turn(turn0).dispatch({ name: "send_payment", input: pay, callId: undefined })).resolves.toMatchObject({ replayed: true });
  });

  it("KEY-4 an ordinal that is present but null is refused, never read as 0", async () => {
    await expect(dispatcher.dispatch({ name: "send_payment", input: pay }, { ...turn0, ordinal: null as never })).rejects.toMatchObject({
      code: "invalid_key_input",
      field: "ordinal",
    });
  });

  it("DISPATCH-1 a tool name that is a bigint or a symbol is unknown_tool with a readable message", async () => {
    await expect(dispatcher.turn(turn0).dispatch({ name: 10n as never, input: {} })).rejects.toMatchObject({ code: "unknown_tool" });
    await expect(dispatcher.turn(turn0).dispatch({ name: Symbol("x") as never, input: {} })).rejects.toMatchObject({ code: "unknown_tool" });
  });

  it("DISPATCH-2 an input whose getter throws is tool_input_invalid, not the raw error", async () => {
    const input = {
      ...pay,
      get memo(): string {
        throw new Error("boom");
      },
    };
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input })).rejects.toMatchObject({ code: "tool_input_invalid" });
  });
});

describe("two copies of core in one process (ERR-3)", () => {
  // The package's own ESM and CJS builds are two copies with two sets of classes, as a
  // consumer mixing import and require (or two versions) gets.
  const require = createRequire(import.meta.url);
  const cjsPath = fileURLToPath(new URL("../dist/index.cjs", import.meta.url));
  const esmPath = new URL("../dist/index.js", import.meta.url).href;

  it("ERR-3 errors of one copy are recognised by the other (brand, not instanceof)", async () => {
    const cjs = require(cjsPath) as typeof import("../src/index.js");
    const esm = (await import(esmPath)) as typeof import("../src/index.js");
    expect(esm.StaleClaimError).not.toBe(cjs.StaleClaimError);
    const stale = new cjs.StaleClaimError("k", 1);
    expect(stale instanceof esm.DispatchOnceError).toBe(false);
    expect(esm.isDispatchOnceError(stale, "stale_claim")).toBe(true);
    expect(esm.DispatchOnceError.isInstance(stale)).toBe(true);
    expect(isDispatchOnceError(new esm.ToolFailedError("k", { name: "E", message: "m" }, false), "tool_failed")).toBe(true);
    expect(esm.ToolError.isInstance(new cjs.ToolError("x", { disposition: "definite" }))).toBe(true);
    expect(isDispatchOnceError(new Error("plain"))).toBe(false);
  });

  it("ERR-3 a dispatcher of one copy over a ledger and tools of the other keeps the protocol", async () => {
    const cjs = require(cjsPath) as typeof import("../src/index.js");
    const esm = (await import(esmPath)) as typeof import("../src/index.js");
    // Fail-closed path: the other copy's ledger refuses an oversized result with its own class.
    let runs = 0;
    const big = esm.defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({}),
      run: () => {
        runs++;
        return { text: "x".repeat(100) };
      },
    });
    const small = new cjs.MemoryLedger({ maxResultBytes: 1_000_000 });
    // The ledger declares a large limit but its complete() refuses: only its error says so.
    const refusing: Ledger = Object.assign(Object.create(small) as Ledger, {
      capabilities: small.capabilities,
      complete: (key: string) => Promise.reject(new cjs.ResultNotStorableError(key, "too big for this store")),
    });
    const dispatcher = new esm.Dispatcher({ tools: new cjs.ToolRegistry([big]) as never, ledger: refusing });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: {} })).rejects.toMatchObject({ code: "result_not_storable" });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: {} })).rejects.toMatchObject({ code: "result_not_storable" });
    expect(runs).toBe(1);

    // Lease path: the other copy's stale_claim on renewal aborts the tool (DISPATCH-11).
    const ledger = new cjs.MemoryLedger();
    const losing: Ledger = Object.assign(Object.create(ledger) as Ledger, {
      capabilities: ledger.capabilities,
      renew: (key: string, fence: number) => Promise.reject(new cjs.StaleClaimError(key, fence)),
    });
    let aborted = false;
    const slow = esm.defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({}),
      run: (_args, ctx) =>
        new Promise((resolve) => {
          ctx.signal.addEventListener("abort", () => {
            aborted = true;
            resolve({ aborted: true });
          });
          setTimeout(() => resolve({ aborted: false }), 2_000);
        }),
    });
    const events: DispatchEvent[] = [];
    const d2 = new esm.Dispatcher({ tools: [slow], ledger: losing, leaseMs: 30, onEvent: (e) => events.push(e) });
    await d2.turn(turn0).dispatch({ name: "send_payment", input: {} }).catch(() => undefined);
    expect(aborted).toBe(true);
    expect(events).toContainEqual(expect.objectContaining({ type: "lease_lost", reason: "stale_claim" }));
    // The losing run's reports name its fence: telemetry keeps them off a takeover's span (OTEL-4).
    const { fence } = events.find((e) => e.type === "claimed") as { fence: number };
    expect(events.filter((e) => e.type === "lease_lost" || e.type === "run_finished")).toEqual([expect.objectContaining({ fence }), expect.objectContaining({ fence })]);
  });
});

describe("ledger errors after the tool ran (ERR-4)", () => {
  it("ERR-4 a ledger that refuses to record an outcome after the run never reads as 'did not happen'", async () => {
    const { InvalidLedgerInputError } = await import("../src/index.js");
    const base = new MemoryLedger();
    const refusing: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      complete: () => Promise.reject(new InvalidLedgerInputError("pool", "the connection is inside a transaction")),
    });
    const down = keyedDownstream();
    const dispatcher = new Dispatcher({ tools: [down.tool], ledger: refusing });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: pay })).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(down.effects).toHaveLength(1);
  });
});

describe("self-fencing (DISPATCH-13)", () => {
  it("DISPATCH-13 renewals that cannot reach the ledger for longer than the lease abort the tool", async () => {
    const ledger = new MemoryLedger();
    const unreachable: Ledger = Object.assign(Object.create(ledger) as Ledger, {
      capabilities: ledger.capabilities,
      renew: () => Promise.reject(Object.assign(new Error("ECONNRESET"), { code: "ledger_unavailable" })),
    });
    let aborted = false;
    const slow = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({}),
      run: (_args, ctx) =>
        new Promise((resolve, reject) => {
          ctx.signal.addEventListener("abort", () => {
            aborted = true;
            reject(new Error("aborted: claim not confirmed"));
          });
          setTimeout(() => resolve({ late: true }), 3_000);
        }),
    });
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [slow], ledger: unreachable, leaseMs: 60, onEvent: (e) => events.push(e), logger: recordingLogger().logger });
    const outcome = dispatcher.turn(turn0).dispatch({ name: "send_payment", input: {} });
    await expect(outcome).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
    expect(aborted).toBe(true);
    expect(events).toContainEqual(expect.objectContaining({ type: "lease_lost", reason: "lease_unconfirmed" }));
  });
});

describe("expired claims are listable (LEDGER-25)", () => {
  it("LEDGER-25 the memory ledger lists exactly the expired in-flight rows, oldest first, and changes nothing", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    const claim = (key: string, leaseMs: number) =>
      ledger.claim({ key, toolName: "t", effect: "unkeyed_write", owner: "o", leaseMs, request: "{}" });
    await claim("a".repeat(32), 100);
    await claim("b".repeat(32), 50);
    await claim("c".repeat(32), 10_000);
    clock.advance(200);
    const listed = await ledger.listExpiredInFlight({ olderThanMs: 0 });
    expect(listed.map((r) => r.key)).toEqual(["b".repeat(32), "a".repeat(32)]);
    expect((await ledger.lookup("a".repeat(32)))?.state).toBe("in_flight");
    expect(await ledger.listExpiredInFlight({ olderThanMs: 120 })).toHaveLength(1);
    await expect(ledger.listExpiredInFlight({ limit: 0 })).rejects.toMatchObject({ code: "invalid_ledger_input", field: "limit" });
  });
});

describe("a not-performed failure after an earlier run (RECORD-2, spin model finding np-says-not)", () => {
  it("RECORD-2 a keyed re-run refused before acceptance after a lost response is 'may have happened', not 'not performed'", async () => {
    let runs = 0;
    const flaky = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        runs++;
        // Run 1: performed downstream, response lost. Run 2: refused before acceptance (503).
        if (runs === 1) throw new ToolError("socket hang up", { disposition: "unknown" });
        throw new ToolError("503 before acceptance", { disposition: "not_performed" });
      },
    });
    const dispatcher = new Dispatcher({ tools: [flaky], ledger: new MemoryLedger() });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } })).rejects.toMatchObject({
      code: "claim_released",
      effectMayHaveHappened: true,
    });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } })).rejects.toMatchObject({
      code: "claim_released",
      effectMayHaveHappened: true,
    });
    // A first claim refused before acceptance on a durable ledger is still "not performed"; on a
    // volatile one an earlier run's row may have been forgotten, so it is "may have happened".
    const base = new MemoryLedger();
    const durable: Ledger = Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" } });
    const fresh = new Dispatcher({ tools: [flaky], ledger: durable });
    await expect(fresh.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } })).rejects.toMatchObject({
      effectMayHaveHappened: false,
    });
  });
});

describe("a not-performed failure after an earlier run of an unkeyed_write (LEDGER-8: whatever the write class)", () => {
  // LEDGER-8 and §11's note: claim_released says "not performed" only on the key's first claim on a
  // durable ledger in a turn that was not resumed, whatever the class. An unkeyed_write's row is
  // released again after an operator's not_performed resolution (RESOLVE-3), and a paused earlier
  // owner may still send its request (§6.12's known residual); a volatile ledger may have forgotten
  // the run that performed it. The run that says "not performed" speaks for itself only.
  const refusedAfter = (firstRun: "unknown" | "not_performed") => {
    let runs = 0;
    return defineTool({
      name: "create_record",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        runs++;
        if (runs === 1) throw new ToolError(firstRun === "unknown" ? "socket hang up" : "503 before acceptance", { disposition: firstRun });
        throw new ToolError("503 before acceptance", { disposition: "not_performed" });
      },
    });
  };
  const call = { name: "create_record", input: { amount: 1 } };

  it("LEDGER-8 a re-claim of an unkeyed_write released by an operator's not_performed (fence above 1) is 'may have happened'", async () => {
    const base = new MemoryLedger();
    const durable: Ledger = Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" } });
    const dispatcher = new Dispatcher({ tools: [refusedAfter("unknown")], ledger: durable });
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "outcome_unknown" });
    const key = dispatcher.keyFor(call, turn0);
    await durable.resolve!({ key, resolution: { outcome: "not_performed" }, actor: "ops", reason: "nothing found downstream" });
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
  });

  it("LEDGER-8 an unkeyed_write's first claim on a volatile ledger (allowed explicitly) is 'may have happened': an earlier run's row may be forgotten", async () => {
    const dispatcher = new Dispatcher({ tools: [refusedAfter("not_performed")], ledger: new MemoryLedger(), allowVolatileLedgerForUnkeyedWrites: true, logger: recordingLogger().logger });
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
  });
});

describe("a not-performed failure in a resumed turn (RECORD-2, proposed TURN-15, spin model finding resume-says-not)", () => {
  const refused = (effect: "keyed_write" | "unkeyed_write", events: DispatchEvent[] = []) => {
    const tool = defineTool({
      name: "send_payment",
      effect,
      input: z.object({ amount: z.number() }),
      run: () => {
        throw new ToolError("503 before acceptance", { disposition: "not_performed" });
      },
    });
    const base = new MemoryLedger();
    // Durable, so that a first claim's "not performed" is believed when nobody else may hold the turn.
    const durable: Ledger = Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" } });
    return new Dispatcher({ tools: [tool], ledger: durable, onEvent: (e) => events.push(e) });
  };

  it("TURN-15 a first claim refused before acceptance says 'may have happened' when the turn was resumed: the earlier holder may claim next", async () => {
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      const events: DispatchEvent[] = [];
      const dispatcher = refused(effect, events);
      await expect(dispatcher.turn({ ...turn0, resumed: true }).dispatch({ name: "send_payment", input: { amount: 1 } }), effect).rejects.toMatchObject({
        code: "claim_released",
        effectMayHaveHappened: true,
      });
      expect(events.filter((e) => e.type === "released"), effect).toEqual([expect.objectContaining({ type: "released", effectMayHaveHappened: true })]);
      // The same call in a turn this holder began itself: its own first claim, so "not performed".
      await expect(refused(effect).turn({ ...turn0, resumed: false }).dispatch({ name: "send_payment", input: { amount: 1 } }), effect).rejects.toMatchObject({
        effectMayHaveHappened: false,
      });
      await expect(refused(effect).dispatch({ name: "send_payment", input: { amount: 1 } }, { ...turn0, resumed: true }), effect).rejects.toMatchObject({
        effectMayHaveHappened: true,
      });
    }
  });

  it("TURN-15 resumed is not part of the key, and a resumed that is not a boolean is refused before anything is claimed", () => {
    const dispatcher = refused("keyed_write");
    const call = { name: "send_payment", input: { amount: 1 } };
    expect(dispatcher.keyFor(call, { ...turn0, resumed: true })).toBe(dispatcher.keyFor(call, turn0));
    expect(() => dispatcher.turn({ ...turn0, resumed: "yes" as unknown as boolean })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "context.resumed" }));
  });
});
