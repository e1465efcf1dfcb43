import { describe, expect, it } from "vitest";
import { MemoryConversationStore, compareStoreIds, decodeFailedTurnsCursor, encodeFailedTurnsCursor, isAfterPosition, isDispatchOnceError } from "../src/index.js";

describe("TURN-17 MemoryConversationStore.listFailedTurns", () => {
  async function failNext(store: MemoryConversationStore, c: string, id: string): Promise<void> {
    await store.appendUserMessage(c, { id, content: `${c} ${id}` });
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn(c, lease.fence);
    await store.failMessage(c, lease.fence, id, { failed: id });
    await store.releaseLease(c, lease.fence);
  }

  it("lists failed messages oldest failure first, ties by conversation then message id; filters; pages; reopened ones leave", async () => {
    let clock = 5_000;
    const store = new MemoryConversationStore({ now: () => clock });
    await failNext(store, "conv-b", "m1");
    await failNext(store, "conv-a", "m1"); // same millisecond: conv-a sorts first
    clock = 6_000;
    await failNext(store, "conv-b", "m2");
    const all = await store.listFailedTurns();
    expect(all).toEqual({
      turns: [
        { conversationId: "conv-a", messageId: "m1", turnIndex: 0, failedAt: 5_000, firstFailedAt: 5_000, failure: { failed: "m1" }, reopenable: true },
        // conv-b's m2 was bound at m1's index after m1 failed: a re-send of m1 no longer reopens it.
        { conversationId: "conv-b", messageId: "m1", turnIndex: 0, failedAt: 5_000, firstFailedAt: 5_000, failure: { failed: "m1" }, reopenable: false },
        { conversationId: "conv-b", messageId: "m2", turnIndex: 0, failedAt: 6_000, firstFailedAt: 6_000, failure: { failed: "m2" }, reopenable: true },
      ],
    });
    clock = 6_500;
    expect((await store.listFailedTurns({ olderThanMs: 1_000 })).turns.map((t) => t.conversationId)).toEqual(["conv-a", "conv-b"]);
    expect((await store.listFailedTurns({ conversationId: "conv-b" })).turns.map((t) => t.messageId)).toEqual(["m1", "m2"]);
    const first = await store.listFailedTurns({ limit: 2 });
    expect(first.turns).toHaveLength(2);
    const second = await store.listFailedTurns({ limit: 2, cursor: first.cursor as string });
    expect(second).toEqual({ turns: [all.turns[2]] });
    expect((await store.appendUserMessage("conv-a", { id: "m1", content: "again" })).reopened).toBe(true);
    expect((await store.listFailedTurns()).turns.map((t) => `${t.conversationId}/${t.messageId}`)).toEqual(["conv-b/m1", "conv-b/m2"]);
  });

  it("TURN-17: with reopenWithinMs, reopenable is what a re-send with that window does (TURN-12, from the FIRST failure) and pastReopenWindow says why not", async () => {
    let clock = 10_000;
    const store = new MemoryConversationStore({ now: () => clock });
    await failNext(store, "conv-w", "m1");
    clock = 20_000;
    expect((await store.appendUserMessage("conv-w", { id: "m1", content: "again" })).reopened).toBe(true);
    const lease = await store.acquireLease("conv-w", "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-w", lease.fence);
    await store.failMessage("conv-w", lease.fence, "m1", { failed: "m1" });
    await store.releaseLease("conv-w", lease.fence);
    clock = 20_100;
    const judged = async (reopenWithinMs?: number) =>
      (await store.listFailedTurns({ conversationId: "conv-w", ...(reopenWithinMs === undefined ? {} : { reopenWithinMs }) })).turns.map((t) => [t.failedAt, t.firstFailedAt, t.reopenable, t.pastReopenWindow]);
    // First failure 10.1 s ago, last 0.1 s ago: a 5 s window is past (the runner refuses), a 20 s one is not.
    expect(await judged(5_000)).toEqual([[20_000, 10_000, false, true]]);
    expect(await judged(20_000)).toEqual([[20_000, 10_000, true, false]]);
    expect(await judged()).toEqual([[20_000, 10_000, true, undefined]]);
    // The listing agrees with the re-send it describes.
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: "again" }, { reopenWithinMs: 5_000 })).toMatchObject({ reopened: false, pastReopenWindow: true });
    // Another message bound since: not reopenable, and not for the window.
    await failNext(store, "conv-o", "a");
    await store.appendUserMessage("conv-o", { id: "b", content: "b" });
    const other = await store.acquireLease("conv-o", "worker", 600_000);
    if (!other.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-o", other.fence);
    expect((await store.listFailedTurns({ conversationId: "conv-o", reopenWithinMs: 0 })).turns.map((t) => [t.messageId, t.reopenable, t.pastReopenWindow])).toEqual([["a", false, false]]);
    for (const bad of [-1, Number.NaN, Infinity, "5000"]) {
      await expect(store.listFailedTurns({ reopenWithinMs: bad as number })).rejects.toSatisfy((e: unknown) => isDispatchOnceError(e, "invalid_store_input") && (e as Error).message.includes("reopenWithinMs"));
    }
  });

  // Code point order is UTF-8 byte order (SQLite's BINARY, PostgreSQL's "C"); UTF-16 code units
  // put U+E000..U+FFFF after astral characters, whose lead surrogates are U+D800..U+DBFF.
  const CODE_POINT_ORDER = ["a", "z", "\u00e9", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uff5e", "\uffff", "\u{10000}", "\u{1f600}", "\u{1f600}a", "\u{10ffff}"];

  it("TURN-17 compareStoreIds orders ids by code point (UTF-8 byte order), not by UTF-16 code unit", () => {
    const shuffled = [...CODE_POINT_ORDER].reverse();
    expect(shuffled.sort(compareStoreIds)).toEqual(CODE_POINT_ORDER);
    const bytes = (s: string) => Buffer.from(s, "utf8");
    for (const a of CODE_POINT_ORDER) {
      for (const b of CODE_POINT_ORDER) expect(Math.sign(compareStoreIds(a, b)), `${JSON.stringify(a)} against ${JSON.stringify(b)}`).toBe(Buffer.compare(bytes(a), bytes(b)));
    }
    // The case that tells the orders apart: U+FF5E before U+1F600 by code point, after it by code unit.
    expect("\uff5e" < "\u{1f600}").toBe(false);
    expect(compareStoreIds("\uff5e", "\u{1f600}")).toBeLessThan(0);
  });

  it("TURN-17 ties in failedAt are listed, and paged by cursor, in code point order of the message ids", async () => {
    const store = new MemoryConversationStore({ now: () => 5_000 });
    for (const id of [...CODE_POINT_ORDER].reverse()) await failNext(store, `conv-${CODE_POINT_ORDER.indexOf(id) % 2}`, id);
    const expected = [...CODE_POINT_ORDER.filter((_, i) => i % 2 === 0), ...CODE_POINT_ORDER.filter((_, i) => i % 2 === 1)];
    expect((await store.listFailedTurns()).turns.map((t) => t.messageId)).toEqual(expected);
    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.listFailedTurns({ limit: 1, ...(cursor === undefined ? {} : { cursor }) });
      paged.push(...page.turns.map((t) => t.messageId));
      cursor = page.cursor;
    } while (cursor !== undefined);
    expect(paged).toEqual(expected);
    expect(isAfterPosition({ failedAt: 1, conversationId: "c", messageId: "\u{1f600}" }, { failedAt: 1, conversationId: "c", messageId: "\uff5e" })).toBe(true);
  });

  it("TURN-17 reopenable says whether a re-send reopens the message now (TURN-12), not what its record said when it failed", async () => {
    const store = new MemoryConversationStore();
    const c = "conv-r";
    await store.appendUserMessage(c, { id: "a", content: "pay alice" });
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    const failed = await store.beginTurn(c, lease.fence);
    await store.failMessage(c, lease.fence, "a", { failed: "a", retryable: true });
    const listed = async () => (await store.listFailedTurns({ conversationId: c })).turns.map((t) => [t.messageId, t.turnIndex, t.reopenable, t.failure]);
    expect(await listed()).toEqual([["a", 0, true, { failed: "a", retryable: true }]]);
    // b binds at a's index (TURN-12): a is no longer the most recently bound message.
    await store.appendUserMessage(c, { id: "b", content: "something else" });
    const next = await store.beginTurn(c, lease.fence);
    expect([next?.message.id, next?.turnIndex]).toEqual(["b", failed?.turnIndex]);
    // Still listed (still failed), its stored record unchanged, but a re-send would not reopen it.
    expect(await listed()).toEqual([["a", 0, false, { failed: "a", retryable: true }]]);
    const resend = await store.appendUserMessage(c, { id: "a", content: "pay alice" });
    expect([resend.reopened, resend.message.state]).toEqual([false, "failed"]);
    expect(await listed()).toEqual([["a", 0, false, { failed: "a", retryable: true }]]);
    // b fails too: b is reopenable, a stays not.
    await store.failMessage(c, lease.fence, "b", { failed: "b" });
    expect((await store.listFailedTurns({ conversationId: c })).turns.map((t) => [t.messageId, t.reopenable])).toEqual([["a", false], ["b", true]]);
  });

  it("refuses a bad limit and a foreign cursor with invalid_store_input; the cursor round-trips any id", async () => {
    const store = new MemoryConversationStore();
    for (const query of [{ limit: 0 }, { limit: 1001 }, { olderThanMs: -1 }, { cursor: "x" }, { conversationId: "" }]) {
      const error = await store.listFailedTurns(query).then(() => undefined, (e: unknown) => e);
      expect(isDispatchOnceError(error, "invalid_store_input"), JSON.stringify(query)).toBe(true);
    }
    const position = { failedAt: 12, conversationId: "tenant:ü/1", messageId: "msg.with.dots" };
    expect(decodeFailedTurnsCursor(encodeFailedTurnsCursor(position))).toEqual(position);
  });
});
