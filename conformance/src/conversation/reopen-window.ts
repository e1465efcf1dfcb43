/*
 * TURN-12's re-send window (only when the subject declares `reopenWindow`): appendUserMessage
 * with `{ reopenWithinMs }` reopens a failed message only while its first failure is less than
 * that old on the store's clock, decided in the same atomic step as the reopen; at or past it the
 * message stays failed, nothing is queued, and the result says `pastReopenWindow`. A window of 0
 * is past every failure (its age is 0 or more), so the check needs no way to move the clock.
 */
import type { ConversationStore, TurnSnapshot } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, mustRejectWith, show } from "../failure.js";
import { LEASE_MS, acquire, commitFor, freshConversation, mustBegin, userText, withConversationFixture } from "./support.js";
import type { ConversationCheckSpec } from "./checks.js";

/** Rounds a boundary probe tries before it gives up finding one within a millisecond. */
const BOUNDARY_ROUNDS = 6;
const HOUR = 60 * 60 * 1000;

function windowOf(store: ConversationStore): void {
  must(store.capabilities?.supports?.reopenWindow === true, `the subject declares reopenWindow, but the store's capabilities.supports.reopenWindow is ${show(store.capabilities?.supports?.reopenWindow)}`);
}

/** m1 ("pay alice") queued and bound by worker-a: its fence and the binding's snapshot. */
async function boundM1(store: ConversationStore, c: string): Promise<{ fence: number; snapshot: TurnSnapshot }> {
  await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
  const fence = await acquire(store, c, "worker-a");
  return { fence, snapshot: await mustBegin(store, c, fence, "begin m1") };
}

export const reopenWithinWindow: ConversationCheckSpec = {
  rule: "TURN-12",
  name: `a re-send with reopenWithinMs reopens a failed message only while its failure is younger than the window on the store's clock: at or past it (a window of 0) it stays failed, nothing is queued, and the result says pastReopenWindow, also in the very millisecond of its binding (up to ${BOUNDARY_ROUNDS} rounds until one lands in it: a window compared with ">" reopens it); without the option it reopens as before`,
  needs: ["reopenWindow"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      const { fence, snapshot: first } = await boundM1(store, c);
      const record = { kind: "failed_turn", messageId: "m1", effects: [{ key: "k1", effect: "happened" }] };
      await store.failMessage(c, fence, "m1", record);
      const within = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: HOUR });
      mustEqual([within.reopened, within.message.state, within.pastReopenWindow], [true, "queued", undefined], "a re-send of m1 one hour inside the window");
      const retry = await mustBegin(store, c, fence, "begin the retry");
      mustEqual([retry.message.id, retry.turnIndex], ["m1", first.turnIndex], "the retry's message and index");
      await store.failMessage(c, fence, "m1", record);
      const before = await fixture.raw.messages(c);
      const past = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: 0 });
      mustEqual(
        [past.appended, past.reopened, past.pastReopenWindow, past.message.state, past.message.failure],
        [false, false, true, "failed", record],
        "a re-send of m1 with reopenWithinMs 0 (every failure is at least 0 ms old: past the window)",
      );
      mustEqual(await fixture.raw.messages(c), before, "the stored messages after the re-send past the window (nothing changed)");
      mustEqual(await store.beginTurn(c, fence), undefined, "nothing waits after the re-send past the window");
      const unbounded = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      mustEqual([unbounded.reopened, unbounded.message.state], [true, "queued"], "a re-send of m1 without reopenWithinMs (no time bound, TURN-12 as before)");
      // The boundary itself: a failure exactly 0 ms old is at the window of 0, so past it. Only a round whose
      // binding, failure and re-send all fall in one millisecond of the store's clock (read before and after)
      // tests it; a slower store's rounds are not judged on it.
      for (let round = 0; round < BOUNDARY_ROUNDS; round++) {
        const cb = freshConversation();
        await store.appendUserMessage(cb, { id: "m1", content: userText("pay alice") });
        const fb = await acquire(store, cb, "worker-a");
        const from = await storeNow(store, cb, fb);
        await mustBegin(store, cb, fb, `round ${round}: begin m1`);
        await store.failMessage(cb, fb, "m1", record);
        const edge = await store.appendUserMessage(cb, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: 0 });
        const to = await storeNow(store, cb, fb);
        mustEqual(
          [edge.reopened, edge.pastReopenWindow, edge.message.state],
          [false, true, "failed"],
          `round ${round}: a re-send of m1 with reopenWithinMs 0${from === to ? `, bound, failed and re-sent within the store's millisecond ${from} (its failure is exactly 0 ms old: at the window, so past it)` : ""}`,
        );
        if (from === to) break;
      }
    }),
};

