import { afterAll, describe, expect, it } from "vitest";
import { CONV, HOUR, inheritedIndexWorld } from "../../conversation-sqlite/test/inherited-index.js";
import { PostgresConversationStore } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, uniqueSchema } from "./helpers.js";

const admin = adminPool(2);
const schema = uniqueSchema("inherited_index");
afterAll(async () => {
  await dropSchema(admin, schema);
  await admin.end();
});

/** The server's clock cannot be set: time passes for the store by moving its rows' times back. */
async function storeTimesBack(ms: number): Promise<void> {
  await admin.query(
    `UPDATE "${schema}".dispatch_once_messages SET bound_at = bound_at - $1::bigint, failed_at = failed_at - $1::bigint, first_failed_at = first_failed_at - $1::bigint`,
    [ms],
  );
  await admin.query(`UPDATE "${schema}".dispatch_once_conversations SET lease_expires_at = lease_expires_at - $1::bigint`, [ms]);
}

describe("TURN-12 a message bound at a failed turn's index counts its re-send window from that message's binding over PostgreSQL (TURN-11 bound_at)", () => {
  it("TURN-12 m2, bound 23 h after m1 at m1's index, re-sent 1.5 h after its binding to a restarted process, after the ledger swept m1's row: past_resend_window, no second payment", async () => {
    const w = await inheritedIndexWorld();
    const first = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await first.migrate();
    await w.m1PaidAndFailed(first);
    w.advanceLedger(23 * HOUR);
    await storeTimesBack(23 * HOUR);
    const m1BoundAt = (await first.message(CONV, "m1"))?.boundAt;
    await w.m2ReplayedAndFailed(first);
    await first.close();
    w.advanceLedger(1.5 * HOUR);
    await storeTimesBack(1.5 * HOUR);
    await w.swept();
    const second = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await w.m2ResentPastWindow(second);
    // m2's calls met m1's rows: it carries m1's binding's time (moved back 1.5 h by the test since), not its own.
    expect(typeof m1BoundAt).toBe("number");
    expect((await second.message(CONV, "m2"))?.boundAt).toBe(m1BoundAt! - 1.5 * HOUR);
    await second.close();
    await w.close();
  });
});
