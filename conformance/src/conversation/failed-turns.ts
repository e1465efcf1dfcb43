/**
 * TURN-17 (only when the subject declares `listFailedTurns`): listFailedTurns lists exactly the
 * messages in state `failed`, each with its conversation id, message id, bound turn index,
 * `failedAt` on the store's clock and its record as stored; ordered by (failedAt, conversation
 * id, message id); at most `limit` per page (default 100, above 1000 refused); a cursor that
 * lists every turn that stays failed exactly once across pages; the `conversationId` filter;
 * `olderThanMs` on the store's clock; and listing changes nothing. An operator (or a reconciler)
 * relies on this list to tell users which effects of a failed turn happened: a turn it skips is
 * never told, one it lists wrongly is told twice or re-sent for nothing.
 */
import { isDeepStrictEqual } from "node:util";
import { DEFAULT_FAILED_TURNS_LIMIT, MAX_FAILED_TURNS_LIMIT, type ConversationStore, type FailedTurn, type FailedTurnsPage, type FailedTurnsQuery, type JsonValue } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, mustRejectWith, show } from "../failure.js";
import { LEASE_MS, acquire, commitFor, freshConversation, mustBegin, userText, withConversationFixture } from "./support.js";
import type { ConversationCheckSpec } from "./checks.js";
import type { ConversationStoreFixture } from "./types.js";

/** The store's listFailedTurns, which a subject declaring `listFailedTurns` must have. */
export function listingOf(store: ConversationStore): (query?: FailedTurnsQuery) => Promise<FailedTurnsPage> {
  must(typeof store.listFailedTurns === "function", "the subject declares listFailedTurns, but the store has no listFailedTurns method");
  return (query) => store.listFailedTurns!(query);
}

/** A page, its shape checked: { turns: [...] } with an optional string cursor. */
async function page(list: (query?: FailedTurnsQuery) => Promise<FailedTurnsPage>, query: FailedTurnsQuery | undefined, what: string): Promise<FailedTurnsPage> {
  const got = await list(query);
  must(typeof got === "object" && got !== null && Array.isArray(got.turns), `${what}: listFailedTurns must return { turns: [...] }, got ${show(got)}`);
  must(got.cursor === undefined || typeof got.cursor === "string", `${what}: the cursor must be a string or absent, got ${show(got.cursor)}`);
  for (const t of got.turns) {
    must(typeof t.failedAt === "number" && Number.isFinite(t.failedAt), `${what}: ${t.conversationId}/${t.messageId}'s failedAt must be a number, got ${show(t.failedAt)}`);
  }
  return got;
}

/** Every page from the first, `limit` at a time (at most 50 pages). */
async function allPages(list: (query?: FailedTurnsQuery) => Promise<FailedTurnsPage>, query: FailedTurnsQuery, what: string): Promise<FailedTurn[][]> {
  const pages: FailedTurn[][] = [];
  let cursor: string | undefined;
  do {
    const got = await page(list, cursor === undefined ? query : { ...query, cursor }, `${what}, page ${pages.length + 1}`);
    pages.push(got.turns);
    cursor = got.cursor;
    must(pages.length <= 50, `${what}: still a cursor after 50 pages`);
  } while (cursor !== undefined);
  return pages;
}

type FailedStore = (query?: FailedTurnsQuery) => Promise<FailedTurnsPage>;

const idOf = (t: Pick<FailedTurn, "conversationId" | "messageId">): string => `${t.conversationId}/${t.messageId}`;

/**
 * Ids in TURN-17's order: by Unicode code point, which is the order of their UTF-8 bytes (not
 * JavaScript's `<`, which compares UTF-16 code units). The kit's own comparison, not core's.
 */
