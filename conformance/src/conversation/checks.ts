import { isDeepStrictEqual } from "node:util";
import type { AppendResult, ConversationStore, JsonValue, StoredMessage, StoredTurn, TurnSnapshot } from "@dispatch-once/core";
import { MAX_LEASE_MS, MAX_LEASE_OWNER_LENGTH } from "@dispatch-once/core/internal";
import { ConformanceFailure, describeError, must, mustEqual, mustRejectWith, show } from "../failure.js";
import {
  LEASE_MS,
  LOOKALIKE_CONTENT,
  TRICKY_CONTENT,
  acquire,
  assistantText,
  commitFor,
  containsValue,
  freshConversation,
  mustAcquire,
  mustBegin,
  racers,
  toolResult,
  toolUse,
  userText,
  withConversationFixture,
} from "./support.js";
import type { ConversationStoreFixture, ConversationStoreSubject, ConversationSubjectCapability, RawMessage } from "./types.js";
import { FAILED_TURNS_CHECKS, listingOf } from "./failed-turns.js";
import { STALLED_MESSAGES_CHECKS } from "./stalled-messages.js";
import { LEASE_GRANT_CHECKS } from "./lease-grants.js";
import { CALL_KEYS_CHECKS } from "./call-keys.js";
import { BOUND_AT_CHECKS, REOPEN_WINDOW_CHECKS } from "./reopen-window.js";
import { SILENT_CONVERSATION_STORE_CHECKS } from "./silent-store.js";

/** A deterministic conversation-store check before it is bound to a subject. */
export interface ConversationCheckSpec {
  rule: string;
  name: string;
  needs?: ConversationSubjectCapability[];
  run(subject: ConversationStoreSubject): Promise<void>;
}

/** What a StoredMessage must look like: exactly these members (absent ones absent). */
function expectedMessage(m: { id: string; content: JsonValue; seq: number; state: StoredMessage["state"]; turnIndex?: number; failure?: JsonValue }): StoredMessage {
  const out: StoredMessage = { id: m.id, content: m.content, seq: m.seq, state: m.state };
  if (m.turnIndex !== undefined) out.turnIndex = m.turnIndex;
  if (m.failure !== undefined) out.failure = m.failure;
  return out;
}

/**
 * A message as these checks compare it: without `boundAt`, a time on the store's clock that only
 * a store declaring `supports.boundAt` gives (TURN-11), judged by its own check.
 */
function undated<T extends StoredMessage | undefined>(message: T): T {
  if (message === undefined || !("boundAt" in message)) return message;
  const { boundAt: _judgedApart, ...rest } = message;
  return rest as T;
}

/** The stored messages (raw) must say what the store answers, message by message. */
async function storageAgrees(fixture: ConversationStoreFixture, store: ConversationStore, conversationId: string, what: string): Promise<RawMessage[]> {
  const raw = await fixture.raw.messages(conversationId);
  for (const r of raw) {
    mustEqual(undated(await store.message(conversationId, r.id)), expectedMessage(r), `${what}: message(${r.id}) against the stored message`);
  }
  const seqs = raw.map((r) => r.seq);
  mustEqual(seqs, seqs.map((_, i) => i + 1), `${what}: stored messages are numbered 1, 2, ... in arrival order`);
  return raw;
}

async function mustNotCommit(store: ConversationStore, conversationId: string, commit: Parameters<ConversationStore["commitTurn"]>[1], what: string): Promise<void> {
  const result = await store.commitTurn(conversationId, commit);
  mustEqual(result, { committed: false }, what);
}

async function mustCommit(store: ConversationStore, conversationId: string, commit: Parameters<ConversationStore["commitTurn"]>[1], what: string): Promise<void> {
  const result = await store.commitTurn(conversationId, commit);
  mustEqual(result, { committed: true }, what);
}

/** Refused with invalid_store_input naming `field`, the store's argument check (TURN-10, TURN-18). */
async function mustRefuseField(promise: Promise<unknown>, field: string, what: string): Promise<void> {
  const error = await mustRejectWith(promise, "invalid_store_input", what);
  mustEqual((error as { field?: unknown }).field, field, `the refused field of ${what}`);
}

// ---------------------------------------------------------------------------------- TURN-1

/** A tool-use turn's payload at `index`, told apart from every other by its index. */
function toolTurn(snapshot: TurnSnapshot, fence: number, index: number): Parameters<ConversationStore["commitTurn"]>[1] {
  return commitFor(snapshot, fence, { assistant: toolUse(`toolu_${index}`, { index }), toolResults: toolResult(`toolu_${index}`, `ok ${index}`), stopReason: "tool_use", answers: false });
}

export const turnIndexIsCommittedCount: ConversationCheckSpec = {
  rule: "TURN-1",
  name: "every beginTurn gives the number of turns committed before it, read from storage when begun: not counting attempts (a second begin under one grant), refused commits, failures, re-sends or grants (takeovers), for a reopened message after its own tool turns, on another instance after this one's commit and the other way round, and after a restart",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const [one, two] = await racers(subject, fixture, 2);
      const other = two ?? one!;
      const c = freshConversation("turn-1");
      let committed = 0;
      const begin = async (store: ConversationStore, fence: number, messageId: string, what: string): Promise<TurnSnapshot> => {
        const snapshot = await mustBegin(store, c, fence, what);
        mustEqual([snapshot.message.id, snapshot.turnIndex], [messageId, committed], `${what}: [message, turnIndex] (the turn index is the number of turns committed before it, ${committed})`);
        mustEqual((await fixture.raw.turns(c)).map((t) => t.turnIndex), [...Array(committed).keys()], `${what}: the turns stored`);
        return snapshot;
      };
      const commit = async (store: ConversationStore, commitment: Parameters<ConversationStore["commitTurn"]>[1], what: string) => {
        await mustCommit(store, c, commitment, what);
        committed += 1;
      };
      await one!.appendUserMessage(c, { id: "m1", content: userText("pay alice, then bob") });
      const a = await acquire(one!, c, "worker-a");
      const first = await begin(one!, a, "m1", "begin m1");
      await begin(one!, a, "m1", "begin m1 again under the same grant (another attempt of the turn)");
      await mustNotCommit(one!, c, commitFor(first, a, { turnIndex: 1 }), "a commit ahead of the committed count");
      await mustNotCommit(one!, c, commitFor(first, a + 1000, {}), "a commit under a fence never issued");
      await begin(one!, a, "m1", "begin m1 after two refused commits");
      await commit(one!, toolTurn(first, a, 0), "tool turn 0 of m1");
      // Another instance (another process) reads the count from storage, and this one sees its commit.
      const onOther = await begin(other, a, "m1", "begin turn 1 on another instance after this one's commit");
      await commit(other, toolTurn(onOther, a, 1), "tool turn 1 of m1, on the other instance");
      const failing = await begin(one!, a, "m1", "begin turn 2 on the first instance after the other's commit");
      await one!.failMessage(c, a, "m1", { failed: "m1", turnIndex: failing.turnIndex });
      mustEqual((await one!.appendUserMessage(c, { id: "m1", content: userText("again") })).reopened, true, "the re-send of the failed m1, the last bound");
      // Reopened after its own tool turns: its turn is the committed count (2), though it was bound at 0.
      const reopened = await begin(one!, a, "m1", "begin the reopened m1");
      mustEqual(reopened.message.turnIndex, 0, "the reopened m1's binding (TURN-11: its first turn's index)");
      await one!.failMessage(c, a, "m1", { failed: "m1", again: true });
      await one!.appendUserMessage(c, { id: "m2", content: userText("pay carol") });
      const second = await begin(one!, a, "m2", "begin m2 after m1 failed twice");
      await commit(one!, commitFor(second, a), "m2's answer");
      await one!.appendUserMessage(c, { id: "m3", content: userText("pay dave") });
      await fixture.raw.expireLease(c);
      const b = await acquire(other, c, "worker-b", "takeover by worker-b");
      await begin(other, b, "m3", "begin m3 after a takeover");
      await fixture.raw.expireLease(c);
      const d = await acquire(one!, c, "worker-c", "takeover by worker-c");
      const third = await begin(one!, d, "m3", "begin m3 after a second takeover (grants are not turns)");
      await commit(one!, toolTurn(third, d, committed), "tool turn of m3");
      if (subject.capabilities.survivesRestart) {
        const restarted = await fixture.reopen();
        await fixture.raw.expireLease(c);
        const e = await acquire(restarted, c, "worker-d", "acquire on a fresh instance");
        await begin(restarted, e, "m3", "begin m3 on a fresh instance");
      }
    }),
};

// ---------------------------------------------------------------------------------- TURN-2

export const appendIsIdempotent: ConversationCheckSpec = {
  rule: "TURN-2",
  name: "a re-send of a message id returns the stored message (first content) and stores nothing new",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const first = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice 10 €") });
      mustEqual(first, { appended: true, reopened: false, message: expectedMessage({ id: "m1", content: userText("pay alice 10 €"), seq: 1, state: "queued" }) }, "first append");
      const again = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice 10 € (edited)") });
      mustEqual(again, { appended: false, reopened: false, message: first.message }, "re-send of m1 with other content");
      const second = await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      mustEqual(second.message.seq, 2, "the next new message's seq");
      await store.appendUserMessage(c, { id: "m1", content: userText("third send") });
      const raw = await storageAgrees(fixture, store, c, "after re-sends");
      mustEqual(raw.map((m) => [m.id, m.seq, m.state]), [["m1", 1, "queued"], ["m2", 2, "queued"]], "stored messages after re-sends");
      mustEqual(raw[0]?.content, userText("pay alice 10 €"), "m1's stored content is the first send's");
    }),
};

/**
 * Sends at once: a double click or a load balancer's re-POST sends one message twice concurrently
 * (spec §4.4), and a user or a queue sends several messages close together. A store whose append
 * reads, then writes in another statement without the conversation's lock (a plain SELECT under
 * MariaDB's REPEATABLE READ, then an INSERT) passed every check that appends one at a time.
 */
const AT_ONCE = 8;

/** Every append of `sends` settled fulfilled, else a failure naming each rejection. */
function allAppended(sends: PromiseSettledResult<AppendResult>[], what: string): AppendResult[] {
  const failed = sends.flatMap((s, i) => (s.status === "rejected" ? [`send ${i + 1}: ${describeError(s.reason)}`] : []));
  must(failed.length === 0, `${what}: every send must be answered from the store, but ${failed.join("; ")}`);
  return sends.map((s) => (s as PromiseFulfilledResult<AppendResult>).value);
}

export const concurrentSendsOfOneMessage: ConversationCheckSpec = {
  rule: "TURN-2",
  name: "of 8 concurrent sends of one message id (a double click, a re-POST; across 4 instances when shared), to a new conversation and to one with a message, exactly one appends, every send resolves to the stored message, and it is stored once",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const stores = await racers(subject, fixture, 4);
      for (const earlier of [false, true]) {
        const c = freshConversation();
        const where = earlier ? "after an earlier message" : "in a new conversation";
        if (earlier) await fixture.store.appendUserMessage(c, { id: "m0", content: userText("earlier") });
        const sends = await Promise.allSettled(Array.from({ length: AT_ONCE }, (_, i) => stores[i % stores.length]!.appendUserMessage(c, { id: "m1", content: userText("pay alice") })));
        const results = allAppended(sends, `${AT_ONCE} concurrent sends of m1 ${where}`);
        const appended = results.filter((r) => r.appended).length;
        must(appended === 1, `${AT_ONCE} concurrent sends of m1 ${where}: exactly one must append it, ${appended} did (${show(results)})`);
        const seq = earlier ? 2 : 1;
        const stored = expectedMessage({ id: "m1", content: userText("pay alice"), seq, state: "queued" });
        for (const [i, r] of results.entries()) mustEqual({ reopened: r.reopened, message: r.message }, { reopened: false, message: stored }, `send ${i + 1} of m1 ${where}`);
        const raw = await storageAgrees(fixture, fixture.store, c, `after the concurrent sends ${where}`);
        mustEqual(raw.map((m) => [m.id, m.seq]), [...(earlier ? [["m0", 1]] : []), ["m1", seq]], `stored messages after the concurrent sends ${where}`);
      }
    }),
};

/** Messages in one conversation before its early ones are re-sent: past any capped set of recent ids (64, 100, 128, 256). */
const MANY_MESSAGES = 300;

export const resendRecognisedAfterManyMessages: ConversationCheckSpec = {
  rule: "TURN-2",
  name: `a re-send is recognised however many messages came after it: of ${MANY_MESSAGES} messages, re-sends of the first, a middle one and the last append nothing and return the stored message, also from another instance (when shared)`,
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation("many");
      const id = (i: number) => `m${String(i).padStart(3, "0")}`;
      for (let i = 1; i <= MANY_MESSAGES; i++) await store.appendUserMessage(c, { id: id(i), content: userText(`message ${i}`) });
      const views: Array<[string, ConversationStore]> = [["this instance", store]];
      if (subject.capabilities.sharedAcrossProcesses) views.push(["another instance", await fixture.reopen()]);
      for (const [where, view] of views) {
        for (const i of [1, MANY_MESSAGES / 2, MANY_MESSAGES]) {
          const again = await view.appendUserMessage(c, { id: id(i), content: userText(`message ${i}, sent again`) });
          mustEqual(
            [again.appended, again.message.id, again.message.seq, again.message.content],
            [false, id(i), i, userText(`message ${i}`)],
            `${where}: a re-send of ${id(i)} after ${MANY_MESSAGES} messages (a re-send taken for a new message is answered twice, each answer's effects made again)`,
          );
        }
      }
      mustEqual((await fixture.raw.messages(c)).length, MANY_MESSAGES, "the number of stored messages after the re-sends");
    }),
};

