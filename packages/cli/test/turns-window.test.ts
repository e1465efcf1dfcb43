// `turns --failed`'s default re-send window is the runner's: 23/24 of the ledger's retention
// (TURN-12, the runner's resendWindowOf), not the whole retention. A turn that failed 23.5 h ago
// under a 24 h retention is past it: the runner refuses its re-send (past_resend_window), so the
// RE-SEND column must not say yes. The failure is seeded by a store whose clock runs 23.5 h behind,
// so that SQLite's own clock, which the CLI's store reads, finds it that old without waiting.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import { afterAll, describe, expect, it } from "vitest";
import { jsonLines, runBin } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-window-"));
const path = join(dir, "chat.db");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const HOUR = 3_600_000;

describe("turns --failed judges a re-send by the runner's default window (TURN-12)", () => {
  it("TURN-12 a turn that failed 23.5 h ago under --retention 24h is past the default window (23/24 of it): no, as the store answers a runner's re-send", async () => {
    const seeding = createSqliteConversationStore({ path, now: () => Date.now() - 23.5 * HOUR });
    try {
      await seeding.appendUserMessage("conv-window", { id: "m1", content: "pay 12" });
      const lease = await seeding.acquireLease("conv-window", "worker", 600_000);
      if (!lease.acquired) throw new Error("not acquired");
      await seeding.beginTurn("conv-window", lease.fence);
      await seeding.failMessage("conv-window", lease.fence, "m1", { failed: "m1", calls: [{ name: "send_payment", status: "completed", effect: "happened" }], retryable: true });
      await seeding.releaseLease("conv-window", lease.fence);
    } finally {
      await seeding.close();
    }
    const listed = await runBin(["turns", "--failed", "--json", "--retention", "24h", "--store", path]);
    expect(listed.code, listed.stderr).toBe(0);
    const [turn] = jsonLines(listed.stdout) as { messageId: string; resend: string; pastResendWindow: boolean }[];
    expect([turn?.messageId, turn?.pastResendWindow, turn?.resend]).toEqual([
      "m1",
      true,
      "no: its re-send window has passed (23/24 of the ledger's retention, 24h): the runner refuses the re-send (past_resend_window), since the ledger may have swept its calls' rows; send a new message",
    ]);
    // Within a whole day's window it would still reopen: the window, not the retention, decides.
    const day = await runBin(["turns", "--failed", "--json", "--retention", "24h", "--resend-window", "24h", "--store", path]);
    expect((jsonLines(day.stdout) as { resend: string }[]).map((t) => t.resend)).toEqual(["yes"]);
    // The store, asked as a runner with that default window asks it, refuses the reopen.
    const store = createSqliteConversationStore({ path, migrate: false });
    try {
      const resend = await store.appendUserMessage("conv-window", { id: "m1", content: "pay 12" }, { reopenWithinMs: Math.floor((24 * HOUR * 23) / 24) });
      expect([resend.reopened, resend.pastReopenWindow]).toEqual([false, true]);
    } finally {
      await store.close();
    }
  });
});
