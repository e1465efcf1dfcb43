import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteConversationStore } from "../src/index.js";
import { tempDir } from "./helpers.js";
import { CONV, HOUR, inheritedIndexWorld } from "./inherited-index.js";

let files: ReturnType<typeof tempDir>;
beforeAll(() => {
  files = tempDir("inherited-index");
});
afterAll(() => files.cleanup());

describe("TURN-12 a message bound at a failed turn's index counts its re-send window from that message's binding over SQLite (TURN-11 bound_at)", () => {
  it("TURN-12 m2, bound 23 h after m1 at m1's index, re-sent 1.5 h after its binding to a restarted process, after the ledger swept m1's row: past_resend_window, no second payment", async () => {
    const w = await inheritedIndexWorld();
    const path = join(files.dir, "conversations.db");
    // The store's clock is the test's (its `now` option), the ledger's too.
    const first = new SqliteConversationStore({ path, now: w.clock });
    await w.m1PaidAndFailed(first);
    const m1BoundAt = (await first.message(CONV, "m1"))?.boundAt;
    w.advanceLedger(23 * HOUR);
    await w.m2ReplayedAndFailed(first);
    await first.close();
    w.advanceLedger(1.5 * HOUR);
    await w.swept();
    const second = new SqliteConversationStore({ path, now: w.clock });
    await w.m2ResentPastWindow(second);
    // m2's calls met m1's rows: it carries m1's binding's time, not its own, read back from the file.
    expect(typeof m1BoundAt).toBe("number");
    expect((await second.message(CONV, "m2"))?.boundAt).toBe(m1BoundAt);
    await second.close();
    await w.close();
  });
});