export const reopenWindowNotForOtherBound: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a re-send with reopenWithinMs of a failed message another message was bound after says nothing of the window (it could not reopen anyway), and a window that is not a finite number of milliseconds, 0 or more, is refused with invalid_store_input",
  needs: ["reopenWindow"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      const { fence } = await boundM1(store, c);
      await store.failMessage(c, fence, "m1", { failed: "m1" });
      for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, "3600000"]) {
        await mustRejectWith(store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: bad as number }), "invalid_store_input", `reopenWithinMs ${show(bad)}`);
      }
      mustEqual((await store.message(c, "m1"))?.state, "failed", "m1 after the refused re-sends");
      await store.appendUserMessage(c, { id: "m2", content: userText("something else") });
      await mustBegin(store, c, fence, "begin m2");
      const resend = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: 0 });
      mustEqual([resend.reopened, resend.pastReopenWindow], [false, undefined], "a re-send of m1 after m2 was bound, with reopenWithinMs 0");
    }),
};

/** How far apart the first and the last failure are: the window between them is half of it. */
const APART_MS = 600;
const BETWEEN_MS = APART_MS / 2;
/**
 * Waits at least `ms` on the store's clock as well as the process's: a timer can fire a
 * millisecond before Date.now() says `ms` passed (timers run on a monotonic clock read once per
 * loop turn), and a correct store then measured 599 ms for APART_MS (seen under load), so each
 * wait is given a little slack. The checks only need "at least", never "at most".
 */
const CLOCK_SLACK_MS = 25;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms + CLOCK_SLACK_MS));

/**
 * m1 failed, then APART_MS later re-sent inside the window, retried at its index and failed
 * again: its first failure is at least APART_MS old, its last one fresh. A window of BETWEEN_MS
 * lies between the two ages, so a store that measures from the last failure answers otherwise.
 */
async function failedTwiceApart(store: ConversationStore, c: string): Promise<number> {
  const { fence } = await boundM1(store, c);
  await store.failMessage(c, fence, "m1", { failed: "m1", attempt: 1 });
  await sleep(APART_MS);
  const reopened = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: HOUR });
  mustEqual(reopened.reopened, true, `a re-send of m1 ${APART_MS} ms after its failure, with a window of an hour`);
  await mustBegin(store, c, fence, "begin m1's retry");
  await store.failMessage(c, fence, "m1", { failed: "m1", attempt: 2 });
  return fence;
}

export const reopenWindowFromFirstFailure: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "the re-send window counts from a message's first failure, which a re-send and a retry that fails again do not move: a re-send with a window shorter than the first failure's age stays failed (pastReopenWindow) though its last failure is fresh",
  needs: ["reopenWindow"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      const fence = await failedTwiceApart(store, c);
      const past = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: BETWEEN_MS });
      mustEqual(
        [past.reopened, past.pastReopenWindow, past.message.state],
        [false, true, "failed"],
        `a re-send of m1 with reopenWithinMs ${BETWEEN_MS}: its first failure is at least ${APART_MS} ms old (its retry's failure is fresh, but the first attempt's ledger rows age from the first)`,
      );
      mustEqual(await store.beginTurn(c, fence), undefined, "nothing waits after the re-send past the window");
    }),
};

