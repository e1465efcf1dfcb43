// Store faults seen from the client (issue 18): a paused server must not hang a ledger call. The
// server is "paused" by a proxy the test freezes (test/proxy.ts); the shared server never is.
import { Dispatcher, defineTool, isDispatchOnceError, type ClaimRequest, type DispatchEvent } from "@dispatch-once/core";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { adminPool, dropSchema, storedColumns, uniqueSchema } from "./helpers.js";
import { freezableProxy, type FreezableProxy } from "./proxy.js";

let admin: pg.Pool;
const schemas: string[] = [];
const proxies: FreezableProxy[] = [];
const ledgers: PostgresLedger[] = [];

beforeAll(() => {
  admin = adminPool(4);
});

afterAll(async () => {
  for (const proxy of proxies) proxy.thaw();
  await Promise.all(ledgers.map((l) => l.close().catch(() => {})));
  await Promise.all(proxies.map((p) => p.close()));
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.end();
});

function request(key: string, owner = "owner-a"): ClaimRequest {
  return { key, toolName: "send_payment", effect: "unkeyed_write", owner, leaseMs: 60_000, request: '{"amount":1}' };
}

async function migrated(tag: string): Promise<string> {
  const schema = uniqueSchema(tag);
  schemas.push(schema);
  await new PostgresLedger({ pool: admin, schema }).migrate();
  return schema;
}

async function proxy(): Promise<FreezableProxy> {
  const made = await freezableProxy();
  proxies.push(made);
  return made;
}

function track(ledger: PostgresLedger): PostgresLedger {
  ledgers.push(ledger);
  return ledger;
}

type Settled = { state: "fulfilled"; value: unknown; ms: number } | { state: "rejected"; error: unknown; ms: number } | { state: "pending"; ms: number };

/** How a call settles, and when; "pending" if it has not settled within guardMs (a hang). */
async function settle(call: () => Promise<unknown>, guardMs: number): Promise<Settled> {
  const started = performance.now();
  const ms = () => Math.round(performance.now() - started);
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<Settled>((resolve) => (timer = setTimeout(() => resolve({ state: "pending", ms: ms() }), guardMs)));
  const outcome = call().then(
    (value): Settled => ({ state: "fulfilled", value, ms: ms() }),
    (error: unknown): Settled => ({ state: "rejected", error, ms: ms() }),
  );
  const result = await Promise.race([outcome, guard]);
  clearTimeout(timer);
  return result;
}

/**
 * Opens the ledger's connection before the fault. Its first lookup connects and plans the
 * statement, which on a loaded host can take longer than the small timeoutMs these tests give
 * the subject (a flake in CI: "no answer within timeoutMs = 300 ms" on the warm-up). The warm-up
 * is not what is tested: it is retried until it answers; anything but ledger_unavailable fails.
 */
async function warmUp(ledger: PostgresLedger): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await ledger.lookup("warm-up");
      return;
    } catch (error) {
      if (!isDispatchOnceError(error, "ledger_unavailable") || attempt >= 20) throw error;
    }
  }
}

/** Timers on this shared 2-core machine fire late under load: the documented bound plus this much. */
const SLACK_MS = 1_000;

function expectUnavailableWithin(result: Settled, boundMs: number, what: string): void {
  if (result.state === "pending") throw new Error(`${what}: still pending after ${result.ms} ms (the bound is ${boundMs} ms): it hangs`);
  if (result.state === "fulfilled") throw new Error(`${what}: answered ${JSON.stringify(result.value)} from a paused server`);
  expect(isDispatchOnceError(result.error, "ledger_unavailable"), `${what}: ${String(result.error)}`).toBe(true);
  expect(result.ms, `${what} settled after ${result.ms} ms`).toBeLessThan(boundMs + SLACK_MS);
}

