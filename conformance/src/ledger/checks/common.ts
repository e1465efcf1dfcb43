import type { Ledger, LedgerEffect, LedgerRow, StoredError } from "@dispatch-once/core";
import { ConformanceFailure, must } from "../../failure.js";
import type { LedgerFixture, SubjectCapability } from "../../types.js";
import type { LedgerCheckContext } from "../context.js";
import { LEASE_MS, claimNew, claimRequest, describeRow, mustBeExisting, mustBeStored, requestFor, rowEssence, short, textDiff } from "../support.js";

/**
 * A deterministic check before it is bound to a subject. Every check is exported by name from its
 * concern's file (and from "@dispatch-once/conformance/ledger"), so an adapter's suite can run one
 * on its own: `registerChecks("leases", [bindLedgerCheck(leaseLength, subject)], { describe, it })`.
 */
export interface LedgerCheckSpec {
  rule: string;
  name: string;
  needs?: SubjectCapability[];
  /** Real time the check waits at least (ms): it measures leases or retention on the store's clock. */
  waitsMs?: number;
  run(ctx: LedgerCheckContext): Promise<void>;
}

export const EFFECTS: LedgerEffect[] = ["keyed_write", "unkeyed_write"];

export const DECLINED: StoredError = {
  name: "CardDeclinedError",
  message: "Karte abgelehnt: «insufficient_funds» 💳",
  code: "card_declined",
  details: { decline_code: "insufficient_funds", attempts: [1, 2, { at: "2026-11-29T18:00:00Z" }], note: null },
};

/** JSON texts whose exact bytes a careless store changes (re-serialising, trimming, normalising). */
export const TRICKY_RESULTS: ReadonlyArray<{ label: string; text: string }> = [
  { label: "compact object", text: '{"id":"pay_1","amount":1200,"currency":"EUR"}' },
  { label: "odd whitespace and member order", text: '{ "b" : 1 ,\n\t"a" :[ ],\r\n "c":{}  }\n' },
  { label: "leading and trailing spaces", text: '   "padded"   ' },
  { label: "raw non-ASCII", text: '"café – naïve – 東京 – Ωμέγα"' },
  { label: "astral characters", text: '{"emoji":"😀🧪🏳️‍🌈","math":"𝔘𝔫𝔦𝔠𝔬𝔡𝔢"}' },
  { label: "escaped unicode text kept escaped", text: '"caf\\u00e9 \\ud83d\\ude00 \\u0000 \\u001f"' },
  { label: "line and paragraph separators", text: '"a\u2028b\u2029c"' },
  { label: "combining marks (not NFC-normalised)", text: '"e\u0301 vs \u00e9, A\u030a vs \u00c5"' },
  { label: "zero-width and BOM-like characters", text: '"\u200b\u200d\ufeffx"' },
  { label: "numbers as written", text: "[1.0, 1e2, 1E+2, -0, 0.10, 12345678901234567890123, 1e-7]" },
  { label: "duplicate member names", text: '{"a":1,"a":2}' },
  { label: "scalars", text: "null" },
  { label: "escaped solidus and quotes", text: '"\\/\\"\\\\\\b\\f\\n\\r\\t"' },
  { label: "deep nesting (400 levels)", text: `${"[".repeat(200)}{"deep":${"[".repeat(199)}true${"]".repeat(199)}}${"]".repeat(200)}` },
];

/**
 * Request texts whose exact bytes a careless store changes (LEDGER-21): a JSON column type
 * re-encodes them, a normalising or re-encoding driver changes their characters, a sized column
 * truncates them. Every one is a JSON text, as a dispatcher's request is; the ledger must not care.
 */
export const TRICKY_REQUESTS: ReadonlyArray<{ label: string; text: string }> = [
  { label: "compact text", text: '{"amount":4200,"currency":"EUR","payee":"acct_991"}' },
  { label: "odd whitespace, member order and number spelling", text: '{ "payee" : "acct_991",\n\t"amount" : 4200.0 ,\r\n "currency":"EUR", "n":[1e2,-0,0.10] }' },
  { label: "escapes kept escaped", text: '{"memo":"caf\\u00e9 \\ud83d\\ude00 \\u0000 \\u001f \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"}' },
  { label: "raw 3-byte UTF-8 characters", text: '{"memo":"東京 – €100 – ☕ – ｶﾀｶﾅ – ✓ – №7"}' },
  { label: "astral characters", text: '{"memo":"😀🧪🏳️‍🌈 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"}' },
  { label: "combining marks (not NFC-normalised)", text: '{"name":"e\u0301 vs \u00e9, A\u030a vs \u00c5"}' },
  { label: "line and paragraph separators, zero-width and BOM-like characters", text: '{"memo":"a\u2028b\u2029c \u200b\u200d\ufeffx"}' },
  { label: "duplicate member names", text: '{"a":1,"a":2}' },
  { label: "leading and trailing whitespace", text: '  {"padded":true}\n' },
  { label: "a request over 64 KiB", text: bigResult(100 * 1024) },
];

