import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool, isDispatchOnceError } from "../src/index.js";
import { fakePayments, recordingLogger } from "./helpers.js";

/**
 * ERR-1: a Dispatcher option it cannot use is refused when the Dispatcher is made, with
 * `invalid_argument` naming the option, never accepted and acted on at dispatch time (a lease of
 * 0 ms ends at its claim: a second attempt takes the row over while the tool still runs).
 */
describe("ERR-1 Dispatcher options are checked once, at construction", () => {
  const base = () => ({ tools: [fakePayments().tool], ledger: new MemoryLedger(), logger: recordingLogger().logger });
  const refused: Array<[string, Record<string, unknown>]> = [
    ["leaseMs", { leaseMs: 0 }],
    ["leaseMs", { leaseMs: -1 }],
    ["leaseMs", { leaseMs: Number.NaN }],
    ["leaseMs", { leaseMs: "30000" }],
    ["leaseMs", { leaseMs: 1.5 }],
    ["leaseMs", { leaseMs: 367 * 24 * 60 * 60 * 1000 }],
    ["waitMs", { waitMs: -1 }],
    ["waitMs", { waitMs: Number.POSITIVE_INFINITY }],
    ["pollMs", { pollMs: 0 }],
    ["pollMs", { pollMs: "20" }],
    ["maxPollMs", { maxPollMs: 0 }],
    ["maxPollMs", { pollMs: 100, maxPollMs: 50 }],
    ["claimRetryMs", { claimRetryMs: -5 }],
    ["owner", { owner: "" }],
    ["owner", { owner: 42 }],
    ["logger", { logger: { info: () => {} } }],
    ["onEvent", { onEvent: 5 }],
    // Adoption trial: these were accepted. A misspelt option was ignored (the default used
    // instead, silently), a flag that is not a boolean was read as truthy, and a ledger object
    // without capabilities failed with "Cannot read properties of undefined (reading 'supports')".
    ["leasMs", { leasMs: 5_000 }],
    ["waitMS", { waitMS: 0 }],
    ["allowVolatileLedgerForUnkeyedWrites", { allowVolatileLedgerForUnkeyedWrites: "yes" }],
    ["reconcileGraceMs", { reconcileGraceMs: "60s" }],
    ["ledger", { ledger: { claim: async () => undefined } }],
  ];
  for (const [field, bad] of refused) {
    it(`refuses ${JSON.stringify(bad, (_k, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v))} with invalid_argument (options.${field})`, () => {
      let caught: unknown;
      try {
        new Dispatcher({ ...base(), ...bad } as never);
      } catch (error) {
        caught = error;
      }
      expect(isDispatchOnceError(caught, "invalid_argument")).toBe(true);
      expect((caught as { field?: string }).field).toBe(`options.${field}`);
    });
  }

  it("names what the logger lacks: the Dispatcher and the runner share one check (internal loggerOption)", () => {
    const message = (logger: unknown) => {
      try {
        new Dispatcher({ ...base(), logger } as never);
      } catch (error) {
        return (error as Error).message;
      }
      return undefined;
    };
    expect(message({ info: () => {} })).toBe("options.logger: must be an object with a warn(message, fields) method, got an object whose warn is undefined");
    expect(message(null)).toBe("options.logger: must be an object with a warn(message, fields) method, got null");
    expect(message(console.warn)).toBe("options.logger: must be an object with a warn(message, fields) method, got function");
    expect(message(console)).toBeUndefined();
    expect(message(undefined)).toBeUndefined();
  });

  it("accepts the bounds: a 1 ms lease, waits and retries of 0, equal poll bounds, 366 days", () => {
    expect(() => new Dispatcher({ ...base(), leaseMs: 1, waitMs: 0, claimRetryMs: 0, recordRetryMs: 0, pollMs: 5, maxPollMs: 5 })).not.toThrow();
    expect(() => new Dispatcher({ ...base(), leaseMs: 366 * 24 * 60 * 60 * 1000 })).not.toThrow();
  });
});

/** Adoption trial: what the rest of core's public entry points were given, and accepted or crashed on. */
const refusal = (fn: () => unknown): { code?: string; field?: string; name?: string; message?: string } | undefined => {
  try {
    fn();
  } catch (error) {
    return isDispatchOnceError(error) ? (error as { code: string; field?: string }) : { name: (error as Error).name, message: (error as Error).message };
  }
  return undefined;
};