describe("an answer that arrived while the process was stalled (LEDGER-12)", () => {
  it("is taken, not reported as ledger_unavailable, when the stall outlasted timeoutMs (the deadline is judged after that turn's I/O)", async () => {
    const schema = await migrated("stall");
    const ledger = track(new PostgresLedger({ connectionString: process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/test", schema, timeoutMs: 200 }));
    await warmUp(ledger); // an idle connection in the pool: the claim is written at once
    const claim = ledger.claim(request("stalled"));
    await new Promise((resolve) => setImmediate(resolve));
    // The event loop is blocked well past the deadline while PostgreSQL answers: when it runs
    // again, the deadline's timer is due before the answer is read. The block stands for a GC
    // pause, a CPU-bound handler or a starved process; it waits without spinning, so the server
    // it waits for keeps a core on a loaded host, and 2.5 s leaves it ample time to answer.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2_500);
    const outcome = await claim.then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    );
    expect(outcome).toMatchObject({ result: { outcome: "claimed", fence: 1 } });
    expect(await storedColumns(admin, schema, "stalled")).toMatchObject({ state: "in_flight", fence: "1" });
  });
});

describe("LEDGER-12: a paused server (frozen proxy) gives ledger_unavailable within timeoutMs", () => {
  it("own pool: the claim on a warm connection, and each claim after it, fail within the bound (no extra wait for new connections)", async () => {
    const schema = await migrated("paused");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 1_500 }));
    expect(await ledger.claim(request("warm"))).toMatchObject({ outcome: "claimed" });
    p.freeze();
    const times: number[] = [];
    for (let i = 0; i < 4; i++) {
      const result = await settle(() => ledger.claim(request(`paused-${i}`)), 12_000);
      expectUnavailableWithin(result, 1_500, `claim ${i}`);
      expect(result.ms, `claim ${i} gave up before the bound`).toBeGreaterThanOrEqual(1_400);
      times.push(result.ms);
    }
    console.log(`claims on a paused server settled after ${times.join(", ")} ms (bound 1500 ms)`);
    // The thaw: the same ledger works again at once.
    p.thaw();
    expect(await ledger.claim(request("after-thaw"))).toMatchObject({ outcome: "claimed", fence: 1 });
    // A claim the ledger gave up on had been SENT: after the thaw the server may still apply it.
    // It was never reported as claimed (nothing ran on it); if it was applied, its row is an
    // ordinary in-flight claim that expires with its lease (issue 18, "false unknowns": core's part).
    await new Promise((resolve) => setTimeout(resolve, 500));
    let applied = 0;
    for (let i = 0; i < 4; i++) {
      const row = await storedColumns(admin, schema, `paused-${i}`);
      if (row !== undefined) applied++;
      if (row !== undefined) expect(row).toMatchObject({ state: "in_flight", owner: "owner-a", fence: "1" });
    }
    console.log(`claims given up on and applied by the server after the thaw: ${applied} of 4`);
  });

  it("own pool: more concurrent claims than the pool has connections each fail within the bound", async () => {
    const schema = await migrated("pausedconc");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 1_500, poolConfig: { max: 4 } }));
    expect(await ledger.claim(request("warm"))).toMatchObject({ outcome: "claimed" });
    p.freeze();
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => settle(() => ledger.claim(request(`c-${i}`)), 12_000)));
    results.forEach((result, i) => expectUnavailableWithin(result, 1_500, `concurrent claim ${i}`));
    // And the next wave (the pool had to replace every connection) is bounded the same way.
    const again = await Promise.all(Array.from({ length: 6 }, (_, i) => settle(() => ledger.claim(request(`d-${i}`)), 12_000)));
    again.forEach((result, i) => expectUnavailableWithin(result, 1_500, `second-wave claim ${i}`));
    p.thaw();
    expect(await ledger.claim(request("after-thaw"))).toMatchObject({ outcome: "claimed" });
  });

  it("own pool: every operation is bounded the same way", async () => {
    const schema = await migrated("pausedops");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 1_000 }));
    const held = await ledger.claim(request("held"));
    if (held.outcome !== "claimed") throw new Error("expected a claim");
    p.freeze();
    const ops: [string, () => Promise<unknown>][] = [
      ["renew", () => ledger.renew("held", held.fence, 1000)],
      ["complete", () => ledger.complete("held", held.fence, '"x"')],
      ["fail", () => ledger.fail("held", held.fence, { name: "E", message: "m" })],
      ["markUnknown", () => ledger.markUnknown("held", held.fence, "why")],
      ["release", () => ledger.release("held", held.fence)],
      ["retire", () => ledger.retire("held", "held-claim-0123456789abcdef", { release: true })],
      ["lookup", () => ledger.lookup("held")],
      ["sweep", () => ledger.sweep()],
      ["migrate", () => ledger.migrate()],
      ["probeDurability", () => ledger.probeDurability()],
    ];
    for (const [name, op] of ops) expectUnavailableWithin(await settle(op, 12_000), 1_000, name);
    p.thaw();
    expect(await ledger.lookup("held")).toMatchObject({ state: "in_flight" });
  });

  it("own pool, default timeoutMs: a claim on a paused server fails within 5 s", async () => {
    const schema = await migrated("pauseddefault");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema }));
    expect(await ledger.claim(request("warm"))).toMatchObject({ outcome: "claimed" });
    p.freeze();
    const result = await settle(() => ledger.claim(request("paused")), 15_000);
    expectUnavailableWithin(result, 5_000, "claim with the default bound");
    expect(result.ms).toBeGreaterThanOrEqual(4_900);
    p.thaw();
  });

  it("own pool, a new connection to a paused server: the connection wait is inside the same bound", async () => {
    const schema = await migrated("pausedconnect");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 1_500 }));
    p.freeze(); // before the first connection: the TCP connect succeeds, the startup is never answered
    expectUnavailableWithin(await settle(() => ledger.claim(request("cold")), 12_000), 1_500, "claim on a cold pool");
    expect(p.accepted()).toBeGreaterThanOrEqual(1);
    p.thaw();
    expect(await ledger.claim(request("after-thaw"))).toMatchObject({ outcome: "claimed" });
  });

  it("own pool, a server slower to accept a connection than timeoutMs: the operation fails at its bound, and the connection it started serves the next one", async () => {
    // A loaded host (CI, two cores) once took over 400 ms for every new connection: a ledger that
    // dropped each attempt at its 400 ms bound never reached a store that was merely slow.
    const schema = await migrated("slowconnect");
    const p = await proxy();
    p.slowConnections(900);
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 300 }));
    expectUnavailableWithin(await settle(() => ledger.claim(request("cold")), 12_000), 300, "claim on a cold pool");
    // The attempt completes meanwhile (900 ms on a quiet host, longer on a loaded one): wait for
    // the pool to hold it idle, rather than for a fixed time a slow host may outlast.
    const pool = (ledger as unknown as { db: pg.Pool }).db;
    for (const until = Date.now() + 20_000; pool.idleCount === 0; await new Promise((resolve) => setTimeout(resolve, 20))) {
      if (Date.now() > until) throw new Error(`the connection the cold claim started was not pooled within 20 s (total ${pool.totalCount}, idle ${pool.idleCount})`);
    }
    expect(await ledger.claim(request("next"))).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(p.accepted()).toBe(1);
    // The operation that gave up sent nothing: its connection went back to the pool unused.
    expect(await storedColumns(admin, schema, "cold")).toBeUndefined();
  });

  it("a brought pool without any timeout: the ledger's call still settles within timeoutMs (the connection stays the pool's)", async () => {
    const schema = await migrated("pausedbyo");
    const p = await proxy();
    const pool = new pg.Pool({ connectionString: p.url, max: 2 });
    pool.on("error", () => {});
    const ledger = track(new PostgresLedger({ pool, schema, timeoutMs: 1_500 }));
    expect(await ledger.claim(request("warm"))).toMatchObject({ outcome: "claimed" });
    p.freeze();
    expectUnavailableWithin(await settle(() => ledger.claim(request("paused")), 12_000), 1_500, "claim over a brought pool");
    p.thaw();
    expect(await ledger.claim(request("after-thaw"))).toMatchObject({ outcome: "claimed" });
    await pool.end();
  });

  it("rejects a timeoutMs that is not a positive integer, and session options in the connection string", () => {
    for (const timeoutMs of [0, -1, 1.5, Number.NaN, "5000"]) {
      expect(() => new PostgresLedger({ connectionString: "postgres://x@127.0.0.1/db", timeoutMs } as never)).toThrow(
        expect.objectContaining({ code: "invalid_ledger_input", field: "timeoutMs" }),
      );
    }
    expect(() => new PostgresLedger({ connectionString: "postgres://x@127.0.0.1/db?options=-c%20statement_timeout%3D0" })).toThrow(
      expect.objectContaining({ code: "invalid_ledger_input", field: "connectionString" }),
    );
  });
});

