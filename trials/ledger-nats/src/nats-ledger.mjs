// A Dispatch-Once ledger on NATS JetStream's key-value store, written by an "outside team" from the
// public docs: packages/core/README.md, @dispatch-once/core/internal's doc comments, spec §6 and §10,
// conformance/README.md. Not a workspace package.
//
// Design: one KV entry per ledger key, in one bucket (history 1, file storage, no bucket TTL: a
// bucket-wide max_age would remove in-flight rows, LEDGER-13). The entry holds the row AND the key's
// retired claim ids (LEDGER-28), so that every operation is one compare-and-set on one entry: read
// the entry and its revision, decide, write with `update(key, value, revision)` (or `create` for an
// absent or deleted key), and on "wrong last sequence" start again. No transaction ever spans two
// entries. A key with retired claim ids and no row is held by an entry with `row: null`, which no
// operation shows (LEDGER-28 allows "an entry no operation can see").
//
// KV keys allow only [-/_=.A-Za-z0-9], so a ledger key is stored as base64url of its UTF-16 code
// units (exact for any string, lone surrogates included: LEDGER-30); the header repeats the key.
//
// Clock (LEDGER-20): the store's. JetStream stamps every message with the server's time; an
// operation reads "now" by writing an empty value to the bucket's clock entry and reading that
// entry back (its stamp is at or after the write, and before the read answered). In a cluster it is
// the stream leader's clock: a leader change onto a host with another clock moves "now".
//
// LEDGER-12: every operation settles within operationTimeoutMs (default 5 s), connecting, CAS
// retries and all, and rejects with ledger_unavailable past it. The NATS client BUFFERS what it
// publishes while it is disconnected and sends it after it reconnects: a claim (or any write)
// reported unavailable MAY STILL BE APPLIED, later (LEDGER-26, LEDGER-28 and DISPATCH-16 are how
// its claimant takes or releases it). The compare-and-set makes a late write fail if the entry
// changed meanwhile; one that finds the entry unchanged is applied.
//
// A result larger than 256 KiB is written first to chunk entries of its own (r.<uuid>.<i>, 512 KiB
// each, never rewritten), and the row's CAS names them: the row's write is still the one step that
// completes it. Chunks of a complete that lost its race or was refused are deleted; those of a
// complete that timed out (LEDGER-12: its CAS may still land) are left, and nothing collects them.
//
// LEDGER-14: declared `volatile`. JetStream acknowledges a write once it is in the server's
// (or the replicas') page cache and fsyncs on an interval (2 min by default; `sync_interval` in
// 2.10+), and the client cannot read that setting (2.9 has none; the monitoring port is not the
// client's). A memory-storage bucket is volatile for certain. What this cannot observe: replicas,
// disks' caches, sync settings.
import { randomUUID } from "node:crypto";
import { connect } from "nats";
import {
  DEFAULT_MAX_RESULT_BYTES,
  DEFAULT_RETENTION_MS,
  InvalidLedgerInputError,
  LedgerCorruptError,
  LedgerUnavailableError,
  StaleClaimError,
  checkRetireRequest,
  isDispatchOnceError,
  releasedClaimError,
  retiredClaimError,
} from "@dispatch-once/core";
import {
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerKey,
  checkLedgerLeaseMs,
  checkStoredError,
  checkUnknownReason,
  decodeLedgerRow,
  resultRefusal,
} from "@dispatch-once/core/internal";

