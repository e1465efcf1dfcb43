// Group commit (option groupCommit): the whole conformance kit against a ledger that batches its
// writes, and what batching itself promises: one commit per event-loop turn, nothing answered
// before it, and a failing write that rolls back alone.
import { afterEach, describe, expect, it } from "vitest";
import { join } from "node:path";
import { registerLedgerChecks } from "@dispatch-once/conformance";
import { isDispatchOnceError } from "@dispatch-once/core";
import { SqliteLedger, type SqliteLedgerOptions } from "../src/index.js";
import { createSqliteSubject } from "./subject.js";
import { rawConnection, tempDir } from "./helpers.js";

class GroupCommitSqliteLedger extends SqliteLedger {
  constructor(options: SqliteLedgerOptions) {
    super({ ...options, groupCommit: true });
  }
}

registerLedgerChecks(createSqliteSubject(GroupCommitSqliteLedger, "ledger-sqlite with group commit"), { describe, it });

const claimOf = (key: string) => ({ key, toolName: "send_payment", effect: "keyed_write" as const, owner: "test", leaseMs: 30_000, request: '{"amount":1}' });

describe("group commit", () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });
  function open(): { ledger: SqliteLedger; path: string; commits: () => number } {
    const { dir, cleanup } = tempDir("group");
    const path = join(dir, "ledger.db");
    const ledger = new SqliteLedger({ path, groupCommit: true });
    cleanups.push(() => {
      void ledger.close();
      cleanup();
    });
    let commits = 0;
    const exec = ledger.database.exec.bind(ledger.database);
    ledger.database.exec = ((sql: string) => {
      if (sql === "COMMIT") commits++;
      return exec(sql);
    }) as typeof ledger.database.exec;
    return { ledger, path, commits: () => commits };
  }

  it("LEDGER-22 the writes of one event-loop turn share one commit, and none is answered before it is committed", async () => {
    const { ledger, path, commits } = open();
    const other = rawConnection(path);
    cleanups.push(() => other.close());
    const seenByOther: number[] = [];
    const keys = Array.from({ length: 16 }, (_, i) => `k${i}`);
    await Promise.all(
      keys.map((key) =>
        ledger.claim(claimOf(key)).then((claim) => {
          expect(claim.outcome).toBe("claimed");
          // Another connection already sees the row when its claim is answered: it was committed.
          seenByOther.push(Number((other.prepare("SELECT count(*) AS n FROM dispatch_once_ledger WHERE key = ?").get(key) as { n: number }).n));
        }),
      ),
    );
    expect(seenByOther).toEqual(keys.map(() => 1));
    expect(commits()).toBe(1);
  });

  it("LEDGER-5 a refused write in a batch rolls back alone; the others in it commit", async () => {
    const { ledger } = open();
    const claim = await ledger.claim(claimOf("k"));
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    const [stale, good, again] = await Promise.allSettled([
      ledger.complete("k", claim.fence + 1, '{"wrong":true}'),
      ledger.complete("k", claim.fence, '{"ok":true}'),
      ledger.claim(claimOf("k")),
    ]);
    expect(stale.status === "rejected" && isDispatchOnceError(stale.reason, "stale_claim")).toBe(true);
    expect(good.status).toBe("fulfilled");
    // The claim in the same batch ran after the complete: it sees the completed row.
    expect(again.status === "fulfilled" && again.value.outcome === "existing" && again.value.row.state === "completed").toBe(true);
    expect(await ledger.lookup("k")).toMatchObject({ state: "completed", result: '{"ok":true}' });
  });

  it("LEDGER-12 a batch whose transaction cannot begin fails every write in it with ledger_unavailable, and writes nothing", async () => {
    const { ledger, path } = open();
    const locker = rawConnection(path);
    cleanups.push(() => locker.close());
    locker.pragma("busy_timeout = 0");
    ledger.database.pragma("busy_timeout = 0");
    locker.exec("BEGIN IMMEDIATE");
    const results = await Promise.allSettled([ledger.claim(claimOf("a")), ledger.claim(claimOf("b"))]);
    locker.exec("ROLLBACK");
    for (const r of results) expect(r.status === "rejected" && isDispatchOnceError(r.reason, "ledger_unavailable")).toBe(true);
    expect(await ledger.lookup("a")).toBeUndefined();
    expect(await ledger.lookup("b")).toBeUndefined();
  });
});
