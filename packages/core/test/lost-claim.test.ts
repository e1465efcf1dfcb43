import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  LedgerUnavailableError,
  MemoryLedger,
  defineTool,
  newClaimId,
  ToolError,
  CLAIM_ID_PATTERN,
  type ClaimRequest,
  type DispatchEvent,
  type Ledger,
} from "../src/index.js";
import { manualClock, recordingLogger } from "./helpers.js";

const turn0 = { conversationId: "conv_lost_claim", turnIndex: 0 };

/** An unkeyed write that counts its runs: nothing downstream collapses a repeat. */
function counter() {
  const runs: string[] = [];
  const tool = defineTool({
    name: "post_note",
    effect: "unkeyed_write",
    input: z.object({ text: z.string() }),
    async run(args) {
      runs.push(args.text);
      return { posted: args.text };
    },
  });
  return { tool, runs };
}

/**
 * A ledger whose store applies claims but whose replies are lost while `lose` says so: the
 * claim was written, the caller hears ledger_unavailable (a timeout, a dropped connection, a
 * paused Redis that ran the script after the client gave up). `onLost` runs after each write.
 */
function lossyLedger(base: MemoryLedger, lose: (n: number) => boolean, onLost: () => void = () => {}, retire = true) {
  const claims: ClaimRequest[] = [];
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
    // Without retire: a ledger that implements LEDGER-27 but not LEDGER-28 (the dispatcher's fallback).
    capabilities: { ...base.capabilities, durability: "durable" as const, supports: { ...base.capabilities.supports, retire } },
    claim: async (request: ClaimRequest) => {
      claims.push(request);
      const answer = await base.claim(request);
      if (lose(claims.length)) {
        onLost();
        throw new LedgerUnavailableError("claim timed out after 5000 ms (the store may have applied it)");
      }
      return answer;
    },
  });
  return { ledger, claims };
}

