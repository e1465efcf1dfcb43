import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { SqliteConversationStore } from "../src/index.js";

describe("ERR-1 a misspelt option is refused, never ignored", () => {
  it(`SqliteConversationStore({ ...{ path: ":memory:" }, prefix: ... }) throws invalid_store_input naming it and the options there are, before touching the store`, () => {
    let caught: unknown;
    try {
      new SqliteConversationStore({ ...{ path: ":memory:" }, prefix: "x" } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_store_input")).toBe(true);
    expect(caught).toMatchObject({ field: "prefix", message: expect.stringContaining("tablePrefix") });
  });
});
