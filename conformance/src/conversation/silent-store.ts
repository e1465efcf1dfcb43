/**
 * TURN-21 against a store that stops answering: every method settles within the bound the store
 * documents, "whatever its storage does (paused, partitioned, refusing, slow)", and past it
 * rejects with store_unavailable and reports nothing as done. TURN-14's unreachable-store check
 * (raw.disconnected) cannot see a store without a bound of its own: every driver reports a refused
 * connection at once. Here the kit's SilenceProxy (the ledger level's, one for both levels) sits
 * between an instance and the storage and goes silent: bytes are accepted, nothing answers, on
 * pooled connections and on new ones.
 *
 * Each check opens one silent window and starts every method the store offers in it at once, each
 * on a conversation of its own, so a conforming subject spends about one bound there; then, still
 * silent, the instance's close(), which TURN-21 bounds as it bounds every method (it may resolve:
 * dropping connections needs no answer), on its own so that it cannot end the others' waits. After heal,
 * what is stored must be what it was, or the method's own write applied whole and late (TURN-21
 * allows the storage to apply a write the store stopped waiting for): never more.
 */
import { isDeepStrictEqual } from "node:util";
import type { ConversationStore, JsonValue } from "@dispatch-once/core";
import { must, show } from "../failure.js";
import { checkedOperationBound, runSilentCheck, type SilentOperation, type SilentRule } from "../silent/window.js";
import type { ConversationCheckSpec } from "./checks.js";
import { LEASE_MS, acquire, assistantText, commitFor, freshConversation, mustBegin, userText } from "./support.js";
import type { ConversationStoreFixture, ConversationStoreSubject } from "./types.js";

const RULE: SilentRule = { rule: "TURN-21", code: "store_unavailable", operations: "methods" };
const OWNER = "owner-a";
const SILENCED_OWNER = "owner-silenced";
const SILENCED_RECORD: JsonValue = { kind: "silenced", late: true };

/** The subject's declared bound (validated when the checks are built; checked again for a direct caller). */
export function declaredConversationBound(subject: ConversationStoreSubject): number {
  return checkedOperationBound(subject.limits?.operationBoundMs, RULE.rule);
}

type SilentMethod = SilentOperation<ConversationStore, ConversationStoreFixture>;

/** A message appended, its lease held and its turn begun through `store`: the state a runner's end-of-turn writes start from. */
async function begun(store: ConversationStore, label: string): Promise<{ conversationId: string; fence: number; messageId: string; snapshot: Awaited<ReturnType<typeof mustBegin>> }> {
  const conversationId = freshConversation(label);
  const messageId = `m-${label}`;
  await store.appendUserMessage(conversationId, { id: messageId, content: userText(`pay for ${label}`) });
  const fence = await acquire(store, conversationId, OWNER);
  const snapshot = await mustBegin(store, conversationId, fence, `before the silence, beginTurn of ${conversationId}`);
  return { conversationId, fence, messageId, snapshot };
}

