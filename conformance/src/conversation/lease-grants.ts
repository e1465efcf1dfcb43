/*
 * TURN-10's lease grant ids (only when the subject declares `leaseGrants`): an acquireLease whose
 * reply was lost is sent again with its grant id, and the store answers a copy that meets its own
 * live grant with that grant. Every other copy takes nothing: one landing after the grant is over
 * (released, given back by its grant id, expired), after another holder took the lease, or under
 * another grant id, even from the same owner string.
 */
import { LEASE_GRANT_ID_PATTERN, newLeaseGrantId, type ConversationStore, type LeaseResult } from "@dispatch-once/core";
import { ConformanceFailure, codeOf, must, mustEqual, mustRejectWith, show } from "../failure.js";
import { LEASE_MS, freshConversation, mustAcquire, racers, withConversationFixture } from "./support.js";
import type { ConversationStoreFixture, RawLease } from "./types.js";
import type { ConversationCheckSpec } from "./checks.js";

/** The store's releaseLeaseGrant, which a subject declaring `leaseGrants` must have, with the flag declared. */
function grantsOf(store: ConversationStore): (conversationId: string, grantId: string) => Promise<void> {
  must(store.capabilities?.supports?.leaseGrants === true, `the subject declares leaseGrants, but the store's capabilities.supports.leaseGrants is ${show(store.capabilities?.supports?.leaseGrants)}`);
  must(typeof store.releaseLeaseGrant === "function", "the subject declares leaseGrants, but the store has no releaseLeaseGrant method");
  return (conversationId, grantId) => store.releaseLeaseGrant!(conversationId, grantId);
}

function grant(store: ConversationStore, conversationId: string, owner: string, grantId: string, leaseMs = LEASE_MS): Promise<LeaseResult> {
  return store.acquireLease(conversationId, owner, leaseMs, grantId);
}

async function leaseOf(fixture: ConversationStoreFixture, conversationId: string): Promise<Pick<RawLease, "fence" | "owner" | "expiresAt"> | undefined> {
  const raw = await fixture.raw.lease(conversationId);
  return raw && { fence: raw.fence, owner: raw.owner, expiresAt: raw.expiresAt };
}

/** An acquire that must take nothing: not acquired (held by `holder`), or refused as a grant that is over. */
async function mustTakeNothing(promise: Promise<LeaseResult>, holder: { owner: string; leaseExpiresAt: number } | undefined, what: string): Promise<void> {
  let result: LeaseResult;
  try {
    result = await promise;
  } catch (error) {
    if (codeOf(error) === "conversation_lease_lost") return;
    throw new ConformanceFailure(`${what}: expected it to take nothing (not acquired, or conversation_lease_lost), got ${show(error)}`);
  }
  if (result.acquired) throw new ConformanceFailure(`${what}: must take nothing, but it was acquired with fence ${result.fence} (a second grant, or another holder's)`);
  if (holder !== undefined) mustEqual(result, { acquired: false, ...holder }, `${what}: not acquired, naming the holder`);
}

export const grantResentIsSameGrant: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "an acquire sent again with the grant id of the live grant (its reply was lost) is that same grant, from any instance: acquired with the same fence, the lease restarted from now, never a second grant; once that lease expired it is over: conversation_lease_lost, nothing changes",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      grantsOf(store);
      const c = freshConversation();
      const g = newLeaseGrantId();
      const first = mustAcquire(await grant(store, c, "worker-a", g, 60_000), "the first acquire with grant id g (60 s)");
      for (const [i, instance] of (await racers(subject, fixture, 2)).entries()) {
        const again = mustAcquire(await grant(instance, c, "worker-a", g, 3 * 60_000), `the acquire sent again with g${i > 0 ? " from another instance" : ""} (180 s)`);
        mustEqual(again.fence, first.fence, "the re-sent acquire's fence: the same grant's");
        must(again.leaseExpiresAt > first.leaseExpiresAt, `the re-sent acquire restarts the lease from now: must end after ${first.leaseExpiresAt}, got ${again.leaseExpiresAt}`);
        mustEqual(await leaseOf(fixture, c), { fence: first.fence, owner: "worker-a", expiresAt: again.leaseExpiresAt }, "the stored lease after the re-send: one grant, the expiry returned");
      }
      // The fence holds the lease: the runner works under it.
      const renewed = await store.renewLease(c, first.fence, LEASE_MS);
      mustEqual((await store.acquireLease(c, "worker-b", LEASE_MS)).acquired, false, "an acquire without a grant id while g's lease is live");
      await fixture.raw.expireLease(c);
      const expired = await leaseOf(fixture, c);
      must(expired !== undefined && expired.expiresAt !== undefined && expired.expiresAt < renewed.leaseExpiresAt, "the kit expired the lease");
      await mustRejectWith(grant(store, c, "worker-a", g), "conversation_lease_lost", "g sent again once its lease expired (nobody took it)");
      mustEqual(await leaseOf(fixture, c), expired, "the stored lease after the refused copy: unchanged");
      // An expired lease nobody took is still its holder's (by fence), and the next grant is an ordinary one.
      await store.renewLease(c, first.fence, LEASE_MS);
    }),
};