describe("a connection that ends while its statement runs (found by the fault suite)", () => {
  it("LEDGER-12 own pool: connections cut under claims in flight reject them as ledger_unavailable and do not crash the process (pg emits 'error' on a checked-out client)", async () => {
    const schema = await migrated("cut");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 5_000 }));
    expect(await ledger.claim(request("warm"))).toMatchObject({ outcome: "claimed" });
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on("uncaughtException", onUncaught);
    try {
      p.freeze();
      const pending = [ledger.claim(request("cut-1")), ledger.claim(request("cut-2"))].map((c) => c.then(() => "claimed", (e: unknown) => (e as { code?: string }).code));
      await new Promise((resolve) => setTimeout(resolve, 200));
      await p.close(); // every connection dropped while its statement is in flight
      expect(await Promise.all(pending)).toEqual(["ledger_unavailable", "ledger_unavailable"]);
      await new Promise((resolve) => setTimeout(resolve, 100));
    } finally {
      process.off("uncaughtException", onUncaught);
    }
    expect(uncaught).toEqual([]);
  });
});

/** The one backend serving the proxied ledger of `schema` (warmed up): once it has exited, it has run everything it received. */
async function backendBehindProxy(schema: string): Promise<number> {
  // A warm-up that timed out destroyed its connection; its backend can take a moment to exit.
  for (let polls = 0; ; polls++) {
    const { rows } = await admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE $1", [`%"${schema}"%`]);
    if (rows.length === 1 || polls >= 100) {
      expect(rows).toHaveLength(1);
      return rows[0]!.pid;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Until the backend has exited (after a thaw: it ran the held statements, then saw its client gone). */
async function ranEverything(pid: number): Promise<void> {
  for (let polls = 0; ; polls++) {
    const { rows } = await admin.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid]);
    if (rows.length === 0) return;
    if (polls > 200) throw new Error("the backend behind the proxy never ran the held claim and exited");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("LEDGER-26: a claim the paused server applies after the client gave up is taken by its claim id (issue 18: false unknowns)", () => {
  it("through the dispatcher: the claim times out on a frozen proxy, the server applies it at the thaw, the retry with the same claim id gets its fence, the unkeyed tool runs once and nothing is unknown", async () => {
    const schema = await migrated("claimid");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 300, durability: "durable" }));
    await warmUp(ledger);
    const runs: unknown[] = [];
    const tool = defineTool({
      name: "post_note",
      effect: "unkeyed_write",
      // A pass-through schema: the test is about the claim, not validation (no zod here).
      input: { safeParse: (value: unknown) => ({ success: true, data: value }) } as never,
      run: async (args: unknown) => {
        runs.push(args);
        return { ok: true };
      },
    });
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 1_500, claimRetryMs: 8_000, onEvent: (e) => events.push(e), logger: { warn: () => {} } });
    p.freeze();
    const thaw = setTimeout(() => p.thaw(), 1_000); // the server "resumes" after three client timeouts
    const turn = { conversationId: "conv-paused-pg", turnIndex: 0 };
    const out = await dispatcher.turn(turn).dispatch({ name: "post_note", input: { text: "hi" } });
    clearTimeout(thaw);
    expect(runs).toEqual([{ text: "hi" }]);
    expect(events.filter((e) => e.type === "claim_retry").length).toBeGreaterThan(0);
    expect(events).toContainEqual(expect.objectContaining({ type: "claimed", fence: 1, takeover: false }));
    // Past the lease of the first claim: completed with fence 1, and the replay is answered from it.
    await new Promise((resolve) => setTimeout(resolve, 1_600));
    expect(await storedColumns(admin, schema, out.key)).toMatchObject({ state: "completed", fence: "1" });
    const replay = await dispatcher.turn(turn).dispatch({ name: "post_note", input: { text: "hi" } });
    expect(replay.replayed).toBe(true);
    expect(runs).toHaveLength(1);
  });

  it("LEDGER-27 (proposed): a copy of a claim that the paused server runs after its claimant released it by claim id is refused; the row stays released, with no in-flight row for a lease to turn unknown", async () => {
    const schema = await migrated("latecopy");
    const p = await proxy();
    const late = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 300, durability: "durable" }));
    await warmUp(late);
    const behind = await backendBehindProxy(schema);
    const direct = track(new PostgresLedger({ pool: admin, schema, durability: "durable" }));
    const claim: ClaimRequest = { ...request("late"), claimId: "late-copy-0123456789abcdef" };
    p.freeze();
    const lost = await late.claim(claim).then((answer) => answer, (error: unknown) => error);
    expect(isDispatchOnceError(lost, "ledger_unavailable"), String(lost)).toBe(true);
    // DISPATCH-16, on a healthy connection: claim again with the same id (it never landed: claimed, fence 1), release it.
    expect(await direct.claim(claim)).toMatchObject({ outcome: "claimed", fence: 1 });
    await direct.release("late", 1);
    p.thaw(); // the paused server resumes and runs the copy it had received
    await ranEverything(behind);
    // Before LEDGER-27 the copy took the released row again: in_flight, fence 2, held by nobody.
    expect(await storedColumns(admin, schema, "late")).toMatchObject({ state: "released", fence: "1", claim_id: claim.claimId });
    await expect(direct.claim(claim)).rejects.toMatchObject({ code: "stale_claim" });
    expect(await direct.claim({ ...request("late", "owner-b"), claimId: "next-claim-0123456789abcd" })).toMatchObject({ outcome: "claimed", fence: 2, takeover: false });
  });

  /**
   * LEDGER-27's residual 2 (the model's late-claim-tombstone): a copy of claim id B, held by the
   * frozen proxy, lands after the row was released under claim id A. Returns the row as the
   * server left it once the backend behind the proxy had run everything it received.
   */
  async function lateCopyOfAnotherId(tag: string, retireB: boolean) {
    const schema = await migrated(tag);
    const p = await proxy();
    const late = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 300, durability: "durable" }));
    await warmUp(late);
    const behind = await backendBehindProxy(schema);
    const direct = track(new PostgresLedger({ pool: admin, schema, durability: "durable" }));
    const idA = "dispatch-A-0123456789abcdef";
    const idB = "dispatch-B-0123456789abcdef";
    // Dispatch B's claim is sent and held: its reply never comes (ledger_unavailable).
    p.freeze();
    const lost = await late.claim({ ...request("late"), claimId: idB }).then((answer) => answer, (error: unknown) => error);
    expect(isDispatchOnceError(lost, "ledger_unavailable"), String(lost)).toBe(true);
    // Dispatch A (an earlier attempt whose reply was lost too) took the row, and DISPATCH-16 released it by its claim id.
    expect(await direct.claim({ ...request("late"), claimId: idA })).toMatchObject({ outcome: "claimed", fence: 1 });
    await direct.release("late", 1);
    // DISPATCH-16 with LEDGER-28: dispatch B is over and one of its claims met ledger_unavailable: retire its id
    // (release: it never received claimed). Its copy has not landed yet: nothing to release.
    if (retireB) expect(await direct.retire("late", idB, { release: true })).toEqual({ released: false });
    p.thaw(); // the paused server resumes and runs B's copy
    await ranEverything(behind);
    return { row: await storedColumns(admin, schema, "late"), direct, idA, idB };
  }

  it("LEDGER-28 (LEDGER-27's residual 2): a held copy of claim id B lands after the row was released under claim id A; B retired before it lands, the copy is refused and the row stays released", async () => {
    const { row, direct, idA, idB } = await lateCopyOfAnotherId("retired", true);
    expect(row).toMatchObject({ state: "released", fence: "1", claim_id: idA });
    await expect(direct.claim({ ...request("late"), claimId: idB })).rejects.toMatchObject({ code: "stale_claim", fence: 1 });
    // The next dispatch of the call claims the released row as usual.
    expect(await direct.claim({ ...request("late", "owner-c"), claimId: "dispatch-C-0123456789abcdef" })).toMatchObject({ outcome: "claimed", fence: 2, takeover: false });
  });

  it("control for the test above: without the retire, B's late copy takes the released row (fence 2, in flight under B, held by nobody): the residual the retire closes", async () => {
    const { row, idB } = await lateCopyOfAnotherId("notretired", false);
    expect(row).toMatchObject({ state: "in_flight", fence: "2", claim_id: idB });
  });

  it("the previous version's seven-argument claim function still works after the migration, and its claims are never taken for a claim id's", async () => {
    const schema = await migrated("claim7");
    const fn = `"${schema}"."dispatch_once_ledger_claim"`;
    const id = "claim-id-0123456789abcdef";
    const ledger = track(new PostgresLedger({ pool: admin, schema }));
    const first = await ledger.claim({ ...request("k7"), claimId: id, effect: "keyed_write" });
    expect(first).toMatchObject({ outcome: "claimed", fence: 1 });
    await admin.query(`UPDATE "${schema}".dispatch_once_ledger SET lease_expires_at = 0 WHERE key = 'k7'`);
    // An old process takes the expired keyed claim over through the old signature.
    const { rows } = await admin.query(`SELECT ${fn}($1, $2, $3, $4, $5, $6, $7) AS answer`, ["k7", "send_payment", "keyed_write", "old-process", 60_000, 86_400_000, "{}"]);
    expect(String(rows[0].answer)).toMatch(/^c2 \d+ 1 /);
    // The new process's claim sent again meets the old process's claim, not its own.
    expect(await ledger.claim({ ...request("k7"), claimId: id, effect: "keyed_write" })).toMatchObject({ outcome: "existing" });
  });
});

