/**
 * TURN-22 (only when the subject declares `listStalledMessages`): listStalledMessages lists
 * exactly the messages in progress whose conversation's lease is released or expired (never one
 * a live lease holds, never a queued, answered or failed one), each with its bound turn index,
 * `stalledSince` (the lapsed lease's expiry, or the binding for a released lease) and the lapsed
 * lease's owner; `olderThanMs` and `conversationId` narrow it; pages in (stalledSince,
 * conversation id, message id) order, each once; refuses what listFailedTurns refuses. An
 * operator re-sends what it lists: a message it skips is never answered, one it lists while its
 * runner works is answered twice over (a re-send that waits for the lease, then resumes).
 */
import { MAX_FAILED_TURNS_LIMIT, type ConversationStore, type StalledMessage, type StalledMessagesPage, type StalledMessagesQuery } from "@dispatch-once/core";
import { must, mustEqual, mustRejectWith, show } from "../failure.js";
import { acquire, commitFor, freshConversation, mustBegin, userText, withConversationFixture } from "./support.js";
import type { ConversationCheckSpec } from "./checks.js";
import { compareIds } from "./failed-turns.js";

type StalledList = (query?: StalledMessagesQuery) => Promise<StalledMessagesPage>;

function listingOf(store: ConversationStore): StalledList {
  must(typeof store.listStalledMessages === "function", "the subject declares listStalledMessages, but the store has no listStalledMessages method");
  return (query) => store.listStalledMessages!(query);
}

async function page(list: StalledList, query: StalledMessagesQuery | undefined, what: string): Promise<StalledMessagesPage> {
  const got = await list(query);
  must(typeof got === "object" && got !== null && Array.isArray(got.messages), `${what}: listStalledMessages must return { messages: [...] }, got ${show(got)}`);
  must(got.cursor === undefined || typeof got.cursor === "string", `${what}: the cursor must be a string or absent, got ${show(got.cursor)}`);
  return got;
}

const idOf = (m: Pick<StalledMessage, "conversationId" | "messageId">): string => `${m.conversationId}/${m.messageId}`;

/** Only the given conversations' messages: a subject's store may hold other checks' data. */
const within = (messages: readonly StalledMessage[], conversations: readonly string[]) => messages.filter((m) => conversations.includes(m.conversationId));

const AN_HOUR_MS = 3_600_000;

/** A fresh conversation whose message m is bound to its turn (in progress) under `owner`'s lease. */
async function bindMessage(store: ConversationStore, label: string, owner: string) {
  const c = freshConversation(label);
  const fence = await acquire(store, c, owner);
  await store.appendUserMessage(c, { id: "m", content: userText(`pay for ${label}`) });
  return { c, fence, snapshot: await mustBegin(store, c, fence, `begin m in ${label}`) };
}

/** TURN-22's order: stalledSince, then conversation id, then message id (code points, as TURN-17's). */
function listedBefore(a: StalledMessage, b: StalledMessage): boolean {
  if (a.stalledSince !== b.stalledSince) return a.stalledSince < b.stalledSince;
  const byConversation = compareIds(a.conversationId, b.conversationId);
  return byConversation !== 0 ? byConversation < 0 : compareIds(a.messageId, b.messageId) < 0;
}