export const resendOfAnsweredChangesNothing: ConversationCheckSpec = {
  rule: "TURN-2",
  name: "a re-send of an answered message creates no message and no turn, and nothing waits afterwards",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const snapshot = await mustBegin(store, c, fence, "begin m1");
      await mustCommit(store, c, commitFor(snapshot, fence), "commit m1's answer");
      const log = await store.log(c);
      const resend = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      mustEqual({ ...resend, message: undated(resend.message) }, { appended: false, reopened: false, message: expectedMessage({ id: "m1", content: userText("pay alice"), seq: 1, state: "answered", turnIndex: 0 }) }, "re-send of answered m1");
      mustEqual(await store.beginTurn(c, fence), undefined, "beginTurn after the re-send (nothing waits)");
      mustEqual(await store.log(c), log, "log after the re-send");
      mustEqual((await fixture.raw.turns(c)).length, 1, "stored turns after the re-send");
      mustEqual((await fixture.raw.messages(c)).length, 1, "stored messages after the re-send");
    }),
};

export const badIdsRefused: ConversationCheckSpec = {
  rule: "TURN-2",
  name: "a bad conversation id or message id is refused with invalid_store_input and stores nothing",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      for (const bad of ["", "has space", "x".repeat(257), "ünï"]) {
        await mustRejectWith(store.appendUserMessage(bad, { id: "m1", content: "hi" }), "invalid_store_input", `append to conversation id ${show(bad)}`);
      }
      for (const bad of ["", "x".repeat(257), "lone \ud800 surrogate", 42 as unknown as string]) {
        await mustRejectWith(store.appendUserMessage(c, { id: bad, content: "hi" }), "invalid_store_input", `append of message id ${show(bad)}`);
      }
      await mustRejectWith(store.acquireLease("has space", "worker-a", LEASE_MS), "invalid_store_input", "acquireLease on a bad conversation id");
      mustEqual(await fixture.raw.messages(c), [], "stored messages after refused appends");
      // The longest id is accepted: 256 characters, any well-formed text.
      const long = "é".repeat(256);
      mustEqual((await store.appendUserMessage(c, { id: long, content: "hi" })).appended, true, "append of a 256-character message id");
      mustEqual((await store.message(c, long))?.id, long, "message() of the 256-character id");
    }),
};

// ---------------------------------------------------------------------------------- TURN-19

/**
 * Message ids one conversation must keep apart: a store that folds them (a case-insensitive or
 * PAD SPACE collation, an ICU collation, a VARCHAR(64) in MySQL's non-strict mode) takes the
 * second message for a re-send of the first, and its sender is given the first one's answer.
 */
export function messageIdPairs(): Array<{ what: string; first: string; second: string }> {
  // Every id is unique across pairs: each pair's second message must be new to the conversation.
  const long = (length: number) => {
    const body = `m-${length}-`.padEnd(length - 1, "x");
    return { what: `two ${length}-character message ids that differ only in their last character`, first: `${body}a`, second: `${body}b` };
  };
  return [
    { what: "message ids that differ only in ASCII case", first: "pay-abc", second: "pay-ABC" },
    { what: "a message id and the same id with a trailing space", first: "pay-trailing", second: "pay-trailing " },
    { what: "a message id and the same id with a leading space", first: "pay-leading", second: " pay-leading" },
    { what: "message ids that differ only in Unicode normalisation (NFC \u00e9 against NFD e + U+0301)", first: "nfc-caf\u00e9", second: "nfc-cafe\u0301" },
    { what: "message ids that differ only in an accent", first: "accent-cafe", second: "accent-caf\u00e9" },
    { what: "message ids that differ only in width (fullwidth U+FF21 against A)", first: "width-A", second: "width-\uff21" },
    ...[32, 64, 128, 255, 256].map(long),
  ];
}

export const idsComparedExactly: ConversationCheckSpec = {
  rule: "TURN-19",
  name: "ids are compared exactly: message ids that differ only in case, spaces, Unicode normalisation, an accent, width or a late character are different messages, and conversation ids that differ only in case or a late character are different conversations",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      let seq = 0;
      for (const { what, first, second } of messageIdPairs()) {
        const a = await store.appendUserMessage(c, { id: first, content: userText(`first: ${first}`) });
        mustEqual([a.appended, a.message.id, a.message.seq], [true, first, ++seq], `${what}: the append of ${show(first)}`);
        const b = await store.appendUserMessage(c, { id: second, content: userText(`second: ${second}`) });
        must(
          b.appended,
          `${what}: the append of ${show(second)} was taken for a re-send of ${show(b.message.id)} (${show(b.message.content)}): ` +
            "the second message would never be answered, and its sender would be given the first one's answer",
        );
        mustEqual([b.message.id, b.message.seq], [second, ++seq], `${what}: the message appended for ${show(second)}`);
        mustEqual((await store.message(c, first))?.content, userText(`first: ${first}`), `${what}: message(${show(first)})'s content`);
        mustEqual((await store.message(c, second))?.content, userText(`second: ${second}`), `${what}: message(${show(second)})'s content`);
      }
      mustEqual((await fixture.raw.messages(c)).map((m) => m.id), messageIdPairs().flatMap((p) => [p.first, p.second]), "the stored message ids, byte for byte, in arrival order");

      // Conversation ids (CONVERSATION_ID_PATTERN's alphabet has case, and ids up to 256 characters).
      const base = freshConversation("conv");
      const longId = (last: string) => `${base}-`.padEnd(255, "x") + last;
      for (const [what, x, y] of [
        ["conversation ids that differ only in ASCII case", `${base}-abc`, `${base}-ABC`],
        ["two 256-character conversation ids that differ only in their last character", longId("a"), longId("b")],
      ] as const) {
        const fenceX = await acquire(store, x, "worker-x");
        const lease = await store.acquireLease(y, "worker-y", LEASE_MS);
        must(lease.acquired, `${what}: the lease of ${show(y)} is held by ${show(lease.acquired ? "" : lease.owner)}: the store takes it for ${show(x)}`);
        await store.appendUserMessage(x, { id: "m1", content: userText(`to ${x}`) });
        const other = await store.appendUserMessage(y, { id: "m1", content: userText(`to ${y}`) });
        must(other.appended && other.message.seq === 1, `${what}: m1 of ${show(y)} was taken for m1 of ${show(x)} (seq ${other.message.seq}, ${show(other.message.content)})`);
        const begun = await mustBegin(store, x, fenceX, `${what}: begin m1 of ${show(x)}`);
        mustEqual([begun.message.id, begun.turnIndex], ["m1", 0], `${what}: the turn begun in ${show(x)}`);
        mustEqual((await store.message(y, "m1"))?.state, "queued", `${what}: m1 of ${show(y)} after ${show(x)}'s turn began`);
        mustEqual((await store.message(y, "m1"))?.content, userText(`to ${y}`), `${what}: m1 of ${show(y)}'s content`);
      }
    }),
};

export const idsNotMatchedAsPatterns: ConversationCheckSpec = {
  rule: "TURN-19",
  name: "ids are not prefixes or patterns: a conversation whose id starts another's and a message id that starts another's (m1, m10) or holds LIKE wildcards (m_, m%) see only their own messages, turns, log, records and failed turns",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation("prefix");
      // Conversations whose ids start with c's: a `LIKE 'c%'`, a `KEYS c*` or a range scan from c finds them.
      const longer = [`${c}0`, `${c}-x`, `${c}_`];
      for (const l of longer) {
        await store.appendUserMessage(l, { id: "m1", content: userText(`to ${l}`) });
        await store.appendUserMessage(l, { id: "m2", content: userText(`second to ${l}`) });
        const fence = await acquire(store, l, "worker-l");
        const s0 = await mustBegin(store, l, fence, `begin m1 of ${l}`);
        await mustCommit(store, l, commitFor(s0, fence, { assistant: assistantText(`answer in ${l}`) }), `the answer in ${l}`);
        await mustBegin(store, l, fence, `begin m2 of ${l}`);
        await store.failMessage(l, fence, "m2", { kind: "failed_turn", in: l });
        await store.addRecord(l, { in: l });
      }
      await store.appendUserMessage(c, { id: "m1", content: userText("to c") });
      await store.appendUserMessage(c, { id: "m10", content: userText("m10 to c") });
      await store.appendUserMessage(c, { id: "m%", content: userText("percent to c") });
      const fence = await acquire(store, c, "worker-c");
      const s1 = await mustBegin(store, c, fence, "begin m1 of c");
      const m1Turn = commitFor(s1, fence, { assistant: assistantText("answer to m1") });
      await mustCommit(store, c, m1Turn, "m1's answer");
      const s10 = await mustBegin(store, c, fence, "begin m10 of c");
      mustEqual([s10.message.id, s10.turnIndex], ["m10", 1], "the message bound after m1 in c");
      const use = toolUse("toolu_10", { to: "m10" });
      const result = toolResult("toolu_10", "ok");
      await mustCommit(store, c, commitFor(s10, fence, { assistant: use, toolResults: result, stopReason: "tool_use", answers: false }), "m10's tool turn");
      await mustCommit(store, c, commitFor(s10, fence, { turnIndex: 2, assistant: assistantText("answer to m10") }), "m10's answer");
      await store.addRecord(c, { in: "c" });
      const why = "(an id matched as a prefix or pattern: a LIKE without escaping, a glob, a range scan)";
      mustEqual((await store.turnsOf(c, "m1")).map((t) => [t.messageId, t.turnIndex]), [["m1", 0]], `turnsOf(c, m1): m1's turn only, not m10's ${why}`);
      mustEqual((await store.turnsOf(c, "m10")).map((t) => [t.messageId, t.turnIndex]), [["m10", 1], ["m10", 2]], "turnsOf(c, m10)");
      mustEqual(await store.turnsOf(c, "m%"), [], `turnsOf(c, m%): the queued m% has no turn ${why}`);
      mustEqual(await store.turnsOf(c, "m_"), [], `turnsOf(c, m_): no message m_ ${why}`);
      mustEqual(await store.message(c, "m_"), undefined, `message(c, m_): no message m_ ${why}`);
      mustEqual(await store.message(c, "m2"), undefined, `message(c, m2): m2 is in the longer conversations only ${why}`);
      mustEqual(await store.records(c), [{ in: "c" }], `records(c): c's own ${why}`);
      mustEqual(
        await store.log(c),
        [userText("to c"), assistantText("answer to m1"), userText("m10 to c"), use, result, assistantText("answer to m10")],
        `log(c): c's own ${why}`,
      );
      if (subject.capabilities.listFailedTurns) {
        mustEqual((await store.listFailedTurns!({ conversationId: c })).turns, [], `listFailedTurns({ conversationId: c }): c has no failed turn ${why}`);
      }
      for (const l of longer) {
        mustEqual(await store.records(l), [{ kind: "failed_turn", in: l }, { in: l }], `records(${l})`);
        mustEqual((await store.turnsOf(l, "m1")).map((t) => t.assistant), [assistantText(`answer in ${l}`)], `turnsOf(${l}, m1)`);
      }
    }),
};

// ---------------------------------------------------------------------------------- TURN-5

export const concurrentCommitsOneWins: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "of 8 concurrent commits of one turn exactly one commits, and the stored turn and log are the winner's",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      await fixture.store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(fixture.store, c, "worker-a");
      const snapshot = await mustBegin(fixture.store, c, fence, "begin m1");
      const stores = await racers(subject, fixture, 4);
      const commits = Array.from({ length: 8 }, (_, i) => commitFor(snapshot, fence, { assistant: assistantText(`attempt ${i}`), answers: i % 2 === 0 }));
      const results = await Promise.all(commits.map((commit, i) => stores[i % stores.length]!.commitTurn(c, commit)));
      const winners = results.flatMap((r, i) => (r.committed ? [i] : []));
      must(winners.length === 1, `expected exactly one of 8 concurrent commits to commit, got ${winners.length} (${show(results)})`);
      const won = commits[winners[0]!]!;
      const turn: StoredTurn = { turnIndex: 0, messageId: "m1", assistant: won.assistant, stopReason: "end_turn" };
      mustEqual(await fixture.raw.turns(c), [turn], "stored turns after the race");
      mustEqual(await fixture.store.turnsOf(c, "m1"), [turn], "turnsOf(m1) after the race");
      mustEqual(await fixture.store.log(c), [userText("pay alice"), won.assistant], "log after the race");
      mustEqual((await fixture.store.message(c, "m1"))?.state, won.answers ? "answered" : "in_progress", "m1's state follows the winner");
    }),
};

