/**
 * LEDGER-30: keys are compared exactly. Stores fold keys by default in ways that are invisible
 * until two calls meet: MySQL's default collations compare case- and accent-insensitively and
 * (in the older PAD SPACE ones) ignore trailing spaces, SQL Server's default is case-insensitive,
 * a CHAR(16) column or MySQL's non-strict mode truncates, an ICU collation normalises Unicode.
 * Two keys folded into one row make the second call's claim meet the first call's row: it is
 * answered with the first call's result and never runs, and its user is told it happened.
 */
import { ConformanceFailure, codeOf, describeError, must, mustEqual, show } from "../../failure.js";
import { claimRequest, describeRow, mustBeClaimed, withFixture } from "../support.js";
import type { ClaimResult, Ledger } from "@dispatch-once/core";
import type { LedgerCheckSpec } from "./common.js";

/** Two keys that must be two rows; `mayRefuse`: the ledger may refuse either as a key it cannot hold exactly. */
interface KeyPair {
  what: string;
  first: string;
  second: string;
  mayRefuse: boolean;
}

/** The pairs, built on seeded keys (32 lowercase hex digits, the shape KEY-1 derives). */
export function keyPairs(key: (label: string) => string): KeyPair[] {
  const flip = (digit: string) => (digit === "0" ? "1" : "0");
  const last = key("last-digit");
  const first = key("first-digit");
  const long = (length: number) => {
    const body = `${key(`long-${length}`)}-`.padEnd(length - 1, "x");
    return { what: `two ${length}-character keys that differ only in their last character`, first: `${body}a`, second: `${body}b`, mayRefuse: true };
  };
  // ctx.key gives a new key at every call: each pair's base is drawn once.
  const [kase, trailing, leading, nfc, accent, width, hex, nul, lone] = ["case", "trailing", "leading", "nfc", "accent", "width", "upper", "nul", "lone-surrogate"].map(key);
  // A derived key with at least one letter, so that its upper-case spelling differs from it.
  const lettered = /[a-f]/.test(hex!) ? hex! : `a${hex!.slice(1)}`;
  return [
    // The protocol's own keys are never refused, and one digit apart they are two rows
    // (a CHAR(16) or CHAR(31) column, a prefix index used as the key).
    { what: "two derived keys that differ only in their last hex digit", first: last, second: last.slice(0, 31) + flip(last[31]!), mayRefuse: false },
    { what: "two derived keys that differ only in their first hex digit", first, second: flip(first[0]!) + first.slice(1), mayRefuse: false },
    { what: "keys that differ only in ASCII case", first: `${kase}-key-abc`, second: `${kase}-KEY-ABC`, mayRefuse: true },
    // A key column of 16 bytes decoded from hex reads "AB" and "ab" alike.
    { what: "a derived key and the same hex digits in upper case", first: lettered, second: lettered.toUpperCase(), mayRefuse: true },
    { what: "a key and the same key with a trailing space", first: trailing!, second: `${trailing} `, mayRefuse: true },
    { what: "a key and the same key with a leading space", first: leading!, second: ` ${leading}`, mayRefuse: true },
    { what: "keys that differ only in Unicode normalisation (NFC \u00e9 against NFD e + U+0301)", first: `${nfc}-caf\u00e9`, second: `${nfc}-cafe\u0301`, mayRefuse: true },
    { what: "keys that differ only in an accent", first: `${accent}-cafe`, second: `${accent}-caf\u00e9`, mayRefuse: true },
    { what: "keys that differ only in width (fullwidth U+FF21 against A)", first: `${width}-A`, second: `${width}-\uff21`, mayRefuse: true },
    // A C-string API (or a driver that hands one the key) cuts at U+0000; a UTF-8 encoder turns
    // every lone surrogate into U+FFFD. Both keys are UTF-16 strings LEDGER-30 compares exactly.
    { what: "keys that differ only after a U+0000", first: `${nul}-a\u0000b`, second: `${nul}-a\u0000c`, mayRefuse: true },
    { what: "keys that differ only in a lone surrogate (U+D800 against U+DBFF)", first: `${lone}-\ud800`, second: `${lone}-\udbff`, mayRefuse: true },
    ...[64, 128, 255, 256, 512, 1024].map(long),
  ];
}