export function compareIds(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/** The listing order of TURN-17: failedAt, then conversation id, then message id (code points). */
function before(a: FailedTurn, b: FailedTurn): boolean {
  if (a.failedAt !== b.failedAt) return a.failedAt < b.failedAt;
  if (a.conversationId !== b.conversationId) return compareIds(a.conversationId, b.conversationId) < 0;
  return compareIds(a.messageId, b.messageId) < 0;
}

function mustBeOrdered(turns: readonly FailedTurn[], what: string): void {
  for (let i = 1; i < turns.length; i++) {
    const [a, b] = [turns[i - 1]!, turns[i]!];
    must(
      before(a, b),
      `${what}: ${idOf(a)} (failedAt ${a.failedAt}) is listed before ${idOf(b)} (failedAt ${b.failedAt}); the order is (failedAt, conversation id, message id), each turn once`,
    );
  }
}

/** The store's clock now, read off a renewal under the held lease (leaseExpiresAt = now + leaseMs, TURN-10). */
async function storeNow(store: ConversationStore, conversationId: string, fence: number): Promise<number> {
  return (await store.renewLease(conversationId, fence, LEASE_MS)).leaseExpiresAt - LEASE_MS;
}

/** Appends `id`, binds it (it must be the next message) and fails it with `record`. */
async function failNext(store: ConversationStore, c: string, fence: number, id: string, record: JsonValue): Promise<number> {
  await store.appendUserMessage(c, { id, content: userText(`message ${id}`) });
  const snapshot = await mustBegin(store, c, fence, `begin ${id}`);
  mustEqual(snapshot.message.id, id, `the message bound in ${c}`);
  await store.failMessage(c, fence, id, record);
  return snapshot.turnIndex;
}

function recordFor(c: string, id: string): JsonValue {
  return { kind: "failed_turn", conversationId: c, messageId: id, calls: [{ name: "send_payment", effect: "may_have_happened", memo: "Zoë – 東京 😀" }], retryable: true };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A conversation whose lease this check holds, and failing in it. */
async function conversation(store: ConversationStore, label: string): Promise<{ c: string; fence: number }> {
  const c = freshConversation(label);
  return { c, fence: await acquire(store, c, "worker-a") };
}

export const failedListedExactly: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "listFailedTurns lists exactly the messages in state failed (never an answered, queued, in-progress or reopened one), each with its conversation id, message id, bound turn index, failedAt on the store's clock (between readings of the store's clock around failMessage) and its record as stored",
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const expected = new Map<string, { turnIndex: number; record: JsonValue; from: number; to: number }>();
      const failExpected = async (c: string, fence: number, id: string) => {
        const from = await storeNow(store, c, fence);
        const turnIndex = await failNext(store, c, fence, id, recordFor(c, id));
        const to = await storeNow(store, c, fence);
        expected.set(`${c}/${id}`, { turnIndex, record: recordFor(c, id), from, to });
      };
      const one = await conversation(store, "exact-1");
      await store.appendUserMessage(one.c, { id: "answered", content: userText("pay alice") });
      const answered = await mustBegin(store, one.c, one.fence, "begin answered");
      await store.commitTurn(one.c, commitFor(answered, one.fence));
      await failExpected(one.c, one.fence, "failed");
      // Reopened, then in progress again: bound at the failed turn's index, failed, re-sent while the last bound.
      await failNext(store, one.c, one.fence, "reopened", recordFor(one.c, "reopened"));
      mustEqual((await store.appendUserMessage(one.c, { id: "reopened", content: userText("again") })).reopened, true, "the re-send of the last bound failed message");
      mustEqual((await mustBegin(store, one.c, one.fence, "begin the reopened message")).message.id, "reopened", "the reopened message in progress");
      await store.appendUserMessage(one.c, { id: "queued", content: userText("later") });

      const two = await conversation(store, "exact-2");
      await failExpected(two.c, two.fence, "failed");
      // Reopened and left queued.
      await failNext(store, two.c, two.fence, "reopened-queued", recordFor(two.c, "reopened-queued"));
      mustEqual((await store.appendUserMessage(two.c, { id: "reopened-queued", content: userText("again") })).reopened, true, "the re-send of reopened-queued");

      const what = "listFailedTurns()";
      const turns = (await page(list, undefined, what)).turns;
      const got = turns.map(idOf);
      mustEqual(new Set(got).size, got.length, `${what}: no turn listed twice ${show(got)}`);
      must(
        got.length === expected.size && [...expected.keys()].every((k) => got.includes(k)),
        `${what} listed ${show(got)}, expected exactly the failed messages ${show([...expected.keys()])} (not an answered, queued, in-progress or reopened one)`,
      );
      for (const t of turns) {
        const want = expected.get(idOf(t))!;
        const stored = (await fixture.raw.messages(t.conversationId)).find((m) => m.id === t.messageId);
        mustEqual(stored?.state, "failed", `${what}: ${idOf(t)} as stored`);
        mustEqual(t.turnIndex, want.turnIndex, `${what}: ${idOf(t)}'s turn index (the one it was bound to)`);
        mustEqual(t.turnIndex, stored?.turnIndex, `${what}: ${idOf(t)}'s turn index against storage`);
        mustEqual(t.failure, want.record, `${what}: ${idOf(t)}'s record (as failMessage stored it)`);
        mustEqual(t.failure, stored?.failure, `${what}: ${idOf(t)}'s record against storage`);
        must(
          t.failedAt >= want.from && t.failedAt <= want.to,
          `${what}: ${idOf(t)}'s failedAt ${t.failedAt} must be on the store's clock, which read ${want.from} before failMessage and ${want.to} after it`,
        );
      }
    }),
};

