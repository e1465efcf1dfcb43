import { describe, expect, it, vi } from "vitest";
import { z } from "zod";
import {
  ClaimReleasedError,
  Dispatcher,
  MemoryLedger,
  OutcomeUnknownError,
  ResultNotStorableError,
  ToolError,
  defineTool,
  type DispatchEvent,
  type Ledger,
  type ReconcileVerdict,
} from "../src/index.js";
import { recordingLogger } from "./helpers.js";

const turn0 = { conversationId: "conv-r", turnIndex: 0 };

function durable(ledger: MemoryLedger): Ledger {
  return Object.assign(Object.create(ledger), {
    capabilities: { ...ledger.capabilities, durability: "durable" as const },
  }) as Ledger;
}

/**
 * A downstream whose effect log is the oracle: `performed` holds what it did, by key.
 * `loseResponse` performs the effect and then throws as a lost response would.
 */
function downstream(effect: "keyed_write" | "unkeyed_write", probe: (key: string, args: { amount: number }) => ReconcileVerdict | Promise<ReconcileVerdict>) {
  const performed = new Map<string, { id: string; amount: number }>();
  const log: string[] = [];
  let runs = 0;
  let loseResponse = true;
  const tool = defineTool({
    name: "create_invoice",
    effect,
    input: z.object({ amount: z.number(), memo: z.string().optional() }),
    identity: ["amount"],
    run: (args, ctx) => {
      runs++;
      log.push("run");
      const id = `inv_${runs}`;
      performed.set(ctx.idempotencyKey, { id, amount: args.amount });
      if (loseResponse) throw new Error("socket hang up after send");
      return { id, amount: args.amount };
    },
    reconcile: async (args, ctx) => {
      log.push(`probe:${ctx.cause}`);
      return probe(ctx.idempotencyKey, args);
    },
  });
  return {
    tool,
    performed,
    log,
    runs: () => runs,
    answerNormally: () => void (loseResponse = false),
  };
}

function setup(effect: "keyed_write" | "unkeyed_write", probe: Parameters<typeof downstream>[1], options: { resolve?: boolean } = {}) {
  const d = downstream(effect, probe);
  const memory = new MemoryLedger();
  const ledger = durable(memory);
  if (options.resolve === false) {
    // A ledger of an older adapter: no resolve() to settle with.
    Object.assign(ledger, { resolve: undefined, capabilities: { ...ledger.capabilities, supports: { ...ledger.capabilities.supports, resolve: false } } });
  }
  const events: DispatchEvent[] = [];
  const { logger, warnings } = recordingLogger();
  const dispatcher = new Dispatcher({ tools: [d.tool], ledger, logger, onEvent: (e) => events.push(e) });
  const call = { name: "create_invoice", input: { amount: 5 } };
  const key = dispatcher.keyFor(call, turn0);
  return { ...d, ledger, dispatcher, events, warnings, call, key };
}

const reconciled = (events: DispatchEvent[]) => events.filter((e) => e.type === "reconciled");