export const grantOtherIdHeld: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "another grant id, or none, meets a live grant as held, even from the same owner string: not acquired, the holder named, nothing stored changes",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      grantsOf(store);
      const c = freshConversation();
      const first = mustAcquire(await grant(store, c, "shared-owner", newLeaseGrantId()), "an acquire by shared-owner with grant id g1");
      const before = await leaseOf(fixture, c);
      for (const [what, attempt] of [
        ["grant id g2 from the same owner string", () => grant(store, c, "shared-owner", newLeaseGrantId())],
        ["no grant id from the same owner string", () => store.acquireLease(c, "shared-owner", LEASE_MS)],
        ["grant id g3 from another owner", () => grant(store, c, "worker-b", newLeaseGrantId())],
      ] as const) {
        mustEqual(await attempt(), { acquired: false, owner: "shared-owner", leaseExpiresAt: first.leaseExpiresAt }, `an acquire with ${what} while g1 is live`);
        mustEqual(await leaseOf(fixture, c), before, `the stored lease after an acquire with ${what}`);
      }
    }),
};

export const grantResentAfterTakeoverRefused: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "a grant id sent again after its lease expired and another holder took it (with a grant id of its own or with none) takes nothing: never the new holder's fence, nothing stored changes",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      grantsOf(store);
      const c = freshConversation();
      const g1 = newLeaseGrantId();
      const g2 = newLeaseGrantId();
      const f1 = mustAcquire(await grant(store, c, "worker-a", g1), "worker-a's grant g1").fence;
      await fixture.raw.expireLease(c);
      const taken = mustAcquire(await grant(store, c, "worker-b", g2), "worker-b's grant g2 after g1 expired");
      must(taken.fence > f1, `the takeover's fence ${taken.fence} must be higher than ${f1}`);
      let before = await leaseOf(fixture, c);
      await mustTakeNothing(grant(store, c, "worker-a", g1), { owner: "worker-b", leaseExpiresAt: taken.leaseExpiresAt }, "g1 sent again while worker-b holds the lease under g2");
      mustEqual(await leaseOf(fixture, c), before, "the stored lease after g1's late copy");
      // A holder that takes the lease without a grant id (a runner of an earlier version): g2's copy is not its grant.
      await fixture.raw.expireLease(c);
      const legacy = mustAcquire(await store.acquireLease(c, "worker-c", LEASE_MS), "worker-c's grant without a grant id after g2 expired");
      before = await leaseOf(fixture, c);
      for (const [name, g] of [["g2", g2], ["g1", g1]] as const) {
        await mustTakeNothing(grant(store, c, "worker-b", g), { owner: "worker-c", leaseExpiresAt: legacy.leaseExpiresAt }, `${name} sent again while worker-c holds the lease without a grant id`);
        mustEqual(await leaseOf(fixture, c), before, `the stored lease after ${name}'s late copy`);
      }
      await store.renewLease(c, legacy.fence, LEASE_MS);
    }),
};

