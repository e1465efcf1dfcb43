// TURN-10's lease grant ids on the memory store: an acquire whose reply was lost, sent again with
// its grant id, is the same grant; every late copy of it (after a release, after expiry, after
// another holder took the lease) takes nothing. And the one check every store runs on the id.
import { describe, expect, it } from "vitest";
import { checkLeaseGrantId } from "../src/internal/index.js";
import { LEASE_GRANT_ID_PATTERN, LEASE_GRANT_RETENTION_MS, MemoryConversationStore, isDispatchOnceError, newLeaseGrantId } from "../src/index.js";

const G1 = "grant-one-0123456789";
const G2 = "grant-two-0123456789";
const G3 = "grant-three-012345678";

function store() {
  let now = 1_000_000;
  const s = new MemoryConversationStore({ now: () => now });
  return { s, advance: (ms: number) => (now += ms) };
}

async function refusal(run: () => Promise<unknown>): Promise<{ code: string; field?: unknown; fence?: unknown }> {
  try {
    await run();
  } catch (error) {
    if (!isDispatchOnceError(error)) throw error;
    const { field, fence } = error as { field?: unknown; fence?: unknown };
    return { code: error.code, ...(field !== undefined ? { field } : {}), ...(fence !== undefined ? { fence } : {}) };
  }
  throw new Error("expected a refusal, but it returned");
}

describe("checkLeaseGrantId", () => {
  it("takes LEASE_GRANT_ID_PATTERN, and undefined only where the id is optional", () => {
    expect(checkLeaseGrantId(G1)).toBe(G1);
    expect(checkLeaseGrantId(undefined)).toBeUndefined();
    expect(LEASE_GRANT_ID_PATTERN.test(newLeaseGrantId())).toBe(true);
    expect(newLeaseGrantId()).not.toBe(newLeaseGrantId());
  });

  it.each([[""], ["short"], ["x".repeat(65)], ["has space 0123456789"], ["ünïcode-0123456789"], [42], [null], [{}]])("refuses %j with invalid_store_input naming grantId", async (bad) => {
    expect(await refusal(async () => checkLeaseGrantId(bad))).toEqual({ code: "invalid_store_input", field: "grantId" });
    expect(await refusal(async () => checkLeaseGrantId(bad, { required: true }))).toEqual({ code: "invalid_store_input", field: "grantId" });
  });

  it("refuses a missing id where it is required (releaseLeaseGrant)", async () => {
    expect(await refusal(async () => checkLeaseGrantId(undefined, { required: true }))).toEqual({ code: "invalid_store_input", field: "grantId" });
  });
});

