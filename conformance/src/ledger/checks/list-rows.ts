/**
 * LIST-1..LIST-5: listing rows by state, tool, conversation and age, oldest first, a page at a
 * time. Run only on a ledger that declares `supports.listRows` (the subject's `listRows` capability).
 */
import type { Ledger, LedgerRow, ListRowsPage, ListRowsQuery } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, mustRejectWith, show } from "../../failure.js";
import { claimNew, claimRequest, mustBeClaimed, short, sleep, withFixture } from "../support.js";
import { type LedgerCheckSpec, finishAs } from "./common.js";

export function listOf(ledger: Ledger): (query?: ListRowsQuery) => Promise<ListRowsPage> {
  const listRows = ledger.listRows;
  if (typeof listRows !== "function") throw new ConformanceFailure("the subject declares listRows, but ledger.listRows is not a function");
  return async (query) => {
    const page = await listRows.call(ledger, query);
    must(typeof page === "object" && page !== null && Array.isArray(page.rows), `listRows(${show(query)}) returned ${show(page)}, expected { rows, cursor? }`);
    return page;
  };
}

/** Every row the query lists, page by page. */
export async function listAll(ledger: Ledger, query: ListRowsQuery): Promise<LedgerRow[]> {
  const list = listOf(ledger);
  const rows: LedgerRow[] = [];
  let cursor: string | undefined;
  for (let pages = 0; ; pages++) {
    if (pages > 1000) throw new ConformanceFailure(`listRows(${show(query)}) did not end after 1000 pages: its cursor never runs out`);
    const page = await list({ ...query, ...(cursor === undefined ? {} : { cursor }) });
    rows.push(...page.rows);
    if (page.cursor === undefined) return rows;
    cursor = page.cursor;
  }
}

const since = (row: LedgerRow): number => Number(row.state === "in_flight" ? row.claimedAt : row.finishedAt);

/** Keys of the listed rows that belong to this check (a shared store may hold other rows). */
function keysOf(rows: LedgerRow[], mine: Set<string>): string[] {
  return rows.map((r) => r.key).filter((k) => mine.has(k));
}

/**
 * A small population: per tool (a, b) and conversation (x, y), rows in flight, completed, failed,
 * unknown and released. Returns the keys by attribute.
 */
async function populate(ledger: Ledger, key: (label: string) => string) {
  const rows: Array<{ key: string; tool: string; conversation: string; state: string }> = [];
  for (const tool of ["send_sms_a", "send_sms_b"]) {
    for (const conversation of ["conv-x", "conv-y"]) {
      for (const state of ["in_flight", "completed", "failed", "unknown", "released"] as const) {
        const k = key(`${tool}-${conversation}-${state}`);
        const claimed = mustBeClaimed(
          await ledger.claim({ ...claimRequest(k, "owner-a", "unkeyed_write"), toolName: tool, conversationId: conversation, turnIndex: 4 }),
          `claim of ${short(k)}`,
        );
        if (state !== "in_flight") await finishAs(ledger, k, claimed.fence, state);
        rows.push({ key: k, tool, conversation, state });
      }
    }
  }
  return rows;
}

export const listFilters: LedgerCheckSpec = {
  rule: "LIST-1",
  name: "listRows returns exactly the rows matching every given filter: state (one or several), tool, conversation, and their combination",
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const rows = await populate(fixture.ledger, (l) => ctx.key(l));
      const mine = new Set(rows.map((r) => r.key));
      const queries: Array<[ListRowsQuery, (r: (typeof rows)[number]) => boolean]> = [
        [{ state: "unknown" }, (r) => r.state === "unknown"],
        [{ state: ["failed", "in_flight"] }, (r) => r.state === "failed" || r.state === "in_flight"],
        [{ toolName: "send_sms_b" }, (r) => r.tool === "send_sms_b"],
        [{ conversationId: "conv-y" }, (r) => r.conversation === "conv-y"],
        [{ state: "completed", toolName: "send_sms_a", conversationId: "conv-x" }, (r) => r.state === "completed" && r.tool === "send_sms_a" && r.conversation === "conv-x"],
        [{}, () => true],
      ];
      for (const [query, matches] of queries) {
        const listed = await listAll(fixture.ledger, { ...query, limit: 7 });
        const got = keysOf(listed, mine).sort();
        const expected = rows.filter(matches).map((r) => r.key).sort();
        mustEqual(got, expected, `keys listed for ${show(query)}`);
        for (const row of listed.filter((r) => mine.has(r.key))) {
          const source = rows.find((r) => r.key === row.key)!;
          mustEqual([row.state, row.toolName, row.conversationId], [source.state, source.tool, source.conversation], `the listed row ${short(row.key)}`);
        }
      }
    }),
};

