import { MemoryConversationStore, StoreUnavailableError, isDispatchOnceError, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { world } from "./toy.js";

/**
 * TURN-10: an acquireLease whose reply is lost (the store applied the grant, the runner heard
 * store_unavailable) or that never applied: the runner cannot tell which. It sends the acquire
 * again with the same grant id, so the store answers a landed grant with that grant, and the send
 * is served at once instead of waiting out the lease. The attacker's moves: late copies of the
 * acquire landing after a release, after another holder took the lease, after expiry; two
 * runners with one owner string.
 */

const textOnly = (): ReturnType<Parameters<typeof world>[0]> => [{ t: "text", index: 0, text: "Hello." }, { t: "end" }];
const CONV = "conv-lost-acquire";
const lost = () => new StoreUnavailableError("acquireLease: the connection was lost after COMMIT was sent; whether it applied is unknown");

type Acquire = ConversationStore["acquireLease"];
interface Sent {
  args: Parameters<Acquire>;
}

/**
 * The store as one runner reaches it: `plan` says, per acquire sent, whether it applies and loses its
 * reply ("lost"), never applies ("dropped"), is held to be applied later ("held"), or goes through.
 */
function flaky(store: ConversationStore, plan: Array<"lost" | "dropped" | "held" | "ok">) {
  const sent: Sent[] = [];
  const held: Array<() => Promise<unknown>> = [];
  const releasedByGrant: string[] = [];
  const view = Object.assign(Object.create(store) as ConversationStore, {
    capabilities: store.capabilities,
    acquireLease: async (...args: Parameters<Acquire>) => {
      sent.push({ args });
      const step = plan.shift() ?? "ok";
      if (step === "ok") return store.acquireLease(...args);
      if (step === "lost") await store.acquireLease(...args);
      if (step === "held") held.push(() => store.acquireLease(...args));
      throw lost();
    },
    releaseLeaseGrant: async (conversationId: string, grantId: string) => {
      releasedByGrant.push(grantId);
      return store.releaseLeaseGrant!(conversationId, grantId);
    },
  });
  return { view, sent, held, releasedByGrant };
}

async function answeredAtOnce(store: ConversationStore, id: string, content = `say ${id}`): Promise<void> {
  const { runner } = world(textOnly, false, { store, runner: { busyWaitMs: 0, owner: "other-worker" } });
  await expect(runner.send(CONV, { id, content })).resolves.toMatchObject({ status: "answered" });
}

describe("TURN-10 an acquire whose reply was lost", () => {
  it("applied, reply lost: the re-send with the same grant id is the same grant; the send is served at once", async () => {
    const store = new MemoryConversationStore();
    const { view, sent } = flaky(store, ["lost", "lost"]);
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0 } });
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).resolves.toMatchObject({ status: "answered" });
    expect(sent).toHaveLength(3);
    const grantIds = new Set(sent.map((s) => s.args[3]));
    expect(grantIds.size).toBe(1);
    expect([...grantIds][0]).toMatch(/^[A-Za-z0-9_-]{16,64}$/);
    // One grant, not three: the lease was taken once (fence 1) and given back.
    await answeredAtOnce(store, "m2");
    expect((await store.acquireLease(CONV, "probe", 1_000)) as { fence?: number }).toMatchObject({ acquired: true, fence: 3 });
  });

  it("never applied: the re-send is an ordinary grant; served at once", async () => {
    const store = new MemoryConversationStore();
    const { view, sent } = flaky(store, ["dropped"]);
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0 } });
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).resolves.toMatchObject({ status: "answered" });
    expect(sent).toHaveLength(2);
    await answeredAtOnce(store, "m2");
  });

  it("each acquisition mints its own grant id; two runners with one owner string never share a grant", async () => {
    const store = new MemoryConversationStore();
    const a = flaky(store, []);
    const b = flaky(store, []);
    const ra = world(textOnly, false, { store: a.view, runner: { owner: "shared-owner" } }).runner;
    const rb = world(textOnly, false, { store: b.view, runner: { owner: "shared-owner", busyWaitMs: 0 } }).runner;
    await ra.send(CONV, { id: "m1", content: "hi" });
    // a holds the lease (taken by hand with a's last grant id would be the same grant; b's is not).
    const lease = await store.acquireLease(CONV, "shared-owner", 60_000, "a-holds-it-0123456789");
    expect(lease.acquired).toBe(true);
    await expect(rb.send(CONV, { id: "m2", content: "hi" })).rejects.toMatchObject({ code: "conversation_busy" });
    expect(b.sent.map((s) => s.args[3])).not.toContain("a-holds-it-0123456789");
    expect(new Set([...a.sent, ...b.sent].map((s) => s.args[3])).size).toBe(a.sent.length + b.sent.length);
  });

  it("a late copy of the acquire landing after the runner released takes nothing: the next message is served at once", async () => {
    const store = new MemoryConversationStore();
    // The first copy is held in the network; the re-send goes through.
    const { view, held } = flaky(store, ["held"]);
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0 } });
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).resolves.toMatchObject({ status: "answered" });
    expect(held).toHaveLength(1);
    const late = await held[0]!().catch((e: unknown) => e);
    expect(isDispatchOnceError(late, "conversation_lease_lost")).toBe(true);
    await answeredAtOnce(store, "m2");
  });

  it("a late copy landing while another holder has the lease is refused and changes nothing", async () => {
    let now = 1_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const { view, held } = flaky(store, ["held"]);
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0 } });
    await runner.send(CONV, { id: "m1", content: "hi" });
    const other = await store.acquireLease(CONV, "other", 60_000, "other-grant-0123456789");
    expect(other).toMatchObject({ acquired: true, fence: 2 });
    // An earlier grant's copy: refused outright (it used to meet the lease as held).
    expect(await held[0]!().catch((e: unknown) => e)).toMatchObject({ code: "conversation_lease_lost", fence: 1 });
    expect(await store.acquireLease(CONV, "probe", 1_000)).toMatchObject({ acquired: false, owner: "other" });
    now += 1;
    await expect(store.renewLease(CONV, 2, 60_000)).resolves.toBeDefined();
  });

  it("when the store stays unreachable, the runner gives the grant back by its grant id and says store_unavailable; the landed grant does not hold the conversation", async () => {
    // The store's clock stands still: on a loaded host a pause between two copies longer than the
    // 200 ms lease let the grant expire in the store, and the next copy's conversation_lease_lost
    // (a grant that is over) sent the runner down the fresh-grant path instead (CI, 2026-12-05).
    const store = new MemoryConversationStore({ now: () => 1_000_000 });
    // Every acquire applies (the first grants, the copies are the same grant) and loses its reply.
    const { view, sent, releasedByGrant } = flaky(store, Array.from({ length: 1_000 }, () => "lost" as const));
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0, turnLeaseMs: 200 } });
    const error = await runner.send(CONV, { id: "m1", content: "hi" }).catch((e: unknown) => e);
    expect(isDispatchOnceError(error, "store_unavailable")).toBe(true);
    expect(sent.length).toBeGreaterThan(1);
    expect(releasedByGrant).toEqual([sent[0]!.args[3]]);
    // The lease is free at once, not after 200 ms: m1 and m2 are answered by another worker now.
    await answeredAtOnce(store, "m1", "hi");
  });

  it("TURN-10: a late copy of an earlier grant's acquire, landing after a later grant was made and released, takes nothing: the next message is served at once", async () => {
    const store = new MemoryConversationStore();
    // Runner A's first acquire is held in the network; its re-send takes grant g1 and A answers m1.
    const a = flaky(store, ["held"]);
    await expect(world(textOnly, false, { store: a.view, runner: { busyWaitMs: 0 } }).runner.send(CONV, { id: "m1", content: "hi" })).resolves.toMatchObject({ status: "answered" });
    // Another worker answers m2 under a later grant (g2) and releases it: g1 is an earlier grant now.
    await answeredAtOnce(store, "m2");
    // g1's copy lands on the free lease. Before, it took the lease and held it for a whole lease
    // with nobody working under it: m3 was conversation_busy.
    const late = await a.held[0]!().catch((e: unknown) => e);
    expect(late).toMatchObject({ code: "conversation_lease_lost", fence: 1 });
    await answeredAtOnce(store, "m3");
  });

  it("TURN-10: a copy of an acquire the store never applied, landing after its runner gave the grant back, takes nothing: the next message is served at once", async () => {
    const store = new MemoryConversationStore();
    // Every acquire is held in the network (none applies while the runner waits), so the runner
    // gives up: its give-back finds no grant with that id. Then the first copy lands on a free lease.
    const a = flaky(store, Array.from({ length: 1_000 }, () => "held" as const));
    const error = await world(textOnly, false, { store: a.view, runner: { busyWaitMs: 0, turnLeaseMs: 200 } }).runner.send(CONV, { id: "m1", content: "hi" }).catch((e: unknown) => e);
    expect(isDispatchOnceError(error, "store_unavailable")).toBe(true);
    expect(a.releasedByGrant).toEqual([a.sent[0]!.args[3]]);
    // Before, the copy was a fresh acquire: it took the free lease and held it for a whole lease
    // with nobody working under it, and m1's re-send was conversation_busy.
    const late = await a.held[0]!().catch((e: unknown) => e);
    expect(late).toMatchObject({ code: "conversation_lease_lost" });
    await answeredAtOnce(store, "m1", "hi");
  });

  it("TURN-10: a copy of an acquire the store never applied, whose re-send found the lease held, takes nothing when it lands after the holder released: the runner gave that grant id back", async () => {
    const store = new MemoryConversationStore();
    const holder = await store.acquireLease(CONV, "other-worker", 60_000);
    if (!holder.acquired) throw new Error("not acquired");
    // Runner A's first acquire is held in the network; its re-send (same grant id) finds the lease held.
    const a = flaky(store, ["held"]);
    const busy = await world(textOnly, false, { store: a.view, runner: { busyWaitMs: 0 } }).runner.send(CONV, { id: "m1", content: "hi" }).catch((e: unknown) => e);
    expect(isDispatchOnceError(busy, "conversation_busy")).toBe(true);
    expect(a.releasedByGrant).toEqual([a.sent[0]!.args[3]]);
    await store.releaseLease(CONV, holder.fence);
    // Before, the copy was a fresh acquire: it took the free lease for nobody, and m1 waited it out.
    const late = await a.held[0]!().catch((e: unknown) => e);
    expect(late).toMatchObject({ code: "conversation_lease_lost", fence: 0 });
    await answeredAtOnce(store, "m1", "hi");
  });

  it("TURN-10: a give-back that failed (store still unreachable) is sent again by the runner's next acquisition of that conversation, by its grant id, before it waits on the lease", async () => {
    // The store's clock stands still: the landed grant's lease never runs out by itself here.
    const store = new MemoryConversationStore({ now: () => 1_000_000 });
    let reachable = false;
    const releasedByGrant: string[] = [];
    const sent: string[] = [];
    const view = Object.assign(Object.create(store) as ConversationStore, {
      capabilities: store.capabilities,
      acquireLease: async (...args: Parameters<Acquire>) => {
        sent.push(args[3]!);
        const result = await store.acquireLease(...args);
        // Applied, reply lost, while the store is unreachable.
        if (!reachable) throw lost();
        return result;
      },
      releaseLeaseGrant: async (conversationId: string, grantId: string) => {
        releasedByGrant.push(grantId);
        if (!reachable) throw new StoreUnavailableError("releaseLeaseGrant: the store is unreachable");
        return store.releaseLeaseGrant!(conversationId, grantId);
      },
    });
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0, turnLeaseMs: 200 } });
    const error = await runner.send(CONV, { id: "m1", content: "hi" }).catch((e: unknown) => e);
    expect(isDispatchOnceError(error, "store_unavailable")).toBe(true);
    const owed = sent[0]!;
    expect(new Set(releasedByGrant)).toEqual(new Set([owed]));
    // The landed grant holds the conversation until its lease expires: another worker cannot have it.
    await expect(world(textOnly, false, { store, runner: { busyWaitMs: 0, owner: "other-worker" } }).runner.send(CONV, { id: "m1", content: "hi" })).rejects.toMatchObject({ code: "conversation_busy" });
    // The store is back. The user's re-send reaches the same runner: it gives back what it owes first, then is served at once.
    reachable = true;
    releasedByGrant.length = 0;
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).resolves.toMatchObject({ status: "answered" });
    expect(releasedByGrant).toEqual([owed]);
    // Given back once: the next send owes nothing.
    releasedByGrant.length = 0;
    await expect(runner.send(CONV, { id: "m2", content: "hi" })).resolves.toMatchObject({ status: "answered" });
    expect(releasedByGrant).toEqual([]);
  });

  it("TURN-10: an owed give-back never releases a grant someone works under: after the owed grant expired and another worker took the lease, it changes nothing", async () => {
    let now = 1_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    let reachable = false;
    const view = Object.assign(Object.create(store) as ConversationStore, {
      capabilities: store.capabilities,
      acquireLease: async (...args: Parameters<Acquire>) => {
        const result = await store.acquireLease(...args);
        if (!reachable) throw lost();
        return result;
      },
      releaseLeaseGrant: async (conversationId: string, grantId: string) => {
        if (!reachable) throw new StoreUnavailableError("releaseLeaseGrant: the store is unreachable");
        return store.releaseLeaseGrant!(conversationId, grantId);
      },
    });
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0, turnLeaseMs: 200 } });
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).rejects.toMatchObject({ code: "store_unavailable" });
    now += 1_000;
    const other = await store.acquireLease(CONV, "other", 60_000, "other-grant-0123456789");
    expect(other).toMatchObject({ acquired: true, fence: 2 });
    reachable = true;
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).rejects.toMatchObject({ code: "conversation_busy" });
    await expect(store.renewLease(CONV, 2, 60_000)).resolves.toBeDefined();
    expect(await store.acquireLease(CONV, "probe", 1_000)).toMatchObject({ acquired: false, owner: "other" });
  });

  it("a store that does not declare supports.leaseGrants is acquired as before: no grant id, no re-send", async () => {
    const memory = new MemoryConversationStore();
    const legacy = Object.assign(Object.create(memory) as ConversationStore, {
      capabilities: { ...memory.capabilities, supports: {} },
    });
    const { view, sent } = flaky(legacy, ["lost"]);
    delete (view as { releaseLeaseGrant?: unknown }).releaseLeaseGrant;
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0 } });
    const error = await runner.send(CONV, { id: "m1", content: "hi" }).catch((e: unknown) => e);
    expect(isDispatchOnceError(error, "store_unavailable")).toBe(true);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.args).toHaveLength(3);
    // Today's behaviour, kept: the lost grant holds the conversation until it expires.
    await expect(world(textOnly, false, { store: memory, runner: { busyWaitMs: 0 } }).runner.send(CONV, { id: "m1", content: "hi" })).rejects.toMatchObject({
      code: "conversation_busy",
    });
  });

  it("invalid input from the store is not re-sent", async () => {
    const store = new MemoryConversationStore();
    let calls = 0;
    const view = Object.assign(Object.create(store) as ConversationStore, {
      capabilities: store.capabilities,
      acquireLease: async (...args: Parameters<Acquire>) => {
        calls++;
        return store.acquireLease(args[0], args[1], args[2], "bad grant id" as JsonValue as string);
      },
    });
    const { runner } = world(textOnly, false, { store: view, runner: { busyWaitMs: 0 } });
    await expect(runner.send(CONV, { id: "m1", content: "hi" })).rejects.toMatchObject({ code: "invalid_store_input", field: "grantId" });
    expect(calls).toBe(1);
  });
});
