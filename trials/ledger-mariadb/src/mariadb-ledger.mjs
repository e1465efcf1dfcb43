// A Dispatch-Once ledger on MariaDB (InnoDB), written by an "outside team" from the public docs
// only: packages/core/README.md, @dispatch-once/core/internal's doc comments, spec §6 and §10,
// conformance/README.md. Not a workspace package.
//
// Design: one row per key in <table>; retired claim ids in <table>_retired; audit entries in
// <table>_audit. Every operation is one InnoDB transaction at REPEATABLE READ that locks the key's
// row (INSERT ... ON DUPLICATE KEY UPDATE, or SELECT ... FOR UPDATE whose gap lock holds an
// absent key) before reading anything else with locking reads. Times are the store's clock in
// whole milliseconds (UNIX_TIMESTAMP(NOW(3)) with the session in UTC). Keys and all text are
// stored as binary (VARBINARY/LONGBLOB of UTF-8) so nothing is folded by a collation (LEDGER-30).
//
// LEDGER-12: every operation settles within operationTimeoutMs (default 5 s), connection wait,
// deadlock retries and all. Past it the operation rejects with ledger_unavailable, but the
// transaction it started keeps running on its connection and MAY STILL COMMIT: a claim reported
// unavailable may have been applied (LEDGER-26 and DISPATCH-16 are how its claimant takes or
// releases it). Known limits: the clock is read at the start of each transaction, before the
// key's lock is taken, so an operation that waited for the lock counts its lease and retention
// from before the wait (shorter, never longer, than asked); durability is read once, at open.
import { createHash } from "node:crypto";
import mysql from "mysql2/promise";
import {
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  InvalidLedgerInputError,
  LedgerUnavailableError,
  StaleClaimError,
  isDispatchOnceError,
} from "@dispatch-once/core";
import {
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerKey,
  checkLedgerLeaseMs,
  checkStoredError,
  checkUnknownReason,
  decodeLedgerColumns,
  resultRefusal,
} from "@dispatch-once/core/internal";

/** InnoDB's largest index key is 3072 bytes; a UTF-16 code unit is at most 3 UTF-8 bytes. */
const MAX_KEY_LENGTH = 1024;
/** Under max_allowed_packet (16 MiB by default) with room for the rest of the statement. */
const MAX_VALUE_BYTES = 8 * 1024 * 1024;
const LIMITS = { maxKeyLength: MAX_KEY_LENGTH, maxValueBytes: MAX_VALUE_BYTES, storesNul: true };
/** Retention floor (LEDGER-13): below a minute is a unit slip. */
const MIN_RETENTION_MS = 60_000;
const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,40}$/;
const CLAIM_ID = /^[A-Za-z0-9_-]{16,64}$/;

const NOW_MS = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)";

const b = (s) => (s === undefined || s === null ? null : Buffer.from(s, "utf8"));
/** The retired-id table's key: SHA-256 of the key's UTF-8 (the key itself is too long for a composite index). */
const kh = (key) => createHash("sha256").update(key, "utf8").digest();
const t = (v) => (v === null || v === undefined ? v : Buffer.isBuffer(v) ? v.toString("utf8") : v);

/** Driver errors that mean "try the transaction again": deadlock, lock wait timeout. */
const RETRYABLE = new Set([1213, 1205]);

