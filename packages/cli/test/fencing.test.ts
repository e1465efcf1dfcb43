// The operator and a live application on one key: `resolve` never takes a row from a live owner,
// fences out a stalled one, and a replay racing a resolution leaves one outcome and at most the one
// run the row allows (RESOLVE-2, RESOLVE-5, RESOLVE-8, LEDGER-5).
import { Dispatcher, defineTool, ToolRegistry, isDispatchOnceError } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { BACKENDS, runBin, type Backend } from "./helpers.js";

const input = z.object({ n: z.int() });

describe.each(BACKENDS)("resolve against a live application on %s", (_name, open) => {
  let backend: Backend;
  let runs = 0;
  let release: () => void = () => {};
  const slow = defineTool({
    name: "book_table",
    effect: "unkeyed_write",
    input,
    run: async () => {
      runs += 1;
      await new Promise<void>((resolve) => (release = resolve));
      return { booked: true };
    },
  });
  const keyed = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input,
    run: () => {
      runs += 1;
      return { paid: true };
    },
  });
  const quick = defineTool({
    name: "book_now",
    effect: "unkeyed_write",
    input,
    run: () => {
      runs += 1;
      return { booked: true };
    },
  });
  const dispatcherOf = (backend: Backend, leaseMs = 600) =>
    new Dispatcher({
      tools: new ToolRegistry([slow, keyed, quick]),
      ledger: backend.ledger,
      leaseMs,
      logger: { warn: () => {} },
      allowVolatileLedgerForUnkeyedWrites: backend.ledger.capabilities.durability === "volatile",
    });
  const cli = (...args: string[]) => runBin([...args, "--retention", "24h", ...(args[0] === "resolve" && !args.includes("--expected-fence") ? ["--current-fence"] : []), ...backend.args]);

  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("a live owner renewing its lease keeps the row: resolve and reconcile are refused, the tool's outcome is recorded, it ran once", async () => {
    runs = 0;
    const dispatcher = dispatcherOf(backend);
    const turn = { conversationId: `conv-live-${backend.name}`, turnIndex: 0 };
    const call = { name: "book_table", input: { n: 1 } };
    const key = dispatcher.keyFor(call, turn);
    const dispatched = dispatcher.dispatch(call, turn);
    while (runs === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    // Several leases pass while the tool runs: its renewals keep the row live.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const resolved = await cli("resolve", key, "--not-performed", "--reason", "looks stuck");
    expect(resolved.code, resolved.stderr).toBe(4);
    expect(resolved.stderr).toContain("[resolution_refused]");
    const reconciled = await cli("reconcile", key, "--tools", "./fixtures/probe-tools.mjs");
    expect(reconciled.code, reconciled.stderr).toBe(4);
    release();
    expect((await dispatched).result).toEqual({ booked: true });
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", fence: 1 });
    expect(runs).toBe(1);
  });

  it("a stalled owner whose lease ran out is fenced out by the resolution: its late complete and renew are refused (stale_claim)", async () => {
    const key = `${backend.name}-stalled`.padEnd(32, "0");
    const claim = await backend.ledger.claim({ key, toolName: "book_table", effect: "unkeyed_write", owner: "stalled", leaseMs: 1, request: '{"n":2}' });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await new Promise((resolve) => setTimeout(resolve, 20));
    const resolved = await cli("resolve", key, "--completed", '{"booked":"by hand"}', "--reason", "found the booking", "--expected-fence", String(claim.fence));
    expect(resolved.code, resolved.stderr).toBe(0);
    await expect(backend.ledger.complete(key, claim.fence, '{"booked":true}')).rejects.toSatisfy((error) => isDispatchOnceError(error, "stale_claim"));
    await expect(backend.ledger.renew(key, claim.fence, 60_000)).rejects.toSatisfy((error) => isDispatchOnceError(error, "stale_claim"));
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", result: '{"booked":"by hand"}', fence: claim.fence + 1 });
  });

  it("resolve --not-performed of an unkeyed claim whose lease just ran out is refused within the grace, nothing written: the paused owner's request lands, its complete stands, the replay pays nothing more", async () => {
    const dispatcher = dispatcherOf(backend);
    const bookings: string[] = [];
    const turn = { conversationId: `conv-paused-${backend.name}`, turnIndex: 0 };
    const call = { name: "book_now", input: { n: 7 } };
    const key = dispatcher.keyFor(call, turn);
    // The owner claimed and paused before its request went out (a GC pause, a frozen VM).
    const claim = await backend.ledger.claim({ key, toolName: "book_now", effect: "unkeyed_write", owner: "paused", leaseMs: 1, request: '{"n":7}', conversationId: turn.conversationId, turnIndex: 0 });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await new Promise((resolve) => setTimeout(resolve, 20));
    // The operator finds no booking downstream (the request has not been sent) and resolves.
    const resolved = await cli("resolve", key, "--not-performed", "--reason", "no booking at the restaurant");
    // The owner wakes: its request lands, and it records the outcome under its fence.
    bookings.push("table for 7");
    const late = await backend.ledger.complete(key, claim.fence, '{"booked":true}').then(() => "recorded", (error: unknown) => (isDispatchOnceError(error, "stale_claim") ? "stale" : String(error)));
    runs = 0;
    const replay = await dispatcher.dispatch(call, turn).catch((error: unknown) => error);
    if (runs > 0) bookings.push("table for 7 (the replay)");
    expect(bookings).toEqual(["table for 7"]);
    expect(late).toBe("recorded");
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", fence: claim.fence, result: '{"booked":true}' });
    expect(replay).toMatchObject({ replayed: true, result: { booked: true } });
    expect(resolved.code, resolved.stderr).toBe(4);
    expect(resolved.stderr).toContain("nothing was written");
  });

  it("resolve --failed of a keyed claim whose lease just ran out is refused within the grace, nothing written: the paused owner's payment lands, its complete stands, the replay returns it (not a failure the effect contradicts)", async () => {
    const dispatcher = dispatcherOf(backend);
    const payments: string[] = [];
    const turn = { conversationId: `conv-paused-failed-${backend.name}`, turnIndex: 0 };
    const call = { name: "send_payment", input: { n: 5 } };
    const key = dispatcher.keyFor(call, turn);
    // The owner claimed and paused before its request went out (a GC pause, a frozen VM).
    const claim = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "paused", leaseMs: 1, request: '{"n":5}', conversationId: turn.conversationId, turnIndex: 0 });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await new Promise((resolve) => setTimeout(resolve, 20));
    // The operator sees no payment downstream yet (the request has not been sent) and says it failed.
    const resolved = await cli("resolve", key, "--failed", "no payment at the bank", "--reason", "bank console shows nothing");
    // The owner wakes: its payment lands, and it records the outcome under its fence.
    payments.push("payment 5");
    const late = await backend.ledger.complete(key, claim.fence, '{"paid":true}').then(() => "recorded", (error: unknown) => (isDispatchOnceError(error, "stale_claim") ? "stale" : String(error)));
    const replay = await dispatcher.dispatch(call, turn).then((r) => r.result, (error: unknown) => (isDispatchOnceError(error) ? error.code : String(error)));
    // The effect log says it happened once: the record and the replay must not say it failed.
    expect({ payments, late, replay, row: (await backend.ledger.lookup(key))?.state }).toEqual({ payments: ["payment 5"], late: "recorded", replay: { paid: true }, row: "completed" });
    expect(resolved.code, resolved.stderr).toBe(4);
    expect(resolved.stderr).toContain("resolve --failed refused");
    expect(resolved.stderr).toContain("nothing was written");
  });

  it("resolve --failed of an unknown row is refused within the grace (any write class), and settles once the grace has passed on the ledger's clock, or at once with --grace 0s", async () => {
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      const key = `${backend.name}-failed-grace-${effect}`.padEnd(32, "0");
      const claim = await backend.ledger.claim({ key, toolName: effect === "keyed_write" ? "send_payment" : "book_table", effect, owner: "x", leaseMs: 60_000, request: '{"n":9}' });
      if (claim.outcome !== "claimed") throw new Error("not claimed");
      await backend.ledger.markUnknown(key, claim.fence, "tool_error");
      const tooSoon = await cli("resolve", key, "--failed", "declined", "--reason", "bank log");
      expect(tooSoon.code, tooSoon.stderr).toBe(4);
      expect(tooSoon.stderr).toContain("resolve --failed refused");
      expect(await backend.ledger.lookup(key)).toMatchObject({ state: "unknown", fence: claim.fence });
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const afterGrace = await cli("resolve", key, "--failed", "declined", "--reason", "bank log", "--grace", "1s");
      expect(afterGrace.code, afterGrace.stderr).toBe(0);
      expect(await backend.ledger.lookup(key)).toMatchObject({ state: "failed", fence: claim.fence + 1 });
    }
    const forcedKey = `${backend.name}-failed-grace-forced`.padEnd(32, "0");
    const forced = await backend.ledger.claim({ key: forcedKey, toolName: "send_payment", effect: "keyed_write", owner: "x", leaseMs: 60_000, request: '{"n":9}' });
    if (forced.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(forcedKey, forced.fence, "tool_error");
    const now = await cli("resolve", forcedKey, "--failed", "declined", "--reason", "bank log, and the worker is known dead", "--grace", "0s");
    expect(now.code, now.stderr).toBe(0);
    expect(await backend.ledger.lookup(forcedKey)).toMatchObject({ state: "failed" });
  });

  it("resolve --not-performed of an unkeyed row settles it once the grace has passed on the ledger's clock, or at once with --grace 0", async () => {
    const expired = `${backend.name}-grace-expired`.padEnd(32, "0");
    const claim = await backend.ledger.claim({ key: expired, toolName: "book_table", effect: "unkeyed_write", owner: "dead", leaseMs: 1, request: '{"n":8}' });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const afterGrace = await cli("resolve", expired, "--not-performed", "--reason", "no booking", "--grace", "1s");
    expect(afterGrace.code, afterGrace.stderr).toBe(0);
    expect(await backend.ledger.lookup(expired)).toMatchObject({ state: "released", fence: claim.fence + 1 });
    const unknown = `${backend.name}-grace-unknown`.padEnd(32, "0");
    const second = await backend.ledger.claim({ key: unknown, toolName: "book_table", effect: "unkeyed_write", owner: "x", leaseMs: 60_000, request: '{"n":9}' });
    if (second.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(unknown, second.fence, "tool_error");
    const tooSoon = await cli("resolve", unknown, "--not-performed", "--reason", "no booking");
    expect(tooSoon.code, tooSoon.stderr).toBe(4);
    expect(await backend.ledger.lookup(unknown)).toMatchObject({ state: "unknown", fence: second.fence });
    const forced = await cli("resolve", unknown, "--not-performed", "--reason", "no booking, and the worker is known dead", "--grace", "0s");
    expect(forced.code, forced.stderr).toBe(0);
    expect(await backend.ledger.lookup(unknown)).toMatchObject({ state: "released" });
  });

  it("RESOLVE-4: an operator who read fence 1 and resolves after a replay took the row over (fence 2, its owner paused with its request on the way) settles nothing: the resolution names no fence it did not see", async () => {
    const key = `${backend.name}-taken-over`.padEnd(32, "0");
    const first = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "dead", leaseMs: 1, request: '{"n":11}' });
    if (first.outcome !== "claimed") throw new Error("not claimed");
    await new Promise((resolve) => setTimeout(resolve, 20));
    // The operator reads the row: fence 1, lease expired, nothing at the bank under its key.
    const seen = await runBin(["inspect", key, "--json", ...backend.args]);
    expect((JSON.parse(seen.stdout) as { row: { fence: number } }).row.fence).toBe(first.fence);
    // Meanwhile a replay takes the row over and pauses past its own lease, its request on the way.
    const replay = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "replay", leaseMs: 1, request: '{"n":11}' });
    expect(replay).toMatchObject({ outcome: "claimed", takeover: true, fence: first.fence + 1 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    // The operator resolves as decided, without pinning the fence: nothing is written.
    const unpinned = await runBin(["resolve", key, "--not-performed", "--reason", "no payment at the bank", "--retention", "24h", ...backend.args]);
    expect(unpinned.code, unpinned.stderr).not.toBe(0);
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "in_flight", fence: first.fence + 1, owner: "replay" });
    // Pinned to the fence the operator saw: refused with a typed error naming both fences.
    const pinned = await cli("resolve", key, "--not-performed", "--reason", "no payment at the bank", "--expected-fence", String(first.fence));
    expect(pinned.code, pinned.stderr).toBe(4);
    expect(pinned.stderr).toContain(`you decided on fence ${first.fence}, and the row has moved to fence ${first.fence + 1}`);
        expect(await backend.ledger.lookup(key)).toMatchObject({ state: "in_flight", fence: first.fence + 1, owner: "replay" });
    // The paused replay wakes: its record under its own fence stands.
    await backend.ledger.complete(key, replay.outcome === "claimed" ? replay.fence : 0, '{"paid":true}');
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", result: '{"paid":true}' });
  });

  it("RESOLVE-4: an operator whose resolve lost its reply (a crashed CLI, a dropped connection) and runs it again is told it is already done, not that someone else acted", async () => {
    const key = `${backend.name}-lost-reply`.padEnd(32, "0");
    const claim = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "x", leaseMs: 60_000, request: '{"n":12}' });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, claim.fence, "tool_error");
    const args = ["resolve", key, "--completed", '{"paid":"pay_12"}', "--reason", "pay_12 at the bank", "--actor", "carol", "--expected-fence", String(claim.fence)];
    // The first run's write landed; its reply never reached the operator.
    expect((await cli(...args)).code).toBe(0);
    const again = await cli(...args);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("already resolved");
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", fence: claim.fence + 1, result: '{"paid":"pay_12"}' });
    expect(await backend.ledger.auditTrail!(key)).toHaveLength(2);
    // Another decision on the same fence is still refused: that row was settled by this resolution, not by theirs.
    const other = await cli("resolve", key, "--not-performed", "--reason", "nothing", "--actor", "carol", "--expected-fence", String(claim.fence));
    expect(other.code).toBe(4);
  });

  it("RESOLVE-4: resolve --json says whether this run wrote the resolution (resolvedNow true) or found it written by an earlier run whose reply was lost (false)", async () => {
    const key = `${backend.name}-json-lost-reply`.padEnd(32, "0");
    const claim = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "x", leaseMs: 60_000, request: '{"n":14}' });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, claim.fence, "tool_error");
    const args = ["resolve", key, "--completed", '{"paid":"pay_14"}', "--reason", "pay_14 at the bank", "--actor", "carol", "--expected-fence", String(claim.fence), "--json"];
    const first = await cli(...args);
    expect(first.code, first.stderr).toBe(0);
    const again = await cli(...args);
    expect(again.code, again.stderr).toBe(0);
    const [now, found] = [JSON.parse(first.stdout) as Record<string, unknown>, JSON.parse(again.stdout) as Record<string, unknown>];
    console.log(`${backend.name}: first ${first.stdout.trim()}\n  again ${again.stdout.trim()}`);
    // Both print the resolved row, as before; only the field tells the two apart.
    expect(now).toMatchObject({ key, state: "completed", fence: claim.fence + 1, result: '{"paid":"pay_14"}', resolvedNow: true });
    expect(found).toMatchObject({ key, state: "completed", fence: claim.fence + 1, result: '{"paid":"pay_14"}', resolvedNow: false });
    expect(await backend.ledger.auditTrail!(key)).toHaveLength(2);
  });

  it("RESOLVE-4: a --not-performed whose reply was lost, run again after a replay re-ran the released row, is told its resolution was written (not 'nothing was written ... someone else acted'), and nothing more is written or run", async () => {
    const dispatcher = dispatcherOf(backend);
    const turn = { conversationId: `conv-lost-release-${backend.name}`, turnIndex: 0 };
    const call = { name: "send_payment", input: { n: 13 } };
    const key = dispatcher.keyFor(call, turn);
    const claim = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "x", leaseMs: 60_000, request: '{"n":13}', ...turn });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, claim.fence, "tool_error");
    const args = ["resolve", key, "--not-performed", "--reason", "no pay_13 at the bank", "--actor", "carol", "--expected-fence", String(claim.fence)];
    // The first run's write landed; its reply never reached the operator.
    expect((await cli(...args)).code).toBe(0);
    // The released row is re-run by the application's replay before the operator tries again.
    runs = 0;
    expect(await dispatcher.dispatch(call, turn)).toMatchObject({ replayed: false, result: { paid: true } });
    expect(runs).toBe(1);
    const again = await cli(...args);
    expect(again.stderr).not.toContain("nothing was written");
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("already resolved");
    expect(again.stdout).toContain(`fence ${claim.fence + 2}`);
    expect(await backend.ledger.lookup(key)).toMatchObject({ state: "completed", fence: claim.fence + 2, result: '{"paid":true}' });
    expect((await backend.ledger.auditTrail!(key)).filter((entry) => entry.action === "resolved")).toHaveLength(1);
  });

  it("a replay racing a resolution of an expired keyed row: one of them acts, and the tool runs only when the replay won", async () => {
    const dispatcher = dispatcherOf(backend);
    for (let i = 0; i < 6; i++) {
      runs = 0;
      const turn = { conversationId: `conv-race-${backend.name}`, turnIndex: i };
      const call = { name: "send_payment", input: { n: i } };
      const key = dispatcher.keyFor(call, turn);
      const claim = await backend.ledger.claim({ key, toolName: "send_payment", effect: "keyed_write", owner: "dead", leaseMs: 1, request: `{"n":${i}}` });
      if (claim.outcome !== "claimed") throw new Error("not claimed");
      await new Promise((resolve) => setTimeout(resolve, 20));
      // The CLI takes a few hundred ms to start: the replay goes at varying points around it.
      const resolving = cli("resolve", key, "--completed", '{"paid":"by hand"}', "--reason", "bank statement");
      await new Promise((resolve) => setTimeout(resolve, i * 180));
      const replay = await dispatcher.dispatch(call, turn);
      const resolved = await resolving;
      const row = await backend.ledger.lookup(key);
      if (resolved.code === 0) {
        // The operator's resolution came first: the replay answered from it and ran nothing.
        expect(runs, `round ${i}`).toBe(0);
        expect(replay).toMatchObject({ replayed: true, result: { paid: "by hand" } });
        expect(row).toMatchObject({ state: "completed", result: '{"paid":"by hand"}' });
      } else {
        // The replay took the row over first: the resolution was refused and the row is the run's.
        expect(resolved.code, `round ${i}: ${resolved.stderr}`).toBe(4);
        expect(runs, `round ${i}`).toBe(1);
        expect(row).toMatchObject({ state: "completed", result: '{"paid":true}' });
      }
    }
  });
});