/** One conversation per method, made through `store` before the silence, so that none depends on another's outcome. */
async function prepare(store: ConversationStore): Promise<SilentMethod[]> {
  const ops: SilentMethod[] = [];

  // A conversation the reads read: one answered message, one record.
  const read = await begun(store, "read");
  await store.commitTurn(read.conversationId, commitFor(read.snapshot, read.fence));
  await store.addRecord(read.conversationId, { kind: "before the silence" });
  await store.releaseLease(read.conversationId, read.fence);
  ops.push({ name: "message", start: (s) => s.message(read.conversationId, read.messageId) });
  ops.push({ name: "turnsOf", start: (s) => s.turnsOf(read.conversationId, read.messageId) });
  ops.push({ name: "log", start: (s) => s.log(read.conversationId) });
  ops.push({ name: "records", start: (s) => s.records(read.conversationId) });
  if (typeof store.listFailedTurns === "function") ops.push({ name: "listFailedTurns", start: (s) => s.listFailedTurns!({ limit: 10 }) });
  if (typeof store.listStalledMessages === "function") ops.push({ name: "listStalledMessages", start: (s) => s.listStalledMessages!({ limit: 10 }) });

  const appendTo = freshConversation("append");
  const appended = userText("silenced append");
  ops.push({
    name: "appendUserMessage",
    start: (s) => s.appendUserMessage(appendTo, { id: "m-silenced", content: appended }),
    async afterHeal(fixture) {
      const messages = await fixture.raw.messages(appendTo);
      const late = messages.length === 1 && messages[0]!.id === "m-silenced" && messages[0]!.state === "queued" && isDeepStrictEqual(messages[0]!.content, appended);
      must(messages.length === 0 || late, `after heal, appendUserMessage that rejected left ${show(messages)} in ${appendTo}: only nothing, or its own message queued, may be there`);
    },
  });

  const acquireOf = freshConversation("acquire");
  await store.appendUserMessage(acquireOf, { id: "m-acquire", content: userText("waiting") });
  ops.push({
    name: "acquireLease",
    start: (s) => s.acquireLease(acquireOf, SILENCED_OWNER, LEASE_MS),
    async afterHeal(fixture) {
      const lease = await fixture.raw.lease(acquireOf);
      must(lease === undefined || lease.owner === undefined || lease.owner === SILENCED_OWNER, `after heal, acquireLease that rejected left the lease ${show(lease)} of ${acquireOf}: only no holder, or its own grant applied late, may be there`);
    },
  });

  const held = async (label: string) => {
    const conversationId = freshConversation(label);
    return { conversationId, fence: await acquire(store, conversationId, OWNER) };
  };
  const renewed = await held("renew");
  ops.push({
    name: "renewLease",
    start: (s) => s.renewLease(renewed.conversationId, renewed.fence, LEASE_MS),
    async afterHeal(fixture) {
      const lease = await fixture.raw.lease(renewed.conversationId);
      must(lease?.owner === OWNER && lease.fence === renewed.fence, `after heal, renewLease that rejected left the lease ${show(lease)}: the lease under fence ${renewed.fence} held by ${OWNER} must be there`);
    },
  });
  const released = await held("release");
  ops.push({
    name: "releaseLease",
    start: (s) => s.releaseLease(released.conversationId, released.fence),
    async afterHeal(fixture) {
      const lease = await fixture.raw.lease(released.conversationId);
      must(lease?.fence === released.fence && (lease.owner === OWNER || lease.owner === undefined), `after heal, releaseLease that rejected left the lease ${show(lease)}: only the lease under fence ${released.fence}, held or given back late, may be there`);
    },
  });
  if (typeof store.releaseLeaseGrant === "function" && store.capabilities?.supports?.leaseGrants === true) {
    const conversationId = freshConversation("grant");
    const grant = await store.acquireLease(conversationId, OWNER, LEASE_MS, "grant-silenced-0000001");
    must(grant.acquired, `before the silence, acquireLease of ${conversationId} with a grant id was refused`);
    ops.push({
      name: "releaseLeaseGrant",
      start: (s) => s.releaseLeaseGrant!(conversationId, "grant-silenced-0000001"),
      async afterHeal(fixture) {
        const lease = await fixture.raw.lease(conversationId);
        must(lease?.fence === grant.fence && (lease.owner === OWNER || lease.owner === undefined), `after heal, releaseLeaseGrant that rejected left the lease ${show(lease)}: only the grant under fence ${grant.fence}, held or given back late, may be there`);
      },
    });
  }

  const bindOf = freshConversation("begin");
  await store.appendUserMessage(bindOf, { id: "m-begin", content: userText("to bind") });
  const bindFence = await acquire(store, bindOf, OWNER);
  ops.push({
    name: "beginTurn",
    start: (s) => s.beginTurn(bindOf, bindFence),
    async afterHeal(fixture) {
      const [m] = await fixture.raw.messages(bindOf);
      must(m?.state === "queued" || (m?.state === "in_progress" && m.turnIndex === 0), `after heal, beginTurn that rejected left ${show(m)}: only the message queued, or bound at turn 0 late, may be there`);
    },
  });

  const commit = await begun(store, "commit");
  const committed = commitFor(commit.snapshot, commit.fence, { assistant: assistantText("silenced commit") });
  ops.push({
    name: "commitTurn",
    start: (s) => s.commitTurn(commit.conversationId, committed),
    async afterHeal(fixture) {
      const [m] = await fixture.raw.messages(commit.conversationId);
      const turns = await fixture.raw.turns(commit.conversationId);
      const untouched = m?.state === "in_progress" && turns.length === 0;
      const late = m?.state === "answered" && turns.length === 1 && isDeepStrictEqual(turns[0]!.assistant, committed.assistant);
      must(untouched || late, `after heal, commitTurn that rejected left the message ${show(m)} and turns ${show(turns)}: only the message in progress with no turn, or the commit applied whole and late, may be there`);
    },
  });

  const fail = await begun(store, "fail");
  ops.push({
    name: "failMessage",
    start: (s) => s.failMessage(fail.conversationId, fail.fence, fail.messageId, SILENCED_RECORD),
    async afterHeal(fixture) {
      const [m] = await fixture.raw.messages(fail.conversationId);
      const records = await fixture.raw.records(fail.conversationId);
      const untouched = m?.state === "in_progress" && records.length === 0;
      const late = m?.state === "failed" && records.length === 1 && isDeepStrictEqual(records[0], SILENCED_RECORD);
      must(untouched || late, `after heal, failMessage that rejected left the message ${show(m)} and records ${show(records)}: only the message in progress with no record, or the failure and its record applied together and late (RECORD-4), may be there`);
    },
  });

  const recordTo = freshConversation("record");
  await store.appendUserMessage(recordTo, { id: "m-record", content: userText("recorded") });
  ops.push({
    name: "addRecord",
    start: (s) => s.addRecord(recordTo, SILENCED_RECORD),
    async afterHeal(fixture) {
      const records = await fixture.raw.records(recordTo);
      must(records.length === 0 || (records.length === 1 && isDeepStrictEqual(records[0], SILENCED_RECORD)), `after heal, addRecord that rejected left records ${show(records)} in ${recordTo}: only none, or its own record applied late, may be there`);
    },
  });
  return ops;
}

