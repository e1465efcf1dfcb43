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