export const listOlderThan: LedgerCheckSpec = {
  rule: "LIST-1",
  name: "olderThanMs keeps only rows whose last transition is at least that old (store clock); rows past retention are not listed",
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const fresh = ctx.key("fresh");
      const fence = await claimNew(fixture.ledger, fresh, "owner-a", "unkeyed_write");
      await fixture.ledger.markUnknown(fresh, fence, "tool_error");
      const mine = new Set([fresh]);
      mustEqual(keysOf(await listAll(fixture.ledger, { state: "unknown", olderThanMs: 0 }), mine), [fresh], "olderThanMs 0 lists a row that just turned unknown");
      mustEqual(keysOf(await listAll(fixture.ledger, { state: "unknown", olderThanMs: 3_600_000 }), mine), [], "olderThanMs of an hour lists no row that just turned unknown");
      const gone = ctx.key("gone");
      const f2 = await claimNew(fixture.ledger, gone, "owner-a", "keyed_write");
      await fixture.ledger.complete(gone, f2, '"done"');
      await fixture.raw.expireRetention(gone);
      mustEqual(keysOf(await listAll(fixture.ledger, {}), new Set([gone])), [], "a row past its retention (absent, LEDGER-19) is not listed");
    }),
};

/** How long before it finishes a row is claimed, and the age listRows is asked for (less than that). */
const CLAIMED_BEFORE_MS = 300;
const LISTED_OLDER_THAN_MS = 200;
const LISTING_ROUNDS = 3;

/**
 * LIST-1 dates a finished row by finishedAt: a listing that filters every row on claimedAt (the one
 * time column an in-flight row has) lists a row that finished a moment ago as old. The claim is made
 * CLAIMED_BEFORE_MS before the finish in real time; "now" at the listing is bounded from above by the
 * claimedAt of a claim made right after it, so a row is judged only where that bound shows it too
 * young (a slow round is not judged, and the next round tries again).
 */
export const listOlderThanFinished: LedgerCheckSpec = {
  rule: "LIST-1",
  name: `olderThanMs counts a finished row from when it finished (finishedAt), not from its claim: rows claimed ${CLAIMED_BEFORE_MS} ms before they finished (completed, failed, unknown, released) are not listed for olderThanMs ${LISTED_OLDER_THAN_MS} right after they finished`,
  needs: ["listRows"],
  waitsMs: CLAIMED_BEFORE_MS * LISTING_ROUNDS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const states = ["completed", "failed", "unknown", "released"] as const;
      for (let round = 0; round < LISTING_ROUNDS; round++) {
        const keys = new Map<string, (typeof states)[number]>();
        const fences = new Map<string, number>();
        for (const state of states) {
          const key = ctx.key(`round-${round}-${state}`);
          keys.set(key, state);
          fences.set(key, await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write"));
        }
        await sleep(CLAIMED_BEFORE_MS);
        for (const [key, state] of keys) await finishAs(fixture.ledger, key, fences.get(key)!, state);
        const listed = keysOf(await listAll(fixture.ledger, { olderThanMs: LISTED_OLDER_THAN_MS }), new Set(keys.keys()));
        const probe = ctx.key(`round-${round}-probe`);
        await claimNew(fixture.ledger, probe, "owner-probe", "keyed_write");
        const atMost = Number((await fixture.ledger.lookup(probe))?.claimedAt);
        let judged = 0;
        for (const [key, state] of keys) {
          const row = await fixture.ledger.lookup(key);
          const finishedAt = Number((row as { finishedAt?: unknown } | undefined)?.finishedAt);
          const claimedAt = Number(row?.claimedAt);
          // Too young even at the latest the listing can have read its clock: it must not be listed.
          if (!(atMost - finishedAt < LISTED_OLDER_THAN_MS)) continue;
          judged++;
          must(
            !listed.includes(key),
            `listRows({ olderThanMs: ${LISTED_OLDER_THAN_MS} }) listed the ${state} row ${short(key)}, claimed ${finishedAt - claimedAt} ms before it finished at ${finishedAt}, though at most ${atMost - finishedAt} ms had passed since on the ledger's clock: a finished row's age is from finishedAt (was it judged by claimedAt?)`,
          );
        }
        if (judged === states.length) return;
      }
    }),
};