describe("reconciliation after a lost response (RECON-2)", () => {
  it("RECON-3 unkeyed: performed completes the row with the probe's result; the replay answers from the ledger", async () => {
    const s = setup("unkeyed_write", (key) => {
      const p = s.performed.get(key);
      return p ? { outcome: "performed", result: { id: p.id, amount: p.amount } } : { outcome: "not_performed" };
    });
    const first = await s.dispatcher.turn(turn0).dispatch(s.call);
    expect(first).toMatchObject({ replayed: false, result: { id: "inv_1", amount: 5 } });
    const row = await s.ledger.lookup(s.key);
    expect(row).toMatchObject({ state: "completed", result: '{"amount":5,"id":"inv_1"}' });
    const again = await s.dispatcher.turn(turn0).dispatch(s.call);
    expect(again).toMatchObject({ replayed: true, resultJson: first.resultJson });
    // The downstream's log and the ledger agree: one effect, recorded once.
    expect(s.runs()).toBe(1);
    expect([...s.performed.values()]).toEqual([{ id: "inv_1", amount: 5 }]);
    expect(s.log).toEqual(["run", "probe:tool_error"]);
    expect(reconciled(s.events)).toEqual([
      expect.objectContaining({ key: s.key, cause: "tool_error", verdict: "performed", settled: "completed" }),
    ]);
    expect(s.events.filter((e) => e.type === "recorded")).toEqual([
      { type: "recorded", key: s.key, toolName: "create_invoice", ordinal: 0, state: "completed", effect: "happened" },
    ]);
  });

  it("RECON-4 unkeyed: not_performed is not trusted (a request in transit may still land): the row stays unknown, never re-run", async () => {
    const s = setup("unkeyed_write", () => ({ outcome: "not_performed" }));
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    const row = await s.ledger.lookup(s.key);
    expect(row?.state).toBe("unknown");
    expect(row?.state === "unknown" && row.reason).toContain("reconcile: not_performed");
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toMatchObject({ code: "outcome_unknown" });
    expect(s.runs()).toBe(1);
    expect(reconciled(s.events)).toEqual([expect.objectContaining({ verdict: "not_performed", settled: "unknown" })]);
    expect(s.events.filter((e) => e.type === "recorded").map((e) => e.type === "recorded" && e.state)).toEqual(["unknown"]);
  });

  it("RECON-5 a probe that throws leaves the outcome as it would have been (unknown), never 'not happened'", async () => {
    const s = setup("unkeyed_write", () => {
      throw new Error("lookup endpoint down");
    });
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect((await s.ledger.lookup(s.key))?.state).toBe("unknown");
    expect(reconciled(s.events)).toEqual([expect.objectContaining({ verdict: "error", settled: "unknown", error: "lookup endpoint down" })]);
  });

  it("RECON-5 a probe answer that is not a verdict counts as unknown", async () => {
    const s = setup("unkeyed_write", () => ({ outcome: "yes" }) as unknown as ReconcileVerdict);
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect((await s.ledger.lookup(s.key))?.state).toBe("unknown");
    expect(reconciled(s.events)[0]).toMatchObject({ verdict: "error" });
  });

  it("RECON-3 a performed verdict whose result cannot be stored fails closed (happened, not kept), never released", async () => {
    const s = setup("keyed_write", () => ({ outcome: "performed", result: { when: new Map() } }));
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(ResultNotStorableError);
    const row = await s.ledger.lookup(s.key);
    expect(row).toMatchObject({ state: "failed", error: { code: "result_not_storable" } });
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toMatchObject({ code: "result_not_storable" });
    expect(s.runs()).toBe(1);
  });

  it("RECON-3 keyed: performed completes the row instead of releasing it for a re-run", async () => {
    const s = setup("keyed_write", (key) => {
      const p = s.performed.get(key);
      return p ? { outcome: "performed", result: p } : { outcome: "not_performed" };
    });
    const first = await s.dispatcher.turn(turn0).dispatch(s.call);
    expect(first.result).toEqual({ id: "inv_1", amount: 5 });
    expect((await s.ledger.lookup(s.key))?.state).toBe("completed");
    expect(s.runs()).toBe(1);
  });

  it("RECON-4 keyed: not_performed releases as before (the key guards the re-run against a late landing)", async () => {
    const s = setup("keyed_write", () => ({ outcome: "not_performed" }));
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(ClaimReleasedError);
    expect((await s.ledger.lookup(s.key))?.state).toBe("released");
    expect(reconciled(s.events)).toEqual([expect.objectContaining({ verdict: "not_performed", settled: "released" })]);
    s.answerNormally();
    const rerun = await s.dispatcher.turn(turn0).dispatch(s.call);
    expect(rerun.replayed).toBe(false);
    // Both runs carried the same key: a keyed downstream collapses them into one effect.
    expect([...s.performed.keys()]).toEqual([s.key]);
  });

  it("RECON-2 the probe runs after the run ended, with the stored (first) request and the call's key", async () => {
    const seen: unknown[] = [];
    let runEnded = false;
    const tool = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number(), memo: z.string() }),
      identity: ["amount"],
      run: async () => {
        await new Promise((r) => setTimeout(r, 10));
        runEnded = true;
        throw new Error("timeout");
      },
      reconcile: (args, ctx) => {
        seen.push({ args, key: ctx.idempotencyKey, runEnded, aborted: ctx.signal.aborted });
        return { outcome: "unknown" };
      },
    });
    const memory = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger: durable(memory) });
    const key = dispatcher.keyFor({ name: "create_invoice", input: { amount: 5, memo: "first" } }, turn0);
    await memory.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "x", leaseMs: 60_000, request: '{"amount":5,"memo":"first"}' });
    await memory.release(key, 1);
    await expect(
      dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 5, memo: "re-worded" } }),
    ).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect(seen).toEqual([{ args: { amount: 5, memo: "first" }, key, runEnded: true, aborted: false }]);
  });

  it("RECON-2 a definite failure or a not-performed disposition is the tool's own answer: no probe", async () => {
    for (const disposition of ["definite", "not_performed"] as const) {
      let probes = 0;
      const tool = defineTool({
        name: "create_invoice",
        effect: "unkeyed_write",
        input: z.object({ amount: z.number() }),
        run: () => {
          throw new ToolError("no", { disposition });
        },
        reconcile: () => {
          probes++;
          return { outcome: "unknown" };
        },
      });
      const dispatcher = new Dispatcher({ tools: [tool], ledger: durable(new MemoryLedger()) });
      await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { amount: 1 } })).rejects.toThrow();
      expect(probes).toBe(0);
    }
  });
});

describe("reconciliation after request_mismatch (RECON-6)", () => {
  function mismatch(verdict: ReconcileVerdict) {
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        throw new ToolError("Idempotency-Key reused with another body", { disposition: "request_mismatch" });
      },
      reconcile: () => verdict,
    });
    const memory = new MemoryLedger();
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger: memory, onEvent: (e) => events.push(e) });
    const call = { name: "send_payment", input: { amount: 3 } };
    return { dispatcher, memory, events, call, key: dispatcher.keyFor(call, turn0) };
  }

  it("RECON-6 performed: the FIRST request's effect happened; the row completes with the downstream's result", async () => {
    const m = mismatch({ outcome: "performed", result: { id: "pay_first", amount: 3 } });
    const outcome = await m.dispatcher.turn(turn0).dispatch(m.call);
    expect(outcome.result).toEqual({ id: "pay_first", amount: 3 });
    expect(await m.memory.lookup(m.key)).toMatchObject({ state: "completed" });
    expect(m.events.find((e) => e.type === "reconciled")).toMatchObject({ cause: "request_mismatch", settled: "completed" });
  });

  it("RECON-6 not_performed does not release a key the downstream holds for another request: unknown", async () => {
    const m = mismatch({ outcome: "not_performed" });
    await expect(m.dispatcher.turn(turn0).dispatch(m.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect(await m.memory.lookup(m.key)).toMatchObject({ state: "unknown" });
  });
});

