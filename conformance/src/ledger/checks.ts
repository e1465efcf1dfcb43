import type { Ledger, LedgerEffect, LedgerRow, StoredError } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, mustRejectWith, show } from "../failure.js";
import type { LedgerFixture, LedgerSubject, SubjectCapability } from "../types.js";
import {
  LEASE_MS,
  TOOL_FOR,
  claimNew,
  claimRequest,
  describeRow,
  freshKey,
  mustBeClaimed,
  mustBeExisting,
  mustBeStored,
  requestFor,
  rowEssence,
  short,
  textDiff,
  withFixture,
} from "./support.js";

/** A deterministic check before it is bound to a subject. */
export interface LedgerCheckSpec {
  rule: string;
  name: string;
  needs?: SubjectCapability[];
  run(subject: LedgerSubject): Promise<void>;
}

const EFFECTS: LedgerEffect[] = ["keyed_write", "unkeyed_write"];

const DECLINED: StoredError = {
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

function bigResult(approxBytes: number): string {
  const items: string[] = [];
  let size = 20;
  let i = 0;
  while (size < approxBytes) {
    const item = `{"i":${i},"name":"Zahlung №${i} – ✓ 😀","memo":"  spaced\\tout  ","v":${(i * 1.5).toFixed(1)}}`;
    items.push(item);
    size += Buffer.byteLength(item) + 2;
    i++;
  }
  return `{"items": [\n${items.join(",\n")}\n]}`;
}

/** Requires `got` to be `expected` byte for byte; names the claimant's own request when that is what came back. */
function mustRequest(got: unknown, expected: string, what: string, own?: string): void {
  if (got === expected) return;
  const note = own !== undefined && own !== expected && got === own ? " (it is the claimant's own request, not the stored one)" : "";
  throw new ConformanceFailure(`${what}: the request is not byte-for-byte the one the row must carry${note}: ${textDiff(expected, got)}`);
}

/** lookup and the stored row (raw.read) both carry `expected` as the row's request. */
async function mustKeepRequest(fixture: LedgerFixture, ledger: Ledger, key: string, expected: string, what: string, own?: string): Promise<void> {
  mustRequest((await lookupMust(ledger, key, what)).request, expected, `${what}, via lookup`, own);
  const raw = await fixture.raw.read(key);
  if (raw === undefined) throw new ConformanceFailure(`${what}: raw.read finds no stored row for ${short(key)}`);
  mustRequest(raw.request, expected, `${what}, the stored row (raw.read)`, own);
}

/** `n` concurrent claims, each sending its own request; the winner must get `stored` back and every loser see it. */
async function raceKeepsRequest(ledgers: Ledger[], key: string, n: number, stored: string, what: string): Promise<number> {
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

async function lookupMust(ledger: Ledger, key: string, what: string): Promise<LedgerRow> {
  const row = await ledger.lookup(key);
  if (row === undefined) throw new ConformanceFailure(`${what}: lookup finds no row for ${short(key)}`);
  return row;
}

async function snapshot(fixture: LedgerFixture, key: string) {
  const viaLookup = await fixture.ledger.lookup(key);
  const raw = await fixture.raw.read(key);
  // The stored request is part of the row: an operation that "changes nothing" keeps it too (LEDGER-21).
  return {
    lookup: viaLookup === undefined ? undefined : { ...rowEssence(viaLookup), lease: leaseOf(viaLookup), request: viaLookup.request },
    raw: raw === undefined ? undefined : { ...rowEssence(raw), lease: leaseOf(raw), request: raw.request },
  };
}

function leaseOf(row: LedgerRow | Record<string, unknown>): unknown {
  const lease = (row as Record<string, unknown>).leaseExpiresAt;
  return lease === undefined || lease === null ? undefined : Number(lease);
}

/** Runs `n` concurrent claims of one key spread over `ledgers`; requires exactly one winner. */
async function raceOneWinner(
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

async function instances(fixture: LedgerFixture, count: number): Promise<Ledger[]> {
  const list = [fixture.ledger];
  while (list.length < count) list.push(await fixture.reopen());
  return list;
}

async function finishAs(
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

type OwnerOp = "complete" | "fail" | "renew" | "markUnknown" | "release";
const OWNER_OPS: OwnerOp[] = ["complete", "fail", "renew", "markUnknown", "release"];

function ownerOp(ledger: Ledger, op: OwnerOp, key: string, fence: number): Promise<unknown> {
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

/** Every deterministic ledger check, in rule order. */
export const LEDGER_CHECK_SPECS: LedgerCheckSpec[] = [
  // LEDGER-1 -----------------------------------------------------------------
  {
    rule: "LEDGER-1",
    name: "exactly one of 64 concurrent claims of one key wins",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          await raceOneWinner(fixture, [fixture.ledger], freshKey(), 64, effect, `64 claims (${effect})`);
        }
      }),
  },
  {
    rule: "LEDGER-1",
    name: "exactly one of 64 concurrent claims of one key wins across 4 instances",
    needs: ["sharedAcrossProcesses"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const ledgers = await instances(fixture, 4);
        for (const effect of EFFECTS) {
          await raceOneWinner(fixture, ledgers, freshKey(), 64, effect, `64 claims over 4 instances (${effect})`);
        }
      }),
  },
  {
    rule: "LEDGER-1",
    name: "exactly one of 32 concurrent takeovers of an expired keyed_write claim wins",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const first = await claimNew(fixture.ledger, key, "owner-dead", "keyed_write");
        await fixture.raw.expireLease(key);
        const ledgers = subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
        const winner = await raceOneWinner(fixture, ledgers, key, 32, "keyed_write", "32 takeovers");
        must(winner.takeover, `the takeover winner must report takeover: true`);
        must(winner.fence > first, `takeover fence ${winner.fence} must exceed ${first}`);
      }),
  },
  {
    rule: "LEDGER-1",
    name: "exactly one of 32 concurrent re-claims of a released key wins",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const first = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        await fixture.ledger.release(key, first);
        const ledgers = subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
        const winner = await raceOneWinner(fixture, ledgers, key, 32, "keyed_write", "32 re-claims after release");
        must(winner.fence > first, `re-claim fence ${winner.fence} must exceed ${first}`);
      }),
  },
  {
    rule: "LEDGER-1",
    name: "concurrent claims of 32 different keys all win",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const keys = Array.from({ length: 32 }, (_, i) => freshKey(String(i)));
        const results = await Promise.all(
          keys.map((k, i) => fixture.ledger.claim(claimRequest(k, `owner-${i}`, i % 2 ? "keyed_write" : "unkeyed_write"))),
        );
        results.forEach((r, i) => mustBeClaimed(r, `claim of distinct key #${i}`));
      }),
  },
  // LEDGER-2 -----------------------------------------------------------------
  {
    rule: "LEDGER-2",
    name: "a claimed outcome is backed by a stored in_flight row with owner, effect, tool name and lease",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const claimed = mustBeClaimed(
            await fixture.ledger.claim(claimRequest(key, "owner-a", effect)),
            `first claim (${effect})`,
          );
          must(!claimed.takeover, `a first claim must report takeover: false`);
          const raw = await mustBeStored(fixture, key, { state: "in_flight", fence: claimed.fence, owner: "owner-a" }, "stored row");
          must(raw.effect === effect && raw.toolName === TOOL_FOR[effect], `stored effect/toolName wrong: ${show(raw)}`);
          const row = await lookupMust(fixture.ledger, key, "lookup after claim");
          mustEqual(
            rowEssence(row),
            { key, state: "in_flight", fence: claimed.fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" },
            "lookup after claim",
          );
          must(row.state === "in_flight" && row.leaseExpiresAt === claimed.leaseExpiresAt,
            `lookup leaseExpiresAt ${show((row as { leaseExpiresAt?: unknown }).leaseExpiresAt)} differs from the claim's ${claimed.leaseExpiresAt}`);
        }
      }),
  },
  {
    rule: "LEDGER-2",
    name: "a claim that finds a row stores nothing and keeps the first owner",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        const before = await snapshot(fixture, key);
        mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "second claim");
        mustEqual(await snapshot(fixture, key), before, "row after a losing claim");
        await mustBeStored(fixture, key, { state: "in_flight", fence, owner: "owner-a" }, "stored row");
      }),
  },
  // LEDGER-3 -----------------------------------------------------------------
  {
    rule: "LEDGER-3",
    name: "an absent key has no row until claimed",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        mustEqual(await fixture.ledger.lookup(key), undefined, "lookup of an unclaimed key");
        mustEqual(await fixture.raw.read(key), undefined, "raw.read of an unclaimed key");
      }),
  },
  {
    rule: "LEDGER-3",
    name: "complete, fail, markUnknown and release move in_flight to completed, failed, unknown and released",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          for (const state of ["completed", "failed", "unknown", "released"] as const) {
            const key = freshKey();
            const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
            await finishAs(fixture.ledger, key, fence, state);
            const row = await lookupMust(fixture.ledger, key, `lookup after ${state}`);
            const expected: Record<string, unknown> = { key, state, fence, effect, toolName: TOOL_FOR[effect] };
            if (state === "completed") expected.result = '{"ok":true}';
            if (state === "failed") expected.error = DECLINED;
            if (state === "unknown") expected.reason = "tool_error";
            mustEqual(rowEssence(row), expected, `row after ${state} (${effect})`);
            await mustBeStored(fixture, key, { state, fence }, `stored row after ${state} (${effect})`);
          }
        }
      }),
  },
  {
    rule: "LEDGER-3",
    name: "completed, failed and unknown rows are never claimable again",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          for (const state of ["completed", "failed", "unknown"] as const) {
            const key = freshKey();
            const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
            await finishAs(fixture.ledger, key, fence, state);
            const expected = rowEssence(await lookupMust(fixture.ledger, key, "lookup"));
            for (let i = 0; i < 3; i++) {
              const row = mustBeExisting(
                await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect)),
                `re-claim #${i} of a ${state} ${effect} row`,
              );
              mustEqual(rowEssence(row), expected, `row returned to re-claim #${i} of a ${state} row`);
            }
          }
        }
      }),
  },
  {
    rule: "LEDGER-3",
    name: "a released row is claimed again by a new claim (takeover: false)",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await fixture.ledger.release(key, fence);
          const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "claim after release");
          must(!again.takeover, "a claim of a released row is not a takeover");
          await mustBeStored(fixture, key, { state: "in_flight", fence: again.fence, owner: "owner-b" }, "row after re-claim");
        }
      }),
  },
  {
    rule: "LEDGER-3",
    name: "a fresh instance over the same store sees every row unchanged (restart)",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const keys: string[] = [];
        for (const state of ["in_flight", "completed", "failed", "unknown", "released"] as const) {
          for (const effect of EFFECTS) {
            const key = freshKey();
            keys.push(key);
            const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
            if (state !== "in_flight") await finishAs(fixture.ledger, key, fence, state);
          }
        }
        const before = await Promise.all(keys.map(async (k) => rowEssence(await fixture.ledger.lookup(k))));
        const reopened = await fixture.reopen();
        for (const [i, key] of keys.entries()) {
          mustEqual(rowEssence(await reopened.lookup(key)), before[i], `row ${short(key)} seen after restart`);
        }
      }),
  },
  // LEDGER-4 -----------------------------------------------------------------
  {
    rule: "LEDGER-4",
    name: "the fence starts at 1 and increases by one across 5 release and re-claim cycles",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        let last = 0;
        for (let i = 0; i < 5; i++) {
          const fence = await claimNew(fixture.ledger, key, `owner-${i}`, "keyed_write");
          must(fence === last + 1, `claim #${i} got fence ${fence}, expected ${last + 1} (the previous fence + 1)`);
          await mustBeStored(fixture, key, { state: "in_flight", fence }, `row after claim #${i}`);
          await fixture.ledger.release(key, fence);
          last = fence;
        }
      }),
  },
  {
    rule: "LEDGER-4",
    name: "the fence increases by one across 4 takeovers of expired keyed_write claims",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        let last = await claimNew(fixture.ledger, key, "owner-0", "keyed_write");
        for (let i = 1; i <= 4; i++) {
          await fixture.raw.expireLease(key);
          const taken = mustBeClaimed(
            await fixture.ledger.claim(claimRequest(key, `owner-${i}`, "keyed_write")),
            `takeover #${i}`,
          );
          must(taken.fence === last + 1, `takeover #${i} got fence ${taken.fence}, expected ${last + 1}`);
          last = taken.fence;
        }
        await fixture.ledger.complete(key, last, "1");
        mustEqual((await lookupMust(fixture.ledger, key, "lookup")).fence, last, "completed row's fence");
      }),
  },
  {
    rule: "LEDGER-4",
    name: "the fence keeps increasing after a restart",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const first = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        await fixture.ledger.release(key, first);
        const reopened = await fixture.reopen();
        const second = await claimNew(reopened, key, "owner-b", "keyed_write");
        must(second === first + 1, `after restart the fence went from ${first} to ${second}, expected ${first + 1}`);
      }),
  },
  // LEDGER-5 -----------------------------------------------------------------
  {
    rule: "LEDGER-5",
    name: "after a takeover the stale owner's complete, fail, renew, markUnknown and release are refused and change nothing",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const op of OWNER_OPS) {
          const key = freshKey(op);
          const stale = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
          await fixture.raw.expireLease(key);
          const current = mustBeClaimed(
            await fixture.ledger.claim(claimRequest(key, "owner-new", "keyed_write")),
            "takeover",
          ).fence;
          const before = await snapshot(fixture, key);
          await mustRejectWith(ownerOp(fixture.ledger, op, key, stale), "stale_claim", `${op} by the stale owner (fence ${stale})`);
          mustEqual(await snapshot(fixture, key), before, `row after the stale owner's ${op}`);
          // The new owner's claim is intact.
          await fixture.ledger.complete(key, current, '"new owner"');
          mustEqual(rowEssence(await fixture.ledger.lookup(key))?.result, '"new owner"', "new owner's result");
        }
      }),
  },
  {
    rule: "LEDGER-5",
    name: "a fence that was never issued is refused and changes nothing",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const op of OWNER_OPS) {
          const key = freshKey(op);
          const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
          const before = await snapshot(fixture, key);
          for (const wrong of [fence + 1, fence + 1000]) {
            await mustRejectWith(ownerOp(fixture.ledger, op, key, wrong), "stale_claim", `${op} with fence ${wrong} (held: ${fence})`);
            mustEqual(await snapshot(fixture, key), before, `row after ${op} with fence ${wrong}`);
          }
        }
      }),
  },
  {
    rule: "LEDGER-5",
    name: "operations on a finished or released row are refused, even with its own fence",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const state of ["completed", "failed", "unknown", "released"] as const) {
          for (const op of OWNER_OPS) {
            const key = freshKey(`${state}-${op}`);
            const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
            await finishAs(fixture.ledger, key, fence, state);
            const before = await snapshot(fixture, key);
            await mustRejectWith(ownerOp(fixture.ledger, op, key, fence), "stale_claim", `${op} on a ${state} row`);
            mustEqual(await snapshot(fixture, key), before, `${state} row after ${op}`);
          }
        }
      }),
  },
  {
    rule: "LEDGER-5",
    name: "operations on an absent key are refused and create no row",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const op of OWNER_OPS) {
          const key = freshKey(op);
          await mustRejectWith(ownerOp(fixture.ledger, op, key, 1), "stale_claim", `${op} on an unclaimed key`);
          mustEqual(await fixture.raw.read(key), undefined, `stored row after ${op} on an unclaimed key`);
          mustEqual(await fixture.ledger.lookup(key), undefined, `lookup after ${op} on an unclaimed key`);
        }
      }),
  },
  {
    rule: "LEDGER-5",
    name: "a stale owner's complete racing a takeover: never both succeed (20 rounds)",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const ledgers = subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 2) : [fixture.ledger, fixture.ledger];
        for (let round = 0; round < 20; round++) {
          const key = freshKey(String(round));
          const stale = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
          await fixture.raw.expireLease(key);
          const [completed, claim] = await Promise.all([
            ledgers[0]!.complete(key, stale, '"zombie"').then(
              () => "ok",
              (error: unknown) => (error as { code?: string }).code ?? String(error),
            ),
            ledgers[1]!.claim(claimRequest(key, "owner-new", "keyed_write")),
          ]);
          const row = rowEssence(await fixture.ledger.lookup(key));
          if (completed === "ok") {
            // Complete came first: the claimant must see the completed row, and it stays.
            must(claim.outcome === "existing" && claim.row.state === "completed", `round ${round}: the stale owner's complete succeeded AND the takeover claimed fence ${claim.outcome === "claimed" ? claim.fence : "?"}`);
            mustEqual(row, { key, state: "completed", fence: stale, effect: "keyed_write", toolName: TOOL_FOR.keyed_write, result: '"zombie"' }, `round ${round}: row after complete-then-claim`);
          } else {
            mustEqual(completed, "stale_claim", `round ${round}: the stale owner's complete after the takeover`);
            const taken = mustBeClaimed(claim, `round ${round}: takeover`);
            mustEqual(row, { key, state: "in_flight", fence: taken.fence, effect: "keyed_write", toolName: TOOL_FOR.keyed_write, owner: "owner-new" }, `round ${round}: row after claim-then-complete`);
          }
        }
      }),
  },
  {
    rule: "LEDGER-5",
    name: "a stale owner is refused through another instance",
    needs: ["sharedAcrossProcesses"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const other = await fixture.reopen();
        const key = freshKey();
        const stale = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
        await fixture.raw.expireLease(key);
        const current = mustBeClaimed(await other.claim(claimRequest(key, "owner-new", "keyed_write")), "takeover").fence;
        await mustRejectWith(fixture.ledger.complete(key, stale, '"old"'), "stale_claim", "stale complete via the first instance");
        await mustRejectWith(fixture.ledger.fail(key, stale, DECLINED), "stale_claim", "stale fail via the first instance");
        await mustBeStored(fixture, key, { state: "in_flight", fence: current, owner: "owner-new" }, "row");
      }),
  },
  // LEDGER-6 -----------------------------------------------------------------
  {
    rule: "LEDGER-6",
    name: "a live in-flight row is returned to other claimants as existing in_flight with owner, fence and lease",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect)), "claim");
          for (const owner of ["owner-b", "owner-c"]) {
            const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, owner, effect)), `claim by ${owner}`);
            mustEqual(
              rowEssence(row),
              { key, state: "in_flight", fence: claimed.fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" },
              `row seen by ${owner}`,
            );
            mustEqual(leaseOf(row), claimed.leaseExpiresAt, `lease seen by ${owner}`);
          }
        }
      }),
  },
  {
    rule: "LEDGER-6",
    name: "a live in-flight row is seen from another instance",
    needs: ["sharedAcrossProcesses"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const other = await fixture.reopen();
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          const row = mustBeExisting(await other.claim(claimRequest(key, "owner-b", effect)), "claim via another instance");
          mustEqual(rowEssence(row)?.fence, fence, "fence seen via another instance");
          mustEqual(row.state, "in_flight", "state seen via another instance");
        }
      }),
  },
  {
    rule: "LEDGER-6",
    name: "an in-flight row survives a restart: the fresh instance returns it and does not claim",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          const reopened = await fixture.reopen();
          const result = await reopened.claim(claimRequest(key, "owner-after-restart", effect));
          if (result.outcome === "claimed") {
            throw new ConformanceFailure(
              `after restart a claim of ${short(key)} won (fence ${result.fence}) although owner-a holds it in flight (fence ${fence}): the in-flight row was lost`,
            );
          }
          mustEqual(rowEssence(result.row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, "row after restart");
          // The first owner can still finish through the new instance.
          await reopened.complete(key, fence, '"done"');
        }
      }),
  },
  // LEDGER-7 -----------------------------------------------------------------
  {
    rule: "LEDGER-7",
    name: "an expired keyed_write claim is taken over with a higher fence and takeover: true",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const first = await claimNew(fixture.ledger, key, "owner-dead", "keyed_write");
        await fixture.raw.expireLease(key);
        const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "claim of an expired keyed_write row");
        must(taken.takeover, "a claim of an expired in-flight row must report takeover: true");
        must(taken.fence > first, `takeover fence ${taken.fence} must exceed ${first}`);
        await mustBeStored(fixture, key, { state: "in_flight", fence: taken.fence, owner: "owner-b" }, "row after takeover");
      }),
  },
  {
    rule: "LEDGER-7",
    name: "an expired unkeyed_write claim becomes unknown (reason lease_expired) and is never claimable again",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const fence = await claimNew(fixture.ledger, key, "owner-dead", "unkeyed_write");
        await fixture.raw.expireLease(key);
        const expected = { key, state: "unknown", fence, effect: "unkeyed_write", toolName: TOOL_FOR.unkeyed_write, reason: "lease_expired" };
        for (let i = 0; i < 5; i++) {
          const row = mustBeExisting(
            await fixture.ledger.claim(claimRequest(key, `owner-${i}`, "unkeyed_write")),
            `claim #${i} of an expired unkeyed_write row (it must never run again)`,
          );
          mustEqual(rowEssence(row), expected, `row returned to claim #${i}`);
        }
        await mustBeStored(fixture, key, { state: "unknown", fence }, "stored row");
        mustEqual(rowEssence(await fixture.ledger.lookup(key)), expected, "lookup");
        await mustRejectWith(fixture.ledger.complete(key, fence, '"late"'), "stale_claim", "the dead owner's late complete");
      }),
  },
  {
    rule: "LEDGER-7",
    name: "an expired unkeyed_write claim stays unknown after a restart",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const fence = await claimNew(fixture.ledger, key, "owner-dead", "unkeyed_write");
        await fixture.raw.expireLease(key);
        mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim");
        const reopened = await fixture.reopen();
        const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-c", "unkeyed_write")), "claim after restart");
        mustEqual(rowEssence(row), { key, state: "unknown", fence, effect: "unkeyed_write", toolName: TOOL_FOR.unkeyed_write, reason: "lease_expired" }, "row after restart");
      }),
  },
  {
    rule: "LEDGER-7",
    name: "an expired unkeyed_write claim is never taken over, even when its lease expired on a restarted instance",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        await claimNew(fixture.ledger, key, "owner-dead", "unkeyed_write");
        const reopened = await fixture.reopen();
        await fixture.raw.expireLease(key);
        const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim after restart");
        mustEqual(row.state, "unknown", "state of an expired unkeyed_write row after restart");
      }),
  },
  // LEDGER-8 -----------------------------------------------------------------
  {
    rule: "LEDGER-8",
    name: "a definite failure is stored and replayed identically to every later claimant",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await fixture.ledger.fail(key, fence, DECLINED);
          for (let i = 0; i < 3; i++) {
            const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect)), `claim #${i} after fail`);
            must(row.state === "failed", `claim #${i} after fail saw ${describeRow(row)}: the failure was not recorded`);
            mustEqual(row.error, DECLINED, `error replayed to claim #${i}`);
          }
          const raw = await mustBeStored(fixture, key, { state: "failed", fence }, "stored failed row");
          mustEqual(raw.error, DECLINED, "stored error");
        }
      }),
  },
  {
    rule: "LEDGER-8",
    name: "a failure is replayed identically after a restart",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
        await fixture.ledger.fail(key, fence, DECLINED);
        const reopened = await fixture.reopen();
        const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim after restart");
        must(row.state === "failed", `after restart the row is ${describeRow(row)}`);
        mustEqual(row.error, DECLINED, "error after restart");
      }),
  },
  {
    rule: "LEDGER-8",
    name: "a released claim (not performed) is claimable again and keeps no outcome",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await fixture.ledger.release(key, fence);
          const row = await lookupMust(fixture.ledger, key, "lookup after release");
          mustEqual(rowEssence(row), { key, state: "released", fence, effect, toolName: TOOL_FOR[effect] }, "released row");
          mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "claim after release");
        }
      }),
  },
  // LEDGER-9 -----------------------------------------------------------------
  {
    rule: "LEDGER-9",
    name: "renew extends the owner's lease and the new lease is stored",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, 60_000)), "claim");
          const renewed = await fixture.ledger.renew(key, claimed.fence, 3 * LEASE_MS);
          must(
            renewed.leaseExpiresAt > claimed.leaseExpiresAt,
            `renew returned leaseExpiresAt ${renewed.leaseExpiresAt}, not after the claim's ${claimed.leaseExpiresAt}`,
          );
          const row = await lookupMust(fixture.ledger, key, "lookup after renew");
          mustEqual(leaseOf(row), renewed.leaseExpiresAt, "stored lease after renew");
          mustEqual(rowEssence(row)?.fence, claimed.fence, "fence after renew (renew is not a new claim)");
        }
      }),
  },
  {
    rule: "LEDGER-16",
    name: "an owner that renews after its lease ran out, before anyone acted, keeps the claim",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await fixture.raw.expireLease(key);
          await fixture.ledger.renew(key, fence, LEASE_MS);
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "claim after renew");
          mustEqual(rowEssence(row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, "row after renew");
          await fixture.ledger.complete(key, fence, '"kept"');
        }
      }),
  },
  // LEDGER-10 ----------------------------------------------------------------
  {
    rule: "LEDGER-10",
    name: `results are replayed byte-for-byte (${TRICKY_RESULTS.length} tricky JSON texts)`,
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const { label, text } of TRICKY_RESULTS) {
          await completeAndReplay(fixture, [fixture.ledger], text, label);
        }
      }),
  },
  {
    rule: "LEDGER-10",
    name: "a ~900 KB result is replayed byte-for-byte",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const limit = fixture.ledger.capabilities.maxResultBytes;
        const text = bigResult(Math.min(900 * 1024, limit - 64));
        await completeAndReplay(fixture, [fixture.ledger], text, `${Buffer.byteLength(text)}-byte result`);
      }),
  },
  {
    rule: "LEDGER-10",
    name: "results are replayed byte-for-byte after a restart",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const keys: Array<[string, string, string]> = [];
        for (const { label, text } of TRICKY_RESULTS) {
          const key = freshKey(label);
          const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
          await fixture.ledger.complete(key, fence, text);
          keys.push([key, text, label]);
        }
        const reopened = await fixture.reopen();
        for (const [key, text, label] of keys) {
          const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-b", "keyed_write")), `claim after restart (${label})`);
          mustResultBytes(row, text, `${label} after restart`);
        }
      }),
  },
  {
    rule: "LEDGER-10",
    name: "the configured maxResultBytes is the declared limit",
    run: (subject) =>
      withFixture(
        subject,
        async (fixture) => {
          mustEqual(fixture.ledger.capabilities.maxResultBytes, 4096, "capabilities.maxResultBytes of create({ maxResultBytes: 4096 })");
        },
        { maxResultBytes: 4096 },
      ),
  },
  {
    rule: "LEDGER-10",
    name: "a result of exactly maxResultBytes UTF-8 bytes is stored",
    run: (subject) =>
      withFixture(
        subject,
        async (fixture) => {
          const limit = fixture.ledger.capabilities.maxResultBytes;
          const text = jsonTextOfBytes(limit);
          must(Buffer.byteLength(text) === limit, "kit error: sized text");
          await completeAndReplay(fixture, [fixture.ledger], text, `result of exactly ${limit} bytes`);
        },
        { maxResultBytes: 4096 },
      ),
  },
  {
    rule: "LEDGER-10",
    name: "a result over maxResultBytes is refused with result_not_storable and the claim stays held",
    run: (subject) =>
      withFixture(
        subject,
        async (fixture) => {
          const limit = fixture.ledger.capabilities.maxResultBytes;
          // One byte over; and one whose UTF-16 length is far under the limit but whose UTF-8 bytes are over.
          const over = [jsonTextOfBytes(limit + 1), `"${"é".repeat(Math.ceil(limit / 2))}"`];
          for (const text of over) {
            const key = freshKey();
            const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
            const before = await snapshot(fixture, key);
            await mustRejectWith(
              fixture.ledger.complete(key, fence, text),
              "result_not_storable",
              `complete with ${Buffer.byteLength(text)} bytes (${text.length} UTF-16 units) over a ${limit}-byte limit`,
            );
            mustEqual(await snapshot(fixture, key), before, "row after a refused result (must stay in_flight, never released)");
            mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim after a refused result");
            // The owner still holds the claim and records the failure (the dispatcher's fail-closed path).
            await fixture.ledger.fail(key, fence, { name: "ResultNotStorableError", message: "too large", code: "result_not_storable" });
            mustEqual((await lookupMust(fixture.ledger, key, "lookup")).state, "failed", "state after failing closed");
          }
        },
        { maxResultBytes: 4096 },
      ),
  },
  // LEDGER-11 ----------------------------------------------------------------
  {
    rule: "LEDGER-11",
    name: "a corrupt finished row raises ledger_corrupt on claim and lookup, every time",
    needs: ["corruption"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
        await fixture.ledger.complete(key, fence, '{"charged":true}');
        await fixture.raw.corrupt!(key);
        for (let i = 0; i < 2; i++) {
          await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "ledger_corrupt", `claim #${i} of a corrupt row`);
          await mustRejectWith(fixture.ledger.lookup(key), "ledger_corrupt", `lookup #${i} of a corrupt row`);
        }
      }),
  },
  {
    rule: "LEDGER-11",
    name: "a corrupt in-flight row raises ledger_corrupt on claim and lookup",
    needs: ["corruption"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        await fixture.raw.corrupt!(key);
        await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "ledger_corrupt", "claim of a corrupt in-flight row");
        await mustRejectWith(fixture.ledger.lookup(key), "ledger_corrupt", "lookup of a corrupt in-flight row");
      }),
  },
  {
    rule: "LEDGER-11",
    name: "fenced operations and sweep never overwrite or remove a corrupt row",
    needs: ["corruption"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const op of OWNER_OPS) {
          const key = freshKey(op);
          const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
          await fixture.raw.corrupt!(key);
          let outcome: string;
          try {
            await ownerOp(fixture.ledger, op, key, fence);
            outcome = "ok";
          } catch (error) {
            outcome = (error as { code?: string }).code ?? String(error);
          }
          must(outcome === "ledger_corrupt" || outcome === "stale_claim", `${op} on a corrupt row returned ${outcome}, expected ledger_corrupt`);
          await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "ledger_corrupt", `claim after ${op} on a corrupt row`);
        }
        const key = freshKey("sweep");
        const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        await fixture.ledger.complete(key, fence, "1");
        await fixture.raw.corrupt!(key);
        try {
          await fixture.ledger.sweep();
        } catch (error) {
          must((error as { code?: string }).code === "ledger_corrupt", `sweep over a corrupt row raised ${String(error)}`);
        }
        await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "ledger_corrupt", "claim after a sweep over a corrupt row");
      }),
  },
  // LEDGER-12 ----------------------------------------------------------------
  {
    rule: "LEDGER-12",
    name: "a claim on an unreachable store raises ledger_unavailable and creates no row",
    needs: ["unavailability"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const broken = await fixture.raw.disconnected!();
        const key = freshKey();
        await mustRejectWith(broken.claim(claimRequest(key, "owner-a", "unkeyed_write")), "ledger_unavailable", "claim on an unreachable store");
        mustEqual(await fixture.raw.read(key), undefined, "stored row after a failed claim");
        mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim on the healthy store afterwards");
      }),
  },
  {
    rule: "LEDGER-12",
    name: "every other operation on an unreachable store raises ledger_unavailable and changes nothing",
    needs: ["unavailability"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const broken = await fixture.raw.disconnected!();
        const key = freshKey();
        const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
        const before = await snapshot(fixture, key);
        for (const op of OWNER_OPS) {
          await mustRejectWith(ownerOp(broken, op, key, fence), "ledger_unavailable", `${op} on an unreachable store`);
          mustEqual(await snapshot(fixture, key), before, `row after ${op} on an unreachable store`);
        }
        await mustRejectWith(broken.lookup(key), "ledger_unavailable", "lookup on an unreachable store");
      }),
  },
  // LEDGER-13 ----------------------------------------------------------------
  {
    rule: "LEDGER-13",
    name: "sweep removes completed, failed, unknown and released rows whose retention passed",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const keys: string[] = [];
        for (const state of ["completed", "failed", "unknown", "released"] as const) {
          const key = freshKey(state);
          keys.push(key);
          await finishAs(fixture.ledger, key, await claimNew(fixture.ledger, key, "owner-a", "keyed_write"), state);
          await fixture.raw.expireRetention(key);
        }
        // A store that expires rows itself (Redis TTL) may have forgotten them already (LEDGER-19): it may count fewer, never more.
        const removed = await fixture.ledger.sweep();
        must(Number.isSafeInteger(removed) && removed >= 0 && removed <= 4, `sweep reported ${show(removed)} rows removed; 4 had passed retention`);
        for (const key of keys) {
          mustEqual(await fixture.raw.read(key), undefined, `stored row ${short(key)} after sweep`);
          mustEqual(await fixture.ledger.lookup(key), undefined, `lookup ${short(key)} after sweep`);
        }
      }),
  },
  {
    rule: "LEDGER-13",
    name: "sweep never removes in-flight rows, live or with an expired lease",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const held: Array<[string, number, string]> = [];
        for (const effect of EFFECTS) {
          for (const expired of [false, true]) {
            const key = freshKey();
            const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
            if (expired) await fixture.raw.expireLease(key);
            held.push([key, fence, `${expired ? "expired" : "live"} ${effect}`]);
          }
        }
        const done = freshKey("done");
        await fixture.ledger.complete(done, await claimNew(fixture.ledger, done, "owner-a", "keyed_write"), "true");
        await fixture.raw.expireRetention(done);
        const removed = await fixture.ledger.sweep();
        must(removed >= 0 && removed <= 1, `sweep reported ${removed} rows removed; only 1 finished row had passed retention`);
        for (const [key, fence, label] of held) {
          await mustBeStored(fixture, key, { state: "in_flight", fence }, `${label} in-flight row after sweep`);
        }
      }),
  },
  {
    rule: "LEDGER-13",
    name: "sweep keeps finished rows whose retention has not passed",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const keys: Array<[string, string]> = [];
        for (const state of ["completed", "failed", "unknown", "released"] as const) {
          const key = freshKey(state);
          await finishAs(fixture.ledger, key, await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write"), state);
          keys.push([key, state]);
        }
        mustEqual(await fixture.ledger.sweep(), 0, "rows removed by sweep within retention");
        for (const [key, state] of keys) {
          mustEqual((await fixture.ledger.lookup(key))?.state, state, `${state} row after sweep`);
          // An unkeyed_write that completed is still protected: a replay must not run it again.
          if (state !== "released") {
            mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), `claim of ${state} row after sweep`);
          }
        }
      }),
  },
  // LEDGER-14 ----------------------------------------------------------------
  {
    rule: "LEDGER-14",
    name: "capabilities declare durability, clock, sharedAcrossProcesses and maxResultBytes",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const c = fixture.ledger.capabilities as unknown as Record<string, unknown>;
        must(c !== undefined && c !== null, "ledger.capabilities is missing");
        must(c.durability === "durable" || c.durability === "volatile", `capabilities.durability is ${show(c.durability)}, expected "durable" or "volatile"`);
        must(c.clock === "store" || c.clock === "process", `capabilities.clock is ${show(c.clock)}`);
        must(typeof c.sharedAcrossProcesses === "boolean", `capabilities.sharedAcrossProcesses is ${show(c.sharedAcrossProcesses)}`);
        must(Number.isSafeInteger(c.maxResultBytes) && (c.maxResultBytes as number) > 0, `capabilities.maxResultBytes is ${show(c.maxResultBytes)}`);
      }),
  },
  {
    rule: "LEDGER-14",
    name: "declared capabilities agree with the subject's (shared store, durable only if it survives restart)",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const c = fixture.ledger.capabilities;
        mustEqual(c.sharedAcrossProcesses, subject.capabilities.sharedAcrossProcesses, "ledger vs subject sharedAcrossProcesses");
        if (c.durability === "durable") {
          must(subject.capabilities.survivesRestart, "a ledger declaring durability \"durable\" must survive a restart (subject.capabilities.survivesRestart)");
        }
        const reopened = await fixture.reopen();
        mustEqual(reopened.capabilities.durability, c.durability, "durability of a reopened instance");
      }),
  },
  // LEDGER-15 ----------------------------------------------------------------
  {
    rule: "LEDGER-15",
    name: "a live in-flight row is returned as existing in_flight even to a re-claim by the same owner, so the caller waits",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-a", effect)), "re-claim by the same owner");
          mustEqual(rowEssence(row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, "row on re-claim");
        }
      }),
  },
  // LEDGER-16..19 ------------------------------------------------------------
  {
    rule: "LEDGER-16",
    name: "the same owner string re-claiming after expiry takes over with a new fence; its old fence is stale",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const first = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        await fixture.raw.expireLease(key);
        const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", "keyed_write")), "re-claim by the same owner after expiry");
        must(again.takeover && again.fence > first, `re-claim after expiry: fence ${again.fence}, takeover ${again.takeover}`);
        await mustRejectWith(fixture.ledger.complete(key, first, '"old"'), "stale_claim", "complete with the owner's old fence");
      }),
  },
  {
    rule: "LEDGER-17",
    name: "lookup never acts on an expired lease",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await fixture.raw.expireLease(key);
          const before = await fixture.raw.read(key);
          for (let i = 0; i < 2; i++) {
            const row = await lookupMust(fixture.ledger, key, `lookup #${i} of an expired ${effect} claim`);
            mustEqual(rowEssence(row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, `lookup #${i} of an expired ${effect} claim`);
          }
          mustEqual(rowEssence(await fixture.raw.read(key)), rowEssence(before), "stored row after lookups");
          await fixture.ledger.complete(key, fence, '"owner finished"');
        }
      }),
  },
  {
    rule: "LEDGER-18",
    name: "expiry follows the effect class stored in the row, not the claimant's",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const unkeyed = freshKey("unkeyed");
        const fence = await claimNew(fixture.ledger, unkeyed, "owner-a", "unkeyed_write");
        await fixture.raw.expireLease(unkeyed);
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(unkeyed, "owner-b", "keyed_write")), "keyed_write claim of an expired unkeyed_write row");
        mustEqual(rowEssence(row), { key: unkeyed, state: "unknown", fence, effect: "unkeyed_write", toolName: TOOL_FOR.unkeyed_write, reason: "lease_expired" }, "expired unkeyed_write row claimed as keyed_write");
        const keyed = freshKey("keyed");
        const first = await claimNew(fixture.ledger, keyed, "owner-a", "keyed_write");
        await fixture.raw.expireLease(keyed);
        const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(keyed, "owner-b", "unkeyed_write")), "unkeyed_write claim of an expired keyed_write row");
        must(taken.takeover && taken.fence > first, `takeover of an expired keyed_write row: fence ${taken.fence}, takeover ${taken.takeover}`);
      }),
  },
  {
    rule: "LEDGER-19",
    name: "after retention and sweep a key is absent and the next claim is a first claim (fence 1)",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        await fixture.ledger.complete(key, await claimNew(fixture.ledger, key, "owner-a", "keyed_write"), '"old"');
        await fixture.raw.expireRetention(key);
        const removed = await fixture.ledger.sweep();
        must(removed >= 0 && removed <= 1, `sweep reported ${removed} rows removed; 1 had passed retention`);
        mustEqual(await fixture.ledger.lookup(key), undefined, "lookup after sweep");
        mustEqual(await fixture.raw.read(key), undefined, "stored row after retention and sweep");
        const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "claim after retention");
        must(again.fence === 1 && !again.takeover, `a forgotten key behaves as never claimed: got fence ${again.fence}, takeover ${again.takeover}; expected fence 1, no takeover`);
      }),
  },
  {
    rule: "LEDGER-20",
    name: "a ledger shared across processes measures leases on the store's clock",
    needs: ["sharedAcrossProcesses"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        mustEqual(fixture.ledger.capabilities.clock, "store", "capabilities.clock of a ledger shared across processes");
      }),
  },
  // LEDGER-21 ----------------------------------------------------------------
  // Every claimant below sends a request of its own (requestFor(owner)), so a ledger that keeps or
  // returns a later claimant's request, instead of the one the creating claim stored, shows it.
  {
    rule: "LEDGER-21",
    name: "the first claim stores the claimant's request and returns it; lookup, the stored row and later claimants see it",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const first = requestFor("owner-a");
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, LEASE_MS, first)), `first claim (${effect})`);
          mustRequest(claimed.request, first, `the claimed result of the first claim (${effect})`);
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the in-flight row after the first claim (${effect})`);
          const second = requestFor("owner-b");
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", effect, LEASE_MS, second)), `second claim (${effect})`);
          mustRequest(row.request, first, `the in-flight row returned to another claimant (${effect})`, second);
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the row after a losing claim (${effect})`, second);
        }
      }),
  },
  {
    rule: "LEDGER-21",
    name: "a re-claim after release keeps the stored request and returns it, not the claimant's own",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const effect of EFFECTS) {
          const key = freshKey();
          const first = requestFor("owner-0");
          let fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-0", effect, LEASE_MS, first)), "first claim").fence;
          for (let i = 1; i <= 3; i++) {
            await fixture.ledger.release(key, fence);
            await mustKeepRequest(fixture, fixture.ledger, key, first, `the released row #${i} (${effect})`);
            const own = requestFor(`owner-${i}`);
            const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect, LEASE_MS, own)), `re-claim #${i} after release (${effect})`);
            mustRequest(again.request, first, `the claimed result of re-claim #${i} after release (${effect})`, own);
            await mustKeepRequest(fixture, fixture.ledger, key, first, `the row after re-claim #${i} (${effect})`, own);
            fence = again.fence;
          }
        }
        // Many claimants of a released row at once, each with its own request: the winner gets the stored one.
        const key = freshKey("race");
        const first = requestFor("owner-first");
        const fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-first", "keyed_write", LEASE_MS, first)), "first claim").fence;
        await fixture.ledger.release(key, fence);
        const ledgers = subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
        await raceKeepsRequest(ledgers, key, 16, first, "16 concurrent re-claims after release");
        await mustKeepRequest(fixture, fixture.ledger, key, first, "the row after 16 concurrent re-claims");
      }),
  },
  {
    rule: "LEDGER-21",
    name: "a keyed_write takeover keeps the stored request and returns it, not the claimant's own",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const key = freshKey();
        const first = requestFor("owner-0");
        mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-0", "keyed_write", LEASE_MS, first)), "first claim");
        for (let i = 1; i <= 3; i++) {
          await fixture.raw.expireLease(key);
          const own = requestFor(`owner-${i}`);
          const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, "keyed_write", LEASE_MS, own)), `takeover #${i}`);
          must(taken.takeover, `takeover #${i} must report takeover: true`);
          mustRequest(taken.request, first, `the claimed result of takeover #${i}`, own);
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the row after takeover #${i}`, own);
        }
        const raced = freshKey("race");
        const stored = requestFor("owner-dead");
        mustBeClaimed(await fixture.ledger.claim(claimRequest(raced, "owner-dead", "keyed_write", LEASE_MS, stored)), "first claim");
        await fixture.raw.expireLease(raced);
        const ledgers = subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
        await raceKeepsRequest(ledgers, raced, 16, stored, "16 concurrent takeovers");
        await mustKeepRequest(fixture, fixture.ledger, raced, stored, "the row after 16 concurrent takeovers");
      }),
  },
  {
    rule: "LEDGER-21",
    name: "an expired unkeyed_write claim that turns unknown keeps the stored request",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        // Straight from the first claim, and after a release and re-claim (the stored request is still the first).
        for (const released of [false, true]) {
          const key = freshKey(String(released));
          const first = requestFor("owner-dead");
          let fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-dead", "unkeyed_write", LEASE_MS, first)), "first claim").fence;
          if (released) {
            await fixture.ledger.release(key, fence);
            fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-next", "unkeyed_write", LEASE_MS, requestFor("owner-next"))), "re-claim").fence;
          }
          await fixture.raw.expireLease(key);
          const what = released ? "after a release and re-claim" : "from the first claim";
          for (const owner of ["owner-b", "owner-c"]) {
            const own = requestFor(owner);
            const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, owner, "unkeyed_write", LEASE_MS, own)), `claim by ${owner} of an expired unkeyed_write row`);
            must(row.state === "unknown", `claim by ${owner} of an expired unkeyed_write row: expected the unknown row, got ${describeRow(row)}`);
            mustRequest(row.request, first, `the unknown row returned to ${owner} (${what})`, own);
          }
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the unknown row (${what})`);
        }
      }),
  },
  {
    rule: "LEDGER-21",
    name: "completed, failed, unknown and released rows keep the stored request",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const state of ["completed", "failed", "unknown", "released"] as const) {
          const key = freshKey(state);
          const first = requestFor("owner-a");
          const fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", "keyed_write", LEASE_MS, first)), "claim").fence;
          await finishAs(fixture.ledger, key, fence, state);
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the ${state} row`);
          if (state === "released") continue;
          const own = requestFor("owner-b");
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write", LEASE_MS, own)), `claim of the ${state} row`);
          mustRequest(row.request, first, `the ${state} row returned to a later claimant`, own);
        }
      }),
  },
  {
    rule: "LEDGER-21",
    name: "a claim after retention stores the new claimant's request",
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        // Past retention a row is forgotten (LEDGER-19), swept or not: the next claim creates the row afresh.
        for (const state of ["completed", "released"] as const) {
          for (const swept of [false, true]) {
            const key = freshKey(`${state}-${swept}`);
            const old = requestFor("owner-old");
            const fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-old", "keyed_write", LEASE_MS, old)), "first claim").fence;
            await finishAs(fixture.ledger, key, fence, state);
            await fixture.raw.expireRetention(key);
            if (swept) await fixture.ledger.sweep();
            const what = `a claim of a ${state} row past retention${swept ? ", swept" : ", not yet swept"}`;
            const fresh = requestFor("owner-new");
            const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-new", "keyed_write", LEASE_MS, fresh)), what);
            mustRequest(claimed.request, fresh, `the claimed result of ${what} (the forgotten row's request must not come back)`);
            await mustKeepRequest(fixture, fixture.ledger, key, fresh, `the row after ${what}`);
          }
        }
      }),
  },
  {
    rule: "LEDGER-21",
    name: `requests are stored and returned byte for byte (${TRICKY_REQUESTS.length} tricky JSON texts, one over 64 KiB)`,
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        for (const { label, text } of TRICKY_REQUESTS) {
          const key = freshKey(label);
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", "keyed_write", LEASE_MS, text)), `claim (${label})`);
          mustRequest(claimed.request, text, `${label}: the claimed result`);
          await mustKeepRequest(fixture, fixture.ledger, key, text, `${label}: the in-flight row`);
          await fixture.ledger.release(key, claimed.fence);
          const own = requestFor("owner-b");
          const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write", LEASE_MS, own)), `re-claim after release (${label})`);
          mustRequest(again.request, text, `${label}: the claimed result of a re-claim after release`, own);
          await fixture.ledger.complete(key, again.fence, '"done"');
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-c", "keyed_write")), `replay (${label})`);
          mustRequest(row.request, text, `${label}: the completed row returned to a replay`);
          await mustKeepRequest(fixture, fixture.ledger, key, text, `${label}: the completed row`);
        }
      }),
  },
  {
    rule: "LEDGER-21",
    name: "the stored request survives a restart: a fresh instance returns it on lookup, re-claim and takeover",
    needs: ["survivesRestart"],
    run: (subject) =>
      withFixture(subject, async (fixture) => {
        const released = freshKey("released");
        const expired = freshKey("expired");
        const text = TRICKY_REQUESTS.find((r) => r.label.startsWith("escapes"))!.text;
        const astral = TRICKY_REQUESTS.find((r) => r.label.startsWith("astral"))!.text;
        await fixture.ledger.release(released, mustBeClaimed(await fixture.ledger.claim(claimRequest(released, "owner-a", "keyed_write", LEASE_MS, text)), "claim").fence);
        mustBeClaimed(await fixture.ledger.claim(claimRequest(expired, "owner-a", "keyed_write", LEASE_MS, astral)), "claim");
        const reopened = await fixture.reopen();
        await mustKeepRequest(fixture, reopened, released, text, "the released row seen by a fresh instance");
        await mustKeepRequest(fixture, reopened, expired, astral, "the in-flight row seen by a fresh instance");
        const own = requestFor("owner-b");
        const again = mustBeClaimed(await reopened.claim(claimRequest(released, "owner-b", "keyed_write", LEASE_MS, own)), "re-claim through a fresh instance");
        mustRequest(again.request, text, "the claimed result of a re-claim through a fresh instance", own);
        await fixture.raw.expireLease(expired);
        const taken = mustBeClaimed(await reopened.claim(claimRequest(expired, "owner-b", "keyed_write", LEASE_MS, own)), "takeover through a fresh instance");
        mustRequest(taken.request, astral, "the claimed result of a takeover through a fresh instance", own);
      }),
  },
];

async function completeAndReplay(fixture: LedgerFixture, ledgers: Ledger[], text: string, label: string): Promise<void> {
  const key = freshKey(label);
  const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
  await fixture.ledger.complete(key, fence, text);
  for (const ledger of ledgers) {
    const row = mustBeExisting(await ledger.claim(claimRequest(key, "owner-b", "keyed_write")), `replay claim (${label})`);
    mustResultBytes(row, text, `${label} via claim`);
    mustResultBytes(await lookupMust(ledger, key, label), text, `${label} via lookup`);
  }
  const raw = await mustBeStored(fixture, key, { state: "completed", fence }, label);
  must(raw.result === text, `${label}: stored result differs from the completed bytes: ${diffText(text, raw.result)}`);
}

function mustResultBytes(row: LedgerRow, text: string, what: string): void {
  if (row.state !== "completed") throw new ConformanceFailure(`${what}: expected a completed row, got ${describeRow(row)}`);
  if (row.result !== text) throw new ConformanceFailure(`${what}: replayed result is not byte-for-byte the stored one: ${diffText(text, row.result)}`);
}

const diffText = textDiff;
