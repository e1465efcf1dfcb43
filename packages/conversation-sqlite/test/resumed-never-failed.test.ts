import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteConversationStore } from "../src/index.js";
import { tempDir } from "./helpers.js";
import { CONV, neverFailedWorld } from "./never-failed.js";

let files: ReturnType<typeof tempDir>;
beforeAll(() => {
  files = tempDir("never-failed");
});
afterAll(() => files.cleanup());

describe("TURN-12 a message that never failed, its holder paid and died, resumed after the retention over SQLite (TURN-11 bound_at)", () => {
  it("TURN-12 m1 re-sent 25 h later to a restarted process (the file reopened): past_resend_window from bound_at, no second payment", async () => {
    const w = await neverFailedWorld();
    const path = join(files.dir, "conversations.db");
    // The store's clock is the test's (its `now` option), the ledger's too.
    const first = new SqliteConversationStore({ path, now: w.clock });
    await w.paidThenDied(first);
    await first.close();
    await w.sweptAfter25Hours();
    const second = new SqliteConversationStore({ path, now: w.clock });
    await w.resentPastWindow(second);
    // The first binding's time, read back from the reopened file.
    expect((await second.message(CONV, "m1"))?.boundAt).toBe(1_000_000);
    await second.close();
    await w.close();
  });
});
