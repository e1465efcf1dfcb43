// resolve --not-performed of an unkeyed_write without --grace waits the dispatcher's default grace,
// 60 s on the ledger's clock (RESOLVE-6): a request its owner sent a few seconds before the row
// turned unknown may still land. The row is seeded by a ledger whose clock runs behind, so that it
// has been unknown for 10 s (or 61 s) on SQLite's own clock, which the CLI reads, without waiting.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { afterAll, describe, expect, it } from "vitest";
import { randomKey, runBin } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-grace-"));
const path = join(dir, "ledger.db");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** An unkeyed_write row that turned unknown `agoMs` ago on the store's clock. */
async function unknownSince(agoMs: number): Promise<string> {
  const seeding = createSqliteLedger({ path, now: () => Date.now() - agoMs });
  try {
    const key = randomKey();
    const claim = await seeding.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "worker", leaseMs: 60_000, request: '{"amount":40}', conversationId: "conv-grace-default", turnIndex: 0 });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await seeding.markUnknown(key, claim.fence, "tool_error: socket hang up after send");
    return key;
  } finally {
    await seeding.close();
  }
}

describe("resolve --not-performed's default grace (RESOLVE-6)", () => {
  it("RESOLVE-6 without --grace, an unkeyed row unknown for 10 s is refused (too_soon, nothing written); one unknown for 61 s is released", async () => {
    const notPerformed = (key: string) => runBin(["resolve", key, "--not-performed", "--reason", "no trace at the bank", "--actor", "alice", "--current-fence", "--retention", "24h", "--ledger", path]);
    const fresh = await unknownSince(10_000);
    const refused = await notPerformed(fresh);
    expect(refused.code, refused.stdout).toBe(4);
    expect(refused.stderr).toContain("--grace (60000 ms)");
    const ledger = createSqliteLedger(path);
    try {
      expect(await ledger.lookup(fresh)).toMatchObject({ state: "unknown", fence: 1 });
      const old = await unknownSince(61_000);
      const released = await notPerformed(old);
      expect(released.code, released.stderr).toBe(0);
      expect(await ledger.lookup(old)).toMatchObject({ state: "released", fence: 2 });
    } finally {
      await ledger.close();
    }
  });
});
