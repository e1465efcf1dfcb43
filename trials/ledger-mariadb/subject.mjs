// The conformance subject for the MariaDB ledger (conformance/README.md "Writing the subject module").
import { randomUUID } from "node:crypto";
import mysql from "mysql2/promise";
import { skewProcessClock } from "@dispatch-once/conformance/ledger";
import { MariaDbLedger } from "./src/mariadb-ledger.mjs";

const conn = { host: "127.0.0.1", port: 3306, user: "root", password: "", database: "test" };
let admin;
const adminPool = () => (admin ??= mysql.createPool({ ...conn, connectionLimit: 4, timezone: "Z" }));
const NOW = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)";
const b = (s) => Buffer.from(s, "utf8");
const t = (v) => (v === null || v === undefined ? undefined : Buffer.isBuffer(v) ? v.toString("utf8") : v);

/** @type {import("@dispatch-once/conformance/ledger").LedgerSubject} */
const subject = {
  name: "ledger-mariadb (trial)",
  capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, clockSkew: true, listExpiredInFlight: true, retire: true, silentStore: true },
  limits: { operationBoundMs: 300 },
  async create({ retentionMs, maxResultBytes } = {}) {
    const table = `outledger_${randomUUID().replaceAll("-", "").slice(0, 24)}`;
    const instances = [];
    const open = async () => {
      const l = await MariaDbLedger.open({ ...conn, table, retentionMs, maxResultBytes, allowShortRetentionForTests: true });
      instances.push(l);
      return l;
    };
    const ledger = await open();
    const db = adminPool();
    const q = async (sql, params) => (await db.query(sql, params))[0];
    return {
      ledger,
      reopen: open,
      raw: {
        async read(key) {
          const rows = await q(`SELECT * FROM \`${table}\` WHERE k = ?`, [b(key)]);
          const r = rows[0];
          if (r === undefined) return undefined;
          const row = { key, state: r.state, toolName: t(r.tool_name), effect: r.effect, fence: Number(r.fence), claimedAt: Number(r.claimed_at), request: t(r.request) };
          if (r.conversation_id !== null) row.conversationId = t(r.conversation_id);
          if (r.turn_index !== null) row.turnIndex = Number(r.turn_index);
          if (r.owner !== null) row.owner = t(r.owner);
          if (r.lease_expires_at !== null) row.leaseExpiresAt = Number(r.lease_expires_at);
          if (r.result !== null) row.result = t(r.result);
          if (r.error !== null) row.error = JSON.parse(t(r.error));
          if (r.reason !== null) row.reason = t(r.reason);
          if (r.finished_at !== null) row.finishedAt = Number(r.finished_at);
          return row;
        },
        expireLease: async (key) => void (await q(`UPDATE \`${table}\` SET lease_expires_at = ${NOW} - 1 WHERE k = ?`, [b(key)])),
        expireRetention: async (key) => void (await q(`UPDATE \`${table}\` SET expires_at = ${NOW} - 1 WHERE k = ?`, [b(key)])),
        async corrupt(key) {
          const res = await q(`UPDATE \`${table}\` SET v = 99 WHERE k = ?`, [b(key)]);
          if (res.affectedRows === 0) {
            await q(`INSERT INTO \`${table}\` (k, v, state, tool_name, effect, fence, claimed_at, request) VALUES (?, 99, 'in_flight', 'x', 'keyed_write', 1, 0, '{}')`, [b(key)]);
          }
        },
        storeAddress: async () => ({ host: conn.host, port: conn.port }),
        openVia: async (via) => { const l = await MariaDbLedger.open({ ...conn, host: via.host, port: via.port, table, migrate: false, operationTimeoutMs: 300, retentionMs, maxResultBytes, allowShortRetentionForTests: true }); instances.push(l); return l; },
        disconnected: async () => MariaDbLedger.open({ ...conn, port: 1, table, migrate: false, operationTimeoutMs: 2000 }),
        expireRetired: async (key) => void (await q(`UPDATE \`${table}_retired\` SET until_ms = ${NOW} - 1 WHERE k = ?`, [b(key)])),
        skewedInstance: async (offsetMs) => skewProcessClock(await open(), offsetMs),
      },
      async destroy() {
        for (const l of instances) await l.close();
        await q(`DROP TABLE IF EXISTS \`${table}\`, \`${table}_retired\``);
      },
    };
  },
};
export default subject;
