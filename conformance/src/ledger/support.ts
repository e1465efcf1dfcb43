import type { ClaimRequest, ClaimResult, Ledger, LedgerEffect, LedgerRow } from "@dispatch-once/core";
import { ConformanceFailure, must, show } from "../failure.js";
import type { LedgerFixture, LedgerSubject } from "../types.js";

/** Long enough that no lease expires by itself during a check: expiry is always explicit (raw.expireLease). */
export const LEASE_MS = 10 * 60 * 1000;

export const TOOL_FOR: Record<LedgerEffect, string> = {
  keyed_write: "create_payment",
  unkeyed_write: "send_sms",
};

/** Waits `ms` of real time: the checks that measure leases and retention on the store's clock wait for real. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/**
 * The request a claimant sends when a check does not name one (LEDGER-21). It differs per owner,
 * so a ledger that keeps or returns the wrong claimant's request is visible wherever it is read.
 */
export function requestFor(owner: string): string {
  return `{"payee":"acct_991","amount":4200,"currency":"EUR","memo":"attempt by ${owner}"}`;
}

export function claimRequest(key: string, owner: string, effect: LedgerEffect, leaseMs = LEASE_MS, request = requestFor(owner)): ClaimRequest {
  return { key, toolName: TOOL_FOR[effect], effect, owner, leaseMs, request };
}

/** A claim request carrying a claim id (LEDGER-26), or none. */
export function claimWithId(key: string, owner: string, effect: LedgerEffect, claimId: string | undefined, leaseMs?: number): ClaimRequest {
  const request = claimRequest(key, owner, effect, leaseMs);
  return claimId === undefined ? request : { ...request, claimId };
}

export async function withFixture<T>(
  subject: LedgerSubject,
  fn: (fixture: LedgerFixture) => Promise<T>,
  options?: { retentionMs?: number; maxResultBytes?: number },
): Promise<T> {
  const fixture = await subject.create(options);
  try {
    return await fn(fixture);
  } finally {
    await fixture.destroy();
  }
}

export function mustBeClaimed(result: ClaimResult, what: string): Extract<ClaimResult, { outcome: "claimed" }> {
  if (result.outcome !== "claimed") {
    throw new ConformanceFailure(`${what}: expected outcome "claimed", got existing ${describeRow(result.row)}`);
  }
  must(
    Number.isSafeInteger(result.fence) && result.fence > 0,
    `${what}: fence must be a positive safe integer, got ${show(result.fence)}`,
  );
  return result;
}

export function mustBeExisting(result: ClaimResult, what: string): LedgerRow {
  if (result.outcome !== "existing") {
    throw new ConformanceFailure(
      `${what}: expected outcome "existing", got "claimed" (fence ${result.fence}, takeover ${result.takeover})`,
    );
  }
  return result.row;
}

/** Claims and requires a win; returns the fence. */
export async function claimNew(ledger: Ledger, key: string, owner: string, effect: LedgerEffect): Promise<number> {
  return mustBeClaimed(await ledger.claim(claimRequest(key, owner, effect)), `claim ${short(key)} by ${owner}`).fence;
}

export function describeRow(row: LedgerRow | Record<string, unknown> | undefined): string {
  if (row === undefined) return "no row";
  const r = row as Record<string, unknown>;
  const bits = [`${String(r.state)}`, `fence=${String(r.fence)}`];
  if (r.state === "in_flight" && r.owner !== undefined) bits.push(`owner=${String(r.owner)}`);
  if (r.state === "completed") bits.push(`result=${show(r.result)}`);
  if (r.state === "failed") bits.push(`error=${show(r.error)}`);
  if (r.state === "unknown") bits.push(`reason=${String(r.reason)}`);
  return bits.join(" ");
}

export function short(key: string): string {
  return key.slice(0, 8);
}

/** Reads the row through the test hook and requires state and fence (fence may be a string or bigint in storage). */
export async function mustBeStored(
  fixture: LedgerFixture,
  key: string,
  expected: { state: string; fence?: number; owner?: string },
  what: string,
): Promise<Record<string, unknown>> {
  const raw = await fixture.raw.read(key);
  if (raw === undefined) throw new ConformanceFailure(`${what}: raw.read finds no stored row for ${short(key)}`);
  must(
    raw.state === expected.state,
    `${what}: stored row state is ${show(raw.state)}, expected ${show(expected.state)} (${describeRow(raw)})`,
  );
  if (expected.fence !== undefined) {
    must(
      Number(raw.fence) === expected.fence,
      `${what}: stored row fence is ${show(raw.fence)}, expected ${expected.fence}`,
    );
  }
  if (expected.owner !== undefined) {
    must(raw.owner === expected.owner, `${what}: stored owner is ${show(raw.owner)}, expected ${show(expected.owner)}`);
  }
  return raw;
}

/** Comparable projection of a row (what every replay must see), ignoring clock fields. */
export function rowEssence(row: LedgerRow | Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (row === undefined) return undefined;
  const r = row as Record<string, unknown>;
  const out: Record<string, unknown> = {
    key: r.key,
    state: r.state,
    fence: Number(r.fence),
    effect: r.effect,
    toolName: r.toolName,
  };
  if (r.state === "in_flight") out.owner = r.owner;
  if (r.state === "completed") out.result = r.result;
  if (r.state === "failed") out.error = r.error;
  if (r.state === "unknown") out.reason = r.reason;
  return out;
}

/** Where two texts first differ, in bytes and UTF-16 units: what a byte-for-byte failure (LEDGER-10, LEDGER-21) prints. */
export function textDiff(expected: string, actual: unknown): string {
  if (typeof actual !== "string") return `expected a string of ${Buffer.byteLength(expected)} bytes, got ${show(actual)}`;
  let i = 0;
  while (i < expected.length && i < actual.length && expected[i] === actual[i]) i++;
  return `lengths ${Buffer.byteLength(expected)} vs ${Buffer.byteLength(actual)} bytes, first difference at UTF-16 index ${i}: expected ${show(expected.slice(i, i + 24))}, got ${show(actual.slice(i, i + 24))}`;
}
