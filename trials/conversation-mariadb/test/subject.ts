// The conformance subject of the MariaDB store: a fresh table prefix per create().
import { randomUUID } from "node:crypto";
import mysql from "mysql2/promise";
import type { ConversationStoreSubject } from "@dispatch-once/conformance";
import { MariaDbConversationStore } from "../src/store.js";

export const URI = process.env.MARIADB_URL ?? "mysql://root@127.0.0.1:3306/test";
const PREFIX = "outstore_";

export function subject(Store: typeof MariaDbConversationStore = MariaDbConversationStore, name = "conversation-mariadb (outside team)"): ConversationStoreSubject {
  return {
    name,
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, recordsWithCommit: true },
    async create() {
      const table = `${PREFIX}${randomUUID().replaceAll("-", "").slice(0, 20)}`;
      const instances: MariaDbConversationStore[] = [];
      const open = async () => {
        const s = new Store({ uri: URI, table });
        await (s as unknown as { migrate(): Promise<void> }).migrate();
        instances.push(s);
        return s;
      };
      const store = await open();
      const raw = await mysql.createConnection({ uri: URI, charset: "utf8mb4", jsonStrings: true });
      const q = async (sql: string, args: unknown[] = []) => (await raw.query(sql, args))[0] as Record<string, unknown>[];
      return {
        store,
        reopen: open,
        raw: {
          async lease(cid) {
            const [r] = await q(`SELECT fence, lease_owner, lease_expires_at FROM ${table}_conversations WHERE conversation_id = ?`, [cid]);
            if (r === undefined) return undefined;
            return {
              fence: Number(r.fence),
              ...(r.lease_owner !== null ? { owner: r.lease_owner as string } : {}),
              ...(r.lease_expires_at !== null && r.lease_owner !== null ? { expiresAt: Number(r.lease_expires_at) } : {}),
            };
          },
          async messages(cid) {
            const rows = await q(`SELECT * FROM ${table}_messages WHERE conversation_id = ? ORDER BY seq`, [cid]);
            return rows.map((r) => ({
              id: r.message_id as string,
              seq: Number(r.seq),
              state: r.state as never,
              content: JSON.parse(r.content as string),
              ...(r.turn_index !== null ? { turnIndex: Number(r.turn_index) } : {}),
              ...(r.state === "failed" && r.failure !== null ? { failure: JSON.parse(r.failure as string) } : {}),
            }));
          },
          async turns(cid) {
            const rows = await q(`SELECT * FROM ${table}_turns WHERE conversation_id = ? ORDER BY turn_index`, [cid]);
            return rows.map((r) => ({
              turnIndex: Number(r.turn_index),
              messageId: r.message_id as string,
              assistant: JSON.parse(r.assistant as string),
              ...(r.tool_results !== null ? { toolResults: JSON.parse(r.tool_results as string) } : {}),
              stopReason: r.stop_reason as string | null,
            }));
          },
          async records(cid) {
            const rows = await q(`SELECT record FROM ${table}_records WHERE conversation_id = ? ORDER BY id`, [cid]);
            return rows.map((r) => JSON.parse(r.record as string));
          },
          async expireLease(cid) {
            await q(
              `UPDATE ${table}_conversations SET lease_expires_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 1 WHERE conversation_id = ? AND lease_owner IS NOT NULL`,
              [cid],
            );
          },
          async corrupt(cid, mid) {
            // content is a JSON column (CHECK JSON_VALID): lift the check for this session. The log
            // keeps a copy of a committed message's content: damage that copy too.
            await q(`SET SESSION check_constraint_checks = 0`);
            const [m] = await q(`SELECT content FROM ${table}_messages WHERE conversation_id = ? AND message_id = ?`, [cid, mid]);
            await q(`UPDATE ${table}_messages SET content = '{"damaged' WHERE conversation_id = ? AND message_id = ?`, [cid, mid]);
            if (m !== undefined) await q(`UPDATE ${table}_log SET entry = '{"damaged' WHERE conversation_id = ? AND entry = ?`, [cid, m.content]);
            await q(`SET SESSION check_constraint_checks = 1`);
          },
          async disconnected() {
            return new Store({ uri: "mysql://root@127.0.0.1:1/test", table });
          },
        },
        async destroy() {
          for (const s of instances) await s.close().catch(() => undefined);
          for (const t of ["conversations", "messages", "turns", "log", "records"]) await q(`DROP TABLE IF EXISTS ${table}_${t}`);
          await raw.end();
        },
      };
    },
  };
}

/** Drop every table this trial left (the e2e kit never closes its stores). */
export async function dropAll(): Promise<void> {
  const raw = await mysql.createConnection({ uri: URI });
  const [rows] = await raw.query(`SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'test' AND table_name LIKE 'outstore\\_%'`);
  for (const r of rows as { t: string }[]) await raw.query(`DROP TABLE IF EXISTS \`${r.t}\``);
  await raw.end();
}