describe("an operator's reconcile of a request_mismatch row (RECON-6, RESOLVE-6)", () => {
  it("RECON-6 RESOLVE-6 not_performed leaves the row unknown on demand too: the downstream's record of the first request may be gone, not its effect", async () => {
    // The payments log is the oracle. The first request under the key (an earlier body of the
    // same payment) was paid; this run's body differs, so the downstream answers a mismatch.
    const payments: string[] = ["pay_first (the first request under the key)"];
    let holdsKey = true;
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: (args) => {
        if (holdsKey) throw new ToolError("Idempotency-Key reused with another body", { disposition: "request_mismatch" });
        payments.push(`pay ${args.amount}`);
        return { id: `pay_${payments.length}` };
      },
      // Asks the downstream by key: while it holds the first request's record it cannot tell this
      // body's fate; once that record has expired it finds nothing under the key.
      reconcile: (): ReconcileVerdict => (holdsKey ? { outcome: "unknown" } : { outcome: "not_performed" }),
    });
    const memory = new MemoryLedger();
    const dispatcher = new Dispatcher({ tools: [tool], ledger: memory, logger: recordingLogger().logger });
    const call = { name: "send_payment", input: { amount: 3 } };
    const key = dispatcher.keyFor(call, turn0);
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect(await memory.lookup(key)).toMatchObject({ state: "unknown", reason: expect.stringMatching(/^request_mismatch: /) });
    // The downstream's idempotency record of the first request expires; the operator reconciles.
    holdsKey = false;
    const report = await dispatcher.reconcile(key);
    await dispatcher.turn(turn0).dispatch(call).catch(() => undefined);
    expect(payments).toHaveLength(1);
    expect(await memory.lookup(key)).toMatchObject({ state: "unknown" });
    expect(report).toMatchObject({ verdict: "not_performed", settled: "none", detail: expect.stringContaining("request_mismatch") });
  });
});

describe("reconciliation of an unstorable result (RECON-7)", () => {
  function big(verdict: () => ReconcileVerdict) {
    let runs = 0;
    const tool = defineTool({
      name: "export_report",
      effect: "keyed_write",
      input: z.object({ id: z.string() }),
      run: () => {
        runs++;
        return { rows: "x".repeat(2_000) };
      },
      reconcile: verdict,
    });
    const memory = new MemoryLedger({ maxResultBytes: 500 });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: memory });
    const call = { name: "export_report", input: { id: "r1" } };
    return { dispatcher, memory, call, key: dispatcher.keyFor(call, turn0), runs: () => runs };
  }

  it("RECON-7 performed with a storable summary completes the row with it", async () => {
    const b = big(() => ({ outcome: "performed", result: { reportId: "rep_1" } }));
    const first = await b.dispatcher.turn(turn0).dispatch(b.call);
    expect(first.result).toEqual({ reportId: "rep_1" });
    const again = await b.dispatcher.turn(turn0).dispatch(b.call);
    expect(again).toMatchObject({ replayed: true, resultJson: first.resultJson });
    expect(b.runs()).toBe(1);
  });

  it("RECON-7 a known effect never becomes 'not happened': not_performed keeps result_not_storable", async () => {
    const b = big(() => ({ outcome: "not_performed" }));
    await expect(b.dispatcher.turn(turn0).dispatch(b.call)).rejects.toBeInstanceOf(ResultNotStorableError);
    expect(await b.memory.lookup(b.key)).toMatchObject({ state: "failed", error: { code: "result_not_storable" } });
  });
});

describe("reconciliation after a lost lease (RECON-8)", () => {
  it("RECON-8 the probe's write is fenced: after a takeover it cannot overwrite the new owner's row", async () => {
    const memory = new MemoryLedger();
    // A ledger whose renewals are refused: the claim is lost while the tool runs.
    const ledger = Object.assign(Object.create(memory), {
      renew: async (key: string) => {
        const { StaleClaimError } = await import("../src/errors/index.js");
        // Another attempt takes the row over before we learn of it.
        const row = await memory.lookup(key);
        if (row?.state === "in_flight" && row.owner !== "other") {
          await memory.release(key, row.fence);
          const c = await memory.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "other", leaseMs: 60_000, request: row.request });
          if (c.outcome === "claimed") await memory.complete(key, c.fence, '{"id":"pay_other"}');
        }
        throw new StaleClaimError(key, 1);
      },
    }) as Ledger;
    const events: DispatchEvent[] = [];
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: (_args, ctx) =>
        new Promise((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(new Error("aborted")))),
      reconcile: () => ({ outcome: "performed", result: { id: "pay_mine" } }),
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 30, onEvent: (e) => events.push(e) });
    const call = { name: "send_payment", input: { amount: 1 } };
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "stale_claim" });
    expect(await memory.lookup(dispatcher.keyFor(call, turn0))).toMatchObject({ state: "completed", result: '{"id":"pay_other"}' });
    expect(events.find((e) => e.type === "reconciled")).toMatchObject({ cause: "lease_lost", verdict: "performed", settled: "completed" });
    // The fenced write was refused: nothing was recorded.
    expect(events.some((e) => e.type === "recorded")).toBe(false);
  });
});

