import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/anthropic";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, startMockPayments } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { Dispatcher, MemoryConversationStore, ToolError, defineTool, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { PostgresLedger } from "@dispatch-once/ledger-postgres";
import pg from "pg";
import { PostgresConversationStore } from "../src/index.js";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

/**
 * TURN-14 through the real SDK, the mock provider and the mock payments API: a process that
 * restarts over a durable ledger and a durable conversation store answers new messages at new
 * turn indexes (a new payment) and re-sent ones from the store (no payment). The same scenario
 * over a volatile store restarts at turn 0 and answers a new request with the old payment.
 */
const PAY = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };

let provider: Awaited<ReturnType<typeof startMockProvider>>;
let payments: Awaited<ReturnType<typeof startMockPayments>>;
beforeAll(async () => {
  provider = await startMockProvider({ script: scriptFromPlans({ "pay acme": turn(toolUse("send_payment", PAY, { reword: ["memo"] })) }) });
  payments = await startMockPayments({ latencyMs: 5 });
});
afterAll(async () => {
  await provider.close();
  await payments.close();
});

function sendPayment() {
  const client = createPaymentsClient({ baseURL: payments.url, token: "acct_restart" });
  return defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
    identity: ["payee", "amount", "currency", "reference"],
    async run(args, ctx) {
      try {
        const paid = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey });
        return { paymentId: paid.body.id };
      } catch (error) {
        if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], cause: error });
        throw error;
      }
    },
  });
}

/** One "process": its own SDK client, dispatcher, ledger and store instances. */
function processOver(ledger: Ledger, store: ConversationStore, extra: { allowVolatileConversationStore?: boolean } = {}) {
  const tool = sendPayment();
  return new ConversationRunner({
    client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
    dispatcher: new Dispatcher({ tools: [tool], ledger }),
    store,
    model: "claude-test",
    tools: [{ name: "send_payment", input_schema: { type: "object" } }],
    retry: { backoffMs: () => 5 },
    ...extra,
  });
}

const paymentsOf = (account: string) => payments.payments(account).length;

describe("a process restart over durable stores (TURN-14)", () => {
  const schema = `restart_${process.pid}_${Date.now() % 1_000_000}`;
  afterAll(async () => {
    const admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  /** The same tables every time: the durable state a restarted process finds. */
  async function open() {
    const ledger = new PostgresLedger({ connectionString: DATABASE_URL, schema });
    await ledger.migrate();
    const store = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await store.migrate();
    return { ledger, store, close: async () => { await store.close(); await ledger.close(); } };
  }

  it("TURN-14 after a restart a new request pays again at the next turn index, and a re-sent one is answered from the store", async () => {
    const conversation = `restart-${Date.now()}`;
    const before = paymentsOf("acct_restart");
    const first = await open();
    const answered = await processOver(first.ledger, first.store).send(conversation, { id: "m1", content: "pay acme" });
    expect(answered.turns.map((t) => t.turnIndex)).toEqual([0, 1]);
    await first.close();

    const second = await open(); // the process restarts: new instances, new connections, nothing in memory
    const runner = processOver(second.ledger, second.store);
    const resent = await runner.send(conversation, { id: "m1", content: "pay acme" });
    expect(resent).toMatchObject({ appended: false, fromStore: true });
    expect(resent.turns[0]!.calls[0]!.result).toEqual(answered.turns[0]!.calls[0]!.result);
    const again = await runner.send(conversation, { id: "m2", content: "pay acme" });
    expect(again.turns[0]).toMatchObject({ turnIndex: 2 });
    expect(again.turns[0]!.calls[0]).toMatchObject({ replayed: false });
    expect(again.turns[0]!.calls[0]!.result).not.toEqual(answered.turns[0]!.calls[0]!.result);
    expect(paymentsOf("acct_restart") - before).toBe(2);
    await second.close();
  });

  it("TURN-14 the same restart over a volatile store is the bug: turn 0 again, the new request answered with the old payment", async () => {
    const conversation = `volatile-${Date.now()}`;
    const before = paymentsOf("acct_restart");
    const first = await open();
    const answered = await processOver(first.ledger, new MemoryConversationStore(), { allowVolatileConversationStore: true }).send(conversation, {
      id: "m1",
      content: "pay acme",
    });
    await first.close();
    const second = await open();
    const again = await processOver(second.ledger, new MemoryConversationStore(), { allowVolatileConversationStore: true }).send(conversation, {
      id: "m2",
      content: "pay acme",
    });
    // What TURN-14's refusal prevents: a new request, told it was paid, with no new payment.
    expect(again.turns[0]).toMatchObject({ turnIndex: 0 });
    expect(again.turns[0]!.calls[0]).toMatchObject({ replayed: true });
    expect(again.turns[0]!.calls[0]!.result).toEqual(answered.turns[0]!.calls[0]!.result);
    expect(paymentsOf("acct_restart") - before).toBe(1);
    // And without the explicit allowance the runner refuses the combination.
    expect(() => processOver(second.ledger, new MemoryConversationStore())).toThrow(expect.objectContaining({ code: "durability_mismatch" }));
    await second.close();
  });
});

void TurnFailedError;
