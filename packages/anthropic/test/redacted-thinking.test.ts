import { REDACTED_THINKING_TRIGGER, scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { afterEach, describe, expect, it } from "vitest";
import { PAY_ACME, closeDownstreams, setup } from "./fixtures.js";

/*
 * STREAM-15 for `redacted_thinking`: reasoning the API's safety systems encrypted arrives as an
 * opaque `data` in one content_block_start (no deltas), and must come back byte for byte, from
 * the attempt that committed, or every later request of the conversation is refused. The mock
 * provider sends one when the user's message carries the API's test string, and checks its data.
 */

let provider: MockProvider | undefined;
afterEach(async () => {
  await provider?.close();
  provider = undefined;
  await closeDownstreams();
});

const PROMPT = `pay acme ${REDACTED_THINKING_TRIGGER}`;
const THINKING = { params: { thinking: { type: "enabled" as const, budget_tokens: 1024 } }, maxTokens: 2048 };
type Block = { type: string; thinking?: string; signature?: string; id?: string; data?: string };

describe("STREAM-15 redacted_thinking across a cut and a retry", () => {
  it("a cut after the payment ran: one payment, the committed turn keeps the committing attempt's redacted_thinking data byte for byte, and the conversation goes on", async () => {
    const mock = await startMockProvider({ script: scriptFromPlans({ [PROMPT]: turn(toolUse("send_payment", PAY_ACME)) }) });
    provider = mock;
    // The chapter's cut on the first attempt only: after the call's content_block_stop, before message_stop.
    mock.setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects, store } = await setup(mock, { guarded: true, runner: THINKING });
    const result = await runner.send("conv-redacted", { id: "m1", content: PROMPT });
    expect(result.status).toBe("answered");
    expect(effects()).toHaveLength(1);
    expect(result.turns[0]!.attempts).toBe(2);

    const log = (await store.log("conv-redacted")) as { role: string; content: Block[] | string }[];
    const assistant = log[1]!.content as Block[];
    expect(assistant.map((b) => b.type)).toEqual(["thinking", "redacted_thinking", "tool_use"]);
    // What each attempt's stream delivered at the redacted block's content_block_start.
    const dataOf = (r: (typeof mock.requests)[number]) =>
      r.events.map((e) => (e.data as { content_block?: Block }).content_block).find((b) => b?.type === "redacted_thinking")?.data;
    const [cut, committed] = mock.requests.filter((r) => r.toolUses.length > 0);
    expect(assistant[1]!.data).toBe(dataOf(committed!));
    expect(dataOf(cut!)).toBeDefined();
    expect(dataOf(cut!)).not.toBe(assistant[1]!.data);
    // The tool_result step carried it back whole (the provider checks the data) and was accepted.
    const sentBack = (mock.requests.at(-1)!.body as { messages: { content: Block[] | string }[] }).messages[1]!.content as Block[];
    expect(sentBack[1]).toEqual({ type: "redacted_thinking", data: assistant[1]!.data });
    expect(mock.requests.at(-1)!.status).toBe(200);
    expect(log).toHaveLength(4);
  });
});
