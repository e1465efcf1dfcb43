import { describe, expect, it } from "vitest";
import type { Fault } from "@dispatch-once/mock-openai";
import { providerPerTest, setup } from "./fixtures.js";

/*
 * A reasoning model's response: a reasoning item (summary streamed, fresh `rs_` id and
 * `encrypted_content` per response) before the function call. A cut inside it, or after the
 * call, must leave nothing of the cut attempt in the retry's input: the retry is the first
 * request again, its call is answered from the ledger, and the committed turn holds the
 * response the stream completed.
 */
const provider = providerPerTest();

function cutFirstAttempt(fault: Fault) {
  provider().setFaultPlan((request, info) => {
    const last = Array.isArray(request.input) ? (request.input.at(-1) as { role?: string }) : undefined;
    return info.attempt === 1 && last?.role === "user" ? fault : undefined;
  });
}

/*
 * Stateless (`store: false`, the encrypted content included), the API keeps nothing between the
 * requests, and the mock refuses as it does a follow-up whose reasoning item is not followed by an
 * item of its response named by its id: the committed call keeps its `fc_` item id beside its reasoning.
 */
const MODES = [
  ["stored", undefined],
  ["stateless", { store: false, include: ["reasoning.encrypted_content"] }],
] as const;

describe.each(MODES)("ConversationRunner: a reasoning item before the call, under a cut (%s)", (_mode, params) => {
  for (const [where, fault] of [
    ["inside the reasoning summary", { kind: "reset", at: { event: 4 } }],
    ["after the call, before response.completed", { kind: "reset", at: { beforeCompleted: true } }],
  ] as const) {
    it(`STREAM-5: a cut ${where} is retried with the first request's input; one payment`, async () => {
      cutFirstAttempt(fault as Fault);
      const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 20, ...(params === undefined ? {} : { runner: { params: params as never } }) });
      const result = await runner.send("conv-reasoning", { id: "m1", content: "pay acme, thinking" });
      expect(result.status).toBe("answered");
      expect(effects()).toHaveLength(1);
      const [first, retry, followUp] = provider().requests;
      expect(first!.faultFired).toBe(true);
      // The cut attempt's events really were reasoning events (the cut inside it) or all of them.
      expect(first!.events.some((e) => e.type.startsWith("response.reasoning_summary"))).toBe(true);
      // The retry is the first request again: nothing of the cut attempt (its reasoning item) came along.
      expect(retry!.bodyHash).toBe(first!.bodyHash);
      expect(retry!.attempt).toBe(2);
      // The follow-up carries the committed log and nothing the stream did not complete.
      const log = (await store.log("conv-reasoning")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Record<string, unknown>[];
      // The follow-up carries the whole committed log but the answer it was answered with.
      expect((followUp!.body as { input: unknown[] }).input).toEqual(log.slice(0, -1));
      expect(log.filter((i) => i.type === "function_call")).toHaveLength(1);
      // STREAM-15: the committed turn keeps the committing response's reasoning item as it was
      // done (its id, summary and encrypted content), in its place before the call; never the cut one's.
      const doneReasoning = (r: typeof retry) =>
        r!.events.filter((e) => e.type === "response.output_item.done" && (e.data as { item: { type: string } }).item.type === "reasoning").map((e) => (e.data as { item: unknown }).item);
      expect(log.map((i) => i.role ?? i.type)).toEqual(["user", "reasoning", "function_call", "function_call_output", "assistant"]);
      expect(log[1]).toEqual(doneReasoning(retry)[0]);
      // Beside it the call keeps its item id (`fc_…`), as delivered: the API pairs a reasoning item
      // with the item after it by that id and refuses a reasoning item it cannot pair.
      expect(log[2]).toMatchObject({ type: "function_call", id: retry!.calls[0]!.id, call_id: retry!.calls[0]!.callId });
      expect(doneReasoning(first)).not.toContainEqual(log[1]);
      expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: effects()[0]!.paymentId, status: "accepted" } })]);
    });
  }
});
