import type BetterSqlite3 from "better-sqlite3";
import type { Invoice, Operation, Payment } from "./schemas.js";
import { matchesEffect } from "./store.js";
import type {
  ClaimInput,
  ClaimResult,
  Effect,
  EffectFilter,
  IdempotencyRecord,
  NewEffect,
  Store,
  StoredResponse,
} from "./store.js";

const SCHEMA = `
CREATE TABLE IF NOT EXISTS payments (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account TEXT NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS payments_by_account ON payments(account, seq);
CREATE TABLE IF NOT EXISTS invoices (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  account TEXT NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS invoices_by_account ON invoices(account, seq);
CREATE TABLE IF NOT EXISTS idempotency_records (
  account TEXT NOT NULL,
  key TEXT NOT NULL,
  operation TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
  response TEXT,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (account, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS effects (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  account TEXT NOT NULL,
  idempotency_key TEXT,
  resource_id TEXT NOT NULL,
  payload TEXT NOT NULL,
  at TEXT NOT NULL
);
`;

interface RecordRow {
  account: string;
  key: string;
  operation: string;
  fingerprint: string;
  state: "in_flight" | "completed";
  response: string | null;
  created_at: number;
  expires_at: number;
}

interface EffectRow {
  seq: number;
  kind: Effect["kind"];
  account: string;
  idempotency_key: string | null;
  resource_id: string;
  payload: string;
  at: string;
}

/**
 * SQLite storage (better-sqlite3, WAL). A committed transaction survives the process, so a
 * restarted server keeps payments, invoices, stored responses and the effect log. Only one
 * server may use a file at a time: at open, in_flight claims are dropped as a dead instance's.
 */
export async function openSqliteStore(path: string): Promise<Store> {
  const mod = await import("better-sqlite3");
  const Database = (mod.default ?? mod) as unknown as typeof BetterSqlite3;
  const db = new Database(path);
  db.pragma("journal_mode = WAL");
  // NORMAL in WAL mode loses nothing when the process dies; only an OS crash could.
  db.pragma("synchronous = NORMAL");
  db.pragma("busy_timeout = 5000");
  db.exec(SCHEMA);
  return new SqliteStore(db);
}

class SqliteStore implements Store {
  readonly kind = "sqlite" as const;
  private readonly claimTx: BetterSqlite3.Transaction<(input: ClaimInput) => ClaimResult>;
  private readonly stmt;

  constructor(private readonly db: BetterSqlite3.Database) {
    this.stmt = {
      getRecord: db.prepare<[string, string], RecordRow>("SELECT * FROM idempotency_records WHERE account = ? AND key = ?"),
      deleteRecord: db.prepare<[string, string]>("DELETE FROM idempotency_records WHERE account = ? AND key = ?"),
      insertRecord: db.prepare(
        "INSERT INTO idempotency_records (account, key, operation, fingerprint, state, response, created_at, expires_at) VALUES (@account, @key, @operation, @fingerprint, 'in_flight', NULL, @now, @expiresAt)",
      ),
      completeRecord: db.prepare<[string, string, string]>(
        "UPDATE idempotency_records SET state = 'completed', response = ? WHERE account = ? AND key = ? AND state = 'in_flight'",
      ),
      releaseRecord: db.prepare<[string, string]>(
        "DELETE FROM idempotency_records WHERE account = ? AND key = ? AND state = 'in_flight'",
      ),
      releaseAll: db.prepare("DELETE FROM idempotency_records WHERE state = 'in_flight'"),
      inFlight: db.prepare<[], RecordRow>("SELECT * FROM idempotency_records WHERE state = 'in_flight'"),
      purge: db.prepare<[number]>("DELETE FROM idempotency_records WHERE state = 'completed' AND expires_at <= ?"),
      insertPayment: db.prepare<[string, string, string]>("INSERT INTO payments (id, account, doc) VALUES (?, ?, ?)"),
      updatePayment: db.prepare<[string, string, string]>("UPDATE payments SET doc = ? WHERE id = ? AND account = ?"),
      getPayment: db.prepare<[string, string], { doc: string }>("SELECT doc FROM payments WHERE id = ? AND account = ?"),
      listPayments: db.prepare<[string], { doc: string }>("SELECT doc FROM payments WHERE account = ? ORDER BY seq"),
      insertInvoice: db.prepare<[string, string, string]>("INSERT INTO invoices (id, account, doc) VALUES (?, ?, ?)"),
      getInvoice: db.prepare<[string, string], { doc: string }>("SELECT doc FROM invoices WHERE id = ? AND account = ?"),
      listInvoices: db.prepare<[string], { doc: string }>("SELECT doc FROM invoices WHERE account = ? ORDER BY seq"),
      insertEffect: db.prepare(
        "INSERT INTO effects (kind, account, idempotency_key, resource_id, payload, at) VALUES (@kind, @account, @idempotencyKey, @resourceId, @payload, @at)",
      ),
      allEffects: db.prepare<[], EffectRow>("SELECT * FROM effects ORDER BY seq"),
    };
    this.claimTx = db.transaction((input: ClaimInput): ClaimResult => {
      const row = this.stmt.getRecord.get(input.account, input.key);
      if (row !== undefined) {
        if (!(row.state === "completed" && row.expires_at <= input.now)) {
          return { claimed: false, existing: toRecord(row) };
        }
        this.stmt.deleteRecord.run(input.account, input.key);
      }
      this.stmt.insertRecord.run(input);
      return { claimed: true };
    });
  }

