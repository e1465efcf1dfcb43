import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  LedgerUnavailableError,
  MemoryLedger,
  defineTool,
  newClaimId,
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
function lossyLedger(base: MemoryLedger, lose: (n: number) => boolean, onLost: () => void = () => {}) {
  const claims: ClaimRequest[] = [];
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
    capabilities: { ...base.capabilities, durability: "durable" as const },
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

  it("LEDGER-26 when the retries run out the dispatch fails ledger_unavailable and the written claim is released by its claim id, so a replay runs the tool once", async () => {
    let down = true;
    const base = new MemoryLedger();
    const { ledger } = lossyLedger(base, () => down);
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
    expect(await base.lookup(key)).toMatchObject({ state: "released" });
    const replay = await dispatcher.turn(turn0).dispatch(call);
    expect(replay.replayed).toBe(false);
    expect(runs).toEqual(["once"]);
  });

  it("LEDGER-27 (proposed) a late copy of a claim released by its claim id is refused: the row stays released and a replay runs the tool once", async () => {
    let down = true;
    const base = new MemoryLedger();
    const { ledger, claims } = lossyLedger(base, () => down);
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

  it("LEDGER-27 (proposed) a release by claim id whose reply was lost: the next attempt's claim is refused as already released, which settles it without a warning", async () => {
    let down = true;
    let releaseLost = true;
    const base = new MemoryLedger();
    const { ledger } = lossyLedger(base, () => down);
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

  it("LEDGER-26 a malformed claim id is refused before anything is written", async () => {
    const base = new MemoryLedger();
    const request = { key: "m".repeat(64), toolName: "t", effect: "keyed_write" as const, owner: "o", leaseMs: 1000, request: "{}" };
    for (const claimId of ["short", "has space in it 1234", "x".repeat(65), 42]) {
      await expect(base.claim({ ...request, claimId: claimId as string })).rejects.toMatchObject({ code: "invalid_ledger_input" });
    }
    expect(await base.lookup(request.key)).toBeUndefined();
  });
});