/** One of the two checks on `subject` (the window's shape: runSilentCheck). */
function silentCheck(subject: ConversationStoreSubject, when: "after" | "before"): Promise<void> {
  return runSilentCheck<ConversationStore, ConversationStoreFixture>({ rule: RULE, bound: declaredConversationBound(subject), when, create: () => subject.create(), primary: (f) => f.store, prepare });
}

export const silentConversationStoreAfterConnecting: ConversationCheckSpec = {
  rule: "TURN-21",
  name: "with the storage silent after the instance's first calls (pooled connections open, nothing answers), every method rejects with store_unavailable within the declared bound, then close (on its own) resolves or rejects with store_unavailable within it too, and after heal nothing is stored but what was, or a method's own write applied whole and late",
  needs: ["silentStore"],
  run: (subject) => silentCheck(subject, "after"),
};

export const silentConversationStoreBeforeConnecting: ConversationCheckSpec = {
  rule: "TURN-21",
  name: "with the storage silent before the instance's first connection (connecting never completes), every method rejects with store_unavailable within the declared bound, then close (on its own) resolves or rejects with store_unavailable within it too, and after heal nothing is stored but what was, or a method's own write applied whole and late",
  needs: ["silentStore"],
  run: (subject) => silentCheck(subject, "before"),
};

/** Both checks, in order. */
export const SILENT_CONVERSATION_STORE_CHECKS: readonly ConversationCheckSpec[] = [silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting];
