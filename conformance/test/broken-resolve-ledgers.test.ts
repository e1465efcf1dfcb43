import { describe, expect, it } from "vitest";
import {
  MemoryLedger,
  decodeListCursor,
  encodeListCursor,
  type AuditEntry,
  type ClaimRequest,
  type ClaimResult,
  type LedgerRow,
  type ListRowsPage,
  type ListRowsQuery,
  type ResolveRequest,
  type ResolvedRow,
} from "@dispatch-once/core";
import { ledgerChecks, memoryLedgerSubject, runChecks, type LedgerSubject } from "../src/index.js";

/**
 * The listing, resolution and audit checks prove their power: each ledger below is the reference
 * MemoryLedger with one planted bug, and the checks of the rule it breaks must reject it.
 */
type Stored = LedgerRow & { expiresAt?: number };
const rowsOf = (ledger: MemoryLedger) => (ledger as unknown as { rows: Map<string, Stored> }).rows;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class ResolvesLiveInFlight extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const row = rowsOf(this).get(request.key);
    if (row?.state === "in_flight") row.leaseExpiresAt = 0; // treats every in-flight row as abandoned
    return super.resolve(request);
  }
}
class KeepsFence extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const written = await super.resolve(request);
    rowsOf(this).get(request.key)!.fence -= 1;
    return { ...written, fence: written.fence - 1 };
  }
}
class IgnoresExpectedFence extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const { expectedFence: _ignored, ...rest } = request;
    return super.resolve(rest);
  }
}
class NotPerformedAsFailed extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    if (request.resolution.outcome !== "not_performed") return super.resolve(request);
    return super.resolve({ ...request, resolution: { outcome: "failed", error: { name: "NotPerformed", message: "not performed" } } });
  }
}
class ReencodesResolvedResult extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const r = request.resolution;
    return super.resolve(r.outcome === "completed" ? { ...request, resolution: { outcome: "completed", result: JSON.stringify(JSON.parse(r.result)) } } : request);
  }
}
class RacyResolve extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const seen = await this.lookup(request.key);
    await sleep(2); // read, await, write: concurrent resolutions all pass the check
    const row = rowsOf(this).get(request.key);
    if (row !== undefined && seen !== undefined) {
      Object.assign(row, { state: "unknown", fence: seen.fence });
      delete (row as { result?: unknown }).result;
    }
    return super.resolve(request);
  }
}
/** RESOLVE-1: white space taken for a name and a reason (a lenient trim-then-default). */
class AcceptsBlankActor extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const blank = (text: string) => text.length > 0 && text.trim().length === 0; // "" is still refused
    return super.resolve({ ...request, ...(blank(request.actor) ? { actor: "unknown operator" } : {}), ...(blank(request.reason) ? { reason: "none given" } : {}) });
  }
}
/** RESOLVE-1: a lenient parse that keeps the members it knows and drops the rest (a misspelt expectedFence settles any claim). */
class DropsUnknownMembers extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const { key, resolution, actor, reason, expectedFence, action } = request;
    const outcome = resolution.outcome === "completed" ? { outcome: resolution.outcome, result: resolution.result } : resolution.outcome === "failed" ? { outcome: resolution.outcome, error: resolution.error } : { outcome: resolution.outcome };
    return super.resolve({ key, resolution: outcome, actor, reason, ...(expectedFence !== undefined && expectedFence >= 1 ? { expectedFence } : {}), ...(action !== undefined ? { action } : {}) });
  }
}
/** RESOLVE-1: a blank actor taken for a name (the reason's check kept): the audit names nobody. */
class AcceptsBlankActorOnly extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const blank = request.actor.length > 0 && request.actor.trim().length === 0;
    return super.resolve(blank ? { ...request, actor: "unknown operator" } : request);
  }
}
/** RESOLVE-1, RESOLVE-4: a request's unknown members dropped (a resolution's own still checked): a misspelt expectedFence settles any claim. */
class DropsUnknownRequestMembers extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const { key, resolution, actor, reason, expectedFence, action } = request;
    return super.resolve({ key, resolution, actor, reason, ...(expectedFence !== undefined ? { expectedFence } : {}), ...(action !== undefined ? { action } : {}) });
  }
}
/** RESOLVE-1, RESOLVE-4: expectedFence read by truthiness (`if (request.expectedFence)`): 0 is taken as absent and settles whatever claim holds the row. */
class ZeroFenceAsAbsent extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const { expectedFence, ...rest } = request;
    return super.resolve(expectedFence === 0 ? rest : request);
  }
}
class NoAudit extends MemoryLedger {
  override async auditTrail(_key: string): Promise<AuditEntry[]> {
    return [];
  }
}
class ListIgnoresState extends MemoryLedger {
  override async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const { state: _ignored, ...rest } = query;
    return super.listRows(rest);
  }
}
class ListNewestFirst extends MemoryLedger {
  override async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const page = await super.listRows(query);
    return { ...page, rows: [...page.rows].reverse() };
  }
}
class ListRepeatsLastRow extends MemoryLedger {
  override async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    const page = await super.listRows(query);
    const before = page.rows.at(-2);
    if (page.cursor === undefined || before === undefined) return page;
    // The cursor points one row too early: every page starts with the previous page's last row.
    const since = before.state === "in_flight" ? before.claimedAt : before.finishedAt;
    decodeListCursor(page.cursor);
    return { ...page, cursor: encodeListCursor(since, before.key) };
  }
}
class ListClampsLimit extends MemoryLedger {
  override async listRows(query: ListRowsQuery = {}): Promise<ListRowsPage> {
    return super.listRows({ ...query, ...(query.limit !== undefined && query.limit > 1000 ? { limit: 1000 } : {}) });
  }
}
class ForgetsConversation extends MemoryLedger {
  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    const result = await super.claim(request);
    if (result.outcome === "claimed" && request.conversationId === undefined) {
      const row = rowsOf(this).get(request.key)!;
      delete row.conversationId;
      delete row.turnIndex;
    }
    return result;
  }
}