describe("on-demand reconciliation (RECON-9)", () => {
  it("RECON-9 on a ledger without resolve(), reports the probe's verdict for an unknown row without changing the row", async () => {
    let answer: ReconcileVerdict = { outcome: "unknown" };
    const s = setup("unkeyed_write", () => answer, { resolve: false });
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    answer = { outcome: "performed", result: { id: "inv_1", amount: 5 } };
    const report = await s.dispatcher.reconcile(s.key);
    expect(report).toMatchObject({ key: s.key, toolName: "create_invoice", state: "unknown", verdict: "performed", result: { id: "inv_1", amount: 5 }, settled: "none" });
    expect((await s.ledger.lookup(s.key))?.state).toBe("unknown");
    expect(s.log).toEqual(["run", "probe:tool_error", "probe:on_demand"]);
    expect(reconciled(s.events).at(-1)).toMatchObject({ cause: "on_demand", verdict: "performed", settled: "none" });
  });

  it("RESOLVE-6 on a ledger with resolve(), performed settles the unknown row completed; the replay answers from the ledger", async () => {
    let answer: ReconcileVerdict = { outcome: "unknown" };
    const s = setup("unkeyed_write", () => answer);
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    answer = { outcome: "performed", result: { id: "inv_1", amount: 5 } };
    const report = await s.dispatcher.reconcile(s.key);
    expect(report).toMatchObject({ state: "unknown", verdict: "performed", settled: "completed", row: { state: "completed", fence: 2 } });
    expect(reconciled(s.events).at(-1)).toMatchObject({ cause: "on_demand", verdict: "performed", settled: "completed" });
    expect(s.events.at(-1)).toMatchObject({ type: "resolved", state: "completed", actor: "dispatch-once:reconcile" });
    const replay = await s.dispatcher.turn(turn0).dispatch(s.call);
    expect(replay).toMatchObject({ replayed: true, result: { id: "inv_1", amount: 5 } });
    expect(s.runs()).toBe(1);
  });

  it("RESOLVE-7 an operator's reconcile is audited under the operator's name; an empty actor is refused before the probe runs", async () => {
    let answer: ReconcileVerdict = { outcome: "unknown" };
    let probes = 0;
    const s = setup("unkeyed_write", () => {
      probes++;
      return answer;
    });
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    const before = probes;
    await expect(s.dispatcher.reconcile(s.key, { actor: "  " })).rejects.toMatchObject({ code: "invalid_argument" });
    expect(probes).toBe(before);
    answer = { outcome: "performed", result: { id: "inv_2", amount: 5 } };
    await s.dispatcher.reconcile(s.key, { actor: "dana" });
    expect(s.events.at(-1)).toMatchObject({ type: "resolved", state: "completed", actor: "dana" });
    expect((await s.ledger.auditTrail!(s.key)).at(-1)).toMatchObject({ action: "reconciled", actor: "dana" });
  });

  it("RECON-9 refuses rows that are not unknown, absent keys, and tools without a probe", async () => {
    const s = setup("unkeyed_write", () => ({ outcome: "unknown" }));
    await expect(s.dispatcher.reconcile(s.key)).resolves.toMatchObject({ state: "absent", verdict: "none" });
    s.answerNormally();
    await s.dispatcher.turn(turn0).dispatch(s.call);
    await expect(s.dispatcher.reconcile(s.key)).resolves.toMatchObject({ state: "completed", verdict: "none" });
    expect(s.log).toEqual(["run"]);

    const bare = defineTool({ name: "t", effect: "unkeyed_write", input: z.object({}), run: () => {
      throw new Error("lost");
    } });
    const dispatcher = new Dispatcher({ tools: [bare], ledger: durable(new MemoryLedger()) });
    await expect(dispatcher.turn(turn0).dispatch({ name: "t", input: {} })).rejects.toBeInstanceOf(OutcomeUnknownError);
    const key = dispatcher.keyFor({ name: "t", input: {} }, turn0);
    await expect(dispatcher.reconcile(key)).resolves.toMatchObject({ state: "unknown", verdict: "none", detail: expect.stringContaining("no reconcile probe") });
  });
});