export class MariaDbLedger {
  /**
   * Opens (and creates, if absent) the ledger's tables.
   * Options: { host, port, user, password, database, table = "dispatch_once_ledger",
   * retentionMs = 24 h (floor 60 s unless allowShortRetentionForTests), maxResultBytes = 1 MiB,
   * operationTimeoutMs = 5000 (LEDGER-12's bound for every operation, connection wait included),
   * durability: "auto" | "volatile" }.
   */
  static async open(options = {}) {
    const table = options.table ?? "dispatch_once_ledger";
    if (!TABLE_NAME.test(table)) throw new InvalidLedgerInputError("table", "must match [A-Za-z_][A-Za-z0-9_]{0,40}");
    const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
    if (typeof retentionMs !== "number" || !Number.isSafeInteger(retentionMs) || retentionMs <= 0 || (retentionMs < MIN_RETENTION_MS && options.allowShortRetentionForTests !== true)) {
      throw new InvalidLedgerInputError("retentionMs", `must be an integer of at least ${MIN_RETENTION_MS} ms`);
    }
    const maxResultBytes = options.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
    if (!Number.isSafeInteger(maxResultBytes) || maxResultBytes < 1 || maxResultBytes > MAX_VALUE_BYTES) {
      throw new InvalidLedgerInputError("maxResultBytes", `must be an integer in 1..${MAX_VALUE_BYTES}`);
    }
    const operationTimeoutMs = options.operationTimeoutMs ?? 5000;
    const pool = mysql.createPool({
      host: options.host ?? "127.0.0.1",
      port: options.port ?? 3306,
      user: options.user ?? "root",
      password: options.password ?? "",
      database: options.database ?? "test",
      connectionLimit: options.connectionLimit ?? 10,
      connectTimeout: operationTimeoutMs,
      charset: "utf8mb4",
      timezone: "Z",
      supportBigNumbers: true,
      bigNumberStrings: false,
    });
    // Every new connection: UTC (UNIX_TIMESTAMP(NOW()) is ambiguous across a DST change otherwise)
    // and REPEATABLE READ, which the key locking relies on (gap lock on an absent key).
    pool.on("connection", (conn) => {
      conn.query("SET SESSION time_zone = '+00:00', SESSION tx_isolation = 'REPEATABLE-READ'");
    });
    const ledger = new MariaDbLedger(pool, table, retentionMs, maxResultBytes, operationTimeoutMs);
    // migrate: false opens without touching the store (tables made elsewhere; durability then
    // stays volatile until read, LEDGER-14).
    if (options.migrate === false) return ledger;
    try {
      await ledger.#bounded("open", async () => {
        const conn = await pool.getConnection();
        try {
          await conn.query(`CREATE TABLE IF NOT EXISTS \`${table}\` (
            k VARBINARY(3072) NOT NULL PRIMARY KEY,
            v INT NOT NULL,
            state VARCHAR(16) CHARACTER SET ascii NOT NULL,
            tool_name VARBINARY(4096) NOT NULL,
            effect VARCHAR(16) CHARACTER SET ascii NOT NULL,
            fence BIGINT NOT NULL,
            claimed_at BIGINT NOT NULL,
            request LONGBLOB NOT NULL,
            claim_id VARBINARY(64) NULL,
            conversation_id BLOB NULL,
            turn_index BIGINT NULL,
            owner VARBINARY(4096) NULL,
            lease_expires_at BIGINT NULL,
            result LONGBLOB NULL,
            error LONGBLOB NULL,
            reason BLOB NULL,
            finished_at BIGINT NULL,
            expires_at BIGINT NULL,
            KEY by_lease (state, lease_expires_at),
            KEY by_expiry (expires_at)
          ) ENGINE=InnoDB`);
          await conn.query(`CREATE TABLE IF NOT EXISTS \`${table}_retired\` (
            kh BINARY(32) NOT NULL,
            k VARBINARY(3072) NOT NULL,
            claim_id VARBINARY(64) NOT NULL,
            until_ms BIGINT NOT NULL,
            PRIMARY KEY (kh, claim_id),
            KEY by_until (until_ms)
          ) ENGINE=InnoDB`);
          // LEDGER-14: an acknowledged commit survives a crash only with the redo log flushed at
          // every commit, the binary log (when on) synced at every commit, and the doublewrite
          // buffer on (without it a torn page can lose rows: PostgreSQL's full_page_writes).
          const [vars] = await conn.query("SELECT @@innodb_flush_log_at_trx_commit AS flush, @@log_bin AS log_bin, @@sync_binlog AS sync_binlog, @@innodb_doublewrite AS doublewrite");
          ledger.#durable = Number(vars[0].flush) === 1 && (Number(vars[0].log_bin) === 0 || Number(vars[0].sync_binlog) === 1) && Number(vars[0].doublewrite) >= 1;
        } finally {
          conn.release();
        }
      });
    } catch (error) {
      await pool.end().catch(() => {});
      throw error;
    }
    if (options.durability === "volatile") ledger.#durable = false;
    return ledger;
  }

  #pool;
  #table;
  #maxResultBytes;
  #timeoutMs;
  #durable = false;
  #closed = false;
  retentionMs;

  constructor(pool, table, retentionMs, maxResultBytes, timeoutMs) {
    this.#pool = pool;
    this.#table = table;
    this.retentionMs = retentionMs;
    this.#maxResultBytes = maxResultBytes;
    this.#timeoutMs = timeoutMs;
  }

  get capabilities() {
    return {
      // LEDGER-14: durable only when InnoDB flushes its redo log at every commit (and the binlog,
      // when on, is synced). Not observable from here: a disk's volatile write cache, replicas.
      durability: this.#durable ? "durable" : "volatile",
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes: this.#maxResultBytes,
      supports: { retire: true, listExpiredInFlight: true },
    };
  }

  /** The whole operation, connection wait and retries included, settles within the bound (LEDGER-12). */
  async #bounded(what, fn) {
    if (this.#closed) throw new LedgerUnavailableError(`ledger ${this.#table} is closed`);
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new LedgerUnavailableError(`${what}: no answer from MariaDB within ${this.#timeoutMs} ms (the statement may still be applied)`)), this.#timeoutMs);
    });
    try {
      return await Promise.race([fn(), timeout]);
    } catch (error) {
      if (isDispatchOnceError(error)) throw error;
      throw new LedgerUnavailableError(`${what}: ${error?.message ?? String(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }

  /** One transaction on one connection, retried on deadlock and lock wait timeout. */
  async #tx(what, fn) {
    return this.#bounded(what, async () => {
      for (let attempt = 0; ; attempt++) {
        const conn = await this.#pool.getConnection();
        let broken = false;
        try {
          await conn.query("START TRANSACTION");
          const [nowRows] = await conn.query(`SELECT ${NOW_MS} AS now`);
          // NULL past 2038-01-19 on MariaDB before 11.5 (a TIMESTAMP's range): read as 0 it made
          // every lease live for ever. A clock the ledger cannot read is an unavailable store.
          if (nowRows[0].now === null) throw new LedgerUnavailableError("MariaDB's clock (UNIX_TIMESTAMP(NOW(3))) read NULL");
          const now = Number(nowRows[0].now);
          const out = await fn(conn, now);
          if (out?.rollback) {
            await conn.query("ROLLBACK");
            if (out.error) throw out.error;
            return out.value;
          }
          await conn.query("COMMIT");
          return out?.value;
        } catch (error) {
          await conn.query("ROLLBACK").catch(() => {
            broken = true;
          });
          if (!isDispatchOnceError(error) && RETRYABLE.has(error?.errno) && attempt < 50) continue;
          throw error;
        } finally {
          if (broken) conn.destroy();
          else conn.release();
        }
      }
    });
  }

  async #lockRow(conn, key) {
    const [rows] = await conn.query(`SELECT * FROM \`${this.#table}\` WHERE k = ? FOR UPDATE`, [b(key)]);
    return rows[0];
  }

  #decode(key, raw) {
    return decodeLedgerColumns(key, {
      v: raw.v,
      state: raw.state,
      tool_name: t(raw.tool_name),
      effect: raw.effect,
      fence: raw.fence,
      claimed_at: raw.claimed_at,
      request: t(raw.request),
      conversation_id: t(raw.conversation_id),
      turn_index: raw.turn_index,
      owner: t(raw.owner),
      lease_expires_at: raw.lease_expires_at,
      result: t(raw.result),
      error: t(raw.error),
      reason: t(raw.reason),
      finished_at: raw.finished_at,
    });
  }

  #forgotten(raw, now) {
    return raw.state !== "in_flight" && raw.expires_at !== null && Number(raw.expires_at) <= now;
  }

  async claim(request) {
    const leaseMs = checkClaimRequest(request, LIMITS);
    const { key, toolName, effect, owner, claimId, conversationId, turnIndex } = request;
    return this.#tx("claim", async (conn, now) => {
      const raw = await this.#lockRow(conn, key);
      if (claimId !== undefined) {
        const [retired] = await conn.query(`SELECT until_ms FROM \`${this.#table}_retired\` WHERE kh = ? AND k = ? AND claim_id = ? AND until_ms > ? FOR UPDATE`, [kh(key), b(key), b(claimId), now]);
        if (retired.length > 0) {
          const fence = raw === undefined || this.#forgotten(raw, now) ? 0 : Number(raw.fence);
          return { rollback: true, error: new StaleClaimError(key, fence, `claim id of ${key} was retired (LEDGER-28)`) };
        }
      }
      const leaseExpiresAt = now + leaseMs;
      // Decode before asking whether the row is past its retention: a row that cannot be read
      // is ledger_corrupt, never forgotten on the word of its own columns (LEDGER-11).
      const decoded = raw === undefined ? undefined : this.#decode(key, raw);
      if (raw === undefined || this.#forgotten(raw, now)) {
        const fence = raw === undefined ? 1 : Number(raw.fence) + 1;
        await conn.query(
          `REPLACE INTO \`${this.#table}\` (k, v, state, tool_name, effect, fence, claimed_at, request, claim_id, conversation_id, turn_index, owner, lease_expires_at)
           VALUES (?, 1, 'in_flight', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
          [b(key), b(toolName), effect, fence, now, b(request.request), b(claimId), b(conversationId), turnIndex ?? null, b(owner), leaseExpiresAt],
        );
        return { value: { outcome: "claimed", fence, leaseExpiresAt, takeover: false, request: request.request } };
      }
      const row = decoded;
      const storedClaimId = t(raw.claim_id);
      if (row.state === "released") {
        if (claimId !== undefined && storedClaimId === claimId) {
          return { rollback: true, error: new StaleClaimError(key, row.fence, `claim id of ${key} was released (LEDGER-27)`) };
        }
        return { value: await this.#take(conn, key, row, request, now, leaseExpiresAt, false) };
      }
      if (row.state === "in_flight") {
        if (claimId !== undefined && storedClaimId === claimId) {
          await conn.query(`UPDATE \`${this.#table}\` SET lease_expires_at = ? WHERE k = ?`, [leaseExpiresAt, b(key)]);
          return { value: { outcome: "claimed", fence: row.fence, leaseExpiresAt, takeover: false, request: row.request } };
        }
        if (now < row.leaseExpiresAt) return { value: { outcome: "existing", row } };
        if (row.effect === "keyed_write") return { value: await this.#take(conn, key, row, request, now, leaseExpiresAt, true) };
        await conn.query(
          `UPDATE \`${this.#table}\` SET state = 'unknown', reason = ?, finished_at = ?, expires_at = ?, owner = NULL, lease_expires_at = NULL WHERE k = ?`,
          [b("lease_expired"), now, now + this.retentionMs, b(key)],
        );
        const { owner: _o, leaseExpiresAt: _l, ...base } = row;
        return { value: { outcome: "existing", row: { ...base, state: "unknown", reason: "lease_expired", finishedAt: now } } };
      }
      return { value: { outcome: "existing", row } };
    });
  }

  /** A claim that takes the row: re-claim after release, or takeover of an expired keyed_write claim. */
  async #take(conn, key, row, request, now, leaseExpiresAt, takeover) {
    const fence = row.fence + 1;
    await conn.query(
      `UPDATE \`${this.#table}\` SET state = 'in_flight', fence = ?, claimed_at = ?, owner = ?, lease_expires_at = ?, effect = ?, tool_name = ?, claim_id = ?,
         result = NULL, error = NULL, reason = NULL, finished_at = NULL, expires_at = NULL WHERE k = ?`,
      [fence, now, b(request.owner), leaseExpiresAt, request.effect, b(request.toolName), b(request.claimId), b(key)],
    );
    return { outcome: "claimed", fence, leaseExpiresAt, takeover, request: row.request };
  }

  #checkFence(fence) {
    if (typeof fence !== "number" || !Number.isSafeInteger(fence) || fence < 0) throw new InvalidLedgerInputError("fence", "must be a non-negative integer");
  }

  /** The in-flight row `fence` owns, locked; anything else is stale (LEDGER-5). */
  async #owned(conn, key, fence, now) {
    const raw = await this.#lockRow(conn, key);
    if (raw === undefined) throw new StaleClaimError(key, fence);
    const row = this.#decode(key, raw);
    if (this.#forgotten(raw, now)) throw new StaleClaimError(key, fence);
    if (row.state !== "in_flight" || row.fence !== fence) throw new StaleClaimError(key, fence);
    return row;
  }

  async renew(key, fence, leaseMs) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    const ms = checkLedgerLeaseMs(leaseMs);
    return this.#tx("renew", async (conn, now) => {
      await this.#owned(conn, key, fence, now);
      const leaseExpiresAt = now + ms;
      await conn.query(`UPDATE \`${this.#table}\` SET lease_expires_at = ? WHERE k = ?`, [leaseExpiresAt, b(key)]);
      return { value: { leaseExpiresAt } };
    });
  }

  async complete(key, fence, result) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    const refusal = resultRefusal(key, result, this.#maxResultBytes, LIMITS);
    return this.#tx("complete", async (conn, now) => {
      await this.#owned(conn, key, fence, now);
      if (refusal !== undefined) throw refusal;
      await this.#finish(conn, key, now, "completed", { result: b(result) });
    });
  }

  async fail(key, fence, error) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    const text = checkStoredError(error, LIMITS);
    return this.#tx("fail", async (conn, now) => {
      await this.#owned(conn, key, fence, now);
      await this.#finish(conn, key, now, "failed", { error: b(text) });
    });
  }

  async markUnknown(key, fence, reason) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    checkUnknownReason(reason, LIMITS);
    return this.#tx("markUnknown", async (conn, now) => {
      await this.#owned(conn, key, fence, now);
      await this.#finish(conn, key, now, "unknown", { reason: b(reason) });
    });
  }

  async release(key, fence) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    return this.#tx("release", async (conn, now) => {
      await this.#owned(conn, key, fence, now);
      await this.#finish(conn, key, now, "released", {});
    });
  }

  async #finish(conn, key, now, state, { result = null, error = null, reason = null }) {
    await conn.query(
      `UPDATE \`${this.#table}\` SET state = ?, result = ?, error = ?, reason = ?, owner = NULL, lease_expires_at = NULL, finished_at = ?, expires_at = ? WHERE k = ?`,
      [state, result, error, reason, now, now + this.retentionMs, b(key)],
    );
  }

  async lookup(key) {
    checkLedgerKey(key, LIMITS);
    return this.#bounded("lookup", async () => {
      const [rows] = await this.#pool.query(`SELECT *, ${NOW_MS} AS now FROM \`${this.#table}\` WHERE k = ?`, [b(key)]);
      const raw = rows[0];
      if (raw === undefined) return undefined;
      if (raw.now === null) throw new LedgerUnavailableError("MariaDB's clock (UNIX_TIMESTAMP(NOW(3))) read NULL");
      const row = this.#decode(key, raw); // first: a corrupt row is corrupt even when it reads old (LEDGER-11)
      return this.#forgotten(raw, Number(raw.now)) ? undefined : row;
    });
  }

  async listExpiredInFlight(options = {}) {
    checkExpiredInFlightOptions(options);
    const olderThanMs = options.olderThanMs ?? 0;
    const limit = options.limit ?? 100;
    if (typeof olderThanMs !== "number" || !Number.isSafeInteger(olderThanMs) || olderThanMs < 0) throw new InvalidLedgerInputError("olderThanMs", "must be a non-negative integer");
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) throw new InvalidLedgerInputError("limit", "must be an integer in 1..1000");
    return this.#bounded("listExpiredInFlight", async () => {
      const [rows] = await this.#pool.query(
        `SELECT * FROM \`${this.#table}\` WHERE state = 'in_flight' AND lease_expires_at <= ${NOW_MS} - ? ORDER BY lease_expires_at, k LIMIT ?`,
        [olderThanMs, limit],
      );
      return rows.map((raw) => this.#decode(t(raw.k), raw));
    });
  }

  async retire(key, claimId, options = {}) {
    if (typeof key !== "string" || key.length === 0) throw new InvalidLedgerInputError("key", "must be a non-empty string");
    checkLedgerKey(key, LIMITS);
    if (typeof claimId !== "string" || !CLAIM_ID.test(claimId)) throw new InvalidLedgerInputError("claimId", "must match [A-Za-z0-9_-]{16,64}");
    if (typeof options !== "object" || options === null || Array.isArray(options)) throw new InvalidLedgerInputError("options", "must be an object { release? }");
    for (const name of Object.keys(options)) if (name !== "release") throw new InvalidLedgerInputError(name, "is not an option of retire (its options: release)");
    if (options.release !== undefined && typeof options.release !== "boolean") throw new InvalidLedgerInputError("release", "must be a boolean");
    return this.#tx("retire", async (conn, now) => {
      const raw = await this.#lockRow(conn, key);
      await conn.query(
        `INSERT INTO \`${this.#table}_retired\` (kh, k, claim_id, until_ms) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE until_ms = GREATEST(until_ms, VALUES(until_ms))`,
        [kh(key), b(key), b(claimId), now + this.retentionMs],
      );
      if (options.release === true && raw !== undefined && raw.state === "in_flight" && t(raw.claim_id) === claimId) {
        this.#decode(key, raw);
        await this.#finish(conn, key, now, "released", {});
        return { value: { released: true } };
      }
      return { value: { released: false } };
    });
  }

  async sweep() {
    return this.#bounded("sweep", async () => {
      const [res] = await this.#pool.query(`DELETE FROM \`${this.#table}\` WHERE state <> 'in_flight' AND expires_at <= ${NOW_MS}`);
      await this.#pool.query(`DELETE FROM \`${this.#table}_retired\` WHERE until_ms <= ${NOW_MS}`);
      return res.affectedRows;
    });
  }

  async close() {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pool.end();
  }
}
