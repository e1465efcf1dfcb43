import { randomUUID } from "node:crypto";
import type { ConversationStore, JsonValue, LeaseResult, TurnCommit, TurnSnapshot } from "@dispatch-once/core";
import { ConformanceFailure, must, show } from "../failure.js";
import type { ConversationStoreFixture, ConversationStoreSubject } from "./types.js";

/** Long enough that no lease expires by itself during a check: expiry is always explicit (raw.expireLease). */
export const LEASE_MS = 10 * 60 * 1000;

/** A fresh conversation id (CONVERSATION_ID_PATTERN), so checks never meet each other's data. */
export function freshConversation(label = "c"): string {
  return `${label}-${randomUUID()}`;
}

export async function withConversationFixture<T>(
  subject: ConversationStoreSubject,
  fn: (fixture: ConversationStoreFixture) => Promise<T>,
): Promise<T> {
  const fixture = await subject.create();
  try {
    return await fn(fixture);
  } finally {
    await fixture.destroy();
  }
}

/**
 * Store instances to race from: several over one store when the subject shares one store
 * across instances (each is another process's view), else the one instance.
 */
export async function racers(subject: ConversationStoreSubject, fixture: ConversationStoreFixture, count: number): Promise<ConversationStore[]> {
  if (!subject.capabilities.sharedAcrossProcesses) return [fixture.store];
  const out = [fixture.store];
  while (out.length < count) out.push(await fixture.reopen());
  return out;
}

export function mustAcquire(result: LeaseResult, what: string): { fence: number; leaseExpiresAt: number } {
  if (!result.acquired) {
    throw new ConformanceFailure(`${what}: expected the lease to be acquired, but it is held by ${show(result.owner)} until ${result.leaseExpiresAt}`);
  }
  must(Number.isSafeInteger(result.fence) && result.fence > 0, `${what}: fence must be a positive safe integer, got ${show(result.fence)}`);
  must(Number.isFinite(result.leaseExpiresAt), `${what}: leaseExpiresAt must be a number, got ${show(result.leaseExpiresAt)}`);
  return result;
}

export async function acquire(store: ConversationStore, conversationId: string, owner: string, what = `acquire by ${owner}`): Promise<number> {
  return mustAcquire(await store.acquireLease(conversationId, owner, LEASE_MS), what).fence;
}

export async function mustBegin(store: ConversationStore, conversationId: string, fence: number, what: string): Promise<TurnSnapshot> {
  const snapshot = await store.beginTurn(conversationId, fence);
  if (snapshot === undefined) throw new ConformanceFailure(`${what}: beginTurn found no message to answer`);
  return snapshot;
}

/** The commit of the snapshot's turn with the given payload. */
export function commitFor(snapshot: TurnSnapshot, fence: number, over: Partial<TurnCommit> = {}): TurnCommit {
  return {
    fence,
    messageId: snapshot.message.id,
    turnIndex: snapshot.turnIndex,
    assistant: assistantText(`answer to ${snapshot.message.id} at ${snapshot.turnIndex}`),
    stopReason: "end_turn",
    answers: true,
    ...over,
  };
}

export function userText(text: string): JsonValue {
  return { role: "user", content: [{ type: "text", text }] };
}

export function assistantText(text: string): JsonValue {
  return { role: "assistant", content: [{ type: "text", text }] };
}

export function toolUse(id: string, input: JsonValue): JsonValue {
  return { role: "assistant", content: [{ type: "tool_use", id, name: "send_payment", input }] };
}

export function toolResult(id: string, content: string): JsonValue {
  return { role: "user", content: [{ type: "tool_result", tool_use_id: id, content }] };
}

/** True when `needle` occurs anywhere inside `haystack` (deep, structural). */
export function containsValue(haystack: unknown, needle: unknown, equal: (a: unknown, b: unknown) => boolean): boolean {
  if (equal(haystack, needle)) return true;
  if (Array.isArray(haystack)) return haystack.some((v) => containsValue(v, needle, equal));
  if (typeof haystack === "object" && haystack !== null) {
    return Object.values(haystack).some((v) => containsValue(v, needle, equal));
  }
  return false;
}

/** Content a careless store changes: non-ASCII, 2/3/4-byte UTF-8, escapes, number spellings, deep nesting, size. */
export const TRICKY_CONTENT: ReadonlyArray<{ label: string; value: JsonValue }> = [
  { label: "a user message with non-ASCII text", value: userText("Zahle 12,50 € an Zoë – 東京 – Ωμέγα – naïve café") },
  { label: "3-byte UTF-8 characters", value: { s: "€ 東京 \u2028 \u2029 \ufffd \u200b\u200d\ufeff ｈｅｌｌｏ" } },
  { label: "astral (4-byte UTF-8) characters", value: { emoji: "😀🧪🏳️‍🌈", math: "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", key: { "🔑": "𝄞" } } },
  { label: "combining marks, not normalised", value: ["e\u0301", "\u00e9", "A\u030a", "\u00c5"] },
  { label: "control characters and escapes", value: "\u0000\u0001\u001f\u007f \"quoted\" \\back\\slash /solidus\b\f\n\r\t" },
  {
    label: "numbers",
    value: [0, -1, 1.5, 0.1, 1e21, 1e-7, 5e-324, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2, -1.7976931348623157e308, 123456789.125],
  },
  { label: "scalars and empty containers", value: [null, true, false, "", [], {}, [[]], { "": {} }] },
  {
    label: "a tool-use turn",
    value: {
      role: "assistant",
      content: [
        { type: "text", text: "Ich überweise 12,50 € an Zoë." },
        { type: "tool_use", id: "toolu_01A", name: "send_payment", input: { amount: 1250, currency: "EUR", to: "acct_zoë", memo: null } },
      ],
    },
  },
  { label: "nested JSON 200 levels deep", value: nest(200) },
  { label: "member names with unicode and odd characters", value: { "ünïcödé": 1, "a.b": 2, "a b": 3, "\u0000": 4, "ключ": [5] } },
  { label: "a 64 KiB string", value: "x€😀".repeat(64 * 1024 / 8) },
  { label: "a JSON string holding JSON text", value: JSON.stringify({ inner: "text", n: [1, 2] }) },
];

/**
 * Content a store's own decoding can re-spell while keeping it valid JSON (TURN-7), beside
 * TRICKY_CONTENT and kept out of the model's payloads (whose random sequences a seed replays):
 * strings a date reviver turns into a Date and back (`…T23:00:00Z` comes back `….000Z`), strings
 * that look like numbers or literals, and members named `__proto__`, `constructor` and
 * `prototype`, which a deep copy by member assignment (`out[k] = v`) turns into a prototype and
 * loses. A model can be made to emit any of them in a tool's arguments.
 */
export const LOOKALIKE_CONTENT: ReadonlyArray<{ label: string; value: JsonValue }> = [
  {
    label: "strings that look like timestamps, numbers and literals",
    value: { at: "2026-12-04T23:00:00Z", offset: "2026-12-04T23:00:00+01:00", fraction: "2026-12-04T23:00:00.5Z", day: "2026-12-04", zero: "007", exp: "1e3", yes: "true", none: "null" },
  },
  {
    label: "members named __proto__, constructor and prototype",
    value: JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{"x":1}},"toString":"not a function","nested":[{"__proto__":[]}]}') as JsonValue,
  },
];

function nest(depth: number): JsonValue {
  let value: JsonValue = { leaf: "Blatt 🍃" };
  for (let i = 0; i < depth; i++) value = i % 2 === 0 ? [value] : { level: i, child: value };
  return value;
}