/** A JSON string text of exactly `bytes` UTF-8 bytes (>= 2), made mostly of multi-byte characters. */
export function jsonTextOfBytes(bytes: number): string {
  let body = "";
  let size = 2; // the quotes
  while (size + 4 <= bytes - 3) {
    body += "😀";
    size += 4;
  }
  while (size + 2 <= bytes) {
    body += "é";
    size += 2;
  }
  if (size < bytes) body += "a";
  return `"${body}"`;
}

export function bigResult(maxBytes: number): string {
  // At most maxBytes UTF-8 bytes, and within one item (about 90 bytes) of it: the ~900 KB check asks
  // for just under a ledger's declared maxResultBytes, and a text over it is refused, rightly.
  const head = '{"items": [\n';
  const tail = "\n]}";
  const items: string[] = [];
  let size = Buffer.byteLength(head) + Buffer.byteLength(tail);
  for (let i = 0; ; i++) {
    const item = `{"i":${i},"name":"Zahlung №${i} – ✓ 😀","memo":"  spaced\\tout  ","v":${(i * 1.5).toFixed(1)}}`;
    const grown = size + Buffer.byteLength(item) + (items.length > 0 ? 2 : 0);
    if (grown > maxBytes) break;
    items.push(item);
    size = grown;
  }
  return `${head}${items.join(",\n")}${tail}`;
}

/** Requires `got` to be `expected` byte for byte; names the claimant's own request when that is what came back. */
export function mustRequest(got: unknown, expected: string, what: string, own?: string): void {
  if (got === expected) return;
  const note = own !== undefined && own !== expected && got === own ? " (it is the claimant's own request, not the stored one)" : "";
  throw new ConformanceFailure(`${what}: the request is not byte-for-byte the one the row must carry${note}: ${textDiff(expected, got)}`);
}

/** lookup and the stored row (raw.read) both carry `expected` as the row's request. */
export async function mustKeepRequest(fixture: LedgerFixture, ledger: Ledger, key: string, expected: string, what: string, own?: string): Promise<void> {
  mustRequest((await lookupMust(ledger, key, what)).request, expected, `${what}, via lookup`, own);
  const raw = await fixture.raw.read(key);
  if (raw === undefined) throw new ConformanceFailure(`${what}: raw.read finds no stored row for ${short(key)}`);
  mustRequest(raw.request, expected, `${what}, the stored row (raw.read)`, own);
}

/** `n` concurrent claims, each sending its own request; the winner must get `stored` back and every loser see it. */
export async function raceKeepsRequest(ledgers: Ledger[], key: string, n: number, stored: string, what: string): Promise<number> {
  const sent = Array.from({ length: n }, (_, i) => requestFor(`racer-${i}`));
  const results = await Promise.all(sent.map((text, i) => ledgers[i % ledgers.length]!.claim(claimRequest(key, `racer-${i}`, "keyed_write", LEASE_MS, text))));
  const winners = results.flatMap((r, i) => (r.outcome === "claimed" ? [{ r, i }] : []));
  must(winners.length === 1, `${what}: ${winners.length} of ${n} concurrent claims won, exactly one must`);
  const { r, i } = winners[0]!;
  if (r.outcome !== "claimed") throw new Error("unreachable");
  mustRequest(r.request, stored, `${what}: the winner (racer-${i})`, sent[i]);
  for (const [j, other] of results.entries()) {
    if (other.outcome === "existing") mustRequest(other.row.request, stored, `${what}: the row seen by loser racer-${j}`, sent[j]);
  }
  return r.fence;
}

export async function lookupMust(ledger: Ledger, key: string, what: string): Promise<LedgerRow> {
  const row = await ledger.lookup(key);
  if (row === undefined) throw new ConformanceFailure(`${what}: lookup finds no row for ${short(key)}`);
  return row;
}

