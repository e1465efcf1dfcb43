/**
 * The oracle on an effect's row left in flight, its lease run out, under an owner that is still
 * alive (crash-harness.ts, judgeInFlight). Two runner processes that leave the same row behind:
 * one whose ledger is out of reach when it writes its complete (DISPATCH-10: the dispatch raises
 * ledger_unavailable, the turn fails, the user is told the payment may have happened, and the row
 * waits for a reconciler), and one that drops its complete without a word (FAULT_PLANT
 * drop-complete: the user told "done"). The first is the spec's; the second must fail the oracle.
 */
import { describe, expect, it, vi } from "vitest";
import { inWorld as inWorldOf, type World } from "./crash-harness.js";

vi.setConfig({ testTimeout: 60_000 });

function inWorld(test: (world: World) => Promise<void>): Promise<void> {
  // A PostgreSQL ledger: one runner's own proxy to it can be cut while everyone else reaches it.
  // Closed whatever the test does, and by 55 s at the latest (the file's bound is 60 s).
  return inWorldOf({ ledger: "postgres", store: "postgres" }, 55_000, test);
}

describe.concurrent("a live owner's expired in-flight row", () => {
  it("DISPATCH-10 the ledger out of reach for the complete and the turn's retries: reported, told happened (the run returned its result: effectHappened, ERR-4), accepted", () =>
    inWorld(async (world) => {
      const conversation = "live-owner-unreachable";
      const a = await world.partitionable({ crashAt: "after_accept" });
      await a.ready;
      a.send(conversation, "m1", "pay acme");
      await a.reached("after_accept"); // the payments API accepted it; the row is in flight
      // Its ledger connections cut and refused until the world closes: the complete, its re-sends
      // (recordRetryMs) and the next attempts' claims all fail; its conversation store is reachable.
      void a.own.ledger!.cut(60_000);
      a.resume();
      const answer = await a.outcome();
      const [payment] = world.payments.effects().filter((e) => e.account === world.account);
      const key = payment!.idempotencyKey!;
      expect(answer).toMatchObject({ type: "refused", code: "turn_failed", record: { effects: [{ key, effect: "happened" }] } });
      // The complete and each of its re-sends (DISPATCH-10), all raised to the runner as ledger_unavailable.
      expect(a.recordFailures.length).toBeGreaterThan(0);
      for (const f of a.recordFailures) expect(f).toMatchObject({ key, fence: 1, write: "complete", answered: "raised", raised: { code: "ledger_unavailable" } });
      const audit = await world.audit(conversation);
      const row = audit.rows.find((r) => r.key === key);
      expect(row).toMatchObject({ state: "in_flight", fence: 1, owner: a.owner });
      expect(row!.state === "in_flight" && row!.leaseExpiresAt <= audit.at).toBe(true);
      expect(await a.alive()).toBe(true);
      expect(audit.violations).toEqual([]);
    }));

  it("FAULT_PLANT=drop-complete: the complete lost without a word, the user told done: rejected", () =>
    inWorld(async (world) => {
      const conversation = "live-owner-dropped";
      const a = world.runner({ plants: ["drop-complete"] });
      await a.ready;
      a.send(conversation, "m1", "pay acme");
      const answer = await a.outcome();
      expect(answer.type).toBe("answered");
      const [payment] = world.payments.effects().filter((e) => e.account === world.account);
      const key = payment!.idempotencyKey!;
      const audit = await world.audit(conversation); // waits the lease out (leaseWaitMs)
      expect(audit.rows.find((r) => r.key === key)).toMatchObject({ state: "in_flight", owner: a.owner });
      expect(audit.violations).toEqual([
        `ledger: row ${key} is in_flight although its effect ${payment!.resourceId} happened: its live owner ${a.owner} reported no failed record write of fence 1 raised to its runner (DISPATCH-10): a record never written, or its failure swallowed`,
      ]);
    }));
});
