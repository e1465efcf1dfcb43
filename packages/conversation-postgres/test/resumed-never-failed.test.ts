import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/anthropic";
import { Dispatcher, MemoryLedger, defineTool, type ConversationStore } from "@dispatch-once/core";
import { scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { PostgresConversationStore } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, uniqueSchema } from "./helpers.js";

const HOUR = 60 * 60 * 1000;
const CONV = "conv-dead-holder";

/**
 * TURN-12 with TURN-11's boundAt over PostgreSQL: m1's holder pays (its ledger row completes) and
 * dies before the commit, so m1 stays in progress and no failure dates it. 25 h later the ledger's
 * 24 h retention swept the row and a restarted process (a new store object, new connections) gets
 * m1 re-sent: it resumes m1's turn, and only bound_at, written by the binding's statement, tells it
 * the turn is past its re-send window. The server's clock cannot be set: the 25 h pass by moving
 * the row's times back by SQL, and the ledger's test clock forward. The payment is the test's counter.
 */
const admin = adminPool(2);
const schema = uniqueSchema("never_failed");
let provider: Awaited<ReturnType<typeof startMockProvider>>;
beforeAll(async () => {
  provider = await startMockProvider({ script: scriptFromPlans({ "pay acme": turn(toolUse("pay", { to: "acme" })) }) });
});
afterAll(async () => {
  await provider.close();
  await dropSchema(admin, schema);
  await admin.end();
});

function runnerOver(ledger: MemoryLedger, store: ConversationStore, paid: unknown[]) {
  const pay = defineTool({ name: "pay", effect: "keyed_write", input: z.object({ to: z.string() }), identity: ["to"], run: async (args) => ({ n: paid.push(args) }) });
  return new ConversationRunner({
    client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
    dispatcher: new Dispatcher({ tools: [pay], ledger }),
    store,
    model: "claude-test",
    tools: [{ name: "pay", input_schema: { type: "object" } }],
    retry: { backoffMs: () => 5 },
    turnLeaseMs: 1_000,
  });
}

/** The store as a holder that dies at its commit: the payment was made, nothing it sends from then returns. */
function diesAtCommit(store: ConversationStore): ConversationStore {
  const never = () => new Promise<never>(() => undefined);
  return Object.assign(Object.create(store) as ConversationStore, { commitTurn: never, renewLease: never, releaseLease: never });
}

describe("TURN-12 a message that never failed, its holder paid and died, resumed after the retention over PostgreSQL (TURN-11 bound_at)", () => {
  it("TURN-12 m1 re-sent 25 h later to a restarted process (a new store object): past_resend_window from bound_at, no second payment", async () => {
    let now = 1_000_000;
    const ledger = new MemoryLedger({ now: () => now });
    const paid: unknown[] = [];
    const first = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await first.migrate();
    void runnerOver(ledger, diesAtCommit(first), paid).send(CONV, { id: "m1", content: "pay acme" });
    const completed = async () => (await ledger.listRows({ conversationId: CONV, state: "completed" })).rows.length;
    while (paid.length === 0 || (await completed()) === 0) await new Promise((r) => setTimeout(r, 2));
    expect((await first.message(CONV, "m1"))?.state).toBe("in_progress");
    const boundAt = (await first.message(CONV, "m1"))?.boundAt;
    await first.close();
    now += 25 * HOUR;
    expect(await ledger.sweep()).toBeGreaterThan(0);
    await admin.query(`UPDATE "${schema}".dispatch_once_messages SET bound_at = bound_at - $1::bigint`, [25 * HOUR]);
    await admin.query(`UPDATE "${schema}".dispatch_once_conversations SET lease_expires_at = lease_expires_at - $1::bigint`, [25 * HOUR]);

    const second = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    const resent = await runnerOver(ledger, second, paid).send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(paid).toHaveLength(1);
    expect(resent).toBeInstanceOf(TurnFailedError);
    expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
    expect((await second.message(CONV, "m1"))?.state).toBe("failed");
    // The first binding's time, read back by the new store object (moved back 25 h by the test).
    expect(typeof boundAt).toBe("number");
    expect((await second.message(CONV, "m1"))?.boundAt).toBe(boundAt! - 25 * HOUR);
    await second.close();
  });
});