export const grantReleasedByGrantId: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "releaseLeaseGrant gives back exactly the grant its grant id made while it holds the lease, live or expired (never another grant's lease, idempotent); a copy of a released grant's acquire (by grant id or by fence) is refused with conversation_lease_lost and changes nothing",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const release = grantsOf(store);
      const c = freshConversation();
      const g1 = newLeaseGrantId();
      const f1 = mustAcquire(await grant(store, c, "worker-a", g1), "worker-a's grant g1");
      await release(c, newLeaseGrantId());
      mustEqual(await leaseOf(fixture, c), { fence: f1.fence, owner: "worker-a", expiresAt: f1.leaseExpiresAt }, "the stored lease after releaseLeaseGrant with another grant id: still g1's");
      await release(c, g1);
      mustEqual((await leaseOf(fixture, c))?.owner, undefined, "the stored lease after releaseLeaseGrant(g1): nobody holds it");
      await release(c, g1);
      const free = await leaseOf(fixture, c);
      mustEqual(free?.fence, f1.fence, "the stored fence after the release: kept");
      const lost = await mustRejectWith(grant(store, c, "worker-a", g1), "conversation_lease_lost", "g1's acquire sent again after releaseLeaseGrant(g1)");
      mustEqual((lost as { fence?: unknown }).fence, f1.fence, "the refused copy names g1's fence");
      mustEqual(await leaseOf(fixture, c), free, "the stored lease after g1's late copy: unchanged, nobody holds it");
      // Released by fence: also over.
      const g2 = newLeaseGrantId();
      const f2 = mustAcquire(await grant(store, c, "worker-b", g2), "worker-b's grant g2").fence;
      must(f2 > f1.fence, `g2's fence ${f2} must be higher than ${f1.fence}`);
      await store.releaseLease(c, f2);
      await mustRejectWith(grant(store, c, "worker-b", g2), "conversation_lease_lost", "g2's acquire sent again after releaseLease with its fence");
      // Expired, nobody took it: still g3's to give back. An old grant id never gives back a later holder's lease.
      const g3 = newLeaseGrantId();
      const f3 = mustAcquire(await grant(store, c, "worker-c", g3), "worker-c's grant g3").fence;
      await release(c, g1);
      await release(c, g2);
      mustEqual((await leaseOf(fixture, c))?.owner, "worker-c", "the stored holder after releaseLeaseGrant with g1 and g2 (grants that are over)");
      await fixture.raw.expireLease(c);
      await release(c, g3);
      mustEqual((await leaseOf(fixture, c))?.owner, undefined, "the stored lease after releaseLeaseGrant(g3) of an expired grant nobody took");
      await mustRejectWith(store.renewLease(c, f3, LEASE_MS), "conversation_lease_lost", "g3's fence after releaseLeaseGrant(g3)");
      const g4 = newLeaseGrantId();
      const f4 = mustAcquire(await grant(store, c, "worker-d", g4), "worker-d's grant g4").fence;
      must(f4 > f3, `g4's fence ${f4} must be higher than ${f3}`);
    }),
};

