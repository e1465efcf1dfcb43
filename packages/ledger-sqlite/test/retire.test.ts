// retire() (LEDGER-28) on the SQLite file: what it writes, what a claim carrying a retired claim
// id meets, how long the id is kept, and a race of two processes. Every assertion about what was
// written reads the file through an independent connection.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ClaimRequest } from "@dispatch-once/core";
import { SqliteLedger } from "../src/index.js";
import { manualClock, rawConnection, request, selectRow, startTestProcess, tempDir } from "./helpers.js";

const TABLE = "dispatch_once_ledger";
const RETENTION = 60_000;
const ID = "retired-claim-id-0123456789";
const OTHER = "another-claim-id-0123456789";

let dir: string;
let cleanup: () => void;
let path: string;
let raw: Database.Database;
let clock: ReturnType<typeof manualClock>;
let ledger: SqliteLedger;
const opened: SqliteLedger[] = [];

function open(options: Partial<ConstructorParameters<typeof SqliteLedger>[0]> = {}): SqliteLedger {
  const l = new SqliteLedger({ path, retentionMs: RETENTION, now: clock.now, ...options });
  opened.push(l);
  return l;
}

/** The retired claim ids of the table, as the file holds them. */
function retiredRows(): { key: string; claim_id: string; retired_until: number }[] {
  return raw.prepare(`SELECT key, claim_id, retired_until FROM "${TABLE}_retired" ORDER BY key, claim_id`).all() as {
    key: string;
    claim_id: string;
    retired_until: number;
  }[];
}

/** The whole stored row, claim id included (helpers' selectRow leaves the claim id out). */
function storedWithClaimId(key: string): (Record<string, unknown> & { claim_id: string | null }) | undefined {
  return raw.prepare(`SELECT * FROM "${TABLE}" WHERE key = ?`).get(key) as (Record<string, unknown> & { claim_id: string | null }) | undefined;
}

function withId(key: string, claimId: string, over: Partial<ClaimRequest> = {}): ClaimRequest {
  return request(key, { claimId, ...over });
}

beforeEach(() => {
  ({ dir, cleanup } = tempDir("retire"));
  path = join(dir, "ledger.db");
  clock = manualClock();
  ledger = open();
  raw = rawConnection(path);
});

afterEach(async () => {
  for (const l of opened.splice(0)) await l.close();
  raw.close();
  cleanup();
});

