import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { createOnceToolRunner, dispatchOnceOf, rerunMessagesOf, type OnceToolCall } from "@dispatch-once/anthropic";
import { MemoryLedger, ToolError } from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient } from "@dispatch-once/mock-payments";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { PAY_ZOE, SEED, cutCases, cutPoints, rechunkCases, responseFate, runAll, type ByteCase } from "./byte-cut-cases.js";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * The SDK's own tool runner through Dispatch-Once (createOnceToolRunner; toolRunner({ stream: true })
 * reads each reply with messages.stream()) behind the byte proxy: the paying reply cut around its
 * content_block_stop and message_stop, inside every multi-byte character and at seeded offsets,
 * by FIN and RST; and whole replies re-chunked. After a failed request the app runs the loop again
 * from rerunMessagesOf(runner) (ATR-1), until it finishes. See README "Byte-level cuts".
 */

const world = byteCutWorld("byte-cut-atr", (p) => p.baseURL);

type Message = Anthropic.Beta.Messages.BetaMessageParam;
type Block = { type: string; id?: string; input?: unknown; tool_use_id?: string; content?: unknown };
const blocksOf = (messages: readonly Message[]) => messages.flatMap((m) => (Array.isArray(m.content) ? (m.content as Block[]) : []));
const idsIn = (body: Buffer) => [...body.toString("utf8").matchAll(/"id":"((?:toolu|msg)_[^"]+)"/g)].map((m) => m[1]!);

/** The SDK runner's modes: the full history on each request, or message threads (create, then continue). */
type Mode = { thread?: false };
const FULL_HISTORY: Mode = { thread: false };
const THREADS: Mode = {};

async function runCase({ id: caseId, plan }: ByteCase, mode: Mode = FULL_HISTORY): Promise<string | undefined> {
  const account = `acct_${caseId}`;
  world.proxy.plan(caseId, ({ number }, body) => plan(number, body));
  const client = createPaymentsClient({ baseURL: world.payments.url, token: account });
  const sendPayment = betaZodTool({
    name: "send_payment",
    description: "Send a payment to a payee",
    inputSchema: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string().length(3), reference: z.string(), memo: z.string().optional() }),
    run: async (args, context) => {
      try {
        const payment = await client.createPayment(args, { idempotencyKey: dispatchOnceOf(context)!.idempotencyKey, ...(context?.signal ? { signal: context.signal } : {}) });
        return JSON.stringify({ paymentId: payment.body.id, status: "accepted" });
      } catch (error) {
        if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
        throw error;
      }
    },
  });
  const once = createOnceToolRunner({
    tools: [sendPayment],
    effects: { send_payment: "keyed_write" },
    ledger: new MemoryLedger(),
    identity: { send_payment: ["payee", "amount", "currency", "reference"] },
    dispatcher: { waitMs: 10_000, pollMs: 2 },
  });
  const anthropic = new Anthropic({ baseURL: world.proxy.baseURL, apiKey: "test-key", maxRetries: 0, defaultHeaders: { "x-byte-case": caseId } });
  let messages: Message[] = [{ role: "user", content: PROMPT }];
  const told: OnceToolCall[] = [];
  let finished: Message[] | undefined;
  for (let run = 1; run <= 4 && finished === undefined; run++) {
    const runner = once.toolRunner(anthropic, { model: "claude-test", max_tokens: 1024, stream: true, ...mode, messages }, { conversationId: caseId });
    try {
      await runner.runUntilDone();
      finished = runner.params.messages;
    } catch {
      messages = rerunMessagesOf(runner);
    }
    told.push(...once.callsOf(runner).values());
  }
  const requests = world.proxy.requests.filter((r) => r.caseId === caseId);
  const where = () => `requests ${requests.map((r) => `#${r.number} ${r.sent}/${r.body.length} ${r.end} (${responseFate(r, "message_stop")})`).join(", ")}`;
  try {
    expect(finished, "the loop never finished in 4 runs").toBeDefined();
    const made = world.payments.effects().filter((e) => e.account === account && e.kind === "payment_created");
    expect(made.map((e) => e.payload)).toEqual([PAY_ZOE]);
    const paidKey = made[0]!.idempotencyKey!;
    // The loop's messages hold one call with its one result, of a reply the client got whole.
    const blocks = blocksOf(finished!);
    const calls = blocks.filter((b) => b.type === "tool_use");
    const results = blocks.filter((b) => b.type === "tool_result");
    expect(calls.map((c) => c.input)).toEqual([PAY_ZOE]);
    expect(results.map((r) => r.tool_use_id)).toEqual([calls[0]!.id]);
    expect(JSON.parse(results[0]!.content as string)).toEqual({ paymentId: made[0]!.resourceId, status: "accepted" });
    const committing = requests.find((r) => idsIn(r.body).includes(calls[0]!.id!));
    expect(committing && responseFate(committing, "message_stop"), `the call ${calls[0]!.id} is of a reply cut before its message_stop`).not.toBe("cut");
    const text = JSON.stringify(finished);
    for (const cut of requests.filter((r) => responseFate(r, "message_stop") === "cut")) {
      for (const id of idsIn(cut.body)) expect(text, `the messages name ${id} of cut request #${cut.number}`).not.toContain(id);
    }
    // What the app was told of each call is true: a settled call paid under the key that paid; no "did not happen" for it.
    for (const call of told) {
      if (call.outcome !== undefined) expect(call.outcome.key, "a call settled under a key that never paid").toBe(paidKey);
      if (call.error?.key === paidKey) expect(call.error.effect, `${call.error.code} says the payment that happened did not`).not.toBe("no");
    }
    return undefined;
  } catch (error) {
    return `${(error as Error).message.split("\n")[0]}; ${where()}`;
  }
}