export const reopenWindowFromBinding: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "where the store dates the binding (boundAt), the re-send window counts from it when it is earlier than the first failure: a message bound, taken over and failed later stays failed (pastReopenWindow) on a re-send whose window is shorter than the binding's age, and its listing says so",
  needs: ["reopenWindow", "boundAt"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      // m1 bound; its holder dies; APART_MS later the next holder takes it over and its attempt fails.
      const { fence: fenceA } = await boundM1(store, c);
      await sleep(APART_MS);
      await store.releaseLease(c, fenceA);
      const fence = await acquire(store, c, "worker-b");
      const taken = await mustBegin(store, c, fence, "begin m1 by the next holder");
      mustEqual(taken.message.id, "m1", "the message the next holder takes over");
      await store.failMessage(c, fence, "m1", { failed: "m1" });
      const why = `its binding is at least ${APART_MS} ms old, its first failure fresh: the rows of its first holder's calls age from before the failure`;
      if (subject.capabilities.listFailedTurns && store.listFailedTurns !== undefined) {
        const listed = (await store.listFailedTurns({ conversationId: c, reopenWithinMs: BETWEEN_MS })).turns.map((t) => [t.messageId, t.reopenable, t.pastReopenWindow]);
        mustEqual(listed, [["m1", false, true]], `m1 listed with reopenWithinMs ${BETWEEN_MS} (${why}): [message, reopenable, pastReopenWindow]`);
      }
      const past = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: BETWEEN_MS });
      mustEqual([past.reopened, past.pastReopenWindow, past.message.state], [false, true, "failed"], `a re-send of m1 with reopenWithinMs ${BETWEEN_MS}, counted from its binding (${why})`);
      mustEqual(await store.beginTurn(c, fence), undefined, "nothing waits after the re-send past the window");
      const within = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: HOUR });
      mustEqual([within.reopened, within.message.state], [true, "queued"], "a re-send of m1 with a window of an hour");
    }),
};

export const boundAtInheritedAtFailedIndex: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a message bound at a failed message's index takes that message's window start as its boundAt (its calls meet that message's rows: keys come from the index), so its own re-send window counts from it and its listing says so; beginTurn says bound on the call that binds a message, new or reopened, and not on a take-over; a message bound at a fresh index is dated by its own binding",
  needs: ["reopenWindow", "boundAt"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      const { fence: fenceA, snapshot: first } = await boundM1(store, c);
      mustEqual(first.bound, true, "bound of the beginTurn that binds m1");
      const at = first.message.boundAt;
      await sleep(APART_MS);
      await store.failMessage(c, fenceA, "m1", { failed: "m1" });
      await store.appendUserMessage(c, { id: "m2", content: userText("pay alice") });
      const second = await mustBegin(store, c, fenceA, "begin m2 where m1 failed");
      mustEqual(
        [second.message.id, second.turnIndex, second.bound, second.message.boundAt],
        ["m2", first.turnIndex, true, at],
        `[message, turnIndex, bound, boundAt] of m2 bound at m1's index ${APART_MS} ms after m1 was bound (m2's calls meet m1's ledger rows, which age from m1's binding: boundAt must be m1's)`,
      );
      await store.failMessage(c, fenceA, "m2", { failed: "m2" });
      const why = `m2 is bound at the index where m1 failed, and m1's binding is at least ${APART_MS} ms old`;
      if (subject.capabilities.listFailedTurns && store.listFailedTurns !== undefined) {
        const listed = (await store.listFailedTurns({ conversationId: c, reopenWithinMs: BETWEEN_MS })).turns.find((t) => t.messageId === "m2");
        mustEqual([listed?.reopenable, listed?.pastReopenWindow], [false, true], `m2 listed with reopenWithinMs ${BETWEEN_MS} (${why}): [reopenable, pastReopenWindow]`);
      }
      const past = await store.appendUserMessage(c, { id: "m2", content: userText("pay alice") }, { reopenWithinMs: BETWEEN_MS });
      mustEqual([past.reopened, past.pastReopenWindow, past.message.state], [false, true, "failed"], `a re-send of m2 with reopenWithinMs ${BETWEEN_MS} (${why})`);
      const within = await store.appendUserMessage(c, { id: "m2", content: userText("pay alice") }, { reopenWithinMs: HOUR });
      mustEqual([within.reopened, within.message.state], [true, "queued"], "a re-send of m2 with a window of an hour");
      const retry = await mustBegin(store, c, fenceA, "begin m2's retry");
      mustEqual([retry.message.id, retry.bound, retry.message.boundAt], ["m2", true, at], "[message, bound, boundAt] of m2's retry (a reopen binds it again; its boundAt stays)");
      await store.releaseLease(c, fenceA);
      const fenceB = await acquire(store, c, "worker-b");
      const taken = await mustBegin(store, c, fenceB, "begin m2 by the next holder");
      mustEqual([taken.message.id, taken.bound, taken.message.boundAt], ["m2", false, at], "[message, bound, boundAt] of m2 taken over by the next holder (not bound by this call)");
      await store.commitTurn(c, { ...commitFor(taken, fenceB), answers: true });
      await store.appendUserMessage(c, { id: "m3", content: userText("thanks") });
      const from = await storeNow(store, c, fenceB);
      const third = await mustBegin(store, c, fenceB, "begin m3 after m2's turn committed");
      must(
        third.bound === true && typeof third.message.boundAt === "number" && third.message.boundAt >= from,
        `m3, bound at a fresh index (m2's turn committed), must say bound and be dated by its own binding (boundAt at least ${from}, the store's clock before its beginTurn); got bound ${show(third.bound)}, boundAt ${show(third.message.boundAt)}`,
      );
    }),
};