describe("DISPATCH-10, DISPATCH-17: a completion the paused server applies after the client gave up", () => {
  it("through the dispatcher: the completion times out on a frozen proxy and the server applies it at the thaw; the re-sends (refused then, or applied if one lands first) settle it: the result is returned, the unkeyed tool ran once, nothing is unknown", async () => {
    const schema = await migrated("lostcomplete");
    const p = await proxy();
    const ledger = track(new PostgresLedger({ connectionString: p.url, schema, timeoutMs: 300, durability: "durable" }));
    await warmUp(ledger);
    const runs: unknown[] = [];
    let thaw: NodeJS.Timeout | undefined;
    const tool = defineTool({
      name: "post_note",
      effect: "unkeyed_write",
      input: { safeParse: (value: unknown) => ({ success: true, data: value }) } as never,
      run: async (args: unknown) => {
        runs.push(args);
        // The effect has happened; the server pauses before the completion reaches it, and resumes
        // after the client has given up on it at least once.
        p.freeze();
        thaw = setTimeout(() => p.thaw(), 900);
        return { noteId: "note_1" };
      },
    });
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 30_000, recordRetryMs: 8_000, onEvent: (e) => events.push(e), logger: { warn: () => {} } });
    const turn = { conversationId: "conv-paused-complete", turnIndex: 0 };
    const out = await dispatcher.turn(turn).dispatch({ name: "post_note", input: { text: "hi" } });
    clearTimeout(thaw);
    // Before DISPATCH-10's re-sends: ledger_unavailable ("may have happened"), and the row left in
    // flight until its lease turned it unknown, for a note that was posted.
    expect(out).toMatchObject({ replayed: false, result: { noteId: "note_1" } });
    expect(events.filter((e) => e.type === "record_retry").length).toBeGreaterThan(0);
    expect(events.filter((e) => e.type === "recorded")).toEqual([expect.objectContaining({ state: "completed" })]);
    expect(await storedColumns(admin, schema, out.key)).toMatchObject({ state: "completed", fence: "1" });
    const replay = await dispatcher.turn(turn).dispatch({ name: "post_note", input: { text: "hi" } });
    expect(replay).toMatchObject({ replayed: true, resultJson: out.resultJson });
    expect(runs).toHaveLength(1);
  });
});