export const staleFenceCommitRefused: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "a commit under a stale fence is refused and stores nothing, also when no lease is held (its holder released it); the new holder's commit of the same turn succeeds",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const old = await acquire(store, c, "worker-a");
      const first = await mustBegin(store, c, old, "begin by worker-a");
      await fixture.raw.expireLease(c);
      const current = await acquire(store, c, "worker-b", "acquire after expiry");
      const second = await mustBegin(store, c, current, "begin by worker-b");
      mustEqual([second.message.id, second.turnIndex], [first.message.id, first.turnIndex], "worker-b continues the bound message");
      await mustNotCommit(store, c, commitFor(first, old, { assistant: assistantText("zombie") }), "commit under the stale fence");
      await mustNotCommit(store, c, commitFor(first, current + 1, { assistant: assistantText("future") }), "commit under a fence never issued");
      mustEqual(await fixture.raw.turns(c), [], "stored turns after refused commits");
      mustEqual(await store.log(c), [], "log after refused commits");
      await mustCommit(store, c, commitFor(second, current, { assistant: assistantText("live") }), "commit under the current fence");
      mustEqual(await store.log(c), [userText("pay alice"), assistantText("live")], "log after the holder's commit");
      // Released, with nobody holding the lease: the fence is no more current than a taken-over one (a
      // fence test that passes when no lease row matches, SQL's NULL, lets it commit).
      const c2 = freshConversation();
      await store.appendUserMessage(c2, { id: "m1", content: userText("pay alice") });
      const released = await acquire(store, c2, "worker-a");
      const begun = await mustBegin(store, c2, released, "begin by worker-a");
      await store.releaseLease(c2, released);
      await mustNotCommit(store, c2, commitFor(begun, released, { assistant: assistantText("after release") }), "commit under the fence of a lease its holder released (no lease is held)");
      mustEqual(await fixture.raw.turns(c2), [], "stored turns after a commit under a released fence");
      mustEqual(await store.log(c2), [], "log after a commit under a released fence");
    }),
};

export const wrongTurnIndexRefused: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "a commit at a turn index other than the committed count is refused (ahead, behind, a replay of a committed turn)",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice and bob") });
      const fence = await acquire(store, c, "worker-a");
      const snapshot = await mustBegin(store, c, fence, "begin m1");
      await mustNotCommit(store, c, commitFor(snapshot, fence, { turnIndex: 1 }), "commit at index 1 with none committed");
      await mustNotCommit(store, c, commitFor(snapshot, fence, { turnIndex: -1 }), "commit at index -1");
      const tool = commitFor(snapshot, fence, { assistant: toolUse("toolu_1", { to: "alice" }), toolResults: toolResult("toolu_1", "ok"), stopReason: "tool_use", answers: false });
      await mustCommit(store, c, tool, "commit of the tool-use turn 0");
      await mustNotCommit(store, c, commitFor(snapshot, fence, { assistant: assistantText("replay of turn 0") }), "a second commit at index 0");
      await mustNotCommit(store, c, commitFor(snapshot, fence, { turnIndex: 2 }), "commit at index 2 with one committed");
      mustEqual((await fixture.raw.turns(c)).map((t) => t.turnIndex), [0], "stored turn indexes");
      await mustCommit(store, c, commitFor(snapshot, fence, { turnIndex: 1 }), "commit at index 1 with one committed");
      mustEqual((await fixture.raw.turns(c)).map((t) => t.turnIndex), [0, 1], "stored turn indexes after the continuation");
    }),
};

export const notInProgressRefused: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "a commit naming a message that is not in progress (queued, answered, failed, unknown) is refused",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("first") });
      await store.appendUserMessage(c, { id: "m2", content: userText("second") });
      const fence = await acquire(store, c, "worker-a");
      const s1 = await mustBegin(store, c, fence, "begin m1");
      await mustNotCommit(store, c, commitFor(s1, fence, { messageId: "m2" }), "commit naming the queued m2");
      await mustNotCommit(store, c, commitFor(s1, fence, { messageId: "m9" }), "commit naming an unknown message");
      mustEqual(await fixture.raw.turns(c), [], "stored turns after refused commits");
      mustEqual((await store.message(c, "m2"))?.state, "queued", "m2 stays queued");
      await mustCommit(store, c, commitFor(s1, fence), "commit answering m1");
      await mustNotCommit(store, c, commitFor(s1, fence, { turnIndex: 1 }), "commit naming the answered m1");
      const s2 = await mustBegin(store, c, fence, "begin m2");
      await store.failMessage(c, fence, "m2", { failed: "m2" });
      await mustNotCommit(store, c, commitFor(s2, fence), "commit naming the failed m2");
      mustEqual((await fixture.raw.turns(c)).length, 1, "stored turns after the refused commits");
    }),
};

export const userMessageEntersWithCommit: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "a user message enters the log only with its first committed turn, once; tool results follow their turn",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const content = userText("pay alice 10 €");
      await store.appendUserMessage(c, { id: "m1", content });
      mustEqual(await store.log(c), [], "log after the append");
      const fence = await acquire(store, c, "worker-a");
      const s0 = await mustBegin(store, c, fence, "begin m1");
      mustEqual(s0.input, [content], "input of the first turn");
      mustEqual(await store.log(c), [], "log after binding");
      const use = toolUse("toolu_1", { to: "alice", amount: 1000 });
      const result = toolResult("toolu_1", "paid");
      await mustCommit(store, c, commitFor(s0, fence, { assistant: use, toolResults: result, stopReason: "tool_use", answers: false }), "commit turn 0");
      mustEqual(await store.log(c), [content, use, result], "log after turn 0");
      const s1 = await mustBegin(store, c, fence, "begin turn 1");
      mustEqual(s1.input, [content, use, result], "input of turn 1 (the user message is not repeated)");
      await mustCommit(store, c, commitFor(s1, fence, { assistant: assistantText("done") }), "commit turn 1");
      mustEqual(await store.log(c), [content, use, result, assistantText("done")], "log after turn 1");
    }),
};

export const sameContentEntersTwice: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "each message's content enters the log with its own first commit, also when it equals an earlier message's or turn's (the log is not content-addressed): two messages saying the same are two entries of the log and of the next turn's input",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const yes = userText("yes");
      const done = assistantText("done");
      for (const id of ["m1", "m2", "m3"]) await store.appendUserMessage(c, { id, content: yes });
      const fence = await acquire(store, c, "worker-a");
      const expected: JsonValue[] = [];
      for (const [i, id] of ["m1", "m2", "m3"].entries()) {
        const snapshot = await mustBegin(store, c, fence, `begin ${id}`);
        mustEqual(snapshot.input, [...expected, yes], `the input of ${id}'s turn: every answered message and its own, each once (three messages said "yes")`);
        await mustCommit(store, c, commitFor(snapshot, fence, { assistant: done }), `${id}'s answer`);
        expected.push(yes, done);
        mustEqual(await store.log(c), expected, `the log after ${i + 1} messages that each said "yes" and were each answered "done"`);
      }
    }),
};

// ---------------------------------------------------------------------------------- TURN-9

export const oneAtATimeInArrivalOrder: ConversationCheckSpec = {
  rule: "TURN-9",
  name: "one message in progress at a time, bound in arrival order (not id order); a turn's input holds no other waiting message",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const content = { "m-z": userText("first (z)"), "m-a": userText("second (a)"), "m-m": userText("third (m)") };
      for (const [id, text] of Object.entries(content)) await store.appendUserMessage(c, { id, content: text });
      const fence = await acquire(store, c, "worker-a");
      const s1 = await mustBegin(store, c, fence, "first begin");
      mustEqual([s1.message.id, s1.turnIndex, s1.input], ["m-z", 0, [content["m-z"]]], "first begin binds the first arrival");
      const again = await mustBegin(store, c, fence, "second begin before any commit");
      mustEqual(again.message.id, "m-z", "a second begin continues the message in progress");
      const states = (await storageAgrees(fixture, store, c, "while m-z is in progress")).map((m) => [m.id, m.state]);
      mustEqual(states, [["m-z", "in_progress"], ["m-a", "queued"], ["m-m", "queued"]], "stored states while m-z is in progress");
      await mustCommit(store, c, commitFor(s1, fence), "answer m-z");
      const s2 = await mustBegin(store, c, fence, "begin after m-z");
      mustEqual([s2.message.id, s2.turnIndex], ["m-a", 1], "the next arrival, at the next index");
      mustEqual(s2.input, [content["m-z"], commitFor(s1, fence).assistant, content["m-a"]], "input holds the answered m-z and m-a only");
      await store.failMessage(c, fence, "m-a", { failed: "m-a" });
      const s3 = await mustBegin(store, c, fence, "begin after m-a failed");
      mustEqual([s3.message.id, s3.turnIndex], ["m-m", 1], "after a failure the next arrival takes the failed turn's index");
      await store.appendUserMessage(c, { id: "m-late", content: userText("arrived meanwhile") });
      mustEqual((await store.message(c, "m-late"))?.state, "queued", "a message arriving meanwhile is queued");
      await mustCommit(store, c, commitFor(s3, fence), "answer m-m");
      const s4 = await mustBegin(store, c, fence, "begin after m-m");
      mustEqual(s4.message.id, "m-late", "the late message is answered next");
      await mustCommit(store, c, commitFor(s4, fence), "answer m-late");
      mustEqual(await store.beginTurn(c, fence), undefined, "beginTurn with nothing waiting");
    }),
};

export const concurrentMessagesOwnSeqs: ConversationCheckSpec = {
  rule: "TURN-9",
  name: "8 messages sent at once to one conversation (across 4 instances when shared) are all queued, each with its own seq from 1 to 8 as stored, and answered one at a time in that order",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const stores = await racers(subject, fixture, 4);
      const c = freshConversation();
      const ids = Array.from({ length: AT_ONCE }, (_, i) => `m${i + 1}`);
      const sends = await Promise.allSettled(ids.map((id, i) => stores[i % stores.length]!.appendUserMessage(c, { id, content: userText(`message ${id}`) })));
      const results = allAppended(sends, `${AT_ONCE} messages sent at once`);
      must(
        results.every((r) => r.appended && !r.reopened && r.message.state === "queued"),
        `${AT_ONCE} messages sent at once: each must be appended and queued, got ${show(results.map((r) => [r.message.id, r.appended, r.message.state]))}`,
      );
      const seqs = results.map((r) => r.message.seq);
      mustEqual(
        [...seqs].sort((a, b) => a - b),
        ids.map((_, i) => i + 1),
        `the seqs the ${AT_ONCE} appends answered (${show(Object.fromEntries(results.map((r) => [r.message.id, r.message.seq])))}): each message its own, 1 to ${AT_ONCE}`,
      );
      const raw = await storageAgrees(fixture, fixture.store, c, `after ${AT_ONCE} messages sent at once`);
      mustEqual(
        Object.fromEntries(raw.map((m) => [m.id, m.seq])),
        Object.fromEntries(results.map((r) => [r.message.id, r.message.seq])),
        "each message's stored seq is the one its append answered",
      );
      const fence = await acquire(fixture.store, c, "worker-a");
      const answered: string[] = [];
      for (let turn = 0; turn < AT_ONCE; turn++) {
        const snapshot = await mustBegin(fixture.store, c, fence, `begin turn ${turn}`);
        answered.push(snapshot.message.id);
        await mustCommit(fixture.store, c, commitFor(snapshot, fence), `answer ${snapshot.message.id}`);
      }
      mustEqual(answered, raw.map((m) => m.id), "messages are answered in their seq order");
    }),
};

// ---------------------------------------------------------------------------------- TURN-10

export const leaseExclusive: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "the turn lease is exclusive while live, even to a second acquire by the same owner string",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const first = mustAcquire(await store.acquireLease(c, "worker-a", LEASE_MS), "acquire by worker-a");
      for (const owner of ["worker-b", "worker-a"]) {
        const other = await store.acquireLease(c, owner, LEASE_MS);
        mustEqual(other, { acquired: false, owner: "worker-a", leaseExpiresAt: first.leaseExpiresAt }, `acquire by ${owner} while worker-a holds the lease`);
      }
      const raw = await fixture.raw.lease(c);
      mustEqual(raw && { fence: raw.fence, owner: raw.owner }, { fence: first.fence, owner: "worker-a" }, "stored lease");
    }),
};