/** A 1,024-unit key is 2,731 base64url characters: the subject stays under max_control_line (4 KiB). */
const MAX_KEY_LENGTH = 1024;
/** Requests and stored errors; a result has maxResultBytes. Both fit NATS's default max_payload (1 MiB). */
const MAX_VALUE_BYTES = 128 * 1024;
const LIMITS = { maxKeyLength: MAX_KEY_LENGTH, maxValueBytes: MAX_VALUE_BYTES, storesNul: true };
/** Results above INLINE_RESULT_BYTES go to chunk entries (max_payload is 1 MiB by default). */
const MAX_RESULT_BYTES = 4 * 1024 * 1024;
const INLINE_RESULT_BYTES = 256 * 1024;
const CHUNK_BYTES = 512 * 1024;
const CHUNK_PREFIX = "r.";
const MIN_RETENTION_MS = 60_000;
const BUCKET = /^[A-Za-z0-9_-]{1,64}$/;
const CLOCK_ENTRY = "clock";
const ROW_PREFIX = "k.";
const WRONG_LAST_SEQUENCE = 10071;

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

/** base64url of the key's UTF-16LE code units: exact for every JavaScript string. */
export function entryName(key) {
  const b = Buffer.alloc(key.length * 2);
  for (let i = 0; i < key.length; i++) b.writeUInt16LE(key.charCodeAt(i), i * 2);
  return ROW_PREFIX + b.toString("base64url");
}

