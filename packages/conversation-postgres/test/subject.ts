// The PostgreSQL conversation store as a conformance subject. Every create() gets its own
// schema; the raw hooks read and write the tables over the tests' own pool with plain SQL.
import type { ConversationStore, JsonValue } from "@dispatch-once/core";
import { skewStoreProcessClock, storeAddressOf, urlVia, type ConversationStoreFixture, type ConversationStoreSubject, type RawMessage, type RawTurn } from "@dispatch-once/conformance";
import { NOW_MS, PostgresConversationStore, tablesFor } from "../src/index.js";
import { DATABASE_URL, adminPool, closedPort, dropSchema, uniqueSchema } from "./helpers.js";

function parse(text: unknown): JsonValue {
  return JSON.parse(String(text)) as JsonValue;
}

/** The timeoutMs of the instance behind the kit's SilenceProxy (TURN-21's silent-store checks). */
export const SILENT_BOUND_MS = 300;

/**
 * `StoreClass` is the class to certify (a blind round's mutant of it, test/round-k-blind.test.ts);
 * `viaTimeoutMs` the timeoutMs of raw.openVia's instance (test/silent-store.test.ts plants a day).
 */
export function createPostgresConversationSubject(
  name = "conversation-postgres",
  StoreClass: typeof PostgresConversationStore = PostgresConversationStore,
  tag = "kit",
  viaTimeoutMs = SILENT_BOUND_MS,
): ConversationStoreSubject {
  const admin = adminPool(2);
  return {
    name,
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, listFailedTurns: true, listStalledMessages: true, recordsWithCommit: true, legacyFailedRows: true, leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true, clockSkew: true, silentStore: true },
    // TURN-21: timeoutMs bounds every method (a connection, connecting, every statement, the COMMIT);
    // raw.openVia's instance is configured with it, small so that the silent windows stay short.
    limits: { operationBoundMs: SILENT_BOUND_MS },
    async create(): Promise<ConversationStoreFixture> {
      const schema = uniqueSchema(tag);
      const t = tablesFor(schema);
      const q = (table: string) => `"${schema}"."${table}"`;
      const stores: PostgresConversationStore[] = [];
      const open = (): PostgresConversationStore => {
        // Small pools: a reopen() is another process's view with its own connections.
        const store = new StoreClass({ connectionString: DATABASE_URL, schema, poolConfig: { max: 4 } });
        stores.push(store);
        return store;
      };
      const store = open();
      await store.migrate();
      return {
        store,
        reopen: async (): Promise<ConversationStore> => open(),
        raw: {
          async lease(conversationId) {
            const { rows } = await admin.query(`SELECT fence, lease_owner, lease_expires_at FROM ${q(t.conversations)} WHERE conversation_id = $1`, [conversationId]);
            const row = rows[0] as { fence: string; lease_owner: string | null; lease_expires_at: string | null } | undefined;
            if (row === undefined) return undefined;
            return row.lease_owner === null ? { fence: Number(row.fence) } : { fence: Number(row.fence), owner: row.lease_owner, expiresAt: Number(row.lease_expires_at) };
          },
          async messages(conversationId) {
            const { rows } = await admin.query(
              `SELECT message_id, seq, state, content, turn_index, failure FROM ${q(t.messages)} WHERE conversation_id = $1 ORDER BY seq`,
              [conversationId],
            );
            return (rows as { message_id: string; seq: number; state: RawMessage["state"]; content: string; turn_index: number | null; failure: string | null }[]).map((r) => {
              const m: RawMessage = { id: r.message_id, content: parse(r.content), seq: r.seq, state: r.state };
              if (r.turn_index !== null) m.turnIndex = r.turn_index;
              if (r.state === "failed") m.failure = parse(r.failure);
              return m;
            });
          },
          async turns(conversationId) {
            const { rows } = await admin.query(
              `SELECT turn_index, message_id, assistant, tool_results, stop_reason FROM ${q(t.turns)} WHERE conversation_id = $1 ORDER BY turn_index`,
              [conversationId],
            );
            return (rows as { turn_index: number; message_id: string; assistant: string; tool_results: string | null; stop_reason: string | null }[]).map((r) => {
              const turn: RawTurn = { turnIndex: r.turn_index, messageId: r.message_id, assistant: parse(r.assistant), stopReason: r.stop_reason };
              if (r.tool_results !== null) turn.toolResults = parse(r.tool_results);
              return turn;
            });
          },
          async records(conversationId) {
            const { rows } = await admin.query(`SELECT record FROM ${q(t.records)} WHERE conversation_id = $1 ORDER BY seq`, [conversationId]);
            return rows.map((r: { record: string }) => parse(r.record));
          },
          // One millisecond before the server's clock, the clock the store measures leases on.
          async expireLease(conversationId) {
            await admin.query(`UPDATE ${q(t.conversations)} SET lease_expires_at = ${NOW_MS} - 1 WHERE conversation_id = $1 AND lease_owner IS NOT NULL`, [conversationId]);
          },
          async corrupt(conversationId, messageId) {
            const { rowCount } = await admin.query(`UPDATE ${q(t.messages)} SET content = '{"role":"user",' WHERE conversation_id = $1 AND message_id = $2`, [conversationId, messageId]);
            if (rowCount !== 1) throw new Error(`corrupt: no message ${messageId} in ${conversationId}`);
          },
          // What migrate() leaves in a row that failed before failed_at existed (schemaSql's upgrade): 0.
          async forgetFailedAt(conversationId, messageId) {
            const { rowCount } = await admin.query(`UPDATE ${q(t.messages)} SET failed_at = 0 WHERE conversation_id = $1 AND message_id = $2 AND state = 'failed'`, [conversationId, messageId]);
            if (rowCount !== 1) throw new Error(`forgetFailedAt: no failed message ${messageId} in ${conversationId}`);
          },
          // clockSkew: the store decides leases on the server's clock, never this process's, so another
          // instance whose calls run with this process's Date off must grant and respect the same leases.
          skewedInstance: async (offsetMs) => skewStoreProcessClock(open(), offsetMs),
          storeAddress: async () => storeAddressOf(DATABASE_URL, 5432),
          // An instance whose connections go through the kit's SilenceProxy: nothing here reaches the server.
          async openVia(via) {
            const other = new StoreClass({ connectionString: urlVia(DATABASE_URL, via), schema, poolConfig: { max: 4 }, timeoutMs: viaTimeoutMs, statementTimeoutMs: SILENT_BOUND_MS });
            stores.push(other);
            return other;
          },
          async disconnected() {
            // Nothing listens on the port: every call must fail closed, fast.
            const broken = new StoreClass({
              connectionString: `postgres://postgres@127.0.0.1:${await closedPort()}/test`,
              schema,
              poolConfig: { connectionTimeoutMillis: 2_000 },
            });
            stores.push(broken);
            return broken;
          },
        },
        async destroy() {
          for (const s of stores) await s.close();
          await dropSchema(admin, schema);
        },
      };
    },
  };
}