const APART_MS = 5;

export const failedListedInOrder: ConversationCheckSpec = {
  rule: "TURN-17",
  name: `listFailedTurns orders by (failedAt, conversation id, message id): failures ${APART_MS} ms apart in conversations and messages whose ids sort the other way come back oldest failure first, on every page`,
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const order: string[] = [];
      // Ids sort against the failure order: "order-3" fails first, "order-1" last, and in it "y" before "x".
      for (const label of ["order-3", "order-2"]) {
        const { c, fence } = await conversation(store, label);
        await failNext(store, c, fence, "m", recordFor(c, "m"));
        order.push(`${c}/m`);
        await sleep(APART_MS);
      }
      const { c, fence } = await conversation(store, "order-1");
      for (const id of ["y", "x"]) {
        await failNext(store, c, fence, id, recordFor(c, id));
        order.push(`${c}/${id}`);
        await sleep(APART_MS);
      }
      const turns = (await page(list, undefined, "listFailedTurns()")).turns;
      mustEqual(turns.map(idOf).sort(), [...order].sort(), "listFailedTurns(): the failed turns");
      // failedAt follows the failures (on one clock; equal only if the store's clock did not move), and the listing its own failedAt.
      const at = new Map(turns.map((t) => [idOf(t), t.failedAt]));
      for (let i = 1; i < order.length; i++) {
        must(at.get(order[i - 1]!)! <= at.get(order[i]!)!, `listFailedTurns(): ${order[i - 1]} failed ${APART_MS} ms before ${order[i]}, but its failedAt ${at.get(order[i - 1]!)} is later than ${at.get(order[i]!)}`);
      }
      mustBeOrdered(turns, "listFailedTurns()");
      for (const limit of [1, 3]) {
        const pages = await allPages(list, { limit }, `listFailedTurns({ limit: ${limit} })`);
        mustBeOrdered(pages.flat(), `listFailedTurns({ limit: ${limit} }) across pages`);
        mustEqual(pages.flat().map(idOf), turns.map(idOf), `listFailedTurns({ limit: ${limit} }) across pages, against one page`);
      }
    }),
};

const MANY = DEFAULT_FAILED_TURNS_LIMIT + 2;