export const leaseTakeoverAfterExpiry: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "an expired lease is taken with a higher fence; the old fence gets conversation_lease_lost (renew, beginTurn, failMessage), is not committed, and its release is ignored",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const old = await acquire(store, c, "worker-a");
      const snapshot = await mustBegin(store, c, old, "begin by worker-a");
      await fixture.raw.expireLease(c);
      const current = await acquire(store, c, "worker-b", "acquire after expiry");
      must(current > old, `the new fence ${current} must be higher than the expired one ${old}`);
      await mustRejectWith(store.renewLease(c, old, LEASE_MS), "conversation_lease_lost", "renew with the stale fence");
      await mustRejectWith(store.beginTurn(c, old), "conversation_lease_lost", "beginTurn with the stale fence");
      await mustRejectWith(store.failMessage(c, old, "m1", { stale: true }), "conversation_lease_lost", "failMessage with the stale fence");
      await mustNotCommit(store, c, commitFor(snapshot, old), "commit with the stale fence");
      await store.releaseLease(c, old);
      const raw = await fixture.raw.lease(c);
      mustEqual(raw && { fence: raw.fence, owner: raw.owner }, { fence: current, owner: "worker-b" }, "stored lease after the stale release");
      mustEqual((await store.message(c, "m1"))?.state, "in_progress", "m1 is still in progress (the stale failMessage changed nothing)");
      mustEqual(await store.records(c), [], "records after the stale failMessage");
      await store.renewLease(c, current, LEASE_MS);
      await mustCommit(store, c, commitFor(await mustBegin(store, c, current, "begin by worker-b"), current), "worker-b commits");
    }),
};

/**
 * Fences compared as numbers: a store that keeps the fence as text (a Redis hash field) and refuses
 * "older" fences with a text comparison lets 9 pass while 10 holds the lease ("9" > "10").
 * Grants and releases reach two digits; the stale holder is the last one-digit grant.
 */
export const turnLeaseFenceAcrossDigits: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "fences are compared as numbers: once the lease is taken over past fence 9 (grants and releases, then a takeover of an expired lease), the one-digit stale fences get conversation_lease_lost (renew, beginTurn, failMessage), are not committed, and their release is ignored",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const issued: number[] = [];
      let stale = await acquire(store, c, "worker-1");
      for (let i = 2; stale < 9 && i <= 30; i++) {
        issued.push(stale);
        await store.releaseLease(c, stale);
        stale = await acquire(store, c, `worker-${i}`);
      }
      const snapshot = await mustBegin(store, c, stale, `begin by the holder of fence ${stale}`);
      await fixture.raw.expireLease(c);
      const current = await acquire(store, c, "worker-new", "the takeover of the expired lease");
      must(current > stale, `the takeover's fence ${current} must be higher than the expired one ${stale}`);
      for (const old of [stale, ...issued.filter((f) => f >= 2 && f <= 9).slice(0, 1)]) {
        const what = `with the stale fence ${old} while fence ${current} holds the lease (compared as text, "${old}" may sort after "${current}")`;
        await mustRejectWith(store.renewLease(c, old, LEASE_MS), "conversation_lease_lost", `renew ${what}`);
        await mustRejectWith(store.beginTurn(c, old), "conversation_lease_lost", `beginTurn ${what}`);
        await mustRejectWith(store.failMessage(c, old, "m1", { stale: old }), "conversation_lease_lost", `failMessage ${what}`);
        await mustNotCommit(store, c, commitFor(snapshot, old), `commit ${what}`);
        await store.releaseLease(c, old);
        const raw = await fixture.raw.lease(c);
        mustEqual(raw && { fence: raw.fence, owner: raw.owner }, { fence: current, owner: "worker-new" }, `stored lease after the release ${what}`);
      }
      mustEqual((await store.message(c, "m1"))?.state, "in_progress", "m1 after the stale fences' operations");
      mustEqual(await store.records(c), [], "records after the stale failMessage");
      await mustCommit(store, c, commitFor(await mustBegin(store, c, current, "begin by the new holder"), current), "the new holder commits");
    }),
};

export const expiredLeaseStillHolds: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "an expired lease nobody took is still its holder's: renew, beginTurn and commit with its fence succeed",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      await fixture.raw.expireLease(c);
      const renewed = await store.renewLease(c, fence, LEASE_MS);
      must(Number.isFinite(renewed.leaseExpiresAt), `renew must return leaseExpiresAt, got ${show(renewed)}`);
      const taken = await store.acquireLease(c, "worker-b", LEASE_MS);
      mustEqual(taken.acquired, false, "acquire by worker-b after the holder renewed");
      await fixture.raw.expireLease(c);
      const snapshot = await mustBegin(store, c, fence, "begin under an expired lease nobody took");
      await mustCommit(store, c, commitFor(snapshot, fence), "commit under an expired lease nobody took");
    }),
};

export const fencesRiseAcrossRelease: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "every grant's fence is higher than all earlier ones, across release and re-acquire; a stale release is ignored, and a released lease is not renewed under its fence",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const fences: number[] = [];
      for (let i = 0; i < 4; i++) {
        const fence = await acquire(store, c, `worker-${i}`);
        must(fences.every((f) => fence > f), `grant ${i + 1}: fence ${fence} is not higher than every earlier one (${fences.join(", ")})`);
        fences.push(fence);
        mustEqual((await fixture.raw.lease(c))?.fence, fence, `stored fence after grant ${i + 1}`);
        if (i % 2 === 0) await store.releaseLease(c, fence);
        else await fixture.raw.expireLease(c);
      }
      const held = await acquire(store, c, "holder");
      await store.releaseLease(c, fences[0]!);
      mustEqual((await store.acquireLease(c, "intruder", LEASE_MS)).acquired, false, "acquire after a stale release (the holder keeps the lease)");
      await store.releaseLease(c, held);
      // The fence no longer holds the lease: a renewal keyed on the fence alone would take it back
      // for a holder that gave it up (blind round K: an UPDATE ... WHERE fence = $2).
      await mustRejectWith(store.renewLease(c, held, LEASE_MS), "conversation_lease_lost", "renew with the fence of a released lease");
      const raw = await fixture.raw.lease(c);
      mustEqual(raw && { fence: raw.fence, owner: raw.owner, expiresAt: raw.expiresAt }, { fence: held, owner: undefined, expiresAt: undefined }, "stored lease after release and a renewal under its fence: no holder, the fence kept");
    }),
};

export const concurrentAcquiresOneWinner: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "of 8 concurrent acquires exactly one wins, on a fresh conversation and after expiry; the losers see the winner",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      const stores = await racers(subject, fixture, 4);
      let previous = 0;
      // Several expiries: a store whose writers of one conversation do not run one at a time (a
      // read without its row lock) lets two racers win only when both read before either writes,
      // which one round of 8 misses now and then on a loaded host.
      for (const round of ["fresh", "after expiry", "after expiry #2", "after expiry #3", "after expiry #4", "after expiry #5"]) {
        if (round !== "fresh") await fixture.raw.expireLease(c);
        const results = await Promise.all(Array.from({ length: 8 }, (_, i) => stores[i % stores.length]!.acquireLease(c, `racer-${i}`, LEASE_MS)));
        const winners = results.flatMap((r, i) => (r.acquired ? [i] : []));
        must(winners.length === 1, `${round}: expected exactly one of 8 concurrent acquires to win, got ${winners.length} (${show(results)})`);
        const winner = `racer-${winners[0]}`;
        const won = results[winners[0]!] as { fence: number; leaseExpiresAt: number };
        must(won.fence > previous, `${round}: the winner's fence ${won.fence} must be higher than ${previous}`);
        for (const r of results) if (!r.acquired) mustEqual(r.owner, winner, `${round}: a loser is told the winner`);
        const raw = await fixture.raw.lease(c);
        mustEqual(raw && { fence: raw.fence, owner: raw.owner }, { fence: won.fence, owner: winner }, `${round}: stored lease`);
        previous = won.fence;
      }
    }),
};

export const renewExtends: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "renew extends the lease from now on the store's clock and is what the store holds",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const first = mustAcquire(await store.acquireLease(c, "worker-a", 60_000), "acquire for 60 s");
      const renewed = await store.renewLease(c, first.fence, 3 * 60_000);
      must(renewed.leaseExpiresAt > first.leaseExpiresAt, `renew for 180 s must end later than ${first.leaseExpiresAt}, got ${renewed.leaseExpiresAt}`);
      must(renewed.leaseExpiresAt - first.leaseExpiresAt < 3 * 60_000, `renew must count from now, not from the old expiry (${first.leaseExpiresAt} -> ${renewed.leaseExpiresAt})`);
      mustEqual((await fixture.raw.lease(c))?.expiresAt, renewed.leaseExpiresAt, "stored expiry after renew");
      const other = await store.acquireLease(c, "worker-b", LEASE_MS);
      mustEqual(other, { acquired: false, owner: "worker-a", leaseExpiresAt: renewed.leaseExpiresAt }, "acquire by worker-b after renew");
    }),
};

export const leaseArgumentsChecked: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "a turn lease's owner and length are checked as every store checks them (LEDGER-29's one lease limit): refused with invalid_store_input before anything is stored",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const badLengths: unknown[] = [-1, Number.NaN, Number.POSITIVE_INFINITY, MAX_LEASE_MS + 1, "60000", null, undefined];
      for (const bad of badLengths) {
        await mustRefuseField(store.acquireLease(c, "worker-a", bad as number), "leaseMs", `acquireLease with leaseMs ${show(bad)}`);
      }
      const badOwners: unknown[] = ["", "x".repeat(MAX_LEASE_OWNER_LENGTH + 1), "lone \ud800 surrogate", 42, null];
      for (const bad of badOwners) {
        await mustRefuseField(store.acquireLease(c, bad as string, LEASE_MS), "owner", `acquireLease by owner ${show(bad)}`);
      }
      mustEqual((await fixture.raw.lease(c))?.owner, undefined, "the stored lease after refused acquires: nobody holds it");
      // The limits themselves are accepted: the longest owner, the longest lease, a fraction
      // rounded up (never shorter than asked), and 0 (a lease that has already run out).
      const longest = "é".repeat(MAX_LEASE_OWNER_LENGTH);
      const first = mustAcquire(await store.acquireLease(c, longest, MAX_LEASE_MS), "acquire by a 1,024-character owner for MAX_LEASE_MS");
      mustEqual((await fixture.raw.lease(c))?.owner, longest, "the stored owner of the longest length");
      for (const bad of badLengths) {
        await mustRefuseField(store.renewLease(c, first.fence, bad as number), "leaseMs", `renewLease with leaseMs ${show(bad)}`);
      }
      mustEqual((await fixture.raw.lease(c))?.expiresAt, first.leaseExpiresAt, "the stored expiry after refused renewals: unchanged");
      const fractional = await store.renewLease(c, first.fence, 1_000.25);
      must(Number.isSafeInteger(fractional.leaseExpiresAt), `a renewal for 1000.25 ms must expire at whole milliseconds, got ${fractional.leaseExpiresAt}`);
      mustEqual((await fixture.raw.lease(c))?.expiresAt, fractional.leaseExpiresAt, "the stored expiry after a fractional renewal");
      const zero = await store.renewLease(c, first.fence, 0);
      mustEqual((await fixture.raw.lease(c))?.expiresAt, zero.leaseExpiresAt, "the stored expiry after a renewal for 0 ms");
      const taken = mustAcquire(await store.acquireLease(c, "worker-b", LEASE_MS), "acquire by another owner once a 0 ms lease has run out");
      must(taken.fence > first.fence, `the fence after the takeover must rise above ${first.fence}, got ${taken.fence}`);
    }),
};

/** Rounds of the boundary check: each acquire lands in the millisecond a 0 ms lease ends, or just after. */
const BOUNDARY_ROUNDS = 8;

export const turnLeaseExpiredAtItsEnd: ConversationCheckSpec = {
  rule: "TURN-10",
  name: `a turn lease has expired from the instant it ends (leaseExpiresAt on the store's clock, not the millisecond after): a lease granted for 0 ms is taken at once by another owner with a higher fence, ${BOUNDARY_ROUNDS} times in a row`,
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      for (let round = 0; round < BOUNDARY_ROUNDS; round++) {
        const c = freshConversation(`edge${round}`);
        const first = mustAcquire(await store.acquireLease(c, "worker-a", 0), `round ${round}: acquire for 0 ms`);
        // Issued at once, usually within the lease's own millisecond: a store that counts a lease
        // live at leaseExpiresAt (">=" for ">", or "<" for "<=" in an acquire's WHERE) refuses here.
        const next = await store.acquireLease(c, "worker-b", LEASE_MS);
        if (!next.acquired) {
          throw new ConformanceFailure(`round ${round}: an acquire right after a 0 ms lease was granted (it ended at ${first.leaseExpiresAt}) found it held by ${show(next.owner)} until ${next.leaseExpiresAt}: a lease is live only before leaseExpiresAt`);
        }
        must(next.fence > first.fence, `round ${round}: the acquire after the 0 ms lease must get a fence above ${first.fence}, got ${next.fence}`);
      }
    }),
};

/** A host clock this far off is a misconfigured host, not an exotic one (as LEDGER-20's check). */
const SKEW_MS = 10 * 60 * 1000;