describe("retire (LEDGER-28)", () => {
  it("LEDGER-28: a claim id retired for a key with no row is refused with stale_claim (fence 0) and creates nothing; other ids and none claim normally", async () => {
    expect(ledger.capabilities.supports?.retire).toBe(true);
    expect(await ledger.retire("k", ID)).toEqual({ released: false });
    expect(retiredRows()).toEqual([{ key: "k", claim_id: ID, retired_until: clock.now() + RETENTION }]);
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
    expect(selectRow(raw, TABLE, "k")).toBeUndefined();
    // Retired ids are not rows: nothing to look up, list or sweep.
    expect(await ledger.lookup("k")).toBeUndefined();
    expect((await ledger.listRows()).rows).toEqual([]);
    // The same id on another key is not retired; another id on this key, or none, claims as ever.
    expect(await ledger.claim(withId("other-key", ID))).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(await ledger.claim(withId("k", OTHER))).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(await ledger.claim(request("k"))).toMatchObject({ outcome: "existing" });
    expect(storedWithClaimId("k")).toMatchObject({ state: "in_flight", fence: 1, claim_id: OTHER });
    // On another claim's live row (the read path, no write lock) the retired id is still refused, not told "existing".
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
  });

  it("LEDGER-28: a retired id is refused before LEDGER-26 recognises it on its own in-flight row, and the row is left as it was (lease not restarted)", async () => {
    await ledger.claim(withId("k", ID));
    const before = storedWithClaimId("k");
    clock.advance(1_000);
    expect(await ledger.retire("k", ID)).toEqual({ released: false });
    expect(storedWithClaimId("k")).toEqual(before);
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    // Its lease (30 s) expired, the retention (60 s) not: the claim that would take the row as its
    // own is refused too (the locked path).
    clock.advance(30_000);
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    expect(storedWithClaimId("k")).toEqual(before);
    // Its owner still holds it: the fence, not the claim id, is the ownership (LEDGER-5).
    await ledger.complete("k", 1, '"done"');
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    expect(selectRow(raw, TABLE, "k")).toMatchObject({ state: "completed", fence: 1, result: '"done"' });
  });

  it("LEDGER-28: release:true releases the row only when it is in flight under that very claim id: fence, request and claim id kept (LEDGER-8, LEDGER-27)", async () => {
    await ledger.claim(withId("k", ID, { request: '{"first":true}' }));
    const inFlight = storedWithClaimId("k");
    // Another id's retire never touches the row, release or not.
    expect(await ledger.retire("k", OTHER, { release: true })).toEqual({ released: false });
    // Without release the row stays in flight (a dispatch that ran its tool under the id).
    expect(await ledger.retire("k", ID, { release: false })).toEqual({ released: false });
    expect(storedWithClaimId("k")).toEqual(inFlight);
    clock.advance(500);
    expect(await ledger.retire("k", ID, { release: true })).toEqual({ released: true });
    expect(storedWithClaimId("k")).toMatchObject({
      state: "released",
      fence: 1,
      request: '{"first":true}',
      claim_id: ID,
      owner: null,
      lease_expires_at: null,
      finished_at: clock.now(),
      expires_at: clock.now() + RETENTION,
    });
    expect(await ledger.listExpiredInFlight()).toEqual([]);
    expect((await ledger.listRows({ state: "released" })).rows.map((r) => r.key)).toEqual(["k"]);
    // Idempotent: retiring again changes nothing more and releases nothing.
    const released = storedWithClaimId("k");
    expect(await ledger.retire("k", ID, { release: true })).toEqual({ released: false });
    expect(storedWithClaimId("k")).toEqual(released);
    expect(retiredRows().map((r) => r.claim_id)).toEqual([OTHER, ID].sort());
    // The released row is claimable by any other claim as ever: the next fence, the first request.
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    expect(await ledger.claim(request("k", { request: '{"later":true}' }))).toMatchObject({ outcome: "claimed", fence: 2, request: '{"first":true}' });
  });

  it("LEDGER-28: an expired lease under the claim id is released too (keyed and unkeyed), never turned unknown", async () => {
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      const key = `expired-${effect}`;
      await ledger.claim(withId(key, ID, { effect, leaseMs: 1_000 }));
    }
    clock.advance(5_000);
    expect(await ledger.listExpiredInFlight()).toHaveLength(2);
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      expect(await ledger.retire(`expired-${effect}`, ID, { release: true })).toEqual({ released: true });
      expect(storedWithClaimId(`expired-${effect}`)).toMatchObject({ state: "released", fence: 1, claim_id: ID, reason: null });
    }
    expect(await ledger.listExpiredInFlight()).toEqual([]);
  });

  it("LEDGER-28: a finished row is never changed by release:true (its claim id is gone), and a taken-over row is not the old id's", async () => {
    await ledger.claim(withId("done", ID));
    await ledger.complete("done", 1, "1");
    const completed = storedWithClaimId("done");
    expect(await ledger.retire("done", ID, { release: true })).toEqual({ released: false });
    expect(storedWithClaimId("done")).toEqual(completed);

    await ledger.claim(withId("taken", ID, { leaseMs: 1_000 }));
    clock.advance(2_000);
    expect(await ledger.claim(withId("taken", OTHER))).toMatchObject({ outcome: "claimed", fence: 2, takeover: true });
    expect(await ledger.retire("taken", ID, { release: true })).toEqual({ released: false });
    expect(storedWithClaimId("taken")).toMatchObject({ state: "in_flight", fence: 2, claim_id: OTHER });
  });

  it("LEDGER-28: once the retention has passed on the ledger's clock the id is forgotten: claims take it, and sweep deletes it without counting it", async () => {
    await ledger.retire("k", ID);
    await ledger.retire("young", ID);
    clock.advance(RETENTION - 1);
    await expect(ledger.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
    await ledger.retire("young", ID); // retired again later: kept from this retire on
    clock.advance(1);
    expect(await ledger.sweep()).toBe(0);
    expect(retiredRows().map((r) => r.key)).toEqual(["young"]);
    expect(await ledger.claim(withId("k", ID))).toMatchObject({ outcome: "claimed", fence: 1 });
    await expect(ledger.claim(withId("young", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 0 });
    clock.advance(RETENTION);
    // Past retention but not swept yet: no longer refused (the check reads the time, not the presence).
    expect(retiredRows().map((r) => r.key)).toEqual(["young"]);
    expect(await ledger.claim(withId("young", ID))).toMatchObject({ outcome: "claimed", fence: 1 });
  });

  it("LEDGER-28: sweep forgets expired ids in batches of sweepBatchSize, keeping the live ones", async () => {
    const small = open({ sweepBatchSize: 3 });
    for (let i = 0; i < 10; i++) await small.retire(`old-${i}`, ID);
    clock.advance(RETENTION / 2);
    for (let i = 0; i < 2; i++) await small.retire(`new-${i}`, ID);
    clock.advance(RETENTION / 2);
    const deletes: number[] = [];
    const sweepRetired = (small as unknown as { stmts: { sweepRetired: { run: (n: number) => { changes: number } } } }).stmts.sweepRetired;
    const run = sweepRetired.run.bind(sweepRetired);
    sweepRetired.run = (n: number) => {
      const result = run(n);
      deletes.push(result.changes);
      return result;
    };
    expect(await small.sweep()).toBe(0);
    expect(deletes).toEqual([3, 3, 3, 1]);
    expect(retiredRows().map((r) => r.key)).toEqual(["new-0", "new-1"]);
  });

  it("LEDGER-28: a retired id's check and the claim of an absent key are one statement, an indexed search; a claim without a claim id never reads the retired ids", () => {
    const storeClock = open({ now: undefined });
    const stmts = (storeClock as unknown as { stmts: Record<string, { source: string }> }).stmts;
    for (const name of ["insertClaim", "select", "reclaim", "renew"]) expect(stmts[name]?.source, name).not.toContain("_retired");
    for (const name of ["insertClaimUnlessRetired", "selectForClaimId", "retired"]) {
      const source = stmts[name]!.source;
      expect(source, name).toContain(`"${TABLE}_retired"`);
      const params = Array.from({ length: source.match(/\?/g)?.length ?? 0 }, () => "x");
      const plan = raw.prepare(`EXPLAIN QUERY PLAN ${source}`).all(...params) as { detail: string }[];
      const details = plan.map((p) => p.detail).join("\n");
      expect(details, name).toMatch(new RegExp(`SEARCH ${TABLE}_retired USING PRIMARY KEY \\(key=\\? AND claim_id=\\?\\)`));
      expect(details, name).not.toMatch(/SCAN (?!CONSTANT ROW)/);
    }
  });

  it("LEDGER-28: invalid arguments are invalid_ledger_input and write nothing", async () => {
    await ledger.claim(withId("k", ID));
    const bad: [unknown, unknown, unknown, string][] = [
      ["", ID, undefined, "key"],
      [42, ID, undefined, "key"],
      ["a\uD800", ID, undefined, "key"],
      ["k", undefined, undefined, "claimId"],
      ["k", "short", undefined, "claimId"],
      ["k", "has a space in it 0123456", undefined, "claimId"],
      ["k", ID, null, "options"],
      ["k", ID, "release", "options"],
      ["k", ID, { release: "yes" }, "release"],
      ["k", ID, { release: 1 }, "release"],
    ];
    for (const [key, claimId, options, field] of bad) {
      const retire = ledger.retire as (key: unknown, claimId: unknown, options?: unknown) => Promise<unknown>;
      await expect(retire.call(ledger, key, claimId, options), `${String(key)} ${String(claimId)} ${JSON.stringify(options)}`).rejects.toMatchObject({
        code: "invalid_ledger_input",
        field,
      });
    }
    expect(retiredRows()).toEqual([]);
    expect(storedWithClaimId("k")).toMatchObject({ state: "in_flight", claim_id: ID });
  });

  it("LEDGER-12: a closed ledger, or a write lock held past the busy timeout, is ledger_unavailable and nothing is retired or released", async () => {
    await ledger.claim(withId("k", ID));
    const impatient = open({ busyTimeoutMs: 20 });
    raw.exec("BEGIN IMMEDIATE");
    try {
      await expect(impatient.retire("k", ID, { release: true })).rejects.toMatchObject({ code: "ledger_unavailable" });
    } finally {
      raw.exec("ROLLBACK");
    }
    expect(retiredRows()).toEqual([]);
    expect(storedWithClaimId("k")).toMatchObject({ state: "in_flight", claim_id: ID });
    await impatient.close();
    await expect(impatient.retire("k", ID)).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(await ledger.retire("k", ID, { release: true })).toEqual({ released: true });
  });

  it("LEDGER-28 with groupCommit: a retire joins the turn's batch, in order: the claim after it in the same turn is refused, the one before it is released", async () => {
    const grouped = open({ groupCommit: true });
    const [claimedBefore, retired, refused] = await Promise.allSettled([
      grouped.claim(withId("k", ID)),
      grouped.retire("k", ID, { release: true }),
      grouped.claim(withId("k", ID)),
    ]);
    expect(claimedBefore).toMatchObject({ status: "fulfilled", value: { outcome: "claimed", fence: 1 } });
    expect(retired).toEqual({ status: "fulfilled", value: { released: true } });
    expect(refused).toMatchObject({ status: "rejected", reason: { code: "stale_claim" } });
    expect(storedWithClaimId("k")).toMatchObject({ state: "released", fence: 1, claim_id: ID });
    expect(retiredRows()).toHaveLength(1);
  });

  it("LEDGER-28 on a file of the previous version: opening it adds the retired table; with migrate: false it is refused naming retiredTableSql()", async () => {
    await ledger.claim(withId("k", ID));
    await ledger.close();
    raw.exec(`DROP TABLE "${TABLE}_retired"`);
    expect(() => open({ migrate: false })).toThrow(/the retired table is missing: open with migrate: true, or run retiredTableSql\("dispatch_once_ledger"\)/);
    const upgraded = open();
    expect(retiredRows()).toEqual([]);
    expect(await upgraded.retire("k", ID, { release: true })).toEqual({ released: true });
    await expect(upgraded.claim(withId("k", ID))).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
  });
});


