/**
 * LEDGER-10: results byte for byte, and the size limit in UTF-8 bytes.
 */
import { codeOf, must, mustEqual, mustRejectWith } from "../../failure.js";
import { claimNew, claimRequest, mustBeExisting, withFixture } from "../support.js";
import { type LedgerCheckSpec, TRICKY_RESULTS, jsonTextOfBytes, bigResult, lookupMust, snapshot, completeAndReplay, mustResultBytes } from "./common.js";

export const trickyResultsByteForByte: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: `results are replayed byte-for-byte (${TRICKY_RESULTS.length} tricky JSON texts)`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const { label, text } of TRICKY_RESULTS) {
        await completeAndReplay(fixture, [fixture.ledger], ctx.key("result"), text, label);
      }
    }),
};

export const largeResultByteForByte: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "a ~900 KB result is replayed byte-for-byte",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const limit = fixture.ledger.capabilities.maxResultBytes;
      const text = bigResult(Math.min(900 * 1024, limit - 64));
      await completeAndReplay(fixture, [fixture.ledger], ctx.key("result"), text, `${Buffer.byteLength(text)}-byte result`);
    }),
};

export const resultsByteForByteAfterRestart: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "results are replayed byte-for-byte after a restart",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const keys: Array<[string, string, string]> = [];
      for (const { label, text } of TRICKY_RESULTS) {
        const key = ctx.key(label);
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
};

export const declaredResultLimit: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "the configured maxResultBytes is the declared limit",
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        mustEqual(fixture.ledger.capabilities.maxResultBytes, 4096, "capabilities.maxResultBytes of create({ maxResultBytes: 4096 })");
      },
      { maxResultBytes: 4096 },
    ),
};

export const resultAtLimitStored: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "a result of exactly maxResultBytes UTF-8 bytes is stored",
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const limit = fixture.ledger.capabilities.maxResultBytes;
        const text = jsonTextOfBytes(limit);
        must(Buffer.byteLength(text) === limit, "kit error: sized text");
        await completeAndReplay(fixture, [fixture.ledger], ctx.key("result"), text, `result of exactly ${limit} bytes`);
      },
      { maxResultBytes: 4096 },
    ),
};

export const resultOverLimitRefused: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "a result over maxResultBytes is refused with result_not_storable and the claim stays held",
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const limit = fixture.ledger.capabilities.maxResultBytes;
        // One byte over; and one whose UTF-16 length is far under the limit but whose UTF-8 bytes are over.
        const over = [jsonTextOfBytes(limit + 1), `"${"é".repeat(Math.ceil(limit / 2))}"`];
        for (const text of over) {
          const key = ctx.key();
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
};

/**
 * A JSON string text of exactly `bytes` UTF-8 bytes made of 3-byte characters (U+0800..U+FFFF), with
 * the last one ending exactly at the last byte before the closing quote; ASCII fills the rest.
 */
export function jsonTextOf3ByteChars(bytes: number, char = "€"): string {
  if (Buffer.byteLength(char) !== 3) throw new TypeError("kit error: expected a 3-byte character");
  const body = bytes - 2;
  const count = Math.floor(body / 3);
  return `"${"a".repeat(body - count * 3)}${char.repeat(count)}"`;
}

export const threeByteCharactersAtLimit: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "the size limit counts 3-byte UTF-8 characters as 3 bytes: exactly maxResultBytes of them (€, 東) is stored, one byte more (a character straddling the limit) is refused",
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const limit = fixture.ledger.capabilities.maxResultBytes;
        for (const char of ["€", "東", "\u2028"]) {
          const exact = jsonTextOf3ByteChars(limit, char);
          must(Buffer.byteLength(exact) === limit, "kit error: sized text");
          await completeAndReplay(fixture, [fixture.ledger], ctx.key("exact"), exact, `a result of exactly ${limit} bytes of 3-byte characters (${JSON.stringify(char)}, ${exact.length} UTF-16 units)`);
        }
        // 4097 bytes whose last character spans bytes 4094..4096, and 4098 bytes (an ASCII byte more).
        const over = [`"${"€".repeat(Math.ceil((limit - 1) / 3))}"`, `"a${"東".repeat(Math.floor((limit - 1) / 3))}"`];
        for (const text of over) {
          const bytes = Buffer.byteLength(text);
          must(bytes > limit, "kit error: sized text");
          const key = ctx.key("over");
          const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
          const before = await snapshot(fixture, key);
          await mustRejectWith(
            fixture.ledger.complete(key, fence, text),
            "result_not_storable",
            `complete with ${bytes} bytes of 3-byte characters (${text.length} UTF-16 units) over a ${limit}-byte limit`,
          );
          mustEqual(await snapshot(fixture, key), before, "row after a refused result (must stay in_flight, never released)");
        }
      },
      { maxResultBytes: 4096 },
    ),
};

/**
 * A raw lone surrogate has no UTF-8 encoding: a store that encodes text to UTF-8 (a driver, a
 * `Buffer.from`) writes U+FFFD in its place, and the replay is another text. Such a result is
 * not well-formed Unicode, so a ledger may refuse it as one it cannot store (result_not_storable,
 * the claim held, as the size limit is refused); what it may not do is store something else.
 */
const LONE_SURROGATE_RESULTS = ['"lead \ud800 alone"', '{"trail":"\udc00","pair":"\ud83d\ude00"}'];

export const loneSurrogateResultKeptOrRefused: LedgerCheckSpec = {
  rule: "LEDGER-10",
  name: "a result with a raw lone surrogate is replayed byte-for-byte or refused with result_not_storable with the claim held, never stored altered (U+FFFD in its place)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const text of LONE_SURROGATE_RESULTS) {
        const key = ctx.key("lone-surrogate");
        const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        const before = await snapshot(fixture, key);
        let refused = false;
        try {
          await fixture.ledger.complete(key, fence, text);
        } catch (error) {
          if (codeOf(error) !== "result_not_storable") throw error;
          refused = true;
        }
        if (refused) {
          mustEqual(await snapshot(fixture, key), before, "row after a refused lone-surrogate result (must stay in_flight, never released)");
          await fixture.ledger.fail(key, fence, { name: "ResultNotStorableError", message: "lone surrogate", code: "result_not_storable" });
          continue;
        }
        const what = `a result with a raw lone surrogate (${JSON.stringify(text)})`;
        mustResultBytes(await lookupMust(fixture.ledger, key, what), text, `${what} via lookup`);
        mustResultBytes(mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), `${what}: replay claim`), text, `${what} via claim`);
        const raw = await fixture.raw.read(key);
        must(raw?.result === text, `${what}: the stored row (raw.read) holds another text: the store replaced the lone surrogate; refuse such a result with result_not_storable instead`);
      }
    }),
};

/** Every check of this file, in order. */
export const RESULTS_CHECKS: readonly LedgerCheckSpec[] = [trickyResultsByteForByte, largeResultByteForByte, resultsByteForByteAfterRestart, declaredResultLimit, resultAtLimitStored, resultOverLimitRefused, threeByteCharactersAtLimit, loneSurrogateResultKeptOrRefused];
