// Issue 15's done-when scenario, on the durable SQLite ledger and the mock payments API:
// an unkeyed call ends unknown after a lost response; the listing shows it; reconciliation
// settles it from the downstream's record of the idempotency key; the next replay answers
// from the ledger; the audit trail shows every step.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, OutcomeUnknownError, ToolError, defineTool, type DispatchEvent } from "@dispatch-once/core";
import {
  DISPOSITION_BY_OUTCOME,
  PaymentsError,
  createPaymentsClient,
  startMockPayments,
  type MockPaymentsServer,
} from "@dispatch-once/mock-payments";
import { SqliteLedger } from "../src/index.js";

let payments: MockPaymentsServer;
let dir: string;

beforeAll(async () => {
  payments = await startMockPayments({ latencyMs: 0 });
  dir = mkdtempSync(join(tmpdir(), "dispatch-once-recon-"));
});

afterAll(async () => {
  await payments.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("issue 15 scenario: an unknown outcome settled from the downstream (RESOLVE-6, LIST-1, RESOLVE-7)", () => {
  it("RESOLVE-6 a lost response leaves the unkeyed call unknown, listRows shows it, reconcile completes it, the replay answers from the ledger", async () => {
    const client = createPaymentsClient({ baseURL: payments.url, token: "acct_recon" });
    let loseNextResponse = true;
    let lookupDown = true;
    // An unkeyed_write: the team does not rely on the API's deduplication for this call (EFFECT-4),
    // but the API records the key it was sent, which the probe asks about.
    const sendPayment = defineTool({
      name: "send_payment",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number().int(), currency: z.string(), payee: z.string(), reference: z.string() }),
      run: async (args, ctx) => {
        try {
          const fault = loseNextResponse ? ("drop_after_accept" as const) : undefined;
          loseNextResponse = false;
          const paid = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey, ...(fault ? { fault } : {}) });
          return paid.body;
        } catch (error) {
          if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], cause: error });
          throw error;
        }
      },
      reconcile: async (_args, ctx) => {
        // While the lookup endpoint is down the probe cannot tell: the row stays unknown (RECON-5).
        const found = await client.lookupIdempotencyKey(ctx.idempotencyKey, lookupDown ? { fault: "fail_before_accept" } : {});
        const record = found.body;
        if (record.state === "completed" && record.response.status < 300) return { outcome: "performed", result: record.response.body };
        if (record.state === "absent") return { outcome: "not_performed" };
        return { outcome: "unknown", reason: `the key is ${record.state}` };
      },
    });
    const ledger = new SqliteLedger({ path: join(dir, "ledger.db") });
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [sendPayment], ledger, owner: "worker-1", onEvent: (e) => events.push(e) });
    const turn = { conversationId: "conv-recon-1", turnIndex: 3 };
    const call = { name: "send_payment", input: { amount: 4200, currency: "EUR", payee: "acct_991", reference: "inv_77" } };
    const key = dispatcher.keyFor(call, turn);

    // 1. The response is lost after the payment was accepted; the probe cannot reach the lookup.
    await expect(dispatcher.turn(turn).dispatch(call)).rejects.toBeInstanceOf(OutcomeUnknownError);
    expect(events.find((e) => e.type === "reconciled")).toMatchObject({ cause: "tool_error", verdict: "error", settled: "unknown" });

    // 2. The operator's listing shows it, by state and by conversation.
    const unknown = await ledger.listRows({ state: "unknown" });
    expect(unknown.rows.map((r) => r.key)).toEqual([key]);
    expect(unknown.rows[0]).toMatchObject({ state: "unknown", fence: 1, conversationId: "conv-recon-1", turnIndex: 3, toolName: "send_payment" });
    expect((await ledger.listRows({ conversationId: "conv-recon-1" })).rows.map((r) => r.key)).toEqual([key]);

    // A replay before settlement still answers outcome_unknown and does not run the tool again.
    await expect(dispatcher.turn(turn).dispatch(call)).rejects.toBeInstanceOf(OutcomeUnknownError);

    // 3. The lookup is back: reconciliation settles the row from the downstream's record.
    lookupDown = false;
    const report = await dispatcher.reconcile(key);
    expect(report).toMatchObject({ verdict: "performed", settled: "completed", row: { state: "completed", fence: 2 } });
    expect((await ledger.listRows({ state: "unknown" })).rows).toEqual([]);

    // 4. The next replay answers from the ledger with the payment the downstream made.
    const replay = await dispatcher.turn(turn).dispatch(call);
    expect(replay.replayed).toBe(true);
    expect(replay.result).toMatchObject({ amount: 4200, currency: "EUR", payee: "acct_991" });
    const listed = await client.listPayments();
    expect(listed.body.data).toHaveLength(1);
    expect(replay.result).toMatchObject({ id: listed.body.data[0]!.id });

    // 5. The audit trail shows every step: the run turned unknown, then the reconciliation.
    const trail = await ledger.auditTrail(key);
    expect(trail.map((e) => [e.action, e.actor, e.fromState, e.toState, e.fence, e.outcome])).toEqual([
      ["marked_unknown", "worker-1", "in_flight", "unknown", 1, undefined],
      ["reconciled", "dispatch-once:reconcile", "unknown", "completed", 2, "completed"],
    ]);
    expect(trail[0]!.reason).toContain("reconcile: error");
    await ledger.close();
  });
});