describe("an on-demand probe bounded by options.signal (RECON-9)", () => {
  const late = { outcome: "performed" as const, result: { id: "inv_late", amount: 5 } };
  /** A row left unknown by a lost response; its on-demand probe is `onDemand`. */
  async function unknownRow(onDemand: (signal: AbortSignal) => Promise<ReconcileVerdict>) {
    let probes = 0;
    const s = setup("unkeyed_write", () => ({ outcome: "unknown" }));
    Object.assign(s.tool, {
      reconcile: (_args: unknown, ctx: { cause: string; signal: AbortSignal }) => {
        if (ctx.cause !== "on_demand") return { outcome: "unknown" };
        probes++;
        return onDemand(ctx.signal);
      },
    });
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    const row = await s.ledger.lookup(s.key);
    expect(row?.state).toBe("unknown");
    return { ...s, fence: row!.fence, probes: () => probes };
  }

  it("a probe that heeds its signal: aborted, it settles nothing, and its late answer writes nothing", async () => {
    const s = await unknownRow((signal) => new Promise((resolve) => signal.addEventListener("abort", () => setTimeout(() => resolve(late), 5))));
    const report = await s.dispatcher.reconcile(s.key, { signal: AbortSignal.timeout(20) });
    expect(report).toMatchObject({ verdict: "error", settled: "none", detail: expect.stringMatching(/did not answer before its signal aborted/) });
    await new Promise((r) => setTimeout(r, 30));
    expect(await s.ledger.lookup(s.key)).toMatchObject({ state: "unknown", fence: s.fence });
    expect(reconciled(s.events).at(-1)).toMatchObject({ cause: "on_demand", verdict: "error", settled: "none" });
  });

  it("a probe that never answers and ignores its signal: reconcile still returns when the signal aborts", async () => {
    const s = await unknownRow(() => new Promise(() => {}));
    const report = await s.dispatcher.reconcile(s.key, { signal: AbortSignal.timeout(20) });
    expect(report).toMatchObject({ verdict: "error", settled: "none" });
    expect(await s.ledger.lookup(s.key)).toMatchObject({ state: "unknown", fence: s.fence });
  });

  it("an answer before the signal aborts settles as always; an aborted signal asks no probe; a signal that is not one is refused", async () => {
    const s = await unknownRow(async () => late);
    const controller = new AbortController();
    controller.abort(new Error("operator gave up"));
    await expect(s.dispatcher.reconcile(s.key, { signal: controller.signal })).resolves.toMatchObject({ verdict: "error", settled: "none", detail: expect.stringContaining("operator gave up") });
    expect(s.probes()).toBe(0);
    await expect(s.dispatcher.reconcile(s.key, { signal: "30s" as never })).rejects.toMatchObject({ code: "invalid_argument", field: "options.signal" });
    // A misspelt or made-up option is refused, not ignored (it would leave the probe unbounded).
    await expect(s.dispatcher.reconcile(s.key, { timeout: 30_000 } as never)).rejects.toMatchObject({
      code: "invalid_argument",
      message: "options.timeout: is not an option of reconcile (its options: actor, signal)",
    });
    await expect(s.dispatcher.reconcile(s.key, null as never)).rejects.toMatchObject({ code: "invalid_argument", field: "options" });
    expect(s.probes()).toBe(0);
    await expect(s.dispatcher.reconcile(s.key, { signal: AbortSignal.timeout(5_000) })).resolves.toMatchObject({ verdict: "performed", settled: "completed" });
  });
});