export const listingJudgesReopenWindow: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "with reopenWithinMs, a listed failed turn says reopenable exactly when a re-send with that window would reopen it (from its first failure, firstFailedAt) and pastReopenWindow when the window is why it would not; another message bound since is not the window's doing; a bad window is refused",
  needs: ["reopenWindow", "listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      must(typeof store.listFailedTurns === "function", "the subject declares listFailedTurns, but the store has no listFailedTurns method");
      windowOf(store);
      const list = store.listFailedTurns!.bind(store);
      const c = freshConversation();
      await failedTwiceApart(store, c);
      const judged = async (reopenWithinMs: number | undefined, conversationId = c) => {
        const page = await list({ conversationId, ...(reopenWithinMs === undefined ? {} : { reopenWithinMs }) });
        return page.turns.map((t) => ({ id: t.messageId, failedAt: t.failedAt, firstFailedAt: t.firstFailedAt, reopenable: t.reopenable, pastReopenWindow: t.pastReopenWindow }));
      };
      const [byWindow] = await judged(BETWEEN_MS);
      must(byWindow !== undefined, `m1 must be listed as failed (listFailedTurns({ conversationId, reopenWithinMs: ${BETWEEN_MS} }))`);
      must(
        typeof byWindow.firstFailedAt === "number" && byWindow.failedAt - byWindow.firstFailedAt >= APART_MS,
        `m1's firstFailedAt must be its first failure, at least ${APART_MS} ms before its last (failedAt ${byWindow.failedAt}, on the store's clock), got ${show(byWindow.firstFailedAt)}`,
      );
      mustEqual([byWindow.reopenable, byWindow.pastReopenWindow], [false, true], `m1 listed with reopenWithinMs ${BETWEEN_MS} (first failure at least ${APART_MS} ms old, last one fresh): [reopenable, pastReopenWindow]`);
      mustEqual((await judged(HOUR)).map((t) => [t.reopenable, t.pastReopenWindow]), [[true, false]], "m1 listed with reopenWithinMs of an hour: [reopenable, pastReopenWindow]");
      mustEqual((await judged(undefined)).map((t) => [t.reopenable, t.pastReopenWindow]), [[true, undefined]], "m1 listed without reopenWithinMs (no time bound, what a re-send without the option does): [reopenable, pastReopenWindow]");
      // Another message bound since: a re-send returns the stored failure whatever the window.
      const o = freshConversation("other");
      await store.appendUserMessage(o, { id: "a", content: userText("pay bob") });
      const fence = await acquire(store, o, "worker-a");
      await mustBegin(store, o, fence, "begin a");
      await store.failMessage(o, fence, "a", { failed: "a" });
      await store.appendUserMessage(o, { id: "b", content: userText("something else") });
      await mustBegin(store, o, fence, "begin b");
      mustEqual((await judged(0, o)).map((t) => [t.id, t.reopenable, t.pastReopenWindow]), [["a", false, false]], "a listed with reopenWithinMs 0 after b was bound at its index: [message, reopenable, pastReopenWindow]");
      for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, "3600000"]) {
        await mustRejectWith(list({ conversationId: c, reopenWithinMs: bad as number }), "invalid_store_input", `listFailedTurns with reopenWithinMs ${show(bad)}`);
      }
      // What the listing said is what the re-sends do, and listing changed nothing.
      const before = await fixture.raw.messages(c);
      mustEqual(before.find((m) => m.id === "m1")?.state, "failed", "m1 after the listings (read-only)");
      const resend = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: BETWEEN_MS });
      mustEqual([resend.reopened, resend.pastReopenWindow], [false, true], `a re-send of m1 with reopenWithinMs ${BETWEEN_MS}, after the listing said pastReopenWindow`);
    }),
};

