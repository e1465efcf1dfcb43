import { isDispatchOnceError } from "@dispatch-once/core";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresConversationStore } from "../src/index.js";
import { adminPool, DATABASE_URL, dropSchema, uniqueSchema } from "./helpers.js";

/** Findings of the adoption trial (part 2): bad input to the PostgreSQL conversation store. */
async function refusal(f: () => unknown): Promise<[string, string | undefined] | "accepted"> {
  try {
    await f();
  } catch (error) {
    if (!isDispatchOnceError(error)) return [`untyped ${(error as Error)?.name}: ${(error as Error)?.message}`, undefined];
    return [error.code, (error as { field?: string }).field];
  }
  return "accepted";
}

const schema = uniqueSchema("adopt");
const admin = adminPool(1);
afterAll(async () => {
  await dropSchema(admin, schema);
  await admin.end();
});

describe("adoption trial (conversation-postgres): bad input is refused with invalid_store_input naming the field", () => {
  it("ERR-1 poolConfig must be an object (5 and [] were spread as nothing, and the pool made with defaults)", async () => {
    for (const poolConfig of [5, [], "max=2"]) {
      expect(await refusal(() => new PostgresConversationStore({ connectionString: DATABASE_URL, poolConfig: poolConfig as never })), JSON.stringify(poolConfig)).toEqual(["invalid_store_input", "poolConfig"]);
    }
  });

  it("ERR-1 a connectionString passed as undefined (process.env.DATABASE_URL unset, as the README's Usage passes it) is refused naming connectionString, store and ledger alike", async () => {
    const unset: string | undefined = undefined;
    expect(await refusal(() => new PostgresConversationStore({ connectionString: unset }))).toEqual(["invalid_store_input", "connectionString"]);
    expect(await refusal(() => createPostgresLedger({ connectionString: unset }))).toEqual(["invalid_ledger_input", "connectionString"]);
    // Neither given at all: still the pool's "exactly one of the two".
    expect(await refusal(() => new PostgresConversationStore({}))).toEqual(["invalid_store_input", "pool"]);
    expect(await refusal(() => createPostgresLedger({}))).toEqual(["invalid_ledger_input", "pool"]);
  });

  it("TURN-12 and TURN-17: appendUserMessage's options and listFailedTurns' query refuse members they do not take", async () => {
    const store = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    try {
      await store.migrate();
      expect(await refusal(() => store.appendUserMessage("c", { id: "m1", content: "x" }, { reopenWithinMS: 1000 } as never))).toEqual(["invalid_store_input", "options.reopenWithinMS"]);
      expect(await store.message("c", "m1")).toBeUndefined();
      expect(await refusal(() => store.listFailedTurns({ limt: 5 } as never))).toEqual(["invalid_store_input", "query.limt"]);
      expect(await refusal(() => store.listFailedTurns({ limit: 5 }))).toBe("accepted");
    } finally {
      await store.close();
    }
  });

  it("ERR-1 a 10 KB schema or tablePrefix is refused with a short message (the whole value was echoed into the message)", async () => {
    for (const options of [{ schema: "s".repeat(10_000) }, { tablePrefix: "p".repeat(10_000) }]) {
      let caught: unknown;
      try {
        new PostgresConversationStore({ connectionString: DATABASE_URL, ...options });
      } catch (error) {
        caught = error;
      }
      expect(isDispatchOnceError(caught, "invalid_store_input")).toBe(true);
      expect((caught as Error).message.length).toBeLessThan(300);
    }
  });
});
