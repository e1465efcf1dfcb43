import type { Ledger } from "@dispatch-once/core";
import { ConformanceFailure, type LedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";

/**
 * Deaths on step 1's first call on the AI SDK profile (ai-sdk-scenario.ts `death.on`
 * `first_call`). The chat route's process dies on the turn's first call, before the payments API
 * or after it accepted the call, its claim left in flight; the client re-sends or regenerates to
 * a new process, whose step 1 meets the dead call's key. An invoice is an `unkeyed_write` (the
 * payments API deduplicates nothing): its lapsed claim is no take-over, it becomes `unknown`
 * (LEDGER-7), and the app is told the outcome is unknown.
 *
 * The planted bug: a ledger that, where a lapsed unkeyed claim would become `unknown`, releases
 * it for a re-run instead when no other row of its turn finished ("the turn never got past its
 * first call: its process died before it called anything"). The re-run makes a second invoice
 * when the dead process had made one. A death on a loop's step-2 call meets it only in a turn none
 * of whose step-1 rows finished (each one unknown): the same scenarios with the step-1 and
 * approved-call deaths left out passed it, 100 runs at seed 258 (the planted release fired once,
 * without a second invoice). The seed is one whose first run has a step-1 death after an invoice.
 */
const SEARCH_BUDGET_MS = 400_000;
const SEED = 258;

/** How often the planted ledger released a lapsed unkeyed claim (the search reached it). */
const planted = { count: 0 };

function releasesFirstLapsedClaim(inner: Ledger): Ledger {
  const ledger = Object.create(inner) as Ledger;
  ledger.claim = async (request) => {
    const claim = await inner.claim(request);
    if (claim.outcome !== "existing" || claim.row.state !== "unknown" || claim.row.reason !== "lease_expired") return claim;
    const { conversationId, turnIndex } = claim.row;
    const page = await inner.listRows!({ conversationId, limit: 1000 });
    const finished = page.rows.some((r) => r.key !== request.key && r.turnIndex === turnIndex && (r.state === "completed" || r.state === "failed"));
    if (finished) return claim;
    planted.count++;
    await inner.resolve!({ key: request.key, resolution: { outcome: "not_performed" }, actor: "lapsed-claim sweep", reason: "nothing of its turn finished: its process died before it called anything" });
    return inner.claim(request);
  };
  return ledger;
}

const planted_subject: LedgerSubject = {
  ...memory,
  async create(options) {
    const fixture = await memory.create(options);
    return { ...fixture, ledger: releasesFirstLapsedClaim(fixture.ledger), reopen: async () => releasesFirstLapsedClaim(await fixture.reopen()) };
  },
};

describe("the ai-sdk side with a process death on step 1's first call", () => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`CONF-2 a ledger that releases a lapsed unkeyed claim when nothing of its turn finished makes the dead process's invoice again (${name}); the real ledger passes the same scenario`, async () => {
      planted.count = 0;
      const error = await runEndToEnd(planted_subject, {
        provider: "ai-sdk",
        runs: 200,
        seed: SEED,
        timeLimitMs: SEARCH_BUDGET_MS,
        ...(shrinkTimeLimitMs !== undefined ? { shrinkTimeLimitMs } : {}),
      }).catch((e: unknown) => e);
      expect(planted.count).toBeGreaterThan(0);
      const message = expectReadable(error, SEED);
      expect(message).toMatch(/breaks CONF-2\): create_invoice for chat-\d "c\d message \d" \(.*\): performed 2 times for one intent: invoice_created/);
      expect(message).toMatch(/DIES after the payments API accepted create_invoice key \S+, before the ledger completed \((step 1|approved call)\)/);
      if (shrinkTimeLimitMs === undefined) expect(message).not.toMatch(/shrinking cut short/);
      const cx = (error as ConformanceFailure).counterexample!;
      let stats: Record<string, number> = {};
      await runEndToEnd(memory, { provider: "ai-sdk", runs: 200, seed: cx.seed, path: cx.path, onStats: (s) => (stats = s) });
      expect(stats).toMatchObject({ property_cases: 1, replayed_passed: 1 });
      expect(stats.deaths_after_effect).toBeGreaterThan(0);
    }, 900_000);
  }
});
