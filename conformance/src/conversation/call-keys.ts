/*
 * TURN-24's committed call keys (only when the subject declares `callKeys`): a commit's `callKeys`
 * is kept with the turn in the commit's own write, exactly as given, and `turnsOf` gives it back;
 * it never enters the log; a turn committed without it has none; a commit that is not appended
 * keeps none; a malformed value is refused with invalid_store_input naming `callKeys`, storing
 * nothing. The keys are what a runner reports on read-back: after a deploy that changed a tool's
 * identity they are the only record of the key a call ran under.
 */
import type { CommittedCallKey, ConversationStore } from "@dispatch-once/core";
import { must, mustEqual, mustRejectWith, show } from "../failure.js";
import { acquire, commitFor, freshConversation, mustBegin, toolResult, toolUse, userText, withConversationFixture } from "./support.js";
import type { ConversationCheckSpec } from "./checks.js";

function callKeysOf(store: ConversationStore): void {
  must(store.capabilities?.supports?.callKeys === true, `the subject declares callKeys, but the store's capabilities.supports.callKeys is ${show(store.capabilities?.supports?.callKeys)}`);
}

/** Entries as a runner gives them: a carried call, identical calls' ordinals, an error's key without one, a repeated call id, ids a store must keep exactly. */
const KEYS: CommittedCallKey[] = [
  { callId: "toolu_01", key: "3f2a9c0d5e1b4a7f8c6d2e0b9a1f3c5d", ordinal: 0 },
  { callId: "toolu_02", key: "9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a", ordinal: 1, carriedFromTurn: 0 },
  { callId: "call_é\u{1F4B3}", key: "k-with \"quotes\" and \\ and \u0000", ordinal: 0 },
  { callId: "toolu_02", key: "an error's key" },
];

export const callKeysKept: ConversationCheckSpec = {
  rule: "TURN-24",
  name: "a commit's callKeys are kept with the turn exactly as given (member values, order, a repeated call id, an absent ordinal) and turnsOf gives them back, also to a fresh instance where the store survives restarts; the log is exactly what it is without them; a turn committed without callKeys has none (no member); a commit that is not appended keeps none",
  needs: ["callKeys"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      callKeysOf(store);
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice and bob") });
      const fence = await acquire(store, c, "worker-a");
      const s0 = await mustBegin(store, c, fence, "begin m1");
      const toolTurn = { assistant: toolUse("toolu_01", { to: "alice" }), toolResults: toolResult("toolu_01", "paid"), stopReason: "tool_use", answers: false };
      // A stale fence: not appended, so nothing of it is kept.
      mustEqual(await store.commitTurn(c, commitFor(s0, fence + 1, { ...toolTurn, callKeys: [{ callId: "toolu_stale", key: "stale" }] })), { committed: false }, "a commit under a fence that does not hold the lease, with callKeys");
      mustEqual(await store.commitTurn(c, commitFor(s0, fence, { ...toolTurn, callKeys: KEYS })), { committed: true }, "m1's tool-use turn with callKeys");
      const s1 = await mustBegin(store, c, fence, "begin m1's next turn");
      mustEqual(await store.commitTurn(c, commitFor(s1, fence)), { committed: true }, "m1's answering turn without callKeys");
      const expected = [
        { turnIndex: 0, messageId: "m1", assistant: toolTurn.assistant, toolResults: toolTurn.toolResults, stopReason: "tool_use", callKeys: KEYS },
        { turnIndex: 1, messageId: "m1", assistant: commitFor(s1, fence).assistant, stopReason: "end_turn" },
      ];
      const turns = await store.turnsOf(c, "m1");
      mustEqual(turns, expected, "turnsOf(m1): turn 0 with its callKeys exactly as committed, turn 1 without");
      must(!("callKeys" in turns[1]!), `turn 1 was committed without callKeys, but turnsOf gives it a callKeys member (${show(turns[1]!.callKeys)})`);
      mustEqual(await store.log(c), [userText("pay alice and bob"), toolTurn.assistant, toolTurn.toolResults, commitFor(s1, fence).assistant], "the log: what the stream established, without the keys");
      if (subject.capabilities.survivesRestart) {
        const fresh = await fixture.reopen();
        mustEqual(await fresh.turnsOf(c, "m1"), expected, "turnsOf(m1) from a fresh instance");
      }
    }),
};

export const callKeysRefused: ConversationCheckSpec = {
  rule: "TURN-24",
  name: "a commit whose callKeys is malformed (not an array, an entry that is not an object, an empty or non-string callId or key, a negative, fractional or non-number ordinal or carriedFromTurn, a member of another name) is refused with invalid_store_input naming callKeys, and nothing of the commit is stored; an empty array is kept as given",
  needs: ["callKeys"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      callKeysOf(store);
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const s0 = await mustBegin(store, c, fence, "begin m1");
      const good = { callId: "toolu_01", key: "k1" };
      const bad: unknown[] = [
        "k1",
        { 0: good },
        [null],
        [[good]],
        [{ key: "k1" }],
        [{ callId: "", key: "k1" }],
        [{ callId: "toolu_01", key: "" }],
        [{ callId: "toolu_01", key: 7 }],
        [{ callId: "toolu_01", key: "\uD800" }],
        [{ ...good, ordinal: -1 }],
        [{ ...good, ordinal: 1.5 }],
        [{ ...good, ordinal: "0" }],
        [{ ...good, carriedFromTurn: Number.NaN }],
        [{ ...good, carriedFromTurn: -2 }],
        [{ ...good, result: "paid" }],
        [good, { ...good, ordinal: null }],
      ];
      for (const callKeys of bad) {
        const error = await mustRejectWith(store.commitTurn(c, commitFor(s0, fence, { callKeys: callKeys as CommittedCallKey[] })), "invalid_store_input", `a commit with callKeys ${show(callKeys)}`);
        const field = (error as { field?: unknown }).field;
        must(typeof field === "string" && field.startsWith("callKeys"), `the refusal of callKeys ${show(callKeys)} must name callKeys, but names ${show(field)}`);
      }
      mustEqual(await store.turnsOf(c, "m1"), [], "turnsOf(m1) after the refused commits");
      mustEqual(await store.log(c), [], "the log after the refused commits");
      mustEqual((await store.message(c, "m1"))?.state, "in_progress", "m1 after the refused commits");
      mustEqual(await store.commitTurn(c, commitFor(s0, fence, { callKeys: [] })), { committed: true }, "a commit with callKeys [] (a turn whose calls had no key)");
      mustEqual((await store.turnsOf(c, "m1")).map((t) => t.callKeys), [[]], "turnsOf(m1): callKeys [] as committed");
    }),
};

/** Every check of this file, in order. */
export const CALL_KEYS_CHECKS: readonly ConversationCheckSpec[] = [callKeysKept, callKeysRefused];