/** The store's clock now, read off a renewal under the held lease (leaseExpiresAt = now + leaseMs, TURN-10). */
async function storeNow(store: ConversationStore, conversationId: string, fence: number): Promise<number> {
  return (await store.renewLease(conversationId, fence, LEASE_MS)).leaseExpiresAt - LEASE_MS;
}

/** Waits (bounded) until the store's clock reads later than `at`, so a time written again would differ. */
async function clockPast(store: ConversationStore, conversationId: string, fence: number, at: number): Promise<void> {
  for (let tries = 0; tries < 200; tries++) {
    if ((await storeNow(store, conversationId, fence)) > at) return;
    await new Promise<void>((resolve) => setTimeout(resolve, 5));
  }
  throw new ConformanceFailure(`the store's clock did not move past ${at} in 200 readings 5 ms apart`);
}

export const reopenedShowsFirstFailure: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a reopened message shows firstFailedAt, its first failure on the store's clock, while queued and in progress (the re-send's answer, message, beginTurn, a fresh instance), kept by a retry that fails again; a message that never failed, or is failed or answered, shows none",
  needs: ["reopenWindow"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      const { fence, snapshot: bound } = await boundM1(store, c);
      mustEqual(bound.message.firstFailedAt, undefined, "firstFailedAt of m1 bound for the first time (it never failed)");
      const from = await storeNow(store, c, fence);
      await store.failMessage(c, fence, "m1", { failed: "m1", attempt: 1 });
      const to = await storeNow(store, c, fence);
      mustEqual((await store.message(c, "m1"))?.firstFailedAt, undefined, "firstFailedAt of m1 while failed (listFailedTurns gives it there)");
      const reopened = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: HOUR });
      const first = reopened.message.firstFailedAt;
      must(
        typeof first === "number" && first >= from && first <= to,
        `a re-send of m1 that reopens it must show firstFailedAt, its first failure on the store's clock (read ${from} before failMessage and ${to} after it): a holder resuming its retry checks the re-send window with it (TURN-12); got ${show(first)}`,
      );
      mustEqual((await store.message(c, "m1"))?.firstFailedAt, first, "firstFailedAt of m1 queued after the reopen (message)");
      const retry = await mustBegin(store, c, fence, "begin m1's retry");
      mustEqual(retry.message.firstFailedAt, first, "firstFailedAt of m1 in beginTurn's snapshot of its retry");
      mustEqual((await store.message(c, "m1"))?.firstFailedAt, first, "firstFailedAt of m1 in progress (message)");
      if (subject.capabilities.survivesRestart) {
        const restarted = await fixture.reopen();
        mustEqual((await restarted.message(c, "m1"))?.firstFailedAt, first, "firstFailedAt of m1 in progress, read on a fresh instance");
      }
      // The retry fails again and is reopened again: the first failure stays the one shown.
      await store.failMessage(c, fence, "m1", { failed: "m1", attempt: 2 });
      const again = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: HOUR });
      mustEqual([again.reopened, again.message.firstFailedAt], [true, first], "a second reopen of m1 after its retry failed again: [reopened, firstFailedAt]");
      await store.appendUserMessage(c, { id: "m2", content: userText("something else") });
      mustEqual((await store.message(c, "m2"))?.firstFailedAt, undefined, "firstFailedAt of m2 queued (it never failed)");
      const retried = await mustBegin(store, c, fence, "begin m1's second retry");
      await store.commitTurn(c, { ...commitFor(retried, fence), answers: true });
      mustEqual((await store.message(c, "m1"))?.state, "answered", "m1 after its retry committed an answer");
      mustEqual((await store.message(c, "m1"))?.firstFailedAt, undefined, "firstFailedAt of m1 once answered (no retry of it is resumed)");
    }),
};

