// MariaDbConversationStore: an outside team's ConversationStore on MariaDB/MySQL (mysql2),
// written from @dispatch-once/core's README ("The conversation store"), the ConversationStore
// doc comments, @dispatch-once/core/internal's store toolkit and spec §4/§9.
import mysql, { type Pool, type PoolConnection, type RowDataPacket } from "mysql2/promise";
import {
  CONVERSATION_ID_PATTERN,
  ConversationLeaseLostError,
  InvalidStoreInputError,
  StoreCorruptError,
  StoreUnavailableError,
  isDispatchOnceError,
  type AppendOptions,
  type AppendResult,
  type ConversationStore,
  type ConversationStoreCapabilities,
  type JsonValue,
  type LeaseResult,
  type StoredMessage,
  type StoredTurn,
  type TurnCommit,
  type TurnSnapshot,
} from "@dispatch-once/core";
import {
  beginTurnIndex,
  checkLeaseOwner,
  checkTurnLeaseMs,
  checkUserMessage,
  decodeStoreJson,
  decodeStoredMessage,
  decodeStoredTurn,
  encodeStoreJson,
} from "@dispatch-once/core/internal";

export interface MariaDbConversationStoreOptions {
  /** mysql2 connection URI, e.g. mysql://root@127.0.0.1:3306/test */
  uri: string;
  /** Prefix of this store's tables. */
  table?: string;
  /** Test hook (the end-to-end kit moves a store's clock): milliseconds added to the server's clock. */
  clockOffsetMs?: () => number;
  /** Bound on how long a statement waits for a row lock, seconds (TURN-10). */
  lockWaitTimeoutS?: number;
  /** Most connections of the pool. Default 8. */
  connectionLimit?: number;
  /** Idle connections kept open. Default connectionLimit (mysql2's). */
  maxIdle?: number;
}

const MAX_MESSAGE_ID_LENGTH = 256;

// What the kit refuses (its TURN-2 bad-id check); the store docs do not say it: a conversation id
// is KEY-2's (CONVERSATION_ID_PATTERN), a message id a non-empty well-formed string of at most 256.
function checkConversationId(id: unknown): string {
  if (typeof id !== "string" || !CONVERSATION_ID_PATTERN.test(id)) throw new InvalidStoreInputError("conversationId", `must match ${CONVERSATION_ID_PATTERN.source}`);
  return id;
}

function checkMessageId(field: string, id: unknown): string {
  if (typeof id !== "string" || id.length === 0 || id.length > MAX_MESSAGE_ID_LENGTH || !id.isWellFormed()) {
    throw new InvalidStoreInputError(field, `must be a non-empty, well-formed string of at most ${MAX_MESSAGE_ID_LENGTH} characters`);
  }
  return id;
}

interface ConversationRow extends RowDataPacket {
  fence: unknown;
  lease_owner: string | null;
  lease_expires_at: unknown;
  turn_count: unknown;
  next_seq: unknown;
  begun_turn: unknown;
  begun_fence: unknown;
  last_bound: string | null;
}

export class MariaDbConversationStore implements ConversationStore {
  readonly capabilities: ConversationStoreCapabilities = {
    durability: "durable",
    clock: "store",
    sharedAcrossProcesses: true,
    recordsWithCommit: true,
  };

  private readonly pool: Pool;
  private readonly t: string;
  private readonly offset: () => number;
  private ready: Promise<void> | undefined;

  constructor(private readonly options: MariaDbConversationStoreOptions) {
    this.t = options.table ?? "dispatch_once";
    if (!/^[A-Za-z0-9_]{1,40}$/.test(this.t)) throw new InvalidStoreInputError("table", "must be 1 to 40 letters, digits or _");
    this.offset = options.clockOffsetMs ?? (() => 0);
    this.pool = mysql.createPool({
      uri: options.uri,
      connectionLimit: options.connectionLimit ?? 8,
      ...(options.maxIdle !== undefined ? { maxIdle: options.maxIdle, idleTimeout: 1000 } : {}),
      charset: "utf8mb4",
      connectTimeout: 3000,
      jsonStrings: true,
    });
    const wait = options.lockWaitTimeoutS ?? 5;
    this.pool.on("connection", (c) => {
      // A holder stopped inside a write keeps its row locks: bound the wait of everyone else, and
      // how long the server keeps a transaction whose client went quiet (TURN-10). Not wait_timeout:
      // it closed idle pooled connections too, and the pool then handed a dead one to the next call
      // (store_unavailable with no fault). The store clock is epoch ms: UNIX_TIMESTAMP(NOW(3)) in a
      // session time zone with daylight saving steps back an hour at the fold.
      c.query(`SET SESSION innodb_lock_wait_timeout = ${wait}, idle_transaction_timeout = 30, time_zone = '+00:00'`);
    });
  }