  claim(input: ClaimInput): ClaimResult {
    return this.claimTx.immediate(input);
  }

  complete(account: string, key: string, response: StoredResponse): void {
    const info = this.stmt.completeRecord.run(JSON.stringify(response), account, key);
    if (info.changes !== 1) throw new Error(`no in_flight claim for key ${key}`);
  }

  getRecord(account: string, key: string, now: number): IdempotencyRecord | null {
    const row = this.stmt.getRecord.get(account, key);
    if (row === undefined || (row.state === "completed" && row.expires_at <= now)) return null;
    return toRecord(row);
  }

  release(account: string, key: string): void {
    this.stmt.releaseRecord.run(account, key);
  }

  releaseAllInFlight(): number {
    return this.stmt.releaseAll.run().changes;
  }

  inFlight(): IdempotencyRecord[] {
    return this.stmt.inFlight.all().map(toRecord);
  }

  purgeExpired(now: number): number {
    return this.stmt.purge.run(now).changes;
  }

  transaction<T>(fn: () => T): T {
    if (this.db.inTransaction) return fn();
    return this.db.transaction(fn).immediate();
  }

  insertPayment(account: string, payment: Payment): void {
    this.stmt.insertPayment.run(payment.id, account, JSON.stringify(payment));
  }

  updatePayment(account: string, payment: Payment): void {
    const info = this.stmt.updatePayment.run(JSON.stringify(payment), payment.id, account);
    if (info.changes !== 1) throw new Error(`no payment ${payment.id}`);
  }

  getPayment(account: string, id: string): Payment | null {
    const row = this.stmt.getPayment.get(id, account);
    return row === undefined ? null : (JSON.parse(row.doc) as Payment);
  }

  listPayments(account: string): Payment[] {
    return this.stmt.listPayments.all(account).map((r) => JSON.parse(r.doc) as Payment);
  }

  insertInvoice(account: string, invoice: Invoice): void {
    this.stmt.insertInvoice.run(invoice.id, account, JSON.stringify(invoice));
  }

  getInvoice(account: string, id: string): Invoice | null {
    const row = this.stmt.getInvoice.get(id, account);
    return row === undefined ? null : (JSON.parse(row.doc) as Invoice);
  }

  listInvoices(account: string): Invoice[] {
    return this.stmt.listInvoices.all(account).map((r) => JSON.parse(r.doc) as Invoice);
  }

  appendEffect(effect: NewEffect): Effect {
    const info = this.stmt.insertEffect.run({ ...effect, payload: JSON.stringify(effect.payload) });
    return { seq: Number(info.lastInsertRowid), ...structuredClone(effect) };
  }

  effects(filter?: EffectFilter): Effect[] {
    const out: Effect[] = [];
    for (const row of this.stmt.allEffects.all()) {
      const e: Effect = {
        seq: row.seq,
        kind: row.kind,
        account: row.account,
        idempotencyKey: row.idempotency_key,
        resourceId: row.resource_id,
        payload: JSON.parse(row.payload) as Record<string, unknown>,
        at: row.at,
      };
      if (matchesEffect(e, filter)) out.push(e);
    }
    return out;
  }

  clearEffects(): void {
    this.db.exec("DELETE FROM effects");
  }

  reset(): void {
    this.db.exec("DELETE FROM effects; DELETE FROM payments; DELETE FROM invoices; DELETE FROM idempotency_records;");
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}

function toRecord(row: RecordRow): IdempotencyRecord {
  return {
    account: row.account,
    key: row.key,
    operation: row.operation as Operation,
    fingerprint: row.fingerprint,
    state: row.state,
    response: row.response === null ? null : (JSON.parse(row.response) as StoredResponse),
    createdAt: row.created_at,
    expiresAt: row.expires_at,
  };
}