export const boundShowsBoundAt: ConversationCheckSpec = {
  rule: "TURN-11",
  name: "a bound message shows boundAt, the time of its first binding on the store's clock (the binding's beginTurn, message), kept after a take-over, a reopen and on a fresh instance; a message never bound shows none",
  needs: ["boundAt"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      must(store.capabilities?.supports?.boundAt === true, `the subject declares boundAt, but the store's capabilities.supports.boundAt is ${show(store.capabilities?.supports?.boundAt)}`);
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      mustEqual((await store.message(c, "m1"))?.boundAt, undefined, "boundAt of m1 queued, never bound");
      const fenceA = await acquire(store, c, "worker-a");
      const from = await storeNow(store, c, fenceA);
      const bound = await mustBegin(store, c, fenceA, "begin m1");
      const to = await storeNow(store, c, fenceA);
      mustEqual(bound.bound, true, "bound of the beginTurn that put m1 in progress");
      const at = bound.message.boundAt;
      must(
        typeof at === "number" && at >= from && at <= to,
        `m1 bound by beginTurn must show boundAt, its binding's time on the store's clock (read ${from} before beginTurn and ${to} after it): a runner that resumes a message that never failed checks the re-send window from it (TURN-12); got ${show(at)}`,
      );
      mustEqual((await store.message(c, "m1"))?.boundAt, at, "boundAt of m1 in progress (message)");
      // A take-over: the next holder resumes m1 at its index; the first binding's time stays. The store's
      // clock is first moved past it, or a store that writes boundAt at every binding passes by the millisecond.
      await clockPast(store, c, fenceA, at as number);
      await store.releaseLease(c, fenceA);
      const fenceB = await acquire(store, c, "worker-b");
      const taken = await mustBegin(store, c, fenceB, "begin m1 by the next holder");
      mustEqual([taken.message.id, taken.bound, taken.message.boundAt], ["m1", false, at], "[message, bound, boundAt] of m1 taken over by the next holder (the call did not bind it)");
      // Failed and reopened, then bound again: still the first binding.
      await store.failMessage(c, fenceB, "m1", { failed: "m1" });
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      await clockPast(store, c, fenceB, at as number);
      const retry = await mustBegin(store, c, fenceB, "begin m1's retry");
      mustEqual([retry.bound, retry.message.boundAt], [true, at], "[bound, boundAt] of m1 bound again after a reopen (this call bound it; boundAt stays its first binding)");
      if (subject.capabilities.survivesRestart) {
        const restarted = await fixture.reopen();
        mustEqual((await restarted.message(c, "m1"))?.boundAt, at, "boundAt of m1 in progress, read on a fresh instance");
      }
      await store.appendUserMessage(c, { id: "m2", content: userText("something else") });
      mustEqual((await store.message(c, "m2"))?.boundAt, undefined, "boundAt of m2 queued, never bound");
    }),
};

export const REOPEN_WINDOW_CHECKS: ConversationCheckSpec[] = [reopenWithinWindow, reopenWindowNotForOtherBound, reopenWindowFromFirstFailure, reopenedShowsFirstFailure, listingJudgesReopenWindow];

/** TURN-11's binding time (only when the subject declares `boundAt`). */
export const BOUND_AT_CHECKS: ConversationCheckSpec[] = [boundShowsBoundAt, reopenWindowFromBinding, boundAtInheritedAtFailedIndex];