const subjectOf = (name: string, Ledger: typeof MemoryLedger): LedgerSubject => memoryLedgerSubject(name, Ledger);

const BROKEN: Array<{ bug: string; ledger: typeof MemoryLedger; rule: string; check: RegExp }> = [
  { bug: "resolvesLiveInFlight", ledger: ResolvesLiveInFlight, rule: "RESOLVE-2", check: /refuses a live in-flight/ },
  { bug: "keepsFence", ledger: KeepsFence, rule: "RESOLVE-5", check: /bumps the fence/ },
  { bug: "ignoresExpectedFence", ledger: IgnoresExpectedFence, rule: "RESOLVE-4", check: /expectedFence/ },
  { bug: "notPerformedAsFailed", ledger: NotPerformedAsFailed, rule: "RESOLVE-3", check: /not_performed releases/ },
  { bug: "reencodesResolvedResult", ledger: ReencodesResolvedResult, rule: "RESOLVE-3", check: /byte-for-byte/ },
  { bug: "racyResolve", ledger: RacyResolve, rule: "RESOLVE-8", check: /exactly one wins/ },
  { bug: "noAudit", ledger: NoAudit, rule: "RESOLVE-7", check: /appends an audit entry/ },
  { bug: "acceptsBlankActor", ledger: AcceptsBlankActor, rule: "RESOLVE-1", check: /without actor or reason/ },
  { bug: "dropsUnknownMembers", ledger: DropsUnknownMembers, rule: "RESOLVE-1", check: /a member it does not have/ },
  { bug: "acceptsBlankActorOnly", ledger: AcceptsBlankActorOnly, rule: "RESOLVE-1", check: /without actor or reason/ },
  { bug: "dropsUnknownRequestMembers", ledger: DropsUnknownRequestMembers, rule: "RESOLVE-1", check: /a member it does not have/ },
  { bug: "zeroFenceAsAbsent", ledger: ZeroFenceAsAbsent, rule: "RESOLVE-1", check: /an expectedFence not from 1/ },
  { bug: "listIgnoresState", ledger: ListIgnoresState, rule: "LIST-1", check: /every given filter/ },
  { bug: "listNewestFirst", ledger: ListNewestFirst, rule: "LIST-2", check: /oldest last transition first/ },
  { bug: "listRepeatsLastRow", ledger: ListRepeatsLastRow, rule: "LIST-5", check: /exactly once/ },
  { bug: "listClampsLimit", ledger: ListClampsLimit, rule: "LIST-4", check: /at most 1000/ },
  { bug: "forgetsConversation", ledger: ForgetsConversation, rule: "LIST-3", check: /re-claims keep them/ },
];

const SEED = 20261201;

async function certify(subject: LedgerSubject, rule?: string) {
  const checks = ledgerChecks(subject, { runs: 20, seed: SEED }).filter((c) => (rule === undefined ? /^(LIST|RESOLVE)-/.test(c.rule) : c.rule === rule));
  return runChecks(checks, { subject: subject.name, seed: SEED, runs: 20 });
}

describe("broken listing, resolution and audit are rejected with the rule they break", () => {
  it("control: the reference ledger passes every LIST and RESOLVE check", async () => {
    const report = await certify(subjectOf("memory-correct", MemoryLedger));
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(report.checks.filter((c) => c.status === "pass").length).toBeGreaterThanOrEqual(18);
  });

  for (const { bug, ledger, rule, check } of BROKEN) {
    it(`${bug} fails ${rule}`, async () => {
      const report = await certify(subjectOf(`memory-${bug}`, ledger), rule);
      expect(report.conforms).toBe(false);
      const failing = report.checks.filter((c) => c.status === "fail" && c.rule === rule);
      const named = failing.find((c) => check.test(c.name));
      expect(named, `a failing ${rule} check matching ${check} (failing: ${failing.map((c) => c.name).join(" | ")})`).toBeDefined();
      expect(named!.error).toBeTruthy();
    });
  }
});
