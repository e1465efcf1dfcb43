// Builds the planted copies of the adapter into plants/out/<name>/ (gitignored): each is the adapter
// with one realistic bug, and a subject that imports it. `node plants/make.mjs`, then
// `npx dispatch-once-conformance --adapter plants/out/<name>/subject.mjs --level ledger --seed 2026 --runs 20`.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";

const src = readFileSync(new URL("../src/nats-ledger.mjs", import.meta.url), "utf8");
const subject = readFileSync(new URL("../subject.mjs", import.meta.url), "utf8");

const PLANTS = {
  // A claim that reads the entry, decides, then writes it without the revision check (a blind put):
  // "create if absent" done as get-then-put, the first thing a KV newcomer writes.
  "claim-blind-put": [
    ["      if (rev === 0) await kv.create(entryName(key), bytes);\n      else await kv.update(entryName(key), bytes, rev);", "      await kv.put(entryName(key), bytes);"],
  ],
  // Leases judged by the client host's clock instead of the server's stamp.
  "client-clock": [
    ["    await kv.put(CLOCK_ENTRY, new Uint8Array(0));\n    const e = await kv.get(CLOCK_ENTRY);\n    if (e === null) throw new LedgerUnavailableError(\"NATS clock entry vanished\");\n    return e.created.getTime();", "    return Date.now();"],
  ],
  // complete/fail/markUnknown/release/renew check the row is in flight but not whose fence it is.
  "finish-ignores-fence": [
    ["    if (cur.row.state !== \"in_flight\" || cur.row.fence !== fence) throw new StaleClaimError(key, fence);", "    if (cur.row.state !== \"in_flight\") throw new StaleClaimError(key, fence);"],
  ],
  // The fence is checked on a read, then the finish is written without the revision: check-then-write.
  "finish-blind-put": [
    ["    await this.#write(kv, key, cur.rev, doc);\n  }\n\n  async renew", "    await kv.put(entryName(key), encodeEntry({ v: 1, key, ...doc }));\n  }\n\n  async renew"],
  ],
  // sweep deletes a forgotten row by name, without the revision it judged (a claim may have re-created it).
  "sweep-blind-delete": [
    ["              await kv.delete(entryName(key), { previousSeq: cur.rev });", "              await kv.delete(entryName(key));"],
  ],
  // Retention handed to the store: the bucket's max_age (KV "ttl") set to retentionMs. It counts from
  // an entry's last write whatever its state, so a quiet in-flight row goes too (LEDGER-13).
  "bucket-ttl": [
    ["await js.views.kv(o.bucket, { history: 1, storage: o.storage, replicas: o.replicas })", "await js.views.kv(o.bucket, { history: 1, storage: o.storage, replicas: o.replicas, ttl: this.retentionMs })"],
  ],
  // Retired claim ids kept apart, one entry per (key, claim id) as a KV newcomer lays them out: the claim
  // reads that entry and then compare-and-sets the row; retire writes that entry and then releases the
  // row. Each step is atomic on its own entry, not together (LEDGER-28's "one atomic step").
  "retire-separate-entry": [
    ["      if (claimId !== undefined && retired[claimId] !== undefined) throw retiredClaimError(key, forgotten ? 0 : row.fence);",
     "      const apart = claimId === undefined ? null : await kv.get(`x.${entryName(key).slice(2)}.${claimId}`);\n      if (claimId !== undefined && (retired[claimId] !== undefined || (apart !== null && apart.operation === \"PUT\" && Number(dec.decode(apart.value)) > now))) throw retiredClaimError(key, forgotten ? 0 : row.fence);"],
    ["      const retired = { ...this.#liveRetired(cur.doc, now), [claimId]: Math.max(cur.doc?.retired?.[claimId] ?? 0, now + this.retentionMs) };",
     "      await kv.put(`x.${entryName(key).slice(2)}.${claimId}`, enc.encode(String(now + this.retentionMs)));\n      const retired = this.#liveRetired(cur.doc, now);"],
    ["      const doc = cur.doc === undefined ? { row: null, retired, request: \"\" } : { row: cur.doc.row, retired, request: cur.doc.request };\n      if (cur.doc?.result !== undefined) doc.result = cur.doc.result;\n      if (cur.doc?.error !== undefined) doc.error = cur.doc.error;\n      await this.#write(kv, key, cur.rev, doc);\n      return { released: false };",
     "      return { released: false };"],
  ],
};

for (const [name, edits] of Object.entries(PLANTS)) {
  let code = src;
  for (const [from, to] of edits) {
    if (code.split(from).length !== 2) throw new Error(`${name}: the text to replace is not found exactly once: ${from.slice(0, 60)}`);
    code = code.replace(from, to);
  }
  const dir = new URL(`out/${name}/`, import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL("nats-ledger.mjs", dir), code);
  writeFileSync(new URL("subject.mjs", dir), subject.replace("./src/nats-ledger.mjs", "./nats-ledger.mjs").replace('name: "ledger-nats (trial)"', `name: "ledger-nats (plant ${name})"`));
  console.log(`plants/out/${name}/subject.mjs`);
}