export const listOrder: LedgerCheckSpec = {
  rule: "LIST-2",
  name: "rows are listed oldest last transition first (finishedAt, or claimedAt in flight), ties by key",
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const rows = await populate(fixture.ledger, (l) => ctx.key(l));
      const mine = new Set(rows.map((r) => r.key));
      const listed = (await listAll(fixture.ledger, { limit: 3 })).filter((r) => mine.has(r.key));
      for (let i = 1; i < listed.length; i++) {
        const a = listed[i - 1]!;
        const b = listed[i]!;
        must(
          since(a) < since(b) || (since(a) === since(b) && a.key < b.key),
          `rows out of order at ${i}: ${short(a.key)} (${a.state}, ${since(a)}) before ${short(b.key)} (${b.state}, ${since(b)})`,
        );
      }
    }),
};

export const listKeepsConversation: LedgerCheckSpec = {
  rule: "LIST-3",
  name: "the creating claim stores conversationId and turnIndex; re-claims keep them (a re-claim after release and a keyed_write takeover, also when the later claim carries its own); lookup and listRows return them",
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = mustBeClaimed(
        await fixture.ledger.claim({ ...claimRequest(key, "owner-a", "keyed_write"), conversationId: "conv-keep", turnIndex: 9 }),
        "claim with a conversation",
      );
      await fixture.ledger.release(key, first.fence);
      mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "re-claim without one");
      const looked = await fixture.ledger.lookup(key);
      mustEqual([looked?.conversationId, looked?.turnIndex], ["conv-keep", 9], "conversationId and turnIndex after a re-claim (lookup)");
      const listed = (await listAll(fixture.ledger, { conversationId: "conv-keep" })).filter((r) => r.key === key);
      mustEqual(listed.map((r) => [r.conversationId, r.turnIndex]), [["conv-keep", 9]], "the row listed by its conversation");
      // A takeover, and a re-claim, whose claimant names another conversation and turn: the row is still the first claim's
      // (an adapter that writes the takeover's row from the claimant's request loses where the call was made, RECORD-8).
      const taken = ctx.key("takeover");
      mustBeClaimed(await fixture.ledger.claim({ ...claimRequest(taken, "owner-a", "keyed_write"), conversationId: "conv-keep", turnIndex: 9 }), "claim with a conversation");
      await fixture.raw.expireLease(taken);
      const takeover = mustBeClaimed(await fixture.ledger.claim({ ...claimRequest(taken, "owner-b", "keyed_write"), conversationId: "conv-other", turnIndex: 3 }), "takeover naming another conversation");
      const afterTakeover = await fixture.ledger.lookup(taken);
      mustEqual([afterTakeover?.conversationId, afterTakeover?.turnIndex], ["conv-keep", 9], "conversationId and turnIndex after a keyed_write takeover whose claim names conv-other, turn 3 (lookup)");
      await fixture.ledger.release(taken, takeover.fence);
      mustBeClaimed(await fixture.ledger.claim({ ...claimRequest(taken, "owner-c", "keyed_write"), conversationId: "conv-other", turnIndex: 3 }), "re-claim naming another conversation");
      const afterReclaim = await fixture.ledger.lookup(taken);
      mustEqual([afterReclaim?.conversationId, afterReclaim?.turnIndex], ["conv-keep", 9], "conversationId and turnIndex after a re-claim whose claim names conv-other, turn 3 (lookup)");
      mustEqual((await listAll(fixture.ledger, { conversationId: "conv-other" })).filter((r) => r.key === taken), [], "rows listed for conv-other (the later claimants' conversation)");
    }),
};

export const listLimits: LedgerCheckSpec = {
  rule: "LIST-4",
  name: "limit defaults to 100 and is at most 1000; a limit outside 1..1000, an unknown state or a cursor listRows did not make is refused with invalid_ledger_input",
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = listOf(fixture.ledger);
      for (const query of [{ limit: 0 }, { limit: 1001 }, { limit: 2.5 }, { state: "done" }, { cursor: "not a cursor!" }] as ListRowsQuery[]) {
        await mustRejectWith(list(query), "invalid_ledger_input", `listRows(${show(query)})`);
      }
      const tool = `tool_${ctx.key("tool").slice(0, 8)}`;
      for (let i = 0; i < 101; i++) {
        await fixture.ledger.claim({ ...claimRequest(ctx.key(`row-${i}`), "owner-a", "keyed_write"), toolName: tool });
      }
      const page = await list({ toolName: tool });
      mustEqual(page.rows.length, 100, "rows on a page without a limit (the default, 100)");
      must(page.cursor !== undefined, "a full page with more rows after it must carry a cursor");
      const rest = await list({ toolName: tool, cursor: page.cursor! });
      mustEqual(rest.rows.length, 1, "rows on the second page");
      mustEqual(rest.cursor, undefined, "the cursor of the last page");
      mustEqual((await list({ toolName: tool, limit: 1000 })).rows.length, 101, "rows on a page of limit 1000");
    }),
};

