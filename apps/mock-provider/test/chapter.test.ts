import type Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { scriptFromPlans, say, toolUse, turn } from "../src/index.js";
import { body, payment, setup } from "./helpers.js";

/*
 * The chapter's incident, reproduced with a naive handler (no ledger): dispatch at the per-call
 * completion event, retry the stream once on any stream-level error. The mock makes the window
 * deterministic: the stream is held after the call's content_block_stop and reset the moment the
 * payment was accepted. This is the behaviour Dispatch-Once exists to prevent.
 */
describe("the chapter's window, on the mock", () => {
  it("a reset after the payment was accepted makes a naive retry pay twice, under a new toolu_ id", async () => {
    const script = scriptFromPlans({
      "pay the March invoice": turn(say("Paying it now."), toolUse("send_payment", payment, { reword: ["memo"] })),
    });
    const { provider, client } = await setup({ script, timing: { beforeMessageStopMs: 240 } });
    provider.setFaultPlan((_request, info) => (info.attempt === 1 ? { kind: "hold", at: { afterToolUseStop: 0 } } : undefined));

    const payments: Array<{ toolUseId: string; input: unknown }> = [];
    const payDownstream = async (block: Anthropic.ToolUseBlock) => {
      payments.push({ toolUseId: block.id, input: block.input });
      // The payment was accepted: now the connection drops, before message_stop.
      if (payments.length === 1) {
        const held = await provider.waitForHold(1);
        provider.cutNow(held.requestNumber, "reset");
      }
    };

    const naiveTurn = async () => {
      const stream = client.messages.stream(body("pay the March invoice"));
      stream.on("contentBlock", (block) => {
        if (block.type === "tool_use") void payDownstream(block);
      });
      return stream.finalMessage();
    };

    let message: Anthropic.Message;
    try {
      message = await naiveTurn();
    } catch (error) {
      expect((error as Error).message).toBe("terminated");
      message = await naiveTurn(); // the retry re-sends the conversation as it stood: identical input
    }

    expect(message.stop_reason).toBe("tool_use");
    expect(payments).toHaveLength(2);
    const [first, second] = payments;
    expect(first!.toolUseId).not.toBe(second!.toolUseId);
    const { memo: memo1, ...rest1 } = first!.input as typeof payment;
    const { memo: memo2, ...rest2 } = second!.input as typeof payment;
    expect(rest2).toEqual(rest1);
    expect(memo1).toBe(payment.memo);
    expect(memo2).not.toBe(memo1); // re-worded: a key over all canonical arguments would not match
    expect(provider.requests.map((r) => [r.attempt, r.outcome])).toEqual([
      [1, "reset"],
      [2, "complete"],
    ]);
  });
});