describe("the automatic pass bounds every probe (RESOLVE-6): options.probeTimeoutMs and options.signal", () => {
  const late = { outcome: "performed" as const, result: { id: "inv_late", amount: 1 } };
  /**
   * Unknown rows of `amounts`, left by lost responses; each on-demand probe is `onDemand(amount,
   * signal)`, and every probe's signal is kept to show it was aborted (a probe that heeds it stops).
   */
  async function unknownRows(amounts: number[], onDemand: (amount: number, signal: AbortSignal) => Promise<ReconcileVerdict>) {
    const probed: number[] = [];
    const signals: AbortSignal[] = [];
    const s = setup("unkeyed_write", () => ({ outcome: "unknown" }));
    Object.assign(s.tool, {
      reconcile: (args: { amount: number }, ctx: { cause: string; signal: AbortSignal }) => {
        if (ctx.cause !== "on_demand") return { outcome: "unknown" };
        probed.push(args.amount);
        signals.push(ctx.signal);
        return onDemand(args.amount, ctx.signal);
      },
    });
    const keys = new Map<number, string>();
    for (const amount of amounts) {
      const call = { name: "create_invoice", input: { amount } };
      keys.set(amount, s.dispatcher.keyFor(call, turn0));
      await expect(s.dispatcher.turn(turn0).dispatch(call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    }
    const fences = new Map<number, number>();
    for (const [amount, key] of keys) fences.set(amount, (await s.ledger.lookup(key))!.fence);
    const unchanged = async (amount: number) => expect(await s.ledger.lookup(keys.get(amount)!)).toMatchObject({ state: "unknown", fence: fences.get(amount) });
    return { ...s, keys, probed, signals, unchanged };
  }
  const never = () => new Promise<ReconcileVerdict>(() => {});

  it("RESOLVE-6 a probe that never answers and ignores its signal: after probeTimeoutMs its verdict is error, nothing is written, and the pass goes on to the next row", async () => {
    const s = await unknownRows([1, 2], (amount) => (amount === 1 ? never() : Promise.resolve({ outcome: "performed", result: { id: "inv_2", amount } })));
    const reports = await s.dispatcher.reconcileUnknown({ probeTimeoutMs: 20 });
    const byKey = new Map(reports.map((r) => [r.key, r]));
    expect(byKey.get(s.keys.get(1)!)).toMatchObject({ verdict: "error", settled: "none", detail: expect.stringMatching(/did not answer before its signal aborted: .*within 20 ms \(probeTimeoutMs\)/) });
    expect(byKey.get(s.keys.get(2)!)).toMatchObject({ verdict: "performed", settled: "completed" });
    expect(reports).toHaveLength(2);
    await s.unchanged(1);
    // The probe was told: its signal aborted; the one that answered in time was not aborted.
    expect(s.signals.map((signal) => signal.aborted)).toEqual(s.probed.map((amount) => amount === 1));
  });

  it("RESOLVE-6 a probe that heeds its signal and answers after it aborted writes nothing", async () => {
    const s = await unknownRows([1], (_amount, signal) => new Promise((resolve) => signal.addEventListener("abort", () => setTimeout(() => resolve(late), 5))));
    const reports = await s.dispatcher.reconcileUnknown({ probeTimeoutMs: 20 });
    expect(reports).toMatchObject([{ verdict: "error", settled: "none" }]);
    await new Promise((r) => setTimeout(r, 30));
    await s.unchanged(1);
    expect(reconciled(s.events).at(-1)).toMatchObject({ cause: "on_demand", verdict: "error", settled: "none" });
  });

  it("RESOLVE-6 without probeTimeoutMs a hung probe is given up after the default, 30 s", async () => {
    const s = await unknownRows([1], () => never());
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      let done = false;
      const pass = s.dispatcher.reconcileUnknown().then((reports) => ((done = true), reports));
      await vi.advanceTimersByTimeAsync(29_999);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(await pass).toMatchObject([{ verdict: "error", settled: "none", detail: expect.stringContaining("within 30000 ms") }]);
    } finally {
      vi.useRealTimers();
    }
    await s.unchanged(1);
  });

  it("RESOLVE-6 options.signal stops the pass: the probe in flight gives error and writes nothing, no later row is probed, and the reports so far are returned", async () => {
    const controller = new AbortController();
    // The first row probed answers; the second one's probe hangs while the pass is stopped.
    const s = await unknownRows([1, 2, 3], async (amount) => {
      if (s.probed.length === 1) return { outcome: "performed", result: { id: "inv_first", amount } };
      controller.abort(new Error("shutting down"));
      return never();
    });
    const reports = await s.dispatcher.reconcileUnknown({ signal: controller.signal });
    expect(s.probed).toHaveLength(2);
    const [first, second] = s.probed as [number, number];
    expect(reports).toMatchObject([
      { key: s.keys.get(first), verdict: "performed", settled: "completed" },
      { key: s.keys.get(second), verdict: "error", settled: "none", detail: expect.stringContaining("shutting down") },
    ]);
    expect(reports).toHaveLength(2);
    for (const amount of [1, 2, 3].filter((a) => a !== first)) await s.unchanged(amount);
  });

  it("RESOLVE-6 an already aborted signal probes nothing; bad options are refused with invalid_argument before any row is read", async () => {
    const s = await unknownRows([1], async () => late);
    const aborted = new AbortController();
    aborted.abort(new Error("no time"));
    await expect(s.dispatcher.reconcileUnknown({ signal: aborted.signal })).resolves.toEqual([]);
    for (const probeTimeoutMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, "30s"]) {
      await expect(s.dispatcher.reconcileUnknown({ probeTimeoutMs: probeTimeoutMs as number }), String(probeTimeoutMs)).rejects.toMatchObject({ code: "invalid_argument", field: "options.probeTimeoutMs" });
    }
    await expect(s.dispatcher.reconcileUnknown({ signal: "30s" as never })).rejects.toMatchObject({ code: "invalid_argument", field: "options.signal" });
    // A misspelt option would leave every probe at the default, or unbounded: refused, not ignored.
    await expect(s.dispatcher.reconcileUnknown({ timeout: 5_000 } as never)).rejects.toMatchObject({
      code: "invalid_argument",
      message: "options.timeout: is not an option of reconcileUnknown (its options: olderThanMs, limit, probeTimeoutMs, signal)",
    });
    await expect(s.dispatcher.reconcileUnknown(null as never)).rejects.toMatchObject({ code: "invalid_argument", field: "options" });
    expect(s.probed).toEqual([]);
    // The limits themselves are taken.
    await expect(s.dispatcher.reconcileUnknown({ probeTimeoutMs: 1, limit: 1 })).resolves.toHaveLength(1);
    await expect(s.dispatcher.reconcileUnknown({ probeTimeoutMs: 2 ** 31 - 1 })).resolves.toEqual([]);
  });
});

describe("defineTool reconcile checks", () => {
  it("RECON-1 a read cannot declare a probe, and a probe must be a function", () => {
    const read = { name: "r", effect: "read", input: z.object({}), run: () => 1, reconcile: () => ({ outcome: "unknown" }) } as never;
    // Refused where it is written, and by a dispatcher given it without defineTool.
    expect(() => defineTool(read)).toThrow(/no effect to reconcile/);
    expect(() => new Dispatcher({ tools: [read], ledger: new MemoryLedger() })).toThrow(/no effect to reconcile/);
    const bad = { name: "w", effect: "keyed_write", input: z.object({}), run: () => 1, reconcile: 3 } as never;
    expect(() => new Dispatcher({ tools: [bad], ledger: new MemoryLedger() })).toThrow(/reconcile must be a function/);
  });
});

