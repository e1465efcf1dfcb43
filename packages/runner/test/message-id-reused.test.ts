import { DispatchOnceError, MemoryConversationStore, MemoryLedger, effectOf, retryableOf, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { MessageIdReusedError, TurnFailedError } from "../src/index.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * Found by adoption trial 2: a service built from the OpenAI side's README answered
 * "pay acme 999", sent under the id of an answered "pay acme 100", with "Paid." and the 100
 * payment: the store resolves a known id to the message it holds (TURN-2) and keeps its first
 * content, so send() answered the stored message. A message id names one message (TURN-8); the
 * runner is the one place every front end goes through, so it refuses the other content before it
 * appends, reopens or drives anything (TURN-20).
 */

const CONV = "conv-reused";

/** The model pays with the memo the user's message names, then answers. */
const payForMessage = (cut: () => boolean) => (_n: number, input: unknown[]): (ToyEvent | "cut")[] => {
  const last = input.at(-1) as { role?: string; content?: unknown };
  if (last.role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
  const memo = String(typeof last.content === "string" ? last.content : JSON.stringify(last.content)).replace(/[^a-z0-9 ]/gi, "");
  return cut() ? [...payCall("c", memo), "cut"] : [...payCall("c", memo), { t: "end" }];
};

async function refusal(promise: Promise<unknown>): Promise<MessageIdReusedError> {
  const error = await promise.then(
    (result) => {
      throw new Error(`expected message_id_reused, got an answer: ${JSON.stringify(result)}`);
    },
    (e: unknown) => e,
  );
  expect(MessageIdReusedError.isInstance(error), String(error)).toBe(true);
  expect(DispatchOnceError.isInstance(error, "message_id_reused")).toBe(true);
  return error as MessageIdReusedError;
}

describe("a message id names one message: other content under a known id is refused (TURN-20)", () => {
  it("TURN-20 an answered message's id with other content: message_id_reused, no model request, no payment; the same content is still answered from the store", async () => {
    const store = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const w = world(payForMessage(() => false), false, { store, ledger, performed });
    const first = await w.runner.send(CONV, { id: "m1", content: "pay acme 100" });
    expect(first.status).toBe("answered");
    const requests = w.provider.requests.length;

    const error = await refusal(w.runner.send(CONV, { id: "m1", content: "pay acme 999" }));
    expect([error.conversationId, error.messageId]).toEqual([CONV, "m1"]);
    expect(error.message).toContain("m1");
    // Nothing ran for this send, and asking again under this id cannot help: a new message needs a new id.
    expect([effectOf(error), retryableOf(error)]).toEqual(["no", "no"]);
    expect(w.provider.requests).toHaveLength(requests);
    expect(performed).toEqual([{ to: "acme", memo: "pay acme 100" }]);

    const again = await w.runner.send(CONV, { id: "m1", content: "pay acme 100" });
    expect([again.status, again.fromStore]).toEqual(["answered", true]);
    expect(performed).toHaveLength(1);
  });

  it("TURN-20 a failed message's id with other content, within the re-send window: refused before the store reopens it; the message stays failed and nothing is retried", async () => {
    const store = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    let cutting = true;
    const w = world(payForMessage(() => cutting), true, { store, ledger, performed });
    const failed = await w.runner.send(CONV, { id: "m1", content: "pay acme 100" }).catch((e: unknown) => e);
    expect(TurnFailedError.isInstance(failed), String(failed)).toBe(true);
    expect(performed).toHaveLength(1);
    const requests = w.provider.requests.length;

    cutting = false;
    await refusal(w.runner.send(CONV, { id: "m1", content: "pay acme 999" }));
    expect((await store.message(CONV, "m1"))?.state).toBe("failed");
    expect(w.provider.requests).toHaveLength(requests);
    expect(performed).toEqual([{ to: "acme", memo: "pay acme 100" }]);

    // The same content reopens it, and its retry answers the payment from the ledger.
    const resent = await w.runner.send(CONV, { id: "m1", content: "pay acme 100" });
    expect(resent.status).toBe("answered");
    expect(performed).toHaveLength(1);
  });

  it("TURN-20 a message in progress under another holder, re-sent with other content: refused at once, never waited for or answered with the other's answer", async () => {
    const store = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    let release = () => {};
    const held = new Promise<void>((r) => (release = r));
    const holder = world(payForMessage(() => false), false, { store, ledger, performed, beforePay: () => held });
    const first = holder.runner.send(CONV, { id: "m1", content: "pay acme 100" });
    while ((await store.message(CONV, "m1"))?.state !== "in_progress") await new Promise((r) => setTimeout(r, 1));

    const other = world(payForMessage(() => false), false, { store, ledger, performed, runner: { busyWaitMs: 60_000 } });
    await refusal(other.runner.send(CONV, { id: "m1", content: "pay acme 999" }));
    expect(other.provider.requests).toHaveLength(0);

    release();
    expect((await first).status).toBe("answered");
    expect(performed).toEqual([{ to: "acme", memo: "pay acme 100" }]);
  });

  it("TURN-20 two first sends of one id with different content race: the store keeps one, that one is answered and paid once, the other is refused", async () => {
    const store: ConversationStore = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const a = world(payForMessage(() => false), false, { store, ledger, performed, runner: { busyWaitMs: 60_000 } });
    const b = world(payForMessage(() => false), false, { store, ledger, performed, runner: { busyWaitMs: 60_000 } });
    const settled = await Promise.allSettled([
      a.runner.send(CONV, { id: "m1", content: "pay acme 100" }),
      b.runner.send(CONV, { id: "m1", content: "pay acme 999" }),
    ]);
    const answered = settled.filter((s) => s.status === "fulfilled");
    const refused = settled.filter((s) => s.status === "rejected").map((s) => (s as PromiseRejectedResult).reason as unknown);
    expect(answered).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect(MessageIdReusedError.isInstance(refused[0]), String(refused[0])).toBe(true);
    const kept = (await store.message(CONV, "m1"))?.content as { content: string };
    expect(performed).toEqual([{ to: "acme", memo: kept.content }]);
  });

  it("TURN-20 the same content is the same message whatever the order of its members (stored JSON may come back reordered, as PostgreSQL's jsonb does)", async () => {
    const store = new MemoryConversationStore();
    const performed: unknown[] = [];
    const w = world(payForMessage(() => false), false, { store, ledger: new MemoryLedger(), performed });
    const content = (order: "ab" | "ba") => (order === "ab" ? { text: "pay acme", n: 1 } : { n: 1, text: "pay acme" }) as unknown as string;
    expect((await w.runner.send(CONV, { id: "m1", content: content("ab") })).status).toBe("answered");
    const again = await w.runner.send(CONV, { id: "m1", content: content("ba") });
    expect([again.status, again.fromStore]).toEqual(["answered", true]);
    await refusal(w.runner.send(CONV, { id: "m1", content: { text: "pay acme", n: 2 } as unknown as string }));
    expect(performed).toHaveLength(1);
  });
});
