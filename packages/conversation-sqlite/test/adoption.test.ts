import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { SqliteConversationStore } from "../src/index.js";

/** Findings of the adoption trial (part 2): bad input to the SQLite conversation store. */
async function refusal(f: () => unknown): Promise<[string, string | undefined] | "accepted"> {
  try {
    await f();
  } catch (error) {
    if (!isDispatchOnceError(error)) return [`untyped ${(error as Error)?.name}: ${(error as Error)?.message}`, undefined];
    return [error.code, (error as { field?: string }).field];
  }
  return "accepted";
}

describe("adoption trial (conversation-sqlite): bad input is refused with invalid_store_input naming the field", () => {
  it("ERR-1 migrate must be a boolean ('yes' was accepted, 0 skipped the tables and failed as store_unavailable)", async () => {
    expect(await refusal(() => new SqliteConversationStore({ path: ":memory:", migrate: "yes" as never }))).toEqual(["invalid_store_input", "migrate"]);
    expect(await refusal(() => new SqliteConversationStore({ path: ":memory:", migrate: 0 as never }))).toEqual(["invalid_store_input", "migrate"]);
  });

  it("TURN-12 appendUserMessage refuses an option it does not take: a misspelt reopenWithinMs reopened a failed message past its window", async () => {
    const store = new SqliteConversationStore({ path: ":memory:" });
    try {
      expect(await refusal(() => store.appendUserMessage("c", { id: "m1", content: "x" }, { reopenWithinMS: 1000 } as never))).toEqual(["invalid_store_input", "options.reopenWithinMS"]);
      expect(await store.message("c", "m1")).toBeUndefined();
      expect(await refusal(() => store.appendUserMessage("c", { id: "m1", content: "x" }, { reopenWithinMs: 1000 }))).toBe("accepted");
    } finally {
      await store.close();
    }
  });

  it("TURN-17 listFailedTurns refuses a query member it does not take (limt, olderThan: the listing ignored them)", async () => {
    const store = new SqliteConversationStore({ path: ":memory:" });
    try {
      expect(await refusal(() => store.listFailedTurns({ limt: 5 } as never))).toEqual(["invalid_store_input", "query.limt"]);
      expect(await refusal(() => store.listFailedTurns({ olderThan: 60_000 } as never))).toEqual(["invalid_store_input", "query.olderThan"]);
      expect(await refusal(() => store.listFailedTurns({ limit: 5, olderThanMs: 0 }))).toBe("accepted");
    } finally {
      await store.close();
    }
  });

  it("ERR-1 a 10 KB tablePrefix is refused with a short message (the whole prefix was echoed into the message, and the CLI printed it)", async () => {
    let caught: unknown;
    try {
      new SqliteConversationStore({ path: ":memory:", tablePrefix: "x".repeat(10_000) });
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_store_input")).toBe(true);
    expect((caught as Error).message.length).toBeLessThan(300);
  });
});
