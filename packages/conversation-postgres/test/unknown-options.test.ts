import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { PostgresConversationStore } from "../src/index.js";

describe("ERR-1 a misspelt option is refused, never ignored", () => {
  it(`PostgresConversationStore({ ...{ connectionString: "postgres://127.0.0.1:1/none" }, tableName: ... }) throws invalid_store_input naming it and the options there are, before touching the store`, () => {
    let caught: unknown;
    try {
      new PostgresConversationStore({ ...{ connectionString: "postgres://127.0.0.1:1/none" }, tableName: "x" } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_store_input")).toBe(true);
    expect(caught).toMatchObject({ field: "tableName", message: expect.stringContaining("tablePrefix") });
  });
});