export const failedListLimit: ConversationCheckSpec = {
  rule: "TURN-17",
  name: `listFailedTurns gives at most limit per page (default ${DEFAULT_FAILED_TURNS_LIMIT}, ${MAX_FAILED_TURNS_LIMIT} accepted, above ${MAX_FAILED_TURNS_LIMIT} refused with invalid_store_input): of ${MANY} failed turns, the first page holds ${DEFAULT_FAILED_TURNS_LIMIT} and a cursor`,
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const { c, fence } = await conversation(store, "limit");
      for (let i = 0; i < MANY; i++) await failNext(store, c, fence, `m${String(i).padStart(3, "0")}`, { n: i });
      const first = await page(list, undefined, "listFailedTurns()");
      mustEqual(first.turns.length, DEFAULT_FAILED_TURNS_LIMIT, `listFailedTurns() of ${MANY} failed turns: the default limit`);
      must(first.cursor !== undefined, `listFailedTurns() of ${MANY} failed turns: a cursor, since more follow`);
      for (const limit of [1, 3, MANY - 1]) {
        const got = await page(list, { limit }, `listFailedTurns({ limit: ${limit} })`);
        mustEqual(got.turns.length, limit, `listFailedTurns({ limit: ${limit} }) of ${MANY} failed turns: exactly limit`);
        must(got.cursor !== undefined, `listFailedTurns({ limit: ${limit} }) of ${MANY} failed turns: a cursor, since more follow`);
      }
      for (const limit of [MANY, MAX_FAILED_TURNS_LIMIT]) {
        mustEqual((await page(list, { limit }, `listFailedTurns({ limit: ${limit} })`)).turns.length, MANY, `listFailedTurns({ limit: ${limit} }) of ${MANY} failed turns: all of them`);
      }
      await mustRejectWith(list({ limit: MAX_FAILED_TURNS_LIMIT + 1 }), "invalid_store_input", `listFailedTurns({ limit: ${MAX_FAILED_TURNS_LIMIT + 1} })`);
      await mustRejectWith(list({ limit: 1_000_000 }), "invalid_store_input", "listFailedTurns({ limit: 1000000 })");
    }),
};

export const failedListCursor: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "listFailedTurns' cursor lists every turn that stays failed exactly once across pages of 2, also when listed turns are reopened and new failures are recorded between pages",
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const conversations: Array<{ c: string; fence: number }> = [];
      const failIn = async (label: string) => {
        const conv = await conversation(store, label);
        await failNext(store, conv.c, conv.fence, "m", recordFor(conv.c, "m"));
        conversations.push(conv);
        await sleep(2);
        return `${conv.c}/m`;
      };
      const failed = new Set<string>();
      for (let i = 0; i < 6; i++) failed.add(await failIn(`cursor-${i}`));
      const seen: string[] = [];
      const left = new Set<string>();
      /** Failures recorded between pages, with the failedAt of the last turn listed before each. */
      const addedAt = new Map<string, number>();
      let cursor: string | undefined;
      let pages = 0;
      do {
        const what = `page ${pages + 1} of listFailedTurns({ limit: 2 })`;
        const got = await page(list, { limit: 2, ...(cursor === undefined ? {} : { cursor }) }, what);
        pages += 1;
        must(got.turns.length <= 2, `${what}: ${got.turns.length} turns, at most limit (2)`);
        for (const t of got.turns) must(failed.has(idOf(t)), `${what} listed ${idOf(t)}, which is not failed now`);
        seen.push(...got.turns.map(idOf));
        cursor = got.cursor;
        if (pages <= 2 && got.turns.length > 0) {
          // Between pages: a listed turn leaves the list (reopened by its re-send), and a new failure is recorded.
          const gone = got.turns[0]!;
          const conv = conversations.find((x) => x.c === gone.conversationId)!;
          mustEqual((await store.appendUserMessage(conv.c, { id: "m", content: userText("again") })).reopened, true, `the re-send of ${idOf(gone)}`);
          failed.delete(idOf(gone));
          left.add(idOf(gone));
          await sleep(5);
          const added = await failIn(`cursor-new-${pages}`);
          failed.add(added);
          // A keyset cursor may miss a failure recorded within its tick that sorts before it by ids (TURN-17).
          addedAt.set(added, got.turns.at(-1)!.failedAt);
        }
        must(pages <= 30, "listFailedTurns({ limit: 2 }): still a cursor after 30 pages");
      } while (cursor !== undefined);
      const twice = seen.filter((k, i) => seen.indexOf(k) !== i);
      mustEqual(twice, [], `listFailedTurns({ limit: 2 }) across pages: turns listed twice (listed: ${show(seen)})`);
      const now = new Map((await allPages(list, {}, "listFailedTurns() after the pages")).flat().map((t) => [idOf(t), t.failedAt]));
      const missing = [...failed].filter((k) => !seen.includes(k) && !(addedAt.has(k) && now.get(k) === addedAt.get(k)));
      mustEqual(missing, [], `listFailedTurns({ limit: 2 }) across pages: turns that stayed failed but were never listed (listed: ${show(seen)})`);
    }),
};

