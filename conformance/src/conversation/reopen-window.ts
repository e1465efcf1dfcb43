/*
 * TURN-12's re-send window (only when the subject declares `reopenWindow`): appendUserMessage
 * with `{ reopenWithinMs }` reopens a failed message only while its first failure is less than
 * that old on the store's clock, decided in the same atomic step as the reopen; at or past it the
 * message stays failed, nothing is queued, and the result says `pastReopenWindow`. A window of 0
 * is past every failure (its age is 0 or more), so the check needs no way to move the clock.
 */
import type { ConversationStore } from "@dispatch-once/core";
import { must, mustEqual, mustRejectWith, show } from "../failure.js";
import { acquire, freshConversation, mustBegin, userText, withConversationFixture } from "./support.js";
import type { ConversationCheckSpec } from "./checks.js";

const HOUR = 60 * 60 * 1000;

function windowOf(store: ConversationStore): void {
  must(store.capabilities?.supports?.reopenWindow === true, `the subject declares reopenWindow, but the store's capabilities.supports.reopenWindow is ${show(store.capabilities?.supports?.reopenWindow)}`);
}

export const reopenWithinWindow: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a re-send with reopenWithinMs reopens a failed message only while its failure is younger than the window on the store's clock: at or past it (a window of 0) it stays failed, nothing is queued, and the result says pastReopenWindow; without the option it reopens as before",
  needs: ["reopenWindow"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const first = await mustBegin(store, c, fence, "begin m1");
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
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      await mustBegin(store, c, fence, "begin m1");
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

const WINDOW_MS = 300;
const PAST_FIRST_MS = WINDOW_MS + 100;

export const reopenWindowFromFirstFailure: ConversationCheckSpec = {
  rule: "TURN-12",
  name: `the re-send window counts from the message's first failure, not its latest: failed, reopened, retried and failed again ${PAST_FIRST_MS} ms after the first failure, a re-send with reopenWithinMs ${WINDOW_MS} at once is past the window (pastReopenWindow, still failed)`,
  needs: ["reopenWindow"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      windowOf(store);
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      await mustBegin(store, c, fence, "begin m1");
      const record = { kind: "failed_turn", messageId: "m1" };
      await store.failMessage(c, fence, "m1", record);
      const reopened = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: HOUR });
      mustEqual([reopened.reopened, reopened.message.state], [true, "queued"], "a re-send of m1 right after its first failure, with an hour's window");
      await mustBegin(store, c, fence, "begin the retry of m1");
      // At least PAST_FIRST_MS of real time (the store's clock moves with it) after the first failure.
      await new Promise<void>((resolve) => setTimeout(resolve, PAST_FIRST_MS));
      await store.failMessage(c, fence, "m1", record);
      // The latest failure is a few ms old, the first more than the window: a store that restarts
      // the window at each failure keeps a message re-sendable for ever by failing it again.
      const resend = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") }, { reopenWithinMs: WINDOW_MS });
      mustEqual(
        [resend.reopened, resend.pastReopenWindow, resend.message.state],
        [false, true, "failed"],
        `a re-send of m1 with reopenWithinMs ${WINDOW_MS}, its first failure at least ${PAST_FIRST_MS} ms old and its latest a moment old`,
      );
    }),
};

export const REOPEN_WINDOW_CHECKS: ConversationCheckSpec[] = [reopenWithinWindow, reopenWindowNotForOtherBound, reopenWindowFromFirstFailure];