describe("ERR-1 MemoryLedger options are checked at construction, as every adapter's are", () => {
  const refused: Array<[string, unknown]> = [
    // A retention of -1 or NaN was accepted: rows forgotten at once (a replay runs the effect
    // again) or never; a misspelt one was ignored; null crashed on "reading 'now'".
    ["retentionMs", { retentionMs: -1 }],
    ["retentionMs", { retentionMs: Number.NaN }],
    ["retentionMs", { retentionMs: "24h" }],
    ["maxResultBytes", { maxResultBytes: 0 }],
    ["maxResultBytes", { maxResultBytes: Number.NaN }],
    ["now", { now: 5 }],
    ["retentionMS", { retentionMS: 1_000 }],
    ["options", null],
    ["options", "ledger.db"],
  ];
  for (const [field, options] of refused) {
    it(`refuses ${String(JSON.stringify(options))} with invalid_ledger_input (${field})`, () => {
      expect(refusal(() => new MemoryLedger(options as never))).toMatchObject({ code: "invalid_ledger_input", field });
    });
  }
  it("accepts its defaults and valid values", () => {
    expect(refusal(() => new MemoryLedger())).toBeUndefined();
    expect(refusal(() => new MemoryLedger({ retentionMs: 1, maxResultBytes: 1, now: () => 0 }))).toBeUndefined();
  });
  it("LIST-1 listRows refuses a misspelt query member (limt, states) instead of listing as if it were absent", async () => {
    const ledger = new MemoryLedger();
    for (const [field, query] of [["limt", { limt: 1 }], ["states", { states: ["unknown"] }]] as const) {
      const error = await ledger.listRows(query as never).then(() => undefined, (e: unknown) => e);
      expect(error, field).toMatchObject({ code: "invalid_ledger_input", field });
    }
  });
  it("LEDGER-12 lookup refuses a key that is not one, as claim does (it answered undefined for undefined, 5 and '')", async () => {
    const ledger = new MemoryLedger();
    for (const key of [undefined, 5, ""]) {
      const error = await ledger.lookup(key as never).then(() => undefined, (e: unknown) => e);
      expect(error, String(key)).toMatchObject({ code: "invalid_ledger_input", field: "key" });
    }
  });
});

describe("ERR-1 ToolRegistry and tool definitions: typed errors, and no member silently ignored", () => {
  const tool = () =>
    defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ payee: z.string(), memo: z.string() }), identity: ["payee"], run: async () => ({}) });
  it("refuses a registry of something that is not an array of tools (was: TypeError 'tools is not iterable')", () => {
    for (const tools of [null, {}, 5]) expect(refusal(() => new ToolRegistry(tools as never)), String(tools)).toMatchObject({ code: "invalid_tool_definition" });
  });
  it("IDENT-1 refuses a misspelt member: identiy was ignored, so the memo was in the key and a re-worded replay paid again", () => {
    const { identity: _identity, ...rest } = tool();
    const error = refusal(() => new ToolRegistry([{ ...rest, identiy: ["payee"] } as never]));
    expect(error).toMatchObject({ code: "invalid_tool_definition" });
    expect(error?.message).toContain("identiy");
  });
  it("refuses a description that is not a string (sent to the model API, which refuses every request)", () => {
    expect(refusal(() => new ToolRegistry([{ ...tool(), description: 5 } as never]))).toMatchObject({ code: "invalid_tool_definition" });
  });
  it("defineTool refuses a bad definition where it is written, not later where a registry or dispatcher first meets it (an adoption trial's stack trace pointed at new Dispatcher)", () => {
    const { identity: _identity, ...rest } = tool();
    const misspelt = refusal(() => defineTool({ ...rest, identiy: ["payee"] } as never));
    expect(misspelt).toMatchObject({ code: "invalid_tool_definition" });
    expect(misspelt?.message).toContain("identiy");
    for (const bad of [{ ...rest, effect: "write" }, { ...rest, name: "send payment" }, { ...rest, run: undefined }, { ...rest, runTimeoutMs: 0 }, null]) {
      expect(refusal(() => defineTool(bad as never)), JSON.stringify(bad)).toMatchObject({ code: "invalid_tool_definition" });
    }
    expect(refusal(() => defineTool(tool()))).toBeUndefined();
  });
});

describe("ERR-1 MemoryConversationStore: typed errors for bad arguments", () => {
  it("refuses bad options, a commit that is not one and a message id that is not one", async () => {
    expect(refusal(() => new MemoryConversationStore({ now: 5 } as never))).toMatchObject({ code: "invalid_store_input", field: "now" });
    expect(refusal(() => new MemoryConversationStore({ nw: () => 0 } as never))).toMatchObject({ code: "invalid_store_input", field: "nw" });
    const store = new MemoryConversationStore();
    const commit = await store.commitTurn("c", undefined as never).then(() => undefined, (e: unknown) => e);
    expect(commit).toMatchObject({ code: "invalid_store_input", field: "commit" });
    const message = await store.message("c", undefined as never).then(() => undefined, (e: unknown) => e);
    expect(message).toMatchObject({ code: "invalid_store_input", field: "messageId" });
  });
  it("a message id that is not one says what it got (adoption trial: a client's numeric id 5, an empty or lone-surrogate id and a 300-character one read the same message, and only the content's error said 'got')", async () => {
    const store = new MemoryConversationStore();
    for (const [id, got] of [[5, "got 5"], ["", 'got ""'], ["\ud800", 'got "\\ud800"'], ["x".repeat(300), "got 300 characters"], [null, "got null"]] as const) {
      const error = await store.appendUserMessage("c", { id: id as never, content: "hi" }).then(() => undefined, (e: unknown) => e);
      expect(error, String(id).slice(0, 10)).toMatchObject({ code: "invalid_store_input", field: "messageId" });
      expect((error as Error).message, String(id).slice(0, 10)).toContain(got);
      expect((error as Error).message.length).toBeLessThan(200);
    }
  });
});