export const failedListByConversation: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "listFailedTurns({ conversationId }) lists exactly that conversation's failed turns, on every page; none for a conversation without one or unknown",
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const one = await conversation(store, "filter-1");
      await failNext(store, one.c, one.fence, "f1", recordFor(one.c, "f1"));
      await failNext(store, one.c, one.fence, "f2", recordFor(one.c, "f2"));
      const two = await conversation(store, "filter-2");
      await failNext(store, two.c, two.fence, "g1", recordFor(two.c, "g1"));
      const three = await conversation(store, "filter-3");
      await store.appendUserMessage(three.c, { id: "a", content: userText("fine") });
      await store.commitTurn(three.c, commitFor(await mustBegin(store, three.c, three.fence, "begin a"), three.fence));
      const cases: Array<[string, string[]]> = [
        [one.c, [`${one.c}/f1`, `${one.c}/f2`]],
        [two.c, [`${two.c}/g1`]],
        [three.c, []],
        [freshConversation("filter-unknown"), []],
      ];
      for (const [c, want] of cases) {
        const got = (await page(list, { conversationId: c }, `listFailedTurns({ conversationId: ${c} })`)).turns.map(idOf);
        mustEqual([...got].sort(), want, `listFailedTurns({ conversationId: ${c} }): only that conversation's failed turns`);
        const paged = (await allPages(list, { conversationId: c, limit: 1 }, `listFailedTurns({ conversationId: ${c}, limit: 1 })`)).flat().map(idOf);
        mustEqual([...paged].sort(), want, `listFailedTurns({ conversationId: ${c}, limit: 1 }) across pages`);
      }
    }),
};

const OLD_MS = 400;
const OLDER_THAN_MS = 150;
const AN_HOUR_MS = 60 * 60 * 1000;

export const failedListOlderThan: ConversationCheckSpec = {
  rule: "TURN-17",
  name: `listFailedTurns({ olderThanMs }) counts on the store's clock from the last failure: a failure ${OLD_MS} ms old is listed for olderThanMs ${OLDER_THAN_MS}, one just recorded is not, nor one that first failed ${OLD_MS} ms ago and failed again just now (its retry), every one for 0 and none for an hour (a unit, sign or clock slip fails)`,
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const { c, fence } = await conversation(store, "older");
      await failNext(store, c, fence, "old", recordFor(c, "old"));
      // A message that fails, is re-sent after OLD_MS and fails again: TURN-17 dates it by that last
      // failure (a store that filters on the first failure, which TURN-12's window keeps, lists it as old).
      const again = await conversation(store, "again");
      await failNext(store, again.c, again.fence, "again", recordFor(again.c, "again"));
      await sleep(OLD_MS);
      await failNext(store, c, fence, "new", recordFor(c, "new"));
      const refailFrom = await storeNow(store, again.c, again.fence);
      await failNext(store, again.c, again.fence, "again", recordFor(again.c, "again"));
      const all = (await page(list, undefined, "listFailedTurns()")).turns;
      mustEqual(all.map(idOf).sort(), [`${again.c}/again`, `${c}/new`, `${c}/old`].sort(), "listFailedTurns()");
      const failedAt = new Map(all.map((t) => [idOf(t), t.failedAt]));
      must(
        failedAt.get(`${again.c}/again`)! >= refailFrom,
        `listFailedTurns() gave ${again.c}/again failedAt ${failedAt.get(`${again.c}/again`)}, before its second failure (the store's clock read ${refailFrom} before it): failedAt is the last failure's time`,
      );
      for (const olderThanMs of [0, OLDER_THAN_MS, AN_HOUR_MS]) {
        const what = `listFailedTurns({ olderThanMs: ${olderThanMs} })`;
        const from = await storeNow(store, c, fence);
        const got = (await page(list, { olderThanMs }, what)).turns.map(idOf);
        const to = await storeNow(store, c, fence);
        for (const [k, at] of failedAt) {
          // Old enough by the store's clock before the call: listed; too young even after it: not listed; between: not judged.
          if (at <= from - olderThanMs) must(got.includes(k), `${what} listed ${show(got)}: ${k} failed at ${at}, ${from - at} ms before the store's clock read ${from}, so it must be listed`);
          if (at > to - olderThanMs) must(!got.includes(k), `${what} listed ${show(got)}: ${k} failed at ${at}, only ${to - at} ms before the store's clock read ${to}, so it must not be listed`);
        }
        if (olderThanMs === OLDER_THAN_MS) must(failedAt.get(`${c}/old`)! <= from - olderThanMs, `the store's clock moved only ${from - failedAt.get(`${c}/old`)!} ms in the ${OLD_MS} ms slept after "old" failed`);
      }
    }),
};

