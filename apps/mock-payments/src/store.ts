import type { Invoice, Operation, Payment } from "./schemas.js";

export type EffectKind = "payment_created" | "payment_voided" | "invoice_created";

/** One effect the server actually performed: the oracle for "exactly once". */
export interface Effect {
  /** Increases by one per effect, never reused (also across clearEffects). */
  seq: number;
  kind: EffectKind;
  account: string;
  /** The Idempotency-Key the request carried (invoices record it even though they ignore it). */
  idempotencyKey: string | null;
  resourceId: string;
  /** The validated request body (for a void: `{ paymentId, reason? }`). */
  payload: Record<string, unknown>;
  /** ISO 8601. */
  at: string;
}

export type NewEffect = Omit<Effect, "seq">;

export interface EffectFilter {
  account?: string;
  kind?: EffectKind;
  idempotencyKey?: string;
}

/** A response as stored under an idempotency key and replayed verbatim. */
export interface StoredResponse {
  status: number;
  contentType: string;
  body: unknown;
}

export interface IdempotencyRecord {
  account: string;
  key: string;
  operation: Operation;
  fingerprint: string;
  /** in_flight: claimed, effect not yet performed; completed: response stored. */
  state: "in_flight" | "completed";
  response: StoredResponse | null;
  createdAt: number;
  expiresAt: number;
}

export interface ClaimInput {
  account: string;
  key: string;
  operation: Operation;
  fingerprint: string;
  now: number;
  expiresAt: number;
}

export type ClaimResult = { claimed: true } | { claimed: false; existing: IdempotencyRecord };

/**
 * Storage for the mock. Every method is synchronous: with one Node process and a synchronous
 * SQLite driver, each call (and each `transaction`) is atomic with respect to other requests.
 */
export interface Store {
  readonly kind: "memory" | "sqlite";
  /**
   * Claim (account, key): if a live record exists return it; otherwise insert an in_flight
   * record. A completed record whose retention has passed counts as absent and is replaced.
   */
  claim(input: ClaimInput): ClaimResult;
  /** Store the response and mark the record completed (called inside the effect's transaction). */
  complete(account: string, key: string, response: StoredResponse): void;
  /**
   * Read (account, key) without changing it: the record a lookup by idempotency key reports.
   * A completed record whose retention has passed (as of `now`) counts as absent, as in claim.
   */
  getRecord(account: string, key: string, now: number): IdempotencyRecord | null;
  /** Drop an in_flight claim whose effect did not happen. */
  release(account: string, key: string): void;
  /** Drop every in_flight claim; at startup these belong to a dead instance that performed nothing. */
  releaseAllInFlight(): number;
  inFlight(): IdempotencyRecord[];
  /** Delete completed records whose retention has passed. */
  purgeExpired(now: number): number;
  /** Run fn atomically: all of its writes happen, or none do. */
  transaction<T>(fn: () => T): T;

  insertPayment(account: string, payment: Payment): void;
  updatePayment(account: string, payment: Payment): void;
  getPayment(account: string, id: string): Payment | null;
  listPayments(account: string): Payment[];
  insertInvoice(account: string, invoice: Invoice): void;
  getInvoice(account: string, id: string): Invoice | null;
  listInvoices(account: string): Invoice[];

  appendEffect(effect: NewEffect): Effect;
  effects(filter?: EffectFilter): Effect[];
  clearEffects(): void;

  /** Forget everything: payments, invoices, idempotency records, effects. */
  reset(): void;
  close(): void;
}

export function matchesEffect(e: Effect, filter: EffectFilter | undefined): boolean {
  if (filter === undefined) return true;
  if (filter.account !== undefined && e.account !== filter.account) return false;
  if (filter.kind !== undefined && e.kind !== filter.kind) return false;
  if (filter.idempotencyKey !== undefined && e.idempotencyKey !== filter.idempotencyKey) return false;
  return true;
}

const recordId = (account: string, key: string) => `${account}\u0000${key}`;

export interface MemoryStoreOptions {
  /**
   * Keep at most this many payments, invoices and effects, the oldest forgotten first (as a log
   * rotates): a long run's memory stays flat. Default: keep everything.
   */
  limit?: number;
}

/**
 * An idempotency record as the memory store keeps it: the response as its JSON text, as the
 * SQLite store keeps it, and the account and key only in the map's id (each was a second copy
 * of a string the id holds). A parsed response body was about a kilobyte per key, and a server
 * under load keeps every key of its retention period.
 */
type KeptRecord = Omit<IdempotencyRecord, "response" | "account" | "key"> & { response: string | null };

const recordOf = (id: string, kept: KeptRecord): IdempotencyRecord => {
  // Neither holds NUL: both come from HTTP header values (the bearer token, Idempotency-Key).
  const split = id.indexOf("\u0000");
  return {
    account: id.slice(0, split),
    key: id.slice(split + 1),
    operation: kept.operation,
    fingerprint: kept.fingerprint,
    state: kept.state,
    response: kept.response === null ? null : (JSON.parse(kept.response) as StoredResponse),
    createdAt: kept.createdAt,
    expiresAt: kept.expiresAt,
  };
};

/** The default store: everything lives in this process and is lost with it. */
export class MemoryStore implements Store {
  readonly kind = "memory" as const;
  /** In claim order, which is expiry order: a new claim of an expired key is inserted anew. */
  private records = new Map<string, KeptRecord>();
  private payments = new Map<string, { account: string; payment: Payment }>();
  private invoices = new Map<string, { account: string; invoice: Invoice }>();
  private effectLog: Effect[] = [];
  private effectSeq = 0;
  /** Undo actions of the running transaction, so a throw leaves no partial write behind. */
  private undo: (() => void)[] | null = null;
  private readonly limit: number;

