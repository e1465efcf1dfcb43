// Blind round K (conformance/README.md): single mutations of this adapter's REAL source, each a
// bug an adopter's own store mapping could carry, written down from the spec (§6) and src/ before
// the kit's checks were read. mutatedEntry (@dispatch-once/test-processes) bundles a copy of
// src/index.ts with the patches applied; src/ itself is never written.
import type { SourceMutant } from "@dispatch-once/test-processes";

export type BlindKMutant = SourceMutant;

export const MUTANTS: readonly BlindKMutant[] = [
  {
    id: "lp-takeover-keeps-fence",
    rule: "LEDGER-4",
    cause: "the takeover branch written as 'hand the row to the new owner' (owner, lease, claimed_at) and the fence bumped only for a re-claim of a released row",
    patches: [
      {
        file: "sql.ts",
        from: "fence            = CASE WHEN ${unk} THEN r.fence ELSE r.fence + 1 END,",
        to: "fence            = CASE WHEN ${unk} OR r.state = 'in_flight' THEN r.fence ELSE r.fence + 1 END,",
      },
    ],
  },
  {
    id: "lp-reclaim-takes-new-request",
    rule: "LEDGER-21",
    cause: "an ORM upsert of the claim that writes every column of the new claim, request included, over a released row",
    patches: [
      {
        file: "sql.ts",
        from: "request          = CASE WHEN r.state <> 'in_flight' AND r.expires_at <= now_ms THEN p_request ELSE r.request END,",
        to: "request          = CASE WHEN r.state = 'released' OR r.expires_at <= now_ms THEN p_request ELSE r.request END,",
      },
    ],
  },
  {
    id: "lp-release-clears-claim-id",
    rule: "LEDGER-27",
    cause: "release shares the finish statement's 'clear the claim columns' SET list, so the released row forgets the claim id it was released under",
    patches: [
      {
        file: "sql.ts",
        from: 'release: statement("release", finish("released", null)),',
        to: 'release: statement("release", finish("released", null).replace("lease_expires_at = NULL", "claim_id = NULL, lease_expires_at = NULL")),',
      },
    ],
  },
  {
    id: "lp-cursor-without-key",
    rule: "LIST-5",
    cause: "a keyset cursor on the timestamp alone (WHERE since > $cursor), the key kept in the cursor but not compared",
    patches: [
      {
        file: "postgres-ledger.ts",
        from: 'where.push(`(${SINCE}, key) > (${param(String(after.since), "::bigint")}, ${param(after.key)})`);',
        to: 'where.push(`${SINCE} > ${param(String(after.since), "::bigint")}`);',
      },
    ],
  },
  {
    id: "lp-resolve-keeps-fence",
    rule: "RESOLVE-5",
    cause: "the operator's resolve UPDATE sets state and outcome but not the fence, as if only owners' claims bumped it",
    patches: [{ file: "sql.ts", from: "SET state = $2, fence = r.fence + 1, result = $3,", to: "SET state = $2, fence = r.fence, result = $3," }],
  },
  {
    id: "lp-renew-any-state",
    rule: "LEDGER-5",
    cause: "renew as an ORM update keyed on (key, fence) only: a finished row's lease column is written back and the renew reports success",
    patches: [
      {
        file: "sql.ts",
        from: "`UPDATE ${t} SET lease_expires_at = ${NOW_MS} + $3::bigint WHERE ${owned} RETURNING lease_expires_at`,",
        to: "`UPDATE ${t} SET lease_expires_at = ${NOW_MS} + $3::bigint WHERE key = $1 AND fence = $2 AND v = 1 RETURNING lease_expires_at`,",
      },
    ],
  },
];