export const failedListUnknownTime: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "a failed turn whose failure time the store did not keep (a row from before failedAt) is listed with failedAt 0: before every other, once across pages of 1 and 2 (a cursor at 0 is a cursor), older than any olderThanMs, by its conversation, reopenable as any other, also after a restart; a re-send reopens it and it leaves the list, and failed again it has its new time",
  needs: ["listFailedTurns", "legacyFailedRows"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const forget = fixture.raw.forgetFailedAt;
      must(typeof forget === "function", "the subject declares legacyFailedRows, but its raw hooks have no forgetFailedAt");
      const forgetFailedAt = (c: string, id: string) => forget.call(fixture.raw, c, id);
      // A turn failed now, before the old rows are written: 0 must still sort before it.
      const now = await conversation(store, "legacy-now");
      const from = await storeNow(store, now.c, now.fence);
      await failNext(store, now.c, now.fence, "z", recordFor(now.c, "z"));
      const one = await conversation(store, "legacy-1");
      for (const id of ["a1", "a2"]) {
        await failNext(store, one.c, one.fence, id, recordFor(one.c, id));
        await forgetFailedAt(one.c, id);
      }
      await failNext(store, one.c, one.fence, "a3", recordFor(one.c, "a3"));
      const two = await conversation(store, "legacy-2");
      await failNext(store, two.c, two.fence, "b", recordFor(two.c, "b"));
      await forgetFailedAt(two.c, "b");
      const to = await storeNow(store, now.c, now.fence);
      const legacy = [`${one.c}/a1`, `${one.c}/a2`, `${two.c}/b`];
      const current = [`${now.c}/z`, `${one.c}/a3`];

      const judge = async (listing: FailedStore, what: string): Promise<FailedTurn[]> => {
        const turns = (await page(listing, undefined, what)).turns;
        mustEqual([...turns.map(idOf)].sort(), [...legacy, ...current].sort(), `${what}: the failed turns, old rows included`);
        for (const t of turns) {
          const stored = (await fixture.raw.messages(t.conversationId)).find((m) => m.id === t.messageId);
          mustEqual([t.turnIndex, t.failure], [stored?.turnIndex, stored?.failure], `${what}: ${idOf(t)}'s turn index and record against storage`);
          if (legacy.includes(idOf(t))) mustEqual(t.failedAt, 0, `${what}: ${idOf(t)}'s failedAt (its failure time was not kept)`);
          else must(t.failedAt >= from && t.failedAt <= to, `${what}: ${idOf(t)}'s failedAt ${t.failedAt} must be on the store's clock, which read ${from} and ${to} around its failure`);
        }
        mustBeOrdered(turns, what);
        mustEqual(turns.slice(0, legacy.length).map(idOf).sort(), [...legacy].sort(), `${what}: the turns failed at an unknown time (0) come first`);
        if (turns.every((t) => t.reopenable !== undefined)) {
          const reopenable = turns.filter((t) => t.reopenable).map(idOf).sort();
          mustEqual(reopenable, [`${now.c}/z`, `${one.c}/a3`, `${two.c}/b`].sort(), `${what}: the reopenable turns (each its conversation's last bound)`);
        }
        for (const limit of [1, 2]) {
          const paged = (await allPages(listing, { limit }, `${what} with limit ${limit}`)).flat();
          mustEqual(paged.map(idOf), turns.map(idOf), `${what} in pages of ${limit}, against one page (a cursor after a turn failed at 0 must go on after it)`);
        }
        const older = (await page(listing, { olderThanMs: AN_HOUR_MS }, `${what} with olderThanMs an hour`)).turns.map(idOf);
        mustEqual([...older].sort(), [...legacy].sort(), `${what} with olderThanMs an hour: exactly the turns failed at an unknown time (0 is older than any age)`);
        const mine = (await page(listing, { conversationId: one.c }, `${what} of ${one.c}`)).turns.map(idOf);
        mustEqual(mine, [`${one.c}/a1`, `${one.c}/a2`, `${one.c}/a3`], `${what} of ${one.c}: its failed turns in order`);
        // a1 and a2 share their failedAt (0) in one conversation: the filtered cursor must go on by
        // message id. Two failures of one conversation rarely share a millisecond of the store's
        // clock, so without this tie a cursor that drops the message id passes by chance.
        const minePaged = (await allPages(listing, { conversationId: one.c, limit: 1 }, `${what} of ${one.c} with limit 1`)).flat().map(idOf);
        mustEqual(minePaged, mine, `${what} of ${one.c} in pages of 1, against one page (a1 and a2 share failedAt 0: the cursor must go on by message id)`);
        return turns;
      };
      await judge(list, "listFailedTurns()");
      if (subject.capabilities.survivesRestart) await judge(listingOf(await fixture.reopen()), "listFailedTurns() on a fresh instance");

      mustEqual((await store.appendUserMessage(two.c, { id: "b", content: userText("again") })).reopened, true, `the re-send of ${two.c}/b, failed at an unknown time and its conversation's last bound`);
      const left = (await page(list, undefined, "listFailedTurns() after the re-send")).turns.map(idOf);
      must(!left.includes(`${two.c}/b`), `listFailedTurns() after the re-send listed ${show(left)}: the reopened ${two.c}/b must leave the list`);
      mustEqual((await mustBegin(store, two.c, two.fence, "begin the reopened b")).message.id, "b", "the reopened message in progress");
      const again = await storeNow(store, two.c, two.fence);
      await store.failMessage(two.c, two.fence, "b", recordFor(two.c, "b"));
      const after = await storeNow(store, two.c, two.fence);
      const refailed = (await page(list, { conversationId: two.c }, `listFailedTurns({ conversationId: ${two.c} }) after b failed again`)).turns;
      mustEqual(refailed.map(idOf), [`${two.c}/b`], `listFailedTurns({ conversationId: ${two.c} }) after b failed again`);
      must(
        refailed[0]!.failedAt >= again && refailed[0]!.failedAt <= after,
        `${two.c}/b failed again between ${again} and ${after} on the store's clock, but is listed with failedAt ${refailed[0]!.failedAt} (the unknown time of its first failure must not stick)`,
      );
    }),
};