export const leaseOnStoreClock: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "the turn lease is measured on the store's clock: instances whose process clock is 10 minutes fast or slow (raw.skewedInstance) respect a live lease granted or renewed through another instance; a store that decides leases on the process clock fails",
  needs: ["sharedAcrossProcesses", "clockSkew"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const skewed = fixture.raw.skewedInstance;
      if (skewed === undefined) throw new ConformanceFailure("the subject declares clockSkew but its fixture has no raw.skewedInstance");
      const { store } = fixture;
      const fast = await skewed.call(fixture.raw, SKEW_MS);
      const slow = await skewed.call(fixture.raw, -SKEW_MS);
      // One call at a time: a skewed call moves this process's Date while it runs.
      const cases = [
        { holder: store, renewer: undefined, taker: fast, label: "through the instance 10 min fast, of a 60 s lease just granted through the true-clock one" },
        { holder: slow, renewer: undefined, taker: store, label: "through the true-clock instance, of a 60 s lease just granted through the instance 10 min slow" },
        { holder: store, renewer: slow, taker: store, label: "through the true-clock instance, of a lease just renewed for 60 s through the instance 10 min slow" },
      ];
      for (const [i, { holder, renewer, taker, label }] of cases.entries()) {
        const c = freshConversation(`skew${i}`);
        const granted = mustAcquire(await holder.acquireLease(c, "worker-holder", 60_000), `the holder's acquire (${label})`);
        const leaseExpiresAt = renewer === undefined ? granted.leaseExpiresAt : (await renewer.renewLease(c, granted.fence, 60_000)).leaseExpiresAt;
        const seen = await taker.acquireLease(c, "worker-taker", LEASE_MS);
        if (seen.acquired) {
          throw new ConformanceFailure(`an acquire ${label} (it ends at ${leaseExpiresAt}) was acquired with fence ${seen.fence}: a live lease was taken; the lease must be measured on the store's clock, not the process's`);
        }
        mustEqual(seen, { acquired: false, owner: "worker-holder", leaseExpiresAt }, `the acquire ${label}`);
      }
    }),
};

export const leasesPerConversation: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "leases, fences and queues of different conversations are independent",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const a = freshConversation("a");
      const b = freshConversation("b");
      await store.appendUserMessage(a, { id: "m1", content: userText("in a") });
      await store.appendUserMessage(b, { id: "m1", content: userText("in b") });
      const fa = await acquire(store, a, "worker-a");
      const fb = await acquire(store, b, "worker-b", "acquire b while a is held");
      const sa = await mustBegin(store, a, fa, "begin a");
      const sb = await mustBegin(store, b, fb, "begin b");
      mustEqual([sa.input, sb.input], [[userText("in a")], [userText("in b")]], "each conversation answers its own m1");
      await fixture.raw.expireLease(a);
      mustEqual((await store.acquireLease(b, "worker-c", LEASE_MS)).acquired, false, "b's lease is still live after a's expired");
      await mustCommit(store, a, commitFor(sa, fa), "commit a");
      mustEqual(await store.log(b), [], "b's log after a's commit");
      mustEqual((await store.message(b, "m1"))?.state, "in_progress", "b's m1 after a's commit");
    }),
};

// ---------------------------------------------------------------------------------- TURN-11

export const bindsAtCommittedCount: ConversationCheckSpec = {
  rule: "TURN-11",
  name: "beginTurn binds the oldest queued message at turnIndex = committed turn count, in storage, before any commit",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      const fence = await acquire(store, c, "worker-a");
      const s0 = await mustBegin(store, c, fence, "begin m1");
      mustEqual(undated(s0.message), expectedMessage({ id: "m1", content: userText("pay alice"), seq: 1, state: "in_progress", turnIndex: 0 }), "the bound m1");
      const stored = (await fixture.raw.messages(c))[0];
      mustEqual(stored && { state: stored.state, turnIndex: stored.turnIndex }, { state: "in_progress", turnIndex: 0 }, "m1 as stored right after begin");
      await mustCommit(store, c, commitFor(s0, fence, { assistant: toolUse("toolu_1", {}), toolResults: toolResult("toolu_1", "ok"), stopReason: "tool_use", answers: false }), "turn 0");
      await mustCommit(store, c, commitFor(s0, fence, { turnIndex: 1 }), "turn 1 answers m1");
      const s2 = await mustBegin(store, c, fence, "begin m2");
      mustEqual([s2.message.id, s2.turnIndex, s2.message.turnIndex], ["m2", 2, 2], "m2 is bound at the committed count 2");
      const raw = await storageAgrees(fixture, store, c, "after binding m2");
      mustEqual(raw.map((m) => [m.id, m.state, m.turnIndex]), [["m1", "answered", 0], ["m2", "in_progress", 2]], "stored bindings");
    }),
};

export const bindingSurvivesTakeover: ConversationCheckSpec = {
  rule: "TURN-11",
  name: "a new lease holder gets the bound message at the same index, not a newer one, with the same input",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const a = await acquire(store, c, "worker-a");
      const first = await mustBegin(store, c, a, "begin by worker-a");
      await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      await fixture.raw.expireLease(c);
      const b = await acquire(store, c, "worker-b", "takeover");
      const second = await mustBegin(store, c, b, "begin by worker-b");
      mustEqual(bound(second), bound(first), "worker-b's snapshot");
    }),
};

export const bindingSurvivesRestart: ConversationCheckSpec = {
  rule: "TURN-11",
  name: "the binding survives a restart: a fresh instance continues the same message at the same index",
  needs: ["survivesRestart"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      await fixture.store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      await fixture.store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      const a = await acquire(fixture.store, c, "worker-a");
      const s0 = await mustBegin(fixture.store, c, a, "begin m1");
      await mustCommit(fixture.store, c, commitFor(s0, a, { assistant: toolUse("toolu_1", {}), toolResults: toolResult("toolu_1", "ok"), stopReason: "tool_use", answers: false }), "turn 0");
      const first = await mustBegin(fixture.store, c, a, "begin turn 1");
      const restarted = await fixture.reopen();
      await fixture.raw.expireLease(c);
      const b = await acquire(restarted, c, "worker-b", "acquire on the fresh instance");
      const second = await mustBegin(restarted, c, b, "begin on the fresh instance");
      mustEqual(bound(second), bound(first), "the fresh instance's snapshot");
    }),
};

export const toolLoopStaysBound: ConversationCheckSpec = {
  rule: "TURN-11",
  name: "after a tool-use commit the same message continues at the next index; a later arrival waits",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice, then bob") });
      const fence = await acquire(store, c, "worker-a");
      let snapshot = await mustBegin(store, c, fence, "begin m1");
      await store.appendUserMessage(c, { id: "m2", content: userText("meanwhile") });
      for (let i = 0; i < 3; i++) {
        mustEqual([snapshot.message.id, snapshot.turnIndex], ["m1", i], `turn ${i} answers m1`);
        await mustCommit(store, c, commitFor(snapshot, fence, { assistant: toolUse(`toolu_${i}`, { i }), toolResults: toolResult(`toolu_${i}`, `ok ${i}`), stopReason: "tool_use", answers: false }), `tool turn ${i}`);
        snapshot = await mustBegin(store, c, fence, `begin turn ${i + 1}`);
      }
      must(!containsValue(snapshot.input, userText("meanwhile"), isDeepStrictEqual), "m2's content must not be in m1's input");
      mustEqual(snapshot.input.filter((m) => isDeepStrictEqual(m, userText("pay alice, then bob"))).length, 1, "m1's content occurs once in the input");
    }),
};

// ---------------------------------------------------------------------------------- TURN-15

/** The snapshot without `bound`: which call bound the message, judged by TURN-12's check of it; a continuation does not. */
function withoutBound(snapshot: TurnSnapshot): Omit<TurnSnapshot, "bound"> {
  const { bound: _bound, ...rest } = snapshot;
  return rest;
}

/** The snapshot without `resumed` and `bound` (which call bound it): what TURN-11 compares across holders. */
function bound(snapshot: TurnSnapshot): Omit<TurnSnapshot, "resumed" | "bound"> {
  const { resumed: _resumed, bound: _bound, ...rest } = snapshot;
  return rest;
}

async function mustResume(store: ConversationStore, c: string, fence: number, expected: [string, number, boolean], what: string): Promise<TurnSnapshot> {
  const snapshot = await mustBegin(store, c, fence, what);
  mustEqual([snapshot.message.id, snapshot.turnIndex, snapshot.resumed], expected, `${what}: [message, turnIndex, resumed]`);
  return snapshot;
}

export const resumedWhenEarlierGrantBegan: ConversationCheckSpec = {
  rule: "TURN-15",
  name: "resumed is true exactly when the turn index was begun under an earlier lease grant (takeover, reopened message, next message at a failed index), false when first begun under this fence",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice, then bob") });
      const a = await acquire(store, c, "worker-a");
      const t0 = await mustResume(store, c, a, ["m1", 0, false], "worker-a binds m1 from queued");
      await mustCommit(store, c, commitFor(t0, a, { assistant: toolUse("toolu_1", {}), toolResults: toolResult("toolu_1", "ok"), stopReason: "tool_use", answers: false }), "turn 0");
      // The same holder's next turn of its own message: nobody else ever held this index.
      await mustResume(store, c, a, ["m1", 1, false], "worker-a begins turn 1 of its own message");
      await mustResume(store, c, a, ["m1", 1, false], "worker-a begins turn 1 again (same fence)");
      // worker-a pauses past its lease; its run of turn 1 may still be alive.
      await fixture.raw.expireLease(c);
      const b = await acquire(store, c, "worker-b", "takeover by worker-b");
      const t1 = await mustResume(store, c, b, ["m1", 1, true], "worker-b resumes m1 at turn 1");
      await mustResume(store, c, b, ["m1", 1, true], "worker-b begins turn 1 again (it stays resumed)");
      await mustCommit(store, c, commitFor(t1, b), "worker-b answers m1 at turn 1");
      // A new message at a new index under the same fence: not resumed.
      await store.appendUserMessage(c, { id: "m2", content: userText("pay carol") });
      await mustResume(store, c, b, ["m2", 2, false], "worker-b binds m2 from queued");
      await store.failMessage(c, b, "m2", { failed: "m2" });
      await store.releaseLease(c, b);
      // A failed message reopened (TURN-12) and begun under a later grant: worker-b's runs of index 2 may be alive.
      mustEqual((await store.appendUserMessage(c, { id: "m2", content: userText("pay carol") })).reopened, true, "re-send of the failed m2 reopens it");
      const d = await acquire(store, c, "worker-d");
      await mustResume(store, c, d, ["m2", 2, true], "worker-d begins the reopened m2");
      await store.failMessage(c, d, "m2", { failed: "m2 again" });
      // The next message takes the failed index (TURN-12): earlier runs of index 2 share its keys' turn index.
      await store.appendUserMessage(c, { id: "m3", content: userText("pay dave") });
      await mustResume(store, c, d, ["m3", 2, true], "worker-d binds m3 at the failed index 2");
      await store.releaseLease(c, d);
      const e = await acquire(store, c, "worker-e");
      const t2 = await mustResume(store, c, e, ["m3", 2, true], "worker-e resumes m3 at index 2");
      await mustCommit(store, c, commitFor(t2, e), "worker-e answers m3");
      await store.appendUserMessage(c, { id: "m4", content: userText("pay erin") });
      await mustResume(store, c, e, ["m4", 3, false], "worker-e binds m4 at a new index 3");
    }),
};

export const resumedSurvivesRestart: ConversationCheckSpec = {
  rule: "TURN-15",
  name: "resumed survives a restart: a fresh instance says resumed for a turn index an earlier grant began, and not for one its own fence began",
  needs: ["survivesRestart"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      await fixture.store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const a = await acquire(fixture.store, c, "worker-a");
      const first = await mustResume(fixture.store, c, a, ["m1", 0, false], "worker-a binds m1");
      const restarted = await fixture.reopen();
      // The holder continues on a fresh instance under its own fence: still its own index.
      mustEqual(withoutBound(await mustBegin(restarted, c, a, "worker-a on the fresh instance")), withoutBound(first), "worker-a's snapshot on the fresh instance");
      await fixture.raw.expireLease(c);
      const b = await acquire(restarted, c, "worker-b", "takeover on the fresh instance");
      await mustResume(restarted, c, b, ["m1", 0, true], "worker-b resumes m1 on the fresh instance");
      await restarted.failMessage(c, b, "m1", { failed: "m1" });
      await restarted.releaseLease(c, b);
      const again = await fixture.reopen();
      mustEqual((await again.appendUserMessage(c, { id: "m1", content: userText("pay alice") })).reopened, true, "re-send of m1 reopens it");
      const d = await acquire(again, c, "worker-d");
      await mustResume(again, c, d, ["m1", 0, true], "worker-d begins the reopened m1 after another restart");
    }),
};

// ---------------------------------------------------------------------------------- TURN-12