describe("MemoryConversationStore lease grants (TURN-10)", () => {
  it("declares supports.leaseGrants", () => {
    expect(new MemoryConversationStore().capabilities.supports?.leaseGrants).toBe(true);
  });

  it("an acquire sent again with its grant id is the same grant: same fence, the lease restarted", async () => {
    const { s, advance } = store();
    const first = await s.acquireLease("c", "w", 1_000, G1);
    expect(first).toMatchObject({ acquired: true, fence: 1 });
    advance(600);
    const again = await s.acquireLease("c", "w", 1_000, G1);
    expect(again).toEqual({ acquired: true, fence: 1, leaseExpiresAt: 1_000_000 + 600 + 1_000 });
    // The fence still holds the lease.
    await expect(s.renewLease("c", 1, 1_000)).resolves.toBeDefined();
  });

  it("another grant id, or none, meets a live lease as held, even from the same owner string", async () => {
    const { s } = store();
    await s.acquireLease("c", "same-owner", 1_000, G1);
    expect(await s.acquireLease("c", "same-owner", 1_000, G2)).toMatchObject({ acquired: false, owner: "same-owner" });
    expect(await s.acquireLease("c", "same-owner", 1_000)).toMatchObject({ acquired: false, owner: "same-owner" });
  });

  it("a late copy after the holder released is refused and takes nothing", async () => {
    const { s } = store();
    await s.acquireLease("c", "w", 1_000, G1);
    await s.releaseLease("c", 1);
    expect(await refusal(() => s.acquireLease("c", "w", 1_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 1 });
    // Nothing changed: the next grant is fence 2, the lease was free.
    expect(await s.acquireLease("c", "other", 1_000, G2)).toMatchObject({ acquired: true, fence: 2 });
  });

  it("a late copy after the lease expired (nobody took it) is refused: that grant is over", async () => {
    const { s, advance } = store();
    await s.acquireLease("c", "w", 1_000, G1);
    advance(1_000);
    expect(await refusal(() => s.acquireLease("c", "w", 1_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 1 });
    expect(await s.acquireLease("c", "other", 1_000)).toMatchObject({ acquired: true, fence: 2 });
  });

  it("a late copy after another holder took the expired lease is refused and changes nothing", async () => {
    const { s, advance } = store();
    await s.acquireLease("c", "w", 1_000, G1);
    advance(1_000);
    const taken = await s.acquireLease("c", "w", 1_000, G2);
    expect(taken).toMatchObject({ acquired: true, fence: 2 });
    // An earlier grant's copy is refused outright (it used to meet the lease as an ordinary acquire).
    const before = await s.acquireLease("c", "w", 5_000, G2);
    expect(await refusal(() => s.acquireLease("c", "w", 5_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 1 });
    expect(before).toMatchObject({ acquired: true, fence: 2 });
    await expect(s.renewLease("c", 2, 1_000)).resolves.toBeDefined();
    await expect(s.renewLease("c", 1, 1_000)).rejects.toMatchObject({ code: "conversation_lease_lost" });
  });

  it("an old holder's grant id never yields the fence of a grant made without one", async () => {
    const { s, advance } = store();
    await s.acquireLease("c", "w", 1_000, G1);
    advance(1_000);
    expect(await s.acquireLease("c", "legacy", 1_000)).toMatchObject({ acquired: true, fence: 2 });
    expect(await refusal(() => s.acquireLease("c", "w", 1_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 1 });
    await expect(s.renewLease("c", 2, 1_000)).resolves.toBeDefined();
  });

  it("TURN-10: a late copy of an earlier grant landing on a free lease is refused and takes nothing (it used to hold the conversation for a whole lease)", async () => {
    const { s, advance } = store();
    await s.acquireLease("c", "a", 1_000, G1);
    await s.releaseLease("c", 1);
    await s.acquireLease("c", "b", 1_000, G2);
    await s.releaseLease("c", 2);
    expect(await refusal(() => s.acquireLease("c", "a", 60_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 1 });
    // Nobody holds it: the next acquire is served at once, with the next fence.
    expect(await s.acquireLease("c", "next", 1_000)).toMatchObject({ acquired: true, fence: 3 });
    advance(2_000);
    // Expired and not taken: still refused, and the expired lease stays fence 3's.
    expect(await refusal(() => s.acquireLease("c", "a", 60_000, G2))).toEqual({ code: "conversation_lease_lost", fence: 2 });
    await expect(s.renewLease("c", 3, 1_000)).resolves.toBeDefined();
  });

  it("TURN-10: an earlier grant id is kept LEASE_GRANT_RETENTION_MS past its supersession, then forgotten (an ordinary acquire), and the kept ids are pruned", async () => {
    const { s, advance } = store();
    await s.acquireLease("c", "a", 1_000, G1);
    await s.releaseLease("c", 1);
    await s.acquireLease("c", "b", 1_000, G2);
    await s.releaseLease("c", 2);
    advance(LEASE_GRANT_RETENTION_MS - 1);
    expect(await refusal(() => s.acquireLease("c", "a", 1_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 1 });
    advance(1);
    expect(await s.acquireLease("c", "a", 1_000, G1)).toMatchObject({ acquired: true, fence: 3 });
    // Every grant prunes what is past retention: a conversation keeps only the grants of the last retention.
    for (let i = 0; i < 50; i++) {
      advance(LEASE_GRANT_RETENTION_MS);
      await s.acquireLease("c", "a", 1_000, newLeaseGrantId());
    }
    expect(s.keptGrantIds("c")).toBeLessThanOrEqual(2);
  });

  it("a grant id is per conversation: reused on another conversation it is an ordinary acquire there", async () => {
    const { s } = store();
    await s.acquireLease("a", "w", 1_000, G1);
    await s.acquireLease("b", "x", 1_000, G2);
    expect(await s.acquireLease("b", "w", 1_000, G1)).toMatchObject({ acquired: false, owner: "x" });
    expect(await s.acquireLease("c", "w", 1_000, G1)).toMatchObject({ acquired: true, fence: 1 });
    await expect(s.renewLease("a", 1, 1_000)).resolves.toBeDefined();
  });

  it("releaseLeaseGrant gives back only the grant it names, live or expired, and is idempotent", async () => {
    const { s, advance } = store();
    await s.acquireLease("c", "w", 1_000, G1);
    await s.releaseLeaseGrant("c", G2);
    expect(await s.acquireLease("c", "x", 1_000)).toMatchObject({ acquired: false });
    await s.releaseLeaseGrant("c", G1);
    await s.releaseLeaseGrant("c", G1);
    // G2 was given back before any grant carried it: its acquire's copy is refused (fence 0: no grant was made).
    expect(await refusal(() => s.acquireLease("c", "x", 1_000, G2))).toEqual({ code: "conversation_lease_lost", fence: 0 });
    const next = await s.acquireLease("c", "x", 1_000, G3);
    expect(next).toMatchObject({ acquired: true, fence: 2 });
    // A release by an old grant id never gives back a later holder's lease.
    await s.releaseLeaseGrant("c", G1);
    expect(await s.acquireLease("c", "y", 1_000)).toMatchObject({ acquired: false, owner: "x" });
    // Expired, nobody took it: still that grant's to give back.
    advance(1_000);
    await s.releaseLeaseGrant("c", G3);
    expect(await refusal(() => s.acquireLease("c", "x", 1_000, G3))).toEqual({ code: "conversation_lease_lost", fence: 2 });
    await expect(s.renewLease("c", 2, 1_000)).rejects.toMatchObject({ code: "conversation_lease_lost" });
  });

  it("a grant id given back before any grant carried it is kept as given back for the grant retention, then forgotten at a later grant", async () => {
    const { s, advance } = store();
    // The runner gave up on G1 (its acquire held in the network); the give-back finds no grant.
    await s.releaseLeaseGrant("c", G1);
    expect(s.keptGrantIds("c")).toBe(1);
    // The copy lands on a free lease: refused, nothing taken.
    expect(await refusal(() => s.acquireLease("c", "w", 1_000, G1))).toEqual({ code: "conversation_lease_lost", fence: 0 });
    expect(await s.acquireLease("c", "x", 1_000)).toMatchObject({ acquired: true, fence: 1 });
    await s.releaseLease("c", 1);
    // A give-back of it again changes nothing; past the retention a later grant forgets it.
    await s.releaseLeaseGrant("c", G1);
    advance(LEASE_GRANT_RETENTION_MS);
    expect(await s.acquireLease("c", "x", 1_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    expect(s.keptGrantIds("c")).toBe(0);
  });

  it("refuses a malformed grant id before anything changes", async () => {
    const { s } = store();
    expect(await refusal(() => s.acquireLease("c", "w", 1_000, "nope" as string))).toEqual({ code: "invalid_store_input", field: "grantId" });
    expect(await refusal(() => s.releaseLeaseGrant("c", 7 as unknown as string))).toEqual({ code: "invalid_store_input", field: "grantId" });
    expect(await s.acquireLease("c", "w", 1_000)).toMatchObject({ acquired: true, fence: 1 });
  });
});