/**
 * Message ids whose code point order (UTF-8 byte order) differs from their UTF-16 code unit
 * order: U+E000..U+FFFF come after the characters above U+FFFF by code unit, before them by code
 * point; with 2- and 3-byte characters, a prefix and the highest code point for good measure.
 */
const TIE_IDS = ["m", "\u00e9", "\u0800", "\ud7ff", "\ue000", "\uff5e", "\uffff", "\u{10000}", "\u{1f600}", "\u{1f600}a", "\u{1f600}\uff5e", "\u{10ffff}"];

export const failedListTiesByCodePoint: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "turns failed at one time (failedAt 0, rows from before failedAt) are listed by conversation id, then message id in Unicode code point order (UTF-8 byte order, not UTF-16 code units: U+E000..U+FFFF before astral characters), on one page and in pages of 1, 2 and 5 (the cursor resumes in that order), and by conversation",
  needs: ["listFailedTurns", "legacyFailedRows"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const forget = fixture.raw.forgetFailedAt;
      must(typeof forget === "function", "the subject declares legacyFailedRows, but its raw hooks have no forgetFailedAt");
      const expected: string[] = [];
      // Two conversations (ASCII ids: the conversation decides first), each failing its messages
      // in an order that is neither of the two id orders.
      for (const label of ["ties-b", "ties-a"]) {
        const { c, fence } = await conversation(store, label);
        const ids = TIE_IDS.map((id, i) => ({ id, k: (i * 7) % TIE_IDS.length })).sort((x, y) => x.k - y.k).map((x) => x.id);
        for (const id of ids) {
          await failNext(store, c, fence, id, recordFor(c, id));
          await forget.call(fixture.raw, c, id);
        }
        expected.push(...[...TIE_IDS].sort(compareIds).map((id) => `${c}/${id}`));
      }
      expected.sort((x, y) => compareIds(x.split("/")[0]!, y.split("/")[0]!));
      const what = "listFailedTurns()";
      const turns = (await page(list, undefined, what)).turns;
      for (const t of turns) mustEqual(t.failedAt, 0, `${what}: ${show(idOf(t))}'s failedAt (its failure time was not kept)`);
      mustEqual(turns.map(idOf), expected, `${what}: turns failed at one time, by conversation id and then message id in code point order`);
      for (const limit of [1, 2, 5]) {
        const paged = (await allPages(list, { limit }, `${what} with limit ${limit}`)).flat().map(idOf);
        mustEqual(paged, expected, `${what} in pages of ${limit}: each tie once, in code point order (the cursor resumes in the listing's order)`);
      }
      const c = expected[0]!.split("/")[0]!;
      const mine = (await allPages(list, { conversationId: c, limit: 3 }, `listFailedTurns({ conversationId: ${c}, limit: 3 })`)).flat().map(idOf);
      mustEqual(mine, expected.filter((k) => k.startsWith(`${c}/`)), `listFailedTurns({ conversationId: ${c}, limit: 3 }) across pages`);
    }),
};

