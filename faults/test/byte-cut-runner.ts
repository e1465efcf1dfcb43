import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolError, ToolRegistry, defineTool, type CallDispatcher, type ConversationStore } from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, type MockPaymentsServer } from "@dispatch-once/mock-payments";
// The runner's error, re-exported by every stream side; isInstance reads its brand, so it names either side's.
import { TurnFailedError } from "@dispatch-once/anthropic";
import { expect } from "vitest";
import { z } from "zod";
import type { ByteProxy } from "./byte-proxy.js";
import { PAY_ZOE, SEED, cutCases, cutPoints, expectRequestsByFate, expectTruthfulRecords, responseFate, runAll, statedEffects, type ByteCase } from "./byte-cut-cases.js";

/**
 * One case of the byte-level harness for a conversation runner (either stream side): a fresh
 * conversation (its own ledger, store and payments account) whose requests the proxy delivers by
 * the case's plan, sent, and re-sent with the same message id after a failed turn (as a user
 * would) until it commits; then the effect log, the committed conversation and the records are
 * checked against what the proxy delivered.
 */

/** The keyed payment tool over mock payments, its account named by the case. */
export function paymentTool(payments: MockPaymentsServer, account: string): ToolRegistry {
  const client = createPaymentsClient({ baseURL: payments.url, token: account });
  return new ToolRegistry([
    defineTool({
      name: "send_payment",
      description: "Send a payment to a payee",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string().length(3), reference: z.string(), memo: z.string().optional() }),
      identity: ["payee", "amount", "currency", "reference"],
      async run(args, ctx) {
        try {
          const payment = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal });
          return { paymentId: payment.body.id, status: "accepted" };
        } catch (error) {
          if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
          throw error;
        }
      },
    }),
  ]);
}

/** What a stream side supplies: its runner, its finishing event and how its ids and commits read. */
export interface RunnerSide {
  /** The SSE event type that finishes a response (STREAM-7). */
  finishType: string;
  prompt: string;
  /** The provider ids (call ids, item ids) a response body names: none of a cut response may be committed. */
  idsIn(body: Buffer): string[];
  runner(options: { caseId: string; tools: ToolRegistry; dispatcher: CallDispatcher; store: ConversationStore; onEvent: (event: unknown) => void }): {
    send(conversationId: string, message: { id: string; content: string }): Promise<unknown>;
  };
  /** The committed calls and their results, in the conversation's order. */
  committed(log: unknown[]): { calls: { id: string; input: unknown }[]; results: { callId: string; output: string }[] };
}