export const listPagingUnderInserts: LedgerCheckSpec = {
  rule: "LIST-5",
  name: "paging with the cursor lists every row that stays put exactly once, while new rows are claimed between pages",
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const tool = `tool_${ctx.key("tool").slice(0, 8)}`;
      const before: string[] = [];
      for (let i = 0; i < 23; i++) {
        const key = ctx.key(`before-${i}`);
        before.push(key);
        await fixture.ledger.claim({ ...claimRequest(key, "owner-a", "keyed_write"), toolName: tool });
      }
      const list = listOf(fixture.ledger);
      const seen: string[] = [];
      let cursor: string | undefined;
      let inserted = 0;
      do {
        const page = await list({ toolName: tool, limit: 4, ...(cursor === undefined ? {} : { cursor }) });
        seen.push(...page.rows.map((r) => r.key));
        cursor = page.cursor;
        // Concurrent work: new claims land between pages.
        for (let j = 0; j < 2; j++) await fixture.ledger.claim({ ...claimRequest(ctx.key(`during-${inserted++}`), "owner-b", "keyed_write"), toolName: tool });
      } while (cursor !== undefined && inserted < 200);
      const twice = seen.filter((k, i) => seen.indexOf(k) !== i);
      mustEqual(twice, [], "rows listed more than once");
      const missing = before.filter((k) => !seen.includes(k));
      mustEqual(missing.map(short), [], "rows present throughout the paging that were never listed");
    }),
};

/** Rounds of concurrent claims, until two rows share a last transition time (a millisecond of the store's clock). */
const TIE_ROUNDS = 6;

export const listCursorWithinTies: LedgerCheckSpec = {
  rule: "LIST-5",
  name: `the cursor resumes within one millisecond: rows whose last transition is the same time, paged one at a time, are each listed exactly once, in the order of one page (6 concurrent claims, up to ${TIE_ROUNDS} rounds until two share a time)`,
  needs: ["listRows"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = listOf(fixture.ledger);
      for (let round = 0; round < TIE_ROUNDS; round++) {
        // Claimed at once, so that several land in one millisecond: a store whose claims take a
        // round trip each (a server) rarely ties rows claimed one after another, and a cursor that
        // keeps only the time (WHERE since > $cursor) then passes a check that pages them in sequence.
        const tool = `tool_${ctx.key(`ties-${round}`).slice(0, 8)}`;
        const keys = Array.from({ length: 6 }, (_, i) => ctx.key(`tie-${round}-${i}`));
        await Promise.all(keys.map((key) => fixture.ledger.claim({ ...claimRequest(key, "owner-a", "keyed_write"), toolName: tool })));
        const whole = (await list({ toolName: tool, limit: 1000 })).rows;
        mustEqual(whole.map((r) => r.key).sort(), [...keys].sort(), `round ${round}: one page of the tool's rows`);
        const paged: string[] = [];
        let cursor: string | undefined;
        for (let pages = 0; pages <= keys.length; pages++) {
          const page = await list({ toolName: tool, limit: 1, ...(cursor === undefined ? {} : { cursor }) });
          paged.push(...page.rows.map((r) => r.key));
          cursor = page.cursor;
          if (cursor === undefined) break;
        }
        const tied = whole.filter((r, i) => i > 0 && since(r) === since(whole[i - 1]!)).length;
        mustEqual(
          paged.map((k) => short(k)),
          whole.map((r) => short(r.key)),
          `round ${round}: the rows paged one at a time (a page ends between every two rows; ${tied} of them share their predecessor's time), against one page: each exactly once, in the same order`,
        );
        if (tied > 0) return;
      }
    }),
};

/** Every check of this file, in order. */
export const LIST_ROWS_CHECKS: readonly LedgerCheckSpec[] = [listFilters, listOlderThan, listOlderThanFinished, listOrder, listKeepsConversation, listLimits, listPagingUnderInserts, listCursorWithinTies];