async function referenceBody(): Promise<Buffer> {
  expect(await runCase({ id: "reference", label: "whole", plan: () => undefined })).toBeUndefined();
  return world.proxy.requests.find((r) => r.caseId === "reference" && r.number === 1)!.body;
}

describe(`byte-level cuts of the SDK's tool runner, messages.stream() (seed ${SEED})`, () => {
  it("ATR-1 ATR-3 a cut on any byte of the message_stop, on the edges of the call's content_block_stop, or elsewhere, by FIN or RST: the loop run again pays once with the exact arguments and keeps nothing of the cut reply", async () => {
    const points = cutPoints(
      await referenceBody(),
      [
        // The SDK's runner reads a reply whole (finalMessage) before it runs a call: the finish matters most.
        { type: "content_block_stop", before: 0, head: 4, tail: 8 },
        { type: "message_delta", before: 0, head: 0, tail: 4 },
        { type: "message_stop", before: 0 },
      ],
      // Splits inside a character reach the same SDK parser as the ConversationRunner's cases.
      { sample: 4, seed: SEED, insideCharacters: false },
    );
    await runAll(cutCases("cut", points, { rstEvery: 6 }), runCase);
  });

  it("ATR-1 with message threads (the SDK's default mode: a new thread after a cut), a cut on the message_stop and the call's content_block_stop end, by FIN or RST: one payment, nothing of the cut reply kept", async () => {
    const points = cutPoints(
      await referenceBody(),
      [
        { type: "content_block_stop", before: 0, head: 0, tail: 6 },
        { type: "message_stop", before: 0 },
      ],
      { sample: 2, seed: SEED, insideCharacters: false },
    ).filter((_p, i) => i % 3 === 0);
    const cases = cutCases("threads", points, { rstEvery: 3 });
    await runAll(cases, (c) => runCase(c, THREADS));
    // The requests were of the mode: each carries its thread, and the loop continued threads.
    const threads = world.proxy.requests.filter((r) => cases.some((c) => c.id === r.caseId)).map((r) => (r.requestBody as { thread?: { type: string } }).thread?.type);
    expect(threads.every((t) => t !== undefined)).toBe(true);
    expect(threads).toContain("continue");
  });

  it("ATR-3 the whole paying reply re-chunked (seeded splits, LF and CRLF) finishes the loop in its first run with one payment", async () => {
    // 1 byte a write goes through the same SDK parser in the ConversationRunner's cases (about 1 s of CPU a case here).
    const cases = rechunkCases("chunks", SEED, 2).filter((c) => !c.label.startsWith("1 byte"));
    await runAll(cases, runCase);
    for (const c of cases) expect(world.proxy.requests.filter((r) => r.caseId === c.id).map((r) => r.number), c.label).toEqual([1, 2]);
  });
});