export const stalledListedExactly: ConversationCheckSpec = {
  rule: "TURN-22",
  name: "listStalledMessages lists exactly the messages in progress whose lease expired or was released (never one a live lease holds, nor a queued, answered or failed one), each with its turn index, stalledSince (the lapsed lease's expiry, else its binding) and the lapsed lease's owner; olderThanMs and conversationId narrow it",
  needs: ["listStalledMessages"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store, raw } = fixture;
      const list = listingOf(store);
      const bind = (label: string, owner: string) => bindMessage(store, label, owner);
      // A holder that died after a call ran: its lease lapsed, nothing committed.
      const dead = await bind("stalled-dead", "worker-dead");
      await raw.expireLease(dead.c);
      // A holder that gave up and released its lease.
      const released = await bind("stalled-released", "worker-released");
      await store.releaseLease(released.c, released.fence);
      // A tool-use loop's first turn committed, the message still in progress, then the holder died.
      const midway = await bind("stalled-midway", "worker-midway");
      await store.commitTurn(midway.c, commitFor(midway.snapshot, midway.fence, { answers: false, stopReason: "tool_use" }));
      await raw.expireLease(midway.c);
      // Not stalled: a live holder; an answered message; a failed one; a queued one (never bound).
      const live = await bind("stalled-live", "worker-live");
      const answered = await bind("stalled-answered", "worker-answered");
      await store.commitTurn(answered.c, commitFor(answered.snapshot, answered.fence));
      await raw.expireLease(answered.c);
      const failed = await bind("stalled-failed", "worker-failed");
      await store.failMessage(failed.c, failed.fence, "m", { kind: "failed_turn", retryable: true });
      await raw.expireLease(failed.c);
      const queued = freshConversation("stalled-queued");
      await store.appendUserMessage(queued, { id: "m", content: userText("later") });
      const all = [dead.c, released.c, midway.c, live.c, answered.c, failed.c, queued];

      const what = "listStalledMessages()";
      const got = within((await page(list, undefined, what)).messages, all);
      const expected = [dead.c, released.c, midway.c].map((c) => `${c}/m`).sort();
      mustEqual(got.map(idOf).sort(), expected, `${what}: exactly the messages in progress no live lease holds (not ${live.c}'s, whose lease is live, nor an answered, failed or queued one)`);
      for (const m of got) {
        const stored = (await raw.messages(m.conversationId)).find((s) => s.id === m.messageId);
        mustEqual(stored?.state, "in_progress", `${what}: ${idOf(m)} as stored`);
        mustEqual(m.turnIndex, stored?.turnIndex, `${what}: ${idOf(m)}'s turn index against storage`);
        if (m.conversationId === released.c) {
          mustEqual(m.leaseOwner, undefined, `${what}: ${idOf(m)}'s lease was released: no owner`);
          mustEqual(m.stalledSince, released.snapshot.message.boundAt ?? 0, `${what}: ${idOf(m)}'s stalledSince, for a released lease its boundAt (0 undated)`);
        } else {
          const lease = await raw.lease(m.conversationId);
          mustEqual(m.leaseOwner, lease?.owner, `${what}: ${idOf(m)}'s leaseOwner, the lapsed lease's`);
          mustEqual(m.stalledSince, lease?.expiresAt, `${what}: ${idOf(m)}'s stalledSince, the lapsed lease's expiry`);
        }
      }
      mustEqual((await page(list, { conversationId: dead.c }, "listStalledMessages({ conversationId })")).messages.map(idOf), [`${dead.c}/m`], "listStalledMessages({ conversationId }): that conversation's only");
      mustEqual((await page(list, { conversationId: live.c }, "listStalledMessages({ conversationId: live })")).messages, [], "listStalledMessages({ conversationId }) of a live lease's conversation");
      const old = within((await page(list, { olderThanMs: AN_HOUR_MS }, "listStalledMessages({ olderThanMs: an hour })")).messages, all);
      mustEqual(old.map(idOf), [], "listStalledMessages({ olderThanMs: an hour }): none of these stalled an hour ago on the store's clock");
      // Read-only: the live holder still holds its lease and its message; the dead one's is still listed.
      mustEqual((await raw.lease(live.c))?.owner, "worker-live", "the live lease after the listings");
      mustEqual((await raw.messages(dead.c)).map((m) => m.state), ["in_progress"], "the stalled message after the listings");
    }),
};

export const stalledListPagesAndRefuses: ConversationCheckSpec = {
  rule: "TURN-22",
  name: "listStalledMessages pages in (stalledSince, conversation id, message id) order, each message once, against one page; and refuses what listFailedTurns refuses (limit 0 or above 1000, an unknown member, a foreign cursor, a negative olderThanMs) with invalid_store_input",
  needs: ["listStalledMessages"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store, raw } = fixture;
      const list = listingOf(store);
      const conversations: string[] = [];
      for (const label of ["page-c", "page-a", "page-b", "page-d"]) {
        const { c } = await bindMessage(store, label, "worker");
        await raw.expireLease(c);
        conversations.push(c);
      }
      const one = within((await page(list, undefined, "listStalledMessages()")).messages, conversations);
      mustEqual(one.length, conversations.length, `listStalledMessages(): the ${conversations.length} stalled messages ${show(one.map(idOf))}`);
      for (let i = 1; i < one.length; i++) {
        must(listedBefore(one[i - 1]!, one[i]!), `listStalledMessages(): ${idOf(one[i - 1]!)} is listed before ${idOf(one[i]!)}; the order is (stalledSince, conversation id, message id)`);
      }
      const paged: StalledMessage[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const got = await page(list, { limit: 1, ...(cursor !== undefined ? { cursor } : {}) }, `listStalledMessages({ limit: 1 }), page ${pages + 1}`);
        must(got.messages.length <= 1, `listStalledMessages({ limit: 1 }) returned ${got.messages.length} messages`);
        paged.push(...got.messages);
        cursor = got.cursor;
        must(++pages <= 50, "listStalledMessages({ limit: 1 }): still a cursor after 50 pages");
      } while (cursor !== undefined);
      mustEqual(within(paged, conversations).map(idOf), one.map(idOf), "listStalledMessages({ limit: 1 }) across pages, against one page");
      await mustRejectWith(list({ limit: 0 }), "invalid_store_input", "listStalledMessages({ limit: 0 })");
      await mustRejectWith(list({ limit: MAX_FAILED_TURNS_LIMIT + 1 }), "invalid_store_input", `listStalledMessages({ limit: ${MAX_FAILED_TURNS_LIMIT + 1} })`);
      await mustRejectWith(list({ limt: 1 } as StalledMessagesQuery), "invalid_store_input", "listStalledMessages({ limt: 1 })");
      await mustRejectWith(list({ cursor: "not a cursor" }), "invalid_store_input", "listStalledMessages({ cursor: 'not a cursor' })");
      await mustRejectWith(list({ olderThanMs: -1 }), "invalid_store_input", "listStalledMessages({ olderThanMs: -1 })");
    }),
};

export const STALLED_MESSAGES_CHECKS: readonly ConversationCheckSpec[] = [stalledListedExactly, stalledListPagesAndRefuses];