describe("a claim is recognised by its claim id (LEDGER-26)", () => {
  it("LEDGER-26 newClaimId mints distinct ids of the documented form", () => {
    const ids = new Set(Array.from({ length: 1000 }, () => newClaimId()));
    expect(ids.size).toBe(1000);
    for (const id of ids) expect(id).toMatch(CLAIM_ID_PATTERN);
  });

  it("LEDGER-26 a claim whose reply was lost is sent again with its claim id and taken: the unkeyed tool runs once, nothing unknown", async () => {
    const base = new MemoryLedger();
    const { ledger, claims } = lossyLedger(base, (n) => n === 1);
    const { tool, runs } = counter();
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, onEvent: (e) => events.push(e), logger: recordingLogger().logger });
    const out = await dispatcher.turn(turn0).dispatch({ name: "post_note", input: { text: "hello" } });
    expect(out.result).toEqual({ posted: "hello" });
    expect(runs).toEqual(["hello"]);
    expect(claims).toHaveLength(2);
    expect(claims[1]!.claimId).toBe(claims[0]!.claimId);
    expect(claims[0]!.claimId).toMatch(CLAIM_ID_PATTERN);
    expect(events.filter((e) => e.type === "claim_retry")).toHaveLength(1);
    // The same claim, the same fence: not a takeover.
    expect(events).toContainEqual(expect.objectContaining({ type: "claimed", fence: 1, takeover: false }));
    expect(await base.lookup(out.key)).toMatchObject({ state: "completed", fence: 1 });
  });

  it("LEDGER-26 the retry takes its own claim even after its lease ran out (a store paused past the lease), instead of turning it unknown", async () => {
    const clock = manualClock();
    const base = new MemoryLedger({ now: clock.now });
    const { ledger } = lossyLedger(base, (n) => n === 1, () => clock.advance(60_000));
    const { tool, runs } = counter();
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, leaseMs: 30_000, logger: recordingLogger().logger });
    const out = await dispatcher.turn(turn0).dispatch({ name: "post_note", input: { text: "late" } });
    expect(runs).toEqual(["late"]);
    expect(await base.lookup(out.key)).toMatchObject({ state: "completed", fence: 1 });
  });

  it("LEDGER-26 another dispatch of the same key (another claim id) still meets the row as held", async () => {
    const base = new MemoryLedger();
    const request = { key: "k".repeat(64), toolName: "post_note", effect: "unkeyed_write" as const, owner: "same-owner", leaseMs: 30_000, request: "{}" };
    const first = await base.claim({ ...request, claimId: newClaimId() });
    expect(first.outcome).toBe("claimed");
    expect((await base.claim({ ...request, claimId: newClaimId() })).outcome).toBe("existing");
    // The owner string alone never identifies a claim (LEDGER-16).
    expect((await base.claim(request)).outcome).toBe("existing");
  });

  it("LEDGER-28 when the retries run out the dispatch fails ledger_unavailable and its claim id is retired, releasing the written claim, so a replay runs the tool once", async () => {
    let down = true;
    const base = new MemoryLedger();
    const { ledger, claims } = lossyLedger(base, () => down);
    const { tool, runs } = counter();
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, maxPollMs: 5, claimRetryMs: 30, onEvent: (e) => events.push(e), logger: recordingLogger().logger });
    const call = { name: "post_note", input: { text: "once" } };
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(runs).toEqual([]);
    const key = dispatcher.keyFor(call, turn0);
    await expect.poll(() => events.find((e) => e.type === "claim_retired"), { timeout: 5_000 }).toMatchObject({ key, released: true });
    expect(events.filter((e) => e.type === "lost_claim_settled")).toEqual([]);
    expect(await base.lookup(key)).toMatchObject({ state: "released", fence: 1 });
    // A copy of the claim that the store applies only now is refused, and changes nothing.
    await expect(base.claim(claims[0]!)).rejects.toMatchObject({ code: "stale_claim" });
    expect(await base.lookup(key)).toMatchObject({ state: "released", fence: 1 });
    down = false;
    const replay = await dispatcher.turn(turn0).dispatch(call);
    expect(replay.replayed).toBe(false);
    expect(runs).toEqual(["once"]);
  });

  it("LEDGER-28 a dispatch that took its claim after a lost reply retires its claim id without releasing: the row keeps its outcome", async () => {
    const base = new MemoryLedger();
    const { ledger, claims } = lossyLedger(base, (n) => n === 1);
    const { tool, runs } = counter();
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, onEvent: (e) => events.push(e), logger: recordingLogger().logger });
    const out = await dispatcher.turn(turn0).dispatch({ name: "post_note", input: { text: "kept" } });
    await expect.poll(() => events.find((e) => e.type === "claim_retired"), { timeout: 5_000 }).toMatchObject({ released: false });
    expect(await base.lookup(out.key)).toMatchObject({ state: "completed", fence: 1 });
    await expect(base.claim(claims[0]!)).rejects.toMatchObject({ code: "stale_claim" });
    expect(runs).toEqual(["kept"]);
  });

  it("LEDGER-28 a dispatch whose claims all got replies retires nothing (no extra ledger write on the common path)", async () => {
    const base = new MemoryLedger();
    let retires = 0;
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: { ...base.capabilities, durability: "durable" as const },
      retire: async (...args: Parameters<MemoryLedger["retire"]>) => {
        retires++;
        return base.retire(...args);
      },
    });
    const { tool } = counter();
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, logger: recordingLogger().logger });
    await dispatcher.turn(turn0).dispatch({ name: "post_note", input: { text: "plain" } });
    await new Promise((r) => setTimeout(r, 20));
    expect(retires).toBe(0);
  });

  /**
   * The model's late-claim-tombstone (spec/model, LEDGER-27's residual 2), at the dispatcher: the
   * first dispatch's claim (id A) lands but every reply is lost; the turn's next dispatch (id B)
   * has its first claim held by the store and applied only later; its retry meets A's row and
   * gives up waiting. A's row is released by its id; then B's held copy lands on the released row.
   */
  async function lateCopyOfAnotherClaim(retire: boolean) {
    const clock = manualClock();
    const base = new MemoryLedger({ now: clock.now });
    const held: ClaimRequest[] = [];
    let phase: "lose" | "hold-first" | "up" = "lose";
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: { ...base.capabilities, durability: "durable" as const, supports: { ...base.capabilities.supports, retire } },
      claim: async (request: ClaimRequest) => {
        if (phase === "lose") {
          await base.claim(request);
          throw new LedgerUnavailableError("claim timed out (the store may have applied it)");
        }
        if (phase === "hold-first") {
          phase = "up";
          held.push(request); // the store holds it: applied later, after the client gave up
          throw new LedgerUnavailableError("claim timed out (the store may have applied it)");
        }
        return base.claim(request);
      },
      // The store is down for everything while the first dispatch's replies are lost.
      retire: async (...args: Parameters<MemoryLedger["retire"]>) => {
        if (phase === "lose") throw new LedgerUnavailableError("retire timed out");
        return base.retire(...args);
      },
    });
    const { tool, runs } = counter();
    const events: DispatchEvent[] = [];
    const options = { tools: [tool], ledger, pollMs: 1, maxPollMs: 2, claimRetryMs: 20, leaseMs: 30_000, onEvent: (e: DispatchEvent) => events.push(e), logger: recordingLogger().logger };
    const dispatcher = new Dispatcher({ ...options, waitMs: 30 });
    const call = { name: "post_note", input: { text: "ticket" } };
    const key = dispatcher.keyFor(call, turn0);
    // Dispatch 1 (id A): written, never heard; its retries run out.
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "ledger_unavailable" });
    // Dispatch 2 (id B): the first claim is held, the retry meets A's live row, the wait gives up.
    phase = "hold-first";
    const settledBefore = events.filter((e) => e.type === "claim_retired" || e.type === "lost_claim_settled").length;
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    // The background settling of both dispatches has run.
    // With retire: both dispatches' claim ids (A releases its row); without: A's settling only.
    await expect.poll(() => events.filter((e) => e.type === "claim_retired" || e.type === "lost_claim_settled").length, { timeout: 5_000 }).toBe(settledBefore + (retire ? 2 : 1));
    expect(await base.lookup(key)).toMatchObject({ state: "released" });
    // B's held copy lands now.
    const late = await base.claim(held[0]!).then(
      (answer) => answer.outcome,
      (error: { code?: string }) => error.code,
    );
    // The lease of whatever the late copy took runs out; the next attempt of the turn comes.
    clock.advance(60_000);
    const next = await new Dispatcher({ ...options, waitMs: 30 }).turn(turn0).dispatch(call).then(
      (out) => ({ ok: true as const, result: out.result }),
      (error: { code?: string }) => ({ ok: false as const, code: error.code }),
    );
    return { late, next, runs, row: await base.lookup(key) };
  }

  it("LEDGER-28 a late copy of another dispatch's claim lands after the release: refused as retired, and the ticket is sent once (no false unknown)", async () => {
    const { late, next, runs, row } = await lateCopyOfAnotherClaim(true);
    expect(late).toBe("stale_claim");
    expect(next).toEqual({ ok: true, result: { posted: "ticket" } });
    expect(runs).toEqual(["ticket"]);
    expect(row).toMatchObject({ state: "completed" });
  });

  it("LEDGER-27's residual 2, on a ledger without retire: the same late copy takes the released row and its lease turns the ticket that was never sent unknown", async () => {
    const { late, next, runs, row } = await lateCopyOfAnotherClaim(false);
    expect(late).toBe("claimed");
    expect(next).toEqual({ ok: false, code: "outcome_unknown" });
    expect(runs).toEqual([]);
    expect(row).toMatchObject({ state: "unknown", reason: "lease_expired" });
  });

  it("LEDGER-28 a dispatch that releases its own row after a lost reply retires its claim id first: a late copy cannot take the row even after another claim released it", async () => {
    const base = new MemoryLedger();
    const held: ClaimRequest[] = [];
    let claims = 0;
    let releases = 0;
    let late: string | undefined;
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: { ...base.capabilities, durability: "durable" as const },
      claim: async (request: ClaimRequest) => {
        if (++claims === 1) {
          held.push(request); // held by the store, applied later
          throw new LedgerUnavailableError("claim timed out (the store may have applied it)");
        }
        return base.claim(request);
      },
      release: async (key: string, fence: number) => {
        await base.release(key, fence);
        if (++releases > 1) return;
        // Right after this dispatch's release, before anything else it does: another process
        // claims the row and releases it (not performed), then the held copy lands.
        const other = await base.claim({ ...held[0]!, claimId: newClaimId(), owner: "other" });
        if (other.outcome === "claimed") await base.release(key, other.fence);
        late = await base.claim(held[0]!).then(
          (answer) => answer.outcome,
          (error: { code?: string }) => error.code,
        );
      },
    });
    const tool = defineTool({
      name: "post_note",
      effect: "unkeyed_write",
      input: z.object({ text: z.string() }),
      async run() {
        throw new ToolError("the notes service refused the connection", { disposition: "not_performed" });
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, logger: recordingLogger().logger });
    const call = { name: "post_note", input: { text: "note" } };
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "claim_released" });
    expect(late).toBe("stale_claim");
    expect(await base.lookup(dispatcher.keyFor(call, turn0))).toMatchObject({ state: "released", fence: 2 });
  });

  describe("on a ledger without retire (LEDGER-27 alone): released by claim id (DISPATCH-16's fallback)", () => {
    it("LEDGER-26 when the retries run out the dispatch fails ledger_unavailable and the written claim is released by its claim id, so a replay runs the tool once", async () => {
      let down = true;
      const base = new MemoryLedger();
      const { ledger } = lossyLedger(base, () => down, undefined, false);
      const { tool, runs } = counter();
      const events: DispatchEvent[] = [];
      const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, maxPollMs: 5, claimRetryMs: 30, onEvent: (e) => events.push(e), logger: recordingLogger().logger });
      const call = { name: "post_note", input: { text: "once" } };
      await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "ledger_unavailable" });
      expect(runs).toEqual([]);
      const key = dispatcher.keyFor(call, turn0);
      expect(await base.lookup(key)).toMatchObject({ state: "in_flight" });
      down = false;
      await expect.poll(() => events.find((e) => e.type === "lost_claim_settled"), { timeout: 5_000 }).toMatchObject({ released: true });
      expect(events.filter((e) => e.type === "claim_retired")).toEqual([]);
      expect(await base.lookup(key)).toMatchObject({ state: "released" });
      const replay = await dispatcher.turn(turn0).dispatch(call);
      expect(replay.replayed).toBe(false);
      expect(runs).toEqual(["once"]);
    });

    it("LEDGER-27 a late copy of a claim released by its claim id is refused: the row stays released and a replay runs the tool once", async () => {
      let down = true;
      const base = new MemoryLedger();
      const { ledger, claims } = lossyLedger(base, () => down, undefined, false);
      const { tool, runs } = counter();
      const events: DispatchEvent[] = [];
      const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, maxPollMs: 5, claimRetryMs: 30, onEvent: (e) => events.push(e), logger: recordingLogger().logger });
      const call = { name: "post_note", input: { text: "once" } };
      await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "ledger_unavailable" });
      down = false;
      await expect.poll(() => events.find((e) => e.type === "lost_claim_settled"), { timeout: 5_000 }).toMatchObject({ released: true });
      // A copy of the first claim that the store applies only now (it was paused, or ran it after the client left).
      const key = dispatcher.keyFor(call, turn0);
      await expect(base.claim(claims[0]!)).rejects.toMatchObject({ code: "stale_claim" });
      expect(await base.lookup(key)).toMatchObject({ state: "released", fence: 1 });
      const replay = await dispatcher.turn(turn0).dispatch(call);
      expect(replay.replayed).toBe(false);
      expect(runs).toEqual(["once"]);
    });

    it("LEDGER-27 a release by claim id whose reply was lost: the next attempt's claim is refused as already released, which settles it without a warning", async () => {
      let down = true;
      let releaseLost = true;
      const base = new MemoryLedger();
      const { ledger } = lossyLedger(base, () => down, undefined, false);
      // The store applies the first release, but its reply is lost.
      ledger.release = async (key: string, fence: number) => {
        await base.release(key, fence);
        if (releaseLost) {
          releaseLost = false;
          throw new LedgerUnavailableError("release timed out (the store may have applied it)");
        }
      };
      const { tool } = counter();
      const events: DispatchEvent[] = [];
      const recorded = recordingLogger();
      const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, maxPollMs: 5, claimRetryMs: 30, onEvent: (e) => events.push(e), logger: recorded.logger });
      const call = { name: "post_note", input: { text: "once" } };
      await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "ledger_unavailable" });
      down = false;
      await expect.poll(() => events.find((e) => e.type === "lost_claim_settled"), { timeout: 5_000 }).toMatchObject({ released: false });
      expect(await base.lookup(dispatcher.keyFor(call, turn0))).toMatchObject({ state: "released", fence: 1 });
      expect(recorded.warnings.filter((w) => w.message.includes("could not be released"))).toEqual([]);
    });
  });

  it("LEDGER-26 a malformed claim id is refused before anything is written", async () => {
    const base = new MemoryLedger();
    const request = { key: "m".repeat(64), toolName: "t", effect: "keyed_write" as const, owner: "o", leaseMs: 1000, request: "{}" };
    for (const claimId of ["short", "has space in it 1234", "x".repeat(65), 42]) {
      await expect(base.claim({ ...request, claimId: claimId as string })).rejects.toMatchObject({ code: "invalid_ledger_input" });
    }
    expect(await base.lookup(request.key)).toBeUndefined();
  });
});
