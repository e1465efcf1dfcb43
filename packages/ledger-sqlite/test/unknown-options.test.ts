import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { SqliteLedger } from "../src/index.js";

describe("ERR-1 a misspelt option is refused, never ignored", () => {
  it(`SqliteLedger({ ...{ path: ":memory:" }, tableName: ... }) throws invalid_ledger_input naming it and the options there are, before touching the store`, () => {
    let caught: unknown;
    try {
      new SqliteLedger({ ...{ path: ":memory:" }, tableName: "x" } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_ledger_input")).toBe(true);
    expect(caught).toMatchObject({ field: "tableName", message: expect.stringContaining("table") });
  });
});

/** Adoption trial: what the ledger accepted before. */
describe("ERR-1 bad options and arguments are refused with invalid_ledger_input naming the field", () => {
  it("refuses migrate: \"yes\" (was accepted, read as truthy)", () => {
    let caught: unknown;
    try {
      new SqliteLedger({ path: ":memory:", migrate: "yes" } as never);
    } catch (error) {
      caught = error;
    }
    expect(caught).toMatchObject({ code: "invalid_ledger_input", field: "migrate" });
  });

  it("LEDGER-12 lookup refuses a key that is not one, as claim does (was: answered undefined for undefined, 5 and '')", async () => {
    const ledger = new SqliteLedger({ path: ":memory:" });
    try {
      for (const key of [undefined, 5, "", "a\ud800b"]) {
        const error = await ledger.lookup(key as never).then(() => undefined, (e: unknown) => e);
        expect(error, String(key)).toMatchObject({ code: "invalid_ledger_input", field: "key" });
      }
    } finally {
      await ledger.close();
    }
  });
});