export const resendReopensFailed: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a re-send of the failed message reopens it while it is the most recently bound, and it retries at its bound index",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m0", content: userText("hello") });
      const fence = await acquire(store, c, "worker-a");
      await mustCommit(store, c, commitFor(await mustBegin(store, c, fence, "begin m0"), fence), "answer m0");
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const first = await mustBegin(store, c, fence, "begin m1");
      const record = { kind: "failed_turn", messageId: "m1", effects: [{ key: "k1", effect: "may_have_happened" }] };
      await store.failMessage(c, fence, "m1", record);
      mustEqual(undated(await store.message(c, "m1")), expectedMessage({ id: "m1", content: userText("pay alice"), seq: 2, state: "failed", turnIndex: 1, failure: record }), "m1 after failMessage");
      const resend = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      mustEqual([resend.appended, resend.reopened, resend.message.state, "failure" in resend.message], [false, true, "queued", false], "re-send of the failed m1");
      // The reopen leaves the failed-turn record beside the conversation (RECORD-4): a runner dates
      // the first failure from it when the store keeps no firstFailedAt, to check the re-send window
      // again when another holder takes the retry over.
      mustEqual(await store.records(c), [record], "records after the reopen (the failed-turn record stays)");
      const retry = await mustBegin(store, c, fence, "begin the retry");
      mustEqual([retry.message.id, retry.turnIndex, retry.input], [first.message.id, first.turnIndex, first.input], "the retry's message, index and input");
      await mustCommit(store, c, commitFor(retry, fence), "the retry commits");
    }),
};

export const newMessageTakesFailedIndex: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a new message after a failed turn takes the failed turn's index",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const failed = await mustBegin(store, c, fence, "begin m1");
      await store.failMessage(c, fence, "m1", { failed: "m1" });
      await store.appendUserMessage(c, { id: "m2", content: userText("try again: pay alice") });
      const next = await mustBegin(store, c, fence, "begin m2");
      mustEqual([next.message.id, next.turnIndex], ["m2", failed.turnIndex], "m2's binding");
      // The binding as stored (TURN-11), not only the snapshot: what a restart, a takeover and the
      // user's view of the message read.
      mustEqual([next.message.turnIndex, (await store.message(c, "m2"))?.turnIndex], [failed.turnIndex, failed.turnIndex], "m2's stored binding");
      mustEqual(next.input, [userText("try again: pay alice")], "m2's input (nothing of the failed turn)");
    }),
};

export const resendAfterOtherBoundStaysFailed: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a re-send of a failed message after another message was bound returns the stored failure and changes nothing",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      await mustBegin(store, c, fence, "begin m1");
      const record = { failed: "m1", effects: ["unknown"] };
      await store.failMessage(c, fence, "m1", record);
      await store.appendUserMessage(c, { id: "m2", content: userText("something else") });
      await mustBegin(store, c, fence, "begin m2");
      const before = await store.message(c, "m1");
      const resend = await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      mustEqual(resend, { appended: false, reopened: false, message: before }, "re-send of m1 after m2 was bound");
      mustEqual(before?.failure, record, "m1 keeps its failure");
      const next = await mustBegin(store, c, fence, "begin after the re-send");
      mustEqual(next.message.id, "m2", "m2 stays the message in progress");
      // Still stays failed once m2 is answered: m2 remains the most recently bound.
      await mustCommit(store, c, commitFor(next, fence), "answer m2");
      mustEqual((await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") })).reopened, false, "re-send of m1 after m2 was answered");
      mustEqual(await store.beginTurn(c, fence), undefined, "nothing waits after the refused re-send");
    }),
};

export const resendRacingBeginTurn: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a re-send of a failed message racing beginTurn of the next message (both issue orders, 4 rounds each; across instances when shared) ends as one serial order does: the failed message reopened and begun, or the next one bound and the failed one still failed",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const [holder, sender] = [fixture.store, (await racers(subject, fixture, 2)).at(-1)!];
      for (const resendFirst of [true, false]) {
        for (let round = 1; round <= 4; round++) {
          const where = `${resendFirst ? "re-send issued first" : "beginTurn issued first"}, round ${round}`;
          const c = freshConversation();
          await holder.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
          const fence = await acquire(holder, c, "worker-a");
          await mustBegin(holder, c, fence, `${where}: begin m1`);
          await holder.failMessage(c, fence, "m1", { failed: "m1" });
          await holder.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
          const resend = () => sender.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
          const begin = () => holder.beginTurn(c, fence);
          const [sent, begun] = resendFirst ? await Promise.all([resend(), begin()]) : (await Promise.all([begin(), resend()])).reverse() as [AppendResult, TurnSnapshot | undefined];
          must(begun !== undefined, `${where}: beginTurn found nothing to begin though m2 waits`);
          const states = Object.fromEntries((await fixture.raw.messages(c)).map((m) => [m.id, m.state]));
          if (sent.reopened) {
            must(
              begun!.message.id === "m1",
              `${where}: the re-send reopened m1 though beginTurn bound m2 at its index (${show(states)}): m1's retry would run at a later index, with new keys, and make its effects again`,
            );
            mustEqual(states, { m1: "in_progress", m2: "queued" }, `${where}: stored states after m1 was reopened and begun`);
          } else {
            mustEqual([begun!.message.id, begun!.turnIndex], ["m2", 0], `${where}: the re-send did not reopen m1, so beginTurn bound m2 at the failed index`);
            mustEqual(states, { m1: "failed", m2: "in_progress" }, `${where}: stored states after m2 was bound (m1 stays failed)`);
          }
        }
      }
    }),
};

export const reopenedGoesFirst: ConversationCheckSpec = {
  rule: "TURN-12",
  name: "a failed message re-sent while later ones only wait is reopened and answered before them",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const first = await mustBegin(store, c, fence, "begin m1");
      await store.appendUserMessage(c, { id: "m2", content: userText("and then?") });
      await store.failMessage(c, fence, "m1", { failed: "m1" });
      mustEqual((await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") })).reopened, true, "re-send of m1 while m2 only waits");
      const retry = await mustBegin(store, c, fence, "begin after the re-send");
      mustEqual([retry.message.id, retry.turnIndex], ["m1", first.turnIndex], "m1 retries first, at its index");
    }),
};

// ---------------------------------------------------------------------------------- TURN-17

export const listedReopenableExact: ConversationCheckSpec = {
  rule: "TURN-17",
  name: "a listed failed turn says reopenable exactly when a re-send would reopen it (TURN-12): true while it is the last bound, false once another message was bound, and it stays listed",
  needs: ["listFailedTurns"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const list = listingOf(store);
      const c = freshConversation();
      /** The listed turns of c: [message id, turn index, reopenable], the record checked on the way. */
      const listed = async (what: string, records: Record<string, JsonValue>): Promise<Array<[string, number | undefined, boolean | undefined]>> => {
        const page = await list({ conversationId: c });
        must(Array.isArray(page?.turns), `${what}: listFailedTurns must return { turns: [...] }, got ${show(page)}`);
        for (const t of page.turns) {
          mustEqual(t.conversationId, c, `${what}: the conversation of a listed turn`);
          mustEqual(t.failure, records[t.messageId], `${what}: the record listed for ${t.messageId}`);
          must(t.reopenable === undefined || typeof t.reopenable === "boolean", `${what}: ${t.messageId}'s reopenable must be true, false or absent, got ${show(t.reopenable)}`);
        }
        return page.turns.map((t) => [t.messageId, t.turnIndex, t.reopenable]);
      };
      /** reopenable where the store gives it (SHOULD), `expected` when it does; absent passes. */
      const says = (rows: Array<[string, number | undefined, boolean | undefined]>, id: string, expected: boolean, what: string): void => {
        const row = rows.find((r) => r[0] === id);
        must(row !== undefined, `${what}: the failed message ${id} must be listed, got ${show(rows)}`);
        if (row[2] !== undefined) mustEqual(row[2], expected, `${what}: ${id}'s reopenable`);
      };
      // The record says a re-send may help: as of the failure (RECORD-5). reopenable must not echo it.
      const a = { kind: "failed_turn", messageId: "a", retryable: true };
      const b = { kind: "failed_turn", messageId: "b", retryable: true };
      await store.appendUserMessage(c, { id: "a", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const first = await mustBegin(store, c, fence, "begin a");
      await store.failMessage(c, fence, "a", a);
      const afterFail = await listed("a failed, the last bound", { a });
      mustEqual(afterFail.map((r) => r[0]), ["a"], "listed after a failed");
      mustEqual(afterFail[0]![1], first.turnIndex, "a's listed turn index");
      says(afterFail, "a", true, "a failed, the last bound");

      await store.appendUserMessage(c, { id: "b", content: userText("something else") });
      const next = await mustBegin(store, c, fence, "begin b");
      mustEqual([next.message.id, next.turnIndex], ["b", first.turnIndex], "b's binding (a failed turn's index, TURN-12)");
      const whileBound = await listed("after another message was bound at its index", { a });
      mustEqual(whileBound.map((r) => r[0]), ["a"], "listed while b is in progress (a still failed, b not)");
      says(whileBound, "a", false, "after another message was bound at its index");
      // The answer it gave is what a re-send does: it stays failed, and stays listed.
      const resend = await store.appendUserMessage(c, { id: "a", content: userText("pay alice") });
      mustEqual([resend.reopened, resend.message.state], [false, "failed"], "the re-send of a after b was bound (TURN-12)");
      says(await listed("after a's re-send", { a }), "a", false, "after a's re-send");

      await store.failMessage(c, fence, "b", b);
      const both = await listed("b failed too", { a, b });
      mustEqual(both.map((r) => r[0]).sort(), ["a", "b"], "listed after b failed too");
      says(both, "a", false, "b failed too");
      says(both, "b", true, "b failed too, the last bound");
      // b was listed as reopenable: its re-send reopens it, and it leaves the list.
      mustEqual((await store.appendUserMessage(c, { id: "b", content: userText("something else") })).reopened, true, "the re-send of b, the last bound");
      const left = await listed("after b was reopened", { a });
      mustEqual(left.map((r) => r[0]), ["a"], "listed after b was reopened");
      says(left, "a", false, "after b was reopened");
    }),
};

// ---------------------------------------------------------------------------------- TURN-7

export const turnsOfInOrder: ConversationCheckSpec = {
  rule: "TURN-7",
  name: "turnsOf returns a message's committed turns in order, exactly as committed; none for other messages",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      const fence = await acquire(store, c, "worker-a");
      const s0 = await mustBegin(store, c, fence, "begin m1");
      const t0: StoredTurn = { turnIndex: 0, messageId: "m1", assistant: toolUse("toolu_1", { to: "alice" }), toolResults: toolResult("toolu_1", "paid"), stopReason: "tool_use" };
      const t1: StoredTurn = { turnIndex: 1, messageId: "m1", assistant: assistantText("Paid alice."), stopReason: null };
      await mustCommit(store, c, { ...commitFor(s0, fence), ...t0, answers: false }, "turn 0");
      await mustCommit(store, c, { ...commitFor(s0, fence), ...t1, answers: true }, "turn 1");
      mustEqual(await store.turnsOf(c, "m1"), [t0, t1], "turnsOf(m1)");
      mustEqual(await fixture.raw.turns(c), [t0, t1], "stored turns");
      mustEqual(await store.turnsOf(c, "m2"), [], "turnsOf the queued m2");
      mustEqual(await store.turnsOf(c, "m9"), [], "turnsOf an unknown message");
      mustEqual(await store.turnsOf(freshConversation(), "m1"), [], "turnsOf in an unknown conversation");
      mustEqual(await store.message(freshConversation(), "m1"), undefined, "message() in an unknown conversation");
      mustEqual(await store.log(freshConversation()), [], "log of an unknown conversation");
    }),
};

export const contentRoundTrips: ConversationCheckSpec = {
  rule: "TURN-7",
  name: "messages, turns, tool results, failures and records come back deep-equal (non-ASCII, 3- and 4-byte UTF-8, escapes, numbers, 200-deep nesting, 64 KiB, strings that look like timestamps or numbers, __proto__ members)",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      for (const { label, value } of [...TRICKY_CONTENT, ...LOOKALIKE_CONTENT]) {
        const c = freshConversation();
        await store.appendUserMessage(c, { id: "m1", content: value });
        await store.appendUserMessage(c, { id: "m2", content: value });
        mustEqual((await store.message(c, "m1"))?.content, value, `${label}: message().content`);
        const fence = await acquire(store, c, "worker-a");
        const s0 = await mustBegin(store, c, fence, `${label}: begin`);
        mustEqual(s0.input, [value], `${label}: beginTurn input`);
        await mustCommit(store, c, commitFor(s0, fence, { assistant: value, toolResults: value, stopReason: "tool_use", answers: false }), `${label}: commit`);
        await mustCommit(store, c, commitFor(s0, fence, { turnIndex: 1, assistant: value }), `${label}: commit`);
        const s2 = await mustBegin(store, c, fence, `${label}: begin m2`);
        mustEqual(s2.input, [value, value, value, value, value], `${label}: the next turn's input`);
        await store.failMessage(c, fence, "m2", value);
        await store.addRecord(c, value);
        mustEqual(await store.log(c), [value, value, value, value], `${label}: log`);
        mustEqual(await store.turnsOf(c, "m1"), [
          { turnIndex: 0, messageId: "m1", assistant: value, toolResults: value, stopReason: "tool_use" },
          { turnIndex: 1, messageId: "m1", assistant: value, stopReason: "end_turn" },
        ], `${label}: turnsOf`);
        mustEqual((await store.message(c, "m2"))?.failure, value, `${label}: failure`);
        mustEqual(await store.records(c), [value, value], `${label}: records`);
        mustEqual((await fixture.raw.messages(c)).map((m) => m.content), [value, value], `${label}: stored content`);
      }
    }),
};

