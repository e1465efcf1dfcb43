import { MemoryConversationStore, MemoryLedger, type ConversationStore, type ConversationStoreSupports } from "@dispatch-once/core";
import { expect, vi } from "vitest";
import { TurnFailedError, type FailedTurnRecord, type SendResult } from "../src/index.js";
import type { world } from "./toy.js";

/**
 * TURN-12: m2's send resumed m1's turn past the re-send window. m2 is answered, the payment was
 * made once, and m1 is failed by a record that ran nothing and says re-sending cannot help.
 * Returns m1's record for the caller's checks of its effects.
 */
export async function expectM2AnsweredM1PastWindow(store: ConversationStore, conversationId: string, m2: SendResult, performed: unknown[]): Promise<FailedTurnRecord> {
  expect(performed).toHaveLength(1);
  expect(m2.status).toBe("answered");
  expect(m2.turns.at(-1)?.text).toBe("You're welcome.");
  const m1 = await store.message(conversationId, "m1");
  expect(m1?.state).toBe("failed");
  const record = m1?.failure as unknown as FailedTurnRecord;
  expect(record.notRetried).toBe("past_resend_window");
  expect(record.retryable).toBe(false);
  expect(record.attempts).toBe(0);
  return record;
}

/**
 * TURN-12: m1 re-sent past the window resumes its turn: the send fails past_resend_window without
 * a model request, and the payment was made once. Returns the error for the caller's checks.
 */
export async function expectM1ResentPastWindow(worker: ReturnType<typeof world>, conversationId: string, performed: unknown[]): Promise<TurnFailedError> {
  const requests = worker.provider.requests.length;
  const resent = await worker.runner.send(conversationId, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
  expect(performed).toHaveLength(1);
  expect(worker.provider.requests.length).toBe(requests);
  expect(resent).toBeInstanceOf(TurnFailedError);
  expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
  return resent as TurnFailedError;
}

/**
 * A third-party store's view of the memory store: no `supports.reopenWindow`, so it never gets
 * `reopenWithinMs` and shows no `firstFailedAt`; `supports` says what it declares instead (it may
 * date the binding: `boundAt`).
 */
export function withoutReopenWindow(memory: MemoryConversationStore, supports: ConversationStoreSupports = { leaseGrants: true }): ConversationStore {
  return Object.assign(Object.create(memory) as MemoryConversationStore, {
    capabilities: { ...memory.capabilities, supports },
    message: async (conversationId: string, messageId: string) => {
      const m = await memory.message(conversationId, messageId);
      if (m === undefined) return undefined;
      const { firstFailedAt: _hidden, ...rest } = m;
      return rest;
    },
    beginTurn: async (conversationId: string, fence: number) => {
      const s = await memory.beginTurn(conversationId, fence);
      if (s === undefined) return undefined;
      const { firstFailedAt: _hidden, ...message } = s.message;
      return { ...s, message };
    },
  });
}

/**
 * The store and the ledger on one test clock: a number moved by hand, or, for a store without
 * `supports.reopenWindow` (`withoutWindow`: the runner then reads failed-turn records stamped on
 * the process clock, and its own clock at a re-send), the process clock with Date faked.
 */
export function clockedStores(options: { withoutWindow?: boolean; supports?: ConversationStoreSupports } = {}) {
  let now = 1_000_000;
  const clock = options.withoutWindow ? () => Date.now() : () => now;
  const memory = new MemoryConversationStore({ now: clock });
  return {
    store: options.withoutWindow ? withoutReopenWindow(memory, options.supports) : memory,
    ledger: new MemoryLedger({ now: clock }),
    advance: (ms: number) => {
      if (options.withoutWindow) vi.setSystemTime(Date.now() + ms);
      else now += ms;
    },
  };
}
