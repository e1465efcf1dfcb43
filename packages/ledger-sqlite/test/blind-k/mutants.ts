// Blind round K (conformance/README.md): single mutations of this adapter's REAL source, each a
// bug an adopter's own store mapping could carry, written down from the spec (§6) and src/ before
// the kit's checks were read. mutatedEntry (@dispatch-once/test-processes) bundles a copy of
// src/index.ts with the patches applied; src/ itself is never written.
import type { SourceMutant } from "@dispatch-once/test-processes";

export type BlindKMutant = SourceMutant;

export const MUTANTS: readonly BlindKMutant[] = [
  {
    id: "ls-process-clock",
    rule: "LEDGER-20",
    cause: "every time read from the Node process (Date.now() registered as a SQL function) instead of SQLite's julianday('now'), while the ledger still declares clock: 'store'",
    patches: [
      {
        file: "sqlite-ledger.ts",
        from: "    if (options.now !== undefined) {\n      const clock = options.now;",
        to: "    if (true) {\n      const clock = options.now ?? Date.now;",
      },
    ],
  },
  {
    id: "ls-ties-by-rowid",
    rule: "LIST-2",
    cause: "the listing's ties broken by insertion order (rowid / seq), the natural order of the table, instead of by key",
    patches: [{ file: "sqlite-ledger.ts", from: "ORDER BY ${SINCE}, key LIMIT ?", to: "ORDER BY ${SINCE}, seq LIMIT ?" }],
  },
  {
    id: "ls-forgotten-lends-request",
    rule: "LEDGER-21",
    cause: "the re-claim keeps a released row's stored request without asking whether the row is past its retention (forgotten, LEDGER-19)",
    patches: [
      {
        file: "sqlite-ledger.ts",
        from: 'const keep = !forgotten && (row.state === "released" || row.state === "in_flight");',
        to: 'const keep = row.state === "released" || row.state === "in_flight";',
      },
    ],
  },
  {
    id: "ls-deferred-claim",
    rule: "LEDGER-1",
    cause: "the read-decide-write claim in a DEFERRED transaction (better-sqlite3's default db.transaction()): two processes both read the released row before either takes the write lock",
    patches: [
      {
        file: "sqlite-ledger.ts",
        from: "this.claimTransaction = db.transaction((request: ClaimRequest) => this.claimLocked(request)).immediate;",
        to: "this.claimTransaction = db.transaction((request: ClaimRequest) => this.claimLocked(request)).deferred;",
      },
    ],
  },
  {
    id: "ls-renew-live-only",
    rule: "LEDGER-16",
    cause: "renew written as 'extend a live lease' (WHERE lease_expires_at > now): an owner whose lease ran out, with nobody acting on it, is refused",
    patches: [
      {
        file: "sqlite-ledger.ts",
        from: "renew: db.prepare(`UPDATE ${t} SET lease_expires_at = ${now} + ? ${owned} RETURNING lease_expires_at`),",
        to: "renew: db.prepare(`UPDATE ${t} SET lease_expires_at = ${now} + ? ${owned} AND lease_expires_at > ${now} RETURNING lease_expires_at`),",
      },
    ],
  },
];