  static async open(options: MariaDbConversationStoreOptions): Promise<MariaDbConversationStore> {
    const store = new MariaDbConversationStore(options);
    await store.migrate();
    return store;
  }

  private migrate(): Promise<void> {
    this.ready ??= this.run(async (c) => {
      const t = this.t;
      await c.query(`CREATE TABLE IF NOT EXISTS ${t}_conversations (
        conversation_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
        fence BIGINT NOT NULL DEFAULT 0,
        lease_owner VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL,
        lease_expires_at BIGINT NULL,
        turn_count INT NOT NULL DEFAULT 0,
        next_seq INT NOT NULL DEFAULT 1,
        begun_turn INT NULL,
        begun_fence BIGINT NULL,
        last_bound VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t}_messages (
        conversation_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
        message_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
        seq INT NOT NULL,
        state VARCHAR(16) NOT NULL,
        content LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        turn_index INT NULL,
        failure LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        PRIMARY KEY (conversation_id, message_id),
        UNIQUE KEY (conversation_id, seq)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t}_turns (
        conversation_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
        turn_index INT NOT NULL,
        message_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
        assistant LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        tool_results LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
        stop_reason VARCHAR(64) NULL,
        PRIMARY KEY (conversation_id, turn_index)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t}_log (
        conversation_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
        pos INT NOT NULL,
        entry LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        PRIMARY KEY (conversation_id, pos)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t}_records (
        id BIGINT AUTO_INCREMENT PRIMARY KEY,
        conversation_id VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
        record LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
        KEY (conversation_id, id)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
    });
    return this.ready.catch((e: unknown) => {
      this.ready = undefined;
      throw e;
    });
  }

  /** One connection, driver errors as store_unavailable (never "absent"). */
  private async run<T>(f: (c: PoolConnection) => Promise<T>): Promise<T> {
    let c: PoolConnection;
    try {
      c = await this.pool.getConnection();
    } catch (cause) {
      throw new StoreUnavailableError(`cannot reach MariaDB: ${(cause as Error).message}`, { cause });
    }
    try {
      return await f(c);
    } catch (error) {
      if (isDispatchOnceError(error)) throw error;
      throw new StoreUnavailableError(`MariaDB: ${(error as Error).message}`, { cause: error });
    } finally {
      c.release();
    }
  }

  /** One transaction that holds the conversation's row lock; deadlocks are retried. */
  private async tx<T>(conversationId: string, f: (c: PoolConnection, conv: ConversationRow, now: number) => Promise<T>): Promise<T> {
    await this.migrate();
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.run(async (c) => {
          await c.beginTransaction();
          try {
            // Takes the row's exclusive lock at once: INSERT IGNORE took a shared lock on an existing row, and
            // concurrent callers then deadlocked upgrading it for FOR UPDATE.
            await c.query(`INSERT INTO ${this.t}_conversations (conversation_id) VALUES (?) ON DUPLICATE KEY UPDATE conversation_id = conversation_id`, [conversationId]);
            const [rows] = await c.query<ConversationRow[]>(
              `SELECT *, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS now_ms FROM ${this.t}_conversations WHERE conversation_id = ? FOR UPDATE`,
              [conversationId],
            );
            const conv = rows[0];
            if (conv === undefined) throw new StoreCorruptError(conversationId, "conversation row vanished");
            const now = Number(conv.now_ms) + this.offset();
            const out = await f(c, conv, now);
            await c.commit();
            return out;
          } catch (error) {
            await c.rollback().catch(() => undefined);
            throw error;
          }
        });
      } catch (error) {
        const code = (error as { cause?: { errno?: number } }).cause?.errno;
        if (code === 1213 && attempt < 10) {
          // deadlock: InnoDB rolled the transaction back; nothing of it applied, try again
          await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
          continue;
        }
        throw error;
      }
    }
  }

  private async read<T>(f: (c: PoolConnection) => Promise<T>): Promise<T> {
    await this.migrate();
    return this.run(f);
  }

  private fenceOf(conversationId: string, conv: ConversationRow): number {
    const fence = Number(conv.fence);
    if (!Number.isSafeInteger(fence) || fence < 0) throw new StoreCorruptError(conversationId, `fence ${String(conv.fence)}`);
    return fence;
  }

  /** The presented fence holds the lease: the latest grant, not released (an expired one nobody took still holds). */
  private holds(conversationId: string, conv: ConversationRow, fence: number): boolean {
    return this.fenceOf(conversationId, conv) === fence && fence > 0 && conv.lease_owner !== null;
  }

  async appendUserMessage(conversationId: string, message: { id: string; content: JsonValue }, options?: AppendOptions): Promise<AppendResult> {
    checkConversationId(conversationId);
    checkUserMessage(message);
    checkMessageId("message.id", message.id);
    if (options?.reopenWithinMs !== undefined) throw new InvalidStoreInputError("reopenWithinMs", "this store does not declare supports.reopenWindow");
    const content = encodeStoreJson("content", message.content);
    await this.migrate();
    // MUTANT(append-autocommit): autocommit statements, no conversation lock.
    return this.run(async (c) => {
      await c.query(`INSERT IGNORE INTO ${this.t}_conversations (conversation_id) VALUES (?)`, [conversationId]);
      const [convs] = await c.query<ConversationRow[]>(`SELECT * FROM ${this.t}_conversations WHERE conversation_id = ?`, [conversationId]);
      const conv = convs[0]!;
      const existing = await this.messageRow(c, conversationId, message.id);
      if (existing !== undefined) {
        const stored = decodeStoredMessage(conversationId, existing);
        if (stored.state === "failed" && conv.last_bound === message.id) {
          await c.query(`UPDATE ${this.t}_messages SET state = 'queued' WHERE conversation_id = ? AND message_id = ?`, [conversationId, message.id]);
          const { failure: _failure, ...rest } = stored;
          return { appended: false, message: { ...rest, state: "queued" }, reopened: true };
        }
        return { appended: false, message: stored, reopened: false };
      }
      const seq = Number(conv.next_seq);
      await c.query(`INSERT INTO ${this.t}_messages (conversation_id, message_id, seq, state, content) VALUES (?, ?, ?, 'queued', ?)`, [conversationId, message.id, seq, content]);
      await c.query(`UPDATE ${this.t}_conversations SET next_seq = next_seq + 1 WHERE conversation_id = ?`, [conversationId]);
      return { appended: true, message: { id: message.id, content: decodeStoreJson(conversationId, "content", content), seq, state: "queued" }, reopened: false };
    });
  }

  private async messageRow(c: PoolConnection, conversationId: string, messageId: string) {
    const [rows] = await c.query<RowDataPacket[]>(
      `SELECT message_id, seq, state, content, turn_index, failure FROM ${this.t}_messages WHERE conversation_id = ? AND message_id = ?`,
      [conversationId, messageId],
    );
    return rows[0] as unknown as Parameters<typeof decodeStoredMessage>[1] | undefined;
  }

  async message(conversationId: string, messageId: string): Promise<StoredMessage | undefined> {
    checkConversationId(conversationId);
    checkMessageId("messageId", messageId);
    return this.read(async (c) => {
      const row = await this.messageRow(c, conversationId, messageId);
      return row === undefined ? undefined : decodeStoredMessage(conversationId, row);
    });
  }

  async turnsOf(conversationId: string, messageId: string): Promise<StoredTurn[]> {
    checkConversationId(conversationId);
    checkMessageId("messageId", messageId);
    return this.read(async (c) => {
      const [rows] = await c.query<RowDataPacket[]>(
        `SELECT turn_index, message_id, assistant, tool_results, stop_reason FROM ${this.t}_turns WHERE conversation_id = ? AND message_id = ? ORDER BY turn_index`,
        [conversationId, messageId],
      );
      return rows.map((r) => decodeStoredTurn(conversationId, r as unknown as Parameters<typeof decodeStoredTurn>[1]));
    });
  }

  async log(conversationId: string): Promise<JsonValue[]> {
    checkConversationId(conversationId);
    return this.read(async (c) => {
      const [rows] = await c.query<RowDataPacket[]>(`SELECT entry FROM ${this.t}_log WHERE conversation_id = ? ORDER BY pos`, [conversationId]);
      return rows.map((r, i) => decodeStoreJson(conversationId, `log entry ${i}`, r.entry));
    });
  }

  async acquireLease(conversationId: string, owner: string, leaseMs: number, grantId?: string): Promise<LeaseResult> {
    checkConversationId(conversationId);
    checkLeaseOwner(owner);
    const ms = checkTurnLeaseMs(leaseMs);
    if (grantId !== undefined) throw new InvalidStoreInputError("grantId", "this store does not declare supports.leaseGrants");
    return this.tx(conversationId, async (c, conv, now) => {
      const expires = conv.lease_expires_at === null ? null : Number(conv.lease_expires_at);
      if (conv.lease_owner !== null && expires !== null && expires > now) {
        return { acquired: false, owner: conv.lease_owner, leaseExpiresAt: expires };
      }
      const fence = this.fenceOf(conversationId, conv) + 1;
      await c.query(`UPDATE ${this.t}_conversations SET fence = ?, lease_owner = ?, lease_expires_at = ? WHERE conversation_id = ?`, [
        fence,
        owner,
        now + ms,
        conversationId,
      ]);
      return { acquired: true, fence, leaseExpiresAt: now + ms };
    });
  }

  async renewLease(conversationId: string, fence: number, leaseMs: number): Promise<{ leaseExpiresAt: number }> {
    checkConversationId(conversationId);
    const ms = checkTurnLeaseMs(leaseMs);
    return this.tx(conversationId, async (c, conv, now) => {
      if (!this.holds(conversationId, conv, fence)) throw new ConversationLeaseLostError(conversationId, fence);
      await c.query(`UPDATE ${this.t}_conversations SET lease_expires_at = ? WHERE conversation_id = ?`, [now + ms, conversationId]);
      return { leaseExpiresAt: now + ms };
    });
  }

  async releaseLease(conversationId: string, fence: number): Promise<void> {
    checkConversationId(conversationId);
    await this.tx(conversationId, async (c, conv) => {
      if (!this.holds(conversationId, conv, fence)) return;
      await c.query(`UPDATE ${this.t}_conversations SET lease_owner = NULL, lease_expires_at = NULL WHERE conversation_id = ?`, [conversationId]);
    });
  }

  async beginTurn(conversationId: string, fence: number): Promise<TurnSnapshot | undefined> {
    checkConversationId(conversationId);
    return this.tx(conversationId, async (c, conv) => {
      if (!this.holds(conversationId, conv, fence)) throw new ConversationLeaseLostError(conversationId, fence);
      const [rows] = await c.query<RowDataPacket[]>(
        `SELECT message_id, seq, state, content, turn_index, failure FROM ${this.t}_messages
         WHERE conversation_id = ? AND state IN ('in_progress', 'queued')
         ORDER BY state = 'in_progress' DESC, seq LIMIT 1`,
        [conversationId],
      );
      const row = rows[0];
      if (row === undefined) return undefined;
      let message = decodeStoredMessage(conversationId, row as unknown as Parameters<typeof decodeStoredMessage>[1]);
      const turnIndex = Number(conv.turn_count);
      if (message.state === "queued") {
        const bound = message.turnIndex ?? turnIndex;
        await c.query(`UPDATE ${this.t}_messages SET state = 'in_progress', turn_index = ? WHERE conversation_id = ? AND message_id = ?`, [
          bound,
          conversationId,
          message.id,
        ]);
        await c.query(`UPDATE ${this.t}_conversations SET last_bound = ? WHERE conversation_id = ?`, [message.id, conversationId]);
        message = { ...message, state: "in_progress", turnIndex: bound };
      }
      const { resumed, write } = beginTurnIndex(conversationId, { begunTurn: conv.begun_turn, begunFence: conv.begun_fence }, turnIndex, fence);
      if (write) {
        await c.query(`UPDATE ${this.t}_conversations SET begun_turn = ?, begun_fence = ? WHERE conversation_id = ?`, [turnIndex, fence, conversationId]);
      }
      const [logRows] = await c.query<RowDataPacket[]>(`SELECT entry FROM ${this.t}_log WHERE conversation_id = ? ORDER BY pos`, [conversationId]);
      const input = logRows.map((r, i) => decodeStoreJson(conversationId, `log entry ${i}`, r.entry));
      const [counts] = await c.query<RowDataPacket[]>(`SELECT COUNT(*) AS n FROM ${this.t}_turns WHERE conversation_id = ? AND message_id = ?`, [
        conversationId,
        message.id,
      ]);
      if (Number(counts[0]?.n) === 0) input.push(message.content);
      return { conversationId, turnIndex, message, input, resumed };
    });
  }

  async commitTurn(conversationId: string, commit: TurnCommit): Promise<{ committed: boolean }> {
    checkConversationId(conversationId);
    const assistant = encodeStoreJson("assistant", commit.assistant);
    const toolResults = commit.toolResults === undefined ? null : encodeStoreJson("toolResults", commit.toolResults);
    const record = commit.record === undefined ? null : encodeStoreJson("record", commit.record);
    return this.tx(conversationId, async (c, conv) => {
      if (!this.holds(conversationId, conv, commit.fence)) return { committed: false };
      const turnCount = Number(conv.turn_count);
      if (commit.turnIndex !== turnCount) return { committed: false };
      const row = await this.messageRow(c, conversationId, commit.messageId);
      if (row === undefined || row.state !== "in_progress") return { committed: false };
      const [counts] = await c.query<RowDataPacket[]>(`SELECT COUNT(*) AS n FROM ${this.t}_turns WHERE conversation_id = ? AND message_id = ?`, [
        conversationId,
        commit.messageId,
      ]);
      const [posRows] = await c.query<RowDataPacket[]>(`SELECT COALESCE(MAX(pos), -1) + 1 AS next FROM ${this.t}_log WHERE conversation_id = ?`, [conversationId]);
      let pos = Number(posRows[0]?.next);
      const entries: string[] = [];
      if (Number(counts[0]?.n) === 0) entries.push(row.content as string);
      entries.push(assistant);
      if (toolResults !== null) entries.push(toolResults);
      for (const entry of entries) {
        await c.query(`INSERT INTO ${this.t}_log (conversation_id, pos, entry) VALUES (?, ?, ?)`, [conversationId, pos++, entry]);
      }
      await c.query(
        `INSERT INTO ${this.t}_turns (conversation_id, turn_index, message_id, assistant, tool_results, stop_reason) VALUES (?, ?, ?, ?, ?, ?)`,
        [conversationId, commit.turnIndex, commit.messageId, assistant, toolResults, commit.stopReason],
      );
      await c.query(`UPDATE ${this.t}_conversations SET turn_count = turn_count + 1 WHERE conversation_id = ?`, [conversationId]);
      if (commit.answers) {
        await c.query(`UPDATE ${this.t}_messages SET state = 'answered' WHERE conversation_id = ? AND message_id = ?`, [conversationId, commit.messageId]);
      }
      if (record !== null) await c.query(`INSERT INTO ${this.t}_records (conversation_id, record) VALUES (?, ?)`, [conversationId, record]);
      return { committed: true };
    });
  }

  async failMessage(conversationId: string, fence: number, messageId: string, record: JsonValue): Promise<void> {
    checkConversationId(conversationId);
    checkMessageId("messageId", messageId);
    const text = encodeStoreJson("record", record);
    await this.tx(conversationId, async (c, conv) => {
      if (!this.holds(conversationId, conv, fence)) throw new ConversationLeaseLostError(conversationId, fence);
      const row = await this.messageRow(c, conversationId, messageId);
      if (row === undefined || row.state !== "in_progress") throw new InvalidStoreInputError("messageId", "is not the message in progress");
      await c.query(`UPDATE ${this.t}_messages SET state = 'failed', failure = ? WHERE conversation_id = ? AND message_id = ?`, [text, conversationId, messageId]);
      await c.query(`INSERT INTO ${this.t}_records (conversation_id, record) VALUES (?, ?)`, [conversationId, text]);
    });
  }

  async addRecord(conversationId: string, record: JsonValue): Promise<void> {
    checkConversationId(conversationId);
    const text = encodeStoreJson("record", record);
    await this.read((c) => c.query(`INSERT INTO ${this.t}_records (conversation_id, record) VALUES (?, ?)`, [conversationId, text]));
  }

  async records(conversationId: string): Promise<JsonValue[]> {
    checkConversationId(conversationId);
    return this.read(async (c) => {
      const [rows] = await c.query<RowDataPacket[]>(`SELECT record FROM ${this.t}_records WHERE conversation_id = ? ORDER BY id`, [conversationId]);
      return rows.map((r, i) => decodeStoreJson(conversationId, `record ${i}`, r.record));
    });
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}