describe("two processes race retire(release: true) against a late claim with the same claim id (LEDGER-28)", () => {
  it("every key ends in exactly one of the consistent outcomes, and the file agrees with both processes", async () => {
    const table = "retire_race";
    const setup = new SqliteLedger({ path, table });
    // Half the keys have no row (a late copy of the first claim), half a live in-flight row under
    // the id (the claim landed; its reply was lost; this late copy is the same claim again).
    const fresh = Array.from({ length: 150 }, (_, i) => `fresh-${i}`);
    const held = Array.from({ length: 150 }, (_, i) => `held-${i}`);
    for (const key of held) {
      await setup.claim({ key, toolName: "send_payment", effect: "unkeyed_write", owner: "lost", leaseMs: 600_000, request: "{}", claimId: `race-claim-id-${key}` });
    }
    await setup.close();
    const keys = [...fresh, ...held].map((k, i) => [(i * 7919) % 300, k] as const).sort((a, b) => a[0] - b[0]).map(([, k]) => k);
    const keysFile = join(dir, "retire-race-keys.json");
    writeFileSync(keysFile, JSON.stringify(keys));
    const claimer = startTestProcess<Record<string, string>>("retire-worker.ts", [path, table, keysFile, "claim"]);
    const retirer = startTestProcess<Record<string, string>>("retire-worker.ts", [path, table, keysFile, "retire"]);
    await Promise.all([claimer.ready, retirer.ready]);
    claimer.child.stdin.write("go\n");
    retirer.child.stdin.write("go\n");
    const [claims, retires] = await Promise.all([claimer.report, retirer.report]);

    const rows = new Map(
      (raw.prepare(`SELECT key, state, fence, claim_id FROM "${table}"`).all() as { key: string; state: string; fence: number; claim_id: string | null }[]).map((r) => [r.key, r]),
    );
    const retiredKeys = new Set(raw.prepare(`SELECT key FROM "${table}_retired"`).pluck().all() as string[]);
    const tally = new Map<string, number>();
    for (const key of keys) {
      const seen = `${claims[key]} / ${retires[key]}`;
      tally.set(seen, (tally.get(seen) ?? 0) + 1);
      expect(retiredKeys.has(key), key).toBe(true);
      const row = rows.get(key);
      if (claims[key] === "stale") {
        // The retire came first: the late copy took nothing. A held row was released by the retire.
        if (key.startsWith("fresh")) {
          expect(retires[key], key).toBe("not_released");
          expect(row, key).toBeUndefined();
        } else {
          expect(retires[key], key).toBe("released");
          expect(row, key).toMatchObject({ state: "released", fence: 1, claim_id: `race-claim-id-${key}` });
        }
      } else {
        // The claim came first (it created the row, or was recognised as the same claim): the retire
        // then released that very row. Never a row left in flight under a retired id.
        expect(claims[key], key).toBe("claimed:1");
        expect(retires[key], key).toBe("released");
        expect(row, key).toMatchObject({ state: "released", fence: 1, claim_id: `race-claim-id-${key}` });
      }
    }
    expect([...rows.values()].filter((r) => r.state === "in_flight")).toEqual([]);
    console.log(`retire race outcomes: ${[...tally].map(([k, n]) => `${k}=${n}`).join(", ")}`);
  });
});