/** Tool turns of LARGE_RESULT_BYTES each: more than a first page of a store that reads pages by size (DynamoDB's 1 MB). */
const LARGE_TURNS = 24;
const LARGE_RESULT_BYTES = 96 * 1024;

export const largeHistoryAllReturned: ConversationCheckSpec = {
  rule: "TURN-7",
  name: `turnsOf and log give back every committed turn however large the history, on every instance: ${LARGE_TURNS} tool turns whose results hold ${LARGE_RESULT_BYTES / 1024} KiB each (over 2 MiB), read by another instance before and after they were committed (when shared), come back all and in order`,
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation("large");
      const content = userText("read every file");
      await store.appendUserMessage(c, { id: "m1", content });
      const other = subject.capabilities.sharedAcrossProcesses ? await fixture.reopen() : undefined;
      // Read first, so that an instance that keeps what it read shows it later.
      if (other !== undefined) {
        mustEqual(await other.turnsOf(c, "m1"), [], "another instance's turnsOf(m1) before any commit");
        mustEqual(await other.log(c), [], "another instance's log before any commit");
      }
      const fence = await acquire(store, c, "worker-a");
      const snapshot = await mustBegin(store, c, fence, "begin m1");
      const expected: StoredTurn[] = [];
      const log: JsonValue[] = [content];
      for (let i = 0; i < LARGE_TURNS; i++) {
        // The index in front, so that a turn cut short or swapped is seen at once.
        const body = `${i}:`.padEnd(LARGE_RESULT_BYTES, String.fromCharCode(97 + (i % 26)));
        const commit = commitFor(snapshot, fence, { turnIndex: i, assistant: toolUse(`toolu_${i}`, { file: i }), toolResults: toolResult(`toolu_${i}`, body), stopReason: "tool_use", answers: false });
        await mustCommit(store, c, commit, `tool turn ${i}`);
        expected.push({ turnIndex: i, messageId: "m1", assistant: commit.assistant, toolResults: commit.toolResults!, stopReason: "tool_use" });
        log.push(commit.assistant, commit.toolResults!);
      }
      const summary = (turns: StoredTurn[]) => turns.map((t) => t.turnIndex);
      const views: Array<[string, ConversationStore]> = [["this instance", store]];
      if (other !== undefined) views.push(["another instance", other]);
      for (const [where, view] of views) {
        const turns = await view.turnsOf(c, "m1");
        mustEqual(summary(turns), summary(expected), `${where}: the turn indexes turnsOf(m1) gives back (a read that stops at a page of bytes, or keeps an earlier read, loses the rest)`);
        must(isDeepStrictEqual(turns, expected), `${where}: turnsOf(m1) must give back every turn exactly as committed`);
        const got = await view.log(c);
        mustEqual(got.length, log.length, `${where}: the number of log entries`);
        must(isDeepStrictEqual(got, log), `${where}: the log must hold every turn exactly as committed, in order`);
      }
    }),
};

// ---------------------------------------------------------------------------------- TURN-14

// ---------------------------------------------------------------------------------- TURN-18

/** Values JSON cannot carry, each where a store would otherwise keep it (TURN-18). */
function notJsonValues(): Array<{ label: string; value: unknown }> {
  const cyclic: Record<string, unknown> = { type: "text" };
  cyclic["self"] = cyclic;
  let deep: unknown = "bottom";
  for (let i = 0; i < 600; i++) deep = [deep];
  return [
    { label: "NaN", value: { type: "n", n: Number.NaN } },
    { label: "Infinity", value: { type: "n", n: Number.NEGATIVE_INFINITY } },
    { label: "a lone surrogate", value: { type: "text", text: "half \ud83d" } },
    { label: "undefined in an array", value: ["a", undefined] },
    { label: "a bigint", value: { type: "n", n: 10n } },
    { label: "a Date", value: { type: "at", at: new Date(0) } },
    { label: "a symbol-keyed member", value: { type: "s", [Symbol("hidden")]: 1 } },
    { label: "a cycle", value: cyclic },
    { label: "nesting 600 deep", value: deep },
  ];
}

export const nonJsonRefused: ConversationCheckSpec = {
  rule: "TURN-18",
  name: "data JSON cannot carry is refused with invalid_store_input by append, commit, failMessage and addRecord alike, and nothing is stored; an undefined member comes back absent and -0 as 0",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      const snapshot = await mustBegin(store, c, fence, "begin m1");
      for (const { label, value } of notJsonValues()) {
        const bad = value as JsonValue;
        await mustRefuseField(store.appendUserMessage(c, { id: "m-bad", content: bad }), "content", `appendUserMessage with ${label}`);
        await mustRefuseField(store.commitTurn(c, commitFor(snapshot, fence, { assistant: bad })), "assistant", `commitTurn with ${label} in assistant`);
        await mustRefuseField(store.commitTurn(c, commitFor(snapshot, fence, { toolResults: bad })), "toolResults", `commitTurn with ${label} in toolResults`);
        await mustRefuseField(store.failMessage(c, fence, "m1", bad), "record", `failMessage with ${label} in its record`);
        await mustRefuseField(store.addRecord(c, bad), "record", `addRecord with ${label}`);
      }
      mustEqual((await fixture.raw.messages(c)).map((m) => [m.id, m.state]), [["m1", "in_progress"]], "stored messages after refused writes");
      mustEqual(await fixture.raw.turns(c), [], "stored turns after refused commits");
      mustEqual(await fixture.raw.records(c), [], "stored records after refused records");
      // An undefined member is absent and -0 is 0, as in JSON text: every store gives back the same value.
      await store.addRecord(c, { kind: "note", absent: undefined, zero: -0, zeros: [-0] } as unknown as JsonValue);
      mustEqual(await store.records(c), [{ kind: "note", zero: 0, zeros: [0] }], "records() after a record with an undefined member and -0");
      await mustCommit(store, c, commitFor(snapshot, fence, { assistant: { role: "assistant", content: [{ type: "text", text: "done", citations: undefined }] } as unknown as JsonValue }), "commit with an undefined member");
      mustEqual(await store.log(c), [userText("pay alice"), { role: "assistant", content: [{ type: "text", text: "done" }] }], "log() after a commit with an undefined member");
    }),
};

export const durabilityDeclared: ConversationCheckSpec = {
  rule: "TURN-14",
  name: "the declared durability agrees with the subject: durable exactly when a fresh instance sees earlier writes",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const caps = fixture.store.capabilities;
      must(caps.durability === "durable" || caps.durability === "volatile", `capabilities.durability must be "durable" or "volatile", got ${show(caps.durability)}`);
      must(caps.clock === "store" || caps.clock === "process", `capabilities.clock must be "store" or "process", got ${show(caps.clock)}`);
      const declaresDurable = caps.durability === "durable";
      must(
        declaresDurable === subject.capabilities.survivesRestart,
        `the store declares ${caps.durability} but the subject says survivesRestart=${subject.capabilities.survivesRestart}: they must agree with the subject`,
      );
      must(
        caps.sharedAcrossProcesses === subject.capabilities.sharedAcrossProcesses,
        `the store declares sharedAcrossProcesses=${caps.sharedAcrossProcesses}, the subject ${subject.capabilities.sharedAcrossProcesses}: they must agree with the subject`,
      );
      // Leases of a store shared by several processes are only exclusive on one clock (TURN-10).
      if (caps.sharedAcrossProcesses) must(caps.clock === "store", `a store shared across processes must measure leases on the store's clock, declares ${show(caps.clock)}`);
    }),
};

/** Builds a conversation with every kind of state: answered, failed, in progress, queued, records, a held lease. */
async function everyKindOfState(store: ConversationStore, c: string): Promise<{ fence: number; snapshot: TurnSnapshot }> {
  await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
  await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
  await store.appendUserMessage(c, { id: "m3", content: userText("pay carol") });
  await store.appendUserMessage(c, { id: "m4", content: userText("pay dave") });
  const fence = await acquire(store, c, "worker-a");
  const s0 = await mustBegin(store, c, fence, "begin m1");
  await mustCommit(store, c, commitFor(s0, fence, { assistant: toolUse("toolu_1", { to: "alice" }), toolResults: toolResult("toolu_1", "paid"), stopReason: "tool_use", answers: false }), "m1 turn 0");
  await mustCommit(store, c, commitFor(s0, fence, { turnIndex: 1 }), "m1 turn 1");
  await mustBegin(store, c, fence, "begin m2");
  await store.failMessage(c, fence, "m2", { failed: "m2", effects: [{ key: "k", effect: "may_have_happened" }] });
  await store.addRecord(c, { superseded: "attempt 2 of m1" });
  const snapshot = await mustBegin(store, c, fence, "begin m3");
  return { fence, snapshot };
}

async function everything(store: ConversationStore, c: string): Promise<unknown> {
  const ids = ["m1", "m2", "m3", "m4"];
  return {
    messages: await Promise.all(ids.map((id) => store.message(c, id))),
    turns: await Promise.all(ids.map((id) => store.turnsOf(c, id))),
    log: await store.log(c),
    records: await store.records(c),
  };
}

export const restartSeesEverything: ConversationCheckSpec = {
  rule: "TURN-14",
  name: "a fresh instance sees every message, turn, binding, record and the held lease; the holder continues on it",
  needs: ["survivesRestart"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      const { fence, snapshot } = await everyKindOfState(fixture.store, c);
      const before = await everything(fixture.store, c);
      const lease = await fixture.raw.lease(c);
      const restarted = await fixture.reopen();
      mustEqual(await everything(restarted, c), before, "what a fresh instance reads");
      mustEqual(await fixture.raw.lease(c), lease, "stored lease after the restart");
      const other = await restarted.acquireLease(c, "worker-b", LEASE_MS);
      mustEqual([other.acquired, other.acquired ? undefined : other.owner], [false, "worker-a"], "the held lease is still held after the restart");
      mustEqual(withoutBound(await mustBegin(restarted, c, fence, "begin on the fresh instance")), withoutBound(snapshot), "the bound m3 on the fresh instance");
      await mustCommit(restarted, c, commitFor(snapshot, fence), "commit on the fresh instance under the old fence");
    }),
};

export const fenceNeverBackwards: ConversationCheckSpec = {
  rule: "TURN-14",
  name: "the fence never goes backwards across restarts, released or expired",
  needs: ["survivesRestart"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      let store = fixture.store;
      let highest = 0;
      for (let i = 0; i < 3; i++) {
        const fence = await acquire(store, c, `worker-${i}`);
        must(fence > highest, `after ${i} restarts the fence ${fence} must be higher than ${highest}`);
        highest = fence;
        if (i % 2 === 0) await store.releaseLease(c, fence);
        else await fixture.raw.expireLease(c);
        store = await fixture.reopen();
      }
      mustEqual((await fixture.raw.lease(c))?.fence, highest, "stored fence");
    }),
};

const LONG_HISTORY = 300;

export const turnsKeptIndexesNotReissued: ConversationCheckSpec = {
  rule: "TURN-14",
  name: `committed turns are kept and no turn index is issued again: after ${LONG_HISTORY} tool turns and an answer, and after the lease was released and granted again, every turn is stored and given back in order, the log holds them all and the next message begins at ${LONG_HISTORY + 1}`,
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation("kept");
      await store.appendUserMessage(c, { id: "m1", content: userText("pay everyone") });
      const a = await acquire(store, c, "worker-a");
      const expected: StoredTurn[] = [];
      const log: JsonValue[] = [userText("pay everyone")];
      for (let i = 0; i <= LONG_HISTORY; i++) {
        const snapshot = await mustBegin(store, c, a, `begin turn ${i}`);
        mustEqual(snapshot.turnIndex, i, `turn ${i}: the turn index (never one issued before)`);
        const commit = i < LONG_HISTORY ? toolTurn(snapshot, a, i) : commitFor(snapshot, a);
        await mustCommit(store, c, commit, `turn ${i} of m1`);
        const turn: StoredTurn = { turnIndex: i, messageId: "m1", assistant: commit.assistant, stopReason: commit.stopReason };
        if (commit.toolResults !== undefined) turn.toolResults = commit.toolResults;
        expected.push(turn);
        log.push(commit.assistant);
        if (commit.toolResults !== undefined) log.push(commit.toolResults);
      }
      // Idle: nobody holds the conversation, then a new grant.
      await store.releaseLease(c, a);
      const b = await acquire(store, c, "worker-b", "acquire after the release");
      await store.appendUserMessage(c, { id: "m2", content: userText("anything else?") });
      const judge = async (view: ConversationStore, fence: number, what: string) => {
        const next = await mustBegin(view, c, fence, `${what}: begin m2`);
        mustEqual([next.message.id, next.turnIndex], ["m2", LONG_HISTORY + 1], `${what}: m2's turn index (after ${LONG_HISTORY + 1} committed turns)`);
        const stored = await fixture.raw.turns(c);
        mustEqual(stored.length, expected.length, `${what}: the number of turns stored`);
        mustEqual(stored, expected, `${what}: the turns stored, in order`);
        mustEqual(await view.turnsOf(c, "m1"), expected, `${what}: turnsOf(m1)`);
        mustEqual(await view.log(c), log, `${what}: the log`);
      };
      await judge(store, b, "after the release and a new grant");
      if (subject.capabilities.survivesRestart) {
        const restarted = await fixture.reopen();
        await fixture.raw.expireLease(c);
        await judge(restarted, await acquire(restarted, c, "worker-c", "acquire on a fresh instance"), "on a fresh instance");
      }
    }),
};

