// Blind round K (conformance/README.md): single mutations of this adapter's REAL source (its Lua
// scripts and the TypeScript that calls them), each a bug an adopter's own store mapping could
// carry, written down from the spec (§6) and src/ before the kit's checks were read.
// mutatedEntry (@dispatch-once/test-processes) bundles a copy of src/index.ts with the patches
// applied; src/ itself is never written.
import type { SourceMutant } from "@dispatch-once/test-processes";

export type BlindKMutant = SourceMutant;

export const MUTANTS: readonly BlindKMutant[] = [
  {
    id: "lr-takeover-keeps-fence",
    rule: "LEDGER-4",
    cause: "the Lua branch of a keyed_write takeover copies the expired row's fence instead of bumping it",
    patches: [
      {
        file: "scripts.ts",
        from: "  redis.call('SET', key, claimed(nextFence, nreq, request, tool))\n  index(lease)\n  relist(nil, 'in_flight', nows)  -- a new claimedAt: the member moves\n  return {'claimed', nextFence, lease, 1, request}",
        to: "  redis.call('SET', key, claimed(fence, nreq, request, tool))\n  index(lease)\n  relist(nil, 'in_flight', nows)  -- a new claimedAt: the member moves\n  return {'claimed', fence, lease, 1, request}",
      },
    ],
  },
  {
    id: "lr-lease-from-node-clock",
    rule: "LEDGER-20",
    cause: "the claim's lease end computed in Node (Date.now() + leaseMs) and passed to the script, compared there with the server's TIME",
    patches: [
      { file: "scripts.ts", from: "local lease = string.format('%d', now + tonumber(ARGV[4]))\nlocal function claimed", to: "local lease = ARGV[4]\nlocal function claimed" },
      { file: "redis-ledger.ts", from: "const leaseMs = String(checkClaimRequest(request, STORE_LIMITS));", to: "const leaseMs = String(Date.now() + checkClaimRequest(request, STORE_LIMITS));" },
    ],
  },
  {
    id: "lr-ttl-from-claim",
    rule: "LEDGER-13",
    cause: "the row's TTL set once, when the claim writes it (SET ... PX retention NX), and kept by the finish (KEEPTTL): retention counted from the claim, and an in-flight row that expires",
    patches: [
      {
        file: "scripts.ts",
        from: "old = redis.pcall('SET', key, claimed('1', string.format('%d', #ARGV[6]), ARGV[6], ARGV[1]), 'NX', 'GET')",
        to: "old = redis.pcall('SET', key, claimed('1', string.format('%d', #ARGV[6]), ARGV[6], ARGV[1]), 'PX', ARGV[5], 'NX', 'GET')",
      },
      { file: "scripts.ts", from: "string.sub(old, q + 1, nl + nreq) .. ARGV[4],\n        'PX', ARGV[3])", to: "string.sub(old, q + 1, nl + nreq) .. ARGV[4],\n        'KEEPTTL')" },
    ],
  },
  {
    id: "lr-expiry-not-audited",
    rule: "RESOLVE-7",
    cause: "the script's expiry of an unkeyed_write claim to unknown (lease_expired) written without the audit append the owner's markUnknown has",
    patches: [{ file: "scripts.ts", from: "audit_entry(ARGV[3], 'lease_expired', 'in_flight', 'unknown', fence, 'lease_expired')\n", to: "" }],
  },
  {
    id: "lr-result-re-encoded",
    rule: "LEDGER-10",
    cause: "the result passed through JSON.parse/JSON.stringify on its way to the store (a client wrapper that 'normalises' JSON values)",
    patches: [
      {
        file: "redis-ledger.ts",
        from: 'await this.finish(key, fence, "completed", result);',
        to: 'await this.finish(key, fence, "completed", JSON.stringify(JSON.parse(result)));',
      },
    ],
  },
  {
    id: "lr-in-flight-index-kept",
    rule: "LEDGER-25",
    cause: "the finish's fast path forgets the ZREM of the in-flight index: finished rows stay in it with their old lease as score",
    patches: [{ file: "scripts.ts", from: "      redis.pcall('ZREM', idx, key)\n      return {'ok', nows}", to: "      return {'ok', nows}" }],
  },
];