/** A claim's result, or "refused"; a refusal other than invalid_ledger_input (or of a key that may not be refused) fails the check. */
async function claimOrRefusal(ledger: Ledger, key: string, owner: string, mayRefuse: boolean, what: string): Promise<ClaimResult | "refused"> {
  try {
    return await ledger.claim(claimRequest(key, owner, "keyed_write"));
  } catch (error) {
    if (mayRefuse && codeOf(error) === "invalid_ledger_input") return "refused";
    throw new ConformanceFailure(
      `${what}: ${mayRefuse ? "expected the claim, or a refusal with invalid_ledger_input (a key the ledger cannot hold exactly)" : "a key of the shape the dispatcher derives must be claimed"}, got ${describeError(error)}`,
      { cause: error },
    );
  }
}

/** A refused key has no row: lookup finds nothing, or refuses the key as the claim did. */
async function mustFindNothing(ledger: Ledger, key: string, what: string): Promise<void> {
  let row: unknown;
  try {
    row = await ledger.lookup(key);
  } catch (error) {
    if (codeOf(error) === "invalid_ledger_input") return;
    throw new ConformanceFailure(`${what}: expected no row, or the key refused with invalid_ledger_input, got ${describeError(error)}`, { cause: error });
  }
  mustEqual(row, undefined, what);
}

export const keysComparedExactly: LedgerCheckSpec = {
  rule: "LEDGER-30",
  name: "keys are compared exactly: keys that differ only in case, spaces, Unicode normalisation, an accent, width, a late character, what follows a U+0000, or a lone surrogate are different rows",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const { ledger } = fixture;
      for (const { what, first, second, mayRefuse } of keyPairs((label) => ctx.key(label))) {
        // The first call finishes, so that a folded second claim would meet a completed row and
        // be answered with its result: the failure this rule exists for.
        const a = await claimOrRefusal(ledger, first, "owner-a", mayRefuse, `${what}: the claim of ${show(first)}`);
        if (a === "refused") {
          // Refused as a key it cannot hold: nothing may have been written under it or beside it.
          await mustFindNothing(ledger, first, `${what}: lookup of the refused key ${show(first)}`);
          continue;
        }
        const fence = mustBeClaimed(a, `${what}: the claim of ${show(first)}`).fence;
        await ledger.complete(first, fence, '"first call"');
        const seen = await ledger.lookup(second);
        if (seen !== undefined) {
          throw new ConformanceFailure(
            `${what}: lookup of ${show(second)} found a row (${describeRow(seen)}) after only ${show(first)} was claimed: the store folds the two keys into one`,
          );
        }
        const b = await claimOrRefusal(ledger, second, "owner-b", mayRefuse, `${what}: the claim of ${show(second)}`);
        if (b === "refused") {
          await mustFindNothing(ledger, second, `${what}: lookup of the refused key ${show(second)}`);
        } else {
          must(
            b.outcome === "claimed",
            `${what}: the claim of ${show(second)} met ${show(first)}'s row (${b.outcome === "existing" ? describeRow(b.row) : "?"}): ` +
              "the second call would be answered with the first call's result and never run",
          );
          mustEqual(b.outcome === "claimed" ? b.fence : undefined, 1, `${what}: the fence of the first claim of ${show(second)}`);
        }
        const row = await ledger.lookup(first);
        must(row !== undefined, `${what}: lookup of ${show(first)} after the claim of ${show(second)} finds no row`);
        mustEqual(row.key, first, `${what}: the key of ${show(first)}'s row, byte for byte`);
        mustEqual(row.state, "completed", `${what}: the state of ${show(first)}'s row after the claim of ${show(second)}`);
        if (b !== "refused") {
          const other = await ledger.lookup(second);
          must(other !== undefined, `${what}: lookup of ${show(second)} after its claim finds no row`);
          mustEqual(other.key, second, `${what}: the key of ${show(second)}'s row, byte for byte`);
          mustEqual(other.state, "in_flight", `${what}: the state of ${show(second)}'s row`);
        }
        // What the store holds, read by the subject's own hook: two rows, each its own call's.
        const stored = await fixture.raw.read(first);
        mustEqual([stored?.state, stored?.result], ["completed", '"first call"'], `${what}: the stored row of ${show(first)}`);
        if (b !== "refused") {
          const storedSecond = await fixture.raw.read(second);
          mustEqual([storedSecond?.state, storedSecond?.owner], ["in_flight", "owner-b"], `${what}: the stored row of ${show(second)}`);
        }
      }
    }),
};

/** Every check of this file, in order. */
export const KEYS_CHECKS: readonly LedgerCheckSpec[] = [keysComparedExactly];