describe("settling unknown rows (RESOLVE-6)", () => {
  it("RESOLVE-6 not_performed releases a keyed_write's unknown row at once; the replay re-runs the stored request", async () => {
    let answer: ReconcileVerdict = { outcome: "unknown" };
    const s = setup("keyed_write", () => answer);
    // A keyed_write whose probe says unknown is released at run time, not left unknown: make it
    // unknown the way an operator meets one, through a lease that ran out.
    const fence = (await s.ledger.claim({ key: s.key, toolName: "create_invoice", effect: "keyed_write", owner: "dead", leaseMs: 1_000_000, request: '{"amount":5}' })) as { fence: number };
    await s.ledger.markUnknown(s.key, fence.fence, "lease_lost");
    answer = { outcome: "not_performed" };
    expect(await s.dispatcher.reconcile(s.key)).toMatchObject({ verdict: "not_performed", settled: "released", row: { state: "released" } });
    s.answerNormally();
    const rerun = await s.dispatcher.turn(turn0).dispatch(s.call);
    expect(rerun).toMatchObject({ replayed: false, result: { amount: 5 } });
    expect(s.runs()).toBe(1);
  });

  it("RESOLVE-6 RECON-4 not_performed leaves a fresh unkeyed_write unknown (a request may be in transit); after reconcileGraceMs it releases", async () => {
    const answer: ReconcileVerdict = { outcome: "not_performed" };
    const s = setup("unkeyed_write", () => answer);
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect(await s.dispatcher.reconcile(s.key)).toMatchObject({ verdict: "not_performed", settled: "none" });
    expect((await s.ledger.lookup(s.key))?.state).toBe("unknown");
    const patient = new Dispatcher({ tools: [s.tool], ledger: s.ledger, reconcileGraceMs: 0, logger: recordingLogger().logger });
    expect(await patient.reconcile(s.key)).toMatchObject({ settled: "released", row: { state: "released", fence: 2 } });
    expect(() => new Dispatcher({ tools: [s.tool], ledger: s.ledger, reconcileGraceMs: -1 })).toThrow(expect.objectContaining({ code: "invalid_argument" }));
  });

  it("RESOLVE-6 RECON-3 performed without a storable result fails the row closed with result_not_storable, never releases it", async () => {
    let answer: ReconcileVerdict = { outcome: "unknown" };
    const s = setup("unkeyed_write", () => answer);
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    answer = { outcome: "performed", result: { big: "x".repeat(2 * 1024 * 1024) } };
    expect(await s.dispatcher.reconcile(s.key)).toMatchObject({ verdict: "performed", settled: "failed" });
    await expect(s.dispatcher.turn(turn0).dispatch(s.call)).rejects.toBeInstanceOf(ResultNotStorableError);
    expect(s.runs()).toBe(1);
  });

  it("RESOLVE-4 a row changed while its probe asked is left as the other writer left it", async () => {
    let resolveFirst: (() => void) | undefined;
    const s = setup("unkeyed_write", () => new Promise<ReconcileVerdict>((r) => (resolveFirst = () => r({ outcome: "performed", result: { id: "late" } }))));
    s.answerNormally();
    const fence = (await s.ledger.claim({ key: s.key, toolName: "create_invoice", effect: "unkeyed_write", owner: "x", leaseMs: 1_000_000, request: '{"amount":5}' })) as { fence: number };
    await s.ledger.markUnknown(s.key, fence.fence, "tool_error");
    const pending = s.dispatcher.reconcile(s.key);
    await new Promise((r) => setTimeout(r, 5));
    await s.ledger.resolve!({ key: s.key, resolution: { outcome: "completed", result: '{"id":"ops"}' }, actor: "ops", reason: "dashboard" });
    resolveFirst!();
    expect(await pending).toMatchObject({ verdict: "performed", settled: "none" });
    expect(await s.ledger.lookup(s.key)).toMatchObject({ state: "completed", result: '{"id":"ops"}' });
  });

  it("RESOLVE-6 reconcileUnknown settles every unknown row of a tool with a probe, oldest first, and leaves the rest", async () => {
    const verdicts = new Map<string, ReconcileVerdict>();
    const s = setup("unkeyed_write", (key) => verdicts.get(key) ?? { outcome: "unknown" });
    const keys: string[] = [];
    for (let amount = 1; amount <= 3; amount++) {
      const call = { name: "create_invoice", input: { amount } };
      keys.push(s.dispatcher.keyFor(call, turn0));
      await expect(s.dispatcher.turn(turn0).dispatch(call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    }
    verdicts.set(keys[0]!, { outcome: "performed", result: { id: "inv_1" } });
    verdicts.set(keys[2]!, { outcome: "performed", result: { id: "inv_3" } });
    const reports = await s.dispatcher.reconcileUnknown();
    // Rows that turned unknown in the same millisecond list by key (LIST-2), so compare as a map.
    expect(Object.fromEntries(reports.map((r) => [r.key, r.settled]))).toEqual({ [keys[0]!]: "completed", [keys[1]!]: "none", [keys[2]!]: "completed" });
    expect((await s.ledger.listRows!({ state: "unknown" })).rows.map((r) => r.key)).toEqual([keys[1]]);
    const bare = new Dispatcher({ tools: [s.tool], ledger: Object.assign(Object.create(s.ledger), { capabilities: { ...s.ledger.capabilities, supports: {} } }), logger: recordingLogger().logger });
    await expect(bare.reconcileUnknown()).rejects.toMatchObject({ code: "invalid_argument" });
  });
});

describe("a probe's not_performed against a request still in transit (RESOLVE-6, RECON-4)", () => {
  /**
   * An unkeyed_write whose response was lost while its request is still on the wire: `land()`
   * is that request arriving downstream (the effect log is the oracle). The probe answers
   * "not performed" because it looked before the request landed.
   */
  function inTransit(ledgerNow: () => number, probe: () => ReconcileVerdict | Promise<ReconcileVerdict> = () => ({ outcome: "not_performed" })) {
    const effects: string[] = [];
    const tool = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: (args) => {
        effects.push(`invoice ${args.amount}`);
        return { id: `inv_${effects.length}` };
      },
      reconcile: () => probe(),
    });
    const ledger = durable(new MemoryLedger({ now: ledgerNow }));
    const dispatcher = new Dispatcher({ tools: [tool], ledger, logger: recordingLogger().logger });
    const call = { name: "create_invoice", input: { amount: 7 } };
    const key = dispatcher.keyFor(call, turn0);
    return { effects, ledger, dispatcher, call, key, land: () => effects.push("invoice 7 (the request that was in transit)") };
  }

  async function unknownRow(s: ReturnType<typeof inTransit>) {
    const claimed = (await s.ledger.claim({ key: s.key, toolName: "create_invoice", effect: "unkeyed_write", owner: "gone", leaseMs: 60_000, request: '{"amount":7}', conversationId: turn0.conversationId, turnIndex: 0 })) as { fence: number };
    await s.ledger.markUnknown(s.key, claimed.fence, "tool_error: socket hang up after send");
  }

  it("RESOLVE-6 the grace is measured on the ledger's clock: a dispatcher whose clock runs ahead of the store's does not release a row unknown for a second", async () => {
    // The store's clock is 10 minutes behind the operator's machine (the CLI runs there).
    const s = inTransit(() => Date.now() - 10 * 60_000);
    await unknownRow(s);
    const report = await s.dispatcher.reconcile(s.key);
    s.land();
    // Whatever the report says, the row and the effect log must agree after a re-run.
    await s.dispatcher.turn(turn0).dispatch(s.call).catch(() => undefined);
    expect(s.effects).toHaveLength(1);
    expect(await s.ledger.lookup(s.key)).toMatchObject({ state: "unknown" });
    expect(report).toMatchObject({ verdict: "not_performed", settled: "none" });
  });

  it("RESOLVE-6 once the ledger's clock says the grace has passed, not_performed releases, whatever this process's clock says; the re-run performs once", async () => {
    // The store's clock is 10 minutes ahead; the row turned unknown 61 s ago on it.
    let storeNow = Date.now() + 10 * 60_000;
    const s = inTransit(() => storeNow);
    await unknownRow(s);
    storeNow += 61_000;
    expect(await s.dispatcher.reconcile(s.key)).toMatchObject({ verdict: "not_performed", settled: "released", row: { state: "released" } });
    expect(await s.dispatcher.turn(turn0).dispatch(s.call)).toMatchObject({ replayed: false, result: { id: "inv_1" } });
    expect(s.effects).toEqual(["invoice 7"]);
    expect(await s.ledger.lookup(s.key)).toMatchObject({ state: "completed", result: '{"id":"inv_1"}' });
  });

  it("RESOLVE-6 the grace must have passed when the probe looked, not when its answer came back", async () => {
    let clock = 1_000_000;
    const s = inTransit(
      () => clock,
      async () => {
        // The probe looks at 59 s of the 60 s grace and finds nothing; the request lands at
        // 60 s; the probe's answer is back at 61 s.
        clock += 59_000;
        const verdict: ReconcileVerdict = { outcome: "not_performed" };
        clock += 1_000;
        s.land();
        clock += 1_000;
        return verdict;
      },
    );
    // The dispatcher's clock follows the store's here: only when the probe looked matters.
    const now = vi.spyOn(Date, "now").mockImplementation(() => clock);
    try {
      await unknownRow(s);
      const report = await s.dispatcher.reconcile(s.key);
      await s.dispatcher.turn(turn0).dispatch(s.call).catch(() => undefined);
      expect(s.effects).toHaveLength(1);
      expect(await s.ledger.lookup(s.key)).toMatchObject({ state: "unknown" });
      expect(report).toMatchObject({ verdict: "not_performed", settled: "none" });
    } finally {
      now.mockRestore();
    }
  });
});