/** Everything the raw hooks and the store's answers say about the conversations. */
async function everything(fixture: ConversationStoreFixture, conversations: readonly string[]): Promise<unknown> {
  const out: Record<string, unknown> = {};
  for (const c of conversations) {
    const messages = await fixture.raw.messages(c);
    out[c] = {
      lease: await fixture.raw.lease(c),
      messages,
      turns: await fixture.raw.turns(c),
      records: await fixture.raw.records(c),
      answers: await Promise.all(messages.map((m) => fixture.store.message(c, m.id))),
      log: await fixture.store.log(c),
      storeRecords: await fixture.store.records(c),
    };
  }
  return out;
}

export const failedListReadOnly: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "listFailedTurns is read-only: storage (messages, turns, records, leases) and the store's answers are the same after every kind of listing (all, by conversation, paged, olderThanMs), and a listed reopenable turn still reopens",
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const one = await conversation(store, "readonly-1");
      await store.appendUserMessage(one.c, { id: "a", content: userText("pay alice") });
      await store.commitTurn(one.c, commitFor(await mustBegin(store, one.c, one.fence, "begin a"), one.fence));
      await failNext(store, one.c, one.fence, "f1", recordFor(one.c, "f1"));
      await failNext(store, one.c, one.fence, "f2", recordFor(one.c, "f2"));
      await store.appendUserMessage(one.c, { id: "q", content: userText("later") });
      await store.addRecord(one.c, { note: "beside" });
      const two = await conversation(store, "readonly-2");
      await failNext(store, two.c, two.fence, "g", recordFor(two.c, "g"));
      await store.releaseLease(two.c, two.fence);
      const conversations = [one.c, two.c];
      const before = await everything(fixture, conversations);
      await page(list, undefined, "listFailedTurns()");
      await page(list, { conversationId: one.c }, "listFailedTurns({ conversationId })");
      await allPages(list, { limit: 1 }, "listFailedTurns({ limit: 1 })");
      await page(list, { olderThanMs: 0 }, "listFailedTurns({ olderThanMs: 0 })");
      await page(list, { olderThanMs: AN_HOUR_MS }, "listFailedTurns({ olderThanMs: an hour })");
      const after = await everything(fixture, conversations);
      if (!isDeepStrictEqual(after, before)) {
        throw new ConformanceFailure(`listFailedTurns MUST be read-only, but storage or the store's answers changed:\nbefore: ${show(before)}\nafter:  ${show(after)}`);
      }
      mustEqual((await store.appendUserMessage(two.c, { id: "g", content: userText("again") })).reopened, true, "the re-send of g, listed and the last bound, after the listings");
    }),
};

/** Every check of this file, in order (after listedReopenableExact in CONVERSATION_CHECK_SPECS). */
export const FAILED_TURNS_CHECKS: readonly ConversationCheckSpec[] = [
  failedListedExactly,
  failedListedInOrder,
  failedListLimit,
  failedListCursor,
  failedListByConversation,
  failedListOlderThan,
  failedListReadOnly,
  failedListUnknownTime,
  failedListTiesByCodePoint,
];
