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