export const grantEarlierRefused: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "a copy of an earlier grant's acquire (a later grant of the conversation was made since, with a grant id or without) is refused with conversation_lease_lost naming that grant's fence, from any instance, and changes nothing, whether the lease is free, expired or held",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      grantsOf(store);
      const c = freshConversation();
      const [a, b] = await racers(subject, fixture, 2);
      const g1 = newLeaseGrantId();
      const g2 = newLeaseGrantId();
      const f1 = mustAcquire(await grant(store, c, "worker-a", g1), "worker-a's grant g1").fence;
      await store.releaseLease(c, f1);
      const f2 = mustAcquire(await grant(store, c, "worker-b", g2), "worker-b's grant g2 after g1 was released").fence;
      await store.releaseLease(c, f2);
      // The lease is free; g1 is no longer the latest grant. A copy of it must not take the lease
      // and hold the conversation for a whole lease with nobody working under it.
      const refused = async (instance: ConversationStore, g: string, fence: number, what: string) => {
        const before = await leaseOf(fixture, c);
        const lost = await mustRejectWith(grant(instance, c, "worker-a", g), "conversation_lease_lost", what);
        mustEqual((lost as { fence?: unknown }).fence, fence, `${what}: the refusal names that grant's fence`);
        mustEqual(await leaseOf(fixture, c), before, `the stored lease after ${what}: unchanged`);
      };
      for (const [i, instance] of [a!, b ?? a!].entries()) await refused(instance, g1, f1, `g1's late copy while the lease is free (instance ${i})`);
      await refused(store, g2, f2, "g2's late copy once released (the latest grant)");
      // Expired, nobody took it: g3's fence still holds it, and no earlier copy takes it.
      const g3 = newLeaseGrantId();
      const f3 = mustAcquire(await grant(store, c, "worker-c", g3), "worker-c's grant g3").fence;
      await fixture.raw.expireLease(c);
      for (const [name, g, f] of [["g1", g1, f1], ["g2", g2, f2]] as const) await refused(store, g, f, `${name}'s late copy while g3's lease is expired and not taken`);
      await store.renewLease(c, f3, LEASE_MS);
      // Held by a grant made without a grant id (a runner of an earlier version): every earlier grant id is refused.
      await store.releaseLease(c, f3);
      const legacy = mustAcquire(await store.acquireLease(c, "worker-d", LEASE_MS), "worker-d's grant without a grant id");
      for (const [name, g, f] of [["g1", g1, f1], ["g2", g2, f2], ["g3", g3, f3]] as const) await refused(store, g, f, `${name}'s late copy while worker-d holds the lease without a grant id`);
      await store.renewLease(c, legacy.fence, LEASE_MS);
      await store.releaseLease(c, legacy.fence);
      const g4 = newLeaseGrantId();
      const f4 = mustAcquire(await grant(store, c, "worker-e", g4), "worker-e's grant g4 after the refused copies").fence;
      must(f4 === legacy.fence + 1, `g4's fence must be the next one, ${legacy.fence + 1}, got ${f4}: a refused copy took a fence`);
    }),
};

export const grantGivenBackRefused: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "a grant id given back before any grant carried it (its acquire had not applied when its runner gave up) is kept as given back: a later copy of that acquire is refused with conversation_lease_lost naming fence 0, from any instance, whether the lease is free or held, and changes nothing",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const release = grantsOf(store);
      const [a, b] = await racers(subject, fixture, 2);
      const c = freshConversation();
      const g0 = newLeaseGrantId();
      // The runner gave up on g0: every copy of its acquire was still held in the network.
      await release(c, g0);
      const refused = async (instance: ConversationStore, what: string) => {
        const before = await leaseOf(fixture, c);
        const lost = await mustRejectWith(grant(instance, c, "worker-a", g0), "conversation_lease_lost", what);
        mustEqual((lost as { fence?: unknown }).fence, 0, `${what}: the refusal names fence 0 (no grant was made under it)`);
        mustEqual(await leaseOf(fixture, c), before, `the stored lease after ${what}: unchanged`);
      };
      // Taking the free lease, the copy would hold the conversation for a whole lease with nobody working under it.
      for (const [i, instance] of [a!, b ?? a!].entries()) await refused(instance, `g0's late copy while the lease is free (instance ${i})`);
      const g1 = newLeaseGrantId();
      const f1 = mustAcquire(await grant(store, c, "worker-b", g1), "worker-b's grant g1 after g0 was given back").fence;
      await refused(store, "g0's late copy while worker-b holds the lease");
      // Given back again (an owed give-back sent at the next acquisition): nothing changes.
      await release(c, g0);
      mustEqual((await leaseOf(fixture, c))?.owner, "worker-b", "the stored holder after g0 was given back again");
      await store.releaseLease(c, f1);
      await refused(store, "g0's late copy once g1 was released");
      const f2 = mustAcquire(await grant(store, c, "worker-c", newLeaseGrantId()), "worker-c's grant").fence;
      must(f2 === f1 + 1, `the next grant's fence must be ${f1 + 1}, got ${f2}: a refused copy took a fence`);
    }),
};