export const corruptIsNotAbsent: ConversationCheckSpec = {
  rule: "TURN-14",
  name: "a damaged stored message raises store_corrupt on message, beginTurn and log; it is never treated as absent",
  needs: ["corruption"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const fence = await acquire(store, c, "worker-a");
      await mustCommit(store, c, commitFor(await mustBegin(store, c, fence, "begin m1"), fence), "answer m1");
      await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      await fixture.raw.corrupt!(c, "m1");
      await fixture.raw.corrupt!(c, "m2");
      await mustRejectWith(store.message(c, "m1"), "store_corrupt", "message() of the damaged m1");
      await mustRejectWith(store.log(c), "store_corrupt", "log() over the damaged m1");
      await mustRejectWith(store.beginTurn(c, fence), "store_corrupt", "beginTurn over the damaged m2");
      await mustRejectWith(store.appendUserMessage(c, { id: "m2", content: userText("pay bob") }), "store_corrupt", "re-send of the damaged m2");
    }),
};

export const unavailableFailsClosed: ConversationCheckSpec = {
  rule: "TURN-14",
  name: "an unreachable store raises store_unavailable from every method (listFailedTurns, listStalledMessages and releaseLeaseGrant too, where declared) and reports nothing as done",
  needs: ["unavailability"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const c = freshConversation();
      const broken = await fixture.raw.disconnected!();
      const calls: Array<[string, () => Promise<unknown>]> = [
        ["appendUserMessage", () => broken.appendUserMessage(c, { id: "m1", content: "hi" })],
        ["message", () => broken.message(c, "m1")],
        ["turnsOf", () => broken.turnsOf(c, "m1")],
        ["log", () => broken.log(c)],
        ["acquireLease", () => broken.acquireLease(c, "worker-a", LEASE_MS)],
        ["renewLease", () => broken.renewLease(c, 1, LEASE_MS)],
        ["releaseLease", () => broken.releaseLease(c, 1)],
        ["beginTurn", () => broken.beginTurn(c, 1)],
        ["commitTurn", () => broken.commitTurn(c, { fence: 1, messageId: "m1", turnIndex: 0, assistant: "a", stopReason: null, answers: true })],
        ["failMessage", () => broken.failMessage(c, 1, "m1", {})],
        ["addRecord", () => broken.addRecord(c, {})],
        ["records", () => broken.records(c)],
      ];
      // The optional methods the subject declares: an operator's listing of an unreachable store
      // must not read as "no failed turns", nor a runner's give-back as done.
      if (subject.capabilities.listFailedTurns) calls.push(["listFailedTurns", () => broken.listFailedTurns!({ conversationId: c })], ["listFailedTurns (all)", () => broken.listFailedTurns!()]);
      if (subject.capabilities.listStalledMessages) calls.push(["listStalledMessages (all)", () => broken.listStalledMessages!()]);
      if (subject.capabilities.leaseGrants) calls.push(["releaseLeaseGrant", () => broken.releaseLeaseGrant!(c, "grant-id-unreachable-0001")]);
      for (const [name, call] of calls) await mustRejectWith(call(), "store_unavailable", `${name} on an unreachable store`);
      mustEqual(await fixture.raw.messages(c), [], "nothing was stored");
      mustEqual(await fixture.raw.records(c), [], "no record was stored");
    }),
};

// ---------------------------------------------------------------------------------- RECORD-4

export const recordsBesideLog: ConversationCheckSpec = {
  rule: "RECORD-4",
  name: "a failed turn's record is kept beside the log (records, the message's failure), never in it; a message not in progress cannot fail",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      const fence = await acquire(store, c, "worker-a");
      const s0 = await mustBegin(store, c, fence, "begin m1");
      const use = toolUse("toolu_1", { to: "alice" });
      const result = toolResult("toolu_1", "paid");
      await mustCommit(store, c, commitFor(s0, fence, { assistant: use, toolResults: result, stopReason: "tool_use", answers: false }), "m1 turn 0");
      const record = { kind: "failed_turn", messageId: "m1", turnIndex: 1, effects: [{ key: "k1", status: "happened" }], note: "RECORD-4 marker" };
      await mustRejectWith(store.failMessage(c, fence, "m2", record), "invalid_store_input", "failMessage of the queued m2");
      await store.failMessage(c, fence, "m1", record);
      const log = await store.log(c);
      mustEqual(log, [userText("pay alice"), use, result], "log after the failure");
      must(!containsValue(log, record, isDeepStrictEqual), "the failed-turn record must never be in the log");
      mustEqual(await store.records(c), [record], "records after the failure");
      mustEqual(await fixture.raw.records(c), [record], "stored records after the failure");
      mustEqual((await store.message(c, "m1"))?.failure, record, "m1's failure");
      await mustRejectWith(store.failMessage(c, fence, "m1", record), "invalid_store_input", "failMessage of the already failed m1");
      const next = await mustBegin(store, c, fence, "begin m2");
      mustEqual(next.input, [...log, userText("pay bob")], "m2's turn sends the log and m2, never the record");
      must(!containsValue(next.input, record, isDeepStrictEqual), "the record must never be in a turn's input");
    }),
};

export const addRecordNeedsNoLease: ConversationCheckSpec = {
  rule: "RECORD-4",
  name: "addRecord needs no lease (the loser of a takeover keeps its record), changes no message and keeps records in order",
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      await store.addRecord(c, { first: "without any lease or message" });
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const old = await acquire(store, c, "worker-a");
      await mustBegin(store, c, old, "begin m1");
      await fixture.raw.expireLease(c);
      await acquire(store, c, "worker-b", "takeover");
      const superseded = { superseded: "worker-a's attempt", effects: [{ key: "k1", status: "happened" }] };
      await store.addRecord(c, superseded);
      await store.addRecord(c, "a plain string record");
      mustEqual(await store.records(c), [{ first: "without any lease or message" }, superseded, "a plain string record"], "records in order");
      mustEqual(await fixture.raw.records(c), await store.records(c), "stored records");
      mustEqual((await store.message(c, "m1"))?.state, "in_progress", "addRecord changes no message");
      mustEqual(await store.log(c), [], "addRecord writes nothing into the log");
    }),
};

/**
 * Past the first page drivers and APIs commonly stop at (100 rows; MongoDB's first batch of 101): a
 * store that returns one page loses the rest. Kept small: a SQL store adds them one statement each.
 */
const MANY_RECORDS = 102;

export const recordsAllReturned: ConversationCheckSpec = {
  rule: "RECORD-4",
  name: `records returns every record kept beside the conversation, in the order kept: ${MANY_RECORDS} records come back all, oldest first (not a first page of them)`,
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const c = freshConversation();
      const kept: JsonValue[] = [];
      for (let i = 0; i < MANY_RECORDS; i++) {
        const record = { kind: "failed_turn", n: i };
        kept.push(record);
        await store.addRecord(c, record);
      }
      const got = await store.records(c);
      must(Array.isArray(got) && got.length === MANY_RECORDS, `records returned ${Array.isArray(got) ? got.length : show(got)} records of the ${MANY_RECORDS} added (a first page only? a record not returned is not kept for the user, RECORD-4)`);
      mustEqual(got, kept, `the ${MANY_RECORDS} records, in the order they were added`);
    }),
};

export const recordKeptWithCommit: ConversationCheckSpec = {
  rule: "TURN-5",
  name: "a commit's record (recordsWithCommit) is kept beside the conversation in the commit's own write, exactly when the turn is appended (a tool-use turn's as an answer's), never in the log; a record JSON cannot carry is refused before anything is stored",
  needs: ["recordsWithCommit"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      mustEqual(store.capabilities.recordsWithCommit, true, "the store's capabilities.recordsWithCommit (the subject declares it)");
      const c = freshConversation();
      await store.appendUserMessage(c, { id: "m1", content: userText("pay alice") });
      const old = await acquire(store, c, "worker-a");
      const first = await mustBegin(store, c, old, "begin by worker-a");
      await fixture.raw.expireLease(c);
      const current = await acquire(store, c, "worker-b", "acquire after expiry");
      const snapshot = await mustBegin(store, c, current, "begin by worker-b");
      const record = { kind: "resumed_turn", messageId: "m1", turnIndex: 0, calls: [{ key: "k1", name: "pay", effect: "happened" }] };
      await mustNotCommit(store, c, commitFor(first, old, { record: { ...record, by: "worker-a" } }), "a commit with a record under the stale fence");
      await mustNotCommit(store, c, commitFor(snapshot, current, { turnIndex: 1, record: { ...record, by: "ahead" } }), "a commit with a record at the wrong turn index");
      await mustRefuseField(store.commitTurn(c, commitFor(snapshot, current, { record: { bad: Number.NaN } as unknown as JsonValue })), "record", "a commit whose record holds NaN");
      mustEqual(await store.records(c), [], "records after commits refused or not made");
      mustEqual(await fixture.raw.turns(c), [], "stored turns after commits refused or not made");
      await mustCommit(store, c, commitFor(snapshot, current, { record }), "the holder's commit with its record");
      mustEqual(await store.records(c), [record], "records after the commit");
      mustEqual(await fixture.raw.records(c), [record], "stored records after the commit");
      mustEqual(await store.log(c), [userText("pay alice"), assistantText(`answer to m1 at 0`)], "the log holds the turn, never the record");
      await store.addRecord(c, "added later");
      mustEqual(await store.records(c), [record, "added later"], "a commit's record is in order with the others");
      // A resumed turn that stops for tool use has its record too (RECORD-8): kept with a commit that does not answer.
      await store.appendUserMessage(c, { id: "m2", content: userText("pay bob") });
      const s2 = await mustBegin(store, c, current, "begin m2");
      const toolRecord = { kind: "resumed_turn", messageId: "m2", turnIndex: 1, calls: [{ key: "k2", name: "pay", effect: "may_have_happened" }] };
      await mustCommit(
        store,
        c,
        commitFor(s2, current, { assistant: toolUse("toolu_2", { to: "bob" }), toolResults: toolResult("toolu_2", "paid"), stopReason: "tool_use", answers: false, record: toolRecord }),
        "a tool-use commit (it does not answer) with its record",
      );
      mustEqual(await store.records(c), [record, "added later", toolRecord], "records after a tool-use commit with a record (kept though the turn does not answer)");
    }),
};

/** Every deterministic conversation-store check, in rule order. */
export const CONVERSATION_CHECK_SPECS: readonly ConversationCheckSpec[] = [
  turnIndexIsCommittedCount,
  appendIsIdempotent,
  resendRecognisedAfterManyMessages,
  resendOfAnsweredChangesNothing,
  concurrentSendsOfOneMessage,
  badIdsRefused,
  idsComparedExactly,
  idsNotMatchedAsPatterns,
  concurrentCommitsOneWins,
  staleFenceCommitRefused,
  wrongTurnIndexRefused,
  notInProgressRefused,
  userMessageEntersWithCommit,
  sameContentEntersTwice,
  turnsOfInOrder,
  ...CALL_KEYS_CHECKS,
  contentRoundTrips,
  largeHistoryAllReturned,
  nonJsonRefused,
  oneAtATimeInArrivalOrder,
  concurrentMessagesOwnSeqs,
  leaseExclusive,
  leaseTakeoverAfterExpiry,
  turnLeaseFenceAcrossDigits,
  expiredLeaseStillHolds,
  fencesRiseAcrossRelease,
  concurrentAcquiresOneWinner,
  renewExtends,
  leaseArgumentsChecked,
  turnLeaseExpiredAtItsEnd,
  leaseOnStoreClock,
  leasesPerConversation,
  ...LEASE_GRANT_CHECKS,
  bindsAtCommittedCount,
  bindingSurvivesTakeover,
  bindingSurvivesRestart,
  toolLoopStaysBound,
  resendReopensFailed,
  newMessageTakesFailedIndex,
  resendAfterOtherBoundStaysFailed,
  reopenedGoesFirst,
  resendRacingBeginTurn,
  ...REOPEN_WINDOW_CHECKS,
  ...BOUND_AT_CHECKS,
  listedReopenableExact,
  ...FAILED_TURNS_CHECKS,
  ...STALLED_MESSAGES_CHECKS,
  resumedWhenEarlierGrantBegan,
  resumedSurvivesRestart,
  durabilityDeclared,
  restartSeesEverything,
  fenceNeverBackwards,
  turnsKeptIndexesNotReissued,
  corruptIsNotAbsent,
  unavailableFailsClosed,
  ...SILENT_CONVERSATION_STORE_CHECKS,
  recordsBesideLog,
  addRecordNeedsNoLease,
  recordsAllReturned,
  recordKeptWithCommit,
];