describe("reconcile when the ledger cannot list (RESOLVE-6)", () => {
  it("a listing that fails withholds only the release: performed still completes the row, not_performed leaves it unknown", async () => {
    let verdict: ReconcileVerdict = { outcome: "not_performed" };
    const tool = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: () => ({ id: "never" }),
      reconcile: () => verdict,
    });
    const memory = new MemoryLedger();
    const ledger = Object.assign(Object.create(durable(memory)), {
      listRows: () => Promise.reject(new Error("connection reset")),
    }) as Ledger;
    const dispatcher = new Dispatcher({ tools: [tool], ledger, reconcileGraceMs: 1, logger: recordingLogger().logger });
    const keys: string[] = [];
    for (const amount of [1, 2]) {
      const key = dispatcher.keyFor({ name: "create_invoice", input: { amount } }, turn0);
      const claimed = (await memory.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "gone", leaseMs: 60_000, request: `{"amount":${amount}}` })) as { fence: number };
      await memory.markUnknown(key, claimed.fence, "tool_error");
      keys.push(key);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(await dispatcher.reconcile(keys[0]!)).toMatchObject({ verdict: "not_performed", settled: "none", detail: expect.stringContaining("connection reset") });
    expect(await memory.lookup(keys[0]!)).toMatchObject({ state: "unknown" });
    verdict = { outcome: "performed", result: { id: "inv_9" } };
    expect(await dispatcher.reconcile(keys[1]!)).toMatchObject({ verdict: "performed", settled: "completed" });
  });
});