  constructor(options: MemoryStoreOptions = {}) {
    this.limit = options.limit ?? Number.POSITIVE_INFINITY;
  }

  /** Forget the oldest entries of a map beyond the limit (a Map iterates in insertion order). */
  private trim(map: Map<string, unknown>): void {
    for (const id of map.keys()) {
      if (map.size <= this.limit) return;
      map.delete(id);
    }
  }

  claim(input: ClaimInput): ClaimResult {
    const id = recordId(input.account, input.key);
    const existing = this.records.get(id);
    if (existing !== undefined && !(existing.state === "completed" && existing.expiresAt <= input.now)) {
      return { claimed: false, existing: recordOf(id, existing) };
    }
    // Deleted first so that the new claim goes to the end of the map's order (purgeExpired stops
    // at the first record that has not expired).
    if (existing !== undefined) this.records.delete(id);
    this.records.set(id, {
      operation: input.operation,
      fingerprint: input.fingerprint,
      state: "in_flight",
      response: null,
      createdAt: input.now,
      expiresAt: input.expiresAt,
    });
    return { claimed: true };
  }

  complete(account: string, key: string, response: StoredResponse): void {
    const record = this.records.get(recordId(account, key));
    if (record === undefined) throw new Error(`no claim for key ${key}`);
    const before = { ...record };
    record.state = "completed";
    record.response = JSON.stringify(response);
    this.undo?.push(() => Object.assign(record, before));
  }

  getRecord(account: string, key: string, now: number): IdempotencyRecord | null {
    const id = recordId(account, key);
    const record = this.records.get(id);
    if (record === undefined || (record.state === "completed" && record.expiresAt <= now)) return null;
    return recordOf(id, record);
  }

  release(account: string, key: string): void {
    const id = recordId(account, key);
    if (this.records.get(id)?.state === "in_flight") this.records.delete(id);
  }

  releaseAllInFlight(): number {
    let n = 0;
    for (const [id, r] of this.records) {
      if (r.state === "in_flight") {
        this.records.delete(id);
        n++;
      }
    }
    return n;
  }

  inFlight(): IdempotencyRecord[] {
    return [...this.records].filter(([, r]) => r.state === "in_flight").map(([id, r]) => recordOf(id, r));
  }

  /**
   * Forget the completed records that expired by `now`, oldest first, up to the first that has
   * not: the cost is the number forgotten, not the number kept, so a server can purge often. (A
   * record that a jump of the clock left behind is still never served: claim and getRecord
   * check its expiry.)
   */
  purgeExpired(now: number): number {
    let n = 0;
    for (const [id, r] of this.records) {
      if (r.expiresAt > now) break;
      if (r.state === "completed") {
        this.records.delete(id);
        n++;
      }
    }
    return n;
  }

  transaction<T>(fn: () => T): T {
    if (this.undo !== null) return fn();
    this.undo = [];
    try {
      const result = fn();
      this.undo = null;
      return result;
    } catch (error) {
      const undo = this.undo ?? [];
      this.undo = null;
      for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
      throw error;
    }
  }

  insertPayment(account: string, payment: Payment): void {
    this.payments.set(payment.id, { account, payment: structuredClone(payment) });
    this.undo?.push(() => this.payments.delete(payment.id));
    this.trim(this.payments);
  }

  updatePayment(account: string, payment: Payment): void {
    const previous = this.payments.get(payment.id);
    if (previous === undefined || previous.account !== account) throw new Error(`no payment ${payment.id}`);
    this.payments.set(payment.id, { account, payment: structuredClone(payment) });
    this.undo?.push(() => this.payments.set(payment.id, previous));
  }

  getPayment(account: string, id: string): Payment | null {
    const row = this.payments.get(id);
    return row !== undefined && row.account === account ? structuredClone(row.payment) : null;
  }

  listPayments(account: string): Payment[] {
    return [...this.payments.values()].filter((r) => r.account === account).map((r) => structuredClone(r.payment));
  }

  insertInvoice(account: string, invoice: Invoice): void {
    this.invoices.set(invoice.id, { account, invoice: structuredClone(invoice) });
    this.undo?.push(() => this.invoices.delete(invoice.id));
    this.trim(this.invoices);
  }

  getInvoice(account: string, id: string): Invoice | null {
    const row = this.invoices.get(id);
    return row === undefined || row.account !== account ? null : structuredClone(row.invoice);
  }

  listInvoices(account: string): Invoice[] {
    return [...this.invoices.values()].filter((r) => r.account === account).map((r) => structuredClone(r.invoice));
  }

  appendEffect(effect: NewEffect): Effect {
    const stored: Effect = { seq: ++this.effectSeq, ...structuredClone(effect) };
    this.effectLog.push(stored);
    if (this.effectLog.length > this.limit) this.effectLog.shift();
    this.undo?.push(() => {
      this.effectLog = this.effectLog.filter((e) => e !== stored);
    });
    return structuredClone(stored);
  }

  effects(filter?: EffectFilter): Effect[] {
    return this.effectLog.filter((e) => matchesEffect(e, filter)).map((e) => structuredClone(e));
  }

  clearEffects(): void {
    this.effectLog = [];
  }

  reset(): void {
    this.records.clear();
    this.payments.clear();
    this.invoices.clear();
    this.effectLog = [];
  }

  close(): void {
    // Nothing to release; the state goes with the object.
  }
}

