import { afterAll, describe, expect, it } from "vitest";
import { CONV, HOUR, neverFailedWorld } from "../../conversation-sqlite/test/never-failed.js";
import { PostgresConversationStore } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, uniqueSchema } from "./helpers.js";

const admin = adminPool(2);
const schema = uniqueSchema("never_failed");
afterAll(async () => {
  await dropSchema(admin, schema);
  await admin.end();
});

describe("TURN-12 a message that never failed, its holder paid and died, resumed after the retention over PostgreSQL (TURN-11 bound_at)", () => {
  it("TURN-12 m1 re-sent 25 h later to a restarted process (a new store object): past_resend_window from bound_at, no second payment", async () => {
    const w = await neverFailedWorld();
    const first = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await first.migrate();
    await w.paidThenDied(first);
    const boundAt = (await first.message(CONV, "m1"))?.boundAt;
    await first.close();
    await w.sweptAfter25Hours();
    // The server's clock cannot be set: the 25 h pass by moving the row's times back.
    await admin.query(`UPDATE "${schema}".dispatch_once_messages SET bound_at = bound_at - $1::bigint`, [25 * HOUR]);
    await admin.query(`UPDATE "${schema}".dispatch_once_conversations SET lease_expires_at = lease_expires_at - $1::bigint`, [25 * HOUR]);
    const second = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await w.resentPastWindow(second);
    // The first binding's time, read back by the new store object (moved back 25 h by the test).
    expect(typeof boundAt).toBe("number");
    expect((await second.message(CONV, "m1"))?.boundAt).toBe(boundAt! - 25 * HOUR);
    await second.close();
    await w.close();
  });
});
