import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { RedisLedger } from "../src/index.js";

describe("ERR-1 a misspelt option is refused, never ignored", () => {
  it(`RedisLedger({ ...{ url: "redis://127.0.0.1:1" }, keyPrefix: ... }) throws invalid_ledger_input naming it and the options there are, before touching the store`, () => {
    let caught: unknown;
    try {
      new RedisLedger({ ...{ url: "redis://127.0.0.1:1" }, keyPrefix: "x" } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_ledger_input")).toBe(true);
    expect(caught).toMatchObject({ field: "keyPrefix", message: expect.stringContaining("prefix") });
  });
});

/** Adoption trial: what createRedisLedger and the ledger accepted, or crashed on, before. */
describe("ERR-1 bad options and arguments are refused with invalid_ledger_input naming the field", () => {
  const refusal = (make: () => unknown): unknown => {
    try {
      make();
    } catch (error) {
      return error;
    }
    return undefined;
  };
  it.each([
    // was: TypeError "Cannot read properties of undefined (reading 'autoResendUnfulfilledCommands')"
    ["client", { client: {} }],
    // was accepted: every result refused as result_not_storable, after its effect happened
    ["maxResultBytes", { maxResultBytes: 0 }],
    // was accepted and read as "warn": a misspelt "refuse" let an evicting server through
    ["onUnsafeServer", { onUnsafeServer: "refuse " }],
    ["onUnsafeServer", { onUnsafeServer: "ignore" }],
  ])("refuses %s in %j", (field, options) => {
    const error = refusal(() => new RedisLedger({ url: "redis://127.0.0.1:1", ...options } as never));
    expect(isDispatchOnceError(error, "invalid_ledger_input")).toBe(true);
    expect(error).toMatchObject({ field });
  });

  it("LEDGER-12 lookup refuses an empty key as claim does (was: answered undefined), and sweep on a closed ledger is ledger_unavailable (was: 0)", async () => {
    const ledger = new RedisLedger({ url: "redis://127.0.0.1:1" });
    const lookup = await ledger.lookup("").then(() => undefined, (e: unknown) => e);
    expect(lookup).toMatchObject({ code: "invalid_ledger_input", field: "key" });
    await ledger.close();
    const sweep = await ledger.sweep().then(() => undefined, (e: unknown) => e);
    expect(isDispatchOnceError(sweep, "ledger_unavailable")).toBe(true);
  });
});