export function runnerCases(side: RunnerSide, env: { proxy: () => ByteProxy; payments: () => MockPaymentsServer }) {
  async function runCase({ id: caseId, plan }: ByteCase): Promise<string | undefined> {
    const { proxy, payments } = { proxy: env.proxy(), payments: env.payments() };
    const account = `acct_${caseId}`;
    proxy.plan(caseId, ({ number }, body) => plan(number, body));
    const tools = paymentTool(payments, account);
    const store = new MemoryConversationStore();
    const events: unknown[] = [];
    const runner = side.runner({ caseId, tools, dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger(), waitMs: 10_000, pollMs: 2 }), store, onEvent: (e) => events.push(e) });
    const failedRecords: unknown[] = [];
    // The keys that had paid when each send failed: its record must account for them (RECORD-7).
    const paidAtFailure: string[][] = [];
    const paidKeys = () => payments.effects().flatMap((e) => (e.account === account && e.kind === "payment_created" ? [e.idempotencyKey!] : []));
    let committed = false;
    for (let send = 1; send <= 3 && !committed; send++) {
      try {
        await runner.send(caseId, { id: "m1", content: side.prompt });
        committed = true;
      } catch (error) {
        if (!TurnFailedError.isInstance(error)) return `send ${send} threw ${String(error)}`;
        failedRecords.push(error.record);
        paidAtFailure.push(paidKeys());
      }
    }
    const requests = proxy.requests.filter((r) => r.caseId === caseId);
    const where = () => `requests ${requests.map((r) => `#${r.number} ${r.sent}/${r.body.length} ${r.end} (${responseFate(r, side.finishType)})`).join(", ")}`;
    try {
      expect(committed, "the turn never committed in 3 sends").toBe(true);
      // Exactly one payment, with the arguments as the model sent them (the UTF-8 intact).
      const made = payments.effects().filter((e) => e.account === account && e.kind === "payment_created");
      expect(made.map((e) => e.payload)).toEqual([PAY_ZOE]);
      const paidKey = made[0]!.idempotencyKey!;
      // The conversation holds one call, with its one result, of a response the client got whole (STREAM-11).
      const log = await store.log(caseId);
      const { calls, results } = side.committed(log);
      expect(calls.map((c) => c.input)).toEqual([PAY_ZOE]);
      expect(results.map((r) => r.callId)).toEqual([calls[0]!.id]);
      expect(JSON.parse(results[0]!.output)).toEqual({ paymentId: made[0]!.resourceId, status: "accepted" });
      const committing = requests.find((r) => side.idsIn(r.body).includes(calls[0]!.id));
      expect(committing, `the committed call ${calls[0]!.id} is of no response this case received`).toBeDefined();
      expect(responseFate(committing!, side.finishType), `the committed call ${calls[0]!.id} is of request #${committing!.number}, cut before its ${side.finishType}`).not.toBe("cut");
      const text = JSON.stringify(log);
      for (const cut of requests.filter((r) => responseFate(r, side.finishType) === "cut")) {
        for (const id of side.idsIn(cut.body)) expect(text, `the conversation names ${id} of cut request #${cut.number} (STREAM-11)`).not.toContain(id);
      }
      // What the records and events say of the effect is true (RECORD-2, RECORD-8), and a failed
      // turn's record tells of every payment made by then (RECORD-7).
      expectTruthfulRecords([...failedRecords, ...(await store.records(caseId))], [paidKey], "record");
      failedRecords.forEach((record, i) => {
        for (const key of paidAtFailure[i]!) {
          const told = statedEffects(record).filter((s) => s.key === key).map((s) => s.effect);
          expect(told, `the record of failed send ${i + 1} does not tell of the payment made under ${key} (RECORD-7)`).toContain(told.includes("happened") ? "happened" : "may_have_happened");
        }
      });
      expectTruthfulRecords(events, [paidKey], "runner event");
      return undefined;
    } catch (error) {
      return `${(error as Error).message.split("\n")[0]}; ${where()}`;
    }
  }

  /**
   * The paying response of a whole pass-through, to place the cut points on. Each its own case (and
   * payments account): a second reference in the same account would count the first's payment.
   */
  let references = 0;
  async function referenceBody(): Promise<Buffer> {
    const id = `reference-${references++}`;
    expect(await runCase({ id, label: "whole", plan: () => undefined })).toBeUndefined();
    return env.proxy().requests.find((r) => r.caseId === id && r.number === 1)!.body;
  }

  /**
   * RECORD-7: the same cut on every attempt of the first send (around `callDone`, the event that
   * completes the call, and the finish), then the user's re-send. Where the cut fell before the
   * finish in all 3 attempts, the first send failed and the re-send committed (5 requests).
   */
  async function cutEveryAttemptThenResend(callDone: string): Promise<void> {
    const points = cutPoints(
      await referenceBody(),
      [
        { type: callDone, before: 0, head: 0, tail: 6 },
        { type: side.finishType, before: 0, head: 4, tail: 6 },
      ],
      { sample: 4, seed: SEED + 1, insideCharacters: false },
    );
    const cases = cutCases("again", points, { requests: [1, 2, 3], rstEvery: 2 });
    await runAll(cases, runCase);
    expect(expectRequestsByFate(cases, env.proxy().requests, { finishType: side.finishType })).toBeGreaterThan(points.length / 2);
  }

  return { runCase, referenceBody, cutEveryAttemptThenResend };
}