export const grantIdChecked: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "a grant id not of LEASE_GRANT_ID_PATTERN's form is refused by acquireLease and releaseLeaseGrant with invalid_store_input naming grantId, before anything is stored; 16 and 64 characters are taken",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const release = grantsOf(store);
      const c = freshConversation();
      const bad: unknown[] = ["", "x".repeat(15), "x".repeat(65), "has space 01234567", "dot.in.it.0123456789", "ünïcode-0123456789", 42, null, {}];
      for (const id of bad) {
        const error = await mustRejectWith(store.acquireLease(c, "worker-a", LEASE_MS, id as string), "invalid_store_input", `acquireLease with grant id ${show(id)}`);
        mustEqual((error as { field?: unknown }).field, "grantId", `the refused field of acquireLease with grant id ${show(id)}`);
      }
      mustEqual((await fixture.raw.lease(c))?.owner, undefined, "the stored lease after refused acquires: nobody holds it");
      const shortest = "a".repeat(16);
      const f = mustAcquire(await grant(store, c, "worker-a", shortest), "an acquire with a 16-character grant id");
      for (const id of [...bad, undefined]) {
        const error = await mustRejectWith(release(c, id as string), "invalid_store_input", `releaseLeaseGrant with grant id ${show(id)}`);
        mustEqual((error as { field?: unknown }).field, "grantId", `the refused field of releaseLeaseGrant with grant id ${show(id)}`);
      }
      mustEqual((await fixture.raw.lease(c))?.owner, "worker-a", "the stored lease after refused releases: still held");
      mustEqual(mustAcquire(await grant(store, c, "worker-a", shortest), "the 16-character grant id sent again").fence, f.fence, "the same grant");
      await release(c, shortest);
      const longest = `${"Z".repeat(62)}_-`;
      must(LEASE_GRANT_ID_PATTERN.test(longest), "the kit's longest grant id matches the pattern");
      mustAcquire(await grant(store, c, "worker-b", longest), "an acquire with a 64-character grant id");
    }),
};

/** A grant id of exactly `length` characters of LEASE_GRANT_ID_PATTERN's alphabet, with letters in both cases. */
function grantIdOfLength(length: number): string {
  return `Gid${newLeaseGrantId().replace(/[^A-Za-z0-9_-]/g, "")}`.padEnd(length, "xY").slice(0, length);
}

function swapCase(text: string): string {
  return [...text].map((ch) => (ch === ch.toLowerCase() ? ch.toUpperCase() : ch.toLowerCase())).join("");
}

export const grantIdsComparedExactly: ConversationCheckSpec = {
  rule: "TURN-10",
  name: "grant ids are compared exactly: a grant id that differs from the live grant's only in ASCII case, or in one character past the 32nd (up to 64), is another grant: its acquire meets the lease as held and its releaseLeaseGrant frees nothing",
  needs: ["leaseGrants"],
  run: (subject) =>
    withConversationFixture(subject, async (fixture) => {
      const { store } = fixture;
      const release = grantsOf(store);
      const mixed = grantIdOfLength(40);
      const longest = grantIdOfLength(63);
      const at33 = grantIdOfLength(40);
      // What a case-insensitive collation, or a column narrower than 64 characters, takes for one id.
      const pairs: Array<[string, string, string]> = [
        ["grant ids that differ only in ASCII case", mixed, swapCase(mixed)],
        ["two 64-character grant ids that differ only in their last character", `${longest}a`, `${longest}b`],
        ["two 40-character grant ids that differ only in their 33rd character", `${at33.slice(0, 32)}a${at33.slice(33)}`, `${at33.slice(0, 32)}b${at33.slice(33)}`],
      ];
      for (const [label, first, second] of pairs) {
        const c = freshConversation();
        const held = mustAcquire(await grant(store, c, "worker-a", first), `${label}: the acquire with ${first}`);
        const before = await leaseOf(fixture, c);
        mustEqual(await grant(store, c, "worker-b", second), { acquired: false, owner: "worker-a", leaseExpiresAt: held.leaseExpiresAt }, `${label}: an acquire by worker-b with ${second} while ${first} is live (another grant, not that one)`);
        await release(c, second);
        mustEqual(await leaseOf(fixture, c), before, `${label}: the stored lease after releaseLeaseGrant(${second}): still ${first}'s`);
        await release(c, first);
      }
    }),
};

export const LEASE_GRANT_CHECKS: readonly ConversationCheckSpec[] = [grantResentIsSameGrant, grantOtherIdHeld, grantResentAfterTakeoverRefused, grantReleasedByGrantId, grantEarlierRefused, grantGivenBackRefused, grantIdChecked, grantIdsComparedExactly];