export async function snapshot(fixture: LedgerFixture, key: string) {
  const viaLookup = await fixture.ledger.lookup(key);
  const raw = await fixture.raw.read(key);
  // The stored request is part of the row: an operation that "changes nothing" keeps it too (LEDGER-21).
  return {
    lookup: viaLookup === undefined ? undefined : { ...rowEssence(viaLookup), lease: leaseOf(viaLookup), request: viaLookup.request },
    raw: raw === undefined ? undefined : { ...rowEssence(raw), lease: leaseOf(raw), request: raw.request },
  };
}

export function leaseOf(row: LedgerRow | Record<string, unknown>): unknown {
  const lease = (row as Record<string, unknown>).leaseExpiresAt;
  return lease === undefined || lease === null ? undefined : Number(lease);
}

/** Runs `n` concurrent claims of one key spread over `ledgers`; requires exactly one winner. */
export async function raceOneWinner(
  fixture: LedgerFixture,
  ledgers: Ledger[],
  key: string,
  n: number,
  effect: LedgerEffect,
  what: string,
): Promise<{ fence: number; owner: string; takeover: boolean }> {
  const results = await Promise.all(
    Array.from({ length: n }, (_, i) => ledgers[i % ledgers.length]!.claim(claimRequest(key, `racer-${i}`, effect))),
  );
  const winners = results.flatMap((r, i) => (r.outcome === "claimed" ? [{ ...r, owner: `racer-${i}` }] : []));
  if (winners.length !== 1) {
    throw new ConformanceFailure(
      `${what}: ${winners.length} of ${n} concurrent claims of one key won (${winners
        .slice(0, 6)
        .map((w) => `${w.owner} fence=${w.fence}`)
        .join(", ")}), exactly one must`,
    );
  }
  const winner = winners[0]!;
  for (const [i, r] of results.entries()) {
    if (r.outcome === "claimed") continue;
    must(
      r.row.state === "in_flight" && r.row.fence === winner.fence && r.row.owner === winner.owner,
      `${what}: loser racer-${i} saw ${describeRow(r.row)}, expected the winner's in_flight row (fence ${winner.fence}, owner ${winner.owner})`,
    );
  }
  await mustBeStored(fixture, key, { state: "in_flight", fence: winner.fence, owner: winner.owner }, what);
  return winner;
}

export async function instances(fixture: LedgerFixture, count: number): Promise<Ledger[]> {
  const list = [fixture.ledger];
  while (list.length < count) list.push(await fixture.reopen());
  return list;
}

export async function finishAs(
  ledger: Ledger,
  key: string,
  fence: number,
  state: "completed" | "failed" | "unknown" | "released",
): Promise<void> {
  if (state === "completed") await ledger.complete(key, fence, '{"ok":true}');
  else if (state === "failed") await ledger.fail(key, fence, DECLINED);
  else if (state === "unknown") await ledger.markUnknown(key, fence, "tool_error");
  else await ledger.release(key, fence);
}

export type OwnerOp = "complete" | "fail" | "renew" | "markUnknown" | "release";
export const OWNER_OPS: OwnerOp[] = ["complete", "fail", "renew", "markUnknown", "release"];

export function ownerOp(ledger: Ledger, op: OwnerOp, key: string, fence: number): Promise<unknown> {
  switch (op) {
    case "complete":
      return ledger.complete(key, fence, '{"stale":true}');
    case "fail":
      return ledger.fail(key, fence, { name: "Error", message: "stale failure" });
    case "renew":
      return ledger.renew(key, fence, LEASE_MS);
    case "markUnknown":
      return ledger.markUnknown(key, fence, "stale_unknown");
    case "release":
      return ledger.release(key, fence);
  }
}


export async function completeAndReplay(fixture: LedgerFixture, ledgers: Ledger[], key: string, text: string, label: string): Promise<void> {
  const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
  await fixture.ledger.complete(key, fence, text);
  for (const ledger of ledgers) {
    const row = mustBeExisting(await ledger.claim(claimRequest(key, "owner-b", "keyed_write")), `replay claim (${label})`);
    mustResultBytes(row, text, `${label} via claim`);
    mustResultBytes(await lookupMust(ledger, key, label), text, `${label} via lookup`);
  }
  const raw = await mustBeStored(fixture, key, { state: "completed", fence }, label);
  must(raw.result === text, `${label}: stored result differs from the completed bytes: ${textDiff(text, raw.result)}`);
}

export function mustResultBytes(row: LedgerRow, text: string, what: string): void {
  if (row.state !== "completed") throw new ConformanceFailure(`${what}: expected a completed row, got ${describeRow(row)}`);
  if (row.result !== text) throw new ConformanceFailure(`${what}: replayed result is not byte-for-byte the stored one: ${textDiff(text, row.result)}`);
}