/** The stored entry: a JSON header line, then the request, result and error texts as UTF-8. */
export function encodeEntry(doc) {
  const { request = "", result, error, ...header } = doc;
  const parts = [request, result ?? "", error ?? ""].map((s) => enc.encode(s));
  const head = enc.encode(`${JSON.stringify({ ...header, sec: [parts[0].length, result === undefined ? -1 : parts[1].length, error === undefined ? -1 : parts[2].length] })}\n`);
  const out = new Uint8Array(head.length + parts[0].length + parts[1].length + parts[2].length);
  let at = 0;
  for (const p of [head, ...parts]) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The entry's header and texts, or undefined when it cannot be read (the caller raises ledger_corrupt). */
export function parseEntry(bytes) {
  try {
    const nl = bytes.indexOf(10);
    if (nl < 0) return undefined;
    const header = JSON.parse(dec.decode(bytes.subarray(0, nl)));
    if (typeof header !== "object" || header === null || !Array.isArray(header.sec) || header.sec.length !== 3) return undefined;
    let at = nl + 1;
    const texts = header.sec.map((len) => {
      if (len === -1) return undefined;
      if (!Number.isSafeInteger(len) || len < 0 || at + len > bytes.length) throw new Error("bad section");
      const s = dec.decode(bytes.subarray(at, at + len));
      at += len;
      return s;
    });
    if (at !== bytes.length) return undefined;
    const { sec: _s, ...rest } = header;
    return { ...rest, request: texts[0], result: texts[1], error: texts[2] };
  } catch {
    return undefined;
  }
}

class Conflict extends Error {}

export class NatsLedger {
  /**
   * Options: { servers = "127.0.0.1:4222", bucket = "dispatch_once_ledger", retentionMs = 24 h
   * (floor 60 s unless allowShortRetentionForTests), maxResultBytes = 768 KiB (at most that),
   * operationTimeoutMs = 5000 (LEDGER-12's bound for every operation, connecting included),
   * migrate = true (create the bucket; false: touch nothing until the first operation),
   * storage: "file" | "memory" = "file", replicas = 1 }.
   * With migrate: false, open() returns at once and connects on the first operation.
   */
  static async open(options = {}) {
    const bucket = options.bucket ?? "dispatch_once_ledger";
    if (typeof bucket !== "string" || !BUCKET.test(bucket)) throw new InvalidLedgerInputError("bucket", "must match [A-Za-z0-9_-]{1,64}");
    const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
    if (typeof retentionMs !== "number" || !Number.isSafeInteger(retentionMs) || retentionMs <= 0 || (retentionMs < MIN_RETENTION_MS && options.allowShortRetentionForTests !== true)) {
      throw new InvalidLedgerInputError("retentionMs", `must be an integer of at least ${MIN_RETENTION_MS} ms`);
    }
    const maxResultBytes = options.maxResultBytes ?? Math.min(DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES);
    if (!Number.isSafeInteger(maxResultBytes) || maxResultBytes < 1 || maxResultBytes > MAX_RESULT_BYTES) {
      throw new InvalidLedgerInputError("maxResultBytes", `must be an integer in 1..${MAX_RESULT_BYTES} (NATS's max_payload is 1 MiB)`);
    }
    const timeoutMs = options.operationTimeoutMs ?? 5000;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw new InvalidLedgerInputError("operationTimeoutMs", "must be a positive integer");
    const ledger = new NatsLedger({
      servers: options.servers ?? "127.0.0.1:4222",
      bucket,
      retentionMs,
      maxResultBytes,
      timeoutMs,
      create: options.migrate !== false,
      storage: options.storage ?? "file",
      replicas: options.replicas ?? 1,
    });
    if (options.migrate !== false) {
      try {
        await ledger.#bounded("open", () => ledger.#kv());
      } catch (error) {
        await ledger.close().catch(() => {});
        throw error;
      }
    }
    return ledger;
  }

  #o;
  #conn; // Promise<{ nc, kv }> while connecting or connected
  #closed = false;
  retentionMs;

  constructor(o) {
    this.#o = o;
    this.retentionMs = o.retentionMs;
  }

  get capabilities() {
    return {
      durability: "volatile",
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes: this.#o.maxResultBytes,
      supports: { retire: true, listExpiredInFlight: true },
    };
  }

  /** The bucket, connecting on first use; a failed connection is forgotten so the next operation tries again. */
  #kv() {
    if (this.#conn === undefined) {
      const o = this.#o;
      const p = (async () => {
        const nc = await connect({ servers: o.servers, timeout: o.timeoutMs, maxReconnectAttempts: -1, reconnectTimeWait: 250, pingInterval: 10_000 });
        if (this.#closed) {
          nc.close().catch(() => {});
          throw new LedgerUnavailableError("ledger closed while connecting");
        }
        const js = nc.jetstream({ timeout: o.timeoutMs });
        const kv = o.create ? await js.views.kv(o.bucket, { history: 1, storage: o.storage, replicas: o.replicas }) : await js.views.kv(o.bucket, { bindOnly: true });
        return { nc, kv };
      })();
      this.#conn = p;
      p.catch(() => {
        if (this.#conn === p) this.#conn = undefined;
      });
    }
    return this.#conn.then((c) => c.kv);
  }

  async #bounded(what, fn) {
    if (this.#closed) throw new LedgerUnavailableError(`ledger ${this.#o.bucket} is closed`);
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new LedgerUnavailableError(`${what}: no answer from NATS within ${this.#o.timeoutMs} ms (a write it sent may still be applied)`)), this.#o.timeoutMs);
    });
    const work = fn();
    work.catch(() => {});
    try {
      return await Promise.race([work, timeout]);
    } catch (error) {
      if (isDispatchOnceError(error)) throw error;
      throw new LedgerUnavailableError(`${what}: ${error?.message ?? String(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
  }

  /** The store's clock in whole milliseconds: the stamp of a write to the clock entry. */
  async #now(kv) {
    await kv.put(CLOCK_ENTRY, new Uint8Array(0));
    const e = await kv.get(CLOCK_ENTRY);
    if (e === null) throw new LedgerUnavailableError("NATS clock entry vanished");
    return e.created.getTime();
  }

  /** The key's entry: { rev (0 when none), doc (undefined when none or deleted) }; a bad entry is ledger_corrupt. */
  async #read(kv, key) {
    const e = await kv.get(entryName(key));
    if (e === null) return { rev: 0, doc: undefined };
    if (e.operation !== "PUT") return { rev: e.revision, doc: undefined };
    const doc = parseEntry(e.value);
    if (doc === undefined || doc.v !== 1) throw new LedgerCorruptError(key, "the stored entry cannot be decoded");
    if (doc.key !== key) throw new LedgerCorruptError(key, "the stored entry names another key");
    let row;
    if (doc.row !== null) {
      if (typeof doc.row !== "object") throw new LedgerCorruptError(key, "the stored row is not an object");
      const { claimId: _c, expiresAt: _e, resultRef, ...fields } = doc.row;
      const result = resultRef === undefined ? doc.result : await this.#readChunks(kv, key, resultRef);
      row = decodeLedgerRow(key, { v: 1, ...fields, request: doc.request, result, error: doc.error });
      if (doc.row.expiresAt !== undefined && !Number.isSafeInteger(doc.row.expiresAt)) throw new LedgerCorruptError(key, "the stored retention deadline is not an integer");
      if (doc.row.claimId !== undefined && typeof doc.row.claimId !== "string") throw new LedgerCorruptError(key, "the stored claim id is not text");
    }
    return { rev: e.revision, doc, row };
  }

  /** A chunked result: every chunk there and of its length, else ledger_corrupt (doubt never becomes absence). */
  async #readChunks(kv, key, ref) {
    if (typeof ref !== "object" || ref === null || typeof ref.id !== "string" || !/^[0-9a-f-]{36}$/.test(ref.id) || !Number.isSafeInteger(ref.n) || !Number.isSafeInteger(ref.len)) {
      throw new LedgerCorruptError(key, "the stored result reference cannot be decoded");
    }
    const parts = [];
    for (let i = 0; i < ref.n; i++) {
      const e = await kv.get(`${CHUNK_PREFIX}${ref.id}.${i}`);
      if (e === null || e.operation !== "PUT") throw new LedgerCorruptError(key, `chunk ${i} of the stored result is missing`);
      parts.push(e.value);
    }
    const bytes = Buffer.concat(parts);
    if (bytes.length !== ref.len) throw new LedgerCorruptError(key, "the stored result's chunks do not add up to its length");
    try {
      return dec.decode(bytes);
    } catch {
      throw new LedgerCorruptError(key, "the stored result is not UTF-8");
    }
  }

  async #writeChunks(kv, result) {
    const bytes = enc.encode(result);
    const id = randomUUID();
    const n = Math.ceil(bytes.length / CHUNK_BYTES);
    for (let i = 0; i < n; i++) await kv.put(`${CHUNK_PREFIX}${id}.${i}`, bytes.subarray(i * CHUNK_BYTES, (i + 1) * CHUNK_BYTES));
    return { id, n, len: bytes.length };
  }

  async #deleteChunks(kv, ref) {
    if (ref === undefined || typeof ref?.id !== "string") return;
    for (let i = 0; i < ref.n; i++) await kv.purge(`${CHUNK_PREFIX}${ref.id}.${i}`).catch(() => {});
  }

  /** Write the key's entry if it is still at `rev` (0: none or deleted); a lost race is a Conflict. */
  async #write(kv, key, rev, doc) {
    const bytes = encodeEntry({ v: 1, key, ...doc });
    try {
      if (rev === 0) await kv.create(entryName(key), bytes);
      else await kv.update(entryName(key), bytes, rev);
    } catch (error) {
      if (error?.api_error?.err_code === WRONG_LAST_SEQUENCE || /wrong last sequence|key exists/i.test(String(error?.message))) throw new Conflict();
      throw error;
    }
  }

  /** One compare-and-set step on one key, run again from the top while it loses races. */
  #cas(what, key, step) {
    return this.#bounded(what, async () => {
      const kv = await this.#kv();
      for (;;) {
        const now = await this.#now(kv);
        const cur = await this.#read(kv, key);
        try {
          return await step(kv, cur, now);
        } catch (error) {
          if (error instanceof Conflict) continue;
          throw error;
        }
      }
    });
  }

  #forgotten(doc, now) {
    return doc.row !== null && doc.row.state !== "in_flight" && typeof doc.row.expiresAt === "number" && doc.row.expiresAt <= now;
  }

  #liveRetired(doc, now) {
    const out = {};
    for (const [id, until] of Object.entries(doc?.retired ?? {})) if (typeof until === "number" && until > now) out[id] = until;
    return out;
  }

  /** The stored texts and header of a row (claimId and expiresAt stay in the header only). */
  #rowDoc(row, extra) {
    const { request, result, error, ...rest } = row;
    const out = { row: { ...rest, ...extra.row }, request };
    if (extra.result !== undefined) out.result = extra.result;
    else if (result !== undefined && extra.keepTexts) out.result = typeof result === "string" ? result : undefined;
    if (extra.error !== undefined) out.error = extra.error;
    return out;
  }

  async claim(request) {
    const leaseMs = checkClaimRequest(request, LIMITS);
    const { key, toolName, effect, owner, claimId, conversationId, turnIndex } = request;
    return this.#cas("claim", key, async (kv, { rev, doc, row }, now) => {
      const retired = this.#liveRetired(doc, now);
      const forgotten = doc === undefined || doc.row === null || this.#forgotten(doc, now);
      if (claimId !== undefined && retired[claimId] !== undefined) throw retiredClaimError(key, forgotten ? 0 : row.fence);
      const leaseExpiresAt = now + leaseMs;
      const take = async (fence, storedRequest, takeover, keep) => {
        const r = { state: "in_flight", toolName, effect, fence, claimedAt: now, owner, leaseExpiresAt };
        if (claimId !== undefined) r.claimId = claimId;
        const cid = keep?.conversationId ?? conversationId;
        const ti = keep?.turnIndex ?? turnIndex;
        if (cid !== undefined) r.conversationId = cid;
        if (ti !== undefined) r.turnIndex = ti;
        await this.#write(kv, key, rev, { row: r, retired, request: storedRequest });
        return { outcome: "claimed", fence, leaseExpiresAt, takeover, request: storedRequest };
      };
      if (forgotten) return take(doc?.row && row ? row.fence + 1 : 1, request.request, false);
      const stored = doc.row;
      const keep = { conversationId: row.conversationId, turnIndex: row.turnIndex };
      if (row.state === "released") {
        if (claimId !== undefined && stored.claimId === claimId) throw releasedClaimError(key, row.fence);
        return take(row.fence + 1, row.request, false, keep);
      }
      if (row.state === "in_flight") {
        if (claimId !== undefined && stored.claimId === claimId) {
          await this.#write(kv, key, rev, { row: { ...stored, leaseExpiresAt }, retired, request: row.request });
          return { outcome: "claimed", fence: row.fence, leaseExpiresAt, takeover: false, request: row.request };
        }
        if (now < row.leaseExpiresAt) return { outcome: "existing", row };
        if (row.effect === "keyed_write") return take(row.fence + 1, row.request, true, keep);
        const { owner: _o, leaseExpiresAt: _l, ...base } = stored;
        const r = { ...base, state: "unknown", reason: "lease_expired", finishedAt: now, expiresAt: now + this.retentionMs };
        delete r.claimId; // LEDGER-26: the id is over once the row turned unknown
        await this.#write(kv, key, rev, { row: r, retired, request: row.request });
        const { owner: _o2, leaseExpiresAt: _l2, ...shown } = row;
        return { outcome: "existing", row: { ...shown, state: "unknown", reason: "lease_expired", finishedAt: now } };
      }
      return { outcome: "existing", row };
    });
  }

  #checkFence(fence) {
    if (typeof fence !== "number" || !Number.isSafeInteger(fence) || fence < 0) throw new InvalidLedgerInputError("fence", "must be a non-negative integer");
  }

  /** The in-flight row `fence` owns; anything else is stale (LEDGER-5). */
  #owned(key, fence, cur, now) {
    if (cur.doc === undefined || cur.doc.row === null || this.#forgotten(cur.doc, now)) throw new StaleClaimError(key, fence);
    if (cur.row.state !== "in_flight" || cur.row.fence !== fence) throw new StaleClaimError(key, fence);
    return cur.row;
  }

  /** Finish the in-flight row: owner and lease dropped, finishedAt and expiresAt set; the claim id kept (LEDGER-27). */
  async #finish(kv, key, cur, now, state, texts) {
    const { owner: _o, leaseExpiresAt: _l, ...base } = cur.doc.row;
    const r = { ...base, state, finishedAt: now, expiresAt: now + this.retentionMs };
    if (texts.reason !== undefined) r.reason = texts.reason;
    if (texts.resultRef !== undefined) r.resultRef = texts.resultRef;
    const doc = { row: r, retired: this.#liveRetired(cur.doc, now), request: cur.row.request };
    if (texts.result !== undefined) doc.result = texts.result;
    if (texts.error !== undefined) doc.error = texts.error;
    await this.#write(kv, key, cur.rev, doc);
  }

  async renew(key, fence, leaseMs) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    const ms = checkLedgerLeaseMs(leaseMs);
    return this.#cas("renew", key, async (kv, cur, now) => {
      const row = this.#owned(key, fence, cur, now);
      const leaseExpiresAt = now + ms;
      await this.#write(kv, key, cur.rev, { row: { ...cur.doc.row, leaseExpiresAt }, retired: this.#liveRetired(cur.doc, now), request: row.request });
      return { leaseExpiresAt };
    });
  }

  async complete(key, fence, result) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    const refusal = resultRefusal(key, result, this.#o.maxResultBytes, LIMITS);
    const chunked = refusal === undefined && Buffer.byteLength(result, "utf8") > INLINE_RESULT_BYTES;
    let ref;
    let kvUsed;
    try {
      return await this.#cas("complete", key, async (kv, cur, now) => {
        this.#owned(key, fence, cur, now);
        if (refusal !== undefined) throw refusal;
        kvUsed = kv;
        if (!chunked) return this.#finish(kv, key, cur, now, "completed", { result });
        ref ??= await this.#writeChunks(kv, result);
        return this.#finish(kv, key, cur, now, "completed", { resultRef: ref });
      });
    } catch (error) {
      // Refused for certain (stale fence): the chunks are nobody's. Unavailable: the CAS may still land, keep them.
      if (ref !== undefined && isDispatchOnceError(error, "stale_claim")) await this.#deleteChunks(kvUsed, ref);
      throw error;
    }
  }

  async fail(key, fence, error) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    const text = checkStoredError(error, LIMITS);
    return this.#cas("fail", key, async (kv, cur, now) => {
      this.#owned(key, fence, cur, now);
      await this.#finish(kv, key, cur, now, "failed", { error: text });
    });
  }

  async markUnknown(key, fence, reason) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    checkUnknownReason(reason, LIMITS);
    return this.#cas("markUnknown", key, async (kv, cur, now) => {
      this.#owned(key, fence, cur, now);
      await this.#finish(kv, key, cur, now, "unknown", { reason });
    });
  }

  async release(key, fence) {
    checkLedgerKey(key, LIMITS);
    this.#checkFence(fence);
    return this.#cas("release", key, async (kv, cur, now) => {
      this.#owned(key, fence, cur, now);
      await this.#finish(kv, key, cur, now, "released", {});
    });
  }

  async lookup(key) {
    checkLedgerKey(key, LIMITS);
    return this.#bounded("lookup", async () => {
      const kv = await this.#kv();
      const now = await this.#now(kv);
      const cur = await this.#read(kv, key); // decoded first: a corrupt row is corrupt even when it reads old (LEDGER-11)
      if (cur.doc === undefined || cur.doc.row === null || this.#forgotten(cur.doc, now)) return undefined;
      return cur.row;
    });
  }

  async retire(key, claimId, options) {
    const release = checkRetireRequest(key, claimId, options);
    checkLedgerKey(key, LIMITS);
    return this.#cas("retire", key, async (kv, cur, now) => {
      const retired = { ...this.#liveRetired(cur.doc, now), [claimId]: Math.max(cur.doc?.retired?.[claimId] ?? 0, now + this.retentionMs) };
      if (release && cur.row !== undefined && !this.#forgotten(cur.doc, now) && cur.row.state === "in_flight" && cur.doc.row.claimId === claimId) {
        const { owner: _o, leaseExpiresAt: _l, ...base } = cur.doc.row;
        await this.#write(kv, key, cur.rev, { row: { ...base, state: "released", finishedAt: now, expiresAt: now + this.retentionMs }, retired, request: cur.row.request });
        return { released: true };
      }
      const doc = cur.doc === undefined ? { row: null, retired, request: "" } : { row: cur.doc.row, retired, request: cur.doc.request };
      if (cur.doc?.result !== undefined) doc.result = cur.doc.result;
      if (cur.doc?.error !== undefined) doc.error = cur.doc.error;
      await this.#write(kv, key, cur.rev, doc);
      return { released: false };
    });
  }

  /** Every row entry of the bucket (a full scan: KV has no secondary index). */
  async #allKeys(kv) {
    const names = [];
    for await (const name of await kv.keys(`${ROW_PREFIX}>`)) names.push(name);
    return names.map((n) => {
      const b = Buffer.from(n.slice(ROW_PREFIX.length), "base64url");
      let s = "";
      for (let i = 0; i + 1 < b.length; i += 2) s += String.fromCharCode(b.readUInt16LE(i));
      return s;
    });
  }

  async listExpiredInFlight(options = {}) {
    checkExpiredInFlightOptions(options);
    const olderThanMs = options.olderThanMs ?? 0;
    const limit = options.limit ?? 100;
    if (typeof olderThanMs !== "number" || !Number.isSafeInteger(olderThanMs) || olderThanMs < 0) throw new InvalidLedgerInputError("olderThanMs", "must be a non-negative integer");
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) throw new InvalidLedgerInputError("limit", "must be an integer in 1..1000");
    return this.#bounded("listExpiredInFlight", async () => {
      const kv = await this.#kv();
      const now = await this.#now(kv);
      const found = [];
      for (const key of await this.#allKeys(kv)) {
        const cur = await this.#read(kv, key);
        if (cur.row !== undefined && cur.row.state === "in_flight" && cur.row.leaseExpiresAt <= now - olderThanMs) found.push(cur.row);
      }
      found.sort((a, b) => a.leaseExpiresAt - b.leaseExpiresAt || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      return found.slice(0, limit);
    });
  }

  async sweep() {
    return this.#bounded("sweep", async () => {
      const kv = await this.#kv();
      let removed = 0;
      for (const key of await this.#allKeys(kv)) {
        for (;;) {
          const now = await this.#now(kv);
          const cur = await this.#read(kv, key); // a row that does not decode is ledger_corrupt, never removed (LEDGER-11)
          if (cur.doc === undefined) break;
          const retired = this.#liveRetired(cur.doc, now);
          const rowGone = cur.doc.row === null || this.#forgotten(cur.doc, now);
          try {
            if (rowGone && Object.keys(retired).length === 0) {
              await kv.delete(entryName(key), { previousSeq: cur.rev });
            } else if (rowGone && cur.doc.row !== null) {
              await this.#write(kv, key, cur.rev, { row: null, retired, request: "" });
            } else break;
          } catch (error) {
            if (error instanceof Conflict || error?.api_error?.err_code === WRONG_LAST_SEQUENCE) continue;
            throw error;
          }
          if (cur.doc.row !== null) {
            removed++;
            await this.#deleteChunks(kv, cur.doc.row.resultRef);
          }
          break;
        }
      }
      return removed;
    });
  }

  async close() {
    if (this.#closed) return;
    this.#closed = true;
    const conn = this.#conn;
    if (conn === undefined) return;
    // Within the bound, whatever the server does: a silent server never answers the close's flush.
    let timer;
    await Promise.race([
      conn.then(({ nc }) => nc.close()).catch(() => {}),
      new Promise((resolve) => {
        timer = setTimeout(resolve, this.#o.timeoutMs);
      }),
    ]);
    clearTimeout(timer);
  }
}

export const newBucketName = (prefix) => `${prefix}_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
