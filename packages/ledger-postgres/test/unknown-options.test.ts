import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";

describe("ERR-1 a misspelt option is refused, never ignored", () => {
  it(`PostgresLedger({ ...{ connectionString: "postgres://127.0.0.1:1/none", table: "t" }, tableName: ... }) throws invalid_ledger_input naming it and the options there are, before touching the store`, () => {
    let caught: unknown;
    try {
      new PostgresLedger({ ...{ connectionString: "postgres://127.0.0.1:1/none", table: "t" }, tableName: "x" } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_ledger_input")).toBe(true);
    expect(caught).toMatchObject({ field: "tableName", message: expect.stringContaining("table") });
  });
});

describe("ERR-1 poolConfig must be an object (adoption trial: poolConfig: 5 was spread as nothing, the pool made with defaults)", () => {
  it.each([[5], ["max=20"], [null]])("refuses poolConfig %j with invalid_ledger_input (poolConfig)", (poolConfig) => {
    let caught: unknown;
    try {
      new PostgresLedger({ connectionString: "postgres://127.0.0.1:1/none", poolConfig } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_ledger_input")).toBe(true);
    expect(caught).toMatchObject({ field: "poolConfig" });
  });
});
